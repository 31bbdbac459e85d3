//! The worker guards end to end: real nats-server, real worker processes.
//!
//! - SUP-1/2: a `process()` that never returns is ended by the watchdog within timeout +
//!   interval, exit 5, termination record `VF_PROGRESS_STALLED` naming node and pending count.
//! - HEALTH-1/3: `/readyz` turns 200 only after `open()` returned; `/metrics` scraped twice
//!   during a running flow satisfies offered = processed + dropped + outstanding.
//! - ASSET-2 / GPU-3: a missing asset or an unverifiable hard GPU grant ⇒ exit 3 with the
//!   termination JSON (code, message naming host and path, remedy) before any connection.

mod flows_common;
mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use flows_common::{IDENTITY, batch_flow, numbers, processor, void_sink};
use support::FlowHarness;
use videoflow_worker::health::metrics::{
    LATENCY_BUCKETS_SECONDS, parse_histogram, quantile_bounds,
};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `GET path` on localhost: `(status, body)`, or `None` when nothing listens yet.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.get(9..12)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// Σ of every `videoflow_<name>_total{…}` sample.
fn total(text: &str, name: &str) -> u64 {
    let prefix = format!("videoflow_{name}_total{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
        .sum()
}

#[test]
fn sup_2_watchdog_ends_a_process_that_never_returns_with_exit_5() {
    let hang = "    component: {builtin: videoflow.rs.processors.Hang}\n";
    let mut h = FlowHarness::new(&batch_flow(
        "hang",
        "",
        &[
            numbers(5),
            processor("stuck", "numbers", hang),
            void_sink("stuck"),
        ]
        .concat(),
    ));
    h.provision();
    h.spawn("numbers", 0, &[]);
    let started = Instant::now();
    h.spawn(
        "stuck",
        0,
        &[
            ("VF_PROGRESS_TIMEOUT_SECONDS", "2"),
            ("VF_WATCHDOG_INTERVAL_SECONDS", "0.5"),
        ],
    );
    // The sink is never started: it would wait for an EOS the stuck node never sends.
    let exits = h.wait_all(Duration::from_secs(60));
    let elapsed = started.elapsed();
    let stuck = exits
        .iter()
        .find(|e| e.node == "stuck")
        .expect("stuck exit");
    assert_eq!(stuck.code, Some(5), "logs:\n{}", h.all_logs());
    // Detection bound: timeout (2 s) + interval (0.5 s), plus startup and the first group.
    assert!(
        elapsed < Duration::from_secs(15),
        "took {elapsed:?}; logs:\n{}",
        h.all_logs()
    );
    let record = h.termination("stuck", 0).expect("termination record");
    assert_eq!(record["code"], "VF_PROGRESS_STALLED", "{record}");
    let message = record["message"].as_str().expect("message");
    assert!(
        message.starts_with("stuck has acknowledged nothing for "),
        "{message}"
    );
    let pending = record["context"]["pending"].as_i64().expect("pending");
    assert!(pending >= 1, "{record}");
    assert!(
        message.contains(&format!("while {pending} message(s) are pending")),
        "{message}"
    );
    assert!(record["remedy"].as_str().is_some_and(|r| !r.is_empty()));
    assert_eq!(record["disposition"], "worker_fatal");
}

#[test]
fn health_1_3_readyz_after_open_and_metrics_conserve_offered_work() {
    let start_ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        + 4.0;
    let nodes = format!(
        r#"  - name: ticks
    kind: producer
    component: {{builtin: videoflow.rs.producers.TickProducer}}
    params: {{count: 40, period_ms: 100, start_ts: {start_ts}, pace: true}}
  - name: slow
    kind: processor
    parents: [ticks]
    component: {{builtin: videoflow.rs.processors.Hang}}
    params: {{hang_on: [-1], open_seconds: 2}}
  - name: check
    kind: processor
    parents: [slow]
    component: {{builtin: videoflow.rs.processors.FailOn}}
    params: {{values: [5, 9, 13], code: poison}}
{sink}"#,
        sink = void_sink("check"),
    );
    let mut h = FlowHarness::new(&batch_flow("metered", "", &nodes));
    h.provision();
    let (slow_port, check_port) = (free_port(), free_port());
    let (sp, cp) = (slow_port.to_string(), check_port.to_string());
    let spawned = Instant::now();
    h.spawn("ticks", 0, &[]);
    h.spawn("slow", 0, &[("VF_HEALTH_PORT", sp.as_str())]);
    h.spawn("check", 0, &[("VF_HEALTH_PORT", cp.as_str())]);
    h.spawn("sink", 0, &[]);

    // HEALTH-1: 503 while open() sleeps, 200 after it returned.
    let mut saw_not_ready = false;
    let ready_at = loop {
        assert!(
            spawned.elapsed() < Duration::from_secs(30),
            "never ready:\n{}",
            h.all_logs()
        );
        match get(slow_port, "/readyz") {
            Some((503, body)) => {
                assert_eq!(body, "not-ready");
                saw_not_ready = true;
            }
            Some((200, body)) => {
                assert_eq!(body, "ready");
                break spawned.elapsed();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(saw_not_ready, "the server answers before open() returns");
    assert!(
        ready_at >= Duration::from_secs(2),
        "ready after {ready_at:?}, before open() returned"
    );
    assert_eq!(get(slow_port, "/healthz").map(|r| r.0), Some(200));

    // HEALTH-3: two scrapes while the ticks flow (t ≈ 4 s … 8 s).
    let mut scrapes = Vec::new();
    for at in [Duration::from_millis(5500), Duration::from_millis(7000)] {
        if let Some(wait) = at.checked_sub(spawned.elapsed()) {
            std::thread::sleep(wait);
        }
        let (status, body) = get(check_port, "/metrics").expect("scrape");
        assert_eq!(status, 200);
        scrapes.push(body);
    }
    for body in &scrapes {
        let offered = total(body, "messages_offered");
        let processed = total(body, "messages_processed");
        let dropped = total(body, "messages_dropped");
        assert!(offered > 0, "work was offered by now:\n{body}");
        let outstanding = offered
            .checked_sub(processed + dropped)
            .unwrap_or_else(|| panic!("offered < processed + dropped:\n{body}"));
        assert!(outstanding <= 1, "one group in flight at most:\n{body}");
    }
    assert!(total(&scrapes[1], "messages_offered") >= total(&scrapes[0], "messages_offered"));
    h.wait_all_ok(Duration::from_secs(60));
    let last = &scrapes[1];
    assert!(
        last.contains(
            "videoflow_errors_total{node=\"check\",code=\"VF_POISON\",disposition=\"poison\"}"
        ),
        "{last}"
    );
    assert!(last.contains("videoflow_messages_dropped_total{node=\"check\",reason=\"poison\"}"));
    // The histogram reads back and brackets a quantile by its bucket.
    let hist = parse_histogram(last, "proctime_seconds");
    assert_eq!(hist.bounds, LATENCY_BUCKETS_SECONDS.to_vec(), "{last}");
    let (lower, upper) = quantile_bounds(&hist.cumulative, 0.95, &hist.bounds)
        .expect("valid")
        .expect("observations");
    assert!(lower < upper);
}

#[test]
fn asset_2_gpu_3_refusals_exit_3_with_the_termination_record() {
    let mut h = FlowHarness::new(&batch_flow(
        "guarded",
        "",
        &[numbers(2), processor("model", "numbers", IDENTITY)].concat(),
    ));
    let missing = h.dir.join("weights/model.onnx");
    let assets = format!(
        r#"[{{"path": "{}", "sha256": "sha256:{}", "portable": false}}]"#,
        missing.display(),
        "ab".repeat(32)
    );
    h.spawn("model", 0, &[("VF_ASSETS_JSON", assets.as_str())]);
    let empty_path = h.dir.join("no-driver");
    std::fs::create_dir_all(&empty_path).expect("dir");
    let path = empty_path.display().to_string();
    h.spawn(
        "model",
        1,
        &[
            ("VF_DEVICE_TYPE", "gpu"),
            ("VF_GPU_FALLBACK", "none"),
            ("VF_GPU_COUNT", "1"),
            ("PATH", path.as_str()),
            // NVML from a path where there is none, so the refusal holds on a GPU machine too.
            (
                "VF_NVML_LIBRARY",
                "/nonexistent/videoflow-test/libnvidia-ml.so.1",
            ),
        ],
    );
    // Nothing is provisioned: both refuse before any connection.
    let exits = h.wait_all(Duration::from_secs(30));
    assert!(
        exits.iter().all(|e| e.code == Some(3)),
        "{exits:?}\n{}",
        h.all_logs()
    );

    let record = h.termination("model", 0).expect("asset record");
    assert_eq!(record["code"], "VF_RESOURCE_UNAVAILABLE");
    let host = videoflow_worker::assets::hostname(None);
    assert_eq!(
        record["message"],
        format!(
            "Node model on {host}: asset {} is missing.",
            missing.display()
        )
    );
    assert!(
        record["remedy"]
            .as_str()
            .is_some_and(|r| r.contains("local-only")),
        "{record}"
    );

    let record = h.termination("model", 1).expect("gpu record");
    assert_eq!(record["code"], "VF_RESOURCE_UNAVAILABLE");
    assert_eq!(
        record["message"],
        "Node model requires 1 GPU(s) but its grant cannot be verified: the GPU namespace could not be enumerated (missing: nvidia-smi is not on PATH (no NVIDIA driver); NVML: missing: /nonexistent/videoflow-test/libnvidia-ml.so.1 could not be loaded (no NVIDIA driver): /nonexistent/videoflow-test/libnvidia-ml.so.1: cannot open shared object file: No such file or directory)."
    );
    assert!(
        record["remedy"]
            .as_str()
            .is_some_and(|r| r.contains("gpu_fallback"))
    );
    assert!(h.log("model", 1).contains("VF_RESOURCE_UNAVAILABLE"));
}
