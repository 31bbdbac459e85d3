//! Exec components end to end (design §5 "exec"):
//!
//! - the Python SDK ships exactly the protocol's descriptor set the Rust build produces
//!   (`VF_UPDATE_SNAPSHOTS=1` rewrites its copy);
//! - the SDK's own unit tests (values, tensors, framing, the serve loop) pass under the SDK
//!   venv's Python;
//! - SIGKILL of the component process mid-stream loses no input: the worker fails
//!   `VF_WORKER_FATAL` (exit 4) and hands its in-flight input back, and the restarted worker
//!   (a fresh component) processes everything that was not acked:
//!
//! ```text
//!   numbers (IntProducer, N) ─ add (Python: x + 1000, 10 ms each) ─ sink (JsonlSink)
//! ```
//!
//! The happy path with a Python component in the middle (a numpy frame processor, checked
//! byte for byte) is the `python-component` sample, run by `local_run.rs`.
//!
//! The Python is `VF_SDK_PYTHON` (default `$VF_CACHE/sdkvenv/bin/python`, made by
//! `scripts/install-deps`, with protobuf and numpy); `PYTHONPATH` points at this checkout's
//! `sdk/python`, so the SDK under test is the one in the tree, not an installed copy.

mod flows_common;
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use flows_common::{duplicate_arrivals, int_value};
use support::FlowHarness;
use videoflow_worker::broker::{self, DurableRequest};
use videoflow_worker::config::WorkerConfig;

fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn sdk_dir() -> PathBuf {
    repo_root().join("sdk/python")
}

/// The SDK venv's interpreter; a missing one fails with the remedy, never skips.
fn sdk_python() -> PathBuf {
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

#[test]
fn the_python_sdk_ships_the_current_descriptor_set() {
    let copy = sdk_dir().join("videoflow_sdk/component_v1.binpb");
    let current = videoflow_core::component::DESCRIPTOR_SET;
    if std::env::var_os("VF_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&copy, current).expect("write the SDK's descriptor set");
    }
    let shipped = std::fs::read(&copy).unwrap_or_default();
    assert!(
        shipped == current,
        "{} is stale: the component protocol changed. Regenerate it with \
         VF_UPDATE_SNAPSHOTS=1 cargo test -p videoflow-worker --test component_flow",
        copy.display()
    );
}

#[test]
fn the_python_sdk_unit_tests_pass() {
    let out = std::process::Command::new(sdk_python())
        .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
        .current_dir(sdk_dir())
        .env("PYTHONPATH", sdk_dir())
        .output()
        .expect("run the SDK's unit tests");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("OK"), "{text}");
}

const N: i64 = 200;
const OPERAND: i64 = 1000;

fn flow_yaml(python: &str) -> String {
    format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: comp-kill}}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: add
    kind: processor
    parents: [numbers]
    component: {{exec: {{command: ["{python}", -m, videoflow_sdk.examples.add]}}}}
    params: {{operand: {OPERAND}, sleep_ms: 10}}
  - name: sink
    kind: consumer
    parents: [add]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        last = N - 1
    )
}

/// `add`'s durable with a 5 s `ack_wait`, so what the killed worker had prefetched comes back
/// quickly (as in `flow_sigkill.rs`).
fn precreate_short_ack_wait(h: &FlowHarness) {
    let mut vars = h.vars("add", 0);
    vars.insert("VF_ACK_WAIT_SECONDS".into(), "5".into());
    let cfg = WorkerConfig::from_env(&vars).unwrap_or_else(|e| panic!("{}", e.render()));
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for parent in &cfg.parent_names {
            broker::ensure_node_stream(&b, &cfg.flow_id, &cfg.run_id, parent, false, None)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            broker::bind_data_durable(&b, &DurableRequest::data_for(&cfg, parent, false))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    });
}

/// The pid the worker logged when its component connected.
fn component_pid(log: &str) -> Option<i32> {
    log.lines()
        .filter(|l| l.contains("component connected"))
        .find_map(|l| {
            let rest = &l[l.find("pid=")? + 4..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
}

fn wait_until<T>(
    what: &str,
    h: &FlowHarness,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {timeout:?}; logs:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn killing_the_component_mid_stream_loses_no_input() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let python = sdk_python();
    let pythonpath = sdk_dir().display().to_string();
    let mut h = FlowHarness::new(&flow_yaml(&python.display().to_string()));
    precreate_short_ack_wait(&h);
    h.provision();
    h.spawn("numbers", 0, &[]);
    h.spawn("add", 0, &[("PYTHONPATH", &pythonpath)]);
    h.spawn("sink", 0, &[]);

    let before = wait_until(
        "40 records at the sink",
        &h,
        Duration::from_secs(60),
        || {
            let n = h.jsonl("out.jsonl").len();
            (n >= 40).then_some(n)
        },
    );
    let pid = component_pid(&h.log("add", 0)).expect("the worker logs its component's pid");
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("SIGKILL the component");

    // The worker notices at once, hands the input back and exits with its reason.
    let record = wait_until(
        "the worker's termination record",
        &h,
        Duration::from_secs(30),
        || h.termination("add", 0),
    );
    assert_eq!(record["code"], "VF_WORKER_FATAL", "{record}");
    assert_eq!(record["disposition"], "worker_fatal", "{record}");
    let message = record["message"].as_str().unwrap_or_default();
    assert!(message.contains("killed by signal 9"), "{record}");
    // The platform restarts the worker (here: the test), with a fresh component.
    std::thread::sleep(Duration::from_millis(300));
    h.spawn("add", 0, &[("PYTHONPATH", &pythonpath)]);
    let exits = h.wait_all(Duration::from_secs(120));

    let failed: Vec<_> = exits.iter().filter(|e| e.code != Some(0)).collect();
    assert_eq!(failed.len(), 1, "{exits:?}; logs:\n{}", h.all_logs());
    assert_eq!(
        (failed[0].node.as_str(), failed[0].code),
        ("add", Some(4)),
        "{exits:?}"
    );
    let out = h.jsonl("out.jsonl");
    let values: BTreeSet<i64> = out.iter().map(int_value).collect();
    let missing: Vec<i64> = (0..N)
        .map(|x| x + OPERAND)
        .filter(|v| !values.contains(v))
        .collect();
    assert!(
        missing.is_empty(),
        "lost inputs {missing:?}; logs:\n{}",
        h.all_logs()
    );
    let dups = duplicate_arrivals(&out);
    eprintln!(
        "component kill: {before} records before the kill, {} after the run, {dups} duplicate arrivals",
        out.len()
    );
    assert!(dups <= 3, "{dups} duplicate arrivals at the sink");
}
