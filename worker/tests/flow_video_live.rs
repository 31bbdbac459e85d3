//! A live flow of real worker processes over a real RTSP server (GStreamer's rtsp-server on
//! loopback, `video_support::rtsp`) and a real nats-server:
//!
//! ```text
//!   camera (VideoUrlReader, nb_retries=-1) ─ sink (JsonlSink)
//! ```
//!
//! Frames reach the sink byte for byte those of the streamed file, in order; then the server
//! goes away for good and the reader retries forever — and a control stop still ends the
//! flow (CTRL-1/CTRL-2): the reader's wait inside `next()` gives way to the stop instead of
//! holding the producer loop, and every worker exits 0.

#![cfg(feature = "video")]

mod support;
mod video_support;

use std::time::{Duration, Instant};

use support::FlowHarness;
use video_support::rtsp::{H, Server, W, media};
use videoflow_worker::broker;

#[test]
fn ctrl_2_a_control_stop_ends_a_live_reader_that_is_reconnecting_forever() {
    let m = media("flow-live");
    let mut server = Server::start(&m.path, 0, false);
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: camera}}
spec:
  type: realtime
  nodes:
  - name: camera
    kind: producer
    finite: false
    component: {{builtin: videoflow.producers.video.VideoUrlReader}}
    params: {{url: "{}", nb_retries: -1, rtsp_transport: tcp, swap_channels: false}}
  - name: sink
    kind: consumer
    parents: [camera]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        server.url()
    ));
    h.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.jsonl("out.jsonl").len() < 25 {
        assert!(
            Instant::now() < deadline,
            "no frames reached the sink; logs:\n{}",
            h.all_logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The camera goes away and does not come back: the reader keeps reconnecting.
    server.kill();
    std::thread::sleep(Duration::from_secs(2));
    let (flow, run) = (h.flow.flow_id.clone(), h.flow.run_id.clone());
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url).await.expect("connect");
        broker::send_control_stop(&b, &flow, &run)
            .await
            .expect("stop");
    });
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    assert!(
        h.all_logs().contains(": reopening rtsp://127.0.0.1"),
        "the reader never tried to reconnect:\n{}",
        h.all_logs()
    );

    // What arrived: frames of the file, byte for byte, in order, each under 1.0.4's index
    // (one connection: index k is the file's frame k − 1, or a later one where frames were
    // lost on the way). A realtime flow sheds frames under load, and a server whose client
    // reads slowly drops RTP packets (GStreamer's TCP backlog), so on a busy machine frames
    // may be missing, and a frame hit by a lost packet comes out concealed (not the file's);
    // none may repeat or go back.
    let records = h.jsonl("out.jsonl");
    assert!(records.len() >= 25);
    let (mut last_index, mut last_frame, mut exact) = (0, -1, 0);
    for (k, r) in records.iter().enumerate() {
        let value = r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("not a tuple: {r}"));
        let [index, frame] = value.as_slice() else {
            panic!("not (index, frame): {r}");
        };
        let t = &frame["$tensor"];
        assert_eq!(t["shape"], serde_json::json!([H, W, 3]), "{r}");
        let index = index.as_i64().unwrap_or_default();
        assert!(
            index > last_index,
            "record {k}: index {index} after {last_index}"
        );
        last_index = index;
        let sha = t["sha256"].as_str().unwrap_or_default();
        if let Some(at) = m.sha256_of.get(sha).map(|f| *f as i64) {
            assert!(at >= index - 1, "record {k}: index {index} is frame {at}");
            assert!(at > last_frame, "record {k}: frame {at} after {last_frame}");
            last_frame = at;
            exact += 1;
        }
    }
    assert!(
        exact * 10 >= records.len() * 9,
        "{exact} of {} frames exact",
        records.len()
    );
}

/// `GET /metrics` on localhost: the body, or `None` while nothing answers.
fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// A live reader declared on a GPU with a recorded grant reports on `/metrics` the decoder
/// it runs: NVDEC's (`hardware="gpu"`), or the CPU's with the fallback's reason — never a
/// silent CPU run. Here, without an NVIDIA driver, the CPU one; the frames flow either way.
#[test]
fn a_gpu_granted_live_reader_reports_its_decoder_and_the_fallback_on_metrics() {
    let m = media("flow-live-gpu");
    let server = Server::start(&m.path, 0, false);
    let mut h = FlowHarness::new(&format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: camera-gpu}}
spec:
  type: realtime
  nodes:
  - name: camera
    kind: producer
    finite: false
    gpu: {{count: 1, fallback: cpu}}
    component: {{builtin: videoflow.producers.video.VideoUrlReader}}
    params: {{url: "{}", nb_retries: -1, rtsp_transport: tcp}}
  - name: sink
    kind: consumer
    parents: [camera]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        server.url()
    ));
    let port = videoflow_testkit::free_port().expect("free port");
    let grant = r#"{"workload_id": "w-2", "devices": [{"ordinal": 0, "uuid": "GPU-bbbb2222"}], "host": "observed"}"#;
    h.provision();
    h.spawn("sink", 0, &[]);
    h.spawn(
        "camera",
        0,
        &[
            ("VF_GPU_GRANT_JSON", grant),
            ("VF_HEALTH_PORT", &port.to_string()),
        ],
    );
    h.wait_for_records("out.jsonl", 5, Duration::from_secs(60));
    let line = h.wait_until(
        "the decoder gauge on /metrics",
        Duration::from_secs(30),
        || {
            let body = scrape(port).ok_or_else(|| "no answer".to_owned())?;
            body.lines()
                .find(|l| l.starts_with("videoflow_video_decoder{"))
                .map(str::to_owned)
                .ok_or(body)
        },
    );
    let common = "videoflow_video_decoder{node=\"camera\",codec=\"h264\",";
    let on_gpu = format!("{common}decoder=\"h264_cuvid\",hardware=\"gpu\",requested=\"gpu\"}} 1");
    let on_cpu = format!(
        "{common}decoder=\"h264\",hardware=\"cpu\",requested=\"gpu\",fallback=\"nvdec_open_failed\"}} 1"
    );
    assert!(line == on_gpu || line == on_cpu, "{line}");
    let (flow, run) = (h.flow.flow_id.clone(), h.flow.run_id.clone());
    let url = h.nats.url();
    h.block_on(async {
        let b = broker::connect(&url).await.expect("connect");
        broker::send_control_stop(&b, &flow, &run)
            .await
            .expect("stop");
    });
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    if line == on_cpu {
        let log = h.log("camera", 0);
        assert_eq!(
            log.matches("is decoded on the CPU, not on the GPU it was granted (nvdec_open_failed)")
                .count(),
            1,
            "one warning for the reason: {log}"
        );
    }
}
