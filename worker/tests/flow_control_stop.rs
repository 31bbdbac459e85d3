//! Control stop on a live REALTIME flow (CTRL-1/2/3): the producer ends like end of input
//! and publishes EOS; downstream nodes take the hard stop and exit 0 **without** relaying
//! an EOS of their own.

mod streams;
mod support;

use std::time::{Duration, Instant};

use support::FlowHarness;
use videoflow_core::envelope::{MsgType, decode};
use videoflow_core::naming;
use videoflow_worker::broker;

#[test]
fn ctrl_1_2_3_control_stop_ends_a_live_flow_without_relayed_eos() {
    let mut h = FlowHarness::new(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: live}
spec:
  type: realtime
  nodes:
  - name: ticks
    kind: producer
    finite: false
    component: {builtin: videoflow.rs.producers.TickProducer}
    params: {period_ms: 20}
  - name: relay
    kind: processor
    parents: [ticks]
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [relay]
    component: {builtin: videoflow.rs.consumers.JsonlSink}
    params: {path: "{{DIR}}/out.jsonl"}
"#,
    );
    h.start();
    // Let data flow end to end first.
    let deadline = Instant::now() + Duration::from_secs(30);
    while h.jsonl("out.jsonl").len() < 20 {
        assert!(
            Instant::now() < deadline,
            "no data reached the sink; logs:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (flow, run) = (h.flow.flow_id.clone(), h.flow.run_id.clone());
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url).await.expect("connect");
        broker::send_control_stop(&b, &flow, &run)
            .await
            .expect("stop");
    });
    let exits = h.wait_all(Duration::from_secs(30));
    h.assert_all_ok(&exits);

    // CTRL-2: the producer published its EOS; CTRL-3: the relay did not.
    let terminators = |node: &str| {
        let stream = naming::stream_name(&flow, &run, node);
        let stored = h.block_on(streams::read_stream(&url, &stream));
        stored
            .iter()
            .filter_map(|m| decode(&m.payload).ok())
            .filter(|e| e.msg_type != MsgType::Data)
            .count()
    };
    assert_eq!(
        terminators("ticks"),
        1,
        "the producer ends its input with one EOS"
    );
    assert_eq!(terminators("relay"), 0, "a hard stop must not relay EOS");
}
