//! Container terminations and stuck containers, explained (design §7, protocol §15.4).
//!
//! Pure: a pod's container statuses in, [`TerminationStatus`] records out. The worker writes
//! a JSON record (`{code, message, remedy, disposition, context}`) to its termination log and
//! the kubelet copies it into `state.terminated.message` (or `lastState.terminated.message`
//! once the container restarted), so the user reads the worker's own code and remedy instead
//! of "exit 3". What the kubelet decides on its own — OOMKilled, image pulls, missing Secrets,
//! crash loops — gets a remedy here, since no worker lived to write one.

use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;
use videoflow_core::errors::ErrorCode;
use videoflow_core::redact::redact_text;

use crate::crd::TerminationStatus;

/// Longest termination message kept in the status: a log tail (FallbackToLogsOnError) can be
/// 4 KiB per container, and the status of a wide flow must stay well under etcd's limits.
pub const MESSAGE_MAX: usize = 1024;

/// Waiting reasons that mean the container cannot start until something outside it changes.
const IMAGE_REASONS: [&str; 3] = ["ImagePullBackOff", "ErrImagePull", "InvalidImageName"];
const CONFIG_REASONS: [&str; 2] = ["CreateContainerConfigError", "CreateContainerError"];
/// The kubelet's back-off after repeated exits.
pub const CRASH_LOOP: &str = "CrashLoopBackOff";

/// One explained container problem of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The explanation, as `status.nodes[].lastTermination` shows it.
    pub termination: TerminationStatus,
    /// Whether the problem is ongoing (the container is stuck or not running again yet), as
    /// opposed to a past exit of a container that has since recovered: only ongoing ones make
    /// the Flow `Degraded`.
    pub current: bool,
    /// When the container finished, for picking the most recent observation.
    pub finished_at: Option<Timestamp>,
}

impl Observation {
    /// The condition reason it stands for: the worker's class (`ResourceUnavailable`) when the
    /// worker wrote a code, else the kubelet's reason (`OOMKilled`, `ImagePullBackOff`).
    pub fn reason(&self) -> String {
        self.termination
            .code
            .as_deref()
            .and_then(ErrorCode::from_code)
            .map_or_else(
                || camel(&self.termination.reason),
                |c| c.class_name().to_owned(),
            )
    }

    /// One line for a condition message: pod, exit, code, message and remedy.
    pub fn summary(&self) -> String {
        let t = &self.termination;
        let mut out = format!("pod {}", t.pod);
        if t.exit_code != 0 {
            out.push_str(&format!(" exited {}", t.exit_code));
        }
        out.push_str(&format!(" ({})", t.reason));
        if let Some(code) = &t.code {
            out.push_str(&format!(": {code}"));
        }
        if let Some(message) = &t.message {
            out.push_str(&format!(": {message}"));
        }
        if let Some(remedy) = &t.remedy {
            out.push_str(&format!(" Remedy: {remedy}"));
        }
        out
    }
}

/// Every problem of a pod's containers (init containers first), at most one per container.
pub fn observe_pod(pod: &Pod) -> Vec<Observation> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|cs| observe_container(&name, cs))
        .collect()
}

/// The problem of one container, if it has one.
///
/// Precedence: a container stuck waiting for an image or its configuration (nothing ran); a
/// terminated state with a failure; the previous run's failure (`lastState`), which is
/// current while the container is in CrashLoopBackOff or not ready again.
pub fn observe_container(pod: &str, cs: &ContainerStatus) -> Option<Observation> {
    let state = cs.state.as_ref();
    let waiting = state.and_then(|s| s.waiting.as_ref());
    let waiting_reason = waiting
        .and_then(|w| w.reason.as_deref())
        .unwrap_or_default();
    let waiting_message = waiting.and_then(|w| w.message.clone());
    if IMAGE_REASONS.contains(&waiting_reason) || CONFIG_REASONS.contains(&waiting_reason) {
        let remedy = if IMAGE_REASONS.contains(&waiting_reason) {
            format!(
                "Check that the image of container '{}' exists and the tag is right, and that \
                 the pods' service account (spec.pod.serviceAccountName) has an imagePullSecret \
                 for its registry.",
                cs.name
            )
        } else {
            "Create the Secret or ConfigMap the pod references (spec.broker.urlFrom, \
             spec.payloadStore.urlFrom, node env), or fix the reference."
                .to_owned()
        };
        return Some(Observation {
            termination: TerminationStatus {
                pod: pod.to_owned(),
                exit_code: 0,
                reason: waiting_reason.to_owned(),
                code: None,
                message: waiting_message.map(|m| truncate(&m)),
                remedy: Some(remedy),
                disposition: None,
            },
            current: true,
            finished_at: None,
        });
    }
    if let Some(t) = state.and_then(|s| s.terminated.as_ref())
        && is_failure(t)
    {
        return Some(from_terminated(pod, t, true));
    }
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let crash_loop = waiting_reason == CRASH_LOOP;
    match last {
        Some(t) if is_failure(t) => {
            let current = crash_loop || !cs.ready;
            let mut observation = from_terminated(pod, t, current);
            if crash_loop && observation.termination.code.is_none() {
                observation.termination.reason = CRASH_LOOP.to_owned();
            }
            Some(observation)
        }
        _ if crash_loop => Some(Observation {
            termination: TerminationStatus {
                pod: pod.to_owned(),
                exit_code: 0,
                reason: CRASH_LOOP.to_owned(),
                code: None,
                message: waiting_message.map(|m| truncate(&m)),
                remedy: Some(format!(
                    "The container keeps exiting; `kubectl logs {pod} -c {} --previous` shows why.",
                    cs.name
                )),
                disposition: None,
            },
            current: true,
            finished_at: None,
        }),
        _ => None,
    }
}

/// Exit 0 is a finished worker (Jobs); anything else, or an OOM kill, is a failure.
fn is_failure(t: &ContainerStateTerminated) -> bool {
    t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled")
}

/// A terminated state, explained: the worker's JSON record when there is one, else the
/// kubelet's reason with a remedy by exit code.
fn from_terminated(pod: &str, t: &ContainerStateTerminated, current: bool) -> Observation {
    let reason = t.reason.clone().unwrap_or_else(|| "Error".to_owned());
    let raw = t.message.as_deref().map(str::trim).unwrap_or_default();
    let record = parse_record(raw);
    let (code, message, remedy, disposition) = match record {
        Some(r) => (Some(r.code), r.message, r.remedy, r.disposition),
        None => (None, (!raw.is_empty()).then(|| truncate(raw)), None, None),
    };
    let remedy = remedy.or_else(|| kubelet_remedy(&reason, t.exit_code));
    Observation {
        termination: TerminationStatus {
            pod: pod.to_owned(),
            exit_code: t.exit_code,
            reason,
            code,
            message,
            remedy,
            disposition,
        },
        current,
        finished_at: t.finished_at.as_ref().map(|f| f.0),
    }
}

/// The worker's termination record (§15.4).
struct Record {
    code: String,
    message: Option<String>,
    remedy: Option<String>,
    disposition: Option<String>,
}

/// Parses a termination record; `None` for anything that is not one (a log tail).
fn parse_record(raw: &str) -> Option<Record> {
    if !raw.starts_with('{') {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(raw).ok()?;
    let text = |key: &str| {
        value
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(truncate)
    };
    Some(Record {
        code: text("code")?,
        message: text("message"),
        remedy: text("remedy"),
        disposition: text("disposition"),
    })
}

/// What to do when the kubelet, not the worker, explains the exit.
fn kubelet_remedy(reason: &str, exit_code: i32) -> Option<String> {
    let text = match (reason, exit_code) {
        ("OOMKilled", _) => {
            "The container ran out of memory: raise the node's resources.limits.memory, or \
             lower its working set (batch size, frame size, model)."
        }
        (_, 2) => "The flow or its configuration is wrong: fix it (the message says where).",
        (_, 3) => {
            "The environment is not as required (broker, store, GPU): fix it; the worker \
             retries on restart."
        }
        (_, 4) => "A node failed while messages were flowing: see the message and the logs.",
        (_, 5) => "The node stopped making progress: check its inputs and downstream capacity.",
        (_, 137) => "The container was killed (SIGKILL): check node pressure and liveness probes.",
        _ => "See the container's logs (`kubectl logs --previous`).",
    };
    Some(text.to_owned())
}

/// A CamelCase condition reason from a kubelet reason (already CamelCase, but keep only
/// the characters a condition reason allows).
fn camel(reason: &str) -> String {
    let cleaned: String = reason.chars().filter(char::is_ascii_alphanumeric).collect();
    if cleaned.is_empty() {
        "Error".to_owned()
    } else {
        cleaned
    }
}

/// Redacts secrets (URLs with passwords, `videoflow_core::redact`), then keeps the last
/// [`MESSAGE_MAX`] bytes (a log tail ends with what matters), on a char
/// boundary.
pub fn truncate(text: &str) -> String {
    // A log tail or a reference worker's record may quote a URL with its password.
    let text = &redact_text(text);
    if text.len() <= MESSAGE_MAX {
        return text.to_owned();
    }
    let mut start = text.len() - MESSAGE_MAX;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}
