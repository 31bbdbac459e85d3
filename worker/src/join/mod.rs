//! The join assemblers (protocol §8): turn deliveries from several parents into input groups.
//!
//! Pure, single-threaded components with no I/O: the receive loop folds deliveries in with
//! `add`, expires with `sweep`, takes groups with `pop_ready`, and performs the
//! [`Resolution`]s the assembler records for what it discards. Emitted groups carry their
//! handles unresolved so the task loop settles them only after processing. Both clocks are
//! injected ([`Clock`]), so every timing rule is testable with a [`ManualClock`].
//!
//! - [`TraceAssembler`] — groups by `trace_id` (JOIN-5..9); one parent is a passthrough
//!   (JOIN-3).
//! - [`TimeAssembler`] — groups by event time with sync and collect parents, quorum and
//!   settle (JOIN-10..20, JOIN-23).
//! - [`JoinAssembler`] — whichever of the two the policy's `mode` selects.

mod base;
mod clock;
mod collect;
mod entry;
mod time;
mod trace;

use std::sync::Arc;

use videoflow_core::join::policy::JoinPolicy;
use videoflow_core::model::JoinMode;

pub use clock::{Clock, ManualClock, SystemClock};
pub use entry::{CollectWindow, Entry, GroupInput, JoinError, ReadyGroup, Resolution};
pub use time::TimeAssembler;
pub use trace::TraceAssembler;

/// The assembler a node's join policy selects, behind one interface for the receive loop.
pub enum JoinAssembler<H, M> {
    /// `mode: trace`.
    Trace(TraceAssembler<H, M>),
    /// `mode: time`.
    Time(TimeAssembler<H, M>),
}

impl<H, M> JoinAssembler<H, M> {
    /// Builds the assembler for `policy.mode` over `parents` (`VF_PARENT_NAMES` order).
    /// `group_cap` is the sum of the bound durables' credits (JOIN-5a), `None` before
    /// binding (the policy's working set then). Fails with the reference's text on a time
    /// policy that does not fit the parents (JOIN-10), or on a parent listed twice.
    pub fn new(
        node: &str,
        parents: &[String],
        policy: &JoinPolicy,
        group_cap: Option<usize>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, JoinError> {
        Ok(match policy.mode {
            JoinMode::Trace => Self::Trace(TraceAssembler::new(
                node, parents, policy, group_cap, clock,
            )?),
            JoinMode::Time => {
                Self::Time(TimeAssembler::new(node, parents, policy, group_cap, clock)?)
            }
        })
    }

    /// Folds one delivery from `parent` in; errs only for a parent this node does not have.
    pub fn add(&mut self, parent: &str, entry: Entry<M>, handle: H) -> Result<(), JoinError> {
        match self {
            Self::Trace(a) => a.add(parent, entry, handle),
            Self::Time(a) => a.add(parent, entry, handle),
        }
    }

    /// Applies the timeout (JOIN-8, JOIN-17) and, in time mode, collect retention (JOIN-19).
    pub fn sweep(&mut self) {
        match self {
            Self::Trace(a) => a.sweep(),
            Self::Time(a) => a.sweep(),
        }
    }

    /// The next ready group, if any (JOIN-6, JOIN-16). An error means a time group whose
    /// time has no seq (JOIN-20): the worker must end as an untyped failure.
    pub fn pop_ready(&mut self) -> Result<Option<ReadyGroup<H, M>>, JoinError> {
        match self {
            Self::Trace(a) => Ok(a.pop_ready()),
            Self::Time(a) => a.pop_ready(),
        }
    }

    /// Whether buffered state still holds a delivery from `parent` (EOS-3 (c), EOS-6).
    pub fn has_pending_from(&self, parent: &str) -> bool {
        match self {
            Self::Trace(a) => a.has_pending_from(parent),
            Self::Time(a) => a.has_pending_from(parent),
        }
    }

    /// Whether `has_pending_from` holds for any of `parents`: the "some group holds a
    /// member" condition of the end-of-stream flush (JOIN-21a).
    pub fn holds_any<'a>(&self, parents: impl IntoIterator<Item = &'a str>) -> bool {
        parents.into_iter().any(|p| self.has_pending_from(p))
    }

    /// JOIN-21a: the end-of-stream flush, called by the receive loop once its conditions
    /// hold; evicts every pending group (NAK under `missing: error`, else ack), counted.
    /// Returns how many groups were settled (0 ⇒ log the drain diagnostics instead).
    pub fn flush_all(&mut self) -> usize {
        match self {
            Self::Trace(a) => a.flush_all(),
            Self::Time(a) => a.flush_all(),
        }
    }

    /// Drains the recorded settlements (ack, NAK, retire) for the caller to perform.
    pub fn take_resolutions(&mut self) -> Vec<Resolution<H>> {
        match self {
            Self::Trace(a) => a.take_resolutions(),
            Self::Time(a) => a.take_resolutions(),
        }
    }

    /// Groups evicted so far: the `join_evicted` counter (JOIN-21).
    pub fn evicted(&self) -> u64 {
        match self {
            Self::Trace(a) => a.evicted(),
            Self::Time(a) => a.evicted(),
        }
    }

    /// Groups held right now (health reporting).
    pub fn pending_count(&self) -> usize {
        match self {
            Self::Trace(a) => a.pending_count(),
            Self::Time(a) => a.pending_count(),
        }
    }

    /// How long the oldest pending group has waited (health reporting).
    pub fn oldest_wait_seconds(&self) -> f64 {
        match self {
            Self::Trace(a) => a.oldest_wait_seconds(),
            Self::Time(a) => a.oldest_wait_seconds(),
        }
    }

    /// The current group cap (JOIN-5a).
    pub fn group_cap(&self) -> usize {
        match self {
            Self::Trace(a) => a.group_cap(),
            Self::Time(a) => a.group_cap(),
        }
    }

    /// Sets the cap once the parents' durables are bound (JOIN-5a); at least 1.
    pub fn set_group_cap(&mut self, cap: usize) {
        match self {
            Self::Trace(a) => a.set_group_cap(cap),
            Self::Time(a) => a.set_group_cap(cap),
        }
    }
}
