//! Why a reconcile failed, with a stable code for logs and a variant label for metrics.
//!
//! Only I/O fails a reconcile: an invalid Flow is not an error here but an outcome
//! (`Admitted=False`, await the next change), so everything below is transient from the
//! controller's point of view and is retried with backoff by the error policy.

use videoflow_core::errors::ErrorCode;
use videoflow_core::redact::redact_text;

/// A write the API server refused for good ([`ReconcileError::api_refusal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRefusal {
    /// The HTTP status, e.g. 403 for an exceeded quota or a webhook's denial.
    pub code: u16,
    /// The API's reason (`Forbidden`, `Invalid`, `RequestEntityTooLarge`, ...).
    pub reason: String,
    /// What was refused and the API's message, e.g. `apply Deployment/vf-x: exceeded quota`.
    pub message: String,
}

/// A failed reconcile; the controller requeues the Flow with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API call failed (network, conflict, admission webhook, RBAC).
    #[error("{action} {target}: {source}")]
    Kube {
        /// What the reconciler was doing (`apply`, `list`, `delete`, `patch status`, ...).
        action: &'static str,
        /// The object or collection, e.g. `Job/vf-demo-abc-provision`.
        target: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A rendered object could not be turned into an apply body (not expected for typed
    /// objects; kept so that it is reported instead of panicking).
    #[error("serializing {target}: {source}")]
    Serialize {
        /// The object.
        target: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The Flow came from the API server without a name or namespace.
    #[error("the Flow has no {0}")]
    MissingMetadata(&'static str),
    /// The watch behind a reflector store ended (the controller is stopping).
    #[error("the {0} cache stopped: the controller is shutting down")]
    CacheStopped(&'static str),
}

impl ReconcileError {
    /// Builds [`ReconcileError::Kube`].
    pub fn kube(action: &'static str, target: impl Into<String>, source: kube::Error) -> Self {
        ReconcileError::Kube {
            action,
            target: target.into(),
            source: Box::new(source),
        }
    }

    /// The API server's definite refusal of a write — a quota, an admission webhook's denial,
    /// a validation error, an object over the size limit — which only a change of the Flow
    /// (or of the cluster) can fix, and which the user must therefore see. `None` for what a
    /// retry may cure: network errors, conflicts (409), throttling (429), server errors (5xx).
    pub fn api_refusal(&self) -> Option<ApiRefusal> {
        let ReconcileError::Kube {
            action,
            target,
            source,
        } = self
        else {
            return None;
        };
        let kube::Error::Api(status) = source.as_ref() else {
            return None;
        };
        let retryable =
            matches!(status.code, 404 | 409 | 429) || !(400..500).contains(&status.code);
        (!retryable).then(|| ApiRefusal {
            code: status.code,
            reason: if status.reason.is_empty() {
                format!("HTTP{}", status.code)
            } else {
                status.reason.clone()
            },
            message: redact_text(&format!("{action} {target}: {}", status.message)),
        })
    }

    /// The protocol's class (ERR-*), the `code` field of the reconcile's error log line.
    pub fn code(&self) -> ErrorCode {
        match self {
            ReconcileError::Kube { .. } => ErrorCode::Cluster,
            ReconcileError::Serialize { .. } => ErrorCode::Unknown,
            ReconcileError::MissingMetadata(_) => ErrorCode::Config,
            ReconcileError::CacheStopped(_) => ErrorCode::Cluster,
        }
    }

    /// The `error` label of `videoflow_operator_reconcile_errors_total`: one value per variant
    /// (and per action for API errors), a bounded set.
    pub fn metric_label(&self) -> String {
        match self {
            ReconcileError::Kube { action, .. } => format!("kube_{}", action.replace(' ', "_")),
            ReconcileError::Serialize { .. } => "serialize".to_owned(),
            ReconcileError::MissingMetadata(_) => "missing_metadata".to_owned(),
            ReconcileError::CacheStopped(_) => "cache_stopped".to_owned(),
        }
    }
}
