//! One node replica's `VF_*` contract (protocol §1, ENV-1…ENV-19), parsed into one typed
//! [`WorkerConfig`].
//!
//! Why one pure parser over an injected map: every startup failure must be a ConfigError that
//! names the variable and its value (ENV-1) before anything connects, and tests must be able
//! to drive every branch without touching the process environment. Parsing mirrors what
//! 1.0.4's `run_from_env` accepts (Python `int()` / `float()` / `json.loads`), but where 1.0.4
//! fails untyped this module reports a typed [`VfError`] with code `VF_CONFIG` (exit 2,
//! §21.1 item 3). Variables the table gives an exact ConfigError text for use exactly it.
//! Seconds are bounded here ([`super::MAX_SECONDS`]) so no later `Duration` conversion panics.
//!
//! Not resolved here: ENV-5 step 3 (claiming a replica slot needs the run ledger, see
//! [`WorkerConfig::needs_slot_claim`]), the runtime-store and blob-store URL schemes (checked
//! by the store factories, STORE-2/BLOB-4), the GPU grant JSON (kept raw for §18.2), the fault
//! schedule's grammar (read by START-1 step 1 through [`super::FaultConfig`]) and the
//! ledger-only `VF_RECONCILE_INTERVAL_SECONDS`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value as Json};
use videoflow_core::errors::VfError;
use videoflow_core::join::policy::{JoinPolicy, PREFETCH};
use videoflow_core::model::{DeliveryMode, FlowType, NodeKind, OnError};
use videoflow_core::partition::py_repr_str;

use super::component::ComponentConfig;
use super::device::{DeviceConfig, parse_device};
use super::environment::Environment;
use super::logging::structured_logs;
use super::read::{
    Env, FloatRule, MAX_SECONDS, config_error, invalid_json, not_a_number, py_int, split_list,
};

/// The default inline threshold (`VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES`, BLOB-1): larger encoded
/// payloads are offloaded to the payload store.
pub const DEFAULT_MAX_INLINE_PAYLOAD_BYTES: usize = 524_288;

/// The envelope version this build emits (WIRE-1/WIRE-2).
pub const SUPPORTED_ENVELOPE_VERSION: i64 = 4;
/// Default path of the termination record (§15.4) when `VF_TERMINATION_LOG` is unset or empty.
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// Default run ledger (ENV-10): a process-local store.
pub const DEFAULT_RUNTIME_STORE_URL: &str = "memory://";
/// Blob TTL when `VF_BLOB_TTL_SECONDS` is unset and the flow type is `realtime` (BLOB-7).
pub const DEFAULT_BLOB_TTL_REALTIME_SECONDS: i64 = 3600;
/// Blob TTL when `VF_BLOB_TTL_SECONDS` is unset and the flow type is anything else (BLOB-7).
pub const DEFAULT_BLOB_TTL_BATCH_SECONDS: i64 = 86400;

/// The required variables, in the order 1.0.4 reads them (ENV-1); checked before anything else.
pub const REQUIRED_VARIABLES: [&str; 5] = [
    "VF_NODE_NAME",
    "VF_NODE_KIND",
    "VF_NATS_URL",
    "VF_FLOW_ID",
    "VF_RUN_ID",
];

/// Where the replica id came from (ENV-5), so logs and the slot claim can tell a declared
/// identity from a missing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSource {
    /// Step 1: `VF_REPLICA_ID` parsed as Python `int()`.
    ReplicaIdVar,
    /// Step 2: the trailing ordinal of `POD_NAME`.
    PodName,
    /// Step 2: the trailing ordinal of `HOSTNAME`.
    Hostname,
    /// Neither step gave an id: step 3 (ledger slot claim) may apply, else step 4 (0).
    NotDeclared,
    /// Step 3: a slot claimed through the run ledger under a partition lease.
    LedgerSlot,
}

/// The replica id the environment declares (ENV-5 steps 1 and 2).
///
/// Step 3 needs the run ledger, so it is not resolved here: `declared` stays `None` and the
/// caller either claims a slot ([`WorkerConfig::needs_slot_claim`]) or takes step 4
/// ([`ReplicaId::or_default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaId {
    /// The declared id; negative values are kept as 1.0.4 keeps them (control planes never
    /// emit one).
    pub declared: Option<i64>,
    /// Which step produced it.
    pub source: ReplicaSource,
}

impl ReplicaId {
    /// ENV-5 step 4: the declared id, else 0 — what a worker without a shared ledger uses.
    pub fn or_default(&self) -> i64 {
        self.declared.unwrap_or(0)
    }
}

/// One explicit channel-profile request (ENV-13, §17), checked against the streams at bind.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRequest {
    /// The node (channel) whose stream the profile applies to.
    pub channel: String,
    /// The profile name, e.g. `live_latest`.
    pub profile: String,
    /// Profile options (`horizon_seconds`, `key`, …); empty when absent or null.
    pub options: Map<String, Json>,
}

/// The delivery credit of every data durable of this node (STREAM-15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    /// Inputs one replica holds in processing: 1, or the join working set for P > 1 parents.
    pub item_credit: i64,
    /// Local queue depth per parent (4).
    pub prefetch: i64,
    /// The durable's `max_ack_pending`.
    pub max_ack_pending: i64,
}

/// What a worker does once its loop ended cleanly (end of input, a drained stop result, the
/// control stop): `VF_ON_FINISH`.
///
/// Why a choice: under a supervisor that restarts every exit — a Kubernetes Deployment or
/// StatefulSet (`restartPolicy: Always`), which is how a REALTIME flow runs its processors,
/// consumers and live producers — a clean exit 0 after the drain is restarted into a worker
/// with nothing left to read, and then into `CrashLoopBackOff`. The operator renders `hold`
/// for those workloads; the local runner and Jobs keep the protocol's exit (LOOP-2/3/4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFinish {
    /// Exit 0 (the protocol's default; unset or empty).
    #[default]
    Exit,
    /// Stay up, ready and live, until SIGTERM or SIGINT, then exit 0.
    Hold,
}

/// Everything a node worker reads from its environment, typed (§1.1).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// `VF_NODE_NAME`: the sole source of routing names (ENV-2).
    pub node_name: String,
    /// `VF_NODE_KIND`.
    pub kind: NodeKind,
    /// `VF_PARENT_NAMES`: positional input order (ENV-3); empty pieces dropped, not trimmed.
    pub parent_names: Vec<String>,
    /// `VF_HAS_CHILDREN` is exactly `1` (default).
    pub has_children: bool,
    /// `VF_FLOW_ID`, raw (sanitized only inside broker names).
    pub flow_id: String,
    /// `VF_RUN_ID`, raw.
    pub run_id: String,
    /// `VF_FLOW_TYPE` as given (default `realtime`); never validated (T3). Use
    /// [`WorkerConfig::is_realtime`] and [`WorkerConfig::is_batch_preset`].
    pub flow_type: String,
    /// `VF_NATS_URL`.
    pub nats_url: String,
    /// ENV-5 steps 1 and 2.
    pub replica: ReplicaId,
    /// `VF_NB_TASKS` (default 1); not range-checked.
    pub nb_tasks: i64,
    /// `VF_PARTITION_BY`; `None` when unset or empty.
    pub partition_by: Option<String>,
    /// The resolved join policy: `VF_JOIN_POLICY_JSON`, else the JOIN-2 flow-type default.
    pub join_policy: JoinPolicy,
    /// Whether `join_policy` came from `VF_JOIN_POLICY_JSON` (not the default).
    pub join_policy_explicit: bool,
    /// `VF_ACK_WAIT_SECONDS` (default 60) for durables this worker creates.
    pub ack_wait_seconds: i64,
    /// `VF_MAX_RETRIES` (default 3); used only by an at-least-once node.
    pub max_retries: i64,
    /// `VF_EOS_QUIESCENCE_MS` (default 500), clamped to ≥ 0 (EOS-3).
    pub eos_quiescence_ms: i64,
    /// `VF_HEALTH_PORT` (default 0 = no server).
    pub health_port: i64,
    /// `VF_ENVELOPE_VERSION`: always 4 once parsed (WIRE-2).
    pub envelope_version: i64,
    /// The delivery mode (DELIV-10): `VF_DELIVERY`, else the flow-type preset.
    pub delivery: DeliveryMode,
    /// `VF_DELIVERY` as given when non-empty (unvalidated, DELIV-10).
    pub delivery_raw: Option<String>,
    /// `VF_ON_ERROR` (default `transient`, ERR-2).
    pub on_error: OnError,
    /// Whether `VF_ON_ERROR` was set (1.0.4 passes an override only then).
    pub on_error_explicit: bool,
    /// `VF_BREAKER_THRESHOLD` (default 10; 0 disables, ERR-5a).
    pub breaker_threshold: i64,
    /// `VF_PROGRESS_TIMEOUT_SECONDS` (default 300; ≤ 0 disables, ERR-7).
    pub progress_timeout_seconds: f64,
    /// `VF_WATCHDOG_INTERVAL_SECONDS` (default 5; 0 = no watchdog thread, ENV-15).
    pub watchdog_interval_seconds: f64,
    /// `VF_TERMINATION_LOG` (default `/dev/termination-log`; empty = default).
    pub termination_log: PathBuf,
    /// `VF_PROFILE_REQUESTS_JSON` (ENV-13); empty when unset.
    pub profile_requests: Vec<ProfileRequest>,
    /// `VF_ADMISSION_TIMEOUT_SECONDS` (default 60), parsed only when requests are named.
    pub admission_timeout_seconds: f64,
    /// `VF_RUNTIME_STORE_URL` (default `memory://`; empty = default). Scheme checked by the
    /// store factory (STORE-2).
    pub runtime_store_url: String,
    /// `VF_PARENT_REPLICAS` aligned with `parent_names` (ENV-11); `None` when unset or empty
    /// (the EOS-7 barrier is then not evaluated).
    pub parent_replicas: Option<Vec<u64>>,
    /// `VF_REPLICA_SLOTS` (default and empty = `VF_NB_TASKS`, ENV-19).
    pub replica_slots: i64,
    /// `VF_PARTITION_LEASE_SECONDS` (default 10, §11.2).
    pub partition_lease_seconds: f64,
    /// `VF_BLOB_REDIS_URL`; `None` when unset or empty (scheme checked by the store, BLOB-4).
    pub blob_url: Option<String>,
    /// `VF_BLOB_READERS`; `None` (TTL-only) when unset, empty or ≤ 0 (BLOB-5).
    pub blob_readers: Option<i64>,
    /// `VF_BLOB_READER_IDS` (ENV-12): empty pieces dropped.
    pub blob_reader_ids: Vec<String>,
    /// `VF_BLOB_TTL_SECONDS`, else 3600 (realtime) / 86400 (any other flow type) (BLOB-7).
    pub blob_ttl_seconds: i64,
    /// `VF_STORE_ADMISSION` (default 1): parsed only for an obligation store
    /// (`redis`/`rediss` blob URL), as 1.0.4 checks it when building that store.
    pub store_admission: f64,
    /// `VF_STORE_BACKPRESSURE_SECONDS`; `None` = the messenger's default (600). Always parsed.
    pub store_backpressure_seconds: Option<f64>,
    /// The GPU and asset variables.
    pub device: DeviceConfig,
    /// `VF_PREFETCH_BYTES`; `None` when unset or empty.
    pub prefetch_bytes: Option<i64>,
    /// `VF_STREAM_MAX_AGE_SECONDS`: the age bound (`max_age`) this worker ensures on its own
    /// stream and its parents', as the provisioner does; `None`: no age bound (STREAM-2/3).
    pub stream_max_age: Option<std::time::Duration>,
    /// `VF_CREDIT_MESSAGES` (STREAM-15a): un-acked deliveries one replica of a single-parent
    /// node asks its durable for; `None` (unset, empty or < 1) is STREAM-15's `1 + prefetch`.
    pub credit_messages: Option<i64>,
    /// `VF_STRUCTURED_LOGS` is `1`/`true`/`yes` (case-insensitive).
    pub structured_logs: bool,
    /// `VF_NODE_PARAMS_JSON` (default `{}`): node constructor parameters.
    pub node_params: Map<String, Json>,
    /// `VF_NODE_CLASS`; kept for diagnostics, a Rust worker does not require it.
    pub node_class: Option<String>,
    /// The exec component (`VF_COMPONENT_COMMAND_JSON` and its deadlines), if any.
    pub component: Option<ComponentConfig>,
    /// `VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES` (default 524288, BLOB-1); a value that is not a
    /// byte count is the default, as 1.0.4 reads it.
    pub max_inline_payload_bytes: usize,
    /// `VF_ON_FINISH` (default `exit`): see [`OnFinish`].
    pub on_finish: OnFinish,
    /// `VF_REPLAYABLE` (our extension, default `0`): a producer mints `{node}:{offset}` and
    /// resumes after its last accepted offset (MSGID-6) instead of a new epoch (MSGID-5).
    pub replayable: bool,
}

impl WorkerConfig {
    /// Parses `env` after refusing a variable it reads that is not UTF-8 (the binary's path;
    /// tests use [`WorkerConfig::from_env`] with an explicit map).
    ///
    /// # Errors
    /// As [`WorkerConfig::from_env`], and `VF_CONFIG` naming a non-UTF-8 variable.
    pub fn from_environment(env: &Environment) -> Result<WorkerConfig, VfError> {
        env.check_unicode()?;
        WorkerConfig::from_env(env.vars())
    }

    /// Parses the contract from `vars` (ENV-1…ENV-19). Missing required variables fail
    /// first, in 1.0.4's reading order; other failures follow 1.0.4's order; unknown `VF_*`
    /// variables are ignored (ENV-4).
    pub fn from_env(vars: &BTreeMap<String, String>) -> Result<WorkerConfig, VfError> {
        let env = Env(vars);
        for var in REQUIRED_VARIABLES {
            env.required(var)?;
        }
        let node_name = env.required("VF_NODE_NAME")?.to_owned();
        let kind_raw = env.required("VF_NODE_KIND")?.to_owned();
        let nats_url = env.required("VF_NATS_URL")?.to_owned();
        let flow_id = env.required("VF_FLOW_ID")?.to_owned();
        let run_id = env.required("VF_RUN_ID")?.to_owned();
        let parent_names = split_list(env.get("VF_PARENT_NAMES").unwrap_or(""));
        let has_children = env.get("VF_HAS_CHILDREN").unwrap_or("1") == "1";
        let flow_type = env.get("VF_FLOW_TYPE").unwrap_or("realtime").to_owned();
        let replica = resolve_replica_id(vars);

        let ack_wait_seconds = env.int_or("VF_ACK_WAIT_SECONDS", 60)?;
        let max_retries = env.int_or("VF_MAX_RETRIES", 3)?;
        let eos_quiescence_ms = env.int_or("VF_EOS_QUIESCENCE_MS", 500)?.max(0);
        let nb_tasks = env.int_or("VF_NB_TASKS", 1)?;
        let partition_by = env.non_empty("VF_PARTITION_BY").map(str::to_owned);
        let preset = if flow_type == "batch" {
            FlowType::Batch
        } else {
            FlowType::Realtime
        };
        let (join_policy, join_policy_explicit) = parse_join_policy(
            env.get("VF_JOIN_POLICY_JSON"),
            preset,
            &node_name,
            &parent_names,
        )?;
        let parent_replicas = parse_parent_replicas(&parent_names, env.get("VF_PARENT_REPLICAS"))?;

        let delivery_raw = env.non_empty("VF_DELIVERY").map(str::to_owned);
        let delivery = match delivery_raw.as_deref() {
            Some("at-least-once") => DeliveryMode::AtLeastOnce,
            Some(_) => DeliveryMode::BestEffort,
            None if preset == FlowType::Batch => DeliveryMode::AtLeastOnce,
            None => DeliveryMode::BestEffort,
        };
        let (on_error, on_error_explicit) = match env.non_empty("VF_ON_ERROR") {
            None => (OnError::Transient, false),
            Some(v) => (parse_on_error(v)?, true),
        };
        let breaker_threshold = env.int_or("VF_BREAKER_THRESHOLD", 10)?;
        let progress_timeout_seconds = parse_progress_timeout(&env)?;
        let watchdog_interval_seconds = WATCHDOG_INTERVAL
            .parse(env.get("VF_WATCHDOG_INTERVAL_SECONDS"))?
            .unwrap_or(5.0);
        let envelope_version = parse_envelope_version(env.get("VF_ENVELOPE_VERSION"))?;

        let profile_requests = parse_profile_requests(env.get("VF_PROFILE_REQUESTS_JSON"))?;
        let admission_timeout_seconds = if profile_requests.is_empty() {
            60.0
        } else {
            ADMISSION_TIMEOUT
                .parse(env.get("VF_ADMISSION_TIMEOUT_SECONDS"))?
                .unwrap_or(60.0)
        };

        let blob_url = env.non_empty("VF_BLOB_REDIS_URL").map(str::to_owned);
        let store_admission = match &blob_url {
            Some(url) if is_obligation_store(url) => STORE_ADMISSION
                .parse(env.get("VF_STORE_ADMISSION"))?
                .unwrap_or(1.0),
            _ => 1.0,
        };
        let blob_reader_ids = split_list(env.get("VF_BLOB_READER_IDS").unwrap_or(""));
        let blob_readers = env.optional_int("VF_BLOB_READERS")?.filter(|n| *n > 0);
        let blob_ttl_seconds = match env.optional_int("VF_BLOB_TTL_SECONDS")? {
            Some(ttl) => ttl,
            None if flow_type == "realtime" => DEFAULT_BLOB_TTL_REALTIME_SECONDS,
            None => DEFAULT_BLOB_TTL_BATCH_SECONDS,
        };

        let node_class = env.non_empty("VF_NODE_CLASS").map(str::to_owned);
        let node_params = parse_node_params(env.get("VF_NODE_PARAMS_JSON"))?;
        let runtime_store_url = env
            .non_empty("VF_RUNTIME_STORE_URL")
            .unwrap_or(DEFAULT_RUNTIME_STORE_URL)
            .to_owned();
        let partition_lease_seconds = PARTITION_LEASE
            .parse(env.get("VF_PARTITION_LEASE_SECONDS"))?
            .unwrap_or(10.0);
        let replica_slots = env.optional_int("VF_REPLICA_SLOTS")?.unwrap_or(nb_tasks);
        let health_port = env.int_or("VF_HEALTH_PORT", 0)?;
        let prefetch_bytes = env.optional_int("VF_PREFETCH_BYTES")?;
        let stream_max_age =
            super::read::stream_max_age(env.optional_int("VF_STREAM_MAX_AGE_SECONDS")?)?;
        let credit_messages = env.optional_int("VF_CREDIT_MESSAGES")?.filter(|n| *n > 0);
        let store_backpressure_seconds =
            STORE_BACKPRESSURE.parse(env.get("VF_STORE_BACKPRESSURE_SECONDS"))?;
        let device = parse_device(&env)?;
        let structured_logs = structured_logs(env.get("VF_STRUCTURED_LOGS"));
        let component = ComponentConfig::from_env(vars)?;
        let max_inline_payload_bytes = env
            .get("VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_MAX_INLINE_PAYLOAD_BYTES);
        let termination_log = termination_log_path(vars);
        let on_finish = parse_on_finish(env.non_empty("VF_ON_FINISH"))?;
        let replayable = parse_replayable(env.non_empty("VF_REPLAYABLE"))?;
        // 1.0.4 checks the kind last, just before the task loop.
        let kind = parse_kind(&kind_raw)?;

        Ok(WorkerConfig {
            node_name,
            kind,
            parent_names,
            has_children,
            flow_id,
            run_id,
            flow_type,
            nats_url,
            replica,
            nb_tasks,
            partition_by,
            join_policy,
            join_policy_explicit,
            ack_wait_seconds,
            max_retries,
            eos_quiescence_ms,
            health_port,
            envelope_version,
            delivery,
            delivery_raw,
            on_error,
            on_error_explicit,
            breaker_threshold,
            progress_timeout_seconds,
            watchdog_interval_seconds,
            termination_log,
            profile_requests,
            admission_timeout_seconds,
            runtime_store_url,
            parent_replicas,
            replica_slots,
            partition_lease_seconds,
            blob_url,
            blob_readers,
            blob_reader_ids,
            blob_ttl_seconds,
            store_admission,
            store_backpressure_seconds,
            device,
            prefetch_bytes,
            stream_max_age,
            credit_messages,
            structured_logs,
            node_params,
            node_class,
            component,
            max_inline_payload_bytes,
            on_finish,
            replayable,
        })
    }

    /// REALTIME for stream shape, blob TTL, publish blocking, the channel profile and the
    /// EOS-7 barrier exclusion: `VF_FLOW_TYPE == "realtime"` exactly (T3).
    pub fn is_realtime(&self) -> bool {
        self.flow_type == "realtime"
    }

    /// BATCH for the delivery and join presets: `VF_FLOW_TYPE == "batch"` exactly (T3). Any
    /// other value is neither realtime nor a batch preset.
    pub fn is_batch_preset(&self) -> bool {
        self.flow_type == "batch"
    }

    /// The flow type the delivery and join presets use (JOIN-2, DELIV-10).
    pub fn preset_flow_type(&self) -> FlowType {
        if self.is_batch_preset() {
            FlowType::Batch
        } else {
            FlowType::Realtime
        }
    }

    /// The flow type that shapes streams, blob TTLs and publishes (STREAM-*, BLOB-7).
    pub fn shape_flow_type(&self) -> FlowType {
        if self.is_realtime() {
            FlowType::Realtime
        } else {
            FlowType::Batch
        }
    }

    /// PART-1: partitioning is active iff `VF_PARTITION_BY` is set and `VF_NB_TASKS > 1`;
    /// otherwise every replica owns every message and binds the shared durable.
    pub fn is_partitioned(&self) -> bool {
        self.partition_by.is_some() && self.nb_tasks > 1
    }

    /// STREAM-15: `item_credit` (1, or the join working set for P > 1 parents) plus prefetch
    /// 4, times `nb_tasks` for a shared durable; a single-parent node's `VF_CREDIT_MESSAGES`
    /// replaces the per-replica `1 + prefetch` (STREAM-15a). Provisioning derives the same
    /// numbers, so the durable created and the durable bound agree.
    pub fn credit(&self) -> Credit {
        let join = self.parent_names.len() >= 2;
        let item_credit = if join {
            self.join_policy.working_set(self.parent_names.len())
        } else {
            1
        };
        let per_replica = match self.credit_messages {
            Some(n) if !join => n,
            _ => item_credit.saturating_add(PREFETCH),
        };
        let max_ack_pending = if self.is_partitioned() {
            per_replica
        } else {
            self.nb_tasks.saturating_mul(per_replica)
        };
        Credit {
            item_credit,
            prefetch: PREFETCH,
            max_ack_pending,
        }
    }

    /// This replica's share of a bound durable whose effective `max_ack_pending` is
    /// `effective` (STREAM-15a): all of it for a partitioned durable, `effective / nb_tasks`
    /// (at least 1) for a shared one; a durable without a limit (≤ 0) grants what this node
    /// would have asked for.
    pub fn replica_share(&self, effective: i64) -> i64 {
        let requested = self.credit().max_ack_pending;
        let total = if effective > 0 { effective } else { requested };
        if self.is_partitioned() {
            total.max(1)
        } else {
            (total / self.nb_tasks.max(1)).max(1)
        }
    }

    /// STREAM-5: best-effort ⇒ 1; at-least-once ⇒ `VF_MAX_RETRIES + 1`, or −1 when the run
    /// ledger is durable and shared (`ledger_caps_attempts`), which then counts attempts.
    pub fn max_deliver(&self, ledger_caps_attempts: bool) -> i64 {
        match self.delivery {
            DeliveryMode::BestEffort => 1,
            DeliveryMode::AtLeastOnce if ledger_caps_attempts => -1,
            DeliveryMode::AtLeastOnce => self.max_retries.saturating_add(1),
        }
    }

    /// The slots a replica may claim through the ledger: `max(VF_NB_TASKS, VF_REPLICA_SLOTS)`.
    pub fn replica_slot_count(&self) -> i64 {
        self.nb_tasks.max(self.replica_slots)
    }

    /// ENV-5 step 3 hook: whether the replica must claim a slot through the run ledger —
    /// no declared id, more than one slot, not partitioned by key, and a ledger that is
    /// durable and shared (STORE-6, known only once the store is built).
    pub fn needs_slot_claim(&self, ledger_durable_and_shared: bool) -> bool {
        self.replica.declared.is_none()
            && self.replica_slot_count() > 1
            && self.partition_by.is_none()
            && ledger_durable_and_shared
    }

    /// The replica id when no slot claim applies (ENV-5 steps 1, 2, 4).
    pub fn replica_id(&self) -> i64 {
        self.replica.or_default()
    }
}

/// `VF_TERMINATION_LOG` on its own: where a startup failure is recorded, even one that stops
/// the rest of the configuration from parsing (§15.4).
pub fn termination_log_path(vars: &BTreeMap<String, String>) -> PathBuf {
    PathBuf::from(
        vars.get("VF_TERMINATION_LOG")
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_TERMINATION_LOG),
    )
}

/// `VF_PROGRESS_TIMEOUT_SECONDS` (ERR-7): Python `float()`, ≤ 0 disables; a value no clock
/// can wait out (`inf`, `nan`, beyond [`MAX_SECONDS`]) is refused rather than panicking later.
fn parse_progress_timeout(env: &Env<'_>) -> Result<f64, VfError> {
    const VAR: &str = "VF_PROGRESS_TIMEOUT_SECONDS";
    let x = env.float_or(VAR, 300.0)?;
    if x.is_nan() || x > MAX_SECONDS {
        let v = env.get(VAR).unwrap_or_default();
        return Err(config_error(
            VAR,
            Some(v),
            format!(
                "{VAR}={} is not a usable number of seconds.",
                py_repr_str(v)
            ),
            format!(
                "Set {VAR} to at most {MAX_SECONDS:.0} seconds, or to 0 to disable the progress deadline."
            ),
        ));
    }
    Ok(x)
}

/// ENV-5 steps 1 and 2.
fn resolve_replica_id(vars: &BTreeMap<String, String>) -> ReplicaId {
    if let Some(v) = vars.get("VF_REPLICA_ID").filter(|v| !v.is_empty())
        && let Some(id) = py_int(v).and_then(|n| i64::try_from(n).ok())
    {
        return ReplicaId {
            declared: Some(id),
            source: ReplicaSource::ReplicaIdVar,
        };
    }
    for (var, source) in [
        ("POD_NAME", ReplicaSource::PodName),
        ("HOSTNAME", ReplicaSource::Hostname),
    ] {
        let Some((_, tail)) = vars.get(var).and_then(|v| v.rsplit_once('-')) else {
            continue;
        };
        if !tail.is_empty()
            && tail.bytes().all(|b| b.is_ascii_digit())
            && let Ok(id) = tail.parse::<i64>()
        {
            return ReplicaId {
                declared: Some(id),
                source,
            };
        }
    }
    ReplicaId {
        declared: None,
        source: ReplicaSource::NotDeclared,
    }
}

/// `VF_NODE_KIND`: exact table text for an unknown value.
fn parse_kind(v: &str) -> Result<NodeKind, VfError> {
    match v {
        "producer" => Ok(NodeKind::Producer),
        "processor" => Ok(NodeKind::Processor),
        "consumer" => Ok(NodeKind::Consumer),
        _ => Err(config_error(
            "VF_NODE_KIND",
            Some(v),
            format!("Unknown VF_NODE_KIND: {}.", py_repr_str(v)),
            "Use one of: producer, processor, consumer.".into(),
        )),
    }
}

/// `VF_ON_ERROR` (ERR-2): exact table text and remedy.
fn parse_on_finish(v: Option<&str>) -> Result<OnFinish, VfError> {
    match v {
        None | Some("exit") => Ok(OnFinish::Exit),
        Some("hold") => Ok(OnFinish::Hold),
        Some(other) => Err(config_error(
            "VF_ON_FINISH",
            Some(other),
            format!(
                "VF_ON_FINISH={} is not a known behaviour.",
                py_repr_str(other)
            ),
            "Use exit (the default) or hold (stay up after a clean end until SIGTERM).".into(),
        )),
    }
}

/// `VF_REPLAYABLE`: `1`/`true` or `0`/`false` (unset: a live producer).
fn parse_replayable(v: Option<&str>) -> Result<bool, VfError> {
    match v {
        None | Some("0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(config_error(
            "VF_REPLAYABLE",
            Some(other),
            format!("VF_REPLAYABLE={} is not a boolean.", py_repr_str(other)),
            "Use 1 (the producer resumes from its last accepted offset, MSGID-6) or 0 (a live \
             source, the default)."
                .into(),
        )),
    }
}

fn parse_on_error(v: &str) -> Result<OnError, VfError> {
    match v {
        "poison" => Ok(OnError::Poison),
        "transient" => Ok(OnError::Transient),
        "worker_fatal" => Ok(OnError::WorkerFatal),
        _ => Err(config_error(
            "VF_ON_ERROR",
            Some(v),
            format!("VF_ON_ERROR={} is not a known disposition.", py_repr_str(v)),
            "Use one of: poison, transient, worker_fatal.".into(),
        )),
    }
}

/// WIRE-2: a non-integer is not a number; any integer but 4 is refused with the exact text.
fn parse_envelope_version(raw: Option<&str>) -> Result<i64, VfError> {
    const VAR: &str = "VF_ENVELOPE_VERSION";
    let Some(v) = raw else {
        return Ok(SUPPORTED_ENVELOPE_VERSION);
    };
    let n = py_int(v)
        .ok_or_else(|| not_a_number(VAR, v, "Set VF_ENVELOPE_VERSION to 4, or unset it."))?;
    if n != i128::from(SUPPORTED_ENVELOPE_VERSION) {
        return Err(config_error(
            VAR,
            Some(v),
            format!("VF_ENVELOPE_VERSION={n} is not emittable by this build."),
            "Supported versions: (4,).".into(),
        ));
    }
    Ok(SUPPORTED_ENVELOPE_VERSION)
}

/// `VF_WATCHDOG_INTERVAL_SECONDS` (ENV-15): ≥ 0, 0 = no watchdog thread.
const WATCHDOG_INTERVAL: FloatRule = FloatRule {
    var: "VF_WATCHDOG_INTERVAL_SECONDS",
    not_number: "is not a number.",
    out_of_range: "is negative.",
    ok: |x| x >= 0.0,
    remedy: "Set it to the seconds between progress checks, or 0 to disable the watchdog thread.",
    blank_is_unset: false,
};

/// `VF_ADMISSION_TIMEOUT_SECONDS`: > 0.
const ADMISSION_TIMEOUT: FloatRule = FloatRule {
    var: "VF_ADMISSION_TIMEOUT_SECONDS",
    not_number: "is not a number.",
    out_of_range: "is not positive.",
    ok: |x| x > 0.0,
    remedy: "Set it to the seconds a read-back of the broker may take, or unset it.",
    blank_is_unset: false,
};

/// `VF_PARTITION_LEASE_SECONDS` (§11.2): > 0, always parsed.
const PARTITION_LEASE: FloatRule = FloatRule {
    var: "VF_PARTITION_LEASE_SECONDS",
    not_number: "is not a number of seconds.",
    out_of_range: "must be positive.",
    ok: |x| x > 0.0,
    remedy: "Set VF_PARTITION_LEASE_SECONDS to a positive number, or unset it.",
    blank_is_unset: true,
};

/// `VF_STORE_ADMISSION` (BLOB-16): a share in (0, 1].
const STORE_ADMISSION: FloatRule = FloatRule {
    var: "VF_STORE_ADMISSION",
    not_number: "is not a number.",
    out_of_range: "is not in (0, 1].",
    ok: |x| x > 0.0 && x <= 1.0,
    remedy: "Set it to the share of the payload store this node may fill, in (0, 1].",
    blank_is_unset: false,
};

/// `VF_STORE_BACKPRESSURE_SECONDS` (BLOB-16): seconds ≥ 0, always parsed.
const STORE_BACKPRESSURE: FloatRule = FloatRule {
    var: "VF_STORE_BACKPRESSURE_SECONDS",
    not_number: "is not a number.",
    out_of_range: "is negative.",
    ok: |x| x >= 0.0,
    remedy: "Set it to the seconds a publisher may wait for a full payload store to drain, or 0 to fail the publication at once.",
    blank_is_unset: false,
};

/// Whether a blob URL selects 1.0.4's obligation store (`redis`/`rediss`, §20).
fn is_obligation_store(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        matches!(scheme.to_ascii_lowercase().as_str(), "redis" | "rediss")
    })
}

/// `VF_PARENT_REPLICAS` (ENV-11): count check first, then each trimmed entry; exact texts.
fn parse_parent_replicas(
    parents: &[String],
    raw: Option<&str>,
) -> Result<Option<Vec<u64>>, VfError> {
    const VAR: &str = "VF_PARENT_REPLICAS";
    let Some(raw) = raw.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let values: Vec<&str> = raw.split(',').map(str::trim).collect();
    if values.len() != parents.len() {
        return Err(config_error(
            VAR,
            Some(raw),
            format!(
                "{VAR} has {} entries for {} parents.",
                values.len(),
                parents.len()
            ),
            format!(
                "Emit one entry per name in VF_PARENT_NAMES, in the same order: {}.",
                parents.join(",")
            ),
        ));
    }
    parents
        .iter()
        .zip(values)
        .map(|(parent, value)| {
            let count = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
                .then(|| value.parse::<u64>().ok())
                .flatten();
            count.ok_or_else(|| {
                config_error(
                    VAR,
                    Some(raw),
                    format!(
                        "{VAR} entry {} for parent {} is not a count.",
                        py_repr_str(value),
                        py_repr_str(parent)
                    ),
                    "Use a non-negative integer per parent.".into(),
                )
            })
        })
        .collect::<Result<Vec<u64>, VfError>>()
        .map(Some)
}

/// `VF_JOIN_POLICY_JSON` (§8.1): unset, empty, `{}` or `null` ⇒ the JOIN-2 default of the
/// preset flow type; otherwise the reference's snake_case dict with its constructor defaults,
/// validated by [`JoinPolicy::problems`] (the first problem is reported).
fn parse_join_policy(
    raw: Option<&str>,
    preset: FlowType,
    node: &str,
    parents: &[String],
) -> Result<(JoinPolicy, bool), VfError> {
    const VAR: &str = "VF_JOIN_POLICY_JSON";
    const REMEDY: &str = "Set it to the join policy object the compiler renders (snake_case keys), or unset it for the flow-type default.";
    let Some(v) = raw.filter(|v| !v.is_empty()) else {
        return Ok((JoinPolicy::default_for(preset), false));
    };
    let json: Json = serde_json::from_str(v).map_err(|e| invalid_json(VAR, v, e, REMEDY))?;
    let obj = match json {
        Json::Null => return Ok((JoinPolicy::default_for(preset), false)),
        Json::Object(o) if o.is_empty() => return Ok((JoinPolicy::default_for(preset), false)),
        Json::Object(o) => o,
        _ => {
            return Err(config_error(
                VAR,
                Some(v),
                format!("{VAR}={} is not a JSON object.", py_repr_str(v)),
                REMEDY.into(),
            ));
        }
    };
    let policy = JoinPolicy::from_reference_json(&obj).map_err(|e| {
        config_error(
            VAR,
            Some(v),
            format!(
                "{VAR}={} has an invalid {}: expected {}.",
                py_repr_str(v),
                e.field,
                e.expected
            ),
            REMEDY.into(),
        )
    })?;
    if let Some(p) = policy.problems(node, parents).into_iter().next() {
        return Err(config_error(
            VAR,
            Some(v),
            format!("{VAR} is not a valid join policy: {}", p.message),
            p.remedy,
        )
        .with_context("field", p.field));
    }
    Ok((policy, true))
}

/// `VF_PROFILE_REQUESTS_JSON` parsed on its own (the provision job reads it without the rest
/// of a worker's environment).
///
/// # Errors
/// `VF_CONFIG` as for a worker.
pub fn profile_requests_from(raw: Option<&str>) -> Result<Vec<ProfileRequest>, VfError> {
    parse_profile_requests(raw)
}

/// `VF_ADMISSION_TIMEOUT_SECONDS` parsed on its own (default 60 s).
///
/// # Errors
/// `VF_CONFIG` `… is not a number.` / `… is not positive.`
pub fn admission_timeout_from(raw: Option<&str>) -> Result<f64, VfError> {
    Ok(ADMISSION_TIMEOUT.parse(raw)?.unwrap_or(60.0))
}

/// `VF_PROFILE_REQUESTS_JSON` (ENV-13): a list of `{channel, profile, options}`; empty when
/// unset or empty.
fn parse_profile_requests(raw: Option<&str>) -> Result<Vec<ProfileRequest>, VfError> {
    const VAR: &str = "VF_PROFILE_REQUESTS_JSON";
    const REMEDY: &str =
        "Set it to a JSON list of {\"channel\", \"profile\", \"options\"} objects, or unset it.";
    let Some(v) = raw.filter(|v| !v.is_empty()) else {
        return Ok(Vec::new());
    };
    let json: Json = serde_json::from_str(v).map_err(|e| invalid_json(VAR, v, e, REMEDY))?;
    let Json::Array(items) = json else {
        return Err(config_error(
            VAR,
            Some(v),
            format!("{VAR}={} is not a JSON list.", py_repr_str(v)),
            REMEDY.into(),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let entry_error = |what: &str| {
                config_error(
                    VAR,
                    Some(v),
                    format!("{VAR} entry {i} {what}."),
                    REMEDY.into(),
                )
            };
            let obj = item
                .as_object()
                .ok_or_else(|| entry_error("is not an object"))?;
            let text = |key: &str| -> Result<String, VfError> {
                match obj.get(key) {
                    Some(Json::String(s)) => Ok(s.clone()),
                    Some(Json::Null) | None => Err(entry_error(&format!("has no '{key}'"))),
                    Some(other) => Ok(other.to_string()),
                }
            };
            let options = match obj.get("options") {
                None | Some(Json::Null) => Map::new(),
                Some(Json::Object(m)) => m.clone(),
                Some(_) => return Err(entry_error("has 'options' that is not an object")),
            };
            Ok(ProfileRequest {
                channel: text("channel")?,
                profile: text("profile")?,
                options,
            })
        })
        .collect()
}

/// `VF_NODE_PARAMS_JSON` (default `{}`): must be an object (the constructor's keywords).
fn parse_node_params(raw: Option<&str>) -> Result<Map<String, Json>, VfError> {
    const VAR: &str = "VF_NODE_PARAMS_JSON";
    const REMEDY: &str = "Set it to a JSON object of node parameters, or unset it.";
    let Some(v) = raw else {
        return Ok(Map::new());
    };
    match serde_json::from_str(v).map_err(|e| invalid_json(VAR, v, e, REMEDY))? {
        Json::Object(m) => Ok(m),
        _ => Err(config_error(
            VAR,
            Some(v),
            format!("{VAR}={} is not a JSON object.", py_repr_str(v)),
            REMEDY.into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_16_obligation_store_scheme() {
        assert!(is_obligation_store("redis://h:6379/0"));
        assert!(is_obligation_store("REDISS://h"));
        assert!(!is_obligation_store("unix:///tmp/s"));
        assert!(!is_obligation_store("localhost"));
    }
}
