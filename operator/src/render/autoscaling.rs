//! KEDA ScaledObjects for the nodes that may autoscale (design §7, protocol §19 SCALE-6).
//!
//! A node gets a scaler when autoscaling is requested for it (its own `autoscaling.enabled`,
//! else the Flow's `spec.autoscaling.enabled`) and core's [`fixed_scale_reasons`] finds no
//! reason to keep it at its declared scale. The ScaledObject has one `nats-jetstream` trigger
//! per parent, sorted by parent name: KEDA's HPA takes the highest replica count over its
//! metrics, which is exactly core's `observe_demand` (the maximum over every parent), so the
//! rendered scaler and the demand decision in the status agree by construction. Keying the
//! scaler on the first parent only would let a drained first parent hide a backlog behind it.
//!
//! Every node for which autoscaling was requested gets a `status.nodes[].scaler` entry: either
//! `rendered: true` with what drives it, or `rendered: false` with every fixed-scale reason.
//! The refusal for a Job-rendered processor (`admit_autoscaling`) is admission's, not ours: the
//! renderer reports such a node as not rendered, and the reconciler never applies it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use videoflow_core::compile::NodeSpec;
use videoflow_core::model::{FlowSpec, NodeDecl};
use videoflow_core::naming::{durable_name, stream_name};
use videoflow_core::scaling::{
    DEFAULT_MAX_REPLICAS, DEFAULT_MIN_REPLICAS, DEFAULT_TARGET_LAG_PER_REPLICA, NodeScaleFacts,
    fixed_scale_reasons, validate_scaling_rule,
};

use super::context::Ctx;
use super::error::RenderError;
use super::labels::Component;
use crate::crd::ScalerStatus;

/// KEDA's trigger type for JetStream consumer lag.
pub const NATS_JETSTREAM_TRIGGER: &str = "nats-jetstream";

/// The NATS account of a server without accounts configured (KEDA's `account` metadata).
pub const DEFAULT_NATS_ACCOUNT: &str = "$G";

/// The spec of a KEDA `ScaledObject` (`keda.sh/v1alpha1`): only the fields the operator
/// renders. Every field is optional on read so a LIST of ScaledObjects written by others
/// still deserializes (unknown fields are ignored).
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "ScaledObject",
    plural = "scaledobjects",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase", default)]
pub struct ScaledObjectSpec {
    /// The workload the HPA scales (a Deployment: the only eligible workload kind).
    pub scale_target_ref: ScaleTargetRef,
    /// The floor: never below 1, or a processor could not observe its parents' end-of-stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_replica_count: Option<i32>,
    /// The ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replica_count: Option<i32>,
    /// One trigger per parent, sorted by parent name.
    pub triggers: Vec<ScaleTrigger>,
}

/// `spec.scaleTargetRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScaleTargetRef {
    /// `apps/v1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `Deployment`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The workload's name.
    pub name: String,
}

/// One entry of `spec.triggers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScaleTrigger {
    /// The scaler type ([`NATS_JETSTREAM_TRIGGER`]).
    #[serde(rename = "type")]
    pub type_: String,
    /// The trigger's name: the parent it reads, so KEDA's metric names say which edge lags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The scaler's parameters; KEDA takes every value as a string.
    pub metadata: BTreeMap<String, String>,
}

/// The lag rule of one node (SCALE-1): the node's own values, else the Flow's, else core's
/// defaults. The demand observer uses the same rule, so status and scaler agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingRule {
    /// Pending messages one replica is expected to carry (`lagThreshold`).
    pub target_lag_per_replica: i64,
    /// The floor.
    pub min_replicas: i64,
    /// The ceiling.
    pub max_replicas: i64,
}

impl ScalingRule {
    /// The rule of `decl` in a Flow of `spec`.
    pub fn of(spec: &FlowSpec, decl: &NodeDecl) -> Self {
        let own = decl.autoscaling.as_ref();
        let flow = spec.autoscaling.as_ref();
        ScalingRule {
            target_lag_per_replica: own
                .and_then(|a| a.target_lag_per_replica)
                .or_else(|| flow.and_then(|a| a.target_lag_per_replica))
                .unwrap_or(DEFAULT_TARGET_LAG_PER_REPLICA),
            min_replicas: own
                .and_then(|a| a.min_replicas)
                .map_or(DEFAULT_MIN_REPLICAS, i64::from),
            max_replicas: own
                .and_then(|a| a.max_replicas)
                .or_else(|| flow.and_then(|a| a.max_replicas))
                .map_or(DEFAULT_MAX_REPLICAS, i64::from),
        }
    }
}

/// Whether autoscaling is requested for `decl`: its own `autoscaling.enabled` when set, else
/// the Flow's `spec.autoscaling.enabled` (the same rule admission applies).
pub fn requested(spec: &FlowSpec, decl: &NodeDecl) -> bool {
    decl.autoscaling
        .as_ref()
        .and_then(|a| a.enabled)
        .unwrap_or_else(|| spec.autoscaling.as_ref().is_some_and(|a| a.enabled))
}

/// Whether any node of `spec` asks for autoscaling, i.e. whether its run may own ScaledObjects.
pub fn any_requested(spec: &FlowSpec) -> bool {
    spec.nodes.iter().any(|d| requested(spec, d))
}

/// KEDA's `natsServerMonitoringEndpoint` (`host:port`, no scheme) and `useHttps` from the
/// Flow's `spec.broker.monitoringUrl` (`http://nats:8222` or a bare `nats:8222`).
pub fn monitoring_endpoint(url: &str) -> (String, bool) {
    let (rest, https) = match url.split_once("://") {
        Some((scheme, rest)) => (rest, scheme.eq_ignore_ascii_case("https")),
        None => (url, false),
    };
    (rest.trim_end_matches('/').to_owned(), https)
}

/// Whether KEDA's endpoint for `url` carries user information (`user:password@host`). KEDA's
/// nats-jetstream scaler takes the endpoint as plain trigger metadata, so the ScaledObject
/// would hold the password for anyone who may read it, and the scaler logs the whole
/// monitoring URL on every failed read; nats-server's monitoring endpoint takes no
/// credentials anyway.
pub fn endpoint_has_credentials(url: &str) -> bool {
    let (endpoint, _) = monitoring_endpoint(url);
    endpoint.contains('@')
}

/// What autoscaling renders for one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeScaler {
    /// The ScaledObject, for an eligible node with autoscaling requested.
    pub object: Option<ScaledObject>,
    /// The status entry; `None` when autoscaling was not requested for the node.
    pub status: Option<ScalerStatus>,
}

/// One `nats-jetstream` trigger per parent of `node`, sorted by parent name (duplicates
/// once), whatever the declaration order: stream = the parent's stream (NAME-3), consumer =
/// the node's shared durable on it (NAME-5), `lagThreshold` = the rule's target, the
/// monitoring endpoint from `monitoring_url`. Pure and canonical.
pub fn triggers(
    flow_id: &str,
    run_id: &str,
    node: &str,
    parents: &[String],
    monitoring_url: &str,
    target_lag_per_replica: i64,
) -> Vec<ScaleTrigger> {
    let (endpoint, https) = monitoring_endpoint(monitoring_url);
    let mut parents: Vec<&String> = parents.iter().collect();
    parents.sort();
    parents.dedup();
    parents
        .into_iter()
        .map(|parent| ScaleTrigger {
            type_: NATS_JETSTREAM_TRIGGER.to_owned(),
            name: Some(parent.clone()),
            metadata: BTreeMap::from([
                ("natsServerMonitoringEndpoint".to_owned(), endpoint.clone()),
                ("account".to_owned(), DEFAULT_NATS_ACCOUNT.to_owned()),
                ("stream".to_owned(), stream_name(flow_id, run_id, parent)),
                ("consumer".to_owned(), durable_name(node, parent)),
                (
                    "lagThreshold".to_owned(),
                    target_lag_per_replica.to_string(),
                ),
                ("useHttps".to_owned(), https.to_string()),
            ]),
        })
        .collect()
}

fn invalid(path: String, message: String) -> RenderError {
    RenderError::InvalidField { path, message }
}

/// The scaler of one node whose workload is named `workload`.
pub(crate) fn node_scaler(
    ctx: &Ctx,
    spec: &NodeSpec,
    workload: &str,
) -> Result<NodeScaler, RenderError> {
    let flow = &ctx.doc.spec;
    let (index, decl) = ctx.decl(spec)?;
    if !requested(flow, decl) {
        return Ok(NodeScaler::default());
    }
    let gpu_opt_in = flow.autoscaling.as_ref().is_some_and(|a| a.gpu);
    let reasons = fixed_scale_reasons(&NodeScaleFacts::of(
        spec,
        ctx.compiled.flow_type,
        gpu_opt_in,
    ));
    if !reasons.is_empty() {
        return Ok(NodeScaler {
            object: None,
            status: Some(ScalerStatus {
                rendered: false,
                reasons: reasons.iter().map(ToString::to_string).collect(),
            }),
        });
    }
    let rule = ScalingRule::of(flow, decl);
    let rule_path = if decl.autoscaling.is_some() {
        format!("spec.nodes[{index}].autoscaling")
    } else {
        "spec.autoscaling".to_owned()
    };
    validate_scaling_rule(
        rule.target_lag_per_replica,
        rule.min_replicas,
        rule.max_replicas,
    )
    .map_err(|e| invalid(rule_path.clone(), e.to_string()))?;
    let replicas = |n: i64, what: &str| {
        i32::try_from(n).map_err(|_| invalid(rule_path.clone(), format!("{what} {n} is too large")))
    };
    let (min, max) = (
        replicas(rule.min_replicas, "minReplicas")?,
        replicas(rule.max_replicas, "maxReplicas")?,
    );
    let monitoring = flow
        .broker
        .as_ref()
        .and_then(|b| b.monitoring_url.as_deref())
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            invalid(
                "spec.broker.monitoringUrl".to_owned(),
                format!(
                    "node '{}' is autoscaled, and KEDA's nats-jetstream scaler reads consumer \
                     lag from the broker's HTTP monitoring endpoint; set \
                     spec.broker.monitoringUrl (e.g. http://nats:8222)",
                    spec.name
                ),
            )
        })?;
    if endpoint_has_credentials(monitoring) {
        return Err(invalid(
            "spec.broker.monitoringUrl".to_owned(),
            format!(
                "node '{}' is autoscaled, and the monitoring URL carries user information, \
                 which KEDA's nats-jetstream scaler would keep in plain text in the \
                 ScaledObject and write to its logs; nats-server's monitoring endpoint takes \
                 no credentials: give it as http://host:port",
                spec.name
            ),
        ));
    }
    let triggers = triggers(
        &ctx.compiled.flow_id,
        &ctx.compiled.run_id,
        &spec.name,
        &spec.parents,
        monitoring,
        rule.target_lag_per_replica,
    );
    let names: Vec<String> = triggers.iter().filter_map(|t| t.name.clone()).collect();
    let meta: ObjectMeta = ctx
        .run
        .meta(workload.to_owned(), Component::Worker, Some(&spec.name));
    let object = ScaledObject {
        metadata: meta,
        spec: ScaledObjectSpec {
            scale_target_ref: ScaleTargetRef {
                api_version: Some("apps/v1".to_owned()),
                kind: Some("Deployment".to_owned()),
                name: workload.to_owned(),
            },
            min_replica_count: Some(min),
            max_replica_count: Some(max),
            triggers,
        },
    };
    Ok(NodeScaler {
        object: Some(object),
        status: Some(ScalerStatus {
            rendered: true,
            reasons: vec![format!(
                "KEDA ScaledObject {workload} scales Deployment {workload} between {min} and \
                 {max} replicas on the lag of parent(s) {} ({} pending messages per replica; \
                 the highest demand over parents wins).",
                names.join(", "),
                rule.target_lag_per_replica
            )],
        }),
    })
}
