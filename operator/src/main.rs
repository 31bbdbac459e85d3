//! `videoflow-operator`: parses arguments and wires; the logic lives in the library.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use videoflow_operator::controller::admission::admit;
use videoflow_operator::render::{self, RenderConfig};

/// The videoflow operator: runs Flow resources (videoflow.io/v1alpha1) on Kubernetes.
///
/// `run` starts the controller; `crd` prints the Flow CRD and `render` renders a Flow's child
/// objects offline.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller: reconcile Flow resources until SIGTERM or Ctrl-C.
    ///
    /// Logs are JSON lines on stderr; metrics (Prometheus text) and a liveness probe are
    /// served on --metrics-addr (/metrics, /healthz). With --leader-election-namespace
    /// several replicas may run: they elect a leader on a Lease there, and only the leader
    /// reconciles.
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Print the Flow CustomResourceDefinition as YAML.
    ///
    /// Generated from the Rust types, so it always matches this binary.
    ///
    /// Refresh the committed copy (a test fails when it drifts):
    ///   cargo run -p videoflow-operator -- crd > crds/flows.videoflow.io.yaml
    ///
    /// Install it into a cluster:
    ///   videoflow-operator crd | kubectl apply --server-side -f -
    #[command(verbatim_doc_comment)]
    Crd,
    /// Print the Kubernetes objects the operator would create for a Flow, as YAML.
    ///
    /// Works offline: the controller's own admission (validation, the autoscaling rules)
    /// and rendering. An invalid Flow prints every problem with its path and remedy and
    /// exits 2. The output can be inspected, diffed, or applied by hand:
    ///   videoflow-operator render -f flow.yaml --nats-url nats://nats:4222 \
    ///     | kubectl apply --server-side -f -
    #[command(verbatim_doc_comment)]
    Render {
        /// The Flow file (YAML or JSON), as given to `kubectl apply`; `-` reads stdin.
        #[arg(short = 'f', long = "file", value_name = "FLOW")]
        file: PathBuf,
        /// Worker image when the Flow's spec.image.worker is absent.
        #[arg(long, value_name = "IMAGE", default_value = render::DEFAULT_WORKER_IMAGE)]
        image: String,
        /// Pull policy when the Flow's spec.image.pullPolicy is absent.
        #[arg(long, value_name = "POLICY", default_value = "IfNotPresent")]
        image_pull_policy: String,
        /// NATS URL when the Flow names no broker (spec.broker.url / urlFrom).
        #[arg(long, value_name = "URL")]
        nats_url: Option<String>,
        /// Namespace when the Flow's metadata has none.
        #[arg(long, short = 'n', value_name = "NAMESPACE", default_value = "default")]
        namespace: String,
    },
}

/// Options of `run`; each also reads a `VF_OPERATOR_*` variable so a Deployment sets them
/// in its environment.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "VF_OPERATOR_NAMESPACE", value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// Flows reconciled at once.
    #[arg(long, env = "VF_OPERATOR_CONCURRENCY", default_value_t = 4)]
    concurrency: u16,
    /// Threads of the async runtime. Reconciles wait on the API server, not on a CPU, and
    /// every thread costs its stack and, under glibc, a malloc arena of its own (about 1 MiB
    /// resident each with 100 Flows): the default, 1, runs everything on the main thread, so
    /// the operator's memory is the same on a 4-core and on a 128-core node (a runtime would
    /// otherwise start one thread per core).
    #[arg(
        long,
        env = "VF_OPERATOR_WORKER_THREADS",
        default_value_t = DEFAULT_WORKER_THREADS,
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    worker_threads: u16,
    /// Address of the metrics and health endpoint; `[::]` listens on IPv6 and IPv4 alike.
    #[arg(long, env = "VF_OPERATOR_METRICS_ADDR", default_value = "[::]:8080")]
    metrics_addr: std::net::SocketAddr,
    /// Worker image when a Flow's spec.image.worker is absent.
    #[arg(long, env = "VF_OPERATOR_WORKER_IMAGE", default_value = render::DEFAULT_WORKER_IMAGE)]
    image: String,
    /// Pull policy when a Flow's spec.image.pullPolicy is absent.
    #[arg(
        long,
        env = "VF_OPERATOR_IMAGE_PULL_POLICY",
        default_value = "IfNotPresent"
    )]
    image_pull_policy: String,
    /// NATS URL when a Flow names no broker.
    #[arg(long, env = "VF_OPERATOR_NATS_URL", value_name = "URL")]
    nats_url: Option<String>,
    /// Seconds a pod may stay unschedulable before its Flow is Stalled.
    #[arg(
        long,
        env = "VF_OPERATOR_UNSCHEDULABLE_GRACE_SECONDS",
        default_value_t = 300
    )]
    unschedulable_grace_seconds: u64,
    /// Seconds between reads of the broker's consumer lag into status.nodes[].demand;
    /// 0 turns the demand observer off.
    #[arg(
        long,
        env = "VF_OPERATOR_DEMAND_INTERVAL_SECONDS",
        default_value_t = 30
    )]
    demand_interval_seconds: u64,
    /// This replica's name in Events and its identity in the leader Lease (the pod name,
    /// from the downward API).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// Elect a leader on a Lease in this namespace (the operator's own); only the leader
    /// reconciles. Absent: no election, this process reconciles (one replica only).
    #[arg(
        long,
        env = "VF_OPERATOR_LEADER_ELECTION_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    leader_election_namespace: Option<String>,
    /// The leader Lease's name.
    #[arg(
        long,
        env = "VF_OPERATOR_LEADER_ELECTION_LEASE",
        default_value = "videoflow-operator"
    )]
    leader_election_lease: String,
    /// Seconds the Lease stays valid after its last renewal: how long a killed leader's
    /// successor waits at most.
    #[arg(
        long,
        env = "VF_OPERATOR_LEADER_ELECTION_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    leader_election_lease_duration_seconds: u64,
    /// Seconds a leader keeps reconciling without a successful renewal (below the lease
    /// duration).
    #[arg(
        long,
        env = "VF_OPERATOR_LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
        default_value_t = 10
    )]
    leader_election_renew_deadline_seconds: u64,
    /// Seconds between renewals by the leader and tries by the others.
    #[arg(
        long,
        env = "VF_OPERATOR_LEADER_ELECTION_RETRY_PERIOD_SECONDS",
        default_value_t = 2
    )]
    leader_election_retry_period_seconds: u64,
}

/// Async runtime threads unless `--worker-threads` says otherwise: one, the main thread.
const DEFAULT_WORKER_THREADS: u16 = 1;

/// Threads for blocking work (a DNS lookup on a new connection, a file read): the runtime's
/// default (512) only bounds a burst the operator never has.
const MAX_BLOCKING_THREADS: usize = 8;

/// This replica's identity in the Lease: its pod name, else host name and process id.
fn identity(instance: Option<&str>) -> String {
    match instance.filter(|i| !i.is_empty()) {
        Some(i) => i.to_owned(),
        None => format!(
            "{}-{}",
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "operator".to_owned()),
            std::process::id()
        ),
    }
}

/// Starts the controller and the metrics endpoint; returns after a graceful shutdown.
fn run(args: RunArgs) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::time::Duration;
    use videoflow_operator::controller::leader::{self, ElectionConfig, Elector};
    use videoflow_operator::controller::{self, Context, Metrics, RunConfig, StatusConfig};

    tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut builder = match args.worker_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(usize::from(n));
            b
        }
    };
    let runtime = builder
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let election = args
        .leader_election_namespace
        .clone()
        .map(|namespace| ElectionConfig {
            namespace,
            name: args.leader_election_lease.clone(),
            identity: identity(args.instance.as_deref()),
            lease_duration: Duration::from_secs(args.leader_election_lease_duration_seconds),
            renew_deadline: Duration::from_secs(args.leader_election_renew_deadline_seconds),
            retry_period: Duration::from_secs(args.leader_election_retry_period_seconds),
        });
    if let Some(e) = &election {
        e.validate()?;
    }
    runtime.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .context("connecting to the Kubernetes API (in-cluster or kubeconfig)")?;
        let client_for_lease = client.clone();
        let metrics = Arc::new(Metrics::new());
        let listener = videoflow_operator::listen::bind(args.metrics_addr)
            .await
            .with_context(|| format!("binding the metrics address {}", args.metrics_addr))?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_metrics(listener, metrics.clone(), stop_rx));
        let ctx = Context::new(
            client,
            RenderConfig {
                worker_image: args.image,
                image_pull_policy: args.image_pull_policy,
                namespace: args
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_owned()),
                nats_url: args.nats_url,
            },
            StatusConfig {
                unschedulable_grace: std::time::Duration::from_secs(
                    args.unschedulable_grace_seconds,
                ),
            },
            metrics,
            controller::system_clock(),
            args.instance,
        );
        let ctx = Arc::new(match args.demand_interval_seconds {
            0 => ctx,
            secs => ctx.with_demand(Arc::new(controller::demand::DemandObserver::new(
                std::time::Duration::from_secs(secs),
                controller::demand::DEFAULT_OBSERVE_TIMEOUT,
            ))),
        });
        tracing::info!(namespace = ?args.namespace, concurrency = args.concurrency, "starting");
        let config = RunConfig {
            namespace: args.namespace,
            concurrency: args.concurrency,
        };
        match election {
            None => controller::run(ctx, config, shutdown_signal()).await,
            Some(election) => {
                let elector = Elector::new(client_for_lease, election)?;
                leader::run_while_leading(elector, shutdown_signal(), |stop| {
                    controller::run(ctx.clone(), config.clone(), async move {
                        let _ = stop.await;
                    })
                })
                .await;
            }
        }
        tracing::info!("controller stopped; stopping the metrics endpoint");
        let _ = stop_tx.send(());
        server.await.context("metrics endpoint task")??;
        Ok(())
    })
}

/// Resolves on SIGTERM (what the kubelet sends) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

/// `/metrics` (Prometheus text) and `/healthz`, until `stop` fires.
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: std::sync::Arc<videoflow_operator::controller::Metrics>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = stop.await;
        })
        .await
        .context("serving metrics")
}

/// Exit status of a Flow that is not valid (as `videoflow-worker validate`): the user's input.
const EXIT_INVALID_FLOW: u8 = 2;

fn main() -> std::process::ExitCode {
    match run_command(Cli::parse().command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run_command(command: Command) -> anyhow::Result<std::process::ExitCode> {
    let text = match command {
        Command::Run(args) => return run(args).map(|()| std::process::ExitCode::SUCCESS),
        Command::Crd => videoflow_operator::crd::crd_yaml(),
        Command::Render {
            file,
            image,
            image_pull_policy,
            nats_url,
            namespace,
        } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the Flow from stdin")?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let flow = match render::load::flow_from_text(&text) {
                Ok(flow) => flow,
                Err(diags) => {
                    eprintln!("{} is not a valid Flow:", file.display());
                    for d in &diags {
                        eprintln!("{d}");
                    }
                    return Ok(std::process::ExitCode::from(EXIT_INVALID_FLOW));
                }
            };
            let config = RenderConfig {
                worker_image: image,
                image_pull_policy,
                namespace,
                nats_url,
            };
            // The controller's admission, so `render` refuses exactly what the cluster would.
            match admit(&flow, &config) {
                Ok(rendered) => rendered.to_yaml()?,
                Err(problems) => {
                    eprintln!("{} is not admitted:", file.display());
                    for p in &problems {
                        eprintln!("{p}");
                    }
                    return Ok(std::process::ExitCode::from(EXIT_INVALID_FLOW));
                }
            }
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok(std::process::ExitCode::SUCCESS)
}
