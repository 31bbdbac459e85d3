//! The reflector stores behind the Controller's watches of the kinds a Flow owns, and the
//! reads of one Flow's children from them.
//!
//! The Controller watches every owned kind anyway (to requeue a Flow when a child changes);
//! each watch also fills a store, so a reconcile reads the Flow's children from memory
//! instead of seven label-selected LISTs per reconcile. A store lags the API server by the
//! watch latency: an object the reconcile itself applied is recorded from the API's answer
//! ([`Observed::record`]), and the watch event of any change requeues the Flow, which then
//! sees it. ScaledObjects are not watched (KEDA may be absent) and stay a LIST, only for
//! Flows that may own some.
//!
//! What a store keeps is trimmed to what the reconciler reads: no `managedFields` on any
//! object and no data in ConfigMaps (only their names, labels and applied-hash annotations
//! matter), which keeps the operator's memory proportional to the number of children, not
//! to their size.

use std::fmt::Debug;

use futures::Stream;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::error::ReconcileError;
use super::observe::Observed;
use crate::render::labels::{LABEL_FLOW, LABEL_MANAGED_BY, MANAGED_BY, label_value};

/// One store per watched owned kind.
#[derive(Clone)]
pub struct Stores {
    /// Specs ConfigMaps (without their data).
    pub config_maps: Store<ConfigMap>,
    /// Jobs.
    pub jobs: Store<Job>,
    /// Deployments.
    pub deployments: Store<Deployment>,
    /// StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
    /// Services.
    pub services: Store<Service>,
    /// PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    /// Pods of the operator's workloads.
    pub pods: Store<Pod>,
}

/// A watch of `api` that fills a store with trimmed objects, and the stream of touched
/// objects the Controller maps to their Flow.
pub fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(move |o| {
            o.managed_fields_mut().clear();
            trim(o);
        })
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

/// Nothing to trim beyond `managedFields`.
pub fn keep<K>(_: &mut K) {}

/// ConfigMaps are kept without their data.
pub fn without_data(cm: &mut ConfigMap) {
    cm.data = None;
    cm.binary_data = None;
}

async fn ready<K>(store: &Store<K>, kind: &'static str) -> Result<(), ReconcileError>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .wait_until_ready()
        .await
        .map_err(|_| ReconcileError::CacheStopped(kind))
}

fn of_flow<K>(store: &Store<K>, ns: &str, flow: &str) -> Vec<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let flow = label_value(flow);
    let mut items: Vec<K> = store
        .state_filter(|o| {
            let labels = o.labels();
            o.namespace().as_deref() == Some(ns)
                && labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
                && labels.get(LABEL_FLOW) == Some(&flow)
        })
        .into_iter()
        .map(|o| (*o).clone())
        .collect();
    items.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    items
}

impl Stores {
    /// The Flow's children and pods from the stores, once every store has its first list
    /// (so a replica that just became leader never mistakes a cold cache for a Flow with no
    /// children).
    pub async fn observe(&self, ns: &str, flow: &str) -> Result<Observed, ReconcileError> {
        ready(&self.config_maps, "ConfigMap").await?;
        ready(&self.jobs, "Job").await?;
        ready(&self.deployments, "Deployment").await?;
        ready(&self.stateful_sets, "StatefulSet").await?;
        ready(&self.services, "Service").await?;
        ready(&self.pdbs, "PodDisruptionBudget").await?;
        ready(&self.pods, "Pod").await?;
        Ok(Observed {
            config_maps: of_flow(&self.config_maps, ns, flow),
            jobs: of_flow(&self.jobs, ns, flow),
            deployments: of_flow(&self.deployments, ns, flow),
            stateful_sets: of_flow(&self.stateful_sets, ns, flow),
            services: of_flow(&self.services, ns, flow),
            pdbs: of_flow(&self.pdbs, ns, flow),
            pods: of_flow(&self.pods, ns, flow),
            scaled_objects: Vec::new(),
        })
    }
}
