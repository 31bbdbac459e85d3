//! Publishing this node's output: encode once, offload above the inline limit, publish under
//! the content-derived id, count what was stored (WIRE-4, BLOB-1/2, MSGID-1, DELIV-4/5, EOS-7).

use bytes::Bytes;
use futures::FutureExt;
use videoflow_core::envelope::{self, Envelope, Payload, WireError};
use videoflow_core::errors::VfError;

use crate::blob::{self, BlobStore};
use crate::broker::{InFlight, Publication, PublishMode, PublishOutcome, Publisher, StopFlag};
use crate::emit::Emitter;
use crate::faults::{self, Barrier};
use crate::health::{self, metrics};
use crate::store::RunLedger;
use crate::store::ledger::Accepted;
use videoflow_core::value::Value;

/// Everything needed to put one envelope on the broker.
pub(crate) struct Output {
    pub(crate) emitter: Emitter,
    publisher: Publisher,
    mode: PublishMode,
    blob: Option<BlobStore>,
    threshold: usize,
    stop: StopFlag,
    /// Live publications the broker refused (DELIV-4), for the summary and metrics.
    pub(crate) discarded: u64,
    /// A durable shared run ledger: DATA publications go to its outbox and its count of
    /// distinct ids is the terminator's seq (EOS-7, persisted across restarts).
    ledger: Option<RunLedger>,
}

impl Output {
    pub(crate) fn new(
        emitter: Emitter,
        publisher: Publisher,
        mode: PublishMode,
        blob: Option<BlobStore>,
        threshold: usize,
        stop: StopFlag,
    ) -> Self {
        Output {
            emitter,
            publisher,
            mode,
            blob,
            threshold,
            stop,
            discarded: 0,
            ledger: None,
        }
    }

    /// Counts DATA publications in `ledger` when it is durable and shared (EOS-7).
    #[must_use]
    pub(crate) fn with_ledger(mut self, ledger: &RunLedger) -> Self {
        if ledger.durable_shared() {
            self.emitter.set_published(ledger.published_count());
            self.ledger = Some(ledger.clone());
        }
        self
    }

    /// Puts a DATA envelope on the wire without waiting for its receipt; the payload is
    /// encoded once and, above the threshold, stored in the payload store with a `BlobRef` on
    /// the wire. The caller confirms the returned [`Pending`] (possibly on another task) and
    /// then [`Output::record`]s its outcome.
    pub(crate) async fn start_data(&mut self, mut env: Envelope) -> Result<Pending, VfError> {
        let payload = std::mem::take(&mut env.payload);
        if let (Payload::BlobRef(r), Some(store)) = (&payload, &self.blob) {
            // A forwarded reference: its children are counted before they can see it.
            store
                .adopt(&r.r#ref)
                .await
                .map_err(blob::BlobError::into_publish_error)?;
        }
        // Large tensor data stays a view of the node's buffer (a video frame's, which its
        // reader reuses once every view is dropped): copied once into the inline envelope,
        // or read in pieces by the payload store's client.
        let (payload_type, parts, len) =
            envelope::encode_payload_segments(&payload).map_err(encode_error)?;
        drop(payload);
        let (payload_type, data) =
            blob::offload_if_needed(payload_type, parts, len, self.threshold, self.blob.as_ref())
                .await?;
        env.payload = Payload::Opaque { payload_type, data };
        record_publish(&env);
        let mut pending = self
            .start(&env, self.mode, self.emitter.data_subject().to_owned())
            .await?;
        pending.ledger = self.ledger.clone();
        Ok(pending)
    }

    /// Counts a confirmed DATA publication: a new id towards the terminator's seq (EOS-7), a
    /// refused live one as a drop (DELIV-4).
    pub(crate) fn record(&mut self, outcome: &PublishOutcome) {
        match outcome {
            // The ledger counted it when the receipt came in (Pending::confirm).
            PublishOutcome::Stored { .. } if self.ledger.is_some() => {}
            PublishOutcome::Stored {
                duplicate: false, ..
            } => self.emitter.count_published(),
            // MSGID-6: an offset is one id whichever process published it first; a replay
            // the broker already held is still one of this replica's ids (EOS-7).
            PublishOutcome::Stored {
                duplicate: true, ..
            } if self.emitter.is_replayable() => self.emitter.count_published(),
            PublishOutcome::Discarded { .. } => {
                self.discarded += 1;
                health::record(|m| m.record_drop(metrics::DROP_PUBLISH_DISCARDED, 1));
            }
            _ => {}
        }
    }

    /// Publishes this replica's EOS (WIRE-6).
    pub(crate) async fn eos(&mut self) -> Result<PublishOutcome, VfError> {
        self.sync_published();
        let env = self.emitter.eos();
        self.send(&env, self.mode, self.emitter.eos_subject()).await
    }

    /// Publishes this replica's ABORT: bounded (ABORT-2), even under BATCH backpressure.
    pub(crate) async fn abort(&mut self, error: WireError) -> Result<PublishOutcome, VfError> {
        self.sync_published();
        let env = self.emitter.abort(error);
        self.send(&env, PublishMode::Abort, self.emitter.eos_subject())
            .await
    }

    /// EOS-7: under a ledger the terminator's seq is the ledger's count of distinct ids.
    fn sync_published(&mut self) {
        if let Some(ledger) = &self.ledger {
            self.emitter.set_published(ledger.published_count());
        }
    }

    async fn send(
        &self,
        env: &Envelope,
        mode: PublishMode,
        subject: String,
    ) -> Result<PublishOutcome, VfError> {
        self.start(env, mode, subject).await?.confirm().await
    }

    /// Encodes and sends under the content-derived id (MSGID-1), after the fault schedule's
    /// `publish.send.before`.
    async fn start(
        &self,
        env: &Envelope,
        mode: PublishMode,
        subject: String,
    ) -> Result<Pending, VfError> {
        let bytes = envelope::encode(env).map_err(encode_error)?;
        let digest = self.ledger.as_ref().map(|_| {
            use sha2::Digest;
            let mut hex = hex::encode(sha2::Sha256::digest(&bytes));
            hex.truncate(16);
            hex
        });
        let publication = Publication::envelope(subject, env.msg_id(), Bytes::from(bytes));
        faults::barrier(Barrier::PublishSendBefore, || publication.msg_id.clone()).await?;
        let in_flight = self.publisher.start(publication, mode, &self.stop).await;
        Ok(Pending {
            in_flight,
            ledger: None,
            digest: digest.unwrap_or_default(),
        })
    }
}

/// A publication on the wire whose receipt is still to be read. `Send + 'static`, so a loop
/// can confirm it on another task while it goes on with the next input.
pub(crate) struct Pending {
    in_flight: InFlight,
    /// Set for a DATA publication under a durable shared ledger: its outbox record.
    ledger: Option<RunLedger>,
    /// First 16 hex of the envelope's SHA-256 (the outbox `digest`), under a ledger.
    digest: String,
}

impl Pending {
    /// The bytes this publication keeps alive until its receipt (for a resend).
    pub(crate) fn bytes(&self) -> u64 {
        u64::try_from(self.in_flight.payload_len()).unwrap_or(u64::MAX)
    }

    /// Reads the receipt (finishing the publication under its mode's rules), then the fault
    /// schedule's `publish.send.after` and receipt barriers. Under a ledger a stored (or
    /// deduplicated) DATA publication is then written to the outbox — before the caller acks
    /// the input, so a crash in between re-publishes (deduplicated) and records it again.
    ///
    /// Not an `async fn`, for the reason [`InFlight::confirm`] gives; the receipt's future and
    /// what follows it are chained (`then`), so their states share one place.
    pub(crate) fn confirm(self) -> impl Future<Output = Result<PublishOutcome, VfError>> {
        let Pending {
            in_flight,
            ledger,
            digest,
        } = self;
        let msg_id = in_flight.msg_id().to_owned();
        // Kept for a receipt the fault schedule drops: one counter, the publisher is shared.
        let (publisher, mode) = (in_flight.publisher().clone(), in_flight.mode());
        in_flight.confirm().then(move |receipt| async move {
            let id = || msg_id.clone();
            let outcome = receipt?;
            // As 1.0.4: `send.after` once the send completed, i.e. its receipt is in hand.
            faults::barrier(Barrier::PublishSendAfter, id).await?;
            if faults::barrier(Barrier::PublishReceiptBefore, id)
                .await?
                .drop_response
            {
                return faults::receipt_lost(publisher.node(), &msg_id, mode);
            }
            faults::barrier(Barrier::PublishReceiptAfter, id).await?;
            if let (
                Some(ledger),
                PublishOutcome::Stored {
                    stream_seq,
                    duplicate,
                },
            ) = (&ledger, &outcome)
            {
                let accepted = if *duplicate {
                    Accepted::Duplicate
                } else {
                    Accepted::New
                };
                // Boxed: the store's future would otherwise sit inline in every settlement task.
                Box::pin(ledger.record_published(&msg_id, &digest, accepted, *stream_seq)).await?;
            }
            Ok(outcome)
        })
    }
}

/// HEALTH-2/3: a DATA publish beats, counts, and observes the stamped timings (LOOP-7).
fn record_publish(env: &Envelope) {
    health::beat();
    health::record(|m| {
        for (key, metric) in [
            ("proctime", "proctime_seconds"),
            ("actual_proctime", "actual_proctime_seconds"),
        ] {
            match env.metadata.get(key) {
                Some(Value::Double(v)) => m.observe(metric, *v),
                Some(Value::Int(v)) => m.observe(metric, *v as f64),
                _ => {}
            }
        }
        m.incr("messages_published", 1);
    });
}

/// An envelope that cannot be encoded is bad data (metadata tensor, out-of-range value).
fn encode_error(e: envelope::EnvelopeError) -> VfError {
    VfError::new(
        videoflow_core::errors::ErrorCode::PoisonSchema,
        e.to_string(),
    )
    .with_remedy("Return values the wire can carry: numbers, strings, bytes, lists, string-keyed maps and tensors.")
}
