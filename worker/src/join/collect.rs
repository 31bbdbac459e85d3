//! Collect buffers of a time join (JOIN-14, JOIN-18, JOIN-19): high-rate parents (an IMU
//! beside a camera) whose samples join a group many-to-one instead of one-to-one.
//!
//! Each collect parent buffers its samples until a group claims those within its window. The
//! buffers are bounded twice — by count (`cap`) and by age (`retention`) — so a stalled sync
//! parent cannot make them grow forever.

use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};

use super::entry::Entry;

/// Samples a collect buffer keeps at least, whatever `max_pending` says (JOIN-14).
const MIN_COLLECT_CAP: i64 = 1024;
/// Retention base when the join has no timeout (JOIN-19).
const DEFAULT_RETENTION_SECONDS: f64 = 30.0;

/// One buffered collect sample.
pub(crate) struct Sample<H, M> {
    /// Its time: `event_ts`, or the wall clock at ingestion (JOIN-11).
    pub(crate) t: f64,
    /// Mono time of arrival, for retention (JOIN-19).
    pub(crate) arrival: f64,
    /// The delivery.
    pub(crate) entry: Entry<M>,
    /// Its handle.
    pub(crate) handle: H,
}

/// One collect parent's buffer.
struct Buffer<H, M> {
    /// Input index of the parent.
    parent: usize,
    /// `window(P)` in seconds.
    window: f64,
    samples: VecDeque<Sample<H, M>>,
}

/// The samples one collect parent contributes to a group: its input index and the claimed
/// samples, stably sorted by time.
pub(crate) type Claim<H, M> = (usize, Vec<Sample<H, M>>);

/// Every collect parent's buffer, in `collect` key order.
pub(crate) struct CollectBuffers<H, M> {
    buffers: Vec<Buffer<H, M>>,
    /// `max(1024, 16 × max_pending)` samples per parent.
    cap: usize,
    /// `(timeout or 30) + settle` seconds.
    retention: f64,
    /// `max(windows)` or 0: how long a complete group waits for trailing samples (JOIN-15).
    settle: f64,
}

impl<H, M> CollectBuffers<H, M> {
    /// Buffers for the `collect` windows (ms); `index_of` maps a parent name to its input
    /// index (every key is a parent: JOIN-10 was checked before).
    pub(crate) fn new(
        collect: &BTreeMap<String, f64>,
        index_of: impl Fn(&str) -> Option<usize>,
        max_pending: i64,
        timeout: Option<f64>,
    ) -> Self {
        let buffers: Vec<Buffer<H, M>> = collect
            .iter()
            .filter_map(|(parent, ms)| {
                index_of(parent).map(|index| Buffer {
                    parent: index,
                    window: ms / 1000.0,
                    samples: VecDeque::new(),
                })
            })
            .collect();
        let settle = buffers
            .iter()
            .map(|b| b.window)
            .reduce(|a, b| if b > a { b } else { a })
            .unwrap_or(0.0);
        let cap = max_pending.saturating_mul(16).max(MIN_COLLECT_CAP);
        CollectBuffers {
            buffers,
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            retention: timeout.unwrap_or(DEFAULT_RETENTION_SECONDS) + settle,
            settle,
        }
    }

    /// The settle hold in seconds (JOIN-15).
    pub(crate) fn settle(&self) -> f64 {
        self.settle
    }

    /// Whether input `parent` is a collect parent.
    pub(crate) fn is_collect(&self, parent: usize) -> bool {
        self.buffers.iter().any(|b| b.parent == parent)
    }

    /// JOIN-14: appends a sample to its parent's buffer (a no-op for a sync parent); returns
    /// the handles of the oldest samples pushed out by the cap, which the caller acks.
    pub(crate) fn push(&mut self, parent: usize, sample: Sample<H, M>) -> Vec<H> {
        let cap = self.cap;
        let Some(buffer) = self.buffers.iter_mut().find(|b| b.parent == parent) else {
            return Vec::new();
        };
        buffer.samples.push_back(sample);
        let mut overflow = Vec::new();
        while buffer.samples.len() > cap {
            if let Some(old) = buffer.samples.pop_front() {
                overflow.push(old.handle);
            }
        }
        overflow
    }

    /// JOIN-19: removes every sample older than the retention (strictly) and returns their
    /// handles, which the caller acks.
    pub(crate) fn prune(&mut self, now: f64) -> Vec<H> {
        let retention = self.retention;
        let mut stale = Vec::new();
        for buffer in &mut self.buffers {
            if !buffer.samples.iter().any(|s| now - s.arrival > retention) {
                continue;
            }
            let (old, kept): (VecDeque<_>, VecDeque<_>) = buffer
                .samples
                .drain(..)
                .partition(|s| now - s.arrival > retention);
            buffer.samples = kept;
            stale.extend(old.into_iter().map(|s| s.handle));
        }
        stale
    }

    /// JOIN-18: per collect parent, removes every sample with `|t − ts| ≤ window`
    /// (inclusive) and returns them stably sorted by `t`.
    pub(crate) fn claim(&mut self, ts: f64) -> Vec<Claim<H, M>> {
        self.buffers
            .iter_mut()
            .map(|buffer| {
                let window = buffer.window;
                let (claimed, rest): (VecDeque<_>, VecDeque<_>) = buffer
                    .samples
                    .drain(..)
                    .partition(|s| (s.t - ts).abs() <= window);
                buffer.samples = rest;
                let mut claimed: Vec<_> = claimed.into();
                // Claimed times are finite (within a window of a group time), so the
                // fallback never decides an order; sort_by is stable, like Python's sort.
                claimed.sort_by(|a, b| a.t.partial_cmp(&b.t).unwrap_or(Ordering::Equal));
                (buffer.parent, claimed)
            })
            .collect()
    }

    /// Whether collect parent `parent` has buffered samples (EOS-6).
    pub(crate) fn holds(&self, parent: usize) -> bool {
        self.buffers
            .iter()
            .any(|b| b.parent == parent && !b.samples.is_empty())
    }
}
