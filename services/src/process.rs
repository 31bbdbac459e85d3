//! A child server process with its own temporary directory, killed and cleaned up on drop.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ServiceError;

/// How long a server gets to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How many fresh ports a starter tries when the first is taken.
pub(crate) const START_ATTEMPTS: usize = 3;

/// Resolves a server binary from its variable or `PATH`.
pub(crate) fn find_binary(
    binary: &'static str,
    env_var: &'static str,
) -> Result<PathBuf, ServiceError> {
    if let Some(p) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
        .ok_or(ServiceError::MissingBinary { binary, env_var })
}

/// Whether a server answers its protocol on a connected stream.
pub(crate) type Probe = fn(&mut TcpStream) -> bool;

/// A running server, with what it takes to start it again on the same port and directory
/// (a restart keeps the store: JetStream's files, Redis's append-only file).
#[derive(Debug)]
pub(crate) struct ServerProcess {
    binary: &'static str,
    program: PathBuf,
    args: Vec<OsString>,
    port: u16,
    probe: Probe,
    child: Child,
    running: bool,
    dir: PathBuf,
    log: PathBuf,
}

impl ServerProcess {
    /// Spawns `program args` (stdout and stderr to `dir/server.log`) and waits until `port`
    /// accepts a TCP connection and `probe` succeeds on it.
    pub(crate) fn spawn(
        binary: &'static str,
        program: &Path,
        args: Vec<OsString>,
        dir: PathBuf,
        port: u16,
        probe: Probe,
    ) -> Result<Self, ServiceError> {
        let log = dir.join("server.log");
        let child = Self::launch(binary, program, &args, &log)?;
        let mut server = ServerProcess {
            binary,
            program: program.to_path_buf(),
            args,
            port,
            probe,
            child,
            running: true,
            dir,
            log,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn launch(
        binary: &'static str,
        program: &Path,
        args: &[OsString],
        log: &Path,
    ) -> Result<Child, ServiceError> {
        let io = |what: &str| {
            let what = format!("{binary}: {what}");
            move |source| ServiceError::Io { what, source }
        };
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io("opening its log"))?;
        let err = out.try_clone().map_err(io("opening its log"))?;
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(io("spawning"))
    }

    fn wait_ready(&mut self) -> Result<(), ServiceError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break; // exited: most likely the port was taken
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                if (self.probe)(&mut stream) {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(ServiceError::NotReady {
            binary: self.binary,
            port: self.port,
            secs: READY_TIMEOUT.as_secs(),
            log: self.log_tail(20),
        })
    }

    /// SIGKILLs the server and reaps it; its directory (the store) stays for
    /// [`ServerProcess::restart`].
    pub(crate) fn kill(&mut self) {
        if self.running {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.running = false;
        }
    }

    /// Starts the server again with the same arguments, port and directory (killing it
    /// first if it still runs) and waits until it answers.
    pub(crate) fn restart(&mut self) -> Result<(), ServiceError> {
        self.kill();
        self.child = Self::launch(self.binary, &self.program, &self.args, &self.log)?;
        self.running = true;
        self.wait_ready()
    }

    /// Sends `signal` (a `kill -s` name: `STOP`, `CONT`, `TERM`) to the running server.
    pub(crate) fn signal(&self, signal: &str) -> Result<(), ServiceError> {
        let io = |source| ServiceError::Io {
            what: format!("{}: sending SIG{signal}", self.binary),
            source,
        };
        let status = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .map_err(io)?;
        if status.success() {
            Ok(())
        } else {
            Err(io(std::io::Error::other(format!("kill exited {status}"))))
        }
    }

    /// SIGSTOPs the server and returns once every one of its threads is stopped: `kill`
    /// returns when the signal is queued, and a multi-threaded server (nats-server is Go)
    /// may still accept and greet a connection for a moment after that.
    pub(crate) fn stop(&self) -> Result<(), ServiceError> {
        self.signal("STOP")?;
        let tasks = PathBuf::from(format!("/proc/{}/task", self.child.id()));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let states: Vec<char> = std::fs::read_dir(&tasks)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
                .filter_map(|stat| {
                    // `pid (comm) S …`: the state follows the last ')'.
                    stat.rsplit_once(')')
                        .and_then(|(_, rest)| rest.trim_start().chars().next())
                })
                .collect();
            if !states.is_empty() && states.iter().all(|c| matches!(c, 'T' | 't')) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ServiceError::Io {
                    what: format!("{}: waiting for SIGSTOP to stop every thread", self.binary),
                    source: std::io::Error::other(format!("thread states {states:?}")),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The process id of the running server.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's private directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Last `n` lines of the server's output, for failure messages.
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let Ok(f) = File::open(&self.log) else {
            return String::new();
        };
        let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A stopped (SIGSTOP) server still dies of SIGKILL.
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh private directory under the system temp dir.
pub fn temp_dir(prefix: &str) -> Result<PathBuf, ServiceError> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| ServiceError::Io {
        what: format!("creating {}", dir.display()),
        source,
    })?;
    Ok(dir)
}

/// Writes `line` and reads one reply line; the probe both servers answer.
pub(crate) fn request_line(stream: &mut TcpStream, line: &[u8]) -> Option<String> {
    if !line.is_empty() {
        stream.write_all(line).ok()?;
    }
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).ok()?;
    Some(reply)
}
