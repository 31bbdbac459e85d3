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
mod streams;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use videoflow_core::envelope::{self, MsgType, WireError};
use videoflow_core::join::identity::{SyncMember, round_half_even_micros, time_group_trace_id};
use videoflow_core::msgid::{MsgKind, msgid_signed};
use videoflow_core::naming;
use videoflow_core::partition::{KeyPolicy, owner};
use videoflow_core::value::Value;
use videoflow_worker::nodes::convert::sha256_hex;
use videoflow_worker::nodes::producers::synthetic_frame;
use videoflow_worker::nodes::testing::TickProducer;

use flows_common::{
    batch_flow, by_trace, duplicate_arrivals, int_value, ledger_docs, ledger_log, ledger_spec,
    numbers_to_sink,
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
    let same = "    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n";
    let mut h = FlowHarness::new(&batch_flow(
        "linear",
        "",
        &numbers_to_sink(N, "same", same, ""),
    ));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("numbers", 1), ("same", 1), ("sink", 1)], place),
    );
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    let out = h.jsonl("out.jsonl");
    let values: Vec<i64> = out.iter().map(int_value).collect();
    assert_eq!(
        values,
        (0..N).collect::<Vec<_>>(),
        "logs:\n{}",
        h.all_logs()
    );
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r["seq"].as_i64(), Some(i as i64 + 1), "{r}");
        assert!(
            r["trace_id"]
                .as_str()
                .is_some_and(|t| t.starts_with("numbers:")),
            "{r}"
        );
    }
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
    let same =
        "    replicas: 3\n    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n";
    let ledger = "file://{{DIR}}/ledger";
    let mut h = FlowHarness::new(&batch_flow(
        "ledger",
        &ledger_spec(ledger),
        &numbers_to_sink(N, "same", same, ""),
    ));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("numbers", 1), ("same", 3), ("sink", 1)], place),
    );
    let exits = h.wait_all(Duration::from_secs(90));
    h.assert_all_ok(&exits);
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

// -- diamond and partitioned join --------------------------------------------------------------

/// numbers ─┬─ same (2 competing replicas) ─┐
///          └─ tally (CountAggregator) ─────┴─ pair (JoinerProcessor [tally, same], `replicas`
/// join replicas, partitioned by trace id when 2) ─ sink.
fn join_flow(name: &str, n: i64, join_replicas: usize) -> String {
    let partition = if join_replicas > 1 {
        "\n    partitionBy: trace_id"
    } else {
        ""
    };
    batch_flow(
        name,
        "",
        &format!(
            r#"  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: same
    kind: processor
    parents: [numbers]
    replicas: 2
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: tally
    kind: processor
    parents: [numbers]
    component: {{builtin: videoflow.processors.aggregators.CountAggregator}}
  - name: pair
    kind: processor
    parents: [tally, same]
    replicas: {join_replicas}{partition}
    join: {{missing: wait}}
    component: {{builtin: videoflow.processors.basic.JoinerProcessor}}
  - name: sink
    kind: consumer
    parents: [pair]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
            last = n - 1
        ),
    )
}

/// JOIN-5/6, ENV-3: N groups, each trace id once, `[v + 1, v]` in `VF_PARENT_NAMES` order,
/// every v once, seq = v + 1.
fn check_joined(h: &FlowHarness, n: i64) -> Vec<Json> {
    let out = h.jsonl("out.jsonl");
    assert_eq!(duplicate_arrivals(&out), 0, "a group was emitted twice");
    assert_eq!(
        out.len() as i64,
        n,
        "one output per group; logs:\n{}",
        h.all_logs()
    );
    let mut seen = BTreeSet::new();
    for r in &out {
        let v: Vec<i64> = r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("joined value is a list: {r}"))
            .iter()
            .map(|x| x.as_i64().unwrap_or_else(|| panic!("{r}")))
            .collect();
        assert_eq!(v.len(), 2, "{r}");
        assert_eq!(
            v[0],
            v[1] + 1,
            "inputs in VF_PARENT_NAMES order [tally, same]: {r}"
        );
        assert_eq!(r["seq"].as_i64(), Some(v[1] + 1), "JOIN-6 seq: {r}");
        assert!(
            r["trace_id"]
                .as_str()
                .is_some_and(|t| t.starts_with("numbers:")),
            "{r}"
        );
        assert!(seen.insert(v[1]), "value {} twice", v[1]);
    }
    assert_eq!(
        seen,
        (0..n).collect::<BTreeSet<_>>(),
        "every input value once"
    );
    out
}

/// The diamond with one trace join; `same`'s two competing replicas run on both runtimes.
fn diamond(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 60;
    let mut h = FlowHarness::new(&join_flow("diamond", N, 1));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(
            &[
                ("numbers", 1),
                ("same", 2),
                ("tally", 1),
                ("pair", 1),
                ("sink", 1),
            ],
            place,
        ),
    );
    let exits = h.wait_all(Duration::from_secs(90));
    h.assert_all_ok(&exits);
    check_joined(&h, N);
    eprintln!("diamond {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(diamond, [R, P, R, P, R, P]);

/// The diamond whose join runs as 2 partitioned replicas, one per runtime (PART-1..4): each
/// group is emitted once, by the replica owning its trace id (`sha256(py_str(trace_id))`,
/// PART-3) — read from the `replica_id` of every DATA envelope on `pair`'s stream, which a
/// witness durable keeps after the sink acked it.
fn partitioned_join(prov: Provisioner, place: &[Runtime]) {
    const N: i64 = 60;
    let mut h = FlowHarness::new(&join_flow("partjoin", N, 2));
    let nodes = placement(
        &[
            ("numbers", 1),
            ("same", 2),
            ("tally", 1),
            ("pair", 2),
            ("sink", 1),
        ],
        place,
    );
    let (flow, run) = streams::ids(&h.vars("pair", 0));
    let t0 = Instant::now();
    h.provision_with(prov);
    h.block_on(streams::add_witness(
        &h.nats.url(),
        &naming::stream_name(&flow, &run, "pair"),
    ));
    for (node, runtimes) in &nodes {
        for (r, rt) in runtimes.iter().enumerate() {
            h.spawn_on(*rt, node, r as i64, &[]);
        }
    }
    let exits = h.wait_all(Duration::from_secs(90));
    h.assert_all_ok(&exits);
    let out = check_joined(&h, N);

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
        let key = Value::String(e.trace_id.clone());
        let o = owner(Some(&key), 2, KeyPolicy::Reject);
        assert!(
            o.is_owned_by(e.replica_id),
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
const PERIOD_MS: f64 = 100.0;
const START_TS: f64 = 1_700_000_000.0;
const TIME_JOIN: &str = "{mode: time, toleranceMs: 5, timeoutSeconds: 1, quorum: 1, missing: drop}";

/// `left`/`right` ticks (`right` skips every third) joined in time mode with quorum 1 by a
/// processor (→ `out`) and a consumer (`members`), staged: the producers finish before the
/// joiners start, so the grouping is a function of the event times alone (JOIN-11/17/20/23).
fn time_join(prov: Provisioner, place: &[Runtime]) {
    let mut h = FlowHarness::new(&batch_flow(
        "timejoin",
        "",
        &format!(
            r#"  - name: left
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{count: {TICKS}, period_ms: {PERIOD_MS}, start_ts: {START_TS}}}
  - name: right
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{count: {TICKS}, period_ms: {PERIOD_MS}, start_ts: {START_TS}, skip_every: 3}}
  - name: pair
    kind: processor
    parents: [left, right]
    join: {TIME_JOIN}
    component: {{builtin: videoflow.processors.basic.JoinerProcessor}}
  - name: out
    kind: consumer
    parents: [pair]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
  - name: members
    kind: consumer
    parents: [left, right]
    join: {TIME_JOIN}
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/members.jsonl"}}
"#
        ),
    ));
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
    for (node, runtimes) in &nodes[..2] {
        h.spawn_on(runtimes[0], node, 0, &[]);
    }
    let exits = h.wait_all(Duration::from_secs(30));
    h.assert_all_ok(&exits);
    for (node, runtimes) in &nodes[2..] {
        h.spawn_on(runtimes[0], node, 0, &[]);
    }
    let exits = h.wait_all(Duration::from_secs(40));
    h.assert_all_ok(&exits);

    let (flow, run) = streams::ids(&h.vars("pair", 0));
    let logs = h.all_logs();
    let by_seq = |file: &str| -> BTreeMap<i64, Json> {
        let mut m = BTreeMap::new();
        for r in h.jsonl(file) {
            let seq = r["seq"].as_i64().unwrap_or_else(|| panic!("{file}: {r}"));
            assert!(
                m.insert(seq, r).is_none(),
                "{file}: seq {seq} twice; logs:\n{logs}"
            );
        }
        m
    };
    let members = by_seq("members.jsonl");
    let out = by_seq("out.jsonl");
    let seq_of = |i: u64| {
        round_half_even_micros(TickProducer::tick_ts(START_TS, PERIOD_MS, i)).expect("finite")
    };
    assert_eq!(
        members.keys().copied().collect::<Vec<_>>(),
        (1..=TICKS as i64).collect::<Vec<_>>(),
        "members: one group per tick; logs:\n{logs}"
    );
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        (1..=TICKS).map(seq_of).collect::<Vec<_>>(),
        "out: one group per tick; logs:\n{logs}"
    );
    for i in 1..=TICKS {
        let tick = i as i64;
        let ts = TickProducer::tick_ts(START_TS, PERIOD_MS, i);
        let seq = seq_of(i);
        let m = &members[&tick];
        let (left, right) = (&m["parents"]["left"], &m["parents"]["right"]);
        assert_eq!(left["seq"].as_u64(), Some(i), "{m}");
        assert_eq!(
            left["event_ts"].as_f64(),
            Some(ts),
            "LOOP-9 event time: {m}"
        );
        let mut sync = vec![SyncMember {
            parent: "left",
            producer_name: "left",
            trace_id: left["trace_id"].as_str().expect("left trace id"),
            seq: i,
        }];
        if TickProducer::is_skipped(3, i) {
            assert!(right.is_null(), "tick {i}: right missing (quorum): {m}");
            assert_eq!(m["value"], serde_json::json!([tick, null]), "{m}");
        } else {
            assert_eq!(right["event_ts"].as_f64(), Some(ts), "{m}");
            assert_eq!(m["value"], serde_json::json!([tick, tick]), "{m}");
            sync.push(SyncMember {
                parent: "right",
                producer_name: "right",
                trace_id: right["trace_id"].as_str().expect("right trace id"),
                seq: right["seq"].as_u64().expect("right seq"),
            });
        }
        // JOIN-20/23: the processor's output carries the group identity computed from the
        // members, whichever runtime joined them; IDEM-1: the consumer's input key is its
        // own message id of that identity.
        let tw = time_group_trace_id(seq, None, &sync);
        let o = &out[&seq];
        assert_eq!(o["trace_id"].as_str(), Some(tw.as_str()), "tick {i}: {o}");
        assert_eq!(o["event_ts"].as_f64(), Some(ts), "JOIN-20 event_ts: {o}");
        assert_eq!(
            o["value"], m["value"],
            "the joiner's tuple, in parent order"
        );
        assert_eq!(
            m["input_key"].as_str(),
            Some(
                msgid_signed(&flow, &run, "members", &tw, i128::from(seq), MsgKind::Data).as_str()
            ),
            "{m}"
        );
    }
    eprintln!("time join {}: {:?}", label(prov, place), t0.elapsed());
}

matrix!(time_join, [R, P, P, R, P]);

// -- payload store -----------------------------------------------------------------------------

const FRAME_W: u32 = 1024;
const FRAME_H: u32 = 1024;
const FRAME_C: u32 = 2;
const FRAMES: u64 = 4;

/// Every key matching `pattern` in the harness's Redis.
fn redis_keys(h: &FlowHarness, pattern: &str) -> Vec<String> {
    let url = h.redis.as_ref().expect("redis started").url();
    h.block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("{e}"));
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut keys = redis::cmd("KEYS")
            .arg(pattern)
            .query_async::<Vec<String>>(&mut con)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        keys.sort();
        keys
    })
}

/// frames (2 MiB) → same → sink through the Redis payload store (BLOB-1/3): every frame is
/// above the inline limit and NATS' `max_payload`, so each hop offloads and the next one
/// resolves the other runtime's reference; the sink checks every byte (SHA-256).
fn payload_store(prov: Provisioner, place: &[Runtime]) {
    let mut h = FlowHarness::new(&batch_flow(
        "blobs",
        "  payloadStore: {url: \"{{DURABLE_REDIS}}\"}\n",
        &format!(
            r#"  - name: frames
    kind: producer
    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}
    params: {{width: {FRAME_W}, height: {FRAME_H}, channels: {FRAME_C}, count: {FRAMES}}}
  - name: same
    kind: processor
    parents: [frames]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [same]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#
        ),
    ));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("frames", 1), ("same", 1), ("sink", 1)], place),
    );
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    let out = h.jsonl("out.jsonl");
    assert_eq!(
        out.len() as u64,
        FRAMES,
        "one record per frame; logs:\n{}",
        h.all_logs()
    );
    let mut indices = BTreeSet::new();
    for r in &out {
        let t = &r["value"]["$tensor"];
        assert_eq!(
            t["shape"],
            serde_json::json!([FRAME_H, FRAME_W, FRAME_C]),
            "{r}"
        );
        assert_eq!(t["dtype"], "uint8", "{r}");
        let head = hex::decode(t["head_hex"].as_str().unwrap_or_default()).expect("hex");
        let index = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let want = sha256_hex(&synthetic_frame(index, FRAME_W, FRAME_H, FRAME_C).data);
        assert_eq!(
            t["sha256"].as_str(),
            Some(want.as_str()),
            "frame {index} intact"
        );
        assert!(indices.insert(index), "frame {index} twice");
    }
    assert_eq!(indices, (0..FRAMES).collect::<BTreeSet<_>>());
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

/// The TTL of `key` in the harness's Redis (seconds; -1 none, -2 missing).
fn redis_ttl(h: &FlowHarness, key: &str) -> i64 {
    let url = h.redis.as_ref().expect("redis started").url();
    h.block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("{e}"));
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        redis::cmd("TTL")
            .arg(key)
            .query_async::<i64>(&mut con)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

matrix!(payload_store, [R, P, R]);

// -- ABORT across runtimes ---------------------------------------------------------------------

const EMITTED: i64 = 5;
const MESSAGE: &str = "sensor unplugged";

/// The ABORT-5 text for a node whose parent `parent` aborted with the origin's record.
fn upstream_aborted_message(parent: &str) -> String {
    format!(
        "{parent} terminated abnormally (VF_POISON: ValueError: {MESSAGE}), so this node stops \
         rather than waiting for an end-of-stream that is not coming."
    )
}

/// The terminators stored on `node`'s NAME-4 subject, decoded.
fn terminators(h: &FlowHarness, flow: &str, run: &str, node: &str) -> Vec<envelope::Envelope> {
    let subject = naming::eos_subject(flow, run, node);
    h.block_on(streams::read_stream(
        &h.nats.url(),
        &naming::stream_name(flow, run, node),
    ))
    .into_iter()
    .filter(|m| m.subject == subject)
    .map(|m| envelope::decode(&m.payload).expect("terminator decodes"))
    .collect()
}

/// The one ABORT among `node`'s terminators, and no EOS (ABORT-1a).
fn only_abort(h: &FlowHarness, flow: &str, run: &str, node: &str) -> WireError {
    let ts = terminators(h, flow, run, node);
    assert_eq!(ts.len(), 1, "{node}: exactly one terminator: {ts:#?}");
    assert_eq!(
        ts[0].msg_type,
        MsgType::Abort,
        "{node}: an ABORT, never an EOS"
    );
    assert_eq!(ts[0].trace_id, "abort-r0", "ABORT-1 trace");
    ts[0].error.clone().expect("ABORT carries an error record")
}

/// A poison producer dies after 5 values (ABORT-1a); the processor on the other runtime
/// drains them, relays the origin's record verbatim (ABORT-5) and exits 4 with
/// `VF_UPSTREAM_ABORTED`; the consumer, on the first runtime again, does the same one hop on.
fn abort(prov: Provisioner, place: &[Runtime]) {
    let mut h = FlowHarness::new(&batch_flow(
        "aborting",
        "",
        &format!(
            r#"  - name: source
    kind: producer
    onError: poison
    component: {{builtin: videoflow.rs.producers.FailingProducer}}
    params: {{emit: {EMITTED}, message: "{MESSAGE}"}}
  - name: relay
    kind: processor
    parents: [source]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [relay]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#
        ),
    ));
    let (flow, run) = streams::ids(&h.vars("source", 0));
    let t0 = Instant::now();
    h.start_placed(
        prov,
        &placement(&[("source", 1), ("relay", 1), ("sink", 1)], place),
    );
    let exits = h.wait_all(Duration::from_secs(60));
    let logs = h.all_logs();
    for e in &exits {
        assert_eq!(e.code, Some(4), "{e:?}; logs:\n{logs}");
    }
    let values: Vec<i64> = h.jsonl("out.jsonl").iter().map(int_value).collect();
    assert_eq!(
        values,
        (0..EMITTED).collect::<Vec<_>>(),
        "ABORT-7; logs:\n{logs}"
    );

    let origin = h
        .termination("source", 0)
        .expect("source termination record");
    assert_eq!(origin["code"], "VF_POISON", "{origin}");
    assert_eq!(
        origin["message"],
        format!("ValueError: {MESSAGE}"),
        "{origin}"
    );
    assert_eq!(origin["disposition"], "poison", "{origin}");
    let record = only_abort(&h, &flow, &run, "source");
    assert_eq!(record.code, "VF_POISON");
    assert_eq!(record.message, format!("ValueError: {MESSAGE}"));
    assert_eq!(
        record.context.get("node").map(String::as_str),
        Some("source"),
        "{record:?}"
    );

    for (node, parent) in [("relay", "source"), ("sink", "relay")] {
        let t = h
            .termination(node, 0)
            .unwrap_or_else(|| panic!("{node} termination record"));
        assert_eq!(t["code"], "VF_UPSTREAM_ABORTED", "{node}: {t}");
        assert_eq!(
            t["message"],
            upstream_aborted_message(parent),
            "{node}: {t}"
        );
        assert_eq!(
            t["remedy"],
            format!(
                "Fix the failure reported by {parent}; this node is a casualty, not the cause."
            ),
            "{node}: {t}"
        );
        assert_eq!(t["disposition"], "worker_fatal", "{node}: {t}");
        assert_eq!(t["context"]["origin"], parent, "{node}: {t}");
    }
    assert_eq!(
        only_abort(&h, &flow, &run, "relay"),
        record,
        "ABORT-5: the origin's record, verbatim, across runtimes"
    );
    assert!(
        terminators(&h, &flow, &run, "sink").is_empty(),
        "a node without children publishes no ABORT"
    );
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
    let work = "    replicas: 2\n    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n    params: {fps: 50}\n";
    let mut h = FlowHarness::new(&batch_flow(
        "sigkill",
        "",
        &numbers_to_sink(N, "work", work, ""),
    ));
    let nodes = placement(&[("numbers", 1), ("work", 2), ("sink", 1)], place);
    let killed_runtime = nodes[1].1[0];
    let t0 = Instant::now();
    h.provision_with(prov);
    h.set_ack_wait("work", "numbers", Duration::from_secs(5));
    for (node, runtimes) in &nodes {
        for (r, rt) in runtimes.iter().enumerate() {
            h.spawn_on(*rt, node, r as i64, &[]);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    while h.jsonl("out.jsonl").len() < 30 {
        assert!(
            Instant::now() < deadline,
            "no outputs; logs:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    h.kill("work", 0);
    h.spawn_on(killed_runtime, "work", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(60));
    let abnormal: Vec<_> = exits.iter().filter(|e| e.code != Some(0)).collect();
    assert_eq!(abnormal.len(), 1, "{exits:?}; logs:\n{}", h.all_logs());
    assert_eq!(
        (abnormal[0].node.as_str(), abnormal[0].replica),
        ("work", 0)
    );

    let out = h.jsonl("out.jsonl");
    let values: BTreeSet<i64> = out.iter().map(int_value).collect();
    let missing: Vec<i64> = (0..N).filter(|v| !values.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "lost {missing:?}; logs:\n{}",
        h.all_logs()
    );
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
