//! Deleting a Flow: the finalizer that tears down what Kubernetes cannot (design §7).
//!
//! Kubernetes children need no finalizer — owner references hand them to the garbage
//! collector. The run's JetStream streams and durables, and its records in the run ledger,
//! live outside Kubernetes, so the finalizer [`FINALIZER`] holds the Flow until a teardown Job
//! (`videoflow-worker teardown`, the provisioning Job's environment) deleted them. It is added
//! just before the first provisioning Job is applied — the first moment external state can
//! exist — so a Flow that was never admitted is deleted at once.
//!
//! Every run gets its teardown: the run being deleted, a run the Flow moved away from whose
//! teardown Job still runs (the deletion waits for it instead of letting the garbage collector
//! kill it), and the run in `status.runId` when the move to the rendered run never finished.
//! A Flow edited into something invalid still has its running run's provisioning Job, which
//! holds the whole environment a teardown needs ([`teardown_job_from_provisioning`]).
//!
//! Never forever: a teardown that fails, or does not finish within [`TEARDOWN_MAX_WAIT`] of the
//! deletion, releases the Flow with a Warning event naming what may be left behind.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::observe::job_condition;
use crate::render::Rendered;
use crate::render::labels::{Component, LABEL_COMPONENT, LABEL_RUN, label_value};
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
    teardown_of(&rendered.provision, &rendered.flow_id, &rendered.run_id)
}

/// The labels the API server adds to a Job and its pod template, which an apply of another
/// Job must not carry (they name the Job that was created).
const JOB_CONTROLLER_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// The teardown Job of run `run_id`, derived from that run's provisioning Job as the API
/// server holds it — for a Flow that can no longer be rendered (edited invalid), whose
/// running run still needs its teardown. Only what the operator rendered is kept: name,
/// labels and owner references of the Job, its pod template without the labels the Job
/// controller added; `None` when the Job has no pod template (a trimmed cache copy).
pub fn teardown_job_from_provisioning(provision: &Job, flow_id: &str, run_id: &str) -> Option<Job> {
    let template = provision.spec.as_ref()?.template.clone();
    template.spec.as_ref()?;
    let clean = |labels: &Option<BTreeMap<String, String>>| {
        labels.as_ref().map(|l| {
            l.iter()
                .filter(|(k, _)| !JOB_CONTROLLER_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<BTreeMap<_, _>>()
        })
    };
    let mut template = template;
    if let Some(meta) = template.metadata.as_mut() {
        meta.labels = clean(&meta.labels);
    }
    let source = Job {
        metadata: ObjectMeta {
            name: provision.metadata.name.clone(),
            namespace: provision.metadata.namespace.clone(),
            labels: clean(&provision.metadata.labels),
            owner_references: provision.metadata.owner_references.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            template,
            ..JobSpec::default()
        }),
        status: None,
    };
    Some(teardown_of(&source, flow_id, run_id))
}

/// `provision` (the operator's rendering of a provisioning Job) with the teardown entrypoint,
/// name, component label and limits.
fn teardown_of(provision: &Job, flow_id: &str, run_id: &str) -> Job {
    let mut job = provision.clone();
    let name = videoflow_core::naming::run_object_name(flow_id, run_id, &["teardown"]);
    job.metadata.name = Some(name);
    let set_component = |labels: &mut Option<BTreeMap<String, String>>| {
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

/// Whether `job` is a provisioning Job of run `run` (by its labels).
pub fn is_provisioning_of(job: &Job, run: &str) -> bool {
    let labels = job.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    get(LABEL_COMPONENT) == Some(Component::Provision.as_str())
        && get(LABEL_RUN) == Some(label_value(run).as_str())
}

/// Whether `job` is a teardown Job (of any run).
pub fn is_teardown(job: &Job) -> bool {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_COMPONENT))
        .map(String::as_str)
        == Some(TEARDOWN_COMPONENT)
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
    let relabel = |labels: &mut Option<BTreeMap<String, String>>| {
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
    /// Apply the teardown Jobs that do not exist yet.
    Start,
    /// They run; look again when one changes (or after the returned delay at the latest).
    Wait(Duration),
    /// Remove the finalizer.
    Release(TeardownOutcome),
}

/// How a teardown ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeardownOutcome {
    /// The streams are gone.
    Done,
    /// A Job failed; the message says which and why (its condition's reason and message).
    Failed(String),
    /// The deletion waited [`TEARDOWN_MAX_WAIT`] without every Job finishing.
    TimedOut,
    /// The Flow cannot be rendered any more (its spec became invalid) and its run's
    /// provisioning Job is gone, so there is no environment to run a teardown with.
    Unrenderable(String),
}

/// The next step, from the conditions of the teardown Jobs the deletion waits for — one per
/// run, `(run, the Job if it exists)` — and how long the deletion has waited. Release once
/// every one finished (Done, or Failed naming the failed ones); never wait past the maximum.
pub fn teardown_step(
    jobs: &[(&str, Option<&Job>)],
    deleting_since: Option<Timestamp>,
    now: Timestamp,
) -> TeardownStep {
    let mut failed = Vec::new();
    let mut finished = !jobs.is_empty();
    for (run, job) in jobs {
        match job {
            Some(j) if job_condition(j, "Complete").is_some() => {}
            Some(j) => match job_condition(j, "Failed") {
                Some(c) => failed.push(format!(
                    "run {run}: {}: {}",
                    c.reason.as_deref().unwrap_or("Failed"),
                    c.message.as_deref().unwrap_or_default()
                )),
                None => finished = false,
            },
            None => finished = false,
        }
    }
    if finished {
        return TeardownStep::Release(if failed.is_empty() {
            TeardownOutcome::Done
        } else {
            TeardownOutcome::Failed(failed.join("; "))
        });
    }
    let max = SignedDuration::try_from(TEARDOWN_MAX_WAIT).unwrap_or(SignedDuration::MAX);
    let waited = deleting_since.map_or(SignedDuration::ZERO, |since| now.duration_since(since));
    if waited >= max {
        return TeardownStep::Release(TeardownOutcome::TimedOut);
    }
    if jobs.iter().any(|(_, j)| j.is_none()) {
        return TeardownStep::Start;
    }
    let left = Duration::try_from(max - waited).unwrap_or(TEARDOWN_MAX_WAIT);
    TeardownStep::Wait(left.min(Duration::from_secs(60)))
}
