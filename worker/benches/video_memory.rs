//! Memory of a 1080p live reader over time: `VideoUrlReader` on the RTSP test server
//! (GStreamer's rtsp-server, `worker/tests/video_support/rtsp_server.py`, RTP over TCP)
//! streaming a 1920×1080 H.264 clip in real time, in a real worker process publishing every
//! frame through the Redis payload store to a JSONL sink, for `--minutes` (default 10).
//!
//! The server plays the clip once per session; at its end the reader sees the stream end
//! and reconnects (`nb_retries: -1`), so the run also covers a source that comes and goes
//! every clip length. The reader's `VmRSS` (`/proc/PID/status`) is sampled every second;
//! the figures are its mean and largest RSS over minute 1 (the samples from 60 s to 120 s:
//! the first minute is start-up) and over the last minute of the run, the growth between
//! the two means (and between the two maxima), and the largest RSS of the whole run.
//! Targets: growth ≤ 5 %, RSS ≤ 128 MiB. Measurements, never assertions.
//!
//! `VF_BENCH_ONLY=video_memory scripts/bench` runs it (the full run does not); by hand:
//! `cargo bench -p videoflow-worker --bench video_memory -- [--minutes M] [--out FILE]`
//! (`--quick`: 2 minutes).

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{FlowRun, Opts, Side, TempDir, loadavg, log, make_1080p, status_kib};
use videoflow_testkit::{NatsServer, RedisServer};

/// The clip's length: each session of the server plays it once.
const CLIP_FRAMES: usize = 1500;

const FLOW: &str = r#"apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: live-memory}
spec:
  type: realtime
  payloadStore: {url: "{{REDIS}}"}
  nodes:
  - name: camera
    kind: producer
    finite: false
    component: {builtin: videoflow.producers.video.VideoUrlReader}
    params: {url: "{{URL}}", nb_retries: -1, rtsp_transport: tcp{{PARAMS}}}
  - name: sink
    kind: consumer
    parents: [camera]
    component: {builtin: videoflow.rs.consumers.JsonlSink}
    params: {path: "{{DIR}}/out.jsonl"}
"#;

/// Lines of the sink's output so far (one per frame).
fn frames_at_sink(run: &FlowRun) -> usize {
    std::fs::read(run.dir.join("out.jsonl"))
        .map(|b| b.iter().filter(|c| **c == b'\n').count())
        .unwrap_or(0)
}

fn main() {
    let o = Opts::parse();
    let minutes = o.minutes.unwrap_or(if o.quick { 2.0 } else { 10.0 });
    let dir = TempDir::new("video-memory");
    // `VF_BENCH_VIDEO_CLIP=FILE`: a clip made by an earlier run (diagnosis: saves the
    // encoding); else one is made here.
    let clip = match std::env::var_os("VF_BENCH_VIDEO_CLIP") {
        Some(c) if std::path::Path::new(&c).is_file() => std::path::PathBuf::from(c),
        _ => {
            log(format!(
                "making a {} s 1080p H.264 clip for the RTSP server…",
                CLIP_FRAMES / 25
            ));
            let clip = dir.join("clip.mp4");
            make_1080p(&clip, CLIP_FRAMES, 50);
            clip
        }
    };
    let script = support::repo_root().join("worker/tests/video_support/rtsp_server.py");
    let mut server = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&clip)
        .arg("0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("the RTSP server does not run: {e} (scripts/install-deps)"));
    let mut line = String::new();
    if let Some(out) = server.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let port: u16 = line
        .strip_prefix("PORT ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the RTSP server did not start: {line:?}"));
    let url = format!("rtsp://127.0.0.1:{port}/test");
    let nats = NatsServer::start().unwrap_or_else(|e| panic!("nats-server: {e}"));
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    // `VF_BENCH_READER_PARAMS="k: v, …"`: more reader params; `VF_BENCH_WORKER_ENV=K=V,…`:
    // more variables for the reader's worker (diagnosis).
    let more = std::env::var("VF_BENCH_READER_PARAMS")
        .map(|p| format!(", {p}"))
        .unwrap_or_default();
    let yaml = FLOW.replace("{{URL}}", &url).replace("{{PARAMS}}", &more);
    let worker_env = std::env::var("VF_BENCH_WORKER_ENV").unwrap_or_default();
    let worker_env: Vec<(&str, &str)> = worker_env
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let mut run = FlowRun::new(&rt, &nats.url(), &redis.url(), &yaml, &dir.join("flow"))
        .unwrap_or_else(|e| panic!("{e}"));
    run.spawn("sink", Side::Ours, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    run.spawn("camera", Side::Ours, &worker_env)
        .unwrap_or_else(|e| panic!("{e}"));
    let load_start = loadavg();
    let pid = run.proc("camera").map(|p| p.child.id()).unwrap_or(0);
    let sink_pid = run.proc("sink").map(|p| p.child.id()).unwrap_or(0);
    let started = Instant::now();
    let total = Duration::from_secs_f64(minutes * 60.0);
    let mut samples = Vec::new();
    let mut next = Duration::ZERO;
    log(format!(
        "sampling the reader (pid {pid}) for {minutes} min…"
    ));
    while started.elapsed() < total {
        if run.poll() < 2 {
            break;
        }
        let t = started.elapsed();
        if t >= next {
            let rss = status_kib(pid, "VmRSS").unwrap_or(0);
            let sink_rss = status_kib(sink_pid, "VmRSS").unwrap_or(0);
            samples.push((t.as_secs_f64(), rss, sink_rss, frames_at_sink(&run)));
            if samples.len() % 60 == 1 {
                log(format!(
                    "t={:.0}s reader RSS {} KiB, sink RSS {} KiB, {} frames at the sink (load {})",
                    t.as_secs_f64(),
                    rss,
                    sink_rss,
                    frames_at_sink(&run),
                    loadavg()
                ));
            }
            next += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let survived = run.poll() == 2;
    let frames = frames_at_sink(&run);
    let _ = server.kill();
    let _ = server.wait();
    // Minute 1 (60–120 s) and the last minute: mean and largest RSS of each.
    let window = |from: f64, to: f64| {
        let rss: Vec<u64> = samples
            .iter()
            .filter(|s| s.0 >= from && s.0 < to)
            .map(|s| s.1)
            .collect();
        let mean = rss.iter().sum::<u64>() as f64 / rss.len().max(1) as f64;
        (mean, rss.iter().copied().max().unwrap_or(0))
    };
    let end = minutes * 60.0;
    let (mean_1, max_1) = window(60.0, 120.0);
    let (mean_end, max_end) = window(end - 60.0, end + 1.0);
    let (rss_1, rss_end) = (mean_1.round() as u64, mean_end.round() as u64);
    let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let growth = (mean_end - mean_1) / mean_1;
    let growth_of_max = (max_end as f64 - max_1 as f64) / max_1 as f64;
    let per_30s: Vec<_> = samples
        .iter()
        .filter(|s| (s.0 as u64).is_multiple_of(30))
        .map(|s| json!({"t_s": s.0.round(), "reader_rss_kib": s.1, "sink_rss_kib": s.2, "frames": s.3}))
        .collect();
    let doc = json!({
        "benchmark": "video_memory",
        "minutes": minutes,
        "clip": format!("1920x1080 25 fps testsrc2, libx264 veryfast, 2 B-frames, {CLIP_FRAMES} frames, played once per RTSP session"),
        "load_start": load_start,
        "load_end": loadavg(),
        "workers_ran_throughout": survived,
        "frames_at_sink": frames,
        "reader_rss_kib_minute_1": {"mean": rss_1, "max": max_1},
        "reader_rss_kib_last_minute": {"mean": rss_end, "max": max_end},
        "reader_rss_kib_max": max,
        "growth_of_max": growth_of_max,
        "reader_vmhwm_kib": status_kib(pid, "VmHWM"),
        "growth": growth,
        "target_growth": 0.05,
        "growth_met": growth <= 0.05,
        "target_rss_kib": 128 * 1024,
        "rss_met": max <= 128 * 1024,
        "samples_every_30s": per_30s,
        "exits": run.exits(),
    });
    drop(run);
    o.emit(&doc);
    println!(
        "1080p VideoUrlReader over RTSP for {minutes} min: mean RSS {rss_1} KiB in minute 1, \
         {rss_end} KiB in the last minute ({:+.1} %, target ≤ 5 %: {}), max {max} KiB (target \
         ≤ 131072: {}); {frames} frames at the sink, workers ran throughout: {survived}",
        growth * 100.0,
        if growth <= 0.05 { "met" } else { "not met" },
        if max <= 128 * 1024 { "met" } else { "not met" },
    );
}
