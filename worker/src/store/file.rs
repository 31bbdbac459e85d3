//! `file://<dir>` (STORE-4): the ledger of every worker on one host.
//!
//! One file per key, `<key with "/" → "%2F">.json` holding `{"value": "<hex>", "version": n}`,
//! written to `<file>.json.tmp`, synced and renamed over — or, for a key that did not exist,
//! written to a file with no name yet, synced and linked to the key — so a crash leaves the
//! old or the new document, never half of one. `get`, `cas` and `delete` hold an exclusive `flock` on
//! `<file>.json.lock` — the same lock files 1.0.4 takes, so implementations can share a
//! directory. Logs are `<log>.log`, one hex record per line, appended under
//! `log:<log>.json.lock`.
//!
//! Writes (`cas`, `append`) go through one writer thread per store that commits whatever is
//! queued as one batch — one parallel round of syncs and one directory sync — and answers each
//! caller only once its record is durable (see [`commit`]). It keeps each log's line count,
//! so an append reads only what another writer (a sibling replica, a 1.0.4 worker) appended
//! since. Reads run on tokio's blocking pool.

mod commit;
mod disk;
mod logs;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;

use super::kv::{Purged, ScanRow, Versioned};
use commit::{Committer, Op};
use disk::{
    StoreFile, classify, decode, doc_path, key_lock_name, log_lock_name, log_path, read_doc,
    read_lines,
};
/// The file-level steps a new document takes (STORE-4, COMPATIBILITY D25), for measuring them
/// alone (the flow bench's `layout_rate`).
pub use disk::{lock, name_unnamed, unnamed};

/// The file store rooted at one directory. Clones share the writer thread.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
    committer: Arc<Committer>,
}

fn io_error(verb: &str, key: &str, e: impl std::fmt::Display) -> VfError {
    VfError::new(
        ErrorCode::Transient,
        format!("runtime store failed {verb} '{key}': {e}"),
    )
    .with_remedy("Check the directory behind VF_RUNTIME_STORE_URL (space, permissions).")
}

/// What a caller gets when the writer thread is gone (it ended or could not answer).
const WRITER_GONE: &str = "the store's writer thread stopped";

impl FileStore {
    /// The store for a `file://` URL: directory = host + path unless the host is empty or
    /// `localhost` (then path). Creates the directory.
    ///
    /// # Errors
    /// `VF_CONFIG` `file:// runtime store URL '<u>' names no directory. …`, or when the
    /// directory cannot be created.
    pub fn from_url(url: &str) -> Result<Self, VfError> {
        let rest = url.split_once("://").map_or("", |(_, r)| r);
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let root = if host.is_empty() || host == "localhost" {
            path.to_owned()
        } else {
            format!("{host}{path}")
        };
        if root.is_empty() {
            return Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "file:// runtime store URL {} names no directory. Use file:///path/to/ledger.",
                    py_repr_str(url)
                ),
            )
            .with_remedy("Use file:///path/to/ledger."));
        }
        FileStore::new(root)
    }

    /// The store rooted at `root` (created if missing).
    ///
    /// # Errors
    /// `VF_CONFIG` when the directory cannot be created.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, VfError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| {
            VfError::new(
                ErrorCode::Config,
                format!(
                    "cannot create the runtime store directory {}: {e}",
                    root.display()
                ),
            )
            .with_remedy("Point VF_RUNTIME_STORE_URL at a writable directory.")
        })?;
        let committer = Committer::start(root.clone()).map_err(|e| {
            VfError::new(
                ErrorCode::Config,
                format!(
                    "cannot start the writer thread of the runtime store {}: {e}",
                    root.display()
                ),
            )
            .with_remedy("Raise the process's thread limit.")
        })?;
        Ok(FileStore {
            root,
            committer: Arc::new(committer),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `(batches, operations)` the writer thread committed so far: operations per batch is
    /// how much group commit saved.
    pub fn commit_stats(&self) -> (u64, u64) {
        self.committer.stats()
    }

    /// Batches the writer thread made durable with one sync of the whole file system (a
    /// batch of many files) instead of a sync per file.
    pub fn filesystem_syncs(&self) -> u64 {
        self.committer.filesystem_syncs()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        verb: &'static str,
        key: &str,
        work: impl FnOnce(&Path) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, VfError> {
        let root = self.root.clone();
        let owned = key.to_owned();
        match tokio::task::spawn_blocking(move || work(&root)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(io_error(verb, &owned, e)),
            Err(e) => Err(io_error(verb, &owned, e)),
        }
    }

    /// STORE-1 `get`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure or a malformed document.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, VfError> {
        let k = key.to_owned();
        self.blocking("reading", key, move |root| {
            let _lock = lock(root, &key_lock_name(&k))?;
            read_doc(&doc_path(root, &k))
        })
        .await
    }

    /// STORE-1 `cas`, answered once the new document is durable (group commit).
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        value: &[u8],
    ) -> Result<bool, VfError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let op = Op::Cas {
            key: key.to_owned(),
            expected: expected.map(str::to_owned),
            value: value.to_vec(),
            reply,
        };
        self.committed("writing", key, op, answer).await
    }

    /// STORE-1 `append`: one hex line, durable before it is answered; returns the line count.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn append(&self, log: &str, record: &[u8]) -> Result<u64, VfError> {
        self.append_all(log, vec![record.to_vec()]).await
    }

    /// `append` of every record in order, in one write; returns the line count after the
    /// last.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn append_all(&self, log: &str, records: Vec<Vec<u8>>) -> Result<u64, VfError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let op = Op::Append {
            log: log.to_owned(),
            records,
            reply,
        };
        self.committed("appending to", log, op, answer).await
    }

    /// Queues `op` for the writer thread and waits for its answer.
    async fn committed<T>(
        &self,
        verb: &str,
        key: &str,
        op: Op,
        answer: tokio::sync::oneshot::Receiver<std::io::Result<T>>,
    ) -> Result<T, VfError> {
        if self.committer.submit(op).is_err() {
            return Err(io_error(verb, key, WRITER_GONE));
        }
        match answer.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(io_error(verb, key, e)),
            Err(_) => Err(io_error(verb, key, WRITER_GONE)),
        }
    }

    /// STORE-1 `log_entries`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure or a line that is not hex.
    pub async fn log_entries(&self, log: &str) -> Result<Vec<Vec<u8>>, VfError> {
        let l = log.to_owned();
        self.blocking("reading", log, move |root| {
            read_lines(&log_path(root, &l))?
                .iter()
                .map(|line| hex::decode(line).map_err(std::io::Error::other))
                .collect()
        })
        .await
    }

    /// STORE-1 `scan` (reads without locking, as STORE-4 says).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the directory cannot be listed.
    pub async fn scan(&self, prefix: &str) -> Result<Vec<ScanRow>, VfError> {
        let p = prefix.to_owned();
        self.blocking("scanning", prefix, move |root| {
            let mut rows = Vec::new();
            for entry in fs::read_dir(root)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(stem) = name.strip_suffix(".json") else {
                    continue;
                };
                let key = decode(stem);
                if !key.starts_with(&p) {
                    continue;
                }
                if let Some(doc) = read_doc(&entry.path())? {
                    rows.push((key, doc.value, doc.version));
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(rows)
        })
        .await
    }

    /// STORE-1 `delete`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn delete(&self, key: &str, expected: Option<&str>) -> Result<bool, VfError> {
        let (k, expected) = (key.to_owned(), expected.map(str::to_owned));
        self.blocking("deleting", key, move |root| {
            let _lock = lock(root, &key_lock_name(&k))?;
            let path = doc_path(root, &k);
            let Some(current) = read_doc(&path)? else {
                return Ok(expected.is_none());
            };
            if expected.as_ref().is_some_and(|e| *e != current.version) {
                return Ok(false);
            }
            fs::remove_file(&path)?;
            Ok(true)
        })
        .await
    }

    /// Deletes every key and log whose name starts with `prefix`: documents under their
    /// key's lock, logs under theirs, then the lock files and any temporary file left by a
    /// crash. Meant for a run nobody writes any more (teardown): a writer that still holds
    /// a lock is waited for, one that comes after the purge writes a new file.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the directory cannot be listed or a file cannot be removed.
    pub async fn purge(&self, prefix: &str) -> Result<Purged, VfError> {
        let p = prefix.to_owned();
        self.blocking("purging", prefix, move |root| {
            let mut keys = std::collections::BTreeSet::new();
            let mut logs = std::collections::BTreeSet::new();
            for entry in fs::read_dir(root)? {
                let name = entry?.file_name().to_string_lossy().into_owned();
                match classify(&name) {
                    Some(StoreFile::Key(k)) if k.starts_with(&p) => {
                        keys.insert(k);
                    }
                    Some(StoreFile::Log(l)) if l.starts_with(&p) => {
                        logs.insert(l);
                    }
                    _ => {}
                }
            }
            let mut purged = Purged::default();
            for key in &keys {
                let lock_name = key_lock_name(key);
                let held = lock(root, &lock_name)?;
                purged.keys += usize::from(remove_if_present(&doc_path(root, key))?);
                let mut tmp = doc_path(root, key).into_os_string();
                tmp.push(".tmp");
                remove_if_present(std::path::Path::new(&tmp))?;
                remove_if_present(&root.join(&lock_name))?;
                drop(held);
            }
            for log in &logs {
                let lock_name = log_lock_name(log);
                let held = lock(root, &lock_name)?;
                purged.logs += usize::from(remove_if_present(&log_path(root, log))?);
                remove_if_present(&root.join(&lock_name))?;
                drop(held);
            }
            Ok(purged)
        })
        .await
    }
}

/// Removes `path`; `false` when it was not there.
fn remove_if_present(path: &Path) -> std::io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
