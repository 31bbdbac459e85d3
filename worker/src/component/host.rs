//! The exec host: starts a component program, accepts its connection on a private Unix
//! socket, and supervises every call (start-up timeout, per-call deadline, crash detection).
//!
//! Why synchronous I/O on a blocking socket: the runtime already calls node methods on a
//! thread that may block (`block_in_place`), one group at a time, so a call is "write one
//! frame, read one frame" with the socket's read timeout as the deadline — no second runtime,
//! no task hand-off on the per-message path.
//!
//! Failure classes (how the runtime's ladder handles them):
//! - the program cannot be started (not found, not executable) — `VF_CONFIG`, exit 2: a
//!   restart cannot fix it;
//! - it exits before connecting, or does not connect within the start-up timeout, or dies,
//!   closes the socket or misses a deadline during a call — `VF_WORKER_FATAL`: the input in
//!   flight is handed back (NAK), the worker exits 4 and the platform restarts it (the
//!   process is killed first so nothing keeps computing behind the worker's back);
//! - it breaks the protocol (garbage frames, an answer to the wrong request, no common
//!   version) — `VF_NODE_CONTRACT`, exit 2.
//!
//! Every failure is sticky: once the component is gone, every later call fails the same way.

use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use videoflow_core::component::negotiate;
use videoflow_core::component::proto::{
    ComponentMessage, Hello, Result as CallResult, WorkerMessage, component_message, worker_message,
};
use videoflow_core::errors::{ErrorCode, VfError};

use super::frame::{FrameError, read_frame, write_frame};

/// The variable naming the socket the component connects to.
pub const SOCKET_VAR: &str = "VF_COMPONENT_SOCKET";
/// Seconds from starting the program to its Hello (default 60).
pub const START_TIMEOUT_VAR: &str = "VF_COMPONENT_START_TIMEOUT_SECONDS";
/// Seconds one call (open, next, process, consume, close) may take (default 300, 0 = none).
pub const CALL_TIMEOUT_VAR: &str = "VF_COMPONENT_CALL_TIMEOUT_SECONDS";

/// How long the host waits for a component that was told to close, or that broke, to exit
/// before killing it.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// The host's deadlines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostOptions {
    /// From starting the program to its Hello.
    pub start_timeout: Duration,
    /// Per call; `None` waits forever.
    pub call_timeout: Option<Duration>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            start_timeout: Duration::from_secs(60),
            call_timeout: Some(Duration::from_secs(300)),
        }
    }
}

impl HostOptions {
    /// Reads [`START_TIMEOUT_VAR`] and [`CALL_TIMEOUT_VAR`] (unset or empty: the defaults).
    pub fn from_env(vars: &std::collections::BTreeMap<String, String>) -> Result<Self, VfError> {
        let seconds = |var: &str| -> Result<Option<f64>, VfError> {
            match vars.get(var).map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Some)
                    .ok_or_else(|| {
                        VfError::new(
                            ErrorCode::Config,
                            format!("{var} must be a number of seconds >= 0, got '{v}'."),
                        )
                        .with_remedy(format!("Set {var} to e.g. 60, or unset it."))
                        .with_context("variable", var)
                    }),
            }
        };
        let mut opts = HostOptions::default();
        if let Some(s) = seconds(START_TIMEOUT_VAR)? {
            opts.start_timeout = Duration::from_secs_f64(s.max(0.1));
        }
        if let Some(s) = seconds(CALL_TIMEOUT_VAR)? {
            opts.call_timeout = (s > 0.0).then(|| Duration::from_secs_f64(s));
        }
        Ok(opts)
    }
}

/// A running component and its connection.
pub struct ComponentHost {
    program: String,
    child: Option<Child>,
    stream: UnixStream,
    dir: PathBuf,
    hello: Hello,
    version: u32,
    next_id: u64,
    opts: HostOptions,
    failed: Option<VfError>,
}

impl std::fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentHost")
            .field("program", &self.program)
            .field("pid", &self.pid())
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl ComponentHost {
    /// Starts `argv` with [`SOCKET_VAR`] set (and the worker's own environment), waits for its
    /// connection and its Hello, and negotiates the protocol version.
    pub fn start(argv: &[String], opts: HostOptions) -> Result<Self, VfError> {
        let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
            return Err(VfError::new(ErrorCode::Config, "the exec component has no command.")
                .with_remedy("Set component.exec.command in the Flow (or pass it after `videoflow-worker exec --`)."));
        };
        let dir = private_dir().map_err(|e| {
            VfError::new(
                ErrorCode::ResourceExhausted,
                format!("cannot create the component socket directory: {e}"),
            )
            .with_remedy("Check that TMPDIR (or /tmp) is writable.")
        })?;
        let path = dir.join("component.sock");
        let listener = UnixListener::bind(&path)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                VfError::new(
                    ErrorCode::ResourceExhausted,
                    format!("cannot listen on {}: {e}", path.display()),
                )
                .with_remedy("Check that TMPDIR is writable and its path is short (Unix socket paths are limited to about 100 bytes).")
            })?;
        let spawned = Command::new(program)
            .args(&argv[1..])
            .env(SOCKET_VAR, &path)
            .stdin(Stdio::null())
            // Its own process group: a terminal's Ctrl-C reaches the worker, which then
            // closes the component in order.
            .process_group(0)
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(VfError::new(
                    ErrorCode::Config,
                    format!("cannot start the component program '{program}': {e}"),
                )
                .with_remedy("Check component.exec.command: the program must exist in the image (or on PATH locally) and be executable.")
                .with_context("command", serde_json::json!(argv)));
            }
        };
        let pid = child.id();
        tracing::info!(program = %program, pid, socket = %path.display(), "component started; waiting for its connection");
        let mut partial = Partial {
            child: Some(child),
            dir: Some(dir),
        };
        let deadline = Instant::now() + opts.start_timeout;
        let stream = accept(&listener, &mut partial, deadline, program, opts)?;
        drop(listener);
        let _ = std::fs::remove_file(&path);
        let hello = read_hello(&stream, &mut partial, deadline, program)?;
        let Some(version) = negotiate(&hello.protocol_versions) else {
            partial.kill();
            return Err(VfError::new(
                ErrorCode::NodeContract,
                format!(
                    "the component '{program}' speaks protocol versions {:?}; this worker speaks {:?}.",
                    hello.protocol_versions,
                    videoflow_core::component::PROTOCOL_VERSIONS
                ),
            )
            .with_remedy("Use an SDK release that speaks the worker's protocol version, or a worker image that speaks the SDK's."));
        };
        tracing::info!(
            pid = hello.pid,
            sdk = %hello.sdk,
            component = %hello.component,
            devices = %hello.visible_devices.join(","),
            version,
            max_in_flight = hello.max_in_flight,
            "component connected"
        );
        Ok(ComponentHost {
            program: program.clone(),
            child: partial.child.take(),
            stream,
            dir: partial.dir.take().unwrap_or_default(),
            hello,
            version,
            next_id: 1,
            opts,
            failed: None,
        })
    }

    /// The component's Hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The component's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends one request and waits for its result (per-call deadline). `what` names the call
    /// in errors (`open`, `process`, …).
    pub fn call(&mut self, body: worker_message::Body, what: &str) -> Result<CallResult, VfError> {
        self.call_with(body, what, self.opts.call_timeout)
    }

    fn call_with(
        &mut self,
        body: worker_message::Body,
        what: &str,
        timeout: Option<Duration>,
    ) -> Result<CallResult, VfError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let id = self.next_id;
        self.next_id += 1;
        let msg = WorkerMessage {
            request_id: id,
            body: Some(body),
        };
        if let Err(e) = write_frame(&mut self.stream, &msg) {
            return Err(self.broken(&format!("could not be sent {what} request {id} ({e})")));
        }
        if let Err(e) = self.stream.set_read_timeout(timeout) {
            return Err(self.broken(&format!("socket error before {what} ({e})")));
        }
        match read_frame::<_, ComponentMessage>(&mut self.stream) {
            Ok(Some(ComponentMessage {
                body: Some(component_message::Body::Result(r)),
            })) if r.request_id == id => Ok(r),
            Ok(Some(ComponentMessage {
                body: Some(component_message::Body::Result(r)),
            })) => Err(self.violated(&format!(
                "answered request {} while request {id} ({what}) was the only one outstanding",
                r.request_id
            ))),
            Ok(Some(_)) => Err(self.violated(&format!(
                "sent something other than a Result for request {id} ({what})"
            ))),
            Ok(None) => Err(self.broken(&format!("closed the connection during {what}"))),
            Err(e) if e.is_timeout() => Err(self.hung(what, timeout)),
            Err(FrameError::Io(e)) => Err(self.broken(&format!("failed during {what} ({e})"))),
            Err(e) => Err(self.violated(&format!("sent a bad frame for {what}: {e}"))),
        }
    }

    /// Sends Close (bounded wait), then waits for the program to exit, killing it after a
    /// grace period. A component that already failed is only reaped.
    pub fn close(&mut self) -> Result<Option<CallResult>, VfError> {
        let result = if self.failed.is_none() {
            let timeout = self
                .opts
                .call_timeout
                .map_or(EXIT_GRACE * 6, |t| t.min(EXIT_GRACE * 6));
            let r = self.call_with(
                worker_message::Body::Close(Default::default()),
                "close",
                Some(timeout),
            );
            self.failed = Some(VfError::new(
                ErrorCode::WorkerFatal,
                format!("the component '{}' was closed", self.program),
            ));
            Some(r)
        } else {
            None
        };
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(mut child) = self.child.take() {
            match wait_for_exit(&mut child, EXIT_GRACE) {
                Some(status) if !status.success() => {
                    tracing::warn!(pid = child.id(), "component exited: {}", describe(status));
                }
                Some(_) => {}
                None => {
                    tracing::warn!(
                        pid = child.id(),
                        "component did not exit within {EXIT_GRACE:?} of close; killing it"
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        result.transpose()
    }

    /// The component died or closed its end: reap it (killing it if it lingers) and fail
    /// sticky as `VF_WORKER_FATAL`.
    fn broken(&mut self, during: &str) -> VfError {
        let status = self
            .child
            .as_mut()
            .map(|c| wait_for_exit(c, Duration::from_secs(2)));
        let how = match status {
            Some(Some(status)) => describe(status),
            Some(None) => {
                self.kill();
                "was still running (killed)".to_owned()
            }
            None => "is gone".to_owned(),
        };
        self.child = None;
        self.fail(
            VfError::new(
                ErrorCode::WorkerFatal,
                format!("the component '{}' {how}: it {during}.", self.program),
            )
            .with_remedy("Its own output above says why. The input in flight is handed back and redelivered; the worker exits so the platform restarts it with a fresh component."),
        )
    }

    /// A missed deadline: kill the component and fail sticky as `VF_WORKER_FATAL`.
    fn hung(&mut self, what: &str, timeout: Option<Duration>) -> VfError {
        self.kill();
        let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
        self.fail(
            VfError::new(
                ErrorCode::WorkerFatal,
                format!(
                    "the component '{}' did not answer {what} within {secs} s (killed).",
                    self.program
                ),
            )
            .with_remedy(format!(
                "Make the call faster, or raise {CALL_TIMEOUT_VAR} (0 disables the deadline)."
            ))
            .with_context("variable", CALL_TIMEOUT_VAR),
        )
    }

    /// A protocol violation: kill the component and fail sticky as `VF_NODE_CONTRACT`.
    fn violated(&mut self, what: &str) -> VfError {
        self.kill();
        self.fail(
            VfError::new(
                ErrorCode::NodeContract,
                format!(
                    "the component '{}' broke the component protocol: it {what}.",
                    self.program
                ),
            )
            .with_remedy("Use the videoflow SDK for your language, or follow docs/COMPONENTS.md (one Result per request, echoing its request_id)."),
        )
    }

    fn fail(&mut self, e: VfError) -> VfError {
        self.failed = Some(e.clone());
        e
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ComponentHost {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What start-up owns until the host exists: killed and removed on an early return.
struct Partial {
    child: Option<Child>,
    dir: Option<PathBuf>,
}

impl Partial {
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        self.kill();
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Accepts the component's connection, watching the process and the start-up deadline.
fn accept(
    listener: &UnixListener,
    partial: &mut Partial,
    deadline: Instant,
    program: &str,
    opts: HostOptions,
) -> Result<UnixStream, VfError> {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(|e| {
                    VfError::new(ErrorCode::WorkerFatal, format!("component socket: {e}"))
                })?;
                return Ok(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(VfError::new(
                    ErrorCode::WorkerFatal,
                    format!("accepting the component's connection failed: {e}"),
                ));
            }
        }
        if let Some(child) = partial.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            partial.child = None;
            return Err(VfError::new(
                ErrorCode::WorkerFatal,
                format!(
                    "the component '{program}' {} before connecting to {SOCKET_VAR}.",
                    describe(status)
                ),
            )
            .with_remedy("Its own output above says why (a missing module, a bad argument…). A component must connect to the socket named by VF_COMPONENT_SOCKET and send Hello; the videoflow SDK does."));
        }
        if Instant::now() >= deadline {
            partial.kill();
            return Err(VfError::new(
                ErrorCode::WorkerFatal,
                format!(
                    "the component '{program}' did not connect within {} s (killed).",
                    opts.start_timeout.as_secs_f64()
                ),
            )
            .with_remedy(format!("A component must connect to the socket named by {SOCKET_VAR} and send Hello first; if it is only slow to start, raise {START_TIMEOUT_VAR}."))
            .with_context("variable", START_TIMEOUT_VAR));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads the first frame, which must be a Hello, before the start-up deadline.
fn read_hello(
    stream: &UnixStream,
    partial: &mut Partial,
    deadline: Instant,
    program: &str,
) -> Result<Hello, VfError> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let _ = stream.set_read_timeout(Some(left));
    let mut reader = stream;
    match read_frame::<_, ComponentMessage>(&mut reader) {
        Ok(Some(ComponentMessage {
            body: Some(component_message::Body::Hello(h)),
        })) => Ok(h),
        Ok(Some(_)) => {
            partial.kill();
            Err(VfError::new(
                ErrorCode::NodeContract,
                format!("the component '{program}' broke the component protocol: its first frame is not a Hello."),
            )
            .with_remedy("Send Hello first (docs/COMPONENTS.md); the videoflow SDK does."))
        }
        Ok(None) | Err(FrameError::Io(_)) => {
            partial.kill();
            Err(VfError::new(
                ErrorCode::WorkerFatal,
                format!("the component '{program}' connected but sent no Hello before its start-up deadline or exit."),
            )
            .with_remedy(format!("Send Hello as soon as the socket is connected; raise {START_TIMEOUT_VAR} if start-up is slow.")))
        }
        Err(e) => {
            partial.kill();
            Err(VfError::new(
                ErrorCode::NodeContract,
                format!("the component '{program}' broke the component protocol: {e}."),
            ))
        }
    }
}

/// A private (0700) directory for the socket, short enough for a Unix socket path.
fn private_dir() -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    let base = if base.as_os_str().len() > 60 {
        Path::new("/tmp").to_path_buf()
    } else {
        base
    };
    let dir = base.join(format!(
        "vf-comp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Waits up to `grace` for `child` to exit.
fn wait_for_exit(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// `exited with status 3` / `was killed by signal 9`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "exited".to_owned(),
    }
}
