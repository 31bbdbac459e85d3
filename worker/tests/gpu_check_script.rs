//! `scripts/gpu-check` on a machine without a GPU: it must run to one JSON verdict, never
//! crash, and never call a machine without a driver a pass.
//!
//! - No driver at all (NVML from a path where there is none, no `nvidia-smi` on PATH): the
//!   verdict is `no-gpu`, exit 1, and the summary says so.
//! - A fake `nvidia-smi` host (two H200 cards, two MIG instances) with NVML absent: every
//!   check runs through the worker's `gpu` command; the mask and short-grant checks pass on
//!   the fake host, the NVML-only ones (enumeration agreement, metrics) and NVDEC fail, so
//!   the verdict is `fail`. NVDEC fails for the reason it fails here: FFmpeg's `h264_cuvid`
//!   cannot load the driver, and our reader, granted the fake host's card, decodes on the
//!   CPU and says so — with the CPU decoding's frames.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_videoflow-worker");
const NO_NVML: &str = "/nonexistent/videoflow-test/libnvidia-ml.so.1";

fn script() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-check")
}

fn python() -> PathBuf {
    ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("python3 (scripts/install-deps installs it)")
}

fn run_check(path: &str) -> (Option<i32>, Value) {
    let out = Command::new(python())
        .arg(script())
        .arg("--worker")
        .arg(WORKER)
        .env_clear()
        .env("PATH", path)
        .env("VF_NVML_LIBRARY", NO_NVML)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "one JSON line; stdout {stdout}\nstderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_str(lines[0]).expect("JSON verdict");
    (out.status.code(), doc)
}

fn status<'a>(doc: &'a Value, name: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("absent")
}

#[test]
fn no_driver_is_a_no_gpu_verdict_not_a_crash_and_not_a_pass() {
    let empty = std::env::temp_dir().join(format!("vf-gpu-check-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("dir");
    let (code, doc) = run_check(&empty.display().to_string());
    let _ = std::fs::remove_dir_all(&empty);
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["verdict"], "no-gpu", "{doc}");
    let summary = doc["summary"].as_str().unwrap_or_default();
    assert!(summary.starts_with("no GPU:"), "{summary}");
    assert!(
        summary.contains("libnvidia-ml.so.1") && summary.contains("nvidia-smi"),
        "{summary}"
    );
    assert_eq!(status(&doc, "enumeration"), "fail");
}

const QUERY: &str =
    "0, GPU-aaaa1111, NVIDIA H200, 143771, 0\n1, GPU-bbbb2222, NVIDIA H200, 143771, 0\n";
const LIST: &str = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa1111)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb2222)\n  MIG 1g.18gb     Device  0: (UUID: MIG-cccc3333)\n  MIG 1g.18gb     Device  1: (UUID: MIG-dddd4444)\n";

#[test]
fn a_fake_nvidia_smi_host_runs_every_check_and_fails_what_needs_nvml_or_nvdec() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("vf-gpu-check-fake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let fake = dir.join("nvidia-smi");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  --query-gpu=index*) printf '%s' '{QUERY}' ;;\n  --query-gpu=*) exit 6 ;;\n  -L) printf '%s' '{LIST}' ;;\n  topo) printf ' \\tGPU0\\tGPU1\\nGPU0\\tX\\tOK\\nGPU1\\tOK\\tX\\n' ;;\nesac\n"
        ),
    )
    .expect("write");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The fake and FFmpeg's CLI on PATH (the NVDEC check makes its clip with it).
    let ffmpeg = ["/usr/bin/ffmpeg", "/usr/local/bin/ffmpeg"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .expect("ffmpeg (scripts/install-deps installs it)");
    std::os::unix::fs::symlink(ffmpeg, dir.join("ffmpeg")).expect("link ffmpeg");
    let (code, doc) = run_check(&dir.display().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["verdict"], "fail", "{doc}");
    for pass in [
        "mask_ordinal",
        "mask_uuid",
        "mask_uuid_device_plugin",
        "mask_mig",
        "short_grant",
        "p2p",
    ] {
        assert_eq!(status(&doc, pass), "pass", "{pass}: {doc}");
    }
    for fail in ["enumeration", "metrics", "nvdec"] {
        assert_eq!(status(&doc, fail), "fail", "{fail}: {doc}");
    }
    let nvdec = doc["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "nvdec"))
        .expect("nvdec check");
    assert!(
        nvdec["nvdec_error"]
            .as_str()
            .is_some_and(|e| e.contains("libnvcuvid")),
        "{nvdec}"
    );
    let reader = &nvdec["reader"];
    assert_eq!(reader["ok"], false, "{nvdec}");
    assert_eq!(reader["hardware"], "cpu", "{nvdec}");
    assert_eq!(reader["decoder"], "h264", "{nvdec}");
    assert_eq!(reader["fallback"]["reason"], "nvdec_open_failed", "{nvdec}");
    assert_eq!(reader["frames"], 120, "{nvdec}");
    assert_eq!(reader["cpu_frames"], 120, "{nvdec}");
    assert_eq!(reader["size"], serde_json::json!([720, 1280]), "{nvdec}");
    assert_eq!(reader["bytes_match"], true, "{nvdec}");
}
