//! Settling deliveries: ack after success (DELIV-2), the failure ladder after an error
//! (DELIV-6/7/8, ERR-6), and the join's resolutions. Nothing is ever dropped silently: a
//! dead letter that cannot be published keeps its message (NAK 5 s).

use std::time::{Duration, Instant};

use bytes::Bytes;
use videoflow_core::errors::{Disposition, VfError};
use videoflow_core::model::DeliveryMode;

use crate::blob::BlobStore;
use crate::broker::{Broker, DeadLetter, DeadLetterOutcome, DeliveryHandle, publish_dead_letter};
use crate::delivery::{DlqSampler, FailureAction, failure_action, random_jitter};
use crate::join::Resolution;

/// NAK delay for a dead letter the DLQ did not accept (DELIV-8).
const DLQ_RETRY_DELAY: Duration = Duration::from_secs(5);

/// DELIV-2: acks every handle of a group at once (each waits for its confirmation) and
/// releases the blob share of each confirmed ack (BLOB-6); returns how many were acked.
pub(crate) async fn ack_all(held: &[Held], blob: Option<&BlobStore>) -> u64 {
    futures::future::join_all(held.iter().map(|h| ack_one(h, blob))).await;
    u64::try_from(held.len()).unwrap_or(u64::MAX)
}

/// Acks one handle; an unconfirmed ack keeps its blob obligation (DELIV-1).
async fn ack_one(h: &Held, blob: Option<&BlobStore>) {
    let confirmed = h.handle.ack().await.is_confirmed();
    if confirmed && let (Some(store), Some(r)) = (blob, &h.blob_ref) {
        store.release(r).await;
    }
}

/// One delivery backing a group member: its handle plus what a dead letter needs.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) handle: DeliveryHandle,
    pub(crate) raw: Bytes,
    pub(crate) stream_seq: u64,
    pub(crate) num_delivered: u64,
    pub(crate) blob_ref: Option<String>,
}

/// Counters the loops report (§12 names; the health server reads them with issue #4).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) acked: u64,
    pub(crate) dead_lettered: u64,
    pub(crate) terminated: u64,
    pub(crate) nacked: u64,
    pub(crate) undecodable: u64,
}

/// The node's settlement policy and its broker side.
pub(crate) struct Settler {
    broker: Broker,
    flow: String,
    run: String,
    node: String,
    mode: DeliveryMode,
    max_deliver: i64,
    blob: Option<BlobStore>,
    sampler: DlqSampler,
    started: Instant,
    pub(crate) counts: Counts,
}

impl Settler {
    pub(crate) fn new(
        broker: Broker,
        cfg: &crate::config::WorkerConfig,
        max_deliver: i64,
        blob: Option<BlobStore>,
    ) -> Self {
        Settler {
            broker,
            flow: cfg.flow_id.clone(),
            run: cfg.run_id.clone(),
            node: cfg.node_name.clone(),
            mode: cfg.delivery,
            max_deliver,
            blob,
            sampler: DlqSampler::default(),
            started: Instant::now(),
            counts: Counts::default(),
        }
    }

    /// The payload store whose shares confirmed acks release (BLOB-6).
    pub(crate) fn blob(&self) -> Option<BlobStore> {
        self.blob.clone()
    }

    async fn ack(&mut self, h: &Held) {
        ack_one(h, self.blob.as_ref()).await;
        self.counts.acked += 1;
    }

    /// Carries out the join's decisions (JOIN-5/9/21).
    pub(crate) async fn resolve(&mut self, resolutions: Vec<Resolution<Held>>) {
        for r in resolutions {
            match r {
                Resolution::Ack(h) => self.ack(&h).await,
                Resolution::Nak(h) => {
                    h.handle.nak(None).await;
                    self.counts.nacked += 1;
                }
                Resolution::Retire(h) => {
                    h.handle.retire();
                }
            }
        }
    }

    /// The failure ladder (DELIV-6) for every handle of a failed group. `error` already
    /// carries the disposition it is handled with (ERR-2).
    pub(crate) async fn fail(&mut self, held: &[Held], error: &VfError, disposition: Disposition) {
        for h in held {
            let action = failure_action(
                disposition,
                self.mode,
                h.num_delivered,
                self.max_deliver,
                random_jitter(),
            );
            match action {
                FailureAction::Nak { delay_seconds } => {
                    h.handle
                        .nak(Some(Duration::from_secs_f64(delay_seconds)))
                        .await;
                    self.counts.nacked += 1;
                }
                FailureAction::DeadLetter => {
                    if disposition != Disposition::Poison {
                        // The at-least-once retry budget ran out (HEALTH-3 `exhausted`).
                        crate::health::record(|m| {
                            m.record_drop(crate::health::metrics::DROP_EXHAUSTED, 1);
                        });
                    }
                    self.dead_letter(h, error).await;
                }
                FailureAction::SampledDeadLetter => {
                    let now = self.started.elapsed().as_secs_f64();
                    if self.sampler.admit(error.code.code(), now) {
                        self.dead_letter(h, error).await;
                    } else {
                        tracing::warn!(code = %error.code, stream_seq = h.stream_seq, "dead letter sampled out: {}", error.message);
                        h.handle.term().await;
                        self.counts.terminated += 1;
                    }
                }
            }
        }
    }

    /// NAK without counting a failure (worker_fatal, SIGTERM hand-back).
    pub(crate) async fn nak_all(&mut self, held: &[Held]) {
        for h in held {
            h.handle.nak(None).await;
            self.counts.nacked += 1;
        }
    }

    /// DELIV-8: the original bytes to the DLQ, then TERM; not accepted ⇒ NAK 5 s, never lost.
    async fn dead_letter(&mut self, h: &Held, error: &VfError) {
        let letter = DeadLetter::from_error(
            &self.flow,
            &self.run,
            &self.node,
            error,
            h.num_delivered,
            h.stream_seq,
            h.raw.clone(),
        );
        match publish_dead_letter(&self.broker, &letter).await {
            DeadLetterOutcome::Accepted { msg_id, .. } => {
                tracing::warn!(code = %error.code, %msg_id, "dead-lettered: {}", error.message);
                h.handle.term().await;
                self.counts.dead_lettered += 1;
            }
            DeadLetterOutcome::NotAccepted { msg_id, reason } => {
                tracing::error!(%msg_id, %reason, "dead letter not accepted; keeping the message");
                h.handle.nak(Some(DLQ_RETRY_DELAY)).await;
                self.counts.nacked += 1;
            }
        }
    }
}
