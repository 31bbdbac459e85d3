//! The error taxonomy (ERR-*). Being written; `Disposition` is fixed here first because the
//! envelope codec depends on it.

/// What a failure means for the data and the worker (ERR-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Disposition {
    /// The data is bad: dead-letter it, never retry.
    Poison,
    /// The world blipped: retry.
    Transient,
    /// This worker is sick: hand the input back and stop.
    WorkerFatal,
}

impl Disposition {
    /// The protocol's word: `poison`, `transient` or `worker_fatal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Poison => "poison",
            Disposition::Transient => "transient",
            Disposition::WorkerFatal => "worker_fatal",
        }
    }

    /// Parses the protocol's word; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "poison" => Some(Disposition::Poison),
            "transient" => Some(Disposition::Transient),
            "worker_fatal" => Some(Disposition::WorkerFatal),
            _ => None,
        }
    }
}
