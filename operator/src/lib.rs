//! `videoflow-operator`: the Kubernetes controller for `Flow` resources (design §7).
//!
//! Table of contents:
//! - [`crd`]: the `Flow` custom resource and its status, and the CRD artefact generated from
//!   them (`videoflow-operator crd`).
//!
//! Reconcile, rendering of child objects and status computation land in later slices of
//! issue #7.

pub mod crd;

pub use crd::{Flow, FlowPhase, FlowResourceSpec, FlowStatus, NodeStatus, condition_types};
