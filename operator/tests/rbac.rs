//! Least privilege and the Helm chart.
//!
//! - RBAC-1: the chart's ClusterRole (all namespaces) or Role (one watched namespace) and the
//!   static `config/rbac/role.yaml` grant exactly `REQUIRED_PERMISSIONS`: no wildcard, no
//!   Secret, no verb the controller does not use;
//! - RBAC-2: every request the controller makes against a mock API server — its watches and
//!   the reconciles of a new, an admitted and a deleted Flow — is granted;
//! - CHART-1: `helm lint --strict` passes for the default and the namespaced values;
//! - CHART-2: the chart's CRD is the generated `crds/flows.videoflow.io.yaml`, rendered from a
//!   template (so `helm upgrade` updates it) and kept on uninstall;
//! - CHART-3: the operator pod is restricted (non-root 65532, read-only root filesystem, no
//!   privilege escalation, ALL capabilities dropped, RuntimeDefault seccomp), runs two
//!   replicas electing a leader on a Lease (one with Recreate without leader election), and
//!   gets the worker image, watched namespace and lease timings.
//!
//! The chart tests run the pinned helm that `scripts/install-deps` installs
//! (`$VF_CACHE/tools/bin/helm`, or `$VF_HELM`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use videoflow_operator::controller::permissions::{
    LEADER_ELECTION_PERMISSIONS, REQUIRED_PERMISSIONS,
};
use videoflow_operator::controller::{self, Context, Metrics, RunConfig, StatusConfig};
use videoflow_operator::crd::Flow;
use videoflow_operator::render::{self, RenderConfig};

const CHART: &str = "charts/videoflow-operator";
const RELEASE_NS: &str = "videoflow-system";

/// (API group, resource, verb).
type Grant = (String, String, String);

fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the operator crate sits inside the workspace")
        .to_path_buf()
}

fn required() -> BTreeSet<Grant> {
    grants_of(REQUIRED_PERMISSIONS)
}

fn grants_of(
    permissions: &[videoflow_operator::controller::permissions::Permission],
) -> BTreeSet<Grant> {
    permissions
        .iter()
        .flat_map(|p| {
            p.verbs
                .iter()
                .map(|v| (p.group.to_owned(), p.resource.to_owned(), (*v).to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// helm.

fn helm() -> PathBuf {
    if let Some(p) = std::env::var_os("VF_HELM") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("VF_CACHE").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache")
                .join("videoflow")
        },
        PathBuf::from,
    );
    let pinned = cache.join("tools").join("bin").join("helm");
    assert!(
        pinned.is_file(),
        "helm not found at {}: run scripts/install-deps (it installs the pinned helm), \
         or set VF_HELM to a helm v3 binary",
        pinned.display()
    );
    pinned
}

fn run_helm(args: &[&str]) -> std::process::Output {
    Command::new(helm())
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("helm runs")
}

/// `helm template` of the chart with `--set` values; every document, parsed.
fn template(sets: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", "vf", CHART, "--namespace", RELEASE_NS];
    for s in sets {
        args.push("--set");
        args.push(s);
    }
    let out = run_helm(&args);
    assert!(
        out.status.success(),
        "helm template {sets:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8_lossy(&out.stdout))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|doc| {
            let v: Value = serde::Deserialize::deserialize(doc).expect("YAML document");
            (!v.is_null()).then_some(v)
        })
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "one {kind} expected, found {}", found.len());
    found[0]
}

/// The chart's Role for the leader Lease, by its name suffix.
const LEADER_ROLE_SUFFIX: &str = "-leader-election";

fn is_leader_role(doc: &Value) -> bool {
    doc["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.ends_with(LEADER_ROLE_SUFFIX))
}

/// Roles and RoleBindings except the leader Lease's.
fn flow_roles<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    of_kind(docs, kind)
        .into_iter()
        .filter(|d| !is_leader_role(d))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("a string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The grants of a Role or ClusterRole, refusing what least privilege forbids.
fn grants(role: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert!(
            rule.get("nonResourceURLs").is_none() && rule.get("resourceNames").is_none(),
            "unexpected rule shape: {rule}"
        );
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    for s in [&group, &resource, &verb] {
                        assert!(!s.contains('*'), "wildcard in rule {rule}");
                    }
                    assert!(
                        resource != "secrets",
                        "the operator never reads Secrets: {rule}"
                    );
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

fn assert_exactly_required(granted: &BTreeSet<Grant>, what: &str) {
    let required = required();
    let missing: Vec<_> = required.difference(granted).collect();
    let extra: Vec<_> = granted.difference(&required).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what} differs from REQUIRED_PERMISSIONS (operator/src/controller/permissions.rs)\n\
         missing: {missing:?}\nextra: {extra:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// RBAC-1.

#[test]
fn rbac_1_chart_cluster_role_grants_exactly_the_required_permissions() {
    let docs = template(&[]);
    assert!(flow_roles(&docs, "Role").is_empty() && flow_roles(&docs, "RoleBinding").is_empty());
    let role = one(&docs, "ClusterRole");
    assert_exactly_required(&grants(role), "the chart's ClusterRole");
    let binding = one(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": RELEASE_NS}])
    );
    let deployment = one(&docs, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
    assert!(
        !env(deployment).contains_key("VF_OPERATOR_NAMESPACE"),
        "all namespaces: no --namespace"
    );
}

#[test]
fn rbac_1_chart_watching_one_namespace_uses_a_role_there() {
    let docs = template(&["watchNamespace=media"]);
    assert!(
        of_kind(&docs, "ClusterRole").is_empty() && of_kind(&docs, "ClusterRoleBinding").is_empty(),
        "a watched namespace needs no cluster-wide grant"
    );
    let roles = flow_roles(&docs, "Role");
    assert_eq!(roles.len(), 1, "one Role for the Flows: {roles:?}");
    let role = roles[0];
    assert_eq!(role["metadata"]["namespace"], "media");
    assert_exactly_required(&grants(role), "the chart's Role");
    let bindings = flow_roles(&docs, "RoleBinding");
    assert_eq!(bindings.len(), 1);
    let binding = bindings[0];
    assert_eq!(binding["metadata"]["namespace"], "media");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["namespace"], RELEASE_NS);
    assert_eq!(
        env(one(&docs, "Deployment")).get("VF_OPERATOR_NAMESPACE"),
        Some(&"media".to_owned())
    );
}

#[test]
fn rbac_1_leader_lease_role_is_namespaced_and_names_its_one_lease() {
    for sets in [vec![], vec!["watchNamespace=media"]] {
        let docs = template(&sets);
        let roles: Vec<&Value> = of_kind(&docs, "Role")
            .into_iter()
            .filter(|d| is_leader_role(d))
            .collect();
        assert_eq!(roles.len(), 1, "{sets:?}: one leader Lease Role");
        let role = roles[0];
        assert_eq!(
            role["metadata"]["namespace"], RELEASE_NS,
            "the Lease lives in the operator's own namespace"
        );
        let deployment = one(&docs, "Deployment");
        let lease = env(deployment)
            .get("VF_OPERATOR_LEADER_ELECTION_LEASE")
            .cloned()
            .expect("the Lease's name in the environment");
        let mut granted = BTreeSet::new();
        for rule in role["rules"].as_array().expect("rules") {
            let verbs = strings(&rule["verbs"]);
            let names = strings(&rule["resourceNames"]);
            // `create` cannot be limited by name; everything else is on the one Lease.
            if verbs != ["create"] {
                assert_eq!(names, std::slice::from_ref(&lease), "{rule}");
            }
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in &verbs {
                        granted.insert((group.clone(), resource.clone(), verb.clone()));
                    }
                }
            }
        }
        assert_eq!(granted, grants_of(LEADER_ELECTION_PERMISSIONS));
        let pod_env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
        let ns_var = pod_env
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == "VF_OPERATOR_LEADER_ELECTION_NAMESPACE")
            .expect("the Lease namespace in the environment");
        assert_eq!(
            ns_var["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        let binding = of_kind(&docs, "RoleBinding")
            .into_iter()
            .find(|d| is_leader_role(d))
            .expect("its RoleBinding");
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
        assert_eq!(binding["metadata"]["namespace"], RELEASE_NS);
    }
    let single = template(&["leaderElection.enabled=false", "replicaCount=1"]);
    assert!(
        of_kind(&single, "Role")
            .into_iter()
            .all(|d| !is_leader_role(d))
    );
    let d = one(&single, "Deployment");
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert!(!env(d).contains_key("VF_OPERATOR_LEADER_ELECTION_LEASE"));
}

#[test]
fn rbac_1_static_cluster_role_grants_exactly_the_required_permissions() {
    let text = std::fs::read_to_string(repo_root().join("config/rbac/role.yaml"))
        .expect("config/rbac/role.yaml");
    let docs = documents(&text);
    assert_exactly_required(&grants(one(&docs, "ClusterRole")), "config/rbac/role.yaml");

    let text = std::fs::read_to_string(repo_root().join("config/rbac/leader_election_role.yaml"))
        .expect("config/rbac/leader_election_role.yaml");
    let docs = documents(&text);
    let role = one(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "videoflow-system");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        let verbs = strings(&rule["verbs"]);
        if verbs != ["create"] {
            assert_eq!(
                strings(&rule["resourceNames"]),
                ["videoflow-operator"],
                "{rule}"
            );
        }
        for verb in verbs {
            granted.insert((
                strings(&rule["apiGroups"])[0].clone(),
                strings(&rule["resources"])[0].clone(),
                verb,
            ));
        }
    }
    assert_eq!(granted, grants_of(LEADER_ELECTION_PERMISSIONS));
    assert_eq!(
        one(&docs, "RoleBinding")["roleRef"]["name"],
        role["metadata"]["name"]
    );
}

#[test]
fn rbac_1_required_permissions_are_sorted_and_unique() {
    let keys: Vec<(&str, &str)> = REQUIRED_PERMISSIONS
        .iter()
        .map(|p| (p.group, p.resource))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        keys, sorted,
        "one entry per resource, sorted by group, resource"
    );
    for p in REQUIRED_PERMISSIONS {
        let mut verbs = p.verbs.to_vec();
        verbs.sort_unstable();
        verbs.dedup();
        assert_eq!(
            p.verbs,
            verbs.as_slice(),
            "{}: verbs sorted and unique",
            p.resource
        );
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC-2: what the controller actually asks the API server.

const NS: &str = "media";
const UID: &str = "6f1c2d3e-0000-4000-8000-000000000011";

const FLOW: &str = r#"
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

fn render_config() -> RenderConfig {
    RenderConfig {
        worker_image: "videoflow-worker:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        namespace: NS.into(),
        nats_url: None,
    }
}

fn flow(finalizer: bool) -> Flow {
    let mut f = render::load::flow_from_text(FLOW).expect("flow parses");
    f.metadata.namespace = Some(NS.into());
    f.metadata.uid = Some(UID.into());
    f.metadata.generation = Some(1);
    f.metadata.resource_version = Some("1".into());
    if finalizer {
        f.metadata.finalizers = Some(vec!["videoflow.io/teardown".into()]);
    }
    f
}

/// One request as RBAC sees it: (group, resource, verb), from the method and the path.
fn authorized_as(method: &str, uri: &str) -> Grant {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => panic!("unexpected path {path}"),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [resource] => ((*resource).to_owned(), false),
        [resource, _name] => ((*resource).to_owned(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => panic!("unexpected path {path}"),
    };
    let watching = query.split('&').any(|kv| kv == "watch=true");
    let verb = match (method, named) {
        ("GET", _) if watching => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", false) => "deletecollection",
        ("DELETE", true) => "delete",
        _ => panic!("unexpected method {method} {path}"),
    };
    (group.to_owned(), resource, verb.to_owned())
}

fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"}, "items": items})
}

/// A mock API server holding `objects` (by resource plural) and `flow`; returns every
/// request as (method, uri). Watches are left open (never answered) until the client goes.
fn mock_server(
    flow: Value,
    objects: BTreeMap<String, Vec<Value>>,
) -> (kube::Client, tokio::task::JoinHandle<Vec<(String, String)>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut calls = Vec::new();
        let mut open_watches = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let uri = req.uri().to_string();
            let bytes = req.into_body().collect_bytes().await.expect("body");
            let body: Option<Value> = serde_json::from_slice(&bytes).ok();
            calls.push((method.clone(), uri.clone()));
            let path = uri.split('?').next().unwrap_or_default();
            if uri.contains("watch=true") {
                open_watches.push(send);
                continue;
            }
            let answer = match method.as_str() {
                "GET" => {
                    let resource = path.rsplit('/').next().unwrap_or_default();
                    if resource == "flows" {
                        list_of(vec![])
                    } else {
                        list_of(objects.get(resource).cloned().unwrap_or_default())
                    }
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
                _ => body.unwrap_or_else(|| json!({})),
            };
            send.send_response(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).expect("serialize")))
                    .expect("response"),
            );
        }
        drop(open_watches);
        calls
    });
    (kube::Client::new(service, NS), server)
}

fn context(client: kube::Client) -> Arc<Context> {
    Arc::new(Context::new(
        client,
        render_config(),
        StatusConfig::default(),
        Arc::new(Metrics::new()),
        controller::system_clock(),
        Some("videoflow-operator-0".into()),
    ))
}

/// One reconcile of `f` against `objects`; the requests it made.
async fn reconcile_calls(f: Flow, objects: BTreeMap<String, Vec<Value>>) -> Vec<(String, String)> {
    let (client, server) = mock_server(serde_json::to_value(&f).expect("flow json"), objects);
    let ctx = context(client);
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        controller::reconcile(Arc::new(f), ctx),
    )
    .await
    .expect("the reconcile finishes");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the client was dropped")
        .expect("server task")
}

/// Every object the Flow's run consists of, as the API server would list them.
fn whole_run(f: &Flow) -> BTreeMap<String, Vec<Value>> {
    let r = render::render(f, &render_config()).expect("renders");
    let mut objects: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for d in controller::apply::desired_objects(&r).expect("desired") {
        let plural = match d.kind {
            "ConfigMap" => "configmaps",
            "Job" => "jobs",
            "Deployment" => "deployments",
            "StatefulSet" => "statefulsets",
            "Service" => "services",
            "PodDisruptionBudget" => "poddisruptionbudgets",
            other => panic!("unknown kind {other}"),
        };
        let mut body = d.body.clone();
        body["metadata"]["namespace"] = json!(NS);
        objects.entry(plural.to_owned()).or_default().push(body);
    }
    objects
}

#[tokio::test]
async fn rbac_2_every_request_of_the_controller_is_granted() {
    let mut calls = Vec::new();

    // The Controller's watches (all namespaces, as the ClusterRole install runs it).
    let (client, server) = mock_server(json!({}), BTreeMap::new());
    let ctx = context(client);
    let config = RunConfig {
        namespace: None,
        concurrency: 1,
    };
    let stop = tokio::time::sleep(Duration::from_millis(500));
    tokio::time::timeout(Duration::from_secs(10), controller::run(ctx, config, stop))
        .await
        .expect("the controller stops");
    calls.extend(
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the client was dropped")
            .expect("server task"),
    );

    // A new Flow (the finalizer), an admitted one (specs, provisioning, status, events) and a
    // deleted one (the run stopped, the teardown Job started).
    calls.extend(reconcile_calls(flow(false), BTreeMap::new()).await);
    calls.extend(reconcile_calls(flow(true), BTreeMap::new()).await);
    let mut deleted = flow(true);
    deleted.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2030-01-01T12:00:00Z".parse().expect("timestamp"),
        ));
    let run = whole_run(&deleted);
    calls.extend(reconcile_calls(deleted, run).await);

    let used: BTreeSet<Grant> = calls.iter().map(|(m, u)| authorized_as(m, u)).collect();
    let granted = required();
    let ungranted: Vec<_> = used.difference(&granted).collect();
    assert!(
        ungranted.is_empty(),
        "the controller made requests REQUIRED_PERMISSIONS does not grant: {ungranted:?}\n\
         requests: {calls:#?}"
    );
    // The other direction: a grant the scenarios never requested must be one of the few
    // that no mock request shows (see permissions.rs), or a write on an owned kind, which
    // goes through the same generic `ssa::<K>` / `delete::<K>` as the writes seen here.
    let owned = [
        ("", "configmaps"),
        ("", "services"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("batch", "jobs"),
        ("policy", "poddisruptionbudgets"),
    ];
    let mut explained: BTreeSet<Grant> = BTreeSet::new();
    for (g, r) in owned {
        // Server-side apply that creates an object is authorized as `create` too.
        for v in ["create", "patch", "delete"] {
            explained.insert((g.to_owned(), r.to_owned(), v.to_owned()));
        }
    }
    // The Recorder patches a repeated event into a series; OwnerReferencesPermissionEnforcement
    // checks `update` on flows/finalizers for the children's blockOwnerDeletion.
    explained.insert(("events.k8s.io".into(), "events".into(), "patch".into()));
    // KEDA ScaledObjects are listed only for Flows that ask for autoscaling.
    for v in ["create", "delete", "list", "patch"] {
        explained.insert(("keda.sh".into(), "scaledobjects".into(), v.into()));
    }
    explained.insert((
        "videoflow.io".into(),
        "flows/finalizers".into(),
        "update".into(),
    ));
    let unexplained: Vec<_> = granted
        .difference(&used)
        .filter(|g| !explained.contains(*g))
        .collect();
    assert!(
        unexplained.is_empty(),
        "granted but never requested by the scenarios (drop them from REQUIRED_PERMISSIONS \
         or exercise them): {unexplained:?}"
    );
    for needed in [
        ("videoflow.io", "flows", "watch"),
        ("videoflow.io", "flows", "patch"),
        ("videoflow.io", "flows/status", "patch"),
        ("events.k8s.io", "events", "create"),
        ("", "pods", "list"),
        ("batch", "jobs", "patch"),
        ("apps", "deployments", "delete"),
    ] {
        let g = (
            needed.0.to_owned(),
            needed.1.to_owned(),
            needed.2.to_owned(),
        );
        assert!(
            used.contains(&g),
            "scenarios never requested {g:?}: {calls:#?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// CHART-1.

#[test]
fn chart_1_helm_lint_passes() {
    for sets in [
        vec![],
        vec!["--set", "watchNamespace=media"],
        vec!["--set", "metrics.serviceMonitor.enabled=true"],
    ] {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend(sets.iter().copied());
        let out = run_helm(&args);
        assert!(
            out.status.success(),
            "helm lint {sets:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn chart_1_refuses_what_the_operator_cannot_do() {
    for (set, why) in [
        (
            "leaderElection.enabled=false",
            "needs leaderelection.enabled",
        ),
        (
            "leaderElection.renewDeadlineSeconds=15",
            "retryperiodseconds < renewdeadlineseconds < leasedurationseconds",
        ),
        ("concurrency=0", "minimum"),
        ("unknownValue=1", "additional properties"),
    ] {
        let out = run_helm(&["template", "vf", CHART, "--set", set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} rendered");
        assert!(
            stderr.to_lowercase().contains(why),
            "{set}: stderr lacks {why:?}: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// CHART-2.

#[test]
fn chart_2_crd_is_the_generated_crd_from_a_template() {
    let root = repo_root();
    let committed = std::fs::read_to_string(root.join(videoflow_operator::crd::CRD_PATH))
        .expect("the committed CRD");
    let copy = std::fs::read_to_string(root.join(CHART).join("files/flows.videoflow.io.yaml"))
        .expect("the chart's copy of the CRD");
    assert!(
        copy == committed,
        "{CHART}/files/flows.videoflow.io.yaml differs from {}: it should be a symbolic \
         link (ln -sf ../../../crds/flows.videoflow.io.yaml {CHART}/files/)",
        videoflow_operator::crd::CRD_PATH
    );
    assert!(
        !Path::new(&root.join(CHART).join("crds")).exists(),
        "Helm's crds/ is install-only: upgrades would keep the old schema"
    );

    let docs = template(&[]);
    let crd = one(&docs, "CustomResourceDefinition");
    let generated = documents(&committed);
    assert_eq!(crd["spec"], generated[0]["spec"], "the rendered CRD's spec");
    assert_eq!(crd["metadata"]["name"], generated[0]["metadata"]["name"]);
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
        "uninstalling the chart must not delete every Flow"
    );

    let without = template(&["crds.install=false"]);
    assert!(of_kind(&without, "CustomResourceDefinition").is_empty());
}

// ---------------------------------------------------------------------------------------------
// CHART-3.

fn env(deployment: &Value) -> BTreeMap<String, String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

#[test]
fn chart_3_operator_pod_is_restricted_and_two_replicas_elect_a_leader() {
    let docs = template(&["workerImage.tag=1.2.3", "natsUrl=nats://nats.media:4222"]);
    let d = one(&docs, "Deployment");
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["args"], json!(["run"]));
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    let env = env(d);
    assert_eq!(
        env.get("VF_OPERATOR_WORKER_IMAGE").map(String::as_str),
        Some("videoflow/videoflow-worker:1.2.3")
    );
    assert_eq!(
        env.get("VF_OPERATOR_NATS_URL").map(String::as_str),
        Some("nats://nats.media:4222")
    );
    assert_eq!(
        env.get("VF_OPERATOR_METRICS_ADDR").map(String::as_str),
        Some("[::]:8080"),
        "dual-stack by default"
    );
    for (var, value) in [
        ("VF_OPERATOR_LEADER_ELECTION_LEASE", "vf-videoflow-operator"),
        ("VF_OPERATOR_LEADER_ELECTION_LEASE_DURATION_SECONDS", "15"),
        ("VF_OPERATOR_LEADER_ELECTION_RENEW_DEADLINE_SECONDS", "10"),
        ("VF_OPERATOR_LEADER_ELECTION_RETRY_PERIOD_SECONDS", "2"),
    ] {
        assert_eq!(env.get(var).map(String::as_str), Some(value), "{var}");
    }
    let svc = one(&docs, "Service");
    assert_eq!(svc["spec"]["ports"][0]["port"], 8080);
    assert!(of_kind(&docs, "ServiceMonitor").is_empty());

    let placed = template(&[
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "metrics.serviceMonitor.enabled=true",
    ]);
    let pod = &one(&placed, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"]["pool"], "system");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    let monitor = one(&placed, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
}

// ---------------------------------------------------------------------------------------------
// IMAGE-1: the Dockerfiles give the pods what the renderer assumes (no engine runs here, so
// the images themselves are not built by the tests).

#[test]
fn image_1_dockerfiles_are_non_root_and_fit_the_renderer() {
    use videoflow_operator::render::pod::{STATIC_WORKER_BINARY, WORKER_BINARY};
    let read = |name: &str| {
        std::fs::read_to_string(repo_root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    for name in ["Dockerfile.operator", "Dockerfile.worker"] {
        let text = read(name);
        let lines: Vec<&str> = text.lines().collect();
        let last_from = lines
            .iter()
            .rposition(|l| l.starts_with("FROM "))
            .expect("a FROM");
        let runtime = &lines[last_from..];
        assert!(
            runtime.contains(&"USER 65532:65532"),
            "{name}: the runtime stage runs as 65532 (the chart's runAsUser)"
        );
        // The base is a build argument whose default is the public distroless image.
        assert_eq!(runtime[0], "FROM ${RUNTIME_IMAGE}", "{name}");
        let default = lines
            .iter()
            .find_map(|l| l.strip_prefix("ARG RUNTIME_IMAGE="))
            .unwrap_or_else(|| panic!("{name}: ARG RUNTIME_IMAGE=<default>"));
        assert!(
            default.contains("distroless") && default.ends_with(":nonroot"),
            "{name}: a distroless nonroot base: {default}"
        );
    }
    let worker = read("Dockerfile.worker");
    assert!(
        worker.contains(&format!(
            "COPY --from=binaries /out/videoflow-worker {WORKER_BINARY}\n"
        )),
        "Dockerfile.worker installs the worker at {WORKER_BINARY}"
    );
    // The worker execs its video sibling from its own directory.
    let video = WORKER_BINARY.replace("videoflow-worker", "videoflow-worker-video");
    assert!(
        worker.contains(&format!(
            "COPY --from=binaries /out/videoflow-worker-video {video}\n"
        )),
        "Dockerfile.worker installs the video worker beside the worker, at {video}"
    );
    assert!(
        worker.contains(&format!(
            "COPY --from=binaries /out/videoflow-worker-static {STATIC_WORKER_BINARY}\n"
        )),
        "Dockerfile.worker installs the static worker the init container copies at {STATIC_WORKER_BINARY}"
    );
    assert!(
        worker.contains("--no-default-features \\\n && install -D -m 0755 target/dist/videoflow-worker /out/videoflow-worker-static"),
        "the copied worker is built without the video feature (it runs in any image)"
    );
    assert!(
        worker.contains("COPY --from=busybox /bin/busybox /bin/cp\n"),
        "the exec init container runs `cp`: the worker image carries one"
    );
    assert!(read("Dockerfile.operator").contains(
        "COPY --from=binaries /out/videoflow-operator /usr/local/bin/videoflow-operator\n"
    ));
}
