//! 2 MiB frames through the payload store, end to end (BLOB-1/3/5/6/7):
//!
//! ```text
//!   frames (SyntheticFrameProducer 1024×1024×2 = 2 MiB, 6 frames) ─ same (Identity) ─ sink
//! ```
//!
//! Every frame is over the 512 KiB inline limit and over NATS' 1 MiB `max_payload`, so
//! `frames` offloads it to Redis and publishes a `BlobRef`. `same` forwards its input
//! untouched, so it publishes that same reference on without fetching it (adding its
//! children to the reader counter); the sink resolves it. The sink records each tensor's
//! SHA-256, checked against the frame the producer built for that index. Each object is
//! written with a reader counter (`VF_BLOB_READERS` = 1, one unpartitioned child) and
//! released after each reader's confirmed ack (BLOB-6), so once the flow has finished Redis
//! holds no `vf-blob-*` / `vf-blobrc-*` key.

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::time::{Duration, Instant};

use flows_common::{batch_flow, jsonl_sink, processor};

use shared_flows::{
    FRAME_C, FRAME_H, FRAME_W, assert_frames_intact, assert_frames_intact_in, frames_flow,
    frames_flow_to, frames_producer, redis_calls, redis_keys,
};
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

    // The identity hop forwarded each reference: the sink's reads are the only ones.
    assert_eq!(
        redis_calls(&h, "get"),
        COUNT,
        "GETs: one per frame, the sink's"
    );
    assert_eq!(redis_calls(&h, "incrby"), COUNT, "one adoption per frame");
    assert_all_reclaimed(&h);
}

/// BLOB-5/6 through a forwarding hop with two children: the identity adds both to the
/// counter of the blob it forwards, each sink reads every frame intact, and the last of the
/// three releases (identity, sink, sink2) reclaims it.
#[test]
fn a_forwarded_reference_is_counted_for_every_child() {
    let mut h = FlowHarness::new(&frames_flow_to(
        COUNT,
        "{{REDIS}}",
        &["out.jsonl", "out2.jsonl"],
    ));
    h.start();
    h.wait_all_ok(Duration::from_secs(60));
    assert_frames_intact_in(&h, "out.jsonl", COUNT);
    assert_frames_intact_in(&h, "out2.jsonl", COUNT);
    assert_eq!(
        redis_calls(&h, "get"),
        2 * COUNT,
        "GETs: the two sinks' only"
    );
    assert_all_reclaimed(&h);
}

/// BLOB-3: a node with one parent fetches an offloaded payload when it takes that group, not
/// when the delivery arrives: with the whole run queued under its credit, a slow node has
/// fetched at most one frame beyond those it finished, so its memory holds one frame, not its
/// credit's worth.
///
/// Sampled while the flow runs: every Redis `GET` so far is the slow node's (at most the
/// frames it published, plus the one it works on) or the sink's (at most what `slow`
/// published, each read once). The sink writes a record per frame shortly after `slow`
/// publishes it, so `GET`s ≤ 2 × (records + in flight) — where fetching on arrival would
/// show all `SLOW_FRAMES` fetched while the first is still being worked on.
#[test]
fn a_node_fetches_an_offloaded_payload_when_it_takes_the_group() {
    const SLOW_FRAMES: u64 = 12;
    let nodes = format!(
        "{}{slow}{sink}",
        frames_producer(SLOW_FRAMES),
        slow = processor(
            "slow",
            "frames",
            "    component: {builtin: videoflow.rs.processors.ServiceTimeProcessor}\n    params: {ms: 150}\n",
        ),
        sink = jsonl_sink("sink", "slow", "out.jsonl", ""),
    );
    let flow = batch_flow("late", "  payloadStore: {url: \"{{REDIS}}\"}\n", &nodes);
    let mut h = FlowHarness::new(&flow);
    h.start();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut samples = 0;
    while h.running() > 0 {
        assert!(
            Instant::now() < deadline,
            "flow did not finish; logs:\n{}",
            h.all_logs()
        );
        let gets = redis_calls(&h, "get");
        let records = h.jsonl("out.jsonl").len() as u64;
        // In flight at the sample: the frame `slow` works on, the one it published and the
        // sink has not written yet, and the sink's current read.
        assert!(
            gets <= 2 * records + 4,
            "{gets} GETs with {records} records written: frames fetched before their turn"
        );
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(samples > 5, "the flow ended before it could be sampled");
    h.wait_all_ok(Duration::from_secs(10));
    assert_eq!(h.jsonl("out.jsonl").len() as u64, SLOW_FRAMES);
    assert_eq!(
        redis_calls(&h, "get"),
        2 * SLOW_FRAMES,
        "each frame read once per reader"
    );
    assert_all_reclaimed(&h);
}

/// BLOB-6: the last reader's confirmed ack released every object and its counter.
fn assert_all_reclaimed(h: &FlowHarness) {
    let left = redis_keys(h, "vf-blob*");
    assert!(
        left.is_empty(),
        "payload-store keys left after the flow: {left:?}; logs:\n{}",
        h.all_logs()
    );
}
