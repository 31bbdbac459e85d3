//! The file store's own rules (STORE-4): counting only what other writers appended, group
//! commit and its ordering — an answer only after the sync.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use super::commit::Step;
use super::*;

fn temp_dir() -> PathBuf {
    std::env::temp_dir().join(format!("vf-store-{}", uuid::Uuid::new_v4().simple()))
}

/// What a 1.0.4 writer does for `append`: under the log's lock, one hex line at the end.
fn foreign_append(root: &Path, log: &str, line: &[u8]) {
    let _lock = lock(root, &disk::log_lock_name(log)).expect("lock");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log_path(root, log))
        .expect("open");
    f.write_all(line).expect("write");
}

#[test]
fn store_4_directory_from_url() {
    let e = FileStore::from_url("file://").expect_err("must fail");
    assert_eq!(
        e.message,
        "file:// runtime store URL 'file://' names no directory. Use file:///path/to/ledger."
    );
    let dir = temp_dir();
    let s = FileStore::from_url(&format!("file://localhost{}", dir.display())).expect("test value");
    assert_eq!(s.root(), dir.as_path());
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_1_4_append_counts_what_others_appended_and_reads_only_that() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    assert_eq!(s.append("vf/l", b"a").await.expect("append"), 1);
    assert_eq!(s.append("vf/l", b"b").await.expect("append"), 2);
    // Another process (a 1.0.4 worker) appends under the same lock file.
    foreign_append(&dir, "vf/l", b"63\n");
    assert_eq!(s.append("vf/l", b"d").await.expect("append"), 4);
    // Only the bytes past what this writer counted are read: rewriting the counted part in
    // place (same length, other lines) does not change the count a re-read would change.
    let path = log_path(&dir, "vf/l");
    let mut text = fs::read(&path).expect("read");
    assert_eq!(text, b"61\n62\n63\n64\n");
    text[..6].copy_from_slice(b"6162\n\n");
    fs::write(&path, &text).expect("rewrite");
    assert_eq!(s.append("vf/l", b"e").await.expect("append"), 5);
    assert_eq!(
        s.log_entries("vf/l").await.expect("entries"),
        vec![b"ab".to_vec(), b"c".to_vec(), b"d".to_vec(), b"e".to_vec()],
        "the file itself is what the records are"
    );
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_4_a_replaced_log_is_counted_again_and_a_torn_line_is_ended() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    assert_eq!(s.append("vf/l", b"a").await.expect("append"), 1);
    assert_eq!(s.append("vf/l", b"b").await.expect("append"), 2);
    fs::remove_file(log_path(&dir, "vf/l")).expect("remove");
    assert_eq!(s.append("vf/l", b"c").await.expect("append"), 1);
    // A writer that died mid-line (power loss) left "6" without its newline: the next
    // records start their own line.
    foreign_append(&dir, "vf/l", b"6");
    assert_eq!(s.append("vf/l", b"d").await.expect("append"), 3);
    assert_eq!(
        fs::read(log_path(&dir, "vf/l")).expect("read"),
        b"63\n6\n64\n"
    );
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_4_a_window_of_writes_shares_few_commits() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    let n = 64;
    let writes = (0..n).map(|i| {
        let s = s.clone();
        async move {
            let key = format!("vf/f/r/n/outbox/m{i}");
            let created = s.cas(&key, None, b"{}").await.expect("cas");
            let count = s.append("vf/f/r/n/received", b"id").await.expect("append");
            (created, count)
        }
    });
    let results = futures::future::join_all(writes).await;
    assert!(results.iter().all(|(created, _)| *created));
    let mut counts: Vec<u64> = results.iter().map(|r| r.1).collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=n).collect::<Vec<u64>>(),
        "each append its own line"
    );
    let (batches, ops) = s.commit_stats();
    assert_eq!(ops, 2 * n);
    assert!(
        batches * 4 <= ops,
        "{ops} writes in {batches} commits: the window was not grouped"
    );
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_4_a_large_batch_is_synced_once_for_the_file_system_a_small_one_file_by_file() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    assert!(s.cas("vf/alone", None, b"a").await.expect("cas"));
    assert_eq!(
        s.filesystem_syncs(),
        0,
        "a lone document syncs its own file"
    );
    let g = gate(&s);
    let first = tokio::spawn({
        let s = s.clone();
        async move { s.cas("vf/first", None, b"f").await }
    });
    g.wait_written();
    // While that batch is held, a window of documents queues behind it: the next batch.
    let n = 2 * super::commit::SYNCFS_MIN_FILES;
    let window: Vec<_> = (0..n)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.cas(&format!("vf/outbox/m{i}"), None, b"doc").await })
        })
        .collect();
    while s.committer.queued() < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = g.go.send(());
    g.wait_written();
    let _ = g.go.send(());
    assert!(first.await.expect("task").expect("cas"));
    for w in window {
        assert!(w.await.expect("task").expect("cas"));
    }
    assert_eq!(s.commit_stats(), (3, 2 + n as u64));
    assert_eq!(
        s.filesystem_syncs(),
        1,
        "the window's batch: one file system sync"
    );
    for i in 0..n {
        let doc = s.get(&format!("vf/outbox/m{i}")).await.expect("get");
        assert_eq!(
            doc.map(|d| (d.value, d.version)),
            Some((b"doc".to_vec(), "1".to_owned()))
        );
    }
    let _ = fs::remove_dir_all(dir);
}

/// Holds the writer thread at [`Step::Written`] of every batch until the test says go.
struct Gate {
    reached: mpsc::Receiver<()>,
    go: mpsc::Sender<()>,
}

fn gate(s: &FileStore) -> Gate {
    let (reached_tx, reached) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    s.committer.set_hook(move |step| {
        if step == Step::Written {
            let _ = reached_tx.send(());
            let _ = go_rx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .recv_timeout(Duration::from_secs(10));
        }
    });
    Gate { reached, go }
}

impl Gate {
    fn wait_written(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(10))
            .expect("the writer reached the written step");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliv_15_eos_2_a_record_is_answered_only_after_its_sync() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    let g = gate(&s);
    let appending = tokio::spawn({
        let s = s.clone();
        async move { s.append("vf/terminal", b"rec").await }
    });
    let creating = tokio::spawn({
        let s = s.clone();
        async move { s.cas("vf/terminator/p/r0/eos", None, b"doc").await }
    });
    g.wait_written();
    // The record is in its file (a crash now keeps it or not, the page cache decides) but not
    // synced: nobody may have been answered, so nothing that depends on it was acked.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!appending.is_finished() && !creating.is_finished());
    }
    assert_eq!(
        fs::read(log_path(&dir, "vf/terminal")).expect("written"),
        b"726563\n"
    );
    let _ = g.go.send(());
    // The CAS may have been queued behind the append's batch: let every batch through.
    let release = std::thread::spawn({
        let go = g.go.clone();
        move || {
            for _ in 0..4 {
                let _ = go.send(());
            }
        }
    });
    assert_eq!(appending.await.expect("task").expect("append"), 1);
    assert!(creating.await.expect("task").expect("cas"));
    release.join().expect("release");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_1_cases_on_one_key_in_one_batch_apply_in_order() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    let g = gate(&s);
    // A first write holds the writer; what is queued meanwhile is one batch.
    let first = tokio::spawn({
        let s = s.clone();
        async move { s.append("vf/hold", b"x").await }
    });
    g.wait_written();
    let cas = |expected: Option<&'static str>, value: &'static [u8]| {
        let s = s.clone();
        tokio::spawn(async move { s.cas("vf/k", expected, value).await })
    };
    let a = cas(None, b"a");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b = cas(None, b"b");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let c = cas(Some("1"), b"c");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let d = cas(Some("1"), b"d");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = g.go.send(());
    g.wait_written();
    let _ = g.go.send(());
    assert_eq!(first.await.expect("task").expect("append"), 1);
    let answers = [
        a.await.expect("task").expect("cas"),
        b.await.expect("task").expect("cas"),
        c.await.expect("task").expect("cas"),
        d.await.expect("task").expect("cas"),
    ];
    assert_eq!(answers, [true, false, true, false]);
    let v = s.get("vf/k").await.expect("get").expect("present");
    assert_eq!(
        (v.value.as_slice(), v.version.as_str()),
        (b"c".as_slice(), "2")
    );
    assert_eq!(s.commit_stats(), (2, 5));
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_4_two_writers_on_one_directory_lose_no_update_and_never_deadlock() {
    let dir = temp_dir();
    let stores = [
        FileStore::new(&dir).expect("store"),
        FileStore::new(&dir).expect("store"),
    ];
    let keys = ["vf/a", "vf/b", "vf/c"];
    let mut tasks = Vec::new();
    for (w, s) in stores.iter().enumerate() {
        for t in 0..6 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..5 {
                    // Different orders per task, so batches of both writers overlap.
                    let key = keys[(w + t + i) % keys.len()];
                    loop {
                        let cur = s.get(key).await.expect("get");
                        let (n, version) = cur.map_or((0u64, None), |v| {
                            let n = String::from_utf8_lossy(&v.value).parse().expect("number");
                            (n, Some(v.version))
                        });
                        let next = (n + 1).to_string();
                        if s.cas(key, version.as_deref(), next.as_bytes())
                            .await
                            .expect("cas")
                        {
                            break;
                        }
                    }
                    s.append("vf/log", b"x").await.expect("append");
                }
            }));
        }
    }
    let all = futures::future::join_all(tasks);
    let done = tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no deadlock between two writers");
    assert!(done.iter().all(Result::is_ok));
    let mut total = 0;
    for key in keys {
        let v = stores[0].get(key).await.expect("get").expect("present");
        total += String::from_utf8_lossy(&v.value)
            .parse::<u64>()
            .expect("number");
    }
    assert_eq!(total, 2 * 6 * 5);
    assert_eq!(
        stores[1].append("vf/log", b"y").await.expect("append"),
        2 * 6 * 5 + 1,
        "each writer counted the other's lines"
    );
    let _ = fs::remove_dir_all(dir);
}

/// `s.cas(key, expected, value)` on a task of its own, so the test can hold the writer meanwhile.
fn spawn_cas(
    s: &FileStore,
    key: &'static str,
    expected: Option<&'static str>,
    value: &'static [u8],
) -> tokio::task::JoinHandle<Result<bool, VfError>> {
    let s = s.clone();
    tokio::spawn(async move { s.cas(key, expected, value).await })
}

/// The value and version of `key`, which must exist.
async fn doc(s: &FileStore, key: &str) -> (Vec<u8>, String) {
    let v = s.get(key).await.expect("get").expect("present");
    (v.value, v.version)
}

/// The names in the store's directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_4_a_new_document_has_no_name_until_it_is_synced_an_update_goes_through_its_tmp_file()
{
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    // Where the file system has no unnamed files (an older overlayfs, NFS), the store falls
    // back to 1.0.4's temporary file, and that is what this test then sees.
    let unnamed_files = disk::unnamed(&dir).is_ok();
    let g = gate(&s);
    let creating = spawn_cas(&s, "vf/outbox/p1", None, b"new");
    g.wait_written();
    // Written, not synced: a crash now leaves neither the key nor a temporary file of it.
    if unnamed_files {
        assert_eq!(names(&dir), ["vf%2Foutbox%2Fp1.json.lock"]);
    } else {
        assert_eq!(
            names(&dir),
            ["vf%2Foutbox%2Fp1.json.lock", "vf%2Foutbox%2Fp1.json.tmp"]
        );
    }
    let _ = g.go.send(());
    assert!(creating.await.expect("task").expect("cas"));
    assert_eq!(
        names(&dir),
        ["vf%2Foutbox%2Fp1.json", "vf%2Foutbox%2Fp1.json.lock"]
    );
    assert_eq!(
        fs::read_to_string(dir.join("vf%2Foutbox%2Fp1.json")).expect("doc"),
        r#"{"value":"6e6577","version":1}"#
    );
    // A document that exists is replaced the way 1.0.4 replaces it: tmp file, then rename.
    let updating = spawn_cas(&s, "vf/outbox/p1", Some("1"), b"resolved");
    g.wait_written();
    assert!(names(&dir).contains(&"vf%2Foutbox%2Fp1.json.tmp".to_owned()));
    let _ = g.go.send(());
    assert!(updating.await.expect("task").expect("cas"));
    assert_eq!(
        names(&dir),
        ["vf%2Foutbox%2Fp1.json", "vf%2Foutbox%2Fp1.json.lock"]
    );
    assert_eq!(
        doc(&s, "vf/outbox/p1").await,
        (b"resolved".to_vec(), "2".to_owned())
    );
    // Creating it again is refused (the link finds it) and changes nothing.
    let again = spawn_cas(&s, "vf/outbox/p1", None, b"again");
    g.wait_written();
    let _ = g.go.send(());
    assert!(!again.await.expect("task").expect("cas"));
    assert_eq!(doc(&s, "vf/outbox/p1").await.1, "2");
    assert_eq!(
        names(&dir),
        ["vf%2Foutbox%2Fp1.json", "vf%2Foutbox%2Fp1.json.lock"]
    );
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_1_a_create_that_finds_the_key_made_meanwhile_is_refused_and_keeps_the_other_document()
 {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    let g = gate(&s);
    let creating = spawn_cas(&s, "vf/effect/k", None, b"ours");
    g.wait_written();
    // A writer that does not take the lock creates the key between our read and our link.
    fs::write(
        dir.join("vf%2Feffect%2Fk.json"),
        r#"{"value":"746865697273","version":1}"#,
    )
    .expect("foreign write");
    let _ = g.go.send(());
    assert!(!creating.await.expect("task").expect("cas"));
    assert_eq!(
        doc(&s, "vf/effect/k").await,
        (b"theirs".to_vec(), "1".to_owned())
    );
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_4_without_unnamed_files_a_create_goes_through_its_tmp_file_and_never_replaces() {
    let dir = temp_dir();
    let s = FileStore::new(&dir).expect("store");
    assert!(s.cas("vf/k", None, b"first").await.expect("cas"));
    s.committer.refuse_unnamed();
    let g = gate(&s);
    let creating = spawn_cas(&s, "vf/new", None, b"doc");
    g.wait_written();
    assert!(names(&dir).contains(&"vf%2Fnew.json.tmp".to_owned()));
    let _ = g.go.send(());
    assert!(creating.await.expect("task").expect("cas"));
    // A lone create of a key that exists reads it first, so it is refused, not renamed over.
    let again = spawn_cas(&s, "vf/k", None, b"second");
    tokio::task::spawn_blocking(move || {
        while g.reached.recv_timeout(Duration::from_millis(200)).is_ok() {
            let _ = g.go.send(());
        }
    });
    assert!(!again.await.expect("task").expect("cas"));
    assert_eq!(doc(&s, "vf/k").await, (b"first".to_vec(), "1".to_owned()));
    assert_eq!(doc(&s, "vf/new").await.0, b"doc");
    assert!(!names(&dir).iter().any(|n| n.ends_with(".tmp")));
    let _ = fs::remove_dir_all(dir);
}
