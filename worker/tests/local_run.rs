//! The local runner end to end: `videoflow-worker run <flow.yaml>` as
//! a user runs it, the real binary with its real private servers.
//!
//! - every sample in `config/samples/` runs to exit 0 with an `ok` self-check artifact in
//!   its run directory (`--workdir`);
//! - a Flow file with mistakes: diagnostics with paths, exit 2, nothing started;
//! - a node that crashes: the summary names it with its termination reason, exit 4, and the
//!   run's streams are deleted (checked on an external nats-server, `--nats-url`);
//! - Ctrl-C (SIGINT to the runner) on an unbounded REALTIME flow: the producers drain, every
//!   worker stops within a few seconds, exit 130, no worker process left.
//!
//! The runs that time matters to (the samples, toy-fusion's live time join above all, and the
//! Ctrl-C deadline) hold [`SERIAL`], so they do not compete with each other for the CPU; the
//! Ctrl-C test sends SIGINT only once data flows through the sink, i.e. after the runner's
//! signal handler and every worker's are installed (a SIGINT before that would kill the runner
//! outright, a race a fixed sleep would only make rarer).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use videoflow_core::naming;
use videoflow_testkit::NatsServer;

/// Serializes the timing-sensitive runs of this binary (see the module docs).
static SERIAL: Mutex<()> = Mutex::new(());

/// The longest any run here may take before the test kills it and fails.
const RUN_DEADLINE: Duration = Duration::from_secs(180);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the worker crate sits inside the workspace")
        .to_path_buf()
}

/// A private directory for one test (emptied first).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vf-local-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Starts `videoflow-worker run <flow> <args…>` with its output in `dir/run.log`.
fn spawn_run(flow: &Path, dir: &Path, args: &[&str]) -> Child {
    let log = std::fs::File::create(dir.join("run.log")).expect("log file");
    let err = log.try_clone().expect("log file");
    Command::new(env!("CARGO_BIN_EXE_videoflow-worker"))
        .arg("run")
        .arg(flow)
        .args(args)
        .env("NO_COLOR", "1")
        .envs(python_sdk_env())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .expect("start videoflow-worker run")
}

/// What exec samples (`python3 -m videoflow_sdk…`) need: the SDK venv (scripts/install-deps)
/// first on PATH, and this checkout's SDK first on PYTHONPATH.
fn python_sdk_env() -> Vec<(&'static str, String)> {
    let venv = std::env::var("VF_SDK_VENV").ok().or_else(|| {
        let cache = std::env::var("VF_CACHE").ok().or_else(|| {
            std::env::var("HOME")
                .ok()
                .map(|h| format!("{h}/.cache/videoflow"))
        })?;
        Some(format!("{cache}/sdkvenv"))
    });
    let path = std::env::var("PATH").unwrap_or_default();
    let mut vars = vec![(
        "PYTHONPATH",
        repo_root().join("sdk/python").display().to_string(),
    )];
    if let Some(venv) = venv {
        vars.push(("PATH", format!("{venv}/bin:{path}")));
    }
    vars
}

/// Waits for the runner to exit (killing it past `deadline`); its exit code and log.
fn wait_run(child: &mut Child, dir: &Path, deadline: Duration) -> (Option<i32>, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the run did not end within {deadline:?}:\n{}",
                std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    (status.code(), log)
}

/// The row of worker `label` (`node/replica`) in the runner's end-of-run summary table.
fn summary_row<'a>(log: &'a str, label: &str) -> &'a str {
    log.lines()
        .skip_while(|l| !(l.starts_with("worker ") && l.contains("restarts")))
        .find(|l| l.split_whitespace().next() == Some(label))
        .unwrap_or_else(|| panic!("{label} in the summary:\n{log}"))
}

/// Runs `flow` to its end.
fn run(flow: &Path, dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = spawn_run(flow, dir, args);
    wait_run(&mut child, dir, RUN_DEADLINE)
}

/// Runs one sample in its own run directory and checks its self-check artifact.
fn sample_passes(name: &str) {
    let _serial = serial();
    let dir = scratch(name);
    let workdir = dir.join("work");
    let flow = repo_root().join(format!("config/samples/{name}.yaml"));
    let started = Instant::now();
    let (code, log) = run(
        &flow,
        &dir,
        &[
            "--workdir",
            workdir.to_str().expect("utf-8 path"),
            "--timeout",
            "150",
        ],
    );
    let elapsed = started.elapsed();
    assert_eq!(code, Some(0), "{name} failed:\n{log}");
    let artifact = workdir.join("selfcheck.json");
    let text = std::fs::read_to_string(&artifact)
        .unwrap_or_else(|e| panic!("{}: {e}\n{log}", artifact.display()));
    let verdict: serde_json::Value = serde_json::from_str(&text).expect("artifact is JSON");
    assert_eq!(verdict["ok"], serde_json::Value::Bool(true), "{verdict:#}");
    assert_eq!(verdict["details"], serde_json::json!([]), "{verdict:#}");
    let expected = verdict["expected"].as_object().expect("expected object");
    assert!(!expected.is_empty(), "a self-check that checks nothing");
    assert!(
        log.contains(&format!("self-check check: ok ({})", artifact.display())),
        "the runner reports the verdict and where it is:\n{log}"
    );
    eprintln!("{name}: ok in {elapsed:.1?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sample_toy_calculator_checks_itself() {
    sample_passes("toy-calculator");
}

#[test]
fn sample_toy_router_checks_itself() {
    sample_passes("toy-router");
}

#[test]
fn sample_toy_fusion_checks_itself() {
    sample_passes("toy-fusion");
}

#[test]
fn sample_frames_checks_itself() {
    sample_passes("frames");
}

/// Issue #10: Python components (the SDK's numpy frame processor) in the middle of a flow.
#[test]
fn sample_python_component_checks_itself() {
    sample_passes("python-component");
}

/// Every sample in `config/samples/` has a test above (a new sample must get one).
#[test]
fn every_sample_has_a_runner_test() {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("config/samples"))
        .expect("samples dir")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "yaml").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "frames",
            "python-component",
            "toy-calculator",
            "toy-fusion",
            "toy-router"
        ]
    );
}

/// A failed self-check (an expectation the run cannot meet) makes the run exit 4, with the
/// artifact saying `ok: false` and why.
#[test]
fn a_failed_self_check_fails_the_run() {
    let dir = scratch("failed-check");
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: wrong-answer}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {builtin: videoflow.producers.basic.IntProducer}
    params: {start_value: 1, end_value: 10}
  - name: check
    kind: consumer
    parents: [numbers]
    component: {builtin: videoflow.rs.consumers.SelfCheck}
    params: {path: out/check.json, expect: {count: 10, sum: 56}}
"#,
    )
    .expect("write flow");
    let workdir = dir.join("work");
    // A stale passing artifact from an earlier run must not count.
    std::fs::create_dir_all(workdir.join("out")).expect("mkdir");
    std::fs::write(workdir.join("out/check.json"), r#"{"ok": true}"#).expect("stale");
    let (code, log) = run(
        &flow,
        &dir,
        &[
            "--workdir",
            workdir.to_str().expect("utf-8"),
            "--timeout",
            "60",
        ],
    );
    assert_eq!(code, Some(4), "{log}");
    let verdict: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workdir.join("out/check.json")).expect("artifact"),
    )
    .expect("JSON");
    assert_eq!(verdict["ok"], serde_json::Value::Bool(false));
    assert_eq!(verdict["actual"]["sum"], serde_json::json!(55));
    assert_eq!(
        verdict["details"],
        serde_json::json!(["sum: expected 56, got 55"])
    );
    assert!(log.contains("self-check check: FAILED"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Flow file with mistakes: every problem with its path, exit 2, and nothing started — no
/// server, no run directory, no worker.
#[test]
fn a_flow_with_mistakes_is_refused_with_paths_and_exit_2() {
    let dir = scratch("bad-flow");
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: bad-flow}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {builtin: videoflow.producers.basic.IntProducer}
  - name: sink
    kind: consumer
    parents: [numbrs]
    replicas: 0
    component: {builtin: videoflow.consumers.basic.VoidConsumer}
"#,
    )
    .expect("write flow");
    let workdir = dir.join("work");
    let started = Instant::now();
    let (code, log) = run(
        &flow,
        &dir,
        &["--workdir", workdir.to_str().expect("utf-8")],
    );
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("at spec.nodes[1].parents[0]") && log.contains("'numbrs'"),
        "{log}"
    );
    assert!(log.contains("at spec.nodes[1].replicas"), "{log}");
    assert!(log.contains("remedy:"), "{log}");
    assert!(!log.contains("started nats-server"), "{log}");
    assert!(!log.contains(" | "), "no worker ran:\n{log}");
    assert!(!workdir.exists(), "no run directory for a refused flow");
    assert!(started.elapsed() < Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The JetStream stream names on the server at `url`.
fn stream_names(url: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use futures::StreamExt as _;
        let client = async_nats::connect(url).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let mut names = js.stream_names();
        let mut out = Vec::new();
        while let Some(name) = names.next().await {
            out.push(name.expect("stream name"));
        }
        out
    })
}

/// A producer that keeps failing: restarted three times (ABORT-6), then reported in the
/// summary with its termination reason; exit 4; the run's streams deleted.
#[test]
fn a_crashing_node_is_named_with_its_reason_and_the_streams_are_deleted() {
    let dir = scratch("crash");
    let nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: crash}
spec:
  type: batch
  runId: r1
  nodes:
  - name: numbers
    kind: producer
    component: {builtin: videoflow.rs.producers.FailingProducer}
    params: {emit: 3, message: camera unplugged}
  - name: same
    kind: processor
    parents: [numbers]
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [same]
    component: {builtin: videoflow.consumers.basic.VoidConsumer}
"#,
    )
    .expect("write flow");
    let workdir = dir.join("work");
    let (code, log) = run(
        &flow,
        &dir,
        &[
            "--nats-url",
            &nats.url(),
            "--workdir",
            workdir.to_str().expect("utf-8"),
            "--timeout",
            "120",
        ],
    );
    assert_eq!(code, Some(4), "{log}");
    assert!(
        !log.contains("started nats-server"),
        "the given broker is used:\n{log}"
    );
    let summary = summary_row(&log, "numbers/0");
    assert!(
        summary.contains("VF_TRANSIENT: ValueError: camera unplugged"),
        "the summary names the crashed node with its reason:\n{log}"
    );
    let cols: Vec<&str> = summary.split_whitespace().collect();
    assert_eq!(cols[1], "4", "exit column: {summary}");
    assert_eq!(cols[2], "3", "restarts column: {summary}");
    let remaining = stream_names(&nats.url());
    // The flow-scoped DLQ outlives the run (STREAM-9): proof the listing sees this flow.
    assert!(
        remaining.contains(&naming::dlq_stream_name("crash")),
        "{remaining:?}"
    );
    for node in ["numbers", "same", "sink"] {
        let name = naming::stream_name("crash", "r1", node);
        assert!(!remaining.contains(&name), "{name} left: {remaining:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pids of live processes whose environment mentions `marker` (the flow's name), i.e. the
/// run's workers; zombies are not running and do not count.
fn processes_with(marker: &str) -> Vec<u32> {
    let needle = marker.as_bytes();
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in entries.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
        if !zombie && env.windows(needle.len()).any(|w| w == needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Ctrl-C on an unbounded REALTIME flow: SIGINT to the runner drains the producers (START-3),
/// every worker ends within a few seconds, the runner exits 130, no worker is left, and what
/// was produced before the stop reached the sink, without a gap.
#[test]
fn ctrl_c_drains_a_realtime_flow_and_exits_130() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let _serial = serial();
    let dir = scratch("ctrl-c");
    let marker = format!(
        "ctrlc-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_micros())
    );
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        format!(
            r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: {marker}}}
spec:
  type: realtime
  nodes:
  - name: ticks
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, fps: 20}}
  - name: plus
    kind: processor
    parents: [ticks]
    component: {{builtin: videoflow.rs.processors.Map}}
    params: {{op: add, operand: 1}}
  - name: sink
    kind: consumer
    parents: [plus]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: out.jsonl}}
"#
        ),
    )
    .expect("write flow");
    let workdir = dir.join("work");
    let mut child = spawn_run(
        &flow,
        &dir,
        &[
            "--workdir",
            workdir.to_str().expect("utf-8"),
            "--timeout",
            "120",
        ],
    );
    // Data through the sink means every worker, and the runner before them, is past its
    // signal set-up.
    let out = workdir.join("out.jsonl");
    let lines = |p: &Path| {
        std::fs::read_to_string(p)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let started = Instant::now();
    while lines(&out) < 5 {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "the runner ended early ({status}):\n{}",
                std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no data reached the sink:\n{}",
            std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let workers = processes_with(&marker);
    assert_eq!(workers.len(), 3, "one process per replica: {workers:?}");

    let pid = i32::try_from(child.id()).expect("pid");
    kill(Pid::from_raw(pid), Signal::SIGINT).expect("SIGINT");
    let interrupted = Instant::now();
    let (code, log) = wait_run(&mut child, &dir, Duration::from_secs(60));
    let took = interrupted.elapsed();
    assert_eq!(code, Some(130), "{log}");
    assert!(
        took < Duration::from_secs(10),
        "stopping took {took:?}:\n{log}"
    );
    assert!(log.contains("interrupted: draining"), "{log}");
    for w in ["ticks/0", "plus/0", "sink/0"] {
        let row = summary_row(&log, w);
        assert_eq!(
            row.split_whitespace().nth(1),
            Some("0"),
            "{w} drained cleanly: {row}"
        );
    }
    let left = processes_with(&marker);
    assert!(left.is_empty(), "workers left running: {left:?}");
    // Drained: the sink got 1, 2, …, n — everything produced before the stop, no gap.
    let mut values: Vec<i64> = std::fs::read_to_string(&out)
        .expect("sink output")
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            r["value"].as_i64().expect("int value")
        })
        .collect();
    values.sort_unstable();
    let n = i64::try_from(values.len()).expect("count");
    assert_eq!(values, (1..=n).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}
