//! The 1080p video flow side by side with the reference 1.0.4's: `VideoFileReader` →
//! `IdentityProcessor` → JSONL sink through the Redis payload store (every 1920×1080 BGR
//! frame, 6 220 800 bytes, is above the 512 KiB inline limit, so each hop offloads it), on
//! one nats-server and one redis-server shared by both sides.
//!
//! Per repetition, the reference's workers (`python -m videoflow.worker` from its venv: its
//! own `VideoFileReader` over OpenCV and `IdentityProcessor`; the sink is the Python twin of
//! our `JsonlSink` in `tests/conformance/interop_nodes.py`, since 1.0.4's
//! `videoflow.consumers` imports `requests`) and then ours run the same file as a flow of
//! their own (a new Flow name, so streams never mix). The rate is the sink's: frames over
//! the span between its first and last record's arrival time (both sinks hash every frame
//! and stamp `arrival_ts` the same way). CPU per frame per node is each worker process's
//! user + system time from the sink's first record to its exit, over the frames after the
//! first (start-up — the interpreter's imports, opening the file — excluded; with it in the
//! JSON too). The figure is ours ÷ the reference's of the same
//! repetition, worst of the repetitions.
//!
//! `scripts/bench` runs it (alone: `VF_BENCH_ONLY=video_flow scripts/bench`); by hand:
//! `cargo bench -p videoflow-worker --bench video_flow -- [--quick] [--reps N] [--out FILE]`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use support::{
    FlowRun, Opts, R, Side, TempDir, clk_tck, loadavg, log, make_1080p, reference_python,
};
use videoflow_testkit::{NatsServer, RedisServer};

/// The side-by-side flow; `{{NAME}}` and `{{FILE}}` are filled per run.
const FLOW: &str = r#"apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: "{{NAME}}"}
spec:
  type: batch
  payloadStore: {url: "{{REDIS}}"}
  nodes:
  - name: video
    kind: producer
    component: {builtin: videoflow.producers.video.VideoFileReader}
    params: {video_file: "{{FILE}}"}
  - name: same
    kind: processor
    parents: [video]
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [same]
    component: {builtin: videoflow.rs.consumers.JsonlSink}
    params: {path: "{{DIR}}/out.jsonl"}
"#;

const NODES: [&str; 3] = ["video", "same", "sink"];

/// Lines in a file so far (0 while it does not exist).
fn lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|b| b.iter().filter(|c| **c == b'\n').count())
        .unwrap_or(0)
}

/// What every run shares: the servers, the file and its frame count.
struct Setup<'a> {
    rt: &'a tokio::runtime::Runtime,
    nats: String,
    redis: String,
    dir: &'a TempDir,
    file: String,
    frames: usize,
}

/// One run of the flow named `name` on `side`: the sink's rate and every node's CPU per
/// frame.
fn run_once(setup: &Setup<'_>, name: &str, side: Side) -> R<Json> {
    let frames = setup.frames;
    let yaml = FLOW
        .replace("{{NAME}}", name)
        .replace("{{FILE}}", &setup.file);
    let mut run = FlowRun::new(
        setup.rt,
        &setup.nats,
        &setup.redis,
        &yaml,
        &setup.dir.join(name),
    )?;
    // `VF_BENCH_WORKER_ENV=K=V,K=V`: extra variables for our workers (diagnosis).
    let extra = std::env::var("VF_BENCH_WORKER_ENV").unwrap_or_default();
    let extra: Vec<(&str, &str)> = if side == Side::Ours {
        extra
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect()
    } else {
        Vec::new()
    };
    run.spawn("sink", side, &extra)?;
    run.spawn("same", side, &extra)?;
    // The reference's interpreter takes a few seconds to import numpy and cv2 and bind.
    run.idle(Duration::from_secs(if side == Side::Reference {
        8
    } else {
        2
    }));
    run.spawn("video", side, &extra)?;
    // Every node's CPU from the first frame at the sink on: start-up (an interpreter's
    // imports, opening the file) is not per-frame work.
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut at_first: Option<Vec<u64>> = None;
    let finished = loop {
        let running = run.poll();
        if at_first.is_none() && lines(&run.dir.join("out.jsonl")) > 0 {
            at_first = Some(NODES.iter().map(|n| run.ticks(n)).collect());
        }
        if running == 0 {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let records = run.jsonl("out.jsonl");
    let arrivals: Vec<f64> = records
        .iter()
        .filter_map(|r| r["arrival_ts"].as_f64())
        .collect();
    let first = arrivals.iter().copied().fold(f64::INFINITY, f64::min);
    let last = arrivals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let fps = if arrivals.len() > 1 && last > first {
        (arrivals.len() - 1) as f64 / (last - first)
    } else {
        f64::NAN
    };
    let tck = clk_tck();
    let mut cpu = serde_json::Map::new();
    let mut cpu_total = serde_json::Map::new();
    let mut rss = serde_json::Map::new();
    let first = at_first.unwrap_or_else(|| vec![0; NODES.len()]);
    for (i, node) in NODES.iter().enumerate() {
        if let Some(p) = run.proc(node) {
            let steady = p.ticks.saturating_sub(first[i]) as f64 * 1000.0 / tck;
            cpu.insert(
                (*node).into(),
                json!(steady / frames.saturating_sub(1).max(1) as f64),
            );
            cpu_total.insert(
                (*node).into(),
                json!(p.ticks as f64 * 1000.0 / tck / frames as f64),
            );
            rss.insert((*node).into(), json!(p.rss_max_kib));
        }
    }
    let intact = records.len() == frames
        && records.iter().all(|r| {
            r["value"][1]["$tensor"]["shape"] == json!([1080, 1920, 3])
                && r["value"][1]["$tensor"]["dtype"] == "uint8"
        });
    Ok(json!({
        "side": if side == Side::Ours { "ours" } else { "reference" },
        "ok": finished && run.all_ok() && intact,
        "records": records.len(),
        "sink_fps": fps,
        "cpu_ms_per_frame": cpu,
        "cpu_ms_per_frame_with_startup": cpu_total,
        "rss_max_kib": rss,
        "exits": run.exits(),
    }))
}

fn worst(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

fn main() {
    let o = Opts::parse();
    let frames = if o.quick { 60 } else { 300 };
    if let Err(e) = reference_python() {
        panic!("{e}");
    }
    let dir = TempDir::new("video-flow");
    log(format!(
        "making {frames} frames of 1080p H.264 with B-frames…"
    ));
    let file = dir.join("in.mp4");
    make_1080p(&file, frames, 50);
    let file = file.display().to_string();
    let nats = NatsServer::start().unwrap_or_else(|e| panic!("nats-server: {e}"));
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    let setup = Setup {
        rt: &rt,
        nats: nats.url(),
        redis: redis.url(),
        dir: &dir,
        file,
        frames,
    };
    let load_start = loadavg();
    let mut reps = Vec::new();
    for rep in 0..o.reps {
        let mut pair = Vec::new();
        for side in [Side::Reference, Side::Ours] {
            let name = format!(
                "v1080-{}-{rep}",
                if side == Side::Ours { "ours" } else { "ref" }
            );
            let r = run_once(&setup, &name, side).unwrap_or_else(|e| panic!("{e}"));
            log(format!(
                "rep {rep} {}: {:.1} fps at the sink, CPU-ms/frame {}, ok {} (load {})",
                r["side"].as_str().unwrap_or_default(),
                r["sink_fps"].as_f64().unwrap_or(f64::NAN),
                r["cpu_ms_per_frame"],
                r["ok"],
                loadavg()
            ));
            pair.push(r);
        }
        let ratio = pair[1]["sink_fps"].as_f64().unwrap_or(f64::NAN)
            / pair[0]["sink_fps"].as_f64().unwrap_or(f64::NAN);
        reps.push(json!({"rep": rep, "ratio": ratio, "reference": pair[0], "ours": pair[1], "load_end": loadavg()}));
    }
    let ratios: Vec<f64> = reps.iter().filter_map(|r| r["ratio"].as_f64()).collect();
    let identity: Vec<f64> = reps
        .iter()
        .filter_map(|r| r["ours"]["cpu_ms_per_frame"]["same"].as_f64())
        .collect();
    let worst_identity = identity.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let ok = reps
        .iter()
        .all(|r| r["ours"]["ok"] == json!(true) && r["reference"]["ok"] == json!(true));
    let doc = json!({
        "benchmark": "video_flow",
        "frames": frames,
        "file": "1920x1080 25 fps testsrc2, libx264 veryfast, 2 B-frames, GOP 50",
        "load_start": load_start,
        "load_end": loadavg(),
        "ok": ok,
        "worst_ratio": worst(&ratios),
        "target_ratio": 1.5,
        "ratio_met": worst(&ratios) >= 1.5,
        "worst_identity_cpu_ms_per_frame": worst_identity,
        "target_identity_cpu_ms_per_frame": 1.0,
        "identity_met": worst_identity <= 1.0,
        "reps": reps,
    });
    o.emit(&doc);
    println!(
        "1080p reader → identity → sink through Redis, ours ÷ reference 1.0.4: worst {:.2}× \
         (target 1.5×: {}); identity CPU {:.2} ms/frame at worst (target ≤ 1 ms: {}); runs ok: {ok}",
        worst(&ratios),
        if worst(&ratios) >= 1.5 {
            "met"
        } else {
            "not met"
        },
        worst_identity,
        if worst_identity <= 1.0 {
            "met"
        } else {
            "not met"
        },
    );
}
