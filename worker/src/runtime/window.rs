//! The in-flight window: work whose first half is done (an output on the wire) and whose
//! second half (its receipt, then the input acks) runs on its own task while the loop goes
//! on with the next input — the ideal hop's pipelined shape.
//!
//! Why a window and not a fire-and-forget spawn: every entry still owns something the loop
//! must account for (a group's handles to fail, an id to count towards the terminator's seq,
//! EOS-7). Entries are taken back **in order**, so counting stays as serial as before, and the
//! loop waits for the front whenever the window is full. Bounded by a count and by the bytes
//! its entries keep alive (a payload waiting for its receipt is kept for a resend).

use std::collections::VecDeque;
use std::future::Future;

use tokio::task::JoinHandle;
use videoflow_core::errors::{ErrorCode, VfError};

/// Entries in flight at most.
pub(crate) const MAX_IN_FLIGHT: usize = 128;
/// Entries in flight at most for a node whose durable grants more credit than this: beyond
/// it the per-entry task bookkeeping costs more than another round trip saves.
pub(crate) const MAX_CREDIT_WINDOW: usize = 4096;
/// Payload bytes kept alive by entries in flight at most (at least one entry always fits).
pub(crate) const MAX_IN_FLIGHT_BYTES: u64 = 16 * 1024 * 1024;

/// Spawned halves, each with what the loop needs once it ends.
pub(crate) struct Window<M, T> {
    entries: VecDeque<Entry<M, T>>,
    bytes: u64,
    max_entries: usize,
    max_bytes: u64,
}

struct Entry<M, T> {
    meta: M,
    bytes: u64,
    task: JoinHandle<Result<T, VfError>>,
}

impl<M, T: Send + 'static> Window<M, T> {
    /// A window of at most `max_entries` entries (at least 1) and `max_bytes` bytes.
    pub(crate) fn new(max_entries: usize, max_bytes: u64) -> Self {
        Window {
            entries: VecDeque::new(),
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    /// The window the loops use: [`MAX_IN_FLIGHT`], or 1 under a conformance fault schedule,
    /// whose barriers expect one publication at a time, in order (ENV-16/17).
    pub(crate) fn for_loops() -> Self {
        let entries = if crate::faults::installed().is_some() {
            1
        } else {
            MAX_IN_FLIGHT
        };
        Window::new(entries, MAX_IN_FLIGHT_BYTES)
    }

    /// The window of a single-parent node's loop: its replica's share of the bound durable's
    /// credit (STREAM-15a), at most [`MAX_CREDIT_WINDOW`]; 1 under a conformance fault
    /// schedule, as [`Window::for_loops`].
    pub(crate) fn for_credit(share: usize) -> Self {
        let entries = if crate::faults::installed().is_some() {
            1
        } else {
            share.clamp(1, MAX_CREDIT_WINDOW)
        };
        Window::new(entries, MAX_IN_FLIGHT_BYTES)
    }

    /// Whether the loop must take the front back before it adds another entry.
    pub(crate) fn is_full(&self) -> bool {
        !self.entries.is_empty()
            && (self.entries.len() >= self.max_entries || self.bytes >= self.max_bytes)
    }

    /// Spawns `work` and remembers `meta` for when it ends.
    pub(crate) fn push<F>(&mut self, meta: M, bytes: u64, work: F)
    where
        F: Future<Output = Result<T, VfError>> + Send + 'static,
    {
        self.bytes = self.bytes.saturating_add(bytes);
        self.entries.push_back(Entry {
            meta,
            bytes,
            task: tokio::spawn(work),
        });
    }

    /// The front entry once it has ended, without waiting; `None` while it runs.
    pub(crate) async fn ready(&mut self) -> Option<(M, Result<T, VfError>)> {
        if self.entries.front().is_some_and(|e| e.task.is_finished()) {
            self.next().await
        } else {
            None
        }
    }

    /// Waits for the front entry; `None` when the window is empty.
    pub(crate) async fn next(&mut self) -> Option<(M, Result<T, VfError>)> {
        let entry = self.entries.pop_front()?;
        self.bytes = self.bytes.saturating_sub(entry.bytes);
        let result = entry.task.await.unwrap_or_else(|e| {
            Err(VfError::new(
                ErrorCode::Unknown,
                format!("an in-flight settlement task ended abnormally: {e}"),
            ))
        });
        Some((entry.meta, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_come_back_in_order_and_bound_the_window() {
        let mut w: Window<u32, u32> = Window::new(2, u64::MAX);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        w.push(1, 0, async move {
            let _ = rx.await;
            Ok(10)
        });
        w.push(2, 0, async { Ok(20) });
        assert!(w.is_full());
        tokio::task::yield_now().await;
        // The second ended first, but the front still runs: nothing is ready.
        assert!(w.ready().await.is_none());
        let _ = tx.send(());
        let (m, r) = w.next().await.expect("front");
        assert_eq!((m, r.expect("ok")), (1, 10));
        let (m, r) = w.next().await.expect("second");
        assert_eq!((m, r.expect("ok")), (2, 20));
        assert!(w.next().await.is_none());
    }

    #[tokio::test]
    async fn bytes_bound_the_window_but_one_entry_always_fits() {
        let mut w: Window<(), ()> = Window::new(100, 10);
        assert!(!w.is_full());
        w.push((), 50, async { Ok(()) });
        assert!(w.is_full());
        let _ = w.next().await;
        assert!(!w.is_full());
    }

    #[tokio::test]
    async fn a_panicked_task_is_an_error_not_a_crash() {
        let mut w: Window<(), ()> = Window::new(1, u64::MAX);
        w.push((), 0, async { panic!("boom") });
        let (_, r) = w.next().await.expect("entry");
        assert_eq!(r.expect_err("error").code, ErrorCode::Unknown);
    }
}
