//! The exec host: starts a component program, accepts its connection on a private Unix
//! socket, and supervises every call (start-up timeout, per-call deadline, crash detection).
//!
//! Why synchronous I/O on a blocking socket: the runtime already calls node methods on a
//! thread that may block (`block_in_place`), so a call is "write one frame, read until its
//! answer" — no second runtime, no task hand-off on the per-message path.
//!
//! **Pipelining.** The host keeps up to [`ComponentHost::max_in_flight`] requests outstanding
//! (the component's `Hello.max_in_flight`, capped at [`HOST_MAX_IN_FLIGHT`]): [`send`] writes
//! a request and returns its id, [`wait`] reads answers — in whatever order the component
//! sends them, each matched to its outstanding request by id — until the one asked for is
//! in. Answers are read through a [`FrameReader`], so one `read` takes in every answer that
//! is ready. Writes time out in short slices: when the component is not reading (it is busy
//! writing answers into a full socket), the host takes in those answers before it writes on,
//! so neither side can wait for the other with both socket buffers full.
//!
//! [`send`]: ComponentHost::send
//! [`wait`]: ComponentHost::wait
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

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write as _};
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prost::Message as _;
use videoflow_core::component::negotiate;
use videoflow_core::component::proto::{
    ComponentMessage, Hello, Result as CallResult, WorkerMessage, component_message, worker_message,
};
use videoflow_core::errors::{ErrorCode, VfError};

use super::frame::{FrameError, FrameReader, MAX_FRAME_BYTES, read_frame};
use crate::config::ComponentConfig;
use crate::config::component::{
    CALL_TIMEOUT_VAR, DEFAULT_CALL_TIMEOUT, DEFAULT_START_TIMEOUT, START_TIMEOUT_VAR,
};

/// The variable naming the socket the component connects to.
pub const SOCKET_VAR: &str = "VF_COMPONENT_SOCKET";

/// How long the host waits for a component that was told to close, or that broke, to exit
/// before killing it.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// The most requests the host keeps outstanding to one component, whatever its Hello says:
/// more would only queue inside the component (its inputs unacked, holding the broker's
/// credit) without overlapping anything more.
pub const HOST_MAX_IN_FLIGHT: usize = 16;

/// How long one blocked write waits before the host takes in the component's answers (a
/// component busy writing answers into a full socket is not reading requests).
const WRITE_SLICE: Duration = Duration::from_millis(2);

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
            start_timeout: DEFAULT_START_TIMEOUT,
            call_timeout: Some(DEFAULT_CALL_TIMEOUT),
        }
    }
}

impl From<&ComponentConfig> for HostOptions {
    fn from(c: &ComponentConfig) -> Self {
        HostOptions {
            start_timeout: c.start_timeout,
            call_timeout: c.call_timeout,
        }
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
    /// Requests written and not answered yet, oldest first.
    outstanding: VecDeque<Outstanding>,
    /// Answers read before their caller asked for them, by request id.
    arrived: HashMap<u64, CallResult>,
    reader: FrameReader,
    /// One request's frame, reused.
    write_buf: Vec<u8>,
    max_in_flight: usize,
}

/// A request on its way through the component.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    id: u64,
    what: &'static str,
    /// When it was written; `None` waits forever.
    deadline: Option<Instant>,
    timeout: Option<Duration>,
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
        // Reads wake up at least this often to check the deadlines of what is outstanding;
        // writes give up a slice at a time to take in answers (see the module doc).
        let tick = opts.call_timeout.map_or(Duration::from_secs(1), |t| {
            (t / 8).clamp(Duration::from_millis(1), Duration::from_secs(1))
        });
        if let Err(e) = stream
            .set_read_timeout(Some(tick))
            .and_then(|()| stream.set_write_timeout(Some(WRITE_SLICE)))
        {
            partial.kill();
            return Err(VfError::new(
                ErrorCode::WorkerFatal,
                format!("component socket: {e}"),
            ));
        }
        let max_in_flight = usize::try_from(hello.max_in_flight)
            .unwrap_or(usize::MAX)
            .clamp(1, HOST_MAX_IN_FLIGHT);
        tracing::info!(
            pid = hello.pid,
            sdk = %hello.sdk,
            component = %hello.component,
            devices = %hello.visible_devices.join(","),
            version,
            max_in_flight = hello.max_in_flight,
            pipelined = max_in_flight,
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
            outstanding: VecDeque::new(),
            arrived: HashMap::new(),
            reader: FrameReader::default(),
            write_buf: Vec::new(),
            max_in_flight,
        })
    }

    /// How many requests this host keeps outstanding at most: the component's
    /// `Hello.max_in_flight` (0 counts as 1), capped at [`HOST_MAX_IN_FLIGHT`].
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// Requests sent and not taken back with [`ComponentHost::wait`] yet.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len() + self.arrived.len()
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
    pub fn call(
        &mut self,
        body: worker_message::Body,
        what: &'static str,
    ) -> Result<CallResult, VfError> {
        let id = self.send(body, what)?;
        self.wait(id)
    }

    /// Writes one request without waiting for its answer and returns its id; at most
    /// [`ComponentHost::max_in_flight`] may be outstanding (more is the caller's bug, refused
    /// before anything is written). The call's deadline counts from now.
    pub fn send(&mut self, body: worker_message::Body, what: &'static str) -> Result<u64, VfError> {
        self.send_with(body, what, self.opts.call_timeout)
    }

    fn send_with(
        &mut self,
        body: worker_message::Body,
        what: &'static str,
        timeout: Option<Duration>,
    ) -> Result<u64, VfError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.in_flight() >= self.max_in_flight && what != "close" {
            return Err(VfError::new(
                ErrorCode::Unknown,
                format!(
                    "internal: a {what} request would exceed the {} outstanding the component '{}' accepts",
                    self.max_in_flight, self.program
                ),
            ));
        }
        let id = self.next_id;
        self.next_id += 1;
        let msg = WorkerMessage {
            request_id: id,
            body: Some(body),
        };
        let mut buf = std::mem::take(&mut self.write_buf);
        buf.clear();
        let len = msg.encoded_len();
        if u32::try_from(len).map_or(true, |n| n > MAX_FRAME_BYTES) {
            self.write_buf = buf;
            return Err(VfError::new(
                ErrorCode::Poison,
                format!(
                    "the {what} request is {len} bytes, over the component protocol's {MAX_FRAME_BYTES}-byte frame limit"
                ),
            ));
        }
        buf.reserve(4 + len);
        buf.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
        let encoded = msg.encode(&mut buf);
        let request = Outstanding {
            id,
            what,
            deadline: timeout.map(|t| Instant::now() + t),
            timeout,
        };
        self.outstanding.push_back(request);
        let written = match encoded {
            Ok(()) => self.write_all(&buf, request),
            Err(e) => Err(self.violated(&format!("could not be sent {what} ({e})"))),
        };
        if buf.capacity() <= 1 << 20 {
            self.write_buf = buf; // keep the allocation, not a large frame's
        }
        written.map(|()| id)
    }

    /// Writes one frame; while the component does not take it, takes in its answers.
    fn write_all(&mut self, buf: &[u8], request: Outstanding) -> Result<(), VfError> {
        let mut off = 0;
        while off < buf.len() {
            match (&self.stream).write(&buf[off..]) {
                Ok(0) => {
                    return Err(self.broken(&format!(
                        "could not be sent {} request {}",
                        request.what, request.id
                    )));
                }
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    self.take_in_ready()?;
                    if request.deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(self.hung(request.what, request.timeout));
                    }
                }
                Err(e) => {
                    return Err(self.broken(&format!(
                        "could not be sent {} request {} ({e})",
                        request.what, request.id
                    )));
                }
            }
        }
        Ok(())
    }

    /// Takes in every answer the socket holds now, without waiting.
    fn take_in_ready(&mut self) -> Result<(), VfError> {
        if let Err(e) = self.stream.set_nonblocking(true) {
            return Err(self.broken(&format!("socket error ({e})")));
        }
        let result = loop {
            match self.reader.fill(&mut &self.stream) {
                Ok(0) => break Err(self.closed()),
                Ok(_) => {
                    if let Err(e) = self.accept_buffered(None) {
                        break Err(e);
                    }
                }
                Err(e) if e.is_timeout() => break Ok(()),
                Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(FrameError::Io(e)) => {
                    break Err(
                        self.broken(&format!("failed while requests were outstanding ({e})"))
                    );
                }
                Err(e) => break Err(self.violated(&format!("sent a bad frame: {e}"))),
            }
        };
        if result.is_ok()
            && let Err(e) = self.stream.set_nonblocking(false)
        {
            return Err(self.broken(&format!("socket error ({e})")));
        }
        result
    }

    /// Waits for the answer to request `id` (sent by [`ComponentHost::send`]), taking in the
    /// answers to other outstanding requests as they come. Fails when any outstanding
    /// request misses its deadline.
    pub fn wait(&mut self, id: u64) -> Result<CallResult, VfError> {
        loop {
            if let Some(r) = self.arrived.remove(&id) {
                return Ok(r);
            }
            if let Some(e) = &self.failed {
                return Err(e.clone());
            }
            if !self.outstanding.iter().any(|o| o.id == id) {
                return Err(VfError::new(
                    ErrorCode::Unknown,
                    format!(
                        "internal: request {id} to the component '{}' is not outstanding",
                        self.program
                    ),
                ));
            }
            self.accept_buffered(Some(id))?;
            if self.arrived.contains_key(&id) {
                continue;
            }
            match self.reader.fill(&mut &self.stream) {
                Ok(0) => return Err(self.closed()),
                Ok(_) => {}
                Err(e) if e.is_timeout() => {
                    let now = Instant::now();
                    if let Some(late) = self
                        .outstanding
                        .iter()
                        .find(|o| o.deadline.is_some_and(|d| now >= d))
                        .copied()
                    {
                        return Err(self.hung(late.what, late.timeout));
                    }
                    // Every outstanding call is within the deadline the host allows it (an
                    // `open()` loading a model, a slow `process()`): the worker is alive, and
                    // its liveness beat must not lapse before the host's own deadline does.
                    crate::health::beat();
                }
                Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(FrameError::Io(e)) => {
                    let what = self.waiting_for();
                    return Err(self.broken(&format!("failed during {what} ({e})")));
                }
                Err(e) => {
                    let what = self.waiting_for();
                    return Err(self.violated(&format!("sent a bad frame for {what}: {e}")));
                }
            }
        }
    }

    /// Matches every buffered frame to its outstanding request, stopping after the answer to
    /// `until` (so a fault in a later frame fails the call it concerns, not this one).
    fn accept_buffered(&mut self, until: Option<u64>) -> Result<(), VfError> {
        loop {
            match self.reader.next_frame::<ComponentMessage>() {
                Ok(None) => return Ok(()),
                Ok(Some(ComponentMessage {
                    body: Some(component_message::Body::Result(r)),
                })) => {
                    let Some(at) = self.outstanding.iter().position(|o| o.id == r.request_id)
                    else {
                        let ids = self.outstanding_ids();
                        return Err(self.violated(&format!(
                            "answered request {} while {ids} outstanding",
                            r.request_id
                        )));
                    };
                    self.outstanding.remove(at);
                    let id = r.request_id;
                    self.arrived.insert(id, r);
                    if until == Some(id) {
                        return Ok(());
                    }
                }
                Ok(Some(_)) => {
                    let ids = self.outstanding_ids();
                    return Err(self.violated(&format!(
                        "sent something other than a Result while {ids} outstanding"
                    )));
                }
                Err(e) => {
                    let what = self.waiting_for();
                    return Err(self.violated(&format!("sent a bad frame for {what}: {e}")));
                }
            }
        }
    }

    /// `request 3 (process) was` / `requests [3, 4] were`, for errors.
    fn outstanding_ids(&self) -> String {
        match self.outstanding.len() {
            0 => "no request was".to_owned(),
            1 => format!(
                "request {} ({}) was the only one",
                self.outstanding[0].id, self.outstanding[0].what
            ),
            _ => format!(
                "requests {:?} were",
                self.outstanding.iter().map(|o| o.id).collect::<Vec<_>>()
            ),
        }
    }

    /// The oldest outstanding call's name, for errors.
    fn waiting_for(&self) -> &'static str {
        self.outstanding.front().map_or("a call", |o| o.what)
    }

    /// The component closed its end (mid-frame or between frames) while calls were
    /// outstanding.
    fn closed(&mut self) -> VfError {
        let what = self.waiting_for();
        self.broken(&format!("closed the connection during {what}"))
    }

    /// Sends Close (bounded wait), then waits for the program to exit, killing it after a
    /// grace period. A component that already failed is only reaped.
    pub fn close(&mut self) -> Result<Option<CallResult>, VfError> {
        let result = if self.failed.is_none() {
            let timeout = self
                .opts
                .call_timeout
                .map_or(EXIT_GRACE * 6, |t| t.min(EXIT_GRACE * 6));
            let r = self
                .send_with(
                    worker_message::Body::Close(Default::default()),
                    "close",
                    Some(timeout),
                )
                .and_then(|id| self.wait(id));
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

/// A socket read or write that ran into its timeout (or `WouldBlock` when non-blocking).
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// `exited with status 3` / `was killed by signal 9`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "exited".to_owned(),
    }
}
