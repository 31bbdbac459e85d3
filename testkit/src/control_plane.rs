//! A real Kubernetes control plane for end-to-end tests: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok (fake nodes whose pods "run" by stages),
//! started on free loopback ports by `scripts/testenv run`, the same script a person runs by
//! hand, so there is one way to start it.
//!
//! Or an existing cluster: when `VF_E2E_KUBECONFIG` names a kubeconfig, nothing is started and
//! the tests run against that cluster (it must have kwok-managed nodes and the stages of
//! `scripts/testenv` for the pod-lifecycle cases; see docs/TESTING.md).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TestkitError;
use videoflow_services::temp_dir;

/// A cold start waits for etcd, the API server's post-start hooks, the controllers and kwok's
/// node on a busy machine; a minute is typical, three is the bound.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the script gets to stop everything on SIGTERM before its process group is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The variable naming an existing cluster's kubeconfig; when set, nothing is started.
pub const EXISTING_KUBECONFIG_VAR: &str = "VF_E2E_KUBECONFIG";

/// What to start beside the control plane and kwok's fake node.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options {
    /// A real node (`scripts/testenv-node`): the pinned kubelet with Debian's containerd,
    /// runc and CNI plugins in private namespaces, registered as `vf-node-0`.
    pub real_node: bool,
}

/// The real node of a control plane started with [`Options::real_node`].
#[derive(Debug, Clone)]
pub struct RealNode {
    /// The node's name (`vf-node-0`).
    pub name: String,
    /// The host's end of the node's link: where pods reach a server of the test, which must
    /// listen on this address (or all addresses) to be reachable.
    pub host_ip: String,
}

/// A running control plane (or an existing cluster), stopped on drop when this process
/// started it.
#[derive(Debug)]
pub struct ControlPlane {
    child: Option<Child>,
    dir: Option<PathBuf>,
    kubeconfig: PathBuf,
    audit_log: Option<PathBuf>,
    real_node: Option<RealNode>,
}

impl ControlPlane {
    /// The cluster of `VF_E2E_KUBECONFIG` when set, else a fresh control plane from the cached
    /// binaries (`scripts/testenv build`). Missing binaries are an error naming the remedy.
    pub fn start_or_existing() -> Result<Self, TestkitError> {
        match std::env::var_os(EXISTING_KUBECONFIG_VAR) {
            Some(path) if !path.is_empty() => Ok(ControlPlane {
                child: None,
                dir: None,
                kubeconfig: PathBuf::from(path),
                audit_log: None,
                real_node: None,
            }),
            _ => Self::start(),
        }
    }

    /// Starts a fresh control plane in a private directory; ready when the API server answers
    /// `/readyz`, the controllers and the scheduler are healthy, kwok's node is Ready and the
    /// service-account controller has run.
    pub fn start() -> Result<Self, TestkitError> {
        Self::start_with(Options::default())
    }

    /// [`ControlPlane::start`] with what `options` adds; with a real node, ready once that
    /// node is Ready as well.
    pub fn start_with(options: Options) -> Result<Self, TestkitError> {
        Self::launch(options, false)
    }

    /// [`ControlPlane::start`] with KEDA (`scripts/testenv run --keda`): KEDA's operator and
    /// metrics API server built from the pinned release (`scripts/testenv build-keda`), the
    /// release's CRDs, `external.metrics.k8s.io` served through the API server's aggregation
    /// layer, and the HPA controller with a short sync period and downscale window. Ready
    /// once the aggregator answers for `external.metrics.k8s.io`.
    pub fn start_with_keda() -> Result<Self, TestkitError> {
        Self::launch(Options::default(), true)
    }

    fn launch(options: Options, keda: bool) -> Result<Self, TestkitError> {
        let script = script();
        if !script.is_file() {
            return Err(TestkitError::Io {
                what: format!("control plane: finding {}", script.display()),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        let parent = temp_dir("vf-testenv")?;
        // The script wants an empty (or absent) state directory of its own.
        let dir = parent.join("state");
        let log = parent.join("testenv.log");
        let io = |what: &str| {
            let what = format!("control plane: {what}");
            move |source| TestkitError::Io { what, source }
        };
        let out = File::create(&log).map_err(io("creating its log"))?;
        let err = out.try_clone().map_err(io("creating its log"))?;
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .arg("run")
            .arg(&dir)
            .arg("--owner-pid")
            .arg(std::process::id().to_string());
        if options.real_node {
            command.arg("--real-node");
        }
        if keda {
            command.arg("--keda");
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // Its own process group, so a stop that times out can kill every component.
            .process_group(0)
            .spawn()
            .map_err(io("spawning scripts/testenv"))?;
        let mut plane = ControlPlane {
            child: Some(child),
            dir: Some(parent),
            kubeconfig: dir.join("kubeconfig"),
            audit_log: Some(dir.join("audit.log")),
            real_node: None,
        };
        let env = dir.join("env");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if env.is_file() {
                let vars = std::fs::read_to_string(&env).map_err(io("reading its env file"))?;
                plane.real_node = real_node_of(&vars);
                return Ok(plane);
            }
            let exited = plane
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= deadline {
                return Err(TestkitError::ControlPlane {
                    why: match exited {
                        Some(status) => format!("scripts/testenv run exited ({status})"),
                        None => format!("not ready within {}s", READY_TIMEOUT.as_secs()),
                    },
                    log: tail(&log, 40),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The real node, when [`Options::real_node`] started one.
    pub fn real_node(&self) -> Option<&RealNode> {
        self.real_node.as_ref()
    }

    /// The script's state directory (component logs, `pki/`, the node's `node/`), only for a
    /// control plane started here.
    pub fn state_dir(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("state"))
    }

    /// Imports image archives (`docker save` or `scripts/testenv-node image` output) into the
    /// real node's containerd, as `ctr -n k8s.io images import` does.
    pub fn load_images(&self, archives: &[&Path]) -> Result<(), TestkitError> {
        let state = self.state_dir().ok_or_else(|| TestkitError::ControlPlane {
            why: "images can be loaded only into a real node started here".into(),
            log: String::new(),
        })?;
        let out = Command::new("bash")
            .arg(script().with_file_name("testenv-node"))
            .arg("load")
            .arg(&state)
            .args(archives)
            .output()
            .map_err(|source| TestkitError::Io {
                what: "scripts/testenv-node load".into(),
                source,
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(TestkitError::ControlPlane {
                why: format!("loading images into the real node ({})", out.status),
                log: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }

    /// The admin kubeconfig (`system:masters`), for the tests and for an operator process.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Whether this is an existing cluster (`VF_E2E_KUBECONFIG`) rather than one started here.
    pub fn is_existing(&self) -> bool {
        self.child.is_none()
    }

    /// The API server's audit log (JSON lines; requests of service accounts at `Metadata`
    /// level), only for a control plane started here.
    pub fn audit_log(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// Ties process `pid` (an operator under test) to this control plane: the script sends it
    /// SIGTERM before stopping the components, also when the test process died without
    /// dropping anything (SIGKILL, abort). No-op for an existing cluster.
    pub fn adopt(&self, pid: u32) -> Result<(), TestkitError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let path = dir.join("state").join("adopted.pids");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| TestkitError::Io {
                what: format!("control plane: opening {}", path.display()),
                source,
            })?;
        writeln!(f, "{pid}").map_err(|source| TestkitError::Io {
            what: format!("control plane: writing {}", path.display()),
            source,
        })
    }

    /// The last `n` lines of a component's log (`kube-apiserver`, `kwok`, `testenv`, ...),
    /// for failure messages; empty for an existing cluster.
    pub fn log_tail(&self, component: &str, n: usize) -> String {
        let Some(dir) = &self.dir else {
            return String::new();
        };
        let path = if component == "testenv" {
            dir.join("testenv.log")
        } else {
            dir.join("state")
                .join("logs")
                .join(format!("{component}.log"))
        };
        tail(&path, n)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGTERM: the script stops its components in order and exits.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
        if std::env::var_os("VF_TESTENV_KEEP").is_none()
            && let Some(dir) = &self.dir
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Where `scripts/testenv` keeps the pinned binaries (`kubectl` among them): `VF_TESTENV_BIN`
/// as `scripts/env.sh` sets it.
pub fn testenv_bin() -> Result<PathBuf, TestkitError> {
    let out = Command::new("bash")
        .args(["-c", ". \"$1\" && printf %s \"$VF_TESTENV_BIN\"", "bash"])
        .arg(script().with_file_name("env.sh"))
        .output()
        .map_err(|source| TestkitError::Io {
            what: "sourcing scripts/env.sh".into(),
            source,
        })?;
    if !out.status.success() || out.stdout.is_empty() {
        return Err(TestkitError::ControlPlane {
            why: "scripts/env.sh gave no VF_TESTENV_BIN".into(),
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).as_ref()))
}

/// The real node the env file names (`VF_TESTENV_NODE`, `VF_TESTENV_HOST_IP`), if any.
fn real_node_of(env: &str) -> Option<RealNode> {
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .map(|v| v.trim_matches(['\'', '"']).to_string())
    };
    Some(RealNode {
        name: var("VF_TESTENV_NODE")?,
        host_ip: var("VF_TESTENV_HOST_IP")?,
    })
}

/// `scripts/testenv` of this checkout, or `VF_TESTENV_SCRIPT`.
fn script() -> PathBuf {
    std::env::var_os("VF_TESTENV_SCRIPT").map_or_else(
        || crate::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("../scripts/testenv"),
        PathBuf::from,
    )
}

fn tail(path: &Path, n: usize) -> String {
    let Ok(f) = File::open(path) else {
        return String::new();
    };
    let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
