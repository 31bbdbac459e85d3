//! # videoflow-services
//!
//! The servers a flow needs, started as real processes: [`NatsServer`] (JetStream) and
//! [`RedisServer`] on free loopback ports, each in a private temporary directory, stopped and
//! removed on drop. `videoflow-worker run` starts them for a Flow that names no broker or
//! asks for a private payload store; the test kit re-exports them for the tests.
//!
//! Binaries are found through `VF_NATS_SERVER_BIN` / `VF_REDIS_SERVER_BIN`, else on `PATH`
//! (`scripts/install-deps` installs them; `scripts/env.sh` puts them on `PATH`). A missing
//! binary is an error naming the remedy.

mod nats;
mod port;
mod process;
mod redis;

pub use nats::NatsServer;
pub use port::free_port;
pub use process::temp_dir;
pub use redis::RedisServer;

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The server binary is not installed.
    #[error("{binary} not found (looked at ${env_var} and PATH): run scripts/install-deps")]
    MissingBinary {
        /// Binary name.
        binary: &'static str,
        /// Variable that can point at it.
        env_var: &'static str,
    },
    /// The process could not be spawned or its directory created.
    #[error("starting {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The process did not accept connections in time; its log tail is included.
    #[error("{binary} did not become ready on port {port} within {secs}s; log tail:\n{log}")]
    NotReady {
        /// Binary name.
        binary: &'static str,
        /// Port it was given.
        port: u16,
        /// Seconds waited.
        secs: u64,
        /// Last lines of its output.
        log: String,
    },
}
