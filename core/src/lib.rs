//! # videoflow-core
//!
//! Everything the worker and the operator must agree on, byte for byte, with no I/O:
//! a Rust worker, a Python reference worker and the operator only interoperate because
//! they all derive names, ids, owners and wire bytes from these functions.
//!
//! Table of contents:
//!
//! - [`model`] — the `Flow` document (custom resource spec and local file format).
//! - [`load`] — parsing a Flow file's text, type errors and unknown fields as diagnostics.
//! - [`validate`] — graph and policy validation; every problem at once as a [`validate::Diagnostic`].
//! - [`compile`] — `Flow` → compiled node records ([`compile::NodeSpec`], `specs.json`).
//! - [`env`] — the `VF_*` environment both control planes render for a node (one function).
//! - [`naming`] — broker names (NAME-*) and Kubernetes object names.
//! - [`value`] — the native value model carried by envelopes (`Value`, `Tensor`).
//! - [`envelope`] — the protobuf envelope v4 (WIRE-*): schema, encode, decode.
//! - [`msgid`] — `Nats-Msg-Id` derivation (MSGID-*).
//! - [`partition`] — partition keys, Python `str()` parity and owners (PART-*).
//! - [`join`] — join policies (JOIN-1/2/4/10) and time-group identity (JOIN-20/23).
//! - [`scaling`] — pure scaling decisions (SCALE-*): demand, rate demand, capacity, eligibility.
//! - [`errors`] — the error taxonomy (ERR-*): codes, exit codes, dispositions, rendering.
//! - [`redact`] — secrets out of texts: passwords, tokens and secret query values of URLs.
//! - [`component`] — the component protocol exec nodes speak (design §5): schema, version
//!   negotiation, value conversions, the descriptor set SDKs build their classes from.

pub mod catalog;
pub mod compile;
pub mod component;
pub mod env;
pub mod envelope;
pub mod errors;
/// Checks the fuzz targets (`fuzz/`) and the regression replays share; not an API.
#[doc(hidden)]
pub mod fuzz;
pub mod join;
pub mod load;
pub mod model;
pub mod msgid;
pub mod naming;
pub mod partition;
pub mod redact;
pub mod scaling;
pub mod suggest;
pub mod validate;
pub mod value;
