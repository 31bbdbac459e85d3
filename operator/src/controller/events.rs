//! Kubernetes Events on transitions only: a condition that flips, a run that starts.
//!
//! Derived purely from the old and new status, so a reconcile that changes nothing emits
//! nothing, and `kubectl describe flow` reads as the Flow's history rather than a heartbeat.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use super::status::SOURCES_ENDED;
use crate::crd::{Flow, FlowStatus, condition_types as ct};

/// Longest event note the API server accepts is 1 kB.
const NOTE_MAX: usize = 1000;

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Warning for what needs attention, Normal otherwise.
    pub warning: bool,
    /// CamelCase reason (`AdmissionFailed`, `Provisioned`, `Degraded`, ...).
    pub reason: String,
    /// The condition's message or the run change.
    pub note: String,
}

fn flipped_to(old: &FlowStatus, new: &FlowStatus, type_: &str, to: &str) -> Option<String> {
    let now = new.condition(type_).filter(|c| c.status == to)?;
    let before = old.condition(type_).map(|c| c.status.as_str());
    (before != Some(to)).then(|| now.message.clone())
}

fn reason_became(old: &FlowStatus, new: &FlowStatus, type_: &str, to: &str) -> Option<String> {
    let now = new.condition(type_).filter(|c| c.reason == to)?;
    let before = old.condition(type_).map(|c| c.reason.as_str());
    (before != Some(to)).then(|| now.message.clone())
}

fn recovered(old: &FlowStatus, new: &FlowStatus, type_: &str) -> Option<String> {
    let was_true = old.condition(type_).is_some_and(|c| c.status == "True");
    let now = new.condition(type_).filter(|c| c.status == "False")?;
    was_true.then(|| now.message.clone())
}

/// The events between two statuses, in a fixed order.
pub fn transitions(old: &FlowStatus, new: &FlowStatus) -> Vec<Transition> {
    let mut out = Vec::new();
    let mut push = |warning: bool, reason: &str, note: Option<String>| {
        if let Some(note) = note {
            out.push(Transition {
                warning,
                reason: reason.to_owned(),
                note,
            });
        }
    };
    push(
        true,
        "AdmissionFailed",
        flipped_to(old, new, ct::ADMITTED, "False"),
    );
    push(
        false,
        "Admitted",
        flipped_to(old, new, ct::ADMITTED, "True"),
    );
    if let Some(run) = &new.run_id
        && old.run_id.as_ref() != Some(run)
    {
        let note = match &old.run_id {
            Some(previous) => format!("run {run} started; run {previous} retired"),
            None => format!("run {run} started"),
        };
        push(false, "RunStarted", Some(note));
    }
    push(
        false,
        "Provisioned",
        flipped_to(old, new, ct::PROVISIONED, "True"),
    );
    let failed_reason = new
        .condition(ct::FAILED)
        .map_or("Failed", |c| c.reason.as_str())
        .to_owned();
    push(
        true,
        &failed_reason,
        flipped_to(old, new, ct::FAILED, "True"),
    );
    push(true, "Degraded", flipped_to(old, new, ct::DEGRADED, "True"));
    push(false, "Recovered", recovered(old, new, ct::DEGRADED));
    push(true, "Stalled", flipped_to(old, new, ct::STALLED, "True"));
    push(false, "Unstalled", recovered(old, new, ct::STALLED));
    push(
        false,
        "Completed",
        flipped_to(old, new, ct::COMPLETE, "True"),
    );
    push(
        false,
        SOURCES_ENDED,
        reason_became(old, new, ct::COMPLETE, SOURCES_ENDED),
    );
    out
}

/// Keeps an event note under the API server's limit, on a char boundary.
fn note(text: &str) -> String {
    if text.len() <= NOTE_MAX {
        return text.to_owned();
    }
    let mut end = NOTE_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Publishes one transition about `flow`. Failures are logged, not returned: an event is a
/// courtesy, and a reconcile must not fail (and retry its writes) because of one.
pub async fn publish(recorder: &Recorder, flow: &Flow, t: &Transition) {
    let event = Event {
        type_: if t.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: t.reason.clone(),
        note: Some(note(&t.note)),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &flow.object_ref(&())).await {
        tracing::warn!(reason = %t.reason, error = %e, "publishing an event failed");
    }
}
