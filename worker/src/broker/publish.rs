//! Outbound: publications with a message id, and the REALTIME / BATCH / ABORT publish rules
//! (DELIV-4, DELIV-5, ABORT-2, MSGID-1, WIRE-2).
//!
//! Why three modes: a REALTIME stream evicts the oldest message, so a publish there must
//! never wait — a refusal is a counted drop and a lost receipt stays unknown. A BATCH stream
//! refuses when full (INTEREST + discard NEW), and that refusal is the backpressure: retry
//! with backoff until space appears, the run stops, or 120 s pass. A dying worker's ABORT
//! gets BATCH's rules with a short leash (3 attempts, 10 s). Every retry re-sends under the
//! same `Nats-Msg-Id`, so within the 120 s duplicate window the broker keeps one copy.

use std::error::Error as _;
use std::str::FromStr;
use std::time::Duration;

use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use tokio::time::Instant;

use super::connect::Broker;
use super::control::StopFlag;
use super::error::BrokerError;

/// The message id header (MSGID-1).
pub const HEADER_MSG_ID: &str = "Nats-Msg-Id";
/// The envelope version header (WIRE-2): `VF-Env: 4` on every data, EOS and ABORT publish.
pub const HEADER_ENVELOPE: &str = "VF-Env";
/// The envelope version this build emits.
pub const ENVELOPE_VERSION: &str = "4";
/// DELIV-5: one attempt waits at most this long for its PubAck.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// DELIV-5: a BATCH publication is abandoned after this long.
pub const BATCH_OVERALL_TIMEOUT: Duration = Duration::from_secs(120);
/// ABORT-2: attempts of an ABORT publication.
pub const ABORT_ATTEMPTS: u32 = 3;
/// ABORT-2: overall bound of an ABORT publication.
pub const ABORT_OVERALL_TIMEOUT: Duration = Duration::from_secs(10);
/// DELIV-5: sleeps between attempts; the last value repeats.
pub const PUBLISH_BACKOFF: [Duration; 5] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_secs(1),
];
/// DELIV-5: rejection texts (lower case) that clear on their own.
pub const RETRYABLE_MARKERS: [&str; 8] = [
    "maximum messages",
    "maximum bytes",
    "insufficient storage",
    "wrong last sequence",
    "resource limits",
    "temporarily unavailable",
    "no leader",
    "not current",
];

/// The sleep before retry number `attempt` (0-based) per DELIV-5.
pub fn backoff(attempt: usize) -> Duration {
    PUBLISH_BACKOFF[attempt.min(PUBLISH_BACKOFF.len() - 1)]
}

/// Whether a JetStream API rejection is retryable (DELIV-5): a 503, or a description that
/// contains one of [`RETRYABLE_MARKERS`] (case-insensitive).
pub fn is_retryable_rejection(status: Option<usize>, text: &str) -> bool {
    let lower = text.to_lowercase();
    status == Some(503) || RETRYABLE_MARKERS.iter().any(|m| lower.contains(m))
}

/// How a publication behaves when the broker refuses it or does not confirm it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishMode {
    /// DELIV-4: never block; refused ⇒ [`PublishOutcome::Discarded`]; unconfirmed ⇒ resend
    /// once, else [`PublishOutcome::Unknown`]; never an error.
    Realtime,
    /// DELIV-5: retry refusals and lost receipts with backoff for up to 120 s.
    Batch,
    /// ABORT-2: BATCH rules, at most 3 attempts within 10 s.
    Abort,
}

impl PublishMode {
    /// The mode of a data/EOS publication: REALTIME iff `VF_FLOW_TYPE == "realtime"` (T3).
    pub fn for_flow(realtime: bool) -> Self {
        if realtime {
            PublishMode::Realtime
        } else {
            PublishMode::Batch
        }
    }

    /// The time a publication started at `started` has for all its attempts; `None` for
    /// REALTIME, which resends once and never waits on a deadline.
    fn deadline(self, started: Instant) -> Option<Instant> {
        match self {
            PublishMode::Realtime => None,
            PublishMode::Batch => Some(started + BATCH_OVERALL_TIMEOUT),
            PublishMode::Abort => Some(started + ABORT_OVERALL_TIMEOUT),
        }
    }

    /// How long the first attempt's receipt is waited for: one attempt's bound, cut to what
    /// remains of the mode's overall time (as [`Publisher::publish`]'s first attempt).
    fn first_bound(self, started: Instant) -> Duration {
        self.deadline(started).map_or(ATTEMPT_TIMEOUT, |deadline| {
            ATTEMPT_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()))
        })
    }
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Publication {
    /// Target subject (NAME-2, NAME-4 or NAME-9).
    pub subject: String,
    /// `Nats-Msg-Id` (MSGID-1, or the DLQ id).
    pub msg_id: String,
    /// The bytes.
    pub payload: Bytes,
    /// Headers besides `Nats-Msg-Id`, in order. Values with CR/LF have them replaced by
    /// spaces (a header line cannot carry them).
    pub headers: Vec<(String, String)>,
}

impl Publication {
    /// An envelope publication: carries `VF-Env: 4` (WIRE-2).
    pub fn envelope(subject: impl Into<String>, msg_id: impl Into<String>, payload: Bytes) -> Self {
        Publication::raw(subject, msg_id, payload).with_header(HEADER_ENVELOPE, ENVELOPE_VERSION)
    }

    /// A publication with no headers but its id (dead letters carry no `VF-Env`).
    pub fn raw(subject: impl Into<String>, msg_id: impl Into<String>, payload: Bytes) -> Self {
        Publication {
            subject: subject.into(),
            msg_id: msg_id.into(),
            payload,
            headers: Vec::new(),
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The NATS header map: `Nats-Msg-Id` first, then the others.
    fn header_map(&self) -> Result<HeaderMap, String> {
        let mut map = HeaderMap::new();
        let all = std::iter::once((HEADER_MSG_ID, self.msg_id.as_str()))
            .chain(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        for (name, value) in all {
            // The two names every envelope carries need no parsing (nor a copy).
            let name = match name {
                HEADER_MSG_ID => HeaderName::from_static(HEADER_MSG_ID),
                HEADER_ENVELOPE => HeaderName::from_static(HEADER_ENVELOPE),
                other => HeaderName::from_str(other)
                    .map_err(|e| format!("header name {other:?}: {e}"))?,
            };
            let clean = if value.contains(['\r', '\n']) {
                value.replace(['\r', '\n'], " ")
            } else {
                value.to_owned()
            };
            // CR and LF are the only characters a header value cannot carry, and `clean`
            // has none: the conversion cannot refuse it.
            map.append(name, HeaderValue::from(clean));
        }
        Ok(map)
    }
}

/// How a publication ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The broker stored it (or already had it: `duplicate`, MSGID-1).
    Stored {
        /// Its stream sequence.
        stream_seq: u64,
        /// The id was inside the duplicate window: nothing new was stored.
        duplicate: bool,
    },
    /// REALTIME only: the broker refused it and it was dropped (count `publish_discarded`).
    Discarded {
        /// The refusal.
        reason: String,
    },
    /// REALTIME only: no receipt even after one resend; the broker may or may not hold it.
    Unknown {
        /// Why.
        reason: String,
    },
}

/// One send's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Stored (or a duplicate with a real sequence).
    Stored { stream_seq: u64, duplicate: bool },
    /// Definitely not stored.
    Rejected { reason: String, retryable: bool },
    /// Sent, receipt missing or not a receipt: the broker may hold it.
    NoReceipt { reason: String },
}

/// Classifies a publish error (DELIV-5, T16).
fn classify(subject: &str, error: &PublishError) -> Attempt {
    let rejected = |reason: String, retryable| Attempt::Rejected { reason, retryable };
    match error.kind() {
        PublishErrorKind::StreamNotFound => rejected(
            format!(
                "no stream answered for {subject}: the channel is not provisioned or has no \
                 leader"
            ),
            true,
        ),
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => Attempt::NoReceipt {
            reason: error.to_string(),
        },
        PublishErrorKind::WrongLastSequence | PublishErrorKind::MaxAckPending => {
            rejected(error.to_string(), true)
        }
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::MaxPayloadExceeded => {
            rejected(error.to_string(), false)
        }
        PublishErrorKind::Other => {
            let api = error
                .source()
                .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>());
            match api {
                Some(api) => {
                    let text = api.to_string();
                    let retryable = is_retryable_rejection(Some(api.code()), &text);
                    rejected(text, retryable)
                }
                // Not an API answer: the connection is closed or the send failed before it
                // reached the server; nothing was stored, and a reconnect clears it.
                None => rejected(format!("connection closed before the send: {error}"), true),
            }
        }
    }
}

/// A send on the wire whose receipt has not been read yet, or the attempt's end already
/// (a send that failed before reaching the server).
pub(crate) enum Sent {
    /// Waiting for the PubAck.
    Waiting(PublishAckFuture),
    /// Ended at the send.
    Ended(Attempt),
}

impl Sent {
    /// Waits up to `bound` for the receipt.
    async fn receipt(self, publication: &Publication, bound: Duration) -> Attempt {
        let future = match self {
            Sent::Waiting(future) => future,
            Sent::Ended(attempt) => return attempt,
        };
        match tokio::time::timeout(bound, future).await {
            Err(_) => Attempt::NoReceipt {
                reason: format!("no acknowledgement within {:.1}s", bound.as_secs_f64()),
            },
            Ok(Err(e)) => classify(&publication.subject, &e),
            Ok(Ok(ack)) if ack.duplicate && ack.sequence == 0 => Attempt::NoReceipt {
                reason: "the broker acknowledged the id as a duplicate with sequence 0: seen by \
                         the server, never stored"
                    .into(),
            },
            Ok(Ok(ack)) => Attempt::Stored {
                stream_seq: ack.sequence,
                duplicate: ack.duplicate,
            },
        }
    }
}

/// Puts one send on the wire (bounded by `bound`) without waiting for its receipt.
async fn send(broker: &Broker, publication: &Publication, bound: Duration) -> Sent {
    let headers = match publication.header_map() {
        Ok(headers) => headers,
        Err(reason) => {
            return Sent::Ended(Attempt::Rejected {
                reason,
                retryable: false,
            });
        }
    };
    let send = broker.jetstream().publish_with_headers(
        publication.subject.clone(),
        headers,
        publication.payload.clone(),
    );
    match tokio::time::timeout(bound, send).await {
        Err(_) => Sent::Ended(Attempt::NoReceipt {
            reason: format!(
                "the send did not complete within {:.1}s",
                bound.as_secs_f64()
            ),
        }),
        Ok(Err(e)) => Sent::Ended(classify(&publication.subject, &e)),
        Ok(Ok(future)) => Sent::Waiting(future),
    }
}

/// Sends once and waits for the receipt, bounded by `bound` overall.
pub(crate) async fn attempt(
    broker: &Broker,
    publication: &Publication,
    bound: Duration,
) -> Attempt {
    let started = Instant::now();
    let sent = send(broker, publication, bound).await;
    sent.receipt(publication, bound.saturating_sub(started.elapsed()))
        .await
}

/// A publication whose first send is on the wire: what lets a loop publish the next output
/// while this one's receipt is on its way (the ideal hop's shape). [`InFlight::confirm`]
/// reads the receipt and finishes the publication under its mode's rules exactly as
/// [`Publisher::publish`] would (re-sends carry the same id, so the broker keeps one copy).
pub struct InFlight {
    publisher: Publisher,
    publication: Publication,
    mode: PublishMode,
    stop: StopFlag,
    started: Instant,
    first: Sent,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("msg_id", &self.publication.msg_id)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl InFlight {
    /// The publication's `Nats-Msg-Id`.
    pub fn msg_id(&self) -> &str {
        &self.publication.msg_id
    }

    /// The publisher it goes through (its node names a failure).
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// The rules it finishes under.
    pub fn mode(&self) -> PublishMode {
        self.mode
    }

    /// The payload's length in bytes (kept for a resend until the receipt).
    pub fn payload_len(&self) -> usize {
        self.publication.payload.len()
    }

    /// Waits for the receipt and finishes the publication; the errors of
    /// [`Publisher::publish`].
    ///
    /// # Errors
    /// As [`Publisher::publish`].
    ///
    /// Not an `async fn`: one would keep `self` in its state beside the fields taken out of it.
    pub fn confirm(self) -> impl Future<Output = Result<PublishOutcome, BrokerError>> {
        let InFlight {
            publisher,
            publication,
            mode,
            stop,
            started,
            first,
        } = self;
        async move {
            match first.receipt(&publication, mode.first_bound(started)).await {
                Attempt::Stored {
                    stream_seq,
                    duplicate,
                } => Ok(PublishOutcome::Stored {
                    stream_seq,
                    duplicate,
                }),
                // The rest of the mode's rules (resends, backoff) starts from this first attempt's
                // end, as `Publisher::publish` would have. Boxed: it is the rare path, and inline
                // its state would sit in every settlement task, one per message in flight.
                other => {
                    Box::pin(publisher.finish(
                        &publication,
                        mode,
                        &stop,
                        started,
                        Some(Sent::Ended(other)),
                    ))
                    .await
                }
            }
        }
    }
}

/// Publishes for one node; the node name prefixes failure messages as 1.0.4's do.
///
/// Shared behind one `Arc`: every publication in flight keeps its publisher, so a clone per
/// message is one counter, not a copy of the broker's clients and the node's name.
#[derive(Debug, Clone)]
pub struct Publisher {
    inner: std::sync::Arc<PublisherInner>,
}

#[derive(Debug)]
struct PublisherInner {
    broker: Broker,
    node: String,
}

impl Publisher {
    /// A publisher for `node` on `broker`.
    pub fn new(broker: &Broker, node: impl Into<String>) -> Self {
        Publisher {
            inner: std::sync::Arc::new(PublisherInner {
                broker: broker.clone(),
                node: node.into(),
            }),
        }
    }

    /// The node it publishes for.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// Publishes under `mode`'s rules. `stop` is the termination flag: a BATCH/ABORT
    /// publication that is still retrying when it is set is abandoned.
    ///
    /// # Errors
    /// BATCH/ABORT only, BrokerUnavailable: `<node>: publication <id> rejected by the
    /// broker: <reason>` (non-retryable, or the flag set), `… still refused after <n>
    /// attempts: <reason>` (time or attempts spent), `… could not be confirmed (<reason>)`
    /// (no receipt in time). REALTIME never fails.
    pub async fn publish(
        &self,
        publication: &Publication,
        mode: PublishMode,
        stop: &StopFlag,
    ) -> Result<PublishOutcome, BrokerError> {
        self.finish(publication, mode, stop, Instant::now(), None)
            .await
    }

    /// Puts the first send of `publication` on the wire and returns without waiting for its
    /// receipt; [`InFlight::confirm`] completes it. Receipts are read concurrently, so a
    /// loop keeps several publications in flight on one connection.
    pub async fn start(
        &self,
        publication: Publication,
        mode: PublishMode,
        stop: &StopFlag,
    ) -> InFlight {
        let started = Instant::now();
        let first = send(&self.inner.broker, &publication, ATTEMPT_TIMEOUT).await;
        InFlight {
            publisher: self.clone(),
            publication,
            mode,
            stop: stop.clone(),
            started,
            first,
        }
    }

    /// The mode's rules from `started`, reading `first` (a send already made) as the first
    /// attempt when given.
    async fn finish(
        &self,
        publication: &Publication,
        mode: PublishMode,
        stop: &StopFlag,
        started: Instant,
        first: Option<Sent>,
    ) -> Result<PublishOutcome, BrokerError> {
        let max_attempts = (mode == PublishMode::Abort).then_some(ABORT_ATTEMPTS);
        match mode.deadline(started) {
            None => Ok(self.publish_realtime(publication, first).await),
            Some(deadline) => {
                self.publish_patiently(publication, deadline, max_attempts, stop, first)
                    .await
            }
        }
    }

    async fn publish_realtime(
        &self,
        publication: &Publication,
        mut first: Option<Sent>,
    ) -> PublishOutcome {
        let mut last = String::new();
        for _ in 0..2 {
            // A fresh send is boxed: it is the rare path (a resend), and inline its state
            // would grow every pipelined receipt's future, moved once per message.
            let result = match first.take() {
                Some(sent) => sent.receipt(publication, ATTEMPT_TIMEOUT).await,
                None => Box::pin(attempt(&self.inner.broker, publication, ATTEMPT_TIMEOUT)).await,
            };
            match result {
                Attempt::Stored {
                    stream_seq,
                    duplicate,
                } => {
                    return PublishOutcome::Stored {
                        stream_seq,
                        duplicate,
                    };
                }
                Attempt::Rejected { reason, .. } => {
                    tracing::debug!(msg_id = %publication.msg_id, %reason, "live publication dropped");
                    return PublishOutcome::Discarded { reason };
                }
                Attempt::NoReceipt { reason } => last = reason,
            }
        }
        PublishOutcome::Unknown { reason: last }
    }

    async fn publish_patiently(
        &self,
        publication: &Publication,
        deadline: Instant,
        max_attempts: Option<u32>,
        stop: &StopFlag,
        mut first: Option<Sent>,
    ) -> Result<PublishOutcome, BrokerError> {
        let mut attempts: u32 = 0;
        loop {
            let bound = ATTEMPT_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
            attempts += 1;
            // Boxed for the same reason as in `publish_realtime`.
            let result = match first.take() {
                Some(sent) => sent.receipt(publication, bound).await,
                None => Box::pin(attempt(&self.inner.broker, publication, bound)).await,
            };
            let failure = match result {
                Attempt::Stored {
                    stream_seq,
                    duplicate,
                } => {
                    return Ok(PublishOutcome::Stored {
                        stream_seq,
                        duplicate,
                    });
                }
                Attempt::Rejected {
                    reason,
                    retryable: false,
                } => return Err(self.rejected(publication, &reason)),
                other => other,
            };
            let spent =
                Instant::now() >= deadline || max_attempts.is_some_and(|max| attempts >= max);
            if stop.is_set() || spent {
                return Err(self.give_up(publication, &failure, attempts, stop.is_set()));
            }
            let pause = backoff(usize::try_from(attempts - 1).unwrap_or(usize::MAX));
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = stop.wait() => {
                    return Err(self.give_up(publication, &failure, attempts, true));
                }
            }
        }
    }

    fn rejected(&self, publication: &Publication, reason: &str) -> BrokerError {
        BrokerError::Unavailable {
            message: format!(
                "{}: publication {} rejected by the broker: {reason}",
                self.inner.node, publication.msg_id
            ),
            remedy: "Check the stream exists and its limits; the input is handed back for \
                     redelivery."
                .into(),
            resource: Some(publication.msg_id.clone()),
        }
    }

    fn give_up(
        &self,
        publication: &Publication,
        failure: &Attempt,
        attempts: u32,
        stopped: bool,
    ) -> BrokerError {
        match failure {
            Attempt::Rejected { reason, .. } if stopped => self.rejected(publication, reason),
            Attempt::Rejected { reason, .. } => BrokerError::Unavailable {
                message: format!(
                    "{}: publication {} still refused after {attempts} attempts: {reason}",
                    self.inner.node, publication.msg_id
                ),
                remedy: "The stream is full; slow the producer or raise the stream limits.".into(),
                resource: Some(publication.msg_id.clone()),
            },
            _ => self.unconfirmed(publication, failure),
        }
    }

    fn unconfirmed(&self, publication: &Publication, failure: &Attempt) -> BrokerError {
        let reason = match failure {
            Attempt::NoReceipt { reason } | Attempt::Rejected { reason, .. } => reason.clone(),
            Attempt::Stored { .. } => String::new(),
        };
        BrokerError::Unavailable {
            message: format!(
                "{}: publication {} could not be confirmed ({reason})",
                self.inner.node, publication.msg_id
            ),
            remedy: "The input is handed back for redelivery; the retry re-publishes the same \
                     message id, which the broker deduplicates."
                .into(),
            resource: Some(publication.msg_id.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliv_5_backoff_schedule() {
        let secs: Vec<f64> = (0..7).map(|i| backoff(i).as_secs_f64()).collect();
        assert_eq!(secs, vec![0.05, 0.1, 0.2, 0.5, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn deliv_5_retryable_texts() {
        assert!(is_retryable_rejection(
            Some(400),
            "maximum messages exceeded (code 400, error code 10077)"
        ));
        assert!(is_retryable_rejection(Some(503), "anything"));
        assert!(is_retryable_rejection(
            None,
            "JetStream system Temporarily Unavailable"
        ));
        assert!(!is_retryable_rejection(
            Some(400),
            "message size exceeds maximum allowed"
        ));
    }

    #[test]
    fn wire_2_and_msgid_1_headers() {
        let p = Publication::envelope("vf.f.r.n", "abc", Bytes::from_static(b"x"))
            .with_header("VF-Note", "a\r\nb");
        let map = p.header_map().expect("valid headers");
        assert_eq!(map.get(HEADER_MSG_ID).map(|v| v.as_str()), Some("abc"));
        assert_eq!(map.get(HEADER_ENVELOPE).map(|v| v.as_str()), Some("4"));
        assert_eq!(map.get("VF-Note").map(|v| v.as_str()), Some("a  b"));
        assert!(
            Publication::raw("s", "id", Bytes::new())
                .header_map()
                .expect("valid")
                .get(HEADER_ENVELOPE)
                .is_none()
        );
    }
}
