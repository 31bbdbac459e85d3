//! `memory://` (STORE-3): one process's ledger. Versions `"1"`, `"2"`, …; never durable,
//! never shared, so it never qualifies a profile or a slot claim.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::kv::{Purged, ScanRow, Versioned};

#[derive(Debug, Default)]
struct State {
    keys: BTreeMap<String, (Vec<u8>, u64)>,
    logs: BTreeMap<String, Vec<Vec<u8>>>,
}

/// The per-process store. Clones share one map.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written entry: every
        // mutation below is one insert or remove.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// STORE-1 `get`.
    pub fn get(&self, key: &str) -> Option<Versioned> {
        self.lock().keys.get(key).map(|(v, n)| Versioned {
            value: v.clone(),
            version: n.to_string(),
        })
    }

    /// STORE-1 `cas`.
    pub fn cas(&self, key: &str, expected: Option<&str>, value: &[u8]) -> bool {
        let mut state = self.lock();
        let current = state.keys.get(key).map(|(_, n)| n.to_string());
        if current.as_deref() != expected {
            return false;
        }
        let next = state.keys.get(key).map_or(1, |(_, n)| n + 1);
        state.keys.insert(key.to_owned(), (value.to_vec(), next));
        true
    }

    /// STORE-1 `append`.
    pub fn append(&self, log: &str, record: &[u8]) -> u64 {
        let mut state = self.lock();
        let entries = state.logs.entry(log.to_owned()).or_default();
        entries.push(record.to_vec());
        entries.len() as u64
    }

    /// `append` of every record in order; returns the length after the last.
    pub fn append_all(&self, log: &str, records: &[Vec<u8>]) -> u64 {
        let mut state = self.lock();
        let entries = state.logs.entry(log.to_owned()).or_default();
        entries.extend(records.iter().cloned());
        entries.len() as u64
    }

    /// STORE-1 `log_entries`.
    pub fn log_entries(&self, log: &str) -> Vec<Vec<u8>> {
        self.lock().logs.get(log).cloned().unwrap_or_default()
    }

    /// STORE-1 `scan`.
    pub fn scan(&self, prefix: &str) -> Vec<ScanRow> {
        self.lock()
            .keys
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (v, n))| (k.clone(), v.clone(), n.to_string()))
            .collect()
    }

    /// STORE-1 `delete`.
    pub fn delete(&self, key: &str, expected: Option<&str>) -> bool {
        let mut state = self.lock();
        let Some(current) = state.keys.get(key).map(|(_, n)| n.to_string()) else {
            return expected.is_none();
        };
        if expected.is_some_and(|e| e != current) {
            return false;
        }
        state.keys.remove(key);
        true
    }

    /// Deletes every key and every log whose name starts with `prefix`.
    pub fn purge(&self, prefix: &str) -> Purged {
        let mut state = self.lock();
        let before = (state.keys.len(), state.logs.len());
        state.keys.retain(|k, _| !k.starts_with(prefix));
        state.logs.retain(|l, _| !l.starts_with(prefix));
        Purged {
            keys: before.0 - state.keys.len(),
            logs: before.1 - state.logs.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_1_and_3_memory_semantics() {
        let s = MemoryStore::new();
        assert!(s.cas("a", None, b"1"));
        assert!(!s.cas("a", None, b"x"));
        assert_eq!(s.get("a").expect("test value").version, "1");
        assert!(s.cas("a", Some("1"), b"2"));
        assert!(!s.cas("a", Some("1"), b"3"));
        assert_eq!(s.get("a").expect("test value").value, b"2");
        assert!(s.cas("ab", None, b"z"));
        assert!(s.cas("b", None, b"z"));
        let keys: Vec<String> = s.scan("a").into_iter().map(|r| r.0).collect();
        assert_eq!(keys, vec!["a", "ab"]);
        assert_eq!(s.append("l", b"x"), 1);
        assert_eq!(s.append("l", b"y"), 2);
        assert_eq!(s.log_entries("l"), vec![b"x".to_vec(), b"y".to_vec()]);
        assert!(s.log_entries("none").is_empty());
        assert!(!s.delete("a", Some("1")));
        assert!(s.delete("a", Some("2")));
        assert!(s.delete("missing", None));
        assert!(!s.delete("missing", Some("1")));
    }
}
