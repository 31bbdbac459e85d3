//! The GPU grant check (§18.2, GPU-1..4), table-driven over fake `nvidia-smi` executables put
//! first on the probe's PATH: UUID and MIG masks, short grants, P2P matrices with NS/CNS
//! cells, a missing binary, a binary that hangs, a binary that fails, and injected grant JSON.
//!
//! Every case runs in one test function, sequentially: writing an executable while another
//! test thread forks is the classic "text file busy" race.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use videoflow_core::errors::ErrorCode;
use videoflow_core::model::GpuFallback;
use videoflow_worker::config::{DeviceConfig, DeviceType};
use videoflow_worker::gpu::{self, DeliveredGrant, GrantSource, NvidiaSmi};

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
                        "the GPU namespace could not be enumerated (missing: nvidia-smi is not on PATH (no NVIDIA driver))",
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
                    "Node det requires 1 GPU(s) but its grant cannot be verified: the GPU namespace could not be enumerated (missing: nvidia-smi is not on PATH (no NVIDIA driver)).",
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
                Want::Refused("(malformed: nvidia-smi topo -p2p r printed no matrix)"),
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
    ]
}

#[test]
fn gpu_1_to_4_decision_table_with_fake_nvidia_smi() {
    let root = std::env::temp_dir().join(format!("vf-gpu-table-{}", std::process::id()));
    let mut failures = Vec::new();
    for case in cases() {
        let dir = root.join(case.name);
        let probe = probe(&dir, &case.smi);
        let device = DeviceConfig {
            device_type: DeviceType::Gpu,
            gpu_count: case.requested,
            gpu_resource_name: None,
            gpu_fallback: Some(case.fallback),
            requires_peer_access: case.peer,
            gpu_grant_json: case.grant.as_ref().map(|g| g.to_string()),
            assets: Vec::new(),
            cuda_visible_devices: None,
            path: None,
            hostname: None,
        };
        let started = Instant::now();
        let got = gpu::check_node("det", true, &device, case.mask, &probe);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{}: a hanging nvidia-smi must be bounded",
            case.name
        );
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
        path: None,
        hostname: None,
    };
    let none = NvidiaSmi {
        path: Some("/nonexistent".into()),
        timeout: Duration::from_millis(100),
    };
    assert_eq!(gpu::check_node("n", true, &device, None, &none), Ok(None));
    let gpu_device = DeviceConfig {
        device_type: DeviceType::Gpu,
        ..device
    };
    assert_eq!(
        gpu::check_node("n", false, &gpu_device, None, &none),
        Ok(None),
        "producers and consumers are CPU nodes"
    );
    let grant = DeliveredGrant::parse(
        r#"{"workload_id": "w", "devices": [{"ordinal": 0, "uuid": "GPU-1"}]}"#,
    )
    .expect("parses");
    assert_eq!(grant.host, "observed");
    assert!(!grant.exclusive);
    let r = gpu::report(1, Some("0"), Some(&grant), &none);
    let j = r.to_json();
    assert_eq!(
        j,
        json!({"requested": 1, "delivered": ["GPU-1"], "source": "grant", "execution": "gpu",
               "exclusive": false, "mask": "0", "peer_access": null, "problems": [],
               "evidence": {"policy": ""}})
    );
    assert!(DeliveredGrant::parse("not json").is_err());
}
