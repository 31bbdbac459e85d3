//! A real `nats-server` with JetStream.

use std::ffi::OsString;

use crate::ServiceError;
use crate::port::free_port;
use crate::process::{START_ATTEMPTS, ServerProcess, find_binary, request_line, temp_dir};

/// A `nats-server -js` on a free loopback port with its own store directory and an HTTP
/// monitoring port (for consumer-info reads). Stopped and removed on drop.
#[derive(Debug)]
pub struct NatsServer {
    process: ServerProcess,
    port: u16,
    monitor_port: u16,
}

impl NatsServer {
    /// Starts a server; retries with fresh ports if one was taken meanwhile.
    pub fn start() -> Result<Self, ServiceError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra arguments, e.g. `["--user", "vf", "--pass", "s3cret"]`.
    pub fn start_with(extra: &[&str]) -> Result<Self, ServiceError> {
        let bin = find_binary("nats-server", "VF_NATS_SERVER_BIN")?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let dir = temp_dir("vf-nats")?;
            let io = |source| ServiceError::Io {
                what: "nats-server: picking a port".into(),
                source,
            };
            let port = free_port().map_err(io)?;
            let monitor_port = free_port().map_err(io)?;
            let mut args: Vec<OsString> = [
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-m",
                &monitor_port.to_string(),
                "-js",
                "-sd",
            ]
            .iter()
            .map(OsString::from)
            .collect();
            args.push(dir.join("jetstream").into_os_string());
            args.extend(extra.iter().map(OsString::from));
            // The server greets every connection with an INFO line.
            match ServerProcess::spawn("nats-server", &bin, args, dir, port, |s| {
                request_line(s, b"").is_some_and(|l| l.starts_with("INFO "))
            }) {
                Ok(process) => {
                    return Ok(NatsServer {
                        process,
                        port,
                        monitor_port,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ServiceError::MissingBinary {
            binary: "nats-server",
            env_var: "VF_NATS_SERVER_BIN",
        }))
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<monitor port>`.
    pub fn monitoring_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }

    /// The server's private directory (store and log).
    pub fn dir(&self) -> &std::path::Path {
        self.process.dir()
    }

    /// SIGKILLs the server, keeping its store directory (a broker node lost mid-flow).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same ports with the same store directory and
    /// arguments (a cluster node rejoins its routes), and waits until it greets clients.
    pub fn restart(&mut self) -> Result<(), ServiceError> {
        self.process.restart()
    }

    /// SIGSTOPs the server: it holds its sockets open and answers nothing, as a node under
    /// a long pause (a stalled VM, a stop-the-world disk) does.
    pub fn pause(&self) -> Result<(), ServiceError> {
        self.process.stop()
    }

    /// SIGCONTs a server [`NatsServer::pause`]d.
    pub fn resume(&self) -> Result<(), ServiceError> {
        self.process.signal("CONT")
    }

    /// The process id of the running server.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Last lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }
}
