//! Linear BATCH flow end to end: N in, exactly N out, in order per producer.

mod support;

use std::time::Duration;

use support::FlowHarness;

#[test]
fn linear_batch_delivers_every_message_once_in_order() {
    const N: i64 = 500;
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: linear}}
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
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [same]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        last = N - 1
    ));
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    let out = h.jsonl("out.jsonl");
    let values: Vec<i64> = out
        .iter()
        .map(|r| r["value"].as_i64().expect("int value"))
        .collect();
    assert_eq!(values, (0..N).collect::<Vec<_>>(), "exactly N, in order");
    // Carry-forward (WIRE-4, MSGID-2): the sink sees the producer's trace id and seq.
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r["seq"].as_i64(), Some(i as i64 + 1));
        assert!(
            r["trace_id"]
                .as_str()
                .is_some_and(|t| t.starts_with("numbers:")),
            "{r}"
        );
    }
}
