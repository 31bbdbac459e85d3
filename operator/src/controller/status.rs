//! Status: a pure function from what was applied and observed to the Flow's status.
//!
//! No client and no clock of its own: the reconciler passes `now`, which is only ever written
//! into a condition's `lastTransitionTime` when that condition flips, so recomputing the
//! status of an unchanged cluster gives an equal value and the reconciler writes nothing.
//! Times shown to users otherwise come from the objects (the provisioning Job's creation, the
//! Jobs' completion), never from the reconcile.
//!
//! Job outcomes are read from the Jobs' `Complete` / `Failed` conditions, never from their
//! `succeeded` / `failed` counters: the Job controller decides when retries are exhausted
//! (backoff limit, pod failure policy), and the counters cannot say so.

use std::time::Duration;

use k8s_openapi::api::batch::v1::JobCondition;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use videoflow_core::errors::ErrorCode;
use videoflow_core::model::{FlowType, NodeKind};

use super::admission::{Problem, problems_message};
use super::error::ApiRefusal;
use super::observe::{Observed, job_condition};
use super::termination::{Observation, observe_pod};
use crate::crd::{Flow, FlowPhase, FlowStatus, NodeStatus, condition_types as ct};
use crate::render::labels::Component;
use crate::render::{Rendered, Workload};

/// How long a pod may stay unschedulable before the Flow is `Stalled` (the cluster
/// autoscaler usually adds a node within a few minutes).
pub const DEFAULT_UNSCHEDULABLE_GRACE: Duration = Duration::from_secs(300);

/// Knobs of the status computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusConfig {
    /// See [`DEFAULT_UNSCHEDULABLE_GRACE`].
    pub unschedulable_grace: Duration,
}

impl Default for StatusConfig {
    fn default() -> Self {
        StatusConfig {
            unschedulable_grace: DEFAULT_UNSCHEDULABLE_GRACE,
        }
    }
}

/// The computed status and what the reconciler should do about time.
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    /// The new status.
    pub status: FlowStatus,
    /// Look again after this long even if nothing changes (a grace period runs out).
    pub recheck_after: Option<Duration>,
}

/// A condition before merging: type, status, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// One of [`crate::crd::condition_types`].
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Cond {
    fn new(type_: &'static str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Cond {
            type_,
            status,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// Merges computed conditions into the previous ones: `lastTransitionTime` moves to `now`
/// only when the status flips (or the condition is new); types not computed this time are
/// kept as they were. Sorted in the design's order, so equal inputs give equal lists.
pub fn merge_conditions(
    previous: &[Condition],
    computed: Vec<Cond>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|p| !computed.iter().any(|c| c.type_ == p.type_))
        .cloned()
        .collect();
    for c in computed {
        let status = if c.status { "True" } else { "False" };
        let last_transition_time = previous
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == status)
            .map_or(Time(now), |p| p.last_transition_time.clone());
        out.push(Condition {
            type_: c.type_.to_owned(),
            status: status.to_owned(),
            reason: c.reason,
            message: c.message,
            last_transition_time,
            observed_generation: generation,
        });
    }
    let rank = |t: &str| {
        ct::ALL
            .iter()
            .position(|a| *a == t)
            .unwrap_or(ct::ALL.len())
    };
    out.sort_by(|a, b| {
        rank(&a.type_)
            .cmp(&rank(&b.type_))
            .then_with(|| a.type_.cmp(&b.type_))
    });
    out
}

/// Whether the run's provisioning Job completed: workers may start.
pub fn provisioned(rendered: &Rendered, observed: &Observed) -> bool {
    rendered
        .provision
        .metadata
        .name
        .as_deref()
        .and_then(|n| observed.job(n))
        .is_some_and(|j| job_condition(j, "Complete").is_some())
}

/// The status of a Flow that failed admission: `Admitted=False` listing every problem and
/// `Ready=False`; the rest is kept, since nothing was applied (what runs is the last
/// admitted spec, and its conditions still describe it).
pub fn rejected_status(flow: &Flow, problems: &[Problem], now: Timestamp) -> FlowStatus {
    let previous = flow.status.clone().unwrap_or_default();
    let generation = flow.metadata.generation;
    let message = problems_message(problems);
    let conditions = merge_conditions(
        &previous.conditions,
        vec![
            Cond::new(ct::ADMITTED, false, "Invalid", message.clone()),
            Cond::new(ct::READY, false, "Invalid", message),
        ],
        generation,
        now,
    );
    FlowStatus {
        observed_generation: generation,
        phase: Some(FlowPhase::Failed),
        conditions,
        ..previous
    }
}

/// The status after the API server refused a write of this reconcile: Degraded and not Ready
/// with the API's reason and message (an Event follows from the transition), and
/// `observedGeneration` left where it was — this generation was not applied.
pub fn refused_status(flow: &Flow, refusal: &ApiRefusal, now: Timestamp) -> FlowStatus {
    let previous = flow.status.clone().unwrap_or_default();
    let message = format!(
        "the API server refused a write ({} {}): {}",
        refusal.code, refusal.reason, refusal.message
    );
    let conditions = merge_conditions(
        &previous.conditions,
        vec![
            Cond::new(ct::DEGRADED, true, "ApplyRefused", message.clone()),
            Cond::new(ct::READY, false, "ApplyRefused", message),
        ],
        previous.observed_generation,
        now,
    );
    FlowStatus {
        conditions,
        ..previous
    }
}

/// `status` for a generation whose edit could not reach the run's Jobs (`unapplied`, their
/// pod templates are immutable): Degraded with the remedy, and `observedGeneration` kept at
/// `applied_generation`, the last one that was applied — the status never claims an edit
/// the cluster does not run.
pub fn with_unapplied_edit(
    mut status: FlowStatus,
    applied_generation: Option<i64>,
    unapplied: &[String],
    now: Timestamp,
) -> FlowStatus {
    if unapplied.is_empty() {
        return status;
    }
    let message = format!(
        "the edit does not reach {}: a BATCH run's Jobs cannot change in place (their pod \
         template is immutable). To run the edited spec, set spec.runId to a new value (a new \
         run with new streams and Jobs); otherwise revert the change of the nodes' image, env, \
         resources, replicas or params.",
        unapplied.join(", ")
    );
    status.conditions = merge_conditions(
        &status.conditions,
        vec![Cond::new(ct::DEGRADED, true, "EditNotApplied", message)],
        applied_generation,
        now,
    );
    status.observed_generation = applied_generation;
    status
}

/// What one node's objects and pods say.
struct NodeView {
    status: NodeStatus,
    /// The workload exists and runs at its desired scale (a Job: exists, not failed).
    up: bool,
    /// A Job workload: its `Complete` condition is true.
    complete: bool,
    /// A Job workload: its `Failed` condition.
    failed: Option<JobCondition>,
    /// An ongoing container problem.
    problem: Option<Observation>,
    /// Why the node is stalled, if it is: reason and message.
    stalled: Option<(String, String)>,
    /// When an unschedulable pod's grace runs out.
    recheck_after: Option<Duration>,
}

fn desired_replicas(workload: &Workload) -> i32 {
    match workload {
        Workload::Deployment(d) => d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        Workload::StatefulSet(s) => s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        Workload::Job(j) => j.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1),
    }
}

/// A pod that has waited to be scheduled, and since when.
fn unschedulable_since(pod: &Pod) -> Option<(Timestamp, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .and_then(|c| {
            c.last_transition_time
                .as_ref()
                .map(|t| (t.0, c.message.clone().unwrap_or_default()))
        })
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// The observation to show: an ongoing one first (pods in name order), else the latest exit.
fn pick(observations: &[Observation]) -> Option<&Observation> {
    observations.iter().find(|o| o.current).or_else(|| {
        observations
            .iter()
            .filter(|o| o.finished_at.is_some())
            .max_by_key(|o| o.finished_at)
            .or_else(|| observations.first())
    })
}

fn node_view(
    rendered: &Rendered,
    node: &crate::render::NodeObjects,
    observed: &Observed,
    previous: Option<&NodeStatus>,
    now: Timestamp,
    config: &StatusConfig,
) -> NodeView {
    let name = node.workload.name();
    let desired = match (&node.workload, observed.deployment(name)) {
        // Under a scaler the HPA owns the count: the rendered Deployment leaves it out, and
        // what the live one says is what is desired now.
        (Workload::Deployment(d), Some(live))
            if d.spec.as_ref().is_some_and(|s| s.replicas.is_none()) =>
        {
            live.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
        }
        _ => desired_replicas(&node.workload),
    };
    let (exists, ready, complete, failed) = match &node.workload {
        Workload::Deployment(_) => {
            let d = observed.deployment(name);
            let ready = d
                .and_then(|d| d.status.as_ref())
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            (d.is_some(), ready, false, None)
        }
        Workload::StatefulSet(_) => {
            let s = observed.stateful_set(name);
            let ready = s
                .and_then(|s| s.status.as_ref())
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            (s.is_some(), ready, false, None)
        }
        Workload::Job(_) => {
            let j = observed.job(name);
            let ready = j
                .and_then(|j| j.status.as_ref())
                .and_then(|s| s.ready)
                .unwrap_or(0);
            let complete = j.is_some_and(|j| job_condition(j, "Complete").is_some());
            let failed = j.and_then(|j| job_condition(j, "Failed")).cloned();
            (j.is_some(), ready, complete, failed)
        }
    };
    let up = match node.workload {
        Workload::Job(_) => exists && failed.is_none(),
        _ => exists && ready >= desired,
    };
    let pods = observed.pods_of(
        &rendered.run_id,
        Component::Worker.as_str(),
        Some(&node.node),
    );
    let observations: Vec<Observation> = pods.iter().flat_map(|p| observe_pod(p)).collect();
    let problem = observations.iter().find(|o| o.current).cloned();
    let last_termination = pick(&observations)
        .map(|o| o.termination.clone())
        .or_else(|| previous.and_then(|p| p.last_termination.clone()));
    let mut stalled = problem
        .as_ref()
        .filter(|o| o.termination.code.as_deref() == Some(ErrorCode::ProgressStalled.code()))
        .map(|o| {
            (
                ErrorCode::ProgressStalled.class_name().to_owned(),
                format!("node '{}': {}", node.node, o.summary()),
            )
        });
    let grace = SignedDuration::try_from(config.unschedulable_grace).unwrap_or(SignedDuration::MAX);
    let mut recheck_after = None;
    for pod in &pods {
        let Some((since, message)) = unschedulable_since(pod) else {
            continue;
        };
        let waited = now.duration_since(since);
        if waited >= grace {
            if stalled.is_none() {
                stalled = Some((
                    "Unschedulable".to_owned(),
                    format!(
                        "node '{}': pod {} has been unschedulable since {since}: {message}",
                        node.node,
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                ));
            }
        } else if let Ok(left) = Duration::try_from(grace - waited) {
            recheck_after = Some(recheck_after.map_or(left, |r: Duration| r.min(left)));
        }
    }
    NodeView {
        status: NodeStatus {
            name: node.node.clone(),
            workload: Some(node.workload_ref()),
            desired,
            ready,
            restarts: pods.iter().map(|p| restarts(p)).sum(),
            scaler: node.scaler.clone(),
            demand: previous.and_then(|p| p.demand.clone()),
            last_termination,
        },
        up,
        complete,
        failed,
        problem,
        stalled,
        recheck_after,
    }
}

/// The provisioning Job's story: `Provisioned` and, when it failed, the `Failed` condition.
fn provisioning(rendered: &Rendered, observed: &Observed) -> (Cond, Option<Cond>, Option<Time>) {
    let name = rendered.provision.metadata.name.clone().unwrap_or_default();
    let job = observed.job(&name);
    let observations: Vec<Observation> = observed
        .pods_of(&rendered.run_id, Component::Provision.as_str(), None)
        .iter()
        .flat_map(|p| observe_pod(p))
        .collect();
    let last = observations
        .iter()
        .filter(|o| o.finished_at.is_some())
        .max_by_key(|o| o.finished_at)
        .or_else(|| observations.first());
    let Some(job) = job else {
        let cond = Cond::new(
            ct::PROVISIONED,
            false,
            "Provisioning",
            format!("creating the provisioning Job {name}"),
        );
        return (cond, None, None);
    };
    if job_condition(job, "Complete").is_some() {
        let cond = Cond::new(
            ct::PROVISIONED,
            true,
            "Provisioned",
            format!(
                "the streams and durables of run {} exist (Job {name})",
                rendered.run_id
            ),
        );
        return (cond, None, None);
    }
    if let Some(failed) = job_condition(job, "Failed") {
        let reason = last.map_or_else(|| "ProvisioningFailed".to_owned(), Observation::reason);
        let message = format!(
            "the provisioning Job {name} failed ({}){}",
            failed.reason.as_deref().unwrap_or("Failed"),
            last.map(|o| format!(": {}", o.summary()))
                .unwrap_or_default()
        );
        let failed_cond = Cond::new(ct::FAILED, true, "ProvisioningFailed", message.clone());
        return (
            Cond::new(ct::PROVISIONED, false, &reason, message),
            Some(failed_cond),
            failed.last_transition_time.clone(),
        );
    }
    let mut message = format!("the provisioning Job {name} is running");
    if let Some(o) = last {
        message.push_str(&format!("; the last attempt failed: {}", o.summary()));
    }
    (
        Cond::new(ct::PROVISIONED, false, "Provisioning", message),
        None,
        None,
    )
}

/// The status of an admitted Flow from its rendered run and what exists.
pub fn compute_status(
    flow: &Flow,
    rendered: &Rendered,
    observed: &Observed,
    now: Timestamp,
    config: &StatusConfig,
) -> Computed {
    let previous = flow.status.clone().unwrap_or_default();
    let generation = flow.metadata.generation;
    let same_run = previous.run_id.as_deref() == Some(rendered.run_id.as_str());
    let views: Vec<NodeView> = rendered
        .nodes
        .iter()
        .map(|n| {
            let prev = same_run
                .then(|| previous.nodes.iter().find(|p| p.name == n.node))
                .flatten();
            node_view(rendered, n, observed, prev, now, config)
        })
        .collect();

    let (provisioned_cond, provision_failed, provision_failed_at) =
        provisioning(rendered, observed);
    let is_provisioned = provisioned_cond.status;

    let node_failed = views.iter().find_map(|v| {
        v.failed.as_ref().map(|f| {
            let mut message = format!(
                "node '{}' ({}) failed: {}",
                v.status.name,
                v.status
                    .workload
                    .as_ref()
                    .map(|w| format!("{} {}", w.kind, w.name))
                    .unwrap_or_default(),
                f.reason.as_deref().unwrap_or("Failed"),
            );
            if let Some(m) = f.message.as_deref().filter(|m| !m.is_empty()) {
                message.push_str(&format!(" ({m})"));
            }
            if let Some(t) = &v.status.last_termination {
                message.push_str(&format!("; last termination: {}", summary(t)));
            }
            (
                Cond::new(ct::FAILED, true, "NodeFailed", message),
                f.last_transition_time.clone(),
            )
        })
    });
    let (failed, failed_at) = match (provision_failed, node_failed) {
        (Some(c), _) => (c, provision_failed_at),
        (None, Some((c, at))) => (c, at),
        (None, None) => (
            Cond::new(ct::FAILED, false, "NoFailure", "no workload has failed"),
            None,
        ),
    };

    let batch = rendered_flow_type(flow) == FlowType::Batch;
    let sources_ended = !batch && is_provisioned && sources_ended(flow, rendered, &views);
    let complete = if sources_ended {
        Cond::new(ct::COMPLETE, false, SOURCES_ENDED, SOURCES_ENDED_MESSAGE)
    } else if !batch {
        Cond::new(
            ct::COMPLETE,
            false,
            "Realtime",
            "a realtime flow runs until it is stopped",
        )
    } else {
        let done = views.iter().filter(|v| v.complete).count();
        if is_provisioned && done == views.len() {
            Cond::new(
                ct::COMPLETE,
                true,
                "Succeeded",
                "every node's Job completed",
            )
        } else {
            Cond::new(
                ct::COMPLETE,
                false,
                "Running",
                format!("{done} of {} node Jobs completed", views.len()),
            )
        }
    };

    let degraded = views
        .iter()
        .find_map(|v| v.problem.as_ref().map(|o| (v, o)))
        .map_or_else(
            || Cond::new(ct::DEGRADED, false, "AllHealthy", "no container is failing"),
            |(v, o)| {
                Cond::new(
                    ct::DEGRADED,
                    true,
                    &o.reason(),
                    format!("node '{}': {}", v.status.name, o.summary()),
                )
            },
        );

    let stalled = views.iter().find_map(|v| v.stalled.clone()).map_or_else(
        || Cond::new(ct::STALLED, false, "NotStalled", "no pod is stuck"),
        |(reason, message)| Cond::new(ct::STALLED, true, &reason, message),
    );

    let up = views.iter().filter(|v| v.up).count();
    let all_up = up == views.len();
    let rollout = format!("{up} of {} nodes are up", views.len());
    let progressing = if failed.status {
        Cond::new(ct::PROGRESSING, false, "Failed", failed.message.clone())
    } else if complete.status {
        Cond::new(ct::PROGRESSING, false, "Finished", complete.message.clone())
    } else if stalled.status {
        Cond::new(ct::PROGRESSING, false, "Stalled", stalled.message.clone())
    } else if sources_ended {
        Cond::new(ct::PROGRESSING, false, SOURCES_ENDED, SOURCES_ENDED_MESSAGE)
    } else if !is_provisioned {
        Cond::new(
            ct::PROGRESSING,
            true,
            "Provisioning",
            provisioned_cond.message.clone(),
        )
    } else if !all_up {
        Cond::new(ct::PROGRESSING, true, "RollingOut", rollout.clone())
    } else {
        Cond::new(ct::PROGRESSING, true, "Running", rollout.clone())
    };

    let not_ready = |c: &Cond| Cond::new(ct::READY, false, &c.reason, c.message.clone());
    let ready = if failed.status {
        not_ready(&failed)
    } else if complete.status {
        Cond::new(ct::READY, true, "Succeeded", complete.message.clone())
    } else if degraded.status {
        not_ready(&degraded)
    } else if stalled.status {
        not_ready(&stalled)
    } else if !is_provisioned {
        not_ready(&provisioned_cond)
    } else if !all_up {
        Cond::new(ct::READY, false, "RollingOut", rollout)
    } else {
        Cond::new(ct::READY, true, "Running", rollout)
    };

    let provision_job = rendered
        .provision
        .metadata
        .name
        .as_deref()
        .and_then(|n| observed.job(n));
    let phase = if failed.status {
        FlowPhase::Failed
    } else if complete.status {
        FlowPhase::Succeeded
    } else if degraded.status || stalled.status {
        FlowPhase::Degraded
    } else if is_provisioned && all_up {
        FlowPhase::Running
    } else if provision_job.is_some() {
        FlowPhase::Provisioning
    } else {
        FlowPhase::Admitted
    };
    let completion_time = if failed.status {
        failed_at
    } else if complete.status {
        rendered
            .nodes
            .iter()
            .filter_map(|n| observed.job(n.workload.name()))
            .filter_map(|j| j.status.as_ref().and_then(|s| s.completion_time.clone()))
            .max_by_key(|t| t.0)
    } else {
        None
    };

    let admitted = Cond::new(
        ct::ADMITTED,
        true,
        "Admitted",
        format!("the spec is valid; run {} is rendered", rendered.run_id),
    );
    let conditions = merge_conditions(
        &previous.conditions,
        vec![
            ready,
            admitted,
            provisioned_cond,
            progressing,
            degraded,
            stalled,
            complete,
            failed,
        ],
        generation,
        now,
    );
    let recheck_after = views.iter().filter_map(|v| v.recheck_after).min();
    Computed {
        status: FlowStatus {
            observed_generation: generation,
            phase: Some(phase),
            run_id: Some(rendered.run_id.clone()),
            start_time: provision_job.and_then(|j| j.metadata.creation_timestamp.clone()),
            completion_time,
            conditions,
            nodes: views.into_iter().map(|v| v.status).collect(),
        },
        recheck_after,
    }
}

/// The reason of `Complete` and `Progressing` once a REALTIME flow's sources all ended.
pub const SOURCES_ENDED: &str = "SourcesEnded";
const SOURCES_ENDED_MESSAGE: &str = "every source of this realtime flow is finite and has ended \
     (its Job completed); the other nodes drain what the sources sent, then hold without \
     restarting until the Flow is deleted";

/// Whether every producer of a REALTIME flow ran as a Job (finite) and that Job completed:
/// nothing new will enter the flow. A live producer (a Deployment) never ends.
fn sources_ended(flow: &Flow, rendered: &Rendered, views: &[NodeView]) -> bool {
    let mut sources = rendered
        .nodes
        .iter()
        .zip(views)
        .filter(|(n, _)| {
            flow.spec
                .nodes
                .iter()
                .any(|d| d.name == n.node && d.kind == NodeKind::Producer)
        })
        .peekable();
    sources.peek().is_some() && sources.all(|(_, v)| v.complete)
}

fn rendered_flow_type(flow: &Flow) -> FlowType {
    flow.spec.flow_type
}

fn summary(t: &crate::crd::TerminationStatus) -> String {
    Observation {
        termination: t.clone(),
        current: false,
        finished_at: None,
    }
    .summary()
}
