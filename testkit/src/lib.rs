//! # videoflow-testkit
//!
//! Real brokers for tests, never mocks: [`NatsServer`] and [`RedisServer`] start the real
//! binaries on free loopback ports in private temporary directories and stop them on drop,
//! so tests run in parallel without sharing state.
//!
//! Binaries are found through `VF_NATS_SERVER_BIN` / `VF_REDIS_SERVER_BIN`, else on `PATH`
//! (`scripts/install-deps` installs them; `scripts/env.sh` puts them on `PATH`). A missing
//! binary is an error naming the remedy, never a silently skipped test.

pub mod control_plane;
mod nats;
mod port;
mod process;
mod redis;

pub use control_plane::ControlPlane;
pub use nats::NatsServer;
pub use port::free_port;
pub use redis::RedisServer;

/// Why a test broker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
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
    /// The Kubernetes control plane (`scripts/testenv run`) did not start; the script's
    /// output says why (missing binaries name `scripts/testenv build`).
    #[error("the e2e control plane did not start: {why}; scripts/testenv output:\n{log}")]
    ControlPlane {
        /// What went wrong.
        why: String,
        /// Last lines of the script's output.
        log: String,
    },
}

/// The crate directory a test runs for: `CARGO_MANIFEST_DIR` as Cargo sets it when it runs
/// the test, else `compiled` (pass `env!("CARGO_MANIFEST_DIR")`).
///
/// Why not `env!` alone: the target directory is shared between checkouts
/// (`~/.cache/videoflow/target`), so a test binary built in another clone whose sources are
/// no newer is reused as fresh — with that clone's path compiled in.
pub fn manifest_dir(compiled: &'static str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || std::path::PathBuf::from(compiled),
        std::path::PathBuf::from,
    )
}
