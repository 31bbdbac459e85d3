//! Sink idempotency markers (IDEM-1, IDEM-2).
//!
//! Why: JetStream delivers at least once, so a consumer can see a group again after a crash
//! between its side effect and the ack. A consumer that opts in (`idempotent`) checks a marker
//! keyed by the group's `last_input_key` (§5) before consuming — seen ⇒ skip and ack; else
//! consume, [`IdempotencyStore::mark`], ack — which makes its effects "exactly-once-ish".
//!
//! Two homes, as IDEM-1 orders them: the run ledger's effect markers (`effect/{key}`,
//! `{"at","until"}`) when the runtime store is durable and shared — they then survive with
//! the rest of the run's facts — else the Redis at `VF_BLOB_REDIS_URL`: seen =
//! `EXISTS <key> == 1`, mark = `SET <key> "1" EX 86400`. The key is the raw 32-hex id. [`idempotency_key`] (IDEM-2) is provided for parity but,
//! as in 1.0.4's worker path, not applied to the stored key.

use std::time::Duration;

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::msgid::sha256hex;

use crate::blob::{RedisLink, is_transport_failure};
use crate::store::RunLedger;

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
    home: Home,
}

#[derive(Debug, Clone)]
enum Home {
    Redis(RedisLink),
    Ledger(RunLedger),
}

impl IdempotencyStore {
    /// Builds the store for `VF_BLOB_REDIS_URL`, with the blob store's scheme rules (BLOB-4,
    /// `VF_CONFIG` on a bad URL). Does not connect; the first [`seen`](Self::seen) does.
    pub fn connect(url: &str) -> Result<Self, VfError> {
        Ok(IdempotencyStore {
            home: Home::Redis(RedisLink::open(url)?),
        })
    }

    /// Markers in the run ledger (`effect/{key}`), for a ledger that is durable and shared.
    pub fn ledger(ledger: RunLedger) -> Self {
        IdempotencyStore {
            home: Home::Ledger(ledger),
        }
    }

    /// Replaces the bound on connecting and on each reply (default
    /// [`crate::blob::DEFAULT_STORE_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        if let Home::Redis(link) = &mut self.home {
            link.set_timeout(timeout);
        }
        self
    }

    /// Whether the effect of group `key` (its raw 32-hex `last_input_key`) was already applied:
    /// `EXISTS <key> == 1`.
    ///
    /// A store failure is returned, never guessed: an unreachable store is `VF_TRANSIENT`
    /// (the group is redelivered later), any other refusal `VF_RESOURCE_UNAVAILABLE`.
    pub async fn seen(&self, key: &str) -> Result<bool, VfError> {
        let link = match &self.home {
            Home::Ledger(ledger) => return ledger.effect_seen(key).await,
            Home::Redis(link) => link,
        };
        let mut exists = redis::cmd("EXISTS");
        exists.arg(key);
        link.query::<i64>(&exists)
            .await
            .map(|n| n == 1)
            .map_err(|e| store_error(&e, "checking", key))
    }

    /// Records that the effect of group `key` was applied: `SET <key> "1" EX 86400`.
    ///
    /// Call it after the consume succeeded and before the ack, so a crash in between replays
    /// at most the ack, never the effect.
    pub async fn mark(&self, key: &str) -> Result<(), VfError> {
        let link = match &self.home {
            Home::Ledger(ledger) => {
                return ledger
                    .mark_effect(key, EFFECT_RETENTION_SECONDS as f64)
                    .await
                    .map(|_| ());
            }
            Home::Redis(link) => link,
        };
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg("1")
            .arg("EX")
            .arg(EFFECT_RETENTION_SECONDS);
        link.query::<()>(&set)
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
