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

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shared_flows::{PERIOD_MS, assert_one_group_per_tick, time_join_flow};
use videoflow_worker::nodes::testing::{DEFAULT_TICK_START_TS, TickProducer};

use support::FlowHarness;

/// Ticks per producer: a multiple of 3, so the last group is a quorum (left-only) group.
const TICKS: u64 = 30;

#[test]
fn join_17_join_23_staged_time_join_with_quorum_yields_one_group_per_tick() {
    let started = Instant::now();
    let start_ts = DEFAULT_TICK_START_TS;
    let mut h = FlowHarness::new(&time_join_flow(TICKS, start_ts, false));
    h.provision();
    h.spawn("left", 0, &[]);
    h.spawn("right", 0, &[]);
    h.wait_all_ok(Duration::from_secs(20));
    for node in ["pair", "out", "members"] {
        h.spawn(node, 0, &[]);
    }
    h.wait_all_ok(Duration::from_secs(40));
    assert_one_group_per_tick(&h, TICKS, start_ts);
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
    let mut h = FlowHarness::new(&time_join_flow(TICKS, start_ts, true));
    h.start();
    h.wait_all_ok(Duration::from_secs(45));
    assert_one_group_per_tick(&h, TICKS, start_ts);
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
