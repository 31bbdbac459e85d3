//! `videoflow-worker`: parses arguments and wires; the work lives in the library and in
//! `videoflow-core`. `videoflow-worker-video` (`src/bin/video.rs`) is this same `main` with
//! the video nodes installed; this binary never names FFmpeg, so it is linked without it and
//! hands video work to that sibling (`exec`, same arguments and environment).
//!
//! Without a subcommand it runs one node replica from its `VF_*` environment (what control
//! planes start); `exec -- <command>` does the same with a component program as the node;
//! `validate` and `compile` check Flow files; `provision` and `teardown` are the
//! operator's jobs; `run` runs a whole Flow locally.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use videoflow_core::compile::compile;
use videoflow_core::errors::EXIT_USER;
use videoflow_core::load::parse_flow;
use videoflow_core::model::GpuFallback;
use videoflow_core::validate::{Diagnostic, has_errors, validate_flow};
use videoflow_worker::config::{Environment, LogConfig};
use videoflow_worker::gpu::NvidiaSmi;
use videoflow_worker::gpu::nvml::NvmlLibrary;
use videoflow_worker::runtime::Signals;

/// Runs videoflow nodes; also checks and compiles Flow files.
#[derive(Parser)]
#[command(
    name = "videoflow-worker",
    version,
    about = "videoflow worker: runs one node replica from its VF_* environment (no subcommand), or checks and compiles Flow files",
    long_about = "Runs one videoflow node replica when started without a subcommand: the node, its \
parents and its broker come from VF_* environment variables (VF_NODE_NAME, VF_NODE_KIND, \
VF_NODE_CLASS, VF_PARENT_NAMES, VF_FLOW_ID, VF_RUN_ID, VF_NATS_URL, ...), which the operator and \
the local runner render. Exit codes: 0 done, 2 user error, 3 environment, 4 flow failed, \
5 stalled, 143 SIGTERM; the reason is written as JSON to VF_TERMINATION_LOG."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Check a Flow file and print every problem with its path and remedy.
    ///
    /// Exits 0 when the flow is valid (warnings allowed), 2 when it has errors.
    Validate {
        /// The Flow file (YAML or JSON), the same document `kubectl apply` takes.
        flow: PathBuf,
    },
    /// Run a whole Flow on this machine: one worker process per replica.
    ///
    /// Validates the file (diagnostics, exit 2, nothing started), uses the Flow's broker or
    /// starts a private nats-server (and a redis-server when spec.payloadStore has no url),
    /// provisions, runs every replica with the environment the operator would render, prefixes
    /// their logs, and prints a summary. BATCH flows end by themselves; REALTIME flows run
    /// until Ctrl-C, which drains the producers first. Workers run in the run directory
    /// (--workdir); every SelfCheck node's artifact is verified at the end. Exit: 0 ok, 2 bad
    /// flow, 3 environment, 4 a node or a self-check failed, 130 interrupted.
    Run {
        /// The Flow file (YAML or JSON).
        flow: PathBuf,
        /// Keep the run's streams afterwards (default: delete them; the DLQ always stays).
        #[arg(long)]
        keep: bool,
        /// Use this broker instead of the Flow's spec.broker.url or a private nats-server.
        #[arg(long, value_name = "URL")]
        nats_url: Option<String>,
        /// Stop the run after this many seconds (control stop, then kill).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// The workers' working directory, where relative paths in params (sink files,
        /// self-check artifacts) land [default: videoflow-runs/<flow name>].
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
    },
    /// Admit and provision a compiled flow's broker objects (the operator's provisioning Job).
    ///
    /// Reads VF_FLOW_SPECS_JSON or the file at VF_FLOW_SPECS_PATH (default
    /// /etc/videoflow/specs.json), VF_FLOW_ID, VF_RUN_ID, VF_NATS_URL, VF_FLOW_TYPE and the
    /// optional VF_BLOB_REDIS_URL, VF_RUNTIME_STORE_URL, VF_PROFILE_REQUESTS_JSON,
    /// VF_ADMISSION_TIMEOUT_SECONDS, VF_STREAM_REPLICAS, VF_MAX_RETRIES. Reads the broker and
    /// stores back, admits the profiles, then creates streams, durables, EOS anchors and the
    /// DLQ idempotently. Exit: 0 ok, 2 incompatible, 3 unreachable or unobservable.
    Provision,
    /// Delete a run's streams and consumers by owner metadata (the DLQ stays).
    ///
    /// Sends the control stop first. Reads VF_NATS_URL, VF_FLOW_ID, VF_RUN_ID. Exit: 0 clean,
    /// 3 incomplete cleanup (re-run it).
    Teardown,
    /// Run one node replica whose computation is a component program (design §5 "exec").
    ///
    /// Everything after `--` is the program and its arguments; the worker starts it with
    /// VF_COMPONENT_SOCKET set, speaks the component protocol with it (docs/COMPONENTS.md) and
    /// keeps every broker duty. The rest of the environment is the node's VF_* contract, as
    /// without a subcommand. Exit codes as for a node replica.
    Exec {
        /// The component program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Print what this machine's GPU probes see and what a GPU node's grant check decides.
    ///
    /// One JSON document on stdout: NVML's inventory and nvidia-smi's enumeration (each, or
    /// why it is unobserved), whether they agree, the grant report or the refusal (§18.2),
    /// and the GPU lines the node's /metrics would serve. Reads CUDA_VISIBLE_DEVICES,
    /// NVIDIA_VISIBLE_DEVICES, VF_GPU_GRANT_JSON, VF_NVML_LIBRARY and PATH like a node.
    /// Exit: 0 the node would open, 3 it would be refused, 2 bad settings.
    Gpu {
        /// The node name the report and the metrics carry.
        #[arg(long, default_value = "gpu-check")]
        node: String,
        /// Devices requested [default: VF_GPU_COUNT, else 1].
        #[arg(long)]
        count: Option<i64>,
        /// `cpu` opens a short grant with the report, `none` refuses it [default:
        /// VF_GPU_FALLBACK, else cpu].
        #[arg(long, value_parser = ["cpu", "none"])]
        fallback: Option<String>,
        /// Require peer access between the devices (GPU-4).
        #[arg(long)]
        peer: bool,
        /// Also decode this video file as a `VideoFileReader` on the grant would (NVDEC, or
        /// the CPU and why) and compare its frames with a CPU decoding (`decode` in the
        /// document).
        #[arg(long)]
        decode: Option<PathBuf>,
    },
    /// Compile a Flow file into `specs.json` (the per-node records provisioning reads).
    ///
    /// Prints the records as JSON on stdout; exits 2 when the flow is invalid.
    Compile {
        /// The Flow file (YAML or JSON).
        flow: PathBuf,
    },
}

pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = Environment::capture();
    let command = match cli.command {
        None => return run_node(env, None),
        Some(Command::Exec { command }) => return run_node(env, Some(command)),
        Some(other) => other,
    };
    match run(env, command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ERROR [VF_CONFIG]: {e:#}");
            ExitCode::from(EXIT_USER as u8)
        }
    }
}

/// The default mode: one node replica; with `exec`, `component` is its program (put into
/// VF_COMPONENT_COMMAND_JSON, which wins over a rendered one). Panics exit 1, never 101
/// (§15.4).
fn run_node(mut env: Environment, component: Option<Vec<String>>) -> ExitCode {
    init_logging(&env);
    if videoflow_worker::nodes::registry::needs_video(
        env.get("VF_NODE_CLASS"),
        env.get("VF_NODE_PARAMS_JSON"),
    ) {
        hand_to_video_binary();
    }
    std::panic::set_hook(Box::new(|info| {
        tracing::error!("panic: {info}");
        eprintln!("panic: {info}");
        std::process::exit(1);
    }));
    if let Some(argv) = component {
        env.set(
            videoflow_worker::component::COMMAND_VAR,
            serde_json::json!(argv).to_string(),
        );
    }
    let threads = if videoflow_worker::runtime::light(&env) {
        Threads::One
    } else {
        Threads::Workers(node_worker_threads(&env))
    };
    block_on(true, threads, |signals| async move {
        videoflow_worker::runtime::run_node(&env, signals).await
    })
}

/// Replaces this process with `videoflow-worker-video` (same arguments, same environment)
/// when this binary has no video nodes and that sibling is installed next to it. Returns
/// only when it is not (or cannot be started): the work then runs here, and whatever needs
/// FFmpeg refuses with a `VF_CONFIG` error naming the missing binary.
fn hand_to_video_binary() {
    use std::os::unix::process::CommandExt as _;
    let Some(path) = videoflow_worker::nodes::video::sibling() else {
        return;
    };
    tracing::debug!(binary = %path.display(), "video work: handing over");
    let error = std::process::Command::new(&path)
        .args(std::env::args_os().skip(1))
        .exec();
    tracing::warn!(binary = %path.display(), "cannot start the video worker: {error}");
}

/// Runtime worker threads of a node replica, unless `TOKIO_WORKER_THREADS` says otherwise.
const NODE_WORKER_THREADS: usize = 1;

/// A node replica that may block runs one loop, on the thread that calls `block_on` (so
/// `block_in_place` there costs no hand-off); a light one has no workers at all
/// (`runtime::light`, [`Threads::One`]). The runtime's workers only carry its I/O (the connection, pull
/// loops, receipts and acks, keepalive, health), which one thread keeps apart from the loop:
/// a second one only added cross-thread wake-ups (identity hop at 1 KiB: 36–37 CPU-µs a
/// message with two, 32–34 with one, and 6 % more messages a second; latency unchanged;
/// docs/PERFORMANCE.md). Tokio's default is one worker per CPU the process may use, which
/// on a large host without a CPU limit means dozens of threads, each with its own stack and,
/// once it allocates, its own malloc arena (measured idle: about 25 KiB of private memory
/// per extra thread, more under load; docs/PERFORMANCE.md). `TOKIO_WORKER_THREADS`, tokio's
/// own variable, still wins when set.
fn node_worker_threads(env: &Environment) -> Option<usize> {
    if !env.passthrough(&["TOKIO_WORKER_THREADS"]).is_empty() {
        return None;
    }
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    Some(cpus.min(NODE_WORKER_THREADS))
}

/// The runtime a job runs on.
enum Threads {
    /// A current-thread runtime: the job and its I/O on the calling thread (a light node,
    /// `runtime::light`).
    One,
    /// A multi-threaded runtime (the loops call nodes with `block_in_place`) with this many
    /// workers (tokio's default when `None`).
    Workers(Option<usize>),
}

/// Runs `job` on the runtime `threads` names and turns its exit status into the
/// process's. With `signals`, SIGTERM/SIGINT set flags the job
/// reads instead of killing the process. Pull loops and timers may still be winding down
/// afterwards; the status is already decided.
fn block_on<F, Fut>(signals: bool, threads: Threads, job: F) -> ExitCode
where
    F: FnOnce(Signals) -> Fut,
    Fut: std::future::Future<Output = i32>,
{
    let mut builder = match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        Threads::Workers(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = n {
                b.worker_threads(n.max(1));
            }
            b
        }
    };
    builder.enable_all();
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let flags = Signals::default();
        if signals {
            watch_signals(&flags);
        }
        job(flags).await
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// SIGTERM quiesces (START-2), SIGINT interrupts (START-3).
fn watch_signals(signals: &Signals) {
    use tokio::signal::unix::{SignalKind, signal};
    for (kind, flag, reason) in [
        (SignalKind::terminate(), signals.quiesce.clone(), "quiesce"),
        (
            SignalKind::interrupt(),
            signals.interrupt.clone(),
            "interrupt",
        ),
    ] {
        match signal(kind) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        tracing::info!("signal: {reason}");
                        flag.set(reason);
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch {reason} signals: {e}"),
        }
    }
}

/// Human logs on stderr, or one JSON object per line when `VF_STRUCTURED_LOGS` is set.
fn init_logging(env: &Environment) {
    let log = LogConfig::from_env(env);
    let filter = tracing_subscriber::EnvFilter::try_new(&log.filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && !log.no_color;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if log.structured {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `run`: the local runner on a multi-threaded runtime; Ctrl-C drains instead of killing.
fn run_local(opts: videoflow_worker::local::RunOptions) -> ExitCode {
    init_logging(&opts.environment);
    block_on(true, Threads::Workers(None), |signals| async move {
        videoflow_worker::local::run_flow(opts, signals.interrupt.clone()).await
    })
}

/// `provision` / `teardown`: one job on a multi-threaded runtime; the exit status is the job's.
fn run_job(env: &Environment, teardown: bool) -> ExitCode {
    init_logging(env);
    if let Err(e) = env.check_unicode() {
        eprintln!("{}", e.render());
        return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1));
    }
    let vars = env.vars().clone();
    block_on(false, Threads::Workers(None), |_signals| async move {
        if teardown {
            videoflow_worker::teardown::run_teardown_job(&vars).await
        } else {
            videoflow_worker::admission::run_provision_job(&vars).await
        }
    })
}

fn run(env: Environment, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Exec { command } => Ok(run_node(env, Some(command))),
        Command::Provision => Ok(run_job(&env, false)),
        Command::Teardown => Ok(run_job(&env, true)),
        Command::Run {
            flow,
            keep,
            nats_url,
            timeout,
            workdir,
        } => Ok(run_local(videoflow_worker::local::RunOptions {
            flow,
            keep,
            nats_url,
            timeout: timeout.map(std::time::Duration::from_secs),
            workdir,
            environment: env,
        })),
        Command::Validate { flow } => {
            let text = read(&flow)?;
            let diags = match parse_flow(&text) {
                Ok(doc) => validate_flow(&doc),
                Err(diags) => diags,
            };
            report(&flow, &diags);
            if has_errors(&diags) {
                return Ok(ExitCode::from(EXIT_USER as u8));
            }
            println!("{}: valid", flow.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Gpu {
            node,
            count,
            fallback,
            peer,
            decode,
        } => {
            let mut device = videoflow_worker::config::DeviceConfig::from_environment(&env)
                .map_err(|e| anyhow::anyhow!("{}", e.render()))?;
            if let Some(c) = count {
                device.gpu_count = c;
            }
            match fallback.as_deref() {
                Some("none") => device.gpu_fallback = Some(GpuFallback::None),
                Some(_) => device.gpu_fallback = Some(GpuFallback::Cpu),
                None => {}
            }
            device.requires_peer_access |= peer;
            let nvml = NvmlLibrary::shared(device.nvml_library.as_deref());
            let smi = NvidiaSmi {
                path: device.path.clone(),
                ..NvidiaSmi::default()
            };
            if decode.is_some() {
                hand_to_video_binary();
            }
            let decode = decode.map(|p| p.to_string_lossy().into_owned());
            let (doc, opened) = videoflow_worker::gpu::inspect::inspect(
                &node,
                &device,
                nvml,
                &smi,
                decode.as_deref(),
            );
            println!("{doc}");
            Ok(if opened {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        Command::Compile { flow } => {
            let text = read(&flow)?;
            let compiled = parse_flow(&text).and_then(|doc| compile(&doc));
            match compiled {
                Ok(c) => {
                    eprintln!(
                        "flow {} run {} ({} nodes)",
                        c.flow_id,
                        c.run_id,
                        c.nodes.len()
                    );
                    println!("{}", c.specs_json());
                    Ok(ExitCode::SUCCESS)
                }
                Err(diags) => {
                    report(&flow, &diags);
                    Ok(ExitCode::from(EXIT_USER as u8))
                }
            }
        }
    }
}

fn read(path: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the Flow file {}", path.display()))
}

fn report(path: &std::path::Path, diags: &[Diagnostic]) {
    for d in diags {
        eprintln!("{}: {d}", path.display());
    }
}
