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
use videoflow_testkit::{NatsServer, RedisServer};
use videoflow_worker::broker;
use videoflow_worker::provision::{node_vars, provision};

/// One running (or finished) worker process.
struct Proc {
    node: String,
    replica: i64,
    child: Child,
    exit: Option<i32>,
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

/// A flow under test.
pub struct FlowHarness {
    pub nats: NatsServer,
    pub redis: Option<RedisServer>,
    pub dir: PathBuf,
    pub doc: FlowDocument,
    pub flow: CompiledFlow,
    procs: Vec<Proc>,
    runtime: tokio::runtime::Runtime,
}

impl FlowHarness {
    /// Starts the servers and compiles `yaml`. Placeholders: `{{DIR}}` (a private directory),
    /// `{{REDIS}}` (starts a redis-server and puts its URL there).
    pub fn new(yaml: &str) -> Self {
        let nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
        let dir = nats.dir().join("flow");
        std::fs::create_dir_all(&dir).expect("flow dir");
        let redis = yaml
            .contains("{{REDIS}}")
            .then(|| RedisServer::start().unwrap_or_else(|e| panic!("{e}")));
        let mut text = yaml.replace("{{DIR}}", &dir.display().to_string());
        if let Some(r) = &redis {
            text = text.replace("{{REDIS}}", &r.url());
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

    /// Provisions and starts every replica of every node.
    pub fn start(&mut self) {
        self.provision();
        let nodes: Vec<(String, i64)> = self
            .flow
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.nb_tasks))
            .collect();
        for (node, replicas) in nodes {
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

    /// Starts one replica (appending to its log), with `extra` variables on top.
    pub fn spawn(&mut self, node: &str, replica: i64, extra: &[(&str, &str)]) {
        let log_path = self.log_path(node, replica);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("log");
        let err = log.try_clone().expect("log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"));
        cmd.env_clear()
            .envs(self.vars(node, replica))
            .env("VF_TERMINATION_LOG", self.termination_path(node, replica))
            .env("NO_COLOR", "1")
            .env("VF_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn videoflow-worker");
        self.procs.push(Proc {
            node: node.to_owned(),
            replica,
            child,
            exit: None,
        });
    }

    /// SIGKILLs the running `node`/`replica`.
    pub fn kill(&mut self, node: &str, replica: i64) {
        for p in self
            .procs
            .iter_mut()
            .filter(|p| p.node == node && p.replica == replica && p.exit.is_none())
        {
            let _ = p.child.kill();
            let status = p.child.wait().expect("wait");
            p.exit = Some(status.code().unwrap_or(-9));
        }
    }

    /// Waits for every process; on timeout kills them all and panics with their logs.
    pub fn wait_all(&mut self, timeout: Duration) -> Vec<Exit> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut running = 0;
            for p in &mut self.procs {
                if p.exit.is_none() {
                    match p.child.try_wait().expect("try_wait") {
                        Some(status) => p.exit = Some(status.code().unwrap_or(-1)),
                        None => running += 1,
                    }
                }
            }
            if running == 0 {
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
                    "--- {}.{} (exit {:?})\n",
                    p.node, p.replica, p.exit
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

/// Reads a JSONL file (missing ⇒ empty).
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSONL line {l:?}: {e}")))
        .collect()
}
