//! The Flow CRD artefact and schema (design §4).
//!
//! - the committed `crds/flows.videoflow.io.yaml` is exactly what the types generate;
//! - the generated schema is *structural*, as the API server requires of a v1 CRD;
//! - the sample Flow is a valid `Flow` resource with the same spec the local runner reads;
//! - printer columns, short name and the status subresource are declared;
//! - status (with conditions) round-trips through JSON.

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Value, json};
use videoflow_operator::crd::{
    self, CRD_NAME, CRD_PATH, DemandStatus, Flow, FlowPhase, FlowResourceSpec, FlowStatus,
    NodeStatus, ScalerStatus, TerminationStatus, WorkloadRef, condition_types,
};

fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the operator crate sits inside the workspace")
        .to_path_buf()
}

fn schema() -> Value {
    let crd = crd::crd();
    let version = crd.spec.versions.first().expect("one version");
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the version carries an openAPIV3Schema");
    serde_json::to_value(schema).expect("schema serializes")
}

// ---------------------------------------------------------------------------------------------
// (1) The committed artefact equals the generated one.

#[test]
fn committed_crd_matches_generated() {
    let path = repo_root().join(CRD_PATH);
    let generated = crd::crd_yaml();
    if std::env::var("VF_UPDATE_CRDS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("crds/ has a parent")).expect("create crds/");
        std::fs::write(&path, &generated).expect("write the CRD artefact");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{CRD_PATH} is stale or missing: the Flow types changed without regenerating it.\n\
         Regenerate with:\n    cargo run -p videoflow-operator -- crd > {CRD_PATH}\n\
         or run this test with VF_UPDATE_CRDS=1."
    );
}

#[test]
fn crd_yaml_is_deterministic_and_named() {
    assert_eq!(crd::crd_yaml(), crd::crd_yaml());
    assert_eq!(crd::crd().metadata.name.as_deref(), Some(CRD_NAME));
    assert!(CRD_PATH.ends_with(&format!("{CRD_NAME}.yaml")));
}

// ---------------------------------------------------------------------------------------------
// (2) Structural schema: the rules the API server enforces on apiextensions.k8s.io/v1 CRDs.

/// Keys a schema directly under allOf/anyOf/oneOf/not may not set (value validation only).
const JUNCTOR_FORBIDDEN: [&str; 5] = [
    "type",
    "description",
    "default",
    "nullable",
    "additionalProperties",
];

/// Walks one schema node and records every violation with its path.
fn check_structural(node: &Value, path: &str, in_junctor: bool, errors: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        errors.push(format!("{path}: schema is not an object"));
        return;
    };
    for key in ["$ref", "definitions", "$defs", "$schema", "const"] {
        if obj.contains_key(key) {
            errors.push(format!("{path}: `{key}` is not allowed in a CRD schema"));
        }
    }
    let ty = obj.get("type").and_then(Value::as_str);
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if in_junctor {
        for key in JUNCTOR_FORBIDDEN {
            if obj.contains_key(key) {
                errors.push(format!(
                    "{path}: `{key}` is not allowed inside allOf/anyOf/oneOf/not"
                ));
            }
        }
    } else if ty.is_none() && !preserve && !int_or_string {
        errors.push(format!("{path}: missing `type`"));
    }
    if obj.contains_key("nullable") && ty.is_none() && !in_junctor {
        errors.push(format!("{path}: `nullable` without `type`"));
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str) {
        if format.starts_with("uint") {
            errors.push(format!("{path}: unsigned format `{format}` (use i32/i64)"));
        }
        if ty == Some("integer") && !matches!(format, "int32" | "int64") {
            errors.push(format!("{path}: integer format `{format}`"));
        }
    }
    let properties = obj.get("properties").and_then(Value::as_object);
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => {
            errors.push(format!(
                "{path}: `additionalProperties: false` is not allowed"
            ));
        }
        Some(_) if properties.is_some() => {
            errors.push(format!(
                "{path}: `additionalProperties` together with `properties`"
            ));
        }
        Some(Value::Object(_)) => {
            if ty != Some("object") {
                errors.push(format!("{path}: `additionalProperties` on a non-object"));
            }
            check_structural(
                &obj["additionalProperties"],
                &format!("{path}.*"),
                in_junctor,
                errors,
            );
        }
        _ => {}
    }
    if let Some(properties) = properties {
        if ty != Some("object") && !in_junctor {
            errors.push(format!("{path}: `properties` without `type: object`"));
        }
        for (name, sub) in properties {
            check_structural(sub, &format!("{path}.{name}"), in_junctor, errors);
        }
    }
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !properties.is_some_and(|p| p.contains_key(name)) && !in_junctor {
                errors.push(format!("{path}: required `{name}` is not a property"));
            }
        }
    }
    match obj.get("items") {
        Some(items) => check_structural(items, &format!("{path}[]"), in_junctor, errors),
        None if ty == Some("array") => errors.push(format!("{path}: array without `items`")),
        None => {}
    }
    if obj.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        let keys = obj
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if keys.is_empty() {
            errors.push(format!("{path}: list-type map without list-map-keys"));
        }
        let item = obj.get("items").cloned().unwrap_or(Value::Null);
        for key in keys.iter().filter_map(Value::as_str) {
            let required = item["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|k| k == key));
            let defaulted = item["properties"][key].get("default").is_some();
            if !required && !defaulted {
                errors.push(format!(
                    "{path}: map key `{key}` must be required or defaulted"
                ));
            }
        }
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = obj.get(junctor).and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                check_structural(sub, &format!("{path}.{junctor}[{i}]"), true, errors);
            }
        }
    }
    if let Some(not) = obj.get("not") {
        check_structural(not, &format!("{path}.not"), true, errors);
    }
}

fn structural_errors(schema: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check_structural(schema, "", false, &mut errors);
    errors
}

#[test]
fn generated_schema_is_structural() {
    let errors = structural_errors(&schema());
    assert!(
        errors.is_empty(),
        "non-structural schema:\n{}",
        errors.join("\n")
    );
}

#[test]
fn structural_check_catches_violations() {
    // The walk must be able to fail: each rule is broken once here.
    let bad = json!({
        "type": "object",
        "properties": {
            "a": {"$ref": "#/definitions/A"},
            "b": {"type": "integer", "format": "uint32"},
            "c": {"type": "object", "properties": {"x": {"type": "string"}},
                  "additionalProperties": false},
            "d": {"properties": {"y": {"type": "string"}}},
            "e": {"type": "array"},
            "f": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["type"],
                  "items": {"type": "object", "properties": {"type": {"type": "string"}}}},
            "g": {"type": "string", "anyOf": [{"type": "string"}]}
        },
        "definitions": {}
    });
    let errors = structural_errors(&bad).join("\n");
    for needle in [
        ".a: `$ref`",
        ".a: missing `type`",
        "unsigned format `uint32`",
        "`additionalProperties: false`",
        ".d: missing `type`",
        ".e: array without `items`",
        "map key `type` must be required or defaulted",
        ".g.anyOf[0]: `type` is not allowed",
        ": `definitions` is not allowed",
    ] {
        assert!(errors.contains(needle), "expected `{needle}` in:\n{errors}");
    }
}

#[test]
fn conditions_are_a_list_map_keyed_by_type() {
    let conditions = &schema()["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
}

#[test]
fn free_json_fields_preserve_unknown_fields() {
    let params =
        &schema()["properties"]["spec"]["properties"]["nodes"]["items"]["properties"]["params"];
    assert_eq!(
        params["x-kubernetes-preserve-unknown-fields"], true,
        "{params}"
    );
}

// ---------------------------------------------------------------------------------------------
// (3) The sample is a Flow resource, with the spec the local runner reads.

#[test]
fn sample_flow_deserializes_as_resource() {
    let text = std::fs::read_to_string(repo_root().join("config/samples/toy-calculator.yaml"))
        .expect("read the sample");
    let flow: Flow = serde_yaml::from_str(&text).expect("the sample is a Flow resource");
    let doc = videoflow_core::load::parse_flow(&text).expect("the sample parses locally");
    assert_eq!(flow.metadata.name.as_deref(), Some("toy-calculator"));
    assert_eq!(flow.spec.0, doc.spec);
    assert_eq!(
        flow.spec.nodes.len(),
        doc.spec.nodes.len(),
        "Deref reaches FlowSpec"
    );
    assert!(!flow.spec.nodes.is_empty());
    assert!(flow.status.is_none());

    // And back: the resource serializes with the right apiVersion/kind and the same spec.
    let value = serde_json::to_value(&flow).expect("serialize");
    assert_eq!(value["apiVersion"], videoflow_core::model::API_VERSION);
    assert_eq!(value["kind"], videoflow_core::model::KIND);
    let again: Flow = serde_json::from_value(value).expect("deserialize again");
    assert_eq!(again, flow);
}

#[test]
fn flow_new_wraps_a_core_spec() {
    let spec = videoflow_core::model::FlowSpec::default();
    let flow = Flow::new("f", FlowResourceSpec::from(spec.clone()));
    assert_eq!(videoflow_core::model::FlowSpec::from(flow.spec), spec);
}

// ---------------------------------------------------------------------------------------------
// (4) Names, printer columns, subresource.

#[test]
fn printer_columns_short_name_and_status_subresource() {
    let crd = crd::crd();
    assert_eq!(crd.spec.group, "videoflow.io");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "Flow");
    assert_eq!(crd.spec.names.plural, "flows");
    assert_eq!(crd.spec.names.short_names, Some(vec!["flow".to_owned()]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.served && version.storage);
    let subresources = version.subresources.as_ref().expect("subresources");
    assert!(subresources.status.is_some(), "status subresource");
    let columns: Vec<(&str, &str, &str)> = version
        .additional_printer_columns
        .as_deref()
        .expect("printer columns")
        .iter()
        .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Type", "string", ".spec.type"),
            ("Phase", "string", ".status.phase"),
            ("Run", "string", ".status.runId"),
            (
                "Ready",
                "string",
                r#".status.conditions[?(@.type=="Ready")].status"#
            ),
            ("Age", "date", ".metadata.creationTimestamp"),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// (5) Status.

#[test]
fn empty_status_deserializes() {
    let status: FlowStatus = serde_json::from_value(json!({})).expect("empty status");
    assert_eq!(status, FlowStatus::default());
    assert_eq!(serde_json::to_value(&status).expect("serialize"), json!({}));
    let node: NodeStatus = serde_json::from_value(json!({"name": "a"})).expect("sparse node");
    assert_eq!(node.desired, 0);
}

#[test]
fn status_round_trips_with_conditions() {
    let wire = json!({
        "observedGeneration": 3,
        "phase": "Running",
        "runId": "r-1",
        "startTime": "2025-01-02T03:04:05Z",
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "AllNodesReady",
            "message": "5/5 nodes ready",
            "lastTransitionTime": "2025-01-02T03:04:05Z",
            "observedGeneration": 3
        }],
        "nodes": [{
            "name": "pair",
            "workload": {"kind": "StatefulSet", "name": "toy-calculator-pair"},
            "desired": 2,
            "ready": 1,
            "restarts": 4,
            "scaler": {"rendered": false, "reasons": ["autoscaling disabled"]},
            "demand": {"diagnosis": "lag unknown", "unknownParents": ["double"]},
            "lastTermination": {
                "pod": "toy-calculator-pair-1",
                "exitCode": 70,
                "reason": "Error",
                "code": "VF_WORKER_FATAL",
                "message": "boom",
                "remedy": "fix it",
                "disposition": "worker_fatal"
            }
        }]
    });
    let status: FlowStatus = serde_json::from_value(wire.clone()).expect("deserialize status");
    assert_eq!(status.phase, Some(FlowPhase::Running));
    let ready: &Condition = status.condition(condition_types::READY).expect("Ready");
    assert_eq!(ready.status, "True");
    assert_eq!(
        status.nodes[0],
        NodeStatus {
            name: "pair".into(),
            workload: Some(WorkloadRef {
                kind: "StatefulSet".into(),
                name: "toy-calculator-pair".into()
            }),
            desired: 2,
            ready: 1,
            restarts: 4,
            scaler: Some(ScalerStatus {
                rendered: false,
                reasons: vec!["autoscaling disabled".into()]
            }),
            demand: Some(DemandStatus {
                diagnosis: "lag unknown".into(),
                replicas: None,
                lag: None,
                unknown_parents: vec!["double".into()]
            }),
            last_termination: Some(TerminationStatus {
                pod: "toy-calculator-pair-1".into(),
                exit_code: 70,
                reason: "Error".into(),
                code: Some("VF_WORKER_FATAL".into()),
                message: Some("boom".into()),
                remedy: Some("fix it".into()),
                disposition: Some("worker_fatal".into()),
            }),
        }
    );
    assert_eq!(
        serde_json::to_value(&status).expect("serialize status"),
        wire
    );

    // Inside a whole resource too.
    let mut flow = Flow::new("toy", FlowResourceSpec::default());
    flow.status = Some(status);
    let text = serde_json::to_string(&flow).expect("serialize flow");
    let back: Flow = serde_json::from_str(&text).expect("deserialize flow");
    assert_eq!(back, flow);
}

#[test]
fn condition_types_are_distinct_camel_case() {
    let mut all = condition_types::ALL.to_vec();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), condition_types::ALL.len());
    assert!(
        all.iter()
            .all(|t| t.starts_with(|c: char| c.is_ascii_uppercase()))
    );
}
