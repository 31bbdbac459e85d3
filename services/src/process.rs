//! A child server process with its own temporary directory, killed and cleaned up on drop.

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

/// A running server.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl ServerProcess {
    /// Spawns `cmd` (stdout and stderr to `dir/server.log`) and waits until `port` accepts a
    /// TCP connection and `probe` succeeds on it.
    pub(crate) fn spawn(
        binary: &'static str,
        mut cmd: Command,
        dir: PathBuf,
        port: u16,
        probe: impl Fn(&mut TcpStream) -> bool,
    ) -> Result<Self, ServiceError> {
        let io = |what: &str| {
            let what = format!("{binary}: {what}");
            move |source| ServiceError::Io { what, source }
        };
        let log = dir.join("server.log");
        let out = File::create(&log).map_err(io("creating its log"))?;
        let err = out.try_clone().map_err(io("creating its log"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(io("spawning"))?;
        let mut server = ServerProcess { child, dir, log };
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = server.child.try_wait() {
                break; // exited: most likely the port was taken
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                if probe(&mut stream) {
                    return Ok(server);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(ServiceError::NotReady {
            binary,
            port,
            secs: READY_TIMEOUT.as_secs(),
            log: server.log_tail(20),
        })
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
        let _ = self.child.kill();
        let _ = self.child.wait();
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
