//! The `Flow` document (design §4): the custom resource's spec and the local file format.
//!
//! One schema serves both `kubectl apply` and `videoflow-worker run flow.yaml`, so a flow
//! developed on a laptop ships to a cluster unchanged. Field names are camelCase, as
//! Kubernetes resources are; the compiled per-node records ([`crate::compile::NodeSpec`]) keep
//! the reference's snake_case instead.
//!
//! Integers are `i32`/`i64` on purpose: schemars renders unsigned types with `uint32`/`uint64`
//! formats that recent API servers warn about. Range rules live in [`crate::validate`], which
//! reports every problem with its path rather than failing on the first.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `apiVersion` of the resource and of local files.
pub const API_VERSION: &str = "videoflow.io/v1alpha1";
/// `kind` of the resource.
pub const KIND: &str = "Flow";

/// A whole Flow file: what `kubectl apply` and the local runner read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowDocument {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Only the name (the flow id) and namespace are read.
    pub metadata: FlowMetadata,
    /// The flow itself.
    pub spec: FlowSpec,
}

/// The part of `metadata` a Flow file needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FlowMetadata {
    /// The flow id: raw in message ids and owner labels, sanitized in broker names.
    pub name: String,
    /// Namespace on Kubernetes; ignored locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// BATCH or REALTIME (`VF_FLOW_TYPE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FlowType {
    /// Finite work that must not lose a message: interest streams, backpressure, EOS barrier.
    Batch,
    /// Live sources: bounded streams that drop the oldest, non-blocking publishes.
    #[default]
    Realtime,
}

impl FlowType {
    /// The `VF_FLOW_TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowType::Batch => "batch",
            FlowType::Realtime => "realtime",
        }
    }
}

/// The spec of a Flow (design §4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowSpec {
    /// `batch` or `realtime` (default).
    #[serde(default, rename = "type")]
    pub flow_type: FlowType,
    /// Explicit run id; empty means "derive it from the topology" ([`crate::compile::default_run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// NATS JetStream connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<BrokerSpec>,
    /// Redis payload store for payloads above the inline limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_store: Option<PayloadStoreSpec>,
    /// Run ledger store (`memory://`, `file://`, `redis://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_store: Option<StoreRef>,
    /// Worker image (defaults come from the operator's configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSpec>,
    /// Channel profiles that admission must verify before anything runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionSpec>,
    /// Flow-wide autoscaling defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<FlowAutoscaling>,
    /// Flow-wide GPU settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<FlowGpu>,
    /// Pod-level settings applied to every worker pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSettings>,
    /// The DAG, in any order; `parents` give the edges.
    #[serde(default)]
    pub nodes: Vec<NodeDecl>,
}

/// Where a secret value comes from: credentials only ever travel as Secret references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValueFrom {
    /// A key of a Secret in the Flow's namespace.
    pub secret_key_ref: SecretKeyRef,
}

/// A key in a Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key inside the Secret.
    pub key: String,
}

/// The NATS broker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerSpec {
    /// `nats://host:4222`; locally, absent means "start or reuse a local nats-server".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The URL from a Secret, when it carries credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_from: Option<ValueFrom>,
    /// HTTP monitoring endpoint (for KEDA triggers and demand observation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring_url: Option<String>,
    /// JetStream `num_replicas` for every stream (`VF_STREAM_REPLICAS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_replicas: Option<i32>,
    /// Age bound in seconds on every node stream of the run (JetStream `max_age`,
    /// `VF_STREAM_MAX_AGE_SECONDS`): a message older than this is dropped whether or not it
    /// was consumed — a safety net for streams a failed teardown leaves behind, and a
    /// staleness bound for REALTIME frames. At least 120 (the duplicate window). Unset: no age
    /// bound, the shape a 1.0.4 worker provisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_max_age_seconds: Option<i64>,
}

/// The smallest `spec.broker.streamMaxAgeSeconds`: JetStream refuses a stream whose
/// `max_age` is below its duplicate window (120 s on every node stream, MSGID-1).
pub const MIN_STREAM_MAX_AGE_SECONDS: i64 = 120;
/// The largest `spec.broker.streamMaxAgeSeconds` (about 100 years): beyond it the nanoseconds
/// JetStream takes would not fit where every runtime reads them.
pub const MAX_STREAM_MAX_AGE_SECONDS: i64 = 3_155_760_000;

/// The Redis payload store (BLOB-*).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayloadStoreSpec {
    /// `redis://…` or `rediss://…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The URL from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_from: Option<ValueFrom>,
    /// Payloads strictly larger than this go to the store (default 524288).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_limit_bytes: Option<i64>,
    /// TTL of stored payloads (default 3600 realtime / 86400 batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
}

/// A store given by URL or by Secret reference.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoreRef {
    /// Store URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The URL from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_from: Option<ValueFrom>,
}

/// The worker image.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Image reference of `videoflow-worker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Kubernetes pull policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<String>,
}

/// Admission requests (ADM-*, ENV-13).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSpec {
    /// Explicit channel profiles to verify.
    #[serde(default)]
    pub profiles: Vec<ProfileRequest>,
    /// Bound on the read-back, connect included (`VF_ADMISSION_TIMEOUT_SECONDS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
}

/// One profile request `{channel, profile, options}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProfileRequest {
    /// The channel (an edge or a node's stream).
    pub channel: String,
    /// Profile name, e.g. `reliable_work` or `live_latest`.
    pub profile: String,
    /// Free options of the profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub options: Option<serde_json::Value>,
}

/// Flow-wide autoscaling defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowAutoscaling {
    /// Whether eligible nodes get a scaler.
    #[serde(default)]
    pub enabled: bool,
    /// Whether GPU nodes may be scaled.
    #[serde(default)]
    pub gpu: bool,
    /// Pending messages per replica that triggers a scale-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_lag_per_replica: Option<i64>,
    /// Upper bound of replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
}

/// Flow-wide GPU settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowGpu {
    /// Extended resource name (default `nvidia.com/gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// RuntimeClass for GPU pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
}

/// Pod-level settings. Kubernetes-typed fields stay free JSON here because the core crate
/// has no Kubernetes types; the operator validates them when it renders.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSettings {
    /// ServiceAccount of worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations (Kubernetes `Toleration` objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_object_list")]
    pub tolerations: Vec<serde_json::Value>,
    /// Volumes (Kubernetes `Volume` objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_object_list")]
    pub volumes: Vec<serde_json::Value>,
    /// Volume mounts (Kubernetes `VolumeMount` objects) for every worker container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_object_list")]
    pub volume_mounts: Vec<serde_json::Value>,
    /// PriorityClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// How long the kubelet's probes wait before they act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<ProbeBudgets>,
    /// Pod-level security context (Kubernetes `PodSecurityContext`): fsGroup, supplemental
    /// groups, sysctls, or the numeric user of every container. It may not weaken the
    /// restricted profile (docs/OPERATIONS.md, "Pod security").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub security_context: Option<serde_json::Value>,
    /// Container-level security context (Kubernetes `SecurityContext`) merged over the
    /// restricted defaults of every videoflow container, field by field; a field that would
    /// weaken the restricted profile is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub container_security_context: Option<serde_json::Value>,
    /// Affinity (Kubernetes `Affinity`) of every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub affinity: Option<serde_json::Value>,
    /// Topology spread constraints (Kubernetes `TopologySpreadConstraint` objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_object_list")]
    pub topology_spread_constraints: Vec<serde_json::Value>,
    /// Annotations of every pod (service mesh, log shipping, cost allocation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Seconds a stopping pod gets before SIGKILL; the drain (EOS, in-flight acks) must fit.
    /// Default: Kubernetes' 30. 0 to 86400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// Probe budgets of worker pods, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeBudgets {
    /// How long start-up and `open()` (a model load) may take before the pod counts as
    /// failed: the startup probe waits for `/readyz`, and liveness only starts after it.
    /// Default 600; 10 to 86400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_seconds: Option<i32>,
    /// How long `/healthz` may fail (no beat for 60 s, HEALTH-2) before the container is
    /// restarted. Default 45; 15 to 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_seconds: Option<i32>,
}

/// The three node kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// No parents; mints identities.
    Producer,
    /// Parents and children.
    Processor,
    /// Parents, no children.
    Consumer,
}

impl NodeKind {
    /// The `VF_NODE_KIND` word.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Producer => "producer",
            NodeKind::Processor => "processor",
            NodeKind::Consumer => "consumer",
        }
    }
}

/// One node of the DAG.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDecl {
    /// Unique name: the source of every routing name (ENV-2).
    pub name: String,
    /// Producer, processor or consumer.
    pub kind: NodeKind,
    /// Parent names; the order is the positional input order (ENV-3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// What runs the node: exactly one of `builtin`, `exec`, `python`.
    pub component: ComponentDecl,
    /// Constructor parameters, passed as `VF_NODE_PARAMS_JSON`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub params: Option<serde_json::Value>,
    /// Replica count (`nb_tasks`); processors only; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Producers only: whether the source ends by itself (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finite: Option<bool>,
    /// Producers only: the source has a position of its own (a value or frame index), so
    /// its ids are `{node}:{offset}` and a restarted worker resumes after the last offset the
    /// broker accepted instead of publishing everything again under a new epoch (MSGID-6).
    /// Built-in file sources only; default false (a live source, MSGID-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayable: Option<bool>,
    /// `trace_id` or a metadata field; routes each message to one replica (PART-*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_by: Option<String>,
    /// Join policy for nodes with several parents (JOIN-*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinDecl>,
    /// Delivery mode; defaults per flow type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMode>,
    /// Disposition of an unclassified error (`VF_ON_ERROR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    /// GPU needs of a processor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<NodeGpu>,
    /// Delivery credit per replica of a single-parent node (STREAM-15a).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit: Option<NodeCredit>,
    /// Files the node needs, verified by checksum before it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assets: Vec<AssetDecl>,
    /// Per-node autoscaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<NodeAutoscaling>,
    /// Consumers only: skip inputs already consumed (IDEM-*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// Container resources (Kubernetes `ResourceRequirements`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub resources: Option<serde_json::Value>,
    /// Extra environment (Kubernetes `EnvVar` objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_object_list")]
    pub env: Vec<serde_json::Value>,
}

impl NodeDecl {
    /// `nb_tasks`: the declared replicas, 1 when absent.
    pub fn nb_tasks(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }

    /// Whether the node routes each message to one replica (PART-1).
    pub fn is_partitioned(&self) -> bool {
        self.partition_by.as_deref().is_some_and(|p| !p.is_empty()) && self.nb_tasks() > 1
    }
}

/// What runs a node. Modelled as three optional fields rather than an enum so that a file
/// naming two of them yields a diagnostic with a path instead of an opaque parse error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentDecl {
    /// A node compiled into `videoflow-worker`, e.g. `videoflow.processors.IdentityProcessor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<String>,
    /// Any program speaking the component protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecComponent>,
    /// The Python reference worker running a class from the user's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonComponent>,
}

/// An exec component.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecComponent {
    /// The user's image (on Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Program and leading arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// Further arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

/// A Python reference component.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PythonComponent {
    /// Image with videoflow and the class installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Import path of the node class.
    #[serde(rename = "class")]
    pub class: String,
}

/// Join policy as declared (camelCase); compiled to the reference's snake_case dict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinDecl {
    /// `trace` (default) or `time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<JoinMode>,
    /// How long to wait for the rest of a group; absent = forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// What to do with an incomplete group: `drop` (default), `wait`, `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<MissingPolicy>,
    /// Working-set size (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<i64>,
    /// Time mode: event times within this many ms join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_ms: Option<f64>,
    /// Time mode: emit a timed-out group with at least this many synchronized parents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<i64>,
    /// Time mode: high-rate parents delivered as lists, parent → window in ms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub collect: BTreeMap<String, f64>,
}

/// Join grouping mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JoinMode {
    /// Exact trace id match.
    Trace,
    /// Event times within a tolerance.
    Time,
}

/// What happens to an incomplete join group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MissingPolicy {
    /// Ack and forget it.
    Drop,
    /// Never time out.
    Wait,
    /// NAK it for redelivery.
    Error,
}

/// Delivery mode (DELIV-10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeliveryMode {
    /// Retry, then dead-letter.
    #[serde(rename = "at-least-once")]
    AtLeastOnce,
    /// Never redeliver.
    #[serde(rename = "best-effort")]
    BestEffort,
}

impl DeliveryMode {
    /// The `VF_DELIVERY` word.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::AtLeastOnce => "at-least-once",
            DeliveryMode::BestEffort => "best-effort",
        }
    }
}

/// `VF_ON_ERROR` values (ERR-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Unclassified errors mean bad data.
    Poison,
    /// Unclassified errors are retried.
    Transient,
    /// Unclassified errors stop the worker.
    WorkerFatal,
}

impl OnError {
    /// The `VF_ON_ERROR` word.
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Poison => "poison",
            OnError::Transient => "transient",
            OnError::WorkerFatal => "worker_fatal",
        }
    }
}

/// How much a replica of a single-parent node may hold un-acknowledged (STREAM-15a).
///
/// Why a knob: a replica's throughput is its credit divided by one message's round trip
/// (process, publish receipt, ledger sync, ack), so a hop whose round trip is long — a
/// durable ledger's fsync — needs more credit than STREAM-15's five to keep busy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCredit {
    /// Un-acked deliveries per replica, 1–4096 (default 128): the durable's `max_ack_pending`
    /// is this times the replicas sharing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<i64>,
    /// Payload bytes per replica held before the worker stops fetching (`VF_PREFETCH_BYTES`;
    /// default 16 MiB), exceeded by one message at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
}

/// Un-acked deliveries per replica a single-parent node gets when its Flow does not say
/// (docs/PERFORMANCE.md, "Credit": measured on the identity hop with the file ledger).
pub const DEFAULT_CREDIT_MESSAGES: i64 = 128;
/// Payload bytes per replica a single-parent node may hold when its Flow does not say: the
/// in-flight window's own byte bound, so the message credit cannot make a replica hold
/// 128 large inline frames.
pub const DEFAULT_CREDIT_BYTES: i64 = 16 * 1024 * 1024;
/// The most un-acked deliveries per replica a Flow may ask for.
pub const MAX_CREDIT_MESSAGES: i64 = 4096;

/// GPU needs of a node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeGpu {
    /// Whole devices per replica (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Extended resource name overriding the flow's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// A MIG profile (`1g.18gb`, `3g.40gb+me`): the node claims `count` MIG instances of it
    /// as `nvidia.com/mig-<profile>`, the resource the NVIDIA device plugin's `mixed` MIG
    /// strategy advertises. Not together with `resourceName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// What to do without a GPU: `cpu` (run anyway) or `none` (refuse, default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<GpuFallback>,
    /// Whether the devices must reach each other peer to peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_peer_access: Option<bool>,
}

/// The extended resource the NVIDIA device plugin advertises MIG instances of a profile
/// under (`mixed` strategy).
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";

impl NodeGpu {
    /// The resource this node names itself: its `resourceName`, else the MIG profile's
    /// `nvidia.com/mig-<profile>`; `None` leaves the choice to the Flow (or NVIDIA's
    /// `nvidia.com/gpu`).
    pub fn claimed_resource(&self) -> Option<String> {
        self.resource_name.clone().or_else(|| {
            self.mig_profile
                .as_ref()
                .map(|p| format!("{MIG_RESOURCE_PREFIX}{p}"))
        })
    }
}

/// Whether `p` reads as a MIG profile: `<n>g.<m>gb` with optional `+<attr>` suffixes
/// (`1g.10gb`, `1g.18gb+me`, `7g.141gb`).
pub fn is_mig_profile(p: &str) -> bool {
    let (base, attrs) = match p.split_once('+') {
        Some((b, a)) => (b, Some(a)),
        None => (p, None),
    };
    let Some((slices, memory)) = base.split_once("g.") else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(slices)
        && memory.strip_suffix("gb").is_some_and(digits)
        && attrs.is_none_or(|a| {
            a.split('+')
                .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
        })
}

/// `VF_GPU_FALLBACK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuFallback {
    /// Report and run on CPU.
    Cpu,
    /// Refuse to run.
    None,
}

/// A declared asset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetDecl {
    /// Path inside the worker's filesystem.
    pub path: String,
    /// Expected lowercase hex SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Whether the asset can be shipped to any host (vs local-only).
    #[serde(default)]
    pub portable: bool,
}

/// Per-node autoscaling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeAutoscaling {
    /// Whether this node gets a scaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Lower bound of replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Upper bound of replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// Pending messages per replica that triggers a scale-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_lag_per_replica: Option<i64>,
}

/// Schema for free JSON objects: Kubernetes must keep their unknown fields.
fn free_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema for lists of free JSON objects.
fn free_object_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}
