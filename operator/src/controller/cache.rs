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
//! What a store keeps is trimmed to what the reconciler reads: of every object's metadata
//! no `managedFields`, no annotation but the applied-hash one, no owner reference but the
//! controller's (pruning compares its uid), no finalizers; no data in ConfigMaps (only their
//! names, labels and applied-hash annotations matter), no pod template in workloads (the
//! applied-hash annotation stands for it; only replicas, parallelism and status are read) and
//! no conditions in Deployment or StatefulSet status (only replica counts are read); of a pod
//! only its identity, the operator's own labels, its `PodScheduled=False` condition and each
//! container's name, readiness, restart count, state and last state (what the status and the
//! termination reports read). That keeps the operator's memory proportional to the number of
//! children, not to their size; the scale bench in docs/PERFORMANCE.md measured it.

use std::fmt::Debug;

use futures::{FutureExt, Stream};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerStatus, Pod, PodCondition, PodStatus, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::error::ReconcileError;
use super::observe::{APPLIED_HASH_ANNOTATION, Observed};
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
            trim_metadata(o.meta_mut());
            trim(o);
        })
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

/// What every cached child keeps of its metadata: identity, labels, the applied-hash
/// annotation, the controller owner reference, creation and deletion times.
pub fn trim_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.self_link = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == APPLIED_HASH_ANNOTATION);
    }
    if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.annotations = None;
    }
    if let Some(owners) = meta.owner_references.as_mut() {
        owners.retain(|o| o.controller == Some(true));
    }
}

/// Nothing to trim beyond the metadata.
pub fn keep<K>(_: &mut K) {}

/// ConfigMaps are kept without their data.
pub fn without_data(cm: &mut ConfigMap) {
    cm.data = None;
    cm.binary_data = None;
}

/// Deployments are kept without their pod template and status conditions.
pub fn deployment_without_template(d: &mut Deployment) {
    if let Some(spec) = d.spec.as_mut() {
        spec.template = Default::default();
    }
    if let Some(status) = d.status.as_mut() {
        status.conditions = None;
    }
}

/// StatefulSets are kept without their pod template and status conditions.
pub fn stateful_set_without_template(s: &mut StatefulSet) {
    if let Some(spec) = s.spec.as_mut() {
        spec.template = Default::default();
        spec.volume_claim_templates = None;
    }
    if let Some(status) = s.status.as_mut() {
        status.conditions = None;
    }
}

/// Jobs are kept without their pod template.
pub fn job_without_template(j: &mut Job) {
    if let Some(spec) = j.spec.as_mut() {
        spec.template = Default::default();
    }
}

/// Pods are kept as what the status and the termination reports read: identity, the
/// operator's own labels (the kubelet's and controllers' are not selected on), the
/// `PodScheduled=False` condition, and each container's name, readiness, restart count, state
/// and last state (the termination record is in the terminated state's message). No spec.
pub fn pod_for_status(p: &mut Pod) {
    let meta = std::mem::take(&mut p.metadata);
    let labels = meta.labels.map(|labels| {
        labels
            .into_iter()
            .filter(|(k, _)| k.starts_with("videoflow.io/") || k.starts_with("app.kubernetes.io/"))
            .collect()
    });
    p.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels,
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    };
    p.spec = None;
    p.status = p.status.take().map(|status| {
        let containers = |list: Option<Vec<ContainerStatus>>| {
            list.map(|list| {
                list.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        ready: c.ready,
                        restart_count: c.restart_count,
                        state: c.state,
                        last_state: c.last_state,
                        ..ContainerStatus::default()
                    })
                    .collect()
            })
        };
        let unschedulable: Vec<PodCondition> = status
            .conditions
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == "PodScheduled" && c.status == "False")
            .collect();
        PodStatus {
            phase: status.phase,
            conditions: (!unschedulable.is_empty()).then_some(unschedulable),
            init_container_statuses: containers(status.init_container_statuses),
            container_statuses: containers(status.container_statuses),
            ..PodStatus::default()
        }
    });
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

    /// A pod as kwok (or a kubelet) reports it, with a worker's JSON termination record and
    /// an unschedulable replica: what the trimmed copy keeps gives the same termination
    /// observations, restarts and unschedulable condition as the whole pod.
    #[test]
    fn a_trimmed_pod_reads_the_same_as_the_whole_pod() {
        use crate::controller::termination::observe_pod;
        let record = r#"{"code":"VF_BROKER_UNAVAILABLE","message":"m","exit_code":3}"#;
        let full: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "vf-f-r-det-abc", "namespace": "a", "uid": "u", "resourceVersion": "7",
                "generateName": "vf-f-r-det-",
                "labels": {"app.kubernetes.io/managed-by": "videoflow-operator", "videoflow.io/flow": "f",
                           "videoflow.io/run": "r", "videoflow.io/node": "det", "pod-template-hash": "abc"},
                "annotations": {"kwok.x-k8s.io/node": "fake", "testenv.videoflow.io/exit-code": "3"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o", "controller": true}],
                "finalizers": ["x"]
            },
            "spec": {"containers": [{"name": "worker", "image": "w"}]},
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "qosClass": "Burstable",
                "startTime": "2030-01-01T00:00:00Z",
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/1 nodes", "lastTransitionTime": "2030-01-01T00:00:00Z"}
                ],
                "containerStatuses": [{
                    "name": "worker", "image": "w", "imageID": "sha256:1", "containerID": "c://1",
                    "ready": false, "restartCount": 4, "started": false,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "message": record,
                                                 "finishedAt": "2030-01-01T00:01:00Z"}}
                }]
            }
        }))
        .expect("pod");
        let mut trimmed = full.clone();
        trim_metadata(&mut trimmed.metadata);
        pod_for_status(&mut trimmed);
        assert_eq!(observe_pod(&trimmed), observe_pod(&full));
        assert!(!observe_pod(&trimmed).is_empty());
        let status = trimmed.status.as_ref().expect("status");
        assert_eq!(
            status
                .container_statuses
                .as_ref()
                .map(|c| c[0].restart_count),
            Some(4)
        );
        assert_eq!(
            status.conditions.as_ref().map(|c| c[0].reason.clone()),
            Some(Some("Unschedulable".to_owned()))
        );
        assert_eq!(flow_label(&trimmed), Some("f"));
        assert!(trimmed.spec.is_none() && trimmed.metadata.owner_references.is_none());
        assert!(trimmed.metadata.annotations.is_none());
        assert!(!trimmed.labels().contains_key("pod-template-hash"));
        assert!(
            status.host_ip.is_none()
                && status
                    .container_statuses
                    .as_ref()
                    .is_some_and(|c| c[0].image.is_empty())
        );
    }

    fn flow_label(p: &Pod) -> Option<&str> {
        p.labels().get(LABEL_FLOW).map(String::as_str)
    }

    /// Children keep only the annotation and owner reference the reconciler reads.
    #[test]
    fn child_metadata_keeps_the_applied_hash_and_the_controller() {
        let mut meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "x",
            "annotations": {APPLIED_HASH_ANNOTATION: "h", "deployment.kubernetes.io/revision": "2"},
            "ownerReferences": [
                {"apiVersion": "v", "kind": "Flow", "name": "f", "uid": "flow-uid", "controller": true},
                {"apiVersion": "v", "kind": "Other", "name": "o", "uid": "other"}
            ],
            "finalizers": ["f"]
        }))
        .expect("meta");
        trim_metadata(&mut meta);
        assert_eq!(
            meta.annotations,
            Some([(APPLIED_HASH_ANNOTATION.to_owned(), "h".to_owned())].into())
        );
        let owners = meta.owner_references.expect("owners");
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "flow-uid");
        assert!(meta.finalizers.is_none());
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
