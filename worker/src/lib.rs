//! # videoflow-worker
//!
//! The runtime of one node replica, the provision and teardown jobs, and the local runner.
//! Table of contents:
//!
//! - [`admission`] — admission and profiles (ADM-1/2), the worker's bind-time check (ADM-3) and the `videoflow-worker provision` job.
//! - [`broker`] — the JetStream transport: streams, durables, pull loops, keepalive, publish, DLQ, control (STREAM-*, DELIV-1..8, CTRL-1).
//! - [`assets`] — the asset check: streaming SHA-256 of declared assets before `open()` (ASSET-1/2).
//! - [`blob`] — the payload (blob) store: offload, fetch, reader-counted release (BLOB-1..7).
//! - [`clock`] — the wall clock: epoch seconds for event times, sink records and leases.
//! - [`component`] — the exec host: components in any language over the component protocol (design §5).
//! - [`config`] — every variable the binary reads (ENV-*), typed in one place: the process environment read once, the node, job, fault and logging configs.
//! - [`delivery`] — failure ladder, NAK delays, breaker and DLQ sampler as pure decisions (DELIV-6/7, ERR-2/5a/6).
//! - [`drain`] — end-of-stream and abort bookkeeping per parent (EOS-2..6, ABORT-3/4).
//! - [`emit`] — this replica's DATA/EOS/ABORT envelopes and identities (WIRE-4/6, MSGID-5, LOOP-7/8, EOS-7).
//! - [`faults`] — the conformance fault schedule: named barriers that crash, raise, delay, drop or pause (ENV-16/17).
//! - [`gpu`] — the GPU grant check: recorded grant or `nvidia-smi` through `CUDA_VISIBLE_DEVICES`, peer access, fallback (GPU-1..4).
//! - [`health`] — `/readyz`, `/healthz`, `/metrics` and the metrics registry the loops update (HEALTH-1..4).
//! - [`idempotency`] — sink effect markers in Redis and `idempotency_key` (IDEM-1/2).
//! - [`join`] — the trace and time assemblers (JOIN-*): pure, single-threaded, clock injected.
//! - [`local`] — `videoflow-worker run`: a whole Flow on one machine (design §8).
//! - [`nodes`] — the node API (context, producer/processor/consumer traits) and the built-in node library.
//! - [`provision`] — every stream, DLQ, EOS anchor and data durable of a compiled flow, derived as the workers bind them (STREAM-7).
//! - [`store`] — runtime stores by URL scheme (memory, file, redis) and replica slot leases (STORE-*, §11.2).
//! - [`teardown`] — run teardown by owner metadata, keeping the DLQ (STREAM-9/14).
//! - [`runtime`] — one node replica end to end: startup order, producer and processor/consumer loops, receive, settlement.
//! - [`supervision`] — the progress deadline and the watchdog thread (SUP-1/2).
//! - [`termination`] — the exit path: one-line log, termination record, exit code (§15.4).

pub mod admission;
pub mod assets;
pub mod blob;
pub mod broker;
pub mod clock;
pub mod component;
pub mod config;
pub mod delivery;
pub mod drain;
pub mod emit;
pub mod faults;
/// Checks the fuzz targets (`fuzz/`) and the regression replays share; not an API.
#[doc(hidden)]
pub mod fuzz;
pub mod gpu;
pub mod health;
pub mod idempotency;
pub mod join;
pub mod local;
pub mod nodes;
pub mod provision;
pub mod runtime;
pub mod store;
pub mod supervision;
pub mod teardown;
pub mod termination;
