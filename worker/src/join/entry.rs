//! What goes into an assembler, what comes out of it, and how it fails.
//!
//! Generic over the delivery handle `H` (the broker message later, integers in tests) and the
//! payload `M` (decoded message and metadata): the join only reads lineage and times, so it
//! never needs to know what the node will compute on.

use thiserror::Error;

/// One decoded data envelope, reduced to what the join reads plus an opaque payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<M> {
    /// The envelope's `producer_name`; part of a time group's identity (JOIN-23).
    pub producer_name: String,
    /// The envelope's `trace_id`: the trace-mode group key (JOIN-5) and part of the
    /// time-mode supersede check (JOIN-13) and identity (JOIN-23).
    pub trace_id: String,
    /// The envelope's `seq` (u64 on the wire).
    pub seq: u64,
    /// The producer's event time (wall seconds), if stamped (JOIN-11).
    pub event_ts: Option<f64>,
    /// Everything else (message, metadata, …), carried through untouched.
    pub payload: M,
}

/// What a collect parent contributes to a time group (JOIN-18): every sample within its
/// window of the group's time, stably sorted by time.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectWindow<M> {
    /// The claimed samples, oldest first; the node sees their messages and metadata as lists.
    pub entries: Vec<Entry<M>>,
    /// Each sample's time as the join used it (its `event_ts`, or the wall clock at
    /// ingestion), parallel to `entries`.
    pub times: Vec<f64>,
}

/// One parent's slot in an emitted group.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupInput<M> {
    /// The parent's single member (trace mode; a sync parent in time mode).
    Entry(Entry<M>),
    /// A collect parent's window (time mode); possibly empty.
    Window(CollectWindow<M>),
    /// A sync parent absent from a quorum emission (JOIN-17): message, metadata and event
    /// time are all null for the node.
    Missing,
}

/// A complete input group, handed to the node. Its handles are **unresolved**: the task loop
/// settles them after processing, so ack-after-process holds end to end.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadyGroup<H, M> {
    /// The identity the node's output carries forward: the shared trace id (trace mode) or
    /// the minted `tw-{seq}-{d}` (time mode, JOIN-23).
    pub trace_id: String,
    /// The representative seq: `min(seq)` of the members (trace mode, JOIN-6) or the group
    /// time in microseconds (time mode, JOIN-20). Signed and wide because a time group
    /// before 1970 has a negative seq that a consumer still processes.
    pub seq: i128,
    /// The group's event time: min of the members' (trace) or the group time (time mode).
    pub event_ts: Option<f64>,
    /// One input per parent, in `VF_PARENT_NAMES` order (ENV-3).
    pub inputs: Vec<GroupInput<M>>,
    /// Every delivery backing the group: parent order (trace mode); members in arrival order
    /// then claimed collect samples (time mode).
    pub handles: Vec<H>,
}

/// How a handle the assembler let go of must be settled. The assembler never calls the
/// broker; the caller drains these (the assemblers' `take_resolutions`) and performs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution<H> {
    /// Ack: the message is dropped for good (overflow, timeout with `drop`/`wait`, stale or
    /// overflowing collect sample).
    Ack(H),
    /// NAK without delay: an evicted group under `missing: error`, so the broker redelivers
    /// the halves (and dead-letters them once their budget is spent).
    Nak(H),
    /// Forget locally, no broker call: a redelivery replaced this handle (JOIN-5, JOIN-13),
    /// and the broker message now belongs to the newer delivery.
    Retire(H),
}

/// Why an assembler could not be built or could not emit.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum JoinError {
    /// The policy does not fit these parents (JOIN-10, and the reference's time-mode
    /// tolerance guard), with the reference's exact text. 1.0.4 raises a plain ValueError
    /// here: an untyped failure (exit 1).
    #[error("{0}")]
    Policy(String),
    /// `VF_PARENT_NAMES` names a parent twice: no group could ever be complete.
    #[error("{node}: parent '{parent}' is listed twice in VF_PARENT_NAMES")]
    DuplicateParent {
        /// The joining node.
        node: String,
        /// The repeated parent.
        parent: String,
    },
    /// A delivery arrived from a parent this node does not have.
    #[error("{node}: '{parent}' is not a parent of this node")]
    UnknownParent {
        /// The joining node.
        node: String,
        /// The unknown parent name.
        parent: String,
    },
    /// A time group's time has no microsecond seq (non-finite, or beyond ±2^63 µs). 1.0.4's
    /// emission fails inside receive: the caller MUST end the worker as an untyped failure
    /// (JOIN-20). The group is gone; its handles are left to the broker's ack wait.
    #[error("{node}: cannot emit the time group at ts={ts}: its time has no microsecond seq")]
    GroupTime {
        /// The joining node.
        node: String,
        /// The offending group time.
        ts: f64,
    },
}

/// Python's two-argument `min(a, b)`: `b` only if `b < a`. Unlike [`f64::min`] it keeps a
/// NaN that comes first, so a NaN event time poisons a group's time exactly as in 1.0.4.
pub(crate) fn py_min(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_min_keeps_a_leading_nan() {
        assert!(py_min(f64::NAN, 1.0).is_nan());
        assert_eq!(py_min(1.0, f64::NAN), 1.0);
        assert_eq!(py_min(2.0, 1.0), 1.0);
    }
}
