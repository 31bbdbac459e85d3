//! A producer's poison death end to end (ABORT-1a, ABORT-3..5, LOOP-2): a `FailingProducer`
//! with `onError: poison` emits a few values then fails; it publishes an ABORT and exits 4
//! with `VF_POISON`; the processor drains what was sent, relays the origin's error record
//! verbatim and exits 4 with `VF_UPSTREAM_ABORTED`; the consumer does the same one hop
//! further. No node publishes an EOS, so the flow ends non-zero instead of hanging.

mod streams;
mod support;

use std::time::{Duration, Instant};

use videoflow_core::envelope::{self, MsgType, WireError};
use videoflow_core::naming;

use support::FlowHarness;

const EMITTED: i64 = 5;
const MESSAGE: &str = "sensor unplugged";

/// The ABORT-5 text for a node whose parent `parent` aborted with the origin's record.
fn upstream_aborted_message(parent: &str) -> String {
    format!(
        "{parent} terminated abnormally (VF_POISON: ValueError: {MESSAGE}), so this node stops \
         rather than waiting for an end-of-stream that is not coming."
    )
}

/// The terminators stored on `node`'s NAME-4 subject, decoded.
fn terminators(h: &FlowHarness, flow: &str, run: &str, node: &str) -> Vec<envelope::Envelope> {
    let url = h.nats.url();
    let subject = naming::eos_subject(flow, run, node);
    h.block_on(streams::read_stream(
        &url,
        &naming::stream_name(flow, run, node),
    ))
    .into_iter()
    .filter(|m| m.subject == subject)
    .map(|m| envelope::decode(&m.payload).expect("terminator decodes"))
    .collect()
}

/// The one ABORT among `node`'s terminators, and no EOS (ABORT-1a: no EOS when dying).
fn only_abort(h: &FlowHarness, flow: &str, run: &str, node: &str) -> WireError {
    let ts = terminators(h, flow, run, node);
    assert_eq!(ts.len(), 1, "{node}: exactly one terminator: {ts:#?}");
    let t = &ts[0];
    assert_eq!(t.msg_type, MsgType::Abort, "{node}: an ABORT, never an EOS");
    assert_eq!(t.trace_id, "abort-r0", "ABORT-1 trace");
    t.error.clone().expect("ABORT carries an error record")
}

#[test]
fn abort_1a_abort_5_poison_producer_death_is_relayed_and_names_the_origin() {
    let started = Instant::now();
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: aborting}}
spec:
  type: batch
  nodes:
  - name: source
    kind: producer
    onError: poison
    component: {{builtin: videoflow.rs.producers.FailingProducer}}
    params: {{emit: {EMITTED}, message: "{MESSAGE}"}}
  - name: relay
    kind: processor
    parents: [source]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [relay]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#
    ));
    let (flow, run) = streams::ids(&h.vars("source", 0));
    h.start();
    let exits = h.wait_all(Duration::from_secs(50));
    let logs = h.all_logs();

    // The flow ends non-zero: every node exits 4 (runtime failure), none hangs.
    for e in &exits {
        assert_eq!(e.code, Some(4), "{e:?}; logs:\n{logs}");
    }

    // ABORT-4/ABORT-7: what the producer sent before dying was processed before stopping.
    let values: Vec<i64> = h
        .jsonl("out.jsonl")
        .iter()
        .map(|r| r["value"].as_i64().expect("int value"))
        .collect();
    assert_eq!(values, (0..EMITTED).collect::<Vec<_>>(), "logs:\n{logs}");

    // The origin: VF_POISON (the unclassified ValueError wrapped by onError: poison, ERR-2).
    let origin = h
        .termination("source", 0)
        .expect("source termination record");
    assert_eq!(origin["code"], "VF_POISON", "{origin}");
    assert_eq!(origin["message"], format!("ValueError: {MESSAGE}"));
    assert_eq!(origin["disposition"], "poison");
    assert_eq!(origin["context"]["node"], "source");
    // ABORT-1a/ABORT-1: its own ABORT, the record from the error object (`node` in context).
    let record = only_abort(&h, &flow, &run, "source");
    assert_eq!(record.code, "VF_POISON");
    assert_eq!(record.message, format!("ValueError: {MESSAGE}"));
    assert_eq!(
        record.context.get("node").map(String::as_str),
        Some("source")
    );

    // ABORT-5, one hop: the processor relays the origin's record verbatim and exits with
    // UpstreamAborted naming its parent, which here is the origin.
    let relay = h.termination("relay", 0).expect("relay termination record");
    assert_eq!(relay["code"], "VF_UPSTREAM_ABORTED", "{relay}");
    assert_eq!(relay["message"], upstream_aborted_message("source"));
    assert_eq!(
        relay["remedy"],
        "Fix the failure reported by source; this node is a casualty, not the cause."
    );
    assert_eq!(relay["disposition"], "worker_fatal");
    assert_eq!(relay["context"]["origin"], "source");
    let relayed = only_abort(&h, &flow, &run, "relay");
    assert_eq!(
        relayed, record,
        "ABORT-5: the origin record, verbatim (origin node kept)"
    );

    // Two hops: the consumer's parent is the processor, so its message names `relay` (the
    // spec's `<parent>`), while the record inside — code and message — is the producer's,
    // and the relayed record it read still names `source` as the node that failed.
    let sink = h.termination("sink", 0).expect("sink termination record");
    assert_eq!(sink["code"], "VF_UPSTREAM_ABORTED", "{sink}");
    assert_eq!(sink["message"], upstream_aborted_message("relay"));
    assert_eq!(sink["context"]["origin"], "relay");
    assert!(
        terminators(&h, &flow, &run, "sink").is_empty(),
        "LOOP-6: a node without children publishes no ABORT"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}
