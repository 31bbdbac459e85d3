//! The run ledger over real stores: the file store is durable and shared (STORE-4), so it
//! exercises every record; the memory store shows what is kept when nothing persists.

use super::*;
use crate::store::{FileStore, MemoryStore};
use std::time::Duration;

fn file_store() -> (RuntimeStore, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("vf-ledger-{}", uuid::Uuid::new_v4().simple()));
    let store = FileStore::new(&dir).expect("file store");
    (RuntimeStore::File(store), dir)
}

async fn ledger(store: &RuntimeStore, replica: u32, nb: u32) -> RunLedger {
    RunLedger::open(store.clone(), "f", "r", "det", replica, nb)
        .await
        .expect("open")
}

async fn doc(store: &RuntimeStore, key: &str) -> Map<String, Json> {
    let v = store.get(key).await.expect("get").expect("present");
    parse(&v.value)
}

#[tokio::test]
async fn eos_2_a_terminator_is_written_once_under_its_key() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    assert!(l.durable_shared());
    assert!(
        l.record_terminator("cam", 1, TerminatorKind::Eos, 40, None)
            .await
            .expect("record")
    );
    // A duplicate (this process, a restart or a sibling replica) is not new.
    assert!(
        !l.record_terminator("cam", 1, TerminatorKind::Eos, 99, None)
            .await
            .expect("record")
    );
    let d = doc(&store, "vf/f/r/det/terminator/cam/r1/eos").await;
    assert_eq!(
        d.keys().map(String::as_str).collect::<Vec<_>>(),
        ["at", "error", "seq"]
    );
    assert_eq!((d["seq"].as_u64(), d["error"].is_null()), (Some(40), true));
    // Sorted keys, compact separators (1.0.4's json.dumps(sort_keys, separators)).
    let raw = store
        .get("vf/f/r/det/terminator/cam/r1/eos")
        .await
        .expect("get")
        .expect("present")
        .value;
    let text = String::from_utf8(raw).expect("utf-8");
    assert!(text.starts_with("{\"at\":") && text.ends_with(",\"error\":null,\"seq\":40}"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_2_abort_records_keep_their_error_and_read_back_in_order() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    let mut err = WireError::new("VF_POISON_INPUT", "bad frame");
    err.remedy = Some("fix it".into());
    err.disposition = Some(Disposition::Poison);
    err.context.insert("node".into(), "cam".into());
    l.record_terminator("cam", 1, TerminatorKind::Abort, 3, Some(&err))
        .await
        .expect("record");
    l.record_terminator("cam", 0, TerminatorKind::Eos, 7, None)
        .await
        .expect("record");
    l.record_terminator("other", 0, TerminatorKind::Eos, 1, None)
        .await
        .expect("record");
    let facts = l.terminators("cam").await.expect("scan");
    assert_eq!(facts.len(), 2, "only cam's: {facts:?}");
    assert_eq!(
        (facts[0].replica, facts[0].kind, facts[0].seq),
        (0, TerminatorKind::Eos, 7)
    );
    assert_eq!(
        (facts[1].replica, facts[1].kind, facts[1].seq),
        (1, TerminatorKind::Abort, 3)
    );
    assert_eq!(facts[1].error.as_ref(), Some(&err));
    let d = doc(&store, "vf/f/r/det/terminator/cam/r1/abort").await;
    assert_eq!(
        d["error"],
        json!({"code": "VF_POISON_INPUT", "context": {"node": "cam"}, "disposition": "poison",
               "message": "bad frame", "remedy": "fix it"})
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_7_received_ids_are_distinct_and_united_over_replicas() {
    let (store, dir) = file_store();
    let (a, b) = (ledger(&store, 0, 2).await, ledger(&store, 1, 2).await);
    assert!(a.record_received("cam", "d", "id-1").await.expect("note"));
    assert!(!a.record_received("cam", "d", "id-1").await.expect("note"));
    assert!(a.record_received("cam", "d", "id-2").await.expect("note"));
    assert!(b.record_received("cam", "d", "id-2").await.expect("note"));
    assert!(b.record_received("cam", "d", "id-3").await.expect("note"));
    // Another durable (a partitioned sibling's) is counted apart.
    assert!(
        b.record_received("cam", "other", "id-9")
            .await
            .expect("note")
    );
    assert_eq!(a.received_count("cam", "d").await.expect("count"), 3);
    assert_eq!(b.received_count("cam", "d").await.expect("count"), 3);
    assert_eq!(a.received_count("cam", "other").await.expect("count"), 1);
    // The log is one id per entry under 1.0.4's key.
    let log = store
        .log_entries("vf/f/r/det/received/cam/d/r0")
        .await
        .expect("log");
    assert_eq!(log, vec![b"id-1".to_vec(), b"id-2".to_vec()]);
    // A restarted replica 0 does not append what its log already holds.
    let again = ledger(&store, 0, 2).await;
    assert!(
        !again
            .record_received("cam", "d", "id-2")
            .await
            .expect("note")
    );
    assert_eq!(
        store
            .log_entries("vf/f/r/det/received/cam/d/r0")
            .await
            .expect("log")
            .len(),
        2
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_7_published_ids_persist_across_restarts_per_replica() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 2).await;
    l.record_published("m1", "abcd", Accepted::New, 5)
        .await
        .expect("outbox");
    l.record_published("m2", "abce", Accepted::Duplicate, 6)
        .await
        .expect("outbox");
    l.record_published("m1", "abcd", Accepted::Duplicate, 5)
        .await
        .expect("outbox");
    assert_eq!(l.published_count(), 2);
    let d = doc(&store, "vf/f/r/det/outbox/m1").await;
    assert_eq!(
        d.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "at",
            "digest",
            "kind",
            "outcome",
            "readers",
            "refs",
            "replica",
            "resolved_at",
            "seq"
        ]
    );
    assert_eq!(
        (d["kind"].as_str(), d["replica"].as_u64(), d["seq"].as_u64()),
        (Some("data"), Some(0), Some(5))
    );
    // Replica 1 publishes its own; a restarted replica 0 reloads only its own.
    let other = ledger(&store, 1, 2).await;
    other
        .record_published("m3", "ffff", Accepted::New, 7)
        .await
        .expect("outbox");
    assert_eq!(ledger(&store, 0, 2).await.published_count(), 2);
    assert_eq!(ledger(&store, 1, 2).await.published_count(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// EOS-7 barrier (b): replica 1 recorded `m1` and died before acking its input; replica 0
/// re-publishes the redelivered input (a duplicate). Only the record's owner counts `m1`, so
/// the two terminators' seqs sum to the distinct ids the child can receive.
#[tokio::test]
async fn eos_7_an_id_another_replica_recorded_is_counted_once_over_the_replicas() {
    let (store, dir) = file_store();
    let dead = ledger(&store, 1, 2).await;
    dead.record_published("m1", "abcd", Accepted::New, 5)
        .await
        .expect("outbox");
    drop(dead);
    let alive = ledger(&store, 0, 2).await;
    alive
        .record_published("m1", "abcd", Accepted::Duplicate, 5)
        .await
        .expect("outbox");
    alive
        .record_published("m2", "abce", Accepted::New, 6)
        .await
        .expect("outbox");
    assert_eq!(alive.published_count(), 1, "m2 only");
    let d = doc(&store, "vf/f/r/det/outbox/m1").await;
    assert_eq!(
        (d["replica"].as_u64(), d["outcome"].as_str()),
        (Some(1), Some("accepted")),
        "the owner's record is left as it was"
    );
    let restarted = ledger(&store, 1, 2).await;
    assert_eq!(restarted.published_count(), 1, "m1, reloaded by its owner");
    assert_eq!(ledger(&store, 0, 2).await.published_count(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_7_a_completion_under_a_newer_epoch_is_stale_authority() {
    let (store, dir) = file_store();
    let l = ledger(&store, 1, 2).await;
    l.commit_completion("cam", 0, 77).await.expect("commit");
    let d = doc(&store, "vf/f/r/det/completion/cam/det/p1").await;
    assert_eq!(
        (d["epoch"].as_u64(), d["final"].as_u64()),
        (Some(0), Some(77))
    );
    l.commit_completion("cam", 3, 77)
        .await
        .expect("newer epoch");
    let e = l.commit_completion("cam", 2, 77).await.expect_err("stale");
    assert_eq!(e.code, ErrorCode::StaleAuthority);
    assert!(
        e.message
            .contains("already committed under epoch 3 of det/p1"),
        "{}",
        e.message
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn idem_1_effect_markers_are_seen_within_their_retention() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    assert!(!l.effect_seen("k1").await.expect("read"));
    assert!(l.mark_effect("k1", 60.0).await.expect("mark"));
    assert!(l.effect_seen("k1").await.expect("read"));
    assert!(!l.mark_effect("k1", 60.0).await.expect("mark"));
    // An expired marker is not seen and may be marked again.
    assert!(l.mark_effect("k2", -1.0).await.expect("mark"));
    assert!(!l.effect_seen("k2").await.expect("read"));
    assert!(l.mark_effect("k2", 60.0).await.expect("mark"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_memory_ledger_counts_but_writes_no_outbox() {
    let store = RuntimeStore::Memory(MemoryStore::new());
    let l = ledger(&store, 0, 1).await;
    assert!(!l.durable_shared());
    l.record_published("m1", "d", Accepted::New, 1)
        .await
        .expect("count");
    assert_eq!(l.published_count(), 1);
    assert!(store.scan("vf/").await.expect("scan").is_empty());
}

#[test]
fn damaged_records_read_as_empty_and_error_records_round_trip() {
    assert!(parse(b"not json").is_empty());
    assert!(parse(b"[1]").is_empty());
    assert_eq!(error_from_json(&Json::Null), None);
    let e = WireError::new("VF_UNKNOWN", "");
    assert_eq!(error_from_json(&error_to_json(&e)), Some(e));
}

#[tokio::test]
async fn stream_15_attempts_count_every_disposition_but_worker_fatal() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    assert_eq!(
        l.record_attempt("m", Disposition::Transient)
            .await
            .expect("count"),
        1
    );
    assert_eq!(
        l.record_attempt("m", Disposition::WorkerFatal)
            .await
            .expect("count"),
        1
    );
    assert_eq!(
        l.record_attempt("m", Disposition::Poison)
            .await
            .expect("count"),
        2
    );
    assert_eq!(
        l.record_attempt("m", Disposition::Transient)
            .await
            .expect("count"),
        3
    );
    assert_eq!(l.attempts_for("m").await.expect("read"), 3);
    assert_eq!(l.attempts_for("other").await.expect("read"), 0);
    let d = doc(&store, "vf/f/r/det/attempts/m").await;
    assert_eq!(
        d.keys().map(String::as_str).collect::<Vec<_>>(),
        ["at", "poison", "transient"],
        "worker_fatal is never written"
    );
    assert_eq!(
        (d["transient"].as_u64(), d["poison"].as_u64()),
        (Some(2), Some(1))
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn deliv_15_terminal_records_are_appended_and_named_by_position() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    let rec = |seq| TerminalRecord {
        message_id: "m1",
        stream_seq: seq,
        attempt: 2,
        code: "VF_POISON",
        reason: "sampled-out",
    };
    assert_eq!(
        l.record_terminal(&rec(7)).await.expect("append"),
        "ledger:det/terminal:1"
    );
    assert_eq!(
        l.record_terminal(&rec(8)).await.expect("append"),
        "ledger:det/terminal:2"
    );
    let entries = l.terminal_entries().await.expect("read");
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[0].keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "at",
            "attempt",
            "code",
            "message_id",
            "reason",
            "stream_seq"
        ]
    );
    assert_eq!(entries[1]["stream_seq"].as_u64(), Some(8));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn deliv_15_a_process_local_ledger_numbers_terminal_records_without_keeping_them() {
    let store = RuntimeStore::Memory(MemoryStore::new());
    let l = ledger(&store, 0, 1).await;
    let rec = TerminalRecord {
        message_id: "m1",
        stream_seq: 3,
        attempt: 1,
        code: "VF_POISON",
        reason: "sampled-out",
    };
    assert_eq!(
        l.record_terminal(&rec).await.expect("number"),
        "ledger:det/terminal:1"
    );
    assert_eq!(
        l.record_terminal(&rec).await.expect("number"),
        "ledger:det/terminal:2"
    );
    assert!(l.terminal_entries().await.expect("read").is_empty());
}

#[tokio::test]
async fn deliv_8_pending_handoffs_survive_and_clear() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    let headers: BTreeMap<String, String> = [("VF-Code".to_owned(), "VF_POISON".to_owned())].into();
    l.record_pending_handoff("dlq:f:r:det:9", &headers, b"\x00raw")
        .await
        .expect("record");
    l.record_pending_handoff("dlq:f:r:det:9", &headers, b"\x00raw")
        .await
        .expect("record");
    let again = ledger(&store, 0, 1).await;
    let pending = again.pending_handoffs().await.expect("scan");
    assert_eq!(
        pending,
        vec![PendingHandoff {
            record_id: "dlq:f:r:det:9".into(),
            headers: headers.clone(),
            raw: b"\x00raw".to_vec(),
            attempts: 2,
        }]
    );
    again
        .clear_pending_handoff("dlq:f:r:det:9")
        .await
        .expect("clear");
    assert!(again.pending_handoffs().await.expect("scan").is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_7_a_batch_of_received_ids_is_one_append_and_a_failed_one_notes_nothing() {
    let (store, dir) = file_store();
    let RuntimeStore::File(files) = &store else {
        unreachable!("a file store")
    };
    let l = ledger(&store, 0, 1).await;
    let fresh = l
        .record_received_all("cam", "d", &["a", "b", "a", "c"])
        .await
        .expect("note");
    assert_eq!(
        fresh,
        [true, true, false, true],
        "a repeat in the batch is not new"
    );
    assert_eq!(files.commit_stats(), (1, 1), "one append for the batch");
    assert!(
        l.record_received_all("cam", "d", &["b"])
            .await
            .expect("note")
            == [false]
    );
    assert_eq!(files.commit_stats(), (1, 1), "nothing new, nothing written");
    let log = "vf/f/r/det/received/cam/d/r0";
    assert_eq!(
        store.log_entries(log).await.expect("log"),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    // The log cannot be written (a directory stands in its place): the ids are not noted,
    // so a redelivery notes them again once it can.
    let path = dir.join("vf%2Ff%2Fr%2Fdet%2Freceived%2Fcam%2Fd%2Fr0.log");
    std::fs::rename(&path, dir.join("saved")).expect("move the log away");
    std::fs::create_dir(&path).expect("a directory in its place");
    l.record_received_all("cam", "d", &["x", "y"])
        .await
        .expect_err("cannot append");
    std::fs::remove_dir(&path).expect("remove the directory");
    std::fs::rename(dir.join("saved"), &path).expect("the log back");
    assert_eq!(
        l.record_received_all("cam", "d", &["x", "a"])
            .await
            .expect("note"),
        [true, false]
    );
    assert_eq!(l.received_count("cam", "d").await.expect("count"), 4);
    assert_eq!(store.log_entries(log).await.expect("log").len(), 4);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_7_an_outbox_record_created_without_a_read_still_keeps_an_existing_one() {
    let (store, dir) = file_store();
    // An earlier process left an unresolved record for m9 (not counted at open: no outcome).
    let earlier = br#"{"at":1.0,"digest":"abcd","kind":"data","readers":[],"refs":[],"replica":0}"#;
    assert!(
        store
            .cas("vf/f/r/det/outbox/m9", None, earlier)
            .await
            .expect("seed")
    );
    let l = ledger(&store, 0, 1).await;
    assert_eq!(l.published_count(), 0);
    l.record_published("m9", "abcd", Accepted::New, 12)
        .await
        .expect("outbox");
    l.record_published("m10", "ef01", Accepted::New, 13)
        .await
        .expect("outbox");
    let d = doc(&store, "vf/f/r/det/outbox/m9").await;
    assert_eq!(
        (d["at"].as_f64(), d["outcome"].as_str(), d["seq"].as_u64()),
        (Some(1.0), Some("accepted"), Some(12)),
        "the existing record was updated, not replaced"
    );
    let v = store
        .get("vf/f/r/det/outbox/m9")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(v.version, "2");
    assert_eq!(doc(&store, "vf/f/r/det/outbox/m10").await["seq"], 13);
    assert_eq!(ledger(&store, 0, 1).await.published_count(), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn eos_7_an_id_an_earlier_note_took_is_answered_only_once_that_note_is_in_the_log() {
    let (store, dir) = file_store();
    let l = ledger(&store, 0, 1).await;
    // Make the log exist, then hold its lock the way another writer would (STORE-4): the
    // next append waits for it.
    l.record_received_all("cam", "d", &["a"])
        .await
        .expect("note");
    let lock_path = dir.join("log:vf%2Ff%2Fr%2Fdet%2Freceived%2Fcam%2Fd%2Fr0.json.lock");
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(&lock_path)
        .expect("the log's lock file");
    held.lock().expect("hold the log's lock");
    let first = tokio::spawn({
        let l = l.clone();
        async move { l.record_received_all("cam", "d", &["b", "c"]).await }
    });
    // Let the first call take its ids into the set and start its (stalled) append.
    let started = std::time::Instant::now();
    while l.received_count("cam", "d").await.expect("count") < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "b and c never taken"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // `c` is the first call's: this one, with nothing of its own to append, may answer
    // `false` for it only once it is in the log.
    let second = tokio::spawn({
        let l = l.clone();
        async move { l.record_received_all("cam", "d", &["c"]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished() && !first.is_finished(),
        "answered while the append that holds c is still waiting for the log's lock"
    );
    drop(held);
    assert_eq!(first.await.expect("task").expect("note"), [true, true]);
    assert_eq!(second.await.expect("task").expect("note"), [false]);
    let log = "vf/f/r/det/received/cam/d/r0";
    let mut lines = store.log_entries(log).await.expect("log");
    lines.sort();
    assert_eq!(
        lines,
        [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
        "every id once"
    );
    let _ = std::fs::remove_dir_all(dir);
}
