//! The GPU grant check (§18.2, GPU-1..4), table-driven over fake `nvidia-smi` executables put
//! first on the probe's PATH: UUID and MIG masks, short grants, P2P matrices with NS/CNS
//! cells, a missing binary, a binary that hangs, a binary that fails, and injected grant JSON.
//! The probe is the worker's own (NVML first, `nvidia-smi` second); NVML is the real library
//! opened from a path where it is not (the case on a machine without a driver), or a
//! recorded enumeration of the same host the fake `nvidia-smi` prints, which both probes
//! must read alike.
//!
//! Every case runs in one test function, sequentially: writing an executable while another
//! test thread forks is the classic "text file busy" race.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use videoflow_core::errors::ErrorCode;
use videoflow_core::model::GpuFallback;
use videoflow_core::scaling::Observation;
use videoflow_worker::config::{DeviceConfig, DeviceType};
use videoflow_worker::gpu::nvml::{
    self, Card, DeviceSample, Inventory, MigInstance, NvmlLibrary, NvmlSource, P2pCell, Recorded,
};
use videoflow_worker::gpu::{
    self, DeliveredGrant, GpuProbe, GrantSource, HostProbe, Masks, NvidiaSmi,
};

/// NVML opened from a path where there is none: the real library code, deterministically
/// absent even on a machine with a driver.
fn absent_nvml() -> NvmlLibrary {
    NvmlLibrary::at("/nonexistent/videoflow-test/libnvidia-ml.so.1")
}

/// The host of [`QUERY`]/[`LIST`] as NVML reports it.
fn recorded_inventory(p2p: &str) -> Inventory {
    let card = |index: u32, uuid: &str| Card {
        index,
        uuid: uuid.to_owned(),
        name: "NVIDIA H200".to_owned(),
        memory_total_bytes: Some(143_771 * 1024 * 1024 + 4096),
        memory_used_bytes: Some(0),
        compute_mode: Some("default".to_owned()),
        ..Card::default()
    };
    let mig = |uuid: &str| MigInstance {
        uuid: uuid.to_owned(),
        name: "NVIDIA H200 MIG 1g.18gb".to_owned(),
        memory_total_bytes: Some(18 * 1024 * 1024 * 1024),
        memory_used_bytes: Some(0),
    };
    Inventory {
        driver_version: "570.00".to_owned(),
        cards: vec![
            card(0, "GPU-aaaa1111"),
            Card {
                mig_enabled: true,
                mig: vec![mig("MIG-cccc3333"), mig("MIG-dddd4444")],
                compute_mode: Some("exclusive_process".to_owned()),
                ..card(1, "GPU-bbbb2222")
            },
        ],
        p2p: vec![
            P2pCell {
                from: 0,
                to: 1,
                status: p2p.to_owned(),
            },
            P2pCell {
                from: 1,
                to: 0,
                status: p2p.to_owned(),
            },
        ],
    }
}

const QUERY: &str =
    "0, GPU-aaaa1111, NVIDIA H200, 143771, 0\n1, GPU-bbbb2222, NVIDIA H200, 143771, 0\n";
const LIST: &str = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa1111)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb2222)\n  MIG 1g.18gb     Device  0: (UUID: MIG-cccc3333)\n  MIG 1g.18gb     Device  1: (UUID: MIG-dddd4444)\n";

fn matrix(cell: &str) -> String {
    format!(
        " \tGPU0\tGPU1\t\nGPU0\tX\t{cell}\t\nGPU1\t{cell}\tX\t\n\nLegend:\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
    )
}

/// How the fake binary behaves.
#[derive(Clone)]
enum Smi {
    /// No `nvidia-smi` on PATH.
    Missing,
    /// Answers the inventory; `topo -p2p r` prints `topo`.
    Host { topo: String },
    /// Answers the inventory; `topo` hangs.
    TopoHangs,
    /// Every call hangs.
    Hangs,
    /// Every call exits 9.
    Fails,
}

fn script(smi: &Smi) -> Option<String> {
    let inventory = format!(
        "case \"$1\" in\n  --query-gpu=*) printf '%s' '{QUERY}' ;;\n  -L) printf '%s' '{LIST}' ;;\n"
    );
    Some(match smi {
        Smi::Missing => return None,
        Smi::Host { topo } => {
            format!("#!/bin/sh\n{inventory}  topo) printf '%s' '{topo}' ;;\nesac\n")
        }
        Smi::TopoHangs => format!("#!/bin/sh\n{inventory}  topo) sleep 30 ;;\nesac\n"),
        Smi::Hangs => "#!/bin/sh\nsleep 30\n".to_owned(),
        Smi::Fails => "#!/bin/sh\necho boom >&2\nexit 9\n".to_owned(),
    })
}

fn probe(dir: &PathBuf, smi: &Smi) -> NvidiaSmi {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    if let Some(text) = script(smi) {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("nvidia-smi");
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // The fake first; /usr/bin:/bin only for `sleep` (a real nvidia-smi never lives there in
    // this test's images, and the missing case uses the fake dir alone).
    let path = match smi {
        Smi::Missing => dir.display().to_string(),
        _ => format!("{}:/usr/bin:/bin", dir.display()),
    };
    NvidiaSmi {
        path: Some(path.into()),
        timeout: Duration::from_millis(400),
    }
}

/// What a case must produce.
enum Want {
    Ok {
        source: GrantSource,
        delivered: &'static [&'static str],
        execution: &'static str,
        peer: serde_json::Value,
        problem: Option<&'static str>,
    },
    Refused(&'static str),
    Config,
}

struct Case {
    name: &'static str,
    smi: Smi,
    mask: Option<&'static str>,
    grant: Option<serde_json::Value>,
    requested: i64,
    fallback: GpuFallback,
    peer: bool,
    /// `NVIDIA_VISIBLE_DEVICES`.
    nvidia: Option<&'static str>,
    /// NVML's answer; `None` = the library is absent.
    nvml: Option<Inventory>,
    want: Want,
}

fn ok(source: GrantSource, delivered: &'static [&'static str], execution: &'static str) -> Want {
    Want::Ok {
        source,
        delivered,
        execution,
        peer: serde_json::Value::Null,
        problem: None,
    }
}

fn host() -> Smi {
    Smi::Host { topo: matrix("OK") }
}

fn cases() -> Vec<Case> {
    use GpuFallback::{Cpu, None as Hard};
    use GrantSource::{Enumeration, Grant, Unobserved};
    let base = |name, mask, requested, fallback, want| Case {
        name,
        smi: host(),
        mask,
        grant: None,
        requested,
        fallback,
        peer: false,
        nvidia: None,
        nvml: None,
        want,
    };
    let both = &["GPU-aaaa1111", "GPU-bbbb2222"];
    vec![
        base(
            "gpu_2_unset_mask_exposes_every_card_never_mig",
            None,
            2,
            Hard,
            ok(Enumeration, both, "gpu"),
        ),
        base(
            "gpu_2_card_uuid_prefix",
            Some("GPU-bbbb"),
            1,
            Hard,
            ok(Enumeration, &["GPU-bbbb2222"], "gpu"),
        ),
        base(
            "gpu_2_mig_uuid_mask",
            Some("MIG-cccc3333"),
            1,
            Hard,
            ok(Enumeration, &["MIG-cccc3333"], "gpu"),
        ),
        base(
            "gpu_2_two_mig_uuids_by_prefix",
            Some("MIG-dddd, MIG-cccc"),
            2,
            Hard,
            ok(Enumeration, &["MIG-dddd4444", "MIG-cccc3333"], "gpu"),
        ),
        base(
            "gpu_2_ordinals_in_mask_order",
            Some("1,0"),
            2,
            Hard,
            ok(Enumeration, &["GPU-bbbb2222", "GPU-aaaa1111"], "gpu"),
        ),
        base(
            "gpu_2_uuid_mask_is_not_counted_as_integers",
            Some("GPU-aaaa1111,GPU-bbbb2222"),
            2,
            Hard,
            ok(Enumeration, both, "gpu"),
        ),
        base(
            "gpu_2_mixed_forms_end_the_list_short_grant_refused",
            Some("0,GPU-bbbb"),
            2,
            Hard,
            Want::Refused(
                "Node det requires 2 GPU(s); requested 2 device(s), delivered 1 (GPU-aaaa1111) (mask '0,GPU-bbbb', source enumeration).",
            ),
        ),
        base(
            "gpu_2_unknown_entry_ends_the_list",
            Some("0,7,1"),
            1,
            Hard,
            ok(Enumeration, &["GPU-aaaa1111"], "gpu"),
        ),
        base(
            "gpu_2_ambiguous_prefix_names_no_device",
            Some("GPU-"),
            1,
            Cpu,
            Want::Ok {
                source: Enumeration,
                delivered: &[],
                execution: "cpu",
                peer: serde_json::Value::Null,
                problem: Some("requested 1 device(s), delivered 0"),
            },
        ),
        base(
            "gpu_2_duplicate_invalidates_the_whole_mask_cpu_fallback_opens",
            Some("0,0"),
            1,
            Cpu,
            Want::Ok {
                source: Enumeration,
                delivered: &[],
                execution: "cpu",
                peer: serde_json::Value::Null,
                problem: Some("requested 1 device(s), delivered 0"),
            },
        ),
        base(
            "gpu_3_empty_mask_hides_everything_none_refuses",
            Some(""),
            1,
            Hard,
            Want::Refused(
                "Node det requires 1 GPU(s); requested 1 device(s), delivered 0 (mask '', source enumeration).",
            ),
        ),
        Case {
            smi: Smi::Missing,
            ..base(
                "gpu_2_missing_binary_is_unknown_not_zero_cpu_opens",
                None,
                1,
                Cpu,
                Want::Ok {
                    source: Unobserved,
                    delivered: &[],
                    execution: "unknown",
                    peer: serde_json::Value::Null,
                    problem: Some(
                        "the GPU namespace could not be enumerated (missing: nvidia-smi is not on PATH (no NVIDIA driver); NVML: missing: /nonexistent/videoflow-test/libnvidia-ml.so.1 could not be loaded (no NVIDIA driver): /nonexistent/videoflow-test/libnvidia-ml.so.1: cannot open shared object file: No such file or directory)",
                    ),
                },
            )
        },
        Case {
            smi: Smi::Missing,
            ..base(
                "gpu_3_missing_binary_none_refuses",
                None,
                1,
                Hard,
                Want::Refused(
                    "Node det requires 1 GPU(s) but its grant cannot be verified: the GPU namespace could not be enumerated (missing: nvidia-smi is not on PATH (no NVIDIA driver); NVML: missing: /nonexistent/videoflow-test/libnvidia-ml.so.1 could not be loaded",
                ),
            )
        },
        Case {
            smi: Smi::Hangs,
            ..base(
                "gpu_2_hanging_binary_is_bounded_by_the_timeout",
                None,
                1,
                Hard,
                Want::Refused("could not be enumerated (timeout: nvidia-smi"),
            )
        },
        Case {
            smi: Smi::Fails,
            ..base(
                "gpu_2_failing_binary_is_unknown",
                None,
                1,
                Hard,
                Want::Refused("could not be enumerated (failed: nvidia-smi"),
            )
        },
        Case {
            peer: true,
            ..base(
                "gpu_4_peer_access_ok",
                None,
                2,
                Hard,
                Want::Ok {
                    source: Enumeration,
                    delivered: both,
                    execution: "gpu",
                    peer: json!(true),
                    problem: None,
                },
            )
        },
        Case {
            peer: true,
            smi: Smi::Host { topo: matrix("NS") },
            ..base(
                "gpu_4_ns_cell_refuses",
                None,
                2,
                Cpu,
                Want::Refused(
                    "Node det requires peer access between its devices, and the delivered pair ['GPU-aaaa1111', 'GPU-bbbb2222'] has none (nvidia-smi topo -p2p r).",
                ),
            )
        },
        Case {
            peer: true,
            smi: Smi::Host {
                topo: matrix("CNS"),
            },
            ..base(
                "gpu_4_cns_cell_refuses",
                None,
                2,
                Cpu,
                Want::Refused("and the delivered pair ['GPU-aaaa1111', 'GPU-bbbb2222'] has none"),
            )
        },
        Case {
            peer: true,
            smi: Smi::Host {
                topo: " \tGPU0\tGPU1\nGPU0\tX\tOK\nGPU1\tNS\tX\n".into(),
            },
            ..base(
                "gpu_4_every_ordered_pair_must_be_ok",
                None,
                2,
                Cpu,
                Want::Refused("has none"),
            )
        },
        Case {
            peer: true,
            ..base(
                "gpu_4_mig_devices_are_malformed_for_peer_access",
                Some("MIG-cccc,MIG-dddd"),
                2,
                Cpu,
                Want::Refused(
                    "Node det requires peer access between its 2 devices, which could not be verified (malformed: peer access needs whole physical devices with host ordinals).",
                ),
            )
        },
        Case {
            peer: true,
            smi: Smi::Host {
                topo: "no matrix here\n".into(),
            },
            ..base(
                "gpu_4_no_matrix_is_malformed",
                None,
                2,
                Cpu,
                Want::Refused(
                    "(malformed: nvidia-smi topo -p2p r printed no matrix; NVML: missing:",
                ),
            )
        },
        Case {
            peer: true,
            smi: Smi::TopoHangs,
            ..base(
                "gpu_4_hanging_topo_is_a_timeout",
                None,
                2,
                Cpu,
                Want::Refused(
                    "which could not be verified (timeout: nvidia-smi topo -p2p r did not answer",
                ),
            )
        },
        Case {
            peer: true,
            ..base(
                "gpu_4_peer_access_needs_more_than_one_device",
                Some("0"),
                1,
                Hard,
                ok(Enumeration, &["GPU-aaaa1111"], "gpu"),
            )
        },
        Case {
            peer: true,
            smi: Smi::Host { topo: matrix("NS") },
            ..base(
                "gpu_4_peer_check_skipped_when_the_grant_is_short",
                Some("0"),
                2,
                Cpu,
                Want::Ok {
                    source: Enumeration,
                    delivered: &["GPU-aaaa1111"],
                    execution: "gpu",
                    peer: serde_json::Value::Null,
                    problem: Some("requested 2 device(s), delivered 1 (GPU-aaaa1111)"),
                },
            )
        },
        Case {
            smi: Smi::Missing,
            grant: Some(
                json!({"workload_id": "w1", "exclusive": true, "policy": "strict", "devices": [
                {"ordinal": 3, "uuid": "GPU-eeee"}, {"ordinal": 4, "uuid": "GPU-ffff", "mig_uuid": null}]}),
            ),
            ..base(
                "gpu_1_observed_grant_is_authoritative_without_nvidia_smi",
                Some("GPU-eeee,GPU-ffff"),
                2,
                Hard,
                ok(Grant, &["GPU-eeee", "GPU-ffff"], "gpu"),
            )
        },
        Case {
            smi: Smi::Missing,
            grant: Some(
                json!({"workload_id": "w1", "devices": [{"ordinal": 3, "uuid": "GPU-eeee"}]}),
            ),
            ..base(
                "gpu_3_short_recorded_grant_refused",
                None,
                2,
                Hard,
                Want::Refused(
                    "Node det requires 2 GPU(s); requested 2 device(s), delivered 1 (GPU-eeee) (mask None, source grant).",
                ),
            )
        },
        Case {
            grant: Some(json!({"workload_id": "w1", "host": "unobserved", "devices": []})),
            ..base(
                "gpu_2_unobserved_grant_falls_back_to_enumeration",
                Some("1"),
                1,
                Hard,
                ok(Enumeration, &["GPU-bbbb2222"], "gpu"),
            )
        },
        Case {
            grant: Some(json!({"devices": []})),
            ..base(
                "gpu_1_grant_without_workload_id_is_a_config_error",
                None,
                1,
                Hard,
                Want::Config,
            )
        },
        // Kubernetes' device plugin: NVIDIA_VISIBLE_DEVICES by UUID, MIG UUID and ordinal.
        Case {
            nvidia: Some("GPU-bbbb2222"),
            ..base(
                "k8s_nvidia_visible_devices_by_card_uuid",
                None,
                1,
                Hard,
                ok(Enumeration, &["GPU-bbbb2222"], "gpu"),
            )
        },
        Case {
            nvidia: Some("MIG-dddd4444"),
            ..base(
                "k8s_nvidia_visible_devices_by_mig_uuid",
                None,
                1,
                Hard,
                ok(Enumeration, &["MIG-dddd4444"], "gpu"),
            )
        },
        Case {
            nvidia: Some("1"),
            ..base(
                "k8s_nvidia_visible_devices_ordinal_on_a_host_that_sees_more_cards",
                None,
                1,
                Hard,
                ok(Enumeration, &["GPU-bbbb2222"], "gpu"),
            )
        },
        Case {
            nvidia: Some("5,7"),
            ..base(
                "k8s_ordinals_already_applied_by_the_container_runtime",
                None,
                2,
                Hard,
                ok(Enumeration, &["GPU-aaaa1111", "GPU-bbbb2222"], "gpu"),
            )
        },
        Case {
            nvidia: Some("all"),
            ..base(
                "k8s_all_selects_nothing_more",
                None,
                2,
                Hard,
                ok(Enumeration, &["GPU-aaaa1111", "GPU-bbbb2222"], "gpu"),
            )
        },
        Case {
            nvidia: Some("GPU-aaaa1111"),
            ..base(
                "k8s_cuda_visible_devices_wins_over_the_device_plugin_list",
                Some("1"),
                1,
                Hard,
                ok(Enumeration, &["GPU-bbbb2222"], "gpu"),
            )
        },
        Case {
            nvidia: Some("GPU-aaaa1111"),
            ..base(
                "k8s_short_uuid_grant_none_refuses",
                None,
                2,
                Hard,
                Want::Refused(
                    "Node det requires 2 GPU(s); requested 2 device(s), delivered 1 (GPU-aaaa1111) (mask 'GPU-aaaa1111', source enumeration).",
                ),
            )
        },
        Case {
            nvidia: Some("GPU-aaaa1111"),
            ..base(
                "k8s_short_uuid_grant_cpu_opens_with_the_report",
                None,
                2,
                Cpu,
                Want::Ok {
                    source: Enumeration,
                    delivered: &["GPU-aaaa1111"],
                    execution: "gpu",
                    peer: serde_json::Value::Null,
                    problem: Some("requested 2 device(s), delivered 1 (GPU-aaaa1111)"),
                },
            )
        },
        // NVML answers first: the same host from the recording, nvidia-smi not needed.
        Case {
            smi: Smi::Missing,
            nvml: Some(recorded_inventory("OK")),
            ..base(
                "nvml_enumerates_mig_by_uuid_without_nvidia_smi",
                Some("MIG-cccc"),
                1,
                Hard,
                ok(Enumeration, &["MIG-cccc3333"], "gpu"),
            )
        },
        Case {
            smi: Smi::Missing,
            peer: true,
            nvml: Some(recorded_inventory("OK")),
            ..base(
                "nvml_p2p_ok",
                Some("0,1"),
                2,
                Hard,
                Want::Ok {
                    source: Enumeration,
                    delivered: both,
                    execution: "gpu",
                    peer: json!(true),
                    problem: None,
                },
            )
        },
        Case {
            smi: Smi::Missing,
            peer: true,
            nvml: Some(recorded_inventory("TNS")),
            ..base(
                "nvml_p2p_not_supported_refuses_naming_nvml",
                None,
                2,
                Cpu,
                Want::Refused(
                    "Node det requires peer access between its devices, and the delivered pair ['GPU-aaaa1111', 'GPU-bbbb2222'] has none (NVML P2P status).",
                ),
            )
        },
    ]
}

#[test]
fn gpu_1_to_4_decision_table_with_fake_nvidia_smi() {
    let root = std::env::temp_dir().join(format!("vf-gpu-table-{}", std::process::id()));
    let mut failures = Vec::new();
    for case in cases() {
        let dir = root.join(case.name);
        let smi = probe(&dir, &case.smi);
        let absent = absent_nvml();
        let recorded = case.nvml.clone().map(|i| Recorded {
            inventory: Observation::Known(i),
            samples: Vec::new(),
        });
        let nvml: &dyn NvmlSource = match &recorded {
            Some(r) => r,
            None => &absent,
        };
        let probe = HostProbe { nvml, smi };
        let device = DeviceConfig {
            device_type: DeviceType::Gpu,
            gpu_count: case.requested,
            gpu_resource_name: None,
            gpu_fallback: Some(case.fallback),
            requires_peer_access: case.peer,
            gpu_grant_json: case.grant.as_ref().map(|g| g.to_string()),
            assets: Vec::new(),
            cuda_visible_devices: None,
            nvidia_visible_devices: None,
            nvml_library: None,
            path: None,
            hostname: None,
        };
        let masks = Masks {
            cuda: case.mask,
            nvidia: case.nvidia,
        };
        // A hanging nvidia-smi is bounded by the probe's timeout: the hanging cases expect the
        // "timeout" reason, which only a killed call gives (the fake would otherwise answer
        // nothing after 30 s, a different reason).
        let got = gpu::check_node("det", true, &device, masks, &probe);
        let verdict = match (&case.want, got) {
            (
                Want::Ok {
                    source,
                    delivered,
                    execution,
                    peer,
                    problem,
                },
                Ok(Some(r)),
            ) => {
                let ids: Vec<String> = r.delivered.iter().map(|d| d.id()).collect();
                let j = r.to_json();
                let problem_ok = match problem {
                    None => r.problems.is_empty(),
                    Some(p) => r.problems.iter().any(|x| x == p),
                };
                (r.source == *source
                    && ids == *delivered
                    && r.execution == *execution
                    && j["peer_access"] == *peer
                    && problem_ok)
                    .then_some(())
                    .ok_or_else(|| format!("report {j}"))
            }
            (Want::Refused(text), Err(e)) => (e.code == ErrorCode::ResourceUnavailable
                && e.exit_code() == 3
                && e.message.contains(text)
                && e.remedy_text().is_some())
            .then_some(())
            .ok_or_else(|| format!("refused with {} {:?}", e.code, e.message)),
            (Want::Config, Err(e)) if e.code == ErrorCode::Config => Ok(()),
            (_, other) => Err(format!("unexpected {other:?}")),
        };
        if let Err(why) = verdict {
            failures.push(format!("{}: {why}", case.name));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        failures.is_empty(),
        "failed cases:\n{}",
        failures.join("\n")
    );
}

#[test]
fn gpu_2_report_dict_shape_and_a_cpu_node_is_not_checked() {
    let device = DeviceConfig {
        device_type: DeviceType::Cpu,
        gpu_count: 1,
        gpu_resource_name: None,
        gpu_fallback: Some(GpuFallback::None),
        requires_peer_access: false,
        gpu_grant_json: None,
        assets: Vec::new(),
        cuda_visible_devices: None,
        nvidia_visible_devices: None,
        nvml_library: None,
        path: None,
        hostname: None,
    };
    let none = NvidiaSmi {
        path: Some("/nonexistent".into()),
        timeout: Duration::from_millis(100),
    };
    assert_eq!(
        gpu::check_node("n", true, &device, Masks::default(), &none),
        Ok(None)
    );
    let gpu_device = DeviceConfig {
        device_type: DeviceType::Gpu,
        ..device
    };
    assert_eq!(
        gpu::check_node("n", false, &gpu_device, Masks::default(), &none),
        Ok(None),
        "producers and consumers are CPU nodes"
    );
    let grant = DeliveredGrant::parse(
        r#"{"workload_id": "w", "devices": [{"ordinal": 0, "uuid": "GPU-1"}]}"#,
    )
    .expect("parses");
    assert_eq!(grant.host, "observed");
    assert!(!grant.exclusive);
    let masks = Masks {
        cuda: Some("0"),
        nvidia: None,
    };
    let r = gpu::report(1, masks, Some(&grant), &none);
    let j = r.to_json();
    assert_eq!(
        j,
        json!({"requested": 1, "delivered": ["GPU-1"], "source": "grant", "execution": "gpu",
               "exclusive": false, "mask": "0", "peer_access": null, "problems": [],
               "evidence": {"policy": ""}})
    );
    assert!(DeliveredGrant::parse("not json").is_err());
}

/// Fake-binary helper for the tests below: a host answering the inventory.
fn smi_host(name: &str) -> (PathBuf, NvidiaSmi) {
    let dir = std::env::temp_dir().join(format!("vf-gpu-{name}-{}", std::process::id()));
    let smi = probe(&dir, &host());
    (dir, smi)
}

/// GPU-2 with both probes: recorded outputs of NVML and of `nvidia-smi` (`--query-gpu` and
/// `-L` through the fake binary) read as the same identities; a changed recording differs,
/// naming the field.
#[test]
fn nvml_and_nvidia_smi_recordings_of_one_host_agree() {
    let (dir, smi) = smi_host("agree");
    let from_smi = smi.host_devices();
    assert_eq!(from_smi.probe, "nvidia-smi");
    let Observation::Known(from_smi) = from_smi.answer else {
        panic!("the fake nvidia-smi answers: {from_smi:?}");
    };
    let from_nvml = recorded_inventory("OK").identities();
    assert_eq!(from_nvml.len(), 4, "two cards, two MIG instances");
    assert_eq!(
        nvml::differences(&from_nvml, &from_smi),
        Vec::<String>::new()
    );
    assert_eq!(from_nvml[2].mig_profile.as_deref(), Some("1g.18gb"));
    assert_eq!(
        from_nvml[2].ordinal,
        Some(1),
        "a MIG instance carries its card's ordinal"
    );

    let mut changed = recorded_inventory("OK");
    changed.cards[1].mig[1].uuid = "MIG-eeee5555".to_owned();
    changed.cards[0].memory_total_bytes = Some(80 * 1024 * 1024 * 1024);
    let diffs = nvml::differences(&changed.identities(), &from_smi);
    assert!(
        diffs.iter().any(|d| d.contains("mig_uuid")) && diffs.iter().any(|d| d.contains("memory")),
        "{diffs:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// GPU-2: with the real library absent the probe falls back to `nvidia-smi`, and the report
/// says which probe answered and why NVML did not; NVML answering is named too.
#[test]
fn evidence_names_the_probe_that_answered() {
    let (dir, smi) = smi_host("evidence");
    let absent = absent_nvml();
    let fallback = HostProbe {
        nvml: &absent,
        smi: smi.clone(),
    };
    let r = gpu::report(1, Masks::default(), None, &fallback);
    assert_eq!(r.source, GrantSource::Enumeration);
    assert_eq!(r.evidence["probe"], "nvidia-smi");
    assert!(
        r.evidence["probe_nvml"]
            .starts_with("missing: /nonexistent/videoflow-test/libnvidia-ml.so.1"),
        "{:?}",
        r.evidence
    );
    let recorded = Recorded {
        inventory: Observation::Known(recorded_inventory("OK")),
        samples: Vec::new(),
    };
    let first = HostProbe {
        nvml: &recorded,
        smi,
    };
    let r = gpu::report(
        1,
        Masks {
            cuda: Some("1"),
            nvidia: None,
        },
        None,
        &first,
    );
    assert_eq!(r.evidence["probe"], "nvml");
    assert!(!r.evidence.contains_key("probe_nvml"));
    assert_eq!(r.evidence["compute_mode"], "GPU-bbbb2222=exclusive_process");
    let _ = std::fs::remove_dir_all(dir);
}

/// The recorded source replays samples for the granted ids only, and none when its
/// inventory is unknown (what the metrics render as unobserved).
#[test]
fn recorded_samples_follow_the_inventory() {
    let s = DeviceSample {
        id: "GPU-aaaa1111".to_owned(),
        utilization: Some(0.5),
        ..DeviceSample::default()
    };
    let known = Recorded {
        inventory: Observation::Known(recorded_inventory("OK")),
        samples: vec![s.clone()],
    };
    assert_eq!(
        known.samples(&["GPU-aaaa1111".to_owned(), "GPU-zzzz".to_owned()]),
        Observation::Known(vec![s.clone()])
    );
    let unknown = Recorded {
        inventory: Observation::unknown("missing", "no library"),
        samples: vec![s],
    };
    assert!(matches!(
        unknown.samples(&["GPU-aaaa1111".to_owned()]),
        Observation::Unknown { .. }
    ));
}

/// What a node that drives its GPU itself (a video reader on NVDEC) is told by the report:
/// the delivered devices (required under `fallback: none`), "unobserved" when no probe could
/// look (it may still try), "denied" with the problems when none was delivered.
#[test]
fn the_report_places_a_node_on_its_devices_or_says_why_not() {
    use videoflow_worker::nodes::GpuPlacement;
    let absent = absent_nvml();
    let nowhere = HostProbe {
        nvml: &absent,
        smi: NvidiaSmi {
            path: Some("/nonexistent".into()),
            timeout: Duration::from_millis(100),
        },
    };
    let grant = |devices: &str| {
        DeliveredGrant::parse(&format!(
            r#"{{"workload_id": "w", "devices": {devices}, "host": "observed"}}"#
        ))
        .expect("grant")
    };
    let one = grant(r#"[{"ordinal": 0, "uuid": "GPU-aaaa1111"}]"#);
    let r = gpu::report(1, Masks::default(), Some(&one), &nowhere);
    assert_eq!(
        r.placement(GpuFallback::Cpu),
        GpuPlacement::Granted {
            devices: vec!["GPU-aaaa1111".into()],
            required: false
        }
    );
    assert!(r.placement(GpuFallback::None).required());
    let none = grant("[]");
    match gpu::report(1, Masks::default(), Some(&none), &nowhere).placement(GpuFallback::Cpu) {
        GpuPlacement::Denied(why) => assert_eq!(why, "requested 1 device(s), delivered 0"),
        other => panic!("{other:?}"),
    }
    match gpu::report(1, Masks::default(), None, &nowhere).placement(GpuFallback::Cpu) {
        GpuPlacement::Unobserved(why) => {
            assert!(
                why.starts_with("the GPU namespace could not be enumerated"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
}
