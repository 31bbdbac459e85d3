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
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::FlowHarness;
use videoflow_worker::nodes::convert::sha256_hex;
use videoflow_worker::nodes::producers::synthetic_frame;

const W: u32 = 1024;
const H: u32 = 1024;
const C: u32 = 2;
const COUNT: u64 = 6;

/// Every key matching `pattern` in the harness's Redis.
fn redis_keys(h: &FlowHarness, pattern: &str) -> Vec<String> {
    let url = h.redis.as_ref().expect("redis started").url();
    h.block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("{e}"));
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        redis::cmd("KEYS")
            .arg(pattern)
            .query_async::<Vec<String>>(&mut con)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// BLOB-1/3: every 2 MiB frame arrives intact through two offloading hops; BLOB-5/6: every
/// blob and counter key is reclaimed after its last read.
#[test]
fn two_mib_frames_arrive_intact_and_blobs_are_reclaimed() {
    assert!(u64::from(W * H * C) >= 2 * 1024 * 1024);
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: blobs}}
spec:
  type: batch
  payloadStore: {{url: "{{{{REDIS}}}}"}}
  nodes:
  - name: frames
    kind: producer
    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}
    params: {{width: {W}, height: {H}, channels: {C}, count: {COUNT}}}
  - name: same
    kind: processor
    parents: [frames]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [same]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#
    ));
    let t0 = Instant::now();
    h.start();
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    eprintln!("payload store: {COUNT} frames in {:?}", t0.elapsed());

    let out = h.jsonl("out.jsonl");
    assert_eq!(
        out.len() as u64,
        COUNT,
        "one record per frame; logs:\n{}",
        h.all_logs()
    );
    let mut indices = BTreeSet::new();
    for r in &out {
        let t = &r["value"]["$tensor"];
        assert_eq!(t["shape"], serde_json::json!([H, W, C]), "{r}");
        assert_eq!(t["dtype"], "uint8", "{r}");
        assert_eq!(t["nbytes"].as_u64(), Some(u64::from(W * H * C)), "{r}");
        // Bytes 0..8 of a synthetic frame are its index, little-endian.
        let head = hex::decode(t["head_hex"].as_str().unwrap_or_default()).expect("hex");
        let index = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let want = sha256_hex(&synthetic_frame(index, W, H, C).data);
        assert_eq!(
            t["sha256"].as_str(),
            Some(want.as_str()),
            "frame {index} intact"
        );
        assert!(indices.insert(index), "frame {index} twice");
    }
    assert_eq!(indices, (0..COUNT).collect::<BTreeSet<_>>());

    // BLOB-6: the last reader's confirmed ack released every object and its counter.
    let left = redis_keys(&h, "vf-blob*");
    assert!(
        left.is_empty(),
        "payload-store keys left after the flow: {left:?}; logs:\n{}",
        h.all_logs()
    );
}
