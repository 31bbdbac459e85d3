//! The run ledger in a real flow (issue #5, §11.2): a BATCH flow with a durable shared
//! runtime store (`file://`), a processor of three competing replicas, real worker processes
//! on a real nats-server. Every parent ends by the EOS-7 barrier — terminators recorded per
//! replica (EOS-2), distinct ids received (union over competing replicas), completion
//! committed — and the records sit under 1.0.4's key layout with the values EOS-7 gives.

mod flows_common;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value as Json;
use videoflow_worker::store::RuntimeStore;

use flows_common::{batch_flow, int_value};
use support::FlowHarness;

const N: i64 = 60;

/// The file ledger every test but the Redis one uses.
const FILE_LEDGER: &str = "file://{{DIR}}/ledger";

fn ledger_flow(name: &str, store: &str, sink_extra: &str) -> String {
    batch_flow(
        name,
        &format!("  runId: r1\n  runtimeStore: {{url: \"{store}\"}}\n"),
        &format!(
            r#"  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: same
    kind: processor
    replicas: 3
    parents: [numbers]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [same]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"{sink_extra}}}
"#,
            last = N - 1
        ),
    )
}

/// The run's ledger store: the durable Redis when the harness started one, else the file.
fn ledger_store(h: &FlowHarness) -> RuntimeStore {
    let url = h
        .redis
        .as_ref()
        .map_or_else(|| format!("file://{}/ledger", h.dir.display()), |r| r.url());
    RuntimeStore::open(&url).expect("ledger store")
}

/// Every `(key, document)` under `prefix` of the run's ledger.
fn records(h: &FlowHarness, prefix: &str) -> BTreeMap<String, Json> {
    let store = ledger_store(h);
    h.block_on(store.scan(prefix))
        .expect("scan")
        .into_iter()
        .map(|(k, v, _)| {
            let doc = serde_json::from_slice(&v).unwrap_or(Json::Null);
            (k[prefix.len()..].to_owned(), doc)
        })
        .collect()
}

fn log_ids(h: &FlowHarness, log: &str) -> BTreeSet<String> {
    let store = ledger_store(h);
    h.block_on(store.log_entries(log))
        .expect("log")
        .into_iter()
        .map(|r| String::from_utf8(r).expect("utf-8 id"))
        .collect()
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
