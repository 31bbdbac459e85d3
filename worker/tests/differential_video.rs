//! Differential test of `VideoFileReader` against the Python reference, videoflow 1.0.4
//! (OpenCV's FFmpeg backend, `opencv-python-headless` in the reference virtualenv): the same
//! file read by both, every output compared **on the wire** — 1.0.4's `_encode_payload_v4`
//! of its `(index, frame)` tuple against our encoding of ours, byte for byte (so the frames'
//! pixels, shapes, dtype and indices all agree) — and every `position` event time bit for bit.
//!
//! Media are made at test time (`video_support`): H.264 and H.265 with B-frames in MP4, H.264
//! in Matroska. The reference runs `tests/conformance/video_reference.py`. A missing
//! reference or OpenCV fails the test with the remedy (`./scripts/install-deps`).

#![cfg(feature = "video")]

mod support;
mod video_support;

use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value as Json, json};
use video_support::build_node;
use video_support::{FRAMES, TempDir, h264, h265};
use videoflow_core::envelope::encode_payload;
use videoflow_core::model::NodeKind;
use videoflow_worker::nodes::{BuiltNode, NodeContext};

const REMEDY: &str = "Run `./scripts/install-deps`: it installs the reference virtualenv with \
    OpenCV (scripts/reference-requirements.txt), which 1.0.4's VideoFileReader reads with.";

/// One output as it goes on the wire, and its event time's bits.
#[derive(Debug, PartialEq)]
struct Wire {
    payload_type: String,
    payload: Vec<u8>,
    event_ts_bits: Option<u64>,
}

fn reference(file: &Path, params: &Json, out: &TempDir) -> (Vec<Wire>, String) {
    let script = support::conformance_dir().join("video_reference.py");
    let run = Command::new(support::reference_python())
        .arg(&script)
        .arg(file)
        .arg(params.to_string())
        .arg(out.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the reference: {e}. {REMEDY}"));
    assert!(
        run.status.success(),
        "the reference failed on {}: {}. {REMEDY}",
        file.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Json = serde_json::from_slice(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "reference report: {e}: {}",
            String::from_utf8_lossy(&run.stdout)
        )
    });
    let outputs = report["outputs"].as_array().cloned().unwrap_or_default();
    let wires = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| Wire {
            payload_type: o["payload_type"].as_str().unwrap_or_default().to_owned(),
            payload: std::fs::read(out.join(&format!("{i}.bin")))
                .unwrap_or_else(|e| panic!("reference output {i}: {e}")),
            event_ts_bits: o["event_ts"]
                .as_str()
                .map(|h| u64::from_str_radix(h, 16).unwrap_or_else(|e| panic!("{h}: {e}"))),
        })
        .collect();
    (wires, report["end"].as_str().unwrap_or_default().to_owned())
}

fn ours(file: &Path, params: &Json) -> Vec<Wire> {
    let mut p: Map<String, Json> = params.as_object().cloned().unwrap_or_default();
    p.insert("video_file".into(), json!(file.display().to_string()));
    let node = build_node(
        "videoflow.producers.video.VideoFileReader",
        NodeKind::Producer,
        &p,
    );
    let Ok(BuiltNode::Producer(mut node)) = node else {
        panic!("not built: {node:?}");
    };
    let mut ctx = NodeContext::new("f", "r", "video", 0);
    node.open(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let mut out = Vec::new();
    while let Some(item) = node
        .next(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()))
    {
        let (payload_type, payload) = encode_payload(&item).unwrap_or_else(|e| panic!("{e}"));
        out.push(Wire {
            payload_type,
            payload,
            event_ts_bits: ctx.take_output_event_timestamp().map(f64::to_bits),
        });
        assert!(out.len() <= 10 * FRAMES, "does not end");
    }
    node.close(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    out
}

/// Both readers over `file` with `params`: the same outputs on the wire, in order; event
/// times compared when `timestamps` (the `position` source), else only present on both.
fn compare(file: &Path, params: Json, timestamps: bool) {
    let out = TempDir::new("ref");
    let (theirs, end) = reference(file, &params, &out);
    let mine = ours(file, &params);
    assert_eq!(end, "StopIteration", "the reference ended with {end}");
    assert!(
        !theirs.is_empty(),
        "the reference read no frame of {}",
        file.display()
    );
    assert_eq!(mine.len(), theirs.len(), "{params}: frame count");
    for (i, (m, t)) in mine.iter().zip(&theirs).enumerate() {
        assert_eq!(m.payload_type, t.payload_type, "{params}: output {i}");
        assert!(
            m.payload == t.payload,
            "{params}: output {i} differs on the wire ({} vs {} bytes)",
            m.payload.len(),
            t.payload.len()
        );
        if timestamps {
            assert_eq!(
                m.event_ts_bits, t.event_ts_bits,
                "{params}: event time of output {i}"
            );
        } else {
            assert!(m.event_ts_bits.is_some() && t.event_ts_bits.is_some());
        }
    }
}

#[test]
fn h264_with_b_frames_in_mp4_is_wire_identical_to_the_reference() {
    let dir = TempDir::new("diff-h264");
    let file = h264(&dir, "in.mp4", &[]);
    compare(&file, json!({}), true);
    compare(&file, json!({"swap_channels": true}), true);
    compare(&file, json!({"nb_frames": 9}), true);
    compare(&file, json!({"timestamp_source": "clock"}), false);
}

#[test]
fn h265_with_b_frames_is_wire_identical_to_the_reference() {
    let dir = TempDir::new("diff-h265");
    let file = h265(&dir, "in.mp4");
    compare(&file, json!({}), true);
}

#[test]
fn h264_in_matroska_is_wire_identical_to_the_reference() {
    let dir = TempDir::new("diff-mkv");
    let file = h264(&dir, "in.mkv", &[]);
    compare(&file, json!({"swap_channels": true}), true);
}
