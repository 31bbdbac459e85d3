//! `redis://` / `rediss://` (STORE-5/6): the ledger shared across hosts.
//!
//! Every key is the hash `vfrt:<key>` with fields `value` and `version`; every mutation is
//! WATCH → HGETALL → compare → MULTI → HSET/DEL → EXEC on that one key (no Lua, no
//! cross-slot commands). A version mismatch answers `false` at once; a WATCH conflict (someone
//! touched the key between our read and our EXEC) is retried up to
//! [`TRANSACTION_RETRIES`] times with a short random sleep, then answers `false`.
//!
//! WATCH state belongs to a connection, so every transaction takes a connection of its own
//! from a small pool ([`TRANSACTION_CONNECTIONS`] at most) and holds it from WATCH to EXEC:
//! nothing else of this process can slip a command in between, and the transactions of a
//! whole in-flight window (outbox records, terminators) run side by side instead of queueing
//! on one connection. Commands outside a transaction (reads, RPUSH, LRANGE, SCAN) share one
//! multiplexed connection, on which concurrent callers are pipelined.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};
use tokio::sync::{Mutex, Semaphore};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;
use videoflow_core::redact::{redact_text, redact_url};
use videoflow_core::scaling::Observation;

use super::kv::{Purged, ScanRow, Versioned, unreachable};

/// Key prefix on the server, so the ledger never collides with a payload store sharing it.
pub const KEY_PREFIX: &str = "vfrt:";
/// WATCH conflicts retried before `cas`/`delete` answer `false` (STORE-5).
pub const TRANSACTION_RETRIES: u32 = 8;
/// Bound on connecting and on each reply.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections transactions may hold at once (each WATCH needs one of its own).
pub const TRANSACTION_CONNECTIONS: usize = 8;

/// The Redis runtime store. Clones share the connections.
#[derive(Clone)]
pub struct RedisStore {
    /// Boxed: with TLS compiled in, the client's connection info is a few hundred bytes.
    client: Box<redis::Client>,
    /// Commands outside a transaction: cloned per call, so concurrent calls pipeline.
    shared: Arc<Mutex<Option<MultiplexedConnection>>>,
    /// Idle transaction connections.
    idle: Arc<std::sync::Mutex<Vec<MultiplexedConnection>>>,
    /// One permit per transaction connection in use.
    transactions: Arc<Semaphore>,
    timeout: Duration,
    /// The URL with its password masked, for what the capabilities read-back reports.
    shown: String,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// One `SCAN cursor MATCH pattern COUNT 500` page: the next cursor and the keys.
async fn scan_page(
    c: &mut MultiplexedConnection,
    cursor: u64,
    pattern: &str,
) -> Result<(u64, Vec<String>), RedisError> {
    redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(500)
        .query_async(c)
        .await
}

/// Backslash-escapes SCAN's glob characters (`*`, `?`, `[`) and the backslash itself.
fn escape_glob(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn open_client(url: &str) -> Result<redis::Client, VfError> {
    redis::Client::open(url).map_err(|e| {
        VfError::new(
            ErrorCode::Config,
            format!("Runtime store URL {} is not usable: {e}", py_repr_str(url)),
        )
        .with_remedy("Use redis://host:6379/0, or rediss://host:6380/0 for TLS.")
    })
}

async fn connect(
    client: &redis::Client,
    timeout: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

impl RedisStore {
    /// Parses the URL; no I/O (the first operation connects).
    ///
    /// # Errors
    /// `VF_CONFIG` for a malformed URL.
    pub fn open(url: &str) -> Result<Self, VfError> {
        Ok(RedisStore {
            client: Box::new(open_client(url)?),
            shared: Arc::new(Mutex::new(None)),
            idle: Arc::new(std::sync::Mutex::new(Vec::new())),
            transactions: Arc::new(Semaphore::new(TRANSACTION_CONNECTIONS)),
            timeout: DEFAULT_TIMEOUT,
            shown: redact_url(url),
        })
    }

    /// Replaces the connect/reply bound.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs `work` on the shared connection (a clone of it: concurrent calls pipeline); a
    /// transport failure drops it so the next call reconnects.
    async fn with_conn<T>(
        &self,
        verb: &str,
        key: &str,
        work: impl AsyncFnOnce(&mut MultiplexedConnection) -> Result<T, RedisError>,
    ) -> Result<T, VfError> {
        let mut conn = {
            let mut slot = self.shared.lock().await;
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = connect(&self.client, self.timeout)
                        .await
                        .map_err(|e| unreachable(verb, key, e))?;
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        let result = work(&mut conn).await;
        if result.as_ref().is_err_and(is_transport) {
            *self.shared.lock().await = None;
        }
        result.map_err(|e| refused(verb, key, e))
    }

    /// Runs `work` — one WATCH … EXEC — on a connection nothing else uses meanwhile, taken
    /// from the idle ones or opened; it goes back only after a clean end (an error may leave
    /// a WATCH behind, so that connection is dropped).
    async fn with_transaction_conn<T>(
        &self,
        verb: &str,
        key: &str,
        work: impl AsyncFnOnce(&mut MultiplexedConnection) -> Result<T, RedisError>,
    ) -> Result<T, VfError> {
        let _permit = self
            .transactions
            .acquire()
            .await
            .map_err(|e| unreachable(verb, key, e))?;
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let mut conn = match idle {
            Some(c) => c,
            None => connect(&self.client, self.timeout)
                .await
                .map_err(|e| unreachable(verb, key, e))?,
        };
        let result = work(&mut conn).await;
        if result.is_ok() {
            self.idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(conn);
        }
        result.map_err(|e| refused(verb, key, e))
    }

    /// STORE-1 `get`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be read.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, VfError> {
        let k = format!("{KEY_PREFIX}{key}");
        self.with_conn("reading", key, async move |c| {
            let h: HashMap<String, Vec<u8>> = redis::cmd("HGETALL").arg(&k).query_async(c).await?;
            Ok(versioned(h))
        })
        .await
    }

    /// STORE-1 `cas` (WATCH/MULTI/EXEC, bounded retries).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be written.
    pub async fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        value: &[u8],
    ) -> Result<bool, VfError> {
        self.transaction("writing", key, expected, Some(value))
            .await
    }

    /// STORE-1 `delete` (WATCH/MULTI/EXEC, bounded retries).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be written.
    pub async fn delete(&self, key: &str, expected: Option<&str>) -> Result<bool, VfError> {
        self.transaction("deleting", key, expected, None).await
    }

    async fn transaction(
        &self,
        verb: &str,
        key: &str,
        expected: Option<&str>,
        value: Option<&[u8]>,
    ) -> Result<bool, VfError> {
        let k = format!("{KEY_PREFIX}{key}");
        for attempt in 0..TRANSACTION_RETRIES {
            let done = self
                .with_transaction_conn(verb, key, async |c| {
                    redis::cmd("WATCH").arg(&k).query_async::<()>(c).await?;
                    let h: HashMap<String, Vec<u8>> =
                        redis::cmd("HGETALL").arg(&k).query_async(c).await?;
                    let current = versioned(h);
                    let matches = match (&current, expected) {
                        (None, None) => true,
                        (Some(cur), Some(e)) => cur.version == e,
                        // Delete without an expected version is unconditional.
                        (Some(_), None) => value.is_none(),
                        (None, Some(_)) => false,
                    };
                    if !matches || (current.is_none() && value.is_none()) {
                        redis::cmd("UNWATCH").query_async::<()>(c).await?;
                        // A missing key deletes "successfully" iff nothing was expected.
                        return Ok(Some(
                            current.is_none() && value.is_none() && expected.is_none(),
                        ));
                    }
                    let mut pipe = redis::pipe();
                    pipe.atomic();
                    match value {
                        Some(v) => {
                            let next = current
                                .and_then(|c| c.version.parse::<u64>().ok())
                                .map_or(1, |n| n + 1);
                            pipe.cmd("HSET")
                                .arg(&k)
                                .arg("value")
                                .arg(v)
                                .arg("version")
                                .arg(next.to_string())
                                .ignore();
                        }
                        None => {
                            pipe.cmd("DEL").arg(&k).ignore();
                        }
                    }
                    let exec: Option<redis::Value> = pipe.query_async(c).await?;
                    Ok(exec.map(|_| true))
                })
                .await?;
            if let Some(outcome) = done {
                return Ok(outcome);
            }
            // WATCH conflict: sleep U(0, 2 ms) × (attempt + 1), then retry.
            let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 2_000 / 255;
            tokio::time::sleep(Duration::from_micros(jitter * u64::from(attempt + 1))).await;
        }
        Ok(false)
    }

    /// STORE-1 `append` (RPUSH on `vfrt:log:<log>`).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be written.
    pub async fn append(&self, log: &str, record: &[u8]) -> Result<u64, VfError> {
        let k = format!("{KEY_PREFIX}log:{log}");
        self.with_conn("appending to", log, async move |c| {
            redis::cmd("RPUSH").arg(&k).arg(record).query_async(c).await
        })
        .await
    }

    /// `append` of every record in order: one RPUSH with every value; returns the list's
    /// length after the last.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be written.
    pub async fn append_all(&self, log: &str, records: &[Vec<u8>]) -> Result<u64, VfError> {
        let k = format!("{KEY_PREFIX}log:{log}");
        self.with_conn("appending to", log, async move |c| {
            redis::cmd("RPUSH")
                .arg(&k)
                .arg(records)
                .query_async(c)
                .await
        })
        .await
    }

    /// STORE-1 `log_entries` (LRANGE 0 -1).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be read.
    pub async fn log_entries(&self, log: &str) -> Result<Vec<Vec<u8>>, VfError> {
        let k = format!("{KEY_PREFIX}log:{log}");
        self.with_conn("reading", log, async move |c| {
            redis::cmd("LRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .query_async(c)
                .await
        })
        .await
    }

    /// STORE-1 `scan` (SCAN MATCH `vfrt:<escaped prefix>*` COUNT 500, then HGETALL each).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be read.
    pub async fn scan(&self, prefix: &str) -> Result<Vec<ScanRow>, VfError> {
        let pattern = format!("{KEY_PREFIX}{}*", escape_glob(prefix));
        let log_prefix = format!("{KEY_PREFIX}log:");
        self.with_conn("scanning", prefix, async move |c| {
            let mut cursor: u64 = 0;
            let mut keys = Vec::new();
            loop {
                let (next, page) = scan_page(c, cursor, &pattern).await?;
                keys.extend(page);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            keys.sort();
            keys.dedup();
            let mut rows = Vec::new();
            for k in keys {
                if k.starts_with(&log_prefix) && !prefix.starts_with("log:") {
                    continue; // logs are lists, not documents
                }
                let h: HashMap<String, Vec<u8>> =
                    redis::cmd("HGETALL").arg(&k).query_async(c).await?;
                if let Some(v) = versioned(h) {
                    rows.push((k[KEY_PREFIX.len()..].to_owned(), v.value, v.version));
                }
            }
            Ok(rows)
        })
        .await
    }

    /// Deletes every key (`vfrt:<prefix>*`) and every log (`vfrt:log:<prefix>*`) under
    /// `prefix`: SCAN with the escaped prefix, then UNLINK per page, so nothing outside the
    /// prefix is ever named.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when Redis cannot be scanned or written.
    pub async fn purge(&self, prefix: &str) -> Result<Purged, VfError> {
        let keys = self
            .unlink_matching(prefix, format!("{KEY_PREFIX}{}*", escape_glob(prefix)))
            .await?;
        let logs = self
            .unlink_matching(prefix, format!("{KEY_PREFIX}log:{}*", escape_glob(prefix)))
            .await?;
        Ok(Purged { keys, logs })
    }

    async fn unlink_matching(&self, prefix: &str, pattern: String) -> Result<usize, VfError> {
        self.with_conn("purging", prefix, async move |c| {
            let mut cursor: u64 = 0;
            let mut removed = 0usize;
            loop {
                let (next, page) = scan_page(c, cursor, &pattern).await?;
                if !page.is_empty() {
                    let n: usize = redis::cmd("UNLINK").arg(&page).query_async(c).await?;
                    removed += n;
                }
                cursor = next;
                if cursor == 0 {
                    return Ok(removed);
                }
            }
        })
        .await
    }

    /// STORE-6: the durability read back over this store's connection.
    pub async fn durability(&self) -> Observation<bool> {
        observe_durability(&self.client, &self.shown, self.timeout).await
    }
}

fn versioned(mut h: HashMap<String, Vec<u8>>) -> Option<Versioned> {
    let value = h.remove("value")?;
    let version = String::from_utf8_lossy(&h.remove("version")?).into_owned();
    Some(Versioned { value, version })
}

/// STORE-5's unreachable error for a transport failure, else the refusal.
fn refused(verb: &str, key: &str, e: RedisError) -> VfError {
    if is_transport(&e) {
        unreachable(verb, key, e)
    } else {
        VfError::new(
            ErrorCode::Transient,
            format!("runtime store refused {verb} '{key}': {e}"),
        )
        .with_remedy("Check the Redis behind VF_RUNTIME_STORE_URL.")
    }
}

fn is_transport(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.to_string().contains("LOADING")
}

/// STORE-6 for any Redis URL (the runtime store, the blob store): CONFIG GET `appendonly`,
/// `save`, `maxmemory-policy`. Durable `Known(true)` iff persistence is on (`appendonly yes`
/// or a non-empty `save`) and the policy is `noeviction`; CONFIG refused ⇒ Unknown(`auth`);
/// unreachable ⇒ Unknown(`unreachable`); no answer within `timeout` ⇒ Unknown(`timeout`).
/// A malformed URL is Unknown(`config`).
///
/// Every Unknown's detail starts with the URL, its password masked, so whoever reads it knows
/// which store; an `auth` detail says whether the server refused the credentials (a wrong or
/// missing password: [`CREDENTIALS_REFUSED`]) or only the CONFIG command
/// ([`CONFIG_REFUSED`]), since the fixes differ.
pub async fn redis_durability(url: &str, timeout: Duration) -> Observation<bool> {
    let shown = redact_url(url);
    match redis::Client::open(url) {
        Ok(client) => observe_durability(&client, &shown, timeout).await,
        Err(e) => Observation::unknown("config", redact_text(&format!("{shown}: {e}"))),
    }
}

/// The words of an `auth` Unknown whose server refused the credentials.
pub const CREDENTIALS_REFUSED: &str = "credentials refused";
/// The words of an `auth` Unknown whose server refused only `CONFIG GET`.
pub const CONFIG_REFUSED: &str = "CONFIG GET refused";

/// Whether Redis refused who we are rather than what we asked: a wrong password or user
/// (the client's AUTH at connect), or a command sent without the password the server
/// requires (`NOAUTH`).
fn credentials_refused(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

async fn observe_durability(
    client: &redis::Client,
    shown: &str,
    timeout: Duration,
) -> Observation<bool> {
    let read = async {
        let mut c = connect(client, timeout).await?;
        let mut get = async |name: &str| -> Result<String, RedisError> {
            let pairs: HashMap<String, String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut c)
                .await?;
            Ok(pairs
                .get(name)
                .map(|v| v.trim().to_owned())
                .unwrap_or_default())
        };
        let appendonly = get("appendonly").await?;
        let save = get("save").await?;
        let policy = get("maxmemory-policy").await?;
        Ok::<_, RedisError>((appendonly, save, policy))
    };
    let unknown = |reason: &str, detail: String| {
        Observation::unknown(reason, redact_text(&format!("{shown}: {detail}")))
    };
    match tokio::time::timeout(timeout + Duration::from_millis(500), read).await {
        Err(_) => unknown(
            "timeout",
            format!("no answer within {} s", timeout.as_secs_f64()),
        ),
        Ok(Err(e)) if e.is_timeout() => unknown("timeout", e.to_string()),
        Ok(Err(e)) if credentials_refused(&e) => {
            unknown("auth", format!("{CREDENTIALS_REFUSED}: {e}"))
        }
        Ok(Err(e)) if is_transport(&e) => unknown("unreachable", e.to_string()),
        Ok(Err(e)) => unknown("auth", format!("{CONFIG_REFUSED}: {e}")),
        Ok(Ok((appendonly, save, policy))) => {
            let persistent = appendonly.eq_ignore_ascii_case("yes") || !save.is_empty();
            Observation::Known(persistent && policy == "noeviction")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_5_scan_pattern_escapes_glob_characters() {
        assert_eq!(escape_glob("vf/f/r/n/a*b?[c]"), "vf/f/r/n/a\\*b\\?\\[c\\]");
    }
}
