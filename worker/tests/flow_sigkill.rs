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

use flows_common::{by_trace, duplicate_arrivals, int_value};
use support::FlowHarness;
use videoflow_worker::broker::{self, DurableRequest};
use videoflow_worker::config::WorkerConfig;

const N: i64 = 300;
/// `ack_wait` of the killed node's durable (seconds).
const ACK_WAIT_SECONDS: &str = "5";
/// Duplicate arrivals tolerated at the sink (by trace id). Content-derived ids plus the
/// 120 s duplicate window make it 0 in practice; the bound only keeps a pathological
/// scheduler from failing a test whose real claim is "nothing lost".
const MAX_DUPLICATES: usize = 3;

fn flow_yaml() -> String {
    format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: sigkill}}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: work
    kind: processor
    parents: [numbers]
    replicas: 2
    component: {{builtin: videoflow.rs.processors.ServiceTimeProcessor}}
    params: {{ms: 20, mode: sleep}}
  - name: sink
    kind: consumer
    parents: [work]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        last = N - 1
    )
}

/// Creates `node`'s data durables on its parents with `ack_wait` = `ACK_WAIT_SECONDS`,
/// exactly as the worker derives them otherwise (STREAM-4), before provisioning binds them.
fn precreate_short_ack_wait(h: &FlowHarness, node: &str) {
    let mut vars = h.vars(node, 0);
    vars.insert("VF_ACK_WAIT_SECONDS".into(), ACK_WAIT_SECONDS.into());
    let cfg = WorkerConfig::from_env(&vars).unwrap_or_else(|e| panic!("{}", e.render()));
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for parent in &cfg.parent_names {
            broker::ensure_node_stream(&b, &cfg.flow_id, &cfg.run_id, parent, false, None)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let bound =
                broker::bind_data_durable(&b, &DurableRequest::data_for(&cfg, parent, false))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(bound.ack_wait(), Duration::from_secs(5));
        }
    });
}

/// Polls the sink until it holds at least `n` records.
fn wait_for_records(h: &FlowHarness, n: usize, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let got = h.jsonl("out.jsonl").len();
        if got >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "only {got} records after {timeout:?}; logs:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// DELIV-1/2 + LOOP-5 + MSGID-2: SIGKILL one of two competing replicas after outputs exist,
/// respawn it (same replica id); every input reaches the sink and duplicates (by trace id)
/// stay within `MAX_DUPLICATES` (0 expected: the broker's duplicate window drops re-sends).
#[test]
fn sigkill_of_a_competing_replica_loses_nothing() {
    let mut h = FlowHarness::new(&flow_yaml());
    precreate_short_ack_wait(&h, "work");
    let t0 = Instant::now();
    h.start();
    let before_kill = wait_for_records(&h, 60, Duration::from_secs(30));
    h.kill("work", 1);
    let killed_at = t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    h.spawn("work", 1, &[]);
    let exits = h.wait_all(Duration::from_secs(60));
    let elapsed = t0.elapsed();

    // Exactly one process ended abnormally: the SIGKILLed first `work` replica 1.
    let killed: Vec<_> = exits.iter().filter(|e| e.code != Some(0)).collect();
    assert_eq!(killed.len(), 1, "{exits:?}; logs:\n{}", h.all_logs());
    assert_eq!((killed[0].node.as_str(), killed[0].replica), ("work", 1));
    assert_eq!(exits.len(), 5, "numbers, work×2, sink, respawned work.1");

    let out = h.jsonl("out.jsonl");
    let values: BTreeSet<i64> = out.iter().map(int_value).collect();
    let missing: Vec<i64> = (0..N).filter(|v| !values.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "lost inputs {missing:?}; logs:\n{}",
        h.all_logs()
    );
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
