//! Every variable the worker binary reads, parsed into typed values in one place: a newcomer
//! looking for a `VF_*` variable's parser finds it in this folder, and every other module
//! takes the typed values.
//!
//! - [`environment`] — [`Environment`]: the process environment read once (non-UTF-8 safe).
//! - [`worker`] — [`WorkerConfig`]: one node replica's contract (protocol §1, ENV-1…ENV-19),
//!   with its sub-configs:
//!   - [`device`] — [`DeviceConfig`]: GPU request and grant, assets, the host facts the device
//!     checks read;
//!   - [`component`] — [`ComponentConfig`]: an exec component's program and deadlines.
//! - [`faults`] — [`FaultConfig`]: the conformance fault schedule (ENV-16/17), read at START-1
//!   step 1, before the rest.
//! - [`job`] — [`JobConfig`] and [`TeardownConfig`]: the provision and teardown jobs.
//! - [`logging`] — [`LogConfig`]: `VF_LOG`, `VF_STRUCTURED_LOGS`, `NO_COLOR`.
//! - [`read`] — the shared readers: Python `int()`/`float()`, typed accessors with the
//!   reference's exact error texts, and [`bounded_seconds`] (seconds to a `Duration` without
//!   a panic).
//!
//! Pure: nothing here connects or spawns; only [`Environment::capture`] reads the process and
//! [`JobConfig::from_env`] the specs file it names.

pub mod component;
pub mod device;
pub mod environment;
pub mod faults;
pub mod job;
pub mod logging;
pub mod read;
pub mod worker;

pub use component::ComponentConfig;
pub use device::{DeviceConfig, DeviceType};
pub use environment::Environment;
pub use faults::FaultConfig;
pub use job::{JobConfig, TeardownConfig};
pub use logging::LogConfig;
pub use read::{MAX_SECONDS, bounded_seconds, py_float, py_int};
pub use worker::*;
