//! `file://<dir>` (STORE-4): the ledger of every worker on one host.
//!
//! One file per key, `<key with "/" → "%2F">.json` holding `{"value": "<hex>", "version": n}`,
//! written to `<file>.json.tmp`, fsynced and renamed over, so a crash leaves the old or the
//! new document, never half of one. `get`, `cas` and `delete` hold an exclusive `flock` on
//! `<file>.json.lock` — the same lock files 1.0.4 takes, so implementations can share a
//! directory. Logs are `<log>.log`, one hex record per line, appended under
//! `log:<log>.json.lock`; the store keeps each log's line count, so an append reads only what
//! another writer (a sibling replica, a 1.0.4 worker) appended since ([`logs`]). Blocking file
//! work runs on tokio's blocking pool.

mod disk;
mod logs;

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;

use super::kv::{ScanRow, Versioned};
use disk::{
    decode, doc_bytes, doc_path, key_lock_name, lock, log_lock_name, log_path, next_version,
    read_doc, read_lines,
};
use logs::Logs;

/// The file store rooted at one directory. Clones share what it knows of its logs.
#[derive(Clone)]
pub struct FileStore {
    root: PathBuf,
    logs: Arc<Mutex<Logs>>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

fn io_error(verb: &str, key: &str, e: impl std::fmt::Display) -> VfError {
    VfError::new(
        ErrorCode::Transient,
        format!("runtime store failed {verb} '{key}': {e}"),
    )
    .with_remedy("Check the directory behind VF_RUNTIME_STORE_URL (space, permissions).")
}

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
        Ok(FileStore {
            root,
            logs: Arc::new(Mutex::new(Logs::default())),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
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

    /// STORE-1 `cas`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        value: &[u8],
    ) -> Result<bool, VfError> {
        let (k, expected, value) = (key.to_owned(), expected.map(str::to_owned), value.to_vec());
        self.blocking("writing", key, move |root| {
            let _lock = lock(root, &key_lock_name(&k))?;
            let path = doc_path(root, &k);
            let current = read_doc(&path)?;
            if current.as_ref().map(|c| c.version.as_str()) != expected.as_deref() {
                return Ok(false);
            }
            let doc = doc_bytes(&value, next_version(current.as_ref()));
            write_atomically(&path, &doc)?;
            Ok(true)
        })
        .await
    }

    /// STORE-1 `append`: one hex line, fsynced; returns the line count.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn append(&self, log: &str, record: &[u8]) -> Result<u64, VfError> {
        self.append_all(log, vec![record.to_vec()]).await
    }

    /// `append` of every record in order, in one write and one sync; returns the line count
    /// after the last.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn append_all(&self, log: &str, records: Vec<Vec<u8>>) -> Result<u64, VfError> {
        let (l, logs) = (log.to_owned(), self.logs.clone());
        self.blocking("appending to", log, move |root| {
            let _lock = lock(root, &log_lock_name(&l))?;
            // Only this store's own threads wait here, and only for one append.
            let mut logs = logs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let written = logs.write(root, &l, &[records.as_slice()])?;
            written.file.sync_all()?;
            if written.created {
                // A new log is durable only once its directory entry is.
                File::open(root)?.sync_all()?;
            }
            Ok(written.counts.last().copied().unwrap_or(0))
        })
        .await
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
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests;
