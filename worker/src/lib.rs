//! # videoflow-worker
//!
//! The runtime of one node replica (issue #3 onwards). Table of contents:
//!
//! - [`config`] — the `VF_*` environment contract (ENV-*): pure, typed, parsed from an injected map.
//! - [`join`] — the trace and time assemblers (JOIN-*): pure, single-threaded, clock injected.

pub mod config;
pub mod join;
