//! Bind-time profile verification in the worker (ADM-3, ENV-13, START-1 step 3) against a
//! real nats-server: explicit profile requests are read back over the worker's own
//! connection before anything opens, and refused with the class's exit code.
//!
//! ```text
//!   numbers (IntProducer, N) ─ sink (JsonlSink)        BATCH: interest / discard-new
//! ```

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::FlowHarness;
use videoflow_core::errors::ErrorCode;
use videoflow_worker::admission::verify_bound_profiles;
use videoflow_worker::config::WorkerConfig;

const N: i64 = 20;

fn flow_yaml() -> String {
    format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: bind}}
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: {last}}}
  - name: sink
    kind: consumer
    parents: [numbers]
    component: {{builtin: videoflow.rs.consumers.JsonlSink}}
    params: {{path: "{{{{DIR}}}}/out.jsonl"}}
"#,
        last = N - 1
    )
}

fn requests(channel: &str, profile: &str) -> String {
    format!(r#"[{{"channel": "{channel}", "profile": "{profile}"}}]"#)
}

/// `node`'s configuration with `extra` on top of what a control plane renders.
fn config(h: &FlowHarness, node: &str, extra: &[(&str, &str)]) -> WorkerConfig {
    let mut vars: BTreeMap<String, String> = h.vars(node, 0);
    for (k, v) in extra {
        vars.insert((*k).to_owned(), (*v).to_owned());
    }
    WorkerConfig::from_env(&vars).unwrap_or_else(|e| panic!("{}", e.render()))
}

/// ADM-3 + ADM-4: a BATCH parent stream cannot carry `live_latest`; the sink is refused with
/// IncompatibleProfile (exit 2) and the ADM-3 message, before `open()` (its output file is
/// never created) and without consuming anything.
#[test]
fn adm3_worker_refuses_a_profile_its_parent_stream_cannot_carry_before_open() {
    let mut h = FlowHarness::new(&flow_yaml());
    h.provision();
    let reqs = requests("numbers", "live_latest");
    h.spawn("sink", 0, &[("VF_PROFILE_REQUESTS_JSON", &reqs)]);
    let exits = h.wait_all(Duration::from_secs(30));
    assert_eq!(exits[0].code, Some(2), "logs:\n{}", h.all_logs());
    let record = h.termination("sink", 0).expect("termination record");
    assert_eq!(record["code"], "VF_INCOMPATIBLE_PROFILE", "{record}");
    let message = record["message"].as_str().unwrap_or_default();
    let stream = videoflow_core::naming::stream_name(&h.flow.flow_id, &h.flow.run_id, "numbers");
    assert_eq!(
        message,
        format!(
            "worker sink: the provisioned streams do not carry the requested profiles:\n  - channel 'numbers' requests live_latest, but its stream {stream} carries: retention: interest holds messages for consumers instead of keeping the latest; discard: new rejects new publishes at the limit instead of dropping the oldest"
        )
    );
    assert!(
        !h.dir.join("out.jsonl").exists(),
        "the sink must be refused before open()"
    );
    assert!(
        h.log("sink", 0)
            .contains("VF_INCOMPATIBLE_PROFILE: worker sink:"),
        "ADM-4 log line; log:\n{}",
        h.log("sink", 0)
    );
}

/// ADM-3: requests the streams can meet are verified at bind and the flow runs to the end.
#[test]
fn adm3_workers_with_profiles_the_streams_carry_run() {
    let mut h = FlowHarness::new(&flow_yaml());
    h.provision();
    let reqs = requests("numbers", "reliable_work");
    for node in ["sink", "numbers"] {
        h.spawn(node, 0, &[("VF_PROFILE_REQUESTS_JSON", &reqs)]);
    }
    let exits = h.wait_all(Duration::from_secs(60));
    h.assert_all_ok(&exits);
    assert_eq!(h.jsonl("out.jsonl").len() as i64, N);
    assert!(
        h.log("sink", 0)
            .contains("explicit channel profiles verified at bind"),
        "log:\n{}",
        h.log("sink", 0)
    );
}

/// ADM-3: a requested channel whose stream was never provisioned is BrokerUnavailable
/// (exit 3), naming the stream.
#[test]
fn adm3_missing_stream_is_broker_unavailable() {
    let h = FlowHarness::new(&flow_yaml()); // not provisioned
    let reqs = requests("numbers", "reliable_work");
    let cfg = config(&h, "sink", &[("VF_PROFILE_REQUESTS_JSON", &reqs)]);
    let e = h
        .block_on(verify_bound_profiles(&cfg))
        .expect_err("missing stream");
    assert_eq!(e.code, ErrorCode::BrokerUnavailable);
    assert_eq!(e.exit_code(), 3);
    assert!(
        e.message
            .starts_with("worker sink: requested channels have no stream on the broker:\n  - channel 'numbers' (reliable_work): stream "),
        "{}",
        e.message
    );
}

/// ADM-3: a broker that cannot be read back within `VF_ADMISSION_TIMEOUT_SECONDS` is
/// UnobservableState (exit 3); an explicit request never passes on an unread guarantee.
#[test]
fn adm3_unreachable_broker_is_unobservable_within_the_timeout() {
    let h = FlowHarness::new(&flow_yaml());
    let reqs = requests("numbers", "reliable_work");
    let cfg = config(
        &h,
        "sink",
        &[
            ("VF_PROFILE_REQUESTS_JSON", &reqs),
            ("VF_NATS_URL", "nats://127.0.0.1:1"),
            ("VF_ADMISSION_TIMEOUT_SECONDS", "1"),
        ],
    );
    let started = std::time::Instant::now();
    let e = h
        .block_on(verify_bound_profiles(&cfg))
        .expect_err("unreachable");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(e.code, ErrorCode::StateUnknown);
    assert_eq!(e.exit_code(), 3);
    assert!(
        e.message.starts_with(
            "worker sink: requested channels could not be read back from the broker:\n  - channel 'numbers' (reliable_work): "
        ),
        "{}",
        e.message
    );
}

/// ADM-3: requests for channels the worker neither publishes to (with children) nor reads
/// are other workers' to judge — nothing is read, even from an unreachable broker. A
/// producer without children checks nothing of its own.
#[test]
fn adm3_requests_for_other_channels_are_ignored() {
    let h = FlowHarness::new(&flow_yaml());
    let unreachable = [("VF_NATS_URL", "nats://127.0.0.1:1")];
    let other = requests("elsewhere", "reliable_work");
    let cfg = config(
        &h,
        "sink",
        &[unreachable[0], ("VF_PROFILE_REQUESTS_JSON", &other)],
    );
    h.block_on(verify_bound_profiles(&cfg))
        .unwrap_or_else(|e| panic!("{}", e.render()));
    // The sink has no children: a request on its own channel is not its to check.
    let own = requests("sink", "reliable_work");
    let cfg = config(
        &h,
        "sink",
        &[unreachable[0], ("VF_PROFILE_REQUESTS_JSON", &own)],
    );
    h.block_on(verify_bound_profiles(&cfg))
        .unwrap_or_else(|e| panic!("{}", e.render()));
}
