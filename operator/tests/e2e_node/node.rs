//! The test cluster with its real node, as the real-node scenarios use it: the images loaded,
//! kwok's node cordoned (every pod runs for real), a nats-server and a redis-server the pods
//! reach on the host's end of the node's link, the operator installed from its image by the
//! README's `helm install`, and the kubectl helpers the scenarios act through.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use videoflow_testkit::control_plane::testenv_bin;
use videoflow_testkit::{ControlPlane, ControlPlaneOptions, NatsServer, RedisServer, manifest_dir};

/// How long a scenario waits for one state (a Flow's condition, pods gone, a pod finished).
pub const WAIT: Duration = Duration::from_secs(240);

/// The checkout.
pub fn repo() -> PathBuf {
    manifest_dir(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A variable as `scripts/env.sh` (and `scripts/images path`) set it.
pub fn env_sh(expr: &str) -> String {
    let out = Command::new("bash")
        .args(["-c", &format!(". scripts/env.sh && {expr}")])
        .current_dir(repo())
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The image archives `scripts/images build` made.
pub struct Archives {
    /// `videoflow/videoflow-worker`.
    pub worker: PathBuf,
    /// `videoflow/videoflow-operator`.
    pub operator: PathBuf,
    /// `videoflow/sdk-python-examples` (Dockerfile.sdk-python).
    pub python: PathBuf,
}

/// The image archives, fresh for this checkout.
pub fn archives() -> Archives {
    let fresh = Command::new("bash")
        .arg(repo().join("scripts/images"))
        .arg("check")
        .status()
        .expect("scripts/images check");
    assert!(
        fresh.success(),
        "the image archives are missing or older than the sources: run scripts/images build \
         (./scripts/test runs it)"
    );
    let dir = PathBuf::from(env_sh("scripts/images path"));
    Archives {
        worker: dir.join("videoflow-worker.tar"),
        operator: dir.join("videoflow-operator.tar"),
        python: dir.join("sdk-python-examples.tar"),
    }
}

/// `kubectl --kubeconfig KC ARGS…`: its stdout or an error with its stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    videoflow_testkit::kubectl::kubectl(kubeconfig, args, stdin)
}

/// Polls `f` every half second until it yields, at most [`WAIT`].
pub fn wait_for<T>(what: &str, f: impl FnMut() -> Result<Option<T>, String>) -> T {
    videoflow_testkit::kubectl::wait_for(what, WAIT, Duration::from_millis(500), f)
}

/// `kubectl get … -o json`, parsed.
pub fn get_json(kc: &Path, args: &[&str]) -> Result<Value, String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(kc, &all, None)?).map_err(|e| e.to_string())
}

/// The condition `type_` of a Flow (or any object with `status.conditions`).
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The cluster with its real node, one at a time in this process (two at once on two busy
/// cores pushed a REALTIME sample's readiness past the deadline).
pub struct Node {
    /// The broker, listening on every address so pods reach it on the node's link.
    pub nats: NatsServer,
    /// A durable payload store on loopback and the node link.
    pub redis: RedisServer,
    /// The host's end of the node's link, where pods reach the test's servers.
    pub host_ip: String,
    /// The control plane and its real node.
    pub plane: ControlPlane,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_NODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh cluster with its real node, `images` loaded and kwok's node cordoned.
pub fn node(images: &[&Path]) -> Node {
    let guard = ONE_NODE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let plane = ControlPlane::start_with(ControlPlaneOptions { real_node: true })
        .unwrap_or_else(|e| panic!("{e}"));
    let host_ip = plane.real_node().expect("a real node").host_ip.clone();
    plane.load_images(images).unwrap_or_else(|e| panic!("{e}"));
    kubectl(plane.kubeconfig(), &["cordon", "kwok-node-0"], None).unwrap_or_else(|e| panic!("{e}"));
    let nats = NatsServer::start_with(&["-a", "0.0.0.0"]).unwrap_or_else(|e| panic!("{e}"));
    // Redis takes several addresses after one --bind; its protected mode refuses clients
    // from other addresses than loopback unless it has a password. A BATCH flow's payload
    // store must be durable (ADM-1: append-only file, no eviction), as the local runner's is.
    let redis = RedisServer::start_with(&[
        "--bind",
        "127.0.0.1",
        &host_ip,
        "--protected-mode",
        "no",
        "--appendonly",
        "yes",
        "--maxmemory-policy",
        "noeviction",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    Node {
        nats,
        redis,
        host_ip,
        plane,
        _one_at_a_time: guard,
    }
}

impl Node {
    /// The admin kubeconfig.
    pub fn kc(&self) -> &Path {
        self.plane.kubeconfig()
    }

    /// The broker's URL as pods reach it.
    pub fn nats_url(&self) -> String {
        format!("nats://{}:{}", self.host_ip, self.nats.port())
    }

    /// The payload store's URL as pods reach it.
    pub fn redis_url(&self) -> String {
        format!("redis://{}:{}/0", self.host_ip, self.redis.port())
    }

    /// A component's log tail (`node-kubelet`, `kube-apiserver`, …).
    pub fn log(&self, component: &str) -> String {
        self.plane.log_tail(component, 40)
    }

    /// A directory of the cluster's state (removed with it) that pods may mount as a
    /// `hostPath` and the worker's user (65532) may write.
    pub fn shared_dir(&self, name: &str) -> PathBuf {
        let dir = self.plane.state_dir().expect("state").join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut mode = std::fs::metadata(&dir).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o777);
        std::fs::set_permissions(&dir, mode).expect("chmod");
        dir
    }

    /// Installs the operator from its image exactly as the README's Kubernetes section says
    /// (`helm install`, then `kubectl rollout status`), with `natsUrl` the test's broker.
    pub fn install_operator(&self) {
        for command in readme_install_commands(&self.nats_url()) {
            self.run_readme_command(&command);
        }
    }

    /// The operator's log tail.
    pub fn operator_log(&self) -> String {
        kubectl(
            self.kc(),
            &[
                "-n",
                "videoflow-system",
                "logs",
                "deploy/videoflow-videoflow-operator",
                "--tail",
                "40",
            ],
            None,
        )
        .unwrap_or_else(|e| e)
    }

    /// Creates namespace `ns`.
    pub fn namespace(&self, ns: &str) {
        kubectl(self.kc(), &["create", "namespace", ns], None).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Applies a Flow (JSON) into `ns`.
    pub fn apply(&self, ns: &str, flow: &Value) {
        kubectl(
            self.kc(),
            &["-n", ns, "apply", "-f", "-"],
            Some(&flow.to_string()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The Flow once `check` accepts it; on the deadline, the panic shows its last status,
    /// the namespace's pods and the operator's log.
    pub fn wait_flow<T>(
        &self,
        ns: &str,
        flow: &str,
        what: &str,
        mut check: impl FnMut(&Value) -> Option<T>,
    ) -> T {
        wait_for(&format!("{ns}/{flow}: {what}"), || {
            let f = get_json(self.kc(), &["-n", ns, "get", "flow", flow])?;
            if let Some(v) = check(&f) {
                return Ok(Some(v));
            }
            let pods = kubectl(self.kc(), &["-n", ns, "get", "pods", "-o", "wide"], None)?;
            Err(format!(
                "{}\n{pods}\noperator:\n{}",
                f["status"],
                self.operator_log()
            ))
        })
    }

    /// The workload name of `node` in the Flow's status.
    pub fn workload(&self, ns: &str, flow: &str, node: &str) -> (String, String) {
        let f =
            get_json(self.kc(), &["-n", ns, "get", "flow", flow]).unwrap_or_else(|e| panic!("{e}"));
        let entry = f["status"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["name"] == node)
            .unwrap_or_else(|| panic!("{flow}: no status of node {node}: {}", f["status"]));
        (
            entry["workload"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase(),
            entry["workload"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    }

    /// Every log line of `node`'s worker containers (all its pods).
    pub fn node_logs(&self, ns: &str, flow: &str, node: &str) -> String {
        let (kind, name) = self.workload(ns, flow, node);
        kubectl(
            self.kc(),
            &[
                "-n",
                ns,
                "logs",
                &format!("{kind}/{name}"),
                "-c",
                "worker",
                "--all-pods=true",
                "--tail=-1",
            ],
            None,
        )
        .unwrap_or_else(|e| e)
    }

    fn run_readme_command(&self, command: &str) {
        let bin = testenv_bin().unwrap_or_else(|e| panic!("{e}"));
        let helm = PathBuf::from(env_sh("printf %s \"$VF_HELM\""));
        let dir = self.plane.state_dir().expect("state").join("readme-bin");
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
            .env("KUBECONFIG", self.kc())
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
            self.log("node-kubelet")
        );
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

/// A pod's final state once every container of it has terminated.
pub fn finished_pod(kc: &Path, ns: &str, name: &str) -> Value {
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

/// The names of every JetStream stream on the test's broker, read over the client protocol.
pub fn stream_names(nats: &NatsServer) -> Vec<String> {
    use futures::TryStreamExt;
    let url = nats.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = async_nats::connect(url).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        js.stream_names()
            .try_collect::<Vec<String>>()
            .await
            .expect("stream names")
    })
}
