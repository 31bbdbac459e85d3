//! Provisioning a compiled flow's broker objects before any worker runs (STREAM-7).
//!
//! BATCH streams keep a message only while some durable is interested, so a message
//! published before its consumer's durable exists is lost. Creating every stream, the DLQ,
//! every EOS anchor and every data durable first closes that window. The durables are
//! derived exactly as the workers will bind them: each node's environment is rendered with
//! the one control-plane renderer ([`videoflow_core::env`]), parsed by the worker's own
//! [`WorkerConfig`], and turned into a [`DurableRequest`] by the same function the worker
//! calls — so provisioner and worker cannot disagree on a name, a credit or a `max_deliver`.
//!
//! Still to come with issue #5: the `provision` subcommand, admission read-backs and
//! profiles, owner-metadata teardown.

use std::collections::BTreeMap;

use videoflow_core::compile::CompiledFlow;
use videoflow_core::env::{EnvContext, EnvValue, render_node_env};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::{FlowDocument, FlowType};

use crate::broker::{self, Broker, DurableRequest};
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

/// Ensures every stream, the DLQ, every EOS anchor and every data durable of `flow`.
/// Idempotent: provisioning twice finds what the first run created.
pub async fn provision(
    broker: &Broker,
    doc: &FlowDocument,
    flow: &CompiledFlow,
) -> Result<Provisioned, VfError> {
    let realtime = flow.flow_type == FlowType::Realtime;
    let replicas = doc
        .spec
        .broker
        .as_ref()
        .and_then(|b| b.stream_replicas)
        .map(i64::from)
        .filter(|n| *n > 1);
    let mut done = Provisioned::default();
    for node in &flow.nodes {
        broker::ensure_node_stream(
            broker,
            &flow.flow_id,
            &flow.run_id,
            &node.name,
            realtime,
            replicas,
        )
        .await?;
        done.streams += 1;
        if node.has_children {
            broker::ensure_eos_anchor(broker, &flow.flow_id, &flow.run_id, &node.name).await?;
            done.anchors += 1;
        }
    }
    broker::ensure_dlq_stream(broker, &flow.flow_id, replicas).await?;
    for node in flow.nodes.iter().filter(|n| !n.parents.is_empty()) {
        let slots = if node.is_partitioned() {
            node.nb_tasks
        } else {
            1
        };
        for replica in 0..slots {
            let cfg = node_config(doc, flow, &node.name, replica, broker.url())?;
            for parent in &node.parents {
                broker::bind_data_durable(broker, &DurableRequest::data_for(&cfg, parent, false))
                    .await?;
                done.durables += 1;
            }
        }
    }
    Ok(done)
}
