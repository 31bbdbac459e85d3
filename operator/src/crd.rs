//! The `Flow` custom resource (design §4): `videoflow.io/v1alpha1`, kind `Flow`.
//!
//! The spec is *not* redeclared here. [`videoflow_core::model::FlowSpec`] is the one schema
//! shared by `kubectl apply` and the local runner, so the resource wraps it in a transparent
//! newtype, [`FlowResourceSpec`]: kube's `CustomResource` derive must sit on a struct defined in
//! this crate (it generates the root type [`Flow`] from it), and `#[serde(transparent)]` makes
//! the wrapper vanish on the wire and in the generated schema. A flattening wrapper
//! (`#[serde(flatten)] spec: FlowSpec`) would work too, but serde's flatten buffers the input
//! and loses `deny_unknown_fields`-style strictness, so the newtype is the cleaner fit.
//!
//! The CRD artefact (`crds/flows.videoflow.io.yaml`) is generated from these types by
//! `videoflow-operator crd`, committed, and compared by a test, so the schema never drifts
//! from the code.

use std::ops::{Deref, DerefMut};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use videoflow_core::model::FlowSpec;

/// The CRD's `metadata.name`: `<plural>.<group>`, also the artefact's file stem.
pub const CRD_NAME: &str = "flows.videoflow.io";

/// Where the committed artefact lives, relative to the repository root.
pub const CRD_PATH: &str = "crds/flows.videoflow.io.yaml";

/// The spec of the [`Flow`] resource: exactly [`FlowSpec`], the document the local runner reads.
///
/// A newtype only because kube's derive must be attached to a local struct; it is transparent
/// to serde and schemars, and derefs to [`FlowSpec`] so controller code reads `flow.spec.nodes`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(
    description = "The desired pipeline: its type (batch or realtime), broker and stores, and the DAG of nodes."
)]
#[kube(
    group = "videoflow.io",
    version = "v1alpha1",
    kind = "Flow",
    plural = "flows",
    singular = "flow",
    namespaced,
    status = "FlowStatus",
    shortname = "flow",
    derive = "PartialEq",
    doc = "A videoflow pipeline: a DAG of nodes the operator runs as Kubernetes workloads.",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type","description":"batch or realtime"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Lifecycle phase"}"#,
    printcolumn = r#"{"name":"Run","type":"string","jsonPath":".status.runId","description":"Current run id"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Status of the Ready condition"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct FlowResourceSpec(pub FlowSpec);

impl Deref for FlowResourceSpec {
    type Target = FlowSpec;

    fn deref(&self) -> &FlowSpec {
        &self.0
    }
}

impl DerefMut for FlowResourceSpec {
    fn deref_mut(&mut self) -> &mut FlowSpec {
        &mut self.0
    }
}

impl From<FlowSpec> for FlowResourceSpec {
    fn from(spec: FlowSpec) -> Self {
        Self(spec)
    }
}

impl From<FlowResourceSpec> for FlowSpec {
    fn from(spec: FlowResourceSpec) -> Self {
        spec.0
    }
}

/// Lifecycle phase: Pending, Admitted, Provisioning, Running, then Succeeded or Failed;
/// Degraded while running below the desired state.
// A closed enum rather than a free string: the operator is the only writer, and a typo in a
// phase would silently break `kubectl get` filters and alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FlowPhase {
    /// Seen, not yet admitted (validation and admission profiles pending).
    Pending,
    /// Admission passed; nothing provisioned yet.
    Admitted,
    /// Streams and workloads are being created.
    Provisioning,
    /// Every node's workload is up and the run is in progress.
    Running,
    /// A batch run finished: every node drained past its end-of-stream barrier.
    Succeeded,
    /// The run cannot proceed without a change to the spec or the environment.
    Failed,
    /// Running, but some node is below its desired replicas or crash-looping.
    Degraded,
}

/// The observed state of a Flow, written only by the operator (status subresource).
// Every field is optional or defaulted so that an empty `status: {}` (what a freshly created
// resource carries) deserializes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct FlowStatus {
    /// The `metadata.generation` this status was computed from; lags while a change is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Summary phase for humans and the `Phase` printer column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<FlowPhase>,
    /// The run id in effect (explicit `spec.runId` or derived from the topology).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// When the current run started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the current run reached Succeeded or Failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Standard conditions, one per type: Ready, Admitted, Provisioned, Progressing, Degraded,
    /// Stalled, Complete, Failed.
    // A list map keyed by `type` (see `condition_types`) so server-side apply merges them by
    // type instead of replacing the list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Vec<Condition>,
    /// Per-node state, in spec order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeStatus>,
}

impl FlowStatus {
    /// The condition of the given type, if present: the one lookup every status reader needs.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The `type`s of the Flow's conditions. Constants, so the operator, tests and the `Ready`
/// printer column agree on the spelling.
pub mod condition_types {
    /// Summary: the Flow does what its spec asks (running, or finished successfully).
    pub const READY: &str = "Ready";
    /// The spec validated and every admission profile passed.
    pub const ADMITTED: &str = "Admitted";
    /// Streams, consumers and workloads exist as the spec requires.
    pub const PROVISIONED: &str = "Provisioned";
    /// The run is making progress (messages flow, or the rollout advances).
    pub const PROGRESSING: &str = "Progressing";
    /// Some node runs below its desired replicas or keeps restarting.
    pub const DEGRADED: &str = "Degraded";
    /// No progress within the expected time although workloads are up.
    pub const STALLED: &str = "Stalled";
    /// A batch run finished successfully.
    pub const COMPLETE: &str = "Complete";
    /// The run failed and needs a change to proceed.
    pub const FAILED: &str = "Failed";

    /// Every type, in the order the design lists them.
    pub const ALL: [&str; 8] = [
        READY,
        ADMITTED,
        PROVISIONED,
        PROGRESSING,
        DEGRADED,
        STALLED,
        COMPLETE,
        FAILED,
    ];
}

/// The observed state of one node of the DAG.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeStatus {
    /// The node's name in `spec.nodes`.
    pub name: String,
    /// The workload that runs it, so `kubectl` users can jump straight to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadRef>,
    /// Replicas asked for (spec or autoscaler).
    pub desired: i32,
    /// Replicas ready.
    pub ready: i32,
    /// Container restarts summed over the node's pods: a crash loop shows here first.
    pub restarts: i32,
    /// Whether an autoscaler object was rendered for the node, and why (not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaler: Option<ScalerStatus>,
    /// What the demand signal (stream lag) says about the node's replica count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demand: Option<DemandStatus>,
    /// The most recent abnormal container termination, explained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_termination: Option<TerminationStatus>,
}

/// A reference to the Kubernetes workload running a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadRef {
    /// `Deployment`, `StatefulSet` or `Job`.
    pub kind: String,
    /// The workload's name in the Flow's namespace.
    pub name: String,
}

/// Autoscaler rendering outcome for one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ScalerStatus {
    /// An autoscaler object exists for the node.
    pub rendered: bool,
    /// Why it was (not) rendered: human-readable, one reason per entry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// The demand diagnosis for one node: what lag suggests its replica count should be.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DemandStatus {
    /// The demand diagnosis, in 1.0.4's words: `unknown` (a parent could not be observed —
    /// never read as 0), `idle`, `starved` (a join with work on some parents only: replicas do
    /// not help) or `backlog` (every parent has work: replicas help).
    pub diagnosis: String,
    /// Replicas the demand signal asks for, when it is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Pending messages on the node's input, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Parents whose lag could not be read, so the diagnosis is partial.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_parents: Vec<String>,
}

/// A container termination, mapped to the protocol's error vocabulary so the user sees a
/// remedy rather than an exit code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct TerminationStatus {
    /// The pod that terminated.
    pub pod: String,
    /// The container's exit code.
    pub exit_code: i32,
    /// Kubernetes' reason (`Error`, `OOMKilled`, ...).
    pub reason: String,
    /// The videoflow error code from the termination message, when the worker wrote one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The termination message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    /// How the failure is handled (`poison`, `transient`, `worker_fatal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disposition: Option<String>,
}

/// The Flow CRD, generated from the types above: the single source of the artefact.
pub fn crd() -> CustomResourceDefinition {
    Flow::crd()
}

/// First lines of the committed artefact, so nobody edits it by hand.
const YAML_HEADER: &str = "# Generated by `videoflow-operator crd` from operator/src/crd.rs; do not edit.\n\
# Regenerate: cargo run -p videoflow-operator -- crd > crds/flows.videoflow.io.yaml\n";

/// The CRD as YAML, byte-for-byte what `crds/flows.videoflow.io.yaml` must contain.
///
/// Deterministic: k8s-openapi serializes fields in declaration order and schema properties
/// from `BTreeMap`s.
pub fn crd_yaml() -> String {
    // Serializing a typed struct with string keys into YAML has no failure mode; kube's own
    // derived `crd()` relies on the same guarantee for its schema conversion.
    #[allow(clippy::expect_used)]
    let body = serde_yaml::to_string(&crd()).expect("a CustomResourceDefinition always serializes");
    format!("{YAML_HEADER}{body}")
}
