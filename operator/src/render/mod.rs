//! Desired state: a `Flow` rendered into the Kubernetes objects of its current run (design §7).
//!
//! [`render`] is a pure function — no client, no clock, no randomness — so the reconciler's
//! "build" step, the `videoflow-operator render` command and the snapshot tests all see the
//! same objects, and an unchanged Flow renders byte-identical objects (no spurious writes).
//!
//! What one run renders, in apply order:
//! 1. ConfigMap `vf-<flow>-<run>-specs` with the compiled records ([`configmaps`]);
//! 2. the provisioning Job `vf-<flow>-<run>-provision` ([`provision`]);
//! 3. per node, in topological order: a headless Service (StatefulSets only), the workload by
//!    the workload-kind rules, a PodDisruptionBudget for multi-replica long-running nodes
//!    ([`workloads`], pods from [`pod`]), and a KEDA ScaledObject for an eligible node with
//!    autoscaling requested ([`autoscaling`]).
//!
//! Every object carries the labels of [`labels`] and, when the Flow has a uid, a controller
//! owner reference to it.

pub mod autoscaling;
pub mod config;
pub mod configmaps;
pub mod context;
pub mod error;
pub mod labels;
pub mod load;
pub mod pod;
pub mod provision;
pub mod security;
pub mod settings;
pub mod volumes;
pub mod workloads;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

pub use autoscaling::ScaledObject;
pub use config::{DEFAULT_WORKER_IMAGE, RenderConfig};
pub use context::{DEFAULT_GPU_RESOURCE, flow_document};
pub use error::RenderError;
pub use workloads::{NodeObjects, Workload, WorkloadKind};

use crate::crd::Flow;

/// A StatefulSet's pods carry `controller-revision-hash: <name>-<10 chars>`, a label value of
/// at most 63 characters, so longer StatefulSet names are accepted and then never run.
pub const STATEFULSET_NAME_MAX: usize = 52;

/// The desired objects of a Flow's current run, typed, in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Namespace of every object.
    pub namespace: String,
    /// Raw flow id.
    pub flow_id: String,
    /// Raw run id in effect (explicit or derived from the topology).
    pub run_id: String,
    /// The compiled records, the provisioning input.
    pub specs: ConfigMap,
    /// Creates the run's streams and durables before workers start.
    pub provision: Job,
    /// One entry per node, parents before children.
    pub nodes: Vec<NodeObjects>,
}

/// A borrowed rendered object, for code that handles every kind alike (apply, prune, YAML).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object<'a> {
    /// A ConfigMap.
    ConfigMap(&'a ConfigMap),
    /// A Job (provisioning or a node).
    Job(&'a Job),
    /// A Deployment.
    Deployment(&'a Deployment),
    /// A StatefulSet.
    StatefulSet(&'a StatefulSet),
    /// A headless Service.
    Service(&'a Service),
    /// A PodDisruptionBudget.
    PodDisruptionBudget(&'a PodDisruptionBudget),
    /// A KEDA ScaledObject.
    ScaledObject(&'a ScaledObject),
}

impl<'a> Object<'a> {
    /// The Kubernetes `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::ConfigMap(_) => "ConfigMap",
            Object::Job(_) => "Job",
            Object::Deployment(_) => "Deployment",
            Object::StatefulSet(_) => "StatefulSet",
            Object::Service(_) => "Service",
            Object::PodDisruptionBudget(_) => "PodDisruptionBudget",
            Object::ScaledObject(_) => "ScaledObject",
        }
    }

    /// The object's metadata.
    pub fn meta(&self) -> &'a ObjectMeta {
        match self {
            Object::ConfigMap(o) => &o.metadata,
            Object::Job(o) => &o.metadata,
            Object::Deployment(o) => &o.metadata,
            Object::StatefulSet(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::PodDisruptionBudget(o) => &o.metadata,
            Object::ScaledObject(o) => &o.metadata,
        }
    }

    /// The object's name.
    pub fn name(&self) -> &'a str {
        self.meta().name.as_deref().unwrap_or_default()
    }
}

impl NodeObjects {
    /// The node's objects in apply order: a Service before its StatefulSet, a ScaledObject
    /// after the Deployment it scales.
    pub fn objects(&self) -> Vec<Object<'_>> {
        let mut out = Vec::with_capacity(4);
        if let Some(service) = &self.service {
            out.push(Object::Service(service));
        }
        out.push(match &self.workload {
            Workload::Deployment(o) => Object::Deployment(o),
            Workload::StatefulSet(o) => Object::StatefulSet(o),
            Workload::Job(o) => Object::Job(o),
        });
        if let Some(pdb) = &self.pdb {
            out.push(Object::PodDisruptionBudget(pdb));
        }
        if let Some(scaler) = &self.scaled_object {
            out.push(Object::ScaledObject(scaler));
        }
        out
    }
}

impl Rendered {
    /// Every object in apply order: the specs before the Job that mounts them, the
    /// provisioning Job before the workers, a Service before its StatefulSet, a ScaledObject
    /// after the Deployment it scales.
    pub fn objects(&self) -> Vec<Object<'_>> {
        let mut out = vec![Object::ConfigMap(&self.specs), Object::Job(&self.provision)];
        for node in &self.nodes {
            out.extend(node.objects());
        }
        out
    }

    /// The objects of one node.
    pub fn node(&self, name: &str) -> Option<&NodeObjects> {
        self.nodes.iter().find(|n| n.node == name)
    }

    /// A multi-document YAML stream (`kubectl apply --server-side -f -`), deterministic:
    /// fixed object order, fields in declaration order, maps sorted.
    pub fn to_yaml(&self) -> Result<String, RenderError> {
        let mut out = format!(
            "# Rendered by `videoflow-operator render`: Flow {}/{}, run {}.\n",
            self.namespace, self.flow_id, self.run_id
        );
        for object in self.objects() {
            let doc = serde_yaml::to_string(&object)
                .map_err(|e| RenderError::Serialize(e.to_string()))?;
            out.push_str("---\n");
            out.push_str(&doc);
        }
        Ok(out)
    }
}

/// Renders the desired objects of `flow`'s current run. Pure: the same Flow and config give
/// the same objects, every time.
pub fn render(flow: &Flow, config: &RenderConfig) -> Result<Rendered, RenderError> {
    let ctx = context::Ctx::new(flow, config)?;
    let specs = configmaps::specs_configmap(&ctx);
    let provision = provision::provision_job(&ctx)?;
    let mut nodes = ctx
        .compiled
        .nodes
        .iter()
        .map(|spec| workloads::node_objects(&ctx, spec))
        .collect::<Result<Vec<_>, _>>()?;
    workloads::start_order(ctx.compiled.flow_type, &ctx.compiled.nodes, &mut nodes);
    let rendered = Rendered {
        namespace: ctx.run.namespace.clone(),
        flow_id: ctx.compiled.flow_id.clone(),
        run_id: ctx.compiled.run_id.clone(),
        specs,
        provision,
        nodes,
    };
    check_names(&rendered)?;
    Ok(rendered)
}

/// Refuses names that encode or truncate onto each other (one object would overwrite the
/// other on apply) and StatefulSet names too long for their pods' labels.
fn check_names(rendered: &Rendered) -> Result<(), RenderError> {
    let owner = |object: &Object<'_>| {
        object
            .meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::LABEL_NODE))
            .map_or_else(
                || format!("the run's {}", object.kind()),
                |node| format!("node '{node}'"),
            )
    };
    let mut seen: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for object in rendered.objects() {
        let name = object.name();
        if let Object::StatefulSet(_) = object
            && name.len() > STATEFULSET_NAME_MAX
        {
            return Err(RenderError::NameTooLong {
                kind: "StatefulSet",
                name: name.to_owned(),
                len: name.len(),
                max: STATEFULSET_NAME_MAX,
            });
        }
        if let Some(first) = seen.insert((object.kind(), name), owner(&object)) {
            return Err(RenderError::NameCollision {
                kind: object.kind(),
                name: name.to_owned(),
                first,
                second: owner(&object),
            });
        }
    }
    Ok(())
}
