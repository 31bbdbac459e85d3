//! The images and the operator on the test cluster's real node (`scripts/testenv run
//! --real-node`): the worker and operator images as `scripts/images` builds them from the real
//! Dockerfiles, their layout, their binaries running in real containers, and the operator
//! installed from its image by the chart exactly as the README's Kubernetes section says.
//!
//! Needs `scripts/images build` (`./scripts/test` and `scripts/install-deps` run it) and the
//! real node (`scripts/testenv build-node`); each missing piece fails with its remedy.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use videoflow_operator::render::pod::{STATIC_WORKER_BINARY, WORKER_BINARY};
use videoflow_testkit::control_plane::testenv_bin;
use videoflow_testkit::{ControlPlane, ControlPlaneOptions, NatsServer, manifest_dir};

const WAIT: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    manifest_dir(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A variable as `scripts/env.sh` (and `scripts/images path`) set it.
fn env_sh(expr: &str) -> String {
    let out = Command::new("bash")
        .args(["-c", &format!(". scripts/env.sh && {expr}")])
        .current_dir(repo())
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The image archives, fresh for this checkout.
fn archives() -> (PathBuf, PathBuf) {
    let fresh = Command::new("bash")
        .arg(repo().join("scripts/images"))
        .arg("check")
        .status()
        .expect("scripts/images check");
    assert!(
        fresh.success(),
        "the image archives are missing or older than the sources: run scripts/images build \
         (./scripts/test and scripts/install-deps run it)"
    );
    let dir = PathBuf::from(env_sh("scripts/images path"));
    (
        dir.join("videoflow-worker.tar"),
        dir.join("videoflow-operator.tar"),
    )
}

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
    let (worker, _) = archives();
    let image = read_image(&worker);
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
    // The entrypoint links FFmpeg: its libraries are in the image.
    assert!(is_dynamic(&file(WORKER_BINARY)));
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
    let (_, operator) = archives();
    let image = read_image(&operator);
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

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    videoflow_testkit::kubectl::kubectl(kubeconfig, args, stdin)
}

fn wait_for<T>(what: &str, f: impl FnMut() -> Result<Option<T>, String>) -> T {
    videoflow_testkit::kubectl::wait_for(what, WAIT, Duration::from_millis(500), f)
}

fn get_json(kc: &Path, args: &[&str]) -> Result<Value, String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(kc, &all, None)?).map_err(|e| e.to_string())
}

/// The cluster with its real node, the images loaded, kwok's node cordoned (so every pod runs
/// for real), and a nats-server the pods reach on the host's end of the node's link.
struct Node {
    nats: NatsServer,
    host_ip: String,
    plane: ControlPlane,
    // Held until the cluster is gone: one real node at a time (two at once on two busy cores
    // pushed a REALTIME sample's readiness past the deadline).
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_NODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn node() -> Node {
    let guard = ONE_NODE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (worker, operator) = archives();
    let plane = ControlPlane::start_with(ControlPlaneOptions { real_node: true })
        .unwrap_or_else(|e| panic!("{e}"));
    let host_ip = plane.real_node().expect("a real node").host_ip.clone();
    plane
        .load_images(&[&worker, &operator])
        .unwrap_or_else(|e| panic!("{e}"));
    kubectl(plane.kubeconfig(), &["cordon", "kwok-node-0"], None).unwrap_or_else(|e| panic!("{e}"));
    let nats = NatsServer::start_with(&["-a", "0.0.0.0"]).unwrap_or_else(|e| panic!("{e}"));
    Node {
        nats,
        host_ip,
        plane,
        _one_at_a_time: guard,
    }
}

impl Node {
    fn kc(&self) -> &Path {
        self.plane.kubeconfig()
    }
    fn nats_url(&self) -> String {
        format!("nats://{}:{}", self.host_ip, self.nats.port())
    }
    fn log(&self, component: &str) -> String {
        self.plane.log_tail(component, 40)
    }
}

/// A pod's final state once every container of it has terminated.
fn finished_pod(kc: &Path, ns: &str, name: &str) -> Value {
    wait_for(&format!("pod {ns}/{name} to finish"), || {
        let pod = get_json(kc, &["-n", ns, "get", "pod", name])?;
        let phase = pod["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if phase == "Succeeded" || phase == "Failed" {
            Ok(Some(pod))
        } else {
            Err(pod["status"].to_string())
        }
    })
}

#[test]
fn the_worker_image_runs_read_only_and_its_static_worker_runs_in_an_image_without_libc() {
    let n = node();
    let restricted = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}});
    // The init container copies the static worker as the operator renders it; the main
    // container is the pause image (one static file, no libc, no shell) running that copy.
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
                {"name": "video-worker", "image": "videoflow/videoflow-worker:0.1.0",
                 "imagePullPolicy": "Never", "securityContext": restricted, "args": ["--version"]}
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
    for c in ["video-worker", "copied"] {
        let logs =
            kubectl(n.kc(), &["logs", "images", "-c", c], None).unwrap_or_else(|e| panic!("{e}"));
        assert!(logs.contains("videoflow-worker"), "{c}: {logs}");
    }
}

/// The README's `helm install` and `rollout status` commands (continuations joined), with
/// `natsUrl` pointed at the test's server.
fn readme_install_commands(nats_url: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Kubernetes")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README: a ## Kubernetes section");
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut in_sh = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let part = line.trim_end();
        match part.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(part);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    let install: Vec<String> = commands
        .into_iter()
        .filter(|c| c.starts_with("helm install") || c.contains(" rollout status "))
        .map(|c| {
            c.split_whitespace()
                .map(|w| match w.strip_prefix("natsUrl=") {
                    Some(_) => format!("natsUrl={nats_url}"),
                    None => w.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        install.len(),
        2,
        "README: helm install and rollout status: {install:?}"
    );
    install
}

fn run_readme_command(n: &Node, command: &str) {
    let bin = testenv_bin().unwrap_or_else(|e| panic!("{e}"));
    let helm = PathBuf::from(env_sh("printf %s \"$VF_HELM\""));
    let dir = n.plane.state_dir().expect("state").join("readme-bin");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, target) in [("kubectl", bin.join("kubectl")), ("helm", helm)] {
        let _ = std::fs::remove_file(dir.join(name));
        std::os::unix::fs::symlink(&target, dir.join(name)).expect("symlink");
    }
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("timeout")
        .args(["180", "bash", "-c", command])
        .current_dir(repo())
        .env("KUBECONFIG", n.kc())
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    let mut out = String::new();
    let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut out));
    let mut err = String::new();
    let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut err));
    let status = child.wait().expect("wait");
    assert!(
        status.success(),
        "README command `{command}` failed ({status}):\n{out}\n{err}\nkubelet:\n{}",
        n.log("node-kubelet")
    );
}

#[test]
fn the_chart_installs_the_operator_from_its_image_and_a_batch_sample_completes_in_real_containers()
{
    let n = node();
    for command in readme_install_commands(&n.nats_url()) {
        run_readme_command(&n, &command);
    }
    let ns = "e2e-node";
    kubectl(n.kc(), &["create", "namespace", ns], None).unwrap_or_else(|e| panic!("{e}"));
    let operator_logs = || {
        kubectl(
            n.kc(),
            &[
                "-n",
                "videoflow-system",
                "logs",
                "deploy/videoflow-videoflow-operator",
                "--tail",
                "30",
            ],
            None,
        )
        .unwrap_or_else(|e| e)
    };
    // The BATCH sample completes. The REALTIME toy-fusion is not here yet: its finite
    // producers end, its `check` Deployment then exits 0 and is restarted into
    // CrashLoopBackOff (Degraded) — a defect real pods show and kwok cannot (docs/TESTING.md).
    let samples = [("toy-calculator", "Complete")];
    for (sample, _) in samples {
        let text = std::fs::read_to_string(repo().join(format!("config/samples/{sample}.yaml")))
            .expect("sample");
        kubectl(n.kc(), &["-n", ns, "apply", "-f", "-"], Some(&text))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for (sample, condition) in samples {
        wait_for(&format!("{sample} {condition} in real containers"), || {
            let flow = get_json(n.kc(), &["-n", ns, "get", "flow", sample])?;
            let reached = flow["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == condition && c["status"] == "True");
            if reached {
                Ok(Some(()))
            } else {
                let pods = kubectl(n.kc(), &["-n", ns, "get", "pods", "-o", "wide"], None)?;
                Err(format!(
                    "{}\n{pods}\noperator:\n{}",
                    flow["status"],
                    operator_logs()
                ))
            }
        });
    }
    // Every pod ran on the real node, and no worker was restarted by a probe.
    let pods = get_json(n.kc(), &["-n", ns, "get", "pods"]).unwrap_or_else(|e| panic!("{e}"));
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert!(!items.is_empty());
    for p in &items {
        assert_eq!(
            p["spec"]["nodeName"], "vf-node-0",
            "{}",
            p["metadata"]["name"]
        );
        for c in p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(c["restartCount"], 0, "{}: {c}", p["metadata"]["name"]);
        }
    }
    for (sample, _) in samples {
        kubectl(
            n.kc(),
            &["-n", ns, "delete", "flow", sample, "--timeout=170s"],
            None,
        )
        .unwrap_or_else(|e| panic!("{e}\noperator:\n{}", operator_logs()));
    }
    wait_for("the runs' pods and Jobs gone", || {
        let left = kubectl(
            n.kc(),
            &[
                "-n",
                ns,
                "get",
                "pods,jobs,deployments,statefulsets",
                "-o",
                "name",
            ],
            None,
        )?;
        Ok(left.trim().is_empty().then_some(()))
    });
}
