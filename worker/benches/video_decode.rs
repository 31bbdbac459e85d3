//! `VideoFileReader` decoding and converting against FFmpeg's own decoder, on one 1080p H.264
//! file with B-frames made by the bench (FFmpeg's `testsrc2`, libx264, 2 B-frames).
//!
//! Per repetition and per thread count N (1 and 2), interleaved so both sides see the same
//! machine: `ffmpeg -threads N -i FILE -f null -` (decode only; its wall time, process start
//! included) and our reader with `decoder_threads: N` built, opened and drained to the end
//! (decode, the reference's `bgr24` bicubic conversion and the packed `(index, frame)`
//! output; wall time and this process's CPU time from `/proc/self/stat`). The figure is the
//! ratio of frame rates, worst of the repetitions. Figures are measurements, never
//! assertions.
//!
//! `scripts/bench` runs it; by hand:
//! `cargo bench -p videoflow-worker --bench video_decode -- [--quick] [--reps N] [--out FILE]`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Map, Value as Json, json};
use videoflow_core::model::NodeKind;
use videoflow_worker::nodes::{BuiltNode, NodeContext, build_node};

const CLASS: &str = "videoflow.producers.video.VideoFileReader";

struct Opts {
    quick: bool,
    reps: usize,
    out: Option<PathBuf>,
}

fn opts() -> Opts {
    let mut o = Opts {
        quick: false,
        reps: 3,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--reps" => o.reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(3),
            "--out" => o.out = args.next().map(PathBuf::from),
            _ => {}
        }
    }
    if o.quick {
        o.reps = 1;
    }
    o
}

/// `/proc/self/stat` fields after the command name, as numbers (0 where unreadable).
fn self_stat() -> Vec<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    rest.split_whitespace()
        .map(|v| v.parse::<f64>().unwrap_or(0.0))
        .collect()
}

/// This process's user + system CPU seconds (all threads), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let f = self_stat();
    // utime and stime are fields 14 and 15 of the stat line: 11 and 12 after the name.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

/// User + system CPU seconds of this process's waited-for children (`cutime`, `cstime`).
fn children_cpu_seconds() -> f64 {
    let f = self_stat();
    // cutime and cstime are fields 16 and 17 of the stat line: 13 and 14 after the name.
    (f.get(13).unwrap_or(&0.0) + f.get(14).unwrap_or(&0.0)) / 100.0
}

fn make_file(dir: &Path, frames: usize) -> PathBuf {
    let path = dir.join("bench-1080p.mp4");
    let n = frames.to_string();
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=1920x1080:rate=25")
        .args([
            "-frames:v",
            &n,
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-bf",
            "2",
        ])
        .args(["-pix_fmt", "yuv420p"])
        .arg(&path)
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "ffmpeg could not make the bench file (scripts/install-deps installs it)"
    );
    path
}

/// `ffmpeg -threads N -f null`: frames per second of wall time, and its CPU seconds (the
/// child's, from this process's `cutime` + `cstime` once it was waited for).
fn ffmpeg_decode(path: &Path, threads: usize, frames: usize) -> (f64, f64) {
    let cpu0 = children_cpu_seconds();
    let started = Instant::now();
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-threads", &threads.to_string()])
        .arg("-i")
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .unwrap_or_else(|e| panic!("ffmpeg: {e}"));
    let wall = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "ffmpeg -f null failed");
    (frames as f64 / wall, children_cpu_seconds() - cpu0)
}

/// Our reader drained: frames per second of wall time, and CPU seconds it took.
fn ours(path: &Path, threads: usize, frames: usize) -> (f64, f64) {
    let mut params = Map::new();
    params.insert("video_file".into(), json!(path.display().to_string()));
    params.insert("decoder_threads".into(), json!(threads));
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    let Ok(BuiltNode::Producer(mut node)) = build_node(CLASS, NodeKind::Producer, &params) else {
        panic!("cannot build {CLASS}");
    };
    let mut ctx = NodeContext::new("bench", "r", "video", 0);
    node.open(&mut ctx)
        .unwrap_or_else(|e| panic!("open: {e:?}"));
    let mut n = 0;
    while let Ok(Some(item)) = node.next(&mut ctx) {
        std::hint::black_box(&item);
        n += 1;
    }
    let _ = node.close(&mut ctx);
    let wall = started.elapsed().as_secs_f64();
    assert_eq!(n, frames, "frames read");
    (frames as f64 / wall, cpu_seconds() - cpu0)
}

fn main() {
    // The reader is built in this process, as `videoflow-worker-video` builds it.
    videoflow_worker::nodes::video::install();
    let o = opts();
    let frames = if o.quick { 150 } else { 600 };
    let dir = std::env::temp_dir().join(format!("vf-bench-video-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    eprintln!("[video] making {frames} frames of 1080p H.264 with B-frames…");
    let path = make_file(&dir, frames);
    let mut rows = Vec::new();
    for threads in [1usize, 2] {
        let mut reps = Vec::new();
        for rep in 0..o.reps {
            let (ff_fps, ff_cpu) = ffmpeg_decode(&path, threads, frames);
            let (our_fps, our_cpu) = ours(&path, threads, frames);
            let ratio = our_fps / ff_fps;
            eprintln!(
                "[video] N={threads} rep {rep}: ffmpeg {ff_fps:.0} fps ({:.2} CPU-ms/frame), \
                 ours {our_fps:.0} fps ({:.2} CPU-ms/frame): {:.0} %",
                ff_cpu * 1000.0 / frames as f64,
                our_cpu * 1000.0 / frames as f64,
                ratio * 100.0
            );
            reps.push(json!({
                "ffmpeg_fps": ff_fps, "ffmpeg_cpu_ms_per_frame": ff_cpu * 1000.0 / frames as f64,
                "ours_fps": our_fps, "ours_cpu_ms_per_frame": our_cpu * 1000.0 / frames as f64,
                "ratio": ratio,
            }));
        }
        let worst = reps
            .iter()
            .filter_map(|r| r["ratio"].as_f64())
            .fold(f64::INFINITY, f64::min);
        rows.push(
            json!({"threads": threads, "worst_ratio": worst, "target": 0.8,
                         "met": worst >= 0.8, "reps": reps}),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let doc: Json = json!({"benchmark": "video_decode", "frames": frames,
                           "file": "1920x1080 25 fps testsrc2, libx264 veryfast, 2 B-frames",
                           "rows": rows});
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    match &o.out {
        Some(p) => std::fs::write(p, &text).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        None => println!("{text}"),
    }
    for r in &rows {
        println!(
            "VideoFileReader vs ffmpeg -threads {} -f null: worst {:.0} % (target 80 %: {})",
            r["threads"],
            r["worst_ratio"].as_f64().unwrap_or(0.0) * 100.0,
            if r["met"].as_bool() == Some(true) {
                "met"
            } else {
                "not met"
            }
        );
    }
}
