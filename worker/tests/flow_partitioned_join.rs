//! BATCH diamond whose trace join runs as 2 partitioned replicas (PART-1/2/3/4,
//! JOIN-4/5/6):
//!
//! ```text
//!   numbers ─┬─ same  (IdentityProcessor, 2 competing replicas) ─┐
//!            └─ tally (CountAggregator) ─────────────────────────┴─ pair (JoinerProcessor,
//!                              replicas: 2, partitionBy: trace_id, missing: wait) ─ sink
//! ```
//!
//! Each join replica binds its own durable and sees every message of both parents; it keeps
//! the ones whose trace id it owns (`sha256(py_str(trace_id))[0..8] % 2`, PART-3) and acks the
//! rest (PART-4). The JSONL sink records the `replica_id` of the envelope it got
//! (`producer_replica`), i.e. the join replica that emitted the group.

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::time::{Duration, Instant};

use flows_common::by_trace;
use shared_flows::{assert_diamond_joined, diamond_flow, owning_replica};
use support::FlowHarness;

const N: i64 = 200;
const JOIN_REPLICAS: u32 = 2;

/// PART-3/PART-4 + JOIN-5/6: every group exactly once, each emitted by the replica that owns
/// its trace id, inputs in `VF_PARENT_NAMES` order.
#[test]
fn partitioned_join_assembles_each_group_once_on_its_owner() {
    let mut h = FlowHarness::new(&diamond_flow("partjoin", N, JOIN_REPLICAS));
    let t0 = Instant::now();
    h.start();
    h.wait_all_ok(Duration::from_secs(90));
    eprintln!("partitioned join: {N} groups in {:?}", t0.elapsed());

    let out = assert_diamond_joined(&h, N);
    let mut per_replica = [0usize; JOIN_REPLICAS as usize];
    for (trace, records) in by_trace(&out) {
        let r = records[0];
        let want = owning_replica(&trace, JOIN_REPLICAS);
        let got = r["producer_replica"]
            .as_u64()
            .unwrap_or_else(|| panic!("sink records the join replica: {r}"));
        assert_eq!(
            got,
            u64::from(want),
            "group {trace} emitted by its owner: {r}"
        );
        per_replica[want as usize] += 1;
    }
    // With 200 random trace ids both replicas own some (a 2^-199 chance otherwise).
    assert!(
        per_replica.iter().all(|&n| n > 0),
        "both join replicas emitted groups: {per_replica:?}"
    );
    eprintln!("groups per join replica: {per_replica:?}");
}
