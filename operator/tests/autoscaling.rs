//! Autoscaling (protocol §19 SCALE-1/2/6, design §4 and §7): KEDA ScaledObjects for
//! eligible nodes, `status.nodes[].scaler` reasons for the others, the admission refusal, the
//! apply plan, and the demand observer against a real nats-server (no Kubernetes needed).
//!
//! The pure decisions themselves (every rule and diagnosis, permutation invariance, clamping,
//! monotonicity in lag) are tested in core (`scaling::*` unit tests, `tests/prop_scaling.rs`,
//! `tests/vectors_scaling.rs`).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use videoflow_core::compile::compile;
use videoflow_core::naming::{data_subject, durable_name, stream_name};
use videoflow_core::scaling::FixedScaleReason;
use videoflow_operator::controller::admission::admit;
use videoflow_operator::controller::apply::{
    FIELD_MANAGER, Stage, desired_objects, plan, replicas_handover,
};
use videoflow_operator::controller::demand::{DemandObserver, edges, observe_node_demand, reasons};
use videoflow_operator::controller::observe::{Observed, may_own_scalers};
use videoflow_operator::controller::status::{StatusConfig, compute_status};
use videoflow_operator::crd::{DemandStatus, Flow, FlowStatus, NodeStatus, ScalerStatus};
use videoflow_operator::render::autoscaling::{ScalingRule, monitoring_endpoint, triggers};
use videoflow_operator::render::{
    self, Object, RenderConfig, RenderError, Rendered, ScaledObject, Workload, flow_document,
};

const UID: &str = "6f1c2d3e-0000-4000-8000-000000000009";

fn config() -> RenderConfig {
    RenderConfig {
        worker_image: "videoflow-worker:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        namespace: "videoflow".into(),
        nats_url: None,
    }
}

fn flow(text: &str) -> Flow {
    let mut f = render::load::flow_from_text(text).unwrap_or_else(|d| panic!("parses: {d:?}"));
    f.metadata.uid = Some(UID.into());
    f.metadata.namespace = Some("videoflow".into());
    f
}

fn rendered(text: &str) -> Rendered {
    render::render(&flow(text), &config()).unwrap_or_else(|e| panic!("renders: {e}"))
}

/// A realtime flow with autoscaling on flow-wide: an eligible processor (`det`), a join
/// (`fuse`), a partitioned processor (`part`), a GPU processor (`gpu`), a consumer (`sink`)
/// and one node that opts out (`optout`).
const FLOW: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: cams}
spec:
  type: realtime
  runId: r1
  broker: {url: "nats://nats:4222", monitoringUrl: "http://nats.videoflow.svc:8222"}
  autoscaling: {enabled: true, targetLagPerReplica: 25, maxReplicas: 6}
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: mic, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: det
    kind: processor
    parents: [cam]
    autoscaling: {minReplicas: 2}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - {name: fuse, kind: processor, parents: [mic, det], component: {builtin: videoflow.processors.basic.JoinerProcessor}}
  - {name: part, kind: processor, parents: [cam], replicas: 3, partitionBy: trace_id, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: gpu, kind: processor, parents: [cam], gpu: {count: 1}, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: optout, kind: processor, parents: [cam], autoscaling: {enabled: false}, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [fuse, part, gpu, optout], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

fn scaled<'a>(r: &'a Rendered, node: &str) -> Option<&'a ScaledObject> {
    r.node(node).and_then(|n| n.scaled_object.as_ref())
}

fn scaler(r: &Rendered, node: &str) -> Option<ScalerStatus> {
    r.node(node).and_then(|n| n.scaler.clone())
}

// ---------------------------------------------------------------------------------------------
// Rendering.

#[test]
fn scale_6_eligible_node_gets_a_scaled_object_on_every_parent() {
    let r = rendered(FLOW);
    let so = scaled(&r, "det").expect("det is eligible");
    assert_eq!(so.metadata.name.as_deref(), Some("vf-cams-r1-det"));
    assert_eq!(so.metadata.namespace.as_deref(), Some("videoflow"));
    let owner = &so.metadata.owner_references.as_deref().expect("owned")[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Flow", UID));
    let labels = so.metadata.labels.as_ref().expect("labels");
    assert_eq!(
        labels.get("videoflow.io/node").map(String::as_str),
        Some("det")
    );
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("videoflow-operator")
    );
    let spec = &so.spec;
    assert_eq!(spec.scale_target_ref.name, "vf-cams-r1-det");
    assert_eq!(spec.scale_target_ref.kind.as_deref(), Some("Deployment"));
    assert_eq!(
        spec.scale_target_ref.api_version.as_deref(),
        Some("apps/v1")
    );
    assert_eq!(
        (spec.min_replica_count, spec.max_replica_count),
        (Some(2), Some(6)),
        "the node's minReplicas, the Flow's maxReplicas"
    );
    assert_eq!(spec.triggers.len(), 1, "one trigger per parent");
    let t = &spec.triggers[0];
    assert_eq!(t.type_, "nats-jetstream");
    assert_eq!(t.name.as_deref(), Some("cam"));
    let m = |k: &str| t.metadata.get(k).map(String::as_str);
    assert_eq!(
        m("natsServerMonitoringEndpoint"),
        Some("nats.videoflow.svc:8222")
    );
    assert_eq!(m("useHttps"), Some("false"));
    assert_eq!(m("account"), Some("$G"));
    assert_eq!(
        m("stream").map(str::to_owned),
        Some(stream_name("cams", "r1", "cam"))
    );
    assert_eq!(m("consumer"), Some("det--from--cam"));
    assert_eq!(m("lagThreshold"), Some("25"));

    // The HPA owns the replica count: the Deployment leaves it out, and gets a PDB since it
    // may run more than one replica.
    let det = r.node("det").expect("det");
    let Workload::Deployment(d) = &det.workload else {
        panic!("det is a Deployment")
    };
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), None);
    assert!(det.pdb.is_some());
    let status = scaler(&r, "det").expect("a scaler status");
    assert!(status.rendered);
    assert_eq!(status.reasons.len(), 1);
    assert!(status.reasons[0].contains("parent(s) cam"), "{status:?}");

    // The YAML the operator applies names KEDA's group and kind, after the Deployment.
    let objects = r.objects();
    let at = |kind: &str, name: &str| {
        objects
            .iter()
            .position(|o| o.kind() == kind && o.name() == name)
            .unwrap_or_else(|| panic!("{kind}/{name}"))
    };
    assert!(at("Deployment", "vf-cams-r1-det") < at("ScaledObject", "vf-cams-r1-det"));
    let yaml = r.to_yaml().expect("yaml");
    assert!(yaml.contains("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\n"));
}

#[test]
fn scale_6_triggers_are_sorted_by_parent_whatever_the_declaration_order() {
    let parents = ["zeta", "alpha", "mid", "alpha"].map(String::from);
    let t = triggers("f", "r", "join", &parents, "https://nats:8222/", 10);
    let names: Vec<_> = t.iter().filter_map(|t| t.name.as_deref()).collect();
    assert_eq!(names, ["alpha", "mid", "zeta"]);
    let mut reversed = parents.to_vec();
    reversed.reverse();
    assert_eq!(
        triggers("f", "r", "join", &reversed, "https://nats:8222/", 10),
        t
    );
    assert_eq!(t[2].metadata["consumer"], durable_name("join", "zeta"));
    assert_eq!(t[2].metadata["stream"], stream_name("f", "r", "zeta"));
    assert_eq!(t[0].metadata["useHttps"], "true");
    assert_eq!(t[0].metadata["natsServerMonitoringEndpoint"], "nats:8222");
    assert_eq!(
        monitoring_endpoint("nats:8222"),
        ("nats:8222".into(), false)
    );
}

#[test]
fn scale_6_ineligible_nodes_get_every_fixed_scale_reason_and_no_scaler() {
    let r = rendered(FLOW);
    let reasons = |node: &str| {
        let s = scaler(&r, node).unwrap_or_else(|| panic!("{node}: a scaler status"));
        assert!(!s.rendered, "{node}");
        assert!(scaled(&r, node).is_none(), "{node}");
        s.reasons
    };
    assert_eq!(reasons("fuse"), vec![FixedScaleReason::Join.to_string()]);
    assert_eq!(
        reasons("part"),
        vec![FixedScaleReason::Partitioned.to_string()]
    );
    assert_eq!(
        reasons("gpu"),
        vec![FixedScaleReason::GpuWithoutOptIn.to_string()]
    );
    let sink = reasons("sink");
    assert_eq!(sink.len(), 2, "{sink:?}");
    assert!(sink[0].starts_with("consumer nodes are not autoscaled"));
    assert_eq!(sink[1], FixedScaleReason::Join.to_string());
    let cam = reasons("cam");
    assert_eq!(cam.len(), 1, "a live producer: not a processor only");
    // Not requested: no status entry, no scaler, the declared count stays.
    assert_eq!(scaler(&r, "optout"), None);
    assert!(scaled(&r, "optout").is_none());
    let Workload::Deployment(d) = &r.node("optout").expect("optout").workload else {
        panic!("a Deployment")
    };
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(1));
    // Ineligible nodes keep their declared counts too.
    let Workload::StatefulSet(s) = &r.node("part").expect("part").workload else {
        panic!("a StatefulSet")
    };
    assert_eq!(s.spec.as_ref().and_then(|s| s.replicas), Some(3));
}

#[test]
fn scale_6_gpu_opt_in_makes_a_gpu_processor_eligible() {
    let text = FLOW.replace(
        "autoscaling: {enabled: true, targetLagPerReplica: 25, maxReplicas: 6}",
        "autoscaling: {enabled: true, gpu: true}",
    );
    let r = rendered(&text);
    let so = scaled(&r, "gpu").expect("opted in");
    assert_eq!(
        (so.spec.min_replica_count, so.spec.max_replica_count),
        (Some(1), Some(10)),
        "core's defaults"
    );
    assert_eq!(so.spec.triggers[0].metadata["lagThreshold"], "10");
}

#[test]
fn scale_6_job_rendered_processor_with_autoscaling_is_refused_at_admission() {
    let batch = FLOW
        .replace("type: realtime", "type: batch")
        .replace("finite: false", "finite: true");
    let problems = admit(&flow(&batch), &config()).expect_err("refused");
    let capability: Vec<_> = problems
        .iter()
        .filter(|p| p.code == "VF_CAPABILITY")
        .collect();
    assert!(!capability.is_empty(), "{problems:#?}");
    assert!(
        capability
            .iter()
            .any(|p| p.message.contains("Node 'det' cannot be autoscaled")),
        "{capability:#?}"
    );
    assert_eq!(capability[0].path, "spec.autoscaling.enabled");
}

#[test]
fn scale_1_invalid_rules_and_a_missing_monitoring_url_are_render_errors() {
    let bad_rule = FLOW.replace(
        "autoscaling: {minReplicas: 2}",
        "autoscaling: {minReplicas: 9}",
    );
    match render::render(&flow(&bad_rule), &config()) {
        Err(RenderError::InvalidField { path, message }) => {
            assert_eq!(path, "spec.nodes[2].autoscaling");
            assert_eq!(message, "max_replicas (6) is below min_replicas (9).");
        }
        other => panic!("expected an invalid field, got {other:?}"),
    }
    let no_monitoring = FLOW.replace(", monitoringUrl: \"http://nats.videoflow.svc:8222\"", "");
    match render::render(&flow(&no_monitoring), &config()) {
        Err(RenderError::InvalidField { path, .. }) => {
            assert_eq!(path, "spec.broker.monitoringUrl");
        }
        other => panic!("expected an invalid field, got {other:?}"),
    }
    // Without any eligible node, no monitoring endpoint is needed.
    let only_ineligible = no_monitoring
        .replace(
            "autoscaling: {minReplicas: 2}",
            "autoscaling: {enabled: false}",
        )
        .replace(
            "gpu: {count: 1}",
            "gpu: {count: 1}, autoscaling: {enabled: false}",
        );
    render::render(&flow(&only_ineligible), &config()).expect("renders");
}

#[test]
fn a_monitoring_url_with_credentials_is_refused_and_never_reaches_a_scaled_object() {
    let with_credentials = FLOW.replace(
        "http://nats.videoflow.svc:8222",
        "https://keda:s3cret@nats.videoflow.svc:8222",
    );
    let result = render::render(&flow(&with_credentials), &config());
    if let Ok(r) = &result {
        let text = serde_json::to_string(&r.objects()).expect("json");
        panic!(
            "rendered, with the password in a ScaledObject: {}",
            text.contains("s3cret")
        );
    }
    match result {
        Err(RenderError::InvalidField { path, message }) => {
            assert_eq!(path, "spec.broker.monitoringUrl");
            assert!(message.contains("user information"), "{message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
        other => panic!("expected an invalid field, got {other:?}"),
    }
    // Admission reports it like every other problem, the password nowhere.
    let problems = format!("{:?}", admit(&flow(&with_credentials), &config()));
    assert!(problems.contains("spec.broker.monitoringUrl"), "{problems}");
    assert!(!problems.contains("s3cret"), "{problems}");
    // Only KEDA reads the monitoring URL: a Flow with no scaler may name it as it likes.
    let unscaled = with_credentials.replace(
        "autoscaling: {enabled: true,",
        "autoscaling: {enabled: false,",
    );
    render::render(&flow(&unscaled), &config()).expect("renders");
}

// ---------------------------------------------------------------------------------------------
// The apply plan, pruning and status.

#[test]
fn scaled_objects_are_applied_with_the_workers_and_orphans_are_pruned() {
    let f = flow(FLOW);
    let r = rendered(FLOW);
    let desired = desired_objects(&r).expect("desired");
    let so: Vec<_> = desired
        .iter()
        .filter(|d| d.kind == "ScaledObject")
        .collect();
    assert_eq!(so.len(), 1);
    assert_eq!(so[0].stage, Stage::Workers);
    assert!(!so[0].create_only(), "a ScaledObject is updated in place");
    assert_eq!(so[0].body["apiVersion"], "keda.sh/v1alpha1");
    assert_eq!(so[0].body["kind"], "ScaledObject");

    // Before provisioning completes, no ScaledObject is applied; after, it is, with its
    // Deployment — once `det`'s child `fuse` is up (a REALTIME node starts after its
    // children).
    let observed = Observed::default();
    assert!(
        plan(&desired, &observed, false, Some(UID))
            .apply
            .iter()
            .all(|d| d.kind != "ScaledObject")
    );
    assert!(
        plan(&desired, &observed, true, Some(UID))
            .apply
            .iter()
            .all(|d| d.kind != "ScaledObject"),
        "det waits for fuse"
    );
    let Workload::Deployment(fuse) = &r.node("fuse").expect("fuse").workload else {
        panic!("fuse is a Deployment");
    };
    let mut fuse = fuse.clone();
    fuse.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
        ready_replicas: Some(1),
        ..Default::default()
    });
    let fuse_up = Observed {
        deployments: vec![fuse],
        ..Observed::default()
    };
    assert!(
        plan(&desired, &fuse_up, true, Some(UID))
            .apply
            .iter()
            .any(|d| d.kind == "ScaledObject")
    );

    // Autoscaling switched off: the ScaledObject left behind is pruned.
    let off = FLOW.replace(
        "autoscaling: {enabled: true,",
        "autoscaling: {enabled: false,",
    );
    let off_desired = desired_objects(&rendered(&off)).expect("desired");
    assert!(off_desired.iter().all(|d| d.kind != "ScaledObject"));
    let mut leftover: ScaledObject = scaled(&r, "det").expect("det").clone();
    leftover.metadata.annotations = None;
    let observed = Observed {
        scaled_objects: vec![leftover],
        ..Observed::default()
    };
    let pruned = plan(&off_desired, &observed, true, Some(UID)).prune;
    assert_eq!(pruned.len(), 1);
    assert_eq!(
        (pruned[0].kind, pruned[0].name.as_str()),
        ("ScaledObject", "vf-cams-r1-det")
    );

    // Which Flows the reconciler reads ScaledObjects for.
    assert!(may_own_scalers(&f));
    let mut f_off = flow(&off);
    assert!(!may_own_scalers(&f_off), "never asked, nothing rendered");
    f_off.status = Some(FlowStatus {
        nodes: vec![NodeStatus {
            name: "det".into(),
            scaler: Some(ScalerStatus {
                rendered: true,
                reasons: Vec::new(),
            }),
            ..NodeStatus::default()
        }],
        ..FlowStatus::default()
    });
    assert!(
        may_own_scalers(&f_off),
        "a rendered scaler may be left behind"
    );
}

/// A live Deployment at `replicas`, resourceVersion "41", whose `spec.replicas` the given
/// managers own through operations `(manager, operation)`.
fn live_deployment(replicas: i32, owners: &[(&str, &str)]) -> Deployment {
    let mut d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vf-cams-r1-det", "resourceVersion": "41"},
        "spec": {"replicas": replicas, "selector": {}, "template": {}},
    }))
    .expect("deployment");
    d.metadata.managed_fields = Some(
        owners
            .iter()
            .map(|(manager, operation)| {
                serde_json::from_value(serde_json::json!({
                    "manager": manager, "operation": operation, "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}},
                }))
                .expect("managed fields entry")
            })
            .collect(),
    );
    d
}

#[test]
fn switching_autoscaling_on_hands_the_operators_replica_count_over_before_dropping_it() {
    let deployment = |text: &str, node: &str| {
        desired_objects(&rendered(text))
            .expect("desired")
            .into_iter()
            .find(|d| d.kind == "Deployment" && d.name == format!("vf-cams-r1-{node}"))
            .expect("the node's Deployment")
    };
    let autoscaled = deployment(FLOW, "det");
    assert!(
        autoscaled.body["spec"].get("replicas").is_none(),
        "the HPA owns it"
    );

    // The operator's apply owned the count (autoscaling just switched on): hand it over at
    // the live value, under the read's resourceVersion.
    let ours = live_deployment(2, &[(FIELD_MANAGER, "Apply")]);
    assert_eq!(
        replicas_handover(&autoscaled, &ours),
        Some((2, "41".to_owned()))
    );
    // Already the HPA's (or anyone else's): nothing to hand over.
    let hpas = live_deployment(3, &[("kube-controller-manager", "Update")]);
    assert_eq!(replicas_handover(&autoscaled, &hpas), None);
    // An update by our own manager name is not our apply.
    let updated = live_deployment(3, &[(FIELD_MANAGER, "Update")]);
    assert_eq!(replicas_handover(&autoscaled, &updated), None);
    // A Deployment the operator keeps a count for never hands it over.
    let fixed = deployment(FLOW, "sink");
    assert!(fixed.body["spec"].get("replicas").is_some());
    assert_eq!(replicas_handover(&fixed, &ours), None);
}

#[test]
fn status_nodes_carry_the_scaler_decision() {
    let f = flow(FLOW);
    let r = rendered(FLOW);
    let now: Timestamp = "2030-01-01T12:00:00Z".parse().expect("time");
    let status = compute_status(&f, &r, &Observed::default(), now, &StatusConfig::default()).status;
    let node = |n: &str| {
        status
            .nodes
            .iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    assert_eq!(node("det").scaler.as_ref().map(|s| s.rendered), Some(true));
    assert_eq!(
        node("fuse").scaler.as_ref().map(|s| s.rendered),
        Some(false)
    );
    assert_eq!(node("optout").scaler, None);
    let json = serde_json::to_value(&status).expect("json");
    let fuse = &json["nodes"][3];
    assert_eq!(fuse["name"], "fuse");
    assert_eq!(fuse["scaler"]["rendered"], false);
    assert!(fuse["scaler"]["reasons"][0].as_str().is_some());
}

#[test]
fn rendered_scaled_objects_fit_the_keda_crd_schema() {
    let path = videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../config/keda/scaledobjects.keda.sh.yaml");
    let text = std::fs::read_to_string(path).expect("the KEDA CRD file");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("a CRD");
    assert_eq!(crd.metadata.name.as_deref(), Some("scaledobjects.keda.sh"));
    let version = &crd.spec.versions[0];
    assert_eq!(
        (crd.spec.group.as_str(), version.name.as_str()),
        ("keda.sh", "v1alpha1")
    );
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("a schema");
    let spec_schema = &schema.properties.as_ref().expect("properties")["spec"];
    let props = spec_schema.properties.as_ref().expect("spec properties");
    let r = rendered(FLOW);
    let body =
        serde_json::to_value(Object::ScaledObject(scaled(&r, "det").expect("det"))).expect("json");
    for required in spec_schema.required.iter().flatten() {
        assert!(body["spec"].get(required).is_some(), "spec.{required}");
    }
    for (key, value) in body["spec"].as_object().expect("spec") {
        let declared = props
            .get(key)
            .unwrap_or_else(|| panic!("spec.{key} is not in the CRD"));
        let ty = declared.type_.as_deref();
        let fits = match value {
            serde_json::Value::Number(_) => ty == Some("integer"),
            serde_json::Value::Array(_) => ty == Some("array"),
            serde_json::Value::Object(_) => ty == Some("object"),
            _ => false,
        };
        assert!(fits, "spec.{key}: {value} against {ty:?}");
    }
    for trigger in body["spec"]["triggers"].as_array().expect("triggers") {
        for (k, v) in trigger["metadata"].as_object().expect("metadata") {
            assert!(v.is_string(), "trigger metadata {k} must be a string");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The demand observer against a real nats-server.

/// A realtime join of two live producers, as the observer sees it.
const JOIN: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: demand}
spec:
  type: realtime
  runId: r1
  nodes:
  - {name: left, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: right, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: join, kind: processor, parents: [right, left], autoscaling: {enabled: true}, component: {builtin: videoflow.processors.basic.JoinerProcessor}}
  - {name: tap, kind: consumer, parents: [left], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

/// Creates the parent's stream and the join's durable on it, as provisioning would.
async fn provision_edge(js: &jetstream::Context, parent: &str) {
    let stream = js
        .create_stream(stream::Config {
            name: stream_name("demand", "r1", parent),
            subjects: vec![data_subject("demand", "r1", parent)],
            ..stream::Config::default()
        })
        .await
        .expect("stream");
    stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(durable_name("join", parent)),
            filter_subject: data_subject("demand", "r1", parent),
            ack_policy: consumer::AckPolicy::Explicit,
            ..consumer::pull::Config::default()
        })
        .await
        .expect("durable");
}

async fn publish(js: &jetstream::Context, parent: &str, n: usize) {
    for i in 0..n {
        js.publish(data_subject("demand", "r1", parent), format!("{i}").into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
}

/// Delivers and acknowledges everything waiting for the join on `parent`.
async fn drain(js: &jetstream::Context, parent: &str, n: usize) {
    let stream = js
        .get_stream(stream_name("demand", "r1", parent))
        .await
        .expect("stream");
    let durable: consumer::PullConsumer = stream
        .get_consumer(&durable_name("join", parent))
        .await
        .expect("durable");
    let mut batch = durable
        .fetch()
        .max_messages(n)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .expect("fetch");
    let mut acked = 0;
    while let Some(message) = batch.next().await {
        message.expect("message").ack().await.expect("ack");
        acked += 1;
    }
    assert_eq!(acked, n);
}

#[tokio::test]
async fn scale_2_join_with_one_parent_drained_is_starved_and_unknown_once_the_broker_stops() {
    let server =
        videoflow_testkit::NatsServer::start().expect("nats-server (scripts/install-deps)");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client);
    provision_edge(&js, "left").await;
    provision_edge(&js, "right").await;
    publish(&js, "left", 5).await;
    drain(&js, "left", 5).await;
    publish(&js, "right", 42).await;

    let f = flow(JOIN);
    let compiled = compile(&flow_document(&f).expect("doc")).expect("compiles");
    let spec = compiled.node("join").expect("join");
    let decl = f
        .spec
        .nodes
        .iter()
        .find(|d| d.name == "join")
        .expect("decl");
    let rule = ScalingRule::of(&f.spec, decl);
    let found: Vec<_> = edges(&compiled, spec)
        .iter()
        .map(|e| e.parent.clone())
        .collect();
    assert_eq!(found, ["left", "right"], "every parent, sorted");

    // Generous while the broker is up: a read that times out on a loaded machine is
    // "unknown", which is right for the observer and wrong for this assertion.
    let timeout = Duration::from_secs(15);
    let demand = observe_node_demand(Ok(&js), &compiled, spec, rule, timeout).await;
    assert_eq!(
        demand,
        DemandStatus {
            diagnosis: "starved".into(),
            replicas: Some(5),
            lag: Some(42),
            unknown_parents: Vec::new(),
        },
        "left drained, right 42 behind: ceil(42 / 10) = 5"
    );

    // The same through the operator's observer, which connects by itself.
    let observer = DemandObserver::new(Duration::from_secs(30), timeout);
    let mut with_broker = f.clone();
    with_broker.spec.broker = Some(videoflow_core::model::BrokerSpec {
        url: Some(server.url()),
        ..Default::default()
    });
    let by_node = observer.observe_flow(&with_broker, None).await;
    assert_eq!(by_node.keys().collect::<Vec<_>>(), ["join"]);
    assert_eq!(by_node["join"], demand);

    // The broker goes away: unknown, every parent named, never a replica count.
    drop(server);
    let timeout = Duration::from_secs(2);
    let demand = observe_node_demand(Ok(&js), &compiled, spec, rule, timeout).await;
    assert_eq!(demand.diagnosis, "unknown");
    assert_eq!(demand.replicas, None, "never 0 replicas: {demand:?}");
    assert_eq!(demand.lag, None);
    assert_eq!(demand.unknown_parents, ["left", "right"]);
    let by_node = observer.observe_flow(&with_broker, None).await;
    assert_eq!(by_node["join"].diagnosis, "unknown");
    assert_eq!(by_node["join"].replicas, None);
}

#[tokio::test]
async fn scale_2_unreachable_or_unnamed_broker_is_unknown_never_zero() {
    let observer = DemandObserver::new(Duration::from_secs(30), Duration::from_secs(2));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut f = flow(JOIN);
    f.spec.broker = Some(videoflow_core::model::BrokerSpec {
        url: Some(format!("nats://127.0.0.1:{port}")),
        ..Default::default()
    });
    let by_node = observer.observe_flow(&f, None).await;
    let join = &by_node["join"];
    assert_eq!(
        (join.diagnosis.as_str(), join.replicas, join.lag),
        ("unknown", None, None)
    );
    assert_eq!(join.unknown_parents, ["left", "right"]);

    // No broker at all: unknown too, through the pure path.
    let compiled = compile(&flow_document(&f).expect("doc")).expect("compiles");
    let spec = compiled.node("join").expect("join");
    let rule = ScalingRule::of(&f.spec, &f.spec.nodes[2]);
    let demand = observe_node_demand(
        Err((reasons::NO_BROKER, "none")),
        &compiled,
        spec,
        rule,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(demand.diagnosis, "unknown");
    assert_eq!(demand.replicas, None);
    f.spec.broker = None;
    assert_eq!(
        observer.observe_flow(&f, None).await["join"].diagnosis,
        "unknown"
    );
}

#[tokio::test]
async fn scale_1_demand_is_read_only_for_autoscaled_nodes_and_at_the_observers_own_interval() {
    let server =
        videoflow_testkit::NatsServer::start().expect("nats-server (scripts/install-deps)");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client);
    provision_edge(&js, "left").await;
    provision_edge(&js, "right").await;
    publish(&js, "right", 7).await;
    let mut f = flow(JOIN);
    f.metadata.generation = Some(1);
    f.spec.broker = Some(videoflow_core::model::BrokerSpec {
        url: Some(server.url()),
        ..Default::default()
    });
    // The broker is up throughout: a read timed out on a loaded machine would be "unknown"
    // (no lag), right for the observer and a false failure here.
    let timeout = Duration::from_secs(15);

    // `tap` has parents but no autoscaling: nobody acts on its demand, so it is not read.
    let observer = DemandObserver::new(Duration::from_secs(3600), timeout);
    let first = observer.demand_of(&f, None).await;
    assert_eq!(first.keys().collect::<Vec<_>>(), ["join"], "{first:?}");
    assert_eq!(first["join"].lag, Some(7));

    // Within the interval a reconcile reuses the observation: no broker read, no new lag.
    publish(&js, "right", 5).await;
    assert_eq!(observer.demand_of(&f, None).await, first);
    // A new generation is observed at once.
    f.metadata.generation = Some(2);
    assert_eq!(observer.demand_of(&f, None).await["join"].lag, Some(12));
    // Past the interval, a new read.
    let eager = DemandObserver::new(Duration::ZERO, timeout);
    publish(&js, "right", 1).await;
    assert_eq!(eager.demand_of(&f, None).await["join"].lag, Some(13));

    // A Flow without an autoscaled node costs no broker read: an unreachable broker is never
    // even tried, and every node's demand is cleared.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut fixed = flow(&JOIN.replace("autoscaling: {enabled: true}, ", ""));
    fixed.spec.broker = Some(videoflow_core::model::BrokerSpec {
        url: Some(format!("nats://127.0.0.1:{port}")),
        ..Default::default()
    });
    assert!(!videoflow_operator::controller::demand::observes(&fixed));
    assert!(observer.demand_of(&fixed, None).await.is_empty());
    assert!(observer.observe_flow(&fixed, None).await.is_empty());
}
