//! Replayable producers (MSGID-6, LOOP-2) in a real flow: an IntProducer declared
//! `replayable: true` mints `numbers:<offset>`, checkpoints the last offset the broker
//! accepted in 1.0.4's `checkpoint/r{replica}` record, and a replacement resumes after it
//! (`seek`). The sink is a plain appending `JsonlSink`, so any value published twice and
//! delivered twice shows as two records.

mod flows_common;
mod streams;
mod support;

use std::time::Duration;

use flows_common::{batch_flow, int_value, jsonl_sink, ledger_docs, ledger_spec};
use support::{Exit, FlowHarness};

const N: i64 = 600;
/// 3 s of production: the kill lands mid-flow.
const FPS: i64 = 200;

fn flow(spec: &str, class: &str, replayable: bool) -> String {
    let producer = format!(
        "  - name: numbers\n    kind: producer\n    replayable: {replayable}\n    component: \
         {{builtin: {class}}}\n    params: {{start_value: 0, end_value: {}, fps: {FPS}}}\n",
        N - 1
    );
    batch_flow(
        "replay",
        spec,
        &[producer, jsonl_sink("sink", "numbers", "out.jsonl", "")].concat(),
    )
}

fn int_flow(ledger: bool) -> String {
    let spec = if ledger {
        ledger_spec("file://{{DIR}}/ledger")
    } else {
        "  runId: r1\n".to_owned()
    };
    flow(&spec, "videoflow.producers.basic.IntProducer", true)
}

/// The producer's checkpoint document, if written.
fn checkpoint(h: &FlowHarness) -> Option<serde_json::Value> {
    let url = format!("file://{}/ledger", h.dir.display());
    ledger_docs(h, &url, "vf/replay/r1/numbers/checkpoint/").remove("r0")
}

/// Starts both workers, SIGKILLs the producer once `at` records reached the sink, starts it
/// again under the same replica id, and waits for the end: every process but the killed one
/// exited 0; the sink holds each of 0..N once under trace id `numbers:<value + 1>`. Returns
/// the offset checkpointed when the producer was killed (`None` without a ledger).
fn kill_and_resume(h: &mut FlowHarness, at: usize) -> Option<u64> {
    h.provision();
    h.spawn("numbers", 0, &[]);
    h.spawn("sink", 0, &[]);
    h.wait_for_records("out.jsonl", at, Duration::from_secs(60));
    assert!(
        h.kill("numbers", 0),
        "the producer was still running; logs:\n{}",
        h.all_logs()
    );
    let at_kill = checkpoint(h).and_then(|c| c["position"]["offset"].as_u64());
    h.spawn("numbers", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(120));
    let ok = |e: &&Exit| e.code == Some(0);
    assert_eq!(
        exits.iter().filter(ok).count(),
        exits.len() - 1,
        "only the killed producer ended abnormally: {exits:?}; logs:\n{}",
        h.all_logs()
    );
    let out = h.jsonl("out.jsonl");
    let mut values: Vec<i64> = out.iter().map(int_value).collect();
    values.sort_unstable();
    assert_eq!(
        values,
        (0..N).collect::<Vec<_>>(),
        "each value once at an appending sink; logs:\n{}",
        h.all_logs()
    );
    for r in &out {
        assert_eq!(
            r["trace_id"].as_str(),
            Some(format!("numbers:{}", int_value(r) + 1).as_str()),
            "MSGID-6 identity of {r}"
        );
    }
    at_kill
}

/// The offset a restarted producer said it resumed after, if it said so.
fn resumed_after(log: &str) -> Option<u64> {
    let (_, rest) = log.split_once("resumes after offset ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// MSGID-6 with a durable run ledger: the replacement resumes after the offset checkpointed
/// before the kill (never before it), and the last checkpoint is the whole source in 1.0.4's
/// record shape.
#[test]
fn msgid_6_a_killed_replayable_producer_resumes_after_its_last_accepted_offset() {
    let mut h = FlowHarness::new(&int_flow(true));
    let at_kill = kill_and_resume(&mut h, 150)
        .unwrap_or_else(|| panic!("a checkpoint before the kill; logs:\n{}", h.all_logs()));
    assert!(at_kill >= 1, "{at_kill}");
    let resumed = resumed_after(&h.log("numbers", 0))
        .unwrap_or_else(|| panic!("the replacement resumed; logs:\n{}", h.all_logs()));
    assert!(
        resumed >= at_kill,
        "resumed after {resumed}, checkpointed {at_kill}"
    );
    let doc = checkpoint(&h).expect("checkpoint");
    assert_eq!(doc["position"], serde_json::json!({"offset": N}), "{doc}");
    assert_eq!(doc["state"], "", "{doc}");
    assert!(doc["at"].as_f64().is_some_and(|at| at > 0.0), "{doc}");
}

/// MSGID-6 without a ledger: nothing remembers the offset, so the replacement starts again at
/// offset 1 — under the same ids, which the stream's duplicate window drops (MSGID-1): the
/// sink still gets each value once.
#[test]
fn msgid_6_without_a_ledger_a_replacement_replays_under_the_same_ids() {
    let mut h = FlowHarness::new(&int_flow(false));
    assert_eq!(kill_and_resume(&mut h, 150), None);
    assert_eq!(resumed_after(&h.log("numbers", 0)), None);
}

/// Also with the ledger, through the shared helper: a kill early in the run.
#[test]
fn msgid_6_a_kill_early_in_the_run_loses_and_repeats_nothing() {
    let mut h = FlowHarness::new(&int_flow(true));
    kill_and_resume(&mut h, 5);
    assert_eq!(
        checkpoint(&h).map(|c| c["position"]["offset"].clone()),
        Some(serde_json::json!(N))
    );
}

/// A live class told to be replayable (VF_REPLAYABLE=1 set by hand: admission refuses it in a
/// Flow) ends at start with VF_CONFIG, exit 2, naming the class and the fix, before it
/// publishes anything.
#[test]
fn msgid_6_a_live_source_declared_replayable_is_refused_at_start() {
    let yaml = flow(
        "  runId: r1\n",
        "videoflow.producers.basic.IntProducer",
        false,
    )
    .replace(
        "videoflow.producers.basic.IntProducer}\n    params: {start_value: 0, end_value: 599, fps: 200}",
        "videoflow.rs.producers.TickProducer}\n    params: {count: 3}",
    );
    let mut h = FlowHarness::new(&yaml);
    h.provision();
    h.spawn("numbers", 0, &[("VF_REPLAYABLE", "1")]);
    let exits = h.wait_all(Duration::from_secs(60));
    assert_eq!(exits[0].code, Some(2), "{exits:?}; logs:\n{}", h.all_logs());
    let record = h.termination("numbers", 0).expect("termination record");
    let text = record.to_string();
    assert!(text.contains("VF_CONFIG"), "{text}");
    assert!(text.contains("TickProducer"), "{text}");
    assert!(text.contains("live source"), "{text}");
    assert!(text.contains("Unset VF_REPLAYABLE"), "{text}");
}
