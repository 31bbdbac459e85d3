//! Health and metrics (§12, HEALTH-1..4): the state the loops update and the HTTP server
//! Kubernetes probes and scrapes.
//!
//! - [`metrics`] — the registry, its exposition text, and the scrape-side helpers
//!   ([`metrics::parse_histogram`], [`metrics::quantile_bounds`]).
//! - [`HealthState`] — readiness, liveness beats and the registry behind one lock.
//! - [`serve`] — the axum server on `0.0.0.0:VF_HEALTH_PORT`.
//!
//! Why a process-wide state ([`install`] / [`global`]): a worker process runs exactly one
//! node replica, and the loops, the settler and the publisher all report into it; a global
//! keeps those report points one line each instead of threading a handle through every
//! layer. Nothing reads it but the server and tests; when it is not installed every report is
//! a no-op.
//!
//! Liveness never depends on the broker (a broker outage must not turn into a restart storm):
//! it is the age of the loop's last beat. Readiness may: it is "`open()` returned" and the
//! broker connection is up — or the worker finished cleanly and holds (`VF_ON_FINISH=hold`):
//! it needs no broker any more, so a broker outage must not turn it unready.

pub mod metrics;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use videoflow_core::errors::{ErrorCode, VfError};

pub use metrics::{Metrics, Throughput};

/// A beat older than this fails `/healthz` (HEALTH-2).
pub const LIVENESS_STALL: Duration = Duration::from_secs(60);

type BrokerProbe = Box<dyn Fn() -> bool + Send + Sync>;
type ExtraLines = Arc<dyn Fn() -> String + Send + Sync>;

/// Readiness, liveness and metrics of one worker, shared by the loops and the server.
pub struct HealthState {
    metrics: Mutex<Metrics>,
    ready: AtomicBool,
    finished: AtomicBool,
    started: Instant,
    last_beat_ms: AtomicU64,
    broker_up: Mutex<Option<BrokerProbe>>,
    extra: Mutex<Option<ExtraLines>>,
    /// Lines a node sets about itself (a reader's decoder), by key, in first-set order.
    info: Mutex<Vec<(&'static str, String)>>,
}

impl std::fmt::Debug for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl HealthState {
    /// A fresh state for `node`; the first beat is taken now (HEALTH-2: at startup, before
    /// the messenger connects).
    pub fn new(node: &str) -> Self {
        HealthState {
            metrics: Mutex::new(Metrics::new(node)),
            ready: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            started: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            broker_up: Mutex::new(None),
            extra: Mutex::new(None),
            info: Mutex::new(Vec::new()),
        }
    }

    /// Records that `open()` returned (HEALTH-1).
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Records that the loop ended cleanly and the worker holds until it is stopped: ready
    /// from now on, whatever the broker connection does.
    pub fn mark_finished(&self) {
        self.ready.store(true, Ordering::Relaxed);
        self.finished.store(true, Ordering::Relaxed);
    }

    /// Sets how readiness learns whether the broker connection is up.
    pub fn set_broker_probe(&self, probe: impl Fn() -> bool + Send + Sync + 'static) {
        if let Ok(mut p) = self.broker_up.lock() {
            *p = Some(Box::new(probe));
        }
    }

    /// The loop is alive: a publish, a receive call or a termination check (HEALTH-2).
    pub fn beat(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_beat_ms.store(ms, Ordering::Relaxed);
    }

    /// `/readyz`: `open()` returned and the broker connection (when probed) is up, or the
    /// worker finished and holds.
    pub fn is_ready(&self) -> bool {
        if self.finished.load(Ordering::Relaxed) {
            return true;
        }
        self.ready.load(Ordering::Relaxed)
            && self
                .broker_up
                .lock()
                .map(|p| p.as_ref().is_none_or(|f| f()))
                .unwrap_or(true)
    }

    /// How long ago the last beat was.
    pub fn since_last_beat(&self) -> Duration {
        let last = Duration::from_millis(self.last_beat_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    /// `/healthz`: the last beat is younger than [`LIVENESS_STALL`].
    pub fn is_live(&self) -> bool {
        let now = self.started.elapsed();
        let last = Duration::from_millis(self.last_beat_ms.load(Ordering::Relaxed));
        now.saturating_sub(last) < LIVENESS_STALL
    }

    /// Runs `f` on the registry under the lock.
    pub fn with_metrics<T>(&self, f: impl FnOnce(&mut Metrics) -> T) -> T {
        let mut guard = self
            .metrics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// Sets lines appended to `/metrics` after the HEALTH-3 ones (a GPU node's device
    /// figures). `lines` may block (it reads a driver): the server calls it off the async
    /// runtime. Each line it returns ends in `\n`.
    pub fn set_extra_metrics(&self, lines: impl Fn() -> String + Send + Sync + 'static) {
        if let Ok(mut e) = self.extra.lock() {
            *e = Some(Arc::new(lines));
        }
    }

    /// Sets (or replaces) the `/metrics` lines a node keeps under `key` — what it runs on,
    /// e.g. a video reader's decoder — appended after the HEALTH-3 lines. Each line ends in
    /// `\n`.
    pub fn set_info(&self, key: &'static str, lines: String) {
        let mut info = self
            .info
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match info.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = lines,
            None => info.push((key, lines)),
        }
    }

    /// The `/metrics` body without the extra lines.
    pub fn render(&self) -> String {
        self.with_metrics(|m| m.render())
    }

    /// The whole `/metrics` body: HEALTH-3, the node's info lines, then the extra lines.
    /// Blocking.
    pub fn render_all(&self) -> String {
        let base = self.render();
        let mut extra: String = self
            .info
            .lock()
            .map(|i| i.iter().map(|(_, lines)| lines.as_str()).collect())
            .unwrap_or_default();
        extra.push_str(
            &self
                .extra
                .lock()
                .ok()
                .and_then(|e| e.clone())
                .map(|f| f())
                .unwrap_or_default(),
        );
        join_exposition(base, &extra)
    }
}

/// HEALTH-3's body (`\n` when empty) followed by more lines, still one final `\n`.
fn join_exposition(base: String, extra: &str) -> String {
    if extra.is_empty() {
        base
    } else if base == "\n" {
        extra.to_owned()
    } else {
        base + extra
    }
}

static STATE: OnceLock<Arc<HealthState>> = OnceLock::new();

/// Installs the process-wide state (once; later calls keep the first). Returns it.
pub fn install(state: HealthState) -> Arc<HealthState> {
    STATE.get_or_init(|| Arc::new(state)).clone()
}

/// The process-wide state, if installed.
pub fn global() -> Option<&'static Arc<HealthState>> {
    STATE.get()
}

/// Beats the installed state (no-op when none).
pub fn beat() {
    if let Some(s) = global() {
        s.beat();
    }
}

/// Marks the installed state ready: `open()` returned (HEALTH-1).
pub fn mark_ready() {
    if let Some(s) = global() {
        s.mark_ready();
    }
}

/// Marks the installed state finished: the worker holds after a clean end.
pub fn mark_finished() {
    if let Some(s) = global() {
        s.mark_finished();
    }
}

/// Sets the installed state's info lines under `key` (no-op when none).
pub fn set_info(key: &'static str, lines: String) {
    if let Some(s) = global() {
        s.set_info(key, lines);
    }
}

/// Updates the installed registry (no-op when none).
pub fn record(f: impl FnOnce(&mut Metrics)) {
    if let Some(s) = global() {
        s.with_metrics(f);
    }
}

/// `[::]:port` accepting IPv4 too (`IPV6_V6ONLY` off, whatever the host's default).
fn dual_stack_listener(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    let addr = std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// A running health server; dropping it (or [`HealthServer::stop`]) shuts it down.
#[derive(Debug)]
pub struct HealthServer {
    /// The bound address (the port is the real one when 0 was asked for in tests).
    pub local_addr: std::net::SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl HealthServer {
    /// Stops accepting and ends the server task (START-1 step 12); dropping does the same.
    pub fn stop(self) {}
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Binds `port` on every address, IPv4 and IPv6 (one dual-stack socket; plain `0.0.0.0` where
/// the host has no IPv6), and serves `/readyz`, `/healthz`, `/metrics` (HEALTH-1..4) on the
/// current runtime. A port that cannot be bound is ResourceUnavailable (exit 3).
///
/// Why dual-stack: on an IPv6-only or dual-stack cluster the kubelet probes the pod's IPv6
/// address, which a `0.0.0.0` listener never answers.
pub async fn serve(state: Arc<HealthState>, port: u16) -> Result<HealthServer, VfError> {
    let listener = match dual_stack_listener(port) {
        Ok(l) => l,
        Err(v6) => {
            tracing::debug!("no IPv6 listener ({v6}); IPv4 only");
            tokio::net::TcpListener::bind(("0.0.0.0", port))
                .await
                .map_err(|e| {
                    VfError::new(
                        ErrorCode::ResourceUnavailable,
                        format!("The health server cannot listen on port {port}: {e}."),
                    )
                    .with_remedy(
                        "Free the port or set VF_HEALTH_PORT to another one (0 disables the server).",
                    )
                })?
        }
    };
    let local_addr = listener.local_addr().map_err(|e| {
        VfError::new(
            ErrorCode::ResourceUnavailable,
            format!("The health server socket has no address: {e}."),
        )
    })?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let state = state.clone();
        async move {
            if uri.path_and_query().map_or("", |p| p.as_str()) == "/metrics" {
                let (status, body) =
                    match tokio::task::spawn_blocking(move || state.render_all()).await {
                        Ok(body) => (StatusCode::OK, body),
                        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("metrics: {e}")),
                    };
                return (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response();
            }
            respond(&state, &uri)
        }
    });
    tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = rx.await;
        });
        if let Err(e) = server.await {
            tracing::warn!("health server ended: {e}");
        }
    });
    tracing::info!(%local_addr, "health server listening");
    Ok(HealthServer {
        local_addr,
        shutdown: Some(tx),
    })
}

/// HEALTH-1..4: the match is on the exact request target, so a query string is a 404.
fn respond(state: &HealthState, uri: &Uri) -> Response {
    let target = uri.path_and_query().map_or("", |p| p.as_str());
    let (status, body) = match target {
        "/readyz" if state.is_ready() => (StatusCode::OK, "ready".to_owned()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "not-ready".to_owned()),
        "/healthz" if state.is_live() => (StatusCode::OK, "ok".to_owned()),
        "/healthz" => (StatusCode::SERVICE_UNAVAILABLE, "stalled".to_owned()),
        "/metrics" => (StatusCode::OK, state.render()),
        _ => (StatusCode::NOT_FOUND, "not found".to_owned()),
    };
    (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_1_ready_only_after_open_and_while_the_broker_is_up() {
        let s = HealthState::new("n");
        assert!(!s.is_ready());
        s.mark_ready();
        assert!(s.is_ready());
        let up = Arc::new(AtomicBool::new(false));
        let probe = up.clone();
        s.set_broker_probe(move || probe.load(Ordering::Relaxed));
        assert!(!s.is_ready(), "broker down ⇒ not ready");
        up.store(true, Ordering::Relaxed);
        assert!(s.is_ready());
    }

    #[test]
    fn a_finished_worker_stays_ready_without_the_broker() {
        let s = HealthState::new("n");
        let up = Arc::new(AtomicBool::new(true));
        let probe = up.clone();
        s.set_broker_probe(move || probe.load(Ordering::Relaxed));
        s.mark_finished();
        up.store(false, Ordering::Relaxed);
        assert!(s.is_ready(), "a held worker needs no broker");
    }

    #[test]
    fn info_lines_follow_health_3_are_replaced_by_key_and_precede_the_extra_lines() {
        let s = HealthState::new("cam");
        s.with_metrics(|m| m.incr("messages_published", 1));
        s.set_extra_metrics(|| {
            "videoflow_gpu_observed{node=\"cam\",reason=\"missing\"} 0\n".into()
        });
        s.set_info(
            "video_decoder",
            "videoflow_video_decoder{node=\"cam\",decoder=\"h264_cuvid\"} 1\n".into(),
        );
        s.set_info(
            "video_decoder",
            "videoflow_video_decoder{node=\"cam\",decoder=\"h264\"} 1\n".into(),
        );
        assert_eq!(
            s.render_all(),
            "videoflow_messages_published_total{node=\"cam\"} 1\n\
             videoflow_video_decoder{node=\"cam\",decoder=\"h264\"} 1\n\
             videoflow_gpu_observed{node=\"cam\",reason=\"missing\"} 0\n"
        );
        assert_eq!(
            s.render(),
            "videoflow_messages_published_total{node=\"cam\"} 1\n"
        );
    }

    #[test]
    fn health_2_a_fresh_state_is_live() {
        let s = HealthState::new("n");
        assert!(s.is_live());
        s.beat();
        assert!(s.is_live());
    }

    #[tokio::test]
    async fn health_4_exact_paths_query_strings_404_and_text_plain() {
        let state = Arc::new(HealthState::new("n"));
        let server = serve(state.clone(), 0).await.expect("binds");
        let port = server.local_addr.port();
        let get = |path: &'static str| async move {
            tokio::task::spawn_blocking(move || http_get(port, path))
                .await
                .expect("join")
        };
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        state.mark_ready();
        let ready = get("/readyz").await;
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        assert!(
            ready
                .to_ascii_lowercase()
                .contains("content-type: text/plain\r\n")
        );
        assert!(ready.to_ascii_lowercase().contains("content-length: 5\r\n"));
        assert!(ready.ends_with("\r\n\r\nready"));
        assert!(get("/healthz").await.ends_with("\r\n\r\nok"));
        assert!(get("/metrics").await.ends_with("\r\n\r\n\n"));
        assert!(get("/metrics?x=1").await.starts_with("HTTP/1.1 404"));
        assert!(get("/nope").await.ends_with("not found"));
        server.stop();
    }

    /// A GPU node's scrape on a machine without NVML: the HEALTH-3 lines, then the GPU lines
    /// saying unobserved (with the reason) — no utilisation or memory figure, never zeros.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_metrics_without_nvml_say_unobserved_on_the_scrape() {
        use crate::gpu::nvml::{NvmlLibrary, NvmlSource};
        let state = Arc::new(HealthState::new("det"));
        state.with_metrics(|m| m.incr("messages_received", 2));
        let lib = NvmlLibrary::at("/nonexistent/videoflow-test/libnvidia-ml.so.1");
        let ids = vec!["GPU-aaaa1111".to_owned()];
        state.set_extra_metrics(move || {
            crate::gpu::metrics::render("det", &ids, &lib.samples(&ids))
        });
        let server = serve(state.clone(), 0).await.expect("binds");
        let port = server.local_addr.port();
        let body = tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
            .await
            .expect("join");
        let expected_reason = if cfg!(feature = "nvml") {
            "missing"
        } else {
            "unavailable"
        };
        assert!(
            body.ends_with(&format!(
                "\r\n\r\nvideoflow_messages_received_total{{node=\"det\"}} 2\n\
                 videoflow_gpu_observed{{node=\"det\",device=\"GPU-aaaa1111\",reason=\"{expected_reason}\"}} 0\n"
            )),
            "{body}"
        );
        assert!(
            !body.contains("utilization") && !body.contains("memory_used"),
            "{body}"
        );
        server.stop();
    }

    /// The server answers on IPv4 and IPv6 loopback alike (dual-stack), where the host has
    /// IPv6.
    #[tokio::test]
    async fn health_server_listens_dual_stack() {
        let state = Arc::new(HealthState::new("n"));
        let server = serve(state, 0).await.expect("binds");
        let port = server.local_addr.port();
        let v4 = tokio::task::spawn_blocking(move || http_get(port, "/healthz"))
            .await
            .expect("v4");
        assert!(v4.starts_with("HTTP/1.1 200"), "{v4}");
        if std::net::TcpListener::bind(("::1", 0)).is_ok() {
            let v6 = tokio::task::spawn_blocking(move || {
                use std::io::{Read, Write};
                let mut s = std::net::TcpStream::connect(("::1", port)).expect("connect over IPv6");
                write!(
                    s,
                    "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .expect("write");
                let mut out = String::new();
                s.read_to_string(&mut out).expect("read");
                out
            })
            .await
            .expect("v6");
            assert!(v6.starts_with("HTTP/1.1 200"), "{v6}");
        }
    }

    fn http_get(port: u16, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    }
}
