//! Running a whole Flow on one machine (design §8): `videoflow-worker run flow.yaml`.
//!
//! Validate (diagnostics, exit 2, nothing started) → reuse the Flow's broker or start a
//! private `nats-server` (and a `redis-server` when the payload store has no URL) → provision
//! → one worker process per replica with exactly the environment the operator renders →
//! prefix their logs → wait (BATCH) or run until Ctrl-C (drain producers first) → summary
//! with each failed worker's termination reason → exit with the taxonomy's code.
//!
//! - [`progress`] — the live per-node progress line (published / done, rate).
//! - [`start`] — the start order: BATCH all at once, REALTIME children before parents,
//!   each node once its children pull from it (a REALTIME stream keeps only its newest
//!   message, STREAM-2).
//! - [`supervisor`] — the worker processes: spawn, log prefixes, restarts (ABORT-6).
//!
//! **Run directory.** Every worker starts in one working directory (`--workdir`, default
//! `videoflow-runs/<flow name>/` under the current directory), so relative paths in node
//! params — sink files, self-check artifacts — land there; the runner prints it.
//!
//! **Self-checks.** For every `videoflow.rs.consumers.SelfCheck` node the runner deletes the
//! artifact at its `path` before the run and reads it afterwards: a missing artifact or
//! `ok: false` is printed with its details and makes the run exit 4 (a failed check cannot
//! fail the worker itself: `close()` errors are only logged, LOOP-1).

pub mod progress;
pub mod start;
pub mod supervisor;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use videoflow_core::compile::compile;
use videoflow_core::errors::{EXIT_INTERRUPTED, VfError};
use videoflow_core::load::load_flow;
use videoflow_core::model::FlowDocument;
use videoflow_services::{NatsServer, RedisServer};

use crate::broker::{self, Broker, StopFlag};
use crate::config::environment::LOCAL_WORKER_PASSTHROUGH;
use crate::config::{Environment, LogConfig};
use crate::provision::{node_vars, provision};
use start::{ReplicaState, StartOrder};
use supervisor::Worker;

/// How often the supervisor repeats the control stop once it gave up (ABORT-6).
const STOP_REPEAT: Duration = Duration::from_secs(2);
/// How long a drain after Ctrl-C may take before the control stop is sent.
const DRAIN_GRACE: Duration = Duration::from_secs(10);
/// How long an ABORT gets to reach every node before the control stop (ABORT-6).
const ABORT_GRACE: Duration = Duration::from_secs(10);
/// How long workers get after the control stop before they are killed.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// How often the supervisor looks at its workers.
const POLL: Duration = Duration::from_millis(200);
/// How often it looks while REALTIME nodes wait for their children to pull (every poll is
/// start-up latency added per level of the graph).
const START_POLL: Duration = Duration::from_millis(20);

/// What `run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The Flow file.
    pub flow: PathBuf,
    /// Keep the run's streams after the run.
    pub keep: bool,
    /// A broker URL overriding the Flow's (and disabling the private nats-server).
    pub nats_url: Option<String>,
    /// Give up (control stop, then kill) after this long.
    pub timeout: Option<Duration>,
    /// The workers' working directory (default `videoflow-runs/<flow name>`).
    pub workdir: Option<PathBuf>,
    /// The runner's environment: logging settings, and the variables its workers inherit.
    pub environment: Environment,
}

/// The canonical class of the self-checking consumer whose artifacts the runner verifies.
pub const SELFCHECK_CLASS: &str = "videoflow.rs.consumers.SelfCheck";

/// One SelfCheck node's artifact.
#[derive(Debug, Clone)]
struct SelfCheckArtifact {
    node: String,
    path: PathBuf,
}

/// Runs the flow; returns the process exit status.
pub async fn run_flow(opts: RunOptions, interrupt: StopFlag) -> i32 {
    match run(opts, interrupt).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.render());
            e.exit_code()
        }
    }
}

async fn run(opts: RunOptions, interrupt: StopFlag) -> Result<i32, VfError> {
    let text = std::fs::read_to_string(&opts.flow).map_err(|e| {
        VfError::new(
            videoflow_core::errors::ErrorCode::Config,
            format!("cannot read {}: {e}", opts.flow.display()),
        )
        .with_remedy("Pass the path of a Flow file (YAML or JSON).")
    })?;
    let mut doc = match load_flow(&text) {
        Ok((doc, warnings)) => {
            for w in warnings {
                eprintln!("{}: {w}", opts.flow.display());
            }
            doc
        }
        Err(diags) => {
            for d in &diags {
                eprintln!("{}: {d}", opts.flow.display());
            }
            return Ok(videoflow_core::errors::EXIT_USER);
        }
    };
    // Servers: the Flow's broker, an override, or a private one.
    let url = opts
        .nats_url
        .clone()
        .or_else(|| doc.spec.broker.as_ref().and_then(|b| b.url.clone()));
    let (nats_url, _nats) = match url {
        Some(url) => (url, None),
        None => {
            let server = NatsServer::start().map_err(env_error)?;
            eprintln!("started nats-server at {}", server.url());
            (server.url(), Some(server))
        }
    };
    let _redis = start_payload_store(&mut doc)?;
    // Per-run scratch: termination logs and, unless the Flow names one, the run ledger.
    let dir = std::env::temp_dir().join(format!("videoflow-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| env_error(e.to_string()))?;
    default_run_ledger(&mut doc, &dir);
    let flow = compile(&doc).map_err(|d| {
        VfError::new(
            videoflow_core::errors::ErrorCode::Graph,
            format!("{} problems in the flow graph", d.len()),
        )
    })?;
    eprintln!(
        "flow {} run {} ({}, {} nodes)",
        flow.flow_id,
        flow.run_id,
        flow.flow_type.as_str(),
        flow.nodes.len()
    );
    let broker = broker::connect(&nats_url).await?;
    provision(&broker, &doc, &flow).await?;

    let exe = std::env::current_exe().map_err(|e| env_error(e.to_string()))?;
    let workdir = prepare_workdir(&opts, &doc)?;
    let checks = self_checks(&doc, &workdir);
    eprintln!(
        "run directory: {} (workers' working directory; relative paths in params land here)",
        workdir.display()
    );
    let colour =
        std::io::stderr().is_terminal() && !LogConfig::from_env(&opts.environment).no_color;
    let inherited = opts.environment.passthrough(&LOCAL_WORKER_PASSTHROUGH);
    let mut workers = Vec::new();
    for spec in &flow.nodes {
        for r in 0..spec.nb_tasks {
            let vars = node_vars(&doc, &flow, &spec.name, r, &nats_url)?;
            let log = dir.join(format!("{}.{r}.termination", spec.name));
            workers.push(
                Worker::new(&spec.name, r, vars, log, workers.len())
                    .with_cwd(workdir.clone())
                    .with_inherited(inherited.clone()),
            );
        }
    }
    // BATCH: every worker now; REALTIME: children first, as the supervisor finds them
    // pulling (`start`).
    let mut order = StartOrder::new(&flow);
    for w in workers.iter_mut().filter(|w| !order.is_waiting(&w.node)) {
        w.spawn(&exe, colour)
            .map_err(|e| env_error(format!("cannot start {}: {e}", w.label())))?;
    }
    let interrupted = supervise(
        &mut workers,
        &mut order,
        &broker,
        &doc,
        &flow,
        &exe,
        colour,
        &interrupt,
        opts.timeout,
    )
    .await;
    print_summary(&workers);
    let checks_ok = report_self_checks(&checks);
    if !opts.keep {
        teardown(&broker, &doc, &flow).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(if interrupted {
        EXIT_INTERRUPTED
    } else {
        match exit_code(&workers) {
            0 if !checks_ok => videoflow_core::errors::EXIT_FLOW_FAILED,
            code => code,
        }
    })
}

/// A Flow without `spec.runtimeStore` runs locally on a `file://` ledger in the run's scratch
/// directory, as 1.0.4's local engine does: every worker of the run shares it, so end of
/// stream is decided by the EOS-7 barrier (counted, no quiescence window per hop) and a
/// restarted worker starts from the recorded terminators.
fn default_run_ledger(doc: &mut FlowDocument, dir: &std::path::Path) {
    if doc.spec.runtime_store.is_none() {
        let url = format!("file://{}", dir.join("ledger").display());
        eprintln!("run ledger: {url}");
        doc.spec.runtime_store = Some(videoflow_core::model::StoreRef {
            url: Some(url),
            url_from: None,
        });
    }
}

/// Creates the run directory and returns it as an absolute path.
fn prepare_workdir(opts: &RunOptions, doc: &FlowDocument) -> Result<PathBuf, VfError> {
    let dir = opts.workdir.clone().unwrap_or_else(|| {
        PathBuf::from("videoflow-runs").join(doc.metadata.name.replace(['/', '\\'], "_"))
    });
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::canonicalize(&dir))
        .map_err(|e| {
            env_error(format!(
                "cannot create the run directory {}: {e}",
                dir.display()
            ))
        })
}

/// Every SelfCheck node's artifact, resolved against the run directory; stale artifacts of an
/// earlier run are deleted so only this run can pass.
fn self_checks(doc: &FlowDocument, workdir: &std::path::Path) -> Vec<SelfCheckArtifact> {
    let mut out = Vec::new();
    for node in &doc.spec.nodes {
        let class = node.component.builtin.as_deref();
        if class.and_then(crate::nodes::canonical_class) != Some(SELFCHECK_CLASS) {
            continue;
        }
        let Some(path) = node
            .params
            .as_ref()
            .and_then(|p| p.get("path"))
            .and_then(serde_json::Value::as_str)
        else {
            continue; // the worker refuses it with VF_CONFIG
        };
        let path = workdir.join(path);
        let _ = std::fs::remove_file(&path);
        out.push(SelfCheckArtifact {
            node: node.name.clone(),
            path,
        });
    }
    out
}

/// Prints each self-check's verdict; `false` when one is missing or failed.
fn report_self_checks(checks: &[SelfCheckArtifact]) -> bool {
    let mut all_ok = true;
    for c in checks {
        let verdict = std::fs::read_to_string(&c.path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        match verdict {
            Some(v) if v["ok"] == serde_json::Value::Bool(true) => {
                eprintln!("self-check {}: ok ({})", c.node, c.path.display());
                print_outputs(&v);
            }
            Some(v) => {
                all_ok = false;
                eprintln!(
                    "self-check {}: FAILED ({}): {}",
                    c.node,
                    c.path.display(),
                    v["details"]
                );
            }
            None => {
                all_ok = false;
                eprintln!(
                    "self-check {}: FAILED: no artifact at {} (the node did not finish)",
                    c.node,
                    c.path.display()
                );
            }
        }
    }
    all_ok
}

/// The files a self-check points a person at (its artifact's `outputs`: a written video,
/// a contact sheet), one line each.
fn print_outputs(verdict: &serde_json::Value) {
    if let Some(outputs) = verdict["outputs"].as_object() {
        for (what, path) in outputs {
            if let Some(path) = path.as_str() {
                eprintln!("  {}: {path}", what.replace('_', " "));
            }
        }
    }
}

/// Starts a private redis-server when the Flow asks for a payload store without a URL.
fn start_payload_store(doc: &mut FlowDocument) -> Result<Option<RedisServer>, VfError> {
    let Some(store) = doc.spec.payload_store.as_mut() else {
        return Ok(None);
    };
    if store.url.is_some() || store.url_from.is_some() {
        return Ok(None);
    }
    let server = RedisServer::start().map_err(env_error)?;
    eprintln!("started redis-server at {}", server.url());
    store.url = Some(server.url());
    Ok(Some(server))
}

/// Waits for every worker, starting those `order` holds back once they may start and
/// restarting what can be restarted; returns whether the run was interrupted (Ctrl-C).
#[allow(clippy::too_many_arguments)]
async fn supervise(
    workers: &mut [Worker],
    order: &mut StartOrder,
    broker: &Broker,
    doc: &FlowDocument,
    flow: &videoflow_core::compile::CompiledFlow,
    exe: &PathBuf,
    colour: bool,
    interrupt: &StopFlag,
    timeout: Option<Duration>,
) -> bool {
    let started = Instant::now();
    let mut pending_restarts: Vec<(usize, Instant)> = Vec::new();
    // When the control stop starts (ABORT-6); may lie in the future to let an ABORT travel.
    let mut stopping_since: Option<Instant> = None;
    let mut last_stop = Instant::now() - STOP_REPEAT;
    let mut drain_since: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let mut progress = progress::Progress::default();
    loop {
        for (i, w) in workers.iter_mut().enumerate() {
            if let Some(code) = w.try_exit() {
                if stopping_since.is_none() && w.should_restart(code) {
                    let delay = w.backoff();
                    eprintln!(
                        "{} exited {code}; restarting in {delay:?} ({} of {})",
                        w.label(),
                        w.restarts + 1,
                        supervisor::MAX_RESTARTS
                    );
                    pending_restarts.push((i, Instant::now() + delay));
                } else {
                    w.exit = Some(code);
                    if code != 0 {
                        let reason = w.record().map_or_else(
                            || "no termination record".to_owned(),
                            |r| {
                                format!(
                                    "{}: {}",
                                    r["code"].as_str().unwrap_or("?"),
                                    r["message"].as_str().unwrap_or("")
                                )
                            },
                        );
                        eprintln!("{} ended with exit {code}: {reason}", w.label());
                        // A poison death (and its casualties) announced itself with an ABORT
                        // that drains downstream (ABORT-1a/5): give it time before the stop.
                        let announced = w.record().is_some_and(|r| {
                            r["disposition"] == "poison" || r["code"] == "VF_UPSTREAM_ABORTED"
                        });
                        let delay = if announced {
                            ABORT_GRACE
                        } else {
                            Duration::ZERO
                        };
                        stopping_since.get_or_insert_with(|| Instant::now() + delay);
                    }
                }
            }
        }
        let now = Instant::now();
        let mut due = Vec::new();
        pending_restarts.retain(|(i, at)| {
            if *at <= now {
                due.push(*i);
                false
            } else {
                true
            }
        });
        for i in due {
            let w = &mut workers[i];
            w.restarts += 1;
            if let Err(e) = w.spawn(exe, colour) {
                eprintln!("cannot restart {}: {e}", w.label());
                w.exit = Some(-1);
            }
        }
        if !order.is_empty() {
            if stopping_since.is_some() || interrupt.is_set() {
                // The nodes still waiting never start; the ones started below them would
                // wait for an end of stream that no longer comes, so they are stopped now.
                let never = order.abandon();
                eprintln!("stopping before {} started", never.join(", "));
                stopping_since.get_or_insert(now);
            } else {
                start_due(workers, order, &pending_restarts, broker, flow, exe, colour).await;
            }
        }
        let alive = workers.iter().any(|w| w.running())
            || !pending_restarts.is_empty()
            || !order.is_empty();
        if !alive {
            return drain_since.is_some();
        }
        // Ctrl-C: drain the producers first (START-3), then stop everything.
        if interrupt.is_set() && drain_since.is_none() {
            eprintln!(
                "interrupted: draining (producers end their input; Ctrl-C again is not needed)"
            );
            drain_since = Some(now);
            for w in workers.iter().filter(|w| w.running()) {
                let is_producer = doc
                    .spec
                    .nodes
                    .iter()
                    .any(|n| n.name == w.node && n.parents.is_empty());
                if is_producer {
                    w.signal_interrupt();
                }
            }
        }
        let timed_out = timeout.is_some_and(|t| now - started > t);
        let drain_overdue = drain_since.is_some_and(|d| now - d > DRAIN_GRACE);
        if (timed_out || drain_overdue) && stopping_since.is_none() {
            stopping_since = Some(now);
        }
        // ABORT-6 / CTRL-1: once stopping, repeat the control stop until every worker exited.
        if let Some(since) = stopping_since.filter(|since| *since <= now) {
            if now - last_stop >= STOP_REPEAT {
                let _ = broker::send_control_stop(broker, &flow.flow_id, &flow.run_id).await;
                last_stop = now;
            }
            if now - since > KILL_GRACE {
                for w in workers.iter_mut().filter(|w| w.running()) {
                    eprintln!("{} did not stop; killing it", w.label());
                    w.kill().await;
                    w.exit = Some(-1);
                }
            }
        }
        if now - last_progress >= Duration::from_secs(5) {
            last_progress = now;
            let running = workers.iter().filter(|w| w.running()).count();
            eprintln!(
                "progress {:.0}s ({running} of {} workers running): {}",
                (now - started).as_secs_f64(),
                workers.len(),
                progress.line(broker, flow).await
            );
        }
        tokio::time::sleep(if order.is_empty() { POLL } else { START_POLL }).await;
    }
}

/// Starts the workers of every node `order` finds due (see [`start`]); a worker that cannot
/// be started ends with `-1`, like a failed restart.
async fn start_due(
    workers: &mut [Worker],
    order: &mut StartOrder,
    pending_restarts: &[(usize, Instant)],
    broker: &Broker,
    flow: &videoflow_core::compile::CompiledFlow,
    exe: &PathBuf,
    colour: bool,
) {
    let states: Vec<(String, ReplicaState)> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let state = if w.running() || pending_restarts.iter().any(|(p, _)| *p == i) {
                ReplicaState::Live
            } else if w.exit.is_some() {
                ReplicaState::Ended
            } else {
                ReplicaState::NotStarted
            };
            (w.node.clone(), state)
        })
        .collect();
    let due = order
        .due(flow, |child, parent| {
            let replicas: Vec<ReplicaState> = states
                .iter()
                .filter(|(node, _)| *node == child)
                .map(|(_, s)| *s)
                .collect();
            let spec = flow.node(&child);
            async move {
                match spec {
                    Some(spec) => start::pulling(broker, flow, spec, &parent, &replicas).await,
                    None => true,
                }
            }
        })
        .await;
    for w in workers.iter_mut().filter(|w| due.contains(&w.node)) {
        if let Err(e) = w.spawn(exe, colour) {
            eprintln!("cannot start {}: {e}", w.label());
            w.exit = Some(-1);
        }
    }
}

/// The end-of-run table: every worker, its exit and, for failures, its termination reason.
fn print_summary(workers: &[Worker]) {
    eprintln!("\n{:<24} {:>5} {:>8}  reason", "worker", "exit", "restarts");
    for w in workers {
        let reason = match (w.exit, w.record()) {
            (Some(0), _) => "ok".to_owned(),
            (None, _) => "not started".to_owned(),
            (_, Some(r)) => format!(
                "{}: {}{}",
                r["code"].as_str().unwrap_or("?"),
                r["message"].as_str().unwrap_or(""),
                r["remedy"]
                    .as_str()
                    .map(|x| format!(" — {x}"))
                    .unwrap_or_default()
            ),
            (_, None) => "no termination record".to_owned(),
        };
        let exit = w.exit.map_or("-".to_owned(), |c| c.to_string());
        eprintln!("{:<24} {:>5} {:>8}  {reason}", w.label(), exit, w.restarts);
    }
}

/// The run's exit status from its workers' (§15.1): 0 when all succeeded, else the most
/// telling class: user (2) before environment (3) before stalled (5) before failed (4).
fn exit_code(workers: &[Worker]) -> i32 {
    let codes: Vec<i32> = workers
        .iter()
        .filter_map(|w| w.exit)
        .filter(|c| *c != 0)
        .collect();
    if codes.is_empty() {
        0
    } else if codes.contains(&2) {
        2
    } else if codes.contains(&3) {
        3
    } else if codes.contains(&5) {
        5
    } else {
        4
    }
}

/// Deletes the run's streams and consumers by owner metadata, keeping the flow-scoped DLQ
/// (STREAM-9/14), and the run's records in its run ledger — the same function as
/// `videoflow-worker teardown`. An incomplete cleanup is reported, not hidden.
async fn teardown(
    broker: &Broker,
    doc: &FlowDocument,
    flow: &videoflow_core::compile::CompiledFlow,
) {
    let ledger = doc
        .spec
        .runtime_store
        .as_ref()
        .and_then(|s| s.url.as_deref())
        .map(crate::store::RuntimeStore::open);
    let ledger = match ledger {
        Some(Ok(store)) => Some(store),
        Some(Err(e)) => {
            eprintln!("{}", e.render());
            None
        }
        None => None,
    };
    let cleanup =
        crate::teardown::teardown(broker, &flow.flow_id, &flow.run_id, ledger.as_ref()).await;
    if let Err(e) = cleanup.into_result(&flow.flow_id, &flow.run_id) {
        eprintln!("{}", e.render());
    }
}

fn env_error(e: impl std::fmt::Display) -> VfError {
    VfError::new(
        videoflow_core::errors::ErrorCode::Environment,
        e.to_string(),
    )
    .with_remedy("Run scripts/install-deps to install nats-server and redis-server.")
}
