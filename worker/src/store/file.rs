//! `file://<dir>` (STORE-4): the ledger of every worker on one host.
//!
//! One file per key, `<key with "/" → "%2F">.json` holding `{"value": "<hex>", "version": n}`,
//! written to `<file>.json.tmp`, fsynced and renamed over, so a crash leaves the old or the
//! new document, never half of one. `get`, `cas` and `delete` hold an exclusive `flock` on
//! `<file>.json.lock` — the same lock files 1.0.4 takes, so implementations can share a
//! directory. Logs are `<log>.log`, one hex record per line, appended under
//! `log:<log>.json.lock`. Blocking file work runs on tokio's blocking pool.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::json;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;

use super::kv::{ScanRow, Versioned};

/// The file store rooted at one directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

fn encode(key: &str) -> String {
    key.replace('/', "%2F")
}

fn decode(name: &str) -> String {
    name.replace("%2F", "/")
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
        Ok(FileStore { root })
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
            let _lock = lock(root, &format!("{}.json.lock", encode(&k)))?;
            read_doc(&root.join(format!("{}.json", encode(&k))))
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
            let _lock = lock(root, &format!("{}.json.lock", encode(&k)))?;
            let path = root.join(format!("{}.json", encode(&k)));
            let current = read_doc(&path)?;
            if current.as_ref().map(|c| c.version.as_str()) != expected.as_deref() {
                return Ok(false);
            }
            let next = current
                .and_then(|c| c.version.parse::<u64>().ok())
                .map_or(1, |n| n + 1);
            let doc = json!({"value": hex::encode(&value), "version": next});
            write_atomically(&path, doc.to_string().as_bytes())?;
            Ok(true)
        })
        .await
    }

    /// STORE-1 `append`: one hex line, fsynced; returns the line count.
    ///
    /// # Errors
    /// `VF_TRANSIENT` on an I/O failure.
    pub async fn append(&self, log: &str, record: &[u8]) -> Result<u64, VfError> {
        let (l, record) = (log.to_owned(), record.to_vec());
        self.blocking("appending to", log, move |root| {
            let _lock = lock(root, &format!("log:{}.json.lock", encode(&l)))?;
            let path = root.join(format!("{}.log", encode(&l)));
            let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
            writeln!(file, "{}", hex::encode(&record))?;
            file.sync_all()?;
            Ok(read_lines(&path)?.len() as u64)
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
            read_lines(&root.join(format!("{}.log", encode(&l))))?
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
            let _lock = lock(root, &format!("{}.json.lock", encode(&k)))?;
            let path = root.join(format!("{}.json", encode(&k)));
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

/// An exclusive `flock` on `root/name`, released when the file is dropped.
fn lock(root: &Path, name: &str) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join(name))?;
    file.lock()?;
    Ok(file)
}

fn read_doc(path: &Path) -> std::io::Result<Option<Versioned>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(std::io::Error::other)?;
    let value = doc["value"]
        .as_str()
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| std::io::Error::other(format!("{} has no hex value", path.display())))?;
    let version = match &doc["version"] {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => s.clone(),
        _ => {
            return Err(std::io::Error::other(format!(
                "{} has no version",
                path.display()
            )));
        }
    };
    Ok(Some(Versioned { value, version }))
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

fn read_lines(path: &Path) -> std::io::Result<Vec<String>> {
    match File::open(path) {
        Ok(f) => BufReader::new(f)
            .lines()
            .filter(|l| !l.as_ref().is_ok_and(String::is_empty))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_4_directory_from_url() {
        let e = FileStore::from_url("file://").expect_err("must fail");
        assert_eq!(
            e.message,
            "file:// runtime store URL 'file://' names no directory. Use file:///path/to/ledger."
        );
        let dir = std::env::temp_dir().join(format!("vf-store-{}", uuid::Uuid::new_v4().simple()));
        let s =
            FileStore::from_url(&format!("file://localhost{}", dir.display())).expect("test value");
        assert_eq!(s.root(), dir.as_path());
        let _ = fs::remove_dir_all(dir);
    }
}
