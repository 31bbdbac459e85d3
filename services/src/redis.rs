//! A real `redis-server`.

use std::ffi::OsString;

use crate::ServiceError;
use crate::port::free_port;
use crate::process::{START_ATTEMPTS, ServerProcess, find_binary, request_line, temp_dir};

/// A `redis-server` on a free loopback port, no persistence unless asked, its own directory.
/// Stopped and removed on drop.
#[derive(Debug)]
pub struct RedisServer {
    process: ServerProcess,
    port: u16,
}

impl RedisServer {
    /// Starts a server with default settings (no AOF, no RDB snapshots).
    pub fn start() -> Result<Self, ServiceError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments, e.g. `["--appendonly", "yes"]`.
    pub fn start_with(extra: &[&str]) -> Result<Self, ServiceError> {
        let bin = find_binary("redis-server", "VF_REDIS_SERVER_BIN")?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let dir = temp_dir("vf-redis")?;
            let port = free_port().map_err(|source| ServiceError::Io {
                what: "redis-server: picking a port".into(),
                source,
            })?;
            let mut args: Vec<OsString> = [
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--daemonize",
                "no",
                "--dir",
            ]
            .iter()
            .map(OsString::from)
            .collect();
            args.push(dir.clone().into_os_string());
            args.extend(extra.iter().map(OsString::from));
            match ServerProcess::spawn("redis-server", &bin, args, dir, port, |s| {
                // A server started with `--requirepass` answers NOAUTH: it is up all the same.
                request_line(s, b"PING\r\n")
                    .is_some_and(|l| l.starts_with("+PONG") || l.starts_with("-NOAUTH"))
            }) {
                Ok(process) => return Ok(RedisServer { process, port }),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ServiceError::MissingBinary {
            binary: "redis-server",
            env_var: "VF_REDIS_SERVER_BIN",
        }))
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILLs the server, keeping its directory (with `--appendonly yes`, the AOF a
    /// restart replays).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port, directory and arguments, and waits until
    /// it answers.
    pub fn restart(&mut self) -> Result<(), ServiceError> {
        self.process.restart()
    }

    /// The server's private directory.
    pub fn dir(&self) -> &std::path::Path {
        self.process.dir()
    }

    /// Last lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }
}
