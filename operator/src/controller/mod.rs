//! The reconciler: a kube-runtime Controller for `Flow` (design §7).
//!
//! Modules, in pipeline order:
//! - [`cache`]: the reflector stores of the owned kinds, where a reconcile reads its
//!   children;
//! - [`admission`]: validation, the autoscaling refusal and rendering, all problems at once
//!   (pure);
//! - [`observe`]: the Flow's children and pods, read by label, and the lookups on them
//!   (a child's applied fingerprint, a Job's conditions);
//! - [`apply`]: the apply/prune plan (pure) and server-side apply with one field manager;
//! - [`demand`]: the broker's lag per edge → `status.nodes[].demand` (SCALE-1/2);
//! - [`termination`]: container exits and stuck containers explained (pure);
//! - [`status`]: conditions, nodes and phase (pure);
//! - [`events`]: Kubernetes Events on transitions (pure diff, thin publish);
//! - [`teardown`]: the finalizer's teardown Job and its decision (pure);
//! - [`reconcile`](mod@reconcile): the pipeline itself and the error policy;
//! - [`metrics`]: Prometheus metrics;
//! - [`context`]: what every reconcile shares (client, recorder, configuration, clock);
//! - [`permissions`]: the API permissions all of the above use (the chart's RBAC);
//! - [`leader`]: leader election on a Lease, so of several replicas one reconciles.
//!
//! [`run`] wires them into a Controller: it owns the kinds the renderer makes (Jobs,
//! Deployments, StatefulSets, Services, ConfigMaps, PodDisruptionBudgets) and watches the
//! pods the operator's workloads create, all label-selected so the watches carry only
//! videoflow's objects; each watch fills a [`cache::Stores`] store that reconciles read.

pub mod admission;
pub mod apply;
pub mod cache;
pub mod context;
pub mod demand;
pub mod error;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod permissions;
pub mod reconcile;
pub mod status;
pub mod teardown;
pub mod termination;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef};

use cache::{
    Stores, deployment_without_template, job_without_template, keep, pod_for_status, reflected,
    stateful_set_without_template, without_data,
};
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, ResourceExt};

pub use context::{CONTROLLER_NAME, Clock, Context, system_clock};
pub use error::ReconcileError;
pub use metrics::Metrics;
pub use reconcile::{error_policy, reconcile};
pub use status::StatusConfig;

use crate::crd::Flow;
use crate::render::labels::{LABEL_FLOW, LABEL_MANAGED_BY, MANAGED_BY};

/// The annotation `kubectl apply` (client side) keeps the whole last-applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How the Controller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// Watch one namespace; `None` watches all.
    pub namespace: Option<String>,
    /// Flows reconciled at once (different Flows; one Flow is never reconciled twice at once).
    pub concurrency: u16,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The Flow a pod belongs to, from its labels (pods are owned by workloads, not the Flow).
pub fn flow_of_pod(pod: &Pod) -> Option<ObjectRef<Flow>> {
    let labels = pod.labels();
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let flow = labels.get(LABEL_FLOW)?;
    Some(ObjectRef::new(flow).within(&pod.namespace()?))
}

/// Runs the Controller until `shutdown` resolves; in-flight reconciles finish first.
///
/// Each owned kind is watched once: the watch both requeues the owning Flow and fills the
/// store the reconciles read ([`cache`]). The stores live as long as this call: a replica
/// that stops leading drops them, and its next term starts with fresh ones.
pub async fn run(
    ctx: Arc<Context>,
    config: RunConfig,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = config.namespace.as_deref();
    let owned = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    // A Flow triggers a reconcile when its spec changes (its generation: deletion bumps it
    // too), never when only its status or metadata does: each reconcile may write the status
    // (demand, conditions), and a watch on every write would reconcile a busy Flow in a loop.
    // Rechecks come from the reconcile's own requeue and from the owned objects' events.
    let (flows, writer) = reflector::store();
    let trigger = watcher(api::<Flow>(&client, ns), watcher::Config::default())
        .default_backoff()
        .modify(|f| {
            // Nothing reads them, and `kubectl apply`'s copy of the whole spec doubles a Flow.
            f.managed_fields_mut().clear();
            if let Some(a) = f.metadata.annotations.as_mut() {
                a.remove(LAST_APPLIED);
            }
        })
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let (config_maps, cm_events) =
        reflected(api::<ConfigMap>(&client, ns), owned.clone(), without_data);
    let (jobs, job_events) =
        reflected(api::<Job>(&client, ns), owned.clone(), job_without_template);
    let (deployments, deployment_events) = reflected(
        api::<Deployment>(&client, ns),
        owned.clone(),
        deployment_without_template,
    );
    let (stateful_sets, sts_events) = reflected(
        api::<StatefulSet>(&client, ns),
        owned.clone(),
        stateful_set_without_template,
    );
    let (services, service_events) = reflected(api::<Service>(&client, ns), owned.clone(), keep);
    let (pdbs, pdb_events) =
        reflected(api::<PodDisruptionBudget>(&client, ns), owned.clone(), keep);
    let (pods, pod_events) = reflected(api::<Pod>(&client, ns), owned, pod_for_status);
    ctx.set_stores(Some(Stores {
        config_maps,
        jobs,
        deployments,
        stateful_sets,
        services,
        pdbs,
        pods,
    }));
    Controller::for_stream(trigger, flows)
        .owns_stream(cm_events)
        .owns_stream(job_events)
        .owns_stream(deployment_events)
        .owns_stream(sts_events)
        .owns_stream(service_events)
        .owns_stream(pdb_events)
        .watches_stream(pod_events, |pod| flow_of_pod(&pod))
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            match result {
                Ok((flow, _)) => tracing::debug!(flow = %flow, "reconciled"),
                // A child's delete event of a Flow that is already gone (every Flow deletion
                // ends this way): nothing to reconcile, and nothing to warn about.
                Err(controller::Error::ObjectNotFound(flow)) => {
                    tracing::debug!(flow = %flow, "event for a deleted Flow");
                }
                Err(e) => tracing::warn!(error = %e, "controller"),
            }
        })
        .await;
    ctx.set_stores(None);
}
