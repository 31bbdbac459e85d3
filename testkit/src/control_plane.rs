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

/// A running control plane (or an existing cluster), stopped on drop when this process
/// started it.
#[derive(Debug)]
pub struct ControlPlane {
    child: Option<Child>,
    dir: Option<PathBuf>,
    kubeconfig: PathBuf,
    audit_log: Option<PathBuf>,
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
            }),
            _ => Self::start(),
        }
    }

    /// Starts a fresh control plane in a private directory; ready when the API server answers
    /// `/readyz`, the controllers and the scheduler are healthy, kwok's node is Ready and the
    /// service-account controller has run.
    pub fn start() -> Result<Self, TestkitError> {
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
        let child = Command::new("bash")
            .arg(&script)
            .arg("run")
            .arg(&dir)
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
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
        };
        let env = dir.join("env");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if env.is_file() {
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
