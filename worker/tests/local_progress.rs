//! The local runner's progress line: per node, published or settled counts read
//! from the broker, with a rate from the second line on; unreadable counts show `?`, never 0.

mod flows_common;
mod support;

use std::time::Duration;

use flows_common::{batch_flow, numbers, void_sink};
use support::FlowHarness;
use videoflow_worker::broker;
use videoflow_worker::local::progress::Progress;

#[test]
fn progress_line_counts_each_node_from_the_broker() {
    let mut h = FlowHarness::new(&batch_flow(
        "progress",
        "",
        &[numbers(50), void_sink("numbers")].concat(),
    ));
    let url = h.nats.url();
    let flow = h.flow.clone();
    let mut progress = Progress::default();
    // Before provisioning nothing can be read: `?`, not 0.
    let before = h.block_on(async {
        let b = broker::connect(&url).await.expect("connect");
        progress.line(&b, &flow).await
    });
    assert_eq!(before, "numbers ? published | sink ? done");
    h.start();
    h.wait_all_ok(Duration::from_secs(60));
    let (first, second) = h.block_on(async {
        let b = broker::connect(&url).await.expect("connect");
        let first = progress.line(&b, &flow).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        (first, progress.line(&b, &flow).await)
    });
    // 50 DATA messages plus the EOS were stored; the sink acked all 50.
    assert_eq!(first, "numbers 51 published | sink 50 done");
    assert!(
        second.starts_with("numbers 51 published (0.0/s) | sink 50 done (0.0/s)"),
        "{second}"
    );
}
