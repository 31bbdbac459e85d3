//! 2 MiB frames through the payload store, end to end (BLOB-1/3/5/6/7):
//!
//! ```text
//!   frames (SyntheticFrameProducer 1024×1024×2 = 2 MiB, 6 frames) ─ same (Identity) ─ sink
//! ```
//!
//! Every frame is over the 512 KiB inline limit and over NATS' 1 MiB `max_payload`, so both
//! `frames` and `same` offload it to Redis and publish a `BlobRef`; `same` and `sink` resolve
//! it. The sink records each tensor's SHA-256, checked against the frame the producer built
//! for that index. Each object is written with a reader counter (`VF_BLOB_READERS` = 1, one
//! unpartitioned child) and released after the reader's confirmed ack (BLOB-6), so once the
//! flow has finished Redis holds no `vf-blob-*` / `vf-blobrc-*` key.

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::time::{Duration, Instant};

use shared_flows::{FRAME_C, FRAME_H, FRAME_W, assert_frames_intact, frames_flow, redis_keys};
use support::FlowHarness;

const COUNT: u64 = 6;

/// BLOB-1/3: every 2 MiB frame arrives intact through two offloading hops; BLOB-5/6: every
/// blob and counter key is reclaimed after its last read.
#[test]
fn two_mib_frames_arrive_intact_and_blobs_are_reclaimed() {
    assert!(u64::from(FRAME_W * FRAME_H * FRAME_C) >= 2 * 1024 * 1024);
    let mut h = FlowHarness::new(&frames_flow(COUNT, "{{REDIS}}"));
    let t0 = Instant::now();
    h.start();
    h.wait_all_ok(Duration::from_secs(60));
    eprintln!("payload store: {COUNT} frames in {:?}", t0.elapsed());
    assert_frames_intact(&h, COUNT);

    // BLOB-6: the last reader's confirmed ack released every object and its counter.
    let left = redis_keys(&h, "vf-blob*");
    assert!(
        left.is_empty(),
        "payload-store keys left after the flow: {left:?}; logs:\n{}",
        h.all_logs()
    );
}
