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
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use flows_common::{by_trace, duplicate_arrivals};
use support::FlowHarness;
use videoflow_core::partition::{KeyPolicy, owner, partition_hash, py_str};
use videoflow_core::value::Value;

const N: i64 = 200;
const JOIN_REPLICAS: u32 = 2;

/// The join replica that owns `trace_id` (PART-2/3), computed two ways that must agree.
fn owning_replica(trace_id: &str) -> u32 {
    let key = Value::String(trace_id.to_owned());
    let by_hash = partition_hash(&py_str(&key)) % JOIN_REPLICAS;
    let o = owner(Some(&key), JOIN_REPLICAS, KeyPolicy::Reject);
    assert!(o.is_owned_by(by_hash), "owner() agrees with the hash");
    by_hash
}

/// PART-3/PART-4 + JOIN-5/6: every group exactly once, each emitted by the replica that owns
/// its trace id, inputs in `VF_PARENT_NAMES` order.
#[test]
fn partitioned_join_assembles_each_group_once_on_its_owner() {
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: partjoin}}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: same
    kind: processor
    parents: [numbers]
    replicas: 2
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: tally
    kind: processor
    parents: [numbers]
    component: {{builtin: videoflow.processors.aggregators.CountAggregator}}
  - name: pair
    kind: processor
    parents: [tally, same]
    replicas: {JOIN_REPLICAS}
    partitionBy: trace_id
    join: {{missing: wait}}
    component: {{builtin: videoflow.processors.basic.JoinerProcessor}}
  - name: sink
    kind: consumer
    parents: [pair]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        last = N - 1
    ));
    let t0 = Instant::now();
    h.start();
    let exits = h.wait_all(Duration::from_secs(90));
    h.assert_all_ok(&exits);
    eprintln!("partitioned join: {N} groups in {:?}", t0.elapsed());

    let out = h.jsonl("out.jsonl");
    assert_eq!(duplicate_arrivals(&out), 0, "a group was emitted twice");
    assert_eq!(
        out.len() as i64,
        N,
        "one output per group; logs:\n{}",
        h.all_logs()
    );
    let mut per_replica = [0usize; JOIN_REPLICAS as usize];
    let mut seen = BTreeSet::new();
    for (trace, records) in by_trace(&out) {
        let r = records[0];
        let want = owning_replica(&trace);
        let got = r["producer_replica"]
            .as_u64()
            .unwrap_or_else(|| panic!("sink records the join replica: {r}"));
        assert_eq!(
            got,
            u64::from(want),
            "group {trace} emitted by its owner: {r}"
        );
        per_replica[want as usize] += 1;
        let v: Vec<i64> = r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|x| x.as_i64().unwrap_or_else(|| panic!("{r}")))
            .collect();
        assert_eq!(v.len(), 2, "{r}");
        assert_eq!(v[0], v[1] + 1, "inputs in VF_PARENT_NAMES order: {r}");
        assert!(seen.insert(v[1]), "value {} twice", v[1]);
    }
    assert_eq!(
        seen,
        (0..N).collect::<BTreeSet<_>>(),
        "every input value once"
    );
    // With 200 random trace ids both replicas own some (a 2^-199 chance otherwise).
    assert!(
        per_replica.iter().all(|&n| n > 0),
        "both join replicas emitted groups: {per_replica:?}"
    );
    eprintln!("groups per join replica: {per_replica:?}");
}
