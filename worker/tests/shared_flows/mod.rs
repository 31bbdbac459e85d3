//! The flows run both on our workers alone (`flow_*.rs`) and split across our workers and the
//! Python reference's (`interop_flows.rs`): each one's Flow, and the one expectation both
//! check, so that "the reference interoperates" means exactly what "our worker is correct"
//! means. A test binary using this module also declares `flows_common`, `streams` and
//! `support`.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;
use videoflow_core::envelope::{self, MsgType, WireError};
use videoflow_core::join::identity::{SyncMember, round_half_even_micros, time_group_trace_id};
use videoflow_core::msgid::{MsgKind, msgid_signed};
use videoflow_core::naming;
use videoflow_core::partition::{KeyPolicy, owner, partition_hash, py_str};
use videoflow_core::value::Value;
use videoflow_worker::nodes::convert::sha256_hex;
use videoflow_worker::nodes::producers::synthetic_frame;
use videoflow_worker::nodes::testing::TickProducer;

use super::flows_common::{
    IDENTITY, batch_flow, duplicate_arrivals, int_value, jsonl_sink, numbers, numbers_to_sink,
    processor,
};
use super::streams;
use super::support::{Exit, FlowHarness};

// -- linear ------------------------------------------------------------------------------------

/// numbers (0..n−1) → same (IdentityProcessor) → sink.
pub fn linear_flow(n: i64) -> String {
    batch_flow("linear", "", &numbers_to_sink(n, "same", IDENTITY, ""))
}

/// Exactly `n` values at the sink, in order, each carrying the producer's trace id and seq
/// (carry-forward, WIRE-4, MSGID-2).
pub fn assert_linear_in_order(h: &FlowHarness, n: i64) {
    let out = h.jsonl("out.jsonl");
    let values: Vec<i64> = out.iter().map(int_value).collect();
    assert_eq!(
        values,
        (0..n).collect::<Vec<_>>(),
        "exactly {n}, in order; logs:\n{}",
        h.all_logs()
    );
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r["seq"].as_i64(), Some(i as i64 + 1), "{r}");
        assert_producer_trace(r);
    }
}

/// The record carries a trace id minted by the `numbers` producer (MSGID-2).
fn assert_producer_trace(r: &Json) {
    assert!(
        r["trace_id"]
            .as_str()
            .is_some_and(|t| t.starts_with("numbers:")),
        "the trace id is the producer's (MSGID-2): {r}"
    );
}

// -- diamond and partitioned join --------------------------------------------------------------

/// numbers ─┬─ same (IdentityProcessor, 2 competing replicas) ─┐
///          └─ tally (CountAggregator) ────────────────────────┴─ pair (JoinerProcessor,
/// parents [tally, same], missing: wait; `join_replicas` replicas, partitioned by trace id when
/// more than one) ─ sink.
///
/// The branches are distinguishable: `same` passes `v` through, `tally` counts its inputs, so
/// in a clean run (one replica, stream order) it emits `v + 1` for input `v`. The join lists
/// `tally` first although it is declared second, so a joined value `[v + 1, v]` proves the
/// inputs follow `VF_PARENT_NAMES` (ENV-3), not declaration or arrival order.
pub fn diamond_flow(name: &str, n: i64, join_replicas: u32) -> String {
    let partition = if join_replicas > 1 {
        "\n    partitionBy: trace_id"
    } else {
        ""
    };
    let nodes = format!(
        r#"{numbers}  - name: same
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
{sink}"#,
        numbers = numbers(n),
        sink = jsonl_sink("sink", "pair", "out.jsonl", ""),
    );
    batch_flow(name, "", &nodes)
}

/// JOIN-5/6, ENV-3, MSGID-2: every trace group assembled exactly once — `n` outputs, each
/// trace id once and the producer's, every input value once — with its inputs in
/// `VF_PARENT_NAMES` order (`[tally, same]` = `[v + 1, v]`) and the producer's seq (JOIN-6:
/// min of equal seqs = v + 1). Returns the sink records.
pub fn assert_diamond_joined(h: &FlowHarness, n: i64) -> Vec<Json> {
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
        assert_producer_trace(r);
        let pair = r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("joined value is a list: {r}"));
        let [tally, same] = pair.as_slice() else {
            panic!("two inputs per group: {r}");
        };
        let (tally, same) = (
            tally.as_i64().unwrap_or_else(|| panic!("{r}")),
            same.as_i64().unwrap_or_else(|| panic!("{r}")),
        );
        assert_eq!(
            tally,
            same + 1,
            "inputs in VF_PARENT_NAMES order [tally, same]: {r}"
        );
        assert_eq!(r["seq"].as_i64(), Some(same + 1), "JOIN-6 seq: {r}");
        assert!(seen.insert(same), "value {same} twice: {r}");
    }
    assert_eq!(
        seen,
        (0..n).collect::<BTreeSet<_>>(),
        "every input value once"
    );
    out
}

/// The replica of `replicas` that owns `trace_id` (PART-2/3: `sha256(py_str(trace_id))[0..8]
/// % replicas`), computed two ways that must agree.
pub fn owning_replica(trace_id: &str, replicas: u32) -> u32 {
    let key = Value::String(trace_id.to_owned());
    let by_hash = partition_hash(&py_str(&key)) % replicas;
    let o = owner(Some(&key), replicas, KeyPolicy::Reject);
    assert!(
        o.is_owned_by(by_hash),
        "owner() agrees with the hash for {trace_id}"
    );
    by_hash
}

// -- time join with quorum ---------------------------------------------------------------------

/// The ticks' period on the event-time grid.
pub const PERIOD_MS: f64 = 100.0;
/// The join of both joiners: time mode, quorum 1.
pub const TIME_JOIN: &str =
    "{mode: time, toleranceMs: 5, timeoutSeconds: 1, quorum: 1, missing: drop}";

/// `left`/`right` TickProducers (`ticks` each on the grid from `start_ts`, `right` skipping
/// every third tick; `paced` on the wall clock when asked) joined in time mode with quorum 1
/// by `pair` (a joiner processor, → `out`) and by `members` (a consumer).
pub fn time_join_flow(ticks: u64, start_ts: f64, paced: bool) -> String {
    let pace = if paced { ", pace: true" } else { "" };
    let ticks = format!("count: {ticks}, period_ms: {PERIOD_MS}, start_ts: {start_ts}{pace}");
    let nodes = format!(
        r#"  - name: left
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{{ticks}}}
  - name: right
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{{ticks}, skip_every: 3}}
  - name: pair
    kind: processor
    parents: [left, right]
    join: {TIME_JOIN}
    component: {{builtin: videoflow.processors.basic.JoinerProcessor}}
{out}{members}    join: {TIME_JOIN}
"#,
        out = jsonl_sink("out", "pair", "out.jsonl", ""),
        members = jsonl_sink("members", "left, right", "members.jsonl", ""),
    );
    batch_flow("timejoin", "", &nodes)
}

/// The expected group seq of tick `i` on the grid from `start_ts` (JOIN-20 over the tick's
/// event time, LOOP-9).
pub fn tick_seq(start_ts: f64, i: u64) -> i64 {
    round_half_even_micros(TickProducer::tick_ts(start_ts, PERIOD_MS, i)).expect("finite")
}

/// A sink's records keyed by their `seq` field (the first present parent envelope's), each
/// once.
fn by_seq(h: &FlowHarness, file: &str, logs: &str) -> BTreeMap<i64, Json> {
    let mut out = BTreeMap::new();
    for r in h.jsonl(file) {
        let seq = r["seq"]
            .as_i64()
            .unwrap_or_else(|| panic!("{file}: no seq: {r}"));
        assert!(
            out.insert(seq, r).is_none(),
            "{file}: seq {seq} twice; logs:\n{logs}"
        );
    }
    out
}

/// JOIN-11/17/20/23, LOOP-9, IDEM-1 for [`time_join_flow`]: exactly one group per tick, both
/// parents for ticks not divisible by 3 and `left` alone (quorum) for the others; the
/// processor's output carries the group identity computed from the members present, whichever
/// runtime joined them, and the consumer's input key is its own message id of that identity.
pub fn assert_one_group_per_tick(h: &FlowHarness, ticks: u64, start_ts: f64) {
    let (flow, run) = streams::ids(&h.vars("pair", 0));
    let logs = h.all_logs();
    let members = by_seq(h, "members.jsonl", &logs);
    let out = by_seq(h, "out.jsonl", &logs);
    // A consumer's record shows its first present parent's envelope: `left`, always there.
    assert_eq!(
        members.keys().copied().collect::<Vec<_>>(),
        (1..=ticks as i64).collect::<Vec<_>>(),
        "members: one group per tick; logs:\n{logs}"
    );
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        (1..=ticks)
            .map(|i| tick_seq(start_ts, i))
            .collect::<Vec<_>>(),
        "out: one group per tick; logs:\n{logs}"
    );

    let (mut both, mut left_only) = (Vec::new(), Vec::new());
    for i in 1..=ticks {
        let seq = tick_seq(start_ts, i);
        let ts = TickProducer::tick_ts(start_ts, PERIOD_MS, i);
        let tick = i64::try_from(i).expect("tick");

        // The consumer's view: each parent's envelope (or null for the missing one).
        let m = &members[&tick];
        let (left, right) = (&m["parents"]["left"], &m["parents"]["right"]);
        assert_eq!(left["seq"].as_u64(), Some(i), "left is tick {i}: {m}");
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
            left_only.push(i);
        } else {
            assert_eq!(right["event_ts"].as_f64(), Some(ts), "{m}");
            assert_eq!(m["value"], serde_json::json!([tick, tick]), "{m}");
            sync.push(SyncMember {
                parent: "right",
                producer_name: "right",
                trace_id: right["trace_id"].as_str().expect("right trace id"),
                seq: right["seq"].as_u64().expect("right seq"),
            });
            both.push(i);
        }

        // JOIN-23: the group id is `tw-<micros>-<hash of the sync members>`; the processor
        // publishes it as its output's trace id (MSGID-2), seq = the micros (JOIN-20).
        let o = &out[&seq];
        let observed = o["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("tick {i}: no trace id: {o}"));
        let digest = observed
            .strip_prefix(&format!("tw-{seq}-"))
            .unwrap_or_else(|| panic!("tick {i}: not tw-<micros>-<hash>: {o}"));
        assert!(
            digest.len() == 12
                && digest
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "tick {i}: 12 lowercase hex: {observed}"
        );
        // The hash covers exactly the sync members present (window id empty in v1).
        let tw = time_group_trace_id(seq, None, &sync);
        assert_eq!(observed, tw, "tick {i}: {o}");
        assert_eq!(
            o["event_ts"].as_f64(),
            Some(ts),
            "JOIN-20 event_ts = group ts: {o}"
        );
        assert_eq!(
            o["value"], m["value"],
            "the joiner's tuple, in parent order"
        );
        // IDEM-1 / §5: the consumer's input_key is its own msgid of the group identity.
        assert_eq!(
            m["input_key"].as_str(),
            Some(
                msgid_signed(&flow, &run, "members", &tw, i128::from(seq), MsgKind::Data).as_str()
            ),
            "{m}"
        );
    }
    assert_eq!(
        both,
        (1..=ticks).filter(|i| i % 3 != 0).collect::<Vec<_>>(),
        "both present = ticks not divisible by 3"
    );
    assert_eq!(
        left_only,
        (1..=ticks).filter(|i| i % 3 == 0).collect::<Vec<_>>(),
        "right missing = the others"
    );
}

// -- payload store -----------------------------------------------------------------------------

/// A synthetic frame's width: 1024×1024×2 = 2 MiB, over the 512 KiB inline limit and over
/// NATS' 1 MiB `max_payload`, so every hop offloads it to the payload store.
pub const FRAME_W: u32 = 1024;
/// A synthetic frame's height.
pub const FRAME_H: u32 = 1024;
/// A synthetic frame's channels.
pub const FRAME_C: u32 = 2;

/// The `frames` producer node: SyntheticFrameProducer making `count` 2 MiB frames.
pub fn frames_producer(count: u64) -> String {
    format!(
        r#"  - name: frames
    kind: producer
    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}
    params: {{width: {FRAME_W}, height: {FRAME_H}, channels: {FRAME_C}, count: {count}}}
"#
    )
}

/// frames (SyntheticFrameProducer, `count` 2 MiB frames) → same (Identity) → sink through the
/// payload store at `store` (a harness placeholder: `{{REDIS}}` or `{{DURABLE_REDIS}}`).
pub fn frames_flow(count: u64, store: &str) -> String {
    frames_flow_to(count, store, &["out.jsonl"])
}

/// [`frames_flow`] with one JsonlSink on `same` per file of `outputs` (`sink`, `sink2`, …).
pub fn frames_flow_to(count: u64, store: &str, outputs: &[&str]) -> String {
    let sinks: String = outputs
        .iter()
        .enumerate()
        .map(|(i, file)| {
            let name = if i == 0 {
                "sink".to_owned()
            } else {
                format!("sink{}", i + 1)
            };
            jsonl_sink(&name, "same", file, "")
        })
        .collect();
    let nodes = format!(
        "{}{same}{sinks}",
        frames_producer(count),
        same = processor("same", "frames", IDENTITY),
    );
    batch_flow(
        "blobs",
        &format!("  payloadStore: {{url: \"{store}\"}}\n"),
        &nodes,
    )
}

/// BLOB-1/3: every frame of [`frames_flow`] arrived once and intact through the offloading
/// hops — shape, dtype, size, and the SHA-256 of the frame the producer built for its index.
pub fn assert_frames_intact(h: &FlowHarness, count: u64) {
    assert_frames_intact_in(h, "out.jsonl", count);
}

/// [`assert_frames_intact`] for the sink writing `file`.
pub fn assert_frames_intact_in(h: &FlowHarness, file: &str, count: u64) {
    let out = h.jsonl(file);
    assert_eq!(
        out.len() as u64,
        count,
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
        assert_eq!(
            t["nbytes"].as_u64(),
            Some(u64::from(FRAME_W * FRAME_H * FRAME_C)),
            "{r}"
        );
        // Bytes 0..8 of a synthetic frame are its index, little-endian.
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
    assert_eq!(indices, (0..count).collect::<BTreeSet<_>>());
}

/// Runs one command on the harness's Redis.
fn redis_query<T: redis::FromRedisValue>(h: &FlowHarness, cmd: &redis::Cmd) -> T {
    let url = h.redis.as_ref().expect("redis started").url();
    h.block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("{e}"));
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        cmd.query_async::<T>(&mut con)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// How many times the harness's Redis has run `command` (lowercase, e.g. `get`), from its
/// `INFO commandstats`.
pub fn redis_calls(h: &FlowHarness, command: &str) -> u64 {
    let info: String = redis_query(h, redis::cmd("INFO").arg("commandstats"));
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| {
            n.parse()
                .unwrap_or_else(|e| panic!("{line}: {e}", line = n))
        })
}

/// Every key matching `pattern` in the harness's Redis, sorted.
pub fn redis_keys(h: &FlowHarness, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis_query(h, redis::cmd("KEYS").arg(pattern));
    keys.sort();
    keys
}

/// The TTL of `key` in the harness's Redis (seconds; -1 none, -2 missing).
pub fn redis_ttl(h: &FlowHarness, key: &str) -> i64 {
    redis_query(h, redis::cmd("TTL").arg(key))
}

// -- ABORT -------------------------------------------------------------------------------------

/// How many values the poison producer emits before it fails.
pub const EMITTED: i64 = 5;
/// The producer's failure.
pub const MESSAGE: &str = "sensor unplugged";

/// source (FailingProducer, `onError: poison`: [`EMITTED`] values, then [`MESSAGE`]) → relay
/// (Identity) → sink.
pub fn aborting_flow() -> String {
    let nodes = format!(
        r#"  - name: source
    kind: producer
    onError: poison
    component: {{builtin: videoflow.rs.producers.FailingProducer}}
    params: {{emit: {EMITTED}, message: "{MESSAGE}"}}
{relay}{sink}"#,
        relay = processor("relay", "source", IDENTITY),
        sink = jsonl_sink("sink", "relay", "out.jsonl", ""),
    );
    batch_flow("aborting", "", &nodes)
}

/// The ABORT-5 text for a node whose parent `parent` aborted with the origin's record.
fn upstream_aborted_message(parent: &str) -> String {
    format!(
        "{parent} terminated abnormally (VF_POISON: ValueError: {MESSAGE}), so this node stops \
         rather than waiting for an end-of-stream that is not coming."
    )
}

/// The terminators stored on `node`'s NAME-4 subject, decoded.
pub fn terminators(h: &FlowHarness, flow: &str, run: &str, node: &str) -> Vec<envelope::Envelope> {
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

/// The one ABORT among `node`'s terminators, and no EOS (ABORT-1a: no EOS when dying).
fn only_abort(h: &FlowHarness, flow: &str, run: &str, node: &str) -> WireError {
    let ts = terminators(h, flow, run, node);
    assert_eq!(ts.len(), 1, "{node}: exactly one terminator: {ts:#?}");
    let t = &ts[0];
    assert_eq!(t.msg_type, MsgType::Abort, "{node}: an ABORT, never an EOS");
    assert_eq!(t.trace_id, "abort-r0", "ABORT-1 trace");
    t.error.clone().expect("ABORT carries an error record")
}

/// ABORT-1a, ABORT-3..5, ABORT-7, LOOP-2/6 for [`aborting_flow`]: the flow ends non-zero (every
/// node exits 4, none hangs) after what the producer sent before dying was processed; the
/// origin left `VF_POISON` (the unclassified ValueError wrapped by `onError: poison`, ERR-2) and
/// its own ABORT; each node downstream exits `VF_UPSTREAM_ABORTED` naming its parent and relays
/// the origin's record verbatim; the sink, without children, publishes no ABORT.
pub fn assert_poison_abort_relayed(h: &FlowHarness, exits: &[Exit]) {
    let (flow, run) = streams::ids(&h.vars("source", 0));
    let logs = h.all_logs();
    for e in exits {
        assert_eq!(e.code, Some(4), "{e:?}; logs:\n{logs}");
    }
    let values: Vec<i64> = h.jsonl("out.jsonl").iter().map(int_value).collect();
    assert_eq!(
        values,
        (0..EMITTED).collect::<Vec<_>>(),
        "ABORT-4/ABORT-7: processed before stopping; logs:\n{logs}"
    );

    // The origin: its termination record, and its own ABORT with the record from the error
    // object (`node` in context, ABORT-1).
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
    assert_eq!(origin["context"]["node"], "source", "{origin}");
    let record = only_abort(h, &flow, &run, "source");
    assert_eq!(record.code, "VF_POISON", "{record:?}");
    assert_eq!(
        record.message,
        format!("ValueError: {MESSAGE}"),
        "{record:?}"
    );
    assert_eq!(
        record.context.get("node").map(String::as_str),
        Some("source"),
        "{record:?}"
    );

    // ABORT-5, hop by hop: each node's message names its parent (the spec's `<parent>`: the
    // origin for `relay`, `relay` for the sink), while the record inside is the producer's.
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
        only_abort(h, &flow, &run, "relay"),
        record,
        "ABORT-5: the origin's record, verbatim (origin node kept), across runtimes"
    );
    assert!(
        terminators(h, &flow, &run, "sink").is_empty(),
        "LOOP-6: a node without children publishes no ABORT"
    );
}
