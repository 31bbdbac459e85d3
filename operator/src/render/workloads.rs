//! One workload per node by the workload-kind rules (design §7), plus the headless Service of
//! a StatefulSet and the PodDisruptionBudget of a multi-replica long-running node.
//!
//! - BATCH: every node is a Job (each worker exits 0 once its upstream drained; a Deployment
//!   would restart the finished pod into CrashLoopBackOff);
//! - REALTIME finite producer: a Job;
//! - REALTIME partitioned (`partitionBy` with replicas > 1): a StatefulSet, whose pod ordinal
//!   is the replica id that owns a partition (ENV-5 step 2);
//! - otherwise a Deployment: competing replicas need no identity.
//!
//! A Deployment's or StatefulSet's worker gets `VF_ON_FINISH=hold`: it restarts every exit,
//! so a worker that drained to a clean end stays up until the Flow is deleted
//! ([`hold_after_finish`]).
//!
//! The Job predicate is core's [`renders_as_job`], shared with the autoscaling admission, so
//! a node never gets a scaler for a workload that cannot scale.

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment, StatefulSet,
    StatefulSetSpec,
};
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use videoflow_core::compile::NodeSpec;
use videoflow_core::env::KUBERNETES_HEALTH_PORT;
use videoflow_core::errors::EXIT_USER;
use videoflow_core::model::FlowType;
use videoflow_core::scaling::renders_as_job;

use super::autoscaling::{NodeScaler, ScaledObject, node_scaler};
use super::context::Ctx;
use super::error::RenderError;
use super::labels::Component;
use super::pod::{HEALTH_PORT_NAME, WORKER_CONTAINER, hold_after_finish, worker_pod_spec};
use crate::crd::{ScalerStatus, WorkloadRef};

/// Retries of a node's Job before it fails: the supervisor contract of ABORT-6 (3 restarts,
/// with the Job controller's 10 s, 20 s, 40 s backoff).
pub const NODE_BACKOFF_LIMIT: i32 = 3;

/// Which Kubernetes workload runs a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// Long-running, competing replicas.
    Deployment,
    /// Long-running, partitioned replicas with stable ordinals.
    StatefulSet,
    /// Runs to completion.
    Job,
}

impl WorkloadKind {
    /// The rule of design §7 for a compiled node in a flow of `flow_type`.
    pub fn of(spec: &NodeSpec, flow_type: FlowType) -> Self {
        if renders_as_job(&spec.kind, spec.is_finite, flow_type) {
            WorkloadKind::Job
        } else if spec.is_partitioned() {
            WorkloadKind::StatefulSet
        } else {
            WorkloadKind::Deployment
        }
    }

    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Job => "Job",
        }
    }
}

/// A node's workload object.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// See [`WorkloadKind::Deployment`].
    Deployment(Deployment),
    /// See [`WorkloadKind::StatefulSet`].
    StatefulSet(StatefulSet),
    /// See [`WorkloadKind::Job`].
    Job(Job),
}

impl Workload {
    /// Which kind it is.
    pub fn kind(&self) -> WorkloadKind {
        match self {
            Workload::Deployment(_) => WorkloadKind::Deployment,
            Workload::StatefulSet(_) => WorkloadKind::StatefulSet,
            Workload::Job(_) => WorkloadKind::Job,
        }
    }

    /// Its metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Workload::Deployment(o) => &o.metadata,
            Workload::StatefulSet(o) => &o.metadata,
            Workload::Job(o) => &o.metadata,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }
}

/// Everything rendered for one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeObjects {
    /// The node's name in `spec.nodes`.
    pub node: String,
    /// Its workload.
    pub workload: Workload,
    /// The headless Service that gives a StatefulSet's pods stable network identities.
    pub service: Option<Service>,
    /// Keeps all but one replica up through voluntary disruptions (drains, upgrades).
    pub pdb: Option<PodDisruptionBudget>,
    /// The KEDA ScaledObject of an eligible node with autoscaling requested
    /// ([`super::autoscaling`]).
    pub scaled_object: Option<ScaledObject>,
    /// `status.nodes[].scaler`: rendered or not, and why; `None` when autoscaling was not
    /// requested for the node.
    pub scaler: Option<ScalerStatus>,
    /// The workloads that must be up before this node's workload is created
    /// ([`start_order`]); empty in a BATCH flow.
    pub start_after: Vec<WorkloadRef>,
}

impl NodeObjects {
    /// The status entry's `workload` reference, so `kubectl` users can jump to it.
    pub fn workload_ref(&self) -> WorkloadRef {
        WorkloadRef {
            kind: self.workload.kind().as_str().to_owned(),
            name: self.workload.name().to_owned(),
        }
    }
}

/// The start order of a REALTIME run: each node's workload after the workloads of its
/// children, so every node is up before anything reaches it — the local runner's order.
///
/// Why: a REALTIME stream keeps only its newest message (STREAM-2) and a live publisher never
/// waits (DELIV-4), so whatever a node publishes before its consumers pull is replaced by
/// what comes next; a finite source that starts first loses everything but its end-of-stream.
/// BATCH streams keep every message for durables that exist from provisioning on: no order.
pub(crate) fn start_order(flow_type: FlowType, specs: &[NodeSpec], nodes: &mut [NodeObjects]) {
    if flow_type != FlowType::Realtime {
        return;
    }
    let refs: Vec<(String, WorkloadRef)> = nodes
        .iter()
        .map(|n| (n.node.clone(), n.workload_ref()))
        .collect();
    for node in nodes.iter_mut() {
        node.start_after = specs
            .iter()
            .filter(|s| s.parents.contains(&node.node))
            .filter_map(|child| {
                refs.iter()
                    .find(|(name, _)| *name == child.name)
                    .map(|(_, r)| r.clone())
            })
            .collect();
    }
}

/// A Job's failure policy: a user error (exit 2: the flow or its configuration is wrong)
/// fails identically on every retry, so it fails the Job at once; pods lost to preemption,
/// eviction or drains do not count against the backoff limit.
pub(crate) fn pod_failure_policy(container: &str) -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![
            PodFailurePolicyRule {
                action: "FailJob".to_owned(),
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: Some(container.to_owned()),
                    operator: "In".to_owned(),
                    values: vec![EXIT_USER],
                }),
                on_pod_conditions: None,
            },
            PodFailurePolicyRule {
                action: "Ignore".to_owned(),
                on_exit_codes: None,
                on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                    type_: "DisruptionTarget".to_owned(),
                    status: "True".to_owned(),
                }]),
            },
        ],
    }
}

/// The objects of one node.
pub(crate) fn node_objects(ctx: &Ctx, spec: &NodeSpec) -> Result<NodeObjects, RenderError> {
    let kind = WorkloadKind::of(spec, ctx.compiled.flow_type);
    let replicas = i32::try_from(spec.nb_tasks).unwrap_or(i32::MAX);
    let name = ctx.run.name(&[&spec.name]);
    let meta = ctx
        .run
        .meta(name.clone(), Component::Worker, Some(&spec.name));
    let indexed = kind == WorkloadKind::Job && replicas > 1;
    let long_running = kind != WorkloadKind::Job;
    let mut pod = worker_pod_spec(ctx, spec, indexed)?;
    pod.restart_policy = Some(if long_running { "Always" } else { "Never" }.into());
    if long_running {
        hold_after_finish(&mut pod);
    }
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            annotations: ctx.pod.pod_annotations(),
            ..ctx.run.template_meta(Component::Worker, Some(&spec.name))
        }),
        spec: Some(pod),
    };
    let selector = ctx.run.selector(&spec.name);
    let NodeScaler {
        object: scaled_object,
        status: scaler,
    } = node_scaler(ctx, spec, &name)?;
    // Under a scaler the HPA owns the replica count: a rendered count would be forced back
    // on every re-apply (server-side apply with force), fighting the autoscaler.
    let scaled_max = scaled_object
        .as_ref()
        .and_then(|o| o.spec.max_replica_count);
    let workload = match kind {
        WorkloadKind::Job => Workload::Job(Job {
            metadata: meta,
            spec: Some(JobSpec {
                backoff_limit: Some(NODE_BACKOFF_LIMIT),
                // One completion per replica; the index is the stable replica id, and a
                // failed index is retried as the same replica.
                completion_mode: indexed.then(|| "Indexed".to_owned()),
                completions: Some(replicas),
                parallelism: Some(replicas),
                pod_failure_policy: Some(pod_failure_policy(WORKER_CONTAINER)),
                template,
                ..JobSpec::default()
            }),
            ..Job::default()
        }),
        WorkloadKind::StatefulSet => Workload::StatefulSet(StatefulSet {
            metadata: meta,
            spec: Some(StatefulSetSpec {
                // Replicas own disjoint partitions; none waits for another to start.
                pod_management_policy: Some("Parallel".to_owned()),
                replicas: Some(replicas),
                selector,
                service_name: Some(name.clone()),
                template,
                ..StatefulSetSpec::default()
            }),
            ..StatefulSet::default()
        }),
        WorkloadKind::Deployment => Workload::Deployment(Deployment {
            metadata: meta,
            spec: Some(DeploymentSpec {
                replicas: scaled_max.is_none().then_some(replicas),
                selector,
                strategy: (spec.device_type == "gpu").then(gpu_rollout),
                template,
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }),
    };
    Ok(NodeObjects {
        node: spec.name.clone(),
        service: (kind == WorkloadKind::StatefulSet).then(|| headless_service(ctx, spec, &name)),
        pdb: (long_running && replicas.max(scaled_max.unwrap_or(0)) > 1)
            .then(|| disruption_budget(ctx, spec, &name)),
        workload,
        scaled_object,
        scaler,
        start_after: Vec::new(),
    })
}

/// A GPU Deployment replaces pods one at a time *without* a surge pod: the default 25 % surge
/// needs a spare GPU, and with one replica (maxUnavailable rounding to 0) the rollout would
/// wait for it forever.
fn gpu_rollout() -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(0)),
            max_unavailable: Some(IntOrString::Int(1)),
        }),
    }
}

/// The StatefulSet's governing Service; it shares the workload's name (a different kind).
fn headless_service(ctx: &Ctx, spec: &NodeSpec, name: &str) -> Service {
    Service {
        metadata: ctx
            .run
            .meta(name.to_owned(), Component::Worker, Some(&spec.name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: ctx.run.selector(&spec.name).match_labels,
            ports: Some(vec![ServicePort {
                name: Some(HEALTH_PORT_NAME.to_owned()),
                port: i32::from(KUBERNETES_HEALTH_PORT),
                target_port: Some(IntOrString::String(HEALTH_PORT_NAME.to_owned())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// At most one replica down by voluntary disruption; crash-looping pods may always be evicted
/// so a broken node never blocks a cluster drain.
fn disruption_budget(ctx: &Ctx, spec: &NodeSpec, name: &str) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ctx
            .run
            .meta(name.to_owned(), Component::Worker, Some(&spec.name)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(ctx.run.selector(&spec.name)),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
