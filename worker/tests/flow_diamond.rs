//! BATCH diamond with a trace join, end to end (JOIN-2/5/6, ENV-3):
//!
//! ```text
//!   numbers ─┬─ same  (IdentityProcessor, 2 competing replicas) ─┐
//!            └─ tally (CountAggregator, 1 replica) ──────────────┴─ pair (JoinerProcessor,
//!                                                                   parents [tally, same],
//!                                                                   missing: wait) ─ sink
//! ```
//!
//! The branches are distinguishable: `same` passes `v` through, `tally` counts its inputs, so
//! in a clean run (one replica, stream order) it emits `v + 1` for input `v`. The join lists
//! `tally` first although it is declared second in the flow, so a joined value `[v + 1, v]`
//! proves the inputs follow `VF_PARENT_NAMES` (ENV-3), not declaration or arrival order.

mod flows_common;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use flows_common::{by_trace, duplicate_arrivals};
use support::FlowHarness;

const N: i64 = 200;

/// JOIN-5/JOIN-6/ENV-3: every trace group is assembled exactly once (N outputs, each trace id
/// once, every input value once) and its inputs arrive in `VF_PARENT_NAMES` order.
#[test]
fn diamond_join_assembles_every_group_once_in_parent_order() {
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: diamond}}
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
    eprintln!("diamond: {N} groups in {:?}", t0.elapsed());

    let out = h.jsonl("out.jsonl");
    let logs = || h.all_logs();
    // Exactly once: N records, N distinct trace ids, all minted by the producer.
    assert_eq!(duplicate_arrivals(&out), 0, "a group was emitted twice");
    assert_eq!(
        out.len() as i64,
        N,
        "one output per group; logs:\n{}",
        logs()
    );
    let traces = by_trace(&out);
    assert!(
        traces.keys().all(|t| t.starts_with("numbers:")),
        "trace ids are the producer's (MSGID-2)"
    );
    // Parent order: [tally, same] = [v + 1, v], and every v in 0..N exactly once.
    let mut seen = BTreeSet::new();
    for r in &out {
        let pair = r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("joined value is a list: {r}"));
        let [tally, same] = pair.as_slice() else {
            panic!("two inputs per group: {r}");
        };
        let (tally, same) = (
            tally.as_i64().unwrap_or_else(|| panic!("{r}")),
            same.as_i64().unwrap_or_else(|| panic!("{r}")),
        );
        assert_eq!(
            tally,
            same + 1,
            "inputs in VF_PARENT_NAMES order [tally, same]: {r}"
        );
        assert!(seen.insert(same), "value {same} twice: {r}");
        // The group keeps the producer's seq (JOIN-6: min of equal seqs) = v + 1.
        assert_eq!(r["seq"].as_i64(), Some(same + 1), "{r}");
    }
    assert_eq!(
        seen,
        (0..N).collect::<BTreeSet<_>>(),
        "every input value once"
    );
    // Both competing replicas of `same` ran to a clean end (exit 0 above) and the join sees
    // one group per trace whichever replica carried the `same` half.
}
