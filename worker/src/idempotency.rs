//! Sink idempotency markers (IDEM-1, IDEM-2).
//!
//! Why: JetStream delivers at least once, so a consumer can see a group again after a crash
//! between its side effect and the ack. A consumer that opts in (`idempotent`) checks a marker
//! keyed by the group's `last_input_key` (§5) before consuming — seen ⇒ skip and ack; else
//! consume, [`IdempotencyStore::mark`], ack — which makes its effects "exactly-once-ish".
//!
//! This is the Redis store at `VF_BLOB_REDIS_URL` (IDEM-1's fallback when the runtime store is
//! not durable+shared): seen = `EXISTS <key> == 1`, mark = `SET <key> "1" EX 86400`, and the
//! key stored is the raw 32-hex id. [`idempotency_key`] (IDEM-2) is provided for parity but,
//! as in 1.0.4's worker path, not applied to the stored key.

use std::time::Duration;

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::msgid::sha256hex;

use crate::blob::{RedisLink, is_transport_failure};

/// How long a marker is kept (IDEM-1): shorter than the dead-letter replay horizon, which is
/// why a marker alone never certifies exactly-once.
pub const EFFECT_RETENTION_SECONDS: i64 = 86_400;

/// IDEM-2: `"vf-idem-" + sha256hex("{flow}:{node}:{message_id}")` (full 64 hex digits).
///
/// Why provided although unused by the worker path: it is part of the public contract of
/// 1.0.4 (`idempotency_key`), and a sink that keys its *external* effect needs a name that is
/// stable across flows and nodes.
pub fn idempotency_key(flow: &str, node: &str, message_id: &str) -> String {
    format!(
        "vf-idem-{}",
        sha256hex(&format!("{flow}:{node}:{message_id}"))
    )
}

/// Effect markers in Redis (IDEM-1).
///
/// Consumers are single sinks (not replicated), so a plain check-then-mark is race-free.
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    link: RedisLink,
}

impl IdempotencyStore {
    /// Builds the store for `VF_BLOB_REDIS_URL`, with the blob store's scheme rules (BLOB-4,
    /// `VF_CONFIG` on a bad URL). Does not connect; the first [`seen`](Self::seen) does.
    pub fn connect(url: &str) -> Result<Self, VfError> {
        Ok(IdempotencyStore {
            link: RedisLink::open(url)?,
        })
    }

    /// Replaces the bound on connecting and on each reply (default
    /// [`crate::blob::DEFAULT_STORE_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.link.set_timeout(timeout);
        self
    }

    /// Whether the effect of group `key` (its raw 32-hex `last_input_key`) was already applied:
    /// `EXISTS <key> == 1`.
    ///
    /// A store failure is returned, never guessed: an unreachable store is `VF_TRANSIENT`
    /// (the group is redelivered later), any other refusal `VF_RESOURCE_UNAVAILABLE`.
    pub async fn seen(&self, key: &str) -> Result<bool, VfError> {
        let mut exists = redis::cmd("EXISTS");
        exists.arg(key);
        self.link
            .query::<i64>(&exists)
            .await
            .map(|n| n == 1)
            .map_err(|e| store_error(&e, "checking", key))
    }

    /// Records that the effect of group `key` was applied: `SET <key> "1" EX 86400`.
    ///
    /// Call it after the consume succeeded and before the ack, so a crash in between replays
    /// at most the ack, never the effect.
    pub async fn mark(&self, key: &str) -> Result<(), VfError> {
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg("1")
            .arg("EX")
            .arg(EFFECT_RETENTION_SECONDS);
        self.link
            .query::<()>(&set)
            .await
            .map_err(|e| store_error(&e, "writing", key))
    }
}

fn store_error(e: &redis::RedisError, what: &str, key: &str) -> VfError {
    let code = if is_transport_failure(e) {
        ErrorCode::Transient
    } else {
        ErrorCode::ResourceUnavailable
    };
    VfError::new(
        code,
        format!("idempotency store failed {what} marker {key}: {e}"),
    )
    .with_remedy("Check the Redis at VF_BLOB_REDIS_URL; the group is retried.")
    .with_context("key", key)
}
