//! `VF_ON_FINISH=hold`: a worker whose loop ended cleanly stays up — ready, live, its
//! output written — until SIGTERM, then exits 0; without it the same worker exits 0 at once.
//! This is what a REALTIME flow's Deployment needs when its finite sources end: every exit,
//! a clean one too, is restarted there.

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use support::FlowHarness;

const FLOW: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: held}
spec:
  type: realtime
  nodes:
  - name: ticks
    kind: producer
    component: {builtin: videoflow.rs.producers.TickProducer}
    params: {count: 10, period_ms: 50, pace: true, pace_relative: true}
  - name: relay
    kind: processor
    parents: [ticks]
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [relay]
    component: {builtin: videoflow.rs.consumers.JsonlSink}
    params: {path: "{{DIR}}/out.jsonl"}
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `GET path` on localhost: the status, or `None` when nothing answers.
fn status(port: u16, path: &str) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.get(9..12)?.parse().ok()
}

#[test]
fn a_held_worker_stays_ready_after_its_drain_and_exits_0_on_sigterm() {
    let mut h = FlowHarness::new(FLOW);
    h.provision();
    let (relay_port, sink_port) = (free_port(), free_port());
    let (rp, sp) = (relay_port.to_string(), sink_port.to_string());
    let hold = ("VF_ON_FINISH", "hold");
    // The sink and relay first, so their durables pull before the first tick.
    h.spawn("sink", 0, &[hold, ("VF_HEALTH_PORT", sp.as_str())]);
    h.spawn("relay", 0, &[hold, ("VF_HEALTH_PORT", rp.as_str())]);
    h.wait_until("relay and sink ready", Duration::from_secs(60), || {
        match (status(relay_port, "/readyz"), status(sink_port, "/readyz")) {
            (Some(200), Some(200)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // The producer ends by itself and exits (no hold asked).
    h.spawn("ticks", 0, &[]);
    for node in ["relay", "sink"] {
        h.wait_until(
            &format!("{node} drained and holding"),
            Duration::from_secs(60),
            || {
                let log = h.log(node, 0);
                if log.contains("holding until stopped") {
                    Ok(())
                } else {
                    Err(log.lines().last().unwrap_or_default().to_owned())
                }
            },
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let exits = loop {
        let exits = h.exits_so_far();
        if exits.iter().any(|e| e.node == "ticks" && e.code.is_some()) {
            break exits;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the producer did not exit: {exits:?}\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let code = |node: &str| exits.iter().find(|e| e.node == node).and_then(|e| e.code);
    assert_eq!(code("ticks"), Some(0), "{}", h.all_logs());
    assert_eq!(code("relay"), None, "the relay holds:\n{}", h.all_logs());
    assert_eq!(code("sink"), None, "the sink holds:\n{}", h.all_logs());
    // The sink's close() ran before the hold: its output is complete and durable.
    let records = h.jsonl("out.jsonl").len();
    assert!(
        (1..=10).contains(&records),
        "{records} records; logs:\n{}",
        h.all_logs()
    );
    // Held workers are ready and live (the kubelet's probes would find them so).
    for port in [relay_port, sink_port] {
        assert_eq!(status(port, "/readyz"), Some(200));
        assert_eq!(status(port, "/healthz"), Some(200));
    }
    // SIGTERM ends a held worker with 0.
    for node in ["relay", "sink"] {
        assert!(h.terminate(node, 0), "{node} was running");
    }
    let exits = h.wait_all(Duration::from_secs(30));
    h.assert_all_ok(&exits);
}
