//! The video writers on real frames: 1.0.4's `VideofileWriter` (`.avi`, Motion JPEG) and our
//! H.264 `VideoFileWriter` (MP4, Matroska), fed the frames `VideoFileReader` reads from a file
//! made at test time; the output decoded back (`ffprobe -count_frames` and our reader): every
//! frame there, the right size and codec, and close to what went in.

#![cfg(feature = "video")]

mod video_support;

use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value as Json, json};
use video_support::build_node;
use video_support::{FRAMES, H, TempDir, W, ffprobe, h264};
use videoflow_core::envelope::Payload;
use videoflow_core::errors::ErrorCode;
use videoflow_core::model::NodeKind;
use videoflow_core::value::{Tensor, Value};
use videoflow_worker::nodes::{BuiltNode, Consumer, Input, NodeContext};

fn params(j: Json) -> Map<String, Json> {
    match j {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

fn frames(file: &Path, swap: bool) -> Vec<Payload> {
    let p = params(json!({"video_file": file.display().to_string(), "swap_channels": swap}));
    let Ok(BuiltNode::Producer(mut r)) = build_node(
        "videoflow.producers.video.VideoFileReader",
        NodeKind::Producer,
        &p,
    ) else {
        panic!("reader not built");
    };
    let mut ctx = NodeContext::default();
    r.open(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let mut out = Vec::new();
    while let Some(item) = r
        .next(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()))
    {
        out.push(item);
    }
    out
}

fn writer(class: &str, p: Json) -> Box<dyn Consumer> {
    match build_node(class, NodeKind::Consumer, &params(p)) {
        Ok(BuiltNode::Consumer { node, .. }) => node,
        other => panic!("{class}: {other:?}"),
    }
}

fn write_all(w: &mut dyn Consumer, items: Vec<Payload>) {
    let mut ctx = NodeContext::default();
    w.open(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    for item in items {
        w.consume(&mut ctx, &[Input::Present(item)])
            .unwrap_or_else(|e| panic!("{}", e.render()));
    }
    w.close(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
}

/// (codec name, width, height, frames decoded) of `file`'s video stream.
fn probe(file: &Path) -> (String, usize, usize, usize) {
    let out = Command::new(ffprobe())
        .args([
            "-v",
            "error",
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_entries",
        ])
        .arg("stream=codec_name,width,height,nb_read_frames")
        .args(["-of", "csv=p=0"])
        .arg(file)
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let f: Vec<&str> = text.split(',').collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse().ok()).unwrap_or(0);
    (f.first().unwrap_or(&"").to_string(), num(1), num(2), num(3))
}

/// Mean absolute difference per byte between two lists of frames.
fn mean_abs_diff(a: &[Payload], b: &[Payload]) -> f64 {
    let bytes = |p: &Payload| -> Vec<u8> {
        match p {
            Payload::Value(Value::List(items)) => match items.as_slice() {
                [_, Value::Tensor(t)] => t.data.to_vec(),
                _ => panic!("not a frame"),
            },
            _ => panic!("not a frame"),
        }
    };
    let (mut sum, mut n) = (0u64, 0u64);
    for (x, y) in a.iter().zip(b) {
        for (p, q) in bytes(x).iter().zip(bytes(y).iter()) {
            sum += u64::from(p.abs_diff(*q));
            n += 1;
        }
    }
    sum as f64 / n.max(1) as f64
}

#[test]
fn videofile_writer_writes_every_frame_as_motion_jpeg_avi() {
    let dir = TempDir::new("avi");
    let src = h264(&dir, "in.mp4", &[]);
    // 1.0.4's writer takes RGB frames by default (swap_channels=True), so read RGB.
    let rgb = frames(&src, true);
    let out = dir.join("out.avi");
    for class in [
        "videoflow.consumers.video.VideofileWriter",
        "videoflow.consumers.VideofileWriter",
    ] {
        let mut w = writer(
            class,
            json!({"video_file": out.display().to_string(), "fps": 25}),
        );
        write_all(w.as_mut(), rgb.clone());
        assert_eq!(probe(&out), ("mjpeg".to_owned(), W, H, FRAMES));
        let back = frames(&out, true);
        assert_eq!(back.len(), FRAMES);
        let d = mean_abs_diff(&rgb, &back);
        assert!(d < 4.0, "MJPEG frames too far from the input: {d}");
    }
}

#[test]
fn videofile_writer_refuses_what_the_reference_refuses() {
    let e = build_node(
        "videoflow.consumers.video.VideofileWriter",
        NodeKind::Consumer,
        &params(json!({"video_file": "out.mp4"})),
    )
    .expect_err("refused");
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(e.message, "Only .avi format is supported");
}

#[test]
fn h264_writer_writes_every_frame_in_mp4_and_matroska() {
    let dir = TempDir::new("h264w");
    let src = h264(&dir, "in.mp4", &[]);
    let bgr = frames(&src, false);
    for name in ["out.mp4", "out.mkv"] {
        let out = dir.join(name);
        let mut w = writer(
            "videoflow.rs.consumers.VideoFileWriter",
            json!({"video_file": out.display().to_string(), "fps": 25, "preset": "veryfast"}),
        );
        // The reader's (index, frame) tuples go in as they are.
        write_all(w.as_mut(), bgr.clone());
        assert_eq!(probe(&out), ("h264".to_owned(), W, H, FRAMES), "{name}");
        let back = frames(&out, false);
        assert_eq!(back.len(), FRAMES);
        let d = mean_abs_diff(&bgr, &back);
        assert!(d < 3.0, "{name}: H.264 frames too far from the input: {d}");
    }
}

#[test]
fn a_writer_refuses_what_is_not_a_frame_and_scales_another_size() {
    let dir = TempDir::new("odd");
    let out = dir.join("out.mp4");
    let mut w = writer(
        "videoflow.rs.consumers.VideoFileWriter",
        json!({"video_file": out.display().to_string(), "preset": "ultrafast"}),
    );
    let mut ctx = NodeContext::default();
    let gray = Payload::Tensor(Tensor::new(vec![4, 4], "uint8", vec![0u8; 16]));
    let e = w
        .consume(&mut ctx, &[Input::Present(gray)])
        .expect_err("refused");
    assert_eq!(e.code, ErrorCode::PoisonSchema);
    let frame = |w: usize, h: usize| {
        Payload::Tensor(Tensor::new(
            vec![h as i64, w as i64, 3],
            "uint8",
            vec![128u8; w * h * 3],
        ))
    };
    w.consume(&mut ctx, &[Input::Present(frame(64, 48))])
        .expect("first frame");
    w.consume(&mut ctx, &[Input::Present(frame(100, 30))])
        .expect("another size");
    w.close(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(probe(&out), ("h264".to_owned(), 64, 48, 2));
    let bad = build_node(
        "videoflow.rs.consumers.VideoFileWriter",
        NodeKind::Consumer,
        &params(json!({"video_file": "out.avi"})),
    )
    .expect_err("refused");
    assert_eq!(bad.code, ErrorCode::Config);
}
