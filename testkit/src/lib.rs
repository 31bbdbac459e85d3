//! # videoflow-testkit
//!
//! What only tests use: real servers, never mocks. [`NatsServer`], [`RedisServer`] and
//! [`free_port`] come from `videoflow-services` (the same servers the local runner starts),
//! so tests run in parallel on free loopback ports without sharing state; [`ControlPlane`]
//! starts a real Kubernetes control plane for the operator's e2e suite; [`NatsCluster`] a
//! three-node JetStream cluster on loopback; [`kubectl`] drives a test cluster as a user
//! would; [`manifest_dir`]
//! finds the checkout a test runs for. A missing binary is an error naming the remedy, never
//! a silently skipped test.

pub mod cluster;
pub mod control_plane;
pub mod kubectl;

pub use cluster::NatsCluster;
pub use control_plane::{ControlPlane, Options as ControlPlaneOptions, RealNode};
pub use videoflow_services::{NatsServer, RedisServer, ServiceError, free_port};

/// Why the test kit could not start what a test asked for.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A broker or store server did not start.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The process could not be spawned or its directory created.
    #[error("starting {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
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

/// A sample Flow as a cluster takes it: `payloadStore: {}` asks `videoflow-worker run` for a
/// private redis-server, which a cluster does not start (admission refuses a store without a
/// URL), so it gets `redis_url`.
pub fn sample_on_cluster(text: &str, redis_url: &str) -> String {
    text.replace(
        "  payloadStore: {}\n",
        &format!("  payloadStore: {{url: \"{redis_url}\"}}\n"),
    )
}
