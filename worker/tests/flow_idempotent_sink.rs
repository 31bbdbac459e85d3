//! An idempotent consumer (IDEM-1): every consumed group is marked under its
//! `last_input_key`, and a group delivered again — here the producer's messages republished
//! under new broker ids, as a replay after the dedup window would — is skipped and acked,
//! so the effect happens once.

mod streams;
mod support;

use std::time::Duration;

use bytes::Bytes;
use support::FlowHarness;
use videoflow_core::envelope::{MsgType, decode};
use videoflow_core::msgid::{MsgKind, msgid};
use videoflow_core::naming;
use videoflow_worker::broker;
use videoflow_worker::idempotency::IdempotencyStore;

#[test]
fn idem_1_a_group_delivered_again_is_skipped() {
    let mut h = FlowHarness::new(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: idem}
spec:
  type: batch
  runId: r1
  payloadStore: {url: "{{REDIS}}"}
  nodes:
  - name: ticks
    kind: producer
    component: {builtin: videoflow.rs.producers.TickProducer}
    params: {count: 10}
  - name: sink
    kind: consumer
    parents: [ticks]
    component: {builtin: videoflow.rs.consumers.JsonlSink}
    params: {path: "{{DIR}}/out.jsonl", idempotent: true}
"#,
    );
    let url = h.nats.url();
    let stream = naming::stream_name("idem", "r1", "ticks");
    h.provision();
    h.block_on(streams::add_witness(&url, &stream));
    h.start();
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    let first = h.jsonl("out.jsonl");
    assert_eq!(first.len(), 10, "{first:#?}");

    // Every consumed group is marked under its IDEM-1 key.
    let store = IdempotencyStore::connect(&h.redis.as_ref().expect("redis").url()).expect("store");
    for r in &first {
        let key = r["input_key"].as_str().expect("input_key");
        let trace = r["trace_id"].as_str().expect("trace_id");
        let seq = r["seq"].as_u64().expect("seq");
        assert_eq!(key, msgid("idem", "r1", "sink", trace, seq, MsgKind::Data));
        assert!(
            h.block_on(store.seen(key)).expect("seen"),
            "marked after consume"
        );
    }

    // Deliver the same groups again under new broker ids, then run the sink once more.
    let subject = naming::data_subject("idem", "r1", "ticks");
    let republished = h.block_on(async {
        let stored = streams::read_stream(&url, &stream).await;
        let b = broker::connect(&url).await.expect("connect");
        let mut n = 0;
        for m in stored
            .iter()
            .filter(|m| decode(&m.payload).is_ok_and(|e| e.msg_type == MsgType::Data))
        {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("again-{}", m.seq).as_str());
            b.jetstream()
                .publish_with_headers(subject.clone(), headers, Bytes::clone(&m.payload))
                .await
                .expect("publish")
                .await
                .expect("stored");
            n += 1;
        }
        n
    });
    assert_eq!(republished, 10);
    h.spawn("sink", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    assert_eq!(
        h.jsonl("out.jsonl").len(),
        10,
        "the repeated groups were skipped, not consumed again"
    );
}
