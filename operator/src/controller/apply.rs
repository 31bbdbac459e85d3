//! Apply and prune: the only steps that write children.
//!
//! Server-side apply with one field manager ([`FIELD_MANAGER`]) and `force`, so the operator
//! owns every field it renders and a `kubectl edit` of one is taken back on the next change.
//! "No writes when nothing changed" is a plan decision, not an API-server one: every rendered
//! object carries a fingerprint of itself ([`APPLIED_HASH_ANNOTATION`]) and is applied only
//! when the fingerprint of what exists differs. An SSA that changes nothing still costs a
//! write request, an audit entry and, for some kinds, a resourceVersion bump that retriggers
//! every watcher.
//!
//! The plan is pure ([`plan`]); [`execute`] is the thin I/O around it.
//!
//! An autoscaled node's Deployment is applied without `spec.replicas`: the HPA KEDA creates
//! owns the count. Dropping a field from an apply removes it when no other manager owns it,
//! so a Deployment that had the operator's count (autoscaling switched on in place) would
//! fall to the default of 1 replica, pods deleted, until the HPA scales it back. The count is
//! therefore first handed over ([`replicas_handover`]): a second field manager applies the
//! live value, then the operator's apply lets go of the field and the value stays, as
//! Kubernetes documents for moving `replicas` to an HPA.

use std::collections::BTreeSet;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::error::ReconcileError;
use super::observe::{APPLIED_HASH_ANNOTATION, Applied, Child, Observed};
use crate::crd::WorkloadRef;
use crate::render::{Object, Rendered, ScaledObject};

/// The one field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "videoflow-operator";

/// The field manager that holds a Deployment's replica count while the operator's own apply
/// lets go of it for the HPA ([`replicas_handover`]).
pub const REPLICAS_HANDOVER_MANAGER: &str = "videoflow-operator-handover";

/// Components the plan never prunes: the teardown Job lives through the Flow's deletion.
const NEVER_PRUNED: [&str; 1] = [super::teardown::TEARDOWN_COMPONENT];

/// When in the run an object may be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The specs ConfigMap and the provisioning Job: always.
    Prepare,
    /// Workers and their Services and PDBs: only once provisioning completed, because BATCH
    /// streams drop what is published before their consumers exist.
    Workers,
}

/// One rendered object ready to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// Kubernetes kind.
    pub kind: &'static str,
    /// Name.
    pub name: String,
    /// The apply body, fingerprint annotation included.
    pub body: serde_json::Value,
    /// The fingerprint.
    pub hash: String,
    /// When it may be applied.
    pub stage: Stage,
    /// Workloads that must be up before this object is created (a REALTIME node's children,
    /// `NodeObjects::start_after`); an object that exists is updated regardless.
    pub after: Vec<WorkloadRef>,
}

impl Desired {
    /// Jobs are applied once per run: their pod template is immutable, so a changed Job
    /// cannot be applied in place (a new run gets new Jobs).
    pub fn create_only(&self) -> bool {
        self.kind == "Job"
    }

    /// `Kind/name`, for logs and errors.
    pub fn target(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }
}

/// The fingerprint of an apply body: SHA-256 of its JSON (object keys sorted by
/// `serde_json`'s map), first 16 hex characters.
pub fn fingerprint(body: &serde_json::Value) -> String {
    let digest = Sha256::digest(body.to_string().as_bytes());
    hex::encode(&digest[..8])
}

/// An object's apply body with its fingerprint annotation.
pub fn desired(object: &Object<'_>, stage: Stage) -> Result<Desired, ReconcileError> {
    let target = format!("{}/{}", object.kind(), object.name());
    let mut body = serde_json::to_value(object).map_err(|source| ReconcileError::Serialize {
        target: target.clone(),
        source,
    })?;
    let hash = fingerprint(&body);
    if let Some(meta) = body
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(map) = annotations.as_object_mut() {
            map.insert(
                APPLIED_HASH_ANNOTATION.to_owned(),
                serde_json::Value::String(hash.clone()),
            );
        }
    }
    Ok(Desired {
        kind: object.kind(),
        name: object.name().to_owned(),
        body,
        hash,
        stage,
        after: Vec::new(),
    })
}

/// Every rendered object in apply order, with its stage and the workloads it starts after.
pub fn desired_objects(rendered: &Rendered) -> Result<Vec<Desired>, ReconcileError> {
    let mut out = vec![
        desired(&Object::ConfigMap(&rendered.specs), Stage::Prepare)?,
        desired(&Object::Job(&rendered.provision), Stage::Prepare)?,
    ];
    for node in &rendered.nodes {
        for o in node.objects() {
            let mut d = desired(&o, Stage::Workers)?;
            d.after.clone_from(&node.start_after);
            out.push(d);
        }
    }
    Ok(out)
}

/// Whether a workload runs at its desired scale: every wanted replica ready (the live
/// object's `spec.replicas`, which an autoscaler may own). A node's readiness is its
/// `open()` having returned with its durables bound (HEALTH-1): from then on it pulls.
fn workload_up(observed: &Observed, w: &WorkloadRef) -> bool {
    let up =
        |replicas: Option<i32>, ready: Option<i32>| ready.unwrap_or(0) >= replicas.unwrap_or(1);
    match w.kind.as_str() {
        "Deployment" => observed.deployment(&w.name).is_some_and(|d| {
            up(
                d.spec.as_ref().and_then(|s| s.replicas),
                d.status.as_ref().and_then(|s| s.ready_replicas),
            )
        }),
        "StatefulSet" => observed.stateful_set(&w.name).is_some_and(|d| {
            up(
                d.spec.as_ref().and_then(|s| s.replicas),
                d.status.as_ref().and_then(|s| s.ready_replicas),
            )
        }),
        _ => observed
            .job(&w.name)
            .is_some_and(|j| j.status.as_ref().and_then(|s| s.ready).unwrap_or(0) > 0),
    }
}

/// What one reconcile writes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Objects to apply, in order.
    pub apply: Vec<Desired>,
    /// Children to delete: of retired runs and of nodes that left the spec.
    pub prune: Vec<Child>,
    /// Workload Jobs of this run created from an earlier spec (`Kind/name`): their pod
    /// template is immutable, so the edit cannot reach them. The provisioning Job is not
    /// listed: it ran once, and a rerun would change nothing the workers see.
    pub unapplied: Vec<String>,
}

impl Plan {
    /// Whether the reconcile writes no child.
    pub fn is_empty(&self) -> bool {
        self.apply.is_empty() && self.prune.is_empty()
    }
}

/// The plan: apply what is missing or changed (workers only once `provisioned`, a REALTIME
/// node's objects only once its children's workloads are up); prune every child of this Flow
/// that is not desired.
///
/// Pruning is by label plus controller owner uid (when the Flow has one), never by owner
/// references alone: the garbage collector only deletes children of a deleted owner, not
/// the children of a node that left a living Flow's spec.
pub fn plan(
    desired: &[Desired],
    observed: &Observed,
    provisioned: bool,
    flow_uid: Option<&str>,
) -> Plan {
    let children = observed.children();
    let apply = desired
        .iter()
        .filter(|d| provisioned || d.stage == Stage::Prepare)
        .filter(|d| {
            match children
                .iter()
                .find(|c| c.kind == d.kind && c.name == d.name)
            {
                None => d.after.iter().all(|w| workload_up(observed, w)),
                Some(_) if d.create_only() => false,
                Some(c) => c.applied_hash.as_deref() != Some(d.hash.as_str()),
            }
        })
        .cloned()
        .collect();
    let unapplied = desired
        .iter()
        .filter(|d| d.create_only() && d.stage == Stage::Workers)
        .filter(|d| {
            children.iter().any(|c| {
                c.kind == d.kind
                    && c.name == d.name
                    && c.applied_hash.as_deref() != Some(d.hash.as_str())
            })
        })
        .map(Desired::target)
        .collect();
    let wanted: BTreeSet<(&str, &str)> =
        desired.iter().map(|d| (d.kind, d.name.as_str())).collect();
    let prune = children
        .into_iter()
        .filter(|c| !c.deleting && !wanted.contains(&(c.kind, c.name.as_str())))
        .filter(|c| {
            c.component
                .as_deref()
                .is_none_or(|comp| !NEVER_PRUNED.contains(&comp))
        })
        .filter(|c| match (flow_uid, c.owner_uid.as_deref()) {
            (Some(flow), Some(owner)) => flow == owner,
            (Some(_), None) => false,
            (None, _) => true,
        })
        .collect();
    Plan {
        apply,
        prune,
        unapplied,
    }
}

async fn ssa<K>(client: &Client, ns: &str, d: &Desired) -> Result<K, ReconcileError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.patch(
        &d.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&d.body),
    )
    .await
    .map_err(|e| ReconcileError::kube("apply", d.target(), e))
}

/// Server-side applies one object and returns what the API server made of it.
pub async fn apply_one(client: &Client, ns: &str, d: &Desired) -> Result<Applied, ReconcileError> {
    Ok(match d.kind {
        "ConfigMap" => Applied::ConfigMap(ssa::<ConfigMap>(client, ns, d).await?),
        "Job" => Applied::Job(ssa::<Job>(client, ns, d).await?),
        "Deployment" => Applied::Deployment(ssa::<Deployment>(client, ns, d).await?),
        "StatefulSet" => Applied::StatefulSet(ssa::<StatefulSet>(client, ns, d).await?),
        "Service" => Applied::Service(ssa::<Service>(client, ns, d).await?),
        // KEDA's kind: a 404 here means the KEDA CRDs are not installed.
        "ScaledObject" => Applied::ScaledObject(ssa::<ScaledObject>(client, ns, d).await?),
        _ => Applied::PodDisruptionBudget(ssa::<PodDisruptionBudget>(client, ns, d).await?),
    })
}

async fn delete<K>(client: &Client, ns: &str, c: &Child) -> Result<(), ReconcileError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.delete(&c.name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        // Already gone: what pruning wanted.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ReconcileError::kube(
            "delete",
            format!("{}/{}", c.kind, c.name),
            e,
        )),
    }
}

/// Deletes one child, its dependents in the background (a Job's pods go with it).
pub async fn delete_child(client: &Client, ns: &str, c: &Child) -> Result<(), ReconcileError> {
    match c.kind {
        "ConfigMap" => delete::<ConfigMap>(client, ns, c).await,
        "Job" => delete::<Job>(client, ns, c).await,
        "Deployment" => delete::<Deployment>(client, ns, c).await,
        "StatefulSet" => delete::<StatefulSet>(client, ns, c).await,
        "Service" => delete::<Service>(client, ns, c).await,
        "ScaledObject" => delete::<ScaledObject>(client, ns, c).await,
        _ => delete::<PodDisruptionBudget>(client, ns, c).await,
    }
}

/// Whether applying `d` would drop a replica count the operator's apply owns: `d` is a
/// Deployment whose body has no `spec.replicas` (its node is autoscaled) and `live`, as the
/// API server has it (managed fields included), has `spec.replicas` owned by the operator's
/// apply. Then the live count and the resourceVersion it was read at, for the handover
/// apply's precondition: a count the HPA changed in between fails that apply with 409, and
/// the reconcile is retried.
pub fn replicas_handover(d: &Desired, live: &Deployment) -> Option<(i32, String)> {
    if d.kind != "Deployment" || d.body["spec"].get("replicas").is_some() {
        return None;
    }
    let owned = live
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some("Apply")
        })
        .any(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(serde_json::Value::as_object)
                .is_some_and(|spec| spec.contains_key("f:replicas"))
        });
    let replicas = live.spec.as_ref()?.replicas?;
    let version = live.metadata.resource_version.clone()?;
    owned.then_some((replicas, version))
}

/// Hands an existing Deployment's replica count from the operator's apply to
/// [`REPLICAS_HANDOVER_MANAGER`] when [`replicas_handover`] says the apply of `d` would drop
/// it. The Deployment is read by a LIST of its name: the watch caches keep no managed fields.
async fn hand_over_replicas(client: &Client, ns: &str, d: &Desired) -> Result<(), ReconcileError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let live = api
        .list(&ListParams::default().fields(&format!("metadata.name={}", d.name)))
        .await
        .map_err(|e| ReconcileError::kube("list", d.target(), e))?;
    let Some((replicas, version)) = live.items.first().and_then(|l| replicas_handover(d, l)) else {
        return Ok(());
    };
    tracing::info!(object = %d.target(), replicas, "handing the replica count over to the HPA");
    let body = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": d.name, "resourceVersion": version},
        "spec": {"replicas": replicas},
    });
    api.patch(
        &d.name,
        &PatchParams::apply(REPLICAS_HANDOVER_MANAGER),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| ReconcileError::kube("apply", d.target(), e))?;
    Ok(())
}

/// Runs the plan: applies in order, then prunes; `observed` follows every write.
pub async fn execute(
    client: &Client,
    ns: &str,
    plan: &Plan,
    observed: &mut Observed,
) -> Result<(), ReconcileError> {
    for d in &plan.apply {
        if d.kind == "Deployment"
            && d.body["spec"].get("replicas").is_none()
            && observed.deployment(&d.name).is_some()
        {
            hand_over_replicas(client, ns, d).await?;
        }
        tracing::info!(object = %d.target(), "applying");
        observed.record(apply_one(client, ns, d).await?);
    }
    for c in &plan.prune {
        tracing::info!(object = %format!("{}/{}", c.kind, c.name), "pruning");
        delete_child(client, ns, c).await?;
        observed.forget(c.kind, &c.name);
    }
    Ok(())
}
