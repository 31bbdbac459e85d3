//! A real RTSP server for the live-source tests, and the media it streams: a process of
//! `rtsp_server.py` (GStreamer's rtsp-server) on a loopback port, and a 320×180 H.264 file
//! with B-frames whose every frame is known by hash, so a frame received over RTSP is
//! identified exactly (or found not to be one of the file's).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use videoflow_worker::nodes::convert::sha256_hex;

use super::{TempDir, ffmpeg, run_ffmpeg};

/// The streamed file: 15 s of 320×180 `testsrc` at 25 fps, H.264 with 2 B-frames and a
/// keyframe every second (25 frames).
pub const W: usize = 320;
pub const H: usize = 180;
pub const FPS: usize = 25;
pub const SECONDS: usize = 15;
pub const GOP: usize = 25;

pub const SERVER_REMEDY: &str = "Install the RTSP test server's packages with \
    `./scripts/install-deps` (Debian: python3-gi gir1.2-gst-rtsp-server-1.0 \
    gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad).";

/// The test file and the hash of each of its frames, in display order.
pub struct Media {
    pub dir: TempDir,
    pub path: PathBuf,
    pub hashes: Vec<u64>,
    /// Frame number in the file of each hash.
    pub index_of: HashMap<u64, usize>,
    /// Frame number in the file of each frame's SHA-256 (what `JsonlSink` records).
    pub sha256_of: HashMap<String, usize>,
}

pub fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

pub fn media(tag: &str) -> Media {
    let dir = TempDir::new(tag);
    let path = dir.join("stream.mp4");
    let src = format!("testsrc=size={W}x{H}:rate={FPS}");
    let secs = SECONDS.to_string();
    let gop = GOP.to_string();
    let out = path.display().to_string();
    run_ffmpeg(&[
        "-f", "lavfi", "-i", &src, "-t", &secs, "-c:v", "libx264", "-bf", "2", "-g", &gop,
        "-pix_fmt", "yuv420p", &out,
    ]);
    let mut child = Command::new(ffmpeg())
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(&path)
        .args(["-f", "rawvideo", "-pix_fmt", "bgr24", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("ffmpeg: {e}"));
    let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut frame = vec![0u8; W * H * 3];
    let mut hashes = Vec::new();
    let mut sha256_of = HashMap::new();
    while stdout.read_exact(&mut frame).is_ok() {
        sha256_of.insert(sha256_hex(&frame), hashes.len());
        hashes.push(hash(&frame));
    }
    assert!(
        child.wait().is_ok_and(|s| s.success()),
        "ffmpeg bgr24 failed"
    );
    assert_eq!(hashes.len(), FPS * SECONDS, "frames in the test file");
    let index_of: HashMap<u64, usize> = hashes.iter().enumerate().map(|(i, h)| (*h, i)).collect();
    assert_eq!(
        index_of.len(),
        hashes.len(),
        "testsrc frames are all distinct"
    );
    Media {
        dir,
        path,
        hashes,
        index_of,
        sha256_of,
    }
}

/// One RTSP server process; killed on drop.
pub struct Server {
    pub child: Option<Child>,
    pub port: u16,
}

fn script() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .join("tests/video_support/rtsp_server.py")
}

impl Server {
    pub fn start(path: &Path, port: u16, shared: bool) -> Server {
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg(script()).arg(path).arg(port.to_string());
        if shared {
            cmd.arg("shared");
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("/usr/bin/python3 does not run: {e}. {SERVER_REMEDY}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let Some(bound) = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
        else {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = child.wait();
            panic!("the RTSP server did not start ({line:?}): {err}. {SERVER_REMEDY}");
        };
        Server {
            child: Some(child),
            port: bound,
        }
    }

    pub fn url(&self) -> String {
        format!("rtsp://127.0.0.1:{}/test", self.port)
    }

    /// SIGKILL: the server goes away without a goodbye.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().map(Child::id).unwrap_or_default();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal("-CONT");
        }
        self.kill();
    }
}
