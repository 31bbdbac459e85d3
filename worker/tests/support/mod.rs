//! Flow harness for end-to-end tests: a real nats-server (and redis-server when asked), the
//! flow provisioned in-process, one real `videoflow-worker` process per replica with exactly
//! the environment the control planes render, and helpers to wait, kill and read results.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use videoflow_core::compile::{CompiledFlow, compile};
use videoflow_core::load::parse_flow;
use videoflow_core::model::FlowDocument;
use videoflow_core::naming;
use videoflow_testkit::{NatsCluster, NatsServer, RedisServer};
use videoflow_worker::broker::{self, DurableRequest};
use videoflow_worker::config::WorkerConfig;
use videoflow_worker::provision::{node_vars, provision};

/// One running (or finished) worker process.
struct Proc {
    node: String,
    replica: i64,
    runtime: Runtime,
    child: Child,
    exit: Option<i32>,
}

/// Which worker runs a replica: ours, or the Python reference's `python -m videoflow.worker`
/// (videoflow 1.0.4 from `$VF_REF_PYTHON`, interop tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `videoflow-worker`.
    Rust,
    /// `python -m videoflow.worker` of the reference.
    Reference,
}

/// Who creates the flow's streams and durables before any worker starts (STREAM-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provisioner {
    /// `videoflow-worker provision`, our provision job (`admission::run_provision_job`).
    Rust,
    /// The reference's provision job, `python -m videoflow.provision`, fed the compiled
    /// `specs.json` as a control plane feeds it.
    Reference,
}

const REF_VERSION: &str = "1.0.4";

const REF_REMEDY: &str = "Install the Python reference with `./scripts/install-deps` (it creates \
    the private virtualenv $VF_REF_VENV with videoflow==1.0.4), then run the tests with \
    `source scripts/env.sh` so VF_REF_PYTHON points at it.";

/// The Python interpreter of the reference virtualenv: `$VF_REF_PYTHON`, else
/// `$VF_REF_VENV/bin/python`, else `$VF_CACHE/refvenv/bin/python`, else
/// `~/.cache/videoflow/refvenv/bin/python` (the defaults of `scripts/env.sh`). A missing
/// interpreter fails the test with the remedy; it never skips it.
pub fn reference_python() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let python = if let Some(p) = env("VF_REF_PYTHON") {
        PathBuf::from(p)
    } else if let Some(v) = env("VF_REF_VENV") {
        PathBuf::from(v).join("bin/python")
    } else {
        env("VF_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env("HOME").unwrap_or_default()).join(".cache/videoflow")
            })
            .join("refvenv/bin/python")
    };
    assert!(
        python.is_file(),
        "the Python reference videoflow=={REF_VERSION} is not installed: {} does not exist. \
         {REF_REMEDY}",
        python.display()
    );
    python
}

/// `tests/conformance`: the reference helpers and the Python twins of our test nodes
/// (`interop_nodes.py`), put on the reference worker's `PYTHONPATH`.
pub fn conformance_dir() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

/// The Python component SDK under test: this checkout's `sdk/python` (put on a component's
/// `PYTHONPATH`, so the SDK in the tree runs, not an installed copy).
pub fn sdk_dir() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("../sdk/python")
}

/// The SDK virtualenv's interpreter (protobuf and numpy): `$VF_SDK_PYTHON`, else
/// `$VF_CACHE/sdkvenv/bin/python`, else `~/.cache/videoflow/sdkvenv/bin/python` (the defaults
/// of `scripts/env.sh`). A missing one fails the test with the remedy; it never skips it.
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("VF_SDK_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("VF_CACHE").map(|c| PathBuf::from(c).join("sdkvenv/bin/python"))
        })
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/videoflow/sdkvenv/bin/python"))
        })
        .expect("VF_SDK_PYTHON, VF_CACHE or HOME");
    assert!(
        path.exists(),
        "{} not found: run scripts/install-deps (it creates the SDK venv with protobuf and numpy)",
        path.display()
    );
    path
}

/// The reference worker's `PYTHONPATH`: `tests/conformance` (the twins). OpenCV, which
/// 1.0.4's `videoflow.producers` imports at package import, is in the reference virtualenv
/// (scripts/reference-requirements.txt).
fn reference_pythonpath() -> String {
    conformance_dir().display().to_string()
}

/// The class the reference worker runs for `class`: the reference's own classes as they
/// are, our `videoflow.rs.*` test nodes as their Python twins in `interop_nodes.py` (same
/// parameters, same outputs, same sink records). `None`: no twin, the node cannot run on
/// the reference.
pub fn reference_class(class: &str) -> Option<String> {
    const TWINS: &[&str] = &[
        "videoflow.rs.consumers.JsonlSink",
        "videoflow.rs.producers.TickProducer",
        "videoflow.rs.producers.FailingProducer",
        "videoflow.rs.producers.SyntheticFrameProducer",
    ];
    if TWINS.contains(&class) {
        let short = class.rsplit('.').next().unwrap_or(class);
        return Some(format!("interop_nodes.{short}"));
    }
    (!class.starts_with("videoflow.rs.")).then(|| class.to_owned())
}

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Node name.
    pub node: String,
    /// Replica id.
    pub replica: i64,
    /// Exit status (`None` when killed by a signal).
    pub code: Option<i32>,
}

/// The broker a flow runs on: one server, or a routed JetStream cluster whose URL list names
/// every node (the client fails over between them).
pub enum Nats {
    /// One `nats-server -js`.
    Single(NatsServer),
    /// A three-node JetStream cluster ([`NatsCluster`]).
    Cluster(NatsCluster),
}

impl Nats {
    /// The URL a worker gets as `VF_NATS_URL` (a comma-separated list for a cluster).
    pub fn url(&self) -> String {
        match self {
            Nats::Single(s) => s.url(),
            Nats::Cluster(c) => c.url(),
        }
    }

    /// The cluster (panics on a single server: the test asked for the wrong harness).
    pub fn cluster(&mut self) -> &mut NatsCluster {
        match self {
            Nats::Cluster(c) => c,
            Nats::Single(_) => panic!("this flow runs on one nats-server, not a cluster"),
        }
    }

    /// A directory that lives as long as the broker (the first server's).
    fn dir(&self) -> &Path {
        match self {
            Nats::Single(s) => s.dir(),
            Nats::Cluster(c) => c.servers()[0].dir(),
        }
    }
}

/// A flow under test.
pub struct FlowHarness {
    pub nats: Nats,
    pub redis: Option<RedisServer>,
    pub dir: PathBuf,
    pub doc: FlowDocument,
    pub flow: CompiledFlow,
    procs: Vec<Proc>,
    runtime: tokio::runtime::Runtime,
}

impl FlowHarness {
    /// Starts the servers and compiles `yaml`. Placeholders: `{{DIR}}` (a private directory),
    /// `{{REDIS}}` (starts a redis-server and puts its URL there), `{{DURABLE_REDIS}}` (the
    /// same with `appendonly yes` and `noeviction`, a store admission reads back as durable,
    /// ADM-1).
    pub fn new(yaml: &str) -> Self {
        let nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
        Self::on(Nats::Single(nats), yaml)
    }

    /// [`FlowHarness::new`] on a three-node JetStream cluster: workers get the URL list of
    /// all three servers; a flow with `broker: {streamReplicas: 3}` gets R3 streams. Returns
    /// once the cluster's JetStream meta group has a leader.
    pub fn on_cluster(yaml: &str) -> Self {
        let cluster = NatsCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
        cluster
            .wait_for_meta_leader(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        Self::on(Nats::Cluster(cluster), yaml)
    }

    fn on(nats: Nats, yaml: &str) -> Self {
        let dir = nats.dir().join("flow");
        std::fs::create_dir_all(&dir).expect("flow dir");
        let redis = if yaml.contains("{{DURABLE_REDIS}}") {
            // `{{DURABLE_REDIS}}` syncs its AOF every second (Redis's default); a
            // `# vf-test: appendfsync always` line asks for a sync per write, so a SIGKILL
            // loses no acknowledged write.
            let fsync = if yaml.contains("# vf-test: appendfsync always") {
                "always"
            } else {
                "everysec"
            };
            Some(
                RedisServer::start_with(&[
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    fsync,
                    "--maxmemory-policy",
                    "noeviction",
                ])
                .unwrap_or_else(|e| panic!("{e}")),
            )
        } else {
            yaml.contains("{{REDIS}}")
                .then(|| RedisServer::start().unwrap_or_else(|e| panic!("{e}")))
        };
        let mut text = yaml.replace("{{DIR}}", &dir.display().to_string());
        if let Some(r) = &redis {
            text = text
                .replace("{{REDIS}}", &r.url())
                .replace("{{DURABLE_REDIS}}", &r.url());
        }
        let doc = parse_flow(&text).unwrap_or_else(|d| panic!("flow does not parse: {d:#?}"));
        let flow = compile(&doc).unwrap_or_else(|d| panic!("flow does not compile: {d:#?}"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        FlowHarness {
            nats,
            redis,
            dir,
            doc,
            flow,
            procs: Vec::new(),
            runtime,
        }
    }

    /// Creates every stream and durable before any worker runs (STREAM-7).
    pub fn provision(&self) {
        let url = self.nats.url();
        self.runtime.block_on(async {
            let b = broker::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            provision(&b, &self.doc, &self.flow)
                .await
                .unwrap_or_else(|e| panic!("{}", e.render()));
        });
    }

    /// Every node of the compiled flow with its replica count, in flow order.
    fn node_replicas(&self) -> Vec<(String, i64)> {
        self.flow
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.nb_tasks))
            .collect()
    }

    /// Waits until `node`'s data durable on `parent` holds a waiting pull request: its worker
    /// is bound and pulling, so a producer started next cannot publish past it. (A REALTIME
    /// stream keeps one message: whatever nobody was pulling for is replaced by the next.)
    pub fn wait_pulling(&self, node: &str, parent: &str, timeout: Duration) {
        let stream = naming::stream_name(&self.flow.flow_id, &self.flow.run_id, parent);
        let durable = naming::durable_name(node, parent);
        let b = self
            .runtime
            .block_on(broker::connect(&self.nats.url()))
            .unwrap_or_else(|e| panic!("{e}"));
        self.wait_until(&format!("{node} pulling from {parent}"), timeout, || {
            self.runtime.block_on(async {
                let mut consumer: async_nats::jetstream::consumer::PullConsumer = b
                    .jetstream()
                    .get_consumer_from_stream(&durable, &stream)
                    .await
                    .map_err(|e| e.to_string())?;
                let waiting = consumer
                    .info()
                    .await
                    .map_err(|e| e.to_string())?
                    .num_waiting;
                if waiting > 0 {
                    Ok(())
                } else {
                    Err(format!("{durable}: no pull request waiting"))
                }
            })
        });
    }

    /// Provisions and starts every replica of every node.
    pub fn start(&mut self) {
        self.provision();
        for (node, replicas) in self.node_replicas() {
            for r in 0..replicas {
                self.spawn(&node, r, &[]);
            }
        }
    }

    /// The environment a control plane renders for `node`/`replica`.
    pub fn vars(&self, node: &str, replica: i64) -> BTreeMap<String, String> {
        node_vars(&self.doc, &self.flow, node, replica, &self.nats.url())
            .unwrap_or_else(|e| panic!("{}", e.render()))
    }

    /// Starts one replica on the Rust worker (appending to its log), with `extra` variables
    /// on top.
    pub fn spawn(&mut self, node: &str, replica: i64, extra: &[(&str, &str)]) {
        self.spawn_on(Runtime::Rust, node, replica, extra);
    }

    /// Starts one replica on `runtime` (appending to its log) with the environment a control
    /// plane renders, `extra` variables on top. The reference worker gets the same variables;
    /// only `VF_NODE_CLASS` names the Python twin of a `videoflow.rs.*` node.
    pub fn spawn_on(&mut self, runtime: Runtime, node: &str, replica: i64, extra: &[(&str, &str)]) {
        let log_path = self.log_path(node, replica);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("log");
        let err = log.try_clone().expect("log");
        let mut vars = self.vars(node, replica);
        let mut cmd = match runtime {
            Runtime::Rust => {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"));
                cmd.env_clear().env("NO_COLOR", "1").env("VF_LOG", "info");
                cmd
            }
            Runtime::Reference => {
                if let Some(class) = vars.get("VF_NODE_CLASS") {
                    let twin = reference_class(class).unwrap_or_else(|| {
                        panic!("{node}: {class} has no Python twin in interop_nodes.py")
                    });
                    vars.insert("VF_NODE_CLASS".into(), twin);
                }
                let mut cmd = Command::new(reference_python());
                cmd.args(["-m", "videoflow.worker"])
                    .env_clear()
                    .env("PYTHONPATH", reference_pythonpath())
                    .env("PYTHONUNBUFFERED", "1");
                cmd
            }
        };
        cmd.envs(vars)
            .env("VF_TERMINATION_LOG", self.termination_path(node, replica))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {runtime:?} worker for {node}.{replica}: {e}"));
        self.procs.push(Proc {
            node: node.to_owned(),
            replica,
            runtime,
            child,
            exit: None,
        });
    }

    /// Provisions with `provisioner` (STREAM-7): the provision job a control plane runs,
    /// ours or the reference's, fed the same input — the compiled `specs.json` and the
    /// flow-level `VF_*` of the nodes' environment (ids, flow type, NATS, payload store,
    /// runtime store, retries) — admission (ADM-1/2) included.
    pub fn provision_with(&self, provisioner: Provisioner) {
        let first = &self.flow.nodes.first().expect("a node").name;
        let node_env = self.vars(first, 0);
        let mut cmd = match provisioner {
            Provisioner::Rust => {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"));
                cmd.arg("provision")
                    .env_clear()
                    .env("NO_COLOR", "1")
                    .env("VF_LOG", "info");
                cmd
            }
            Provisioner::Reference => {
                let mut cmd = Command::new(reference_python());
                cmd.args(["-m", "videoflow.provision"]).env_clear();
                cmd
            }
        };
        cmd.env("VF_FLOW_SPECS_JSON", self.flow.specs_json())
            .env("VF_ADMISSION_TIMEOUT_SECONDS", "20");
        for key in [
            "VF_FLOW_ID",
            "VF_RUN_ID",
            "VF_FLOW_TYPE",
            "VF_NATS_URL",
            "VF_BLOB_REDIS_URL",
            "VF_RUNTIME_STORE_URL",
            "VF_MAX_RETRIES",
        ] {
            if let Some(v) = node_env.get(key) {
                cmd.env(key, v);
            }
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("run the {provisioner:?} provision job: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(self.dir.join("provision.log"), &text).expect("provision log");
        assert!(
            out.status.success(),
            "the {provisioner:?} provision job failed ({}):\n{text}",
            out.status
        );
    }

    /// Changes the `ack_wait` of `child`'s shared data durable on `parent` after
    /// provisioning, before any worker binds it (workers of both runtimes bind a durable as
    /// they find it, STREAM-7): a SIGKILLed replica's un-acked deliveries then lapse quickly.
    pub fn set_ack_wait(&self, child: &str, parent: &str, ack_wait: Duration) {
        let vars = self.vars(child, 0);
        let (flow, run) = (&vars["VF_FLOW_ID"], &vars["VF_RUN_ID"]);
        let url = self.nats.url();
        self.runtime.block_on(async {
            let b = broker::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connect: {e}"));
            let stream = b
                .jetstream()
                .get_stream(naming::stream_name(flow, run, parent))
                .await
                .unwrap_or_else(|e| panic!("{parent}'s stream: {e}"));
            let durable = naming::durable_name(child, parent);
            let mut config = stream
                .consumer_info(&durable)
                .await
                .unwrap_or_else(|e| panic!("{durable}: {e}"))
                .config
                .clone();
            config.ack_wait = ack_wait;
            let updated = stream
                .update_consumer(config)
                .await
                .unwrap_or_else(|e| panic!("update {durable}: {e}"));
            assert_eq!(updated.cached_info().config.ack_wait, ack_wait);
        });
    }

    /// Provisions with `provisioner`, then starts every replica of every node on the runtime
    /// `placement` names for it: `(node, [runtime of replica 0, 1, …])`, every node and
    /// replica exactly once.
    pub fn start_placed(&mut self, provisioner: Provisioner, placement: &[(&str, &[Runtime])]) {
        let nodes = self.node_replicas();
        assert_eq!(
            nodes.len(),
            placement.len(),
            "one placement per node: {placement:?}"
        );
        for (node, replicas) in &nodes {
            let (_, runtimes) = placement
                .iter()
                .find(|(n, _)| n == node)
                .unwrap_or_else(|| panic!("no placement for {node}"));
            assert_eq!(
                runtimes.len() as i64,
                *replicas,
                "{node}: one runtime per replica"
            );
        }
        self.provision_with(provisioner);
        self.spawn_placed(placement);
    }

    /// Starts every replica `placement` names, on the runtime it names: `(node, [runtime of
    /// replica 0, 1, …])` (after provisioning; [`FlowHarness::start_placed`] does both).
    pub fn spawn_placed(&mut self, placement: &[(&str, &[Runtime])]) {
        for (node, runtimes) in placement {
            for (r, runtime) in runtimes.iter().enumerate() {
                self.spawn_on(*runtime, node, r as i64, &[]);
            }
        }
    }

    /// Creates `node`'s data durables on its parents with `ack_wait` instead of the default
    /// (otherwise exactly as the worker derives them, STREAM-4), before provisioning binds
    /// them as they are: a killed replica's un-acked deliveries then come back quickly.
    pub fn precreate_data_durables(&self, node: &str, ack_wait: Duration) {
        let mut vars = self.vars(node, 0);
        vars.insert("VF_ACK_WAIT_SECONDS".into(), ack_wait.as_secs().to_string());
        let cfg = WorkerConfig::from_env(&vars).unwrap_or_else(|e| panic!("{}", e.render()));
        let url = self.nats.url();
        self.runtime.block_on(async {
            let b = broker::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            for parent in &cfg.parent_names {
                broker::ensure_node_stream(&b, &cfg.flow_id, &cfg.run_id, parent, false, None)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let bound =
                    broker::bind_data_durable(&b, &DurableRequest::data_for(&cfg, parent, false))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(bound.ack_wait(), ack_wait, "{node}'s durable on {parent}");
            }
        });
    }

    /// SIGKILLs the running `node`/`replica`; `false` when it had already ended.
    pub fn kill(&mut self, node: &str, replica: i64) -> bool {
        let _ = self.running();
        let mut killed = false;
        for p in self
            .procs
            .iter_mut()
            .filter(|p| p.node == node && p.replica == replica && p.exit.is_none())
        {
            let _ = p.child.kill();
            let status = p.child.wait().expect("wait");
            p.exit = Some(status.code().unwrap_or(-9));
            killed = true;
        }
        killed
    }

    /// Sends SIGTERM to the running `node`/`replica`; `false` when it had already ended.
    pub fn terminate(&mut self, node: &str, replica: i64) -> bool {
        let _ = self.running();
        let mut sent = false;
        for p in self
            .procs
            .iter()
            .filter(|p| p.node == node && p.replica == replica && p.exit.is_none())
        {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(p.child.id()).expect("pid"));
            sent |= nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_ok();
        }
        sent
    }

    /// How many started workers still run (reaping those that ended).
    pub fn running(&mut self) -> usize {
        let mut running = 0;
        for p in &mut self.procs {
            if p.exit.is_none() {
                match p.child.try_wait().expect("try_wait") {
                    Some(status) => p.exit = Some(status.code().unwrap_or(-1)),
                    None => running += 1,
                }
            }
        }
        running
    }

    /// Every process started so far, in start order, with its exit if it ended.
    pub fn exits_so_far(&mut self) -> Vec<Exit> {
        let _ = self.running();
        self.procs
            .iter()
            .map(|p| Exit {
                node: p.node.clone(),
                replica: p.replica,
                code: p.exit,
            })
            .collect()
    }

    /// Waits for every process; on timeout kills them all and panics with their logs.
    pub fn wait_all(&mut self, timeout: Duration) -> Vec<Exit> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.running() == 0 {
                break;
            }
            if Instant::now() > deadline {
                let logs = self.all_logs();
                for p in &mut self.procs {
                    let _ = p.child.kill();
                }
                panic!("flow did not finish within {timeout:?}; logs:\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.procs
            .iter()
            .map(|p| Exit {
                node: p.node.clone(),
                replica: p.replica,
                code: p.exit,
            })
            .collect()
    }

    /// Asserts every process of the last `wait_all` exited 0.
    pub fn assert_all_ok(&self, exits: &[Exit]) {
        let bad: Vec<&Exit> = exits.iter().filter(|e| e.code != Some(0)).collect();
        assert!(
            bad.is_empty(),
            "non-zero exits {bad:?}; logs:\n{}",
            self.all_logs()
        );
    }

    /// [`FlowHarness::wait_all`], then [`FlowHarness::assert_all_ok`]: the flow ran to a clean end.
    pub fn wait_all_ok(&mut self, timeout: Duration) -> Vec<Exit> {
        let exits = self.wait_all(timeout);
        self.assert_all_ok(&exits);
        exits
    }

    /// The one process of the last `wait_all` that did not exit 0 (a killed or crashed
    /// replica); panics with every exit and the logs when there is none or more than one.
    pub fn the_one_abnormal_exit<'a>(&self, exits: &'a [Exit]) -> &'a Exit {
        let abnormal: Vec<&Exit> = exits.iter().filter(|e| e.code != Some(0)).collect();
        assert_eq!(
            abnormal.len(),
            1,
            "exactly one abnormal exit: {exits:?}; logs:\n{}",
            self.all_logs()
        );
        abnormal[0]
    }

    /// Polls `probe` every 20 ms until it returns `Ok`; after `timeout` panics naming `what`,
    /// the last state the probe saw (its `Err`) and every worker's log.
    pub fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut() -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = match probe() {
                Ok(v) => return v,
                Err(seen) => seen,
            };
            assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?} (last seen: {seen}); logs:\n{}",
                self.all_logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the JSONL file `name` holds at least `n` records; returns how many it holds.
    pub fn wait_for_records(&self, name: &str, n: usize, timeout: Duration) -> usize {
        self.wait_until(&format!("{n} records in {name}"), timeout, || {
            let got = self.jsonl(name).len();
            if got >= n {
                Ok(got)
            } else {
                Err(format!("only {got} records"))
            }
        })
    }

    /// Waits for the termination record `node`/`replica` leaves when it fails.
    pub fn wait_for_termination(
        &self,
        node: &str,
        replica: i64,
        timeout: Duration,
    ) -> serde_json::Value {
        self.wait_until(
            &format!("the termination record of {node}.{replica}"),
            timeout,
            || {
                self.termination(node, replica)
                    .ok_or_else(|| "no termination record".to_owned())
            },
        )
    }

    fn log_path(&self, node: &str, replica: i64) -> PathBuf {
        self.dir.join(format!("{node}.{replica}.log"))
    }

    fn termination_path(&self, node: &str, replica: i64) -> PathBuf {
        self.dir.join(format!("{node}.{replica}.termination"))
    }

    /// The worker's log.
    pub fn log(&self, node: &str, replica: i64) -> String {
        std::fs::read_to_string(self.log_path(node, replica)).unwrap_or_default()
    }

    /// Every worker's log, tail first lines, for failure messages.
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.procs {
            if seen.insert((p.node.clone(), p.replica)) {
                let log = self.log(&p.node, p.replica);
                let tail: Vec<&str> = log.lines().rev().take(25).collect();
                out.push_str(&format!(
                    "--- {}.{} on {:?} (exit {:?})\n",
                    p.node, p.replica, p.runtime, p.exit
                ));
                for l in tail.into_iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// The termination record a worker left, if any.
    pub fn termination(&self, node: &str, replica: i64) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.termination_path(node, replica)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The lines of a JSONL file under the flow directory.
    pub fn jsonl(&self, name: &str) -> Vec<serde_json::Value> {
        read_jsonl(&self.dir.join(name))
    }

    /// Runs an async block on the harness runtime (broker checks from tests).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }
}

impl Drop for FlowHarness {
    fn drop(&mut self) {
        for p in &mut self.procs {
            if p.exit.is_none() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }
}

/// Reads a JSONL file (missing ⇒ empty). A sink may be appending while a test polls, so
/// only complete lines count: anything after the last newline is a line still being written.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSONL line {l:?}: {e}")))
        .collect()
}
