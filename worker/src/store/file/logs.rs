//! What one writer knows of the logs it appends to (STORE-4): the open file, which file it is
//! and the line count of its first `len` bytes — so an append counts only what other writers
//! (a sibling replica, a 1.0.4 worker) appended since, detected by the file's length, instead
//! of reading the whole log again.
//!
//! Every method runs under the log's lock file (`log:<log>.json.lock`), so between two calls
//! only other writers can have changed the file, and only by appending — or, outside the
//! protocol, by replacing or shortening it, which is detected (inode, length) and answered by
//! counting the file again from the start.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use super::disk::{self, LineCount};

/// One log as last seen.
struct LogState {
    file: Arc<File>,
    dev: u64,
    ino: u64,
    len: u64,
    count: LineCount,
}

/// The logs one writer appended to.
#[derive(Default)]
pub(super) struct Logs {
    known: HashMap<String, LogState>,
}

/// What [`Logs::write`] wrote (not yet synced).
pub(super) struct Written {
    /// The log, to sync.
    pub(super) file: Arc<File>,
    /// The file did not exist: its directory entry needs a sync too.
    pub(super) created: bool,
    /// The line count after each group of records, in order.
    pub(super) counts: Vec<u64>,
}

impl Logs {
    /// Under the log's lock: brings its count up to date, then writes every group's records
    /// — one hex line each — in one write.
    pub(super) fn write(
        &mut self,
        root: &Path,
        log: &str,
        groups: &[&[Vec<u8>]],
    ) -> std::io::Result<Written> {
        let (state, created) = self.catch_up(root, log)?;
        let mut buf = Vec::new();
        if !state.count.at_line_start {
            // A writer died mid-line: end its line so these records start their own.
            buf.push(b'\n');
        }
        let mut count = state.count;
        count.feed(&buf);
        let mut counts = Vec::with_capacity(groups.len());
        for records in groups {
            let start = buf.len();
            for record in *records {
                buf.extend_from_slice(hex::encode(record).as_bytes());
                buf.push(b'\n');
            }
            count.feed(&buf[start..]);
            counts.push(count.lines);
        }
        // On an error part of the records may be in the file: the next write re-reads from
        // the last length this writer is sure of and counts whatever is there.
        (&*state.file).write_all(&buf)?;
        state.len += buf.len() as u64;
        state.count = count;
        Ok(Written {
            file: state.file.clone(),
            created,
            counts,
        })
    }

    /// The log's state with everything appended by others counted; `true` when the file was
    /// created just now. Reads only the bytes past the length last seen, unless the file was
    /// replaced or shortened (then it counts it again from the start).
    fn catch_up(&mut self, root: &Path, log: &str) -> std::io::Result<(&mut LogState, bool)> {
        let path = disk::log_path(root, log);
        let on_disk = match fs::metadata(&path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let same_file = match (&on_disk, self.known.get(log)) {
            (Some(m), Some(s)) => m.dev() == s.dev && m.ino() == s.ino && m.len() >= s.len,
            _ => false,
        };
        if !same_file {
            self.known.remove(log);
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&path)?;
            let meta = file.metadata()?;
            self.known.insert(
                log.to_owned(),
                LogState {
                    file: Arc::new(file),
                    dev: meta.dev(),
                    ino: meta.ino(),
                    len: 0,
                    count: LineCount::default(),
                },
            );
        }
        let Some(state) = self.known.get_mut(log) else {
            return Err(std::io::Error::other("log state missing"));
        };
        // Under the lock nobody appends, so the length read by path is this file's (the
        // same inode) unless it was just opened.
        let end = match (&on_disk, same_file) {
            (Some(m), true) => m.len(),
            _ => state.file.metadata()?.len(),
        };
        let mut chunk = Vec::new();
        while state.len < end {
            if chunk.is_empty() {
                chunk = vec![0u8; 64 * 1024];
            }
            let want = usize::try_from(end - state.len)
                .unwrap_or(usize::MAX)
                .min(chunk.len());
            let n = state.file.read_at(&mut chunk[..want], state.len)?;
            if n == 0 {
                break;
            }
            state.count.feed(&chunk[..n]);
            state.len += n as u64;
        }
        Ok((state, on_disk.is_none()))
    }
}
