//! The file store's own rules (STORE-4): counting only what other writers appended.

use std::io::Write;
use std::time::Duration;

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
