//! Pure scaling decisions (protocol §19, SCALE-1…6).
//!
//! Why a module of pure functions: the operator decides how many replicas a node gets from
//! what the broker, the health counters and the allocator say, and every one of those reads can
//! fail. The decisions here take those reads as [`Observation`]s — `Known(value)` or
//! `Unknown { reason, detail }` — and an `Unknown` is never read as zero: a read that timed out
//! would otherwise look like an idle node and scale a busy one down.
//!
//! Every function is canonical (the same answer for any input order) and deterministic, so the
//! operator, a test and the Python reference (videoflow 1.0.4) agree case by case; the golden
//! cases are `shared/vectors/scaling/decisions.json`.
//!
//! - [`demand`] — lag-driven demand: [`replicas_for_lag`] (SCALE-1), [`observe_demand`] (SCALE-2).
//! - [`rate`] — throughput-driven demand: [`throughput_sample`] (SCALE-4),
//!   [`observe_rate_demand`] (SCALE-3).
//! - [`capacity`] — desired versus granted versus ready: [`reconcile_capacity`] (SCALE-5).
//! - [`eligibility`] — which nodes may be autoscaled at all: [`fixed_scale_reasons`],
//!   [`admit_autoscaling`] (SCALE-6).
//! - [`error`] — [`ScalingError`], the refusals with 1.0.4's exact texts.

pub mod capacity;
pub mod demand;
pub mod eligibility;
pub mod error;
pub mod rate;

pub use capacity::{
    CLAIM_ALLOCATED, CLAIM_PREPARED, CLAIM_READY, CapacityDecision, CapacityDiagnosis,
    ClaimObservation, reconcile_capacity,
};
pub use demand::{
    DemandDecision, DemandDiagnosis, ParentDemand, SubscriptionObservation, observe_demand,
    parent_lag, replicas_for_lag, validate_scaling_rule,
};
pub use eligibility::{
    FixedScaleReason, NodeScaleFacts, admit_autoscaling, fixed_scale_reasons, renders_as_job,
};
pub use error::ScalingError;
pub use rate::{
    CounterReading, RateDecision, RateDiagnosis, RateObjective, ThroughputSample,
    observe_rate_demand, throughput_sample, validate_rate_objective,
};

/// The rule's default target: the rendered scaler's `lagThreshold: '10'`.
pub const DEFAULT_TARGET_LAG_PER_REPLICA: i64 = 10;
/// The rule's default floor: a processor at zero replicas never sees its end-of-stream.
pub const DEFAULT_MIN_REPLICAS: i64 = 1;
/// The rule's default ceiling: the CLI's `--max-replicas` default.
pub const DEFAULT_MAX_REPLICAS: i64 = 10;

/// `Unknown.reason` for something nobody observed at all (a required parent without an
/// observation, a throughput sample nobody read): "nobody asked" is not "no work".
pub const MISSING_OBSERVATION: &str = "missing";

/// What one read returned: a value, or why there is none.
///
/// Why a type and not an `Option` or a default: the failure this prevents is quiet — a broker
/// query that timed out reported as "zero pending" makes a busy node look idle. There is
/// deliberately no conversion from `Unknown` to a number; every decision that meets one says
/// so (`replicas: None`, the reason named).
#[derive(Debug, Clone, PartialEq)]
pub enum Observation<T> {
    /// The read succeeded.
    Known(T),
    /// The read could not be made.
    Unknown {
        /// A short machine-readable category (`timeout`, `auth`, `missing`, …).
        reason: String,
        /// The human-readable why.
        detail: String,
    },
}

impl<T> Observation<T> {
    /// An `Unknown` observation.
    pub fn unknown(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Observation::Unknown {
            reason: reason.into(),
            detail: detail.into(),
        }
    }

    /// The value, if the read succeeded.
    pub fn known(&self) -> Option<&T> {
        match self {
            Observation::Known(value) => Some(value),
            Observation::Unknown { .. } => None,
        }
    }

    /// The reason, if the read failed.
    pub fn unknown_reason(&self) -> Option<&str> {
        match self {
            Observation::Known(_) => None,
            Observation::Unknown { reason, .. } => Some(reason),
        }
    }
}

/// `min(max, max(min, x))`, §19's clamp. Written out rather than `Ord::clamp` because that
/// panics when `min > max`; callers validate the range first, but a pure function must not
/// panic on input it did not validate.
pub(crate) fn clamp(x: i64, min_replicas: i64, max_replicas: i64) -> i64 {
    max_replicas.min(min_replicas.max(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observation_accessors() {
        let k: Observation<i64> = Observation::Known(3);
        assert_eq!(k.known(), Some(&3));
        assert_eq!(k.unknown_reason(), None);
        let u: Observation<i64> = Observation::unknown("timeout", "no reply");
        assert_eq!(u.known(), None);
        assert_eq!(u.unknown_reason(), Some("timeout"));
    }

    #[test]
    fn clamp_never_panics_on_an_inverted_range() {
        assert_eq!(clamp(5, 1, 10), 5);
        assert_eq!(clamp(0, 1, 10), 1);
        assert_eq!(clamp(50, 1, 10), 10);
        assert_eq!(clamp(3, 5, 2), 2);
    }
}
