//! The payload (blob) store (BLOB-*): offloads payloads too large to travel inline.
//!
//! Why it exists: an encoded video frame (a 1080p RGB frame is ~6 MB) does not fit a NATS
//! message, so a publisher stores payloads larger than the inline threshold in Redis and
//! publishes a small `videoflow.v1.BlobRef` instead (BLOB-1); receivers fetch the bytes back
//! (BLOB-3) and, after a *confirmed* ack, release their read (BLOB-6).
//!
//! This is the RFC 0002 reader-counted Redis store that 1.0.4 calls the counter store:
//!
//! - put: `SET vf-blob-<hex> <bytes> EX ttl`, then — only with a positive reader count —
//!   `SET vf-blobrc-<hex> <readers> EX ttl` (BLOB-5, blob first: a crash in between leaves a
//!   counterless blob that expires by TTL, the safe direction);
//! - get: `GET`; nil ⇒ poison ([`BlobError::Missing`]), an unreachable or slow store ⇒
//!   transient ([`BlobError::Unavailable`], NAK with the DELIV-7 delay, never undecodable);
//! - release: `EXISTS` the counter, `DECR`, and at ≤ 0 two single-key `UNLINK`s (the keys hash
//!   to different Redis Cluster slots). The obligation store's companion keys
//!   (`vf-blobmeta-*`, `vf-blobobl-*`, BLOB-6a) are never read or written here, so a 1.0.4
//!   obligation-store object simply lives until its TTL.
//!
//! The connection is opened lazily (as redis-py's `from_url` does) and re-opened after a
//! transport failure, so a store that blips does not need a worker restart.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, FromRedisValue, RedisError, ServerErrorKind};
use tokio::sync::Mutex;
#[cfg(doc)]
use videoflow_core::envelope::encode_payload_segments;
use videoflow_core::envelope::proto::BlobRef;
use videoflow_core::envelope::{BLOBREF_TYPE, Payload, decode_payload_bytes, encode_payload};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;

use crate::faults::{Barrier, barrier, unraisable};

/// Prefix of every blob key (BLOB-3); the rest is 32 lowercase hex digits of a UUID4.
pub const BLOB_KEY_PREFIX: &str = "vf-blob-";
/// Prefix of the reader counter kept next to a blob (BLOB-5).
pub const COUNTER_KEY_PREFIX: &str = "vf-blobrc-";
/// Bytes reserved for the envelope around a payload when the threshold is checked against the
/// broker's `max_payload` (BLOB-1).
pub const ENVELOPE_OVERHEAD_BYTES: u64 = 4096;
/// The URL schemes a blob store accepts (BLOB-4), in the order error texts list them.
pub const KNOWN_SCHEMES: [&str; 3] = ["redis", "rediss", "unix"];
/// Default bound on connecting to the store and on each command's reply.
///
/// Why bounded at all: 1.0.4 waits forever on a hung store; a bound turns a hang into a
/// transient failure the ladder retries, well inside the default 60 s `ack_wait`.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many nested `BlobRef`s [`resolve`] follows before declaring the payload poison, so a
/// reference that (maliciously or by bug) points at itself cannot loop forever.
pub const MAX_BLOBREF_NESTING: usize = 8;

/// Why a blob operation failed, split by what the caller must do about it.
///
/// Why three variants rather than one: BLOB-3/DELIV-15 make a *missing* blob poison (the bytes
/// are gone, retrying cannot help) but an *unreachable* store transient (the bytes may still
/// be there: NAK with the DELIV-7 delay); anything else the server refuses is neither, and is
/// left to the caller's classification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// `GET` returned nil: the blob expired or never existed (BLOB-3; counter-store text).
    #[error("Blob {reference} not found (expired or never existed)")]
    Missing {
        /// The key that was looked up.
        reference: String,
    },
    /// The store could not be reached or answered too slowly (connection refused or
    /// dropped, timeout, `LOADING`, authentication failure): transient.
    #[error("blob store unavailable while {operation}: {reason}")]
    Unavailable {
        /// What was being done, e.g. `reading vf-blob-…` or `storing 2097152 bytes`.
        operation: String,
        /// The client's description of the failure.
        reason: String,
    },
    /// The server answered with an error that says nothing about reachability (e.g. `OOM`,
    /// `READONLY`, `WRONGTYPE`).
    #[error("blob store refused {operation}: {reason}")]
    Refused {
        /// What was being done.
        operation: String,
        /// The server's error text.
        reason: String,
    },
}

impl BlobError {
    /// True when the failure is the store's, not the data's: the delivery must be NAKed with
    /// the DELIV-7 delay and retried, never dead-lettered as undecodable.
    pub fn is_transient(&self) -> bool {
        matches!(self, BlobError::Unavailable { .. })
    }

    /// The typed error for the receive path (BLOB-3, DELIV-15).
    ///
    /// Missing ⇒ `VF_POISON_DECODE` with the counter store's text; unavailable ⇒
    /// `VF_TRANSIENT` (1.0.4's bridge text `payload <ref> could not be read: …`); a refusal is
    /// wrapped as a DecodeError `ResponseError: <text>` exactly as DELIV-15 wraps any other
    /// fetch failure.
    pub fn into_decode_error(self, reference: &str) -> VfError {
        match self {
            BlobError::Missing { .. } => VfError::new(ErrorCode::PoisonDecode, self.to_string())
                .with_remedy(
                    "The payload expired or was evicted before this reader fetched it; raise \
                     VF_BLOB_TTL_SECONDS or the store's memory so blobs outlive their readers.",
                )
                .with_context("ref", reference),
            BlobError::Unavailable { reason, .. } => VfError::new(
                ErrorCode::Transient,
                format!("payload {reference} could not be read: {reason}"),
            )
            .with_remedy("The store is unreachable or slow; the delivery is retried.")
            .with_context("ref", reference),
            BlobError::Refused { reason, .. } => VfError::new(
                ErrorCode::PoisonDecode,
                truncate_chars(&format!("ResponseError: {reason}"), 512),
            )
            .with_context("ref", reference),
        }
    }

    /// The typed error for the publish path (a failed offload).
    ///
    /// Unavailable ⇒ `VF_TRANSIENT` (the ladder redelivers the input). A refusal is an
    /// environment-class error — `VF_PAYLOAD_STORE_FULL` for an `OOM` reply, else
    /// `VF_RESOURCE_UNAVAILABLE` — which, like 1.0.4's untyped redis error, goes through the
    /// classifiers and `VF_ON_ERROR` (ERR-2) rather than carrying its own disposition.
    pub fn into_publish_error(self) -> VfError {
        match self {
            BlobError::Unavailable { .. } => VfError::new(ErrorCode::Transient, self.to_string())
                .with_remedy("The blob store is unreachable or slow; the input is retried."),
            BlobError::Refused { ref reason, .. } if reason.contains("OOM") => {
                VfError::new(ErrorCode::PayloadStoreFull, self.to_string()).with_remedy(
                    "The blob store is out of memory: give it more, lower VF_BLOB_TTL_SECONDS, \
                     or set VF_BLOB_READERS so blobs are reclaimed after their last reader.",
                )
            }
            BlobError::Refused { .. } | BlobError::Missing { .. } => {
                VfError::new(ErrorCode::ResourceUnavailable, self.to_string())
            }
        }
    }
}

/// What one [`BlobStore::release`] did, so callers and tests can see the BLOB-6 branch taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// No counter exists (TTL-only blob, 1.0.4 obligation-store object, or already
    /// reclaimed): nothing was touched.
    NoCounter,
    /// The counter was decremented and readers remain.
    Decremented {
        /// The counter after `DECR`.
        remaining: i64,
    },
    /// The last reader released: blob and counter were unlinked.
    Reclaimed,
    /// A command failed; the failure was logged and swallowed (BLOB-6), the blob is left to
    /// its TTL.
    Failed,
}

/// What one [`BlobStore::adopt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptOutcome {
    /// The blob has no counter (or this node writes none): forwarded as it is.
    NoCounter,
    /// The counter now stands at `readers` outstanding reads, this node's own included
    /// until it releases it.
    Counted {
        /// The counter after `INCRBY`.
        readers: i64,
    },
}

/// A lazily opened, self-healing Redis connection shared by the blob and idempotency stores.
///
/// Why not redis' `ConnectionManager`: it connects eagerly (a worker would fail at start when
/// the store is briefly down, which 1.0.4 does not) and retries internally on its own schedule,
/// hiding the transient failures the DELIV-7 ladder must see.
#[derive(Clone)]
pub(crate) struct RedisLink {
    /// Boxed: with TLS compiled in, the client's connection info is a few hundred bytes,
    /// and every store enum holding a link would be that large.
    client: Box<redis::Client>,
    slot: Arc<Mutex<Option<MultiplexedConnection>>>,
    timeout: Duration,
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLink")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisLink {
    /// Checks the scheme (BLOB-4) and parses the URL; no I/O.
    pub(crate) fn open(url: &str) -> Result<Self, VfError> {
        check_scheme(url)?;
        let client = redis::Client::open(url).map_err(|e| {
            VfError::new(
                ErrorCode::Config,
                format!("Blob store URL {} is not usable: {e}", py_repr_str(url)),
            )
            .with_remedy(
                "Use redis://host:port/db, rediss://host:port/db (TLS) or \
                 unix:///path/to/socket.",
            )
        })?;
        Ok(RedisLink {
            client: Box::new(client),
            slot: Arc::new(Mutex::new(None)),
            timeout: DEFAULT_STORE_TIMEOUT,
        })
    }

    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut slot = self.slot.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Runs one command; a transport failure drops the cached connection so the next command
    /// reconnects.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, RedisError> {
        let result = match self.connection().await {
            Ok(mut conn) => cmd.query_async::<T>(&mut conn).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &result
            && is_transport_failure(e)
        {
            self.slot.lock().await.take();
        }
        result
    }
}

/// Whether a client error means "the store is unreachable or slow" (transient) rather than a
/// reply about the data.
///
/// Mirrors 1.0.4, which treats redis-py's `ConnectionError`/`TimeoutError` family (which
/// includes `BusyLoadingError` and `AuthenticationError`) as transient. A reply the client
/// cannot parse (`ErrorKind::Parse`, e.g. "Unexpected end of input" when the server died in
/// the middle of a reply) is the connection's failure too, not the data's: redis-rs itself
/// reconnects on it, and a payload read that met it must be retried, never dead-lettered.
pub(crate) fn is_transport_failure(e: &RedisError) -> bool {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return true;
    }
    matches!(
        e.kind(),
        ErrorKind::AuthenticationFailed
            | ErrorKind::Parse
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ClusterDown
            )
    )
}

fn classify(e: &RedisError, operation: impl Into<String>) -> BlobError {
    let operation = operation.into();
    if is_transport_failure(e) {
        BlobError::Unavailable {
            operation,
            reason: e.to_string(),
        }
    } else {
        BlobError::Refused {
            operation,
            reason: e.to_string(),
        }
    }
}

/// Applies the BLOB-4 scheme rules to a store URL: `redis`, `rediss` or `unix`,
/// case-insensitive.
///
/// The texts are 1.0.4's. 1.0.4 raises them as an untyped `ValueError` (exit 1 at start); this
/// SDK returns them as `VF_CONFIG` (ConfigError, exit 2) so the caller can write a typed
/// termination record — callers wanting the exact 1.0.4 exit status map it to exit 1.
pub fn check_scheme(url: &str) -> Result<String, VfError> {
    let scheme = url
        .split_once("://")
        .map(|(s, _)| s.trim().to_lowercase())
        .unwrap_or_default();
    let known = KNOWN_SCHEMES.join(", ");
    if scheme.is_empty() {
        return Err(VfError::new(
            ErrorCode::Config,
            format!(
                "Blob store URL must include a scheme, got {}. Known schemes: {known}.",
                py_repr_str(url)
            ),
        )
        .with_remedy("Set VF_BLOB_REDIS_URL to e.g. redis://host:6379/0."));
    }
    if !KNOWN_SCHEMES.contains(&scheme.as_str()) {
        return Err(VfError::new(
            ErrorCode::Config,
            format!(
                "No blob store registered for URL scheme {} (from {}). Known schemes: {known}.",
                py_repr_str(&scheme),
                py_repr_str(url)
            ),
        )
        .with_remedy(
            "This SDK has no store registry: use a redis://, rediss:// or unix:// URL for \
             VF_BLOB_REDIS_URL.",
        ));
    }
    Ok(scheme)
}

/// The reader-counted Redis blob store (BLOB-3..7).
///
/// Cheap to clone (the connection is shared), so the publisher and the receiver of one worker
/// can hold the same store.
#[derive(Debug, Clone)]
pub struct BlobStore {
    link: RedisLink,
    ttl_seconds: i64,
    readers: Option<i64>,
}

impl BlobStore {
    /// Builds the store for `VF_BLOB_REDIS_URL` with the BLOB-7 TTL and the BLOB-5 reader
    /// count (`VF_BLOB_READERS`; `None` or ≤ 0 ⇒ TTL-only blobs, no counter).
    ///
    /// Checks the scheme (BLOB-4, see [`check_scheme`]) and parses the URL but does not
    /// connect, like 1.0.4's `from_url`: a store that is down at start only fails the
    /// deliveries that need it (transiently). Use [`BlobStore::ping`] for an eager check.
    /// A TTL ≤ 0 is refused as `VF_CONFIG` (Redis rejects `EX 0`; 1.0.4 would fail every
    /// offload instead).
    pub fn connect(url: &str, ttl_seconds: i64, readers: Option<i64>) -> Result<Self, VfError> {
        let link = RedisLink::open(url)?;
        if ttl_seconds <= 0 {
            return Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "VF_BLOB_TTL_SECONDS must be a positive number of seconds, got {ttl_seconds}"
                ),
            )
            .with_remedy("Unset VF_BLOB_TTL_SECONDS for the flow-type default (BLOB-7)."));
        }
        Ok(BlobStore {
            link,
            ttl_seconds,
            readers: readers.filter(|n| *n > 0),
        })
    }

    /// Replaces the bound on connecting and on each reply (default
    /// [`DEFAULT_STORE_TIMEOUT`]); a slower answer is a transient failure.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.link.set_timeout(timeout);
        self
    }

    /// The TTL every blob and counter is written with (BLOB-7).
    pub fn ttl_seconds(&self) -> i64 {
        self.ttl_seconds
    }

    /// The reader count written to each counter, `None` for TTL-only blobs (BLOB-5).
    pub fn readers(&self) -> Option<i64> {
        self.readers
    }

    /// Round-trips a `PING`, for a startup or health check.
    pub async fn ping(&self) -> Result<(), BlobError> {
        self.link
            .query::<String>(&redis::cmd("PING"))
            .await
            .map(|_| ())
            .map_err(|e| classify(&e, "pinging the store"))
    }

    /// Stores an encoded payload and returns the reference to publish in its place (BLOB-1,
    /// BLOB-3, BLOB-5): [`BlobStore::put_segments`] of one segment.
    pub async fn put(&self, bytes: &[u8], inner_payload_type: &str) -> Result<BlobRef, BlobError> {
        let parts = vec![Bytes::copy_from_slice(bytes)];
        self.put_segments(parts, bytes.len(), inner_payload_type)
            .await
    }

    /// Stores a payload encoded as segments
    /// ([`videoflow_core::envelope::encode_payload_segments`]; `size` bytes in all) and
    /// returns its reference: the blob in pieces of at most [`PUT_PIECE`] bytes — `SET <ref>
    /// <first> EX <ttl>`, then `APPEND` each further piece — then its reader counter (BLOB-5).
    ///
    /// Why pieces: the client copies each command's arguments twice (into the command, then
    /// into the packed request), so one `SET` of a 6 MB frame cost two frame-sized buffers on
    /// top of the encoding; here the frame's own buffer is read in 1 MiB views and the copies
    /// are piece-sized. The object is complete before the reference is published, so no
    /// reader sees a part of it; a failure half-way leaves a part nobody names, which its
    /// TTL reclaims. The blob is written before its counter, so a failure in between leaves a
    /// counterless blob that expires by TTL rather than a counter that could reclaim a blob
    /// early.
    pub async fn put_segments(
        &self,
        parts: Vec<Bytes>,
        size: usize,
        inner_payload_type: &str,
    ) -> Result<BlobRef, BlobError> {
        let reference = new_reference();
        let mut pieces = parts.iter().flat_map(|part| {
            (0..part.len())
                .step_by(PUT_PIECE)
                .map(move |at| part.slice(at..part.len().min(at + PUT_PIECE)))
        });
        let first = pieces.next().unwrap_or_default();
        self.set_expiring(&reference, first.as_ref(), || {
            format!("storing {size} bytes")
        })
        .await?;
        for piece in pieces {
            let mut append = redis::cmd("APPEND");
            append.arg(&reference).arg(piece.as_ref());
            self.link
                .query::<i64>(&append)
                .await
                .map_err(|e| classify(&e, format!("storing {size} bytes")))?;
        }
        drop(parts);
        if let Some(readers) = self.readers {
            let counter = counter_key(&reference);
            self.set_expiring(&counter, readers, || {
                format!("writing the reader counter {counter}")
            })
            .await?;
        }
        Ok(BlobRef {
            r#ref: reference,
            inner_payload_type: inner_payload_type.to_owned(),
            size: size as u64,
        })
    }

    /// `SET <key> <value> EX <ttl>` (BLOB-5, BLOB-7); a failure names `operation`.
    async fn set_expiring(
        &self,
        key: &str,
        value: impl redis::ToRedisArgs,
        operation: impl FnOnce() -> String,
    ) -> Result<(), BlobError> {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(value).arg("EX").arg(self.ttl_seconds);
        self.link
            .query::<()>(&set)
            .await
            .map_err(|e| classify(&e, operation()))
    }

    /// Fetches the bytes stored under `reference` (BLOB-3).
    ///
    /// nil ⇒ [`BlobError::Missing`] (poison, DELIV-15); an unreachable or slow store ⇒
    /// [`BlobError::Unavailable`] (transient: NAK with the DELIV-7 delay). `BlobRef.size` is
    /// not checked, as in 1.0.4.
    pub async fn get(&self, reference: &str) -> Result<Vec<u8>, BlobError> {
        let mut get = redis::cmd("GET");
        get.arg(reference);
        match self.link.query::<Option<Vec<u8>>>(&get).await {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(BlobError::Missing {
                reference: reference.to_owned(),
            }),
            Err(e) => Err(classify(&e, format!("reading {reference}"))),
        }
    }

    /// One reader is finished with `reference` (BLOB-6).
    ///
    /// Call it only after a **confirmed** ack of the delivery that resolved the blob (or a
    /// PART-4 ack-and-skip) — never after NAK, TERM or a dead letter, whose redelivery still
    /// needs the bytes. No counter ⇒ nothing is touched (the `EXISTS` guard keeps `DECR` from
    /// creating a negative counter for a TTL-only blob); else `DECR`, and at ≤ 0 the blob and
    /// the counter are unlinked by two single-key commands. Failures are logged and
    /// swallowed: the blob then lives until its TTL.
    pub async fn release(&self, reference: &str) -> ReleaseOutcome {
        let at = || reference.to_owned();
        if let Err(e) = barrier(Barrier::ObligationReleaseBefore, at).await {
            unraisable(e);
            return ReleaseOutcome::Failed; // nothing was touched; the blob is left to its TTL
        }
        let outcome = match self.try_release(reference).await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(blob_ref = reference, error = %e, "blob release failed; the blob is left to its TTL");
                ReleaseOutcome::Failed
            }
        };
        if barrier(Barrier::ObligationReleaseAfter, at)
            .await
            .unwrap_or_else(unraisable)
            .drop_response
        {
            return ReleaseOutcome::Failed; // the outcome is not known
        }
        outcome
    }

    /// Takes on `reference` as this node's own output without copying it: its reader
    /// counter, when it has one, grows by this node's reader count (BLOB-5), so the children
    /// that will read the forwarded reference are counted before they can see it.
    ///
    /// Why this is safe without a transaction: the caller still holds its own, unreleased
    /// share of the blob (it releases it after the confirmed ack of the input it forwards,
    /// BLOB-6), so the counter cannot reach 0 between the `EXISTS` and the `INCRBY`. A blob
    /// without a counter (TTL-only, or a 1.0.4 obligation-store object) is forwarded as it
    /// is and lives until its TTL, which its publisher set. Adopting twice (an input
    /// redelivered after the publication) over-counts, and the blob then lives until its
    /// TTL: the safe direction.
    pub async fn adopt(&self, reference: &str) -> Result<AdoptOutcome, BlobError> {
        let Some(readers) = self.readers else {
            return Ok(AdoptOutcome::NoCounter);
        };
        let counter = counter_key(reference);
        let failed = |e: RedisError| classify(&e, format!("counting readers of {reference}"));
        let mut exists = redis::cmd("EXISTS");
        exists.arg(&counter);
        if self.link.query::<i64>(&exists).await.map_err(failed)? == 0 {
            return Ok(AdoptOutcome::NoCounter);
        }
        let mut incr = redis::cmd("INCRBY");
        incr.arg(&counter).arg(readers);
        let readers = self.link.query::<i64>(&incr).await.map_err(failed)?;
        Ok(AdoptOutcome::Counted { readers })
    }

    async fn try_release(&self, reference: &str) -> Result<ReleaseOutcome, RedisError> {
        let counter = counter_key(reference);
        let mut exists = redis::cmd("EXISTS");
        exists.arg(&counter);
        if self.link.query::<i64>(&exists).await? == 0 {
            return Ok(ReleaseOutcome::NoCounter);
        }
        let mut decr = redis::cmd("DECR");
        decr.arg(&counter);
        let remaining = self.link.query::<i64>(&decr).await?;
        if remaining > 0 {
            return Ok(ReleaseOutcome::Decremented { remaining });
        }
        for key in [reference, counter.as_str()] {
            let mut unlink = redis::cmd("UNLINK");
            unlink.arg(key);
            self.link.query::<i64>(&unlink).await?;
        }
        Ok(ReleaseOutcome::Reclaimed)
    }
}

/// The counter key of a blob: `vf-blobrc-` + the ref without its `vf-blob-` prefix (BLOB-5).
pub fn counter_key(reference: &str) -> String {
    let hex = reference.strip_prefix(BLOB_KEY_PREFIX).unwrap_or(reference);
    format!("{COUNTER_KEY_PREFIX}{hex}")
}

/// The inline threshold to use against a broker announcing `max_payload` (BLOB-1).
///
/// Returns `configured` when the broker can carry it, else `max(0, max_payload − 4096)`
/// (4096 bytes reserved for the envelope) with a warning — or, when no blob store is
/// configured to take the difference, the ConfigError 1.0.4 raises at start. `None` (the
/// limit could not be read) changes nothing.
pub fn threshold_for(
    node: &str,
    configured: usize,
    max_payload: Option<u64>,
    has_store: bool,
) -> Result<usize, VfError> {
    let Some(max_payload) = max_payload else {
        return Ok(configured);
    };
    let safe = usize::try_from(max_payload.saturating_sub(ENVELOPE_OVERHEAD_BYTES))
        .unwrap_or(usize::MAX)
        .min(configured);
    if safe >= configured {
        return Ok(configured);
    }
    if !has_store {
        return Err(VfError::new(
            ErrorCode::Config,
            format!(
                "{node}: the inline payload threshold ({configured} bytes) exceeds what the \
                 broker can carry (max_payload {max_payload} bytes, {ENVELOPE_OVERHEAD_BYTES} \
                 reserved for the envelope) and no blob store is configured to offload the \
                 difference to."
            ),
        )
        .with_remedy(format!(
            "Set VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES to at most {safe}, or configure \
             VF_BLOB_REDIS_URL / --blob-redis-url so larger payloads are offloaded."
        )));
    }
    tracing::warn!(
        "{node}: inline payload threshold lowered from {configured} to {safe} bytes: the \
         broker max_payload is {max_payload} bytes"
    );
    Ok(safe)
}

/// The largest piece of a blob one command carries ([`BlobStore::put_segments`]).
pub const PUT_PIECE: usize = 1 << 20;

/// `vf-blob-` + 32 lowercase hex of a random UUID4 (BLOB-3).
fn new_reference() -> String {
    format!("{BLOB_KEY_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// Publisher side of BLOB-1/BLOB-2: keeps an encoded payload inline or offloads it.
///
/// `payload_type`, `parts` and `len` come from [`encode_payload_segments`] (the encoding
/// in pieces, `len` bytes in all). Only a payload **strictly** larger
/// than `threshold` is offloaded; it is then replaced by
/// `(videoflow.v1.BlobRef, BlobRef{ref, inner_payload_type, size})`. Over the threshold
/// without a store is the BLOB-2 encode error naming `MAX_INLINE_PAYLOAD_BYTES`, returned as
/// `VF_POISON_SCHEMA` like every other encode failure of this SDK (1.0.4 raises it untyped,
/// see `videoflow_core::envelope::CODE_ENCODE`). A failed put is mapped by
/// [`BlobError::into_publish_error`].
pub async fn offload_if_needed(
    payload_type: String,
    parts: Vec<Bytes>,
    len: usize,
    threshold: usize,
    store: Option<&BlobStore>,
) -> Result<(String, Vec<u8>), VfError> {
    if len <= threshold {
        return Ok((payload_type, parts.concat()));
    }
    let Some(store) = store else {
        return Err(VfError::new(
            ErrorCode::PoisonSchema,
            format!(
                "Payload of {len} bytes exceeds MAX_INLINE_PAYLOAD_BYTES ({threshold}) and no \
                 blob_store was configured to offload it to."
            ),
        )
        .with_remedy(
            "Configure VF_BLOB_REDIS_URL (VIDEOFLOW_BLOB_REDIS_URL) or raise \
             VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES.",
        )
        .with_context("size", len)
        .with_context("threshold", threshold));
    };
    barrier(Barrier::PayloadWriteBefore, || format!("{len} bytes")).await?;
    let blob_ref = store
        .put_segments(parts, len, &payload_type)
        .await
        .map_err(BlobError::into_publish_error)?;
    barrier(Barrier::PayloadWriteAfter, || blob_ref.r#ref.clone()).await?;
    encode_payload(&Payload::BlobRef(blob_ref))
        .map_err(|e| VfError::new(ErrorCode::PoisonSchema, e.to_string()))
}

/// Receiver side of BLOB-3: fetches an offloaded payload and decodes it by its
/// `inner_payload_type` (an unknown type stays opaque; a nested `BlobRef` is followed, up to
/// [`MAX_BLOBREF_NESTING`] levels).
///
/// Call it only after the ownership and replay-scope decisions (WIRE-3 step 7, PART-4,
/// DELIV-16), so a delivery that is skipped never fetches. No store ⇒ `VF_POISON_DECODE`
/// `payload <ref> is an offloaded reference but no blob store is configured`; store failures
/// are mapped by [`BlobError::into_decode_error`] (missing ⇒ poison, unreachable ⇒
/// `VF_TRANSIENT`, to be NAKed with the DELIV-7 delay); undecodable inner bytes ⇒
/// `VF_POISON_DECODE`.
pub async fn resolve(blob_ref: &BlobRef, store: Option<&BlobStore>) -> Result<Payload, VfError> {
    let mut current = blob_ref.clone();
    for _ in 0..MAX_BLOBREF_NESTING {
        let reference = current.r#ref.as_str();
        let Some(store) = store else {
            return Err(VfError::new(
                ErrorCode::PoisonDecode,
                format!(
                    "payload {reference} is an offloaded reference but no blob store is \
                     configured"
                ),
            )
            .with_remedy("Configure VF_BLOB_REDIS_URL for this node (the publisher offloads).")
            .with_context("ref", reference));
        };
        barrier(Barrier::PayloadReadBefore, || reference.to_owned()).await?;
        let bytes = store
            .get(reference)
            .await
            .map_err(|e| e.into_decode_error(reference))?;
        // Zero-copy: tensor data slices the fetched bytes.
        let payload =
            decode_payload_bytes(&current.inner_payload_type, bytes.into()).map_err(|e| {
                VfError::new(ErrorCode::PoisonDecode, e.to_string()).with_context("ref", reference)
            })?;
        barrier(Barrier::PayloadReadAfter, || reference.to_owned()).await?;
        match payload {
            Payload::BlobRef(inner) => current = inner,
            other => return Ok(other),
        }
    }
    Err(VfError::new(
        ErrorCode::PoisonDecode,
        format!(
            "payload {} nests more than {MAX_BLOBREF_NESTING} {BLOBREF_TYPE} references",
            blob_ref.r#ref
        ),
    )
    .with_context("ref", blob_ref.r#ref.as_str()))
}

fn truncate_chars(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply cut off by a dying server is unreachable (retried), a server's refusal is not.
    #[test]
    fn a_truncated_reply_is_a_transport_failure() {
        let cut = RedisError::from((ErrorKind::Parse, "Parse error at 0 Unexpected end of input"));
        assert!(is_transport_failure(&cut));
        assert!(classify(&cut, "reading x").is_transient());
        let refused = RedisError::from((ErrorKind::Client, "bad command"));
        assert!(!is_transport_failure(&refused));
    }
}
