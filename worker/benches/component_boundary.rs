//! The component boundary's own cost: the exec host driven directly — no broker,
//! no runtime loop — against the real Python SDK example `videoflow_sdk.examples.identity`,
//! and the same node built in (`videoflow.processors.basic.IdentityProcessor`), on a 1 KiB
//! tensor (32×32×1 uint8, what the flow bench's identity hop carries).
//!
//! Reported, per node:
//! - round trip per call at window 1 (one request outstanding): p50 / p95;
//! - per-message cost with pipelining at windows 1, 2, 4, 8 (submit until `window` are
//!   outstanding, then take the oldest back; wall time / n);
//! - "added per message" = exec cost − built-in cost at each window, as a mean (wall / n) and
//!   as the p50 over blocks of [`BLOCK`] consecutive messages (the per-message cost's
//!   distribution at a grain that smooths the SDK's batched answers); the target is judged on
//!   the p50;
//! - CPU per message of this (worker-side) thread and of the component process, from
//!   `/proc/*/schedstat` — where the time goes.
//!
//! Why no broker: the flow bench (`flow.rs`, `component_boundary`) measures the boundary inside
//! a whole hop, where NATS round trips and two other workers on the same cores swamp a few
//! microseconds; this isolates the boundary itself.
//!
//! `cargo bench -p videoflow-worker --bench component_boundary -- [--out FILE] [--reps N]`;
//! `VF_BENCH_QUICK=1` (or `--quick`) runs a short version. The Python is `VF_SDK_PYTHON`
//! (`scripts/env.sh`), with `PYTHONPATH` set to this checkout's `sdk/python`. Prints one JSON
//! object on stdout; progress on stderr.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use videoflow_core::envelope::Payload;
use videoflow_core::model::NodeKind;
use videoflow_core::value::Tensor;
use videoflow_worker::component::{ComponentHost, ExecNode, ExecProcessor, HostOptions};
use videoflow_worker::nodes::{
    BuiltNode, EnvelopeInfo, Input, InputInfo, NodeContext, Processor, build_node,
};

type R<T> = Result<T, String>;

const WINDOWS: [usize; 4] = [1, 2, 4, 8];
const TARGET_ADDED_US: f64 = 30.0;
/// Messages per block of the per-message cost distribution.
const BLOCK: u64 = 100;

struct Opts {
    quick: bool,
    reps: usize,
    out: Option<PathBuf>,
}

impl Opts {
    fn parse() -> Self {
        let mut o = Opts {
            quick: std::env::var_os("VF_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0"),
            reps: 3,
            out: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--reps" => o.reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(3),
                "--out" => o.out = args.next().map(PathBuf::from),
                _ => {} // cargo bench passes `--bench`
            }
        }
        if o.quick {
            o.reps = 1;
        }
        o
    }
}

fn log(msg: impl AsRef<str>) {
    eprintln!("[component_boundary] {}", msg.as_ref());
}

fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn sdk_python() -> R<PathBuf> {
    let path = std::env::var_os("VF_SDK_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/videoflow/sdkvenv/bin/python"))
        })
        .ok_or("VF_SDK_PYTHON is not set (source scripts/env.sh)")?;
    if !path.exists() {
        return Err(format!(
            "{} not found: run scripts/install-deps (the SDK venv)",
            path.display()
        ));
    }
    Ok(path)
}

/// Run time (ns) of a thread so far: the first field of `/proc/<pid>/schedstat`.
fn run_ns(pid: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i.min(s.len() - 1)]
}

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// The input the runtime would hand the node: a 1 KiB tensor with its envelope info.
fn input() -> (Vec<Input>, Vec<(String, Option<InputInfo>)>) {
    let tensor = Tensor {
        shape: vec![32, 32, 1],
        dtype: "uint8".into(),
        data: (0..1024u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into(),
    };
    let info = EnvelopeInfo {
        event_ts: Some(1.7e9),
        metadata: Default::default(),
        trace_id: "0123456789abcdef0123456789abcdef".into(),
        seq: 42,
        replica_id: 0,
    };
    (
        vec![Input::Present(Payload::Tensor(tensor))],
        vec![("src".into(), Some(InputInfo::Single(info)))],
    )
}

fn begin(ctx: &mut NodeContext, info: &[(String, Option<InputInfo>)], i: u64) {
    ctx.begin_group(Some(format!("{i:032x}")), info.to_vec());
}

/// What one pass measured.
struct Pass {
    /// Wall µs / n.
    per_msg_us: f64,
    /// Per-call round trips in µs (window 1 only).
    rtts: Vec<f64>,
    /// µs per message of each block of [`BLOCK`] consecutive completions.
    blocks: Vec<f64>,
    /// This thread's CPU ns.
    self_ns: u64,
    /// The component's CPU ns.
    comp_ns: u64,
}

/// Records the end of completion `done` (1-based): closes a block every [`BLOCK`].
fn block_mark(blocks: &mut Vec<f64>, block_start: &mut Instant, done: u64) {
    if done.is_multiple_of(BLOCK) {
        let now = Instant::now();
        blocks.push((now - *block_start).as_secs_f64() * 1e6 / BLOCK as f64);
        *block_start = now;
    }
}

/// One pass of `n` messages at `window` through `node`.
fn pass(node: &mut dyn Processor, n: u64, window: usize, component_pid: Option<&str>) -> R<Pass> {
    let (inputs, info) = input();
    let mut ctx = NodeContext::new("bench", "r1", "same", 0);
    let mut rtts = Vec::new();
    let mut blocks = Vec::new();
    let self_before = run_ns("thread-self").unwrap_or(0);
    let comp_before = component_pid.and_then(run_ns).unwrap_or(0);
    let started = Instant::now();
    let mut block_start = started;
    if window <= 1 || node.max_in_flight() <= 1 {
        for i in 0..n {
            let t = Instant::now();
            begin(&mut ctx, &info, i);
            let out = node.process(&mut ctx, &inputs).map_err(|e| e.render())?;
            let _ = (
                ctx.take_output_partition_key(),
                ctx.take_output_event_timestamp(),
            );
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box(out);
            block_mark(&mut blocks, &mut block_start, i + 1);
        }
    } else {
        let window = window.min(node.max_in_flight());
        let (mut sent, mut done) = (0u64, 0u64);
        while done < n {
            while sent < n && sent - done < window as u64 {
                begin(&mut ctx, &info, sent);
                node.submit(&mut ctx, &inputs).map_err(|e| e.render())?;
                sent += 1;
            }
            let out = node.complete(&mut ctx).map_err(|e| e.render())?;
            let _ = (
                ctx.take_output_partition_key(),
                ctx.take_output_event_timestamp(),
            );
            std::hint::black_box(out);
            done += 1;
            block_mark(&mut blocks, &mut block_start, done);
        }
    }
    let wall = started.elapsed();
    let self_ns = run_ns("thread-self")
        .unwrap_or(0)
        .saturating_sub(self_before);
    let comp_ns = component_pid
        .and_then(run_ns)
        .unwrap_or(0)
        .saturating_sub(comp_before);
    Ok(Pass {
        per_msg_us: wall.as_secs_f64() * 1e6 / n as f64,
        rtts,
        blocks,
        self_ns,
        comp_ns,
    })
}

fn builtin() -> R<Box<dyn Processor>> {
    match build_node(
        "videoflow.processors.basic.IdentityProcessor",
        NodeKind::Processor,
        &serde_json::Map::new(),
    )
    .map_err(|e| e.render())?
    {
        BuiltNode::Processor(p) => Ok(p),
        _ => Err("IdentityProcessor is not a processor".into()),
    }
}

fn exec() -> R<(ExecProcessor, String)> {
    let python = sdk_python()?;
    let sdk = repo_root().join("sdk/python");
    // `env` sets the SDK under test on the component's path (the worker's own environment
    // is passed through otherwise); `exec` keeps the pid the host reports the Python's.
    let argv = vec![
        "env".into(),
        format!("PYTHONPATH={}", sdk.display()),
        python.display().to_string(),
        "-m".into(),
        "videoflow_sdk.examples.identity".into(),
    ];
    let host = ComponentHost::start(
        &argv,
        HostOptions {
            start_timeout: Duration::from_secs(60),
            call_timeout: Some(Duration::from_secs(60)),
        },
    )
    .map_err(|e| e.render())?;
    let pid = host.pid().map(|p| p.to_string()).unwrap_or_default();
    log(format!(
        "component pid {pid}, Hello.max_in_flight {}, host window {}",
        host.hello().max_in_flight,
        host.max_in_flight()
    ));
    let mut node = ExecProcessor(ExecNode::new(host, Default::default(), "{}".to_owned()));
    let mut ctx = NodeContext::new("bench", "r1", "same", 0);
    node.open(&mut ctx).map_err(|e| e.render())?;
    Ok((node, pid))
}

fn main() {
    let o = Opts::parse();
    match run(&o) {
        Ok(doc) => {
            let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
            if let Some(path) = &o.out
                && let Err(e) = std::fs::write(path, &text)
            {
                log(format!("cannot write {}: {e}", path.display()));
                std::process::exit(1);
            }
            println!("{text}");
        }
        Err(e) => {
            log(format!("failed: {e}"));
            std::process::exit(1);
        }
    }
}

fn run(o: &Opts) -> R<Json> {
    let n: u64 = if o.quick { 3_000 } else { 20_000 };
    let warmup = n / 10;
    let mut builtin_node = builtin()?;
    let (mut exec_node, pid) = exec()?;
    pass(builtin_node.as_mut(), warmup, 1, None)?;
    pass(&mut exec_node, warmup, 8, Some(&pid))?;

    let mut b_rtt = Vec::new();
    let mut b_cost = Vec::new();
    let mut b_blocks = Vec::new();
    let mut e_blocks: Vec<Vec<f64>> = vec![Vec::new(); WINDOWS.len()];
    let mut e_rtt = Vec::new();
    let mut e_cost: Vec<Vec<f64>> = vec![Vec::new(); WINDOWS.len()];
    let mut e_self: Vec<Vec<f64>> = vec![Vec::new(); WINDOWS.len()];
    let mut e_comp: Vec<Vec<f64>> = vec![Vec::new(); WINDOWS.len()];
    let mut reps = Vec::new();
    for rep in 0..o.reps {
        // Interleaved, so a noisy moment on the shared cores hits both.
        let Pass {
            per_msg_us: cost,
            rtts,
            blocks,
            ..
        } = pass(builtin_node.as_mut(), n, 1, None)?;
        b_cost.push(cost);
        b_rtt.extend(rtts);
        b_blocks.extend(blocks);
        let mut row = json!({"rep": rep, "builtin_per_msg_us": cost});
        for (k, &w) in WINDOWS.iter().enumerate() {
            let Pass {
                per_msg_us: cost,
                rtts,
                blocks,
                self_ns,
                comp_ns,
            } = pass(&mut exec_node, n, w, Some(&pid))?;
            e_blocks[k].extend(blocks);
            e_cost[k].push(cost);
            e_self[k].push(self_ns as f64 / 1e3 / n as f64);
            e_comp[k].push(comp_ns as f64 / 1e3 / n as f64);
            if w == 1 {
                e_rtt.extend(rtts);
            }
            row[format!("exec_w{w}_per_msg_us")] = json!(cost);
            log(format!(
                "rep {rep} window {w}: exec {cost:.1} µs/msg (worker thread {:.1}, component {:.1} µs CPU/msg)",
                self_ns as f64 / 1e3 / n as f64,
                comp_ns as f64 / 1e3 / n as f64
            ));
        }
        reps.push(row);
    }
    let closed = exec_node.close(&mut NodeContext::new("bench", "r1", "same", 0));
    if let Err(e) = closed {
        log(format!("close: {}", e.render()));
    }

    let builtin_cost = median(&b_cost);
    let builtin_block_p50 = median(&b_blocks);
    let mut windows = serde_json::Map::new();
    let mut best = f64::INFINITY;
    let mut best_mean = f64::INFINITY;
    for (k, &w) in WINDOWS.iter().enumerate() {
        let cost = median(&e_cost[k]);
        let added = cost - builtin_cost;
        let block_p50 = median(&e_blocks[k]);
        let added_p50 = block_p50 - builtin_block_p50;
        best = best.min(added_p50);
        best_mean = best_mean.min(added);
        windows.insert(
            w.to_string(),
            json!({
                "per_msg_us": cost,
                "added_per_msg_us": added,
                "per_msg_us_p50": block_p50,
                "per_msg_us_p95": quantile(&e_blocks[k], 0.95),
                "added_per_msg_us_p50": added_p50,
                "msgs_s": 1e6 / cost,
                "worker_thread_cpu_us_per_msg": median(&e_self[k]),
                "component_cpu_us_per_msg": median(&e_comp[k]),
                "runs_per_msg_us": e_cost[k],
            }),
        );
    }
    let b50 = quantile(&b_rtt, 0.5);
    let e50 = quantile(&e_rtt, 0.5);
    let doc = json!({
        "bench": "component_boundary",
        "quick": o.quick,
        "n": n,
        "reps": o.reps,
        "payload_bytes": 1024,
        "component": "videoflow_sdk.examples.identity (Python SDK)",
        "builtin": {
            "node": "videoflow.processors.basic.IdentityProcessor",
            "round_trip_us": {"p50": b50, "p95": quantile(&b_rtt, 0.95)},
            "per_msg_us": builtin_cost,
            "per_msg_us_p50": builtin_block_p50,
        },
        "exec": {
            "round_trip_us": {"p50": e50, "p95": quantile(&e_rtt, 0.95)},
            "added_round_trip_us_p50": e50 - b50,
            "windows": windows,
        },
        "block_messages": BLOCK,
        "added_per_msg_us_best_window": best,
        "added_per_msg_us_mean_best_window": best_mean,
        "target_added_per_msg_us": TARGET_ADDED_US,
        "target_met": best <= TARGET_ADDED_US,
        "runs": reps,
    });
    log(format!(
        "round trip p50 built-in {b50:.2} µs, exec {e50:.1} µs; best added per message p50 {best:.1} µs, mean {best_mean:.1} µs (target ≤ {TARGET_ADDED_US})"
    ));
    Ok(doc)
}
