//! The reconcile pipeline (design §7): admit (pure) → observe (read) → plan (pure) → apply
//! and prune (write) → status (pure) → patch status and publish events (write, only when
//! something changed).
//!
//! The I/O steps are thin; every decision is made by a pure function of [`super::admission`],
//! [`super::apply`], [`super::status`], [`super::events`] or [`super::teardown`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::admission::admit;
use super::apply::{self, FIELD_MANAGER, Stage, desired_objects, plan};
use super::context::Context;
use super::demand::{merge_demand, observes};
use super::error::ReconcileError;
use super::events::{Transition, publish, transitions};
use super::observe::{Observed, may_own_scalers, observe, scaled_objects};
use super::status::{self, compute_status, rejected_status};
use super::teardown::{
    self, FINALIZER, TEARDOWN_COMPONENT, TeardownOutcome, TeardownStep, teardown_job, teardown_step,
};
use crate::crd::{Flow, FlowStatus};
use crate::render::{Object, render};

/// Look again this often even when no watch event arrives: a safety net for missed events;
/// an unchanged Flow costs reads only.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Reconciles one Flow; the entry point the Controller calls.
pub async fn reconcile(flow: Arc<Flow>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = reconcile_flow(&flow, &ctx).await;
    ctx.metrics.reconciled(
        started.elapsed(),
        result.as_ref().err().map(ReconcileError::metric_label),
    );
    if result.is_ok() {
        ctx.forget_failures(&flow);
    }
    result
}

/// The error policy: exponential backoff per Flow (5 s doubling to 5 min), reset by the
/// next successful reconcile.
pub fn error_policy(flow: Arc<Flow>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let failures = ctx.count_failure(&flow);
    let key = format!(
        "{}/{}",
        flow.namespace().unwrap_or_default(),
        flow.name_any()
    );
    let delay = jittered_backoff(failures, &key);
    tracing::warn!(
        flow = %flow.name_any(),
        namespace = flow.namespace().unwrap_or_default(),
        code = error.code().code(),
        error = %error,
        retry_in_s = delay.as_secs(),
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// 5 s × 2^(failures − 1), at most 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_secs(5 * (1u64 << exp)).min(Duration::from_secs(300))
}

/// [`backoff`] spread by up to +20 %, so Flows that failed together (an API outage, a quota
/// hit by many) do not retry together.
pub fn jittered_backoff(failures: u32, flow_key: &str) -> Duration {
    use std::hash::{Hash, Hasher};
    let base = backoff(failures);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (flow_key, failures, Instant::now()).hash(&mut h);
    let permille = h.finish() % 201;
    base + base.mul_f64(permille as f64 / 1000.0)
}

async fn reconcile_flow(flow: &Flow, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = flow
        .metadata
        .name
        .clone()
        .ok_or(ReconcileError::MissingMetadata("metadata.name"))?;
    let ns = flow
        .metadata
        .namespace
        .clone()
        .ok_or(ReconcileError::MissingMetadata("metadata.namespace"))?;
    if flow.metadata.deletion_timestamp.is_some() {
        return cleanup(flow, ctx, &name, &ns).await;
    }
    let now = ctx.now();
    let rendered = match admit(flow, &ctx.render) {
        Ok(rendered) => rendered,
        Err(problems) => {
            // Invalid input: nothing is applied, the user is told, and only a change of the
            // Flow can help, so wait for one.
            let new = rejected_status(flow, &problems, now);
            write_status(ctx, flow, &name, &ns, new).await?;
            return Ok(Action::await_change());
        }
    };
    let mut observed = read_children(ctx, &ns, &name).await?;
    if may_own_scalers(flow) {
        observed.scaled_objects = scaled_objects(&ctx.client, &ns, &name).await?;
    }
    let desired = desired_objects(&rendered)?;
    let provisioned = status::provisioned(&rendered, &observed);
    let uid = flow.uid();
    let plan = plan(&desired, &observed, provisioned, uid.as_deref());
    if !flow.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(ctx, flow, &name, &ns).await?;
    }
    if let Err(e) = apply::execute(&ctx.client, &ns, &plan, &mut observed).await {
        // A refusal the user must act on (quota, webhook, validation, size) reaches the
        // status and an Event; the error still backs the retry off.
        if let Some(refusal) = e.api_refusal() {
            let new = status::refused_status(flow, &refusal, now);
            write_status(ctx, flow, &name, &ns, new).await?;
        }
        return Err(e);
    }
    // The run the Flow moved away from keeps streams and durables outside Kubernetes: its
    // workloads were pruned above, now its teardown Job removes the rest. Done in the
    // reconcile that moves `status.runId`; a failure returns before the status is written,
    // so the next reconcile tries again.
    if let Some(retired) = flow.status.as_ref().and_then(|s| s.run_id.as_deref())
        && retired != rendered.run_id
    {
        let job = teardown::retired_run_teardown_job(&rendered, retired);
        let d = apply::desired(&Object::Job(&job), Stage::Prepare)?;
        apply::apply_one(&ctx.client, &ns, &d).await?;
    }
    let mut computed = compute_status(flow, &rendered, &observed, now, &ctx.status);
    computed.status = status::with_unapplied_edit(
        computed.status,
        flow.status.as_ref().and_then(|s| s.observed_generation),
        &plan.unapplied,
        now,
    );
    if let Some(observer) = &ctx.demand {
        // Autoscaled nodes only, at the observer's own interval (see `demand`); every other
        // node's demand is cleared, so switching autoscaling off leaves no stale figure.
        let demand = observer
            .demand_of(flow, ctx.render.nats_url.as_deref())
            .await;
        merge_demand(&mut computed.status, demand);
        if observes(flow) {
            computed.recheck_after = Some(
                computed
                    .recheck_after
                    .map_or(observer.interval(), |r| r.min(observer.interval())),
            );
        }
    }
    write_status(ctx, flow, &name, &ns, computed.status).await?;
    Ok(Action::requeue(
        computed.recheck_after.unwrap_or(RESYNC).min(RESYNC),
    ))
}

/// The Flow's children: from the Controller's reflector stores when it runs with them and
/// they hold their first lists, else with label-selected LISTs.
async fn read_children(ctx: &Context, ns: &str, name: &str) -> Result<Observed, ReconcileError> {
    if let Some(stores) = ctx.stores()
        && let Some(observed) = stores.observe(ns, name)?
    {
        return Ok(observed);
    }
    observe(&ctx.client, ns, name).await
}

/// Patches the status (server-side apply, the operator's field manager) when it differs from
/// the stored one, then publishes the transitions between them.
async fn write_status(
    ctx: &Context,
    flow: &Flow,
    name: &str,
    ns: &str,
    new: FlowStatus,
) -> Result<(), ReconcileError> {
    ctx.metrics.set_phase(&format!("{ns}/{name}"), new.phase);
    let old = flow.status.clone().unwrap_or_default();
    if old == new {
        return Ok(());
    }
    let api: Api<Flow> = Api::namespaced(ctx.client.clone(), ns);
    let body = serde_json::json!({
        "apiVersion": Flow::api_version(&()),
        "kind": Flow::kind(&()),
        "status": new,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| ReconcileError::kube("patch status", format!("Flow/{name}"), e))?;
    for t in transitions(&old, &new) {
        publish(&ctx.recorder, flow, &t).await;
    }
    Ok(())
}

/// Adds the finalizer with a JSON patch guarded by a test, so a concurrent change of the
/// finalizer list fails the patch (and the reconcile retries) instead of being overwritten.
async fn add_finalizer(
    ctx: &Context,
    flow: &Flow,
    name: &str,
    ns: &str,
) -> Result<(), ReconcileError> {
    let ops = if flow.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        serde_json::json!([{"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}])
    };
    json_patch(ctx, name, ns, ops, "add finalizer").await
}

/// Removes the finalizer at its index, guarded by a test of that index.
async fn remove_finalizer(
    ctx: &Context,
    flow: &Flow,
    name: &str,
    ns: &str,
) -> Result<(), ReconcileError> {
    let Some(i) = flow.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{i}");
    let ops = serde_json::json!([
        {"op": "test", "path": path, "value": FINALIZER},
        {"op": "remove", "path": path},
    ]);
    json_patch(ctx, name, ns, ops, "remove finalizer").await
}

async fn json_patch(
    ctx: &Context,
    name: &str,
    ns: &str,
    ops: serde_json::Value,
    action: &'static str,
) -> Result<(), ReconcileError> {
    let patch = serde_json::from_value(ops).map_err(|source| ReconcileError::Serialize {
        target: format!("Flow/{name} finalizers"),
        source,
    })?;
    let api: Api<Flow> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map(|_| ())
        .map_err(|e| ReconcileError::kube(action, format!("Flow/{name}"), e))
}

/// The Flow is being deleted: stop the run, tear down every run it still has outside
/// Kubernetes, release the Flow.
async fn cleanup(
    flow: &Flow,
    ctx: &Context,
    name: &str,
    ns: &str,
) -> Result<Action, ReconcileError> {
    let key = format!("{ns}/{name}");
    if !flow.finalizers().iter().any(|f| f == FINALIZER) {
        ctx.metrics.set_phase(&key, None);
        return Ok(Action::await_change());
    }
    let status_run = flow.status.as_ref().and_then(|s| s.run_id.clone());
    let rendered = render(flow, &ctx.render);
    // An unrenderable Flow's teardown comes from its run's provisioning Job, whose pod
    // template the caches do not keep: read the children from the API server then.
    let mut observed = match &rendered {
        Ok(_) => read_children(ctx, ns, name).await?,
        Err(_) => observe(&ctx.client, ns, name).await?,
    };
    if may_own_scalers(flow) {
        observed.scaled_objects = scaled_objects(&ctx.client, ns, name).await?;
    }
    // The teardown Jobs this deletion applies: the rendered run's and, when the move away
    // from `status.runId` never finished, that run's too; for an unrenderable Flow, its
    // run's, from the provisioning Job.
    let wanted: Vec<(String, Job)> = match &rendered {
        Ok(r) => {
            let mut jobs = vec![(r.run_id.clone(), teardown_job(r))];
            if let Some(run) = status_run.as_deref().filter(|run| *run != r.run_id) {
                jobs.push((run.to_owned(), teardown::retired_run_teardown_job(r, run)));
            }
            jobs
        }
        Err(e) => {
            let derived = status_run.as_deref().and_then(|run| {
                observed
                    .jobs
                    .iter()
                    .find(|j| teardown::is_provisioning_of(j, run))
                    .and_then(|p| teardown::teardown_job_from_provisioning(p, name, run))
                    .map(|job| (run.to_owned(), job))
            });
            let existing = status_run.as_deref().and_then(|run| {
                let job_name = videoflow_core::naming::run_object_name(name, run, &["teardown"]);
                observed
                    .job(&job_name)
                    .cloned()
                    .map(|job| (run.to_owned(), job))
            });
            match derived.or(existing) {
                Some(found) => vec![found],
                None => {
                    return release(
                        ctx,
                        flow,
                        name,
                        ns,
                        &[],
                        TeardownOutcome::Unrenderable(e.to_string()),
                    )
                    .await;
                }
            }
        }
    };
    let job_name = |j: &Job| j.metadata.name.clone().unwrap_or_default();
    // Stop the run first, so no worker is still publishing while its streams go away. The
    // specs ConfigMap stays (the teardown pod mounts it), so do teardown Jobs, and so does a
    // provisioning Job whose run's teardown Job is derived from it and not applied yet.
    let sources: Vec<String> = if rendered.is_err() {
        wanted
            .iter()
            .filter(|(_, j)| observed.job(&job_name(j)).is_none())
            .flat_map(|(run, _)| {
                observed
                    .jobs
                    .iter()
                    .filter(|p| teardown::is_provisioning_of(p, run))
                    .map(job_name)
            })
            .collect()
    } else {
        Vec::new()
    };
    for c in observed.children() {
        let keep = c.kind == "ConfigMap"
            || c.deleting
            || c.component.as_deref() == Some(TEARDOWN_COMPONENT)
            || (c.kind == "Job" && sources.contains(&c.name));
        if !keep {
            apply::delete_child(&ctx.client, ns, &c).await?;
            observed.forget(c.kind, &c.name);
        }
    }
    // Teardown Jobs of runs the Flow moved away from earlier, still there: waited for, so the
    // garbage collector does not cut them short when the finalizer goes.
    let wanted_names: Vec<String> = wanted.iter().map(|(_, j)| job_name(j)).collect();
    let earlier: Vec<(String, &Job)> = observed
        .jobs
        .iter()
        .filter(|j| teardown::is_teardown(j) && !wanted_names.contains(&job_name(j)))
        .map(|j| (run_label(j), j))
        .collect();
    let mut jobs: Vec<(&str, Option<&Job>)> = wanted
        .iter()
        .map(|(run, j)| (run.as_str(), observed.job(&job_name(j))))
        .collect();
    jobs.extend(earlier.iter().map(|(run, j)| (run.as_str(), Some(*j))));
    let runs: Vec<String> = jobs.iter().map(|(run, _)| (*run).to_owned()).collect();
    let deleting_since = flow.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    match teardown_step(&jobs, deleting_since, ctx.now()) {
        TeardownStep::Start => {
            for (_, job) in wanted
                .iter()
                .filter(|(_, j)| observed.job(&job_name(j)).is_none())
            {
                let d = apply::desired(&Object::Job(job), Stage::Prepare)?;
                apply::apply_one(&ctx.client, ns, &d).await?;
            }
            Ok(Action::requeue(Duration::from_secs(60)))
        }
        TeardownStep::Wait(delay) => Ok(Action::requeue(delay)),
        TeardownStep::Release(outcome) => release(ctx, flow, name, ns, &runs, outcome).await,
    }
}

/// The run a teardown Job tears down, from its label (label values are the raw id when it
/// fits, which every run id the operator renders does).
fn run_label(job: &Job) -> String {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::render::labels::LABEL_RUN))
        .cloned()
        .unwrap_or_default()
}

/// Ends the deletion: an event saying how the teardown of `runs` went, then the finalizer
/// goes.
async fn release(
    ctx: &Context,
    flow: &Flow,
    name: &str,
    ns: &str,
    runs: &[String],
    outcome: TeardownOutcome,
) -> Result<Action, ReconcileError> {
    let runs = if runs.is_empty() {
        flow.status
            .as_ref()
            .and_then(|s| s.run_id.clone())
            .unwrap_or_else(|| "(unknown)".to_owned())
    } else {
        runs.join(", ")
    };
    let leftover = format!(
        "the streams and run-ledger records of run {runs} may remain; remove them with \
         `videoflow-worker teardown` (VF_FLOW_ID={name}, VF_RUN_ID=<run>, the broker and \
         VF_RUNTIME_STORE_URL) once the broker is reachable"
    );
    let t = match outcome {
        TeardownOutcome::Done => Transition {
            warning: false,
            reason: "TornDown".to_owned(),
            note: format!(
                "the streams, durables and run-ledger records of run {runs} were deleted"
            ),
        },
        TeardownOutcome::Failed(why) => Transition {
            warning: true,
            reason: "TeardownFailed".to_owned(),
            note: format!("a teardown Job failed ({why}); {leftover}"),
        },
        TeardownOutcome::TimedOut => Transition {
            warning: true,
            reason: "TeardownTimedOut".to_owned(),
            note: format!(
                "the teardown did not finish within {} s; {leftover}",
                super::teardown::TEARDOWN_MAX_WAIT.as_secs()
            ),
        },
        TeardownOutcome::Unrenderable(why) => Transition {
            warning: true,
            reason: "TeardownSkipped".to_owned(),
            note: format!(
                "the Flow cannot be rendered ({why}) and its run's provisioning Job is gone; \
                 {leftover}"
            ),
        },
    };
    publish(&ctx.recorder, flow, &t).await;
    remove_finalizer(ctx, flow, name, ns).await?;
    if let Some(observer) = &ctx.demand {
        observer.forget(flow).await;
    }
    ctx.metrics.set_phase(&format!("{ns}/{name}"), None);
    Ok(Action::await_change())
}
