//! # videoflow-worker
//!
//! The runtime of one node replica (issue #3 onwards). Table of contents:
//!
//! - [`config`] — the `VF_*` environment contract (ENV-*): pure, typed, parsed from an injected map.
//! - [`delivery`] — failure ladder, NAK delays, breaker and DLQ sampler as pure decisions (DELIV-6/7, ERR-2/5a/6).
//! - [`drain`] — end-of-stream and abort bookkeeping per parent (EOS-2..6, ABORT-3/4).
//! - [`join`] — the trace and time assemblers (JOIN-*): pure, single-threaded, clock injected.

pub mod config;
pub mod delivery;
pub mod drain;
pub mod join;
