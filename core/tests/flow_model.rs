//! Flow model, validation diagnostics and compilation.

use videoflow_core::compile::{compile, default_run_id};
use videoflow_core::load::{load_flow, parse_flow};
use videoflow_core::model::FlowDocument;
use videoflow_core::validate::{Diagnostic, Severity, codes, validate_flow};

const DIAMOND: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata:
  name: toy-calculator
spec:
  type: batch
  nodes:
  - name: numbers
    kind: producer
    component: {builtin: videoflow.producers.IntProducer}
    params: {start_value: 0, end_value: 99}
  - name: double
    kind: processor
    parents: [numbers]
    replicas: 3
    component: {builtin: videoflow.processors.IdentityProcessor}
  - name: square
    kind: processor
    parents: [numbers]
    component: {builtin: videoflow.processors.IdentityProcessor}
  - name: pair
    kind: processor
    parents: [double, square]
    replicas: 2
    partitionBy: trace_id
    join: {missing: wait}
    component: {builtin: videoflow.processors.JoinerProcessor}
  - name: sink
    kind: consumer
    parents: [pair]
    idempotent: true
    component: {builtin: videoflow.consumers.CommandlineConsumer}
"#;

fn doc(text: &str) -> FlowDocument {
    parse_flow(text).unwrap_or_else(|d| panic!("parse failed: {d:#?}"))
}

fn errors(d: &[Diagnostic]) -> Vec<&Diagnostic> {
    d.iter().filter(|d| d.severity == Severity::Error).collect()
}

#[test]
fn a_valid_diamond_has_no_diagnostics() {
    let d = validate_flow(&doc(DIAMOND));
    assert!(d.is_empty(), "{d:#?}");
}

/// Three different mistakes, three diagnostics with paths and remedies.
#[test]
fn three_mistakes_yield_three_diagnostics_with_paths_and_remedies() {
    let text = DIAMOND
        // 1. an unknown parent
        .replace("parents: [pair]", "parents: [pairs]")
        // 2. a replicated join without partitionBy (JOIN-4 compiler rule)
        .replace("    partitionBy: trace_id\n", "")
        // 3. a quorum outside time mode (JOIN-1)
        .replace(
            "join: {missing: wait}",
            "join: {missing: drop, timeoutSeconds: 5, quorum: 1}",
        );
    let d = validate_flow(&doc(&text));
    let errs = errors(&d);
    let got: Vec<(&str, &str)> = errs
        .iter()
        .map(|d| (d.code.as_str(), d.path.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (codes::VF_GRAPH_UNKNOWN_PARENT, "spec.nodes[4].parents[0]"),
            (
                codes::VF_GRAPH_UNPARTITIONED_JOIN,
                "spec.nodes[3].partitionBy"
            ),
            (codes::VF_FLOW_JOIN_POLICY, "spec.nodes[3].join.quorum"),
        ]
    );
    for e in &errs {
        assert!(!e.remedy.is_empty(), "no remedy: {e}");
        assert!(!e.message.is_empty(), "no message: {e}");
    }
    assert!(
        errs[0].remedy.contains("Did you mean 'pair'"),
        "{}",
        errs[0].remedy
    );
    assert_eq!(
        errs[1].message,
        "pair joins 2 parents with nb_tasks=2 but no partition_by, so replicas would receive the two halves of a join on different workers."
    );
    // The loader refuses the flow with the same diagnostics.
    assert!(load_flow(&text).is_err());
}

/// Codes of the error diagnostics of `text`, with their paths.
fn error_codes(text: &str) -> Vec<(String, String)> {
    errors(&validate_flow(&doc(text)))
        .into_iter()
        .map(|d| (d.code.clone(), d.path.clone()))
        .collect()
}

fn flow(nodes: &str) -> String {
    format!(
        "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {{name: f}}\nspec:\n  type: realtime\n  nodes:\n{nodes}"
    )
}

const SRC: &str =
    "  - {name: src, kind: producer, component: {builtin: videoflow.producers.IntProducer}}\n";

#[test]
fn name_1_collisions_under_both_encodings() {
    let text = flow(&format!(
        "{SRC}  - {{name: a.b, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n  - {{name: a_b, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n  - {{name: Sink, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n  - {{name: sink, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n"
    ));
    let d = validate_flow(&doc(&text));
    let collisions: Vec<&Diagnostic> = d
        .iter()
        .filter(|d| d.code == codes::VF_GRAPH_NAME_COLLISION)
        .collect();
    let msgs: Vec<&str> = collisions.iter().map(|d| d.message.as_str()).collect();
    assert!(
        msgs.contains(&"Node names ['a.b', 'a_b'] all encode to the broker name 'a_b'."),
        "{msgs:#?}"
    );
    assert!(
        msgs.contains(
            &"Node names ['Sink', 'sink'] all encode to the kubernetes name 'vf-f-r-sink'."
        ),
        "{msgs:#?}"
    );
    // `a.b`/`a_b` also collide for Kubernetes (`a-b`).
    assert_eq!(collisions.len(), 3, "{msgs:#?}");
}

#[test]
fn long_names_collide_after_truncation() {
    let long = "n".repeat(70);
    let text = flow(&format!(
        "{SRC}  - {{name: {long}x, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n  - {{name: {long}y, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n"
    ));
    let got = error_codes(&text);
    assert_eq!(
        got,
        vec![(
            codes::VF_GRAPH_NAME_COLLISION.into(),
            "spec.nodes[2].name".into()
        )]
    );
}

#[test]
fn duplicate_names_and_cycles() {
    let text = flow(&format!(
        "{SRC}  - {{name: a, kind: processor, parents: [src, c], component: {{builtin: videoflow.processors.IdentityProcessor}}}}\n  - {{name: b, kind: processor, parents: [a], component: {{builtin: videoflow.processors.IdentityProcessor}}}}\n  - {{name: c, kind: processor, parents: [b], component: {{builtin: videoflow.processors.IdentityProcessor}}}}\n  - {{name: c, kind: consumer, parents: [c], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n"
    ));
    let d = validate_flow(&doc(&text));
    assert!(
        d.iter()
            .any(|d| d.code == codes::VF_GRAPH_DUPLICATE_NAME && d.path == "spec.nodes[4].name")
    );
    let cycle = d
        .iter()
        .find(|d| d.code == codes::VF_GRAPH_CYCLE)
        .unwrap_or_else(|| panic!("no cycle in {d:#?}"));
    assert!(cycle.message.contains("->"), "{}", cycle.message);
    for n in ["a", "b", "c"] {
        assert!(cycle.message.contains(n), "{}", cycle.message);
    }
}

#[test]
fn edge_rules() {
    let text = flow(
        "  - {name: src, kind: producer, parents: [sink], component: {builtin: videoflow.producers.IntProducer}}\n  - {name: lone, kind: processor, component: {builtin: videoflow.processors.IdentityProcessor}}\n  - {name: sink, kind: consumer, parents: [src], component: {builtin: videoflow.consumers.VoidConsumer}}\n  - {name: after, kind: consumer, parents: [sink], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    let got = error_codes(&text);
    for want in [
        (
            codes::VF_GRAPH_PRODUCER_WITH_PARENTS,
            "spec.nodes[0].parents",
        ),
        (
            codes::VF_GRAPH_CONSUMER_WITH_CHILDREN,
            "spec.nodes[0].parents[0]",
        ),
        (codes::VF_GRAPH_NOT_A_PRODUCER, "spec.nodes[1].parents"),
        (
            codes::VF_GRAPH_CONSUMER_WITH_CHILDREN,
            "spec.nodes[3].parents[0]",
        ),
    ] {
        assert!(
            got.contains(&(want.0.into(), want.1.into())),
            "missing {want:?} in {got:#?}"
        );
    }
    let no_producer = flow(
        "  - {name: a, kind: consumer, parents: [a], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    assert!(
        error_codes(&no_producer)
            .iter()
            .any(|(c, _)| c == codes::VF_GRAPH_NO_PRODUCER)
    );
}

#[test]
fn component_must_be_exactly_one() {
    let text = flow(&format!(
        "{SRC}  - {{name: two, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer, python: {{class: m.C}}}}}}\n  - {{name: none, kind: consumer, parents: [src], component: {{}}}}\n  - {{name: ex, kind: consumer, parents: [src], component: {{exec: {{command: []}}}}}}\n"
    ));
    let got = error_codes(&text);
    assert_eq!(
        got,
        vec![
            (
                codes::VF_FLOW_COMPONENT.into(),
                "spec.nodes[1].component".into()
            ),
            (
                codes::VF_FLOW_COMPONENT.into(),
                "spec.nodes[2].component".into()
            ),
            (
                codes::VF_FLOW_KNOB.into(),
                "spec.nodes[3].component.exec.command".into()
            ),
        ]
    );
}

#[test]
fn knobs_only_where_they_mean_something() {
    let text = flow(
        "  - {name: src, kind: producer, replicas: 2, partitionBy: trace_id, delivery: best-effort, gpu: {count: 1}, idempotent: true, join: {missing: drop}, component: {builtin: videoflow.producers.IntProducer}}\n  - {name: sink, kind: consumer, parents: [src], finite: false, replicas: 0, gpu: {count: 0}, assets: [{path: /m.onnx, sha256: ABC}], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    let got = error_codes(&text);
    let paths: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
    for want in [
        "spec.nodes[0].replicas",
        "spec.nodes[0].partitionBy",
        "spec.nodes[0].delivery",
        "spec.nodes[0].gpu",
        "spec.nodes[0].idempotent",
        "spec.nodes[0].join",
        "spec.nodes[1].finite",
        "spec.nodes[1].replicas",
        "spec.nodes[1].gpu",
        "spec.nodes[1].gpu.count",
        "spec.nodes[1].assets[0].sha256",
    ] {
        assert!(paths.contains(&want), "missing {want} in {paths:#?}");
    }
}

/// MSGID-6: `replayable` only on a producer whose source has a position: a built-in file
/// source; a live built-in, an exec or python component and any other kind are refused with
/// the field and the fix.
#[test]
fn msgid_6_replayable_only_on_sources_with_a_position() {
    let text = flow(
        "  - {name: file, kind: producer, replayable: true, component: {builtin: videoflow.producers.IntProducer}}\n  - {name: cam, kind: producer, replayable: true, component: {builtin: videoflow.producers.video.VideoUrlReader}, params: {url: \"rtsp://h/s\"}}\n  - {name: py, kind: producer, replayable: true, component: {python: {class: my.Source}}}\n  - {name: ex, kind: producer, replayable: true, component: {exec: {command: [src]}}}\n  - {name: live, kind: producer, replayable: false, component: {builtin: videoflow.producers.video.VideoUrlReader}, params: {url: \"rtsp://h/s\"}}\n  - {name: sink, kind: consumer, parents: [file, cam, py, ex, live], replayable: true, component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    let replayable: Vec<(String, String, String)> = validate_flow(&doc(&text))
        .into_iter()
        .filter(|d| d.path.ends_with(".replayable"))
        .map(|d| (d.path, d.message, d.remedy))
        .collect();
    let paths: Vec<&str> = replayable.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.nodes[1].replayable",
            "spec.nodes[2].replayable",
            "spec.nodes[3].replayable",
            "spec.nodes[5].replayable",
        ]
    );
    assert!(replayable[0].1.contains("live source"), "{replayable:?}");
    assert!(
        replayable[1].2.contains("replayable = True"),
        "{replayable:?}"
    );
    assert!(
        replayable[2].2.contains("exec producers are live"),
        "{replayable:?}"
    );
    assert!(
        replayable[3].1.contains("only describes producers"),
        "{replayable:?}"
    );
}

/// STREAM-15a: `credit` only on a single-parent node, messages in 1..=4096, bytes ≥ 1.
#[test]
fn credit_is_checked_where_it_means_something() {
    let text = flow(
        "  - {name: src, kind: producer, credit: {messages: 8}, component: {builtin: videoflow.producers.IntProducer}}\n  - {name: b, kind: processor, parents: [src], credit: {messages: 0, bytes: 0}, component: {builtin: videoflow.processors.IdentityProcessor}}\n  - {name: j, kind: consumer, parents: [src, b], credit: {messages: 5000}, component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    let got = error_codes(&text);
    let paths: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
    for want in [
        "spec.nodes[0].credit",
        "spec.nodes[1].credit.messages",
        "spec.nodes[1].credit.bytes",
        "spec.nodes[2].credit",
        "spec.nodes[2].credit.messages",
    ] {
        assert!(paths.contains(&want), "missing {want} in {paths:#?}");
    }
    assert_eq!(paths.len(), 5, "{paths:#?}");
    let fine = flow(
        "  - {name: src, kind: producer, component: {builtin: videoflow.producers.IntProducer}}\n  - {name: b, kind: consumer, parents: [src], credit: {messages: 4096, bytes: 1}, component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    assert!(error_codes(&fine).is_empty());
}

/// `spec.broker.streamMaxAgeSeconds`: at least the duplicate window (JetStream refuses less),
/// at most about 100 years; unset is fine.
#[test]
fn the_stream_age_bound_is_checked_against_the_duplicate_window() {
    let with_age = |age: &str| {
        flow(&format!(
            "{SRC}  - {{name: s, kind: consumer, parents: [src], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n"
        ))
        .replace("  type: realtime\n", &format!("  type: realtime\n  broker: {{streamMaxAgeSeconds: {age}}}\n"))
    };
    for bad in ["119", "0", "-5", "3155760001"] {
        assert_eq!(
            error_codes(&with_age(bad)),
            vec![(
                codes::VF_FLOW_KNOB.to_owned(),
                "spec.broker.streamMaxAgeSeconds".to_owned()
            )],
            "{bad}"
        );
    }
    for fine in ["120", "86400", "3155760000"] {
        assert!(error_codes(&with_age(fine)).is_empty(), "{fine}");
    }
}

/// The video readers decode on NVDEC when they hold a GPU: `gpu` on them (under any of
/// their names) is valid, compiles to device type `gpu` and renders the GPU variables; on
/// any other producer, and on a consumer, it stays refused.
#[test]
fn gpu_on_a_video_reader_compiles_to_a_gpu_producer_and_nowhere_else_but_processors() {
    use videoflow_core::env::{EnvContext, render_node_env};
    for class in [
        "videoflow.producers.video.VideoFileReader",
        "videoflow.producers.VideofileReader",
        "videoflow.producers.video.VideoUrlReader",
        "videoflow.producers.video.VideoDeviceReader",
    ] {
        let text = flow(&format!(
            "  - {{name: cam, kind: producer, gpu: {{count: 1, fallback: none}}, component: {{builtin: {class}}}, params: {{video_file: a.mp4, url: \"rtsp://h/s\", device_id: 0}}}}\n  - {{name: sink, kind: consumer, parents: [cam], component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n"
        ));
        let codes: Vec<(String, String)> = error_codes(&text)
            .into_iter()
            .filter(|(_, p)| p.starts_with("spec.nodes[0].gpu"))
            .collect();
        assert!(codes.is_empty(), "{class}: {codes:?}");
    }
    let text = flow(
        "  - {name: cam, kind: producer, gpu: {count: 1, fallback: none}, component: {builtin: videoflow.producers.video.VideoFileReader}, params: {video_file: a.mp4}}\n  - {name: sink, kind: consumer, parents: [cam], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    assert!(error_codes(&text).is_empty(), "{:?}", error_codes(&text));
    let doc = parse_flow(&text).expect("parses");
    let compiled = compile(&doc).expect("compiles");
    let cam = compiled
        .nodes
        .iter()
        .find(|n| n.name == "cam")
        .expect("cam");
    assert_eq!(cam.device_type, "gpu");
    let sink = compiled
        .nodes
        .iter()
        .find(|n| n.name == "sink")
        .expect("sink");
    assert_eq!(sink.device_type, "cpu");
    let ctx = EnvContext {
        default_nats_url: Some("nats://127.0.0.1:4222".into()),
        health_port: 0,
    };
    let env = render_node_env(&doc, &compiled, "cam", &ctx).expect("renders");
    let var = |key: &str| env.get(key).and_then(|v| v.literal().map(str::to_owned));
    assert_eq!(var("VF_DEVICE_TYPE").as_deref(), Some("gpu"));
    assert_eq!(var("VF_GPU_COUNT").as_deref(), Some("1"));
    assert_eq!(var("VF_GPU_FALLBACK").as_deref(), Some("none"));
    for other in [
        "  - {name: cam, kind: producer, gpu: {count: 1}, component: {builtin: videoflow.producers.video.ImageProducer}, params: {image_path: a.png}}\n  - {name: sink, kind: consumer, parents: [cam], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
        "  - {name: cam, kind: producer, gpu: {count: 1}, component: {exec: {command: [cam]}}}\n  - {name: sink, kind: consumer, parents: [cam], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
        "  - {name: cam, kind: producer, component: {builtin: videoflow.producers.video.VideoFileReader}, params: {video_file: a.mp4}}\n  - {name: sink, kind: consumer, parents: [cam], gpu: {count: 1}, component: {builtin: videoflow.rs.consumers.VideoFileWriter}, params: {video_file: o.mp4}}\n",
    ] {
        let paths: Vec<String> = error_codes(&flow(other))
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        assert!(
            paths
                .iter()
                .any(|p| p == "spec.nodes[0].gpu" || p == "spec.nodes[1].gpu"),
            "{other}: {paths:?}"
        );
    }
}

/// STREAM-15a: a single-parent node gets the Flow's credit or the defaults as
/// `VF_CREDIT_MESSAGES` and `VF_PREFETCH_BYTES`; a producer gets none, a join only the bytes
/// its Flow sets.
#[test]
fn credit_renders_into_the_worker_environment() {
    use videoflow_core::env::{EnvContext, render_node_env};
    let text = flow(
        "  - {name: src, kind: producer, component: {builtin: videoflow.producers.IntProducer}}\n  - {name: b, kind: processor, parents: [src], credit: {messages: 300, bytes: 1048576}, component: {builtin: videoflow.processors.IdentityProcessor}}\n  - {name: c, kind: processor, parents: [src], component: {builtin: videoflow.processors.IdentityProcessor}}\n  - {name: j, kind: consumer, parents: [b, c], component: {builtin: videoflow.consumers.VoidConsumer}}\n",
    );
    let doc = parse_flow(&text).expect("parses");
    let compiled = compile(&doc).expect("compiles");
    let ctx = EnvContext {
        default_nats_url: Some("nats://127.0.0.1:4222".into()),
        health_port: 0,
    };
    let var = |node: &str, key: &str| {
        render_node_env(&doc, &compiled, node, &ctx)
            .expect("renders")
            .get(key)
            .and_then(|v| v.literal().map(str::to_owned))
    };
    assert_eq!(var("b", "VF_CREDIT_MESSAGES").as_deref(), Some("300"));
    assert_eq!(var("b", "VF_PREFETCH_BYTES").as_deref(), Some("1048576"));
    assert_eq!(
        var("c", "VF_CREDIT_MESSAGES"),
        Some(videoflow_core::model::DEFAULT_CREDIT_MESSAGES.to_string())
    );
    assert_eq!(
        var("c", "VF_PREFETCH_BYTES"),
        Some(videoflow_core::model::DEFAULT_CREDIT_BYTES.to_string())
    );
    assert_eq!(var("src", "VF_CREDIT_MESSAGES"), None);
    assert_eq!(var("src", "VF_PREFETCH_BYTES"), None);
    assert_eq!(var("j", "VF_CREDIT_MESSAGES"), None);
    assert_eq!(var("j", "VF_PREFETCH_BYTES"), None);
}

#[test]
fn join_rules_have_field_paths() {
    let join = |j: &str, replicas: i32| {
        flow(&format!(
            "{SRC}  - {{name: b, kind: processor, parents: [src], component: {{builtin: videoflow.processors.IdentityProcessor}}}}\n  - {{name: j, kind: consumer, parents: [src, b], replicas: {replicas}, join: {j}, component: {{builtin: videoflow.consumers.VoidConsumer}}}}\n"
        ))
    };
    // JOIN-1: time mode needs a tolerance.
    assert_eq!(
        error_codes(&join("{mode: time}", 1)),
        vec![(
            codes::VF_FLOW_JOIN_POLICY.into(),
            "spec.nodes[2].join.toleranceMs".into()
        )]
    );
    // JOIN-1: quorum needs a timeout; JOIN-10: quorum within the synchronized parents.
    let got = error_codes(&join("{mode: time, toleranceMs: 5, quorum: 3}", 1));
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(got.iter().all(|(_, p)| p == "spec.nodes[2].join.quorum"));
    // JOIN-10: collect keys must be parents.
    let got = error_codes(&join("{mode: time, toleranceMs: 5, collect: {imu: 20}}", 1));
    assert_eq!(
        got,
        vec![(
            codes::VF_FLOW_JOIN_POLICY.into(),
            "spec.nodes[2].join.collect".into()
        )]
    );
    // JOIN-4: a replicated time join (consumers cannot be replicated either).
    let d = validate_flow(&doc(&join("{mode: time, toleranceMs: 5}", 2)));
    assert!(d.iter().any(|d| d.message
        == "j: a time-aligned join (join_policy mode='time') requires nb_tasks == 1, got 2"));
}

#[test]
fn header_and_name_are_checked() {
    let text = DIAMOND
        .replace("apiVersion: videoflow.io/v1alpha1", "apiVersion: v1")
        .replace("name: toy-calculator", "name: ''");
    let got = error_codes(&text);
    let paths: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(paths, vec!["apiVersion", "metadata.name"]);
}

#[test]
fn output_unread_is_a_warning_only() {
    let text = flow(&format!(
        "{SRC}  - {{name: dead, kind: processor, parents: [src], component: {{builtin: videoflow.processors.IdentityProcessor}}}}\n"
    ));
    let d = validate_flow(&doc(&text));
    assert!(errors(&d).is_empty(), "{d:#?}");
    assert!(
        d.iter()
            .any(|d| d.code == codes::VF_GRAPH_OUTPUT_UNREAD && d.severity == Severity::Warning)
    );
    assert!(load_flow(&text).is_ok());
}

#[test]
fn compile_derives_the_reference_node_spec() {
    let compiled = compile(&doc(DIAMOND)).expect("compiles");
    assert_eq!(compiled.flow_id, "toy-calculator");
    let names: Vec<&str> = compiled.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["numbers", "double", "square", "pair", "sink"]);

    let numbers = compiled.node("numbers").expect("numbers");
    assert!(numbers.has_children);
    assert!(numbers.is_finite);
    // BLOB-5 compiler rule: two non-partitioned children (double's 3 replicas compete).
    assert_eq!(numbers.blob_readers, Some(2));
    // pair is partitioned with 2 replicas: each of its parents publishes for 2 readers.
    assert_eq!(
        compiled.node("double").expect("double").blob_readers,
        Some(2)
    );
    assert_eq!(compiled.node("double").expect("double").nb_tasks, 3);
    let pair = compiled.node("pair").expect("pair");
    assert_eq!(pair.join_policy.as_ref().expect("join")["missing"], "wait");
    assert_eq!(
        pair.join_policy.as_ref().expect("join")["timeout_seconds"],
        serde_json::Value::Null
    );
    assert_eq!(compiled.parent_replicas(pair), vec![3, 1]);
    assert_eq!(
        compiled.blob_reader_ids(compiled.node("square").expect("square")),
        vec!["pair/p0", "pair/p1"]
    );
    let sink = compiled.node("sink").expect("sink");
    assert!(!sink.has_children);
    assert_eq!(sink.blob_readers, Some(0));

    // specs.json keeps the reference's snake_case keys, every field present.
    let json: serde_json::Value = serde_json::from_str(&compiled.specs_json()).expect("json");
    let keys: Vec<&str> = json[0]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "name",
        "node_class",
        "params",
        "parents",
        "kind",
        "has_children",
        "nb_tasks",
        "device_type",
        "is_finite",
        "image",
        "partition_by",
        "join_policy",
        "component_ref",
        "descriptor",
        "command",
        "protocol_version",
        "gpu_count",
        "gpu_resource_name",
        "blob_readers",
        "gpu_memory_gib",
        "delivery",
    ] {
        assert!(keys.contains(&k), "missing {k} in {keys:?}");
    }
    assert_eq!(json[0]["node_class"], "videoflow.producers.IntProducer");
    // IDEM-1: the node-level `idempotent` travels in the params, as the reference keeps it.
    assert_eq!(
        sink.params.get("idempotent"),
        Some(&serde_json::Value::Bool(true))
    );
    assert_eq!(json[0]["params"]["end_value"], 99);
}

#[test]
fn compile_refuses_an_invalid_flow() {
    let text = DIAMOND.replace("parents: [pair]", "parents: [nope]");
    let err = compile(&doc(&text)).expect_err("must refuse");
    assert!(err.iter().any(|d| d.code == codes::VF_GRAPH_UNKNOWN_PARENT));
}

#[test]
fn run_id_follows_topology_not_replicas() {
    let base = doc(DIAMOND);
    let id = default_run_id(&base.spec);
    assert_eq!(id.len(), 10);
    // Replicas and images roll in place: same run.
    assert_eq!(
        default_run_id(&doc(&DIAMOND.replace("replicas: 3", "replicas: 5")).spec),
        id
    );
    // A new edge is a new topology: new run.
    let changed = DIAMOND.replace("parents: [double, square]", "parents: [square, double]");
    assert_ne!(default_run_id(&doc(&changed).spec), id);
    // An explicit run id wins.
    let explicit = DIAMOND.replace("  type: batch\n", "  type: batch\n  runId: run-7\n");
    assert_eq!(compile(&doc(&explicit)).expect("ok").run_id, "run-7");
}

/// The user's report: `VoidConsumr` passed validation and failed only when its pod started.
/// Now the class, its family and its params are checked against the catalog, every problem
/// at once, with "did you mean".
#[test]
fn built_in_classes_and_their_params_are_checked_against_the_catalog() {
    let text = flow(
        "  - {name: src, kind: producer, component: {builtin: videoflow.producers.IntProducer}, params: {end_valu: 3, fps: fast}}\n  - {name: mid, kind: processor, parents: [src], component: {builtin: videoflow.consumers.VoidConsumer}}\n  - {name: sink, kind: consumer, parents: [mid], component: {builtin: videoflow.consumers.basic.VoidConsumr}}\n",
    );
    let d = validate_flow(&doc(&text));
    let got: Vec<(&str, &str)> = errors(&d)
        .iter()
        .map(|d| (d.code.as_str(), d.path.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (codes::VF_FLOW_BUILTIN, "spec.nodes[0].params.end_valu"),
            (codes::VF_FLOW_BUILTIN, "spec.nodes[0].params.fps"),
            (codes::VF_FLOW_BUILTIN, "spec.nodes[1].component.builtin"),
            (codes::VF_FLOW_BUILTIN, "spec.nodes[2].component.builtin"),
        ],
        "{d:#?}"
    );
    let remedies: Vec<&str> = errors(&d).iter().map(|d| d.remedy.as_str()).collect();
    assert!(
        remedies[0].starts_with("Did you mean 'end_value'?"),
        "{}",
        remedies[0]
    );
    assert!(remedies[1].contains("a finite number"), "{}", remedies[1]);
    assert!(
        remedies[2].starts_with("Set kind: consumer"),
        "{}",
        remedies[2]
    );
    assert!(
        remedies[3].starts_with("Did you mean 'videoflow.consumers.basic.VoidConsumer'?"),
        "{}",
        remedies[3]
    );
}

/// A MIG profile claims `nvidia.com/mig-<profile>` (the device plugin's mixed strategy) and
/// reaches the compiled record as the node's resource; it must read as a profile and may
/// not come with an explicit resourceName.
#[test]
fn gpu_mig_profile_claims_the_mig_resource_and_is_validated() {
    let node = |gpu: &str| {
        flow(&format!(
            "{SRC}  - {{name: det, kind: processor, parents: [src], gpu: {gpu}, component: {{builtin: videoflow.processors.basic.IdentityProcessor}}}}\n  - {{name: sink, kind: consumer, parents: [det], component: {{builtin: videoflow.consumers.basic.VoidConsumer}}}}\n"
        ))
    };
    let ok = node("{count: 2, migProfile: 1g.18gb}");
    assert!(error_codes(&ok).is_empty(), "{:?}", error_codes(&ok));
    let compiled = compile(&doc(&ok)).expect("compiles");
    let det = compiled
        .nodes
        .iter()
        .find(|n| n.name == "det")
        .expect("det");
    assert_eq!(
        det.gpu_resource_name.as_deref(),
        Some("nvidia.com/mig-1g.18gb")
    );
    assert_eq!(det.gpu_count, 2);
    for good in ["3g.40gb+me", "7g.141gb", "1g.10gb+me+gfx"] {
        assert!(
            error_codes(&node(&format!("{{migProfile: \"{good}\"}}"))).is_empty(),
            "{good}"
        );
    }
    for bad in ["1g", "g.10gb", "1g.10GB", "mig-1g.10gb", "1g.10gb+", ""] {
        assert_eq!(
            error_codes(&node(&format!("{{migProfile: \"{bad}\"}}"))),
            vec![(
                codes::VF_FLOW_KNOB.to_owned(),
                "spec.nodes[1].gpu.migProfile".to_owned()
            )],
            "{bad:?}"
        );
    }
    assert_eq!(
        error_codes(&node(
            "{resourceName: example.com/gpu, migProfile: 1g.18gb}"
        )),
        vec![(
            codes::VF_FLOW_KNOB.to_owned(),
            "spec.nodes[1].gpu.migProfile".to_owned()
        )]
    );
}

/// A NUL character in any text that becomes an environment value, argument or Kubernetes
/// field is refused with its path (a worker could never be started with it); in `params`,
/// which travel as JSON, it is data.
#[test]
fn a_nul_character_is_refused_where_no_process_can_carry_it() {
    let text = DIAMOND
        .replace("  type: batch\n", "  type: batch\n  runId: \"r\\0\"\n")
        .replace(
            "    params: {start_value: 0, end_value: 99}\n",
            "    params: {start_value: 0, end_value: 99}\n    partitionBy: \"k\\0\"\n",
        )
        .replace(
            "component: {builtin: videoflow.consumers.CommandlineConsumer}",
            "component: {builtin: videoflow.consumers.CommandlineConsumer}\n    params: {end: \"\\0\"}",
        );
    let mut paths: Vec<String> = errors(&validate_flow(&doc(&text)))
        .iter()
        .filter(|d| d.code == codes::VF_FLOW_SCHEMA && d.message.contains("NUL"))
        .map(|d| d.path.clone())
        .collect();
    paths.sort();
    assert_eq!(paths, ["spec.nodes[0].partitionBy", "spec.runId"]);
    assert!(
        compile(&doc(&text)).is_err(),
        "what no worker can start does not compile"
    );
}

/// A Secret reference Kubernetes would refuse in a pod (an empty or malformed name or key)
/// is refused here, with its path: the flow would otherwise be admitted and never start.
#[test]
fn a_secret_reference_must_be_one_kubernetes_resolves() {
    let text = DIAMOND.replace(
        "  type: batch\n",
        "  type: batch\n  broker: {urlFrom: {secretKeyRef: {name: '', key: ''}}}\n  \
         payloadStore: {urlFrom: {secretKeyRef: {name: Creds, key: 'u/rl'}}}\n  \
         runtimeStore: {urlFrom: {secretKeyRef: {name: ledger-creds, key: url}}}\n",
    );
    let mut paths: Vec<String> = errors(&validate_flow(&doc(&text)))
        .iter()
        .filter(|d| d.code == codes::VF_FLOW_SCHEMA)
        .map(|d| d.path.clone())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "spec.broker.urlFrom.secretKeyRef.key",
            "spec.broker.urlFrom.secretKeyRef.name",
            "spec.payloadStore.urlFrom.secretKeyRef.key",
            "spec.payloadStore.urlFrom.secretKeyRef.name",
        ]
    );
}

/// An exec command whose first word (the program the worker starts) is empty is no command:
/// refused here, as the worker would refuse it at every start.
#[test]
fn an_exec_command_needs_a_program() {
    let node = |name: &str, command: &str| {
        format!(
            "  - {{name: {name}, kind: consumer, parents: [src], component: {{exec: {{command: \
             {command}}}}}}}\n"
        )
    };
    let text = flow(&format!(
        "{SRC}{}{}{}",
        node("empty", "['']"),
        node("blank", "['', run.py]"),
        node("ok", "[python3, run.py]"),
    ));
    assert_eq!(
        error_codes(&text),
        vec![
            (
                codes::VF_FLOW_KNOB.into(),
                "spec.nodes[1].component.exec.command".into()
            ),
            (
                codes::VF_FLOW_KNOB.into(),
                "spec.nodes[2].component.exec.command".into()
            ),
        ]
    );
}
