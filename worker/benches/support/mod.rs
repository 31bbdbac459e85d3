//! What the benchmarks share. Every bench: `/proc` sampling, the checkout's root and the
//! reference venv's interpreter. The video benches also: media made with the `ffmpeg` CLI and a
//! Flow provisioned on a given nats-server and run as real worker processes (ours, or the
//! reference 1.0.4's from its venv). Figures are measurements, never assertions.

#![allow(dead_code)] // each bench target uses its own part

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use videoflow_core::compile::{CompiledFlow, compile};
use videoflow_core::load::parse_flow;
use videoflow_core::model::FlowDocument;
use videoflow_worker::broker;
use videoflow_worker::provision::{node_vars, provision};

pub type R<T> = Result<T, String>;

/// Command-line options every video bench takes: `--quick`, `--reps N`, `--out FILE`.
pub struct Opts {
    pub quick: bool,
    pub reps: usize,
    pub out: Option<PathBuf>,
    /// `--minutes M` (the memory bench's run length).
    pub minutes: Option<f64>,
}

impl Opts {
    pub fn parse() -> Opts {
        let mut o = Opts {
            quick: false,
            reps: 3,
            out: None,
            minutes: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--reps" => o.reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(3),
                "--out" => o.out = args.next().map(PathBuf::from),
                "--minutes" => o.minutes = args.next().and_then(|v| v.parse().ok()),
                _ => {}
            }
        }
        if o.quick {
            o.reps = 1;
        }
        o
    }

    /// Writes `doc` to `--out`, or prints it.
    pub fn emit(&self, doc: &Json) {
        let text = serde_json::to_string_pretty(doc).unwrap_or_default();
        match &self.out {
            Some(p) => std::fs::write(p, &text).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            None => println!("{text}"),
        }
    }
}

pub fn log(msg: impl AsRef<str>) {
    eprintln!("[video] {}", msg.as_ref());
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A private directory under the system's temporary one, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("vf-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        TempDir(dir)
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

/// `frames` of 1920×1080 `testsrc2` at 25 fps as H.264 (libx264 `veryfast`, 2 B-frames,
/// a keyframe every `gop` frames) in MP4.
pub fn make_1080p(path: &Path, frames: usize, gop: usize) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=1920x1080:rate=25")
        .args(["-frames:v", &frames.to_string(), "-c:v", "libx264"])
        .args(["-preset", "veryfast", "-bf", "2", "-g", &gop.to_string()])
        .args(["-pix_fmt", "yuv420p"])
        .arg(path)
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "ffmpeg could not make the bench file (scripts/install-deps installs it)"
    );
}

/// `sysconf(_SC_CLK_TCK)` as `getconf` reports it.
pub fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(key)?
            .trim_start_matches(':')
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// User + system CPU ticks of a live process (all its threads).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The checkout's root (benches run in their crate's directory).
pub fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The reference venv's interpreter: `$VF_REF_PYTHON` (scripts/env.sh sets it), else
/// `~/.cache/videoflow/refvenv/bin/python`.
pub fn reference_python() -> R<PathBuf> {
    let python = std::env::var_os("VF_REF_PYTHON")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/videoflow/refvenv/bin/python")
        });
    if python.is_file() {
        Ok(python)
    } else {
        Err(format!(
            "the reference venv is missing ({}): run scripts/install-deps",
            python.display()
        ))
    }
}

/// Which worker runs a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `videoflow-worker` (this build, or `VF_BENCH_WORKER_BIN`).
    Ours,
    /// `python -m videoflow.worker` from the reference venv; `videoflow.rs.*` classes run as
    /// their Python twins in `tests/conformance/interop_nodes.py`.
    Reference,
}

/// The command that runs one node replica on `side`: `vars` as `node_vars` renders them, its
/// termination message written to `termination`, then `extra` variables; no stdin. On the
/// reference's side the test nodes run as their Python twins from `tests/conformance`, as
/// `worker/tests/interop_flows.rs` runs them.
pub fn worker_command(
    side: Side,
    mut vars: BTreeMap<String, String>,
    termination: &Path,
    extra: &[(&str, &str)],
) -> R<Command> {
    let mut cmd = match side {
        Side::Reference => {
            if let Some(class) = vars.get("VF_NODE_CLASS")
                && class.starts_with("videoflow.rs.")
            {
                let short = class.rsplit('.').next().unwrap_or(class).to_owned();
                vars.insert("VF_NODE_CLASS".into(), format!("interop_nodes.{short}"));
            }
            let mut cmd = Command::new(reference_python()?);
            cmd.args(["-m", "videoflow.worker"])
                .env_clear()
                .env("PYTHONPATH", repo_root().join("tests/conformance"))
                .env("PYTHONUNBUFFERED", "1");
            cmd
        }
        Side::Ours => {
            // `VF_BENCH_WORKER_BIN` runs another build of the worker (e.g. another profile).
            let bin = std::env::var("VF_BENCH_WORKER_BIN")
                .unwrap_or_else(|_| env!("CARGO_BIN_EXE_videoflow-worker").to_owned());
            let mut cmd = Command::new(bin);
            cmd.env_clear();
            cmd
        }
    };
    cmd.envs(vars)
        .env("VF_TERMINATION_LOG", termination)
        .env("NO_COLOR", "1")
        .env("VF_LOG", "info")
        // An exec component's program (python3 with the SDK) is found on PATH.
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(extra.iter().copied())
        .stdin(Stdio::null());
    Ok(cmd)
}

/// One worker process and what was sampled of it.
pub struct Proc {
    pub node: String,
    pub child: Child,
    pub spawned: Instant,
    pub exit: Option<(Option<i32>, Instant)>,
    pub ticks: u64,
    pub rss_max_kib: u64,
}

/// A provisioned Flow and its worker processes.
pub struct FlowRun {
    pub dir: PathBuf,
    nats_url: String,
    doc: FlowDocument,
    pub flow: CompiledFlow,
    pub procs: Vec<Proc>,
}

impl FlowRun {
    /// Compiles `yaml` (`{{DIR}}` and `{{REDIS}}` replaced) and provisions it on `nats_url`.
    pub fn new(
        rt: &tokio::runtime::Runtime,
        nats_url: &str,
        redis_url: &str,
        yaml: &str,
        dir: &Path,
    ) -> R<FlowRun> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let text = yaml
            .replace("{{DIR}}", &dir.display().to_string())
            .replace("{{REDIS}}", redis_url);
        let doc = parse_flow(&text).map_err(|d| format!("flow does not parse: {d:?}"))?;
        let flow = compile(&doc).map_err(|d| format!("flow does not compile: {d:?}"))?;
        rt.block_on(async {
            let b = broker::connect(nats_url).await.map_err(|e| e.to_string())?;
            provision(&b, &doc, &flow)
                .await
                .map_err(|e| e.render().to_string())
        })?;
        Ok(FlowRun {
            dir: dir.to_owned(),
            nats_url: nats_url.to_owned(),
            doc,
            flow,
            procs: Vec::new(),
        })
    }

    /// Starts `node` (replica 0) on `side` with `extra` variables; its log goes to
    /// `<dir>/<node>.log`.
    pub fn spawn(&mut self, node: &str, side: Side, extra: &[(&str, &str)]) -> R<()> {
        let vars = node_vars(&self.doc, &self.flow, node, 0, &self.nats_url)
            .map_err(|e| e.render().to_string())?;
        let mut cmd = worker_command(
            side,
            vars,
            &self.dir.join(format!("{node}.termination")),
            extra,
        )?;
        let log = File::create(self.dir.join(format!("{node}.log"))).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(Stdio::from(log)).stderr(Stdio::from(err));
        let child = cmd.spawn().map_err(|e| format!("spawn worker: {e}"))?;
        self.procs.push(Proc {
            node: node.to_owned(),
            child,
            spawned: Instant::now(),
            exit: None,
            ticks: 0,
            rss_max_kib: 0,
        });
        Ok(())
    }

    /// Samples every live process and reaps the ones that ended; how many still run.
    pub fn poll(&mut self) -> usize {
        let mut running = 0;
        for p in &mut self.procs {
            if p.exit.is_some() {
                continue;
            }
            let pid = p.child.id();
            if let Some(t) = cpu_ticks(pid) {
                p.ticks = p.ticks.max(t);
            }
            if let Some(rss) = status_kib(pid, "VmRSS") {
                p.rss_max_kib = p.rss_max_kib.max(rss);
            }
            match p.child.try_wait() {
                Ok(Some(status)) => p.exit = Some((status.code(), Instant::now())),
                Ok(None) => running += 1,
                Err(_) => p.exit = Some((None, Instant::now())),
            }
        }
        running
    }

    /// Samples every 10 ms until every process ended; `false` on timeout.
    pub fn wait_all(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.poll() > 0 {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Samples for `d`, every 10 ms.
    pub fn idle(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.poll();
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The CPU ticks sampled last of `node`'s process (0 when none).
    pub fn ticks(&self, node: &str) -> u64 {
        self.proc(node).map_or(0, |p| p.ticks)
    }

    /// The process of `node`.
    pub fn proc(&self, node: &str) -> Option<&Proc> {
        self.procs.iter().find(|p| p.node == node)
    }

    /// Whether every process exited 0.
    pub fn all_ok(&self) -> bool {
        self.procs
            .iter()
            .all(|p| matches!(p.exit, Some((Some(0), _))))
    }

    /// Every process's exit code, and the last log lines of a failed one.
    pub fn exits(&self) -> Json {
        self.procs
            .iter()
            .map(|p| {
                let code = p.exit.and_then(|e| e.0);
                let tail = (code != Some(0)).then(|| {
                    let text = std::fs::read_to_string(self.dir.join(format!("{}.log", p.node)))
                        .unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(8)..].join("\n")
                });
                json!({"node": p.node, "code": code, "log_tail": tail})
            })
            .collect()
    }

    /// The records a JSONL sink wrote to `<dir>/<name>`.
    pub fn jsonl(&self, name: &str) -> Vec<Json> {
        std::fs::read_to_string(self.dir.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for FlowRun {
    fn drop(&mut self) {
        for p in &mut self.procs {
            if p.exit.is_none() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }
}
