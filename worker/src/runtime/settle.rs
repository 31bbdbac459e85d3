//! Settling deliveries: ack after success (DELIV-2), the failure ladder after an error
//! (DELIV-6/7/8, ERR-6), and the join's resolutions. Nothing is ever dropped silently: a
//! dead letter that cannot be published keeps its message (NAK 5 s) and is kept in the run
//! ledger as a pending handoff; a TERM without a dead letter names a record appended to the
//! ledger's terminal log (DELIV-15); under `max_deliver = −1` the ledger counts the attempts
//! (STREAM-15).

use std::time::{Duration, Instant};

use bytes::Bytes;
use videoflow_core::errors::{Disposition, VfError};
use videoflow_core::model::DeliveryMode;

use crate::blob::BlobStore;
use crate::broker::{Broker, DeadLetter, DeadLetterOutcome, DeliveryHandle, publish_dead_letter};
use crate::delivery::{DlqSampler, FailureAction, failure_action, random_jitter};
use crate::join::Resolution;
use crate::store::ledger::{PendingHandoff, TerminalRecord};
use crate::store::{PendingWrite, RunLedger};

/// NAK delay for a dead letter the DLQ did not accept (DELIV-8).
const DLQ_RETRY_DELAY: Duration = Duration::from_secs(5);

/// DELIV-2: acks every handle of a group at once (each waits for its confirmation) and
/// releases the blob share of each confirmed ack (BLOB-6); returns how many were acked
/// (the others were handed back: [`Held::noted_or_handed_back`]).
pub(crate) async fn ack_all(held: &[Held], blob: Option<&BlobStore>) -> u64 {
    match held {
        // A group of one (every single-parent node's) needs no join of futures.
        [one] => u64::from(ack_one(one, blob).await),
        // Boxed here and below: rare paths kept out of the per-message settlement future.
        _ => Box::pin(futures::future::join_all(
            held.iter().map(|h| ack_one(h, blob)),
        ))
        .await
        .into_iter()
        .map(u64::from)
        .sum(),
    }
}

/// Acks one handle once its id is noted as received; an unconfirmed ack keeps its blob
/// obligation (DELIV-1). `false` when it was handed back instead.
async fn ack_one(h: &Held, blob: Option<&BlobStore>) -> bool {
    // Boxed: kept out of the per-message settlement future, and only under a ledger.
    if h.noted.is_some() && !Box::pin(h.noted_or_handed_back()).await {
        return false;
    }
    let confirmed = h.handle.ack().await.is_confirmed();
    if confirmed && let (Some(store), Some(r)) = (blob, &h.blob_ref) {
        Box::pin(store.release(r)).await;
    }
    true
}

/// When any of `held` could not be noted as received, hands every one of them back (DELIV-7
/// delay) and says so; waits for their notes first.
pub(crate) async fn hand_back_if_unnoted(held: &[Held]) -> bool {
    let mut unnoted = false;
    for h in held {
        if let Some(noted) = &h.noted {
            unnoted |= noted.outcome().await.is_err();
        }
    }
    if unnoted {
        for h in held {
            h.hand_back().await;
        }
    }
    unnoted
}

/// One delivery backing a group member: its handle plus what a dead letter needs.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) handle: DeliveryHandle,
    pub(crate) raw: Bytes,
    pub(crate) stream_seq: u64,
    pub(crate) num_delivered: u64,
    pub(crate) blob_ref: Option<String>,
    /// The delivery's message id (`Nats-Msg-Id`, else `{stream}:{seq}`): the key of its
    /// attempt count and terminal record.
    pub(crate) message_id: String,
    /// Its id's note in the received log, when the EOS-7 barrier counts its parent: started
    /// when its batch was fetched, awaited before it is acked, dead-lettered or terminated, so
    /// no id is settled for good before it is durable there and the node never waits for it.
    pub(crate) noted: Option<PendingWrite>,
}

impl Held {
    /// Waits until this delivery's id is durable in its received log. `false` when it could
    /// not be written: the delivery is then handed back (DELIV-7 delay) — settled uncounted,
    /// the barrier would wait for it forever.
    pub(crate) async fn noted_or_handed_back(&self) -> bool {
        let Some(noted) = &self.noted else {
            return true;
        };
        let Err(e) = noted.outcome().await else {
            return true;
        };
        tracing::warn!(message_id = %self.message_id, "received id not recorded, handed back: {}", e.log_line());
        self.hand_back().await;
        false
    }

    /// NAKs it with the DELIV-7 delay, which follows the broker's delivery count.
    pub(crate) async fn hand_back(&self) {
        let delay = crate::delivery::nak_delay_seconds(self.num_delivered, random_jitter());
        self.handle.nak(Some(Duration::from_secs_f64(delay))).await;
    }
}

/// What the loops settled, by outcome (§12 names), kept for the debug log of a loop's end.
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
    /// `VF_MAX_RETRIES + 1`: the budget the ledger enforces when `max_deliver` is −1.
    ledger_budget: i64,
    blob: Option<BlobStore>,
    ledger: RunLedger,
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
        ledger: RunLedger,
    ) -> Self {
        Settler {
            broker,
            flow: cfg.flow_id.clone(),
            run: cfg.run_id.clone(),
            node: cfg.node_name.clone(),
            mode: cfg.delivery,
            max_deliver,
            ledger_budget: cfg.max_retries.max(0).saturating_add(1),
            blob,
            ledger,
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
        if ack_one(h, self.blob.as_ref()).await {
            self.counts.acked += 1;
        } else {
            self.counts.nacked += 1;
        }
    }

    /// [`Held::noted_or_handed_back`], counting a hand-back.
    async fn noted(&mut self, h: &Held) -> bool {
        let noted = h.noted_or_handed_back().await;
        if !noted {
            self.counts.nacked += 1;
        }
        noted
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
            let (counted, budget) = self.attempt_count(h, disposition).await;
            let action =
                match failure_action(disposition, self.mode, counted, budget, random_jitter()) {
                    // DELIV-7: the delay follows the broker's delivery count.
                    FailureAction::Nak { .. } => FailureAction::Nak {
                        delay_seconds: crate::delivery::nak_delay_seconds(
                            h.num_delivered,
                            random_jitter(),
                        ),
                    },
                    other => other,
                };
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
                        self.terminate(h, error, "sampled-out").await;
                    }
                }
            }
        }
    }

    /// The attempt count the ladder judges and the budget it is judged against: the broker's
    /// delivery count under the broker's `max_deliver`, or — when the durable has none (−1)
    /// and the ledger is durable and shared — the ledger's count of failed attempts including
    /// this one (worker_fatal never counts) against `VF_MAX_RETRIES + 1` (STREAM-15). A ledger
    /// that cannot be written — or a durable without a cap bound by a worker whose own ledger
    /// does not read back durable and shared — falls back to the broker's count against the
    /// same budget: a transient failure is never retried without bound.
    async fn attempt_count(&self, h: &Held, disposition: Disposition) -> (u64, i64) {
        if self.max_deliver >= 0 {
            return (h.num_delivered, self.max_deliver);
        }
        if !self.ledger.durable_shared() {
            return (h.num_delivered, self.ledger_budget);
        }
        match self.ledger.record_attempt(&h.message_id, disposition).await {
            Ok(n) if disposition == Disposition::WorkerFatal => (n + 1, self.ledger_budget),
            Ok(n) => (n.max(1), self.ledger_budget),
            Err(e) => {
                tracing::warn!(message_id = %h.message_id, "attempt not counted in the ledger: {}", e.log_line());
                (h.num_delivered, self.ledger_budget)
            }
        }
    }

    /// DELIV-15: TERM with a record reference — a terminal record appended to the ledger. A
    /// record that cannot be written keeps the message (NAK 5 s): a TERM never goes unrecorded.
    async fn terminate(&mut self, h: &Held, error: &VfError, reason: &str) {
        if !self.noted(h).await {
            return;
        }
        let record = TerminalRecord {
            message_id: &h.message_id,
            stream_seq: h.stream_seq,
            attempt: h.num_delivered,
            code: error.code.code(),
            reason,
        };
        match self.ledger.record_terminal(&record).await {
            Ok(reference) => {
                tracing::info!(record = %reference, message_id = %h.message_id, stream_seq = h.stream_seq, attempt = h.num_delivered, code = %error.code, reason, "terminated");
                h.handle.term().await;
                self.counts.terminated += 1;
            }
            Err(e) => {
                tracing::error!(
                    stream_seq = h.stream_seq,
                    "terminal record not written; keeping the message: {}",
                    e.log_line()
                );
                h.handle.nak(Some(DLQ_RETRY_DELAY)).await;
                self.counts.nacked += 1;
            }
        }
    }

    /// DELIV-8 at start: dead letters an earlier process could not publish, re-published
    /// under their ids; each accepted one is forgotten. Returns how many were accepted.
    pub(crate) async fn retry_handoffs(&mut self) -> usize {
        let pending = match self.ledger.pending_handoffs().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("pending dead-letter handoffs unreadable: {}", e.log_line());
                return 0;
            }
        };
        let mut accepted = 0;
        for handoff in pending {
            let letter = letter_from_handoff(&self.flow, &self.run, &self.node, &handoff);
            match publish_dead_letter(&self.broker, &letter).await {
                DeadLetterOutcome::Accepted { msg_id, .. } => {
                    tracing::info!(%msg_id, "pending dead letter handed off");
                    let _ = self.ledger.clear_pending_handoff(&handoff.record_id).await;
                    accepted += 1;
                }
                DeadLetterOutcome::NotAccepted { msg_id, reason } => {
                    tracing::warn!(%msg_id, %reason, "pending dead letter still not accepted");
                }
            }
        }
        accepted
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
        if !self.noted(h).await {
            return;
        }
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
                if h.num_delivered > 1 {
                    // An earlier attempt may have left a handoff for this id.
                    let _ = self.ledger.clear_pending_handoff(&msg_id).await;
                }
            }
            DeadLetterOutcome::NotAccepted { msg_id, reason } => {
                tracing::error!(%msg_id, %reason, "dead letter not accepted; keeping the message");
                let headers = letter.headers().into_iter().collect();
                if let Err(e) = self
                    .ledger
                    .record_pending_handoff(&msg_id, &headers, &letter.raw)
                    .await
                {
                    tracing::warn!(%msg_id, "pending handoff not recorded: {}", e.log_line());
                }
                h.handle.nak(Some(DLQ_RETRY_DELAY)).await;
                self.counts.nacked += 1;
            }
        }
    }
}

/// A dead letter rebuilt from a pending handoff (its DELIV-8 headers and raw bytes); the
/// original's stream sequence is the record id's last field.
fn letter_from_handoff(flow: &str, run: &str, node: &str, h: &PendingHandoff) -> DeadLetter {
    let header = |name: &str| h.headers.get(name).cloned().unwrap_or_default();
    let remedy = header("VF-Remedy");
    DeadLetter {
        flow: flow.to_owned(),
        run: run.to_owned(),
        node: node.to_owned(),
        code: header("VF-Code"),
        disposition: Disposition::parse(&header("VF-Disposition")),
        error: header("VF-Error"),
        remedy: (!remedy.is_empty()).then_some(remedy),
        num_delivered: header("VF-Num-Delivered").parse().unwrap_or(0),
        stream_seq: h
            .record_id
            .rsplit(':')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        raw: Bytes::from(h.raw.clone()),
    }
}
