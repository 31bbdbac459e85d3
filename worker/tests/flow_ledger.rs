//! The run ledger in a real flow (§11.2): a BATCH flow with a durable shared
//! runtime store (`file://`), a processor of three competing replicas, real worker processes
//! on a real nats-server. Every parent ends by the EOS-7 barrier — terminators recorded per
//! replica (EOS-2), distinct ids received (union over competing replicas), completion
//! committed — and the records sit under 1.0.4's key layout with the values EOS-7 gives.

mod flows_common;
mod streams;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value as Json;

use flows_common::{
    IDENTITY, batch_flow, int_value, ledger_docs, ledger_log, ledger_spec, numbers_to_sink,
};
use support::FlowHarness;

const N: i64 = 60;

/// The file ledger every test but the Redis one uses.
const FILE_LEDGER: &str = "file://{{DIR}}/ledger";

fn ledger_flow(name: &str, store: &str, sink_extra: &str) -> String {
    let same =
        "    replicas: 3\n    component: {builtin: videoflow.processors.basic.IdentityProcessor}\n";
    batch_flow(
        name,
        &ledger_spec(store),
        &numbers_to_sink(N, "same", same, sink_extra),
    )
}

/// numbers → picky (`FailOn` failing `values` with `code`, `delivery` when given) → sink, on
/// the file ledger: the settlement flows.
fn failing_flow(name: &str, delivery: Option<&str>, values: &[i64], code: &str) -> String {
    let delivery = delivery.map_or_else(String::new, |d| format!("    delivery: {d}\n"));
    let picky = format!(
        "{delivery}    component: {{builtin: videoflow.rs.processors.FailOn}}\n    params: {{values: {values:?}, code: {code}}}\n"
    );
    batch_flow(
        name,
        &ledger_spec(FILE_LEDGER),
        &numbers_to_sink(N, "picky", &picky, ""),
    )
}

/// The run's ledger: the durable Redis when the harness started one, else the file.
fn ledger_url(h: &FlowHarness) -> String {
    h.redis
        .as_ref()
        .map_or_else(|| format!("file://{}/ledger", h.dir.display()), |r| r.url())
}

/// Every `(key, document)` under `prefix` of the run's ledger.
fn records(h: &FlowHarness, prefix: &str) -> BTreeMap<String, Json> {
    ledger_docs(h, &ledger_url(h), prefix)
}

fn log_ids(h: &FlowHarness, log: &str) -> BTreeSet<String> {
    ledger_log(h, &ledger_url(h), log).into_iter().collect()
}

#[test]
fn eos_7_barrier_ends_every_parent_by_count_with_the_records_in_the_ledger() {
    barrier_flow(FILE_LEDGER);
}

/// The same on `redis://` (STORE-5/6): `appendonly yes` + `noeviction` reads back durable.
#[test]
fn eos_7_barrier_on_a_durable_redis_ledger() {
    barrier_flow("{{DURABLE_REDIS}}");
}

fn barrier_flow(store: &str) {
    let mut h = FlowHarness::new(&ledger_flow("ledger", store, ", idempotent: true"));
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);

    // Every value exactly once, in order per producer.
    let out = h.jsonl("out.jsonl");
    let mut values: Vec<i64> = out.iter().map(int_value).collect();
    values.sort_unstable();
    assert_eq!(values, (0..N).collect::<Vec<_>>(), "{}", h.all_logs());

    // EOS-7: the producer published N distinct ids — its outbox and its terminator's seq,
    // recorded once for `same` under one key per (parent, replica, kind).
    let outbox = records(&h, "vf/ledger/r1/numbers/outbox/");
    assert_eq!(outbox.len(), N as usize);
    assert!(
        outbox
            .values()
            .all(|d| d["replica"] == 0 && d["kind"] == "data" && d["outcome"] == "accepted")
    );
    let terms = records(&h, "vf/ledger/r1/same/terminator/");
    assert_eq!(
        terms.keys().cloned().collect::<Vec<_>>(),
        ["numbers/r0/eos"]
    );
    let doc = &terms["numbers/r0/eos"];
    assert_eq!(
        (doc["seq"].as_i64(), doc["error"].is_null()),
        (Some(N), true),
        "{doc}"
    );

    // (b): the competing replicas of `same` share one durable; the union of their received
    // logs is every id the producer published.
    let durable = videoflow_core::naming::durable_name("same", "numbers");
    let mut union = BTreeSet::new();
    for r in 0..3 {
        union.extend(log_ids(
            &h,
            &format!("vf/ledger/r1/same/received/numbers/{durable}/r{r}"),
        ));
    }
    let published: BTreeSet<String> = outbox.keys().cloned().collect();
    assert_eq!(union, published);

    // The commits: one per (parent, partition), final = the sum of the terminators' seqs.
    let same_done = records(&h, "vf/ledger/r1/same/completion/");
    assert_eq!(
        same_done.keys().cloned().collect::<Vec<_>>(),
        ["numbers/same/p0", "numbers/same/p1", "numbers/same/p2"]
    );
    let sink_done = records(&h, "vf/ledger/r1/sink/completion/");
    assert_eq!(
        sink_done.keys().cloned().collect::<Vec<_>>(),
        ["same/sink/p0"]
    );
    for doc in same_done.values().chain(sink_done.values()) {
        assert_eq!(
            (doc["final"].as_i64(), doc["epoch"].as_i64()),
            (Some(N), Some(0)),
            "{doc}"
        );
    }
    // The sink waited for all three replicas of `same`; their seqs add up to what they
    // forwarded between them.
    let sink_terms = records(&h, "vf/ledger/r1/sink/terminator/");
    let forwarded: i64 = sink_terms.values().filter_map(|d| d["seq"].as_i64()).sum();
    assert_eq!((sink_terms.len(), forwarded), (3, N));

    // IDEM-1: with a durable shared ledger the sink's effect markers live there.
    let effects = records(&h, "vf/ledger/r1/sink/effect/");
    assert_eq!(effects.len(), N as usize);
    assert!(
        effects
            .values()
            .all(|d| d["until"].as_f64() > d["at"].as_f64())
    );
    // And the barrier, not the quiescence window, ended the parents.
    assert!(h.all_logs().contains("parent drained"));
}

/// A REALTIME run on the same ledger ends by EOS-3, which counts nothing: its terminators
/// are recorded (EOS-2) but no received id is, so a live run's ledger does not grow with
/// every message it takes in.
#[test]
fn eos_7_a_realtime_run_notes_no_received_ids() {
    let flow = batch_flow(
        "live",
        &ledger_spec(FILE_LEDGER),
        &numbers_to_sink(N, "same", IDENTITY, ""),
    )
    .replacen("type: batch", "type: realtime", 1);
    let mut h = FlowHarness::new(&flow);
    // The stages pull before the producer starts: a REALTIME stream keeps one message (STREAM-2),
    // so a producer that outran a stage still starting would leave it only the EOS.
    h.provision();
    h.spawn("same", 0, &[]);
    h.spawn("sink", 0, &[]);
    h.wait_pulling("same", "numbers", Duration::from_secs(30));
    h.wait_pulling("sink", "same", Duration::from_secs(30));
    h.spawn("numbers", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    assert!(!h.jsonl("out.jsonl").is_empty(), "{}", h.all_logs());

    let terms = records(&h, "vf/live/r1/same/terminator/");
    assert_eq!(
        terms.keys().cloned().collect::<Vec<_>>(),
        ["numbers/r0/eos"]
    );
    for (node, parent) in [("same", "numbers"), ("sink", "same")] {
        let durable = videoflow_core::naming::durable_name(node, parent);
        let log = format!("vf/live/r1/{node}/received/{parent}/{durable}/r0");
        assert_eq!(log_ids(&h, &log), BTreeSet::new(), "{log}");
    }
}

#[test]
fn eos_2_a_restarted_consumer_starts_from_the_recorded_terminators() {
    let mut h = FlowHarness::new(&ledger_flow("restart", FILE_LEDGER, ""));
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    assert_eq!(h.jsonl("out.jsonl").len(), N as usize);
    // A replacement sink process: the ledger says every replica of its parent ended and
    // every id was received, so it completes at once, consuming nothing again.
    h.spawn("sink", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    assert_eq!(
        h.jsonl("out.jsonl").len(),
        N as usize,
        "nothing consumed twice"
    );
    let log = h.log("sink", 0);
    assert_eq!(
        log.matches("terminator recorded by an earlier process")
            .count(),
        3,
        "{log}"
    );
}

/// STREAM-15 / DELIV-6: under a durable shared ledger the provisioned durable has no broker
/// cap (`max_deliver = −1`) and the ledger counts the failed attempts: a value that keeps
/// failing transiently is retried until the count reaches `VF_MAX_RETRIES + 1`, then
/// dead-lettered; the attempts document says how often, per disposition.
#[test]
fn stream_15_the_ledger_counts_transient_attempts_then_dead_letters() {
    const BAD: i64 = 5;
    let mut h = FlowHarness::new(&failing_flow("budget", None, &[BAD], "transient"));
    h.provision();
    let url = h.nats.url();
    let stream = videoflow_core::naming::stream_name("budget", "r1", "numbers");
    h.block_on(streams::add_witness(&url, &stream));
    let max_deliver = h.block_on(async {
        let client = async_nats::connect(&url).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let s = js.get_stream(&stream).await.expect("stream");
        let info = s
            .consumer_info(videoflow_core::naming::durable_name("picky", "numbers"))
            .await
            .expect("durable");
        info.config.max_deliver
    });
    assert_eq!(max_deliver, -1, "no broker cap under the ledger");
    for node in ["numbers", "picky", "sink"] {
        h.spawn(node, 0, &[("VF_MAX_RETRIES", "1")]);
    }
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    let mut values: Vec<i64> = h.jsonl("out.jsonl").iter().map(int_value).collect();
    values.sort_unstable();
    let expected: Vec<i64> = (0..N).filter(|v| *v != BAD).collect();
    assert_eq!(values, expected, "{}", h.all_logs());
    // Dead-lettered after the second failed attempt (retries 1 ⇒ budget 2).
    let dlq = h.block_on(streams::read_stream(
        &url,
        &videoflow_core::naming::dlq_stream_name("budget"),
    ));
    assert_eq!(dlq.len(), 1, "{dlq:#?}");
    assert_eq!(
        dlq[0].headers.get("VF-Num-Delivered").map(String::as_str),
        Some("2")
    );
    let attempts = records(&h, "vf/budget/r1/picky/attempts/");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let doc = attempts.values().next().expect("one");
    assert_eq!(doc["transient"].as_u64(), Some(2), "{doc}");
}

/// STREAM-15's fallback: a durable provisioned without a broker cap (the Flow's ledger read
/// back durable) bound by a worker whose own ledger is process-local still stops retrying at
/// `VF_MAX_RETRIES + 1` — by the broker's delivery count — instead of retrying for ever.
#[test]
fn stream_15_without_a_ledger_to_count_in_the_broker_count_still_bounds_retries() {
    const BAD: i64 = 5;
    let mut h = FlowHarness::new(&failing_flow("nocount", None, &[BAD], "transient"));
    h.provision();
    for node in ["numbers", "sink"] {
        h.spawn(node, 0, &[("VF_MAX_RETRIES", "1")]);
    }
    h.spawn(
        "picky",
        0,
        &[
            ("VF_MAX_RETRIES", "1"),
            ("VF_RUNTIME_STORE_URL", "memory://"),
        ],
    );
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    assert_eq!(h.jsonl("out.jsonl").len(), N as usize - 1);
    let dlq = h.block_on(streams::read_stream(
        &h.nats.url(),
        &videoflow_core::naming::dlq_stream_name("nocount"),
    ));
    assert_eq!(dlq.len(), 1, "{dlq:#?}");
    assert_eq!(
        dlq[0].headers.get("VF-Num-Delivered").map(String::as_str),
        Some("2")
    );
    assert!(records(&h, "vf/nocount/r1/picky/attempts/").is_empty());
}

/// DELIV-15 / ERR-6: a best-effort node dead-letters at most 5 specimens per code per
/// minute; every other poison delivery is TERMed with a record appended to the ledger's
/// terminal log — nothing ends unrecorded.
#[test]
fn deliv_15_sampled_out_deliveries_are_recorded_in_the_terminal_log() {
    const BAD: [i64; 8] = [2, 4, 6, 8, 10, 12, 14, 16];
    let mut h = FlowHarness::new(&failing_flow(
        "sampled",
        Some("best-effort"),
        &BAD,
        "poison",
    ));
    h.start();
    let exits = h.wait_all(Duration::from_secs(120));
    h.assert_all_ok(&exits);
    assert_eq!(h.jsonl("out.jsonl").len(), N as usize - BAD.len());
    let dlq = h.block_on(streams::read_stream(
        &h.nats.url(),
        &videoflow_core::naming::dlq_stream_name("sampled"),
    ));
    assert_eq!(dlq.len(), 5, "five specimens per code and minute");
    let records: Vec<Json> = ledger_log(&h, &ledger_url(&h), "vf/sampled/r1/picky/terminal")
        .iter()
        .map(|r| serde_json::from_str(r).expect("json record"))
        .collect();
    assert_eq!(records.len(), BAD.len() - 5, "{records:?}");
    for r in &records {
        assert_eq!(
            (r["reason"].as_str(), r["code"].as_str()),
            (Some("sampled-out"), Some("VF_POISON")),
            "{r}"
        );
    }
    let seqs: BTreeSet<u64> = records
        .iter()
        .filter_map(|r| r["stream_seq"].as_u64())
        .collect();
    let dead: BTreeSet<u64> = dlq
        .iter()
        .filter_map(|l| {
            l.headers
                .get("Nats-Msg-Id")?
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let every: BTreeSet<u64> = BAD.iter().map(|v| *v as u64 + 1).collect();
    assert_eq!(
        seqs.union(&dead).copied().collect::<BTreeSet<_>>(),
        every,
        "each failed delivery recorded once"
    );
    assert!(seqs.is_disjoint(&dead));
    assert!(h.all_logs().contains("ledger:picky/terminal:"));
}

/// `GET /readyz` on localhost answers 200 (HEALTH-1: the loop has received once, so every
/// setup step — the DLQ stream included — is behind the worker).
fn ready(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut out = String::new();
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .and_then(|()| s.read_to_string(&mut out))
        .is_ok_and(|_| out.starts_with("HTTP/1.1 200"))
}

/// DELIV-8: a dead letter the broker does not accept keeps its message (NAK 5 s) and a
/// `handoff/{record id}` record in the ledger; a replacement process hands it off at start,
/// under the same id, and forgets it. Nothing is lost and nothing is dead-lettered twice.
#[test]
fn deliv_8_a_refused_dead_letter_is_kept_and_handed_off_by_the_next_process() {
    const BAD: i64 = 3;
    let mut h = FlowHarness::new(&failing_flow("handoff", None, &[BAD], "poison"));
    h.provision();
    // What the killed process held comes back after 2 s, not the default ack wait.
    h.set_ack_wait("picky", "numbers", Duration::from_secs(2));
    let url = h.nats.url();
    let dlq = videoflow_core::naming::dlq_stream_name("handoff");
    // Both picky and the sink ensure the DLQ stream while they set up: wait until both are
    // past it (HEALTH-1 ready), or a slow sink would re-create what the test deletes.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for node in ["picky", "sink"] {
        let port = videoflow_testkit::free_port().expect("port");
        h.spawn(node, 0, &[("VF_HEALTH_PORT", &port.to_string())]);
        while !ready(port) {
            assert!(
                std::time::Instant::now() < deadline,
                "{node} never ready:\n{}",
                h.all_logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Past its setup, the DLQ goes away: every dead letter of this process is refused.
    h.block_on(async {
        let client = async_nats::connect(&url).await.expect("connect");
        async_nats::jetstream::new(client)
            .delete_stream(&dlq)
            .await
            .expect("delete the DLQ");
    });
    h.spawn("numbers", 0, &[]);
    let handoffs = |h: &FlowHarness| records(h, "vf/handoff/r1/picky/handoff/");
    while handoffs(&h).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no handoff recorded:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let kept = handoffs(&h);
    let record_id = kept.keys().next().expect("one").clone();
    assert_eq!(record_id, format!("dlq:handoff:r1:picky:{}", BAD + 1));
    assert_eq!(kept[&record_id]["headers"]["VF-Code"], "VF_POISON");
    // The replacement recreates the DLQ at start and hands the letter off first.
    h.kill("picky", 0);
    h.spawn("picky", 0, &[]);
    let exits = h.wait_all(Duration::from_secs(120));
    let failed: Vec<_> = exits.iter().filter(|e| e.code != Some(0)).collect();
    assert_eq!(
        failed.len(),
        1,
        "only the killed picky: {exits:?}\n{}",
        h.all_logs()
    );
    assert!(h.log("picky", 0).contains("pending dead letter handed off"));
    assert!(handoffs(&h).is_empty(), "forgotten once accepted");
    let letters = h.block_on(streams::read_stream(&url, &dlq));
    assert_eq!(
        letters.len(),
        1,
        "one dead letter under its id: {letters:#?}"
    );
    assert_eq!(letters[0].headers.get("Nats-Msg-Id"), Some(&record_id));
    let mut values: Vec<i64> = h.jsonl("out.jsonl").iter().map(int_value).collect();
    values.sort_unstable();
    values.dedup();
    assert_eq!(values, (0..N).filter(|v| *v != BAD).collect::<Vec<_>>());
}
