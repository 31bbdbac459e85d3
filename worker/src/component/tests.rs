//! The host against a scripted component: a shell process stands in for the program (it
//! writes the socket path to a file and lives until told to stop) and a test thread speaks
//! the protocol on the socket, so handshake, deadlines and crashes are exercised without any
//! SDK.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use videoflow_core::component::proto::{
    ComponentMessage, Hello, Output, Payload as WirePayload, Result as CallResult, WorkerMessage,
    component_message, worker_message::Body,
};
use videoflow_core::errors::ErrorCode;

use super::frame::{read_frame, write_frame};
use super::*;

/// A scratch directory per test.
fn scratch() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vf-host-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

/// The stand-in program: records `$VF_COMPONENT_SOCKET` in `dir/socket`, then waits for
/// `dir/done` and exits with `code`.
fn program(dir: &Path, code: i32) -> Vec<String> {
    let script = format!(
        "printf %s \"$VF_COMPONENT_SOCKET\" > '{d}/socket.tmp' && mv '{d}/socket.tmp' '{d}/socket'; \
         while [ ! -e '{d}/done' ]; do sleep 0.02; done; exit {code}",
        d = dir.display()
    );
    vec!["sh".into(), "-c".into(), script]
}

/// Connects as the component once the program has published the socket path.
fn connect(dir: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(path) = std::fs::read_to_string(dir.join("socket"))
            && let Ok(s) = UnixStream::connect(path.trim())
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "the program never published its socket"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn hello(versions: Vec<u32>) -> ComponentMessage {
    hello_pipelined(versions, 0)
}

fn hello_pipelined(versions: Vec<u32>, max_in_flight: u32) -> ComponentMessage {
    ComponentMessage {
        body: Some(component_message::Body::Hello(Hello {
            protocol_versions: versions,
            pid: std::process::id(),
            sdk: "test".into(),
            max_in_flight,
            ..Hello::default()
        })),
    }
}

fn result(r: CallResult) -> ComponentMessage {
    ComponentMessage {
        body: Some(component_message::Body::Result(r)),
    }
}

fn recv(s: &mut UnixStream) -> WorkerMessage {
    read_frame(s).expect("reads").expect("a request")
}

/// Runs `script` as the component on the socket, then lets the program exit.
fn component(dir: &Path, script: impl FnOnce(&mut UnixStream) + Send + 'static) -> JoinHandle<()> {
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let mut s = connect(&dir);
        script(&mut s);
        let _ = std::fs::write(dir.join("done"), b"");
    })
}

fn quick() -> HostOptions {
    HostOptions {
        start_timeout: Duration::from_secs(10),
        call_timeout: Some(Duration::from_secs(10)),
    }
}

#[test]
fn handshake_open_process_close() {
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello(vec![1, 9])).expect("hello");
        let open = recv(s);
        assert_eq!(open.request_id, 1);
        let Some(Body::Open(o)) = open.body else {
            panic!("open first: {open:?}")
        };
        assert_eq!(o.protocol_version, 1, "highest common version");
        assert_eq!(o.params_json, "{\"x\":1}");
        write_frame(
            s,
            &result(CallResult {
                request_id: 1,
                ..CallResult::default()
            }),
        )
        .expect("open result");
        let req = recv(s);
        assert_eq!(req.request_id, 2, "request ids increase");
        let Some(Body::Process(p)) = req.body else {
            panic!("process: {req:?}")
        };
        assert_eq!(p.input_key, "k");
        write_frame(
            s,
            &result(CallResult {
                request_id: 2,
                output: Some(Output {
                    payload: Some(WirePayload {
                        payload_type: "my.Type".into(),
                        data: vec![1, 2, 3],
                    }),
                    ..Output::default()
                }),
                ..CallResult::default()
            }),
        )
        .expect("process result");
        let close = recv(s);
        assert!(matches!(close.body, Some(Body::Close(_))));
        write_frame(
            s,
            &result(CallResult {
                request_id: close.request_id,
                ..CallResult::default()
            }),
        )
        .expect("close result");
    });
    let host = ComponentHost::start(&program(&dir, 0), quick()).expect("starts");
    assert_eq!(host.version(), 1);
    assert_eq!(host.hello().sdk, "test");
    assert!(host.pid().is_some());
    let mut node = ExecProcessor(ExecNode::new(
        host,
        NodeIdentity::default(),
        "{\"x\":1}".into(),
    ));
    let mut ctx = crate::nodes::NodeContext::new("f", "r", "n", 0);
    crate::nodes::Processor::open(&mut node, &mut ctx).expect("opens");
    ctx.begin_group(Some("k".into()), Vec::new());
    let out = crate::nodes::Processor::process(&mut node, &mut ctx, &[]).expect("processes");
    assert_eq!(
        out,
        videoflow_core::envelope::Payload::Opaque {
            payload_type: "my.Type".into(),
            data: vec![1, 2, 3]
        },
        "unknown payload types pass through verbatim"
    );
    crate::nodes::Processor::close(&mut node, &mut ctx).expect("closes");
    peer.join().expect("component thread");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_common_version_is_a_contract_error() {
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello(vec![7])).expect("hello");
    });
    let e = ComponentHost::start(&program(&dir, 0), quick()).expect_err("refused");
    assert_eq!(e.code, ErrorCode::NodeContract, "{e:?}");
    assert!(e.message.contains("[7]"), "{}", e.message);
    peer.join().expect("component thread");
}

#[test]
fn a_missing_program_is_a_config_error() {
    let e = ComponentHost::start(&["/nonexistent/vf-component".to_owned()], quick())
        .expect_err("refused");
    assert_eq!(e.code, ErrorCode::Config);
    assert!(e.message.contains("/nonexistent/vf-component"));
}

#[test]
fn exiting_before_connecting_is_worker_fatal() {
    let argv = vec!["sh".into(), "-c".into(), "echo oops >&2; exit 3".into()];
    let e = ComponentHost::start(&argv, quick()).expect_err("refused");
    assert_eq!(e.code, ErrorCode::WorkerFatal);
    assert!(e.message.contains("exited with status 3"), "{}", e.message);
}

#[test]
fn not_connecting_in_time_is_worker_fatal() {
    let argv = vec!["sleep".into(), "30".into()];
    let started = Instant::now();
    let e = ComponentHost::start(
        &argv,
        HostOptions {
            start_timeout: Duration::from_millis(300),
            ..quick()
        },
    )
    .expect_err("refused");
    assert_eq!(e.code, ErrorCode::WorkerFatal);
    assert!(e.message.contains("did not connect"), "{}", e.message);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_crash_during_a_call_is_worker_fatal_and_sticky() {
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello(vec![1])).expect("hello");
        let _ = recv(s); // the request it dies on
    });
    let mut host = ComponentHost::start(&program(&dir, 9), quick()).expect("starts");
    let e = host
        .call(Body::Next(Default::default()), "next")
        .expect_err("crashed");
    assert_eq!(e.code, ErrorCode::WorkerFatal);
    assert!(e.message.contains("exited with status 9"), "{}", e.message);
    peer.join().expect("component thread");
    let again = host
        .call(Body::Next(Default::default()), "next")
        .expect_err("sticky");
    assert_eq!(again, e);
    assert!(host.pid().is_none(), "reaped");
    host.close().expect("closing a dead component is quiet");
}

/// A call the host still allows (within its deadline) keeps the liveness beat fresh: a slow
/// `open()` or `process()` must not make `/healthz` fail before the host's own deadline does
/// (HEALTH-2 counts beats; the kubelet restarts a container whose beats lapse).
#[test]
fn a_call_within_its_deadline_keeps_the_liveness_beat_fresh() {
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello(vec![1])).expect("hello");
        let req = recv(s);
        std::thread::sleep(Duration::from_millis(1500));
        write_frame(
            s,
            &result(CallResult {
                request_id: req.request_id,
                ..CallResult::default()
            }),
        )
        .expect("late answer");
        let _ = read_frame::<_, WorkerMessage>(s);
    });
    let state = crate::health::install(crate::health::HealthState::new("n"));
    let mut host = ComponentHost::start(
        &program(&dir, 0),
        HostOptions {
            call_timeout: Some(Duration::from_secs(4)),
            ..quick()
        },
    )
    .expect("starts");
    state.beat();
    let started = Instant::now();
    host.call(Body::Next(Default::default()), "next")
        .expect("answered within the deadline");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert!(
        state.since_last_beat() < Duration::from_millis(800),
        "the host beat while it waited: last beat {:?} ago after a {:?} call",
        state.since_last_beat(),
        started.elapsed()
    );
    drop(host);
    peer.join().expect("component thread");
}

#[test]
fn a_missed_deadline_kills_the_component() {
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello(vec![1])).expect("hello");
        let _ = recv(s);
        // No answer; the host kills the program, the socket closes.
        let _ = read_frame::<_, WorkerMessage>(s);
    });
    let mut host = ComponentHost::start(
        &program(&dir, 0),
        HostOptions {
            call_timeout: Some(Duration::from_millis(300)),
            ..quick()
        },
    )
    .expect("starts");
    let e = host
        .call(Body::Next(Default::default()), "next")
        .expect_err("deadline");
    assert_eq!(e.code, ErrorCode::WorkerFatal);
    assert!(e.message.contains("did not answer next"), "{}", e.message);
    assert!(host.pid().is_none(), "killed");
    drop(host);
    peer.join().expect("component thread");
}

#[test]
fn an_answer_to_another_request_is_a_contract_error() {
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello(vec![1])).expect("hello");
        let req = recv(s);
        write_frame(
            s,
            &result(CallResult {
                request_id: req.request_id + 5,
                ..CallResult::default()
            }),
        )
        .expect("wrong id");
        let _ = read_frame::<_, WorkerMessage>(s);
    });
    let mut host = ComponentHost::start(&program(&dir, 0), quick()).expect("starts");
    let e = host
        .call(Body::Next(Default::default()), "next")
        .expect_err("violation");
    assert_eq!(e.code, ErrorCode::NodeContract);
    drop(host);
    peer.join().expect("component thread");
}

/// Answers `open` (request 1) as a scripted component does.
fn answer_open(s: &mut UnixStream) {
    let open = recv(s);
    assert!(matches!(open.body, Some(Body::Open(_))), "{open:?}");
    write_frame(
        s,
        &result(CallResult {
            request_id: open.request_id,
            ..CallResult::default()
        }),
    )
    .expect("open result");
}

/// The answer to a `Process` request: its one input's payload bytes, echoed.
fn echo(req: &WorkerMessage) -> ComponentMessage {
    let Some(Body::Process(p)) = &req.body else {
        panic!("process: {req:?}")
    };
    let Some(videoflow_core::component::proto::input::Kind::Present(payload)) =
        p.inputs.first().and_then(|i| i.kind.clone())
    else {
        panic!("one present input: {p:?}")
    };
    result(CallResult {
        request_id: req.request_id,
        output: Some(Output {
            payload: Some(payload),
            ..Output::default()
        }),
        ..CallResult::default()
    })
}

fn int_input(i: i64) -> [crate::nodes::Input; 1] {
    [crate::nodes::Input::Present(
        videoflow_core::envelope::Payload::Value(videoflow_core::value::Value::Int(i)),
    )]
}

fn pipelined_node(dir: &Path, exit_code: i32) -> ExecProcessor {
    let host = ComponentHost::start(&program(dir, exit_code), quick()).expect("starts");
    ExecProcessor(ExecNode::new(host, NodeIdentity::default(), "{}".into()))
}

#[test]
fn the_host_caps_what_the_component_accepts() {
    for (announced, used) in [(0, 1), (1, 1), (4, 4), (1000, HOST_MAX_IN_FLIGHT)] {
        let dir = scratch();
        let peer = component(&dir, move |s| {
            write_frame(s, &hello_pipelined(vec![1], announced)).expect("hello");
        });
        let host = ComponentHost::start(&program(&dir, 0), quick()).expect("starts");
        assert_eq!(
            host.max_in_flight(),
            used,
            "Hello.max_in_flight {announced}"
        );
        drop(host);
        peer.join().expect("component thread");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn several_requests_are_in_flight_and_outputs_come_back_in_input_order() {
    use crate::nodes::Processor as _;
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello_pipelined(vec![1], 4)).expect("hello");
        answer_open(s);
        // Two rounds: take four requests before answering any (so four are outstanding at
        // once), then answer them last first.
        for _ in 0..2 {
            let reqs: Vec<WorkerMessage> = (0..4).map(|_| recv(s)).collect();
            for r in reqs.iter().rev() {
                write_frame(s, &echo(r)).expect("answer");
            }
        }
        let close = recv(s);
        assert!(matches!(close.body, Some(Body::Close(_))));
        write_frame(
            s,
            &result(CallResult {
                request_id: close.request_id,
                ..CallResult::default()
            }),
        )
        .expect("close result");
    });
    let mut node = pipelined_node(&dir, 0);
    assert_eq!(node.max_in_flight(), 4);
    let mut ctx = crate::nodes::NodeContext::new("f", "r", "n", 0);
    node.open(&mut ctx).expect("opens");
    let mut outputs = Vec::new();
    for round in 0..2 {
        for i in 0..4 {
            node.submit(&mut ctx, &int_input(round * 4 + i))
                .expect("submits");
        }
        assert_eq!(node.0.host().in_flight(), 4);
        for _ in 0..4 {
            outputs.push(node.complete(&mut ctx).expect("completes"));
        }
    }
    let want: Vec<_> = (0..8)
        .map(|i| videoflow_core::envelope::Payload::Value(videoflow_core::value::Value::Int(i)))
        .collect();
    assert_eq!(outputs, want, "input order, whatever the answer order");
    node.close(&mut ctx).expect("closes");
    peer.join().expect("component thread");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crash_with_several_in_flight_fails_every_one_of_them() {
    use crate::nodes::Processor as _;
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello_pipelined(vec![1], 8)).expect("hello");
        answer_open(s);
        let first = recv(s);
        write_frame(s, &echo(&first)).expect("answer");
        for _ in 0..3 {
            let _ = recv(s); // taken, never answered: the component dies
        }
    });
    let mut node = pipelined_node(&dir, 9);
    let mut ctx = crate::nodes::NodeContext::new("f", "r", "n", 0);
    node.open(&mut ctx).expect("opens");
    for i in 0..4 {
        node.submit(&mut ctx, &int_input(i)).expect("submits");
    }
    assert_eq!(
        node.complete(&mut ctx).expect("the first was answered"),
        videoflow_core::envelope::Payload::Value(videoflow_core::value::Value::Int(0))
    );
    for _ in 1..4 {
        let e = node.complete(&mut ctx).expect_err("the component died");
        assert_eq!(e.code, ErrorCode::WorkerFatal, "{e:?}");
        assert!(e.message.contains("exited with status 9"), "{}", e.message);
    }
    peer.join().expect("component thread");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn large_frames_both_ways_do_not_deadlock() {
    // A single-threaded component that answers while requests queue behind: it writes each
    // answer (4 MiB) without reading, while the host writes the next request (4 MiB). The
    // host takes answers in while its write waits, so both sides make progress.
    use crate::nodes::Processor as _;
    const BIG: usize = 4 << 20;
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello_pipelined(vec![1], 4)).expect("hello");
        answer_open(s);
        for _ in 0..6 {
            let r = recv(s);
            write_frame(s, &echo(&r)).expect("answer");
        }
    });
    let mut node = pipelined_node(&dir, 0);
    let mut ctx = crate::nodes::NodeContext::new("f", "r", "n", 0);
    node.open(&mut ctx).expect("opens");
    let big = |i: u8| {
        [crate::nodes::Input::Present(
            videoflow_core::envelope::Payload::Opaque {
                payload_type: "my.Blob".into(),
                data: vec![i; BIG],
            },
        )]
    };
    let started = Instant::now();
    let mut got = Vec::new();
    for i in 0..6u8 {
        if node.0.host().in_flight() == 4 {
            got.push(node.complete(&mut ctx).expect("completes"));
        }
        node.submit(&mut ctx, &big(i)).expect("submits");
    }
    while node.0.host().in_flight() > 0 {
        got.push(node.complete(&mut ctx).expect("completes"));
    }
    assert!(started.elapsed() < Duration::from_secs(8), "no deadlock");
    for (i, out) in got.iter().enumerate() {
        let videoflow_core::envelope::Payload::Opaque { data, .. } = out else {
            panic!("opaque")
        };
        assert_eq!((data.len(), data[0]), (BIG, i as u8));
    }
    drop(node);
    peer.join().expect("component thread");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_call_at_a_time_still_refuses_an_answer_to_nothing() {
    // A component answering a request twice breaks the protocol, pipelined or not.
    use crate::nodes::Processor as _;
    let dir = scratch();
    let peer = component(&dir, |s| {
        write_frame(s, &hello_pipelined(vec![1], 2)).expect("hello");
        answer_open(s);
        let r = recv(s);
        write_frame(s, &echo(&r)).expect("answer");
        write_frame(s, &echo(&r)).expect("again");
        let _ = read_frame::<_, WorkerMessage>(s);
    });
    let mut node = pipelined_node(&dir, 0);
    let mut ctx = crate::nodes::NodeContext::new("f", "r", "n", 0);
    node.open(&mut ctx).expect("opens");
    node.submit(&mut ctx, &int_input(1)).expect("submits");
    node.complete(&mut ctx).expect("the first answer");
    node.submit(&mut ctx, &int_input(2)).expect("submits");
    let e = node.complete(&mut ctx).expect_err("violation");
    assert_eq!(e.code, ErrorCode::NodeContract, "{e:?}");
    drop(node);
    peer.join().expect("component thread");
    let _ = std::fs::remove_dir_all(&dir);
}
