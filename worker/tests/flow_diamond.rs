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
mod shared_flows;
mod streams;
mod support;

use std::time::{Duration, Instant};

use shared_flows::{assert_diamond_joined, diamond_flow};
use support::FlowHarness;

const N: i64 = 200;

/// JOIN-5/JOIN-6/ENV-3: every trace group is assembled exactly once (N outputs, each trace id
/// once, every input value once) and its inputs arrive in `VF_PARENT_NAMES` order.
#[test]
fn diamond_join_assembles_every_group_once_in_parent_order() {
    let mut h = FlowHarness::new(&diamond_flow("diamond", N, 1));
    let t0 = Instant::now();
    h.start();
    h.wait_all_ok(Duration::from_secs(90));
    eprintln!("diamond: {N} groups in {:?}", t0.elapsed());
    assert_diamond_joined(&h, N);
    // Both competing replicas of `same` ran to a clean end (exit 0 above) and the join sees
    // one group per trace whichever replica carried the `same` half.
}
