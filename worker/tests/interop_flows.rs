//! Interop flows: one Flow whose nodes are split between our worker
//! (`videoflow-worker`, `R`) and the Python reference worker (`python -m videoflow.worker`
//! of videoflow 1.0.4, `P`), against a real nats-server (and redis-server). Both provision
//! jobs get the same input, the compiled `specs.json` and the flow-level `VF_*`: ours
//! (`videoflow-worker provision`) and the reference's (`python -m videoflow.provision`).
//! Every flow runs in both directions (a placement and its mirror image, every replica on
//! the other runtime) under both provisioners: four tests per flow, `<flow>::<provisioner>
//! _provisioned[_mirrored]`. Cases run as separate tests, concurrently under libtest.
//!
//! Nodes are the reference's own classes where it has one (IntProducer, IdentityProcessor,
//! JoinerProcessor, CountAggregator); our `videoflow.rs.*` test nodes run on the reference as
//! their Python twins (`tests/conformance/interop_nodes.py`: same parameters, same outputs,
//! same sink records). Assertions are exact: every expected output once — except where a
//! 1.0.4 peer makes a documented difference (docs/COMPATIBILITY.md, interop section).

mod flows_common;
mod shared_flows;
mod streams;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use videoflow_core::envelope;
use videoflow_core::naming;
use videoflow_worker::nodes::testing::DEFAULT_TICK_START_TS;

use flows_common::{
    IDENTITY, assert_none_lost, batch_flow, by_trace, duplicate_arrivals, int_value, ledger_docs,
    ledger_log, ledger_spec, numbers_to_sink,
};
use shared_flows::{
    aborting_flow, assert_diamond_joined, assert_frames_intact, assert_linear_in_order,
    assert_one_group_per_tick, assert_poison_abort_relayed, diamond_flow, frames_flow, linear_flow,
    owning_replica, redis_keys, redis_ttl, time_join_flow,
};
use support::{FlowHarness, Provisioner, Runtime};

use Runtime::{Reference as P, Rust as R};

/// Four tests per flow: `$flow(provisioner, placement)` with the placement and its mirror
/// image (every node on the other runtime), each under both provisioners.
macro_rules! matrix {
    ($flow:ident, [$($place:expr),* $(,)?]) => {
        mod $flow {
            use super::*;
            const PLACE: &[Runtime] = &[$($place),*];
            #[test]
            fn rust_provisioned() {
                super::$flow(Provisioner::Rust, PLACE);
            }
            #[test]
            fn rust_provisioned_mirrored() {
                super::$flow(Provisioner::Rust, &mirror(PLACE));
            }
            #[test]
            fn reference_provisioned() {
                super::$flow(Provisioner::Reference, PLACE);
            }
            #[test]
            fn reference_provisioned_mirrored() {
                super::$flow(Provisioner::Reference, &mirror(PLACE));
            }
        }
    };
}

/// Every replica on the other runtime.
fn mirror(place: &[Runtime]) -> Vec<Runtime> {
    place
        .iter()
        .map(|r| match r {
            R => P,
            P => R,
        })
        .collect()
}

/// The runtimes of `place` handed out to `nodes` (name, replicas) in order.
fn placement<'a>(
    nodes: &[(&'a str, usize)],
    place: &'a [Runtime],
) -> Vec<(&'a str, &'a [Runtime])> {
    assert_eq!(
        nodes.iter().map(|(_, n)| n).sum::<usize>(),
        place.len(),
        "one runtime per replica"
    );
    let mut at = 0;
    nodes
        .iter()
        .map(|&(name, n)| {
            let slice = &place[at..at + n];
            at += n;
            (name, slice)
        })
        .collect()
}

fn label(prov: Provisioner, place: &[Runtime]) -> String {
    let p: String = place
        .iter()
        .map(|r| if *r == R { 'R' } else { 'P' })
        .collect();
    format!("{prov:?}-provisioned {p}")
}

// -- linear ------------------------------------------------------------------------------------

/// numbers → same → sink: exactly N, in order, carrying the producer's trace ids and seqs
/// (WIRE-4, MSGID-2) across both runtimes.
fn linear(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 40;
    let mut h = FlowHarness::new(&linear_flow(N));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("numbers", 1), ("same", 1), ("sink", 1)], place),
    );
    h.wait_all_ok(Duration::from_secs(60));
    assert_linear_in_order(&h, N);
    eprintln!("linear {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(linear, [R, P, R]);

// -- the run ledger and the EOS-7 barrier ------------------------------------------------------

/// numbers → same (3 competing replicas, on both runtimes) → sink, with a durable shared run
/// ledger (`file://`, as 1.0.4's local engine uses): both implementations record terminators,
/// received ids and completions under one key layout (§11.2), and each completes its parents
/// by the EOS-7 barrier — the union of received logs written by *both* runtimes.
fn ledger(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 40;
    let same = format!("    replicas: 3\n{IDENTITY}");
    let ledger = "file://{{DIR}}/ledger";
    let mut h = FlowHarness::new(&batch_flow(
        "ledger",
        &ledger_spec(ledger),
        &numbers_to_sink(N, "same", &same, ""),
    ));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("numbers", 1), ("same", 3), ("sink", 1)], place),
    );
    h.wait_all_ok(Duration::from_secs(90));
    let mut values: Vec<i64> = h.jsonl("out.jsonl").iter().map(int_value).collect();
    values.sort_unstable();
    assert_eq!(
        values,
        (0..N).collect::<Vec<_>>(),
        "logs:\n{}",
        h.all_logs()
    );
    let url = format!("file://{}/ledger", h.dir.display());
    let scan = |prefix: &str| ledger_docs(&h, &url, prefix);
    // One terminator fact for `same` (the producer's), N distinct ids.
    let terms = scan("vf/ledger/r1/same/terminator/");
    assert_eq!(
        terms.keys().cloned().collect::<Vec<_>>(),
        ["numbers/r0/eos"]
    );
    assert_eq!(terms["numbers/r0/eos"]["seq"].as_i64(), Some(N));
    // The union of the received logs, whichever runtime wrote them, is every id once.
    let durable = naming::durable_name("same", "numbers");
    let mut received = BTreeSet::new();
    for r in 0..3 {
        let log = format!("vf/ledger/r1/same/received/numbers/{durable}/r{r}");
        for id in ledger_log(&h, &url, &log) {
            assert!(received.insert(id), "an id noted twice");
        }
    }
    assert_eq!(received.len(), N as usize);
    // Every replica of `same` and the sink committed completion with final = N; the sink's
    // three terminators (one per runtime's replica) add up to N.
    let same_done = scan("vf/ledger/r1/same/completion/");
    assert_eq!(same_done.len(), 3, "{same_done:?}");
    let sink_done = scan("vf/ledger/r1/sink/completion/");
    assert_eq!(sink_done.len(), 1, "{sink_done:?}");
    for doc in same_done.values().chain(sink_done.values()) {
        assert_eq!(doc["final"].as_i64(), Some(N), "{doc}");
    }
    let sink_terms = scan("vf/ledger/r1/sink/terminator/");
    let forwarded: i64 = sink_terms.values().filter_map(|d| d["seq"].as_i64()).sum();
    assert_eq!((sink_terms.len(), forwarded), (3, N));
    eprintln!("ledger {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(ledger, [R, P, R, P, R]);

/// Runs `script` on the reference's interpreter with its `FileRuntimeStore` imported as
/// `FileRuntimeStore`; its stdout.
fn reference_store(script: &str) -> std::process::Child {
    let dir = support::conformance_dir();
    let prelude = "from videoflow.backends.memory.runtime_store import FileRuntimeStore\n";
    std::process::Command::new(support::reference_python())
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .env(
            "PYTHONPATH",
            format!("{}:{}", dir.display(), dir.join("interop_stubs").display()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the reference's python")
}

fn reference_output(child: std::process::Child) -> String {
    let out = child.wait_with_output().expect("reference store");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh directory (`prefix-<uuid>` under the temp dir), its path as text, a runtime to
/// drive our store, and our `file://` store on it: the ledger a test shares with 1.0.4's
/// `FileRuntimeStore` ([`reference_store`]).
fn shared_file_store(
    prefix: &str,
) -> (
    std::path::PathBuf,
    String,
    tokio::runtime::Runtime,
    videoflow_worker::store::RuntimeStore,
) {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
    let root = dir.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store =
        videoflow_worker::store::RuntimeStore::open(&format!("file://{root}")).expect("store");
    (dir, root, rt, store)
}

/// STORE-4 on one directory shared with 1.0.4's own `FileRuntimeStore`: our appends count
/// the reference's lines (caught up by length, never re-read), the reference counts ours,
/// appends racing from both sides lose nothing and number every line once, and CAS versions
/// interleave.
#[test]
fn ledger_file_store_shared_with_the_reference_store() {
    let (dir, root, rt, ours) = shared_file_store("vf-shared");
    let log = "vf/f/r/n/received/p/d/r0";
    rt.block_on(async {
        for (i, rec) in [b"a", b"b", b"c"].iter().enumerate() {
            assert_eq!(ours.append(log, *rec).await.expect("append"), i as u64 + 1);
        }
    });
    let theirs = reference_output(reference_store(&format!(
        "s = FileRuntimeStore({root:?})\nprint(s.append({log:?}, b'p1'), s.append({log:?}, b'p2'))"
    )));
    assert_eq!(theirs.trim(), "4 5");
    rt.block_on(async {
        assert_eq!(ours.append(log, b"d").await.expect("append"), 6);
    });
    // Both sides at once: 50 appends each.
    let racing = reference_store(&format!(
        "s = FileRuntimeStore({root:?})\nprint(' '.join(str(s.append({log:?}, b'q%d' % i)) for i in range(50)))"
    ));
    let counts: Vec<u64> = rt.block_on(async {
        let appends = (0..50).map(|i| {
            let ours = ours.clone();
            async move {
                ours.append(log, format!("r{i}").as_bytes())
                    .await
                    .expect("append")
            }
        });
        futures::future::join_all(appends).await
    });
    let theirs: Vec<u64> = reference_output(racing)
        .split_whitespace()
        .map(|n| n.parse().expect("count"))
        .collect();
    let mut all: Vec<u64> = counts.iter().chain(&theirs).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (7..=106).collect::<Vec<u64>>(),
        "every append numbered once"
    );
    let entries = rt.block_on(ours.log_entries(log)).expect("entries");
    assert_eq!(entries.len(), 106);
    for i in 0..50 {
        assert!(entries.contains(&format!("q{i}").into_bytes()));
        assert!(entries.contains(&format!("r{i}").into_bytes()));
    }
    // CAS versions interleave: ours creates, theirs bumps, ours bumps again.
    let key = "vf/f/r/n/terminator/p/r0/eos";
    assert!(rt.block_on(ours.cas(key, None, b"v1")).expect("create"));
    let theirs = reference_output(reference_store(&format!(
        "s = FileRuntimeStore({root:?})\nv, ver = s.get({key:?})\nprint(v.decode(), ver, s.cas({key:?}, ver, b'v2'), s.cas({key:?}, ver, b'v3'))"
    )));
    assert_eq!(theirs.trim(), "v1 1 True False");
    rt.block_on(async {
        let v = ours.get(key).await.expect("get").expect("present");
        assert_eq!(
            (v.value.as_slice(), v.version.as_str()),
            (b"v2".as_slice(), "2")
        );
        assert!(ours.cas(key, Some("2"), b"v4").await.expect("cas"));
    });
    let theirs = reference_output(reference_store(&format!(
        "s = FileRuntimeStore({root:?})\nv, ver = s.get({key:?})\nprint(v.decode(), ver, len(s.log_entries({log:?})))"
    )));
    assert_eq!(theirs.trim(), "v4 3 106");
    let _ = std::fs::remove_dir_all(dir);
}

/// MSGID-6 on a ledger shared with 1.0.4: a replayable source's checkpoint, written by either
/// runtime, is the other's resume point (`checkpoint/r{replica}`: `position.offset`, the
/// source's `state` as hex), so a replacement on the other runtime resumes after the last
/// offset its predecessor had accepted.
#[test]
fn msgid_6_a_checkpoint_resumes_a_source_on_either_runtime() {
    use videoflow_worker::store::ledger::RunLedger;
    let (dir, root, rt, store) = shared_file_store("vf-ckpt");
    let ledger = rt
        .block_on(RunLedger::open(store, "f", "r", "cam", 1, 1))
        .expect("ledger");
    let reference = |code: &str| {
        reference_output(reference_store(&format!(
            "from videoflow.backends.runtime import FlowRuntime\n\
             rt = FlowRuntime(FileRuntimeStore({root:?}), 'f', 'r', 'cam', replica_id = 1)\n{code}"
        )))
    };
    let read_back =
        "st, pos = rt.restore_checkpoint()\nprint((st or b'').hex() or '-', pos.get('offset'))";
    assert_eq!(rt.block_on(ledger.resume_offset()).expect("resume"), 0);
    assert_eq!(
        reference(read_back).trim(),
        "- None",
        "nothing checkpointed yet"
    );
    // Ours: 41, then 42; a late 40 (a zombie's receipt) does not rewind it.
    rt.block_on(async {
        for offset in [41, 42, 40] {
            ledger.checkpoint_offset(offset).await.expect("checkpoint");
        }
    });
    assert_eq!(reference(read_back).trim(), "- 42");
    // 1.0.4's replayable source checkpoints 57 with a state of its own; ours resumes there
    // and keeps that state when it moves on.
    reference("rt.checkpoint(bytes([1, 2]), {'offset': 57})");
    assert_eq!(rt.block_on(ledger.resume_offset()).expect("resume"), 57);
    rt.block_on(ledger.checkpoint_offset(58))
        .expect("checkpoint");
    assert_eq!(reference(read_back).trim(), "0102 58");
    // Another replica's checkpoint is its own.
    assert_eq!(
        reference(&format!(
            "r0 = FlowRuntime(FileRuntimeStore({root:?}), 'f', 'r', 'cam', replica_id = 0)\n\
             print(r0.restore_checkpoint()[1].get('offset'))"
        ))
        .trim(),
        "None"
    );
    let _ = std::fs::remove_dir_all(dir);
}

// -- diamond and partitioned join --------------------------------------------------------------

/// The diamond's nodes and their replicas ([`diamond_flow`]), `join` of `pair`, for
/// [`placement`].
fn diamond_replicas(join: usize) -> [(&'static str, usize); 5] {
    [
        ("numbers", 1),
        ("same", 2),
        ("tally", 1),
        ("pair", join),
        ("sink", 1),
    ]
}

/// The diamond with one trace join; `same`'s two competing replicas run on both runtimes.
fn diamond(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 60;
    let mut h = FlowHarness::new(&diamond_flow("diamond", N, 1));
    let t0 = Instant::now();
    h.start_placed(prov, &placement(&diamond_replicas(1), place));
    h.wait_all_ok(Duration::from_secs(90));
    assert_diamond_joined(&h, N);
    eprintln!("diamond {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(diamond, [R, P, R, P, R, P]);

/// The diamond whose join runs as 2 partitioned replicas, one per runtime (PART-1..4): each
/// group is emitted once, by the replica owning its trace id (`sha256(py_str(trace_id))`,
/// PART-3) — read from the `replica_id` of every DATA envelope on `pair`'s stream, which a
/// witness durable keeps after the sink acked it.
fn partitioned_join(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 60;
    let mut h = FlowHarness::new(&diamond_flow("partjoin", N, 2));
    let nodes = placement(&diamond_replicas(2), place);
    let (flow, run) = streams::ids(&h.vars("pair", 0));
    let t0 = Instant::now();
    h.provision_with(prov);
    h.block_on(streams::add_witness(
        &h.nats.url(),
        &naming::stream_name(&flow, &run, "pair"),
    ));
    h.spawn_placed(&nodes);
    h.wait_all_ok(Duration::from_secs(90));
    let out = assert_diamond_joined(&h, N);

    let subject = naming::data_subject(&flow, &run, "pair");
    let mut per_replica = [0usize; 2];
    let mut emitted = BTreeSet::new();
    for m in h.block_on(streams::read_stream(
        &h.nats.url(),
        &naming::stream_name(&flow, &run, "pair"),
    )) {
        if m.subject != subject {
            continue;
        }
        let e = envelope::decode(&m.payload).expect("pair's DATA decodes");
        assert_eq!(
            e.replica_id,
            owning_replica(&e.trace_id, 2),
            "group {} emitted by pair.{}, not its owner",
            e.trace_id,
            e.replica_id
        );
        per_replica[e.replica_id as usize] += 1;
        assert!(
            emitted.insert(e.trace_id.clone()),
            "{} stored twice",
            e.trace_id
        );
    }
    let sunk: BTreeSet<String> = by_trace(&out).into_keys().collect();
    assert_eq!(emitted, sunk, "what pair stored is what the sink got");
    assert!(
        per_replica.iter().all(|&n| n > 0),
        "both join replicas (one per runtime) emitted groups: {per_replica:?}"
    );
    eprintln!(
        "partitioned join {}: {:?}, groups per replica {per_replica:?}",
        label(prov, place),
        t0.elapsed()
    );
}

matrix!(partitioned_join, [P, R, P, R, P, R, R]);

// -- time join with quorum ---------------------------------------------------------------------

const TICKS: u64 = 12;

/// `left`/`right` ticks (`right` skips every third) joined in time mode with quorum 1 by a
/// processor (→ `out`) and a consumer (`members`), staged: the producers finish before the
/// joiners start, so the grouping is a function of the event times alone (JOIN-11/17/20/23).
fn time_join(prov: Provisioner, place: &[Runtime]) {
    let mut h = FlowHarness::new(&time_join_flow(TICKS, DEFAULT_TICK_START_TS, false));
    let nodes = placement(
        &[
            ("left", 1),
            ("right", 1),
            ("pair", 1),
            ("out", 1),
            ("members", 1),
        ],
        place,
    );
    let t0 = Instant::now();
    h.provision_with(prov);
    h.spawn_placed(&nodes[..2]);
    h.wait_all_ok(Duration::from_secs(30));
    h.spawn_placed(&nodes[2..]);
    h.wait_all_ok(Duration::from_secs(40));
    assert_one_group_per_tick(&h, TICKS, DEFAULT_TICK_START_TS);
    eprintln!("time join {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(time_join, [R, P, P, R, P]);

// -- payload store -----------------------------------------------------------------------------

const FRAMES: u64 = 4;

/// frames (2 MiB) → same → sink through the Redis payload store (BLOB-1/3): every frame is
/// above the inline limit and NATS' `max_payload`, so each hop offloads and the next one
/// resolves the other runtime's reference; the sink checks every byte (SHA-256).
fn payload_store(prov: Provisioner, place: &[Runtime]) {
    let mut h = FlowHarness::new(&frames_flow(FRAMES, "{{DURABLE_REDIS}}"));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("frames", 1), ("same", 1), ("sink", 1)], place),
    );
    h.wait_all_ok(Duration::from_secs(60));
    assert_frames_intact(&h, FRAMES);
    // BLOB-5/6: an object our worker wrote (reader counter, `VF_BLOB_READERS` = 1) is
    // released after its reader's confirmed ack — whichever runtime read it. An object the
    // reference wrote lives until its TTL (BLOB-7: 86400 s in BATCH): 1.0.4 writes to a
    // `redis://` store through its obligation store (BLOB-6a) and a Rust reader has no
    // obligation to release (§21.1 item 1, docs/COMPATIBILITY.md I1). So exactly the
    // reference publisher's frames are left, each with its TTL, and no counter.
    let python_publishers = place[..2].iter().filter(|r| **r == P).count();
    let left = redis_keys(&h, "*");
    let blobs: Vec<&String> = left
        .iter()
        .filter(|k| k.strip_prefix("vf-blob-").is_some_and(|id| id.len() == 32))
        .collect();
    assert_eq!(
        blobs.len() as u64,
        FRAMES * python_publishers as u64,
        "objects left: only the reference publisher's ({left:?}); logs:\n{}",
        h.all_logs()
    );
    let metas: Vec<String> = blobs
        .iter()
        .map(|k| format!("vf-blobmeta-{{{k}}}"))
        .collect();
    assert_eq!(
        left.len(),
        blobs.len() + metas.len(),
        "nothing but those objects and their 1.0.4 metadata: {left:?}"
    );
    assert!(metas.iter().all(|m| left.contains(m)), "{left:?}");
    for k in &blobs {
        let ttl = redis_ttl(&h, k);
        assert!(
            (1..=86_400).contains(&ttl),
            "{k} lives until its TTL: {ttl}"
        );
    }
    eprintln!("payload store {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(payload_store, [R, P, R]);

// -- ABORT across runtimes ---------------------------------------------------------------------

/// A poison producer dies after 5 values (ABORT-1a); the processor on the other runtime
/// drains them, relays the origin's record verbatim (ABORT-5) and exits 4 with
/// `VF_UPSTREAM_ABORTED`; the consumer, on the first runtime again, does the same one hop on.
fn abort(prov: Provisioner, place: &[Runtime]) {
    let mut h = FlowHarness::new(&aborting_flow());
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("source", 1), ("relay", 1), ("sink", 1)], place),
    );
    let exits = h.wait_all(Duration::from_secs(60));
    assert_poison_abort_relayed(&h, &exits);
    eprintln!("abort {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(abort, [R, P, R]);

// -- SIGKILL -----------------------------------------------------------------------------------

/// numbers → work (2 competing replicas, one per runtime, 20 ms each) → sink; `work.0` is
/// SIGKILLed once the sink has outputs and respawned on its runtime under the same replica
/// id. Publish-before-ack (LOOP-5) loses no output; what the killed replica held un-acked is
/// redelivered (`ack_wait` 5 s) to either replica — possibly the other runtime — which
/// republishes it under the same content-derived message id (MSGID-1/2), so the stream's
/// duplicate window drops the re-send: every value reaches the sink exactly once.
fn sigkill(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 120;
    let work = format!("    replicas: 2\n{IDENTITY}    params: {{fps: 50}}\n");
    let mut h = FlowHarness::new(&batch_flow(
        "sigkill",
        "",
        &numbers_to_sink(N, "work", &work, ""),
    ));
    let nodes = placement(&[("numbers", 1), ("work", 2), ("sink", 1)], place);
    let killed_runtime = nodes[1].1[0];
    let t0 = Instant::now();
    h.provision_with(prov);
    h.set_ack_wait("work", "numbers", Duration::from_secs(5));
    h.spawn_placed(&nodes);
    h.wait_for_records("out.jsonl", 30, Duration::from_secs(40));
    h.kill("work", 0);
    h.spawn_on(killed_runtime, "work", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(60));
    let abnormal = h.the_one_abnormal_exit(&exits);
    assert_eq!(
        (abnormal.node.as_str(), abnormal.replica),
        ("work", 0),
        "{exits:?}"
    );

    let out = assert_none_lost(&h, 0..N, "after the SIGKILL of work.0");
    assert_eq!(
        duplicate_arrivals(&out),
        0,
        "a re-sent output passed the duplicate window; logs:\n{}",
        h.all_logs()
    );
    assert_eq!(out.len() as i64, N);
    eprintln!(
        "sigkill {} (killed work.0 on {killed_runtime:?}): {:?}",
        label(prov, place),
        t0.elapsed()
    );
}

matrix!(sigkill, [R, P, R, P]);
