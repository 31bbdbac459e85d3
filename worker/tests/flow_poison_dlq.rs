//! Poison messages in a BATCH flow end to end (DELIV-6, DELIV-8): an at-least-once processor
//! fails two values as poison; the flow still completes, every other value reaches the sink,
//! and the flow's DLQ holds exactly the two failed deliveries — original bytes, DELIV-8
//! headers, ids derived from the original stream sequence.

mod streams;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use videoflow_core::envelope::{self, Payload};
use videoflow_core::naming;
use videoflow_core::value::Value;

use support::FlowHarness;

const N: i64 = 40;
const POISON: [i64; 2] = [7, 23];

#[test]
fn deliv_6_deliv_8_poison_is_dead_lettered_with_original_bytes_and_the_flow_completes() {
    let started = Instant::now();
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: poisoned}}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: picky
    kind: processor
    parents: [numbers]
    delivery: at-least-once
    component: {{builtin: videoflow.rs.processors.FailOn}}
    params: {{values: [{a}, {b}], code: poison}}
  - name: sink
    kind: consumer
    parents: [picky]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        last = N - 1,
        a = POISON[0],
        b = POISON[1],
    ));
    let vars = h.vars("picky", 0);
    assert_eq!(
        vars.get("VF_DELIVERY").map(String::as_str),
        Some("at-least-once")
    );
    let (flow, run) = streams::ids(&vars);
    // Keep the originals stored (interest retention drops them once TERMed) to compare bytes.
    h.provision();
    let url = h.nats.url();
    h.block_on(streams::add_witness(
        &url,
        &naming::stream_name(&flow, &run, "numbers"),
    ));
    h.start();
    let exits = h.wait_all(Duration::from_secs(50));
    h.assert_all_ok(&exits);

    // Every value but the poisoned ones reaches the sink, once, in order.
    let values: Vec<i64> = h
        .jsonl("out.jsonl")
        .iter()
        .map(|r| r["value"].as_i64().expect("int value"))
        .collect();
    let expected: Vec<i64> = (0..N).filter(|v| !POISON.contains(v)).collect();
    assert_eq!(values, expected);

    // The DLQ holds exactly the failed deliveries.
    let dlq = h.block_on(streams::read_stream(&url, &naming::dlq_stream_name(&flow)));
    let source = h.block_on(streams::read_stream(
        &url,
        &naming::stream_name(&flow, &run, "numbers"),
    ));
    let by_seq: BTreeMap<u64, &streams::Stored> = source.iter().map(|m| (m.seq, m)).collect();
    assert_eq!(
        dlq.len(),
        POISON.len(),
        "exactly the failed messages: {dlq:#?}"
    );
    let mut dead_values = Vec::new();
    for letter in &dlq {
        assert_eq!(
            letter.subject,
            naming::dlq_subject(&flow, &run, "picky"),
            "NAME-9 node subject"
        );
        // The original raw envelope: decodes to the poisoned value.
        let env = envelope::decode(&letter.payload).expect("a dead letter is the raw envelope");
        let Payload::Value(Value::Int(v)) = env.payload else {
            panic!("unexpected payload {:?}", env.payload)
        };
        dead_values.push(v);
        assert_eq!(env.producer_name, "numbers");
        // Nats-Msg-Id names the original's stream sequence (the producer published value v
        // as its (v+1)-th message, before its EOS); the bytes are that message's, verbatim.
        let stream_seq = u64::try_from(v + 1).expect("seq");
        let msg_id = format!("dlq:{flow}:{run}:picky:{stream_seq}");
        assert_eq!(
            env.seq, stream_seq,
            "the producer's identity, not a re-encode"
        );
        assert!(env.trace_id.starts_with("numbers:"), "{}", env.trace_id);
        let original = by_seq.get(&stream_seq).expect("original still stored");
        assert_eq!(
            original.payload, letter.payload,
            "payload = the original bytes"
        );
        let headers: BTreeMap<&str, &str> = letter
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let expected_error = format!("FailOn: input value {v} is listed to fail");
        let expected: BTreeMap<&str, &str> = [
            ("Nats-Msg-Id", msg_id.as_str()),
            ("VF-Origin-Node", "picky"),
            ("VF-Run-Id", run.as_str()),
            ("VF-Code", "VF_POISON"),
            ("VF-Disposition", "poison"),
            ("VF-Error", expected_error.as_str()),
            (
                "VF-Remedy",
                "FailOn is a test node: remove the value from its 'values' parameter.",
            ),
            ("VF-Num-Delivered", "1"),
        ]
        .into_iter()
        .collect();
        assert_eq!(headers, expected, "DELIV-8 headers, no VF-Env");
    }
    dead_values.sort_unstable();
    assert_eq!(dead_values, POISON.to_vec());
    assert!(started.elapsed() < Duration::from_secs(60));
}
