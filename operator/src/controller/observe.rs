//! What exists: the Flow's children and pods, read from the API server (the "dereference"
//! step of the pipeline), and the lookups the pure steps need.
//!
//! Everything is selected by the labels every rendered object carries
//! (`app.kubernetes.io/managed-by=videoflow-operator`, `videoflow.io/flow=<flow>`), across
//! runs, so pruning sees the children of retired runs and of nodes that left the spec.
//! Reads are sequential and in a fixed order so the mocked-API tests can assert them.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::error::ReconcileError;
use crate::crd::Flow;
use crate::render::ScaledObject;
use crate::render::autoscaling::any_requested;
use crate::render::labels::{
    LABEL_COMPONENT, LABEL_FLOW, LABEL_MANAGED_BY, LABEL_NODE, LABEL_RUN, MANAGED_BY, label_value,
};

/// The Flow's children and pods as the API server has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Specs ConfigMaps.
    pub config_maps: Vec<ConfigMap>,
    /// Provisioning, teardown and node Jobs.
    pub jobs: Vec<Job>,
    /// Node Deployments.
    pub deployments: Vec<Deployment>,
    /// Node StatefulSets.
    pub stateful_sets: Vec<StatefulSet>,
    /// Headless Services.
    pub services: Vec<Service>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// Every pod of every run (workers, provisioning, teardown).
    pub pods: Vec<Pod>,
    /// KEDA ScaledObjects; read only when the Flow may own some ([`scaled_objects`]).
    pub scaled_objects: Vec<ScaledObject>,
}

/// The annotation that carries a child's fingerprint of its rendered self: the apply step
/// writes it on every object it applies; equal fingerprints mean nothing to do.
pub const APPLIED_HASH_ANNOTATION: &str = "videoflow.io/applied-hash";

/// A child object, kind-erased: what pruning and the apply plan compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The Kubernetes kind.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its [`APPLIED_HASH_ANNOTATION`], if any.
    pub applied_hash: Option<String>,
    /// Its `app.kubernetes.io/component` label.
    pub component: Option<String>,
    /// The uid of its controller owner, if any.
    pub owner_uid: Option<String>,
    /// Whether its deletion has begun (it is only waiting for its dependents or finalizers):
    /// deleting it again would be a write that changes nothing.
    pub deleting: bool,
}

fn child<K: Resource>(kind: &'static str, o: &K) -> Child {
    let meta = o.meta();
    Child {
        kind,
        name: meta.name.clone().unwrap_or_default(),
        applied_hash: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPLIED_HASH_ANNOTATION))
            .cloned(),
        component: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_COMPONENT))
            .cloned(),
        owner_uid: meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone()),
        deleting: meta.deletion_timestamp.is_some(),
    }
}

/// The Job's condition of `type_` when it is `True`.
pub fn job_condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn upsert<K: Resource>(list: &mut Vec<K>, object: K) {
    let name = object.meta().name.clone();
    match list.iter_mut().find(|o| o.meta().name == name) {
        Some(slot) => *slot = object,
        None => list.push(object),
    }
}

fn named<'a, K: Resource>(list: &'a [K], name: &str) -> Option<&'a K> {
    list.iter().find(|o| o.meta().name.as_deref() == Some(name))
}

impl Observed {
    /// Every child except pods (which belong to their workloads), in a fixed kind order.
    pub fn children(&self) -> Vec<Child> {
        let mut out: Vec<Child> = Vec::new();
        out.extend(self.config_maps.iter().map(|o| child("ConfigMap", o)));
        out.extend(self.jobs.iter().map(|o| child("Job", o)));
        out.extend(self.deployments.iter().map(|o| child("Deployment", o)));
        out.extend(self.stateful_sets.iter().map(|o| child("StatefulSet", o)));
        out.extend(self.services.iter().map(|o| child("Service", o)));
        out.extend(self.pdbs.iter().map(|o| child("PodDisruptionBudget", o)));
        out.extend(self.scaled_objects.iter().map(|o| child("ScaledObject", o)));
        out
    }

    /// The Job of that name.
    pub fn job(&self, name: &str) -> Option<&Job> {
        named(&self.jobs, name)
    }

    /// The Deployment of that name.
    pub fn deployment(&self, name: &str) -> Option<&Deployment> {
        named(&self.deployments, name)
    }

    /// The StatefulSet of that name.
    pub fn stateful_set(&self, name: &str) -> Option<&StatefulSet> {
        named(&self.stateful_sets, name)
    }

    /// Pods of one run whose labels match `component` and, when given, `node`.
    pub fn pods_of(&self, run: &str, component: &str, node: Option<&str>) -> Vec<&Pod> {
        let run = label_value(run);
        let node = node.map(label_value);
        let mut pods: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| {
                let labels = p.labels();
                labels.get(LABEL_RUN) == Some(&run)
                    && labels.get(LABEL_COMPONENT).map(String::as_str) == Some(component)
                    && node
                        .as_ref()
                        .is_none_or(|n| labels.get(LABEL_NODE) == Some(n))
            })
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    /// Records an object the reconciler just applied (the API server's answer), so status is
    /// computed from what was applied rather than from the read before it.
    pub fn record(&mut self, applied: Applied) {
        match applied {
            Applied::ConfigMap(o) => upsert(&mut self.config_maps, o),
            Applied::Job(o) => upsert(&mut self.jobs, o),
            Applied::Deployment(o) => upsert(&mut self.deployments, o),
            Applied::StatefulSet(o) => upsert(&mut self.stateful_sets, o),
            Applied::Service(o) => upsert(&mut self.services, o),
            Applied::PodDisruptionBudget(o) => upsert(&mut self.pdbs, o),
            Applied::ScaledObject(o) => upsert(&mut self.scaled_objects, o),
        }
    }

    /// Forgets a deleted child.
    pub fn forget(&mut self, kind: &str, name: &str) {
        let keep = |n: &Option<String>| n.as_deref() != Some(name);
        match kind {
            "ConfigMap" => self.config_maps.retain(|o| keep(&o.metadata.name)),
            "Job" => self.jobs.retain(|o| keep(&o.metadata.name)),
            "Deployment" => self.deployments.retain(|o| keep(&o.metadata.name)),
            "StatefulSet" => self.stateful_sets.retain(|o| keep(&o.metadata.name)),
            "Service" => self.services.retain(|o| keep(&o.metadata.name)),
            "PodDisruptionBudget" => self.pdbs.retain(|o| keep(&o.metadata.name)),
            "ScaledObject" => self.scaled_objects.retain(|o| keep(&o.metadata.name)),
            _ => {}
        }
    }
}

/// An object as the API server returned it from an apply.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// A ConfigMap.
    ConfigMap(ConfigMap),
    /// A Job.
    Job(Job),
    /// A Deployment.
    Deployment(Deployment),
    /// A StatefulSet.
    StatefulSet(StatefulSet),
    /// A Service.
    Service(Service),
    /// A PodDisruptionBudget.
    PodDisruptionBudget(PodDisruptionBudget),
    /// A KEDA ScaledObject.
    ScaledObject(ScaledObject),
}

/// The label selector of everything the operator made for one Flow.
pub fn flow_selector(flow: &str) -> String {
    format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_FLOW}={}",
        label_value(flow)
    )
}

async fn list<K>(client: &Client, ns: &str, selector: &str) -> Result<Vec<K>, ReconcileError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .map_err(|e| ReconcileError::kube("list", K::plural(&()).into_owned(), e))
}

/// Reads the Flow's children and pods: seven label-selected LISTs, in a fixed order.
/// ScaledObjects are read separately, only when the Flow may own some ([`scaled_objects`]).
pub async fn observe(client: &Client, ns: &str, flow: &str) -> Result<Observed, ReconcileError> {
    let selector = flow_selector(flow);
    Ok(Observed {
        config_maps: list(client, ns, &selector).await?,
        jobs: list(client, ns, &selector).await?,
        deployments: list(client, ns, &selector).await?,
        stateful_sets: list(client, ns, &selector).await?,
        services: list(client, ns, &selector).await?,
        pdbs: list(client, ns, &selector).await?,
        pods: list(client, ns, &selector).await?,
        scaled_objects: Vec::new(),
    })
}

/// Whether the Flow's children may include ScaledObjects: a node asks for autoscaling, or the
/// last status says a scaler was rendered (so one left behind by a switched-off autoscaling
/// is still found and pruned).
///
/// Why not always: the ScaledObject kind exists only where KEDA is installed, and a Flow that
/// never asked for autoscaling should cost no read of it.
pub fn may_own_scalers(flow: &Flow) -> bool {
    any_requested(&flow.spec)
        || flow.status.as_ref().is_some_and(|s| {
            s.nodes
                .iter()
                .any(|n| n.scaler.as_ref().is_some_and(|sc| sc.rendered))
        })
}

/// Reads the Flow's KEDA ScaledObjects by label; none when the KEDA CRDs are not installed
/// (the LIST answers 404), so pruning has nothing to do and an apply names the cause.
pub async fn scaled_objects(
    client: &Client,
    ns: &str,
    flow: &str,
) -> Result<Vec<ScaledObject>, ReconcileError> {
    match list::<ScaledObject>(client, ns, &flow_selector(flow)).await {
        Ok(items) => Ok(items),
        Err(ReconcileError::Kube { source, .. }) if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404) => {
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}
