//! Provisioning a compiled flow's broker objects before any worker runs (STREAM-7).
//!
//! BATCH streams keep a message only while some durable is interested, so a message
//! published before its consumer's durable exists is lost. Creating every stream, the DLQ,
//! every EOS anchor and every data durable first closes that window. The durables are
//! derived exactly as the workers will bind them: each replica's environment is rendered,
//! parsed by the worker's own [`WorkerConfig`], and turned into a [`DurableRequest`] by the
//! same function the worker calls — so provisioner and worker cannot disagree on a name, a
//! credit or a `max_deliver`.
//!
//! Two callers, one implementation ([`provision_flow`]): the local runner and the tests hold
//! the Flow document ([`provision`], environment from [`videoflow_core::env`]); the
//! `videoflow-worker provision` job holds only `specs.json` and its own `VF_*` variables
//! ([`spec_vars`], driven by [`crate::admission::run_provision_job`]). Every stream and
//! durable is read back and compared (STREAM-14): for the job a durable that exists with
//! another configuration is IncompatibleProfile, where a worker (and the local runner) would
//! accept it as bound.
//! Teardown is [`crate::teardown`].

use std::collections::BTreeMap;

use videoflow_core::compile::{CompiledFlow, NodeSpec};
use videoflow_core::env::{EnvContext, EnvValue, render_node_env};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::{FlowDocument, FlowType};

use crate::broker::{self, Broker, BrokerError, DurableRequest, ResourceKind};
use crate::config::WorkerConfig;

/// What provisioning created or found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// Node streams ensured.
    pub streams: usize,
    /// Data durables bound or created.
    pub durables: usize,
    /// EOS anchors ensured.
    pub anchors: usize,
    /// Streams and durables this call created or changed (0 when provisioning again).
    pub changed: usize,
}

/// Flow-level settings the per-node records do not carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowSettings {
    /// `VF_STREAM_REPLICAS`: `num_replicas` of every stream (DLQ included) when > 1.
    pub stream_replicas: Option<i64>,
    /// `VF_STREAM_MAX_AGE_SECONDS`: `max_age` of every node stream (the DLQ keeps its 7 days).
    pub stream_max_age: Option<std::time::Duration>,
    /// STREAM-15: at-least-once durables get `max_deliver = −1` (the ledger counts attempts).
    pub ledger_caps_attempts: bool,
    /// STREAM-7/14: a durable found with another configuration is IncompatibleProfile (the
    /// provision job). Off, it is accepted as bound and logged, as a worker does (the local
    /// runner and the tests, which may pre-create durables with their own settings).
    pub strict_durables: bool,
}

/// The worker configuration of `node`'s replica `replica`, as a control plane renders it.
pub fn node_config(
    doc: &FlowDocument,
    flow: &CompiledFlow,
    node: &str,
    replica: i64,
    nats_url: &str,
) -> Result<WorkerConfig, VfError> {
    let vars = node_vars(doc, flow, node, replica, nats_url)?;
    WorkerConfig::from_env(&vars)
}

/// The literal environment of one replica (`VF_REPLICA_ID` included). Secret-sourced
/// values cannot be resolved here and are refused with a remedy.
pub fn node_vars(
    doc: &FlowDocument,
    flow: &CompiledFlow,
    node: &str,
    replica: i64,
    nats_url: &str,
) -> Result<BTreeMap<String, String>, VfError> {
    let ctx = EnvContext {
        default_nats_url: Some(nats_url.to_owned()),
        health_port: 0,
    };
    let env = render_node_env(doc, flow, node, &ctx)
        .map_err(|e| VfError::new(ErrorCode::Config, e.to_string()))?;
    let mut vars = BTreeMap::new();
    for (k, v) in env {
        match v {
            EnvValue::Literal(s) => {
                vars.insert(k, s);
            }
            EnvValue::Secret { name, key } => {
                return Err(VfError::new(
                    ErrorCode::Config,
                    format!("{k} comes from Secret {name}/{key}, which cannot be read outside Kubernetes."),
                )
                .with_remedy("Give the URL directly in the Flow (spec.broker.url / url) for local runs."));
            }
        }
    }
    vars.insert("VF_REPLICA_ID".into(), replica.to_string());
    Ok(vars)
}

/// STREAM-15: whether the Flow's run ledger (a literal `spec.runtimeStore.url`) reads back
/// durable and shared — then at-least-once durables get `max_deliver = −1` and the workers,
/// reading the same store back, count attempts in it. A Secret reference cannot be read
/// here, and a store that cannot be read back in 5 s does not qualify: the broker keeps its
/// retry cap, and the workers then judge by the broker's count.
async fn ledger_caps_attempts(doc: &FlowDocument) -> bool {
    let Some(url) = doc.spec.runtime_store.as_ref().and_then(|s| s.url.clone()) else {
        return false;
    };
    let Ok(store) = crate::store::RuntimeStore::open(&url) else {
        return false;
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), store.capabilities())
        .await
        .is_ok_and(|caps| caps.durable_and_shared())
}

/// Ensures every stream, the DLQ, every EOS anchor and every data durable of `flow`, with
/// the environment the Flow document renders (the local runner's and the tests' path).
/// Idempotent: provisioning twice finds what the first run created.
///
/// # Errors
/// As [`provision_flow`]; `VF_CONFIG` when a node's environment cannot be rendered.
pub async fn provision(
    broker: &Broker,
    doc: &FlowDocument,
    flow: &CompiledFlow,
) -> Result<Provisioned, VfError> {
    let settings = FlowSettings {
        stream_replicas: doc
            .spec
            .broker
            .as_ref()
            .and_then(|b| b.stream_replicas)
            .map(i64::from),
        stream_max_age: crate::config::read::stream_max_age(
            doc.spec
                .broker
                .as_ref()
                .and_then(|b| b.stream_max_age_seconds),
        )?,
        ledger_caps_attempts: ledger_caps_attempts(doc).await,
        strict_durables: false,
    };
    provision_flow(broker, flow, &settings, |spec, replica| {
        node_config(doc, flow, &spec.name, replica, broker.url())
    })
    .await
}

/// The literal environment of one replica derived from its compiled record alone — what
/// the provision job has (`specs.json` + its own `VF_*`), limited to the variables the data
/// durable depends on: identity, parents, `nb_tasks`, partitioning, join policy, delivery,
/// `VF_MAX_RETRIES`. The job never reads `VF_ACK_WAIT_SECONDS`, so the default 60 s applies.
pub fn spec_vars(
    flow: &CompiledFlow,
    spec: &NodeSpec,
    replica: i64,
    nats_url: &str,
    max_retries: Option<i64>,
) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        vars.insert(k.to_owned(), v);
    };
    put("VF_NODE_NAME", spec.name.clone());
    put("VF_NODE_KIND", spec.kind.clone());
    put("VF_PARENT_NAMES", spec.parents.join(","));
    put(
        "VF_HAS_CHILDREN",
        if spec.has_children { "1" } else { "0" }.into(),
    );
    put("VF_FLOW_ID", flow.flow_id.clone());
    put("VF_RUN_ID", flow.run_id.clone());
    put("VF_FLOW_TYPE", flow.flow_type.as_str().into());
    put("VF_NB_TASKS", spec.nb_tasks.to_string());
    put("VF_NATS_URL", nats_url.to_owned());
    put("VF_REPLICA_ID", replica.to_string());
    if let Some(p) = &spec.partition_by {
        put("VF_PARTITION_BY", p.clone());
    }
    if let Some(j) = &spec.join_policy {
        put("VF_JOIN_POLICY_JSON", j.to_string());
    }
    if let Some(d) = &spec.delivery {
        for (key, var) in [("delivery", "VF_DELIVERY"), ("on_error", "VF_ON_ERROR")] {
            if let Some(v) = d.get(key).and_then(|v| v.as_str()) {
                put(var, v.to_owned());
            }
        }
    }
    if let Some(n) = max_retries {
        put("VF_MAX_RETRIES", n.to_string());
    }
    if let Some(m) = videoflow_core::env::credit_messages(spec) {
        put("VF_CREDIT_MESSAGES", m.to_string());
    }
    vars
}

/// The data durables `spec` binds on its parents, one per replica slot of a partitioned
/// node, else one shared (STREAM-7), derived through `config_for`.
///
/// # Errors
/// Whatever `config_for` returns.
pub fn data_durables<F>(
    spec: &NodeSpec,
    ledger_caps_attempts: bool,
    config_for: &F,
) -> Result<Vec<DurableRequest>, VfError>
where
    F: Fn(&NodeSpec, i64) -> Result<WorkerConfig, VfError>,
{
    let slots = if spec.is_partitioned() {
        spec.nb_tasks
    } else {
        1
    };
    let mut out = Vec::new();
    for replica in 0..slots {
        let cfg = config_for(spec, replica)?;
        for parent in &spec.parents {
            out.push(DurableRequest::data_for(&cfg, parent, ledger_caps_attempts));
        }
    }
    Ok(out)
}

/// Ensures every node stream, EOS anchor (nodes with children), the DLQ and every data
/// durable of `flow`, each read back and compared (STREAM-7, STREAM-14); `config_for`
/// renders replica `r` of a node as the control plane does.
///
/// # Errors
/// IncompatibleProfile when a stream or durable exists with another configuration;
/// BrokerUnavailable when one can be neither created nor read back.
pub async fn provision_flow<F>(
    broker: &Broker,
    flow: &CompiledFlow,
    settings: &FlowSettings,
    config_for: F,
) -> Result<Provisioned, VfError>
where
    F: Fn(&NodeSpec, i64) -> Result<WorkerConfig, VfError>,
{
    let realtime = flow.flow_type == FlowType::Realtime;
    let replicas = settings.stream_replicas.filter(|n| *n > 1);
    let mut done = Provisioned::default();
    for node in &flow.nodes {
        let ensured = broker::ensure_aged_node_stream(
            broker,
            &flow.flow_id,
            &flow.run_id,
            &node.name,
            realtime,
            replicas,
            settings.stream_max_age,
        )
        .await?;
        done.streams += 1;
        done.changed += usize::from(ensured.action != broker::EnsureAction::Accepted);
        if node.has_children {
            let anchor =
                broker::ensure_eos_anchor(broker, &flow.flow_id, &flow.run_id, &node.name).await?;
            verified(&anchor, settings.strict_durables)?;
            done.anchors += 1;
            done.changed += usize::from(anchor.created);
        }
    }
    broker::ensure_dlq_stream(broker, &flow.flow_id, replicas).await?;
    for node in flow.nodes.iter().filter(|n| !n.parents.is_empty()) {
        for request in data_durables(node, settings.ledger_caps_attempts, &config_for)? {
            let bound = broker::bind_data_durable(broker, &request).await?;
            verified(&bound, settings.strict_durables)?;
            done.durables += 1;
            done.changed += usize::from(bound.created);
        }
    }
    Ok(done)
}

/// STREAM-7/14 for the provisioner: a durable found with another configuration is refused.
fn verified(bound: &broker::BoundDurable, strict: bool) -> Result<(), VfError> {
    if bound.mismatches.is_empty() || !strict {
        return Ok(());
    }
    Err(BrokerError::IncompatibleProfile {
        kind: ResourceKind::Consumer,
        name: bound.label(),
        mismatches: bound.mismatches.clone(),
    }
    .into())
}
