//! STORE-4's on-disk shapes, shared by the direct operations and the committer: file names,
//! the per-key lock, the `{"value": "<hex>", "version": n}` document and the line count of a
//! hex log. Nothing here keeps state.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::store::kv::Versioned;

/// `/` → `%2F`, as 1.0.4 names its files.
pub(super) fn encode(key: &str) -> String {
    key.replace('/', "%2F")
}

/// The inverse of [`encode`].
pub(super) fn decode(name: &str) -> String {
    name.replace("%2F", "/")
}

/// `<key>.json`.
pub(super) fn doc_path(root: &Path, key: &str) -> PathBuf {
    root.join(format!("{}.json", encode(key)))
}

/// The lock file `get`, `cas` and `delete` of `key` hold: `<key>.json.lock`.
pub(super) fn key_lock_name(key: &str) -> String {
    format!("{}.json.lock", encode(key))
}

/// `<log>.log`.
pub(super) fn log_path(root: &Path, log: &str) -> PathBuf {
    root.join(format!("{}.log", encode(log)))
}

/// The lock file appends to `log` hold: `log:<log>.json.lock` (1.0.4 locks the key
/// `log:<log>`).
pub(super) fn log_lock_name(log: &str) -> String {
    format!("log:{}.json.lock", encode(log))
}

/// What a file of the store's directory holds, by its name: the document, its leftover
/// temporary file or its lock (of a key), or the log or its lock (of a log). `None` for a
/// file the store did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StoreFile {
    /// `<key>.json`, `<key>.json.tmp`, `<key>.json.lock`.
    Key(String),
    /// `<log>.log`, `log:<log>.json.lock`.
    Log(String),
}

/// The key or log a file name belongs to ([`StoreFile`]).
pub(super) fn classify(name: &str) -> Option<StoreFile> {
    if let Some(stem) = name.strip_suffix(".json.lock") {
        return Some(match stem.strip_prefix("log:") {
            Some(log) => StoreFile::Log(decode(log)),
            None => StoreFile::Key(decode(stem)),
        });
    }
    if let Some(stem) = name
        .strip_suffix(".json")
        .or_else(|| name.strip_suffix(".json.tmp"))
    {
        return Some(StoreFile::Key(decode(stem)));
    }
    name.strip_suffix(".log")
        .map(|stem| StoreFile::Log(decode(stem)))
}

/// An exclusive `flock` on `root/name`, released when the file is dropped.
pub fn lock(root: &Path, name: &str) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join(name))?;
    file.lock()?;
    Ok(file)
}

/// A new file in `dir` that has no name yet (`O_TMPFILE`): what it holds becomes visible
/// only when [`name_unnamed`] links it, whole, and a crash before that leaves nothing behind.
///
/// # Errors
/// Whatever `open` says; a file system without `O_TMPFILE` answers `EOPNOTSUPP` (older
/// kernels `EISDIR`), and the caller writes a named temporary file instead.
pub fn unnamed(dir: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .mode(0o666)
        .custom_flags(nix::libc::O_TMPFILE)
        .open(dir)
}

/// Whether `linkat` names a descriptor itself here ([`link_descriptor`]); cleared for good
/// the first time the kernel refuses it.
static LINKS_DESCRIPTORS: AtomicBool = AtomicBool::new(true);

/// Gives `file` (from [`unnamed`]) the name `path`. Fails with `AlreadyExists` when `path`
/// exists: a link never replaces, so it also creates only.
///
/// The descriptor is linked directly where the kernel allows it (Linux 6.10 and later for a
/// file the caller opened, any kernel with `CAP_DAC_READ_SEARCH`), else through
/// `/proc/self/fd` ([`link_through_proc`]), which costs a walk through `/proc` per link.
///
/// # Errors
/// `AlreadyExists`, or whatever `linkat` says of the descriptor or, where the kernel refuses
/// that, through `/proc/self/fd` (without `/proc`, `NotFound`).
pub fn name_unnamed(file: &File, path: &Path) -> std::io::Result<()> {
    if !LINKS_DESCRIPTORS.load(Ordering::Relaxed) {
        return link_through_proc(file, path);
    }
    match link_descriptor(file, path) {
        // An older kernel refuses an unprivileged caller with ENOENT, as a missing directory
        // would: the /proc way decides, and only its success stops the direct tries.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let through_proc = link_through_proc(file, path);
            if through_proc.is_ok() {
                LINKS_DESCRIPTORS.store(false, Ordering::Relaxed);
            }
            through_proc
        }
        done => done,
    }
}

/// `linkat(fd, "", …, AT_EMPTY_PATH)`: the descriptor's own file, no path to resolve.
fn link_descriptor(file: &File, path: &Path) -> std::io::Result<()> {
    nix::unistd::linkat(
        file,
        "",
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::AtFlags::AT_EMPTY_PATH,
    )
    .map_err(std::io::Error::from)
}

/// `linkat` of `/proc/self/fd/<fd>`, following that link to the file: what any kernel allows
/// an unprivileged process.
fn link_through_proc(file: &File, path: &Path) -> std::io::Result<()> {
    let fd = format!("/proc/self/fd/{}", file.as_raw_fd());
    nix::unistd::linkat(
        nix::fcntl::AT_FDCWD,
        fd.as_str(),
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
    )
    .map_err(std::io::Error::from)
}

/// A key's document, `None` when the file does not exist.
pub(super) fn read_doc(path: &Path) -> std::io::Result<Option<Versioned>> {
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

/// The document text for `value` at `version`, byte for byte what `serde_json` writes for
/// `{"value": hex, "version": n}` (sorted keys, compact), without building a JSON tree.
pub(super) fn doc_bytes(value: &[u8], version: u64) -> Vec<u8> {
    format!(
        "{{\"value\":\"{}\",\"version\":{version}}}",
        hex::encode(value)
    )
    .into_bytes()
}

/// The next version after `current` (1 for a new key): versions are 1, 2, … (STORE-4).
pub(super) fn next_version(current: Option<&Versioned>) -> u64 {
    current
        .and_then(|c| c.version.parse::<u64>().ok())
        .map_or(1, |n| n + 1)
}

/// Counts the non-empty lines of a log as its bytes go by, so a log can be counted once and
/// then only by what was appended since (the count `append` returns, STORE-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LineCount {
    /// Non-empty lines seen, an unterminated last one included.
    pub(super) lines: u64,
    /// Whether the next byte starts a line (false after a torn, unterminated tail).
    pub(super) at_line_start: bool,
}

impl Default for LineCount {
    fn default() -> Self {
        LineCount {
            lines: 0,
            at_line_start: true,
        }
    }
}

impl LineCount {
    /// Feeds the next bytes of the log.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.at_line_start = true;
            } else if self.at_line_start {
                self.lines += 1;
                self.at_line_start = false;
            }
        }
    }
}

/// The lines of a log, blank ones skipped (empty for a missing log).
pub(super) fn read_lines(path: &Path) -> std::io::Result<Vec<String>> {
    use std::io::{BufRead, BufReader};
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
    fn store_4_line_count_is_incremental_and_skips_blank_lines() {
        let whole = b"ab\n\ncd\nef";
        let mut once = LineCount::default();
        once.feed(whole);
        assert_eq!((once.lines, once.at_line_start), (3, false));
        // Fed in any split, the count is the same.
        for cut in 0..whole.len() {
            let mut parts = LineCount::default();
            parts.feed(&whole[..cut]);
            parts.feed(&whole[cut..]);
            assert_eq!(parts, once, "cut at {cut}");
        }
        let mut terminated = once;
        terminated.feed(b"\n");
        assert_eq!((terminated.lines, terminated.at_line_start), (3, true));
    }

    /// Both ways of naming an unnamed file show the whole file under its name and refuse a
    /// name that exists, so either serves a create (COMPATIBILITY D25).
    #[test]
    fn store_4_either_link_of_an_unnamed_file_shows_it_whole_and_never_replaces() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("vf-disk-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir_all(&dir).expect("dir");
        type Link = fn(&File, &Path) -> std::io::Result<()>;
        let ways: [(&str, Link); 2] =
            [("descriptor", link_descriptor), ("proc", link_through_proc)];
        let mut linked = 0;
        for (way, link) in ways {
            let mut file = unnamed(&dir).expect("unnamed file");
            file.write_all(way.as_bytes()).expect("write");
            let path = dir.join(format!("{way}.json"));
            match link(&file, &path) {
                // A kernel before 6.10 refuses an unprivileged descriptor link; name_unnamed
                // then takes the /proc way, which must work.
                Err(e) if way == "descriptor" && e.kind() == std::io::ErrorKind::NotFound => {
                    continue;
                }
                done => done.unwrap_or_else(|e| panic!("{way}: {e}")),
            }
            linked += 1;
            assert_eq!(fs::read_to_string(&path).expect("read"), way);
            let mut other = unnamed(&dir).expect("unnamed file");
            other.write_all(b"other").expect("write");
            let refused = link(&other, &path).expect_err("a link must not replace");
            assert_eq!(refused.kind(), std::io::ErrorKind::AlreadyExists, "{way}");
            assert_eq!(fs::read_to_string(&path).expect("read"), way, "{way}: kept");
        }
        assert!(linked >= 1, "the /proc way links");
        // And the one the store calls, whichever way it takes here.
        let file = unnamed(&dir).expect("unnamed file");
        name_unnamed(&file, &dir.join("store.json")).expect("name_unnamed");
        let again = unnamed(&dir).expect("unnamed file");
        let refused = name_unnamed(&again, &dir.join("store.json")).expect_err("exists");
        assert_eq!(refused.kind(), std::io::ErrorKind::AlreadyExists);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn store_4_documents_are_what_serde_json_writes() {
        let ours = doc_bytes(b"hi", 7);
        let theirs = serde_json::json!({"value": hex::encode(b"hi"), "version": 7}).to_string();
        assert_eq!(String::from_utf8(ours).expect("utf-8"), theirs);
    }
}
