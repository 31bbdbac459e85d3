//! # videoflow-worker
//!
//! The runtime of one node replica (issue #3 onwards). Table of contents:
//!
//! - [`join`] — the trace and time assemblers (JOIN-*): pure, single-threaded, clock injected.

pub mod join;
