//! Time mode (JOIN-10..20, JOIN-23, EOS-6): a group is the sync parents' messages whose
//! times lie within a tolerance of each other, plus each collect parent's samples within its
//! window of the group's time.
//!
//! This is how independent producers (cameras, sensors) fuse: they share no lineage, only a
//! clock. The emitted identity is derived from the members (JOIN-23), so a group re-formed
//! after a crash from the same messages gets the same id and deduplicates downstream.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use videoflow_core::join::identity::{SyncMember, round_half_even_micros, time_group_trace_id};
use videoflow_core::join::policy::{JoinPolicy, missing_word};
use videoflow_core::model::{JoinMode, MissingPolicy};

use super::base::Base;
use super::clock::Clock;
use super::collect::{Claim, CollectBuffers, Sample};
use super::entry::{CollectWindow, Entry, GroupInput, JoinError, ReadyGroup, Resolution, py_min};

/// One sync parent's member of a group.
struct Member<H, M> {
    /// Input index of the parent.
    parent: usize,
    entry: Entry<M>,
    handle: H,
}

/// A pending time group.
struct TimeGroup<H, M> {
    /// Min of the members' times (JOIN-11).
    ts: f64,
    /// Mono time the group was seeded: timeout and settle count from here.
    first_seen: f64,
    /// Sync members in arrival order (a replacement keeps its place, JOIN-13).
    members: Vec<Member<H, M>>,
}

impl<H, M> TimeGroup<H, M> {
    fn holds(&self, parent: usize) -> bool {
        self.members.iter().any(|m| m.parent == parent)
    }
}

/// A group taken out of the pending set with its collect samples claimed: everything but
/// the identity, which [`TimeAssembler::finish`] derives at emission.
struct Formed<H, M> {
    ts: f64,
    members: Vec<Member<H, M>>,
    claims: Vec<Claim<H, M>>,
}

/// Groups deliveries by event time (JOIN-10..20).
pub struct TimeAssembler<H, M> {
    base: Base<H>,
    /// `tolerance_ms / 1000`.
    tolerance: f64,
    /// Number of sync parents: a group with this many members is complete.
    sync_count: usize,
    quorum: Option<i64>,
    collect: CollectBuffers<H, M>,
    /// Pending groups by id; ids grow, so iteration is insertion order.
    groups: BTreeMap<u64, TimeGroup<H, M>>,
    next_id: u64,
    /// Groups staged by `sweep` (quorum or complete at timeout), emitted first, FIFO.
    staged: VecDeque<Formed<H, M>>,
}

impl<H, M> TimeAssembler<H, M> {
    /// A time assembler for `parents` (in `VF_PARENT_NAMES` order). Fails with the
    /// reference's text when the policy does not fit the parents (JOIN-10) or has no positive
    /// tolerance. `group_cap` as for [`TraceAssembler::new`](super::TraceAssembler::new).
    pub fn new(
        node: &str,
        parents: &[String],
        policy: &JoinPolicy,
        group_cap: Option<usize>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, JoinError> {
        // JOIN-10's messages are the ones that name the node; JOIN-1's field checks ran when
        // the policy was parsed. Checked as a time policy whatever `mode` says, so a caller
        // cannot bypass them.
        let as_time = JoinPolicy {
            mode: JoinMode::Time,
            ..policy.clone()
        };
        let prefix = format!("{node}: ");
        if let Some(problem) = as_time
            .problems(node, parents)
            .into_iter()
            .find(|p| p.message.starts_with(&prefix))
        {
            return Err(JoinError::Policy(problem.message));
        }
        let tolerance = match policy.tolerance_ms {
            Some(ms) if ms > 0.0 => ms / 1000.0,
            _ => {
                return Err(JoinError::Policy(format!(
                    "{node}: time-mode joins require a positive tolerance_ms; pass JoinPolicy(mode='time', tolerance_ms=...)"
                )));
            }
        };
        let base = Base::new(node, parents, policy, group_cap, clock)?;
        let collect = CollectBuffers::new(
            &policy.collect,
            |p| parents.iter().position(|q| q == p),
            policy.max_pending,
            base.timeout,
        );
        let sync_count = (0..parents.len())
            .filter(|&i| !collect.is_collect(i))
            .count();
        Ok(TimeAssembler {
            base,
            tolerance,
            sync_count,
            quorum: policy.quorum,
            collect,
            groups: BTreeMap::new(),
            next_id: 0,
            staged: VecDeque::new(),
        })
    }

    /// Folds one delivery in: a collect sample is buffered (JOIN-14); a sync message
    /// replaces its own earlier delivery (JOIN-13), else joins the nearest pending group
    /// within tolerance that lacks its parent, else seeds a group (JOIN-12).
    pub fn add(&mut self, parent: &str, entry: Entry<M>, handle: H) -> Result<(), JoinError> {
        let index = self.base.parent_index(parent)?;
        let now = self.base.clock.mono();
        let t = entry.event_ts.unwrap_or_else(|| self.base.clock.wall());
        if self.collect.is_collect(index) {
            let sample = Sample {
                t,
                arrival: now,
                entry,
                handle,
            };
            for old in self.collect.push(index, sample) {
                tracing::warn!(node = %self.base.node, "collect buffer for {parent} full; dropping oldest sample");
                self.base.drop_sample(old);
            }
            return Ok(());
        }
        let (entry, handle) = match self.supersede(index, entry, handle) {
            None => return Ok(()),
            Some(unmatched) => unmatched,
        };
        let id = self.nearest_group(index, t).unwrap_or_else(|| {
            let id = self.next_id;
            self.next_id += 1;
            self.groups.insert(
                id,
                TimeGroup {
                    ts: t,
                    first_seen: now,
                    members: Vec::new(),
                },
            );
            id
        });
        if let Some(group) = self.groups.get_mut(&id) {
            group.members.push(Member {
                parent: index,
                entry,
                handle,
            });
            group.ts = py_min(group.ts, t);
        }
        let cap = self.base.group_cap();
        while self.groups.len() > cap {
            let Some((&oldest, _)) = self.groups.first_key_value() else {
                break;
            };
            let reason = format!("working set of {cap} groups exceeded");
            self.evict(oldest, MissingPolicy::Drop, &reason);
        }
        Ok(())
    }

    /// JOIN-17: drops stale collect samples (JOIN-19, even without a timeout); then, with a
    /// timeout, every group that has waited that long is staged if complete or at quorum
    /// (claiming its collect samples now) and evicted per `missing` otherwise.
    pub fn sweep(&mut self) {
        let now = self.base.clock.mono();
        for stale in self.collect.prune(now) {
            self.base.drop_sample(stale);
        }
        let Some(timeout) = self.base.timeout else {
            return;
        };
        let expired: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, g)| now - g.first_seen >= timeout)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            let Some(present) = self.groups.get(&id).map(|g| g.members.len()) else {
                continue;
            };
            let complete = present == self.sync_count;
            let quorum_met = self
                .quorum
                .is_some_and(|q| i64::try_from(present).is_ok_and(|p| p >= q));
            if complete || quorum_met {
                if !complete {
                    tracing::info!(
                        node = %self.base.node,
                        "emitting time group at quorum ({present}/{} sync parents) after {timeout}s timeout",
                        self.sync_count,
                    );
                }
                if let Some(formed) = self.form(id) {
                    self.staged.push_back(formed);
                }
            } else {
                let reason = format!("join timeout ({timeout}s), below quorum");
                self.evict(id, self.base.missing, &reason);
            }
        }
    }

    /// JOIN-16: the first staged group, else the first complete group (insertion order)
    /// whose settle hold has elapsed (JOIN-15). Errs, with the group gone, when the group
    /// time has no microsecond seq (JOIN-20): the caller ends the worker.
    pub fn pop_ready(&mut self) -> Result<Option<ReadyGroup<H, M>>, JoinError> {
        if let Some(formed) = self.staged.pop_front() {
            return self.finish(formed).map(Some);
        }
        let now = self.base.clock.mono();
        let settle = self.collect.settle();
        let ready = self
            .groups
            .iter()
            .find(|(_, g)| {
                g.members.len() == self.sync_count
                    && !(settle != 0.0 && now - g.first_seen < settle)
            })
            .map(|(&id, _)| id);
        match ready.and_then(|id| self.form(id)) {
            Some(formed) => self.finish(formed).map(Some),
            None => Ok(None),
        }
    }

    /// EOS-6: whether a staged group holds `parent` (for a collect parent: a non-empty
    /// claim), a collect parent's buffer is non-empty, or a pending group holds `parent`.
    pub fn has_pending_from(&self, parent: &str) -> bool {
        let Ok(index) = self.base.parent_index(parent) else {
            return false;
        };
        let collect = self.collect.is_collect(index);
        let staged = self.staged.iter().any(|f| {
            if collect {
                f.claims
                    .iter()
                    .any(|(p, samples)| *p == index && !samples.is_empty())
            } else {
                f.members.iter().any(|m| m.parent == index)
            }
        });
        if staged {
            return true;
        }
        if collect {
            return self.collect.holds(index);
        }
        self.groups.values().any(|g| g.holds(index))
    }

    /// JOIN-21a: evicts every pending group (NAK under `missing: error`, else ack, also for
    /// `wait`), counted; staged groups and collect buffers stay. Returns how many.
    pub fn flush_all(&mut self) -> usize {
        let all: Vec<u64> = self.groups.keys().copied().collect();
        let missing = self.base.missing;
        for &id in &all {
            self.evict(
                id,
                missing,
                "end of stream, no missing half can still arrive",
            );
        }
        all.len()
    }

    /// Groups held right now: pending and staged.
    pub fn pending_count(&self) -> usize {
        self.groups.len() + self.staged.len()
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

    /// JOIN-13: if a pending group holds a delivery from `parent` with the same
    /// `(trace_id, seq)`, swaps this one in (retiring the old handle) and returns `None`;
    /// otherwise hands the delivery back.
    fn supersede(&mut self, parent: usize, entry: Entry<M>, handle: H) -> Option<(Entry<M>, H)> {
        let existing = self.groups.values_mut().find_map(|g| {
            g.members.iter_mut().find(|m| {
                m.parent == parent && m.entry.trace_id == entry.trace_id && m.entry.seq == entry.seq
            })
        });
        match existing {
            Some(member) => {
                member.entry = entry;
                let stale = std::mem::replace(&mut member.handle, handle);
                self.base.retire(stale);
                None
            }
            None => Some((entry, handle)),
        }
    }

    /// JOIN-12 (b): the pending group lacking `parent` nearest to `t` within tolerance; the
    /// first in insertion order wins a tie (strict `<` on improvement).
    fn nearest_group(&self, parent: usize, t: f64) -> Option<u64> {
        let mut best: Option<(u64, f64)> = None;
        for (&id, group) in &self.groups {
            if group.holds(parent) {
                continue;
            }
            let diff = (group.ts - t).abs();
            if diff <= self.tolerance && best.is_none_or(|(_, d)| diff < d) {
                best = Some((id, diff));
            }
        }
        best.map(|(id, _)| id)
    }

    /// Takes group `id` out of the pending set and claims its collect samples (JOIN-18).
    fn form(&mut self, id: u64) -> Option<Formed<H, M>> {
        let group = self.groups.remove(&id)?;
        Some(Formed {
            ts: group.ts,
            members: group.members,
            claims: self.collect.claim(group.ts),
        })
    }

    /// JOIN-18, JOIN-20, JOIN-23: lays a formed group out per parent, handles as members in
    /// arrival order then claimed samples, and derives its seq and trace id.
    fn finish(&self, formed: Formed<H, M>) -> Result<ReadyGroup<H, M>, JoinError> {
        let Formed {
            ts,
            members,
            claims,
        } = formed;
        let seq = round_half_even_micros(ts).ok_or_else(|| JoinError::GroupTime {
            node: self.base.node.clone(),
            ts,
        })?;
        let identity: Vec<SyncMember<'_>> = members
            .iter()
            .map(|m| SyncMember {
                parent: &self.base.parents[m.parent],
                producer_name: &m.entry.producer_name,
                trace_id: &m.entry.trace_id,
                seq: m.entry.seq,
            })
            .collect();
        let trace_id = time_group_trace_id(seq, None, &identity);
        let mut inputs: Vec<GroupInput<M>> = self
            .base
            .parents
            .iter()
            .map(|_| GroupInput::Missing)
            .collect();
        let mut handles = Vec::new();
        for member in members {
            inputs[member.parent] = GroupInput::Entry(member.entry);
            handles.push(member.handle);
        }
        for (parent, samples) in claims {
            let mut window = CollectWindow {
                entries: Vec::with_capacity(samples.len()),
                times: Vec::with_capacity(samples.len()),
            };
            for sample in samples {
                window.times.push(sample.t);
                window.entries.push(sample.entry);
                handles.push(sample.handle);
            }
            inputs[parent] = GroupInput::Window(window);
        }
        Ok(ReadyGroup {
            trace_id,
            seq: i128::from(seq),
            event_ts: Some(ts),
            inputs,
            handles,
        })
    }

    /// Removes pending group `id` and settles its handles per `missing` (JOIN-21).
    fn evict(&mut self, id: u64, missing: MissingPolicy, reason: &str) {
        let Some(group) = self.groups.remove(&id) else {
            return;
        };
        let mut had: Vec<&str> = group
            .members
            .iter()
            .map(|m| self.base.parents[m.parent].as_str())
            .collect();
        had.sort_unstable();
        tracing::warn!(
            node = %self.base.node,
            "evicting time group at ts={:.6} (had {had:?}, needed {} sync parents) — {reason}, missing policy={}.",
            group.ts,
            self.sync_count,
            missing_word(missing),
        );
        self.base
            .evict(group.members.into_iter().map(|m| m.handle), missing);
    }
}

#[cfg(test)]
mod tests;
