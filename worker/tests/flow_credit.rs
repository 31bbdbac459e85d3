//! Credit end to end (STREAM-15, STREAM-15a): a single-parent node's in-flight window follows
//! the effective `max_ack_pending` of the durable it *bound*, whoever provisioned it, and the
//! Flow's `credit.messages` is what our provisioner creates.
//!
//! ```text
//!   src (SyntheticFrameProducer, N frames) ─ slow (ServiceTimeProcessor, sleeps) ─ sink
//! ```
//!
//! The slow stage holds one input in processing for a long time, so everything else its
//! replica may hold sits fetched in its local queue: the durable's `num_ack_pending` then
//! shows the replica's window exactly. A worker that sized its queue from its own request
//! (or from STREAM-15's fixed 5) instead of the bound durable would stop short of it.

mod support;

use std::time::Duration;

use support::FlowHarness;
use videoflow_worker::broker::{self, DurableRequest};
use videoflow_worker::config::WorkerConfig;

/// More inputs than the largest credit tested, so a backlog waits on the stream throughout.
const N: i64 = 48;
/// Long beside a fetch's round trip, so the queue refills to the durable's credit after
/// every input; short enough that the whole flow ends in about N × this.
const SERVICE_MS: i64 = 250;

fn flow(credit: Option<i64>) -> String {
    let credit = credit
        .map(|m| format!("    credit: {{messages: {m}}}\n"))
        .unwrap_or_default();
    format!(
        r#"apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: credit}}
spec:
  type: batch
  nodes:
  - name: src
    kind: producer
    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}
    params: {{width: 4, height: 4, channels: 1, count: {N}}}
  - name: slow
    kind: processor
    parents: [src]
{credit}    component: {{builtin: videoflow.rs.processors.ServiceTimeProcessor}}
    params: {{ms: {SERVICE_MS}, mode: sleep}}
  - name: sink
    kind: consumer
    parents: [slow]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#
    )
}

/// Creates `slow`'s durable on `src` with `max_ack_pending` (as another provisioner would),
/// before provisioning, which then binds it as it is.
fn precreate(h: &FlowHarness, max_ack_pending: i64) -> DurableRequest {
    let cfg =
        WorkerConfig::from_env(&h.vars("slow", 0)).unwrap_or_else(|e| panic!("{}", e.render()));
    let mut request = DurableRequest::data_for(&cfg, "src", false);
    request.max_ack_pending = Some(max_ack_pending);
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        broker::ensure_node_stream(&b, &cfg.flow_id, &cfg.run_id, "src", false, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let bound = broker::bind_data_durable(&b, &request)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bound.max_ack_pending(), max_ack_pending);
    });
    request
}

/// `(max_ack_pending, num_ack_pending)` of the durable `request` names.
fn ack_state(h: &FlowHarness, request: &DurableRequest) -> (i64, usize) {
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let info = b
            .jetstream()
            .get_stream(&request.stream)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .consumer_info(&request.name)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (info.config.max_ack_pending, info.num_ack_pending)
    })
}

/// Waits until `slow`'s replica holds `want` deliveries un-acked, then checks it never holds
/// more while the first input is still in processing (nothing reached the sink yet).
fn assert_window(h: &FlowHarness, request: &DurableRequest, want: usize) {
    let held = h.wait_until(
        &format!("slow holding {want} deliveries"),
        Duration::from_secs(60),
        || match ack_state(h, request) {
            (_, n) if n >= want => Ok(n),
            (_, n) => Err(format!("{n} un-acked")),
        },
    );
    assert_eq!(
        held, want,
        "the replica holds its durable's credit, no more"
    );
}

/// STREAM-15a: the durable grants 20 (more than the Flow's 5, STREAM-15's number): the
/// replica's window is 20, not what it would have asked for.
#[test]
fn stream_15a_window_follows_a_larger_bound_durable() {
    let mut h = FlowHarness::new(&flow(Some(5)));
    let request = precreate(&h, 20);
    h.start();
    assert_window(&h, &request, 20);
    h.wait_all_ok(Duration::from_secs(180));
    assert_eq!(h.jsonl("out.jsonl").len(), N as usize, "every input once");
}

/// STREAM-15a: a durable granting less than the worker asks for (3 against the default)
/// still runs the flow to its end, every input once, holding at most 3.
#[test]
fn stream_15a_window_follows_a_smaller_bound_durable() {
    let mut h = FlowHarness::new(&flow(None));
    let request = precreate(&h, 3);
    h.start();
    assert_window(&h, &request, 3);
    h.wait_all_ok(Duration::from_secs(240));
    assert_eq!(h.jsonl("out.jsonl").len(), N as usize, "every input once");
}

/// STREAM-15a: without a durable made beforehand, provisioning creates the credit the Flow
/// asks for (`credit.messages`) and the replica uses all of it.
#[test]
fn stream_15a_provisioned_credit_is_the_flows() {
    let mut h = FlowHarness::new(&flow(Some(32)));
    let cfg =
        WorkerConfig::from_env(&h.vars("slow", 0)).unwrap_or_else(|e| panic!("{}", e.render()));
    let request = DurableRequest::data_for(&cfg, "src", false);
    h.start();
    assert_eq!(ack_state(&h, &request).0, 32, "provisioned max_ack_pending");
    assert_window(&h, &request, 32);
    h.wait_all_ok(Duration::from_secs(180));
    assert_eq!(h.jsonl("out.jsonl").len(), N as usize, "every input once");
}
