//! Delivery policy as pure decisions (DELIV-6, DELIV-7, ERR-2, ERR-5a, ERR-6).
//!
//! What happens to a failed group is decided here, from the error's disposition, the node's
//! delivery mode and the broker's delivery count; the receive loop only carries the decision
//! out. Keeping it pure means every row of the DELIV-6 table is a unit test, not a broker
//! scenario.

use std::collections::HashMap;

use videoflow_core::errors::{Disposition, ErrorCode, VfError};
use videoflow_core::model::{DeliveryMode, OnError};

/// What to do with one handle of a failed group (DELIV-6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FailureAction {
    /// Hand it back for redelivery after `delay_seconds` (0 = at once).
    Nak {
        /// Seconds before redelivery.
        delay_seconds: f64,
    },
    /// Publish it to the DLQ, then TERM it (at-least-once poison, exhausted transient).
    DeadLetter,
    /// Offer it to the best-effort sampler: dead-letter if admitted, else record; then TERM.
    SampledDeadLetter,
}

/// The disposition a failure is handled with (ERR-2): a runtime-class error keeps its own;
/// anything else takes the node's `VF_ON_ERROR`.
pub fn classify(error: &VfError, on_error: OnError) -> Disposition {
    let runtime = error.code.is_a(ErrorCode::Runtime);
    match (runtime, error.disposition) {
        (true, Some(d)) => d,
        _ => match on_error {
            OnError::Poison => Disposition::Poison,
            OnError::Transient => Disposition::Transient,
            OnError::WorkerFatal => Disposition::WorkerFatal,
        },
    }
}

/// DELIV-6: the action for one handle delivered `num_delivered` times under `max_deliver`
/// (`-1` = unlimited at the broker; the ledger then counts, not implemented yet).
/// `jitter` is a factor in `[0.5, 1.5]` for the NAK delay (injected so tests are exact).
pub fn failure_action(
    disposition: Disposition,
    mode: DeliveryMode,
    num_delivered: u64,
    max_deliver: i64,
    jitter: f64,
) -> FailureAction {
    let nak = FailureAction::Nak {
        delay_seconds: nak_delay_seconds(num_delivered, jitter),
    };
    match (disposition, mode) {
        (Disposition::WorkerFatal, _) => nak,
        (Disposition::Poison | Disposition::Transient, DeliveryMode::BestEffort) => {
            FailureAction::SampledDeadLetter
        }
        (Disposition::Poison, DeliveryMode::AtLeastOnce) => FailureAction::DeadLetter,
        (Disposition::Transient, DeliveryMode::AtLeastOnce) => {
            let budget_left =
                max_deliver < 0 || i64::try_from(num_delivered).is_ok_and(|n| n < max_deliver);
            if budget_left {
                nak
            } else {
                FailureAction::DeadLetter
            }
        }
    }
}

/// DELIV-7: `min(2^max(1, n), 30) × jitter` seconds, `n` the broker's delivery count.
pub fn nak_delay_seconds(num_delivered: u64, jitter: f64) -> f64 {
    let exp = num_delivered.clamp(1, 5) as i32; // 2^5 = 32 > 30 already
    2f64.powi(exp).min(30.0) * jitter.clamp(0.5, 1.5)
}

/// A jitter factor in `[0.5, 1.5]` from a cheap per-process source (DELIV-7 SHOULD).
pub fn random_jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    0.5 + (h.finish() % 1_000_000) as f64 / 1_000_000.0
}

/// The consecutive-failure breaker (ERR-5a): `threshold` failed groups in a row, any
/// disposition, stop the worker; any successful ack resets. 0 disables it.
#[derive(Debug, Clone)]
pub struct Breaker {
    threshold: u64,
    consecutive: u64,
}

impl Breaker {
    /// A breaker tripping at `threshold` (`VF_BREAKER_THRESHOLD`; 0 = off).
    pub fn new(threshold: i64) -> Self {
        Breaker {
            threshold: u64::try_from(threshold).unwrap_or(0),
            consecutive: 0,
        }
    }

    /// A group was acked (an idempotent skip counts).
    pub fn success(&mut self) {
        self.consecutive = 0;
    }

    /// A group failed (after its ladder ran). Returns the WorkerUnhealthy error when this
    /// failure reaches the threshold.
    pub fn failure(&mut self, node: &str, last: &VfError) -> Option<VfError> {
        self.consecutive += 1;
        (self.threshold > 0 && self.consecutive >= self.threshold)
            .then(|| VfError::worker_unhealthy(node, self.consecutive, &last.py_repr()))
    }

    /// Failures in a row so far.
    pub fn consecutive(&self) -> u64 {
        self.consecutive
    }
}

/// The best-effort dead-letter sampler (ERR-6): at most 5 specimens per (code, node) per fixed
/// 60 s window that starts at its first admission.
#[derive(Debug, Default)]
pub struct DlqSampler {
    windows: HashMap<String, (f64, u32)>,
}

/// Specimens admitted per window.
pub const SAMPLES_PER_WINDOW: u32 = 5;
/// Window length in seconds.
pub const SAMPLE_WINDOW_SECONDS: f64 = 60.0;

impl DlqSampler {
    /// Whether a dead letter with `code` may be published now (`now` in mono seconds).
    pub fn admit(&mut self, code: &str, now: f64) -> bool {
        let entry = self.windows.entry(code.to_owned()).or_insert((now, 0));
        if now - entry.0 >= SAMPLE_WINDOW_SECONDS {
            *entry = (now, 0);
        }
        if entry.1 < SAMPLES_PER_WINDOW {
            entry.1 += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliv_6_table() {
        use DeliveryMode::*;
        use Disposition::*;
        let nak = |n| FailureAction::Nak {
            delay_seconds: nak_delay_seconds(n, 1.0),
        };
        assert_eq!(
            failure_action(Poison, AtLeastOnce, 1, 4, 1.0),
            FailureAction::DeadLetter
        );
        assert_eq!(
            failure_action(Poison, BestEffort, 1, 1, 1.0),
            FailureAction::SampledDeadLetter
        );
        assert_eq!(
            failure_action(Transient, BestEffort, 1, 1, 1.0),
            FailureAction::SampledDeadLetter
        );
        assert_eq!(failure_action(Transient, AtLeastOnce, 1, 4, 1.0), nak(1));
        assert_eq!(failure_action(Transient, AtLeastOnce, 3, 4, 1.0), nak(3));
        assert_eq!(
            failure_action(Transient, AtLeastOnce, 4, 4, 1.0),
            FailureAction::DeadLetter
        );
        assert_eq!(failure_action(Transient, AtLeastOnce, 9, -1, 1.0), nak(9));
        assert_eq!(failure_action(WorkerFatal, AtLeastOnce, 9, 4, 1.0), nak(9));
        assert_eq!(failure_action(WorkerFatal, BestEffort, 1, 1, 1.0), nak(1));
    }

    #[test]
    fn deliv_7_delays() {
        assert_eq!(nak_delay_seconds(0, 1.0), 2.0);
        assert_eq!(nak_delay_seconds(1, 1.0), 2.0);
        assert_eq!(nak_delay_seconds(3, 1.0), 8.0);
        assert_eq!(nak_delay_seconds(4, 1.0), 16.0);
        assert_eq!(nak_delay_seconds(5, 1.0), 30.0);
        assert_eq!(nak_delay_seconds(50, 1.5), 45.0);
        assert_eq!(nak_delay_seconds(1, 0.5), 1.0);
        for _ in 0..100 {
            let j = random_jitter();
            assert!((0.5..=1.5).contains(&j), "{j}");
        }
    }

    #[test]
    fn err_2_runtime_errors_keep_their_disposition() {
        let poison = VfError::new(ErrorCode::PoisonSchema, "bad");
        assert_eq!(classify(&poison, OnError::Transient), Disposition::Poison);
        let config = VfError::new(ErrorCode::BrokerUnavailable, "down");
        assert_eq!(
            classify(&config, OnError::Transient),
            Disposition::Transient
        );
        assert_eq!(
            classify(&config, OnError::WorkerFatal),
            Disposition::WorkerFatal
        );
        let fatal = VfError::new(ErrorCode::Device, "gone");
        assert_eq!(classify(&fatal, OnError::Poison), Disposition::WorkerFatal);
    }

    #[test]
    fn err_5a_breaker_trips_at_threshold_and_resets() {
        let err = VfError::new(ErrorCode::Transient, "boom");
        let mut b = Breaker::new(3);
        assert!(b.failure("n", &err).is_none());
        assert!(b.failure("n", &err).is_none());
        b.success();
        assert!(b.failure("n", &err).is_none());
        assert!(b.failure("n", &err).is_none());
        let tripped = b.failure("n", &err).expect("trips");
        assert_eq!(tripped.code, ErrorCode::WorkerUnhealthy);
        assert!(
            tripped.message.starts_with("n failed 3 messages in a row"),
            "{}",
            tripped.message
        );
        let mut off = Breaker::new(0);
        for _ in 0..100 {
            assert!(off.failure("n", &err).is_none());
        }
    }

    #[test]
    fn err_6_sampler_admits_five_per_window() {
        let mut s = DlqSampler::default();
        let admitted = (0..8).filter(|_| s.admit("VF_POISON", 10.0)).count();
        assert_eq!(admitted, 5);
        assert!(
            s.admit("VF_POISON_DECODE", 10.0),
            "codes have separate windows"
        );
        assert!(!s.admit("VF_POISON", 69.9));
        assert!(s.admit("VF_POISON", 70.0));
    }
}
