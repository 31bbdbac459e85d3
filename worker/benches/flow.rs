//! Flow benchmarks against the broker's own ceiling.
//!
//! One run starts its own `redis-server` and, per scenario, a fresh `nats-server -js` on
//! private loopback ports (testkit), provisions each Flow in-process and runs one real
//! `videoflow-worker` process per replica with the environment the control planes render —
//! the same shape as the flow tests. It prints progress on stderr and writes one JSON
//! document (`--out PATH`). Figures are measurements, never assertions.
//!
//! `scripts/bench [--quick]` is the documented entry point; by hand:
//! `cargo bench -p videoflow-worker --bench flow -- [--quick] [--reps N] [--out FILE]`.

mod support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use serde_json::{Value as Json, json};
use videoflow_core::compile::{CompiledFlow, compile};
use videoflow_core::load::parse_flow;
use videoflow_core::model::FlowDocument;
use videoflow_core::naming;
use videoflow_testkit::{NatsServer, RedisServer};
use videoflow_worker::broker;
use videoflow_worker::provision::{node_vars, provision};

use support::{R, clk_tck, cpu_ticks, loadavg, status_kib, worker_command};

/// Command-line options.
#[derive(Debug, Clone)]
struct Opts {
    quick: bool,
    reps: usize,
    out: Option<PathBuf>,
}

impl Opts {
    fn parse() -> Self {
        let mut o = Opts {
            quick: false,
            reps: 3,
            out: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--reps" => o.reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(3),
                "--out" => o.out = args.next().map(PathBuf::from),
                _ => {} // cargo bench passes `--bench`; ignore what we do not know
            }
        }
        if o.quick {
            o.reps = 1;
        }
        o
    }

    /// `full` in a full run, `quick` in a smoke run.
    fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

fn log(msg: impl AsRef<str>) {
    eprintln!("[bench] {}", msg.as_ref());
}

// ---------------------------------------------------------------------------------------------
// Machine and broker versions.

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

fn proc_field(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.strip_prefix(key)
            .map(|rest| rest.trim_start_matches([':', ' ', '\t']).trim().to_owned())
    })
}

fn machine() -> Json {
    let nats_bin = std::env::var("VF_NATS_SERVER_BIN").unwrap_or_else(|_| "nats-server".into());
    let redis_bin = std::env::var("VF_REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": proc_field("/proc/cpuinfo", "model name").unwrap_or_default(),
        "mem_total": proc_field("/proc/meminfo", "MemTotal").unwrap_or_default(),
        "kernel": first_line("uname", &["-sr"]),
        "loadavg_start": loadavg(),
        "nats_server": first_line(&nats_bin, &["--version"]),
        "redis_server": first_line(&redis_bin, &["--version"]),
        "rustc": first_line("rustc", &["--version"]),
        // Where the brokers' stores and the run ledgers go, with its ext4 flags (`T`: new
        // directories in it are spread over block groups; scripts/bench sets it).
        "scratch": first_line("lsattr", &["-d", &std::env::temp_dir().display().to_string()]),
    })
}

// ---------------------------------------------------------------------------------------------
// Statistics.

fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let pos = (s.len() - 1) as f64 * q;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

/// `{median, min, max, values}` over repetitions.
fn spread(v: &[f64]) -> Json {
    json!({
        "median": quantile(v, 0.5),
        "min": v.iter().copied().fold(f64::INFINITY, f64::min),
        "max": v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "values": v,
    })
}

/// Least-squares slope of `ys` over `xs`.
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let num: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    num / den
}

// ---------------------------------------------------------------------------------------------
// /proc sampling of worker processes.

/// `(cpu ticks user+system, VmRSS KiB, VmHWM KiB)` of a live process.
fn sample_proc(pid: u32) -> Option<(u64, u64, u64)> {
    let kib = |key| status_kib(pid, key).unwrap_or(0);
    Some((cpu_ticks(pid)?, kib("VmRSS"), kib("VmHWM")))
}

// ---------------------------------------------------------------------------------------------
// A Flow under measurement: its own nats-server, real worker processes.

struct Proc {
    node: String,
    replica: i64,
    child: Child,
    spawned: Instant,
    exit: Option<(Option<i32>, Instant)>,
    ticks: u64,
    rss_max_kib: u64,
    hwm_kib: u64,
}

struct Bench {
    nats: NatsServer,
    dir: PathBuf,
    doc: FlowDocument,
    flow: CompiledFlow,
    procs: Vec<Proc>,
    client: Option<async_nats::Client>,
}

impl Bench {
    fn new(rt: &tokio::runtime::Runtime, redis_url: &str, yaml: &str) -> R<Self> {
        let nats = NatsServer::start().map_err(|e| e.to_string())?;
        let dir = nats.dir().join("flow");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let text = yaml
            .replace("{{DIR}}", &dir.display().to_string())
            .replace("{{REDIS}}", redis_url);
        let doc = parse_flow(&text).map_err(|d| format!("flow does not parse: {d:?}"))?;
        let flow = compile(&doc).map_err(|d| format!("flow does not compile: {d:?}"))?;
        let url = nats.url();
        let client = rt.block_on(async {
            let b = broker::connect(&url).await.map_err(|e| e.to_string())?;
            provision(&b, &doc, &flow)
                .await
                .map_err(|e| e.render().to_string())?;
            Ok::<_, String>(b.client().clone())
        })?;
        Ok(Bench {
            nats,
            dir,
            doc,
            flow,
            procs: Vec::new(),
            client: Some(client),
        })
    }

    fn client(&self) -> &async_nats::Client {
        self.client.as_ref().expect("connected")
    }

    fn data_subject(&self, node: &str) -> String {
        naming::data_subject(&self.flow.flow_id, &self.flow.run_id, node)
    }

    /// Starts every replica of `node` with `extra` variables.
    fn spawn(&mut self, node: &str, extra: &[(&str, &str)]) -> R<()> {
        self.spawn_on(node, extra, false)
    }

    /// Starts every replica of `node` on our worker, or (`reference`) on the Python reference
    /// 1.0.4's (`python -m videoflow.worker` from the reference venv, the test nodes' Python
    /// twins from `tests/conformance` on its path — as `worker/tests/interop_flows.rs` runs it).
    fn spawn_on(&mut self, node: &str, extra: &[(&str, &str)], reference: bool) -> R<()> {
        let replicas = self
            .flow
            .nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.nb_tasks)
            .ok_or(format!("no node {node}"))?;
        for replica in 0..replicas {
            let vars = node_vars(&self.doc, &self.flow, node, replica, &self.nats.url())
                .map_err(|e| e.render().to_string())?;
            let log = File::create(self.dir.join(format!("{node}.{replica}.log")))
                .map_err(|e| e.to_string())?;
            let err = log.try_clone().map_err(|e| e.to_string())?;
            let side = if reference {
                support::Side::Reference
            } else {
                support::Side::Ours
            };
            let termination = self.dir.join(format!("{node}.{replica}.termination"));
            let mut cmd = worker_command(side, vars, &termination, extra)?;
            cmd.stdout(Stdio::from(log)).stderr(Stdio::from(err));
            let child = cmd.spawn().map_err(|e| format!("spawn worker: {e}"))?;
            self.procs.push(Proc {
                node: node.to_owned(),
                replica,
                child,
                spawned: Instant::now(),
                exit: None,
                ticks: 0,
                rss_max_kib: 0,
                hwm_kib: 0,
            });
        }
        Ok(())
    }

    /// Samples every live process and reaps the ones that ended; returns how many still run.
    fn poll(&mut self) -> usize {
        let mut running = 0;
        for p in &mut self.procs {
            if p.exit.is_some() {
                continue;
            }
            if let Some((ticks, rss, hwm)) = sample_proc(p.child.id()) {
                p.ticks = p.ticks.max(ticks);
                p.rss_max_kib = p.rss_max_kib.max(rss);
                p.hwm_kib = p.hwm_kib.max(hwm);
            }
            match p.child.try_wait() {
                Ok(Some(status)) => p.exit = Some((status.code(), Instant::now())),
                Ok(None) => running += 1,
                Err(_) => p.exit = Some((None, Instant::now())),
            }
        }
        running
    }

    /// Polls every 10 ms until the matching processes ended; `false` on timeout.
    fn wait_for(&mut self, timeout: Duration, which: impl Fn(&Proc) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            if self
                .procs
                .iter()
                .filter(|p| which(p))
                .all(|p| p.exit.is_some())
            {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait_all(&mut self, timeout: Duration) -> bool {
        self.wait_for(timeout, |_| true)
    }

    /// Samples for `d`, every 10 ms.
    fn idle(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.poll();
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn rss_now(&self, node: &str) -> Vec<u64> {
        self.procs
            .iter()
            .filter(|p| p.node == node && p.exit.is_none())
            .filter_map(|p| sample_proc(p.child.id()).map(|s| s.1))
            .collect()
    }

    fn procs_of(&self, node: &str) -> impl Iterator<Item = &Proc> {
        self.procs.iter().filter(move |p| p.node == node)
    }

    fn exits(&self) -> Json {
        self.procs
            .iter()
            .map(|p| {
                let code = p.exit.and_then(|e| e.0);
                // A failed worker's last log lines, so a broken run explains itself.
                let log_tail = (code != Some(0)).then(|| {
                    let text = std::fs::read_to_string(
                        self.dir.join(format!("{}.{}.log", p.node, p.replica)),
                    )
                    .unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(8)..].join("\n")
                });
                json!({
                    "node": p.node, "replica": p.replica,
                    "code": code,
                    "termination": self.termination(&p.node, p.replica),
                    "log_tail": log_tail,
                })
            })
            .collect()
    }

    fn all_ok(&self) -> bool {
        self.procs
            .iter()
            .all(|p| matches!(p.exit, Some((Some(0), _))))
    }

    fn termination(&self, node: &str, replica: i64) -> Option<Json> {
        let t =
            std::fs::read_to_string(self.dir.join(format!("{node}.{replica}.termination"))).ok()?;
        serde_json::from_str(&t).ok()
    }

    fn jsonl(&self, name: &str) -> Vec<Json> {
        std::fs::read_to_string(self.dir.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        for p in &mut self.procs {
            if p.exit.is_none() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
        keep_run_dir(&self.dir);
    }
}

/// `VF_BENCH_KEEP_RUNS_IN=<dir>` (scripts/bench sets it): a finished run's directory — its
/// run ledger's thousands of small files — is moved there instead of deleted with its broker,
/// and scripts/bench deletes them all once the flow benchmarks are done. On ext4 without a
/// journal a new inode steps over every inode deleted in its block group in the last minutes,
/// so deleting one repetition's ledger slows the next one's (ours or the reference's) by
/// whatever that run happened to delete: the measurement would then depend on its
/// predecessor.
fn keep_run_dir(dir: &Path) {
    static KEPT: AtomicU64 = AtomicU64::new(0);
    let Some(keep) = std::env::var_os("VF_BENCH_KEEP_RUNS_IN") else {
        return;
    };
    let keep = PathBuf::from(keep);
    // The process id too: several bench processes may keep their runs in one directory.
    let to = keep.join(format!(
        "run-{}-{}",
        std::process::id(),
        KEPT.fetch_add(1, Ordering::Relaxed)
    ));
    if let Err(e) = std::fs::create_dir_all(&keep).and_then(|()| std::fs::rename(dir, &to)) {
        log(format!(
            "{} not kept ({e}): deleted with its broker",
            dir.display()
        ));
    }
}

/// A plain NATS subscription counting what a node publishes (JetStream publications are NATS
/// messages too): count, first and last arrival.
#[derive(Clone, Default)]
struct Watch {
    count: Arc<AtomicU64>,
    span: Arc<Mutex<Option<(Instant, Instant)>>>,
    /// The `proctime` each envelope carries (LOOP-7): the node's own time per message.
    proctimes: Arc<Mutex<Vec<f64>>>,
}

impl Watch {
    fn start(rt: &tokio::runtime::Runtime, client: &async_nats::Client, subject: String) -> Self {
        let w = Watch::default();
        let (count, span, proctimes) = (w.count.clone(), w.span.clone(), w.proctimes.clone());
        let client = client.clone();
        rt.block_on(async move {
            let mut sub = client.subscribe(subject).await.expect("subscribe");
            client.flush().await.expect("flush");
            tokio::spawn(async move {
                while let Some(msg) = sub.next().await {
                    let now = Instant::now();
                    count.fetch_add(1, Ordering::Relaxed);
                    if let Ok(env) = videoflow_core::envelope::decode(&msg.payload)
                        && let Some(videoflow_core::value::Value::Double(t)) =
                            env.metadata.get("proctime")
                    {
                        proctimes.lock().expect("lock").push(*t);
                    }
                    let mut s = span.lock().expect("lock");
                    *s = Some(s.map_or((now, now), |(f, _)| (f, now)));
                }
            });
        });
        w
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Messages per second between the first and the last arrival.
    fn rate(&self) -> f64 {
        let n = self.count();
        match *self.span.lock().expect("lock") {
            Some((f, l)) if n > 1 && l > f => (n - 1) as f64 / (l - f).as_secs_f64(),
            _ => f64::NAN,
        }
    }

    /// The `proctime` values seen, in seconds.
    fn proctimes(&self) -> Vec<f64> {
        self.proctimes.lock().expect("lock").clone()
    }

    fn first(&self) -> Option<Instant> {
        self.span.lock().expect("lock").map(|s| s.0)
    }

    fn last(&self) -> Option<Instant> {
        self.span.lock().expect("lock").map(|s| s.1)
    }
}

/// What a node published, read from its stream instead of a subscriber: a subscriber makes the
/// broker send it every message (a third more messages out than the hop's own, on the same
/// two CPUs), so the identity hops sample the stream's state instead — every
/// [`StreamSpan::EVERY`], its last sequence and the broker's timestamp of that message. The
/// rate runs from the first sample that found a message to the last that found no more than
/// `data` (the stream's terminators come after its data), like a subscriber's first and last
/// arrival, on the broker's clock.
struct StreamSpan {
    /// The first sample with a message, the last with at most `data`, and the newest.
    samples: Arc<Mutex<[Option<Sample>; 3]>>,
    task: tokio::task::JoinHandle<()>,
}

/// A stream's last sequence and the broker's timestamp of that message (ns since the epoch).
type Sample = (u64, i128);

impl StreamSpan {
    const EVERY: Duration = Duration::from_millis(5);

    fn start(
        rt: &tokio::runtime::Runtime,
        client: &async_nats::Client,
        stream: String,
        data: u64,
    ) -> R<Self> {
        // The context spawns on the runtime it is made in.
        let _in = rt.enter();
        let mut s = rt
            .block_on(jetstream::new(client.clone()).get_stream(&stream))
            .map_err(|e| format!("{stream}: {e}"))?;
        let samples = Arc::new(Mutex::new([None; 3]));
        let into = samples.clone();
        let task = rt.spawn(async move {
            let mut tick = tokio::time::interval(Self::EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Ok(info) = s.info().await else { continue };
                let (seq, at) = (
                    info.state.last_sequence,
                    info.state.last_timestamp.unix_timestamp_nanos(),
                );
                if seq == 0 {
                    continue;
                }
                let mut got = into.lock().expect("lock");
                got[0].get_or_insert((seq, at));
                if seq <= data {
                    got[1] = Some((seq, at));
                }
                got[2] = Some((seq, at));
            }
        });
        Ok(StreamSpan { samples, task })
    }

    /// Messages a second between the first and the last data sample.
    fn rate(&self) -> f64 {
        match *self.samples.lock().expect("lock") {
            [Some((s0, t0)), Some((s1, t1)), _] if s1 > s0 && t1 > t0 => {
                (s1 - s0) as f64 / ((t1 - t0) as f64 / 1e9)
            }
            _ => f64::NAN,
        }
    }

    /// The stream's last sequence at the newest sample: its data and its terminators.
    fn last_sequence(&self) -> u64 {
        self.samples.lock().expect("lock")[2].map_or(0, |s| s.0)
    }
}

impl Drop for StreamSpan {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// Flow text.

const HEADER: &str = "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: bench}\n";

fn frames_node(name: &str, w: u64, h: u64, c: u64, count: u64, fps: Option<f64>) -> String {
    let fps = fps.map(|f| format!(", fps: {f}")).unwrap_or_default();
    format!(
        "  - name: {name}\n    kind: producer\n    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}\n    params: {{width: {w}, height: {h}, channels: {c}, count: {count}{fps}}}\n"
    )
}

fn identity_node(name: &str, parent: &str) -> String {
    format!(
        "  - name: {name}\n    kind: processor\n    parents: [{parent}]\n    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}\n"
    )
}

fn exec_identity_node(name: &str, parent: &str) -> String {
    format!(
        "  - name: {name}\n    kind: processor\n    parents: [{parent}]\n    component:\n      exec: {{command: [python3, -m, videoflow_sdk.examples.identity]}}\n"
    )
}

fn service_node(name: &str, parent: &str, ms: u64, replicas: u64) -> String {
    format!(
        "  - name: {name}\n    kind: processor\n    parents: [{parent}]\n    replicas: {replicas}\n    component: {{builtin: videoflow.rs.processors.ServiceTimeProcessor}}\n    params: {{ms: {ms}, mode: sleep}}\n"
    )
}

fn void_node(name: &str, parent: &str) -> String {
    format!(
        "  - name: {name}\n    kind: consumer\n    parents: [{parent}]\n    component: {{builtin: videoflow.consumers.basic.VoidConsumer}}\n"
    )
}

fn jsonl_node(name: &str, parent: &str) -> String {
    format!(
        "  - name: {name}\n    kind: consumer\n    parents: [{parent}]\n    component: {{builtin: videoflow.rs.consumers.JsonlSink}}\n    params: {{path: \"{{{{DIR}}}}/out.jsonl\"}}\n"
    )
}

fn flow_yaml(kind: &str, store: bool, nodes: &[String]) -> String {
    let store = if store {
        "  payloadStore: {url: \"{{REDIS}}\"}\n"
    } else {
        ""
    };
    format!(
        "{HEADER}spec:\n  type: {kind}\n{store}  nodes:\n{}",
        nodes.concat()
    )
}

// ---------------------------------------------------------------------------------------------
// (1) The broker ceiling with a raw client.

const KIB: usize = 1024;
/// The ideal hop's window of publications in flight and its fetch batch.
const CEILING_WINDOW: usize = 256;
const CEILING_BATCH: usize = 256;

async fn ceiling_once(nats: &NatsServer, tck: f64, n: usize) -> R<Json> {
    let client = async_nats::connect(nats.url())
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream::new(client.clone());
    let mk = |name: &str, subject: &str| stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    let s_in = js
        .get_or_create_stream(mk("CEIL_IN", "ceil.in"))
        .await
        .map_err(|e| e.to_string())?;
    js.get_or_create_stream(mk("CEIL_OUT", "ceil.out"))
        .await
        .map_err(|e| e.to_string())?;
    let payload = bytes::Bytes::from(vec![7u8; KIB]);

    // (a) async publish, a window of pub-acks in flight, each with a message id.
    let t = Instant::now();
    let mut inflight = std::collections::VecDeque::new();
    for i in 0..n {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("in-{i}").as_str());
        let f = js
            .publish_with_headers("ceil.in", h, payload.clone())
            .await
            .map_err(|e| e.to_string())?;
        inflight.push_back(f);
        if inflight.len() >= CEILING_WINDOW
            && let Some(f) = inflight.pop_front()
        {
            f.await.map_err(|e| e.to_string())?;
        }
    }
    for f in inflight.drain(..) {
        f.await.map_err(|e| e.to_string())?;
    }
    let publish = n as f64 / t.elapsed().as_secs_f64();

    let consumer_cfg = |name: &str| consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        ack_policy: consumer::AckPolicy::Explicit,
        max_ack_pending: 4096,
        ..Default::default()
    };

    // (b) batched fetch + ack (plain acks, not awaited confirmations).
    let c = s_in
        .create_consumer(consumer_cfg("fetchack"))
        .await
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut got = 0;
    while got < n {
        let mut batch = fetch_batch(&c).await?;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| e.to_string())?;
            m.ack().await.map_err(|e| e.to_string())?;
            got += 1;
        }
    }
    let fetch_ack = n as f64 / t.elapsed().as_secs_f64();

    // (c) ideal pipelined hop: fetch a batch → publish each with a message id → ack the
    // input once its pub-ack arrived; a window of publications in flight.
    let c = s_in
        .create_consumer(consumer_cfg("hop"))
        .await
        .map_err(|e| e.to_string())?;
    let broker_before = cpu_ticks(nats.pid());
    let msgs_before = broker_msgs(nats);
    let ideal_hop = pipelined_hop(&js, &c, "ceil.out", n, HopAck::Unconfirmed).await?;
    // The broker's CPU per message of this hop: what a worker's hop costs the broker beyond
    // it (acks confirmed, two headers, pull requests) shows against this.
    let ideal_broker_us = broker_cpu_us(nats, broker_before, tck, n as u64);
    let ideal_msgs = msgs_per(msgs_before, broker_msgs(nats), n as u64);

    // (d) the same hop in the worker's current shape, for diagnosis: one fetch per message,
    // publish and wait for its pub-ack, then an ack confirmed by the server, all serial.
    let c = s_in
        .create_consumer(consumer_cfg("serial"))
        .await
        .map_err(|e| e.to_string())?;
    let serial_n = n.min(5000);
    let t = Instant::now();
    for i in 0..serial_n {
        let mut batch = c
            .fetch()
            .max_messages(1)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        let Some(m) = batch.next().await else {
            continue;
        };
        let m = m.map_err(|e| e.to_string())?;
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("serial-{i}").as_str());
        js.publish_with_headers("ceil.out", h, m.payload.clone())
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        m.double_ack().await.map_err(|e| e.to_string())?;
    }
    let serial_hop = serial_n as f64 / t.elapsed().as_secs_f64();
    // (e) the ideal hop under the protocol's credit: a data durable of a one-replica,
    // one-parent node admits 5 un-acked deliveries (STREAM-15: item_credit 1 + prefetch 4), so
    // no implementation can exceed this. Pull requests of up to 4 (the queue depth), each
    // message published at once and acked after its pub-ack on its own task.
    let c = s_in
        .create_consumer(consumer::pull::Config {
            max_ack_pending: 5,
            ..consumer_cfg("credit")
        })
        .await
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut got = 0;
    let mut tasks = std::collections::VecDeque::new();
    while got < n {
        let mut batch = c
            .batch()
            .max_messages(4)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| e.to_string())?;
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("credit-{got}").as_str());
            let f = js
                .publish_with_headers("ceil.out", h, m.payload.clone())
                .await
                .map_err(|e| e.to_string())?;
            tasks.push_back(tokio::spawn(async move {
                f.await.map_err(|e| e.to_string())?;
                m.double_ack().await.map_err(|e| e.to_string())
            }));
            got += 1;
            while tasks.front().is_some_and(|t| t.is_finished()) {
                if let Some(t) = tasks.pop_front() {
                    t.await.map_err(|e| e.to_string())??;
                }
            }
        }
    }
    for t in tasks.drain(..) {
        t.await.map_err(|e| e.to_string())??;
    }
    let credit_hop = n as f64 / t.elapsed().as_secs_f64();
    let protocol = ideal_hop_on_protocol_streams(nats, &js, tck, HopAck::Unconfirmed).await?;
    let confirmed = ideal_hop_on_protocol_streams(nats, &js, tck, HopAck::Confirmed).await?;
    Ok(json!({
        "ideal_hop_protocol_streams": protocol,
        "ideal_hop_protocol_streams_confirmed_acks": confirmed,
        "publish_msgs_s": publish,
        "fetch_ack_msgs_s": fetch_ack,
        "ideal_hop_msgs_s": ideal_hop,
        "ideal_hop_broker_cpu_us_per_msg": ideal_broker_us,
        "ideal_hop_broker_msgs_per_msg": ideal_msgs,
        "credit_hop_msgs_s": credit_hop,
        "serial_hop_msgs_s": serial_hop,
    }))
}

/// One pull of up to [`CEILING_BATCH`] messages from `c`.
async fn fetch_batch(c: &consumer::Consumer<consumer::pull::Config>) -> R<consumer::pull::Batch> {
    c.fetch()
        .max_messages(CEILING_BATCH)
        .messages()
        .await
        .map_err(|e| e.to_string())
}

/// How the ideal hop acks an input once its output's pub-ack is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HopAck {
    /// A plain ack, never confirmed: the ideal hop.
    Unconfirmed,
    /// An ack that waits for the server's confirmation (DELIV-1's ack-sync), each on a task
    /// of its own so the confirmations overlap as a worker's do.
    Confirmed,
}

/// The ideal hop's loop: fetch batches of [`CEILING_BATCH`] from `c`, publish each to
/// `subject` with a message id at once, and ack an input after its output's pub-ack (`ack`),
/// with [`CEILING_WINDOW`] publications in flight. Returns messages a second.
async fn pipelined_hop(
    js: &jetstream::Context,
    c: &consumer::Consumer<consumer::pull::Config>,
    subject: &str,
    n: usize,
    ack: HopAck,
) -> R<f64> {
    let t = Instant::now();
    let mut got = 0;
    // Unconfirmed: pub-ack then ack, taken back in order; confirmed: a task for both.
    let mut plain = std::collections::VecDeque::new();
    let mut tasks = std::collections::VecDeque::new();
    while got < n {
        let mut batch = fetch_batch(c).await?;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| e.to_string())?;
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("{subject}-{got}").as_str());
            let f = js
                .publish_with_headers(subject.to_owned(), h, m.payload.clone())
                .await
                .map_err(|e| e.to_string())?;
            got += 1;
            match ack {
                HopAck::Unconfirmed => {
                    plain.push_back((f, m));
                    if plain.len() >= CEILING_WINDOW
                        && let Some((f, m)) = plain.pop_front()
                    {
                        f.await.map_err(|e| e.to_string())?;
                        m.ack().await.map_err(|e| e.to_string())?;
                    }
                }
                HopAck::Confirmed => {
                    tasks.push_back(tokio::spawn(async move {
                        f.await.map_err(|e| e.to_string())?;
                        m.double_ack().await.map_err(|e| e.to_string())
                    }));
                    if tasks.len() >= CEILING_WINDOW
                        && let Some(task) = tasks.pop_front()
                    {
                        task.await.map_err(|e| e.to_string())??;
                    }
                }
            }
        }
    }
    for (f, m) in plain.drain(..) {
        f.await.map_err(|e| e.to_string())?;
        m.ack().await.map_err(|e| e.to_string())?;
    }
    for task in tasks.drain(..) {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The ideal hop between two streams of a BATCH node's shape (STREAM-3: interest retention,
/// at most 10 000 messages, discard new): its input prefilled with 9 000 messages, each
/// deleted by the broker once its ack arrives, and its output kept for a durable nobody reads
/// yet — what a worker's hop makes the broker do beyond the limits streams above, which keep
/// every message. A diagnosis beside the ideal hop, not a replacement for it. With
/// [`HopAck::Confirmed`] each ack also waits for the server's confirmation, as DELIV-1 has a
/// worker's: the hop the broker allows an implementation that keeps the protocol's guarantees.
async fn ideal_hop_on_protocol_streams(
    nats: &NatsServer,
    js: &jetstream::Context,
    tck: f64,
    ack: HopAck,
) -> R<Json> {
    const N: usize = 9_000;
    let mk = |name: &str, subject: &str| stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        retention: stream::RetentionPolicy::Interest,
        max_messages: 10_000,
        discard: stream::DiscardPolicy::New,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    let durable = |name: &str| consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        ack_policy: consumer::AckPolicy::Explicit,
        max_ack_pending: 4096,
        ..Default::default()
    };
    let err = |e: &dyn std::fmt::Display| e.to_string();
    // Streams of their own for each kind of ack, so neither run finds the other's messages.
    let (name_in, subject_in, name_out, subject_out) = match ack {
        HopAck::Unconfirmed => ("PROTO_IN", "proto.in", "PROTO_OUT", "proto.out"),
        HopAck::Confirmed => (
            "PROTO_SYNC_IN",
            "proto.sync.in",
            "PROTO_SYNC_OUT",
            "proto.sync.out",
        ),
    };
    let s_in = js
        .get_or_create_stream(mk(name_in, subject_in))
        .await
        .map_err(|e| err(&e))?;
    let s_out = js
        .get_or_create_stream(mk(name_out, subject_out))
        .await
        .map_err(|e| err(&e))?;
    // The durables first: an interest stream keeps a message only for the consumers it has.
    let c = s_in
        .create_consumer(durable("hop"))
        .await
        .map_err(|e| err(&e))?;
    s_out
        .create_consumer(durable("next"))
        .await
        .map_err(|e| err(&e))?;
    let payload = bytes::Bytes::from(vec![7u8; KIB]);
    let mut inflight = std::collections::VecDeque::new();
    for i in 0..N {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("{subject_in}-{i}").as_str());
        inflight.push_back(
            js.publish_with_headers(subject_in, h, payload.clone())
                .await
                .map_err(|e| err(&e))?,
        );
        if inflight.len() >= CEILING_WINDOW
            && let Some(f) = inflight.pop_front()
        {
            f.await.map_err(|e| err(&e))?;
        }
    }
    for f in inflight.drain(..) {
        f.await.map_err(|e| err(&e))?;
    }
    let broker_before = cpu_ticks(nats.pid());
    let rate = pipelined_hop(js, &c, subject_out, N, ack).await?;
    Ok(json!({
        "n": N,
        "msgs_s": rate,
        "broker_cpu_us_per_msg": broker_cpu_us(nats, broker_before, tck, N as u64),
    }))
}

fn ceiling(rt: &tokio::runtime::Runtime, o: &Opts, tck: f64) -> R<Json> {
    let n = o.pick(20_000, 5_000);
    let mut runs = Vec::new();
    for rep in 0..o.reps {
        let nats = NatsServer::start().map_err(|e| e.to_string())?;
        let r = rt.block_on(ceiling_once(&nats, tck, n))?;
        log(format!("ceiling rep {rep}: {r}"));
        runs.push(r);
    }
    let col = |k: &str| -> Vec<f64> { runs.iter().filter_map(|r| r[k].as_f64()).collect() };
    Ok(json!({
        "n": n, "payload_bytes": KIB, "window": 256, "batch": 256,
        "publish_msgs_s": spread(&col("publish_msgs_s")),
        "fetch_ack_msgs_s": spread(&col("fetch_ack_msgs_s")),
        "ideal_hop_msgs_s": spread(&col("ideal_hop_msgs_s")),
        "ideal_hop_broker_cpu_us_per_msg": spread(&col("ideal_hop_broker_cpu_us_per_msg")),
        "ideal_hop_broker_msgs_in_per_msg": spread(&runs.iter().filter_map(|r| r["ideal_hop_broker_msgs_per_msg"]["in"].as_f64()).collect::<Vec<_>>()),
        "ideal_hop_broker_msgs_out_per_msg": spread(&runs.iter().filter_map(|r| r["ideal_hop_broker_msgs_per_msg"]["out"].as_f64()).collect::<Vec<_>>()),
        "ideal_hop_broker_writes_per_msg": spread(&runs.iter().filter_map(|r| r["ideal_hop_broker_msgs_per_msg"]["writes"].as_f64()).collect::<Vec<_>>()),
        "ideal_hop_protocol_streams_msgs_s": spread(&runs.iter().filter_map(|r| r["ideal_hop_protocol_streams"]["msgs_s"].as_f64()).collect::<Vec<_>>()),
        "ideal_hop_protocol_streams_broker_cpu_us_per_msg": spread(&runs.iter().filter_map(|r| r["ideal_hop_protocol_streams"]["broker_cpu_us_per_msg"].as_f64()).collect::<Vec<_>>()),
        "ideal_hop_protocol_streams_confirmed_acks_msgs_s": spread(&runs.iter().filter_map(|r| r["ideal_hop_protocol_streams_confirmed_acks"]["msgs_s"].as_f64()).collect::<Vec<_>>()),
        "ideal_hop_protocol_streams_confirmed_acks_broker_cpu_us_per_msg": spread(&runs.iter().filter_map(|r| r["ideal_hop_protocol_streams_confirmed_acks"]["broker_cpu_us_per_msg"].as_f64()).collect::<Vec<_>>()),
        "credit_hop_msgs_s": spread(&col("credit_hop_msgs_s")),
        "credit_hop_max_ack_pending": 5,
        "serial_hop_msgs_s": spread(&col("serial_hop_msgs_s")),
        "serial_hop_n": n.min(5000),
    }))
}

// ---------------------------------------------------------------------------------------------
// (2) + (8) Identity hop throughput, CPU and RSS.

fn cpu_ms(p: &Proc, tck: f64) -> f64 {
    p.ticks as f64 * 1000.0 / tck
}

/// Which workers run a hop: ours alone, or ours / the reference's in a side-by-side run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Ours,
    VersusOurs,
    Reference,
}

/// How one identity run goes, beyond its count and ledger.
#[derive(Debug, Clone, Copy)]
struct HopRun {
    /// `credit.messages` on the identity and the sink (STREAM-15a); `None`: the default.
    credit: Option<i64>,
    side: Side,
    /// Measure STORE-4's own rate beside the run's ledger first ([`layout_rate`]).
    layout: bool,
}

impl HopRun {
    fn ours() -> Self {
        HopRun {
            credit: None,
            side: Side::Ours,
            layout: false,
        }
    }
}

/// `ledger`: every stage on one shared `file://` run ledger (what `videoflow-worker run` gives
/// every local run): per message a `received/…` append and, for the stages with children, an
/// `outbox/…` record, each durable before its input is acked.
fn identity_once(
    rt: &tokio::runtime::Runtime,
    redis: &str,
    n: u64,
    tck: f64,
    ledger: bool,
    how: HopRun,
) -> R<Json> {
    let HopRun {
        credit,
        side,
        layout,
    } = how;
    let reference = side == Side::Reference;
    // The reference's `videoflow.consumers` imports `requests`, which its venv does not
    // carry: a side-by-side run ends in the JSONL sink on both sides (its Python twin there).
    let sink = if side == Side::Ours {
        void_node("sink", "same")
    } else {
        jsonl_node("sink", "same")
    };
    // 1 KiB frames: 32 × 32 × 1 uint8.
    let mut yaml = flow_yaml(
        "batch",
        false,
        &[
            frames_node("src", 32, 32, 1, n, None),
            identity_node("same", "src"),
            sink,
        ],
    );
    if ledger {
        yaml = with_file_ledger(&yaml);
    }
    if let Some(m) = credit {
        yaml = with_credit(&yaml, m);
    }
    let mut b = Bench::new(rt, redis, &yaml)?;
    // `layout`: STORE-4's own rate beside the ledger, before any worker starts.
    let (layout_docs_s, layout_cpu_us) = if layout {
        let (rate, cpu) = layout_rate(&b.dir.join("layout"))?;
        (Some(rate), cpu)
    } else {
        (None, None)
    };
    let stream = |node: &str| naming::stream_name(&b.flow.flow_id, &b.flow.run_id, node);
    let s_src = StreamSpan::start(rt, b.client(), stream("src"), n)?;
    let s_same = StreamSpan::start(rt, b.client(), stream("same"), n)?;
    // The stages first, then the producer: a BATCH stream holds at most 10 000 messages
    // (STREAM-3, discard new), so n ≥ 20 000 cannot be prefilled; the producer is ~3× faster
    // than the hop, so the identity stage always has a backlog and sets the pace.
    // `VF_BENCH_STAGE_ENV=K=V,K=V`: extra variables for the identity stage (diagnosis).
    let stage_env = std::env::var("VF_BENCH_STAGE_ENV").unwrap_or_default();
    let stage_env: Vec<(&str, &str)> = stage_env
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let broker_before = cpu_ticks(b.nats.pid());
    let msgs_before = broker_msgs(&b.nats);
    let machine_before = machine_busy_ticks();
    b.spawn_on("same", &stage_env, reference)?;
    b.spawn_on("sink", &[], reference)?;
    // The reference's interpreter takes longer to import and bind.
    b.idle(Duration::from_secs(if reference { 6 } else { 2 }));
    b.spawn_on("src", &[], reference)?;
    let ok = b.wait_all(Duration::from_secs(600));
    // Everything the machine did over the run, the kernel's writeback and the bench's own
    // sampling included: what the stages and the broker leave out.
    let machine_us = machine_before
        .zip(machine_busy_ticks())
        .map(|(a, z)| z.saturating_sub(a) as f64 * 1e6 / tck / n as f64);
    let get = |node: &str| b.procs_of(node).next();
    let (src, same, sink) = (get("src"), get("same"), get("sink"));
    let span = |p: Option<&Proc>| {
        p.and_then(|p| p.exit.map(|e| (e.1 - p.spawned).as_secs_f64()))
            .unwrap_or(f64::NAN)
    };
    let sink_rate = n as f64 / span(sink);
    let broker_us = broker_cpu_us(&b.nats, broker_before, tck, n);
    let broker_msgs_per_msg = msgs_per(msgs_before, broker_msgs(&b.nats), n);
    // The whole hop's CPU a message: the three stages and the broker.
    let hop_us = broker_us.and_then(|broker| {
        [src, same, sink].iter().try_fold(broker, |sum, p| {
            Some(sum + cpu_ms((*p)?, tck) * 1e3 / n as f64)
        })
    });
    Ok(json!({
        "ok": ok && b.all_ok(),
        "layout_docs_s": layout_docs_s,
        "layout_cpu_us_per_msg": layout_cpu_us,
        // Its data and its one terminator (one replica).
        "identity_stream_last_seq": s_same.last_sequence(),
        "producer_msgs_s": s_src.rate(),
        "identity_msgs_s": s_same.rate(),
        "sink_process_span_s": span(sink),
        "sink_msgs_s_incl_startup": sink_rate,
        "cpu_ms_per_1000": {
            "producer": src.map(|p| cpu_ms(p, tck) * 1000.0 / n as f64),
            "identity": same.map(|p| cpu_ms(p, tck) * 1000.0 / n as f64),
            "sink": sink.map(|p| cpu_ms(p, tck) * 1000.0 / n as f64),
        },
        "cpu_us_per_msg_broker": broker_us,
        "cpu_us_per_msg_hop": hop_us,
        "machine_cpu_us_per_msg": machine_us,
        "broker_msgs_per_msg": broker_msgs_per_msg,
        "rss_max_kib": {
            "producer": src.map(|p| p.rss_max_kib), "identity": same.map(|p| p.rss_max_kib),
            "sink": sink.map(|p| p.rss_max_kib),
        },
        "hwm_kib": {
            "producer": src.map(|p| p.hwm_kib), "identity": same.map(|p| p.hwm_kib),
            "sink": sink.map(|p| p.hwm_kib),
        },
        "exits": b.exits(),
    }))
}

/// The flow text with a shared `file://` run ledger under the run's directory.
fn with_file_ledger(yaml: &str) -> String {
    yaml.replacen(
        "  nodes:\n",
        "  runtimeStore: {url: \"file://{{DIR}}/ledger\"}\n  nodes:\n",
        1,
    )
}

/// The flow text with `credit.messages = m` on every node with a parent (STREAM-15a).
fn with_credit(yaml: &str, m: i64) -> String {
    yaml.replace(
        "    parents: [",
        &format!("    credit: {{messages: {m}}}\n    parents: ["),
    )
}

/// `VF_BENCH_CREDIT=m`: the identity hops and the payload sweep with `credit.messages = m` on
/// the identity and the sink (an A/B of the default against another credit, alternated by
/// hand).
fn credit_override() -> Option<i64> {
    std::env::var("VF_BENCH_CREDIT")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// Credits the sweep compares: STREAM-15's 5 (what a 1.0.4 provisioner makes) and more.
const CREDITS: [i64; 5] = [5, 16, 64, 128, 256];

/// The identity hop on the file ledger at each credit of [`CREDITS`], alternating within each
/// repetition so every credit sees the same load; the default credit is chosen from this.
fn credit_sweep(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts, tck: f64) -> R<Json> {
    let n = o.pick(5_000, 1_000);
    let mut runs: Vec<Vec<Json>> = vec![Vec::new(); CREDITS.len()];
    for rep in 0..o.reps {
        for (i, credit) in CREDITS.iter().enumerate() {
            let r = identity_once(
                rt,
                redis,
                n,
                tck,
                true,
                HopRun {
                    credit: Some(*credit),
                    ..HopRun::ours()
                },
            )?;
            log(format!(
                "credit {credit} rep {rep}: identity {:.0} msg/s, cpu µs/msg identity {:.0}, ok {}",
                r["identity_msgs_s"].as_f64().unwrap_or(f64::NAN),
                r["cpu_ms_per_1000"]["identity"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                r["ok"]
            ));
            runs[i].push(r);
        }
    }
    let rows: Vec<Json> = CREDITS
        .iter()
        .zip(&runs)
        .map(|(credit, rs)| {
            let col = |f: &dyn Fn(&Json) -> Option<f64>| -> Vec<f64> { rs.iter().filter_map(f).collect() };
            json!({
                "credit_messages": credit,
                "ok": rs.iter().all(|r| r["ok"] == json!(true)),
                "identity_msgs_s": spread(&col(&|r| r["identity_msgs_s"].as_f64())),
                "cpu_ms_per_1000_identity": spread(&col(&|r| r["cpu_ms_per_1000"]["identity"].as_f64())),
                "rss_steady_identity_kib": spread(&col(&|r| r["rss_max_kib"]["identity"].as_f64())),
            })
        })
        .collect();
    Ok(json!({"n": n, "payload_bytes": KIB, "store": "file", "credits": rows}))
}

/// Item 4 of the speed issue: the identity hop on the reference 1.0.4's workers and on ours,
/// each on a fresh broker of the same build, alternating one run at a time (so both see the
/// same load), with the shared `file://` ledger and with each side's memory ledger.
fn versus_reference(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts, tck: f64) -> R<Json> {
    let n = o.pick(2_000, 300);
    let mut out = serde_json::Map::new();
    for ledger in [true, false] {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for rep in 0..o.reps {
            for reference in [true, false] {
                let side = if reference {
                    Side::Reference
                } else {
                    Side::VersusOurs
                };
                // Ours without a ledger passes 2 000 messages in about 0.2 s, where start and
                // end would weigh on the rate: it runs ten times as many (about as long as the
                // reference's 2 000). Rates are compared, so the counts need not match.
                let count = if ledger || reference { n } else { n * 10 };
                // `VF_BENCH_REFERENCE_CREDIT=m`: the reference's durables made with
                // `max_ack_pending` m (5 is what 1.0.4's own provisioner makes).
                let credit = std::env::var("VF_BENCH_REFERENCE_CREDIT")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .filter(|_| reference);
                let r = identity_once(
                    rt,
                    redis,
                    count,
                    tck,
                    ledger,
                    HopRun {
                        side,
                        credit,
                        ..HopRun::ours()
                    },
                )?;
                log(format!(
                    "versus{} rep {rep} {}: identity {:.0} msg/s, cpu µs/msg identity {:.0}, ok {}",
                    if ledger {
                        " (file ledger)"
                    } else {
                        " (memory ledger)"
                    },
                    if reference { "reference 1.0.4" } else { "ours" },
                    r["identity_msgs_s"].as_f64().unwrap_or(f64::NAN),
                    r["cpu_ms_per_1000"]["identity"]
                        .as_f64()
                        .unwrap_or(f64::NAN),
                    r["ok"]
                ));
                if reference {
                    theirs.push(r);
                } else {
                    ours.push(r);
                }
            }
        }
        let rate = |rs: &[Json]| -> Vec<f64> {
            rs.iter()
                .filter_map(|r| r["identity_msgs_s"].as_f64())
                .collect()
        };
        let cpu = |rs: &[Json]| -> Vec<f64> {
            rs.iter()
                .filter_map(|r| r["cpu_ms_per_1000"]["identity"].as_f64())
                .collect()
        };
        // Per repetition: ours over the reference run just before it.
        let ratios: Vec<f64> = rate(&ours)
            .iter()
            .zip(rate(&theirs))
            .map(|(a, b)| a / b)
            .collect();
        out.insert(
            if ledger { "file" } else { "memory" }.into(),
            json!({
                "ours_msgs_s": spread(&rate(&ours)),
                "reference_msgs_s": spread(&rate(&theirs)),
                "ratio": spread(&ratios),
                "ours_cpu_us_per_msg_identity": spread(&cpu(&ours)),
                "reference_cpu_us_per_msg_identity": spread(&cpu(&theirs)),
                "ok": ours.iter().chain(&theirs).all(|r| r["ok"] == json!(true)),
                "runs": {"ours": ours, "reference": theirs},
            }),
        );
    }
    out.insert("n".into(), json!(n));
    out.insert("n_ours_memory".into(), json!(n * 10));
    out.insert("payload_bytes".into(), json!(KIB));
    Ok(Json::Object(out))
}

/// Documents one writer puts in [`layout_rate`].
const LAYOUT_DOCS: usize = 2_000;
/// Documents a writer makes durable together: more than any in-flight window of ours.
const LAYOUT_BATCH: usize = 256;

/// What STORE-4's layout alone gets from the ledger's filesystem in its present state, with
/// no broker and no worker: two writers (the hop's producer and identity each record one
/// `outbox/<id>` document per message) in `dir` — a sibling of the hop's ledger directory,
/// left in place until the bench's directory goes, so no deletion of its own slows the hop
/// that follows. Each document is made the cheapest way STORE-4 allows (COMPATIBILITY D25):
/// its `.json.lock` created and locked, its bytes written to an unnamed file; per batch of
/// [`LAYOUT_BATCH`] one `syncfs`, the links to `.json`, one directory `fsync`. Returns the
/// slower writer's documents per second and the whole machine's CPU-µs per document pair
/// (one message's records; `/proc/stat`, so the kernel's writeback threads count too). On
/// ext4 without a journal (this machine's `/tmp`) a new inode costs most right after many were
/// deleted (the allocator skips recently deleted ones), so the rate swings several-fold
/// between repetitions.
fn layout_rate(dir: &Path) -> R<(f64, Option<f64>)> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let busy_before = machine_busy_ticks();
    let rates: Vec<R<f64>> = std::thread::scope(|s| {
        let writers: Vec<_> = ["src", "same"]
            .iter()
            .map(|w| s.spawn(move || layout_writer(dir, w)))
            .collect();
        writers
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("layout writer panicked".into()))
            })
            .collect()
    });
    let cpu_us = busy_before
        .zip(machine_busy_ticks())
        .map(|(a, z)| z.saturating_sub(a) as f64 * 1e6 / clk_tck() / LAYOUT_DOCS as f64);
    let rate = rates
        .into_iter()
        .try_fold(f64::INFINITY, |min, r| r.map(|r| min.min(r)))?;
    Ok((rate, cpu_us))
}

/// Ticks every CPU of the machine spent busy (`/proc/stat`: all but idle and iowait).
fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let total: u64 = cpu.iter().take(8).sum();
    Some(total - cpu.get(3)? - cpu.get(4)?)
}

/// One writer of [`layout_rate`]: [`LAYOUT_DOCS`] documents named as 1.0.4 names a
/// node's outbox records, with a value the size of one (hex JSON, ~300 bytes).
fn layout_writer(dir: &Path, writer: &str) -> R<f64> {
    use videoflow_worker::store::file::{lock, name_unnamed, unnamed};
    let io = |e: std::io::Error| e.to_string();
    let value = format!("{{\"value\":\"{}\",\"version\":1}}", "7b".repeat(140));
    let d = File::open(dir).map_err(io)?;
    let t = Instant::now();
    for start in (0..LAYOUT_DOCS).step_by(LAYOUT_BATCH) {
        let mut batch = Vec::with_capacity(LAYOUT_BATCH);
        for k in start..(start + LAYOUT_BATCH).min(LAYOUT_DOCS) {
            let stem = format!("vf%2Fbench%2Frun%2F{writer}%2Foutbox%2F{k:016x}");
            let held = lock(dir, &format!("{stem}.json.lock")).map_err(io)?;
            let mut f = unnamed(dir).map_err(io)?;
            std::io::Write::write_all(&mut f, value.as_bytes()).map_err(io)?;
            batch.push((held, f, dir.join(format!("{stem}.json"))));
        }
        nix::unistd::syncfs(&d).map_err(|e| io(e.into()))?;
        for (_held, f, path) in &batch {
            name_unnamed(f, path).map_err(io)?;
        }
        d.sync_all().map_err(io)?;
    }
    Ok(LAYOUT_DOCS as f64 / t.elapsed().as_secs_f64())
}

/// `ledger`: see [`identity_once`]; fewer messages, the ledger's fsyncs set the pace.
fn identity(
    rt: &tokio::runtime::Runtime,
    redis: &str,
    o: &Opts,
    tck: f64,
    ledger: bool,
) -> R<Json> {
    let n = if ledger {
        std::env::var("VF_BENCH_LEDGER_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(o.pick(5_000, 1_000))
    } else {
        o.pick(20_000, 3_000)
    };
    let credit = credit_override();
    let mut runs = Vec::new();
    for rep in 0..o.reps {
        // With the ledger, STORE-4's own rate on this filesystem just before the hop, beside
        // its ledger, so both see about the same disk state (recent deletions slow ext4's
        // inode allocator).
        let r = identity_once(
            rt,
            redis,
            n,
            tck,
            ledger,
            HopRun {
                layout: ledger,
                credit,
                ..HopRun::ours()
            },
        )?;
        let layout = r["layout_docs_s"].as_f64();
        log(format!(
            "identity{} rep {rep}: identity {:.0} msg/s, producer {:.0} msg/s, cpu µs/msg identity {:.0}, hop with the broker {:.0}{}, ok {}",
            if ledger { " (file ledger)" } else { "" },
            r["identity_msgs_s"].as_f64().unwrap_or(f64::NAN),
            r["producer_msgs_s"].as_f64().unwrap_or(f64::NAN),
            r["cpu_ms_per_1000"]["identity"]
                .as_f64()
                .unwrap_or(f64::NAN),
            r["cpu_us_per_msg_hop"].as_f64().unwrap_or(f64::NAN),
            layout.map_or(String::new(), |d| format!(
                ", STORE-4 alone {d:.0} docs/s a writer ({:.0} machine CPU-µs a message)",
                r["layout_cpu_us_per_msg"].as_f64().unwrap_or(f64::NAN)
            )),
            r["ok"]
        ));
        runs.push(r);
    }
    let col =
        |f: &dyn Fn(&Json) -> Option<f64>| -> Vec<f64> { runs.iter().filter_map(f).collect() };
    Ok(json!({
        "n": n, "payload_bytes": KIB, "store": if ledger { "file" } else { "memory" },
        "identity_msgs_s": spread(&col(&|r| r["identity_msgs_s"].as_f64())),
        "producer_msgs_s": spread(&col(&|r| r["producer_msgs_s"].as_f64())),
        "sink_msgs_s_incl_startup": spread(&col(&|r| r["sink_msgs_s_incl_startup"].as_f64())),
        "cpu_ms_per_1000_identity": spread(&col(&|r| r["cpu_ms_per_1000"]["identity"].as_f64())),
        "cpu_ms_per_1000_producer": spread(&col(&|r| r["cpu_ms_per_1000"]["producer"].as_f64())),
        "cpu_ms_per_1000_sink": spread(&col(&|r| r["cpu_ms_per_1000"]["sink"].as_f64())),
        "cpu_us_per_msg_broker": spread(&col(&|r| r["cpu_us_per_msg_broker"].as_f64())),
        "cpu_us_per_msg_hop": spread(&col(&|r| r["cpu_us_per_msg_hop"].as_f64())),
        "machine_cpu_us_per_msg": spread(&col(&|r| r["machine_cpu_us_per_msg"].as_f64())),
        "broker_writes_per_msg": spread(&col(&|r| r["broker_msgs_per_msg"]["writes"].as_f64())),
        "rss_steady_identity_kib": spread(&col(&|r| r["rss_max_kib"]["identity"].as_f64())),
        "layout_docs_s": if ledger { spread(&col(&|r| r["layout_docs_s"].as_f64())) } else { Json::Null },
        "identity_over_layout": if ledger {
            spread(&col(&|r| Some(r["identity_msgs_s"].as_f64()? / r["layout_docs_s"].as_f64()?)))
        } else {
            Json::Null
        },
        "layout_cpu_us_per_msg": if ledger { spread(&col(&|r| r["layout_cpu_us_per_msg"].as_f64())) } else { Json::Null },
        "layout": {"docs_per_writer": LAYOUT_DOCS, "batch": LAYOUT_BATCH, "form": "D25: lock, unnamed file, syncfs, link, directory fsync"},
        "runs": runs,
    }))
}

/// The broker's `in_msgs` and `out_msgs` counters (`/varz`): protocol messages it received
/// and sent, pull requests, acks and their confirmations included; and its read and write
/// system calls (`/proc/PID/io`: its sockets, its stream files and its own wake-ups), which
/// say how many messages each wake of the broker carries.
fn broker_msgs(nats: &NatsServer) -> Option<[u64; 4]> {
    let body = videoflow_testkit::cluster::http_get(&nats.monitoring_url(), "/varz");
    let v: Json = serde_json::from_str(&body).ok()?;
    let io = std::fs::read_to_string(format!("/proc/{}/io", nats.pid())).ok()?;
    let field = |k: &str| -> Option<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(": ")?.trim().parse().ok())
    };
    Some([
        v["in_msgs"].as_u64()?,
        v["out_msgs"].as_u64()?,
        field("syscr")?,
        field("syscw")?,
    ])
}

/// The broker's CPU-µs per hop message since `before` (its CPU ticks then).
fn broker_cpu_us(nats: &NatsServer, before: Option<u64>, tck: f64, n: u64) -> Option<f64> {
    before
        .zip(cpu_ticks(nats.pid()))
        .map(|(a, z)| z.saturating_sub(a) as f64 * 1e6 / tck / n as f64)
}

/// Broker messages in and out, and its read and write system calls, per hop message between
/// two [`broker_msgs`] readings.
fn msgs_per(before: Option<[u64; 4]>, after: Option<[u64; 4]>, n: u64) -> Json {
    match before.zip(after) {
        Some((a, z)) => {
            let per = |i: usize| z[i].saturating_sub(a[i]) as f64 / n as f64;
            json!({"in": per(0), "out": per(1), "reads": per(2), "writes": per(3)})
        }
        None => Json::Null,
    }
}

/// The identity hop under the ideal hop's conditions (`ceiling`'s (c)): its input stream already
/// holds `n` messages and nothing else runs while it works — the producer has ended, the sink
/// starts once the identity has published everything, and no watcher subscribes to either
/// subject. The rate is the output stream's own: `n − 1` over the broker's timestamps of the
/// first and the last message the identity published. `n` + the terminator must fit a BATCH
/// stream's cap of 10 000 (STREAM-3, discard new), or the producer waits for room.
fn backlog_once(
    rt: &tokio::runtime::Runtime,
    redis: &str,
    n: u64,
    tck: f64,
    credit: Option<i64>,
) -> R<Json> {
    let mut yaml = flow_yaml(
        "batch",
        false,
        &[
            frames_node("src", 32, 32, 1, n, None),
            identity_node("same", "src"),
            void_node("sink", "same"),
        ],
    );
    if let Some(m) = credit {
        yaml = with_credit(&yaml, m);
    }
    let mut b = Bench::new(rt, redis, &yaml)?;
    b.spawn("src", &[])?;
    let produced = b.wait_for(Duration::from_secs(120), |p| p.node == "src");
    let broker_before = cpu_ticks(b.nats.pid());
    let msgs_before = broker_msgs(&b.nats);
    b.spawn("same", &[])?;
    let client = b.client().clone();
    let name = naming::stream_name(&b.flow.flow_id, &b.flow.run_id, "same");
    let deadline = Instant::now() + Duration::from_secs(120);
    let state = loop {
        b.poll();
        let info = rt.block_on(async {
            let js = jetstream::new(client.clone());
            let mut s = js.get_stream(&name).await.map_err(|e| e.to_string())?;
            s.info()
                .await
                .map(|i| i.state.clone())
                .map_err(|e| e.to_string())
        })?;
        if info.messages >= n || Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let broker_us = broker_cpu_us(&b.nats, broker_before, tck, n);
    let broker_msgs_per_msg = msgs_per(msgs_before, broker_msgs(&b.nats), n);
    b.spawn("sink", &[])?;
    let ok = produced && b.wait_all(Duration::from_secs(120));
    let span = (state.last_timestamp.unix_timestamp_nanos()
        - state.first_timestamp.unix_timestamp_nanos()) as f64
        / 1e9;
    let same = b.procs_of("same").next();
    Ok(json!({
        "ok": ok && b.all_ok() && state.messages == n,
        "published_by_identity": state.messages,
        "identity_msgs_s": if span > 0.0 { (state.messages.saturating_sub(1)) as f64 / span } else { f64::NAN },
        "cpu_ms_per_1000_identity": same.map(|p| cpu_ms(p, tck) * 1000.0 / n as f64),
        "cpu_ms_per_1000_broker": broker_us,
        "broker_msgs_per_msg": broker_msgs_per_msg,
        "exits": b.exits(),
    }))
}

/// [`backlog_once`] per repetition, at the default credit and at the ideal hop's window (256),
/// each repetition after a run of the ideal hop of its own.
fn identity_backlog(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts, tck: f64) -> R<Json> {
    let n = o.pick(9_000, 3_000);
    let credits: [Option<i64>; 2] = [None, Some(256)];
    let mut runs: Vec<Vec<Json>> = vec![Vec::new(); credits.len()];
    let mut ideal = Vec::new();
    for rep in 0..o.reps {
        // The ideal hop again, right before this repetition's runs, so each ratio compares
        // runs seconds apart (the load of this shared VM moves both by a third in minutes).
        let nats = NatsServer::start().map_err(|e| e.to_string())?;
        let c = rt.block_on(ceiling_once(&nats, tck, o.pick(20_000, 5_000)))?;
        drop(nats);
        let adjacent = c["ideal_hop_msgs_s"].as_f64().unwrap_or(f64::NAN);
        // A diagnosis beside the target's ratio: the same raw hop between streams of the
        // protocol's shape with every ack confirmed (DELIV-1), the most a worker can reach.
        let confirmed_hop = c["ideal_hop_protocol_streams_confirmed_acks"]["msgs_s"]
            .as_f64()
            .unwrap_or(f64::NAN);
        log(format!(
            "identity backlog rep {rep}: adjacent ideal hop {adjacent:.0} msg/s, with confirmed acks on the protocol's streams {confirmed_hop:.0} msg/s"
        ));
        ideal.push(adjacent);
        for (i, credit) in credits.iter().enumerate() {
            let mut r = backlog_once(rt, redis, n, tck, *credit)?;
            if let Some(m) = r.as_object_mut() {
                let ours = m["identity_msgs_s"].as_f64().unwrap_or(f64::NAN);
                m.insert("adjacent_ideal_hop_msgs_s".into(), json!(adjacent));
                m.insert("over_adjacent_ideal".into(), json!(ours / adjacent));
                m.insert("adjacent_confirmed_hop_msgs_s".into(), json!(confirmed_hop));
                m.insert(
                    "over_adjacent_confirmed".into(),
                    json!(ours / confirmed_hop),
                );
            }
            log(format!(
                "identity backlog credit {} rep {rep}: {:.0} msg/s ({:.1} % of the ideal hop), cpu µs/msg {:.1}, broker {:.1}, ok {}",
                credit.map_or("default".to_owned(), |c| c.to_string()),
                r["identity_msgs_s"].as_f64().unwrap_or(f64::NAN),
                r["over_adjacent_ideal"].as_f64().unwrap_or(f64::NAN) * 100.0,
                r["cpu_ms_per_1000_identity"].as_f64().unwrap_or(f64::NAN),
                r["cpu_ms_per_1000_broker"].as_f64().unwrap_or(f64::NAN),
                r["ok"]
            ));
            runs[i].push(r);
        }
    }
    let rows: Vec<Json> = credits
        .iter()
        .zip(&runs)
        .map(|(credit, rs)| {
            let col = |k: &str| -> Vec<f64> { rs.iter().filter_map(|r| r[k].as_f64()).collect() };
            json!({
                "credit_messages": credit.unwrap_or(videoflow_core::model::DEFAULT_CREDIT_MESSAGES),
                "ok": rs.iter().all(|r| r["ok"] == json!(true)),
                "identity_msgs_s": spread(&col("identity_msgs_s")),
                "cpu_ms_per_1000_identity": spread(&col("cpu_ms_per_1000_identity")),
                "cpu_ms_per_1000_broker": spread(&col("cpu_ms_per_1000_broker")),
                "broker_writes_per_msg": spread(&rs.iter().filter_map(|r| r["broker_msgs_per_msg"]["writes"].as_f64()).collect::<Vec<_>>()),
                "over_adjacent_ideal": spread(&col("over_adjacent_ideal")),
                "over_adjacent_confirmed": spread(&col("over_adjacent_confirmed")),
                "runs": rs,
            })
        })
        .collect();
    Ok(json!({
        "n": n, "payload_bytes": KIB, "store": "memory",
        "adjacent_ideal_hop_msgs_s": spread(&ideal),
        "credits": rows,
    }))
}

// ---------------------------------------------------------------------------------------------
// Issue #10: the component boundary — the same identity hop built in and as a Python exec
// component (sdk/python/videoflow_sdk/examples/identity.py), same flow, same method.

fn boundary_once(rt: &tokio::runtime::Runtime, redis: &str, exec: bool, n: u64) -> R<Json> {
    let stage = if exec {
        exec_identity_node("same", "src")
    } else {
        identity_node("same", "src")
    };
    let yaml = flow_yaml(
        "batch",
        false,
        &[
            frames_node("src", 32, 32, 1, n, None),
            stage,
            void_node("sink", "same"),
        ],
    );
    let mut b = Bench::new(rt, redis, &yaml)?;
    let w_same = Watch::start(rt, b.client(), b.data_subject("same"));
    b.spawn("same", &[])?;
    b.spawn("sink", &[])?;
    b.idle(Duration::from_secs(if exec { 4 } else { 2 }));
    b.spawn("src", &[])?;
    let ok = b.wait_all(Duration::from_secs(300));
    let mut proc_us: Vec<f64> = w_same.proctimes().iter().map(|t| t * 1e6).collect();
    // The first 10 % are warm-up (connections, first fetches, the interpreter's caches).
    proc_us.drain(..proc_us.len() / 10);
    Ok(json!({
        "exec": exec, "n": n, "ok": ok && b.all_ok(), "published": w_same.count(),
        "msgs_s": w_same.rate(),
        "proctime_us": {"p50": quantile(&proc_us, 0.5), "p95": quantile(&proc_us, 0.95)},
        "exits": if ok && b.all_ok() { Json::Null } else { b.exits() },
    }))
}

fn boundary(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts) -> R<Json> {
    let n = o.pick(5_000, 1_000);
    let (mut builtin, mut exec) = (Vec::new(), Vec::new());
    for rep in 0..o.reps {
        for (is_exec, runs) in [(false, &mut builtin), (true, &mut exec)] {
            let r = boundary_once(rt, redis, is_exec, n)?;
            log(format!(
                "boundary rep {rep} exec={is_exec}: {:.0} msg/s, proctime p50 {:.1} µs, ok {}",
                r["msgs_s"].as_f64().unwrap_or(f64::NAN),
                r["proctime_us"]["p50"].as_f64().unwrap_or(f64::NAN),
                r["ok"]
            ));
            runs.push(r);
        }
    }
    let col = |runs: &[Json], f: &dyn Fn(&Json) -> Option<f64>| -> Vec<f64> {
        runs.iter().filter_map(f).collect()
    };
    let rate = |r: &Json| r["msgs_s"].as_f64();
    let p50 = |r: &Json| r["proctime_us"]["p50"].as_f64();
    let added: Vec<f64> = exec
        .iter()
        .zip(&builtin)
        .filter_map(|(e, b)| Some(p50(e)? - p50(b)?))
        .collect();
    let ratio: Vec<f64> = exec
        .iter()
        .zip(&builtin)
        .filter_map(|(e, b)| Some(rate(e)? / rate(b)?))
        .collect();
    Ok(json!({
        "n": n, "payload_bytes": KIB,
        "builtin_msgs_s": spread(&col(&builtin, &rate)),
        "exec_msgs_s": spread(&col(&exec, &rate)),
        "exec_over_builtin": spread(&ratio),
        "builtin_proctime_p50_us": spread(&col(&builtin, &p50)),
        "exec_proctime_p50_us": spread(&col(&exec, &p50)),
        "added_p50_us": spread(&added),
        "runs": {"builtin": builtin, "exec": exec},
    }))
}

// ---------------------------------------------------------------------------------------------
// (3) + (7) + (8 idle) Per-hop latency at 50 msg/s and the end-of-stream drain per depth.

/// `ledger`: the flow runs on a shared `file://` run ledger, so every parent ends by the
/// EOS-7 barrier (counted) instead of the EOS-3 quiescence window (waited).
fn latency_depth(
    rt: &tokio::runtime::Runtime,
    redis: &str,
    depth: usize,
    count: u64,
    ledger: bool,
) -> R<Json> {
    let mut nodes = vec![frames_node("src", 32, 32, 1, count, Some(50.0))];
    let mut parent = "src".to_owned();
    for i in 1..=depth {
        let name = format!("hop{i}");
        nodes.push(identity_node(&name, &parent));
        parent = name;
    }
    nodes.push(jsonl_node("sink", &parent));
    let mut yaml = flow_yaml("batch", false, &nodes);
    if ledger {
        yaml = with_file_ledger(&yaml);
    }
    let mut b = Bench::new(rt, redis, &yaml)?;
    for i in 1..=depth {
        b.spawn(&format!("hop{i}"), &[])?;
    }
    b.spawn("sink", &[])?;
    // Let every stage start and settle: the idle RSS is read now.
    b.idle(Duration::from_secs(2));
    let idle_rss: Vec<u64> = (1..=depth)
        .flat_map(|i| b.rss_now(&format!("hop{i}")))
        .chain(b.rss_now("sink"))
        .collect();
    b.spawn("src", &[])?;
    let ok = b.wait_all(Duration::from_secs(120));
    let out = b.jsonl("out.jsonl");
    // The first 10 % are warm-up (connections, first fetches).
    let skip = out.len() / 10;
    let lat: Vec<f64> = out
        .iter()
        .skip(skip)
        .filter_map(|r| Some(r["arrival_ts"].as_f64()? - r["event_ts"].as_f64()?))
        .map(|s| s * 1000.0)
        .collect();
    let exit_of = |node: &str| b.procs_of(node).next().and_then(|p| p.exit.map(|e| e.1));
    let drain = match (exit_of("src"), exit_of("sink")) {
        (Some(p), Some(s)) if s > p => (s - p).as_secs_f64(),
        _ => f64::NAN,
    };
    Ok(json!({
        "depth": depth, "count": count, "delivered": out.len(), "ok": ok && b.all_ok(),
        "median_ms": quantile(&lat, 0.5), "p95_ms": quantile(&lat, 0.95),
        "max_ms": quantile(&lat, 1.0),
        "drain_s": drain,
        "idle_rss_kib": idle_rss,
        "exits": if ok && b.all_ok() { Json::Null } else { b.exits() },
    }))
}

/// The raw client's per-hop latency at 50 msg/s: the floor a worker's hop is compared with.
/// A chain of `depth` hops on streams configured as STREAM-3's BATCH streams (interest
/// retention, 10 000 messages, discard new), each hop a durable pull consumer read by the
/// client's own message stream on its own thread and connection (a worker is its own
/// process), publishing each message on with a message id, waiting for the pub-ack, then
/// acking the input with confirmation (DELIV-1) — a worker's obligations, nothing else.
/// The producer stamps each 1 KiB payload with its send time; the end subscriber reads it.
fn raw_latency_depth(depth: usize, count: u64) -> R<Json> {
    let nats = NatsServer::start().map_err(|e| e.to_string())?;
    let url = nats.url();
    let base = Instant::now();
    let one = |f: std::pin::Pin<Box<dyn std::future::Future<Output = R<()>> + Send>>| {
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?
                .block_on(f)
        })
    };
    // Streams and durables first, so every hop finds its input.
    let setup = {
        let url = url.clone();
        one(Box::pin(async move {
            let js = jetstream::new(async_nats::connect(url).await.map_err(|e| e.to_string())?);
            for i in 0..=depth {
                let s = js
                    .create_stream(stream::Config {
                        name: format!("LAT{i}"),
                        subjects: vec![format!("lat.{i}")],
                        retention: stream::RetentionPolicy::Interest,
                        max_messages: 10_000,
                        discard: stream::DiscardPolicy::New,
                        duplicate_window: Duration::from_secs(120),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                s.create_consumer(consumer::pull::Config {
                    durable_name: Some(format!("hop{}", i + 1)),
                    ack_policy: consumer::AckPolicy::Explicit,
                    max_ack_pending: 64,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            }
            Ok(())
        }))
    };
    setup.join().map_err(|_| "setup panicked".to_owned())??;
    let lat = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    // Hops 1..=depth republish; "hop depth+1" is the end subscriber.
    for i in 1..=depth + 1 {
        let (url, lat) = (url.clone(), lat.clone());
        threads.push(one(Box::pin(async move {
            let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
            let js = jetstream::new(client);
            let c: consumer::PullConsumer = js
                .get_stream(format!("LAT{}", i - 1))
                .await
                .map_err(|e| e.to_string())?
                .get_consumer(&format!("hop{i}"))
                .await
                .map_err(|e| e.to_string())?;
            let mut msgs = c.messages().await.map_err(|e| e.to_string())?;
            for k in 0..count {
                let m = match msgs.next().await {
                    Some(m) => m.map_err(|e| e.to_string())?,
                    None => break,
                };
                if i <= depth {
                    let mut h = async_nats::HeaderMap::new();
                    h.insert("Nats-Msg-Id", format!("h{i}-{k}").as_str());
                    js.publish_with_headers(format!("lat.{i}"), h, m.payload.clone())
                        .await
                        .map_err(|e| e.to_string())?
                        .await
                        .map_err(|e| e.to_string())?;
                } else {
                    let mut sent = [0u8; 8];
                    sent.copy_from_slice(&m.payload[..8]);
                    let sent = Duration::from_nanos(u64::from_le_bytes(sent));
                    let ms = (base.elapsed().saturating_sub(sent)).as_secs_f64() * 1000.0;
                    lat.lock().map_err(|e| e.to_string())?.push(ms);
                }
                m.double_ack().await.map_err(|e| e.to_string())?;
            }
            Ok(())
        })));
    }
    std::thread::sleep(Duration::from_millis(500));
    let producer = one(Box::pin(async move {
        let js = jetstream::new(async_nats::connect(url).await.map_err(|e| e.to_string())?);
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        for k in 0..count {
            tick.tick().await;
            let mut payload = vec![7u8; KIB];
            let now = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
            payload[..8].copy_from_slice(&now.to_le_bytes());
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("p-{k}").as_str());
            js.publish_with_headers("lat.0", h, payload.into())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }));
    producer
        .join()
        .map_err(|_| "producer panicked".to_owned())??;
    for t in threads {
        t.join().map_err(|_| "hop panicked".to_owned())??;
    }
    let lat = lat.lock().map_err(|e| e.to_string())?.clone();
    // The first 10 % are warm-up, as for the worker's chains.
    let lat: Vec<f64> = lat.iter().skip(lat.len() / 10).copied().collect();
    Ok(json!({
        "depth": depth, "count": count, "delivered": lat.len(),
        "median_ms": quantile(&lat, 0.5), "p95_ms": quantile(&lat, 0.95),
    }))
}

fn latency(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts) -> R<Json> {
    let count = o.pick(200, 60);
    let depths = [1usize, 2, 4, 8];
    let xs: Vec<f64> = depths.iter().map(|d| *d as f64).collect();
    let mut reps = Vec::new();
    for rep in 0..o.reps {
        let (mut rows, mut raw_rows) = (Vec::new(), Vec::new());
        for d in depths {
            let r = latency_depth(rt, redis, d, count, false)?;
            log(format!(
                "latency rep {rep} depth {d}: median {:.2} ms p95 {:.2} ms drain {:.2} s ok {}",
                r["median_ms"].as_f64().unwrap_or(f64::NAN),
                r["p95_ms"].as_f64().unwrap_or(f64::NAN),
                r["drain_s"].as_f64().unwrap_or(f64::NAN),
                r["ok"]
            ));
            rows.push(r);
            let raw = raw_latency_depth(d, count)?;
            log(format!(
                "latency rep {rep} depth {d}, raw client: median {:.2} ms p95 {:.2} ms",
                raw["median_ms"].as_f64().unwrap_or(f64::NAN),
                raw["p95_ms"].as_f64().unwrap_or(f64::NAN),
            ));
            raw_rows.push(raw);
        }
        let of = |rows: &[Json], key: &str| -> Vec<f64> {
            rows.iter()
                .map(|r| r[key].as_f64().unwrap_or(f64::NAN))
                .collect()
        };
        let column = |key: &str| of(&rows, key);
        reps.push(json!({
            "raw_marginal_median_ms_per_hop": slope(&xs, &of(&raw_rows, "median_ms")),
            "raw_depths": raw_rows,
            "marginal_median_ms_per_hop": slope(&xs, &column("median_ms")),
            "marginal_p95_ms_per_hop": slope(&xs, &column("p95_ms")),
            "marginal_drain_s_per_hop": slope(&xs, &column("drain_s")),
            "depths": rows,
        }));
    }
    // Each repetition sweeps every depth; a target is judged on the worst repetition.
    let per_rep = |key: &str| -> Vec<f64> {
        reps.iter()
            .map(|r| r[key].as_f64().unwrap_or(f64::NAN))
            .collect()
    };
    let worst = |key: &str| per_rep(key).into_iter().fold(f64::NAN, f64::max);
    Ok(json!({
        "rate_msgs_s": 50, "count": count, "payload_bytes": KIB,
        "marginal_median_ms_per_hop": worst("marginal_median_ms_per_hop"),
        "marginal_p95_ms_per_hop": worst("marginal_p95_ms_per_hop"),
        "marginal_drain_s_per_hop": worst("marginal_drain_s_per_hop"),
        "marginal_median_ms_per_hop_reps": spread(&per_rep("marginal_median_ms_per_hop")),
        "raw_marginal_median_ms_per_hop_reps": spread(&per_rep("raw_marginal_median_ms_per_hop")),
        "depths": reps.first().map_or(Json::Null, |r| r["depths"].clone()),
        "reps": reps,
    }))
}

/// (7) with the run ledger: the same chains on a shared `file://` ledger (what `videoflow-worker
/// run` gives every local run), so drain is the EOS-7 barrier's — every replica's terminator
/// recorded and every id counted — with no quiescence window per hop.
fn drain_ledger(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts) -> R<Json> {
    let count = o.pick(100, 40);
    let depths = [1usize, 2, 4, 8];
    let mut rows = Vec::new();
    for d in depths {
        let r = latency_depth(rt, redis, d, count, true)?;
        log(format!(
            "ledger depth {d}: median {:.2} ms drain {:.2} s ok {}",
            r["median_ms"].as_f64().unwrap_or(f64::NAN),
            r["drain_s"].as_f64().unwrap_or(f64::NAN),
            r["ok"]
        ));
        rows.push(r);
    }
    let xs: Vec<f64> = depths.iter().map(|d| *d as f64).collect();
    let drain: Vec<f64> = rows
        .iter()
        .map(|r| r["drain_s"].as_f64().unwrap_or(f64::NAN))
        .collect();
    Ok(json!({
        "rate_msgs_s": 50, "count": count, "store": "file",
        "marginal_drain_s_per_hop": slope(&xs, &drain),
        "depths": rows,
    }))
}

// ---------------------------------------------------------------------------------------------
// (8 idle) What an idle worker's resident memory is made of.

/// `/proc/<pid>/smaps` summed by kind of mapping, in KiB of `Rss`: the binary's own mappings
/// (text, data), other files (shared libraries, locale), the `[heap]`, anonymous mappings
/// (thread stacks, malloc arenas of other threads, large allocations) and the rest; plus
/// `smaps_rollup`'s anonymous / file split and the thread count.
fn smaps_breakdown(pid: u32) -> Option<Json> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_string_lossy().into_owned();
    let mut by: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut anon_maps: Vec<(u64, u64)> = Vec::new(); // (size KiB, rss KiB)
    let mut kind: &'static str = "other";
    let mut size = 0u64;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let path = line.split_whitespace().nth(5).unwrap_or("");
            kind = match path {
                "" => "anonymous",
                "[heap]" => "heap",
                "[stack]" => "main_stack",
                p if p == exe => "binary",
                p if p.starts_with('[') => "kernel",
                _ => "other_files",
            };
            continue;
        }
        let value = || words.clone().next().and_then(|v| v.parse::<u64>().ok());
        match first {
            "Size:" => size = value().unwrap_or(0),
            "Rss:" => {
                let rss = value().unwrap_or(0);
                *by.entry(kind).or_default() += rss;
                if kind == "anonymous" && rss > 0 {
                    anon_maps.push((size, rss));
                }
            }
            _ => {}
        }
    }
    anon_maps.sort_by_key(|m| std::cmp::Reverse(m.1));
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |key: &str| {
        rollup.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        })
    };
    let (rss, anon) = (field("Rss:"), field("Anonymous:"));
    let threads =
        proc_field(&format!("/proc/{pid}/status"), "Threads").and_then(|v| v.parse::<u64>().ok());
    Some(json!({
        "rss_kib_by_mapping": by,
        // Private anonymous pages (heap, stacks, arenas, relocated data) vs file pages (the
        // binary's and the libraries' code and read-only data, shared through the page cache).
        "rss_anon_kib": anon, "rss_file_kib": rss.zip(anon).map(|(r, a)| r.saturating_sub(a)),
        "pss_kib": field("Pss:"),
        "largest_anonymous_kib": anon_maps.iter().take(8)
            .map(|(s, r)| json!({"size": s, "rss": r})).collect::<Vec<_>>(),
        "threads": threads,
    }))
}

/// An identity stage and its sink started, no producer: after 2 s each is idle in its pull
/// loop. Records RSS and its breakdown; `VF_BENCH_HOLD_S` keeps them alive that many seconds
/// more for inspection (pids are logged); `VF_BENCH_IDLE_ENV` adds variables.
fn idle_rss(rt: &tokio::runtime::Runtime, redis: &str) -> R<Json> {
    let yaml = flow_yaml(
        "batch",
        false,
        &[
            frames_node("src", 32, 32, 1, 10, None),
            identity_node("same", "src"),
            void_node("sink", "same"),
        ],
    );
    let mut b = Bench::new(rt, redis, &yaml)?;
    // `VF_BENCH_IDLE_ENV=K=V,K=V`: extra variables for both workers (e.g. thread counts).
    let extra_text = std::env::var("VF_BENCH_IDLE_ENV").unwrap_or_default();
    let extra: Vec<(&str, &str)> = extra_text
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    b.spawn("same", &extra)?;
    b.spawn("sink", &extra)?;
    b.idle(Duration::from_secs(2));
    let mut rows = Vec::new();
    for p in b.procs.iter().filter(|p| p.exit.is_none()) {
        let pid = p.child.id();
        let rss = sample_proc(pid).map(|s| s.1);
        log(format!("idle {} pid {pid}: VmRSS {rss:?} KiB", p.node));
        rows.push(json!({
            "node": p.node, "pid": pid, "rss_kib": rss, "breakdown": smaps_breakdown(pid),
        }));
    }
    if let Some(hold) = std::env::var("VF_BENCH_HOLD_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        b.idle(Duration::from_secs(hold));
    }
    let r = json!({ "extra_env": extra_text, "procs": rows });
    log(format!("idle rss: {r}"));
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// (4) REALTIME overload.

fn overload(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts) -> R<Json> {
    let count = o.pick(500, 200);
    let yaml = flow_yaml(
        "realtime",
        false,
        &[
            frames_node("src", 32, 32, 1, count, Some(100.0)),
            service_node("slow", "src", 25, 1),
            jsonl_node("sink", "slow"),
        ],
    );
    let mut b = Bench::new(rt, redis, &yaml)?;
    let w_src = Watch::start(rt, b.client(), b.data_subject("src"));
    b.spawn("slow", &[])?;
    b.spawn("sink", &[])?;
    b.idle(Duration::from_secs(2));
    b.spawn("src", &[])?;
    let ok = b.wait_all(Duration::from_secs(120));
    let out = b.jsonl("out.jsonl");
    let lat: Vec<f64> = out
        .iter()
        .filter_map(|r| Some(r["arrival_ts"].as_f64()? - r["event_ts"].as_f64()?))
        .map(|s| s * 1000.0)
        .collect();
    let producer_span = match (w_src.first(), w_src.last()) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => f64::NAN,
    };
    let r = json!({
        "rate_msgs_s": 100, "service_ms": 25, "count": count, "ok": ok && b.all_ok(),
        "published": w_src.count(),
        "producer_span_s": producer_span, "paced_span_s": count as f64 / 100.0,
        "delivered": out.len(),
        "delivered_fraction": out.len() as f64 / count as f64,
        "stage_capacity_fraction": 40.0 / 100.0,
        "median_ms": quantile(&lat, 0.5), "p95_ms": quantile(&lat, 0.95),
        "latency_over_service": quantile(&lat, 0.5) / 25.0,
        "exits": if ok && b.all_ok() { Json::Null } else { b.exits() },
    });
    log(format!("overload: {r}"));
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// (5) Replica scaling of a sleeping 20 ms stage.

fn scaling(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts) -> R<Json> {
    let mut rows = Vec::new();
    for k in [1u64, 2, 4, 8] {
        // About 4 s (quick 1.5 s) of work at the ideal rate of k × 50 msg/s.
        let count = o.pick(200, 75) * k;
        let yaml = flow_yaml(
            "batch",
            false,
            &[
                frames_node("src", 32, 32, 1, count, None),
                service_node("stage", "src", 20, k),
                void_node("sink", "stage"),
            ],
        );
        let mut b = Bench::new(rt, redis, &yaml)?;
        let w = Watch::start(rt, b.client(), b.data_subject("stage"));
        b.spawn("stage", &[])?;
        b.spawn("sink", &[])?;
        b.idle(Duration::from_secs(2));
        b.spawn("src", &[])?;
        let ok = b.wait_all(Duration::from_secs(180));
        let rate = w.rate();
        let ideal = k as f64 * 1000.0 / 20.0;
        let r = json!({
            "k": k, "count": count, "ok": ok && b.all_ok(), "published": w.count(),
            "msgs_s": rate, "ideal_msgs_s": ideal, "efficiency": rate / ideal,
        });
        log(format!("scaling: {r}"));
        rows.push(r);
    }
    Ok(json!({"service_ms": 20, "mode": "sleep", "rows": rows}))
}

// ---------------------------------------------------------------------------------------------
// (6) Payload sweep, inline vs payload store; the inline path at the broker's max payload.

fn sweep_one(
    rt: &tokio::runtime::Runtime,
    redis: &str,
    (w, h, c): (u64, u64, u64),
    store: bool,
    budget_bytes: u64,
) -> R<Json> {
    let size = w * h * c;
    let count = (budget_bytes / size).clamp(8, 2000);
    let mut yaml = flow_yaml(
        "batch",
        store,
        &[
            frames_node("src", w, h, c, count, None),
            identity_node("same", "src"),
            void_node("sink", "same"),
        ],
    );
    if let Some(m) = credit_override() {
        yaml = with_credit(&yaml, m);
    }
    let mut b = Bench::new(rt, redis, &yaml)?;
    // The payload store path: every payload offloaded (threshold 0), whatever its size.
    let extra: &[(&str, &str)] = if store {
        &[("VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES", "0")]
    } else {
        &[]
    };
    let w_same = Watch::start(rt, b.client(), b.data_subject("same"));
    b.spawn("same", extra)?;
    b.spawn("sink", extra)?;
    b.idle(Duration::from_secs(1));
    b.spawn("src", extra)?;
    let ok = b.wait_all(Duration::from_secs(180));
    let rate = w_same.rate();
    let same = b.procs_of("same").next();
    Ok(json!({
        "bytes": size, "shape": [h, w, c], "store": store, "count": count,
        "ok": ok && b.all_ok(), "published": w_same.count(),
        "msgs_s": rate, "mb_s": rate * size as f64 / 1e6,
        "identity_hwm_kib": same.map(|p| p.hwm_kib),
        "exits": if ok && b.all_ok() { Json::Null } else { b.exits() },
    }))
}

fn max_payload_failure(rt: &tokio::runtime::Runtime, redis: &str) -> R<Json> {
    // The default nats-server max_payload is 1 MiB: a 1 MiB tensor inline, no payload store.
    let yaml = flow_yaml(
        "batch",
        false,
        &[
            frames_node("src", 1024, 1024, 1, 5, None),
            identity_node("same", "src"),
            void_node("sink", "same"),
        ],
    );
    let mut b = Bench::new(rt, redis, &yaml)?;
    let max_payload = b.client().server_info().max_payload;
    b.spawn("same", &[])?;
    b.spawn("sink", &[])?;
    b.idle(Duration::from_secs(1));
    let t0 = Instant::now();
    b.spawn("src", &[])?;
    let ended = b.wait_all(Duration::from_secs(60));
    let elapsed = t0.elapsed().as_secs_f64();
    let src = b.procs_of("src").next();
    let r = json!({
        "max_payload": max_payload, "frame_bytes": 1024 * 1024,
        "terminated": ended, "hang": !ended,
        "seconds_to_all_exited": if ended { json!(elapsed) } else { Json::Null },
        "producer_seconds_to_exit": src.and_then(|p| p.exit.map(|e| (e.1 - p.spawned).as_secs_f64())),
        "producer_code": src.and_then(|p| p.exit.and_then(|e| e.0)),
        "producer_termination": b.termination("src", 0),
        "exits": b.exits(),
    });
    log(format!("max payload inline: {r}"));
    Ok(r)
}

fn sweep(rt: &tokio::runtime::Runtime, redis: &str, o: &Opts) -> R<Json> {
    let budget = o.pick(48, 8) * 1024 * 1024;
    let inline_sizes: &[(u64, u64, u64)] =
        &[(1024, 1, 1), (1024, 64, 1), (1024, 256, 1), (1000, 500, 1)];
    let store_sizes: &[(u64, u64, u64)] = &[
        (1024, 1, 1),
        (1024, 64, 1),
        (1000, 500, 1),
        (1024, 1024, 2),
        (1920, 1080, 3),
        (1024, 1024, 6),
    ];
    let mut rows = Vec::new();
    for (sizes, store) in [(inline_sizes, false), (store_sizes, true)] {
        for &dims in sizes {
            let r = sweep_one(rt, redis, dims, store, budget)?;
            log(format!(
                "sweep {} {} B: {:.1} MB/s ({:.0} msg/s) ok {}",
                if store { "store" } else { "inline" },
                r["bytes"],
                r["mb_s"].as_f64().unwrap_or(f64::NAN),
                r["msgs_s"].as_f64().unwrap_or(f64::NAN),
                r["ok"]
            ));
            rows.push(r);
        }
    }
    Ok(json!({"rows": rows, "inline_at_max_payload": max_payload_failure(rt, redis)?}))
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let o = Opts::parse();
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tck = clk_tck();
    let mut meta = machine();
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let redis_url = redis.url();
    log(format!("machine: {meta}"));
    let mut results = serde_json::Map::new();
    type Scenario<'a> = (&'a str, Box<dyn Fn() -> R<Json> + 'a>);
    let scenarios: Vec<Scenario> = vec![
        ("ceiling", Box::new(|| ceiling(&rt, &o, tck))),
        (
            "identity_hop",
            Box::new(|| identity(&rt, &redis_url, &o, tck, false)),
        ),
        (
            "identity_hop_ledger",
            Box::new(|| identity(&rt, &redis_url, &o, tck, true)),
        ),
        (
            "identity_backlog",
            Box::new(|| identity_backlog(&rt, &redis_url, &o, tck)),
        ),
        (
            "identity_credit",
            Box::new(|| credit_sweep(&rt, &redis_url, &o, tck)),
        ),
        (
            "versus_reference",
            Box::new(|| versus_reference(&rt, &redis_url, &o, tck)),
        ),
        (
            "component_boundary",
            Box::new(|| boundary(&rt, &redis_url, &o)),
        ),
        ("idle_rss", Box::new(|| idle_rss(&rt, &redis_url))),
        ("latency", Box::new(|| latency(&rt, &redis_url, &o))),
        (
            "drain_ledger",
            Box::new(|| drain_ledger(&rt, &redis_url, &o)),
        ),
        (
            "realtime_overload",
            Box::new(|| overload(&rt, &redis_url, &o)),
        ),
        ("scaling", Box::new(|| scaling(&rt, &redis_url, &o))),
        ("payload_sweep", Box::new(|| sweep(&rt, &redis_url, &o))),
    ];
    let only: Option<Vec<String>> = std::env::var("VF_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    for (name, f) in scenarios {
        if only.as_ref().is_some_and(|o| !o.iter().any(|x| x == name)) {
            continue;
        }
        let t = Instant::now();
        log(format!("== {name}"));
        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({"error": e}),
            Err(_) => json!({"error": "panicked"}),
        };
        let mut r = r;
        if let Some(m) = r.as_object_mut() {
            m.insert("scenario_seconds".into(), json!(t.elapsed().as_secs_f64()));
        }
        results.insert(name.to_owned(), r);
    }
    meta["loadavg_end"] = json!(loadavg());
    meta["quick"] = json!(o.quick);
    meta["reps"] = json!(o.reps);
    meta["seconds"] = json!(started.elapsed().as_secs_f64());
    let doc = json!({"meta": meta, "flow": results});
    let text = serde_json::to_string_pretty(&doc).expect("json");
    match &o.out {
        Some(path) => {
            if let Some(dir) = Path::new(path).parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::write(path, text + "\n").expect("write results");
            log(format!("wrote {}", path.display()));
        }
        None => println!("{text}"),
    }
}
