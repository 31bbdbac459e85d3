//! A time join with quorum end to end (JOIN-11/12/17/20/23, EOS-3/6, LOOP-9): two
//! `TickProducer`s on the same event-time grid, the second skipping every third tick, joined
//! with `{mode: time, toleranceMs: 5, timeoutSeconds: 1, quorum: 1, missing: drop}` by a
//! processor (→ sink) and by a consumer.
//!
//! Every tick yields exactly one group: both parents for ticks not divisible by 3, the first
//! alone (the second `null`) for the others — those are staged by the quorum timeout
//! (JOIN-17), and the last tick is one of them, so the node may only stop after the timeout
//! released it (EOS-3 (c) with EOS-6's `has_pending_from`).
//!
//! Two runs of the same flow (BATCH):
//! - *staged*: the producers run to completion before the joiners start, so every terminator
//!   is recorded before the first group forms and the drain has to wait for the quorum
//!   timeout; the grouping is a function of the event times alone. (The join timeout counts
//!   from when a group is *seen*, on the mono clock: producers whose processes start seconds
//!   apart could otherwise let a group time out before its late partner arrives.)
//! - *live*: everything starts at once and the producers are paced on a wall-clock grid a few
//!   seconds ahead (`pace: true`), so both release tick `i` at the same instant whichever
//!   started first; the EOS arrives while the last (quorum) group is still pending.

mod streams;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;
use videoflow_core::join::identity::{SyncMember, round_half_even_micros, time_group_trace_id};
use videoflow_core::msgid::{MsgKind, msgid_signed};
use videoflow_worker::nodes::testing::{DEFAULT_TICK_START_TS, TickProducer};

use support::FlowHarness;

/// Ticks per producer: a multiple of 3, so the last group is a quorum (left-only) group.
const TICKS: u64 = 30;
const PERIOD_MS: f64 = 100.0;
const JOIN: &str = "{mode: time, toleranceMs: 5, timeoutSeconds: 1, quorum: 1, missing: drop}";

/// The expected group seq of tick `i` on the grid from `start_ts` (JOIN-20 over the tick's
/// event time, LOOP-9).
fn tick_seq(start_ts: f64, i: u64) -> i64 {
    round_half_even_micros(TickProducer::tick_ts(start_ts, PERIOD_MS, i)).expect("finite")
}

/// The flow: `left`/`right` tick producers (`right` skips every third tick) joined in time
/// mode by `pair` (a joiner processor, → `out`) and by `members` (a consumer).
fn flow_yaml(start_ts: f64, pace: bool) -> String {
    format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: timejoin}}
spec:
  type: batch
  nodes:
  - name: left
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{count: {TICKS}, period_ms: {PERIOD_MS}, start_ts: {start_ts}, pace: {pace}}}
  - name: right
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{count: {TICKS}, period_ms: {PERIOD_MS}, start_ts: {start_ts}, pace: {pace}, skip_every: 3}}
  - name: pair
    kind: processor
    parents: [left, right]
    join: {JOIN}
    component: {{builtin: videoflow.processors.basic.JoinerProcessor}}
  - name: out
    kind: consumer
    parents: [pair]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
  - name: members
    kind: consumer
    parents: [left, right]
    join: {JOIN}
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/members.jsonl"}}
"#
    )
}

/// A sink's records keyed by their `seq` field (the first parent envelope's), each once.
fn by_seq(records: &[Json], file: &str) -> BTreeMap<i64, Json> {
    let mut out = BTreeMap::new();
    for r in records {
        let seq = r["seq"].as_i64().expect("seq");
        assert!(
            out.insert(seq, r.clone()).is_none(),
            "{file}: seq {seq} twice"
        );
    }
    out
}

#[test]
fn join_17_join_23_staged_time_join_with_quorum_yields_one_group_per_tick() {
    let started = Instant::now();
    let start_ts = DEFAULT_TICK_START_TS;
    let mut h = FlowHarness::new(&flow_yaml(start_ts, false));
    h.provision();
    h.spawn("left", 0, &[]);
    h.spawn("right", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(20));
    h.assert_all_ok(&exits);
    for node in ["pair", "out", "members"] {
        h.spawn(node, 0, &[]);
    }
    let exits = h.wait_all(Duration::from_secs(40));
    h.assert_all_ok(&exits);
    check_groups(&h, start_ts);
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn join_17_eos_6_live_paced_time_join_emits_the_last_quorum_group_before_stopping() {
    let started = Instant::now();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    // Whole seconds, 3 s ahead: every worker is up before the first tick is due.
    let start_ts = (now + 3.0).ceil();
    let mut h = FlowHarness::new(&flow_yaml(start_ts, true));
    h.start();
    let exits = h.wait_all(Duration::from_secs(45));
    h.assert_all_ok(&exits);
    check_groups(&h, start_ts);
    // Paced: the producers did not finish before the grid's last tick was due.
    let last_tick = TickProducer::tick_ts(start_ts, PERIOD_MS, TICKS);
    let sink_arrival = h
        .jsonl("members.jsonl")
        .iter()
        .filter_map(|r| r["arrival_ts"].as_f64())
        .fold(f64::MIN, f64::max);
    assert!(sink_arrival >= last_tick, "{sink_arrival} < {last_tick}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// The checks both runs share: one group per tick, membership by divisibility, JOIN-23 ids.
fn check_groups(h: &FlowHarness, start_ts: f64) {
    let (flow, run) = streams::ids(&h.vars("pair", 0));
    let logs = h.all_logs();

    let members = by_seq(&h.jsonl("members.jsonl"), "members.jsonl");
    let out = by_seq(&h.jsonl("out.jsonl"), "out.jsonl");
    let expected_seqs: Vec<i64> = (1..=TICKS).map(|i| tick_seq(start_ts, i)).collect();
    // A consumer's record shows its first present parent's envelope: `left`, always there.
    assert_eq!(
        members.keys().copied().collect::<Vec<_>>(),
        (1..=TICKS as i64).collect::<Vec<_>>(),
        "members: one group per tick; logs:\n{logs}"
    );
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        expected_seqs,
        "out: one group per tick; logs:\n{logs}"
    );

    let (mut both, mut left_only) = (Vec::new(), Vec::new());
    for i in 1..=TICKS {
        let seq = tick_seq(start_ts, i);
        let ts = TickProducer::tick_ts(start_ts, PERIOD_MS, i);
        let tick = i64::try_from(i).expect("tick");
        let skipped = TickProducer::is_skipped(3, i);

        // The consumer's view: each parent's envelope (or null for the missing one).
        let m = &members[&tick];
        let left = &m["parents"]["left"];
        let right = &m["parents"]["right"];
        assert_eq!(left["seq"].as_u64(), Some(i), "left is tick {i}: {m}");
        assert_eq!(
            left["event_ts"].as_f64(),
            Some(ts),
            "LOOP-9 event time: {m}"
        );
        let mut sync = vec![SyncMember {
            parent: "left",
            producer_name: "left",
            trace_id: left["trace_id"].as_str().expect("left trace id"),
            seq: i,
        }];
        if skipped {
            assert!(right.is_null(), "tick {i}: right missing: {m}");
            assert_eq!(m["value"], serde_json::json!([tick, null]), "{m}");
            left_only.push(i);
        } else {
            assert_eq!(right["event_ts"].as_f64(), Some(ts), "{m}");
            assert_eq!(m["value"], serde_json::json!([tick, tick]), "{m}");
            sync.push(SyncMember {
                parent: "right",
                producer_name: "right",
                trace_id: right["trace_id"].as_str().expect("right trace id"),
                seq: right["seq"].as_u64().expect("right seq"),
            });
            both.push(i);
        }

        // JOIN-23: the group id is `tw-<micros>-<hash of the sync members>`; the processor
        // publishes it as its output's trace id (MSGID-2), seq = the micros (JOIN-20).
        let o = &out[&seq];
        let observed = o["trace_id"].as_str().expect("trace id");
        let digest = observed
            .strip_prefix(&format!("tw-{seq}-"))
            .unwrap_or_else(|| panic!("tick {i}: not tw-<micros>-<hash>: {o}"));
        assert!(
            digest.len() == 12
                && digest
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "tick {i}: 12 lowercase hex: {observed}"
        );
        // The hash covers exactly the sync members present (window id empty in v1).
        let tw = time_group_trace_id(seq, None, &sync);
        assert_eq!(observed, tw, "tick {i}: {o}");
        assert_eq!(
            o["event_ts"].as_f64(),
            Some(ts),
            "JOIN-20 event_ts = group ts: {o}"
        );
        assert_eq!(
            o["value"], m["value"],
            "the joiner's tuple, in parent order"
        );
        // IDEM-1 / §5: the consumer's input_key is its own msgid of the group identity.
        assert_eq!(
            m["input_key"].as_str(),
            Some(
                msgid_signed(&flow, &run, "members", &tw, i128::from(seq), MsgKind::Data).as_str()
            ),
            "{m}"
        );
    }
    assert_eq!(
        both,
        (1..=TICKS).filter(|i| i % 3 != 0).collect::<Vec<_>>(),
        "both present = ticks not divisible by 3"
    );
    assert_eq!(
        left_only,
        (1..=TICKS).filter(|i| i % 3 == 0).collect::<Vec<_>>(),
        "right missing = the others"
    );
}
