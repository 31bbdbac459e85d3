//! Whole flows of real worker processes over a real video file (made at test time), through
//! a real nats-server and the Redis payload store (every 640×360 BGR frame, 691 200 bytes,
//! is over the 512 KiB inline limit, so each hop offloads it):
//!
//! ```text
//!   video (VideoFileReader) ─ same (IdentityProcessor) ─ sink (JsonlSink)
//! ```
//!
//! The sink records each `(index, frame)` with the frame's SHA-256, checked against the
//! `ffmpeg` CLI's `bgr24` frames, and the event time, which carries the `position` stamp
//! through the identity (LOOP-9/10). A file cut short ends the flow the way damage must:
//! the frames before the cut arrive intact, then the reader's `VF_POISON` error naming the
//! file travels downstream as an ABORT and every node exits 4 (none hangs, none panics).

#![cfg(feature = "video")]

mod support;
mod video_support;

use std::path::Path;
use std::time::Duration;

use support::FlowHarness;
use video_support::{
    FRAMES, H, TempDir, W, cli_bgr_frames, frames_before, h264, packets, truncated_copy,
};
use videoflow_worker::nodes::convert::sha256_hex;

fn flow(video: &Path) -> FlowHarness {
    FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: video}}
spec:
  type: batch
  payloadStore: {{url: "{{{{REDIS}}}}"}}
  nodes:
  - name: video
    kind: producer
    component: {{builtin: videoflow.producers.video.VideoFileReader}}
    params: {{video_file: "{}"}}
  - name: same
    kind: processor
    parents: [video]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [same]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        video.display()
    ))
}

/// The sink's records as (index, sha256, event_ts), checked for shape on the way.
fn records(h: &FlowHarness) -> Vec<(i64, String, f64)> {
    h.jsonl("out.jsonl")
        .iter()
        .map(|r| {
            let value = r["value"]
                .as_array()
                .unwrap_or_else(|| panic!("not a tuple: {r}"));
            let [index, frame] = value.as_slice() else {
                panic!("not (index, frame): {r}");
            };
            let t = &frame["$tensor"];
            assert_eq!(t["shape"], serde_json::json!([H, W, 3]), "{r}");
            assert_eq!(t["dtype"], "uint8", "{r}");
            (
                index.as_i64().unwrap_or_else(|| panic!("index: {r}")),
                t["sha256"].as_str().unwrap_or_default().to_owned(),
                r["event_ts"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("event_ts: {r}")),
            )
        })
        .collect()
}

/// Every record is frame `index` of `want`, intact, stamped with its place on the timeline.
fn assert_intact(got: &[(i64, String, f64)], want: &[Vec<u8>]) {
    let mut got = got.to_vec();
    got.sort_by_key(|r| r.0);
    let indices: Vec<i64> = got.iter().map(|r| r.0).collect();
    assert_eq!(indices, (1..=want.len() as i64).collect::<Vec<_>>());
    for (index, sha, ts) in &got {
        let i = (*index - 1) as usize;
        assert_eq!(sha, &sha256_hex(&want[i]), "frame {index} intact");
        assert!((ts - i as f64 * 0.04).abs() < 1e-9, "frame {index} at {ts}");
    }
}

#[test]
fn every_frame_of_a_file_arrives_intact_through_the_payload_store() {
    let media = TempDir::new("flow");
    let file = h264(&media, "in.mp4", &[]);
    let want = cli_bgr_frames(&file);
    assert_eq!(want.len(), FRAMES);
    let mut h = flow(&file);
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    assert_intact(&records(&h), &want);
}

#[test]
fn a_file_cut_short_delivers_the_frames_before_the_cut_then_aborts_the_flow() {
    let media = TempDir::new("flow-cut");
    let good = h264(&media, "in.mp4", &["-movflags", "+faststart"]);
    let want = cli_bgr_frames(&good);
    let pkts = packets(&good);
    let cut = pkts[30].pos + pkts[30].size / 2;
    let file = media.join("cut.mp4");
    truncated_copy(&good, &file, cut);
    let expected = frames_before(&pkts, cut);
    let mut h = flow(&file);
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    let logs = h.all_logs();
    for e in &exits {
        assert_eq!(e.code, Some(4), "{e:?}; logs:\n{logs}");
    }
    assert_intact(&records(&h), &want[..expected]);
    let message = assert_the_reader_aborted(&h, &file);
    assert!(
        message.contains(&format!(
            "is damaged after frame {expected}, at byte offset"
        )),
        "{message}"
    );
}

/// The reader ended `VF_POISON` naming `file`, and the sink `VF_UPSTREAM_ABORTED` (its
/// ABORT reached the flow); returns the reader's message.
fn assert_the_reader_aborted(h: &FlowHarness, file: &Path) -> String {
    let origin = h
        .termination("video", 0)
        .expect("reader termination record");
    assert_eq!(origin["code"], "VF_POISON", "{origin}");
    let message = origin["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains(&file.display().to_string()), "{message}");
    let sink = h.termination("sink", 0).expect("sink termination record");
    assert_eq!(sink["code"], "VF_UPSTREAM_ABORTED", "{sink}");
    message
}

/// MSGID-6, LOOP-2, ABORT-1a: a replayable reader resuming after offset 40 of a file that is
/// now damaged before it (the file changed between the runs) breaks while it seeks: it ends
/// `VF_POISON` naming the file and announces it downstream (ABORT), so the sink ends
/// `VF_UPSTREAM_ABORTED` instead of waiting, and nothing is published.
#[test]
fn a_replayable_reader_that_breaks_while_it_seeks_aborts_the_flow() {
    let media = TempDir::new("flow-seek-cut");
    let good = h264(&media, "in.mp4", &["-movflags", "+faststart"]);
    let pkts = packets(&good);
    let cut = pkts[30].pos + pkts[30].size / 2;
    let file = media.join("cut.mp4");
    truncated_copy(&good, &file, cut);
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: video-seek}}
spec:
  type: batch
  runId: r1
  runtimeStore: {{url: "file://{{{{DIR}}}}/ledger"}}
  payloadStore: {{url: "{{{{REDIS}}}}"}}
  nodes:
  - name: video
    kind: producer
    replayable: true
    component: {{builtin: videoflow.producers.video.VideoFileReader}}
    params: {{video_file: "{}"}}
  - name: sink
    kind: consumer
    parents: [video]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        file.display()
    ));
    let store =
        videoflow_worker::store::RuntimeStore::open(&format!("file://{}/ledger", h.dir.display()))
            .expect("ledger store");
    h.block_on(async {
        let ledger = videoflow_worker::store::ledger::RunLedger::open(
            store,
            "video-seek",
            "r1",
            "video",
            0,
            1,
        )
        .await
        .expect("ledger");
        ledger.checkpoint_offset(40).await.expect("checkpoint");
    });
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    let logs = h.all_logs();
    for e in &exits {
        assert_eq!(e.code, Some(4), "{e:?}; logs:\n{logs}");
    }
    assert!(h.jsonl("out.jsonl").is_empty(), "nothing published");
    assert_the_reader_aborted(&h, &file);
}

/// A reader declared on a GPU (`gpu: {count: 1}`), started with a recorded grant of one
/// device as a launcher writes it: the worker's grant check delivers the device, the reader
/// tries NVDEC (`h264_cuvid`), and where it cannot open — no NVIDIA driver here — decodes on
/// the CPU with a WARN naming the decoder and FFmpeg's reason. Every frame still arrives
/// intact (ffmpeg's `bgr24`). On a machine with NVDEC the start line names `h264_cuvid`.
#[test]
fn a_gpu_granted_reader_without_nvdec_decodes_on_the_cpu_and_says_why() {
    let media = TempDir::new("flow-gpu");
    let file = h264(&media, "in.mp4", &[]);
    let want = cli_bgr_frames(&file);
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: video-gpu}}
spec:
  type: batch
  payloadStore: {{url: "{{{{REDIS}}}}"}}
  nodes:
  - name: video
    kind: producer
    gpu: {{count: 1, fallback: cpu}}
    component: {{builtin: videoflow.producers.video.VideoFileReader}}
    params: {{video_file: "{}"}}
  - name: sink
    kind: consumer
    parents: [video]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        file.display()
    ));
    assert_eq!(h.vars("video", 0)["VF_DEVICE_TYPE"], "gpu");
    h.provision();
    h.spawn("sink", 0, &[]);
    let grant = r#"{"workload_id": "w-1", "devices": [{"ordinal": 0, "uuid": "GPU-aaaa1111", "product": "NVIDIA H200"}], "requested": 1, "host": "observed"}"#;
    h.spawn("video", 0, &[("VF_GPU_GRANT_JSON", grant)]);
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    assert_intact(&records(&h), &want);
    let log = h.log("video", 0);
    assert!(
        log.contains("node video GPU grant: ") && log.contains("\"delivered\":[\"GPU-aaaa1111\"]"),
        "{log}"
    );
    if log.contains("decoded by h264_cuvid on the GPU (NVDEC)") {
        return;
    }
    assert!(
        log.contains("opened ") && log.contains("(h264 decoded by h264 on the CPU)"),
        "{log}"
    );
    let warn = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("is decoded on the CPU, not on the GPU"))
        .unwrap_or_else(|| panic!("no fallback warning: {log}"));
    assert!(
        warn.contains("(nvdec_open_failed): h264_cuvid did not open ("),
        "{warn}"
    );
}
