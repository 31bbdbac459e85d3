//! Why a Flow cannot be rendered, with the stable code and remedy the reconciler reports.
//!
//! Every variant is something the Flow's author (or the operator's configuration) fixes, so the
//! reconciler turns it into `Admitted=False` with [`RenderError::code`] as the reason and
//! [`RenderError::remedy`] in the message; nothing is applied when rendering fails.

use videoflow_core::errors::ErrorCode;
use videoflow_core::validate::Diagnostic;

/// A Flow that cannot become Kubernetes objects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The resource has no `metadata.name`: every object name and the flow id derive from it.
    #[error("the Flow has no metadata.name")]
    MissingName,
    /// Graph or policy validation failed; every diagnostic is kept so the user sees all at once.
    #[error("the Flow is invalid ({} problem(s)):\n{}", .0.len(), render_diagnostics(.0))]
    Invalid(Vec<Diagnostic>),
    /// Neither `spec.broker` nor the operator's configuration names a NATS server.
    #[error(
        "the Flow names no broker (spec.broker.url or spec.broker.urlFrom) and the operator has \
         no default NATS URL"
    )]
    NoBroker,
    /// A payload or run store declared without a URL. `videoflow-worker run` starts a private
    /// redis-server for `payloadStore: {}`; a cluster has nothing to start, and workers
    /// without the URL would fail only once a payload is over the inline limit.
    #[error("{path} names no URL ({path}.url or {path}.urlFrom)")]
    NoStoreUrl {
        /// `spec.payloadStore` or `spec.runtimeStore`.
        path: &'static str,
    },
    /// An exec or python component without an image: on a cluster the user's program must
    /// come from somewhere, and the worker image does not ship it.
    #[error("{path}: node '{node}' runs a {component} component but names no image")]
    MissingComponentImage {
        /// The node.
        node: String,
        /// `exec` or `python`.
        component: &'static str,
        /// Where the image belongs, e.g. `spec.nodes[2].component.exec.image`.
        path: String,
    },
    /// A Kubernetes-typed field (kept as free JSON in the Flow) does not parse or is not allowed.
    #[error("{path}: {message}")]
    InvalidField {
        /// Where, in the resource's camelCase spelling.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Two objects of one kind would get the same name after DNS-1123 encoding and
    /// truncation, so one would silently overwrite the other.
    #[error("{first} and {second} both render a {kind} named '{name}'")]
    NameCollision {
        /// The object kind.
        kind: &'static str,
        /// The shared name.
        name: String,
        /// Who renders it first (`node 'a'`, `the run's Job`).
        first: String,
        /// Who renders it again.
        second: String,
    },
    /// A name the API server would accept but a controller cannot use (StatefulSet pods carry
    /// a `controller-revision-hash` label of `<name>-<10 chars>`, at most 63).
    #[error("{kind} name '{name}' is {len} characters; at most {max} are allowed")]
    NameTooLong {
        /// The object kind.
        kind: &'static str,
        /// The rendered name.
        name: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Serializing the rendered objects failed (not expected for typed objects).
    #[error("serializing the rendered objects: {0}")]
    Serialize(String),
}

impl RenderError {
    /// The taxonomy class (ERR-*): what a condition reason and a metric label key on.
    pub fn code(&self) -> ErrorCode {
        match self {
            RenderError::Invalid(_) => ErrorCode::Graph,
            RenderError::NameCollision { .. } | RenderError::NameTooLong { .. } => {
                ErrorCode::IdentityCollision
            }
            RenderError::Serialize(_) => ErrorCode::Unknown,
            RenderError::MissingName
            | RenderError::NoBroker
            | RenderError::NoStoreUrl { .. }
            | RenderError::MissingComponentImage { .. }
            | RenderError::InvalidField { .. } => ErrorCode::Config,
        }
    }

    /// What to do about it, in one sentence.
    pub fn remedy(&self) -> String {
        match self {
            RenderError::MissingName => "Give the Flow a metadata.name.".into(),
            RenderError::Invalid(_) => {
                "Fix each problem listed; `videoflow-worker validate <flow.yaml>` checks a file \
                 offline."
                    .into()
            }
            RenderError::NoBroker => {
                "Set spec.broker.url (nats://host:4222), or spec.broker.urlFrom.secretKeyRef when \
                 the URL carries credentials, or give the operator a default NATS URL \
                 (--nats-url)."
                    .into()
            }
            RenderError::NoStoreUrl { path } => format!(
                "Set {path}.url (redis://host:6379/0), or {path}.urlFrom.secretKeyRef when the \
                 URL carries credentials: on a cluster nothing starts a Redis for the Flow \
                 (only `videoflow-worker run` does, locally)."
            ),
            RenderError::MissingComponentImage { path, .. } => format!(
                "Set {path} to an image that contains the program (exec) or videoflow and the \
                 node class (python)."
            ),
            RenderError::InvalidField { path, .. } => {
                format!("Fix {path}; it must be a valid Kubernetes object of its kind.")
            }
            RenderError::NameCollision { .. } | RenderError::NameTooLong { .. } => {
                "Shorten or rename the node (or the Flow, or spec.runId) so each object name is \
                 distinct and short enough."
                    .into()
            }
            RenderError::Serialize(_) => "Report this as a bug.".into(),
        }
    }
}

fn render_diagnostics(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
