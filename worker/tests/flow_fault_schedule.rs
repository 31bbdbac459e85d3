//! The conformance fault schedule driving real workers (ENV-16/17, START-1 step 1):
//!
//! ```text
//!   numbers (IntProducer, N) ─ work (ServiceTimeProcessor 2 ms) ─ sink (JsonlSink)
//! ```
//!
//! - A `crash` at `settle.before` on the 20th settlement kills `work` after its output was
//!   published but before the input was acked (LOOP-5's window). The process exits with the
//!   scheduled code and leaves no termination record; a respawn (no schedule) gets the
//!   un-acked deliveries back after `ack_wait`, re-publishes under the same content-derived
//!   ids (MSGID-2) and the sink still gets every value.
//! - A `raise` (transient) at `sink.effect.before` on the first hit goes through the normal
//!   ladder: the delivery is NAKed, redelivered, and consumed; nothing is lost.
//!
//! The `work` durable is pre-created with a 5 s `ack_wait` (as in `flow_sigkill`) so the
//! crashed replica's leases lapse quickly.

mod flows_common;
mod support;

use std::path::Path;
use std::time::Duration;

use flows_common::{assert_none_lost, batch_flow, numbers_to_sink};
use support::FlowHarness;

const N: i64 = 100;

/// `work`: 2 ms of service time per message.
const WORK: &str = "    component: {builtin: videoflow.rs.processors.ServiceTimeProcessor}
    params: {ms: 2, mode: sleep}
";

fn flow_yaml() -> String {
    batch_flow("faults", "", &numbers_to_sink(N, "work", WORK, ""))
}

/// Lines of `<dir>/<barrier>.fired` (0 when absent).
fn fired(dir: &Path, barrier: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{barrier}.fired"))).map_or(0, |t| t.lines().count())
}

/// ENV-16/17 + LOOP-5 + MSGID-2: a scheduled crash after N settlements kills the processor
/// with the scheduled exit code and no termination record; respawned, it loses nothing.
#[test]
fn env16_crash_at_settle_before_after_n_messages_then_respawn_loses_nothing() {
    let mut h = FlowHarness::new(&flow_yaml());
    h.precreate_data_durables("work", Duration::from_secs(5));
    h.provision();
    let markers = h.dir.join("markers");
    let schedule = r#"{"settle.before": {"kind": "nth", "n": 20, "action": {"kind": "crash", "exit_code": 137}}}"#;
    let markers_text = markers.display().to_string();
    h.spawn("sink", 0, &[]);
    h.spawn(
        "work",
        0,
        &[
            ("VF_FAULT_SCHEDULE_JSON", schedule),
            ("VF_FAULT_MARKER_DIR", &markers_text),
        ],
    );
    h.spawn("numbers", 0, &[]);
    h.wait_until(
        "the scheduled crash to fire",
        Duration::from_secs(30),
        || match fired(&markers, "settle.before") {
            0 => Err("no settle.before marker".to_owned()),
            n => Ok(n),
        },
    );
    // The marker is written just before the exit; give the process a moment to be gone.
    std::thread::sleep(Duration::from_millis(300));
    let before_respawn = h.jsonl("out.jsonl").len();
    h.spawn("work", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(90));

    let crashed = h.the_one_abnormal_exit(&exits);
    assert_eq!(
        (crashed.node.as_str(), crashed.replica, crashed.code),
        ("work", 0, Some(137)),
        "{exits:?}"
    );
    assert_eq!(exits.len(), 4, "numbers, work, sink, respawned work");
    assert_eq!(fired(&markers, "settle.before"), 1, "nth fires once");
    assert!(
        h.termination("work", 0).is_none(),
        "a crash writes no termination record (and the respawn exited 0)"
    );
    assert!(
        before_respawn < N as usize,
        "the crash must happen mid-flow ({before_respawn} records before the respawn)"
    );
    assert_none_lost(&h, 0..N, "after the scheduled crash and the respawn");
}

/// ENV-16 + DELIV-6/7: a transient `raise` at `sink.effect.before` takes the failure ladder
/// (NAK, redelivery); the flow finishes and every value reaches the sink.
#[test]
fn env16_raise_at_sink_effect_goes_through_the_ladder() {
    let mut h = FlowHarness::new(&flow_yaml());
    h.provision();
    let markers = h.dir.join("markers");
    let markers_text = markers.display().to_string();
    let schedule = r#"{"sink.effect.before": {"kind": "nth", "n": 1, "action": {"kind": "raise", "code": "VF_TRANSIENT", "message": "injected", "disposition": "transient"}}}"#;
    h.spawn(
        "sink",
        0,
        &[
            ("VF_FAULT_SCHEDULE_JSON", schedule),
            ("VF_FAULT_MARKER_DIR", &markers_text),
        ],
    );
    h.spawn("work", 0, &[]);
    h.spawn("numbers", 0, &[]);
    h.wait_all_ok(Duration::from_secs(60));
    assert_eq!(fired(&markers, "sink.effect.before"), 1);
    assert!(
        h.log("sink", 0).contains("injected"),
        "the raised error is logged by the ladder; log:\n{}",
        h.log("sink", 0)
    );
    assert_none_lost(&h, 0..N, "after the raised error");
}

/// ENV-16: a malformed schedule stops the worker at START-1 step 1 with a ConfigError
/// naming the variable (exit 2, termination record written).
#[test]
fn env16_malformed_schedule_is_a_config_error() {
    let mut h = FlowHarness::new(&flow_yaml());
    h.spawn(
        "work",
        0,
        &[(
            "VF_FAULT_SCHEDULE_JSON",
            r#"{"process.before": {"kind": "drop"}}"#,
        )],
    );
    let exits = h.wait_all(Duration::from_secs(20));
    assert_eq!(exits[0].code, Some(2), "logs:\n{}", h.all_logs());
    let record = h.termination("work", 0).expect("termination record");
    assert_eq!(record["code"], "VF_CONFIG", "{record}");
    assert!(
        record["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown barrier 'process.before'")),
        "{record}"
    );
}
