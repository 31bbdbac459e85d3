//! One fetched message ([`Delivery`]) and the handle that settles it ([`DeliveryHandle`]).
//!
//! Why settlement goes through the held set: each handle must resolve at most once (DELIV-1),
//! a redelivery must make the older handle inert, and close must know what is still owed. A
//! handle is just (key, token); the held set decides whether it is still current, so clones
//! of a handle, stale handles and settlements racing close are all safe.

use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::{HeaderMap, HeaderValue};
use bytes::Bytes;

use super::held::{HeldSet, HoldKey};
use crate::faults::{Barrier, barrier};

/// How long an ack waits for the server's confirmation (DELIV-1).
pub const ACK_CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);

/// Which subscription of a parent a delivery came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryKind {
    /// The parent's data durable (NAME-5/6).
    Data,
    /// This replica's terminator durable on the parent (NAME-7): EOS and ABORT.
    Terminator,
}

/// What a settlement achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The server confirmed the ack (only [`DeliveryHandle::ack`] confirms).
    Confirmed,
    /// The NAK or TERM was handed to the connection (these are fire-and-forget).
    Sent,
    /// The ack was not confirmed in time, or the send failed. The handle is resolved all the
    /// same: if the broker never got it, it redelivers after `ack_wait`. Keep any blob
    /// obligation (BLOB-6: release only after a confirmed ack).
    Unconfirmed {
        /// Why.
        reason: String,
    },
    /// Nothing was sent: the handle was already resolved, retired, superseded by a
    /// redelivery, or handed back by close.
    NotHeld,
}

impl Settlement {
    /// Whether the broker confirmed the settlement.
    pub fn is_confirmed(&self) -> bool {
        matches!(self, Settlement::Confirmed)
    }
}

/// What the handles share: the held set, the connection and the ack timeout.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) held: HeldSet,
    pub(crate) client: async_nats::Client,
    pub(crate) ack_confirm: Duration,
}

/// Settles one delivery. Cheap to clone; every clone settles the same attempt, at most once
/// in all.
#[derive(Clone)]
pub struct DeliveryHandle {
    core: Arc<Core>,
    key: HoldKey,
    token: u64,
}

impl fmt::Debug for DeliveryHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryHandle")
            .field("subscription", &self.key.subscription)
            .field("stream_seq", &self.key.stream_seq)
            .field("token", &self.token)
            .finish()
    }
}

impl DeliveryHandle {
    pub(crate) fn new(core: Arc<Core>, key: HoldKey, token: u64) -> Self {
        DeliveryHandle { core, key, token }
    }

    /// Acks and waits up to 2 s for the server's confirmation (ack-sync, DELIV-1).
    pub async fn ack(&self) -> Settlement {
        let Some(reply) = self.core.held.take(self.key, self.token) else {
            return Settlement::NotHeld;
        };
        self.with_faults("ack", async {
            // Boxed: the client's request future is large, and the settlement task that
            // awaits this ack is spawned (moved) once per message.
            let request = Box::pin(
                self.core
                    .client
                    .request(reply, AckKind::Ack.into())
                    .into_future(),
            );
            match tokio::time::timeout(self.core.ack_confirm, request).await {
                Ok(Ok(_)) => Settlement::Confirmed,
                Ok(Err(e)) => Settlement::Unconfirmed {
                    reason: e.to_string(),
                },
                Err(_) => Settlement::Unconfirmed {
                    reason: format!(
                        "ack not confirmed within {:.1} s",
                        self.core.ack_confirm.as_secs_f64()
                    ),
                },
            }
        })
        .await
    }

    /// Hands the message back for redelivery, after `delay` if given (DELIV-6/7; `None` for
    /// join evictions and close).
    pub async fn nak(&self, delay: Option<Duration>) -> Settlement {
        self.resolve(AckKind::Nak(delay)).await
    }

    /// Stops redelivery for good (after a dead letter or a terminal record, DELIV-6/15).
    pub async fn term(&self) -> Settlement {
        self.resolve(AckKind::Term).await
    }

    /// Extends the lease by one `ack_wait` without resolving. Keepalive does this on its own
    /// for every held delivery; `false` when the handle is no longer held or the send failed.
    pub async fn in_progress(&self) -> bool {
        let Some(reply) = self.core.held.renew(self.key, self.token) else {
            return false;
        };
        self.core
            .client
            .publish(reply, AckKind::Progress.into())
            .await
            .is_ok()
    }

    /// Forgets the delivery locally without a broker call (a newer attempt of the same
    /// message is held, T13). `false` when it was not held.
    pub fn retire(&self) -> bool {
        self.core.held.take(self.key, self.token).is_some()
    }

    /// Whether this attempt is still held (unresolved, not superseded).
    pub fn is_held(&self) -> bool {
        self.core.held.holds(self.key, self.token)
    }

    async fn resolve(&self, kind: AckKind) -> Settlement {
        let Some(reply) = self.core.held.take(self.key, self.token) else {
            return Settlement::NotHeld;
        };
        let what = if matches!(kind, AckKind::Term) {
            "term"
        } else {
            "nak"
        };
        self.with_faults(what, async {
            match self.core.client.publish(reply, kind.into()).await {
                Ok(()) => Settlement::Sent,
                Err(e) => Settlement::Unconfirmed {
                    reason: e.to_string(),
                },
            }
        })
        .await
    }

    /// Runs a settlement between the `settle.before` and `settle.after` barriers (ENV-16).
    /// The handle is already taken: a `raise` before it means nothing was sent (the broker
    /// redelivers after `ack_wait`); a `drop` or `raise` after it means the outcome is not
    /// known — both report [`Settlement::Unconfirmed`], so no blob share is released.
    async fn with_faults(
        &self,
        what: &str,
        settle: impl std::future::Future<Output = Settlement>,
    ) -> Settlement {
        let at = || format!("stream_seq {} {what}", self.key.stream_seq);
        if let Err(e) = barrier(Barrier::SettleBefore, at).await {
            return Settlement::Unconfirmed {
                reason: e.log_line(),
            };
        }
        let settled = settle.await;
        match barrier(Barrier::SettleAfter, at).await {
            Ok(hit) if !hit.drop_response => settled,
            Ok(_) => Settlement::Unconfirmed {
                reason: "settlement response lost".into(),
            },
            Err(e) => Settlement::Unconfirmed {
                reason: e.log_line(),
            },
        }
    }
}

/// One fetched message, as the receive loop gets it: undecoded bytes plus what the broker
/// says about them.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Index of the parent (in `VF_PARENT_NAMES` order) the subscription reads.
    pub parent: usize,
    /// Data or terminator subscription.
    pub kind: DeliveryKind,
    /// The subscription it arrived on (as returned by `Inbox::subscribe`).
    pub subscription: usize,
    /// The subject it was published on.
    pub subject: async_nats::Subject,
    /// The raw payload (an envelope, or anything: the dead letter carries it verbatim).
    pub payload: Bytes,
    /// Headers as the client parsed them (`Nats-Msg-Id`, `VF-Replay-Target`, `VF-Env`, …);
    /// read them with [`Delivery::header`].
    pub headers: Option<HeaderMap>,
    /// The broker's stream sequence (DLQ message ids use it, DELIV-8).
    pub stream_seq: u64,
    /// The broker's delivery count of this message, 1 on first delivery (DELIV-6/7).
    pub num_delivered: u64,
    /// Whether this attempt superseded an older attempt of the same message still held here.
    pub superseded_older: bool,
    /// Settles it.
    pub handle: DeliveryHandle,
}

impl Delivery {
    /// A header's first value: exact name first, then case-insensitively. A message carries a
    /// handful of headers: a scan of the client's map beats building one of our own per
    /// delivery.
    pub fn header(&self, name: &str) -> Option<&str> {
        let headers = self.headers.as_ref()?;
        let named = |exact: bool| {
            headers.iter().find(|(k, _)| {
                let k: &str = k.as_ref();
                if exact {
                    k == name
                } else {
                    k.eq_ignore_ascii_case(name)
                }
            })
        };
        named(true)
            .or_else(|| named(false))
            .and_then(|(_, values)| values.first())
            .map(HeaderValue::as_str)
    }

    /// The payload size, what the byte budget counts.
    pub fn size(&self) -> usize {
        self.payload.len()
    }
}
