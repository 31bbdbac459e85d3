//! A ledger write in flight that several parties wait for ([`PendingWrite`]).
//!
//! Why: the received-id notes of EOS-7 (b) start when a batch is fetched, but only what
//! settles a delivery for good must wait for them — so the write runs on its own task from
//! the start, and whoever needs it durable awaits a shared handle to its outcome.

use std::fmt;
use std::future::Future;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use videoflow_core::errors::{ErrorCode, VfError};

/// The outcome of a write started on its own task; clones share it.
#[derive(Clone)]
pub struct PendingWrite(Shared<BoxFuture<'static, Result<(), VfError>>>);

impl PendingWrite {
    /// Starts `write` now, on its own task: it finishes even if nobody waits for it.
    pub fn spawn(write: impl Future<Output = Result<(), VfError>> + Send + 'static) -> Self {
        let task = tokio::spawn(write);
        PendingWrite(
            async move {
                task.await.unwrap_or_else(|e| {
                    Err(VfError::new(
                        ErrorCode::Transient,
                        format!("a ledger write stopped before it finished: {e}"),
                    ))
                })
            }
            .boxed()
            .shared(),
        )
    }

    /// Whether its outcome is known and has been seen by a waiter.
    pub fn is_done(&self) -> bool {
        self.0.peek().is_some()
    }

    /// The write's outcome, once it is known.
    ///
    /// # Errors
    /// The write's own error, or `VF_TRANSIENT` when its task stopped before it finished.
    pub async fn outcome(&self) -> Result<(), VfError> {
        self.0.clone().await
    }
}

impl fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingWrite")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eos_7_a_pending_write_runs_without_a_waiter_and_every_clone_sees_its_outcome() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let w = PendingWrite::spawn(async move {
            let _ = tx.send(());
            Ok(())
        });
        // Nobody has awaited it yet: it ran on its own task all the same.
        tokio::time::timeout(std::time::Duration::from_secs(5), rx)
            .await
            .expect("the write ran without a waiter")
            .expect("the write ran");
        assert!(w.clone().outcome().await.is_ok());
        assert!(w.outcome().await.is_ok());
    }

    #[tokio::test]
    async fn eos_7_a_failed_write_reports_its_error_to_every_waiter() {
        let failed =
            PendingWrite::spawn(async { Err(VfError::new(ErrorCode::Transient, "disk full")) });
        assert!(!failed.is_done(), "nobody has waited yet");
        for w in [failed.clone(), failed.clone()] {
            let err = w.outcome().await.expect_err("the write failed");
            assert!(err.message.contains("disk full"), "{}", err.message);
        }
        assert!(failed.is_done());
    }
}
