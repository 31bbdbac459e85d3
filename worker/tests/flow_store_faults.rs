//! The payload Redis (append-only, fsync per write) SIGKILLed mid-flow with 1080p-sized
//! frames (1920×1080×3 = 6.2 MB each, offloaded to the store, BLOB-1/3) and restarted on the
//! same directory, and the same store restarted empty (its files deleted: every payload still
//! referenced is really gone):
//!
//! ```text
//!   frames (SyntheticFrameProducer 1920×1080×3) ─ same (Identity) ─ sink
//! ```
//!
//! A store that is unreachable is transient (DELIV-15: NAK, retried), so a restart loses no
//! frame; a payload that is gone is poison `VF_POISON_DECODE`, dead-lettered, never a hang.
//! A producer whose payload write fails ends (a failed publication ends a producer, LOOP-2)
//! with `VF_TRANSIENT`, exit 4; the test starts any worker that ends non-zero again, as its
//! pod would be. The producers are replayable (MSGID-6): the restarted one re-mints the ids
//! it had published, which the stream's duplicate window drops, so every frame and value
//! arrives once — counted by value, not only by item.

mod flows_common;
mod streams;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use flows_common::{IDENTITY, batch_flow, jsonl_sink, processor};
use support::FlowHarness;
use videoflow_core::naming;

const W: u32 = 1920;
const H: u32 = 1080;
const C: u32 = 3;
const COUNT: u64 = 30;

fn flow_yaml() -> String {
    let nodes = format!(
        r#"  - name: frames
    kind: producer
    replayable: true
    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}
    params: {{width: {W}, height: {H}, channels: {C}, count: {COUNT}}}
{same}{sink}"#,
        same = processor("same", "frames", IDENTITY),
        sink = jsonl_sink("sink", "same", "out.jsonl", ""),
    );
    format!(
        "# vf-test: appendfsync always\n{}",
        batch_flow(
            "storefaults",
            "  runId: r1\n  payloadStore: {url: \"{{DURABLE_REDIS}}\"}\n",
            &nodes
        )
    )
}

/// The frame indices at the sink (bytes 0..8 of a synthetic frame are its index).
fn frame_indices(h: &FlowHarness) -> Vec<u64> {
    h.jsonl("out.jsonl")
        .iter()
        .map(|r| {
            let t = &r["value"]["$tensor"];
            assert_eq!(t["shape"], serde_json::json!([H, W, C]), "{r}");
            let head = hex::decode(t["head_hex"].as_str().unwrap_or_default()).expect("hex");
            u64::from_le_bytes(head[..8].try_into().expect("8 bytes"))
        })
        .collect()
}

/// Waits for the flow to end, starting again (as a pod would be) every worker that ends
/// non-zero; returns the codes of those ends as `node:code`.
fn supervise(h: &mut FlowHarness, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut handled = BTreeSet::new();
    let mut restarts = Vec::new();
    loop {
        for (i, e) in h.exits_so_far().into_iter().enumerate() {
            if e.code.is_some_and(|c| c != 0) && handled.insert(i) {
                let code = h
                    .termination(&e.node, e.replica)
                    .and_then(|r| r["code"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                restarts.push(format!("{}:{code}", e.node));
                h.spawn(&e.node, e.replica, &[]);
            }
        }
        if h.running() == 0 {
            return restarts;
        }
        assert!(
            Instant::now() < deadline && restarts.len() < 10,
            "the flow did not end within {timeout:?} (restarts {restarts:?}); logs:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn dead_letters(h: &FlowHarness) -> Vec<streams::Stored> {
    h.block_on(streams::read_stream(
        &h.nats.url(),
        &naming::dlq_stream_name("storefaults"),
    ))
}

/// Runs the flow, SIGKILLs the payload Redis once `after` frames reached the sink, restarts
/// it on its directory after `down`.
fn run_with_restart(after: usize, down: Duration) -> FlowHarness {
    let mut h = FlowHarness::new(&flow_yaml());
    h.start();
    h.wait_for_records("out.jsonl", after, Duration::from_secs(120));
    h.redis.as_mut().expect("redis").kill();
    std::thread::sleep(down);
    h.redis
        .as_mut()
        .expect("redis")
        .restart()
        .unwrap_or_else(|e| panic!("{e}"));
    h
}

/// A restart on the same AOF: every frame arrives, intact in shape and index, each item
/// (trace id) once, no dead letter; only transient ends (`VF_TRANSIENT`) restart a worker.
#[test]
fn a_payload_redis_restart_mid_flow_loses_no_frame() {
    let t0 = Instant::now();
    let mut h = run_with_restart(5, Duration::from_secs(2));
    let restarts = supervise(&mut h, Duration::from_secs(300));
    assert!(
        restarts.iter().all(|r| r.ends_with(":VF_TRANSIENT")),
        "{restarts:?}; logs:\n{}",
        h.all_logs()
    );
    let mut got = frame_indices(&h);
    got.sort_unstable();
    assert_eq!(
        got,
        (0..COUNT).collect::<Vec<_>>(),
        "every frame once; restarts {restarts:?}; logs:\n{}",
        h.all_logs()
    );
    let dead = dead_letters(&h);
    assert!(
        dead.is_empty(),
        "{} dead letter(s): {:?}",
        dead.len(),
        dead.first().map(|d| &d.headers)
    );
    eprintln!(
        "RELIABILITY payload-redis-restart: {COUNT} frames of {W}x{H}x{C}, 0 lost, 0 \
         duplicated, 0 dead letters, restarts {restarts:?}, run {:?}",
        t0.elapsed()
    );
}

/// A restart with the store's files deleted: the frames whose payloads are gone become dead
/// letters with `VF_POISON_DECODE` (DELIV-15), the rest arrive, and the flow ends — every
/// frame accounted for exactly once, at the sink or in the DLQ (the restarted producer's
/// re-publications of the lost ones are duplicates of ids the stream holds, MSGID-6).
#[test]
fn a_payload_really_gone_is_a_dead_letter_never_a_hang() {
    // `same` starts only after the wipe, so the references the producer published before it
    // are certainly unread when their payloads go: the dead letters below do not depend on
    // whether the consumers happened to be behind the producer at that moment.
    let mut h = FlowHarness::new(&flow_yaml());
    h.provision();
    h.spawn("frames", 0, &[]);
    h.spawn("sink", 0, &[]);
    let frames = naming::stream_name(&h.flow.flow_id, &h.flow.run_id, "frames");
    h.wait_until("5 frames published", Duration::from_secs(120), || {
        let n = h
            .block_on(streams::read_stream(&h.nats.url(), &frames))
            .len();
        if n >= 5 {
            Ok(())
        } else {
            Err(format!("{n} messages in {frames}"))
        }
    });
    h.redis.as_mut().expect("redis").kill();
    let dir = h.redis.as_ref().expect("redis").dir().to_path_buf();
    for entry in std::fs::read_dir(&dir).expect("redis dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("appendonly") || name.ends_with(".rdb") {
            let path = entry.path();
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    h.redis
        .as_mut()
        .expect("redis")
        .restart()
        .unwrap_or_else(|e| panic!("{e}"));
    h.spawn("same", 0, &[]);
    let exits = supervise(&mut h, Duration::from_secs(300));
    let got = frame_indices(&h);
    let distinct: BTreeSet<u64> = got.iter().copied().collect();
    assert_eq!(distinct.len(), got.len(), "a frame arrived twice: {got:?}");
    let dead = dead_letters(&h);
    for d in &dead {
        assert_eq!(
            d.headers.get("VF-Code").map(String::as_str),
            Some("VF_POISON_DECODE"),
            "{:?}",
            d.headers
        );
    }
    assert!(
        !dead.is_empty(),
        "nothing was dead-lettered; exits {exits:?}; logs:\n{}",
        h.all_logs()
    );
    assert_eq!(
        got.len() + dead.len(),
        COUNT as usize,
        "{} frames at the sink + {} dead letters: each frame once, at one of them; exits \
         {exits:?}; logs:\n{}",
        got.len(),
        dead.len(),
        h.all_logs()
    );
    eprintln!(
        "RELIABILITY payload-redis-lost: {} of {COUNT} frames at the sink, {} dead letters \
         (VF_POISON_DECODE), restarts {:?}",
        got.len(),
        dead.len(),
        exits
    );
}

/// The same SIGKILL and restart for a Redis **run ledger** (the runtime store, §11.2): every
/// value reaches the sink, each item once, no dead letter; a worker the outage ended (its
/// ledger write failed) is started again and resumes from the ledger.
#[test]
fn a_redis_run_ledger_restart_mid_flow_loses_nothing() {
    const N: i64 = 1000;
    let yaml = format!(
        "# vf-test: appendfsync always\n{}",
        batch_flow(
            "ledgerfaults",
            &flows_common::ledger_spec("{{DURABLE_REDIS}}"),
            &flows_common::numbers_to_sink(N, "work", IDENTITY, "").replace(
                "    kind: producer\n",
                "    kind: producer\n    replayable: true\n"
            ),
        )
    );
    let t0 = Instant::now();
    let mut h = FlowHarness::new(&yaml);
    h.start();
    h.wait_for_records("out.jsonl", (N / 4) as usize, Duration::from_secs(120));
    h.redis.as_mut().expect("redis").kill();
    std::thread::sleep(Duration::from_secs(2));
    h.redis
        .as_mut()
        .expect("redis")
        .restart()
        .unwrap_or_else(|e| panic!("{e}"));
    let restarts = supervise(&mut h, Duration::from_secs(300));
    let out = flows_common::assert_none_lost(&h, 0..N, "after the run ledger's restart");
    assert_eq!(
        out.len(),
        N as usize,
        "each value once; restarts {restarts:?}; logs:\n{}",
        h.all_logs()
    );
    let dead = h.block_on(streams::read_stream(
        &h.nats.url(),
        &naming::dlq_stream_name("ledgerfaults"),
    ));
    assert!(dead.is_empty(), "{} dead letter(s)", dead.len());
    eprintln!(
        "RELIABILITY ledger-redis-restart: {N} values, 0 lost, 0 duplicated, 0 dead letters, \
         {} records, restarts {restarts:?}, run {:?}",
        out.len(),
        t0.elapsed()
    );
}
