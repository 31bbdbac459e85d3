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
//! object, no data in ConfigMaps (only their names, labels and applied-hash annotations
//! matter), no pod template in workloads (the applied-hash annotation stands for it; only
//! replicas, parallelism and status are read) and no pod spec (only labels and status are
//! read). That keeps the operator's memory proportional to the number of children, not to
//! their size.

use std::fmt::Debug;

use futures::{FutureExt, Stream};
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

/// Deployments are kept without their pod template.
pub fn deployment_without_template(d: &mut Deployment) {
    if let Some(spec) = d.spec.as_mut() {
        spec.template = Default::default();
    }
}

/// StatefulSets are kept without their pod template.
pub fn stateful_set_without_template(s: &mut StatefulSet) {
    if let Some(spec) = s.spec.as_mut() {
        spec.template = Default::default();
        spec.volume_claim_templates = None;
    }
}

/// Jobs are kept without their pod template.
pub fn job_without_template(j: &mut Job) {
    if let Some(spec) = j.spec.as_mut() {
        spec.template = Default::default();
    }
}

/// Pods are kept without their spec.
pub fn pod_without_spec(p: &mut Pod) {
    p.spec = None;
}

/// Whether `store` has its first list, without waiting: a reconcile must not wait for a
/// store inside the Controller, because the Controller stops polling the watches that fill
/// the stores while all its reconcile slots are busy (a new term starting with more Flows
/// than slots would wait forever).
fn loaded<K>(store: &Store<K>, kind: &'static str) -> Result<bool, ReconcileError>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match store.wait_until_ready().now_or_never() {
        Some(Ok(())) => Ok(true),
        Some(Err(_)) => Err(ReconcileError::CacheStopped(kind)),
        None => Ok(false),
    }
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
    /// The Flow's children and pods from the stores, or `None` while any store still waits
    /// for its first list (so a replica that just became leader never mistakes a cold cache
    /// for a Flow with no children; the caller reads the API server instead).
    pub fn observe(&self, ns: &str, flow: &str) -> Result<Option<Observed>, ReconcileError> {
        let all_loaded = loaded(&self.config_maps, "ConfigMap")?
            && loaded(&self.jobs, "Job")?
            && loaded(&self.deployments, "Deployment")?
            && loaded(&self.stateful_sets, "StatefulSet")?
            && loaded(&self.services, "Service")?
            && loaded(&self.pdbs, "PodDisruptionBudget")?
            && loaded(&self.pods, "Pod")?;
        if !all_loaded {
            return Ok(None);
        }
        Ok(Some(Observed {
            config_maps: of_flow(&self.config_maps, ns, flow),
            jobs: of_flow(&self.jobs, ns, flow),
            deployments: of_flow(&self.deployments, ns, flow),
            stateful_sets: of_flow(&self.stateful_sets, ns, flow),
            services: of_flow(&self.services, ns, flow),
            pdbs: of_flow(&self.pdbs, ns, flow),
            pods: of_flow(&self.pods, ns, flow),
            scaled_objects: Vec::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store::Writer;

    fn labelled<K: Resource<DynamicType = ()> + Default>(ns: &str, name: &str, flow: &str) -> K {
        let mut o = K::default();
        *o.meta_mut() = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(
                [
                    (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
                    (LABEL_FLOW.to_owned(), label_value(flow)),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        o
    }

    fn filled<K>(objects: Vec<K>) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let mut writer: Writer<K> = Writer::default();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.as_reader()
    }

    #[tokio::test]
    async fn a_flows_children_are_its_own_namespace_and_label_sorted_by_name() {
        let deployments = filled(vec![
            labelled::<Deployment>("a", "vf-x-2", "x"),
            labelled::<Deployment>("a", "vf-x-1", "x"),
            labelled::<Deployment>("b", "vf-x-3", "x"),
            labelled::<Deployment>("a", "vf-y-1", "y"),
        ]);
        let stores = Stores {
            config_maps: filled(vec![labelled::<ConfigMap>("a", "vf-x-specs", "x")]),
            jobs: filled(Vec::new()),
            deployments,
            stateful_sets: filled(Vec::new()),
            services: filled(Vec::new()),
            pdbs: filled(Vec::new()),
            pods: filled(vec![labelled::<Pod>("a", "vf-y-1-abc", "y")]),
        };
        let observed = stores
            .observe("a", "x")
            .expect("open stores")
            .expect("loaded stores");
        let names: Vec<_> = observed
            .deployments
            .iter()
            .filter_map(|d| d.metadata.name.as_deref())
            .collect();
        assert_eq!(names, ["vf-x-1", "vf-x-2"]);
        assert_eq!(observed.config_maps.len(), 1);
        assert!(observed.pods.is_empty(), "another Flow's pod");
    }

    #[test]
    fn trimming_keeps_what_status_reads() {
        let mut d = Deployment {
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                replicas: Some(3),
                template: k8s_openapi::api::core::v1::PodTemplateSpec {
                    spec: Some(Default::default()),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        deployment_without_template(&mut d);
        let spec = d.spec.expect("spec");
        assert_eq!(spec.replicas, Some(3));
        assert!(spec.template.spec.is_none());
        let mut cm = ConfigMap {
            data: Some([("flow.json".to_owned(), "{}".to_owned())].into()),
            ..Default::default()
        };
        without_data(&mut cm);
        assert!(cm.data.is_none());
    }

    /// A store still waiting for its first list makes the read fall back (None) at once,
    /// instead of waiting inside a reconcile slot for a watch the Controller is not polling.
    #[test]
    fn a_store_without_its_first_list_is_reported_not_waited_for() {
        let (cold, _writer) = reflector::store::<Pod>();
        let stores = Stores {
            config_maps: filled(Vec::new()),
            jobs: filled(Vec::new()),
            deployments: filled(Vec::new()),
            stateful_sets: filled(Vec::new()),
            services: filled(Vec::new()),
            pdbs: filled(Vec::new()),
            pods: cold,
        };
        assert!(stores.observe("a", "x").expect("open stores").is_none());
    }
}
