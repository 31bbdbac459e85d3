//! The built-in node library through its public API (design §5, START-1 steps 5 and 11).
//!
//! Expected outputs are what videoflow 1.0.4's classes return for the same inputs (checked
//! against the reference); params are the dicts its `get_params()` emits, base-class keys
//! included, so a flow compiled by the Python tooling builds here unchanged.

use std::path::PathBuf;

use serde_json::{Map, Value as Json, json};
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::NodeKind;
use videoflow_core::value::{Tensor, Value};
use videoflow_worker::nodes::consumers::JsonlSink;
use videoflow_worker::nodes::producers::verify_synthetic_frame;
use videoflow_worker::nodes::{
    BuiltNode, Consumer, ConsumerOptions, EnvelopeInfo, Input, InputInfo, NodeContext, Processor,
    Producer, build_node, canonical_class, known_classes, normalize_output,
};

fn params(j: Json) -> Map<String, Json> {
    match j {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

fn producer(class: &str, p: Json) -> Box<dyn Producer> {
    match build_node(class, NodeKind::Producer, &params(p)) {
        Ok(BuiltNode::Producer(p)) => p,
        other => panic!("{class}: expected a producer, got {other:?}"),
    }
}

fn processor(class: &str, p: Json) -> Box<dyn Processor> {
    match build_node(class, NodeKind::Processor, &params(p)) {
        Ok(BuiltNode::Processor(p)) => p,
        other => panic!("{class}: expected a processor, got {other:?}"),
    }
}

fn consumer(class: &str, p: Json) -> (Box<dyn Consumer>, ConsumerOptions) {
    match build_node(class, NodeKind::Consumer, &params(p)) {
        Ok(BuiltNode::Consumer { node, options }) => (node, options),
        other => panic!("{class}: expected a consumer, got {other:?}"),
    }
}

fn err_of<T>(r: Result<T, VfError>) -> VfError {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

fn v(x: Value) -> Input {
    Input::Present(Payload::Value(x))
}

fn drain(p: &mut dyn Producer) -> Vec<Payload> {
    let mut ctx = NodeContext::new("f", "r", "src", 0);
    let mut out = Vec::new();
    while let Some(item) = p.next(&mut ctx).ok().flatten() {
        out.push(item);
    }
    out
}

/// Runs a single-input processor over `inputs`, one group each; errors become their code.
fn run(class: &str, inputs: Vec<Value>) -> Vec<Result<Value, ErrorCode>> {
    let mut p = processor(class, json!({}));
    let mut ctx = NodeContext::new("f", "r", "agg", 0);
    inputs
        .into_iter()
        .map(|x| match p.process(&mut ctx, &[v(x)]) {
            Ok(Payload::Value(out)) => Ok(out),
            Ok(other) => panic!("{class}: non-value output {other:?}"),
            Err(e) => Err(e.code),
        })
        .collect()
}

fn ints(xs: &[i64]) -> Vec<Result<Value, ErrorCode>> {
    xs.iter().map(|i| Ok(Value::Int(*i))).collect()
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vf-nodes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("out").join(name)
}

#[test]
fn int_producer_with_python_get_params() {
    // IntProducer(end_value=3, fps=50).get_params() in 1.0.4.
    let p = json!({"name": "intproducer-1", "image": null, "is_finite": true, "start_value": 0,
                   "end_value": 3, "wait_time_in_seconds": 0.02, "fps": 50});
    let mut node = producer("videoflow.producers.basic.IntProducer", p);
    let start = std::time::Instant::now();
    let got = drain(node.as_mut());
    let want: Vec<Payload> = (0..=3).map(|i| Payload::Value(Value::Int(i))).collect();
    assert_eq!(got, want);
    // Four yields at 1/fps each; the terminating call does not sleep.
    assert!(start.elapsed() >= std::time::Duration::from_millis(80));
}

#[test]
fn int_producer_short_package_name_and_start_value() {
    let mut node = producer(
        "videoflow.producers.IntProducer",
        json!({"start_value": -2, "end_value": 0}),
    );
    let want: Vec<Payload> = (-2..=0).map(|i| Payload::Value(Value::Int(i))).collect();
    assert_eq!(drain(node.as_mut()), want);
}

#[test]
fn int_producer_without_end_keeps_going() {
    let mut node = producer(
        "videoflow.producers.IntProducer",
        json!({"end_value": null}),
    );
    let mut ctx = NodeContext::default();
    for i in 0..1000 {
        assert_eq!(node.next(&mut ctx), Ok(Some(Payload::Value(Value::Int(i)))));
    }
}

#[test]
fn synthetic_frames_are_verifiable() {
    let mut node = producer(
        "videoflow.rs.producers.SyntheticFrameProducer",
        json!({"width": 5, "height": 2, "channels": 3, "count": 3}),
    );
    let frames = drain(node.as_mut());
    assert_eq!(frames.len(), 3);
    for (i, f) in frames.iter().enumerate() {
        let Payload::Tensor(t) = f else {
            panic!("not a tensor: {f:?}")
        };
        assert_eq!(t.shape, vec![2, 5, 3]);
        assert_eq!(t.dtype, "uint8");
        assert_eq!(verify_synthetic_frame(t), Some(i as u64));
    }
}

#[test]
fn identity_with_python_get_params_passes_everything_through() {
    let p = json!({"name": "identityprocessor-1", "image": null, "nb_tasks": 1,
                   "device_type": "cpu", "partition_by": null, "join_policy": null,
                   "gpu_count": 1, "gpu_memory_gib": null, "delivery": null,
                   "on_error": null, "fps": -1});
    let mut node = processor("videoflow.processors.basic.IdentityProcessor", p);
    let mut ctx = NodeContext::default();
    let frame = Payload::Frame(Default::default());
    for input in [
        Payload::Value(Value::from("a")),
        Payload::Tensor(Tensor {
            shape: vec![2],
            dtype: "float32".into(),
            data: vec![0; 8].into(),
        }),
        frame,
    ] {
        assert_eq!(
            node.process(&mut ctx, &[Input::Present(input.clone())]),
            Ok(input)
        );
    }
    // A missing quorum parent is Python's None, published as a null Value (never skipped).
    assert_eq!(
        node.process(&mut ctx, &[Input::Missing]),
        Ok(Payload::Value(Value::Null))
    );
}

#[test]
fn identity_refuses_two_parents_at_startup() {
    let node = processor("videoflow.processors.IdentityProcessor", json!({}));
    assert_eq!(node.check_inputs(1), Ok(()));
    let e = err_of(node.check_inputs(2));
    assert_eq!(e.code, ErrorCode::NodeContract);
    assert_eq!(e.exit_code(), 2);
}

#[test]
fn joiner_makes_a_list_in_parent_order() {
    let mut node = processor(
        "videoflow.processors.basic.JoinerProcessor",
        json!({"fps": 10_000}),
    );
    let t = Tensor {
        shape: vec![1, 1, 3],
        dtype: "uint8".into(),
        data: vec![1, 2, 3].into(),
    };
    let out = node.process(
        &mut NodeContext::default(),
        &[
            v(Value::Int(1)),
            Input::Present(Payload::Tensor(t.clone())),
            Input::Missing,
            Input::Collected(vec![Payload::Value(Value::Double(0.5))]),
        ],
    );
    assert_eq!(
        out,
        Ok(Payload::Value(Value::List(vec![
            Value::Int(1),
            Value::Tensor(t),
            Value::Null,
            Value::List(vec![Value::Double(0.5)]),
        ])))
    );
    // A protobuf message cannot nest in a tuple: the data is bad (poison, not a retry).
    let e = err_of(node.process(
        &mut NodeContext::default(),
        &[Input::Present(Payload::Frame(Default::default()))],
    ));
    assert_eq!(e.code, ErrorCode::PoisonSchema);
}

#[test]
fn service_time_stage_params() {
    let mut node = processor(
        "videoflow.rs.processors.ServiceTimeProcessor",
        json!({"ms": 3, "mode": "busy"}),
    );
    let start = std::time::Instant::now();
    assert_eq!(
        node.process(&mut NodeContext::default(), &[v(Value::Int(9))]),
        Ok(Payload::Value(Value::Int(9)))
    );
    assert!(start.elapsed() >= std::time::Duration::from_millis(3));
    let e = err_of(build_node(
        "videoflow.rs.processors.ServiceTimeProcessor",
        NodeKind::Processor,
        &params(json!({"mode": "nap"})),
    ));
    assert_eq!(e.code, ErrorCode::Config);
    assert!(e.message.contains("'mode'"), "{}", e.message);
}

#[test]
fn sum_aggregator_matches_python_arithmetic() {
    let c = "videoflow.processors.aggregators.SumAggregator";
    assert_eq!(
        run(c, vec![Value::Int(1), Value::Int(2), Value::Int(3)]),
        ints(&[1, 3, 6])
    );
    assert_eq!(
        run(
            c,
            vec![Value::Int(1), Value::Double(2.5), Value::Bool(true)]
        ),
        vec![
            Ok(Value::Int(1)),
            Ok(Value::Double(3.5)),
            Ok(Value::Double(4.5))
        ]
    );
    // 1.0.4: TypeError for the string, state unchanged, then 1.
    assert_eq!(
        run(c, vec![Value::from("a"), Value::Int(1)]),
        vec![Err(ErrorCode::PoisonSchema), Ok(Value::Int(1))]
    );
}

#[test]
fn multiplication_count_max_min_match_python() {
    assert_eq!(
        run(
            "videoflow.processors.MultiplicationAggregator",
            vec![Value::Int(2), Value::Int(3), Value::Double(0.5)]
        ),
        vec![Ok(Value::Int(2)), Ok(Value::Int(6)), Ok(Value::Double(3.0))]
    );
    assert_eq!(
        run(
            "videoflow.processors.CountAggregator",
            vec![Value::Null, Value::from("x"), Value::Int(1)]
        ),
        ints(&[1, 2, 3])
    );
    assert_eq!(
        run(
            "videoflow.processors.MaxAggregator",
            vec![
                Value::Int(3),
                Value::Int(1),
                Value::Int(5),
                Value::Double(2.0),
                Value::Double(f64::NAN)
            ]
        ),
        ints(&[3, 3, 5, 5, 5])
    );
    assert_eq!(
        run(
            "videoflow.processors.MaxAggregator",
            vec![Value::Double(f64::NAN), Value::Bool(true), Value::Int(1)]
        ),
        vec![
            Ok(Value::Double(f64::NEG_INFINITY)),
            Ok(Value::Bool(true)),
            Ok(Value::Bool(true))
        ]
    );
    assert_eq!(
        run(
            "videoflow.processors.aggregators.MinAggregator",
            vec![
                Value::Int(3),
                Value::Int(1),
                Value::Int(5),
                Value::Double(1.0)
            ]
        ),
        ints(&[3, 1, 1, 1])
    );
    assert_eq!(
        run("videoflow.processors.MinAggregator", vec![Value::Null]),
        vec![Err(ErrorCode::PoisonSchema)]
    );
}

#[test]
fn integer_overflow_poisons_the_input_and_keeps_the_aggregate() {
    assert_eq!(
        run(
            "videoflow.processors.MultiplicationAggregator",
            vec![Value::Int(i64::MAX), Value::Int(2), Value::Int(1)]
        ),
        vec![
            Ok(Value::Int(i64::MAX)),
            Err(ErrorCode::Poison),
            Ok(Value::Int(i64::MAX))
        ]
    );
}

#[test]
fn unknown_class_is_config_listing_known_classes() {
    let e = err_of(build_node(
        "videoflow.consumers.basic.WebhookConsumer",
        NodeKind::Consumer,
        &Map::new(),
    ));
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        e.message,
        "VF_NODE_CLASS ('videoflow.consumers.basic.WebhookConsumer') is not a built-in node \
         class of this worker."
    );
    let remedy = e.remedy.unwrap_or_default();
    for class in known_classes() {
        assert!(remedy.contains(class), "{class} missing from {remedy}");
    }
}

#[test]
fn kind_mismatch_is_node_contract_with_reference_text() {
    let e = err_of(build_node(
        "videoflow.producers.IntProducer",
        NodeKind::Consumer,
        &Map::new(),
    ));
    assert_eq!(e.code, ErrorCode::NodeContract);
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        e.message,
        "VF_NODE_KIND='consumer' requires a ConsumerNode, but VF_NODE_CLASS \
         (videoflow.producers.basic.IntProducer) is not one."
    );
    let e = err_of(build_node(
        "videoflow.consumers.basic.VoidConsumer",
        NodeKind::Processor,
        &Map::new(),
    ));
    assert_eq!(
        e.message,
        "VF_NODE_KIND='processor' requires a ProcessorNode, but VF_NODE_CLASS \
         (videoflow.consumers.basic.VoidConsumer) is not one."
    );
}

#[test]
fn bad_params_are_config_naming_the_param_before_the_kind_check() {
    let e = err_of(build_node(
        "videoflow.producers.basic.IntProducer",
        NodeKind::Producer,
        &params(json!({"start_value": "zero"})),
    ));
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(
        e.message,
        "VF_NODE_PARAMS_JSON: parameter 'start_value' of videoflow.producers.basic.IntProducer \
         must be an integer, got \"zero\"."
    );
    let e = err_of(build_node(
        "videoflow.producers.basic.IntProducer",
        NodeKind::Producer,
        &params(json!({"stop": 3})),
    ));
    assert_eq!(
        e.message,
        "VF_NODE_PARAMS_JSON: videoflow.producers.basic.IntProducer has no parameter 'stop'."
    );
    assert!(e.remedy.unwrap_or_default().contains("end_value"));
    // 1.0.4 builds the node (step 5) before it checks the kind (step 11).
    let e = err_of(build_node(
        "videoflow.producers.basic.IntProducer",
        NodeKind::Consumer,
        &params(json!({"stop": 3})),
    ));
    assert_eq!(e.code, ErrorCode::Config);
    // A processor's base params are not a consumer's.
    let e = err_of(build_node(
        "videoflow.consumers.VoidConsumer",
        NodeKind::Consumer,
        &params(json!({"nb_tasks": 2})),
    ));
    assert_eq!(e.code, ErrorCode::Config);
    // Required params.
    let e = err_of(build_node(
        "videoflow.consumers.FileAppenderConsumer",
        NodeKind::Consumer,
        &Map::new(),
    ));
    assert!(e.message.contains("'filepath'"), "{}", e.message);
}

#[test]
fn every_reference_class_has_both_names() {
    for (short, canonical) in [
        (
            "videoflow.producers.IntProducer",
            "videoflow.producers.basic.IntProducer",
        ),
        (
            "videoflow.processors.IdentityProcessor",
            "videoflow.processors.basic.IdentityProcessor",
        ),
        (
            "videoflow.processors.JoinerProcessor",
            "videoflow.processors.basic.JoinerProcessor",
        ),
        (
            "videoflow.processors.SumAggregator",
            "videoflow.processors.aggregators.SumAggregator",
        ),
        (
            "videoflow.processors.MultiplicationAggregator",
            "videoflow.processors.aggregators.MultiplicationAggregator",
        ),
        (
            "videoflow.processors.CountAggregator",
            "videoflow.processors.aggregators.CountAggregator",
        ),
        (
            "videoflow.processors.MaxAggregator",
            "videoflow.processors.aggregators.MaxAggregator",
        ),
        (
            "videoflow.processors.MinAggregator",
            "videoflow.processors.aggregators.MinAggregator",
        ),
        (
            "videoflow.consumers.CommandlineConsumer",
            "videoflow.consumers.basic.CommandlineConsumer",
        ),
        (
            "videoflow.consumers.VoidConsumer",
            "videoflow.consumers.basic.VoidConsumer",
        ),
        (
            "videoflow.consumers.FileAppenderConsumer",
            "videoflow.consumers.basic.FileAppenderConsumer",
        ),
    ] {
        assert_eq!(canonical_class(short), Some(canonical));
        assert_eq!(canonical_class(canonical), Some(canonical));
    }
    assert_eq!(canonical_class("videoflow.basic.IntProducer"), None);
}

#[test]
fn consumer_declarations_come_from_params() {
    // CommandlineConsumer().get_params() in 1.0.4, with the two flags flipped.
    let p = json!({"name": "commandlineconsumer-1", "image": null, "metadata": true,
                   "join_policy": null, "idempotent": true, "delivery": null,
                   "on_error": null, "sep": " ", "end": "\n"});
    let (_, options) = consumer("videoflow.consumers.basic.CommandlineConsumer", p);
    assert_eq!(
        options,
        ConsumerOptions {
            metadata: true,
            idempotent: true
        }
    );
    let (_, options) = consumer("videoflow.consumers.VoidConsumer", json!({}));
    assert_eq!(options, ConsumerOptions::default());
}

#[test]
fn file_appender_writes_python_str_per_line() {
    let path = temp_path("appended.txt");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).ok();
    }
    let (mut node, _) = consumer(
        "videoflow.consumers.basic.FileAppenderConsumer",
        json!({"filepath": path.to_string_lossy()}),
    );
    let mut ctx = NodeContext::default();
    for x in [
        Value::Int(1),
        Value::Double(1e-5),
        Value::List(vec![Value::from("a"), Value::Null]),
    ] {
        assert_eq!(node.consume(&mut ctx, &[v(x)]), Ok(()));
    }
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(text, "1\n1e-05\n['a', None]\n");
}

#[test]
fn file_appender_missing_folder_is_an_unclassified_os_error() {
    let path = temp_path("no-such-dir").join("x.txt");
    let (mut node, _) = consumer(
        "videoflow.consumers.FileAppenderConsumer",
        json!({"filepath": path.to_string_lossy()}),
    );
    let e = err_of(node.consume(&mut NodeContext::default(), &[v(Value::Int(1))]));
    // Outside the taxonomy: the failure ladder applies VF_ON_ERROR (ERR-2).
    assert_eq!(e.code, ErrorCode::Unknown);
    assert_eq!(e.disposition, None);
    assert!(e.message.starts_with("OSError: "), "{}", e.message);
}

fn envelope(trace: &str, seq: u64, ts: f64) -> Option<InputInfo> {
    Some(InputInfo::Single(EnvelopeInfo {
        event_ts: Some(ts),
        metadata: Default::default(),
        trace_id: trace.into(),
        seq,
        replica_id: 0,
    }))
}

#[test]
fn jsonl_sink_writes_one_parseable_line_per_group() {
    let path = temp_path("sink.jsonl");
    let (mut node, _) = consumer("videoflow.rs.consumers.JsonlSink", json!({"path": path}));
    let mut ctx = NodeContext::new("flow", "run", "sink", 1);
    assert_eq!(node.open(&mut ctx), Ok(()));
    let frame = videoflow_worker::nodes::producers::synthetic_frame(7, 2, 2, 3);
    let groups = [
        (
            "t1",
            1,
            v(Value::Map(
                [
                    ("i".to_owned(), Value::Int(2)),
                    ("d".to_owned(), Value::Double(2.0)),
                ]
                .into_iter()
                .collect(),
            )),
        ),
        ("t2", 2, Input::Present(Payload::Tensor(frame.clone()))),
    ];
    for (trace, seq, input) in groups {
        ctx.begin_group(
            Some(format!("key-{seq}")),
            vec![("src".into(), envelope(trace, seq, 100.5))],
        );
        assert_eq!(node.consume(&mut ctx, &[input]), Ok(()));
    }
    assert_eq!(node.close(&mut ctx), Ok(()));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Json::Null))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["node"], "sink");
    assert_eq!(lines[0]["replica"], 1);
    assert_eq!(lines[0]["trace_id"], "t1");
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[0]["event_ts"], 100.5);
    assert_eq!(lines[0]["input_key"], "key-1");
    assert!(lines[0]["arrival_ts"].as_f64().is_some_and(|t| t > 1e9));
    // Ints and doubles stay apart in the text.
    assert!(text.contains(r#""value":{"d":2.0,"i":2}"#), "{text}");
    let tensor = &lines[1]["value"]["$tensor"];
    assert_eq!(tensor["shape"], json!([2, 2, 3]));
    assert_eq!(
        tensor["sha256"],
        videoflow_worker::nodes::convert::sha256_hex(&frame.data)
    );
    // Index 7 little-endian, then (7 + i) mod 256 for i = 8..12.
    assert_eq!(tensor["head_hex"], "07000000000000000f101112");
}

#[test]
fn jsonl_record_lists_every_parent_of_a_join() {
    let mut ctx = NodeContext::new("flow", "run", "sink", 0);
    ctx.begin_group(
        None,
        vec![("a".into(), envelope("t", 3, 1.0)), ("b".into(), None)],
    );
    let r = JsonlSink::record(&ctx, &[v(Value::Int(1)), Input::Missing], 5.0);
    assert_eq!(r["value"], json!([1, null]));
    assert_eq!(r["trace_id"], "t");
    assert_eq!(
        r["parents"],
        json!({"a": {"trace_id": "t", "seq": 3, "event_ts": 1.0}, "b": null})
    );
}

#[test]
fn python_none_output_is_a_null_value() {
    assert_eq!(normalize_output(Payload::None), Payload::Value(Value::Null));
    assert_eq!(
        normalize_output(Payload::Value(Value::Int(1))),
        Payload::Value(Value::Int(1))
    );
}

/// A rate or a span no clock can wait out (`fps` 1e-320 gives a period of `inf`; `1e300`
/// seconds) is a ConfigError naming the parameter, not a panic when the node is built.
#[test]
fn seconds_and_rates_beyond_any_clock_are_refused_naming_the_parameter() {
    for (class, kind, p, name) in [
        (
            "videoflow.producers.basic.IntProducer",
            NodeKind::Producer,
            json!({"fps": 1e-320}),
            "fps",
        ),
        (
            "videoflow.producers.basic.IntProducer",
            NodeKind::Producer,
            json!({"wait_time_in_seconds": 1e300}),
            "wait_time_in_seconds",
        ),
        (
            "videoflow.processors.basic.IdentityProcessor",
            NodeKind::Processor,
            json!({"fps": 1e-300}),
            "fps",
        ),
        (
            "videoflow.rs.producers.SyntheticFrameProducer",
            NodeKind::Producer,
            json!({"width": 2, "height": 2, "count": 1, "fps": 1e-320}),
            "fps",
        ),
        (
            "videoflow.rs.processors.Hang",
            NodeKind::Processor,
            json!({"open_seconds": 1e300}),
            "open_seconds",
        ),
    ] {
        let e = err_of(build_node(class, kind, &params(p)));
        assert_eq!(e.code, ErrorCode::Config, "{class}");
        assert!(e.message.contains(name), "{class}: {}", e.message);
    }
}
