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

use std::time::Duration;

use flows_common::{assert_none_lost, batch_flow, duplicate_arrivals, numbers_to_sink};
use support::{FlowHarness, sdk_dir, sdk_python};

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
    let add = format!(
        r#"    component: {{exec: {{command: ["{python}", -m, videoflow_sdk.examples.add]}}}}
    params: {{operand: {OPERAND}, sleep_ms: 10}}
"#
    );
    batch_flow("comp-kill", "", &numbers_to_sink(N, "add", &add, ""))
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

#[test]
fn killing_the_component_mid_stream_loses_no_input() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let python = sdk_python();
    let pythonpath = sdk_dir().display().to_string();
    let mut h = FlowHarness::new(&flow_yaml(&python.display().to_string()));
    // `add`'s durable with a 5 s `ack_wait`, so what the killed worker had prefetched comes
    // back quickly (as in `flow_sigkill.rs`).
    h.precreate_data_durables("add", Duration::from_secs(5));
    h.provision();
    h.spawn("numbers", 0, &[]);
    h.spawn("add", 0, &[("PYTHONPATH", &pythonpath)]);
    h.spawn("sink", 0, &[]);

    let before = h.wait_for_records("out.jsonl", 40, Duration::from_secs(60));
    let pid = component_pid(&h.log("add", 0)).expect("the worker logs its component's pid");
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("SIGKILL the component");

    // The worker notices at once, hands the input back and exits with its reason.
    let record = h.wait_for_termination("add", 0, Duration::from_secs(30));
    assert_eq!(record["code"], "VF_WORKER_FATAL", "{record}");
    assert_eq!(record["disposition"], "worker_fatal", "{record}");
    let message = record["message"].as_str().unwrap_or_default();
    assert!(message.contains("killed by signal 9"), "{record}");
    // The platform restarts the worker (here: the test), with a fresh component.
    std::thread::sleep(Duration::from_millis(300));
    h.spawn("add", 0, &[("PYTHONPATH", &pythonpath)]);
    let exits = h.wait_all(Duration::from_secs(120));

    let failed = h.the_one_abnormal_exit(&exits);
    assert_eq!(
        (failed.node.as_str(), failed.code),
        ("add", Some(4)),
        "{exits:?}"
    );
    let out = assert_none_lost(
        &h,
        (0..N).map(|x| x + OPERAND),
        "after the component was killed",
    );
    let dups = duplicate_arrivals(&out);
    eprintln!(
        "component kill: {before} records before the kill, {} after the run, {dups} duplicate arrivals",
        out.len()
    );
    assert!(dups <= 3, "{dups} duplicate arrivals at the sink");
}
