//! Linear BATCH flow end to end: N in, exactly N out, in order per producer.

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::time::Duration;

use shared_flows::{assert_linear_in_order, linear_flow};
use support::FlowHarness;

/// Carry-forward (WIRE-4, MSGID-2): the sink sees every value once, in order, with the
/// producer's trace id and seq.
#[test]
fn linear_batch_delivers_every_message_once_in_order() {
    const N: i64 = 500;
    let mut h = FlowHarness::new(&linear_flow(N));
    h.start();
    h.wait_all_ok(Duration::from_secs(120));
    assert_linear_in_order(&h, N);
}
