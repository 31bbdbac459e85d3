//! The images and the operator on the test cluster's real node (`scripts/testenv run
//! --real-node`): the worker, operator and Python SDK images as `scripts/images` builds them
//! from the real Dockerfiles, their layout, their binaries running in real containers, the
//! operator installed from its image by the chart exactly as the README's Kubernetes section
//! says, every sample Flow run in real containers, and what a user meets when a worker dies,
//! when `open()` is slow, and when a Flow is deleted.
//!
//! Needs `scripts/images build` (`./scripts/test` runs it) and the real node (`scripts/testenv
//! build-node`); each missing piece fails with its remedy.

#[path = "e2e_node/node.rs"]
mod node;

use std::collections::BTreeMap;
use std::path::Path;

use node::{
    Node, archives, condition, finished_pod, get_json, kubectl, repo, stream_names, wait_for,
};
use serde_json::{Value, json};
use videoflow_core::naming;
use videoflow_operator::render::pod::{STATIC_WORKER_BINARY, WORKER_BINARY};

/// The worker image's FFmpeg build, which `WORKER_BINARY` execs for video nodes.
const VIDEO_WORKER_BINARY: &str = "/usr/local/bin/videoflow-worker-video";

// ------------------------------------------------------------------ image layout (offline)

/// A `docker save` archive read back: the image config and every file of its layers (path →
/// (tar entry type, bytes)), later layers over earlier ones.
struct Image {
    config: Value,
    files: BTreeMap<String, (u8, Vec<u8>)>,
}

fn tar_entries(bytes: &[u8]) -> Vec<(String, u8, Vec<u8>)> {
    // Plain ustar/pax reading: enough for what `docker save` writes.
    let mut out = Vec::new();
    let mut at = 0;
    let mut long_name: Option<String> = None;
    while at + 512 <= bytes.len() {
        let h = &bytes[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let field = |a: usize, b: usize| {
            String::from_utf8_lossy(&h[a..b])
                .trim_end_matches('\0')
                .to_string()
        };
        let size = usize::from_str_radix(field(124, 136).trim(), 8).unwrap_or(0);
        let kind = h[156];
        let name = {
            let prefix = field(345, 500);
            let name = field(0, 100);
            if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            }
        };
        let body = bytes[at + 512..at + 512 + size].to_vec();
        at += 512 + size.div_ceil(512) * 512;
        match kind {
            b'x' => {
                let text = String::from_utf8_lossy(&body);
                long_name = text
                    .lines()
                    .find_map(|l| l.split_once(" path=").map(|(_, p)| p.to_owned()));
            }
            b'L' => long_name = Some(String::from_utf8_lossy(&body).trim_end_matches('\0').into()),
            _ => {
                let name = long_name.take().unwrap_or(name);
                let name = name
                    .trim_start_matches("./")
                    .trim_end_matches('/')
                    .to_owned();
                let body = if kind == b'2' {
                    field(157, 257).into_bytes()
                } else {
                    body
                };
                out.push((name, kind, body));
            }
        }
    }
    out
}

fn read_image(path: &Path) -> Image {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let outer: BTreeMap<String, Vec<u8>> = tar_entries(&bytes)
        .into_iter()
        .map(|(n, _, b)| (n, b))
        .collect();
    let manifest: Value = serde_json::from_slice(&outer["manifest.json"]).expect("manifest.json");
    let config: Value =
        serde_json::from_slice(&outer[manifest[0]["Config"].as_str().expect("Config")])
            .expect("config");
    let mut files = BTreeMap::new();
    for layer in manifest[0]["Layers"].as_array().expect("Layers") {
        for (name, kind, body) in tar_entries(&outer[layer.as_str().expect("layer")]) {
            files.insert(format!("/{name}"), (kind, body));
        }
    }
    Image { config, files }
}

/// Whether an ELF executable asks for a dynamic loader (has a PT_INTERP program header).
fn is_dynamic(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    let u = |a: usize, n: usize| {
        elf[a..a + n]
            .iter()
            .rev()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    let (phoff, phentsize, phnum) = (u(0x20, 8), u(0x36, 2), u(0x38, 2));
    (0..phnum).any(|i| u(phoff + i * phentsize, 4) == 3)
}

fn assert_no_shell(name: &str, image: &Image) {
    for shell in [
        "/bin/sh",
        "/bin/bash",
        "/bin/ash",
        "/usr/bin/sh",
        "/bin/busybox",
    ] {
        assert!(
            !image.files.contains_key(shell),
            "{name}: has {shell}; the image must have no shell"
        );
    }
}

#[test]
fn image_1_the_worker_image_has_both_workers_the_copy_tool_and_no_shell() {
    let image = read_image(&archives().worker);
    let c = &image.config["config"];
    assert_eq!(c["User"], "65532:65532", "{c}");
    assert_eq!(c["Entrypoint"], json!([WORKER_BINARY]), "{c}");
    assert_no_shell("worker", &image);
    let file = |p: &str| {
        let (kind, body) = image
            .files
            .get(p)
            .unwrap_or_else(|| panic!("worker image: no {p}"));
        assert_eq!(*kind, b'0', "{p} is a regular file");
        body.clone()
    };
    // The init container's `cp` (busybox-static, picked by argv[0]).
    assert!(!is_dynamic(&file("/bin/cp")), "/bin/cp is static");
    // The copied worker runs in any image: static, no loader.
    assert!(
        !is_dynamic(&file(STATIC_WORKER_BINARY)),
        "{STATIC_WORKER_BINARY} must be static"
    );
    // The entrypoint maps no FFmpeg library and hands video nodes to its sibling beside it,
    // which links FFmpeg: those libraries are in the image.
    assert!(is_dynamic(&file(WORKER_BINARY)));
    assert!(is_dynamic(&file(VIDEO_WORKER_BINARY)));
    for lib in [
        "libavcodec.so.59",
        "libavformat.so.59",
        "libswscale.so.6",
        "libavutil.so.57",
    ] {
        let path = format!("/usr/lib/x86_64-linux-gnu/{lib}");
        assert!(image.files.contains_key(&path), "worker image: no {path}");
    }
    assert!(image.files.contains_key("/etc/passwd"));
}

#[test]
fn image_1_the_operator_image_is_one_static_binary_and_no_shell() {
    let image = read_image(&archives().operator);
    let c = &image.config["config"];
    assert_eq!(c["User"], "65532:65532", "{c}");
    assert_eq!(
        c["Entrypoint"],
        json!(["/usr/local/bin/videoflow-operator"]),
        "{c}"
    );
    assert_eq!(c["Cmd"], json!(["run"]), "{c}");
    assert_no_shell("operator", &image);
    let (_, body) = &image.files["/usr/local/bin/videoflow-operator"];
    assert!(!is_dynamic(body), "the operator is static");
}

// ------------------------------------------------------------------ on the real node

const RESTRICTED: &str = r#"{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                             "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}"#;

#[test]
fn the_images_run_read_only_and_the_static_worker_runs_in_an_image_without_libc() {
    let a = archives();
    let n = node::node(&[&a.worker, &a.python]);
    let restricted: Value = serde_json::from_str(RESTRICTED).expect("json");
    // The init container copies the static worker as the operator renders it; the main
    // container is the pause image (one static file, no libc, no shell) running that copy.
    // The Python image, read-only and as 65532, imports what the exec samples need.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "images", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "bin", "emptyDir": {}}],
            "initContainers": [
                {"name": "install-worker", "image": "videoflow/videoflow-worker:0.1.0",
                 "imagePullPolicy": "Never", "securityContext": restricted,
                 "command": ["cp", STATIC_WORKER_BINARY, "/videoflow/bin/videoflow-worker"],
                 "volumeMounts": [{"name": "bin", "mountPath": "/videoflow/bin"}]},
                {"name": "worker", "image": "videoflow/videoflow-worker:0.1.0",
                 "imagePullPolicy": "Never", "securityContext": restricted, "args": ["--version"]},
                {"name": "video-worker", "image": "videoflow/videoflow-worker:0.1.0",
                 "imagePullPolicy": "Never", "securityContext": restricted,
                 "command": [VIDEO_WORKER_BINARY, "--version"]},
                {"name": "python", "image": "videoflow/sdk-python-examples:0.1.0",
                 "imagePullPolicy": "Never", "securityContext": restricted,
                 "command": ["python3", "-c",
                     "import numpy, cv2, videoflow_sdk, videoflow_sdk.examples.hog_people; \
                      cv2.HOGDescriptor().setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector()); \
                      print('python-image ok', cv2.__version__)"]}
            ],
            "containers": [
                {"name": "copied", "image": "registry.k8s.io/pause:3.10.2",
                 "imagePullPolicy": "Never", "securityContext": restricted,
                 "command": ["/videoflow/bin/videoflow-worker", "--version"],
                 "volumeMounts": [{"name": "bin", "mountPath": "/videoflow/bin", "readOnly": true}]}
            ]
        }
    });
    kubectl(n.kc(), &["apply", "-f", "-"], Some(&pod.to_string()))
        .unwrap_or_else(|e| panic!("{e}"));
    let done = finished_pod(n.kc(), "default", "images");
    assert_eq!(
        done["status"]["phase"],
        "Succeeded",
        "{}\nkubelet:\n{}",
        done["status"],
        n.log("node-kubelet")
    );
    for (c, expect) in [
        ("worker", "videoflow-worker"),
        ("video-worker", "videoflow-worker"),
        ("copied", "videoflow-worker"),
        ("python", "python-image ok"),
    ] {
        let logs =
            kubectl(n.kc(), &["logs", "images", "-c", c], None).unwrap_or_else(|e| panic!("{e}"));
        assert!(logs.contains(expect), "{c}: {logs}");
    }
}

/// A sample as a user applies it on a cluster, changed only where a cluster differs from the
/// local runner: the payload store is the test's redis-server (the local runner starts a
/// private one for `payloadStore: {}`), and the people sample's files — its input clip and
/// the video the writer writes and the check reads back — are on a volume every pod mounts
/// (locally they share the run directory). Everything else, relative paths included, is the
/// sample as written.
fn sample(n: &Node, name: &str, shared: &Path) -> Value {
    let text = std::fs::read_to_string(repo().join(format!("config/samples/{name}.yaml")))
        .expect("sample");
    let mut flow: Value = serde_yaml::from_str(&text).expect("sample YAML");
    let spec = &mut flow["spec"];
    if spec.get("payloadStore").is_some() {
        spec["payloadStore"]["url"] = json!(n.redis_url());
    }
    if name == "people" {
        spec["pod"] = json!({
            "volumes": [{"name": "shared", "hostPath": {"path": shared, "type": "Directory"}}],
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
        });
        for node in spec["nodes"].as_array_mut().into_iter().flatten() {
            let name = node["name"].as_str().unwrap_or_default().to_owned();
            let params = &mut node["params"];
            match Some(name.as_str()) {
                Some("video") => params["video_file"] = json!("/shared/people.mp4"),
                Some("write") => params["video_file"] = json!("/shared/annotated.mp4"),
                Some("check") => {
                    params["video_file"] = json!("/shared/annotated.mp4");
                    params["contact_sheet"] = json!("/shared/contact-sheet.png");
                }
                _ => {}
            }
        }
    }
    flow
}

/// The people sample's input, made here as its header says (drawn figures, encoded by the
/// ffmpeg CLI), with the SDK's own clip maker.
fn people_clip(dir: &Path) {
    let out = std::process::Command::new(node::env_sh("printf %s \"$VF_SDK_PYTHON\""))
        .args(["-m", "videoflow_sdk.examples.people_clip"])
        .arg(dir.join("people.mp4"))
        .args(["--frames", "32"])
        .env("PYTHONPATH", repo().join("sdk/python"))
        .output()
        .expect("the SDK venv's python (scripts/install-deps)");
    assert!(
        out.status.success(),
        "people_clip: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut mode = std::fs::metadata(dir.join("people.mp4"))
        .expect("clip")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o644);
    std::fs::set_permissions(dir.join("people.mp4"), mode).expect("chmod");
}

/// The streams of a run: one per node (NAME-3).
fn run_streams(flow: &Value) -> Vec<String> {
    let name = flow["metadata"]["name"].as_str().unwrap_or_default();
    let run = flow["status"]["runId"].as_str().unwrap_or_default();
    flow["spec"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["name"].as_str())
        .map(|node| naming::stream_name(name, run, node))
        .collect()
}

/// The sample's self-check passed, in its `check` worker's own words: `close()` writes the
/// verdict, and an error there is logged without changing the exit status (LOOP-1), so a
/// completed Job alone does not say it.
fn assert_self_check_passed(n: &Node, ns: &str, flow: &str) {
    let logs = wait_for(&format!("{flow}: the check's verdict"), || {
        let logs = n.node_logs(ns, flow, "check");
        if logs.contains("self-check ok") || logs.contains("close() failed") {
            Ok(Some(logs))
        } else {
            Err(tail(&logs))
        }
    });
    assert!(logs.contains("self-check ok"), "{flow}: {}", tail(&logs));
}

/// The last lines of a log, for failure messages.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Every pod ran on the real node and no container of any restarted.
fn assert_real_and_never_restarted(n: &Node, ns: &str) {
    let pods = get_json(n.kc(), &["-n", ns, "get", "pods"]).unwrap_or_else(|e| panic!("{e}"));
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert!(!items.is_empty(), "no pods in {ns}");
    for p in &items {
        let name = &p["metadata"]["name"];
        assert_eq!(p["spec"]["nodeName"], "vf-node-0", "{name}");
        for c in ["initContainerStatuses", "containerStatuses"]
            .iter()
            .flat_map(|k| p["status"][k].as_array().cloned().unwrap_or_default())
        {
            assert_eq!(c["restartCount"], 0, "{name}: {c}");
        }
    }
}

/// The chart installs the operator from its image as the README says, and every sample of
/// `config/samples/` runs in real containers on the real node: the BATCH ones complete and
/// their self-checks pass (read from the `check` workers' logs: a self-check's verdict does
/// not change a worker's exit status, LOOP-1), the exec samples run the SDK's Python
/// components in the Python image with the worker copied in by the init container, and the
/// REALTIME `toy-fusion` becomes Ready, then — its finite sources ended — says so without a
/// restart or a Degraded condition. Deleting each Flow takes its pods, Jobs, workloads and
/// JetStream streams with it (the flow-level dead-letter stream stays, NAME-9).
#[test]
fn every_sample_runs_in_real_containers_under_the_operator_installed_from_its_image() {
    let a = archives();
    let n = node::node(&[&a.worker, &a.operator, &a.python]);
    n.install_operator();
    let ns = "e2e-samples";
    n.namespace(ns);
    let shared = n.shared_dir("shared");
    people_clip(&shared);
    let batch = [
        "toy-calculator",
        "toy-router",
        "frames",
        "python-component",
        "people",
    ];
    let all: Vec<&str> = batch.iter().copied().chain(["toy-fusion"]).collect();
    // The REALTIME sample first and on its own: its time join pairs ticks by their arrival
    // within a 2 s timeout, which the BATCH samples' load on two shared cores could stretch.
    let started = std::time::Instant::now();
    n.apply(ns, &sample(&n, "toy-fusion", &shared));
    // Ready while it runs; once its finite producers' Jobs completed, the status says its
    // sources ended, and it stays Ready — its check drained and holds.
    let fusion = n.wait_flow(ns, "toy-fusion", "sources ended", |f| {
        let complete = condition(f, "Complete")?;
        (complete["reason"] == "SourcesEnded").then(|| f.clone())
    });
    eprintln!("toy-fusion: SourcesEnded after {:?}", started.elapsed());
    for (t, status) in [
        ("Ready", "True"),
        ("Degraded", "False"),
        ("Progressing", "False"),
    ] {
        assert_eq!(
            condition(&fusion, t).map(|c| &c["status"]),
            Some(&json!(status)),
            "{t}: {}",
            fusion["status"]
        );
    }
    assert_self_check_passed(&n, ns, "toy-fusion");

    let started = std::time::Instant::now();
    for name in batch {
        n.apply(ns, &sample(&n, name, &shared));
    }
    for name in batch {
        n.wait_flow(ns, name, "Complete", |f| {
            condition(f, "Complete").filter(|c| c["status"] == "True")?;
            Some(())
        });
        eprintln!("{name}: Complete after {:?}", started.elapsed());
    }
    for name in batch {
        assert_self_check_passed(&n, ns, name);
    }
    // The fusion check held rather than exit: its one container is still the first.
    let (_, check) = n.workload(ns, "toy-fusion", "check");
    let held = n.node_logs(ns, "toy-fusion", "check");
    assert!(held.contains("holding until stopped"), "{check}: {held}");
    // The people sample wrote its video where the check read it back.
    for f in ["annotated.mp4", "contact-sheet.png"] {
        let len = std::fs::metadata(shared.join(f)).map_or(0, |m| m.len());
        assert!(len > 0, "people: {f} is missing or empty");
    }
    // The exec nodes ran in the Python image, the worker copied in by the init container.
    for (flow, node) in [
        ("python-component", "invert"),
        ("python-component", "restore"),
        ("people", "detect"),
    ] {
        let pods = get_json(
            n.kc(),
            &[
                "-n",
                ns,
                "get",
                "pods",
                "-l",
                &format!("videoflow.io/flow={flow},videoflow.io/node={node}"),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        assert!(!items.is_empty(), "{flow}/{node}: no pods");
        for p in items {
            assert_eq!(
                p["spec"]["containers"][0]["image"], "videoflow/sdk-python-examples:0.1.0",
                "{flow}/{node}"
            );
            let init = &p["status"]["initContainerStatuses"][0];
            assert_eq!(init["name"], "install-worker", "{flow}/{node}: {init}");
            assert_eq!(
                init["state"]["terminated"]["exitCode"], 0,
                "{flow}/{node}: {init}"
            );
            assert_eq!(p["status"]["phase"], "Succeeded", "{flow}/{node}");
        }
    }
    assert_real_and_never_restarted(&n, ns);

    // Teardown: every run's streams exist now and are gone after the delete.
    let flows: Vec<Value> = all
        .iter()
        .map(|f| get_json(n.kc(), &["-n", ns, "get", "flow", f]).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let before = stream_names(&n.nats);
    let expected: Vec<String> = flows.iter().flat_map(run_streams).collect();
    for s in &expected {
        assert!(
            before.contains(s),
            "{s} missing before the delete: {before:?}"
        );
    }
    for name in &all {
        kubectl(
            n.kc(),
            &["-n", ns, "delete", "flow", name, "--timeout=170s"],
            None,
        )
        .unwrap_or_else(|e| panic!("{e}\noperator:\n{}", n.operator_log()));
    }
    wait_for("the runs' pods, Jobs and workloads gone", || {
        let left = kubectl(
            n.kc(),
            &[
                "-n",
                ns,
                "get",
                "pods,jobs,deployments,statefulsets,services,configmaps",
                "-l",
                "app.kubernetes.io/managed-by=videoflow-operator",
                "-o",
                "name",
            ],
            None,
        )?;
        if left.trim().is_empty() {
            Ok(Some(()))
        } else {
            Err(left)
        }
    });
    let after = stream_names(&n.nats);
    let dlq: Vec<String> = all.iter().map(|f| naming::dlq_stream_name(f)).collect();
    for s in &after {
        assert!(
            dlq.contains(s),
            "stream {s} outlived its Flow's deletion; left: {after:?}"
        );
    }
}

/// A node needing an asset that is not there exits 3 with its termination record; the
/// kubelet reports it and the operator shows it as `Degraded` with the worker's code and
/// remedy. A node whose `open()` outlasts the liveness window (small probe budgets) is not
/// restarted: the kubelet's startup probe failed on `/readyz` while `open()` ran, passed
/// after it, and liveness then passed on `/healthz` (the kubelet's own probe counters say so).
#[test]
fn a_worker_exit_and_a_slow_open_read_as_they_should_on_the_real_node() {
    let a = archives();
    let n = node::node(&[&a.worker, &a.operator]);
    n.install_operator();
    let ns = "e2e-node-faults";
    n.namespace(ns);
    let asset = json!({
        "apiVersion": "videoflow.io/v1alpha1", "kind": "Flow",
        "metadata": {"name": "needs-asset"},
        "spec": {"type": "batch", "nodes": [
            {"name": "numbers", "kind": "producer",
             "component": {"builtin": "videoflow.producers.basic.IntProducer"},
             "params": {"start_value": 0, "end_value": 9}},
            {"name": "model", "kind": "processor", "parents": ["numbers"],
             "component": {"builtin": "videoflow.processors.basic.IdentityProcessor"},
             "assets": [{"path": "/models/detector.onnx",
                         "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}]},
            {"name": "sink", "kind": "consumer", "parents": ["model"],
             "component": {"builtin": "videoflow.consumers.basic.VoidConsumer"}}
        ]}
    });
    // 40 s in open(), liveness after 15 s of failures: only the startup probe (120 s) may
    // wait for open().
    let slow = json!({
        "apiVersion": "videoflow.io/v1alpha1", "kind": "Flow",
        "metadata": {"name": "slow-open"},
        "spec": {"type": "realtime",
                 "pod": {"probes": {"startupSeconds": 120, "livenessSeconds": 15}},
                 "nodes": [
            {"name": "ticks", "kind": "producer", "finite": false,
             "component": {"builtin": "videoflow.rs.producers.TickProducer"},
             "params": {"period_ms": 200, "pace": true}},
            {"name": "slow", "kind": "processor", "parents": ["ticks"],
             "component": {"builtin": "videoflow.rs.processors.Hang"},
             "params": {"hang_on": [-1], "open_seconds": 40}},
            {"name": "sink", "kind": "consumer", "parents": ["slow"],
             "component": {"builtin": "videoflow.consumers.basic.VoidConsumer"}}
        ]}
    });
    n.apply(ns, &asset);
    n.apply(ns, &slow);

    let degraded = n.wait_flow(
        ns,
        "needs-asset",
        "Degraded with the worker's record",
        |f| {
            let c = condition(f, "Degraded").filter(|c| c["status"] == "True")?;
            let node = f["status"]["nodes"]
                .as_array()?
                .iter()
                .find(|x| x["name"] == "model")?;
            node["lastTermination"]["code"].as_str()?;
            Some((c.clone(), node["lastTermination"].clone()))
        },
    );
    let (cond, last) = degraded;
    eprintln!("needs-asset: Degraded: {}", cond["message"]);
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["code"], "VF_RESOURCE_UNAVAILABLE", "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("/models/detector.onnx")),
        "{last}"
    );
    assert!(
        last["remedy"].as_str().is_some_and(|r| !r.is_empty()),
        "{last}"
    );
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.contains("VF_RESOURCE_UNAVAILABLE")),
        "{cond}"
    );

    n.wait_flow(ns, "slow-open", "Ready", |f| {
        condition(f, "Ready").filter(|c| c["status"] == "True")?;
        Some(())
    });
    let pod = get_json(
        n.kc(),
        &[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "videoflow.io/flow=slow-open,videoflow.io/node=slow",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"))["items"][0]
        .clone();
    let pod_name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Liveness ran on /healthz after the slow open() — twice, so not just once by chance —
    // and the container was never restarted.
    let probes = wait_for("two successful liveness probes of the slow node", || {
        let counts = probe_counts(&n, ns, &pod_name)?;
        let live = counts
            .get(&("Liveness".into(), "successful".into()))
            .copied()
            .unwrap_or(0);
        if live >= 2 {
            Ok(Some(counts))
        } else {
            Err(format!("{counts:?}"))
        }
    });
    eprintln!("slow-open: the kubelet's probes of {pod_name}: {probes:?}");
    let count = |t: &str, r: &str| probes.get(&(t.into(), r.into())).copied().unwrap_or(0);
    assert!(
        count("Startup", "failed") >= 1,
        "open() was probed while it ran: {probes:?}"
    );
    assert!(count("Startup", "successful") >= 1, "{probes:?}");
    assert_eq!(count("Liveness", "failed"), 0, "{probes:?}");
    assert!(count("Readiness", "successful") >= 1, "{probes:?}");
    let pod =
        get_json(n.kc(), &["-n", ns, "get", "pod", &pod_name]).unwrap_or_else(|e| panic!("{e}"));
    let worker = &pod["status"]["containerStatuses"][0];
    assert_eq!(worker["restartCount"], 0, "{worker}");
    assert_eq!(worker["ready"], true, "{worker}");
}

/// The kubelet's probe counters for one pod's worker container, from its `/metrics/probes`
/// through the API server: (probe type, result) → count.
fn probe_counts(n: &Node, ns: &str, pod: &str) -> Result<BTreeMap<(String, String), u64>, String> {
    let text = kubectl(
        n.kc(),
        &[
            "get",
            "--raw",
            "/api/v1/nodes/vf-node-0/proxy/metrics/probes",
        ],
        None,
    )?;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("prober_probe_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| {
                    kv.trim_start_matches("prober_probe_total{")
                        .strip_prefix(&format!("{k}=\""))
                })
                .map(|v| v.trim_end_matches('}').trim_end_matches('"').to_owned())
        };
        if label("namespace").as_deref() != Some(ns)
            || label("pod").as_deref() != Some(pod)
            || label("container").as_deref() != Some("worker")
        {
            continue;
        }
        let (Some(t), Some(r)) = (label("probe_type"), label("result")) else {
            continue;
        };
        let v: f64 = value.parse().map_err(|e| format!("{line}: {e}"))?;
        // Counters are floats in the exposition format; these are small whole numbers.
        *out.entry((t, r)).or_insert(0) += v as u64;
    }
    Ok(out)
}
