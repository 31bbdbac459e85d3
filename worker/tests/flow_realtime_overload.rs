//! REALTIME overload, end to end (DELIV-4, STREAM-2, EOS-3, LOOP-10):
//!
//! ```text
//!   frames (SyntheticFrameProducer, 100 fps, 300 small frames ≈ 3 s)
//!     ─ slow (ServiceTimeProcessor 25 ms ⇒ at most 40 groups/s) ─ sink (JSONL)
//! ```
//!
//! A REALTIME node stream keeps only the newest message (`max_msgs` 1, discard OLD), and a
//! REALTIME publish never waits on a full stream (DELIV-4). So the producer keeps its own
//! pace whatever the slow stage does, the slow stage sees only the freshest frames (it drops
//! the rest), and the latency at the sink stays bounded instead of growing with a backlog.
//! The flow still ends through EOS: each stage's terminator is its stream's newest message,
//! so it survives the one-message limit and the drain (EOS-3) completes.
//!
//! The producer is timed on the wire: a plain NATS subscription to its data and EOS subjects
//! (JetStream publications are NATS messages too) records the first DATA and the EOS.
//!
//! Bounds are generous on purpose (a noisy 2-core CI box runs 3 workers and 2 servers):
//! - producer span ≤ 1.5 × its paced 3 s (blocking on the 25 ms stage would take 7.5 s);
//! - the sink gets fewer than 80 % of the frames (the stage can do ~40 %), and at least 20;
//! - median sink latency (`arrival_ts − event_ts`) < 1 s (≈ 0.1 s expected); no max bound.

mod flows_common;
mod support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use flows_common::{f64_field, median};
use futures::StreamExt;
use support::FlowHarness;
use videoflow_core::envelope::{self, MsgType};
use videoflow_core::naming;
use videoflow_worker::broker;

const FPS: u64 = 100;
const COUNT: u64 = 300;
const SERVICE_MS: u64 = 25;

/// What the wire showed of the producer.
#[derive(Debug)]
struct ProducerTrace {
    data: u64,
    first_data: Option<Instant>,
    eos: Option<Instant>,
}

/// Subscribes (plain NATS) to `node`'s data and terminator subjects on a thread of its own;
/// returns once subscribed, with the receiver of the final trace (sent at EOS or timeout).
fn watch_producer(h: &FlowHarness, node: &str) -> mpsc::Receiver<ProducerTrace> {
    let url = h.nats.url();
    let data = naming::data_subject(&h.flow.flow_id, &h.flow.run_id, node);
    let eos = naming::eos_subject(&h.flow.flow_id, &h.flow.run_id, node);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let b = broker::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let client = b.client().clone();
            let mut data_sub = client.subscribe(data).await.expect("subscribe data");
            let mut eos_sub = client.subscribe(eos).await.expect("subscribe eos");
            client.flush().await.expect("flush");
            let _ = ready_tx.send(());
            let mut trace = ProducerTrace {
                data: 0,
                first_data: None,
                eos: None,
            };
            let deadline = tokio::time::sleep(Duration::from_secs(60));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    // The client hands messages to the subscriptions in wire order, so the
                    // last DATA is already queued when the EOS after it is; polling DATA
                    // first keeps a wakeup that sees both from ending the count one short.
                    biased;
                    Some(_) = data_sub.next() => {
                        trace.data += 1;
                        trace.first_data.get_or_insert_with(Instant::now);
                    }
                    Some(m) = eos_sub.next() => {
                        let is_eos = envelope::decode(&m.payload)
                            .is_ok_and(|e| e.msg_type == MsgType::Eos);
                        if is_eos {
                            trace.eos = Some(Instant::now());
                            break;
                        }
                    }
                    () = &mut deadline => break,
                }
            }
            let _ = done_tx.send(trace);
        });
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("wire observer subscribed");
    done_rx
}

/// DELIV-4 + STREAM-2: under a stage 2.5× too slow, the REALTIME producer keeps its pace,
/// the slow stage drops, the latency at the sink stays bounded, and the flow ends by EOS.
#[test]
fn realtime_overload_drops_instead_of_blocking() {
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: rtload}}
spec:
  type: realtime
  nodes:
  - name: frames
    kind: producer
    component: {{builtin: videoflow.rs.producers.SyntheticFrameProducer}}
    params: {{width: 16, height: 16, channels: 1, count: {COUNT}, fps: {FPS}}}
  - name: slow
    kind: processor
    parents: [frames]
    component: {{builtin: videoflow.rs.processors.ServiceTimeProcessor}}
    params: {{ms: {SERVICE_MS}, mode: sleep}}
  - name: sink
    kind: consumer
    parents: [slow]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#
    ));
    let watch = watch_producer(&h, "frames");
    let t0 = Instant::now();
    h.start();
    let exits = h.wait_all(Duration::from_secs(60));
    let flow_time = t0.elapsed();
    // EOS-3: a REALTIME flow with a finite producer still ends cleanly, every worker exit 0.
    h.assert_all_ok(&exits);
    let trace = watch.recv_timeout(Duration::from_secs(10)).expect("trace");

    let paced = Duration::from_secs_f64(COUNT as f64 / FPS as f64);
    let (Some(first), Some(eos)) = (trace.first_data, trace.eos) else {
        panic!("producer not seen on the wire: {trace:?}");
    };
    let span = eos - first;
    let out = h.jsonl("out.jsonl");
    let latencies: Vec<f64> = out
        .iter()
        .map(|r| f64_field(r, "arrival_ts") - f64_field(r, "event_ts"))
        .collect();
    let med = median(&latencies);
    let max = latencies.iter().copied().fold(f64::NAN, f64::max);
    eprintln!(
        "realtime overload: producer published {} in {span:?} (paced {paced:?}); sink got {} \
         of {COUNT}; latency median {med:.3} s, max {max:.3} s; flow {flow_time:?}",
        trace.data,
        out.len()
    );

    // The producer published everything at its own pace (DELIV-4: never blocked).
    assert_eq!(trace.data, COUNT, "every frame published");
    assert!(
        span.as_secs_f64() <= paced.as_secs_f64() * 1.5,
        "producer took {span:?} for a paced {paced:?}: it blocked on the slow stage"
    );
    // The slow stage dropped (STREAM-2 discard OLD) but kept working.
    assert!(
        (out.len() as u64) * 5 < COUNT * 4,
        "the 25 ms stage cannot take {} of {COUNT} frames at {FPS} fps without a backlog",
        out.len()
    );
    assert!(
        out.len() >= 20,
        "the slow stage kept working: {}",
        out.len()
    );
    // Frames are delivered fresh, and in order (the newest wins, never an older one later).
    assert!(med < 1.0, "median latency {med:.3} s; {latencies:?}");
    let seqs: Vec<i64> = out
        .iter()
        .map(|r| r["seq"].as_i64().unwrap_or(-1))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sink saw frames out of order: {seqs:?}"
    );
}
