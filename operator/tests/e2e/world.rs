//! The e2e world: a real control plane (or `VF_E2E_KUBECONFIG`'s cluster), a real
//! nats-server, the chart's CRD and RBAC applied with `helm template`, the pinned KEDA
//! ScaledObject CRD, and two `videoflow-operator run` processes under the chart's
//! ServiceAccount (a TokenRequest token in a kubeconfig of its own) electing a leader on the
//! chart's Lease, as the chart's two replicas do.
//!
//! Every wait is one [`wait_for`] with a generous deadline; a timeout panics with what was
//! awaited, what was last seen and the operator's log tail, never a fixed sleep standing in
//! for an assertion.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use kube::{Client, Config};
use serde_json::{Value, json};
use videoflow_testkit::{ControlPlane, NatsServer};

/// Where the chart installs the operator (its ServiceAccount lives here).
pub const OPERATOR_NS: &str = "videoflow-system";
/// The Helm release name; the chart names its objects `<release>-videoflow-operator`.
pub const RELEASE: &str = "videoflow";
/// The chart's ServiceAccount for that release.
pub const SERVICE_ACCOUNT: &str = "videoflow-videoflow-operator";
/// The field manager of what the tests themselves apply.
const TEST_MANAGER: &str = "videoflow-e2e";
/// The identities of the two operator replicas (their `POD_NAME`).
pub const REPLICAS: [&str; 2] = ["e2e-operator-a", "e2e-operator-b"];
/// The leader Lease: the chart names it after the release's full name.
pub const LEASE: &str = SERVICE_ACCOUNT;
/// The e2e replicas' lease timings (seconds): duration, renew deadline, retry period. Shorter
/// than the chart's 15/10/2 so a handover scenario is quick; still long enough that a busy
/// machine does not lose the lease between two renewals.
pub const LEASE_TIMINGS: (u64, u64, u64) = (8, 6, 1);

/// One operator process.
pub struct Replica {
    /// Its identity in the Lease.
    pub identity: &'static str,
    child: Child,
    log: PathBuf,
    metrics: std::net::SocketAddr,
}

/// What the scale bench reads of the Lease holder's process.
#[derive(Debug, Clone)]
pub struct ProcessFigures {
    /// Resident memory now, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident memory, KiB (`VmHWM`).
    pub peak_rss_kib: u64,
    /// Of the resident memory: anonymous (heap, stacks), KiB (`RssAnon`).
    pub rss_anon_kib: u64,
    /// Of the resident memory: file-backed (the binary's code and data), KiB (`RssFile`).
    pub rss_file_kib: u64,
    /// Threads (`Threads`).
    pub threads: u64,
    /// Its `/metrics` text.
    pub metrics: String,
}

/// How long any wait may take: generous, since two busy cores run the API server, the
/// controllers, kwok, the operator and the other tests at once.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The repository root.
pub fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Everything the scenarios share.
pub struct World {
    /// The async runtime every scenario blocks on.
    pub rt: tokio::runtime::Runtime,
    /// A `system:masters` client (the tests' own view; never the operator's).
    pub client: Client,
    /// The broker the operator renders into pods and reads demand from.
    pub nats: NatsServer,
    operators: std::sync::Mutex<Vec<Replica>>,
    sa_kubeconfig: PathBuf,
    dir: PathBuf,
    // Dropped last: everything above talks to it.
    plane: ControlPlane,
}

impl World {
    /// Starts (or connects to) everything; an error says which step failed and its remedy.
    pub fn start() -> Result<World, String> {
        let started = Instant::now();
        let plane = ControlPlane::start_or_existing().map_err(|e| e.to_string())?;
        eprintln!(
            "e2e: control plane ready in {:.1} s ({})",
            started.elapsed().as_secs_f64(),
            plane.kubeconfig().display()
        );
        let nats = NatsServer::start().map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!("vf-e2e-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let admin = Kubeconfig::read_from(plane.kubeconfig())
            .map_err(|e| format!("reading {}: {e}", plane.kubeconfig().display()))?;
        let client = rt.block_on(async {
            let config =
                Config::from_custom_kubeconfig(admin.clone(), &KubeConfigOptions::default())
                    .await
                    .map_err(|e| format!("kubeconfig: {e}"))?;
            Client::try_from(config).map_err(|e| format!("client: {e}"))
        })?;
        if plane.is_existing() {
            uninstall_leftover_release(plane.kubeconfig())?;
        }
        let sa_kubeconfig = dir.join("operator.kubeconfig");
        rt.block_on(install(&client, &admin, &sa_kubeconfig))?;
        let mut operators = Vec::new();
        for identity in REPLICAS {
            let replica = spawn_replica(&dir, &sa_kubeconfig, &nats.url(), identity)?;
            // Stopped with the control plane even if this process is killed before its drop.
            plane.adopt(replica.child.id()).map_err(|e| e.to_string())?;
            operators.push(replica);
        }
        eprintln!(
            "e2e: chart RBAC and CRDs applied, operators {REPLICAS:?} started in {:.1} s (logs: {})",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        Ok(World {
            rt,
            client,
            nats,
            operators: std::sync::Mutex::new(operators),
            sa_kubeconfig,
            dir,
            plane,
        })
    }

    /// The control plane (for its audit log and component logs).
    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// This run's scratch directory (removed on drop unless `VF_TESTENV_KEEP` is set).
    pub fn scratch_dir(&self) -> &Path {
        &self.dir
    }

    /// The last `n` lines of each operator replica's log.
    pub fn operator_tail(&self, n: usize) -> String {
        let Ok(operators) = self.operators.lock() else {
            return String::new();
        };
        operators
            .iter()
            .map(|r| format!("[{}]\n{}", r.identity, tail(&r.log, n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every replica's log, whole (the secret scan reads them).
    pub fn operator_logs(&self) -> String {
        REPLICAS.iter().map(|r| self.operator_log(r)).collect()
    }

    /// The whole log of the replica `identity`.
    pub fn operator_log(&self, identity: &str) -> String {
        let Ok(operators) = self.operators.lock() else {
            return String::new();
        };
        operators
            .iter()
            .find(|r| r.identity == identity)
            .map(|r| std::fs::read_to_string(&r.log).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Per replica "running", or how the process exited (a scenario's failure names it).
    pub fn operator_state(&self) -> String {
        let Ok(mut operators) = self.operators.lock() else {
            return "unknown (lock poisoned)".to_owned();
        };
        operators
            .iter_mut()
            .map(|r| {
                let state = match r.child.try_wait() {
                    Ok(None) => "running".to_owned(),
                    Ok(Some(status)) => format!("exited ({status})"),
                    Err(e) => format!("unknown ({e})"),
                };
                format!("{}: {state}", r.identity)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The process figures of the replica `identity`: memory from `/proc`, and its metrics.
    pub async fn figures(&self, identity: &str) -> Result<ProcessFigures, String> {
        let (pid, addr) = {
            let operators = self.operators.lock().map_err(|_| "lock")?;
            let r = operators
                .iter()
                .find(|r| r.identity == identity)
                .ok_or_else(|| format!("no replica {identity}"))?;
            (r.child.id(), r.metrics)
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let metrics = http_get(addr, "/metrics").await?;
        Ok(ProcessFigures {
            rss_kib: kib("VmRSS:"),
            peak_rss_kib: kib("VmHWM:"),
            rss_anon_kib: kib("RssAnon:"),
            rss_file_kib: kib("RssFile:"),
            threads: kib("Threads:"),
            metrics,
        })
    }

    /// SIGKILLs the replica `identity` (no release of its Lease: a crash).
    pub fn kill_replica(&self, identity: &str) {
        let mut operators = self.operators.lock().expect("operators");
        let r = operators
            .iter_mut()
            .find(|r| r.identity == identity)
            .unwrap_or_else(|| panic!("no replica {identity}"));
        let _ = r.child.kill();
        let _ = r.child.wait();
    }

    /// Starts the replica `identity` again (after [`Self::kill_replica`]); its log continues.
    pub fn restart_replica(&self, identity: &'static str) {
        let mut operators = self.operators.lock().expect("operators");
        let replica = spawn_replica(&self.dir, &self.sa_kubeconfig, &self.nats.url(), identity)
            .expect("respawning the operator");
        let _ = self.plane.adopt(replica.child.id());
        let slot = operators
            .iter_mut()
            .find(|r| r.identity == identity)
            .unwrap_or_else(|| panic!("no replica {identity}"));
        *slot = replica;
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let operators = match self.operators.get_mut() {
            Ok(operators) => operators,
            Err(poisoned) => poisoned.into_inner(),
        };
        // SIGTERM first: the leader drains in-flight reconciles and releases its Lease.
        for r in operators.iter() {
            let _ = Command::new("kill")
                .args(["-TERM", &r.child.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for r in operators.iter_mut() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = r.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
        if std::env::var_os("VF_TESTENV_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("e2e: kept the operator's log in {}", self.dir.display());
        }
    }
}

/// The chart's CRD and RBAC, the KEDA CRD, the operator's namespace and its token kubeconfig.
async fn install(client: &Client, admin: &Kubeconfig, sa_kubeconfig: &Path) -> Result<(), String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}});
    namespaces
        .patch(
            OPERATOR_NS,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&ns),
        )
        .await
        .map_err(|e| format!("creating namespace {OPERATOR_NS}: {e}"))?;

    // The chart as a platform engineer installs it, minus the operator's own Deployment and
    // metrics Service: the operator runs here as a process, under the same ServiceAccount.
    // With the ownership metadata `helm install` writes, so that the README scenario's
    // `helm install` (the README as written: same release, same namespace) adopts these
    // objects instead of refusing them as "exists and cannot be imported into the current
    // release"; its adoption patch is empty, since these are the same rendered objects.
    let chart = helm_template()?;
    for doc in &chart {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if matches!(kind, "Deployment" | "Service") {
            continue;
        }
        let mut doc = doc.clone();
        let meta = &mut doc["metadata"];
        meta["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
        meta["annotations"]["meta.helm.sh/release-name"] = json!(RELEASE);
        meta["annotations"]["meta.helm.sh/release-namespace"] = json!(OPERATOR_NS);
        apply_value(client, &doc).await?;
    }
    let keda = std::fs::read_to_string(repo_root().join("config/keda/scaledobjects.keda.sh.yaml"))
        .map_err(|e| format!("reading config/keda/scaledobjects.keda.sh.yaml: {e}"))?;
    let keda: Value = serde_yaml::from_str(&keda).map_err(|e| format!("KEDA CRD: {e}"))?;
    apply_value(client, &keda).await?;
    for crd in ["flows.videoflow.io", "scaledobjects.keda.sh"] {
        wait_crd_established(client, crd).await?;
    }

    // A token of the chart's ServiceAccount, as the kubelet would mount into its pod.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), OPERATOR_NS);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(6 * 3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = sas
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("TokenRequest for {OPERATOR_NS}/{SERVICE_ACCOUNT}: {e}"))?
        .status
        .map(|s| s.token)
        .ok_or("TokenRequest returned no token")?;
    let cluster = current_cluster(admin)?;
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": SERVICE_ACCOUNT}}],
        "current-context": "e2e",
    });
    std::fs::write(sa_kubeconfig, kubeconfig.to_string())
        .map_err(|e| format!("writing {}: {e}", sa_kubeconfig.display()))
}

/// The admin kubeconfig's current cluster entry (server and CA), as JSON.
fn current_cluster(admin: &Kubeconfig) -> Result<Value, String> {
    let context = admin
        .current_context
        .as_deref()
        .and_then(|name| admin.contexts.iter().find(|c| c.name == name))
        .and_then(|c| c.context.as_ref())
        .ok_or("the kubeconfig has no current context")?;
    let cluster = admin
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or("the kubeconfig's current cluster is missing")?;
    serde_json::to_value(cluster).map_err(|e| e.to_string())
}

/// The pinned helm (`$VF_HELM`, else where scripts/install-deps puts it).
pub fn helm_path() -> PathBuf {
    std::env::var_os("VF_HELM").map_or_else(
        || {
            let cache = std::env::var_os("VF_CACHE").map_or_else(
                || {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/videoflow")
                },
                PathBuf::from,
            );
            cache.join("tools/bin/helm")
        },
        PathBuf::from,
    )
}

/// An existing cluster may hold the release a previous run's README scenario installed: its
/// `helm install` would then refuse the name. Uninstalled before the set-up re-applies the
/// chart's RBAC (the chart keeps its CRD, and so every Flow, on uninstall).
fn uninstall_leftover_release(kubeconfig: &Path) -> Result<(), String> {
    let helm = helm_path();
    let run = |args: &[&str]| {
        Command::new(&helm)
            .args(args)
            .args(["--namespace", OPERATOR_NS])
            .env("KUBECONFIG", kubeconfig)
            .output()
            .map_err(|e| {
                format!(
                    "running {}: {e}; run scripts/install-deps (it installs the pinned helm)",
                    helm.display()
                )
            })
    };
    if !run(&["status", RELEASE])?.status.success() {
        return Ok(());
    }
    let out = run(&["uninstall", RELEASE, "--wait", "--timeout", "2m"])?;
    if out.status.success() {
        eprintln!("e2e: uninstalled the release {OPERATOR_NS}/{RELEASE} of a previous run");
        Ok(())
    } else {
        Err(format!(
            "helm uninstall {RELEASE} (left by a previous run) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `helm template` of the chart (the pinned helm), every document parsed.
fn helm_template() -> Result<Vec<Value>, String> {
    let helm = helm_path();
    let out = Command::new(&helm)
        .args([
            "template",
            RELEASE,
            "charts/videoflow-operator",
            "--namespace",
            OPERATOR_NS,
        ])
        .current_dir(repo_root())
        .output()
        .map_err(|e| {
            format!(
                "running {}: {e}; run scripts/install-deps (it installs the pinned helm)",
                helm.display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "helm template failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("chart YAML: {e}"))?;
        if value.is_object() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// The dynamic API of a kind, resolved by discovery.
pub async fn dynamic_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Result<Api<DynamicObject>, String> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("discovering {api_version} {kind}: {e}"))?;
    Ok(match (caps.scope, namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Namespaced, None) => Api::all_with(client.clone(), &resource),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    })
}

/// Server-side applies one object (its namespace from its metadata).
pub async fn apply_value(client: &Client, doc: &Value) -> Result<DynamicObject, String> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let api = dynamic_api(
        client,
        api_version,
        kind,
        doc["metadata"]["namespace"].as_str(),
    )
    .await?;
    api.patch(
        name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .map_err(|e| format!("applying {kind}/{name}: {e}"))
}

async fn wait_crd_established(client: &Client, name: &str) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    try_wait_for(
        &format!("CRD {name} to be Established"),
        DEADLINE,
        || async {
            let crd = found(crds.get_opt(name).await)?;
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                Ok(())
            } else {
                let seen: Vec<String> = conditions
                    .iter()
                    .map(|c| format!("{}={}", c.type_, c.status))
                    .collect();
                Err(format!("conditions {seen:?}"))
            }
        },
    )
    .await
}

/// Starts one operator replica as the chart runs it (leader election on the chart's Lease),
/// its log appended to `<dir>/operator-<identity>.log`.
fn spawn_replica(
    dir: &Path,
    kubeconfig: &Path,
    nats_url: &str,
    identity: &'static str,
) -> Result<Replica, String> {
    let log = dir.join(format!("operator-{identity}.log"));
    // A port free now, for the metrics endpoint the scale bench reads.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))?;
    let child = spawn_operator(kubeconfig, nats_url, &log, identity, metrics)?;
    Ok(Replica {
        identity,
        child,
        log,
        metrics,
    })
}

/// A plain HTTP/1.0 GET on loopback; the body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .await
        .map_err(|e| e.to_string())?;
    Ok(text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default())
}

fn spawn_operator(
    kubeconfig: &Path,
    nats_url: &str,
    log: &Path,
    identity: &str,
    metrics: std::net::SocketAddr,
) -> Result<Child, String> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("opening {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    // The scale bench measures a release build: `VF_E2E_OPERATOR_BIN` names it.
    let bin = std::env::var_os("VF_E2E_OPERATOR_BIN")
        .filter(|b| !b.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_videoflow-operator")),
            PathBuf::from,
        );
    let mut cmd = Command::new(bin);
    cmd.args([
        "run",
        "--nats-url",
        nats_url,
        "--metrics-addr",
        &metrics.to_string(),
        // Demand reads every few seconds, so a scenario sees the observer's writes too.
        "--demand-interval-seconds",
        "5",
        // An unschedulable pod stalls its Flow after 5 s, so the Stalled scenario is quick.
        "--unschedulable-grace-seconds",
        "5",
        "--leader-election-namespace",
        OPERATOR_NS,
        "--leader-election-lease",
        LEASE,
    ])
    .args([
        "--leader-election-lease-duration-seconds".to_owned(),
        LEASE_TIMINGS.0.to_string(),
        "--leader-election-renew-deadline-seconds".to_owned(),
        LEASE_TIMINGS.1.to_string(),
        "--leader-election-retry-period-seconds".to_owned(),
        LEASE_TIMINGS.2.to_string(),
    ])
    .env("KUBECONFIG", kubeconfig)
    .env("POD_NAME", identity)
    .env(
        "RUST_LOG",
        std::env::var("VF_E2E_OPERATOR_LOG").unwrap_or_else(|_| "info".to_owned()),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::from(out))
    .stderr(Stdio::from(err));
    // Whatever the developer's shell exports must not reconfigure the operator under test.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("VF_OPERATOR_") {
            cmd.env_remove(key);
        }
    }
    cmd.spawn()
        .map_err(|e| format!("spawning videoflow-operator: {e}"))
}

fn tail(path: &Path, n: usize) -> String {
    let Ok(f) = File::open(path) else {
        return String::new();
    };
    let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// Scenario helpers.

/// A fresh namespace for one scenario (scenarios run in parallel and never share one),
/// suffixed with this process id so runs against an existing cluster never meet a previous
/// run's leftovers.
pub async fn namespace(client: &Client, base: &str) -> String {
    let name = format!("{base}-{}", std::process::id());
    let name = name.as_str();
    let doc = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    apply_value(client, &doc)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The service-account admission plugin refuses pods until `default` exists.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_for(
        &format!("ServiceAccount {name}/default"),
        DEADLINE,
        || async { found(sas.get_opt("default").await) },
    )
    .await;
    name.to_owned()
}

/// The Flow API as dynamic objects (status read as JSON).
pub fn flows(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<videoflow_operator::Flow>(&());
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Applies a Flow manifest (YAML text) into `ns`; returns its name.
pub async fn apply_flow(client: &Client, ns: &str, yaml: &str) -> String {
    let mut doc: Value = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("Flow YAML: {e}"));
    doc["metadata"]["namespace"] = json!(ns);
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("the Flow has no name"))
        .to_owned();
    flows(client, ns)
        .patch(
            &name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&doc),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Flow {ns}/{name}: {e}"));
    name
}

/// Deletes a Flow (background propagation, as kubectl does).
pub async fn delete_flow(client: &Client, ns: &str, name: &str) {
    flows(client, ns)
        .delete(name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("deleting Flow {ns}/{name}: {e}"));
}

/// The Flow as JSON, or `None` once it is gone.
pub async fn get_flow(client: &Client, ns: &str, name: &str) -> Option<Value> {
    flows(client, ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading Flow {ns}/{name}: {e}"))
        .map(|f| serde_json::to_value(f).unwrap_or(Value::Null))
}

/// A condition of a Flow's status: `(status, reason, message)`.
pub fn condition(flow: &Value, type_: &str) -> Option<(String, String, String)> {
    flow["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("status"), s("reason"), s("message"))
        })
}

/// Whether the Flow's condition `type_` has status `want`.
pub fn has_condition(flow: &Value, type_: &str, want: &str) -> bool {
    condition(flow, type_).is_some_and(|(s, _, _)| s == want)
}

/// Polls `probe` every 250 ms until it returns `Ok`, for at most `deadline`; then fails
/// naming `what` and the last state the probe saw (its `Err`).
pub async fn try_wait_for<T, F, Fut>(
    what: &str,
    deadline: Duration,
    mut probe: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let until = Instant::now() + deadline;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(seen) if Instant::now() >= until => {
                return Err(format!(
                    "timed out after {deadline:?} waiting for {what}; last seen: {seen}"
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// [`try_wait_for`] for a scenario: a timeout panics with what was awaited and last seen.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    try_wait_for(what, deadline, probe)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A `get_opt` answer as a [`wait_for`] probe's: the object, or what was seen instead.
pub fn found<K>(got: kube::Result<Option<K>>) -> Result<K, String> {
    match got {
        Ok(Some(object)) => Ok(object),
        Ok(None) => Err("not found".to_owned()),
        Err(e) => Err(format!("reading it failed: {e}")),
    }
}

/// Waits until the Flow satisfies `pred` (described by `what`); on timeout panics with its
/// last status.
pub async fn wait_flow(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(&format!("Flow {ns}/{name}: {what}"), DEADLINE, || async {
        match get_flow(client, ns, name).await {
            Some(f) if pred(&f) => Ok(f),
            Some(f) => Err(format!(
                "status:\n{}",
                serde_json::to_string_pretty(&f["status"]).unwrap_or_default()
            )),
            None => Err("no such Flow".to_owned()),
        }
    })
    .await
}

/// Waits until the Flow's condition `type_` has status `want` (e.g. `Ready`, `True`).
pub async fn wait_condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    want: &str,
) -> Value {
    wait_flow(client, ns, name, &format!("{type_}={want}"), |f| {
        has_condition(f, type_, want)
    })
    .await
}

/// The condition a Flow of `flow_type` ends its run with: `Complete` for a batch flow (its
/// Jobs completed), `Ready` for a realtime one (its workloads are up).
pub fn end_condition(flow_type: &str) -> &'static str {
    if flow_type == "batch" {
        "Complete"
    } else {
        "Ready"
    }
}

/// Waits until no object (pods included) in `ns` matches `selector` any more; on timeout
/// panics naming `what` and the objects left.
pub async fn wait_gone(client: &Client, ns: &str, selector: &str, what: &str) {
    wait_for(what, DEADLINE, || async {
        let left = labelled(client, ns, selector, true).await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left: {left:?}"))
        }
    })
    .await;
}

/// Waits for the `TornDown` Event of Flow `flow` (published once the teardown Job completed);
/// on timeout panics with the reasons of the Events seen about it.
pub async fn wait_torn_down(client: &Client, ns: &str, flow: &str) -> Value {
    let events = kind_api(client, "events.k8s.io/v1", "Event", Some(ns)).await;
    wait_for(
        &format!("the TornDown event of Flow {ns}/{flow}"),
        DEADLINE,
        || async {
            let about: Vec<Value> = list_json(&events, &ListParams::default())
                .await?
                .into_iter()
                .filter(|e| e["regarding"]["name"] == flow)
                .collect();
            about
                .iter()
                .find(|e| e["reason"] == "TornDown")
                .cloned()
                .ok_or_else(|| {
                    let reasons: Vec<&str> = about
                        .iter()
                        .map(|e| e["reason"].as_str().unwrap_or_default())
                        .collect();
                    format!("events about it: {reasons:?}")
                })
        },
    )
    .await
}

/// The objects `api` lists with `params`, as JSON (for a [`wait_for`] probe: a failed list is
/// what it saw).
pub async fn list_json(
    api: &Api<DynamicObject>,
    params: &ListParams,
) -> Result<Vec<Value>, String> {
    let list = api
        .list(params)
        .await
        .map_err(|e| format!("listing {}: {e}", api.resource_url()))?;
    Ok(list
        .items
        .iter()
        .map(|o| serde_json::to_value(o).unwrap_or_default())
        .collect())
}

/// [`dynamic_api`] for a scenario: a discovery failure panics.
pub async fn kind_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    dynamic_api(client, api_version, kind, namespace)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The kinds the operator creates, as (apiVersion, kind).
pub const CHILD_KINDS: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("batch/v1", "Job"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("keda.sh/v1alpha1", "ScaledObject"),
];

/// Every object of `kinds` in `ns` whose labels match `selector`, as `Kind/name`.
pub async fn labelled(client: &Client, ns: &str, selector: &str, pods: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut kinds: Vec<(&str, &str)> = CHILD_KINDS.to_vec();
    if pods {
        kinds.push(("v1", "Pod"));
    }
    for (api_version, kind) in kinds {
        let api = kind_api(client, api_version, kind, Some(ns)).await;
        let list = api
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap_or_else(|e| panic!("listing {kind} in {ns}: {e}"));
        for o in list {
            out.insert(format!("{kind}/{}", o.metadata.name.unwrap_or_default()));
        }
    }
    out
}
