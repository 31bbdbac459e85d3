//! Runtime stores (§11.3, STORE-1..6): the run ledger's key-value store, selected by the
//! scheme of `VF_RUNTIME_STORE_URL`.
//!
//! Why a ledger at all: completion barriers, replica slots, sink markers and terminators must
//! survive a restart and be visible to every replica of a node, which process memory cannot
//! give. Why capabilities are *read back*: a Redis without persistence, or one that evicts
//! keys under memory pressure, silently forgets the ledger, so a store is "durable" only when
//! its configuration says so — and when the configuration cannot be read the answer is
//! Unknown, never a guess.
//!
//! - [`memory`] — `memory://`: per process, never durable (STORE-3).
//! - [`file`] — `file://<dir>`: one file per key, `flock`ed, synced by group commit (STORE-4).
//! - [`redis`] — `redis://` / `rediss://`: hashes with WATCH/MULTI/EXEC CAS (STORE-5/6).
//! - [`lease`] — partition leases and the replica slot claim (§11.2, ENV-5 step 3).
//! - `kv` — what every backend returns: versioned values, scan rows, the unreachable error.
//! - [`ledger`] — the run ledger's records: terminators, received ids, published ids, completions, effect markers (§11.2).
//! - [`unobserved`] — the WARNING and the fix when a store's durability cannot be read back.
//! - `pending` — a ledger write in flight that several parties wait for (EOS-7 (b) notes).
//!
//! The interface is STORE-1's: versions are opaque strings minted by the store; `cas` with
//! no expected version creates; `delete` with no expected version deletes unconditionally.

pub mod file;
mod kv;
pub mod lease;
pub mod ledger;
pub mod memory;
mod pending;
pub mod redis;
pub mod tls;
pub mod unobserved;

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;
use videoflow_core::scaling::Observation;

pub use file::FileStore;
pub use kv::{Purged, ScanRow, Versioned};
pub use lease::{LeaseHolder, SlotClaim, claim_slot};
pub use ledger::RunLedger;
pub use memory::MemoryStore;
pub use pending::PendingWrite;
pub use redis::{RedisStore, redis_durability};

pub use crate::config::DEFAULT_RUNTIME_STORE_URL;
/// The schemes a URL may name, as STORE-2's error lists them.
pub const KNOWN_SCHEMES: [&str; 4] = ["file", "memory", "redis", "rediss"];
/// How often a read-modify-write on one key is retried before it is an error (§11.2).
pub const CAS_ATTEMPTS: usize = 16;

/// What a store can promise (STORE-3/4/6), as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreCapabilities {
    /// `memory`, `file` or `redis`.
    pub scheme: String,
    /// Whether a write survives a restart of the store; Unknown when unreadable.
    pub durable: Observation<bool>,
    /// Whether processes (replicas) see each other's records.
    pub shared: bool,
}

impl StoreCapabilities {
    /// STORE-6 / STREAM-15: durable `Known(true)` and shared — the only state in which the
    /// ledger qualifies for `restart_safe`, `durable_control` and slot claims.
    pub fn durable_and_shared(&self) -> bool {
        matches!(self.durable, Observation::Known(true)) && self.shared
    }
}

/// A runtime store, chosen by URL scheme. Cheap to clone (shared state behind handles).
///
/// Every operation's Redis arm is boxed: a Redis client future is about ten times the size of
/// the file store's, and an `async fn` over this enum is as large as its largest arm, so
/// inline it would set the size of every ledger operation, and so of every settlement task
/// waiting on one: ~2.7 KiB a message in flight where the file store's own future is
/// 0.25 KiB. A network round trip dwarfs the allocation.
#[derive(Debug, Clone)]
pub enum RuntimeStore {
    /// `memory://`.
    Memory(MemoryStore),
    /// `file://<dir>`.
    File(FileStore),
    /// `redis://` / `rediss://`.
    Redis(RedisStore),
}

/// The lower-cased scheme of `url` (`memory` for an empty URL).
pub fn scheme_of(url: &str) -> String {
    if url.is_empty() {
        return "memory".to_owned();
    }
    url.split_once(':')
        .map(|(s, _)| s.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

impl RuntimeStore {
    /// Opens the store `url` names (STORE-2; empty ⇒ `memory://`). No I/O for Redis (the
    /// first operation connects); the file store creates its directory.
    ///
    /// # Errors
    /// `VF_CONFIG` for an unknown scheme (naming the known ones), a `file://` URL without a
    /// directory, an unusable directory or a malformed Redis URL. (1.0.4 fails untyped here;
    /// this SDK reports a typed configuration error, ENV-1.)
    pub fn open(url: &str) -> Result<Self, VfError> {
        let url = if url.is_empty() {
            DEFAULT_RUNTIME_STORE_URL
        } else {
            url
        };
        match scheme_of(url).as_str() {
            "memory" => Ok(RuntimeStore::Memory(MemoryStore::new())),
            "file" => Ok(RuntimeStore::File(FileStore::from_url(url)?)),
            "redis" | "rediss" => Ok(RuntimeStore::Redis(RedisStore::open(url)?)),
            other => Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "No runtime store is registered for scheme {} (URL {}). Known schemes: {}. \
                     Register one with videoflow.runtime.runtime_stores.register_runtime_store.",
                    py_repr_str(other),
                    py_repr_str(url),
                    KNOWN_SCHEMES.join(", ")
                ),
            )
            .with_remedy(
                "Set VF_RUNTIME_STORE_URL to memory://, file:///path/to/ledger or redis://host:6379/0 \
                 (this SDK has no store registry).",
            )
            .with_context("VF_RUNTIME_STORE_URL", url)),
        }
    }

    /// `get(key) → (value, version)`, `None` when the key does not exist.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.get(key)),
            RuntimeStore::File(s) => s.get(key).await,
            RuntimeStore::Redis(s) => Box::pin(s.get(key)).await,
        }
    }

    /// Compare-and-swap: writes `value` iff the key's version is `expected` (`None`: the key
    /// must not exist). `false` on a mismatch.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        value: &[u8],
    ) -> Result<bool, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.cas(key, expected, value)),
            RuntimeStore::File(s) => s.cas(key, expected, value).await,
            RuntimeStore::Redis(s) => Box::pin(s.cas(key, expected, value)).await,
        }
    }

    /// Appends `record` to the append-only `log`; returns the log's new length.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn append(&self, log: &str, record: &[u8]) -> Result<u64, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.append(log, record)),
            RuntimeStore::File(s) => s.append(log, record).await,
            RuntimeStore::Redis(s) => Box::pin(s.append(log, record)).await,
        }
    }

    /// Appends every record of `records`, in order, in one operation (one write and sync,
    /// one RPUSH); returns the log's length after the last. An empty `records` writes
    /// nothing.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn append_all(&self, log: &str, records: Vec<Vec<u8>>) -> Result<u64, VfError> {
        if records.is_empty() {
            return Ok(self.log_entries(log).await?.len() as u64);
        }
        match self {
            RuntimeStore::Memory(s) => Ok(s.append_all(log, &records)),
            RuntimeStore::File(s) => s.append_all(log, records).await,
            RuntimeStore::Redis(s) => Box::pin(s.append_all(log, &records)).await,
        }
    }

    /// The records of `log`, oldest first (empty for an unknown log).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn log_entries(&self, log: &str) -> Result<Vec<Vec<u8>>, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.log_entries(log)),
            RuntimeStore::File(s) => s.log_entries(log).await,
            RuntimeStore::Redis(s) => Box::pin(s.log_entries(log)).await,
        }
    }

    /// Every key starting with `prefix`, sorted by key.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn scan(&self, prefix: &str) -> Result<Vec<ScanRow>, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.scan(prefix)),
            RuntimeStore::File(s) => s.scan(prefix).await,
            RuntimeStore::Redis(s) => Box::pin(s.scan(prefix)).await,
        }
    }

    /// Deletes `key` iff its version is `expected` (`None`: unconditionally). A missing key
    /// returns whether `expected` was `None`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn delete(&self, key: &str, expected: Option<&str>) -> Result<bool, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.delete(key, expected)),
            RuntimeStore::File(s) => s.delete(key, expected).await,
            RuntimeStore::Redis(s) => Box::pin(s.delete(key, expected)).await,
        }
    }

    /// Deletes every key and log under `prefix` (a retired run's ledger,
    /// [`ledger::run_prefix`]); what it removed.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be listed or written.
    pub async fn purge(&self, prefix: &str) -> Result<Purged, VfError> {
        match self {
            RuntimeStore::Memory(s) => Ok(s.purge(prefix)),
            RuntimeStore::File(s) => s.purge(prefix).await,
            RuntimeStore::Redis(s) => Box::pin(s.purge(prefix)).await,
        }
    }

    /// What the store can promise, read back (STORE-3/4/6).
    pub async fn capabilities(&self) -> StoreCapabilities {
        match self {
            RuntimeStore::Memory(_) => StoreCapabilities {
                scheme: "memory".into(),
                durable: Observation::Known(false),
                shared: false,
            },
            RuntimeStore::File(_) => StoreCapabilities {
                scheme: "file".into(),
                durable: Observation::Known(true),
                shared: true,
            },
            RuntimeStore::Redis(s) => StoreCapabilities {
                scheme: "redis".into(),
                durable: s.durability().await,
                shared: true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's futures are as small as the file store's, not as the Redis client's (see
    /// [`RuntimeStore`]): a ledger write waits in every settlement task in flight.
    #[test]
    fn store_operations_are_the_size_of_the_file_stores_not_the_redis_clients() {
        let store = RuntimeStore::Memory(MemoryStore::new());
        let cas = std::mem::size_of_val(&store.cas("k", None, b"v"));
        let get = std::mem::size_of_val(&store.get("k"));
        let append = std::mem::size_of_val(&store.append_all("k", Vec::new()));
        for (op, size) in [("cas", cas), ("get", get), ("append_all", append)] {
            assert!(size <= 512, "{op}: {size} bytes");
        }
    }

    #[test]
    fn store_2_unknown_scheme_names_the_known_ones() {
        let e = RuntimeStore::open("etcd://x:1").expect_err("must fail");
        assert_eq!(e.code, ErrorCode::Config);
        assert!(e.message.starts_with(
            "No runtime store is registered for scheme 'etcd' (URL 'etcd://x:1'). Known schemes: file, memory, redis, rediss."
        ));
    }

    #[test]
    fn store_2_scheme_is_case_insensitive_and_empty_is_memory() {
        assert!(matches!(
            RuntimeStore::open("").expect("test value"),
            RuntimeStore::Memory(_)
        ));
        assert!(matches!(
            RuntimeStore::open("MEMORY://").expect("test value"),
            RuntimeStore::Memory(_)
        ));
        assert!(matches!(
            RuntimeStore::open("Redis://127.0.0.1:1/0").expect("test value"),
            RuntimeStore::Redis(_)
        ));
    }
}
