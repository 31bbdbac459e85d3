//! State both assemblers share: the parents, the clock, the group cap (JOIN-5a) and the
//! outbox of resolutions with the `join_evicted` count (JOIN-21).
//!
//! Kept in one place so the two modes settle discarded handles identically: eviction is the
//! only thing the missing policy changes, and overflow is always a drop (JOIN-9).

use std::sync::Arc;

use videoflow_core::join::policy::JoinPolicy;
use videoflow_core::model::MissingPolicy;

use super::clock::Clock;
use super::entry::{JoinError, Resolution};

/// Parents, clock, cap and outbox of one assembler.
pub(crate) struct Base<H> {
    /// The joining node, for messages.
    pub(crate) node: String,
    /// `VF_PARENT_NAMES`, in order; an input's index is its position here.
    pub(crate) parents: Vec<String>,
    /// What an expired group becomes (JOIN-21).
    pub(crate) missing: MissingPolicy,
    /// The join timeout; always `None` under `missing: wait` (JOIN-1).
    pub(crate) timeout: Option<f64>,
    /// Where mono and wall readings come from.
    pub(crate) clock: Arc<dyn Clock>,
    group_cap: usize,
    resolutions: Vec<Resolution<H>>,
    evicted: u64,
}

impl<H> Base<H> {
    /// Checks the parent list and resolves the cap: `group_cap` when the caller derived it
    /// from the bound durables, else the policy's working set (JOIN-5a).
    pub(crate) fn new(
        node: &str,
        parents: &[String],
        policy: &JoinPolicy,
        group_cap: Option<usize>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, JoinError> {
        for (i, parent) in parents.iter().enumerate() {
            if parents[..i].contains(parent) {
                return Err(JoinError::DuplicateParent {
                    node: node.to_owned(),
                    parent: parent.clone(),
                });
            }
        }
        let working_set = usize::try_from(policy.working_set(parents.len())).unwrap_or(usize::MAX);
        let timeout = match policy.missing {
            MissingPolicy::Wait => None,
            _ => policy.timeout_seconds,
        };
        Ok(Base {
            node: node.to_owned(),
            parents: parents.to_vec(),
            missing: policy.missing,
            timeout,
            clock,
            group_cap: group_cap.unwrap_or(working_set).max(1),
            resolutions: Vec::new(),
            evicted: 0,
        })
    }

    /// The input index of `parent`, or the error a delivery from a stranger deserves.
    pub(crate) fn parent_index(&self, parent: &str) -> Result<usize, JoinError> {
        self.parents
            .iter()
            .position(|p| p == parent)
            .ok_or_else(|| JoinError::UnknownParent {
                node: self.node.clone(),
                parent: parent.to_owned(),
            })
    }

    /// How many incomplete groups may be held before the oldest is dropped (JOIN-5a).
    pub(crate) fn group_cap(&self) -> usize {
        self.group_cap
    }

    /// Replaces the cap once the durables are bound; at least 1, as in 1.0.4.
    pub(crate) fn set_group_cap(&mut self, cap: usize) {
        self.group_cap = cap.max(1);
    }

    /// Evicts one group's handles: NAK under `error`, else ack; counts one `join_evicted`.
    pub(crate) fn evict(&mut self, handles: impl IntoIterator<Item = H>, missing: MissingPolicy) {
        self.evicted += 1;
        for handle in handles {
            self.resolutions.push(match missing {
                MissingPolicy::Error => Resolution::Nak(handle),
                MissingPolicy::Drop | MissingPolicy::Wait => Resolution::Ack(handle),
            });
        }
    }

    /// Drops one message that no group holds (a stale or overflowing collect sample): ack,
    /// not counted as an eviction.
    pub(crate) fn drop_sample(&mut self, handle: H) {
        self.resolutions.push(Resolution::Ack(handle));
    }

    /// Forgets a handle a redelivery replaced (JOIN-5, JOIN-13).
    pub(crate) fn retire(&mut self, handle: H) {
        self.resolutions.push(Resolution::Retire(handle));
    }

    /// Hands the pending resolutions to the caller, oldest first.
    pub(crate) fn take_resolutions(&mut self) -> Vec<Resolution<H>> {
        std::mem::take(&mut self.resolutions)
    }

    /// Seconds the oldest of `first_seen` (mono readings) has waited; 0 when there is none.
    pub(crate) fn oldest_wait_seconds(&self, first_seen: impl Iterator<Item = f64>) -> f64 {
        let now = self.clock.mono();
        first_seen
            .reduce(f64::min)
            .map_or(0.0, |first| (now - first).max(0.0))
    }

    /// Groups evicted so far (`join_evicted`).
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}
