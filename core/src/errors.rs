//! The error taxonomy (ERR-*): codes, exit codes, dispositions, records and renderings.
//!
//! Why a closed taxonomy: the code is what metrics, dead letters and the supervisor key on,
//! the disposition is what the failure ladder branches on, and the exit code is what a
//! wrapper script or Kubernetes reads. All three must match 1.0.4's classes exactly (§15.1),
//! so they live in one table here instead of being scattered over ad-hoc error types.

use std::collections::BTreeMap;
use std::fmt;

use crate::partition::{py_float, py_repr, py_repr_str};
use crate::redact::{redact_json, redact_string};
use crate::value::Value;

/// Exit status of an untyped failure (§0), and of the base class `VF_UNKNOWN`.
pub const EXIT_UNTYPED: i32 = 1;
/// Exit status of a user error: the flow or its configuration is wrong.
pub const EXIT_USER: i32 = 2;
/// Exit status of an environment error: the world is not as required.
pub const EXIT_ENVIRONMENT: i32 = 3;
/// Exit status when the flow ran and a node failed (runtime errors included).
pub const EXIT_FLOW_FAILED: i32 = 4;
/// Exit status when the flow can never finish (stalled).
pub const EXIT_FLOW_STALLED: i32 = 5;
/// Exit status for SIGINT before the task loop (no termination record).
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit status for SIGTERM (START-2).
pub const EXIT_TERMINATED: i32 = 143;

/// Diagnostic-only graph code (inside a `VF_GRAPH` error): an input names a non-producer.
pub const VF_GRAPH_NOT_A_PRODUCER: &str = "VF_GRAPH_NOT_A_PRODUCER";
/// Diagnostic-only graph code: the graph has a cycle.
pub const VF_GRAPH_CYCLE: &str = "VF_GRAPH_CYCLE";
/// Diagnostic-only graph code: two nodes share a name.
pub const VF_GRAPH_DUPLICATE_NAME: &str = "VF_GRAPH_DUPLICATE_NAME";
/// Diagnostic-only graph code: distinct names collide once encoded (NAME-1).
pub const VF_GRAPH_NAME_COLLISION: &str = "VF_GRAPH_NAME_COLLISION";
/// Diagnostic-only graph code: a consumer no producer reaches.
pub const VF_GRAPH_UNREACHABLE_CONSUMER: &str = "VF_GRAPH_UNREACHABLE_CONSUMER";
/// Diagnostic-only graph code: a replicated join without a partition key.
pub const VF_GRAPH_UNPARTITIONED_JOIN: &str = "VF_GRAPH_UNPARTITIONED_JOIN";
/// Diagnostic-only graph code (warning): an output nobody reads.
pub const VF_GRAPH_OUTPUT_UNREAD: &str = "VF_GRAPH_OUTPUT_UNREAD";

/// What a failure means for the data and the worker (ERR-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Disposition {
    /// The data is bad: dead-letter it, never retry.
    Poison,
    /// The world blipped: retry.
    Transient,
    /// This worker is sick: hand the input back and stop.
    WorkerFatal,
}

impl Disposition {
    /// The protocol's word: `poison`, `transient` or `worker_fatal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Poison => "poison",
            Disposition::Transient => "transient",
            Disposition::WorkerFatal => "worker_fatal",
        }
    }

    /// Parses the protocol's word; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "poison" => Some(Disposition::Poison),
            "transient" => Some(Disposition::Transient),
            "worker_fatal" => Some(Disposition::WorkerFatal),
            _ => None,
        }
    }
}

/// One class of the §15.1 taxonomy, plus the base class `VF_UNKNOWN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    /// `VF_UNKNOWN`: the base class; also what a missing code degrades to (ABORT-1).
    Unknown,
    /// `VF_USER`: something the flow's author fixes.
    User,
    /// `VF_GRAPH`: the graph is invalid.
    Graph,
    /// `VF_NODE_CONTRACT`: a node breaks the contract a worker relies on.
    NodeContract,
    /// `VF_CONFIG`: an invalid configuration value.
    Config,
    /// `VF_CAPABILITY`: the flow asks a component for what it cannot do.
    Capability,
    /// `VF_INCOMPATIBLE_PROFILE`: the backends cannot give the requested guarantee.
    IncompatibleProfile,
    /// `VF_IDENTITY_COLLISION`: distinct names encode to one physical name.
    IdentityCollision,
    /// `VF_ENVIRONMENT`: the machine, cluster or broker is not as required.
    Environment,
    /// `VF_BROKER_UNAVAILABLE`: NATS unreachable, or a stream/consumer not created.
    BrokerUnavailable,
    /// `VF_CLUSTER`: the cluster refused the work.
    Cluster,
    /// `VF_RESOURCE_UNAVAILABLE`: a needed resource cannot be obtained.
    ResourceUnavailable,
    /// `VF_PAYLOAD_STORE_FULL`: the payload store refused a write for memory.
    PayloadStoreFull,
    /// `VF_STATE_UNKNOWN`: a read a decision depended on could not be made.
    StateUnknown,
    /// `VF_OWNERSHIP_CONFLICT`: a compare-and-swap lost to a concurrent writer.
    OwnershipConflict,
    /// `VF_FLOW_FAILED`: the flow ran and nodes failed.
    FlowFailed,
    /// `VF_FLOW_STALLED`: the flow can never finish.
    FlowStalled,
    /// `VF_ACTIVE_RUN`: another run of the flow holds workloads.
    ActiveRun,
    /// `VF_RUNTIME`: a failure while messages were flowing.
    Runtime,
    /// `VF_POISON`: the message itself is bad.
    Poison,
    /// `VF_POISON_DECODE`: the envelope or payload could not be decoded.
    PoisonDecode,
    /// `VF_POISON_PARTITION_KEY`: the partition key is unusable (PART-3a).
    PoisonPartitionKey,
    /// `VF_POISON_SCHEMA`: the payload is not what the node requires.
    PoisonSchema,
    /// `VF_TRANSIENT`: something outside the worker was briefly unavailable.
    Transient,
    /// `VF_UPSTREAM_UNAVAILABLE`: a service the node depends on is down.
    UpstreamUnavailable,
    /// `VF_WORKER_FATAL`: this worker cannot process any message.
    WorkerFatal,
    /// `VF_DEVICE`: the accelerator is unusable.
    Device,
    /// `VF_RESOURCE_EXHAUSTED`: out of a host resource.
    ResourceExhausted,
    /// `VF_WORKER_UNHEALTHY`: the circuit breaker tripped (ERR-5a).
    WorkerUnhealthy,
    /// `VF_PROGRESS_STALLED`: the node stopped making progress (ERR-7).
    ProgressStalled,
    /// `VF_UPSTREAM_ABORTED`: a parent aborted (ABORT-5).
    UpstreamAborted,
    /// `VF_STALE_AUTHORITY`: a commit under a superseded ownership epoch.
    StaleAuthority,
}

impl ErrorCode {
    /// Every class, base first, in §15.1 table order (for lookups and table tests).
    pub const ALL: [ErrorCode; 32] = {
        use ErrorCode::*;
        [
            Unknown,
            User,
            Graph,
            NodeContract,
            Config,
            Capability,
            IncompatibleProfile,
            IdentityCollision,
            Environment,
            BrokerUnavailable,
            Cluster,
            ResourceUnavailable,
            PayloadStoreFull,
            StateUnknown,
            OwnershipConflict,
            FlowFailed,
            FlowStalled,
            ActiveRun,
            Runtime,
            Poison,
            PoisonDecode,
            PoisonPartitionKey,
            PoisonSchema,
            Transient,
            UpstreamUnavailable,
            WorkerFatal,
            Device,
            ResourceExhausted,
            WorkerUnhealthy,
            ProgressStalled,
            UpstreamAborted,
            StaleAuthority,
        ]
    };

    /// The §15.1 row: (code, 1.0.4 class name, parent class).
    fn row(self) -> (&'static str, &'static str, Option<ErrorCode>) {
        use ErrorCode::*;
        match self {
            Unknown => ("VF_UNKNOWN", "VideoflowError", None),
            User => ("VF_USER", "VideoflowUserError", Some(Unknown)),
            Graph => ("VF_GRAPH", "GraphError", Some(User)),
            NodeContract => ("VF_NODE_CONTRACT", "NodeContractError", Some(User)),
            Config => ("VF_CONFIG", "ConfigError", Some(User)),
            Capability => ("VF_CAPABILITY", "CapabilityError", Some(User)),
            IncompatibleProfile => ("VF_INCOMPATIBLE_PROFILE", "IncompatibleProfile", Some(User)),
            IdentityCollision => ("VF_IDENTITY_COLLISION", "IdentityCollision", Some(User)),
            Environment => ("VF_ENVIRONMENT", "VideoflowEnvironmentError", Some(Unknown)),
            BrokerUnavailable => (
                "VF_BROKER_UNAVAILABLE",
                "BrokerUnavailable",
                Some(Environment),
            ),
            Cluster => ("VF_CLUSTER", "ClusterError", Some(Environment)),
            ResourceUnavailable => (
                "VF_RESOURCE_UNAVAILABLE",
                "ResourceUnavailable",
                Some(Environment),
            ),
            PayloadStoreFull => (
                "VF_PAYLOAD_STORE_FULL",
                "PayloadStoreFull",
                Some(ResourceUnavailable),
            ),
            StateUnknown => ("VF_STATE_UNKNOWN", "UnobservableState", Some(Environment)),
            OwnershipConflict => (
                "VF_OWNERSHIP_CONFLICT",
                "OwnershipConflict",
                Some(Environment),
            ),
            FlowFailed => ("VF_FLOW_FAILED", "FlowFailed", Some(Environment)),
            FlowStalled => ("VF_FLOW_STALLED", "FlowStalled", Some(Environment)),
            ActiveRun => ("VF_ACTIVE_RUN", "ActiveRunConflict", Some(Environment)),
            Runtime => ("VF_RUNTIME", "VideoflowRuntimeError", Some(Unknown)),
            Poison => ("VF_POISON", "PoisonMessage", Some(Runtime)),
            PoisonDecode => ("VF_POISON_DECODE", "DecodeError", Some(Poison)),
            PoisonPartitionKey => ("VF_POISON_PARTITION_KEY", "PartitionKeyError", Some(Poison)),
            PoisonSchema => ("VF_POISON_SCHEMA", "SchemaError", Some(Poison)),
            Transient => ("VF_TRANSIENT", "TransientFailure", Some(Runtime)),
            UpstreamUnavailable => (
                "VF_UPSTREAM_UNAVAILABLE",
                "UpstreamUnavailable",
                Some(Transient),
            ),
            WorkerFatal => ("VF_WORKER_FATAL", "WorkerFatal", Some(Runtime)),
            Device => ("VF_DEVICE", "DeviceError", Some(WorkerFatal)),
            ResourceExhausted => (
                "VF_RESOURCE_EXHAUSTED",
                "ResourceExhausted",
                Some(WorkerFatal),
            ),
            WorkerUnhealthy => ("VF_WORKER_UNHEALTHY", "WorkerUnhealthy", Some(WorkerFatal)),
            ProgressStalled => ("VF_PROGRESS_STALLED", "ProgressStalled", Some(Runtime)),
            UpstreamAborted => ("VF_UPSTREAM_ABORTED", "UpstreamAborted", Some(Runtime)),
            StaleAuthority => ("VF_STALE_AUTHORITY", "StaleAuthority", Some(Runtime)),
        }
    }

    /// The stable code (`VF_…`) that metrics and dead letters key on (ERR-3).
    pub fn code(self) -> &'static str {
        self.row().0
    }

    /// The 1.0.4 class name, used where Python's `repr` of the error is quoted (ERR-5a).
    pub fn class_name(self) -> &'static str {
        self.row().1
    }

    /// The parent class (`VF_POISON_DECODE` → `VF_POISON` → `VF_RUNTIME` → `VF_UNKNOWN`).
    pub fn parent(self) -> Option<ErrorCode> {
        self.row().2
    }

    /// Whether this class is `ancestor` or descends from it (Python's `isinstance`).
    pub fn is_a(self, ancestor: ErrorCode) -> bool {
        let mut class = Some(self);
        while let Some(c) = class {
            if c == ancestor {
                return true;
            }
            class = c.parent();
        }
        false
    }

    /// The process exit status for this class: the class's own, else its parent's.
    pub fn exit_code(self) -> i32 {
        use ErrorCode::*;
        match self {
            Unknown => EXIT_UNTYPED,
            User => EXIT_USER,
            Environment => EXIT_ENVIRONMENT,
            Runtime | FlowFailed | UpstreamAborted => EXIT_FLOW_FAILED,
            FlowStalled | ProgressStalled => EXIT_FLOW_STALLED,
            other => other.parent().map_or(EXIT_UNTYPED, ErrorCode::exit_code),
        }
    }

    /// The class's disposition (ERR-1): only runtime classes have one.
    pub fn disposition(self) -> Option<Disposition> {
        use ErrorCode::*;
        match self {
            Unknown | User | Environment => None,
            Runtime | Transient => Some(Disposition::Transient),
            Poison => Some(Disposition::Poison),
            WorkerFatal | ProgressStalled | UpstreamAborted | StaleAuthority => {
                Some(Disposition::WorkerFatal)
            }
            other => other.parent().and_then(ErrorCode::disposition),
        }
    }

    /// The class a non-taxonomy error is wrapped in for a disposition (ERR-2).
    pub fn for_disposition(d: Disposition) -> ErrorCode {
        match d {
            Disposition::Poison => ErrorCode::Poison,
            Disposition::Transient => ErrorCode::Transient,
            Disposition::WorkerFatal => ErrorCode::WorkerFatal,
        }
    }

    /// Looks a code up (`"VF_POISON"` → `Poison`); `None` for codes outside the taxonomy.
    pub fn from_code(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A typed videoflow error: what ends a worker, fills a termination record or an ABORT.
///
/// Message, remedy and context stay separate fields (never interpolated into one another) so
/// every renderer — log line, operator rendering, termination record, wire Error — presents
/// them the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct VfError {
    /// The class.
    pub code: ErrorCode,
    /// What went wrong.
    pub message: String,
    /// What to do about it (ERR-4); an empty remedy counts as none.
    pub remedy: Option<String>,
    /// Defaults to the class's; the failure ladder stamps the one it used (ERR-2).
    pub disposition: Option<Disposition>,
    /// Structured fields (node, trace_id, replica, …), kept queryable.
    pub context: BTreeMap<String, serde_json::Value>,
}

impl VfError {
    /// A new error of class `code`, with the class's disposition and no remedy or context.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        VfError {
            code,
            // Texts quote broker and store URLs, which carry passwords from Secrets.
            message: redact_string(message.into()),
            remedy: None,
            disposition: code.disposition(),
            context: BTreeMap::new(),
        }
    }

    /// Sets the remedy.
    #[must_use]
    pub fn with_remedy(mut self, remedy: impl Into<String>) -> Self {
        self.remedy = Some(redact_string(remedy.into()));
        self
    }

    /// Adds (or replaces) one context entry.
    #[must_use]
    pub fn with_context(
        mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.context.insert(key.into(), redact_json(value.into()));
        self
    }

    /// Stamps the disposition the ladder used (ERR-2), overriding the class's.
    #[must_use]
    pub fn with_disposition(mut self, disposition: Disposition) -> Self {
        self.disposition = Some(disposition);
        self
    }

    /// The process exit status for this error (§15.4).
    pub fn exit_code(&self) -> i32 {
        self.code.exit_code()
    }

    /// The remedy if it is non-empty (1.0.4 treats `""` as no remedy).
    pub fn remedy_text(&self) -> Option<&str> {
        self.remedy.as_deref().filter(|r| !r.is_empty())
    }

    /// The operator rendering (§15.3): `ERROR [<code>]: <message>`, then `  <remedy>` if
    /// any, then `  <key>: <value>` per context entry, keys sorted, values as text.
    pub fn render(&self) -> String {
        let mut lines = vec![format!("ERROR [{}]: {}", self.code, self.message)];
        if let Some(remedy) = self.remedy_text() {
            lines.push(format!("  {remedy}"));
        }
        for (key, value) in &self.context {
            lines.push(format!("  {key}: {}", context_text(value)));
        }
        lines.join("\n")
    }

    /// The one-line form a worker logs on exit (§15.4): `<code>: <message>[ <remedy>]`.
    pub fn log_line(&self) -> String {
        format!("{}: {self}", self.code)
    }

    /// Python's `repr` of the error as 1.0.4 quotes it, e.g. `TransientFailure('boom')`.
    pub fn py_repr(&self) -> String {
        format!("{}({})", self.code.class_name(), py_repr_str(&self.message))
    }

    /// The error record (§15.3): `code`, `message`, `remedy` only if non-empty,
    /// `disposition` only if any, `context` only if non-empty.
    pub fn termination_record(&self) -> serde_json::Value {
        let mut record = serde_json::Map::new();
        record.insert("code".into(), self.code.code().into());
        // `message` and `context` are public fields: redact again what may have been set
        // after construction.
        record.insert("message".into(), redact_string(self.message.clone()).into());
        if let Some(remedy) = self.remedy_text() {
            record.insert("remedy".into(), remedy.into());
        }
        if let Some(d) = self.disposition {
            record.insert("disposition".into(), d.as_str().into());
        }
        if !self.context.is_empty() {
            let context = self
                .context
                .clone()
                .into_iter()
                .map(|(k, v)| (k, redact_json(v)))
                .collect();
            record.insert("context".into(), serde_json::Value::Object(context));
        }
        serde_json::Value::Object(record)
    }

    /// The termination record as 1.0.4 writes it (§15.4): keys sorted, `", "`/`": "`
    /// separators, non-ASCII as `\uXXXX` (see [`py_json_dumps`]).
    pub fn termination_json(&self) -> String {
        py_json_dumps(&self.termination_record())
    }

    /// ABORT-5: this node stops because parent `origin` aborted with record `origin_error`.
    /// `origin` falls back to `an upstream node`; a missing code/message reads
    /// `unknown`/`no detail`.
    pub fn upstream_aborted(origin: &str, origin_error: &serde_json::Value) -> Self {
        let origin = if origin.is_empty() {
            "an upstream node"
        } else {
            origin
        };
        let field = |key: &str, absent: &str| {
            origin_error
                .get(key)
                .map_or_else(|| absent.to_owned(), context_text)
        };
        VfError::new(
            ErrorCode::UpstreamAborted,
            format!(
                "{origin} terminated abnormally ({}: {}), so this node stops rather than \
                 waiting for an end-of-stream that is not coming.",
                field("code", "unknown"),
                field("message", "no detail"),
            ),
        )
        .with_remedy(format!(
            "Fix the failure reported by {origin}; this node is a casualty, not the cause."
        ))
        .with_context("origin", origin)
    }

    /// ERR-5a: the circuit breaker tripped after `consecutive_failures` failed groups;
    /// `last_error_repr` is Python's repr of the last error (see [`VfError::py_repr`]).
    /// The remedy is 1.0.4's text, kept verbatim for parity.
    pub fn worker_unhealthy(node: &str, consecutive_failures: u64, last_error_repr: &str) -> Self {
        let name = if node.is_empty() { "node" } else { node };
        VfError::new(
            ErrorCode::WorkerUnhealthy,
            format!(
                "{name} failed {consecutive_failures} messages in a row, which means this \
                 worker is unhealthy rather than the messages being bad (last error: \
                 {last_error_repr})."
            ),
        )
        .with_remedy(
            "The inputs are left un-acked so another replica retries them. Check this worker \
             for a wedged device, an exhausted resource, or a dependency it alone cannot reach.",
        )
        .with_context("node", node)
        .with_context("consecutive_failures", consecutive_failures)
    }

    /// PART-3a: replica 0 rejects a record whose key is unusable (`None` = absent).
    pub fn poison_partition_key(node: &str, partition_by: &str, key: Option<&Value>) -> Self {
        let key = key.map_or_else(|| "None".to_owned(), py_repr);
        VfError::new(
            ErrorCode::PoisonPartitionKey,
            format!(
                "{node}: partition key {} is unusable ({key})",
                py_repr_str(partition_by)
            ),
        )
        .with_remedy(
            "Stamp a non-empty string key on every record, or declare a fallback partition \
             (partition_key_policy) on the node.",
        )
    }
}

/// `Display` = message, plus `" " + remedy` when a remedy exists (§15.3), so every `{}`
/// rendering keeps showing the fix.
impl fmt::Display for VfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.remedy_text() {
            Some(remedy) => write!(f, "{} {remedy}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for VfError {}

/// The record of an error outside the taxonomy (§15.3/15.4):
/// `{"code": "VF_" + KIND_NAME_UPPERCASE, "message": text}`.
pub fn untyped_record(kind_name: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "code": format!("VF_{}", kind_name.to_uppercase()),
        "message": message,
    })
}

/// Python `str()` of a JSON value, the way 1.0.4 renders context values as text (§15.3):
/// strings bare, `None`, `True`/`False`, floats per `repr(float)`, containers as Python
/// literals.
pub fn context_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => json_repr(other),
    }
}

/// Python `repr()` of a JSON value (strings quoted), for containers in [`context_text`].
fn json_repr(v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::Null => "None".to_owned(),
        J::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        J::Number(n) => json_number(n),
        J::String(s) => py_repr_str(s),
        J::Array(items) => {
            let items: Vec<String> = items.iter().map(json_repr).collect();
            format!("[{}]", items.join(", "))
        }
        J::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", py_repr_str(k), json_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A JSON number as Python prints it: integers in decimal, floats per `repr(float)`.
fn json_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        py_float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Python's `json.dumps(v, sort_keys=True)`: object keys sorted at every level, separators
/// `", "` and `": "`, non-ASCII and control characters as `\uXXXX` (surrogate pairs above
/// the BMP), floats per `repr(float)`.
///
/// Readers must parse rather than compare bytes (§15.4); matching the reference bytes anyway
/// keeps termination logs diffable against 1.0.4's.
pub fn py_json_dumps(v: &serde_json::Value) -> String {
    let mut out = String::new();
    write_py_json(&mut out, v);
    out
}

fn write_py_json(out: &mut String, v: &serde_json::Value) {
    use serde_json::Value as J;
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => out.push_str(&json_number(n)),
        J::String(s) => write_py_json_str(out, s),
        J::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py_json(out, item);
            }
            out.push(']');
        }
        J::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py_json_str(out, k);
                out.push_str(": ");
                write_py_json(out, item);
            }
            out.push('}');
        }
    }
}

/// A JSON string with Python's `ensure_ascii` escaping.
fn write_py_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// §15.1 as written: code, 1.0.4 class, parent code, exit, disposition (`-` = none).
    const TABLE_15_1: &str = "
        VF_UNKNOWN               VideoflowError            -                       1 -
        VF_USER                  VideoflowUserError        VF_UNKNOWN              2 -
        VF_GRAPH                 GraphError                VF_USER                 2 -
        VF_NODE_CONTRACT         NodeContractError         VF_USER                 2 -
        VF_CONFIG                ConfigError               VF_USER                 2 -
        VF_CAPABILITY            CapabilityError           VF_USER                 2 -
        VF_INCOMPATIBLE_PROFILE  IncompatibleProfile       VF_USER                 2 -
        VF_IDENTITY_COLLISION    IdentityCollision         VF_USER                 2 -
        VF_ENVIRONMENT           VideoflowEnvironmentError VF_UNKNOWN              3 -
        VF_BROKER_UNAVAILABLE    BrokerUnavailable         VF_ENVIRONMENT          3 -
        VF_CLUSTER               ClusterError              VF_ENVIRONMENT          3 -
        VF_RESOURCE_UNAVAILABLE  ResourceUnavailable       VF_ENVIRONMENT          3 -
        VF_PAYLOAD_STORE_FULL    PayloadStoreFull          VF_RESOURCE_UNAVAILABLE 3 -
        VF_STATE_UNKNOWN         UnobservableState         VF_ENVIRONMENT          3 -
        VF_OWNERSHIP_CONFLICT    OwnershipConflict         VF_ENVIRONMENT          3 -
        VF_FLOW_FAILED           FlowFailed                VF_ENVIRONMENT          4 -
        VF_FLOW_STALLED          FlowStalled               VF_ENVIRONMENT          5 -
        VF_ACTIVE_RUN            ActiveRunConflict         VF_ENVIRONMENT          3 -
        VF_RUNTIME               VideoflowRuntimeError     VF_UNKNOWN              4 transient
        VF_POISON                PoisonMessage             VF_RUNTIME              4 poison
        VF_POISON_DECODE         DecodeError               VF_POISON               4 poison
        VF_POISON_PARTITION_KEY  PartitionKeyError         VF_POISON               4 poison
        VF_POISON_SCHEMA         SchemaError               VF_POISON               4 poison
        VF_TRANSIENT             TransientFailure          VF_RUNTIME              4 transient
        VF_UPSTREAM_UNAVAILABLE  UpstreamUnavailable       VF_TRANSIENT            4 transient
        VF_WORKER_FATAL          WorkerFatal               VF_RUNTIME              4 worker_fatal
        VF_DEVICE                DeviceError               VF_WORKER_FATAL         4 worker_fatal
        VF_RESOURCE_EXHAUSTED    ResourceExhausted         VF_WORKER_FATAL         4 worker_fatal
        VF_WORKER_UNHEALTHY      WorkerUnhealthy           VF_WORKER_FATAL         4 worker_fatal
        VF_PROGRESS_STALLED      ProgressStalled           VF_RUNTIME              5 worker_fatal
        VF_UPSTREAM_ABORTED      UpstreamAborted           VF_RUNTIME              4 worker_fatal
        VF_STALE_AUTHORITY       StaleAuthority            VF_RUNTIME              4 worker_fatal
    ";

    #[test]
    fn taxonomy_table_matches_15_1() {
        let dash = |s: &'static str| (s != "-").then_some(s);
        let rows: Vec<Vec<&str>> = TABLE_15_1
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|cols| !cols.is_empty())
            .collect();
        assert_eq!(rows.len(), ErrorCode::ALL.len());
        for (cols, &c) in rows.iter().zip(&ErrorCode::ALL) {
            let [code, class, parent, exit, disposition] = cols[..] else {
                panic!("malformed row {cols:?}");
            };
            assert_eq!(c.code(), code);
            assert_eq!(ErrorCode::from_code(code), Some(c));
            assert_eq!(c.to_string(), code);
            assert_eq!(c.class_name(), class, "{code}");
            assert_eq!(c.parent().map(ErrorCode::code), dash(parent), "{code}");
            assert_eq!(c.exit_code().to_string(), exit, "{code}");
            assert_eq!(VfError::new(c, "m").exit_code().to_string(), exit, "{code}");
            let want = dash(disposition);
            assert_eq!(c.disposition().map(Disposition::as_str), want, "{code}");
            assert_eq!(
                VfError::new(c, "m").disposition.map(Disposition::as_str),
                want
            );
        }
        assert_eq!(ErrorCode::from_code("VF_GRAPH_CYCLE"), None);
    }

    #[test]
    fn hierarchy_walks_to_the_root() {
        assert!(ErrorCode::PoisonDecode.is_a(ErrorCode::Poison));
        assert!(ErrorCode::PoisonDecode.is_a(ErrorCode::Runtime));
        assert!(ErrorCode::PayloadStoreFull.is_a(ErrorCode::Environment));
        assert!(!ErrorCode::BrokerUnavailable.is_a(ErrorCode::Runtime));
        assert!(ErrorCode::ALL.iter().all(|c| c.is_a(ErrorCode::Unknown)));
        for d in [
            Disposition::Poison,
            Disposition::Transient,
            Disposition::WorkerFatal,
        ] {
            assert_eq!(ErrorCode::for_disposition(d).disposition(), Some(d));
        }
    }

    #[test]
    fn display_render_and_log_line() {
        let e = VfError::new(ErrorCode::Config, "bad value")
            .with_remedy("Fix it.")
            .with_context("node", "det")
            .with_context("replica", 2)
            .with_context("absent", serde_json::Value::Null)
            .with_context("ratio", 1e16)
            .with_context("path", json!(["a", 1, null, true]));
        assert_eq!(e.to_string(), "bad value Fix it.");
        assert_eq!(e.log_line(), "VF_CONFIG: bad value Fix it.");
        assert_eq!(
            e.render(),
            "ERROR [VF_CONFIG]: bad value\n  Fix it.\n  absent: None\n  node: det\n  \
             path: ['a', 1, None, True]\n  ratio: 1e+16\n  replica: 2"
        );
        let bare = VfError::new(ErrorCode::Graph, "cycle").with_remedy("");
        assert_eq!(bare.to_string(), "cycle");
        assert_eq!(bare.render(), "ERROR [VF_GRAPH]: cycle");
        assert_eq!(bare.log_line(), "VF_GRAPH: cycle");
    }

    #[test]
    fn termination_json_sorts_and_omits() {
        let user = VfError::new(ErrorCode::Config, "bad");
        assert_eq!(
            user.termination_json(),
            r#"{"code": "VF_CONFIG", "message": "bad"}"#
        );
        let full = VfError::new(ErrorCode::PoisonDecode, "caméra")
            .with_remedy("r")
            .with_context("z", 1.5)
            .with_context("a", json!({"y": 1, "b": "\n"}));
        assert_eq!(
            full.termination_json(),
            r#"{"code": "VF_POISON_DECODE", "context": {"a": {"b": "\n", "y": 1}, "z": 1.5}, "disposition": "poison", "message": "cam\u00e9ra", "remedy": "r"}"#
        );
        let stamped = VfError::new(ErrorCode::User, "x").with_disposition(Disposition::Transient);
        assert_eq!(stamped.termination_record()["disposition"], "transient");
        assert_eq!(py_json_dumps(&json!("🎥")), r#""\ud83c\udfa5""#);
        assert_eq!(
            untyped_record("ValueError", "boom"),
            json!({"code": "VF_VALUEERROR", "message": "boom"})
        );
    }

    #[test]
    fn fixed_texts() {
        let origin = json!({"code": "VF_POISON", "message": "bad frame"});
        let e = VfError::upstream_aborted("cam", &origin);
        assert_eq!(e.code, ErrorCode::UpstreamAborted);
        assert_eq!(
            e.to_string(),
            "cam terminated abnormally (VF_POISON: bad frame), so this node stops rather than \
             waiting for an end-of-stream that is not coming. Fix the failure reported by cam; \
             this node is a casualty, not the cause."
        );
        assert_eq!(e.context["origin"], "cam");
        let e = VfError::upstream_aborted("", &json!({}));
        assert!(
            e.message
                .starts_with("an upstream node terminated abnormally (unknown: no detail)")
        );

        let last = VfError::new(ErrorCode::Transient, "ValueError: boom");
        assert_eq!(last.py_repr(), "TransientFailure('ValueError: boom')");
        let e = VfError::worker_unhealthy("det", 10, &last.py_repr());
        assert_eq!(
            e.message,
            "det failed 10 messages in a row, which means this worker is unhealthy rather than \
             the messages being bad (last error: TransientFailure('ValueError: boom'))."
        );
        assert_eq!(e.exit_code(), 4);
        assert_eq!(e.context["consecutive_failures"], 10);

        let e = VfError::poison_partition_key("det", "key", Some(&Value::from("")));
        assert_eq!(e.message, "det: partition key 'key' is unusable ('')");
        assert_eq!(e.disposition, Some(Disposition::Poison));
        let e = VfError::poison_partition_key("det", "key", None);
        assert_eq!(e.message, "det: partition key 'key' is unusable (None)");
    }
}
