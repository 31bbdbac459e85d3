//! Throughput-driven demand (SCALE-3, SCALE-4).
//!
//! Why not lag: a `live_latest` channel keeps one message per subject, so a node at a third of
//! the offered rate shows a lag of one and a lag-keyed scaler never fires while two frames in
//! three are evicted before delivery. The health counters — offered, processed, dropped over a
//! control window — see the loss the queue depth hides, and a declared [`RateObjective`] says
//! how much of it is acceptable.

use super::demand::validate_scaling_rule;
use super::error::ScalingError;
use super::{MISSING_OBSERVATION, Observation, clamp};

/// `RateDecision::unknown_reason` for a sample shorter than the control window.
pub const WINDOW_TOO_SHORT: &str = "window";

/// One reading of a node's monotonic counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterReading {
    /// Inputs handed to the node (`messages_offered_total`).
    pub offered: i64,
    /// Inputs the node acknowledged (`messages_processed_total`).
    pub processed: i64,
    /// Inputs given up on by policy (`messages_dropped_total`).
    pub dropped: i64,
    /// Inputs the channel evicted before delivery (`SubscriptionObservation::dropped`).
    pub evicted: i64,
}

/// One control window of a node's throughput.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputSample {
    /// Offered into the node's channel during the window, evictions included.
    pub offered: i64,
    /// Acknowledged during the window.
    pub processed: i64,
    /// Lost during the window: evicted before delivery, or dropped by policy.
    pub dropped: i64,
    /// The window's length.
    pub window_seconds: f64,
}

impl ThroughputSample {
    /// `min(1, processed / offered)`, or `None` when nothing was offered — an idle window has
    /// no fraction, and calling it 0 or 1 would be a guess.
    ///
    /// The division is Python's `int / int` ([`py_true_div`]): correctly rounded for every
    /// count, not only below 2⁵³.
    pub fn delivered_fraction(&self) -> Option<f64> {
        (self.offered > 0).then(|| py_true_div(self.processed, self.offered).min(1.0))
    }
}

/// Python's `n / d` for integers (`d != 0`): the exact quotient rounded once to the nearest
/// f64, ties to even.
///
/// Why not `n as f64 / d as f64`: above 2⁵³ each conversion rounds before the division
/// rounds again, and the double rounding moves the result by an ulp — enough to flip a
/// `fraction >= objective` comparison or a `ceil` (found by the differential tests against
/// 1.0.4, whose counters are Python ints).
pub fn py_true_div(n: i64, d: i64) -> f64 {
    const EXACT: u64 = 1 << 53;
    let (un, ud) = (n.unsigned_abs(), d.unsigned_abs());
    if ud == 0 {
        return f64::NAN; // callers never divide by zero; total rather than panicking
    }
    let negative = (n < 0) != (d < 0);
    let magnitude = if un <= EXACT && ud <= EXACT {
        // Both convert exactly, so the one division is the only rounding.
        un as f64 / ud as f64
    } else if un == 0 {
        0.0
    } else {
        // Scale n up to 127 bits so the integer quotient keeps ≥ 64 significant bits, fold
        // a non-zero remainder into a sticky bit, then let the (correctly rounding) u128 → f64
        // conversion round once; the power-of-two rescale is exact (the value is normal).
        let shift = 127 - (128 - u128::from(un).leading_zeros());
        let scaled = u128::from(un) << shift;
        let (q, r) = (scaled / u128::from(ud), scaled % u128::from(ud));
        let q = if r == 0 { q } else { q | 1 };
        q as f64 * 2f64.powi(-(shift as i32))
    };
    if negative { -magnitude } else { magnitude }
}

/// The declared delivery objective a live node must meet, per control window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateObjective {
    /// The least `processed / offered` acceptable over one window (`1.0`: every frame).
    pub min_delivered_fraction: f64,
    /// How long a window is; a shorter sample is not yet a decision.
    pub control_window_seconds: f64,
    /// How long after a replica change a further change is held back, so a decision is not
    /// taken against a fleet that has not finished starting.
    pub stabilization_seconds: f64,
}

/// What a [`RateDecision`] says about the node's throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateDiagnosis {
    /// No usable sample: missing, unreadable, or shorter than the control window.
    Unknown,
    /// Nothing was offered.
    Idle,
    /// The delivered fraction meets the objective.
    WithinObjective,
    /// The objective is breached: work is lost faster than it is processed.
    Breach,
    /// A breach inside the stabilization window of the last change: held.
    Stabilizing,
    /// Work offered, nothing processed: not a capacity question.
    Stalled,
}

impl RateDiagnosis {
    /// The word 1.0.4 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RateDiagnosis::Unknown => "unknown",
            RateDiagnosis::Idle => "idle",
            RateDiagnosis::WithinObjective => "within_objective",
            RateDiagnosis::Breach => "breach",
            RateDiagnosis::Stabilizing => "stabilizing",
            RateDiagnosis::Stalled => "stalled",
        }
    }
}

/// The outcome of [`observe_rate_demand`].
#[derive(Debug, Clone, PartialEq)]
pub struct RateDecision {
    /// The recommendation, `None` when unknown or stalled — never `0` for "could not tell".
    pub replicas: Option<i64>,
    /// The diagnosis.
    pub diagnosis: RateDiagnosis,
    /// What the window measured; `None` when unknown or idle.
    pub delivered_fraction: Option<f64>,
    /// The sample decided on; `None` when there was none to read.
    pub sample: Option<ThroughputSample>,
    /// Why the sample could not be used (its `Unknown` reason, `missing` or `window`); empty
    /// otherwise.
    pub unknown_reason: String,
}

impl RateDecision {
    fn unknown(reason: &str, sample: Option<ThroughputSample>) -> Self {
        RateDecision {
            replicas: None,
            diagnosis: RateDiagnosis::Unknown,
            delivered_fraction: None,
            sample,
            unknown_reason: reason.to_owned(),
        }
    }

    fn decided(replicas: Option<i64>, diagnosis: RateDiagnosis, sample: ThroughputSample) -> Self {
        RateDecision {
            replicas,
            diagnosis,
            delivered_fraction: sample.delivered_fraction(),
            sample: Some(sample),
            unknown_reason: String::new(),
        }
    }
}

/// SCALE-4: a sample from two readings of the counters.
///
/// Counters only grow, so a reading that went down is a restarted exporter: that counter's
/// delta is taken from zero (`after`). Evictions are folded into both `offered` and `dropped`
/// because the node never saw those inputs at all.
pub fn throughput_sample(
    before: CounterReading,
    after: CounterReading,
    window_seconds: f64,
) -> ThroughputSample {
    fn delta(before: i64, after: i64) -> i64 {
        if after < before {
            after
        } else {
            after.saturating_sub(before)
        }
    }
    let evicted = delta(before.evicted, after.evicted);
    ThroughputSample {
        offered: delta(before.offered, after.offered).saturating_add(evicted),
        processed: delta(before.processed, after.processed),
        dropped: delta(before.dropped, after.dropped).saturating_add(evicted),
        window_seconds,
    }
}

/// SCALE-3 validation, in 1.0.4's order: the fraction in `(0, 1]`, a positive control window,
/// a non-negative stabilization window. (Comparisons are written so a NaN fails exactly where
/// 1.0.4's fails.)
pub fn validate_rate_objective(objective: &RateObjective) -> Result<(), ScalingError> {
    let fraction = objective.min_delivered_fraction;
    if !(0.0 < fraction && fraction <= 1.0) {
        return Err(ScalingError::DeliveredFraction(fraction));
    }
    if objective.control_window_seconds <= 0.0 {
        return Err(ScalingError::ControlWindow(
            objective.control_window_seconds,
        ));
    }
    if objective.stabilization_seconds < 0.0 {
        return Err(ScalingError::Stabilization(objective.stabilization_seconds));
    }
    Ok(())
}

/// SCALE-3: size and diagnose a live node's demand from one control window of throughput.
///
/// In order: no sample is `unknown`/`missing`, an unreadable one `unknown`/its reason, one
/// shorter than the control window `unknown`/`window`; nothing offered is `idle`; a fraction
/// meeting the objective is `within_objective`; nothing processed is `stalled` (more replicas
/// of a node that processes nothing help nothing); within `stabilization_seconds` of the last
/// change is `stabilizing`; else a `breach` asks for enough replicas, at the measured
/// per-replica rate, to deliver the objective's share of the offered rate. Every number is
/// clamped to `[min_replicas, max_replicas]`.
///
/// The breach size is `ceil(a / b)` with `a = offered × min_delivered_fraction` and
/// `b = processed / current_replicas`, each an f64 operation in exactly this order: other
/// orders round differently (offered 3, processed 1, current 5, fraction 0.8 gives 13), and
/// 1.0.4's code is normative.
pub fn observe_rate_demand(
    sample: Option<&Observation<ThroughputSample>>,
    objective: &RateObjective,
    current_replicas: i64,
    min_replicas: i64,
    max_replicas: i64,
    last_change_at: Option<f64>,
    now: f64,
) -> Result<RateDecision, ScalingError> {
    validate_rate_objective(objective)?;
    validate_scaling_rule(1, min_replicas, max_replicas)?;
    if current_replicas < 1 {
        return Err(ScalingError::CurrentReplicasBelowOne(current_replicas));
    }
    let window = match sample {
        None => return Ok(RateDecision::unknown(MISSING_OBSERVATION, None)),
        Some(Observation::Unknown { reason, .. }) => {
            return Ok(RateDecision::unknown(reason, None));
        }
        Some(Observation::Known(window)) => *window,
    };
    if window.window_seconds < objective.control_window_seconds {
        return Ok(RateDecision::unknown(WINDOW_TOO_SHORT, Some(window)));
    }
    let hold = Some(clamp(current_replicas, min_replicas, max_replicas));
    let Some(fraction) = window.delivered_fraction() else {
        return Ok(RateDecision::decided(hold, RateDiagnosis::Idle, window));
    };
    let (replicas, diagnosis) = if fraction >= objective.min_delivered_fraction {
        (hold, RateDiagnosis::WithinObjective)
    } else if window.processed <= 0 {
        (None, RateDiagnosis::Stalled)
    } else if last_change_at.is_some_and(|at| now - at < objective.stabilization_seconds) {
        (hold, RateDiagnosis::Stabilizing)
    } else {
        let a = window.offered as f64 * objective.min_delivered_fraction;
        let b = py_true_div(window.processed, current_replicas);
        // `as` saturates, and the clamp then bounds the result by `max_replicas`.
        let wanted = (a / b).ceil() as i64;
        (
            Some(clamp(wanted, min_replicas, max_replicas)),
            RateDiagnosis::Breach,
        )
    };
    Ok(RateDecision::decided(replicas, diagnosis, window))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECTIVE: RateObjective = RateObjective {
        min_delivered_fraction: 0.9,
        control_window_seconds: 30.0,
        stabilization_seconds: 60.0,
    };

    fn known(offered: i64, processed: i64, window_seconds: f64) -> Observation<ThroughputSample> {
        Observation::Known(ThroughputSample {
            offered,
            processed,
            dropped: 0,
            window_seconds,
        })
    }

    fn decide(sample: &Observation<ThroughputSample>, current: i64) -> RateDecision {
        observe_rate_demand(Some(sample), &OBJECTIVE, current, 1, 10, None, 0.0).expect("valid")
    }

    #[test]
    fn scale_4_deltas_fold_evictions_and_survive_resets() {
        let before = CounterReading {
            offered: 500,
            processed: 480,
            dropped: 20,
            evicted: 99,
        };
        let after = CounterReading {
            offered: 10,
            processed: 9,
            dropped: 1,
            evicted: 3,
        };
        let sample = throughput_sample(before, after, 15.0);
        assert_eq!(
            (sample.offered, sample.processed, sample.dropped),
            (13, 9, 4)
        );
        assert_eq!(sample.delivered_fraction(), Some(9.0 / 13.0));
        // Above 2^53, Python's correctly rounded int / int (values from 1.0.4).
        assert_eq!(
            py_true_div(1_367_042_287_621_652, 9_007_199_254_918_373).to_bits(),
            0x3fc3_6d45_57c7_b3aa
        );
        assert_eq!(
            py_true_div(60, 9_007_199_255_487_311).to_bits(),
            0x3cfd_ffff_fff5_52e6
        );
        assert_eq!(py_true_div(-7, 2), -3.5);
        assert_eq!(py_true_div(i64::MIN, 1), -(2f64.powi(63)));
        let idle = throughput_sample(before, before, 30.0);
        assert_eq!(idle.delivered_fraction(), None);
    }

    #[test]
    fn scale_3_unknowns_carry_no_number() {
        let missing = observe_rate_demand(None, &OBJECTIVE, 2, 1, 10, None, 0.0).expect("valid");
        assert_eq!(
            (missing.replicas, missing.unknown_reason.as_str()),
            (None, "missing")
        );
        let unread = decide(&Observation::unknown("api", "scrape failed"), 2);
        assert_eq!(
            (unread.replicas, unread.unknown_reason.as_str()),
            (None, "api")
        );
        let short = decide(&known(100, 10, 29.5), 2);
        assert_eq!(
            (short.replicas, short.unknown_reason.as_str()),
            (None, "window")
        );
        assert!(short.sample.is_some() && short.delivered_fraction.is_none());
    }

    #[test]
    fn scale_3_diagnoses() {
        assert_eq!(decide(&known(0, 0, 30.0), 15).replicas, Some(10));
        assert_eq!(
            decide(&known(100, 90, 30.0), 2).diagnosis,
            RateDiagnosis::WithinObjective
        );
        let stalled = decide(&known(50, 0, 30.0), 2);
        assert_eq!(
            (stalled.replicas, stalled.diagnosis),
            (None, RateDiagnosis::Stalled)
        );
        let breach = decide(&known(300, 100, 30.0), 2);
        assert_eq!(
            (breach.replicas, breach.diagnosis),
            (Some(6), RateDiagnosis::Breach)
        );
    }

    #[test]
    fn scale_3_stabilization_holds_until_elapsed() {
        let sample = known(300, 100, 30.0);
        let at = |now| {
            observe_rate_demand(Some(&sample), &OBJECTIVE, 2, 1, 10, Some(100.0), now)
                .expect("valid")
        };
        assert_eq!(at(130.0).diagnosis, RateDiagnosis::Stabilizing);
        assert_eq!(at(130.0).replicas, Some(2));
        assert_eq!(at(160.0).diagnosis, RateDiagnosis::Breach);
    }

    #[test]
    fn scale_3_breach_size_in_spec_order() {
        let objective = RateObjective {
            min_delivered_fraction: 0.8,
            control_window_seconds: 1.0,
            stabilization_seconds: 0.0,
        };
        let size = |offered, processed, current| {
            observe_rate_demand(
                Some(&known(offered, processed, 30.0)),
                &objective,
                current,
                1,
                100,
                None,
                0.0,
            )
            .expect("valid")
            .replicas
        };
        assert_eq!(size(3, 1, 5), Some(13));
        assert_eq!(size(5, 1, 3), Some(12));
        assert_eq!(size(142, 71, 5), Some(9));
    }

    #[test]
    fn scale_3_validation_order() {
        let bad = |objective: RateObjective, current, min, max| {
            observe_rate_demand(None, &objective, current, min, max, None, 0.0)
                .map_err(|e| e.to_string())
        };
        let zero = RateObjective {
            min_delivered_fraction: 0.0,
            ..OBJECTIVE
        };
        assert_eq!(
            bad(zero, 0, 4, 2),
            Err("min_delivered_fraction must be in (0, 1], got 0.0.".into())
        );
        let nan = RateObjective {
            min_delivered_fraction: f64::NAN,
            ..OBJECTIVE
        };
        assert!(bad(nan, 1, 1, 1).is_err());
        let window = RateObjective {
            control_window_seconds: 0.0,
            stabilization_seconds: -1.0,
            ..OBJECTIVE
        };
        assert_eq!(
            bad(window, 1, 1, 1),
            Err("control_window_seconds must be positive, got 0.0.".into())
        );
        assert_eq!(
            bad(OBJECTIVE, 0, 4, 2),
            Err("max_replicas (2) is below min_replicas (4).".into())
        );
        assert_eq!(
            bad(OBJECTIVE, 0, 1, 2),
            Err("current_replicas must be >= 1, got 0.".into())
        );
    }
}
