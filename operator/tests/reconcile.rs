//! The reconciler against a mocked API server (design §7 and §9): a `tower-test`
//! service behind a real `kube::Client`.
//!
//! Each scenario seeds the objects the API server holds, runs one reconcile, and asserts
//! every request in order — method, URI and, for writes, the body. The mock answers
//! whatever it is asked, so an unexpected request is not an error on the server side: it
//! shows up in the recorded list, which each test compares exactly. The server task ends
//! when the client is dropped, so a request issued after the reconcile returned (a stray
//! background write) is recorded too; a timeout bounds the whole scenario.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use videoflow_operator::controller::{Context, Metrics, StatusConfig, reconcile};
use videoflow_operator::crd::Flow;
use videoflow_operator::render::{self, RenderConfig};

const NS: &str = "videoflow";
const UID: &str = "6f1c2d3e-0000-4000-8000-000000000001";
const NOW: &str = "2030-01-01T12:00:00Z";
const EARLIER: &str = "2030-01-01T11:00:00Z";

// ---------------------------------------------------------------------------------------------
// Flows.

const REALTIME: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: cams}
spec:
  type: realtime
  broker: {url: "nats://nats:4222"}
  nodes:
  - {name: camera, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: detect, kind: processor, parents: [camera], component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [detect], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

const BATCH: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: nums}
spec:
  type: batch
  broker: {url: "nats://nats:4222"}
  nodes:
  - {name: numbers, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: double, kind: processor, parents: [numbers], component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [double], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

/// The issue's example: a BATCH flow with autoscaling on a processor plus a two-replica join
/// without partitionBy.
const INVALID: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: bad}
spec:
  type: batch
  broker: {url: "nats://nats:4222"}
  nodes:
  - {name: a, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: b, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: scaled
    kind: processor
    parents: [a]
    autoscaling: {enabled: true, maxReplicas: 4}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: join
    kind: processor
    parents: [scaled, b]
    replicas: 2
    component: {builtin: videoflow.processors.basic.JoinerProcessor}
  - {name: sink, kind: consumer, parents: [join], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

fn config() -> RenderConfig {
    RenderConfig {
        worker_image: "videoflow-worker:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        namespace: NS.into(),
        nats_url: None,
    }
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// A Flow as the API server returns it: namespace, uid, generation, and our finalizer.
fn flow(text: &str) -> Flow {
    let mut f = render::load::flow_from_text(text).expect("flow parses");
    f.metadata.namespace = Some(NS.into());
    f.metadata.uid = Some(UID.into());
    f.metadata.generation = Some(1);
    f.metadata.resource_version = Some("1".into());
    f.metadata.finalizers = Some(vec!["videoflow.io/teardown".into()]);
    f
}

fn rendered(f: &Flow) -> render::Rendered {
    render::render(f, &config()).expect("renders")
}

// ---------------------------------------------------------------------------------------------
// The mock API server.

/// One request the reconciler made.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    uri: String,
    body: Option<Value>,
}

impl Call {
    /// `METHOD /path` without the query.
    fn line(&self) -> String {
        let path = self.uri.split('?').next().unwrap_or_default();
        format!("{} {path}", self.method)
    }

    fn is_write(&self) -> bool {
        self.method != "GET"
    }
}

/// What the API server holds: objects by resource plural.
#[derive(Default, Clone)]
struct Cluster {
    objects: BTreeMap<&'static str, Vec<Value>>,
    /// A write the API server refuses: (path contains, HTTP code, reason, message).
    refuse: Option<(&'static str, u16, &'static str, &'static str)>,
}

impl Cluster {
    fn with(mut self, plural: &'static str, object: Value) -> Self {
        self.objects.entry(plural).or_default().push(object);
        self
    }

    /// Every rendered object of `f`'s run, as applied (fingerprint annotation included), so
    /// the plan finds nothing to do.
    fn applied(mut self, f: &Flow, workers: bool) -> Self {
        let r = rendered(f);
        let desired = videoflow_operator::controller::apply::desired_objects(&r).expect("desired");
        for d in desired {
            if !workers && d.stage == videoflow_operator::controller::apply::Stage::Workers {
                continue;
            }
            self = self.with(plural(d.kind), d.body.clone());
        }
        self
    }

    /// Sets `status` on the object of that kind and name.
    fn status(mut self, plural: &'static str, name: &str, status: Value) -> Self {
        for o in self.objects.entry(plural).or_default() {
            if o["metadata"]["name"] == name {
                o["status"] = status.clone();
            }
        }
        self
    }
}

fn plural(kind: &str) -> &'static str {
    match kind {
        "ConfigMap" => "configmaps",
        "Job" => "jobs",
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "Service" => "services",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "Pod" => "pods",
        other => panic!("unknown kind {other}"),
    }
}

async fn respond(req: Request<Body>, flow: &Value, cluster: &Cluster) -> (Call, Response<Body>) {
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let bytes = req.into_body().collect_bytes().await.expect("body");
    let body: Option<Value> = if bytes.is_empty() {
        None
    } else {
        Some(serde_json::from_slice(&bytes).expect("JSON body"))
    };
    let path = uri.split('?').next().unwrap_or_default().to_owned();
    if let Some((part, code, reason, message)) = cluster.refuse
        && method == "PATCH"
        && path.contains(part)
    {
        let status = json!({"apiVersion": "v1", "kind": "Status", "metadata": {},
            "status": "Failure", "code": code, "reason": reason, "message": message});
        let response = Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&status).expect("serialize")))
            .expect("response");
        return (Call { method, uri, body }, response);
    }
    let answer = match method.as_str() {
        "GET" => {
            let resource = path.rsplit('/').next().unwrap_or_default();
            let items = cluster
                .objects
                .iter()
                .find(|(p, _)| **p == resource)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"}, "items": items})
        }
        "PATCH" if path.contains("/flows/") => {
            let mut f = flow.clone();
            if let Some(status) = body.as_ref().and_then(|b| b.get("status")) {
                f["status"] = status.clone();
            }
            f
        }
        "DELETE" => {
            json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"})
        }
        _ => body.clone().unwrap_or_else(|| json!({})),
    };
    let response = Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&answer).expect("serialize")))
        .expect("response");
    (Call { method, uri, body }, response)
}

/// Runs one reconcile of `flow` against `cluster` at `now`; returns its result and every
/// request made, in order.
async fn scenario(f: Flow, cluster: Cluster, now: &str) -> (Result<Action, String>, Vec<Call>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let flow_json = serde_json::to_value(&f).expect("flow json");
    let server = tokio::spawn(async move {
        let mut calls = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let (call, response) = respond(req, &flow_json, &cluster).await;
            calls.push(call);
            send.send_response(response);
        }
        calls
    });
    let client = kube::Client::new(service, NS);
    let instant = ts(now);
    let ctx = Arc::new(Context::new(
        client,
        config(),
        StatusConfig::default(),
        Arc::new(Metrics::new()),
        Arc::new(move || instant),
        None,
    ));
    let result = tokio::time::timeout(Duration::from_secs(10), reconcile(Arc::new(f), ctx))
        .await
        .expect("the reconcile finishes")
        .map_err(|e| e.to_string());
    let calls = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("no request after the reconcile returned: the client was dropped")
        .expect("server task");
    (result, calls)
}

const LISTS: [&str; 7] = [
    "configmaps",
    "jobs",
    "deployments",
    "statefulsets",
    "services",
    "poddisruptionbudgets",
    "pods",
];

/// The seven label-selected reads every admitted reconcile starts with.
fn assert_reads(calls: &[Call], flow: &str) {
    assert!(calls.len() >= 7, "expected the seven reads, got {calls:#?}");
    for (call, resource) in calls.iter().zip(LISTS) {
        let group = match resource {
            "jobs" => "/apis/batch/v1",
            "deployments" | "statefulsets" => "/apis/apps/v1",
            "poddisruptionbudgets" => "/apis/policy/v1",
            _ => "/api/v1",
        };
        assert_eq!(call.method, "GET");
        assert_eq!(
            call.uri,
            format!(
                "{group}/namespaces/{NS}/{resource}?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dvideoflow-operator%2Cvideoflow.io%2Fflow%3D{flow}"
            )
        );
    }
}

fn writes(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.is_write())
        .map(Call::line)
        .collect()
}

fn status_patch(calls: &[Call]) -> Value {
    let call = calls
        .iter()
        .find(|c| c.method == "PATCH" && c.uri.contains("/status?"))
        .unwrap_or_else(|| panic!("no status patch in {calls:#?}"));
    assert_eq!(
        call.uri,
        format!(
            "/apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/{}/status?&force=true&fieldManager=videoflow-operator",
            call.uri
                .split("/flows/")
                .nth(1)
                .and_then(|s| s.split('/').next())
                .unwrap_or_default()
        )
    );
    let body = call.body.clone().expect("status body");
    assert_eq!(body["apiVersion"], "videoflow.io/v1alpha1");
    assert_eq!(body["kind"], "Flow");
    body["status"].clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status:#}"))
}

fn events(calls: &[Call]) -> Vec<(String, String)> {
    calls
        .iter()
        .filter(|c| c.method == "POST" && c.uri.contains("/events"))
        .map(|c| {
            let b = c.body.as_ref().expect("event body");
            (
                b["type"].as_str().unwrap_or_default().to_owned(),
                b["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// A Flow whose stored status is what the reconciler wrote last time.
fn with_status(mut f: Flow, status: &Value) -> Flow {
    f.status = Some(serde_json::from_value(status.clone()).expect("status"));
    f
}

fn complete_job(at: &str) -> Value {
    json!({"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": at}], "completionTime": at, "succeeded": 1})
}

fn worker_pod(f: &Flow, node: &str, name: &str, container_status: Value) -> Value {
    let r = rendered(f);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/managed-by": "videoflow-operator",
                "app.kubernetes.io/component": "worker",
                "videoflow.io/flow": r.flow_id,
                "videoflow.io/run": r.run_id,
                "videoflow.io/node": node,
            }
        },
        "spec": {"containers": [{"name": "worker", "image": "videoflow-worker:test"}]},
        "status": {"containerStatuses": [container_status]}
    })
}

/// A REALTIME cluster where everything is applied, provisioned and ready.
fn running_realtime(f: &Flow) -> Cluster {
    let r = rendered(f);
    let mut c = Cluster::default().applied(f, true).status(
        "jobs",
        r.provision.metadata.name.as_deref().unwrap_or_default(),
        complete_job(EARLIER),
    );
    for n in &r.nodes {
        c = c.status(
            "deployments",
            n.workload.name(),
            json!({"replicas": 1, "readyReplicas": 1}),
        );
    }
    c
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// Reconciles the Flow `text` (named `name`, no finalizer yet) that admission refuses: the
/// reconcile waits for a change, and its only writes are the status patch and its event —
/// no reads, no creates, no finalizer. Returns the status it patched and the calls.
async fn refused_at_admission(text: &str, name: &str) -> (Value, Vec<Call>) {
    let mut f = flow(text);
    f.metadata.finalizers = None;
    let (result, calls) = scenario(f, Cluster::default(), NOW).await;
    assert!(matches!(result, Ok(ref a) if *a == Action::await_change()));
    assert_eq!(
        calls.iter().map(Call::line).collect::<Vec<_>>(),
        vec![
            format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/{name}/status"),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
        ],
        "no reads, no creates, no finalizer"
    );
    (status_patch(&calls), calls)
}

/// Done-when: the invalid Flow gets Admitted=False naming both problems, and nothing is
/// created — the only writes are the status patch and its Warning event.
#[tokio::test]
async fn invalid_flow_is_refused_with_every_problem_and_nothing_is_created() {
    let (status, calls) = refused_at_admission(INVALID, "bad").await;
    let admitted = condition(&status, "Admitted");
    assert_eq!(admitted["status"], "False");
    assert_eq!(admitted["reason"], "Invalid");
    assert_eq!(admitted["observedGeneration"], 1);
    assert_eq!(admitted["lastTransitionTime"], NOW);
    let message = admitted["message"].as_str().expect("message");
    assert!(
        message.starts_with("2 problem(s), nothing was created"),
        "{message}"
    );
    assert!(
        message.contains("[VF_GRAPH_UNPARTITIONED_JOIN] spec.nodes[3].partitionBy:"),
        "{message}"
    );
    assert!(
        message.contains(
            "[VF_CAPABILITY] spec.nodes[2].autoscaling.enabled: Node 'scaled' cannot be autoscaled"
        ),
        "{message}"
    );
    assert!(
        message.contains("Remedy: Set partitionBy: trace_id"),
        "{message}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(status["phase"], "Failed");
    assert_eq!(
        events(&calls),
        vec![("Warning".into(), "AdmissionFailed".into())]
    );
}

/// Admission knows the nodes (the user's report: a misspelt class was admitted and failed
/// only in its pod): an unknown built-in class, a class of another family than its kind and
/// a mistyped parameter are refused by the reconcile itself — Admitted=False naming each with
/// its path and "did you mean", nothing created, no finalizer.
#[tokio::test]
async fn unknown_classes_wrong_families_and_mistyped_params_are_refused_at_admission() {
    let text = REALTIME
        .replace(
            "component: {builtin: videoflow.consumers.basic.VoidConsumer}",
            "component: {builtin: videoflow.consumers.basic.VoidConsumr}",
        )
        .replace(
            "finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}",
            "finite: false, component: {builtin: videoflow.processors.basic.IdentityProcessor}}",
        )
        .replace(
            "parents: [camera], component: {builtin: videoflow.processors.basic.IdentityProcessor}}",
            "parents: [camera], params: {fsp: 2}, component: {builtin: videoflow.processors.basic.IdentityProcessor}}",
        );
    assert_ne!(text, REALTIME);
    let (status, calls) = refused_at_admission(&text, "cams").await;
    let admitted = condition(&status, "Admitted");
    assert_eq!(admitted["status"], "False");
    let message = admitted["message"].as_str().expect("message");
    assert!(message.starts_with("3 problem(s)"), "{message}");
    for want in [
        "[VF_FLOW_BUILTIN] spec.nodes[0].component.builtin:",
        "[VF_FLOW_BUILTIN] spec.nodes[1].params.fsp:",
        "Did you mean 'fps'?",
        "[VF_FLOW_BUILTIN] spec.nodes[2].component.builtin:",
        "Did you mean 'videoflow.consumers.basic.VoidConsumer'?",
    ] {
        assert!(message.contains(want), "{want} in {message}");
    }
    assert_eq!(
        events(&calls),
        vec![("Warning".into(), "AdmissionFailed".into())]
    );
}

/// Reconciling the same invalid Flow again writes nothing.
#[tokio::test]
async fn invalid_flow_reconciled_again_writes_nothing() {
    let mut f = flow(INVALID);
    f.metadata.finalizers = None;
    let (_, calls) = scenario(f.clone(), Cluster::default(), NOW).await;
    let f = with_status(f, &status_patch(&calls));
    let (result, calls) = scenario(f, Cluster::default(), "2030-01-01T13:00:00Z").await;
    assert!(result.is_ok());
    assert!(calls.is_empty(), "{calls:#?}");
}

/// A new Flow: finalizer, specs ConfigMap and provisioning Job — but no workers before
/// provisioning completed; Admitted=True, Provisioned=False, events Admitted and RunStarted.
#[tokio::test]
async fn new_flow_gets_the_finalizer_specs_and_provisioning_job_only() {
    let mut f = flow(REALTIME);
    f.metadata.finalizers = None;
    let r = rendered(&f);
    let (result, calls) = scenario(f, Cluster::default(), NOW).await;
    assert!(result.is_ok(), "{result:?}");
    assert_reads(&calls, "cams");
    let specs = r.specs.metadata.name.clone().expect("name");
    let provision = r.provision.metadata.name.clone().expect("name");
    assert_eq!(
        writes(&calls),
        vec![
            format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams"),
            format!("PATCH /api/v1/namespaces/{NS}/configmaps/{specs}"),
            format!("PATCH /apis/batch/v1/namespaces/{NS}/jobs/{provision}"),
            format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams/status"),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
        ]
    );
    let finalizer = &calls[7];
    assert_eq!(
        finalizer.uri,
        format!("/apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams?")
    );
    assert_eq!(
        finalizer.body,
        Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["videoflow.io/teardown"]},
        ]))
    );
    let cm = &calls[8];
    assert_eq!(
        cm.uri,
        format!(
            "/api/v1/namespaces/{NS}/configmaps/{specs}?&force=true&fieldManager=videoflow-operator"
        )
    );
    let body = cm.body.as_ref().expect("apply body");
    assert_eq!(body["kind"], "ConfigMap");
    assert!(body["metadata"]["annotations"]["videoflow.io/applied-hash"].is_string());
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], UID);
    let job = calls[9].body.as_ref().expect("job body");
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["command"][1],
        "provision"
    );

    let status = status_patch(&calls);
    assert_eq!(status["phase"], "Provisioning");
    assert_eq!(status["runId"], r.run_id);
    assert_eq!(condition(&status, "Admitted")["status"], "True");
    let provisioned = condition(&status, "Provisioned");
    assert_eq!(provisioned["status"], "False");
    assert_eq!(provisioned["reason"], "Provisioning");
    assert_eq!(condition(&status, "Progressing")["status"], "True");
    assert_eq!(condition(&status, "Ready")["reason"], "Provisioning");
    assert_eq!(
        events(&calls),
        vec![
            ("Normal".into(), "Admitted".into()),
            ("Normal".into(), "RunStarted".into())
        ]
    );
}

/// Provisioning completed: the workers are applied, Provisioned=True with an event. A
/// REALTIME run starts from its sinks up — each node once its children's workloads are ready
/// — so nothing a node publishes is replaced in its one-message stream (STREAM-2) before its
/// consumer pulls: the sink first, then `detect`, then the camera.
#[tokio::test]
async fn completed_provisioning_applies_the_workers_sinks_first() {
    let f = flow(REALTIME);
    let r = rendered(&f);
    let provision = r.provision.metadata.name.clone().expect("name");
    let cluster =
        Cluster::default()
            .applied(&f, false)
            .status("jobs", &provision, complete_job(EARLIER));
    // The previous status: what the first reconcile wrote.
    let (_, first) = scenario(f.clone(), Cluster::default().applied(&f, false), EARLIER).await;
    let f = with_status(f, &status_patch(&first));
    let (result, calls) = scenario(f.clone(), cluster.clone(), NOW).await;
    assert!(result.is_ok(), "{result:?}");
    assert_reads(&calls, "cams");
    let deployment = |node: &str| {
        format!(
            "PATCH /apis/apps/v1/namespaces/{NS}/deployments/{}",
            r.node(node).expect("node").workload.name()
        )
    };
    let expected = vec![
        deployment("sink"),
        format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams/status"),
        format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
    ];
    assert_eq!(writes(&calls), expected);
    let status = status_patch(&calls);
    let provisioned = condition(&status, "Provisioned");
    assert_eq!(provisioned["status"], "True");
    assert_eq!(provisioned["lastTransitionTime"], NOW);
    // Admitted did not flip: its transition time is the first reconcile's.
    assert_eq!(
        condition(&status, "Admitted")["lastTransitionTime"],
        EARLIER
    );
    assert_eq!(condition(&status, "Progressing")["reason"], "RollingOut");
    assert_eq!(
        events(&calls),
        vec![("Normal".into(), "Provisioned".into())]
    );

    // Each next node once the one below it is up; an applied but unready child holds it.
    let desired = videoflow_operator::controller::apply::desired_objects(&r).expect("desired");
    let body = |node: &str| {
        desired
            .iter()
            .find(|d| {
                d.kind == "Deployment" && d.name == r.node(node).expect("node").workload.name()
            })
            .expect("deployment")
            .body
            .clone()
    };
    let deployments_written = |calls: &[Call]| -> Vec<String> {
        writes(calls)
            .into_iter()
            .filter(|w| w.contains("/deployments/"))
            .collect()
    };
    let sink_unready = cluster.clone().with("deployments", body("sink"));
    let (_, calls) = scenario(f.clone(), sink_unready, NOW).await;
    assert!(deployments_written(&calls).is_empty(), "{calls:#?}");
    let sink_up = cluster.clone().with("deployments", body("sink")).status(
        "deployments",
        r.node("sink").expect("sink").workload.name(),
        json!({"replicas": 1, "readyReplicas": 1}),
    );
    let (_, calls) = scenario(f.clone(), sink_up.clone(), NOW).await;
    assert_eq!(deployments_written(&calls), [deployment("detect")]);
    let detect_up = sink_up.with("deployments", body("detect")).status(
        "deployments",
        r.node("detect").expect("detect").workload.name(),
        json!({"replicas": 1, "readyReplicas": 1}),
    );
    let (_, calls) = scenario(f, detect_up, NOW).await;
    assert_eq!(deployments_written(&calls), [deployment("camera")]);
}

/// A write the API server refuses for good (an exceeded quota) reaches the user: Degraded and
/// not Ready with the API's reason and message, a Warning Event, `observedGeneration` not
/// advanced; the reconcile still fails, so it retries with backoff. A conflict (409) is
/// retried without a condition.
#[tokio::test]
async fn a_refused_apply_becomes_a_condition_and_an_event() {
    let f = flow(REALTIME);
    let r = rendered(&f);
    let provision = r.provision.metadata.name.clone().expect("name");
    let (_, first) = scenario(f.clone(), Cluster::default().applied(&f, false), EARLIER).await;
    let previous = status_patch(&first);
    let f = with_status(f, &previous);
    let mut cluster =
        Cluster::default()
            .applied(&f, false)
            .status("jobs", &provision, complete_job(EARLIER));
    cluster.refuse = Some((
        "/deployments/",
        403,
        "Forbidden",
        "deployments \"vf-x\" is forbidden: exceeded quota: compute, requested: cpu=2",
    ));
    let (result, calls) = scenario(f.clone(), cluster.clone(), NOW).await;
    assert!(
        result.is_err(),
        "the reconcile fails and backs off: {result:?}"
    );
    let status = status_patch(&calls);
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ApplyRefused");
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("403 Forbidden") && message.contains("exceeded quota"),
        "{message}"
    );
    assert!(
        message.contains("apply Deployment/"),
        "names what was refused: {message}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(status["observedGeneration"], previous["observedGeneration"]);
    assert!(
        events(&calls).contains(&("Warning".into(), "Degraded".into())),
        "{:?}",
        events(&calls)
    );

    cluster.refuse = Some((
        "/deployments/",
        409,
        "Conflict",
        "the object has been modified",
    ));
    let (result, calls) = scenario(f, cluster, NOW).await;
    assert!(result.is_err());
    assert!(
        !calls.iter().any(|c| c.uri.contains("/status?")),
        "a conflict is retried, not reported"
    );
}

/// An edit of a BATCH Flow whose Jobs exist cannot reach them (a Job's pod template is
/// immutable): the status says so with the remedy, and `observedGeneration` stays at the
/// generation the Jobs run — it never claims what was not applied.
#[tokio::test]
async fn a_batch_edit_that_cannot_reach_its_jobs_is_reported_not_claimed() {
    let f = flow(BATCH);
    let r = rendered(&f);
    let provision = r.provision.metadata.name.clone().expect("name");
    let cluster =
        Cluster::default()
            .applied(&f, true)
            .status("jobs", &provision, complete_job(EARLIER));
    let (_, first) = scenario(f.clone(), cluster.clone(), EARLIER).await;
    let first_status = status_patch(&first);
    assert_eq!(first_status["observedGeneration"], 1);
    let mut edited = flow(&BATCH.replace(
        "{name: numbers, kind: producer,",
        "{name: numbers, kind: producer, params: {end_value: 5},",
    ));
    edited.metadata.generation = Some(2);
    assert_eq!(rendered(&edited).run_id, r.run_id, "the same run");
    let edited = with_status(edited, &first_status);
    let (result, calls) = scenario(edited, cluster, NOW).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(
        !writes(&calls).iter().any(|w| w.contains("/jobs/")),
        "a Job is never re-applied in place: {:#?}",
        writes(&calls)
    );
    let status = status_patch(&calls);
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "EditNotApplied");
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Job/") && message.contains("spec.runId"),
        "{message}"
    );
    assert_eq!(
        status["observedGeneration"], 1,
        "generation 2 was not applied"
    );
}

/// Done-when: an unchanged Flow reconciled again issues zero write requests.
#[tokio::test]
async fn unchanged_flow_reconciled_again_issues_zero_writes() {
    let f = flow(REALTIME);
    let cluster = running_realtime(&f);
    let (_, first) = scenario(f.clone(), cluster.clone(), EARLIER).await;
    let status = status_patch(&first);
    assert_eq!(status["phase"], "Running");
    assert_eq!(condition(&status, "Ready")["status"], "True");
    let f = with_status(f, &status);
    let (result, calls) = scenario(f, cluster, NOW).await;
    assert!(matches!(result, Ok(ref a) if *a == Action::requeue(Duration::from_secs(300))));
    assert_reads(&calls, "cams");
    assert_eq!(
        calls.len(),
        7,
        "reads only: {:#?}",
        calls.iter().map(Call::line).collect::<Vec<_>>()
    );
    assert!(writes(&calls).is_empty());
}

/// Done-when: a worker that died with exit 3 and a JSON reason shows up in status with its
/// code, message and remedy, and Degraded=True with that reason.
#[tokio::test]
async fn worker_exit_3_with_a_json_reason_degrades_the_flow() {
    let f = flow(REALTIME);
    let cluster = running_realtime(&f);
    let (_, first) = scenario(f.clone(), cluster.clone(), EARLIER).await;
    let f = with_status(f, &status_patch(&first));
    let record = r#"{"code": "VF_RESOURCE_UNAVAILABLE", "disposition": "worker_fatal", "message": "no GPU on host h", "remedy": "Schedule it on a GPU node."}"#;
    let r = rendered(&f);
    let detect = r.node("detect").expect("node").workload.name().to_owned();
    let cluster = cluster
        .status("deployments", &detect, json!({"replicas": 1, "readyReplicas": 0}))
        .with(
            "pods",
            worker_pod(&f, "detect", "detect-0", json!({
                "name": "worker", "image": "x", "imageID": "", "ready": false, "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "message": record,
                    "finishedAt": "2030-01-01T11:59:00Z"}}
            })),
        );
    let (result, calls) = scenario(f, cluster, NOW).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        writes(&calls),
        vec![
            format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams/status"),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
        ]
    );
    let status = status_patch(&calls);
    let node = status["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == "detect"))
        .expect("node status");
    assert_eq!(node["restarts"], 4);
    assert_eq!(
        node["lastTermination"],
        json!({
            "pod": "detect-0", "exitCode": 3, "reason": "Error",
            "code": "VF_RESOURCE_UNAVAILABLE", "message": "no GPU on host h",
            "remedy": "Schedule it on a GPU node.", "disposition": "worker_fatal"
        })
    );
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ResourceUnavailable");
    let message = degraded["message"].as_str().expect("message");
    assert!(
        message.contains("VF_RESOURCE_UNAVAILABLE: no GPU on host h"),
        "{message}"
    );
    assert!(
        message.contains("Remedy: Schedule it on a GPU node."),
        "{message}"
    );
    assert_eq!(condition(&status, "Ready")["reason"], "ResourceUnavailable");
    assert_eq!(status["phase"], "Degraded");
    assert_eq!(events(&calls), vec![("Warning".into(), "Degraded".into())]);

    // Recovery: the container runs and is ready again; Degraded flips back with an event,
    // and the last termination stays on record.
    let f2 = with_status(flow(REALTIME), &status);
    let cluster = running_realtime(&f2).with(
        "pods",
        worker_pod(
            &f2,
            "detect",
            "detect-0",
            json!({
                "name": "worker", "image": "x", "imageID": "", "ready": true, "restartCount": 4,
                "state": {"running": {"startedAt": NOW}},
                "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "message": record,
                    "finishedAt": "2030-01-01T11:59:00Z"}}
            }),
        ),
    );
    let (_, calls) = scenario(f2, cluster, "2030-01-01T12:05:00Z").await;
    let status = status_patch(&calls);
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert_eq!(events(&calls), vec![("Normal".into(), "Recovered".into())]);
}

/// A pod unschedulable past the grace period stalls the Flow; within it, a recheck is
/// scheduled for when the grace runs out.
#[tokio::test]
async fn unschedulable_pod_past_the_grace_period_stalls_the_flow() {
    let f = flow(REALTIME);
    let (_, first) = scenario(f.clone(), running_realtime(&f), EARLIER).await;
    let f = with_status(f, &status_patch(&first));
    let mut pod = worker_pod(
        &f,
        "sink",
        "sink-0",
        json!({"name": "worker", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}),
    );
    pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "lastTransitionTime": "2030-01-01T11:58:00Z"}]);
    let cluster = running_realtime(&f).with("pods", pod);
    // Two minutes in: not stalled yet, look again in three.
    let (result, calls) = scenario(f.clone(), cluster.clone(), NOW).await;
    assert!(
        matches!(result, Ok(ref a) if *a == Action::requeue(Duration::from_secs(180))),
        "{result:?}"
    );
    assert!(writes(&calls).is_empty(), "{:#?}", writes(&calls));
    // Ten minutes in: stalled.
    let (_, calls) = scenario(f, cluster, "2030-01-01T12:08:00Z").await;
    let status = status_patch(&calls);
    let stalled = condition(&status, "Stalled");
    assert_eq!(stalled["status"], "True");
    assert_eq!(stalled["reason"], "Unschedulable");
    assert!(
        stalled["message"]
            .as_str()
            .is_some_and(|m| m.contains("Insufficient nvidia.com/gpu"))
    );
    assert_eq!(condition(&status, "Progressing")["status"], "False");
    assert_eq!(status["phase"], "Degraded");
    assert_eq!(events(&calls), vec![("Warning".into(), "Stalled".into())]);
}

/// Provisioning failed: Provisioned=False with the termination record's class, Failed=True.
#[tokio::test]
async fn failed_provisioning_fails_the_flow_with_its_reason() {
    let f = flow(REALTIME);
    let r = rendered(&f);
    let provision = r.provision.metadata.name.clone().expect("name");
    let (_, first) = scenario(f.clone(), Cluster::default().applied(&f, false), EARLIER).await;
    let f = with_status(f, &status_patch(&first));
    let record = r#"{"code": "VF_BROKER_UNAVAILABLE", "message": "nats://nats:4222 unreachable within 30s", "remedy": "Start the broker or fix spec.broker.url."}"#;
    let cluster = Cluster::default()
        .applied(&f, false)
        .status("jobs", &provision, json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": "2030-01-01T11:30:00Z"}]}))
        .with("pods", json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "prov-1", "namespace": NS, "labels": {
                "app.kubernetes.io/component": "provision", "videoflow.io/run": r.run_id, "videoflow.io/flow": "cams"}},
            "status": {"containerStatuses": [{"name": "provision", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": record, "finishedAt": "2030-01-01T11:29:00Z"}}}]}
        }));
    let (_, calls) = scenario(f, cluster, NOW).await;
    assert_eq!(
        writes(&calls),
        vec![
            format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams/status"),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
        ],
        "no workers after a failed provisioning"
    );
    let status = status_patch(&calls);
    let provisioned = condition(&status, "Provisioned");
    assert_eq!(provisioned["status"], "False");
    assert_eq!(provisioned["reason"], "BrokerUnavailable");
    assert!(
        provisioned["message"]
            .as_str()
            .is_some_and(|m| m.contains("Start the broker"))
    );
    let failed = condition(&status, "Failed");
    assert_eq!(failed["status"], "True");
    assert_eq!(failed["reason"], "ProvisioningFailed");
    assert_eq!(status["phase"], "Failed");
    assert_eq!(status["completionTime"], "2030-01-01T11:30:00Z");
    assert_eq!(
        events(&calls),
        vec![("Warning".into(), "ProvisioningFailed".into())]
    );
}

/// BATCH: every node Job complete → Complete=True, Succeeded, completionTime from the Jobs;
/// a node Job failed → Failed=True (Job conditions, never counters).
#[tokio::test]
async fn batch_completion_and_failure_come_from_job_conditions() {
    let f = flow(BATCH);
    let r = rendered(&f);
    let provision = r.provision.metadata.name.clone().expect("name");
    let base =
        Cluster::default()
            .applied(&f, true)
            .status("jobs", &provision, complete_job(EARLIER));
    let (_, first) = scenario(f.clone(), base.clone(), EARLIER).await;
    let first_status = status_patch(&first);
    assert_eq!(first_status["phase"], "Running");
    assert_eq!(condition(&first_status, "Complete")["reason"], "Running");
    let f = with_status(f, &first_status);

    let mut done = base.clone();
    for n in &r.nodes {
        done = done.status(
            "jobs",
            n.workload.name(),
            complete_job("2030-01-01T11:50:00Z"),
        );
    }
    let (_, calls) = scenario(f.clone(), done, NOW).await;
    let status = status_patch(&calls);
    assert_eq!(condition(&status, "Complete")["status"], "True");
    assert_eq!(condition(&status, "Ready")["reason"], "Succeeded");
    assert_eq!(condition(&status, "Progressing")["status"], "False");
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!(status["completionTime"], "2030-01-01T11:50:00Z");
    assert_eq!(events(&calls), vec![("Normal".into(), "Completed".into())]);

    // A counter that says "failed: 2" means nothing while the Job has not given up.
    let double = r.node("double").expect("node").workload.name().to_owned();
    let retrying = base
        .clone()
        .status("jobs", &double, json!({"failed": 2, "active": 1}));
    let (_, calls) = scenario(f.clone(), retrying, NOW).await;
    assert!(writes(&calls).is_empty(), "{:#?}", writes(&calls));

    let failed = base.status("jobs", &double, json!({"failed": 4, "conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2030-01-01T11:55:00Z"}]}));
    let (_, calls) = scenario(f, failed, NOW).await;
    let status = status_patch(&calls);
    let cond = condition(&status, "Failed");
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "NodeFailed");
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.contains("node 'double'") && m.contains("BackoffLimitExceeded"))
    );
    assert_eq!(status["phase"], "Failed");
    assert_eq!(
        events(&calls),
        vec![("Warning".into(), "NodeFailed".into())]
    );
}

/// A topology change starts a new run: the new run's specs and provisioning Job are applied
/// and every object of the old run is pruned (retired).
#[tokio::test]
async fn topology_change_starts_a_new_run_and_retires_the_old_one() {
    let old = flow(REALTIME);
    let old_r = rendered(&old);
    let cluster = running_realtime(&old);
    let (_, first) = scenario(old.clone(), cluster.clone(), EARLIER).await;
    let changed = REALTIME.replace(
        "  - {name: sink, kind: consumer, parents: [detect]",
        "  - {name: sink, kind: consumer, parents: [camera]",
    );
    let mut new = with_status(flow(&changed), &status_patch(&first));
    new.metadata.generation = Some(2);
    let new_r = rendered(&new);
    assert_ne!(old_r.run_id, new_r.run_id, "the topology hash changed");
    let (result, calls) = scenario(new, cluster, NOW).await;
    assert!(result.is_ok(), "{result:?}");
    let name = |o: Option<&String>| o.cloned().unwrap_or_default();
    let mut expected = vec![
        format!(
            "PATCH /api/v1/namespaces/{NS}/configmaps/{}",
            name(new_r.specs.metadata.name.as_ref())
        ),
        format!(
            "PATCH /apis/batch/v1/namespaces/{NS}/jobs/{}",
            name(new_r.provision.metadata.name.as_ref())
        ),
        format!(
            "DELETE /api/v1/namespaces/{NS}/configmaps/{}",
            name(old_r.specs.metadata.name.as_ref())
        ),
        format!(
            "DELETE /apis/batch/v1/namespaces/{NS}/jobs/{}",
            name(old_r.provision.metadata.name.as_ref())
        ),
    ];
    for n in &old_r.nodes {
        expected.push(format!(
            "DELETE /apis/apps/v1/namespaces/{NS}/deployments/{}",
            n.workload.name()
        ));
    }
    // The retired run's streams and durables: its own teardown Job.
    let retired_teardown =
        videoflow_core::naming::run_object_name(&old_r.flow_id, &old_r.run_id, &["teardown"]);
    expected.push(format!(
        "PATCH /apis/batch/v1/namespaces/{NS}/jobs/{retired_teardown}"
    ));
    expected.push(format!(
        "PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams/status"
    ));
    expected.push(format!(
        "POST /apis/events.k8s.io/v1/namespaces/{NS}/events"
    ));
    assert_eq!(writes(&calls), expected);
    let delete = calls
        .iter()
        .find(|c| c.method == "DELETE")
        .expect("a delete");
    assert_eq!(
        delete.body,
        Some(json!({"propagationPolicy": "Background"}))
    );
    let teardown = calls
        .iter()
        .find(|c| c.uri.contains(&format!("/jobs/{retired_teardown}")))
        .and_then(|c| c.body.clone())
        .expect("the retired run's teardown Job");
    let container = &teardown["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][1], "teardown");
    let run_var = container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "VF_RUN_ID"))
        .expect("VF_RUN_ID");
    assert_eq!(
        run_var["value"], old_r.run_id,
        "the retired run, not the new one"
    );
    assert_eq!(
        teardown["metadata"]["labels"]["videoflow.io/run"],
        old_r.run_id
    );
    assert_eq!(
        teardown["spec"]["ttlSecondsAfterFinished"], 60,
        "it goes once it finished"
    );
    let status = status_patch(&calls);
    assert_eq!(status["runId"], new_r.run_id);
    assert_eq!(condition(&status, "Provisioned")["status"], "False");
    assert_eq!(condition(&status, "Admitted")["observedGeneration"], 2);
    assert_eq!(events(&calls), vec![("Normal".into(), "RunStarted".into())]);
}

/// An image change keeps the run and rolls the Deployments in place (one apply each).
#[tokio::test]
async fn image_change_rolls_in_place() {
    let f = flow(REALTIME);
    let cluster = running_realtime(&f);
    let (_, first) = scenario(f.clone(), cluster.clone(), EARLIER).await;
    let text = REALTIME.replace(
        "  type: realtime\n",
        "  type: realtime\n  image: {worker: \"videoflow-worker:v2\"}\n",
    );
    let mut changed = with_status(flow(&text), &status_patch(&first));
    changed.metadata.generation = Some(2);
    let r = rendered(&changed);
    let (_, calls) = scenario(changed, cluster, NOW).await;
    let mut expected = Vec::new();
    for n in &r.nodes {
        expected.push(format!(
            "PATCH /apis/apps/v1/namespaces/{NS}/deployments/{}",
            n.workload.name()
        ));
    }
    expected.push(format!(
        "PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams/status"
    ));
    assert_eq!(
        writes(&calls),
        expected,
        "no prune, no new Jobs: the Jobs are create-once"
    );
    let body = calls
        .iter()
        .find(|c| c.uri.contains("/deployments/"))
        .and_then(|c| c.body.clone())
        .expect("body");
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["image"],
        "videoflow-worker:v2"
    );
}

// ---------------------------------------------------------------------------------------------
// Deletion.

fn deleting(f: Flow, since: &str) -> Flow {
    let mut f = f;
    f.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(
        since,
    )));
    f
}

/// Delete: the run's workers are stopped, then the teardown Job runs.
#[tokio::test]
async fn deletion_stops_the_run_and_starts_the_teardown_job() {
    let f = flow(REALTIME);
    let r = rendered(&f);
    let cluster = running_realtime(&f);
    let (result, calls) = scenario(deleting(f, NOW), cluster, NOW).await;
    assert!(result.is_ok(), "{result:?}");
    assert_reads(&calls, "cams");
    let mut expected = vec![format!(
        "DELETE /apis/batch/v1/namespaces/{NS}/jobs/{}",
        r.provision.metadata.name.clone().unwrap_or_default()
    )];
    for n in &r.nodes {
        expected.push(format!(
            "DELETE /apis/apps/v1/namespaces/{NS}/deployments/{}",
            n.workload.name()
        ));
    }
    let teardown = format!("vf-cams-{}-teardown", r.run_id);
    expected.push(format!(
        "PATCH /apis/batch/v1/namespaces/{NS}/jobs/{teardown}"
    ));
    assert_eq!(writes(&calls), expected);
    let job = calls
        .last()
        .and_then(|c| c.body.clone())
        .expect("teardown body");
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["command"],
        json!(["/usr/local/bin/videoflow-worker", "teardown"])
    );
    assert!(container["env"].as_array().is_some_and(|e| {
        e.iter()
            .any(|v| v["name"] == "VF_RUN_ID" && v["value"] == r.run_id)
    }));
    assert_eq!(
        job["metadata"]["labels"]["app.kubernetes.io/component"],
        "teardown"
    );
}

/// The teardown completed: the finalizer is removed with a guarded JSON patch.
#[tokio::test]
async fn completed_teardown_releases_the_flow() {
    let f = flow(REALTIME);
    let r = rendered(&f);
    let teardown = videoflow_operator::controller::teardown::teardown_job(&r);
    let name = teardown.metadata.name.clone().expect("name");
    let cluster = Cluster::default()
        .applied(&f, false)
        .with("jobs", serde_json::to_value(&teardown).expect("json"))
        .status("jobs", &name, complete_job(NOW));
    let (result, calls) = scenario(deleting(f, EARLIER), cluster, NOW).await;
    assert!(
        matches!(result, Ok(ref a) if *a == Action::await_change()),
        "{result:?}"
    );
    assert_eq!(
        writes(&calls),
        vec![
            format!(
                "DELETE /apis/batch/v1/namespaces/{NS}/jobs/{}",
                r.provision.metadata.name.clone().unwrap_or_default()
            ),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
            format!("PATCH /apis/videoflow.io/v1alpha1/namespaces/{NS}/flows/cams"),
        ]
    );
    assert_eq!(events(&calls), vec![("Normal".into(), "TornDown".into())]);
    assert_eq!(
        calls.last().and_then(|c| c.body.clone()),
        Some(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "videoflow.io/teardown"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]))
    );
}

/// Never forever: a failed teardown releases the Flow with a Warning naming what may remain;
/// so does a teardown still running after the maximum wait.
#[tokio::test]
async fn failed_or_overdue_teardown_still_releases_the_flow() {
    let f = flow(REALTIME);
    let r = rendered(&f);
    let teardown = videoflow_operator::controller::teardown::teardown_job(&r);
    let name = teardown.metadata.name.clone().expect("name");
    let failed = Cluster::default()
        .with("jobs", serde_json::to_value(&teardown).expect("json"))
        .status("jobs", &name, json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}));
    let (_, calls) = scenario(deleting(f.clone(), EARLIER), failed, NOW).await;
    assert_eq!(
        events(&calls),
        vec![("Warning".into(), "TeardownFailed".into())]
    );
    assert!(
        writes(&calls)
            .last()
            .is_some_and(|w| w.ends_with("/flows/cams"))
    );

    let running = Cluster::default().with("jobs", serde_json::to_value(&teardown).expect("json"));
    let (result, calls) = scenario(
        deleting(f.clone(), "2030-01-01T11:59:00Z"),
        running.clone(),
        NOW,
    )
    .await;
    assert!(
        matches!(result, Ok(ref a) if *a == Action::requeue(Duration::from_secs(60))),
        "{result:?}"
    );
    assert!(writes(&calls).is_empty());
    let (_, calls) = scenario(deleting(f, EARLIER), running, NOW).await;
    assert_eq!(
        events(&calls),
        vec![("Warning".into(), "TeardownTimedOut".into())]
    );
    assert!(
        writes(&calls)
            .last()
            .is_some_and(|w| w.ends_with("/flows/cams"))
    );
}

fn event_notes(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.method == "POST" && c.uri.contains("/events"))
        .map(|c| {
            c.body.as_ref().expect("event body")["note"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn job_env<'a>(job: &'a Value, var: &str) -> &'a Value {
    job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == var))
        .map_or(&Value::Null, |e| &e["value"])
}

/// A run the Flow moved away from is torn down by its own Job; deleting the Flow while that
/// Job still runs waits for it (the garbage collector would otherwise kill it with the
/// Flow), and the release names both runs.
#[tokio::test]
async fn deletion_waits_for_the_teardown_of_a_run_the_flow_moved_away_from() {
    let f = with_status(
        flow(REALTIME),
        &json!({"runId": rendered(&flow(REALTIME)).run_id}),
    );
    let r = rendered(&f);
    let mine = videoflow_operator::controller::teardown::teardown_job(&r);
    let retired =
        videoflow_operator::controller::teardown::retired_run_teardown_job(&r, "old0000000");
    let names = |j: &k8s_openapi::api::batch::v1::Job| j.metadata.name.clone().expect("name");
    let cluster = Cluster::default()
        .applied(&f, false)
        .with("jobs", serde_json::to_value(&mine).expect("json"))
        .status("jobs", &names(&mine), complete_job(NOW))
        .with("jobs", serde_json::to_value(&retired).expect("json"));
    let (result, calls) = scenario(deleting(f.clone(), NOW), cluster.clone(), NOW).await;
    assert!(
        matches!(result, Ok(ref a) if *a == Action::requeue(Duration::from_secs(60))),
        "{result:?}"
    );
    assert!(events(&calls).is_empty(), "no release yet: {calls:#?}");
    assert!(
        !writes(&calls).iter().any(|w| w.ends_with("/flows/cams")),
        "the finalizer stays while run old0000000's teardown runs: {:?}",
        writes(&calls)
    );
    let finished = cluster.status("jobs", &names(&retired), complete_job(NOW));
    let (_, calls) = scenario(deleting(f, NOW), finished, NOW).await;
    assert_eq!(events(&calls), vec![("Normal".into(), "TornDown".into())]);
    let note = &event_notes(&calls)[0];
    assert!(
        note.contains(&r.run_id) && note.contains("old0000000"),
        "both runs: {note}"
    );
    assert!(
        writes(&calls)
            .last()
            .is_some_and(|w| w.ends_with("/flows/cams"))
    );
}

/// Deleted right after a topology change, before the reconcile that retires the old run:
/// `status.runId` still names it, so its teardown Job is applied beside the new run's.
#[tokio::test]
async fn deletion_tears_down_the_status_run_when_the_move_never_finished() {
    let old = flow(REALTIME);
    let old_r = rendered(&old);
    let changed = REALTIME.replace(
        "  - {name: sink, kind: consumer, parents: [detect]",
        "  - {name: sink, kind: consumer, parents: [camera]",
    );
    let new = with_status(flow(&changed), &json!({"runId": old_r.run_id}));
    let new_r = rendered(&new);
    assert_ne!(old_r.run_id, new_r.run_id);
    let (result, calls) = scenario(deleting(new, NOW), running_realtime(&old), NOW).await;
    assert!(result.is_ok(), "{result:?}");
    let teardown = |run: &str| {
        format!(
            "PATCH /apis/batch/v1/namespaces/{NS}/jobs/{}",
            videoflow_core::naming::run_object_name("cams", run, &["teardown"])
        )
    };
    let w = writes(&calls);
    assert!(w.contains(&teardown(&new_r.run_id)), "{w:#?}");
    assert!(w.contains(&teardown(&old_r.run_id)), "{w:#?}");
    let old_job = calls
        .iter()
        .find(|c| c.line() == teardown(&old_r.run_id))
        .and_then(|c| c.body.clone())
        .expect("the old run's teardown");
    assert_eq!(job_env(&old_job, "VF_RUN_ID"), old_r.run_id.as_str());
}

/// A Flow edited into something invalid keeps its running run (nothing is applied or
/// pruned while it is invalid); deleting it then tears that run down with a Job derived
/// from the run's provisioning Job — same image, environment and owner — instead of
/// leaving its streams and ledger records behind.
#[tokio::test]
async fn deleting_a_flow_edited_invalid_tears_its_run_down_from_the_provisioning_job() {
    let valid = flow(REALTIME);
    let r = rendered(&valid);
    let invalid_text = REALTIME.replace("parents: [detect]", "parents: [nope]");
    let invalid = with_status(flow(&invalid_text), &json!({"runId": r.run_id}));
    assert!(
        render::render(&invalid, &config()).is_err(),
        "the edit cannot be rendered"
    );
    let mut cluster = Cluster::default().applied(&valid, true);
    for provision in cluster.objects.entry("jobs").or_default() {
        // What the API server adds to a Job it created.
        provision["metadata"]["uid"] = json!("job-uid");
        provision["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = json!("job-uid");
        provision["spec"]["selector"] =
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}});
        provision["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] =
            json!("job-uid");
        provision["spec"]["template"]["metadata"]["labels"]["job-name"] =
            json!(r.provision.metadata.name.clone());
        provision["status"] = complete_job(EARLIER);
    }
    let (result, calls) = scenario(deleting(invalid.clone(), NOW), cluster.clone(), NOW).await;
    assert!(result.is_ok(), "{result:?}");
    assert_reads(&calls, "cams");
    let teardown_name = videoflow_core::naming::run_object_name("cams", &r.run_id, &["teardown"]);
    let w = writes(&calls);
    assert_eq!(
        w.last(),
        Some(&format!(
            "PATCH /apis/batch/v1/namespaces/{NS}/jobs/{teardown_name}"
        )),
        "{w:#?}"
    );
    assert!(
        !w.iter()
            .any(|l| l.starts_with("DELETE") && l.ends_with("-provision")),
        "the provisioning Job stays until its teardown exists: {w:#?}"
    );
    let job = calls
        .last()
        .and_then(|c| c.body.clone())
        .expect("teardown body");
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["command"],
        json!(["/usr/local/bin/videoflow-worker", "teardown"])
    );
    let provision_container = serde_json::to_value(&r.provision).expect("json")["spec"]["template"]
        ["spec"]["containers"][0]
        .clone();
    assert_eq!(container["image"], provision_container["image"]);
    assert_eq!(
        container["env"], provision_container["env"],
        "the run's environment"
    );
    assert_eq!(job_env(&job, "VF_RUN_ID"), r.run_id.as_str());
    assert_eq!(
        job["metadata"]["labels"]["app.kubernetes.io/component"],
        "teardown"
    );
    assert_eq!(
        job["metadata"]["ownerReferences"][0]["uid"], UID,
        "owned by the Flow"
    );
    let text = job.to_string();
    assert!(
        !text.contains("job-uid") && job["spec"]["selector"].is_null(),
        "no trace of the provisioning Job's identity: {text}"
    );
    // Once the teardown completed, the Flow is released.
    let done = cluster
        .with("jobs", job.clone())
        .status("jobs", &teardown_name, complete_job(NOW));
    let (_, calls) = scenario(deleting(invalid, NOW), done, NOW).await;
    assert_eq!(events(&calls), vec![("Normal".into(), "TornDown".into())]);
    assert!(event_notes(&calls)[0].contains(&r.run_id));
}

/// A run left through an invalid edit is still retired: the invalid reconcile keeps
/// `status.runId`, and the next valid spec with another topology tears that run down.
#[tokio::test]
async fn a_run_left_through_an_invalid_edit_is_still_torn_down() {
    let old = flow(REALTIME);
    let old_r = rendered(&old);
    let cluster = running_realtime(&old);
    let (_, first) = scenario(old.clone(), cluster.clone(), EARLIER).await;
    let invalid_text = REALTIME.replace("parents: [detect]", "parents: [nope]");
    let mut invalid = with_status(flow(&invalid_text), &status_patch(&first));
    invalid.metadata.generation = Some(2);
    let (_, second) = scenario(invalid, cluster.clone(), EARLIER).await;
    let rejected = status_patch(&second);
    assert_eq!(rejected["runId"], old_r.run_id, "the running run is kept");
    assert!(
        !writes(&second).iter().any(|w| w.contains("/jobs/")),
        "nothing applied or pruned while invalid"
    );
    let changed = REALTIME.replace(
        "  - {name: sink, kind: consumer, parents: [detect]",
        "  - {name: sink, kind: consumer, parents: [camera]",
    );
    let mut new = with_status(flow(&changed), &rejected);
    new.metadata.generation = Some(3);
    let (result, third) = scenario(new, cluster, NOW).await;
    assert!(result.is_ok(), "{result:?}");
    let retired = videoflow_core::naming::run_object_name("cams", &old_r.run_id, &["teardown"]);
    assert!(
        writes(&third).contains(&format!(
            "PATCH /apis/batch/v1/namespaces/{NS}/jobs/{retired}"
        )),
        "{:#?}",
        writes(&third)
    );
}

/// A Flow that was never admitted has no finalizer: deleting it needs nothing.
#[tokio::test]
async fn deleting_a_flow_without_the_finalizer_does_nothing() {
    let mut f = flow(INVALID);
    f.metadata.finalizers = None;
    let (result, calls) = scenario(deleting(f, NOW), Cluster::default(), NOW).await;
    assert!(result.is_ok());
    assert!(calls.is_empty(), "{calls:#?}");
}
