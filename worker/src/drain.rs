//! End of stream and abort bookkeeping (EOS-2..6, ABORT-3/4), pure and clock-injected.
//!
//! A parent is only "done" when its terminator is recorded **and** nothing of it is left
//! anywhere: not in the local queue, not in a join group, not at the broker — continuously
//! for the quiescence window (EOS-3). A failed broker query is Unknown and never counts as
//! "0 pending": that one rule is what keeps a slow or unreachable broker from cutting a
//! stream short. The tracker holds no broker handles; the receive loop keeps the held
//! terminator deliveries and acks them when [`DrainTracker::evaluate`] reports the parent
//! stopped (EOS-4).
//!
//! Under a durable shared ledger the EOS-7 barrier decides instead of the quiescence window
//! ([`DrainTracker::barrier_check`]): every parent replica's terminator recorded and as many
//! distinct ids received as they say were published — counted, not waited for.

use std::collections::BTreeMap;

use videoflow_core::envelope::WireError;
use videoflow_core::scaling::Observation;

/// The broker's view of this node's data durable on one parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCounts {
    /// Messages not yet delivered.
    pub num_pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub num_ack_pending: u64,
}

/// Which terminator (EOS-2 keys facts by kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TerminatorKind {
    /// End of stream.
    Eos,
    /// Abnormal end (ABORT-3).
    Abort,
}

/// What recording a terminator meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// A new fact: hold the delivery until the parent stops.
    New,
    /// A duplicate of a recorded fact: ack it at once.
    Duplicate,
}

/// What the EOS-7 barrier says of a parent before the received count is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierCheck {
    /// Some condition other than the count fails: keep receiving.
    NotYet,
    /// Complete once at least `final_count` distinct ids were received (b).
    Count {
        /// The sum of the recorded terminators' seqs.
        final_count: u64,
    },
    /// An ABORT is recorded and P is drained: complete as aborted, no count needed.
    Aborted {
        /// The sum of the recorded terminators' seqs (for the commit record).
        final_count: u64,
    },
}

/// The per-parent facts.
#[derive(Debug, Default)]
struct ParentState {
    /// `(replica, kind)` → seq (EOS-2).
    facts: BTreeMap<(u32, TerminatorKind), u64>,
    /// An undecodable terminator was seen (EOS of unknown replica).
    unknown_terminator: bool,
    /// The first ABORT's error record (ABORT-3); `Some(None)` for an ABORT without one.
    abort: Option<Option<WireError>>,
    stopped: bool,
    quiet_since: Option<f64>,
}

impl ParentState {
    fn has_terminator(&self) -> bool {
        !self.facts.is_empty() || self.unknown_terminator
    }
}

/// Drain state of all parents of one node, in `VF_PARENT_NAMES` order.
#[derive(Debug)]
pub struct DrainTracker {
    parents: Vec<ParentState>,
    quiescence_seconds: f64,
}

impl DrainTracker {
    /// A tracker for `parents` parents with the `VF_EOS_QUIESCENCE_MS` window.
    pub fn new(parents: usize, quiescence_ms: i64) -> Self {
        DrainTracker {
            parents: (0..parents).map(|_| ParentState::default()).collect(),
            quiescence_seconds: quiescence_ms.max(0) as f64 / 1000.0,
        }
    }

    /// EOS-2: records a decoded terminator from `parent` (index) sent by `replica`.
    pub fn record(
        &mut self,
        parent: usize,
        replica: u32,
        kind: TerminatorKind,
        seq: u64,
        error: Option<WireError>,
    ) -> Recorded {
        let Some(p) = self.parents.get_mut(parent) else {
            return Recorded::Duplicate;
        };
        if p.facts.contains_key(&(replica, kind)) {
            return Recorded::Duplicate;
        }
        p.facts.insert((replica, kind), seq);
        if kind == TerminatorKind::Abort && p.abort.is_none() {
            p.abort = Some(error);
        }
        Recorded::New
    }

    /// EOS-2: a terminator that failed to decode counts as an EOS of unknown replica. Held
    /// (returns `New`) unless the parent already had a terminator (then `Duplicate`: ack it).
    pub fn record_undecodable(&mut self, parent: usize) -> Recorded {
        let Some(p) = self.parents.get_mut(parent) else {
            return Recorded::Duplicate;
        };
        let had = p.has_terminator();
        p.unknown_terminator = true;
        if had {
            Recorded::Duplicate
        } else {
            Recorded::New
        }
    }

    /// EOS-3 probe of one parent. `queue_empty`: (b); `held_in_groups`: the join's
    /// `has_pending_from` (c); `broker`: the durable's counts (d). Returns `true` exactly
    /// once, when the parent becomes stopped (the caller then acks its held terminators).
    pub fn evaluate(
        &mut self,
        parent: usize,
        now: f64,
        queue_empty: bool,
        held_in_groups: bool,
        broker: &Observation<PendingCounts>,
    ) -> bool {
        let window = self.quiescence_seconds;
        let Some(p) = self.parents.get_mut(parent) else {
            return false;
        };
        if p.stopped || !p.has_terminator() {
            return false;
        }
        let drained_at_broker = matches!(
            broker,
            Observation::Known(PendingCounts {
                num_pending: 0,
                num_ack_pending: 0
            })
        );
        if !queue_empty || held_in_groups || !drained_at_broker {
            p.quiet_since = None;
            return false;
        }
        let since = *p.quiet_since.get_or_insert(now);
        if now - since >= window {
            p.stopped = true;
            return true;
        }
        false
    }

    /// The EOS-7 barrier for `parent` (its `expected_replicas` from `VF_PARENT_REPLICAS`),
    /// checked after EOS-3's (a)–(c) in place of (d) and the quiescence timer: (a) a
    /// terminator recorded for every replica `0..expected` (an ABORT outranks an EOS of the
    /// same replica), (c) no group holds P, (d) a Known broker observation (0, 0). What it
    /// cannot decide — (b), the received count — it hands back as the count to reach. An
    /// ABORT completes P as soon as (c) and (d) hold. Never stops the parent itself: the
    /// caller commits the completion, then calls [`DrainTracker::mark_stopped`].
    pub fn barrier_check(
        &self,
        parent: usize,
        expected_replicas: u64,
        queue_empty: bool,
        held_in_groups: bool,
        broker: &Observation<PendingCounts>,
    ) -> BarrierCheck {
        let Some(p) = self.parents.get(parent) else {
            return BarrierCheck::NotYet;
        };
        if p.stopped || !p.has_terminator() || !queue_empty || held_in_groups {
            return BarrierCheck::NotYet;
        }
        let mut by_replica: BTreeMap<u32, (TerminatorKind, u64)> = BTreeMap::new();
        for (&(replica, kind), &seq) in &p.facts {
            let e = by_replica.entry(replica).or_insert((kind, seq));
            if kind == TerminatorKind::Abort {
                *e = (kind, seq);
            }
        }
        let aborted = by_replica
            .values()
            .any(|(k, _)| *k == TerminatorKind::Abort);
        let all_ended = (0..expected_replicas)
            .all(|r| u32::try_from(r).is_ok_and(|r| by_replica.contains_key(&r)));
        if !aborted && !all_ended {
            return BarrierCheck::NotYet;
        }
        let drained_at_broker = matches!(
            broker,
            Observation::Known(PendingCounts {
                num_pending: 0,
                num_ack_pending: 0
            })
        );
        if !drained_at_broker {
            return BarrierCheck::NotYet;
        }
        let final_count = by_replica.values().map(|(_, seq)| *seq).sum();
        if aborted {
            BarrierCheck::Aborted { final_count }
        } else {
            BarrierCheck::Count { final_count }
        }
    }

    /// Marks `parent` stopped (the EOS-7 barrier completed it); `true` the first time.
    pub fn mark_stopped(&mut self, parent: usize) -> bool {
        match self.parents.get_mut(parent) {
            Some(p) if !p.stopped => {
                p.stopped = true;
                true
            }
            _ => false,
        }
    }

    /// Whether `parent` is stopped.
    pub fn is_stopped(&self, parent: usize) -> bool {
        self.parents.get(parent).is_some_and(|p| p.stopped)
    }

    /// EOS-5: every parent stopped (vacuously true for a node without parents).
    pub fn all_stopped(&self) -> bool {
        self.parents.iter().all(|p| p.stopped)
    }

    /// Whether `parent` has a recorded (or undecodable) terminator.
    pub fn has_terminator(&self, parent: usize) -> bool {
        self.parents
            .get(parent)
            .is_some_and(ParentState::has_terminator)
    }

    /// JOIN-21a preconditions: some / every parent's terminator seen.
    pub fn any_terminator(&self) -> bool {
        self.parents.iter().any(ParentState::has_terminator)
    }

    /// Every parent's terminator seen.
    pub fn every_terminator(&self) -> bool {
        self.parents.iter().all(ParentState::has_terminator)
    }

    /// Parents recorded as aborted, with their error record (ABORT-3), in parent order.
    pub fn aborted(&self) -> Vec<(usize, Option<&WireError>)> {
        self.parents
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.abort.as_ref().map(|e| (i, e.as_ref())))
            .collect()
    }

    /// ABORT-4: the first aborted parent that is drained (stopped), if any.
    pub fn drained_abort(&self) -> Option<usize> {
        self.parents
            .iter()
            .position(|p| p.abort.is_some() && p.stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZERO: Observation<PendingCounts> = Observation::Known(PendingCounts {
        num_pending: 0,
        num_ack_pending: 0,
    });

    #[test]
    fn eos_2_facts_are_keyed_by_replica_and_kind() {
        let mut d = DrainTracker::new(1, 500);
        assert_eq!(d.record(0, 0, TerminatorKind::Eos, 9, None), Recorded::New);
        assert_eq!(
            d.record(0, 0, TerminatorKind::Eos, 9, None),
            Recorded::Duplicate
        );
        assert_eq!(d.record(0, 1, TerminatorKind::Eos, 4, None), Recorded::New);
        assert_eq!(
            d.record(0, 1, TerminatorKind::Abort, 4, None),
            Recorded::New
        );
        assert_eq!(d.aborted().len(), 1);
    }

    #[test]
    fn eos_2_undecodable_terminator_is_held_only_when_first() {
        let mut d = DrainTracker::new(2, 0);
        assert_eq!(d.record_undecodable(0), Recorded::New);
        assert_eq!(d.record_undecodable(0), Recorded::Duplicate);
        assert!(d.has_terminator(0));
        d.record(1, 0, TerminatorKind::Eos, 1, None);
        assert_eq!(d.record_undecodable(1), Recorded::Duplicate);
    }

    #[test]
    fn eos_3_needs_terminator_and_quiescence() {
        let mut d = DrainTracker::new(1, 500);
        assert!(
            !d.evaluate(0, 0.0, true, false, &ZERO),
            "(a) no terminator yet"
        );
        d.record(0, 0, TerminatorKind::Eos, 3, None);
        assert!(!d.evaluate(0, 1.0, true, false, &ZERO), "timer starts");
        assert!(!d.evaluate(0, 1.4, true, false, &ZERO));
        assert!(d.evaluate(0, 1.5, true, false, &ZERO), "window held");
        assert!(d.is_stopped(0));
        assert!(!d.evaluate(0, 9.0, true, false, &ZERO), "reported once");
        assert!(d.all_stopped());
    }

    #[test]
    fn eos_3_any_activity_resets_the_timer() {
        let mut d = DrainTracker::new(1, 500);
        d.record(0, 0, TerminatorKind::Eos, 3, None);
        assert!(!d.evaluate(0, 0.0, true, false, &ZERO));
        assert!(
            !d.evaluate(0, 0.4, false, false, &ZERO),
            "(b) queue not empty resets"
        );
        assert!(!d.evaluate(0, 0.6, true, false, &ZERO), "restarts at 0.6");
        assert!(
            !d.evaluate(0, 0.9, true, true, &ZERO),
            "(c) held in a group resets"
        );
        let busy = Observation::Known(PendingCounts {
            num_pending: 1,
            num_ack_pending: 0,
        });
        assert!(
            !d.evaluate(0, 1.0, true, false, &busy),
            "(d) pending resets"
        );
        assert!(!d.evaluate(0, 1.1, true, false, &ZERO));
        assert!(d.evaluate(0, 1.6, true, false, &ZERO));
    }

    #[test]
    fn eos_3_unknown_broker_observation_never_drains() {
        let mut d = DrainTracker::new(1, 0);
        d.record(0, 0, TerminatorKind::Eos, 3, None);
        let unknown = Observation::unknown("timeout", "consumer info timed out");
        for t in 0..100 {
            assert!(!d.evaluate(0, f64::from(t), true, false, &unknown));
        }
        assert!(!d.is_stopped(0));
        assert!(
            d.evaluate(0, 100.0, true, false, &ZERO),
            "zero window stops at once"
        );
    }

    #[test]
    fn abort_3_and_4_first_abort_recorded_and_reported_when_drained() {
        let mut d = DrainTracker::new(2, 0);
        let err = WireError::new("VF_POISON", "bad frame");
        d.record(1, 0, TerminatorKind::Abort, 2, Some(err.clone()));
        d.record(
            1,
            1,
            TerminatorKind::Abort,
            2,
            Some(WireError::new("VF_OTHER", "x")),
        );
        assert_eq!(d.aborted(), vec![(1, Some(&err))]);
        assert_eq!(d.drained_abort(), None);
        assert!(d.evaluate(1, 0.0, true, false, &ZERO));
        assert_eq!(d.drained_abort(), Some(1));
        assert!(!d.all_stopped(), "the other parent is still open");
    }

    #[test]
    fn join_21a_terminator_predicates() {
        let mut d = DrainTracker::new(2, 0);
        assert!(!d.any_terminator());
        d.record(0, 0, TerminatorKind::Eos, 1, None);
        assert!(d.any_terminator() && !d.every_terminator());
        d.record(1, 0, TerminatorKind::Eos, 1, None);
        assert!(d.every_terminator());
    }

    #[test]
    fn eos_7_barrier_waits_for_every_replica_then_hands_back_the_count() {
        // The spec's example: cam replicas published 40 and 37.
        let mut d = DrainTracker::new(1, 500);
        d.record(0, 0, TerminatorKind::Eos, 40, None);
        assert_eq!(
            d.barrier_check(0, 2, true, false, &ZERO),
            BarrierCheck::NotYet
        );
        d.record(0, 1, TerminatorKind::Eos, 37, None);
        assert_eq!(
            d.barrier_check(0, 2, true, false, &ZERO),
            BarrierCheck::Count { final_count: 77 }
        );
        // (b)/(c) of EOS-3, then (d): anything outstanding or unobserved keeps it open.
        assert_eq!(
            d.barrier_check(0, 2, false, false, &ZERO),
            BarrierCheck::NotYet
        );
        assert_eq!(
            d.barrier_check(0, 2, true, true, &ZERO),
            BarrierCheck::NotYet
        );
        let busy = Observation::Known(PendingCounts {
            num_pending: 0,
            num_ack_pending: 1,
        });
        assert_eq!(
            d.barrier_check(0, 2, true, false, &busy),
            BarrierCheck::NotYet
        );
        let unknown = Observation::unknown("timeout", "no reply");
        assert_eq!(
            d.barrier_check(0, 2, true, false, &unknown),
            BarrierCheck::NotYet
        );
        // No quiescence window: the barrier never waits on the clock, and never stops P itself.
        assert!(!d.is_stopped(0));
        assert!(d.mark_stopped(0));
        assert!(!d.mark_stopped(0));
        assert_eq!(
            d.barrier_check(0, 2, true, false, &ZERO),
            BarrierCheck::NotYet
        );
    }

    #[test]
    fn eos_7_an_abort_outranks_and_completes_without_the_other_replicas() {
        let mut d = DrainTracker::new(1, 500);
        d.record(0, 1, TerminatorKind::Eos, 5, None);
        d.record(0, 1, TerminatorKind::Abort, 6, None);
        assert_eq!(
            d.barrier_check(0, 3, true, false, &ZERO),
            BarrierCheck::Aborted { final_count: 6 }
        );
        // An undecodable terminator satisfies EOS-3 (a), never EOS-7 (a).
        let mut u = DrainTracker::new(1, 500);
        u.record_undecodable(0);
        assert_eq!(
            u.barrier_check(0, 1, true, false, &ZERO),
            BarrierCheck::NotYet
        );
    }
}
