//! The provision and teardown jobs' variables (protocol §1.1, "the provision job additionally
//! reads …"): the compiled flow (`VF_FLOW_SPECS_JSON`, else the file at `VF_FLOW_SPECS_PATH`),
//! its identity, the broker, stores, explicit profile requests, the read-back timeout and the
//! declared graph limits.

use std::collections::BTreeMap;
use std::time::Duration;

use videoflow_core::compile::{CompiledFlow, NodeSpec};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::FlowType;

use super::read::{bounded_seconds, py_int, stream_max_age};
use super::worker::{ProfileRequest, admission_timeout_from, profile_requests_from};

/// Default `VF_FLOW_SPECS_PATH`.
pub const DEFAULT_SPECS_PATH: &str = "/etc/videoflow/specs.json";

/// The provision job's inputs, parsed from its environment (ENV table, "the provision job
/// additionally reads …").
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// The compiled flow (`specs.json` + `VF_FLOW_ID` / `VF_RUN_ID` / `VF_FLOW_TYPE`).
    pub flow: CompiledFlow,
    /// `VF_NATS_URL`.
    pub nats_url: String,
    /// `VF_MAX_RETRIES`.
    pub max_retries: Option<i64>,
    /// `VF_STREAM_REPLICAS`.
    pub stream_replicas: Option<i64>,
    /// `VF_STREAM_MAX_AGE_SECONDS`: the age bound on every node stream.
    pub stream_max_age: Option<Duration>,
    /// `VF_BLOB_REDIS_URL`.
    pub blob_url: Option<String>,
    /// `VF_RUNTIME_STORE_URL` (empty ⇒ memory).
    pub runtime_store_url: String,
    /// `VF_PROFILE_REQUESTS_JSON`.
    pub explicit: Vec<ProfileRequest>,
    /// `VF_ADMISSION_TIMEOUT_SECONDS`.
    pub timeout: Duration,
    /// `VF_MAX_STREAMS`, `VF_MAX_CONSUMERS`.
    pub declared_limits: (Option<i64>, Option<i64>),
}

fn required<'a>(vars: &'a BTreeMap<String, String>, key: &str) -> Result<&'a str, VfError> {
    vars.get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            VfError::new(ErrorCode::Config, format!("{key} is required."))
                .with_remedy("The operator renders it into the provisioning Job; set it when running the job by hand.")
        })
}

fn optional_int(vars: &BTreeMap<String, String>, key: &str) -> Result<Option<i64>, VfError> {
    match vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => py_int(v)
            .and_then(|n| i64::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                VfError::new(ErrorCode::Config, format!("{key}='{v}' is not an integer."))
                    .with_remedy(format!("Set {key} to an integer, or unset it."))
            }),
    }
}

fn graph_limit(vars: &BTreeMap<String, String>, key: &str) -> Result<Option<i64>, VfError> {
    match optional_int(vars, key)? {
        Some(n) if n < 1 => Err(VfError::new(
            ErrorCode::Config,
            format!("{key}={n} admits no graph at all."),
        )
        .with_remedy(format!("Set {key} to at least 1, or unset it."))),
        other => Ok(other),
    }
}

impl JobConfig {
    /// Parses the job's environment and loads the specs (`VF_FLOW_SPECS_JSON`, else the file
    /// at `VF_FLOW_SPECS_PATH`, default `/etc/videoflow/specs.json`).
    ///
    /// # Errors
    /// `VF_CONFIG` naming the variable for anything missing or malformed.
    pub fn from_env(vars: &BTreeMap<String, String>) -> Result<Self, VfError> {
        let raw = match vars.get("VF_FLOW_SPECS_JSON").filter(|v| !v.is_empty()) {
            Some(json) => json.clone(),
            None => {
                let path = vars
                    .get("VF_FLOW_SPECS_PATH")
                    .filter(|v| !v.is_empty())
                    .map_or(DEFAULT_SPECS_PATH, String::as_str);
                std::fs::read_to_string(path).map_err(|e| {
                    VfError::new(ErrorCode::Config, format!("cannot read the flow specs at {path}: {e}"))
                        .with_remedy("Mount the specs ConfigMap at VF_FLOW_SPECS_PATH, or set VF_FLOW_SPECS_JSON.")
                })?
            }
        };
        let nodes: Vec<NodeSpec> = serde_json::from_str(&raw).map_err(|e| {
            VfError::new(
                ErrorCode::Config,
                format!("the flow specs are not a JSON list of node records: {e}"),
            )
            .with_remedy("Produce them with `videoflow-worker compile flow.yaml`.")
        })?;
        let flow = CompiledFlow {
            flow_id: required(vars, "VF_FLOW_ID")?.to_owned(),
            run_id: required(vars, "VF_RUN_ID")?.to_owned(),
            flow_type: flow_type_from(vars.get("VF_FLOW_TYPE").map(String::as_str))?,
            nodes,
        };
        let explicit =
            profile_requests_from(vars.get("VF_PROFILE_REQUESTS_JSON").map(String::as_str))?;
        let timeout =
            admission_timeout_from(vars.get("VF_ADMISSION_TIMEOUT_SECONDS").map(String::as_str))?;
        Ok(JobConfig {
            nats_url: required(vars, "VF_NATS_URL")?.to_owned(),
            max_retries: optional_int(vars, "VF_MAX_RETRIES")?,
            stream_replicas: optional_int(vars, "VF_STREAM_REPLICAS")?.filter(|n| *n > 1),
            stream_max_age: stream_max_age(optional_int(vars, "VF_STREAM_MAX_AGE_SECONDS")?)?,
            blob_url: vars
                .get("VF_BLOB_REDIS_URL")
                .filter(|v| !v.is_empty())
                .cloned(),
            runtime_store_url: vars
                .get("VF_RUNTIME_STORE_URL")
                .cloned()
                .unwrap_or_default(),
            explicit,
            timeout: bounded_seconds("VF_ADMISSION_TIMEOUT_SECONDS", timeout)?,
            declared_limits: (
                graph_limit(vars, "VF_MAX_STREAMS")?,
                graph_limit(vars, "VF_MAX_CONSUMERS")?,
            ),
            flow,
        })
    }
}

/// `VF_FLOW_TYPE` for the provision job: exactly `realtime` or `batch` (unset ⇒ realtime).
///
/// # Errors
/// `VF_CONFIG` for any other value (a control plane never emits one).
pub fn flow_type_from(raw: Option<&str>) -> Result<FlowType, VfError> {
    match raw.unwrap_or("realtime") {
        "realtime" | "" => Ok(FlowType::Realtime),
        "batch" => Ok(FlowType::Batch),
        other => Err(VfError::new(
            ErrorCode::Config,
            format!("VF_FLOW_TYPE='{other}' is neither 'realtime' nor 'batch'."),
        )
        .with_remedy("Set VF_FLOW_TYPE to realtime or batch.")),
    }
}

/// What `videoflow-worker teardown` reads: the run to tear down and the connect bound.
#[derive(Debug, Clone, PartialEq)]
pub struct TeardownConfig {
    /// `VF_NATS_URL`.
    pub nats_url: String,
    /// `VF_FLOW_ID`.
    pub flow_id: String,
    /// `VF_RUN_ID`.
    pub run_id: String,
    /// `VF_ADMISSION_TIMEOUT_SECONDS` (default 60 s): bounds the connect.
    pub timeout: Duration,
    /// `VF_RUNTIME_STORE_URL` (empty ⇒ memory, which holds nothing to delete): the run
    /// ledger whose records go with the run.
    pub runtime_store_url: String,
}

impl TeardownConfig {
    /// Reads the run, the broker, the run ledger and the timeout.
    ///
    /// # Errors
    /// `VF_CONFIG`: a required variable missing or empty, or a bad timeout.
    pub fn from_env(vars: &BTreeMap<String, String>) -> Result<Self, VfError> {
        let get = |k: &str| {
            vars.get(k)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| {
                    VfError::new(ErrorCode::Config, format!("{k} is required.")).with_remedy(
                        "Set VF_NATS_URL, VF_FLOW_ID and VF_RUN_ID of the run to tear down.",
                    )
                })
        };
        let timeout =
            admission_timeout_from(vars.get("VF_ADMISSION_TIMEOUT_SECONDS").map(String::as_str))?;
        Ok(TeardownConfig {
            nats_url: get("VF_NATS_URL")?,
            flow_id: get("VF_FLOW_ID")?,
            run_id: get("VF_RUN_ID")?,
            timeout: bounded_seconds("VF_ADMISSION_TIMEOUT_SECONDS", timeout)?,
            runtime_store_url: vars
                .get("VF_RUNTIME_STORE_URL")
                .cloned()
                .unwrap_or_default(),
        })
    }
}
