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
//! **REALTIME runs are checked against the broker.** A REALTIME stream keeps only its newest
//! message (STREAM-2) and a live source never waits (DELIV-4), so on a loaded machine a
//! message the next one replaced before its consumer fetched it is gone: that is the one loss
//! REALTIME allows, and no count of outputs can be expected from such a run. What the tests
//! check instead, on an external nats-server with `--keep`: the start order (every source's
//! first DATA is published only after each child asked its stream for a message, so nothing
//! is lost to a start-up race) and the accounting of every hop — each node acked everything
//! the broker delivered to it and passed all of it on (the consumer's durable against the
//! node's own EOS-7 count, or against what a sink wrote); the difference between what a node
//! published and what its child was delivered is what the stream dropped.
//!
//! The runs that time matters to (the samples, toy-fusion's live time join above all, and the
//! Ctrl-C deadline) hold [`SERIAL`], so they do not compete with each other for the CPU; the
//! Ctrl-C test sends SIGINT only once data flows through the sink, i.e. after the runner's
//! signal handler and every worker's are installed (a SIGINT before that would kill the runner
//! outright, a race a fixed sleep would only make rarer).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use videoflow_core::envelope::{self, MsgType};
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
    sample_run(name, &dir, &[]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs sample `name` in `dir` (with `extra` runner arguments) and checks its self-check
/// artifact, which it returns.
fn sample_run(name: &str, dir: &Path, extra: &[&str]) -> serde_json::Value {
    let workdir = dir.join("work");
    let flow = repo_root().join(format!("config/samples/{name}.yaml"));
    let started = Instant::now();
    let mut args = vec![
        "--workdir",
        workdir.to_str().expect("utf-8 path"),
        "--timeout",
        "150",
    ];
    args.extend_from_slice(extra);
    let (code, log) = run(&flow, dir, &args);
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
    verdict
}

#[test]
fn sample_toy_calculator_checks_itself() {
    sample_passes("toy-calculator");
}

#[test]
fn sample_toy_router_checks_itself() {
    sample_passes("toy-router");
}

/// The REALTIME time join sample (JOIN-11…23), on an external broker so the run can be
/// checked against it (module docs): the join pulled from every source before the source
/// published (STREAM-2 start order), and it grouped every tick the broker delivered — a
/// synchronized parent's `received` is exactly what its durable delivered, all of it acked;
/// a collect parent delivers at most that (JOIN-19 drops the samples no group claims).
#[test]
fn sample_toy_fusion_checks_itself() {
    let _serial = serial();
    let dir = scratch("toy-fusion");
    let nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let tap = WireTap::start(&nats.url());
    let verdict = sample_run("toy-fusion", &dir, &["--nats-url", &nats.url(), "--keep"]);
    let events = tap.stop();
    let flow_id = verdict["flow_id"].as_str().expect("flow id");
    let run_id = verdict["run_id"].as_str().expect("run id");
    let received = verdict["actual"]["received"]
        .as_array()
        .expect("received per parent");
    let parents = ["left", "right", "imu"];
    for (i, parent) in parents.iter().enumerate() {
        assert_pulled_before_published(&events, flow_id, run_id, parent, "check");
        let hop = Hop::read(&nats.url(), flow_id, run_id, parent, "check");
        hop.assert_settled();
        let got = received[i].as_u64().expect("count");
        if *parent == "imu" {
            assert!(got <= hop.delivered, "{parent}: {got} claimed of {hop:?}");
        } else {
            assert_eq!(
                got, hop.delivered,
                "{parent}: the join lost a tick: {hop:?}"
            );
        }
        eprintln!(
            "toy-fusion: {parent} published {}, delivered {} (REALTIME dropped {})",
            hop.published,
            hop.delivered,
            hop.published.saturating_sub(hop.delivered)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
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

/// Makes the people sample's input in `workdir` as its header says: the SDK's clip maker
/// (OpenCV drawing, the ffmpeg CLI encoding H.264), 32 frames — with `nobody`, all empty.
fn people_clip(workdir: &Path, nobody: bool) {
    std::fs::create_dir_all(workdir).expect("workdir");
    let env = python_sdk_env();
    let path = env
        .iter()
        .find(|(k, _)| *k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "videoflow_sdk.examples.people_clip"])
        .arg(workdir.join("people.mp4"))
        .args(["--frames", "32"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("PATH", path);
    if nobody {
        cmd.arg("--nobody");
    }
    let out = cmd.output().expect("start python3 (source scripts/env.sh)");
    assert!(
        out.status.success(),
        "the clip maker failed (./scripts/install-deps installs OpenCV into the SDK venv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The video sample (#18): an H.264 file made at run time → resize → the SDK's HOG people
/// detector (Python) → BoundingBoxAnnotator → our H.264 writer; its self-check decodes the
/// written MP4 (frames, size, frames with boxes) and writes a contact sheet, and the runner
/// prints both paths.
#[test]
fn sample_people_checks_itself() {
    let _serial = serial();
    let dir = scratch("people");
    people_clip(&dir.join("work"), false);
    let verdict = sample_run("people", &dir, &[]);
    assert_eq!(verdict["actual"]["video_frames"], 32, "{verdict:#}");
    let sheet = verdict["outputs"]["contact_sheet"]
        .as_str()
        .expect("sheet path");
    let png = std::fs::read(sheet).expect("contact sheet written");
    assert_eq!(&png[1..4], b"PNG", "{sheet} is a PNG");
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    assert!(log.contains(&format!("contact sheet: {sheet}")), "{log}");
    assert!(log.contains("annotated.mp4"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same sample over a clip with nobody in it: no boxes are drawn, so its self-check
/// fails and the run exits 4 — the check looks at what was drawn.
#[test]
fn the_people_sample_fails_on_a_clip_without_people() {
    let _serial = serial();
    let dir = scratch("people-nobody");
    let workdir = dir.join("work");
    people_clip(&workdir, true);
    let flow = repo_root().join("config/samples/people.yaml");
    let (code, log) = run(
        &flow,
        &dir,
        &[
            "--workdir",
            workdir.to_str().expect("utf-8"),
            "--timeout",
            "150",
        ],
    );
    assert_eq!(code, Some(4), "{log}");
    assert!(log.contains("self-check check: FAILED"), "{log}");
    assert!(log.contains("video_box_frames"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
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
            "people",
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

/// The user's report, through `videoflow-worker validate`: a misspelt built-in class, a
/// mistyped param, a wrong `spec.type`, an unknown field and an unknown parent — all five in
/// one run, each with its path, the class and the field with "did you mean", exit 2.
#[test]
fn validate_reports_every_problem_at_once_with_did_you_mean() {
    let dir = scratch("validate-all");
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: all-at-once}
spec:
  type: stream
  nodes:
  - name: numbers
    kind: producer
    component: {builtin: videoflow.producers.basic.IntProducer}
    params: {end_value: ten}
  - name: mid
    kind: processor
    parents: [numbers]
    replica: 2
    component: {builtin: videoflow.processors.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [mid, nope]
    component: {builtin: videoflow.consumers.basic.VoidConsumr}
"#,
    )
    .expect("write flow");
    let out = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"))
        .arg("validate")
        .arg(&flow)
        .output()
        .expect("runs validate");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{log}");
    for path in [
        "at spec.type",
        "at spec.nodes[0].params.end_value",
        "at spec.nodes[1].replica",
        "at spec.nodes[2].parents[1]",
        "at spec.nodes[2].component.builtin",
    ] {
        assert!(log.contains(path), "{path} missing:\n{log}");
    }
    assert!(
        log.contains("Did you mean 'videoflow.consumers.basic.VoidConsumer'?"),
        "{log}"
    );
    assert!(log.contains("Did you mean 'replicas'?"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A runtime of its own and a JetStream context on the server at `url`, for reading the
/// broker's view of a run from a synchronous test.
fn jetstream(url: &str) -> (tokio::runtime::Runtime, async_nats::jetstream::Context) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let js = rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connect");
        async_nats::jetstream::new(client)
    });
    (rt, js)
}

/// The JetStream stream names on the server at `url`.
fn stream_names(url: &str) -> Vec<String> {
    let (rt, js) = jetstream(url);
    rt.block_on(async {
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
/// every worker ends within a few seconds, the runner exits 130, no worker is left, and the
/// drain lost nothing: every node acked all the broker delivered to it, `plus` published one
/// output per tick it was delivered (its EOS-7 count), and the sink wrote each of them once.
/// The ticks the streams dropped (STREAM-2: replaced before they were fetched) are the only
/// gaps; the nodes started children first (STREAM-2 start order), so none of them is a
/// start-up race.
#[test]
fn ctrl_c_drains_a_realtime_flow_and_exits_130() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let _serial = serial();
    let dir = scratch("ctrl-c");
    let nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let tap = WireTap::start(&nats.url());
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
  runId: r1
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
            "--nats-url",
            &nats.url(),
            "--keep",
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
    let events = tap.stop();
    assert_pulled_before_published(&events, &marker, "r1", "plus", "sink");
    assert_pulled_before_published(&events, &marker, "r1", "ticks", "plus");
    // Drained: nothing delivered was lost on the way out.
    let ticks = Hop::read(&nats.url(), &marker, "r1", "ticks", "plus");
    let plus = Hop::read(&nats.url(), &marker, "r1", "plus", "sink");
    ticks.assert_settled();
    plus.assert_settled();
    assert_eq!(
        plus.published, ticks.delivered,
        "plus published one output per tick delivered to it: {ticks:?} → {plus:?}"
    );
    let mut values: Vec<i64> = std::fs::read_to_string(&out)
        .expect("sink output")
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            r["value"].as_i64().expect("int value")
        })
        .collect();
    assert_eq!(
        u64::try_from(values.len()).expect("count"),
        plus.delivered,
        "the sink wrote each delivery once: {plus:?}"
    );
    // Ticks 0, 1, … become 1, 2, …: each value once, none the producer did not publish.
    values.sort_unstable();
    values.dedup();
    assert_eq!(
        u64::try_from(values.len()).expect("count"),
        plus.delivered,
        "no value twice"
    );
    let published = i64::try_from(ticks.published).expect("count");
    assert!(
        values.iter().all(|v| (1..=published).contains(v)),
        "{values:?} of {published}"
    );
    eprintln!(
        "ctrl-c: ticks published {}, plus got {}, sink got {} (REALTIME dropped {})",
        ticks.published,
        ticks.delivered,
        plus.delivered,
        ticks.published - plus.delivered
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every pull request and DATA publication on a broker, in the order the server routed them:
/// a plain NATS subscription to `>` on a thread of its own. Entries read `next
/// <stream>.<durable>` (`$JS.API.CONSUMER.MSG.NEXT.…`, a consumer asking for messages) and
/// `pub <subject>` (a publication on a `vf.…` subject; deliveries carry a `$JS.ACK.…` reply
/// and are left out).
struct WireTap {
    events: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WireTap {
    /// Subscribes and returns once the server confirmed the subscription.
    fn start(url: &str) -> Self {
        let url = url.to_owned();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let client = async_nats::connect(url).await.expect("tap connect");
                let mut all = client.subscribe(">").await.expect("tap subscribe");
                client.flush().await.expect("tap flush");
                let _ = ready_tx.send(());
                loop {
                    tokio::select! {
                        m = all.next() => {
                            let Some(m) = m else { break };
                            let subject = m.subject.as_str();
                            let delivery = m.reply.as_ref().is_some_and(|r| r.starts_with("$JS.ACK."));
                            let entry = if let Some(rest) = subject.strip_prefix("$JS.API.CONSUMER.MSG.NEXT.") {
                                format!("next {rest}")
                            } else if subject.starts_with("vf.") && !delivery {
                                format!("pub {subject}")
                            } else {
                                continue;
                            };
                            seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(entry);
                        }
                        _ = &mut stop_rx => break,
                    }
                }
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("wire tap subscribed");
        WireTap {
            events,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Stops the tap; what it saw, in order.
    fn stop(mut self) -> Vec<String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        std::mem::take(
            &mut *self
                .events
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// STREAM-2 start order: `child`'s durable asked `parent`'s stream for a message before the
/// first DATA was published on it, so that DATA was handed out as it was stored.
fn assert_pulled_before_published(
    events: &[String],
    flow: &str,
    run: &str,
    parent: &str,
    child: &str,
) {
    let data = format!("pub {}", naming::data_subject(flow, run, parent));
    let pull = format!(
        "next {}.{}",
        naming::stream_name(flow, run, parent),
        naming::durable_name(child, parent)
    );
    let published = events.iter().position(|e| *e == data);
    let pulled = events.iter().position(|e| *e == pull);
    match (pulled, published) {
        (Some(pulled), Some(published)) => assert!(
            pulled < published,
            "{parent} published (event {published}) before {child} pulled (event {pulled}): {:?}",
            &events[..=published.max(pulled)]
        ),
        _ => panic!("no {data:?} or no {pull:?} on the wire: {events:?}"),
    }
}

/// One REALTIME hop after a `--keep` run: what `parent` published (its terminator's EOS-7
/// count) and how `child`'s data durable on `parent`'s stream stands.
#[derive(Debug)]
struct Hop {
    /// Distinct DATA `parent` published (EOS-7: the seq of its EOS, its stream's newest
    /// message).
    published: u64,
    /// Deliveries to `child` (the durable's consumer sequence).
    delivered: u64,
    /// Deliveries acked without a gap (the ack floor).
    acked: u64,
    ack_pending: usize,
    redelivered: usize,
}

impl Hop {
    fn read(url: &str, flow: &str, run: &str, parent: &str, child: &str) -> Hop {
        let (rt, js) = jetstream(url);
        rt.block_on(async {
            let stream = js
                .get_stream(naming::stream_name(flow, run, parent))
                .await
                .expect("kept stream");
            let eos = stream
                .get_last_raw_message_by_subject(&naming::eos_subject(flow, run, parent))
                .await
                .expect("the EOS is the stream's newest message");
            let eos = envelope::decode(&eos.payload).expect("EOS envelope");
            assert_eq!(eos.msg_type, MsgType::Eos, "{eos:?}");
            let mut durable: async_nats::jetstream::consumer::PullConsumer = stream
                .get_consumer(&naming::durable_name(child, parent))
                .await
                .expect("data durable");
            let info = durable.info().await.expect("durable info");
            Hop {
                published: eos.seq,
                delivered: info.delivered.consumer_sequence,
                acked: info.ack_floor.consumer_sequence,
                ack_pending: info.num_ack_pending,
                redelivered: info.num_redelivered,
            }
        })
    }

    /// The child settled everything it was delivered, each message once (best-effort:
    /// `max_deliver` 1, DELIV-10).
    fn assert_settled(&self) {
        assert_eq!(self.acked, self.delivered, "{self:?}");
        assert_eq!(self.ack_pending, 0, "{self:?}");
        assert_eq!(self.redelivered, 0, "{self:?}");
        assert!(self.delivered <= self.published, "{self:?}");
    }
}
