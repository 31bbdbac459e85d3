//! The test cluster's real node (`scripts/testenv run --real-node`, `scripts/testenv-node`):
//! the pinned kubelet and Debian's containerd run a container under the restricted security
//! context the operator renders, report its exit code and termination message as a kubelet
//! does, serve its logs to the API server, let it reach a server of the test on the host —
//! and leave nothing behind on the host when the process that owns the cluster is SIGKILLed.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use videoflow_testkit::{ControlPlane, ControlPlaneOptions, manifest_dir};

const WAIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    manifest_dir(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    videoflow_testkit::kubectl::kubectl(kubeconfig, args, stdin)
}

fn wait_for<T>(what: &str, f: impl FnMut() -> Result<Option<T>, String>) -> T {
    videoflow_testkit::kubectl::wait_for(what, WAIT, Duration::from_millis(250), f)
}

/// The probe program (`real_node/probe.c`) compiled static, as the only file of an image.
fn probe_image(dir: &Path) -> PathBuf {
    let bin = dir.join("probe");
    let src = repo().join("testkit/tests/real_node/probe.c");
    let status = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc (apt-get install gcc libc6-dev)");
    assert!(status.success(), "compiling {}", src.display());
    let tar = dir.join("probe.tar");
    let status = Command::new("bash")
        .arg(repo().join("scripts/testenv-node"))
        .args(["image", "videoflow.test/probe:1"])
        .arg(&tar)
        .args(["[\"/probe\"]", "65532:65532"])
        .arg(format!("{}:/probe", bin.display()))
        .status()
        .expect("scripts/testenv-node image");
    assert!(status.success(), "building the probe image");
    tar
}

fn pod_manifest(name: &str, node: &str, args: &[String]) -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": "videoflow.test/probe:1", "imagePullPolicy": "Never",
                "args": args,
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    })
    .to_string()
}

#[test]
fn a_restricted_container_exits_3_with_its_termination_message_and_reaches_the_host() {
    let plane = ControlPlane::start_with(ControlPlaneOptions { real_node: true })
        .unwrap_or_else(|e| panic!("{e}"));
    let node = plane.real_node().expect("a real node").clone();
    let work = plane.state_dir().expect("a state dir").join("probe-image");
    std::fs::create_dir_all(&work).expect("mkdir");
    plane
        .load_images(&[&probe_image(&work)])
        .unwrap_or_else(|e| panic!("{e}"));
    // A server of the test on the host's end of the node's link.
    let listener = TcpListener::bind((node.host_ip.as_str(), 0)).expect("bind on the link");
    let port = listener.local_addr().expect("addr").port();
    let accept = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let mut got = String::new();
        conn.read_to_string(&mut got).expect("read");
        got
    });
    let message = r#"{"code":"VF_BROKER_UNAVAILABLE","message":"probe"}"#;
    let args = [message.to_string(), node.host_ip.clone(), port.to_string()];
    let kc = plane.kubeconfig();
    kubectl(
        kc,
        &["apply", "-f", "-"],
        Some(&pod_manifest("probe", &node.name, &args)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let terminated = wait_for("the probe container terminated", || {
        let pod: Value =
            serde_json::from_str(&kubectl(kc, &["get", "pod", "probe", "-o", "json"], None)?)
                .map_err(|e| e.to_string())?;
        let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
        // The phase follows the container's state in a later status update.
        if t.is_null() || pod["status"]["phase"] == "Running" {
            Err(pod["status"].to_string())
        } else {
            Ok(Some((pod["status"]["phase"].clone(), t.clone())))
        }
    });
    assert_eq!(terminated.0, "Failed", "{terminated:?}");
    assert_eq!(terminated.1["exitCode"], 3, "{terminated:?}");
    assert_eq!(terminated.1["message"], message, "{terminated:?}");
    assert_eq!(accept.join().expect("server"), "hello from the pod\n");
    // Logs come from the kubelet, through the API server.
    let logs = kubectl(kc, &["logs", "probe"], None).unwrap_or_else(|e| panic!("{e}"));
    assert!(logs.contains("uid=65532 gid=65532"), "{logs}");
    assert!(logs.contains("rootfs-writable=0"), "{logs}");
    assert!(logs.contains("host-reached=1"), "{logs}");
}

/// What the real node may have made on the host: named after its supervisor's pid, its link
/// prefix and its state dir, so other engineers' runs on the same machine do not disturb it.
#[derive(Debug, PartialEq)]
struct Footprint {
    links: Vec<String>,
    routes: Vec<String>,
    cgroups: Vec<String>,
    mounts: Vec<String>,
    processes: Vec<String>,
    paths: Vec<String>,
    sysctls: Vec<String>,
}

fn footprint(supervisor: &str, link: &str, state: &Path) -> Footprint {
    let sh = |cmd: &str| -> Vec<String> {
        let out = Command::new("bash")
            .args(["-c", cmd])
            .output()
            .expect("bash");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let state = state.display().to_string();
    Footprint {
        links: sh(&format!("ip -o link | grep -F 'vfn{supervisor}' || true")),
        routes: sh(&format!("ip -4 route | grep -F '{link}.' || true")),
        cgroups: sh(&format!(
            "find /sys/fs/cgroup -maxdepth 6 -type d -name 'vf-testenv-node-{supervisor}'"
        )),
        mounts: sh(&format!("grep -F '{state}' /proc/self/mountinfo || true")),
        processes: processes_naming(&state),
        paths: sh(
            "ls -d /run/containerd /run/netns /var/lib/cni /var/lib/kubelet /etc/cni /opt/cni /opt/containerd 2>/dev/null || true",
        ),
        sysctls: sh(
            "cat /proc/sys/vm/overcommit_memory /proc/sys/vm/panic_on_oom /proc/sys/kernel/panic /proc/sys/kernel/panic_on_oops",
        ),
    }
}

/// The command lines of every process that names `text` in its arguments.
fn processes_naming(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(text) {
                found.push(cmdline);
            }
        }
    }
    found
}

#[test]
fn a_sigkilled_owner_leaves_nothing_of_the_node_on_the_host() {
    let dir = std::env::temp_dir().join(format!("vf-real-node-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let state = dir.join("state");
    let before_paths = footprint("none", "none", &state);
    // The owner stands for a test process: the script stops everything when it is gone.
    let mut owner = Command::new("sleep").arg("600").spawn().expect("sleep");
    let log = std::fs::File::create(dir.join("testenv.log")).expect("log");
    let mut testenv = Command::new("bash")
        .arg(repo().join("scripts/testenv"))
        .arg("run")
        .arg(&state)
        .args(["--real-node", "--owner-pid", &owner.id().to_string()])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("scripts/testenv run");
    let tail = || std::fs::read_to_string(dir.join("testenv.log")).unwrap_or_default();
    wait_for("the control plane with its real node", || {
        if let Ok(Some(status)) = testenv.try_wait() {
            panic!("scripts/testenv exited ({status}):\n{}", tail());
        }
        Ok(state.join("env").is_file().then_some(()))
    });
    let supervisor = std::fs::read_to_string(state.join("node/supervisor.pid"))
        .expect("supervisor.pid")
        .trim()
        .to_string();
    let link = std::fs::read_to_string(state.join("node/link"))
        .expect("link")
        .trim()
        .to_string();
    let kc = state.join("kubeconfig");
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
        "spec": {"nodeName": "vf-node-0", "containers": [{"name": "pause",
            "image": "registry.k8s.io/pause:3.10.2", "imagePullPolicy": "Never"}]}
    });
    kubectl(&kc, &["apply", "-f", "-"], Some(&pod.to_string())).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the pause pod running on the real node", || {
        let phase = kubectl(
            &kc,
            &["get", "pod", "sleeper", "-o", "jsonpath={.status.phase}"],
            None,
        )?;
        Ok((phase == "Running").then_some(()))
    });
    let during = footprint(&supervisor, &link, &state);
    // The probe sees the node while it runs (else its emptiness below would prove nothing).
    assert_eq!(during.links.len(), 1, "{during:?}");
    assert!(!during.cgroups.is_empty(), "{during:?}");
    assert!(!during.processes.is_empty(), "{during:?}");

    owner.kill().expect("SIGKILL the owner");
    let _ = owner.wait();
    let status = wait_for("scripts/testenv to stop", || {
        Ok(testenv.try_wait().ok().flatten())
    });
    assert!(status.code().is_some(), "{status}:\n{}", tail());
    let after = wait_for("the node's footprint to go", || {
        let f = footprint(&supervisor, &link, &state);
        Ok(f.processes.is_empty().then_some(f))
    });
    assert_eq!(
        after,
        Footprint {
            links: vec![],
            routes: vec![],
            cgroups: vec![],
            mounts: vec![],
            processes: vec![],
            paths: before_paths.paths.clone(),
            sysctls: before_paths.sysctls.clone(),
        },
        "\n{}",
        tail()
    );
    assert!(!state.join("node").exists(), "the node's state dir is left");
    let _ = std::fs::remove_dir_all(&dir);
}
