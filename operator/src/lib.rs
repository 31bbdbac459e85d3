//! `videoflow-operator`: the Kubernetes controller for `Flow` resources (design §7).
//!
//! Table of contents:
//! - [`crd`]: the `Flow` custom resource and its status, and the CRD artefact generated from
//!   them (`videoflow-operator crd`).
//! - [`render`]: desired state, a pure function from a `Flow` to the typed Kubernetes objects
//!   of its run (ConfigMap, provisioning Job, workloads, Services, PodDisruptionBudgets), and
//!   their YAML (`videoflow-operator render`).
//! - [`controller`]: the reconciler — admission, server-side apply and pruning, status
//!   conditions from Jobs and pods, the teardown finalizer, events and metrics
//!   (`videoflow-operator run`).
//! - [`listen`]: the dual-stack metrics and health listener.

pub mod controller;
pub mod crd;
pub mod listen;
pub mod render;

pub use crd::{Flow, FlowPhase, FlowResourceSpec, FlowStatus, NodeStatus, condition_types};
