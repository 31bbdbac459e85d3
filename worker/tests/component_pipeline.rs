//! Pipelining to an exec component: several requests in flight at once, results
//! taken back in input order, and a crash with several in flight loses no input.
//!
//! ```text
//!   numbers (IntProducer, N) ─ hold (raw-protocol Python: x + 1000) ─ sink (JsonlSink)
//! ```
//!
//! `hold` is a component written against the protocol itself (the SDK's framing helpers,
//! not its serve loop): it announces `max_in_flight: 4`, keeps every request it reads until
//! four are outstanding or none has come for 20 ms, then answers them **last first**, and
//! records the most it ever held. So the sink's order proves the worker publishes in input
//! order whatever order the answers come in, and the count proves the worker really had
//! several requests outstanding. With `crash_after`, the first component to hold two or more
//! requests after that many answers exits with status 9 instead (a marker file keeps the
//! restarted one alive).

mod flows_common;
mod support;

use std::time::Duration;

use flows_common::{assert_none_lost, batch_flow, int_value, numbers_to_sink};
use support::{FlowHarness, sdk_dir, sdk_python};

const N: i64 = 200;
const OPERAND: i64 = 1000;

const HOLD: &str = r#"
import json, os, select, socket, sys
from videoflow_sdk import _protocol as p
from videoflow_sdk.payloads import decode_payload, encode_payload

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.environ["VF_COMPONENT_SOCKET"])
hello = p.ComponentMessage()
hello.hello.protocol_versions.append(1)
hello.hello.pid = os.getpid()
hello.hello.sdk = "hold-test"
hello.hello.max_in_flight = 4
p.write_frame(sock, hello)
reader = p.FrameReader(sock)
params = {}
held = []
state = {"answered": 0, "max": 0}


def answer(req):
    r = p.ComponentMessage()
    r.result.request_id = req.request_id
    if req.WhichOneof("body") == "process":
        inp = req.process.inputs[0].present
        x = decode_payload(inp.payload_type, inp.data)
        t, d = encode_payload(x + params.get("operand", 0))
        r.result.output.payload.payload_type = t
        r.result.output.payload.data = d
    sock.sendall(p.frame_bytes(r))


def note(name, value):
    path = os.path.join(params["dir"], name)
    with open(path + ".tmp", "w") as f:
        f.write(str(value))
    os.replace(path + ".tmp", path)


def flush():
    state["max"] = max(state["max"], len(held))
    note("max_outstanding", state["max"])
    crash_after = params.get("crash_after")
    marker = os.path.join(params["dir"], "crashed_with")
    if crash_after and state["answered"] >= crash_after and len(held) >= 2 \
            and not os.path.exists(marker):
        note("crashed_with", len(held))
        os._exit(9)
    for req in reversed(held):
        answer(req)
        state["answered"] += 1
    del held[:]


while True:
    msg = reader.next_buffered(p.WorkerMessage)
    if msg is None:
        if held and not select.select([sock], [], [], 0.02)[0]:
            flush()
            continue
        if not reader.fill():
            sys.exit(0)
        continue
    which = msg.WhichOneof("body")
    if which == "open":
        params = json.loads(msg.open.params_json or "{}")
        answer(msg)
    elif which == "close":
        flush()
        answer(msg)
        sys.exit(0)
    else:
        held.append(msg)
        if len(held) >= 4:
            flush()
"#;

fn flow_yaml(python: &str, crash_after: i64) -> String {
    let hold = format!(
        r#"    component: {{exec: {{command: ["{python}", "{{{{DIR}}}}/hold.py"]}}}}
    params: {{operand: {OPERAND}, dir: "{{{{DIR}}}}", crash_after: {crash_after}}}
"#
    );
    batch_flow("comp-pipe", "", &numbers_to_sink(N, "hold", &hold, ""))
}

/// The flow with `hold` written out, provisioned and every node started (`hold` with the SDK
/// on its `PYTHONPATH`, which is returned for a restart).
fn started(crash_after: i64) -> (FlowHarness, String) {
    let python = sdk_python();
    let mut h = FlowHarness::new(&flow_yaml(&python.display().to_string(), crash_after));
    std::fs::write(h.dir.join("hold.py"), HOLD).expect("write the component");
    let pythonpath = sdk_dir().display().to_string();
    h.provision();
    h.spawn("numbers", 0, &[]);
    h.spawn("hold", 0, &[("PYTHONPATH", &pythonpath)]);
    h.spawn("sink", 0, &[]);
    (h, pythonpath)
}

fn read_count(h: &FlowHarness, name: &str) -> Option<i64> {
    std::fs::read_to_string(h.dir.join(name))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

#[test]
fn several_requests_are_in_flight_and_outputs_keep_input_order() {
    let (mut h, _) = started(0);
    h.wait_all_ok(Duration::from_secs(120));
    let values: Vec<i64> = h.jsonl("out.jsonl").iter().map(int_value).collect();
    let want: Vec<i64> = (0..N).map(|x| x + OPERAND).collect();
    assert_eq!(
        values,
        want,
        "every output, in input order, although the component answers last first; logs:\n{}",
        h.all_logs()
    );
    let most = read_count(&h, "max_outstanding").expect("the component recorded its count");
    assert!(
        most >= 2,
        "at most {most} request(s) were outstanding at once; logs:\n{}",
        h.all_logs()
    );
    eprintln!("pipelining: up to {most} requests outstanding at once");
}

#[test]
fn a_crash_with_several_in_flight_hands_every_input_back() {
    let (mut h, pythonpath) = started(30);
    // The first worker fails when its component dies with several requests outstanding.
    let record = h.wait_for_termination("hold", 0, Duration::from_secs(60));
    assert_eq!(record["code"], "VF_WORKER_FATAL", "{record}");
    assert!(
        record["message"]
            .as_str()
            .unwrap_or_default()
            .contains("exited with status 9"),
        "{record}"
    );
    let crashed_with = read_count(&h, "crashed_with").expect("the component crashed");
    assert!(crashed_with >= 2, "{crashed_with} in flight at the crash");
    // The platform restarts the worker (here: the test), with a fresh component. The inputs
    // in flight come back once the dead worker's deliveries are NAKed.
    std::thread::sleep(Duration::from_millis(300));
    h.spawn("hold", 0, &[("PYTHONPATH", &pythonpath)]);
    let exits = h.wait_all(Duration::from_secs(120));
    let failed = h.the_one_abnormal_exit(&exits);
    assert_eq!(
        (failed.node.as_str(), failed.code),
        ("hold", Some(4)),
        "{exits:?}"
    );
    assert_none_lost(
        &h,
        (0..N).map(|x| x + OPERAND),
        &format!("({crashed_with} were in flight at the crash)"),
    );
    eprintln!("crash with {crashed_with} requests in flight: no input lost");
}
