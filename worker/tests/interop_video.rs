//! Mixed video flows: nodes split between our worker (`R`) and the Python reference worker
//! of videoflow 1.0.4 (`P`, OpenCV 5.0 in the reference virtualenv), over a real H.264 file
//! made at test time, a real nats-server and the Redis payload store (each 640×360 frame is
//! over the inline limit, so every hop offloads it). Provisioned by our provision job.
//!
//! ```text
//!   resize:   video (R VideoFileReader) ─┬─ frame (R Resize to the same size: the tuple's frame)
//!                                       └─ size  (R Constant (180, 320))
//!             [frame, size] ─ resize (P 1.0.4 ResizeImageTransformer) ─ write (R H.264 MP4)
//!   annotate: video (P 1.0.4 VideoFileReader) ─┬───────────────────────────┐
//!                                              └─ boxes (R Constant [[…]]) ─┴─ annotate
//!             (R BoundingBoxAnnotator) ─ write (R H.264 MP4)
//! ```
//!
//! Each written file is decoded back with the `ffmpeg` CLI: every frame there, of the size
//! the other runtime's node made, and its pixels those our library computes for the same
//! input (OpenCV's resize and rectangle, which it matches byte for byte:
//! `differential_vision.rs`), up to H.264's loss.

#![cfg(feature = "video")]

mod support;
mod video_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{FlowHarness, Provisioner, Runtime};
use video_support::{FRAMES, H, TempDir, W, cli_bgr_frames, ffmpeg, h264};
use videoflow_worker::nodes::vision::draw::Canvas;
use videoflow_worker::nodes::vision::resize::resize_linear;

use Runtime::{Reference as P, Rust as R};

/// Every frame of `path` decoded to packed BGR at its own size `w × h`.
fn decoded(path: &Path, w: usize, h: usize) -> Vec<Vec<u8>> {
    let out = Command::new(ffmpeg())
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-f", "rawvideo", "-pix_fmt", "bgr24", "-"])
        .output()
        .unwrap_or_else(|e| panic!("ffmpeg: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len() % (w * h * 3), 0, "not {w}×{h} frames");
    out.stdout.chunks(w * h * 3).map(<[u8]>::to_vec).collect()
}

/// The frame size ffprobe reports for `path`, `(width, height)`.
fn size_of(path: &Path) -> (usize, usize) {
    let probe = video_support::ffprobe();
    let out = Command::new(probe)
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=width,height",
        ])
        .args(["-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("ffprobe: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text
        .trim()
        .split(',')
        .map(|v| v.parse::<usize>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let total: u64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    total as f64 / a.len() as f64
}

fn run(yaml: &str, placement: &[(&str, &[Runtime])]) -> FlowHarness {
    let mut h = FlowHarness::new(yaml);
    h.start_placed(Provisioner::Rust, placement);
    h.wait_all_ok(Duration::from_secs(120));
    h
}

/// Our reader → 1.0.4's ResizeImageTransformer on the reference worker → our writer.
#[test]
fn our_reader_through_the_references_resize_into_our_writer() {
    let dir = TempDir::new("interop-resize");
    let input = h264(&dir, "in.mp4", &[]);
    let output = dir.join("out.mp4");
    let yaml = format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: mixed-resize}}
spec:
  type: batch
  payloadStore: {{url: "{{{{DURABLE_REDIS}}}}"}}
  nodes:
  - name: video
    kind: producer
    component: {{builtin: videoflow.producers.video.VideoFileReader}}
    params: {{video_file: "{input}"}}
  - name: frame
    kind: processor
    parents: [video]
    component: {{builtin: videoflow.processors.vision.transformers.ResizeImageTransformer}}
    params: {{new_size: [{H}, {W}]}}
  - name: size
    kind: processor
    parents: [video]
    component: {{builtin: videoflow.rs.processors.Constant}}
    params: {{value: [180, 320]}}
  - name: resize
    kind: processor
    parents: [frame, size]
    join: {{missing: wait}}
    component: {{builtin: videoflow.processors.vision.transformers.ResizeImageTransformer}}
  - name: write
    kind: consumer
    parents: [resize]
    component: {{builtin: videoflow.rs.consumers.VideoFileWriter}}
    params: {{video_file: "{output}", fps: 25}}
"#,
        input = input.display(),
        output = output.display(),
    );
    let h = run(
        &yaml,
        &[
            ("video", &[R]),
            ("frame", &[R]),
            ("size", &[R]),
            ("resize", &[P]),
            ("write", &[R]),
        ],
    );
    assert!(
        h.log("resize", 0).contains("videoflow"),
        "the resize ran on the reference worker"
    );
    assert_eq!(
        size_of(&output),
        (320, 180),
        "the reference's resize made the size"
    );
    let got = decoded(&output, 320, 180);
    let source = cli_bgr_frames(&input);
    assert_eq!(got.len(), FRAMES, "every frame written");
    for (i, (g, s)) in got.iter().zip(&source).enumerate() {
        let want = resize_linear(s, H, W, 3, 180, 320);
        let d = mean_abs_diff(g, &want);
        assert!(
            d < 3.0,
            "frame {i}: mean difference {d:.2} from cv2.resize's pixels"
        );
    }
}

/// 1.0.4's VideoFileReader on the reference worker → our BoundingBoxAnnotator → our writer.
#[test]
fn the_references_reader_into_our_annotator() {
    let dir = TempDir::new("interop-annotate");
    let input = h264(&dir, "in.mp4", &[]);
    let output = dir.join("out.mp4");
    let boxes = [
        [40.0, 60.0, 300.0, 400.0, 1.0, 0.9],
        [100.0, 450.0, 200.0, 600.0, 2.0, 0.5],
    ];
    let yaml = format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: mixed-annotate}}
spec:
  type: batch
  payloadStore: {{url: "{{{{DURABLE_REDIS}}}}"}}
  nodes:
  - name: video
    kind: producer
    component: {{builtin: videoflow.producers.video.VideoFileReader}}
    params: {{video_file: "{input}"}}
  - name: boxes
    kind: processor
    parents: [video]
    component: {{builtin: videoflow.rs.processors.Constant}}
    params: {{value: {boxes:?}}}
  - name: annotate
    kind: processor
    parents: [video, boxes]
    join: {{missing: wait}}
    component: {{builtin: videoflow.processors.vision.annotators.BoundingBoxAnnotator}}
    params: {{box_thickness: 3}}
  - name: write
    kind: consumer
    parents: [annotate]
    component: {{builtin: videoflow.rs.consumers.VideoFileWriter}}
    params: {{video_file: "{output}", fps: 25}}
"#,
        input = input.display(),
        output = output.display(),
    );
    run(
        &yaml,
        &[
            ("video", &[P]),
            ("boxes", &[R]),
            ("annotate", &[R]),
            ("write", &[R]),
        ],
    );
    let got = decoded(&output, W, H);
    let source = cli_bgr_frames(&input);
    assert_eq!(
        got.len(),
        FRAMES,
        "every frame the reference read, annotated and written"
    );
    for (i, (g, s)) in got.iter().zip(&source).enumerate() {
        let mut want = s.clone();
        let mut canvas = Canvas {
            data: &mut want,
            height: H,
            width: W,
            channels: 3,
        };
        for b in &boxes {
            canvas.rectangle(
                b[1] as i64,
                b[0] as i64,
                b[3] as i64,
                b[2] as i64,
                &[255, 225, 0],
                3,
            );
        }
        let d = mean_abs_diff(g, &want);
        assert!(
            d < 3.0,
            "frame {i}: mean difference {d:.2} from the boxed frame"
        );
        // The top edge of the first box, mid-way: the box colour (BGR 255, 225, 0).
        let at = (40 * W + 200) * 3;
        let px = &g[at..at + 3];
        assert!(
            px[0] > 200 && px[1] > 180 && px[2] < 60,
            "frame {i}: {px:?} on the box edge"
        );
    }
}
