//! The held set: every delivery this receiver holds — parked in a local queue or handed out —
//! until it is resolved, with its lease renewal schedule and its size.
//!
//! Why one set for both states: keepalive (DELIV-3), close's hand-back (DELIV-1), supersede
//! and the byte budget all need "what do I still owe the broker", and a delivery moves from
//! parked to handed out without the broker noticing. Keying by (subscription, stream
//! sequence) makes a redelivery of a held message replace the older entry, so the older
//! handle's later settlement is a no-op (its token no longer matches).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_nats::Subject;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The keepalive period of a subscription: `max(1 s, ack_wait / 3)` (DELIV-3, per
/// subscription as recommended, so held terminators renew every 10 s).
pub fn keepalive_period(ack_wait: Duration) -> Duration {
    (ack_wait / 3).max(Duration::from_secs(1))
}

/// Identifies one held message: its subscription and its stream sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct HoldKey {
    pub(crate) subscription: usize,
    pub(crate) stream_seq: u64,
}

#[derive(Debug)]
struct Entry {
    token: u64,
    reply: Subject,
    size: u64,
    period: Duration,
    next_renewal: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<HoldKey, Entry>,
    resident: u64,
}

/// The set itself; shared by the pull loops, the keepalive ticker and every handle.
#[derive(Debug, Default)]
pub(crate) struct HeldSet {
    inner: Mutex<Inner>,
    next_token: AtomicU64,
    /// Woken whenever bytes are released, for pull loops waiting on the byte budget.
    pub(crate) released: Notify,
}

impl HeldSet {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere never leaves the map half-updated (every update is one call),
        // so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds a just-fetched delivery; returns its token and whether it superseded an older
    /// attempt of the same message.
    pub(crate) fn insert(
        &self,
        key: HoldKey,
        reply: Subject,
        size: u64,
        period: Duration,
    ) -> (u64, bool) {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let entry = Entry {
            token,
            reply,
            size,
            period,
            next_renewal: Instant::now() + period,
        };
        let mut inner = self.lock();
        inner.resident = inner.resident.saturating_add(size);
        let previous = inner.entries.insert(key, entry);
        if let Some(old) = &previous {
            inner.resident = inner.resident.saturating_sub(old.size);
        }
        drop(inner);
        if previous.is_some() {
            self.released.notify_waiters();
        }
        (token, previous.is_some())
    }

    /// Resolves an entry: removes it if `token` is still the current attempt and returns its
    /// reply subject (where the settlement goes); `None` when already resolved or superseded.
    pub(crate) fn take(&self, key: HoldKey, token: u64) -> Option<Subject> {
        let mut inner = self.lock();
        if inner.entries.get(&key).is_none_or(|e| e.token != token) {
            return None;
        }
        let entry = inner.entries.remove(&key)?;
        inner.resident = inner.resident.saturating_sub(entry.size);
        drop(inner);
        self.released.notify_waiters();
        Some(entry.reply)
    }

    /// The reply subject of a still-held attempt, its renewal pushed back a full period
    /// (an explicit `in_progress` counts as a renewal).
    pub(crate) fn renew(&self, key: HoldKey, token: u64) -> Option<Subject> {
        let mut inner = self.lock();
        let entry = inner.entries.get_mut(&key).filter(|e| e.token == token)?;
        entry.next_renewal = Instant::now() + entry.period;
        Some(entry.reply.clone())
    }

    /// Whether this attempt is still held.
    pub(crate) fn holds(&self, key: HoldKey, token: u64) -> bool {
        self.lock()
            .entries
            .get(&key)
            .is_some_and(|e| e.token == token)
    }

    /// Every entry whose renewal is due at `now`, rescheduled one period on.
    pub(crate) fn due(&self, now: Instant) -> Vec<Subject> {
        let mut inner = self.lock();
        inner
            .entries
            .values_mut()
            .filter(|e| e.next_renewal <= now)
            .map(|e| {
                e.next_renewal = now + e.period;
                e.reply.clone()
            })
            .collect()
    }

    /// Removes everything still held and returns the reply subjects (close: hand back).
    pub(crate) fn drain(&self) -> Vec<Subject> {
        let mut inner = self.lock();
        inner.resident = 0;
        let replies = inner.entries.drain().map(|(_, e)| e.reply).collect();
        drop(inner);
        self.released.notify_waiters();
        replies
    }

    /// Bytes held unresolved (parked or handed out).
    pub(crate) fn resident(&self) -> u64 {
        self.lock().resident
    }

    /// How many deliveries are held.
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seq: u64) -> HoldKey {
        HoldKey {
            subscription: 0,
            stream_seq: seq,
        }
    }

    #[test]
    fn deliv_3_period() {
        assert_eq!(
            keepalive_period(Duration::from_secs(60)),
            Duration::from_secs(20)
        );
        assert_eq!(
            keepalive_period(Duration::from_secs(30)),
            Duration::from_secs(10)
        );
        assert_eq!(
            keepalive_period(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }

    #[tokio::test]
    async fn deliv_1_resolve_once_and_supersede() {
        let held = HeldSet::default();
        let (t1, superseded) = held.insert(key(7), "r1".into(), 10, Duration::from_secs(1));
        assert!(!superseded);
        assert_eq!(held.resident(), 10);
        let (t2, superseded) = held.insert(key(7), "r2".into(), 4, Duration::from_secs(1));
        assert!(superseded);
        assert_eq!(held.resident(), 4);
        assert!(
            held.take(key(7), t1).is_none(),
            "the older attempt is stale"
        );
        assert_eq!(held.take(key(7), t2).as_deref(), Some("r2"));
        assert!(held.take(key(7), t2).is_none(), "resolves at most once");
        assert_eq!(held.resident(), 0);
        assert_eq!(held.len(), 0);
    }

    #[tokio::test]
    async fn deliv_3_due_reschedules() {
        let held = HeldSet::default();
        held.insert(key(1), "r".into(), 1, Duration::from_secs(1));
        let now = Instant::now();
        assert!(held.due(now).is_empty());
        let later = now + Duration::from_secs(2);
        assert_eq!(held.due(later).len(), 1);
        assert!(held.due(later).is_empty(), "rescheduled one period on");
    }
}
