//! Real media for the video tests, made at test time with the `ffmpeg` CLI (never
//! downloaded): FFmpeg's `testsrc` pattern encoded to H.264 and H.265 with B-frames, damaged
//! copies, and the CLI's own `bgr24` conversion of every frame as the expected pixels.
//!
//! A missing `ffmpeg` fails the test with the remedy (`./scripts/install-deps` installs
//! Debian's `ffmpeg`), never skips it.

#![allow(dead_code)]

pub mod rtsp;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The test pattern's geometry and length: 2 s of 640×360 at 25 fps.
pub const W: usize = 640;
pub const H: usize = 360;
pub const FPS: u32 = 25;
pub const FRAMES: usize = 50;

/// `videoflow_worker::nodes::build_node` with the video nodes installed first: these tests
/// build video nodes in process, as `videoflow-worker-video` does.
pub fn build_node(
    class: &str,
    kind: videoflow_core::model::NodeKind,
    params: &serde_json::Map<String, serde_json::Value>,
) -> Result<videoflow_worker::nodes::BuiltNode, videoflow_core::errors::VfError> {
    videoflow_worker::nodes::video::install();
    videoflow_worker::nodes::build_node(class, kind, params)
}

/// `videoflow_worker::nodes::video::decode_twice` with the video nodes installed first.
pub fn decode_twice(
    video_file: &str,
    gpu: &videoflow_worker::nodes::GpuPlacement,
) -> serde_json::Value {
    videoflow_worker::nodes::video::install();
    videoflow_worker::nodes::video::decode_twice(video_file, gpu)
}

const REMEDY: &str = "Install FFmpeg's command-line tools with `./scripts/install-deps` \
    (Debian package `ffmpeg`), or point VF_FFMPEG / VF_FFPROBE at them.";

/// A private directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("video-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tool(var: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(name));
    let found = Command::new(&path).arg("-version").output();
    match found {
        Ok(out) if out.status.success() => path,
        other => panic!("{} does not run ({other:?}). {REMEDY}", path.display()),
    }
}

pub fn ffmpeg() -> PathBuf {
    tool("VF_FFMPEG", "ffmpeg")
}

pub fn ffprobe() -> PathBuf {
    tool("VF_FFPROBE", "ffprobe")
}

/// Runs `ffmpeg -v error -y <args>`, panicking with its stderr on failure.
pub fn run_ffmpeg(args: &[&str]) {
    let out = Command::new(ffmpeg())
        .args(["-nostdin", "-v", "error", "-y"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ffmpeg: {e}. {REMEDY}"));
    assert!(
        out.status.success(),
        "ffmpeg {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn testsrc() -> String {
    format!("testsrc=size={W}x{H}:rate={FPS}")
}

/// 2 s of `testsrc` as H.264 with 2 B-frames (x264's default pyramid), `yuv420p`. `extra`
/// goes before the output (e.g. `-movflags +faststart`); the container follows `name`.
pub fn h264(dir: &TempDir, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let src = testsrc();
    let mut args = vec![
        "-f", "lavfi", "-i", &src, "-t", "2", "-c:v", "libx264", "-bf", "2", "-pix_fmt", "yuv420p",
    ];
    args.extend_from_slice(extra);
    let out_s = out.display().to_string();
    args.push(&out_s);
    run_ffmpeg(&args);
    out
}

/// 2 s of `testsrc` as H.265 with 2 B-frames.
pub fn h265(dir: &TempDir, name: &str) -> PathBuf {
    let out = dir.join(name);
    let src = testsrc();
    let out_s = out.display().to_string();
    run_ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &src,
        "-t",
        "2",
        "-c:v",
        "libx265",
        "-x265-params",
        "bframes=2:log-level=error",
        "-pix_fmt",
        "yuv420p",
        &out_s,
    ]);
    out
}

/// Every frame of `path` as FFmpeg's CLI converts it to packed `bgr24` (its default scaler
/// flags are bicubic, as OpenCV's): what OpenCV — and so 1.0.4 — returns.
pub fn cli_bgr_frames(path: &Path) -> Vec<Vec<u8>> {
    let out = Command::new(ffmpeg())
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-f", "rawvideo", "-pix_fmt", "bgr24", "-"])
        .output()
        .unwrap_or_else(|e| panic!("ffmpeg: {e}. {REMEDY}"));
    assert!(
        out.status.success(),
        "ffmpeg bgr24 of {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let size = W * H * 3;
    assert_eq!(out.stdout.len() % size, 0, "rawvideo is not whole frames");
    out.stdout.chunks(size).map(<[u8]>::to_vec).collect()
}

/// One packet of the video stream as ffprobe lists it (decode order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    pub pts: i64,
    pub pos: u64,
    pub size: u64,
}

/// The video packets of `path`, in decode order.
pub fn packets(path: &Path) -> Vec<PacketInfo> {
    let out = Command::new(ffprobe())
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "packet=pts,pos,size",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("ffprobe: {e}. {REMEDY}"));
    assert!(out.status.success(), "ffprobe {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let num = |i: usize| -> i64 {
                f.get(i)
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or_else(|| panic!("ffprobe line {l:?}"))
            };
            PacketInfo {
                pts: num(0),
                size: num(1) as u64,
                pos: num(2) as u64,
            }
        })
        .collect()
}

/// A copy of `src` cut to its first `len` bytes.
pub fn truncated_copy(src: &Path, dst: &Path, len: u64) {
    let mut bytes = std::fs::read(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    assert!(len < bytes.len() as u64, "cut beyond the end");
    bytes.truncate(len as usize);
    std::fs::write(dst, bytes).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
}

/// How many frames, in display order, decode from the packets wholly before byte `cut`
/// without a gap: what a reader can deliver from a file cut (or damaged) there.
pub fn frames_before(packets: &[PacketInfo], cut: u64) -> usize {
    let mut all: Vec<i64> = packets.iter().map(|p| p.pts).collect();
    all.sort_unstable();
    let intact: std::collections::BTreeSet<i64> = packets
        .iter()
        .take_while(|p| p.pos + p.size <= cut)
        .map(|p| p.pts)
        .collect();
    all.iter().take_while(|pts| intact.contains(pts)).count()
}
