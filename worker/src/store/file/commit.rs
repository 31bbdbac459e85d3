//! Group commit for `file://` (STORE-4): every `cas` and `append` of one [`super::FileStore`]
//! goes to one writer thread, which takes everything queued — the records of a whole
//! in-flight window — and makes it durable together.
//!
//! Why one writer: the records of a window are independent keys and logs, but each needs its
//! data and its directory entry on disk before its caller may ack anything that depends on it
//! (EOS-2, DELIV-15: "written before the ack"). Done one by one that is a sync per record; done
//! by batch it is one parallel round of syncs and one directory sync per batch, whatever the
//! batch's size.
//!
//! One batch, in this order:
//! 1. the lock files of every key and log in the batch, taken in name order (every writer of
//!    this implementation takes them in that order, a 1.0.4 writer holds one at a time, so no
//!    two writers wait on each other in a circle);
//! 2. per key: read the document, apply the batch's CASes in their order, write the result —
//!    for a key that exists to `<file>.json.tmp`, for a new one to a file with no name
//!    (`O_TMPFILE`; a lone create skips the read, its link in step 4 tells); per log: catch
//!    up on what other writers appended since this thread last looked (detected by the
//!    file's length; only those bytes are read), then one write of every record;
//! 3. every file written made durable: `fdatasync` of each, in parallel, or for a batch of
//!    many files one `syncfs` of the file system (see [`Writer::sync_files`] for why);
//! 4. rename every synced tmp file over its key, link every synced unnamed file to its key (a
//!    link never replaces: a key that exists by then answers the create `false`), release the
//!    locks;
//! 5. one `fsync` of the directory when a rename, a link or a new log needs it;
//! 6. only then answer each caller.
//!
//! The wait a record adds: a record queued while a batch is being committed waits for that
//! batch, then is committed in the next one, with everything queued meanwhile — at most two
//! commits and no deliberate delay. A batch takes at most [`MAX_BATCH_OPS`] operations and
//! [`MAX_BATCH_BYTES`] bytes of records (at least one), which bounds a commit's duration
//! and the file descriptors it holds.
//!
//! A crash anywhere before step 6 answers nobody, so nothing that depends on a record is
//! acked before the record is durable; a crash after a rename or link but before the
//! directory sync leaves the old or the new document, never half of one, and a crash before
//! a link leaves no file at all (an unnamed file goes with its last descriptor).

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};

use tokio::sync::oneshot;

use super::disk;
use super::logs::Logs;
use crate::store::kv::Versioned;

/// Operations one batch takes at most.
pub(super) const MAX_BATCH_OPS: usize = 128;
/// Record and value bytes one batch takes at most (one larger operation still goes alone).
pub(super) const MAX_BATCH_BYTES: usize = 1 << 20;
/// Helper threads that sync files in parallel with the writer thread.
const SYNC_HELPERS: usize = 7;
/// Files a batch has written from which one `syncfs` replaces their `fdatasync`s
/// ([`Writer::sync_files`]).
pub(super) const SYNCFS_MIN_FILES: usize = 8;

/// A write for the writer thread, with where its answer goes.
pub(super) enum Op {
    /// `append(log, record)` for every record, in order; answers the line count after the
    /// last.
    Append {
        log: String,
        records: Vec<Vec<u8>>,
        reply: oneshot::Sender<std::io::Result<u64>>,
    },
    /// `cas(key, expected, value)`.
    Cas {
        key: String,
        expected: Option<String>,
        value: Vec<u8>,
        reply: oneshot::Sender<std::io::Result<bool>>,
    },
}

impl Op {
    fn bytes(&self) -> usize {
        match self {
            Op::Append { records, .. } => records.iter().map(Vec::len).sum(),
            Op::Cas { value, .. } => value.len(),
        }
    }
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    /// Every handle is gone: finish what is queued, then stop.
    closed: bool,
    /// The thread has ended: nothing queued now would ever be answered.
    stopped: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Batches committed and operations they held, for [`Committer::stats`].
    batches: AtomicU64,
    ops: AtomicU64,
    /// Batches made durable by one `syncfs` ([`Writer::sync_files`]).
    fs_syncs: AtomicU64,
    /// New documents are created as unnamed files ([`Staged::Unnamed`]); cleared for good
    /// the first time the file system refuses one.
    unnamed: AtomicBool,
    /// A test's hook, called at each step of a batch.
    #[cfg(test)]
    hook: Mutex<Option<Hook>>,
}

/// A test's hook.
#[cfg(test)]
type Hook = Box<dyn Fn(Step) + Send>;

/// The steps of a batch a test can stop at.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Every record is written to its file, none synced.
    Written,
}

impl Shared {
    #[cfg(test)]
    fn step(&self, step: Step) {
        let hook = self
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(hook) = hook.as_ref() {
            hook(step);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is only pushed to and drained; a panic elsewhere leaves it consistent.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The handle of one store's writer thread; dropping the last one ends the thread once it
/// has answered everything queued.
pub(super) struct Committer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer").finish_non_exhaustive()
    }
}

impl Committer {
    /// Starts the writer thread of the store rooted at `root`.
    pub(super) fn start(root: PathBuf) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            batches: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            fs_syncs: AtomicU64::new(0),
            unnamed: AtomicBool::new(true),
            #[cfg(test)]
            hook: Mutex::new(None),
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("vf-store-commit".into())
            .stack_size(256 * 1024)
            .spawn(move || writer(&root, &theirs))?;
        Ok(Committer { shared })
    }

    /// `(batches, operations)` committed so far.
    pub(super) fn stats(&self) -> (u64, u64) {
        (
            self.shared.batches.load(Ordering::Relaxed),
            self.shared.ops.load(Ordering::Relaxed),
        )
    }

    /// Batches made durable by one sync of the file system instead of a sync per file.
    pub(super) fn filesystem_syncs(&self) -> u64 {
        self.shared.fs_syncs.load(Ordering::Relaxed)
    }

    /// Operations queued and not yet taken by the writer thread.
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.shared.lock().ops.len()
    }

    /// Writes every later document the way a file system without unnamed files gets them.
    #[cfg(test)]
    pub(super) fn refuse_unnamed(&self) {
        self.shared.unnamed.store(false, Ordering::Relaxed);
    }

    /// Installs a hook the writer thread calls at each [`Step`] of every batch.
    #[cfg(test)]
    pub(super) fn set_hook(&self, hook: impl Fn(Step) + Send + 'static) {
        *self
            .shared
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(hook));
    }

    /// Queues `op`; gives it back when the writer thread has ended.
    pub(super) fn submit(&self, op: Op) -> Result<(), Op> {
        let mut q = self.shared.lock();
        if q.stopped {
            return Err(op);
        }
        q.ops.push_back(op);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

/// Marks the queue stopped however the thread ends, dropping (and so answering with an
/// error) whatever is still queued.
struct StopGuard<'a>(&'a Shared);

impl Drop for StopGuard<'_> {
    fn drop(&mut self) {
        let mut q = self.0.lock();
        q.stopped = true;
        q.ops.clear();
    }
}

fn writer(root: &Path, shared: &Shared) {
    let _guard = StopGuard(shared);
    let mut w = Writer {
        root,
        logs: Logs::default(),
        pool: SyncPool::default(),
        dir: None,
        fs_syncs: &shared.fs_syncs,
        unnamed: &shared.unnamed,
    };
    while let Some(batch) = next_batch(shared) {
        shared.batches.fetch_add(1, Ordering::Relaxed);
        shared.ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            commit(&mut w, shared, batch);
        }));
        if run.is_err() {
            // The callers of that batch got an error (their answers were dropped); what this
            // thread knew about the logs may be off, so it counts them again.
            w.logs = Logs::default();
        }
    }
}

/// Waits for work and takes a batch; `None` once closed and drained.
fn next_batch(shared: &Shared) -> Option<Vec<Op>> {
    let mut q = shared.lock();
    while q.ops.is_empty() {
        if q.closed {
            return None;
        }
        q = shared
            .wake
            .wait(q)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(op) = q.ops.front() {
        let size = op.bytes();
        if !batch.is_empty() && (batch.len() >= MAX_BATCH_OPS || bytes + size > MAX_BATCH_BYTES) {
            break;
        }
        bytes += size;
        if let Some(op) = q.ops.pop_front() {
            batch.push(op);
        }
    }
    Some(batch)
}

// -- one batch ------------------------------------------------------------------------------

type CasItem = (
    Option<String>,
    Vec<u8>,
    oneshot::Sender<std::io::Result<bool>>,
);
type AppendItem = (Vec<Vec<u8>>, oneshot::Sender<std::io::Result<u64>>);

/// Everything of a batch under one lock file (a key and a log can only share one if the key
/// is literally `log:<log>`; both are then done under the one lock).
#[derive(Default)]
struct Group {
    key: Option<(String, Vec<CasItem>)>,
    log: Option<(String, Vec<AppendItem>)>,
}

/// A key's new document, written but not yet synced or given its name.
struct DocWrite {
    file: Arc<File>,
    staged: Staged,
    path: PathBuf,
    answers: Vec<(bool, oneshot::Sender<std::io::Result<bool>>)>,
}

/// Where a [`DocWrite`]'s file is until it gets the key's name.
enum Staged {
    /// `<file>.json.tmp`, renamed over the key: how a document that exists is replaced.
    Named(PathBuf),
    /// A file with no name (`O_TMPFILE`), linked to the key: how a key that did not exist is
    /// created. One directory entry instead of a temporary one plus a rename, so creating a
    /// record (an outbox document a message) costs the directory one change, not three.
    /// Keeps the document's bytes for a file system where the link fails
    /// ([`Writer::name_doc`]).
    Unnamed(Vec<u8>),
}

/// A log's records, written but not yet synced.
struct LogWrite {
    file: Arc<File>,
    created: bool,
    answers: Vec<(u64, oneshot::Sender<std::io::Result<u64>>)>,
}

/// `e` again, for another caller (an `io::Error` is not `Clone`).
fn copy(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}

fn fail<T>(reply: oneshot::Sender<std::io::Result<T>>, e: &std::io::Error) {
    let _ = reply.send(Err(copy(e)));
}

/// The writer thread's state between batches.
struct Writer<'a> {
    root: &'a Path,
    logs: Logs,
    pool: SyncPool,
    /// The directory, kept open for its syncs.
    dir: Option<File>,
    fs_syncs: &'a AtomicU64,
    /// [`Shared::unnamed`].
    unnamed: &'a AtomicBool,
}

impl Writer<'_> {
    /// Makes every written file's data durable: one `syncfs` of the file system for a batch
    /// of at least [`SYNCFS_MIN_FILES`] files, else each file's `fdatasync`, in parallel.
    /// One result per file, in order.
    ///
    /// Why the file system for a large batch: each `fdatasync` of a new file is a device
    /// cache flush of its own and, on ext4, a write of the directory the file was created in
    /// (its entry is new), so a batch of n new files costs n flushes and n directory writes
    /// however many run at once; `syncfs` writes everything dirty on the file system once and
    /// flushes once. It also writes what other processes left dirty there, which is why a
    /// small batch — a lightly loaded store, where latency matters more than throughput —
    /// keeps to its own files.
    fn sync_files(&mut self, files: &[Arc<File>]) -> Vec<std::io::Result<()>> {
        if files.len() < SYNCFS_MIN_FILES {
            return self.pool.sync_data(files);
        }
        self.fs_syncs.fetch_add(1, Ordering::Relaxed);
        let synced = self
            .open_dir()
            .and_then(|d| nix::unistd::syncfs(d).map_err(std::io::Error::from));
        if synced.is_err() {
            // A fresh descriptor samples the file system's error state anew.
            self.dir = None;
        }
        files
            .iter()
            .map(|_| synced.as_ref().copied().map_err(copy))
            .collect()
    }

    /// The directory, opened on first need and kept for its syncs.
    fn open_dir(&mut self) -> std::io::Result<&File> {
        let dir = match self.dir.take() {
            Some(dir) => dir,
            None => File::open(self.root)?,
        };
        Ok(self.dir.insert(dir))
    }

    /// Gives a synced document its key's name: the rename of its temporary file, or the link
    /// of its unnamed file. `Ok(false)` when a link finds the key already there (a writer
    /// that does not take the lock created it meanwhile): the create did not happen.
    ///
    /// Where the link itself is refused (neither the descriptor nor `/proc` names the file),
    /// the document is written again as a temporary file, synced and renamed — unless the key
    /// exists (a lone create was not read first; the key's lock keeps it as it is until the
    /// rename) — and later documents go that way from the start.
    fn name_doc(&self, doc: &DocWrite) -> std::io::Result<bool> {
        let bytes = match &doc.staged {
            Staged::Named(tmp) => return fs::rename(tmp, &doc.path).map(|()| true),
            Staged::Unnamed(bytes) => bytes,
        };
        match disk::name_unnamed(&doc.file, &doc.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(_) => {
                self.unnamed.store(false, Ordering::Relaxed);
                if doc.path.try_exists()? {
                    return Ok(false);
                }
                let (file, tmp) = write_tmp(&doc.path, bytes)?;
                file.sync_data()?;
                fs::rename(tmp, &doc.path).map(|()| true)
            }
        }
    }

    /// `fsync` of the directory: its entries (renames, new files) are durable after it.
    fn sync_dir(&mut self) -> std::io::Result<()> {
        let synced = self.open_dir().and_then(File::sync_all);
        if synced.is_err() {
            self.dir = None;
        }
        synced
    }
}

fn commit(w: &mut Writer<'_>, shared: &Shared, batch: Vec<Op>) {
    let root = w.root;
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for op in batch {
        match op {
            Op::Cas {
                key,
                expected,
                value,
                reply,
            } => {
                let g = groups.entry(disk::key_lock_name(&key)).or_default();
                g.key
                    .get_or_insert_with(|| (key, Vec::new()))
                    .1
                    .push((expected, value, reply));
            }
            Op::Append {
                log,
                records,
                reply,
            } => {
                let g = groups.entry(disk::log_lock_name(&log)).or_default();
                g.log
                    .get_or_insert_with(|| (log, Vec::new()))
                    .1
                    .push((records, reply));
            }
        }
    }
    // (1) + (2): locks in name order, then each group's writes.
    let mut locks = Vec::with_capacity(groups.len());
    let mut docs = Vec::new();
    let mut appends = Vec::new();
    for (lock_name, group) in groups {
        let held = match disk::lock(root, &lock_name) {
            Ok(f) => f,
            Err(e) => {
                fail_group(group, &e);
                continue;
            }
        };
        locks.push(held);
        if let Some((key, items)) = group.key
            && let Some(doc) = write_doc(root, &key, items, w.unnamed)
        {
            docs.push(doc);
        }
        if let Some((log, items)) = group.log
            && let Some(write) = append(&mut w.logs, root, &log, items)
        {
            appends.push(write);
        }
    }
    #[cfg(test)]
    shared.step(Step::Written);
    #[cfg(not(test))]
    let _ = shared;
    // (3) every written file synced (one file system sync for a large batch).
    let files: Vec<Arc<File>> = docs
        .iter()
        .map(|d| d.file.clone())
        .chain(appends.iter().map(|a| a.file.clone()))
        .collect();
    let mut synced = w.sync_files(&files).into_iter();
    // (4) documents given their keys' names; the locks go.
    let mut named = Vec::new();
    for doc in docs {
        let result = synced
            .next()
            .unwrap_or_else(|| Err(std::io::Error::other("sync result missing")))
            .and_then(|()| w.name_doc(&doc));
        match result {
            Ok(true) => named.push(doc.answers),
            Ok(false) => named.push(
                doc.answers
                    .into_iter()
                    .map(|(_, reply)| (false, reply))
                    .collect(),
            ),
            Err(e) => doc.answers.into_iter().for_each(|(_, r)| fail(r, &e)),
        }
    }
    drop(locks);
    let mut durable_appends = Vec::new();
    for write in appends {
        match synced
            .next()
            .unwrap_or_else(|| Err(std::io::Error::other("sync result missing")))
        {
            Ok(()) => durable_appends.push(write),
            Err(e) => write.answers.into_iter().for_each(|(_, r)| fail(r, &e)),
        }
    }
    // (5) the directory, when an entry in it changed.
    let needs_dir = !named.is_empty() || durable_appends.iter().any(|w| w.created);
    let dir = if needs_dir { w.sync_dir() } else { Ok(()) };
    // (6) the answers.
    for answers in named {
        for (ok, reply) in answers {
            let _ = reply.send(match &dir {
                Ok(()) => Ok(ok),
                Err(e) => Err(copy(e)),
            });
        }
    }
    for write in durable_appends {
        let dir_needed = write.created;
        for (count, reply) in write.answers {
            let _ = reply.send(match &dir {
                Err(e) if dir_needed => Err(copy(e)),
                _ => Ok(count),
            });
        }
    }
}

fn fail_group(group: Group, e: &std::io::Error) {
    if let Some((_, items)) = group.key {
        items.into_iter().for_each(|(_, _, r)| fail(r, e));
    }
    if let Some((_, items)) = group.log {
        items.into_iter().for_each(|(_, r)| fail(r, e));
    }
}

/// Writes every item's records to `log` (under its lock) in one write; each item is
/// answered later with the line count after its last record.
fn append(logs: &mut Logs, root: &Path, log: &str, items: Vec<AppendItem>) -> Option<LogWrite> {
    let groups: Vec<&[Vec<u8>]> = items
        .iter()
        .map(|(records, _)| records.as_slice())
        .collect();
    match logs.write(root, log, &groups) {
        Ok(written) => Some(LogWrite {
            file: written.file,
            created: written.created,
            answers: written
                .counts
                .into_iter()
                .zip(items)
                .map(|(count, (_, reply))| (count, reply))
                .collect(),
        }),
        Err(e) => {
            items.into_iter().for_each(|(_, r)| fail(r, &e));
            None
        }
    }
}

/// Applies a key's CASes in order against its document and writes the result to a file
/// that gets the key's name after the sync ([`Staged`]): an unnamed one when the key did not
/// exist and `unnamed` ([`Shared::unnamed`]) allows it, else its tmp file. A CAS that fails
/// to match is answered `false` at once; `None` when nothing is left to sync.
fn write_doc(
    root: &Path,
    key: &str,
    items: Vec<CasItem>,
    unnamed: &AtomicBool,
) -> Option<DocWrite> {
    let path = disk::doc_path(root, key);
    // A file system without unnamed files is asked once.
    let unnamed_file = || {
        if !unnamed.load(Ordering::Relaxed) {
            return None;
        }
        disk::unnamed(root)
            .inspect_err(|_| unnamed.store(false, Ordering::Relaxed))
            .ok()
    };
    // A lone create of a key (an outbox record a message) needs no read: its link fails if
    // the key exists, which answers it as the read would have. The read is a directory
    // lookup that misses every cache, since the key is new.
    let early = if matches!(items.as_slice(), [(None, _, _)]) {
        unnamed_file()
    } else {
        None
    };
    let read = if early.is_some() {
        Ok(None)
    } else {
        disk::read_doc(&path)
    };
    let mut current: Option<Versioned> = match read {
        Ok(c) => c,
        Err(e) => {
            items.into_iter().for_each(|(_, _, r)| fail(r, &e));
            return None;
        }
    };
    let existed = current.is_some();
    let mut answers = Vec::with_capacity(items.len());
    let mut changed = false;
    for (expected, value, reply) in items {
        let matches = current.as_ref().map(|c| c.version.as_str()) == expected.as_deref();
        if matches {
            let version = disk::next_version(current.as_ref());
            current = Some(Versioned {
                value,
                version: version.to_string(),
            });
            changed = true;
        }
        answers.push((matches, reply));
    }
    let Some(doc) = current.filter(|_| changed) else {
        // Every CAS missed: nothing was written, so nothing needs to be durable.
        answers.into_iter().for_each(|(ok, r)| {
            let _ = r.send(Ok(ok));
        });
        return None;
    };
    let version = doc.version.parse::<u64>().unwrap_or(1);
    let bytes = disk::doc_bytes(&doc.value, version);
    let file = match early {
        Some(f) => Some(f),
        None if !existed => unnamed_file(),
        None => None,
    };
    let written = match file {
        Some(mut f) => f.write_all(&bytes).map(|()| (f, Staged::Unnamed(bytes))),
        None => write_tmp(&path, &bytes).map(|(f, tmp)| (f, Staged::Named(tmp))),
    };
    match written {
        Ok((f, staged)) => Some(DocWrite {
            file: Arc::new(f),
            staged,
            path,
            answers,
        }),
        Err(e) => {
            answers.into_iter().for_each(|(_, r)| fail(r, &e));
            None
        }
    }
}

/// `bytes` written to `<file>.json.tmp`, the temporary file 1.0.4 also writes a document to
/// before renaming it over the key; the file and its path.
fn write_tmp(path: &Path, bytes: &[u8]) -> std::io::Result<(File, PathBuf)> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    Ok((f, tmp))
}

// -- parallel syncs -------------------------------------------------------------------------

type SyncJob = (usize, Arc<File>, mpsc::Sender<(usize, std::io::Result<()>)>);

/// Helper threads for [`SyncPool::sync_data`], started on first need; they end when the
/// writer thread (holding the sender) does.
#[derive(Default)]
struct SyncPool {
    jobs: Option<mpsc::Sender<SyncJob>>,
    helpers: usize,
    inbox: Option<Arc<Mutex<mpsc::Receiver<SyncJob>>>>,
}

impl SyncPool {
    /// `fdatasync` of every file — its data and what is needed to read it back — one result
    /// per file, in order. Several at once run on the helpers and this thread together.
    fn sync_data(&mut self, files: &[Arc<File>]) -> Vec<std::io::Result<()>> {
        if files.len() <= 1 || !self.ensure_helpers(files.len() - 1) {
            return files.iter().map(|f| f.sync_data()).collect();
        }
        let (done_tx, done_rx) = mpsc::channel();
        let mut results: Vec<Option<std::io::Result<()>>> =
            (0..files.len()).map(|_| None).collect();
        let mut sent = 0;
        if let Some(jobs) = &self.jobs {
            for (i, f) in files.iter().enumerate().skip(1) {
                if jobs.send((i, f.clone(), done_tx.clone())).is_ok() {
                    sent += 1;
                } else {
                    results[i] = Some(f.sync_data());
                }
            }
        }
        drop(done_tx);
        results[0] = Some(files[0].sync_data());
        for _ in 0..sent {
            match done_rx.recv() {
                Ok((i, r)) => results[i] = Some(r),
                Err(_) => break,
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(std::io::Error::other("a sync helper stopped"))))
            .collect()
    }

    /// At least `want` helpers (up to [`SYNC_HELPERS`]); `false` when none can be started.
    fn ensure_helpers(&mut self, want: usize) -> bool {
        let want = want.min(SYNC_HELPERS);
        if self.jobs.is_none() {
            let (tx, rx) = mpsc::channel::<SyncJob>();
            self.jobs = Some(tx);
            self.inbox = Some(Arc::new(Mutex::new(rx)));
        }
        while self.helpers < want {
            let Some(inbox) = self.inbox.clone() else {
                break;
            };
            let started = std::thread::Builder::new()
                .name("vf-store-sync".into())
                .stack_size(64 * 1024)
                .spawn(move || sync_helper(&inbox));
            if started.is_err() {
                break;
            }
            self.helpers += 1;
        }
        self.helpers > 0
    }
}

fn sync_helper(inbox: &Mutex<mpsc::Receiver<SyncJob>>) {
    loop {
        let job = {
            let rx = inbox
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            rx.recv()
        };
        let Ok((i, file, done)) = job else {
            return;
        };
        let _ = done.send((i, file.sync_data()));
    }
}
