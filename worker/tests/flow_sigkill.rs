//! SIGKILL of one competing replica mid-flow, then a respawn under the same replica id
//! (DELIV-1/2, LOOP-5, MSGID-1/2, STREAM-1/3):
//!
//! ```text
//!   numbers (IntProducer, N) ─ work (ServiceTimeProcessor 20 ms, 2 competing replicas) ─ sink
//! ```
//!
//! Publish-before-ack (LOOP-5) means a killed replica can only lose *acks*, never outputs:
//! whatever it held un-acked is redelivered once `ack_wait` lapses and processed again under
//! the same content-derived message id (MSGID-2), which the stream's 120 s duplicate window
//! drops. So the sink must see every input value, and (in practice) each trace id once.
//!
//! The `work` durable is created before the harness provisions (which then binds it as it
//! is) with a 5 s `ack_wait` instead of the default 60 s, so the killed replica's leases lapse
//! quickly and the test stays well under a minute.

mod flows_common;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flows_common::{
    assert_none_lost, batch_flow, by_trace, duplicate_arrivals, int_value, ledger_docs, ledger_log,
    ledger_spec, numbers_to_sink,
};
use support::FlowHarness;
use videoflow_core::naming;

const N: i64 = 300;
/// `ack_wait` of the killed node's durable.
const ACK_WAIT: Duration = Duration::from_secs(5);
/// Duplicate arrivals tolerated at the sink (by trace id). Content-derived ids plus the
/// 120 s duplicate window make it 0 in practice; the bound only keeps a pathological
/// scheduler from failing a test whose real claim is "nothing lost".
const MAX_DUPLICATES: usize = 3;

/// `work`: 2 competing replicas, 20 ms of service time per message.
const WORK: &str = "    replicas: 2
    component: {builtin: videoflow.rs.processors.ServiceTimeProcessor}
    params: {ms: 20, mode: sleep}
";

fn flow_yaml() -> String {
    batch_flow("sigkill", "", &numbers_to_sink(N, "work", WORK, ""))
}

/// DELIV-1/2 + LOOP-5 + MSGID-2: SIGKILL one of two competing replicas after outputs exist,
/// respawn it (same replica id); every input reaches the sink and duplicates (by trace id)
/// stay within `MAX_DUPLICATES` (0 expected: the broker's duplicate window drops re-sends).
#[test]
fn sigkill_of_a_competing_replica_loses_nothing() {
    let mut h = FlowHarness::new(&flow_yaml());
    h.precreate_data_durables("work", ACK_WAIT);
    let t0 = Instant::now();
    h.start();
    let before_kill = h.wait_for_records("out.jsonl", 60, Duration::from_secs(30));
    h.kill("work", 1);
    let killed_at = t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    h.spawn("work", 1, &[]);
    let exits = h.wait_all(Duration::from_secs(60));
    let elapsed = t0.elapsed();

    // Exactly one process ended abnormally: the SIGKILLed first `work` replica 1.
    let killed = h.the_one_abnormal_exit(&exits);
    assert_eq!(
        (killed.node.as_str(), killed.replica),
        ("work", 1),
        "{exits:?}"
    );
    assert_eq!(exits.len(), 5, "numbers, work×2, sink, respawned work.1");

    let out = assert_none_lost(&h, 0..N, "after the SIGKILL of work.1");
    // Same trace id ⇒ same value (an output is a function of its input).
    let traces = by_trace(&out);
    assert_eq!(traces.len() as i64, N, "one trace id per input");
    for (t, rs) in &traces {
        let vs: BTreeSet<i64> = rs.iter().map(|r| int_value(r)).collect();
        assert_eq!(vs.len(), 1, "trace {t} carried different values: {rs:?}");
    }
    let dups = duplicate_arrivals(&out);
    let by_replica: BTreeMap<u64, usize> = out.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r["producer_replica"].as_u64().unwrap_or(u64::MAX))
            .or_default() += 1;
        m
    });
    eprintln!(
        "sigkill: killed work.1 at {killed_at:?} with {before_kill} records at the sink; \
         flow done in {elapsed:?}; {} records, {dups} duplicate arrivals; per work replica \
         {by_replica:?}",
        out.len()
    );
    assert!(
        dups <= MAX_DUPLICATES,
        "{dups} duplicate arrivals at the sink (content-derived ids should dedup them)"
    );
}

/// The same kill with every stage on one shared `file://` run ledger (group-committed): the
/// killed replica dies with ledger writes in flight — records written and not yet synced,
/// synced and not yet answered — and still nothing is lost. Every delivery was noted as
/// received before anything was acked (EOS-7 (b)) and every output was in the outbox before
/// its input was acked (EOS-7 seq), so the respawned replica's terminator counts what it
/// published before the kill, `work`'s received logs hold every input, and the sink ends by
/// the EOS-7 barrier — counted, no quiescence window — with every value.
#[test]
fn sigkill_of_a_competing_replica_loses_nothing_on_the_file_ledger() {
    let yaml = batch_flow(
        "sigkill",
        &ledger_spec("file://{{DIR}}/ledger"),
        &numbers_to_sink(N, "work", WORK, ""),
    );
    let mut h = FlowHarness::new(&yaml);
    h.precreate_data_durables("work", ACK_WAIT);
    let t0 = Instant::now();
    h.start();
    let before_kill = h.wait_for_records("out.jsonl", 60, Duration::from_secs(30));
    h.kill("work", 1);
    std::thread::sleep(Duration::from_millis(200));
    h.spawn("work", 1, &[]);
    let exits = h.wait_all(Duration::from_secs(90));
    let killed = h.the_one_abnormal_exit(&exits);
    assert_eq!(
        (killed.node.as_str(), killed.replica),
        ("work", 1),
        "{exits:?}"
    );
    let out = assert_none_lost(&h, 0..N, "after the SIGKILL of work.1 on the file ledger");
    assert!(duplicate_arrivals(&out) <= MAX_DUPLICATES);

    let url = format!("file://{}/ledger", h.dir.display());
    // Every input was noted as received by one of the two replicas before it was acked.
    let durable = naming::durable_name("work", "numbers");
    let received: BTreeSet<String> = (0..2)
        .flat_map(|r| {
            ledger_log(
                &h,
                &url,
                &format!("vf/sigkill/r1/work/received/numbers/{durable}/r{r}"),
            )
        })
        .collect();
    assert_eq!(received.len() as i64, N, "work's received logs");
    // The sink completed `work` by the barrier, with final = the sum of work's seqs, and its
    // received log holds at least that many distinct ids.
    let terms = ledger_docs(&h, &url, "vf/sigkill/r1/sink/terminator/work/");
    let final_count: i64 = terms.values().filter_map(|d| d["seq"].as_i64()).sum();
    assert!(final_count >= N, "{terms:?}");
    let done = ledger_docs(&h, &url, "vf/sigkill/r1/sink/completion/work/");
    assert_eq!(
        done.values()
            .map(|d| d["final"].as_i64())
            .collect::<Vec<_>>(),
        [Some(final_count)],
        "{done:?}"
    );
    let sink_durable = naming::durable_name("sink", "work");
    let sink_received: BTreeSet<String> = ledger_log(
        &h,
        &url,
        &format!("vf/sigkill/r1/sink/received/work/{sink_durable}/r0"),
    )
    .into_iter()
    .collect();
    assert!(sink_received.len() as i64 >= final_count);
    // One outbox record per output of work, each with its definite outcome.
    let outbox = ledger_docs(&h, &url, "vf/sigkill/r1/work/outbox/");
    let resolved = outbox
        .values()
        .filter(|d| d["outcome"].as_str().is_some())
        .count();
    assert!(resolved as i64 >= N, "{} outbox records resolved", resolved);
    eprintln!(
        "sigkill on the file ledger: killed work.1 with {before_kill} records at the sink; \
         done in {:?}; sink final {final_count} from {:?}; {resolved} outbox records",
        t0.elapsed(),
        terms
            .values()
            .map(|d| d["seq"].as_i64())
            .collect::<Vec<_>>(),
    );
}
