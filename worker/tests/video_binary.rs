//! The two worker binaries: `videoflow-worker` maps no FFmpeg library and hands video work to
//! `videoflow-worker-video` beside it; without that sibling a video node is refused with a
//! typed error naming it (nothing half-started).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LEAN: &str = env!("CARGO_BIN_EXE_videoflow-worker");
const VIDEO: &str = env!("CARGO_BIN_EXE_videoflow-worker-video");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vf-video-bin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The shared libraries the dynamic loader maps for `binary` (what `ldd` prints).
fn loaded_libraries(binary: &str) -> String {
    let out = Command::new(binary)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .expect("the loader runs the binary");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `binary` as a `VideoFileReader` replica with `params`, with a broker that is not
/// there (the node is built from its params before the worker connects); returns the
/// process's output and its termination record.
fn run_reader(binary: &Path, params: serde_json::Value, dir: &Path) -> (Output, String) {
    let log = dir.join("termination-log");
    let out = Command::new(binary)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("VF_NODE_NAME", "video")
        .env("VF_NODE_KIND", "producer")
        .env("VF_NODE_CLASS", "videoflow.producers.video.VideoFileReader")
        .env("VF_NODE_PARAMS_JSON", params.to_string())
        .env("VF_FLOW_ID", "videobin")
        .env("VF_RUN_ID", "r1")
        .env("VF_FLOW_TYPE", "batch")
        .env("VF_HAS_CHILDREN", "0")
        .env("VF_NATS_URL", "nats://127.0.0.1:9")
        .env("VF_TERMINATION_LOG", &log)
        .current_dir(dir)
        .output()
        .expect("worker runs");
    let record = std::fs::read_to_string(&log).unwrap_or_default();
    (out, record)
}

#[test]
fn the_worker_maps_no_ffmpeg_library_and_its_video_sibling_does() {
    let lean = loaded_libraries(LEAN);
    assert!(
        lean.contains("libc.so"),
        "no loader trace for {LEAN}:\n{lean}"
    );
    assert!(
        !lean.contains("libav") && !lean.contains("libswscale"),
        "videoflow-worker maps FFmpeg:\n{lean}"
    );
    let video = loaded_libraries(VIDEO);
    assert!(
        video.contains("libavcodec") && video.contains("libswscale"),
        "videoflow-worker-video does not map FFmpeg:\n{video}"
    );
}

/// The lean binary hands the reader to its sibling, which builds it: the error is the
/// reader's own (its bad parameter, named), not the lean binary's refusal.
#[test]
fn a_video_node_runs_in_the_video_binary() {
    let dir = scratch("handoff");
    let params = serde_json::json!({"video_file": "clip.mp4", "timestamp_source": "sundial"});
    let (out, record) = run_reader(Path::new(LEAN), params, &dir);
    let text = format!("{}{record}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("timestamp_source") && text.contains("sundial"),
        "the reader's error names its parameter:\n{text}"
    );
    assert!(
        !text.contains("did not find"),
        "the lean binary refused instead of handing over:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Alone in its directory, the lean binary refuses a video class with `VF_CONFIG` (exit 2),
/// naming the class and the binary it looked for.
#[test]
fn without_its_sibling_a_video_node_is_refused_naming_the_video_binary() {
    let dir = scratch("alone");
    let alone = dir.join("videoflow-worker");
    std::fs::copy(LEAN, &alone).expect("copy the worker");
    let (out, record) = run_reader(&alone, serde_json::json!({"video_file": "clip.mp4"}), &dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}\n{record}");
    let record: serde_json::Value = serde_json::from_str(&record).expect("termination record");
    let text = record.to_string();
    assert!(text.contains("VF_CONFIG"), "{text}");
    assert!(text.contains("VideoFileReader"), "names the class: {text}");
    assert!(
        text.contains("videoflow-worker-video"),
        "names the binary it looked for: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gpu --decode` decodes in the video binary too (its `decode` entry is a decoding's
/// outcome, not the lean binary's "did not find").
#[test]
fn gpu_decode_runs_in_the_video_binary() {
    let dir = scratch("gpu");
    let missing = dir.join("absent.mp4");
    let out = Command::new(LEAN)
        .args(["gpu", "--count", "0", "--decode"])
        .arg(&missing)
        .env("PATH", "/nonexistent")
        .output()
        .expect("worker runs");
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON document on stdout");
    let decode = doc["decode"].to_string();
    assert!(decode.contains("absent.mp4"), "{doc}");
    assert!(!decode.contains("did not find"), "not handed over: {doc}");
    let _ = std::fs::remove_dir_all(&dir);
}
