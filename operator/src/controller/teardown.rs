//! Deleting a Flow: the finalizer that tears down what Kubernetes cannot (design §7).
//!
//! Kubernetes children need no finalizer — owner references hand them to the garbage
//! collector. The run's JetStream streams and durables live outside Kubernetes, so the
//! finalizer [`FINALIZER`] holds the Flow until a teardown Job (`videoflow-worker teardown`,
//! the provisioning Job's environment) deleted them. It is added just before the first
//! provisioning Job is applied — the first moment external state can exist — so a Flow that
//! was never admitted is deleted at once.
//!
//! Never forever: a teardown that fails, or does not finish within [`TEARDOWN_MAX_WAIT`] of the
//! deletion, releases the Flow with a Warning event naming what may be left behind.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::observe::job_condition;
use crate::render::Rendered;
use crate::render::labels::{LABEL_COMPONENT, LABEL_RUN, label_value};
use crate::render::pod::WORKER_BINARY;

/// The finalizer: domain-qualified, so no other controller mistakes it for its own.
pub const FINALIZER: &str = "videoflow.io/teardown";

/// The teardown Job's `app.kubernetes.io/component`.
pub const TEARDOWN_COMPONENT: &str = "teardown";

/// Retries of the teardown pod: a broker that is briefly down should not leave streams behind.
pub const TEARDOWN_BACKOFF_LIMIT: i32 = 3;

/// The teardown Job's own deadline, so a hung teardown fails rather than waits.
pub const TEARDOWN_DEADLINE_SECONDS: i64 = 600;

/// How long a deletion may wait for the teardown before the Flow is released anyway.
pub const TEARDOWN_MAX_WAIT: Duration = Duration::from_secs(900);

/// The teardown Job of the rendered run: the provisioning Job with the `teardown` entrypoint.
///
/// Same image, environment (flow, run, broker and store URLs, Secret references included),
/// scheduling and owner reference as provisioning, so it reaches exactly what provisioning
/// created; the teardown deletes by owner metadata, never by name prefix (a prefix can also
/// match the streams of another flow or run).
pub fn teardown_job(rendered: &Rendered) -> Job {
    let mut job = rendered.provision.clone();
    let name =
        videoflow_core::naming::run_object_name(&rendered.flow_id, &rendered.run_id, &["teardown"]);
    job.metadata.name = Some(name);
    let set_component = |labels: &mut Option<std::collections::BTreeMap<String, String>>| {
        if let Some(labels) = labels {
            labels.insert(LABEL_COMPONENT.to_owned(), label_value(TEARDOWN_COMPONENT));
        }
    };
    set_component(&mut job.metadata.labels);
    if let Some(spec) = job.spec.as_mut() {
        spec.backoff_limit = Some(TEARDOWN_BACKOFF_LIMIT);
        spec.active_deadline_seconds = Some(TEARDOWN_DEADLINE_SECONDS);
        spec.pod_failure_policy = Some(crate::render::workloads::pod_failure_policy(
            TEARDOWN_COMPONENT,
        ));
        if let Some(meta) = spec.template.metadata.as_mut() {
            set_component(&mut meta.labels);
        }
        if let Some(pod) = spec.template.spec.as_mut() {
            for c in &mut pod.containers {
                c.name = TEARDOWN_COMPONENT.to_owned();
                c.command = Some(vec![WORKER_BINARY.to_owned(), "teardown".to_owned()]);
            }
        }
    }
    job
}

/// How long a retired run's finished teardown Job (and its pod and log) stays.
pub const RETIRED_TEARDOWN_TTL_SECONDS: i32 = 60;

/// The teardown Job of `retired_run`, a run the Flow moved away from (a topology change or a
/// new `spec.runId`): the current run's teardown Job with the retired run's id, so the
/// retired run's streams and durables go — selected by their owner labels (flow, run) — while
/// the new run's stay. Never pruned (its component); removed by the TTL controller
/// [`RETIRED_TEARDOWN_TTL_SECONDS`] after it finished, else collected with the Flow.
pub fn retired_run_teardown_job(rendered: &Rendered, retired_run: &str) -> Job {
    let mut job = teardown_job(rendered);
    job.metadata.name = Some(videoflow_core::naming::run_object_name(
        &rendered.flow_id,
        retired_run,
        &["teardown"],
    ));
    let relabel = |labels: &mut Option<std::collections::BTreeMap<String, String>>| {
        if let Some(labels) = labels {
            labels.insert(LABEL_RUN.to_owned(), label_value(retired_run));
        }
    };
    relabel(&mut job.metadata.labels);
    if let Some(spec) = job.spec.as_mut() {
        // Nothing of the retired run stays once its streams are gone: the Job and its pod
        // follow shortly after it finished (its outcome stays in the Events and the log
        // for a minute).
        spec.ttl_seconds_after_finished = Some(RETIRED_TEARDOWN_TTL_SECONDS);
        if let Some(meta) = spec.template.metadata.as_mut() {
            relabel(&mut meta.labels);
        }
        if let Some(pod) = spec.template.spec.as_mut() {
            for c in &mut pod.containers {
                for var in c.env.iter_mut().flatten() {
                    if var.name == "VF_RUN_ID" {
                        var.value = Some(retired_run.to_owned());
                        var.value_from = None;
                    }
                }
            }
        }
    }
    job
}

/// What the finalizer does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeardownStep {
    /// Apply the teardown Job.
    Start,
    /// It runs; look again when it changes (or after the returned delay at the latest).
    Wait(Duration),
    /// Remove the finalizer.
    Release(TeardownOutcome),
}

/// How a teardown ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeardownOutcome {
    /// The streams are gone.
    Done,
    /// The Job failed; the message says why (its condition's reason and message).
    Failed(String),
    /// The deletion waited [`TEARDOWN_MAX_WAIT`] without the Job finishing.
    TimedOut,
    /// The Flow cannot be rendered any more (its spec became invalid), so there is no
    /// environment to run a teardown with.
    Unrenderable(String),
}

/// The next step, from the teardown Job's conditions and how long the deletion has waited.
pub fn teardown_step(
    job: Option<&Job>,
    deleting_since: Option<Timestamp>,
    now: Timestamp,
) -> TeardownStep {
    if let Some(job) = job {
        if job_condition(job, "Complete").is_some() {
            return TeardownStep::Release(TeardownOutcome::Done);
        }
        if let Some(c) = job_condition(job, "Failed") {
            return TeardownStep::Release(TeardownOutcome::Failed(format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or("Failed"),
                c.message.as_deref().unwrap_or_default()
            )));
        }
    }
    let max = SignedDuration::try_from(TEARDOWN_MAX_WAIT).unwrap_or(SignedDuration::MAX);
    let waited = deleting_since.map_or(SignedDuration::ZERO, |since| now.duration_since(since));
    if waited >= max {
        return TeardownStep::Release(TeardownOutcome::TimedOut);
    }
    if job.is_none() {
        return TeardownStep::Start;
    }
    let left = Duration::try_from(max - waited).unwrap_or(TEARDOWN_MAX_WAIT);
    TeardownStep::Wait(left.min(Duration::from_secs(60)))
}
