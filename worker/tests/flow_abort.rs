//! A producer's poison death end to end (ABORT-1a, ABORT-3..5, LOOP-2): a `FailingProducer`
//! with `onError: poison` emits a few values then fails; it publishes an ABORT and exits 4
//! with `VF_POISON`; the processor drains what was sent, relays the origin's error record
//! verbatim and exits 4 with `VF_UPSTREAM_ABORTED`; the consumer does the same one hop
//! further. No node publishes an EOS, so the flow ends non-zero instead of hanging.

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::time::{Duration, Instant};

use shared_flows::{aborting_flow, assert_poison_abort_relayed};
use support::FlowHarness;

/// ABORT-1a/ABORT-5: the producer's poison death is relayed hop by hop, every node naming its
/// parent and carrying the origin's record (the checks: [`assert_poison_abort_relayed`]).
#[test]
fn abort_1a_abort_5_poison_producer_death_is_relayed_and_names_the_origin() {
    let started = Instant::now();
    let mut h = FlowHarness::new(&aborting_flow());
    h.start();
    let exits = h.wait_all(Duration::from_secs(50));
    assert_poison_abort_relayed(&h, &exits);
    assert!(started.elapsed() < Duration::from_secs(60));
}
