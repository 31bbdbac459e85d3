//! Trace mode (JOIN-5..9): a group is the parents' halves that share a `trace_id`.
//!
//! This is how a diamond (one source fanned out and joined again) reassembles. With one
//! parent every delivery completes its group on arrival (JOIN-3) and nothing ever expires.

use std::collections::hash_map::Entry::{Occupied, Vacant};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use videoflow_core::join::policy::{JoinPolicy, missing_word};
use videoflow_core::model::MissingPolicy;

use super::base::Base;
use super::clock::Clock;
use super::entry::{Entry, GroupInput, JoinError, ReadyGroup, Resolution, py_min};

/// One pending trace group: a slot per parent.
struct TraceGroup<H, M> {
    /// Position in insertion order (key of `TraceAssembler::order`).
    order: u64,
    /// Mono time of the first half: the timeout counts from here (JOIN-8).
    first_seen: f64,
    /// Entry and handle per parent index.
    slots: Vec<Option<(Entry<M>, H)>>,
    /// How many slots are filled.
    present: usize,
}

/// Groups deliveries by exact `trace_id` (JOIN-5..9).
pub struct TraceAssembler<H, M> {
    base: Base<H>,
    groups: HashMap<String, TraceGroup<H, M>>,
    /// Insertion order → trace id; the first key is the oldest group.
    order: BTreeMap<u64, String>,
    /// Insertion-order keys of complete groups, so `pop_ready` finds the first at once.
    ready: BTreeSet<u64>,
    next_order: u64,
}

impl<H, M> TraceAssembler<H, M> {
    /// A trace assembler for `parents` (in `VF_PARENT_NAMES` order). `group_cap` is the cap
    /// derived from the bound durables (JOIN-5a); `None` uses the policy's working set.
    pub fn new(
        node: &str,
        parents: &[String],
        policy: &JoinPolicy,
        group_cap: Option<usize>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, JoinError> {
        Ok(TraceAssembler {
            base: Base::new(node, parents, policy, group_cap, clock)?,
            groups: HashMap::new(),
            order: BTreeMap::new(),
            ready: BTreeSet::new(),
            next_order: 0,
        })
    }

    /// JOIN-5: stores a delivery in its trace group. A second delivery of a half the group
    /// already holds replaces it and retires the old handle (JOIN-7: never a second group);
    /// then the oldest groups beyond the cap are dropped (JOIN-9).
    pub fn add(&mut self, parent: &str, entry: Entry<M>, handle: H) -> Result<(), JoinError> {
        let index = self.base.parent_index(parent)?;
        let parent_count = self.base.parents.len();
        let group = match self.groups.entry(entry.trace_id.clone()) {
            Occupied(occupied) => occupied.into_mut(),
            Vacant(vacant) => {
                let order = self.next_order;
                self.next_order += 1;
                self.order.insert(order, entry.trace_id.clone());
                vacant.insert(TraceGroup {
                    order,
                    first_seen: self.base.clock.mono(),
                    slots: (0..parent_count).map(|_| None).collect(),
                    present: 0,
                })
            }
        };
        match group.slots[index].replace((entry, handle)) {
            Some((_, stale)) => self.base.retire(stale),
            None => {
                group.present += 1;
                if group.present == parent_count {
                    self.ready.insert(group.order);
                }
            }
        }
        let cap = self.base.group_cap();
        while self.groups.len() > cap {
            let Some((&oldest, _)) = self.order.first_key_value() else {
                break;
            };
            let reason = format!("working set of {cap} groups exceeded");
            self.evict(oldest, MissingPolicy::Drop, &reason);
        }
        Ok(())
    }

    /// JOIN-8: evicts per `missing` every group that has waited `timeout` or longer. Does
    /// nothing without a timeout or with fewer than two parents (JOIN-3).
    pub fn sweep(&mut self) {
        let Some(timeout) = self.base.timeout else {
            return;
        };
        if self.base.parents.len() < 2 {
            return;
        }
        let now = self.base.clock.mono();
        let expired: Vec<u64> = self
            .order
            .iter()
            .filter(|(_, id)| {
                self.groups
                    .get(*id)
                    .is_some_and(|g| now - g.first_seen >= timeout)
            })
            .map(|(&order, _)| order)
            .collect();
        let reason = format!("join timeout ({timeout}s)");
        for order in expired {
            self.evict(order, self.base.missing, &reason);
        }
    }

    /// JOIN-6: removes and returns the first complete group in insertion order, inputs and
    /// handles in parent order, `seq = min(seq)`, `event_ts` = min of the stamped times.
    pub fn pop_ready(&mut self) -> Option<ReadyGroup<H, M>> {
        let order = self.ready.pop_first()?;
        let trace_id = self.order.remove(&order)?;
        let group = self.groups.remove(&trace_id)?;
        let (entries, handles): (Vec<Entry<M>>, Vec<H>) = group.slots.into_iter().flatten().unzip();
        let seq = entries
            .iter()
            .map(|e| i128::from(e.seq))
            .min()
            .unwrap_or_default();
        let event_ts = entries.iter().filter_map(|e| e.event_ts).reduce(py_min);
        Some(ReadyGroup {
            trace_id,
            seq,
            event_ts,
            inputs: entries.into_iter().map(GroupInput::Entry).collect(),
            handles,
        })
    }

    /// Whether some pending group holds a delivery from `parent` (EOS-3 (c)).
    pub fn has_pending_from(&self, parent: &str) -> bool {
        let Ok(index) = self.base.parent_index(parent) else {
            return false;
        };
        self.groups.values().any(|g| g.slots[index].is_some())
    }

    /// JOIN-21a: evicts every pending group (NAK under `missing: error`, else ack, also for
    /// `wait`), counted; returns how many.
    pub fn flush_all(&mut self) -> usize {
        let all: Vec<u64> = self.order.keys().copied().collect();
        let missing = self.base.missing;
        for &order in &all {
            self.evict(
                order,
                missing,
                "end of stream, no missing half can still arrive",
            );
        }
        all.len()
    }

    /// Groups held right now (complete ones not yet popped included).
    pub fn pending_count(&self) -> usize {
        self.groups.len()
    }

    /// How long the oldest pending group has waited, 0 when none (health reporting).
    pub fn oldest_wait_seconds(&self) -> f64 {
        self.base
            .oldest_wait_seconds(self.groups.values().map(|g| g.first_seen))
    }

    /// Drains the settlements of everything discarded so far.
    pub fn take_resolutions(&mut self) -> Vec<Resolution<H>> {
        self.base.take_resolutions()
    }

    /// Groups evicted so far (`join_evicted`).
    pub fn evicted(&self) -> u64 {
        self.base.evicted()
    }

    /// The current group cap (JOIN-5a).
    pub fn group_cap(&self) -> usize {
        self.base.group_cap()
    }

    /// Sets the cap derived from the bound durables (JOIN-5a); at least 1.
    pub fn set_group_cap(&mut self, cap: usize) {
        self.base.set_group_cap(cap);
    }

    /// Removes group `order` and settles its handles per `missing` (JOIN-21).
    fn evict(&mut self, order: u64, missing: MissingPolicy, reason: &str) {
        let Some(trace_id) = self.order.remove(&order) else {
            return;
        };
        self.ready.remove(&order);
        let Some(group) = self.groups.remove(&trace_id) else {
            return;
        };
        let had: Vec<&str> = group
            .slots
            .iter()
            .zip(&self.base.parents)
            .filter(|(slot, _)| slot.is_some())
            .map(|(_, p)| p.as_str())
            .collect();
        tracing::warn!(
            node = %self.base.node,
            "evicting incomplete join group {trace_id} (had {had:?}, needed {:?}) — {reason}, missing policy={}.",
            self.base.parents,
            missing_word(missing),
        );
        let handles = group.slots.into_iter().flatten().map(|(_, h)| h);
        self.base.evict(handles, missing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join::clock::ManualClock;
    use videoflow_core::model::FlowType;

    fn entry(trace: &str, seq: u64, ts: Option<f64>) -> Entry<&'static str> {
        Entry {
            producer_name: "p".into(),
            trace_id: trace.into(),
            seq,
            event_ts: ts,
            payload: "m",
        }
    }

    fn names(ps: &[&str]) -> Vec<String> {
        ps.iter().map(|s| s.to_string()).collect()
    }

    fn policy(timeout: Option<f64>, missing: MissingPolicy) -> JoinPolicy {
        JoinPolicy {
            timeout_seconds: timeout,
            missing,
            ..JoinPolicy::default_for(FlowType::Realtime)
        }
    }

    fn assembler(
        parents: &[&str],
        pol: &JoinPolicy,
        cap: Option<usize>,
    ) -> (TraceAssembler<u32, &'static str>, ManualClock) {
        let clock = ManualClock::new(100.0, 1_700_000_000.0);
        let a = TraceAssembler::new("join", &names(parents), pol, cap, clock.shared())
            .expect("valid assembler");
        (a, clock)
    }

    #[test]
    fn join_3_one_parent_passes_through_without_sweep() {
        let (mut a, clock) = assembler(&["a"], &policy(Some(1.0), MissingPolicy::Drop), None);
        a.add("a", entry("t1", 7, Some(3.0)), 1)
            .expect("known parent");
        clock.advance(60.0);
        a.sweep();
        let g = a.pop_ready().expect("complete on arrival");
        assert_eq!(
            (g.trace_id.as_str(), g.seq, g.event_ts),
            ("t1", 7, Some(3.0))
        );
        assert_eq!(g.handles, vec![1]);
        assert!(a.take_resolutions().is_empty());
    }

    #[test]
    fn join_5_redelivered_half_replaces_and_retires() {
        let (mut a, clock) = assembler(&["a", "b"], &policy(Some(10.0), MissingPolicy::Drop), None);
        a.add("a", entry("t", 1, None), 1).expect("known parent");
        clock.advance(6.0);
        a.add("a", entry("t", 1, None), 2).expect("known parent");
        assert_eq!(a.take_resolutions(), vec![Resolution::Retire(1)]);
        assert_eq!(a.pending_count(), 1, "JOIN-7: no second group");
        // first_seen is unchanged: the timeout still counts from the first half.
        clock.advance(4.0);
        a.sweep();
        assert_eq!(a.take_resolutions(), vec![Resolution::Ack(2)]);
        assert_eq!(a.evicted(), 1);
    }

    #[test]
    fn join_5a_cap_defaults_to_working_set_and_is_settable() {
        let pol = JoinPolicy {
            max_pending: 2,
            ..policy(None, MissingPolicy::Wait)
        };
        let (mut a, _) = assembler(&["a", "b", "c"], &pol, None);
        assert_eq!(a.group_cap(), 5);
        a.set_group_cap(0);
        assert_eq!(a.group_cap(), 1);
        let (b, _) = assembler(&["a", "b"], &pol, Some(522));
        assert_eq!(b.group_cap(), 522);
    }

    #[test]
    fn join_5_cap_evicts_oldest_as_drop() {
        let (mut a, _) = assembler(&["a", "b"], &policy(None, MissingPolicy::Error), Some(2));
        for (i, t) in ["t1", "t2", "t3"].into_iter().enumerate() {
            a.add("a", entry(t, 0, None), i as u32)
                .expect("known parent");
        }
        // JOIN-9: a drop even under missing=error.
        assert_eq!(a.take_resolutions(), vec![Resolution::Ack(0)]);
        assert_eq!(a.evicted(), 1);
        assert!(a.has_pending_from("a") && !a.has_pending_from("b"));
    }

    #[test]
    fn join_6_first_ready_in_insertion_order_in_parent_order() {
        let (mut a, _) = assembler(&["a", "b"], &policy(None, MissingPolicy::Drop), None);
        a.add("b", entry("t1", 9, Some(5.0)), 10)
            .expect("known parent");
        a.add("b", entry("t2", 4, None), 20).expect("known parent");
        a.add("a", entry("t2", 3, None), 21).expect("known parent");
        a.add("a", entry("t1", 8, Some(6.0)), 11)
            .expect("known parent");
        let g = a.pop_ready().expect("t1 ready");
        assert_eq!(g.trace_id, "t1");
        assert_eq!(g.handles, vec![11, 10]);
        assert_eq!((g.seq, g.event_ts), (8, Some(5.0)));
        let GroupInput::Entry(first) = &g.inputs[0] else {
            panic!("entry expected")
        };
        assert_eq!(first.seq, 8, "inputs in parent order");
        let g = a.pop_ready().expect("t2 ready");
        assert_eq!((g.seq, g.event_ts), (3, None));
        assert!(a.pop_ready().is_none());
    }

    #[test]
    fn join_8_sweep_needs_timeout_and_two_parents() {
        let (mut a, clock) = assembler(&["a", "b"], &policy(Some(2.0), MissingPolicy::Drop), None);
        a.add("a", entry("t1", 0, None), 1).expect("known parent");
        clock.advance(1.0);
        a.add("b", entry("t2", 0, None), 2).expect("known parent");
        clock.advance(1.0);
        a.sweep();
        assert_eq!(
            a.take_resolutions(),
            vec![Resolution::Ack(1)],
            "≥ timeout expires"
        );
        assert!(!a.has_pending_from("a") && a.has_pending_from("b"));

        let (mut w, clock) = assembler(&["a", "b"], &policy(None, MissingPolicy::Wait), None);
        w.add("a", entry("t1", 0, None), 1).expect("known parent");
        clock.advance(1e6);
        w.sweep();
        assert!(w.take_resolutions().is_empty());
    }

    #[test]
    fn join_21_error_naks() {
        let (mut a, clock) = assembler(&["a", "b"], &policy(Some(1.0), MissingPolicy::Error), None);
        a.add("a", entry("t1", 0, None), 1).expect("known parent");
        clock.advance(1.0);
        a.sweep();
        assert_eq!(a.take_resolutions(), vec![Resolution::Nak(1)]);
        assert_eq!(a.evicted(), 1);
    }

    #[test]
    fn join_21a_flush_all_settles_every_group() {
        let (mut a, _) = assembler(&["a", "b"], &policy(None, MissingPolicy::Wait), None);
        a.add("a", entry("t1", 0, None), 1).expect("known parent");
        a.add("b", entry("t2", 0, None), 2).expect("known parent");
        assert_eq!(a.flush_all(), 2);
        assert_eq!(
            a.take_resolutions(),
            vec![Resolution::Ack(1), Resolution::Ack(2)]
        );
        assert_eq!((a.evicted(), a.pending_count()), (2, 0));
    }

    #[test]
    fn unknown_parent_is_refused() {
        let (mut a, _) = assembler(&["a"], &policy(None, MissingPolicy::Drop), None);
        assert!(matches!(
            a.add("zz", entry("t", 0, None), 1),
            Err(JoinError::UnknownParent { .. })
        ));
        assert!(!a.has_pending_from("zz"));
    }
}
