//! The broker layer's failures, each carrying the protocol's stable code.
//!
//! Why an enum of its own rather than bare [`VfError`]s: callers branch on *what* failed (a
//! profile the broker would not honour is a user error and exit 2; an unreachable or refusing
//! broker is an environment error and exit 3), and tests match on the variant. Every variant
//! converts losslessly into a [`VfError`] with 1.0.4's message and remedy, which is what ends
//! a worker or fails a group.

use std::fmt;

use videoflow_core::errors::{ErrorCode, VfError};

/// Which kind of JetStream resource a provisioning message names (STREAM-14 wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// A stream (node stream or DLQ).
    Stream,
    /// A consumer (data durable, EOS durable or anchor).
    Consumer,
}

impl ResourceKind {
    /// The word used in messages: `stream` or `consumer`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Stream => "stream",
            ResourceKind::Consumer => "consumer",
        }
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Remedy of STREAM-14's IncompatibleProfile (1.0.4's text).
pub const REMEDY_INCOMPATIBLE: &str = "Tear the run down (`videoflow teardown --flow-id <flow> \
--run-id <run> --nats <url>`) or provision under a fresh run id so the resource is created rather \
than updated. A value the broker clamped needs its JetStream account limit raised or the request \
lowered; missing metadata means the server predates JetStream metadata (nats-server 2.10) — \
upgrade it.";

/// Remedy of a resource neither creatable nor readable (STREAM-14, 1.0.4's text).
pub const REMEDY_UNVERIFIABLE: &str = "Check that the broker is reachable and that the parent \
stream exists, then re-run provisioning.";

/// Remedy of a failed connect (STREAM-7, 1.0.4's text).
pub const REMEDY_CONNECT: &str =
    "Check the broker URL and that the server is reachable from this worker.";

/// Remedy of a bind that stayed refused with 503 (STREAM-7, 1.0.4's text).
pub const REMEDY_BIND_UNAVAILABLE: &str = "Check the JetStream servers have a leader and quorum \
(`nats server report jetstream`); a cluster on slow or shared storage loses it under load.";

/// A failure of the broker layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BrokerError {
    /// `VF_BROKER_UNAVAILABLE` (exit 3): the broker could not be reached, refused a
    /// publication, or a resource could be neither provisioned nor read back.
    #[error("{message}")]
    Unavailable {
        /// 1.0.4's message text.
        message: String,
        /// What to do about it.
        remedy: String,
        /// The stream, consumer or publication id concerned, when there is one.
        resource: Option<String>,
    },
    /// `VF_INCOMPATIBLE_PROFILE` (exit 2): a resource exists with a configuration the broker
    /// did not change to the requested one (STREAM-14).
    #[error(
        "{kind} {name} exists with a configuration the broker did not change to the requested \
         one: {}.",
        mismatches.join("; ")
    )]
    IncompatibleProfile {
        /// Stream or consumer.
        kind: ResourceKind,
        /// The stream name, or `stream/durable` for a consumer.
        name: String,
        /// Each rendered `<field>: requested <X>, effective <Y>` (or the metadata form).
        mismatches: Vec<String>,
    },
}

impl BrokerError {
    /// A `VF_BROKER_UNAVAILABLE` error with a remedy and no resource.
    pub fn unavailable(message: impl Into<String>, remedy: impl Into<String>) -> Self {
        BrokerError::Unavailable {
            message: message.into(),
            remedy: remedy.into(),
            resource: None,
        }
    }

    /// STREAM-14: `<stream|consumer> <name> could not be provisioned or read back: <error>`.
    pub fn unverifiable(kind: ResourceKind, name: &str, error: impl fmt::Display) -> Self {
        BrokerError::Unavailable {
            message: format!("{kind} {name} could not be provisioned or read back: {error}"),
            remedy: REMEDY_UNVERIFIABLE.to_owned(),
            resource: Some(name.to_owned()),
        }
    }

    /// The taxonomy class: what the exit code and the dead-letter code derive from.
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::Unavailable { .. } => ErrorCode::BrokerUnavailable,
            BrokerError::IncompatibleProfile { .. } => ErrorCode::IncompatibleProfile,
        }
    }

    /// The remedy text (ERR-4).
    pub fn remedy(&self) -> &str {
        match self {
            BrokerError::Unavailable { remedy, .. } => remedy,
            BrokerError::IncompatibleProfile { .. } => REMEDY_INCOMPATIBLE,
        }
    }

    /// The typed error a worker ends with or a group fails with: message, remedy, and the
    /// resource (and mismatches) as context so the termination record stays queryable.
    pub fn to_vf_error(&self) -> VfError {
        let error = VfError::new(self.code(), self.to_string()).with_remedy(self.remedy());
        match self {
            BrokerError::Unavailable {
                resource: Some(resource),
                ..
            } => error.with_context("resource", resource.as_str()),
            BrokerError::Unavailable { resource: None, .. } => error,
            BrokerError::IncompatibleProfile {
                name, mismatches, ..
            } => error
                .with_context("resource", name.as_str())
                .with_context("mismatches", mismatches.clone()),
        }
    }
}

impl From<BrokerError> for VfError {
    fn from(error: BrokerError) -> Self {
        error.to_vf_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_14_incompatible_profile_text_and_code() {
        let e = BrokerError::IncompatibleProfile {
            kind: ResourceKind::Stream,
            name: "vf-f-r-n".into(),
            mismatches: vec![
                "retention: requested 'limits', effective 'interest'".into(),
                "max_msgs: requested 1, effective 10000".into(),
            ],
        };
        assert_eq!(
            e.to_string(),
            "stream vf-f-r-n exists with a configuration the broker did not change to the \
             requested one: retention: requested 'limits', effective 'interest'; max_msgs: \
             requested 1, effective 10000."
        );
        let vf = e.to_vf_error();
        assert_eq!(vf.code, ErrorCode::IncompatibleProfile);
        assert_eq!(vf.exit_code(), 2);
    }

    #[test]
    fn unavailable_is_exit_3() {
        let e = BrokerError::unverifiable(ResourceKind::Consumer, "s/d", "timed out");
        assert_eq!(
            e.to_string(),
            "consumer s/d could not be provisioned or read back: timed out"
        );
        assert_eq!(e.to_vf_error().exit_code(), 3);
        assert_eq!(e.code().code(), "VF_BROKER_UNAVAILABLE");
    }
}
