//! The operator end to end (issues #8, #9, #11): `videoflow-operator run` as a process against
//! a real API server, controller manager, scheduler and kwok (`scripts/testenv`), with a real
//! nats-server, under the Helm chart's ServiceAccount and RBAC.
//!
//! One control plane and one operator serve every scenario; each scenario has a namespace of
//! its own. Pods never really run: kwok's stages make them Ready, complete Job pods with exit
//! 0, and end an annotated pod's container with the exit code and termination message of the
//! annotations (`testenv.videoflow.io/*`, see `scripts/testenv`).
//!
//! `VF_E2E_KUBECONFIG=<path>` runs the scenarios against an existing cluster instead (see
//! docs/TESTING.md); the audit comparison then cannot run and is reported as ignored.
//! Missing control-plane binaries fail every scenario with the remedy
//! (`scripts/testenv build`, or `scripts/install-deps`).

#[path = "e2e/readme.rs"]
mod readme;
#[path = "e2e/world.rs"]
mod world;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{Value, json};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_operator::controller::permissions::{
    LEADER_ELECTION_PERMISSIONS, REQUIRED_PERMISSIONS,
};
use videoflow_operator::render::{self, RenderConfig};
use world::{
    DEADLINE, LEASE, LEASE_TIMINGS, OPERATOR_NS, REPLICAS, SERVICE_ACCOUNT, World, apply_flow,
    condition, delete_flow, end_condition, found, get_flow, has_condition, kind_api, labelled,
    list_json, namespace, repo_root, wait_condition, wait_flow, wait_for, wait_gone,
    wait_torn_down,
};

/// The world, started by the first scenario that runs.
type Shared = Arc<OnceLock<Result<Arc<World>, String>>>;

fn world(shared: &Shared) -> Result<Arc<World>, Failed> {
    shared
        .get_or_init(|| World::start().map(Arc::new))
        .clone()
        .map_err(|e| Failed::from(format!("e2e set-up failed: {e}")))
}

/// Runs one async scenario on the world's runtime; a panic becomes the failure, with the
/// operator's log tail appended.
fn scenario<F, Fut>(shared: &Shared, f: F) -> Result<(), Failed>
where
    F: FnOnce(Arc<World>) -> Fut,
    Fut: Future<Output = ()>,
{
    let w = world(shared)?;
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.rt.block_on(f(w.clone()))));
    match outcome {
        Ok(()) => Ok(()),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned());
            Err(Failed::from(format!(
                "{msg}\n--- operator: {} ---\n{}",
                w.operator_state(),
                w.operator_tail(30)
            )))
        }
    }
}

fn trial<F, Fut>(shared: &Shared, name: &str, f: F) -> Trial
where
    F: FnOnce(Arc<World>) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let shared = shared.clone();
    Trial::test(name, move || scenario(&shared, f))
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let shared: Shared = Arc::new(OnceLock::new());
    let scenarios = vec![
        trial(
            &shared,
            "every_sample_flow_is_admitted_and_gets_its_objects_with_owner_references",
            samples,
        ),
        trial(
            &shared,
            "an_invalid_flow_is_not_admitted_and_nothing_is_created",
            invalid_flow,
        ),
        trial(
            &shared,
            "a_worker_exit_3_with_a_json_record_makes_the_flow_degraded_with_code_and_remedy",
            degraded,
        ),
        trial(
            &shared,
            "a_batch_flow_whose_jobs_complete_is_complete",
            batch_complete,
        ),
        trial(
            &shared,
            "a_topology_change_starts_a_new_run_and_removes_the_old_runs_objects",
            topology_change,
        ),
        trial(
            &shared,
            "an_image_change_updates_the_workloads_in_place_within_the_same_run",
            image_change,
        ),
        trial(
            &shared,
            "a_worker_the_scheduler_cannot_place_makes_the_flow_stalled_after_the_grace",
            stalled,
        ),
        trial(
            &shared,
            "delete_runs_the_teardown_job_releases_the_finalizer_and_collects_every_object",
            delete_flow_scenario,
        ),
        trial(
            &shared,
            "every_run_a_flow_had_is_torn_down_also_when_it_is_deleted_after_an_invalid_edit",
            retired_and_invalid_teardown,
        ),
        trial(
            &shared,
            "scale_6_rendered_scaled_objects_are_accepted_by_the_api_server_with_the_keda_crd",
            scaled_objects,
        ),
        trial(
            &shared,
            "the_readme_kubernetes_section_works_as_written",
            readme_kubernetes,
        ),
        trial(
            &shared,
            "killing_the_leader_hands_the_lease_over_and_the_other_replica_reconciles",
            leader_handover,
        ),
        trial(
            &shared,
            "a_steady_flow_causes_no_api_request_of_the_operator_for_a_minute",
            steady_flow,
        ),
        trial(
            &shared,
            "passwords_from_secrets_appear_in_no_status_event_pod_or_operator_log",
            secrets_redacted,
        ),
    ];
    let mut scenarios = scenarios;
    // The scale bench (docs/PERFORMANCE.md): only when asked for, since it holds the control
    // plane for minutes.
    if let Some(n) = std::env::var(SCALE_FLOWS_VAR)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        scenarios.push(trial(
            &shared,
            "scale_many_flows_in_steady_state_cost_no_writes",
            move |w| scale_bench(w, n),
        ));
    }
    let first = libtest_mimic::run(&args, scenarios);
    // The audit comparison needs every scenario's requests, so it runs after them (and only
    // claims "every granted verb was used" when none was filtered out).
    let complete = first.num_filtered_out == 0 && first.num_ignored == 0;
    let existing = std::env::var_os(videoflow_testkit::control_plane::EXISTING_KUBECONFIG_VAR)
        .is_some_and(|v| !v.is_empty());
    let audit = {
        let shared = shared.clone();
        Trial::test(
            "rbac_the_operator_under_the_charts_service_account_uses_exactly_the_granted_verbs",
            move || {
                let w = world(&shared)?;
                rbac_audit(&w, complete).map_err(Failed::from)
            },
        )
        .with_ignored_flag(existing)
    };
    let second = libtest_mimic::run(&args, vec![audit]);
    // Every trial closure is gone: dropping the last handle stops the operator, nats-server
    // and the control plane, in that order.
    drop(shared);
    if first.has_failed() || second.has_failed() {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

// ---------------------------------------------------------------------------------------------
// Flows.

/// A realtime chain of three long-running nodes (three Deployments).
const CHAIN: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: chain}
spec:
  type: realtime
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: det, kind: processor, parents: [cam], component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [det], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

/// Every kind the operator renders: Deployments, an autoscaled Deployment (its PDB and KEDA
/// ScaledObject), a partitioned StatefulSet (its headless Service and PDB), Jobs.
/// `MONITORING` is replaced by the nats-server's monitoring URL.
const WIDE: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: wide}
spec:
  type: realtime
  broker: {monitoringUrl: "MONITORING"}
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: det
    kind: processor
    parents: [cam]
    autoscaling: {enabled: true, minReplicas: 1, maxReplicas: 4, targetLagPerReplica: 50}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - {name: part, kind: processor, parents: [cam], replicas: 2, partitionBy: trace_id, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [det], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
  - {name: sink2, kind: consumer, parents: [part], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

fn wide(w: &World) -> String {
    WIDE.replace("MONITORING", &w.nats.monitoring_url())
}

/// The operator's rendering of `yaml` in `ns` (what it should create), from the library.
fn rendered(w: &World, ns: &str, yaml: &str) -> render::Rendered {
    let mut flow =
        render::load::flow_from_text(yaml).unwrap_or_else(|d| panic!("the Flow parses: {d:?}"));
    flow.metadata.namespace = Some(ns.to_owned());
    let config = RenderConfig {
        namespace: ns.to_owned(),
        nats_url: Some(w.nats.url()),
        ..RenderConfig::default()
    };
    render::render(&flow, &config).unwrap_or_else(|e| panic!("the Flow renders: {e}"))
}

fn api_version_of(kind: &str) -> &'static str {
    world::CHILD_KINDS
        .iter()
        .find(|(_, k)| *k == kind)
        .map_or("v1", |(v, _)| v)
}

/// Waits until every object `rendered` lists exists and is controlled by the Flow `uid`.
async fn wait_owned_objects(
    client: &Client,
    ns: &str,
    flow: &str,
    uid: &str,
    r: &render::Rendered,
) {
    for o in r.objects() {
        let (kind, name) = (o.kind(), o.name().to_owned());
        let api = kind_api(client, api_version_of(kind), kind, Some(ns)).await;
        let obj = wait_for(
            &format!("{kind} {ns}/{name} of Flow {flow}"),
            DEADLINE,
            || async { found(api.get_opt(&name).await) },
        )
        .await;
        let owners = obj.metadata.owner_references.unwrap_or_default();
        assert!(
            owners.iter().any(|r| r.kind == "Flow"
                && r.name == flow
                && r.uid == uid
                && r.controller == Some(true)
                && r.block_owner_deletion == Some(true)),
            "{kind} {ns}/{name} is not controlled by Flow {flow} ({uid}): {owners:?}"
        );
    }
}

fn uid(flow: &Value) -> String {
    flow["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn run_id(flow: &Value) -> String {
    flow["status"]["runId"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The Flow's `status.nodes` entry of `node` (panics with the status without one).
fn node_status<'a>(flow: &'a Value, node: &str) -> &'a Value {
    flow["status"]["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == node))
        .unwrap_or_else(|| panic!("status.nodes[{node}]: {}", flow["status"]))
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// Every sample of config/samples is admitted, gets every rendered object with a controller
/// owner reference to it, and then runs: batch samples complete, realtime ones become Ready.
async fn samples(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-samples").await;
    let dir = repo_root().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "samples: {files:?}");
    let mut applied = Vec::new();
    for path in &files {
        // kwok's pods never reach the Redis; admission only needs a URL.
        let yaml = videoflow_testkit::sample_on_cluster(
            &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}")),
            "redis://redis.e2e.invalid:6379/0",
        );
        let name = apply_flow(c, &ns, &yaml).await;
        applied.push((path.clone(), yaml, name));
    }
    for (path, yaml, name) in &applied {
        let flow = wait_condition(c, &ns, name, "Admitted", "True").await;
        let r = rendered(&w, &ns, yaml);
        assert_eq!(run_id(&flow), r.run_id, "{}", path.display());
        wait_owned_objects(c, &ns, name, &uid(&flow), &r).await;
        let end = end_condition(flow["spec"]["type"].as_str().unwrap_or_default());
        let flow = wait_condition(c, &ns, name, end, "True").await;
        let finalizers = flow["metadata"]["finalizers"].to_string();
        assert!(
            finalizers.contains("videoflow.io/teardown"),
            "{name}: {finalizers}"
        );
    }
}

/// A Flow whose node names an absent parent: Admitted=False with the problem, no finalizer,
/// and no object created for it.
async fn invalid_flow(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-invalid").await;
    let yaml = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: broken}
spec:
  type: batch
  nodes:
  - {name: numbers, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: sink, kind: consumer, parents: [nope], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;
    let name = apply_flow(c, &ns, yaml).await;
    let flow = wait_condition(c, &ns, &name, "Admitted", "False").await;
    let (_, reason, message) = condition(&flow, "Admitted").unwrap_or_default();
    assert!(!reason.is_empty(), "a reason");
    assert!(
        message.contains("nope"),
        "the message names the problem: {message}"
    );
    assert_eq!(flow["status"]["phase"], "Failed", "{}", flow["status"]);
    assert!(
        flow["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "no finalizer on a Flow that was never admitted: {}",
        flow["metadata"]
    );
    // The status write is the reconcile's last step for a rejected Flow, so whatever it would
    // have created exists by now.
    let objects = labelled(c, &ns, &format!("videoflow.io/flow={name}"), true).await;
    assert!(
        objects.is_empty(),
        "created for a rejected Flow: {objects:?}"
    );
    let all = labelled(
        c,
        &ns,
        "app.kubernetes.io/managed-by=videoflow-operator",
        true,
    )
    .await;
    assert!(all.is_empty(), "created in {ns}: {all:?}");
}

/// A running worker's container exits 3 with the worker's JSON termination record (a kwok
/// stage): the Flow is Degraded with the worker's code, message and remedy.
async fn degraded(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-degraded").await;
    let name = apply_flow(c, &ns, CHAIN).await;
    wait_condition(c, &ns, &name, "Ready", "True").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let selector = format!("videoflow.io/flow={name},videoflow.io/node=det");
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    let pod = wait_for("a running pod of node det", DEADLINE, || async {
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("listing pods: {e}"))?;
        let seen: Vec<(Option<String>, Option<String>)> = list
            .items
            .iter()
            .map(|p| (p.metadata.name.clone(), phase(p)))
            .collect();
        list.items
            .into_iter()
            .find(|p| phase(p).as_deref() == Some("Running"))
            .ok_or_else(|| format!("pods (name, phase): {seen:?}"))
    })
    .await;
    let pod_name = pod.metadata.name.unwrap_or_default();
    let error = VfError::new(
        ErrorCode::BrokerUnavailable,
        "cannot reach the broker at nats://nats.example:4222",
    )
    .with_remedy("Check spec.broker.url and that the broker accepts connections from the pods.");
    assert_eq!(error.exit_code(), 3);
    let record = error.termination_json();
    let patch = json!({"metadata": {"annotations": {
        "testenv.videoflow.io/exit-code": "3",
        "testenv.videoflow.io/termination-message": record,
    }}});
    pods.patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("annotating pod {pod_name}: {e}"));
    let flow = wait_condition(c, &ns, &name, "Degraded", "True").await;
    let (_, reason, message) = condition(&flow, "Degraded").unwrap_or_default();
    assert_eq!(reason, "BrokerUnavailable", "{message}");
    assert!(message.contains("VF_BROKER_UNAVAILABLE"), "{message}");
    assert!(
        message.contains("Check spec.broker.url"),
        "the remedy: {message}"
    );
    assert!(message.contains(&pod_name), "{message}");
    assert_eq!(flow["status"]["phase"], "Degraded");
    let t = &node_status(&flow, "det")["lastTermination"];
    assert_eq!(t["exitCode"], 3, "{t}");
    assert_eq!(t["code"], "VF_BROKER_UNAVAILABLE", "{t}");
    assert_eq!(t["pod"], pod_name.as_str(), "{t}");
    assert!(
        t["remedy"]
            .as_str()
            .is_some_and(|r| r.starts_with("Check spec.broker.url")),
        "{t}"
    );
    assert!(
        t["message"]
            .as_str()
            .is_some_and(|m| m.contains("nats.example")),
        "{t}"
    );
}

/// A BATCH flow: the provisioning Job and every node Job complete, so the Flow is Complete,
/// Succeeded, Ready (Succeeded) and not Progressing, with a completion time.
async fn batch_complete(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-batch").await;
    let yaml = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: nums}
spec:
  type: batch
  nodes:
  - {name: numbers, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}, params: {start_value: 0, end_value: 9}}
  - {name: double, kind: processor, parents: [numbers], replicas: 2, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [double], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;
    let name = apply_flow(c, &ns, yaml).await;
    let flow = wait_condition(c, &ns, &name, "Complete", "True").await;
    let status = &flow["status"];
    assert_eq!(status["phase"], "Succeeded", "{status}");
    assert!(has_condition(&flow, "Provisioned", "True"), "{status}");
    assert!(has_condition(&flow, "Failed", "False"), "{status}");
    assert!(has_condition(&flow, "Progressing", "False"), "{status}");
    let (ready, reason, _) = condition(&flow, "Ready").unwrap_or_default();
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("True", "Succeeded"),
        "{status}"
    );
    assert!(status["completionTime"].is_string(), "{status}");
    let r = rendered(&w, &ns, yaml);
    let jobs = kind_api(c, "batch/v1", "Job", Some(&ns)).await;
    for n in &r.nodes {
        let job = jobs
            .get(n.workload.name())
            .await
            .unwrap_or_else(|e| panic!("Job {}: {e}", n.workload.name()));
        let job = serde_json::to_value(job).unwrap_or_default();
        let complete = job["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
        });
        assert!(
            complete,
            "Job {} is Complete: {}",
            n.workload.name(),
            job["status"]
        );
    }
}

/// Adding a node changes the topology: a new run id, the new run's objects, and every object
/// of the old run (workloads, ConfigMap, Jobs, pods) gone.
async fn topology_change(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-topology").await;
    let name = apply_flow(c, &ns, CHAIN).await;
    let before = wait_condition(c, &ns, &name, "Ready", "True").await;
    let old_run = run_id(&before);
    let old_selector = format!("videoflow.io/flow={name},videoflow.io/run={old_run}");
    let old_objects = labelled(c, &ns, &old_selector, false).await;
    assert!(
        old_objects.iter().any(|o| o.starts_with("Deployment/")),
        "the old run's objects: {old_objects:?}"
    );
    let changed = CHAIN.replace(
        "  - {name: sink,",
        "  - {name: audit, kind: consumer, parents: [det], component: {builtin: videoflow.consumers.basic.VoidConsumer}}\n  - {name: sink,",
    );
    assert_ne!(changed, CHAIN);
    apply_flow(c, &ns, &changed).await;
    let r = rendered(&w, &ns, &changed);
    assert_ne!(r.run_id, old_run, "a topology change is a new run");
    let after = wait_flow(c, &ns, &name, "the new run Ready", |f| {
        run_id(f) == r.run_id && has_condition(f, "Ready", "True")
    })
    .await;
    assert_eq!(after["status"]["nodes"].as_array().map(Vec::len), Some(4));
    wait_owned_objects(c, &ns, &name, &uid(&after), &r).await;
    wait_gone(
        c,
        &ns,
        &old_selector,
        "the old run's objects (and pods) to be gone",
    )
    .await;
}

/// Only the image changes: the run id stays, every Deployment's pod template gets the new
/// image (a rolling update the controllers and kwok carry out), nothing is pruned, and the
/// Flow is Ready again at its new generation.
async fn image_change(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-image").await;
    let name = apply_flow(c, &ns, CHAIN).await;
    let before = wait_condition(c, &ns, &name, "Ready", "True").await;
    let run = run_id(&before);
    let selector = format!("videoflow.io/flow={name}");
    let objects = labelled(c, &ns, &selector, false).await;
    let image = "registry.example/videoflow-worker:e2e";
    let changed = CHAIN.replace(
        "  type: realtime\n",
        &format!("  type: realtime\n  image: {{worker: \"{image}\"}}\n"),
    );
    assert_ne!(changed, CHAIN);
    apply_flow(c, &ns, &changed).await;
    let generation = before["metadata"]["generation"]
        .as_i64()
        .unwrap_or_default()
        + 1;
    let after = wait_flow(c, &ns, &name, "Ready=True at the new generation", |f| {
        f["status"]["observedGeneration"].as_i64() == Some(generation)
            && has_condition(f, "Ready", "True")
    })
    .await;
    assert_eq!(run_id(&after), run, "an image change is not a new run");
    let deployments = kind_api(c, "apps/v1", "Deployment", Some(&ns)).await;
    wait_for(
        "every Deployment rolled out with the new image",
        DEADLINE,
        || async {
            let seen = list_json(&deployments, &ListParams::default().labels(&selector)).await?;
            let all = seen.len() == 3
                && seen.iter().all(|d| {
                    d["spec"]["template"]["spec"]["containers"][0]["image"] == image
                        && d["status"]["updatedReplicas"] == d["spec"]["replicas"]
                        && d["status"]["readyReplicas"] == d["spec"]["replicas"]
                });
            if all {
                return Ok(());
            }
            let rollout: Vec<String> = seen
                .iter()
                .map(|d| {
                    format!(
                        "{}: image {}, replicas {} updated {} ready {}",
                        d["metadata"]["name"],
                        d["spec"]["template"]["spec"]["containers"][0]["image"],
                        d["spec"]["replicas"],
                        d["status"]["updatedReplicas"],
                        d["status"]["readyReplicas"]
                    )
                })
                .collect();
            Err(format!("{} Deployments: {rollout:?}", seen.len()))
        },
    )
    .await;
    let now = labelled(c, &ns, &selector, false).await;
    assert_eq!(now, objects, "the same objects, updated in place");
}

/// A worker asking for more GPUs than any node has stays Pending (the real scheduler marks
/// it Unschedulable): past the operator's grace (5 s here) the Flow is Stalled, and says why.
async fn stalled(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-stalled").await;
    let yaml = CHAIN.replace(
        "parents: [cam], component:",
        "parents: [cam], gpu: {count: 1000}, component:",
    );
    assert_ne!(yaml, CHAIN);
    let name = apply_flow(c, &ns, &yaml).await;
    let flow = wait_condition(c, &ns, &name, "Stalled", "True").await;
    let (_, reason, message) = condition(&flow, "Stalled").unwrap_or_default();
    assert_eq!(reason, "Unschedulable", "{message}");
    assert!(message.contains("node 'det'"), "{message}");
    assert!(
        message.contains("nvidia.com/gpu"),
        "the scheduler's reason: {message}"
    );
    assert_eq!(flow["status"]["phase"], "Degraded", "{}", flow["status"]);
    assert!(has_condition(&flow, "Ready", "False"), "{}", flow["status"]);
}

/// Deleting a running Flow: the operator stops the workers, runs the teardown Job, reports
/// TornDown and releases its finalizer; the Flow goes and so does everything it owned.
async fn delete_flow_scenario(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-delete").await;
    let yaml = wide(&w);
    let name = apply_flow(c, &ns, &yaml).await;
    let flow = wait_condition(c, &ns, &name, "Ready", "True").await;
    wait_owned_objects(c, &ns, &name, &uid(&flow), &rendered(&w, &ns, &yaml)).await;
    let selector = format!("videoflow.io/flow={name}");
    let before = labelled(c, &ns, &selector, true).await;
    for kind in [
        "Deployment/",
        "StatefulSet/",
        "Service/",
        "PodDisruptionBudget/",
        "ScaledObject/",
        "Pod/",
    ] {
        assert!(
            before.iter().any(|o| o.starts_with(kind)),
            "a {kind} before the delete: {before:?}"
        );
    }
    delete_flow(c, &ns, &name).await;
    wait_for(
        &format!("Flow {ns}/{name} to be gone (finalizer released)"),
        DEADLINE,
        || async {
            match get_flow(c, &ns, &name).await {
                None => Ok(()),
                Some(f) => Err(format!(
                    "still there: deletionTimestamp {}, finalizers {}, status {}",
                    f["metadata"]["deletionTimestamp"], f["metadata"]["finalizers"], f["status"]
                )),
            }
        },
    )
    .await;
    // The release event is published only once the teardown Job completed.
    let torn_down = wait_torn_down(c, &ns, &name).await;
    assert!(
        torn_down["note"]
            .as_str()
            .is_some_and(|n| n.contains("were deleted")),
        "{torn_down}"
    );
    wait_gone(
        c,
        &ns,
        &selector,
        "every object of the Flow (and its pods) to be garbage-collected",
    )
    .await;
}

/// A Flow that moved to a new run (topology change), was then edited into something invalid
/// and deleted: the run it left gets its teardown Job when it is left, and the run it had
/// when it became invalid gets one at the deletion — derived from that run's provisioning
/// Job, since the Flow cannot be rendered — instead of `TeardownSkipped` and streams left
/// behind. Shown from the operator's own requests in the audit log (a retired run's finished
/// Job is collected a minute later, so the log, not the cluster, is the record).
async fn retired_and_invalid_teardown(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-retired").await;
    let name = apply_flow(c, &ns, CHAIN).await;
    let first = run_id(&wait_condition(c, &ns, &name, "Ready", "True").await);
    let moved = CHAIN.replace(
        "  - {name: sink,",
        "  - {name: audit, kind: consumer, parents: [det], component: {builtin: videoflow.consumers.basic.VoidConsumer}}\n  - {name: sink,",
    );
    apply_flow(c, &ns, &moved).await;
    let second = rendered(&w, &ns, &moved).run_id;
    assert_ne!(second, first);
    wait_flow(c, &ns, &name, "the second run Ready", |f| {
        run_id(f) == second && has_condition(f, "Ready", "True")
    })
    .await;
    let invalid = moved.replace("parents: [det], component: {builtin: videoflow.consumers.basic.VoidConsumer}}\n  - {name: sink,", "parents: [nope], component: {builtin: videoflow.consumers.basic.VoidConsumer}}\n  - {name: sink,");
    assert_ne!(invalid, moved);
    apply_flow(c, &ns, &invalid).await;
    let rejected = wait_condition(c, &ns, &name, "Admitted", "False").await;
    assert_eq!(run_id(&rejected), second, "the running run is kept");
    delete_flow(c, &ns, &name).await;
    let torn = wait_torn_down(c, &ns, &name).await;
    let note = torn["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains(&second), "{note}");
    let applied: Vec<String> = operator_requests(&w, &ns, None, None)
        .into_iter()
        .filter(|(_, verb, resource, _)| verb == "patch" && resource == "jobs")
        .map(|(_, _, _, job)| job)
        .collect();
    for run in [&first, &second] {
        let job = videoflow_core::naming::run_object_name(&name, run, &["teardown"]);
        assert!(
            applied.contains(&job),
            "teardown Job {job} applied: {applied:?}"
        );
    }
    wait_gone(
        c,
        &ns,
        &format!("videoflow.io/flow={name}"),
        "every object of the Flow to be collected",
    )
    .await;
}

/// SCALE-6 against the real API server: the ScaledObject the operator applies is accepted
/// by the pinned KEDA CRD's schema and stored exactly as rendered (nothing pruned).
async fn scaled_objects(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-keda").await;
    let yaml = wide(&w);
    let name = apply_flow(c, &ns, &yaml).await;
    let r = rendered(&w, &ns, &yaml);
    let want = r
        .node("det")
        .and_then(|n| n.scaled_object.as_ref())
        .unwrap_or_else(|| panic!("det renders a ScaledObject"));
    let want = serde_json::to_value(want).unwrap_or_default();
    let so_name = want["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let api = kind_api(c, "keda.sh/v1alpha1", "ScaledObject", Some(&ns)).await;
    let stored = wait_for(
        &format!("ScaledObject {ns}/{so_name}"),
        DEADLINE,
        || async { found(api.get_opt(&so_name).await) },
    )
    .await;
    let stored = serde_json::to_value(stored).unwrap_or_default();
    assert_eq!(
        stored["spec"], want["spec"],
        "the API server stored the rendered spec unchanged (a field the CRD does not know \
         would have been pruned)"
    );
    let flow = wait_condition(c, &ns, &name, "Ready", "True").await;
    let det = node_status(&flow, "det");
    assert_eq!(det["scaler"]["rendered"], true, "{det}");
    // And the schema is enforced, not merely present: a ScaledObject without triggers (KEDA
    // requires them) is refused.
    let mut bad = want.clone();
    bad["metadata"] = json!({"name": "no-triggers", "namespace": ns});
    bad["spec"]
        .as_object_mut()
        .map(|s| s.remove("triggers"))
        .unwrap_or_else(|| panic!("a spec"));
    let refused = api
        .patch(
            "no-triggers",
            &PatchParams::apply("videoflow-e2e"),
            &Patch::Apply(&bad),
        )
        .await;
    assert!(
        refused.is_err(),
        "a ScaledObject without triggers was accepted"
    );
}

/// How long `kubectl get flows -w` (interactive: "Ctrl-C to stop watching") watches.
const WATCH_SECS: u64 = 20;

/// Issue #11: "the README's Kubernetes section works as written against the test control
/// plane". Every command of the ```sh blocks under "## Kubernetes" in README.md (read now, so
/// this follows the README) runs with bash, in order, against the test control plane: the
/// admin kubeconfig with its context's namespace set to this scenario's, `kubectl` from
/// `scripts/testenv build`, the pinned helm. Differences from a real cluster, each deliberate:
///
/// - `docker build` is skipped: there is no container runtime (and no daemon) here; kwok
///   "runs" pods without images.
/// - `--set natsUrl=nats://nats.nats:4222` (the README's example broker) becomes the test's
///   nats-server URL.
/// - The chart's operator Deployment is installed and rolled out, but its pod is simulated by
///   kwok and runs nothing: the world's `videoflow-operator run` process, under the same
///   ServiceAccount, stands in for it. The set-up applied the chart's RBAC and CRD with Helm's
///   ownership metadata, so `helm install` adopts them (same release, same namespace, as
///   written).
/// - `kubectl get flows -w` watches for [`WATCH_SECS`] (`timeout`, exit 124) and must have
///   printed the Flow's row.
///
/// Before `kubectl delete flow` the Flow must have reached its end (batch: Complete, realtime:
/// Ready); after it, the Flow is gone (kubectl waits for the finalizer), the teardown Job ran
/// (`TornDown`) and everything it owned was garbage-collected.
async fn readme_kubernetes(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-readme").await;
    let path = repo_root().join("README.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("README.md: {e}"));
    let commands = readme::kubernetes_commands(&text);
    let shell = readme::Shell::new(&w, &ns)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let sample = commands
        .iter()
        .find_map(|c| readme::applied_file(c))
        .unwrap_or_else(|| panic!("no `kubectl apply -f` in README.md's Kubernetes section"));
    let (flow, flow_type) = readme::flow_name_and_type(&sample);
    let end = end_condition(&flow_type);
    let (mut ran, mut images) = (Vec::new(), Vec::new());
    for command in &commands {
        if let Some(image) = readme::built_image(command) {
            eprintln!("readme: skipped (no container runtime): {command}");
            images.push(image);
            continue;
        }
        let command = readme::with_broker(command, &w.nats.url());
        let words = readme::words(&command);
        let deletes_flow = words.starts_with(&["kubectl", "delete", "flow"]);
        let selector = format!("videoflow.io/flow={flow}");
        if deletes_flow {
            // The README watched the Flow to its end before deleting it.
            wait_condition(c, &ns, &flow, end, "True").await;
            assert!(
                !labelled(c, &ns, &selector, false).await.is_empty(),
                "the Flow's objects before the delete"
            );
        }
        let watch = readme::is_watch(&command);
        let secs = if watch {
            WATCH_SECS
        } else {
            world::DEADLINE.as_secs()
        };
        let out = shell.run(&command, secs).await;
        eprintln!(
            "readme: $ {command}
{out}"
        );
        if watch {
            assert!(
                matches!(out.code, Some(0 | 124)),
                "`{command}` failed:
{out}"
            );
            assert!(
                out.stdout
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(flow.as_str())),
                "`{command}` printed no row of Flow {flow}:
{out}"
            );
        } else {
            assert_eq!(
                out.code,
                Some(0),
                "`{command}` failed:
{out}"
            );
        }
        if let Some(deployment) = words.iter().find_map(|w| w.strip_prefix("deploy/")) {
            // The images the README builds are the ones the chart deploys: the operator's,
            // and the workers' default (VF_OPERATOR_WORKER_IMAGE).
            let deployments = kind_api(c, "apps/v1", "Deployment", Some(OPERATOR_NS)).await;
            let d = deployments
                .get(deployment)
                .await
                .unwrap_or_else(|e| panic!("the chart's Deployment {deployment}: {e}"));
            let pod = serde_json::to_string(&d.data["spec"]["template"]).unwrap_or_default();
            for image in &images {
                assert!(
                    pod.contains(&format!("\"{image}\"")),
                    "the chart deploys {image}, which the README builds: {pod}"
                );
            }
        }
        if words.starts_with(&["kubectl", "describe", "flow"]) {
            assert!(
                out.stdout.contains("Admitted"),
                "`{command}` shows the conditions:
{out}"
            );
        }
        if deletes_flow {
            // kubectl waited for the Flow to go, so the finalizer was released, which the
            // operator does only once the teardown Job completed.
            assert!(
                get_flow(c, &ns, &flow).await.is_none(),
                "Flow {flow} is gone"
            );
            wait_torn_down(c, &ns, &flow).await;
            wait_gone(
                c,
                &ns,
                &selector,
                "every object of the Flow (and its pods) to be collected",
            )
            .await;
        }
        ran.push(words.join(" "));
    }
    // What this scenario exists to prove must still be in the README.
    for step in [
        "helm install",
        "rollout status",
        "kubectl apply -f",
        "kubectl get flows -w",
        "kubectl describe flow",
        "kubectl delete flow",
    ] {
        assert!(
            ran.iter().any(|r| r.contains(step)),
            "README.md's Kubernetes section no longer runs `{step} ...`: {ran:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC.

/// Verbs the chart grants that no request of the scenarios shows, each with why.
const NOT_A_REQUEST: &[(&str, &str, &str, &str)] = &[
    (
        "videoflow.io",
        "flows/finalizers",
        "update",
        "checked by the OwnerReferencesPermissionEnforcement admission plugin (on in \
         scripts/testenv) on every child with blockOwnerDeletion, never requested",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "used when an Event repeats into a series; the scenarios may not repeat one",
    ),
];

/// From the API server's audit log: every request of the operator's ServiceAccount was
/// authorized, used only granted verbs, and (when every scenario ran) every granted verb was
/// used, except the documented [`NOT_A_REQUEST`] ones.
fn rbac_audit(w: &World, complete: bool) -> Result<(), String> {
    let path = w
        .plane()
        .audit_log()
        .ok_or("no audit log: this control plane was not started by scripts/testenv")?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let user = format!("system:serviceaccount:{OPERATOR_NS}:{SERVICE_ACCOUNT}");
    let mut used = BTreeSet::new();
    let mut forbidden = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != user.as_str() {
            continue;
        }
        let o = &event["objectRef"];
        let group = o["apiGroup"].as_str().unwrap_or_default().to_owned();
        let mut resource = o["resource"].as_str().unwrap_or_default().to_owned();
        if let Some(sub) = o["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let verb = event["verb"].as_str().unwrap_or_default().to_owned();
        let code = event["responseStatus"]["code"].as_i64().unwrap_or_default();
        if code == 403 {
            forbidden.push(format!(
                "{verb} {group}/{resource}: {}",
                event["requestURI"]
            ));
        }
        // A server-side apply that creates is authorized as `create` too.
        if verb == "patch" && code == 201 {
            used.insert((group.clone(), resource.clone(), "create".to_owned()));
        }
        used.insert((group, resource, verb));
    }
    if used.is_empty() {
        return Err(format!("no request of {user} in {}", path.display()));
    }
    let granted: BTreeSet<(String, String, String)> = REQUIRED_PERMISSIONS
        .iter()
        .chain(LEADER_ELECTION_PERMISSIONS)
        .flat_map(|p| {
            p.verbs
                .iter()
                .map(|v| (p.group.to_owned(), p.resource.to_owned(), (*v).to_owned()))
        })
        .collect();
    let mut problems = Vec::new();
    if !forbidden.is_empty() {
        problems.push(format!("forbidden requests: {forbidden:#?}"));
    }
    let ungranted: Vec<_> = used.difference(&granted).collect();
    if !ungranted.is_empty() {
        problems.push(format!("used but not granted: {ungranted:?}"));
    }
    if complete {
        let unused: Vec<_> = granted
            .difference(&used)
            .filter(|(g, r, v)| {
                !NOT_A_REQUEST
                    .iter()
                    .any(|(eg, er, ev, _)| eg == g && er == r && ev == v)
            })
            .collect();
        if !unused.is_empty() {
            problems.push(format!(
                "granted but never used by any scenario (remove the grant, or add a scenario \
                 that needs it): {unused:?}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

// ---------------------------------------------------------------------------------------------
// High availability and steady state.

/// The leader Lease's holder and transition count, as the API server has them.
async fn lease_holder(c: &Client) -> Result<(String, i32), String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = found(
        Api::<Lease>::namespaced(c.clone(), OPERATOR_NS)
            .get_opt(LEASE)
            .await,
    )?;
    let spec = lease.spec.unwrap_or_default();
    let holder = spec
        .holder_identity
        .filter(|h| !h.is_empty())
        .ok_or("no holder")?;
    Ok((holder, spec.lease_transitions.unwrap_or(0)))
}

/// Two replicas elect one leader; SIGKILL of the leader (no release) hands the Lease to the
/// other within the lease duration plus a retry period (as the candidate's clock measures
/// it; the deadline here only bounds the wait), and the new leader reconciles a Flow
/// created after the kill.
async fn leader_handover(w: Arc<World>) {
    let c = &w.client;
    let (leader, transitions) =
        wait_for("a leader on the Lease", DEADLINE, || lease_holder(c)).await;
    assert!(REPLICAS.contains(&leader.as_str()), "holder {leader}");
    let other = REPLICAS
        .iter()
        .copied()
        .find(|r| *r != leader)
        .expect("two replicas");
    let leader_static = REPLICAS
        .iter()
        .copied()
        .find(|r| *r == leader)
        .expect("the leader");
    let killed = std::time::Instant::now();
    w.kill_replica(leader_static);
    let (holder, after) = wait_for(&format!("{other} to take the Lease"), DEADLINE, || async {
        match lease_holder(c).await? {
            (h, n) if h == other => Ok((h, n)),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    let took = killed.elapsed();
    eprintln!(
        "e2e: leader {leader} killed; {holder} holds the Lease after {:.1} s (lease {} s, retry {} s)",
        took.as_secs_f64(),
        LEASE_TIMINGS.0,
        LEASE_TIMINGS.2
    );
    assert!(
        after > transitions,
        "leaseTransitions {transitions} → {after}"
    );
    // The new leader reconciles: a Flow created now gets admitted and its objects.
    let ns = namespace(c, "e2e-handover").await;
    let name = apply_flow(c, &ns, CHAIN).await;
    wait_condition(c, &ns, &name, "Ready", "True").await;
    // The killed replica comes back as a candidate; the leader keeps the Lease.
    w.restart_replica(leader_static);
    let (still, _) = lease_holder(c).await.expect("the Lease");
    assert_eq!(
        still, other,
        "a restarted replica does not take a held Lease"
    );
    // Only a leader reconciles: in each replica's log every apply comes after it started
    // leading (a replica that lost the Lease under load and won it back leads again first).
    for r in REPLICAS {
        let log = w.operator_log(r);
        let first_lead = log.find("\"message\":\"leading\"");
        let first_apply = log.find("\"message\":\"applying\"");
        if let Some(apply) = first_apply {
            assert!(
                first_lead.is_some_and(|lead| lead < apply),
                "{r} applied before it led"
            );
        }
    }
    delete_flow(c, &ns, &name).await;
    wait_torn_down(c, &ns, &name).await;
}

/// The operator's audited requests about objects in `ns` received in `[from, to)`:
/// (verb, resource, name).
fn operator_requests(
    w: &World,
    ns: &str,
    from: Option<k8s_openapi::jiff::Timestamp>,
    to: Option<k8s_openapi::jiff::Timestamp>,
) -> Vec<(k8s_openapi::jiff::Timestamp, String, String, String)> {
    let path = w
        .plane()
        .audit_log()
        .expect("the test control plane's audit log");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let user = format!("system:serviceaccount:{OPERATOR_NS}:{SERVICE_ACCOUNT}");
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != user.as_str() || event["objectRef"]["namespace"] != ns {
            continue;
        }
        // One request is audited at ResponseStarted and ResponseComplete (watches): count it
        // once.
        if event["stage"] != "ResponseComplete" {
            continue;
        }
        let Some(at) = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        else {
            continue;
        };
        if from.is_some_and(|f| at < f) || to.is_some_and(|t| at >= t) {
            continue;
        }
        let o = &event["objectRef"];
        let mut resource = o["resource"].as_str().unwrap_or_default().to_owned();
        if let Some(sub) = o["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        out.push((
            at,
            event["verb"].as_str().unwrap_or_default().to_owned(),
            resource,
            o["name"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    out
}

const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// A running Flow that nothing changes costs no request at all: no write (status written
/// only when what a user reads changes; demand read only for autoscaled nodes), and no read
/// (children come from the watches' caches), over a whole minute of the audit log.
async fn steady_flow(w: Arc<World>) {
    let c = &w.client;
    let ns = namespace(c, "e2e-steady").await;
    let name = apply_flow(c, &ns, CHAIN).await;
    wait_condition(c, &ns, &name, "Ready", "True").await;
    // Settled: the operator's last write in the namespace is some seconds old.
    let quiet = Duration::from_secs(10);
    wait_for("the operator's writes to settle", DEADLINE, || async {
        let last = operator_requests(&w, &ns, None, None)
            .into_iter()
            .filter(|(_, verb, _, _)| WRITE_VERBS.contains(&verb.as_str()))
            .map(|(at, ..)| at)
            .max();
        let now = k8s_openapi::jiff::Timestamp::now();
        match last {
            Some(at) if now.duration_since(at).as_secs() >= quiet.as_secs() as i64 => Ok(()),
            Some(at) => Err(format!("last write at {at}")),
            None => Err("no write yet".to_owned()),
        }
    })
    .await;
    let from = k8s_openapi::jiff::Timestamp::now();
    // The measurement window itself, not a wait for an outcome.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let to = k8s_openapi::jiff::Timestamp::now();
    let flow = get_flow(c, &ns, &name).await.expect("the Flow");
    assert!(has_condition(&flow, "Ready", "True"), "still Ready");
    let requests = operator_requests(&w, &ns, Some(from), Some(to));
    let writes: Vec<_> = requests
        .iter()
        .filter(|(_, verb, _, _)| WRITE_VERBS.contains(&verb.as_str()))
        .collect();
    assert!(
        writes.is_empty(),
        "a steady Flow caused {} writes in a minute: {writes:#?}",
        writes.len()
    );
    assert!(
        requests.is_empty(),
        "a steady Flow caused {} reads in a minute (children come from the caches): \
         {requests:#?}",
        requests.len()
    );
    delete_flow(c, &ns, &name).await;
    wait_torn_down(c, &ns, &name).await;
}

// ---------------------------------------------------------------------------------------------
// Scale (docs/PERFORMANCE.md): `VF_E2E_SCALE_FLOWS=100 cargo test -p videoflow-operator --test e2e
// -- scale_` creates that many three-node Flows and reports the leader's figures in steady state.

/// The number of Flows of the scale bench; unset: no bench.
const SCALE_FLOWS_VAR: &str = "VF_E2E_SCALE_FLOWS";

/// A Prometheus text metric's value (a line without labels, or with exactly `labels`).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key == name).then(|| value.parse::<f64>().ok())?
        })
        .unwrap_or(0.0)
}

/// The reconcile-duration histogram's cumulative buckets: (upper bound s, count).
fn duration_buckets(text: &str) -> Vec<(f64, f64)> {
    let prefix = "videoflow_operator_reconcile_duration_seconds_bucket{le=\"";
    let mut out: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (le, value) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value.trim().parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The smallest bucket bound at or above the `q` quantile of the counts between two
/// snapshots (`before` may be empty).
fn quantile_bound(after: &[(f64, f64)], before: &[(f64, f64)], q: f64) -> f64 {
    let at = |v: &[(f64, f64)], le: f64| v.iter().find(|(b, _)| *b == le).map_or(0.0, |(_, c)| *c);
    let total = after.last().map_or(0.0, |(le, c)| c - at(before, *le));
    after
        .iter()
        .find(|(le, c)| c - at(before, *le) >= q * total)
        .map_or(f64::NAN, |(le, _)| *le)
}

/// Every audited request of the operator's ServiceAccount received in `[from, to)`:
/// (verb, namespace, resource).
fn all_operator_requests(
    w: &World,
    from: k8s_openapi::jiff::Timestamp,
    to: k8s_openapi::jiff::Timestamp,
) -> Vec<(String, String, String)> {
    let path = w.plane().audit_log().expect("the audit log");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let user = format!("system:serviceaccount:{OPERATOR_NS}:{SERVICE_ACCOUNT}");
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["user"]["username"] == user.as_str() && e["stage"] == "ResponseComplete")
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .is_some_and(|at| at >= from && at < to)
        })
        .map(|e| {
            let o = &e["objectRef"];
            (
                e["verb"].as_str().unwrap_or_default().to_owned(),
                o["namespace"].as_str().unwrap_or_default().to_owned(),
                o["resource"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn scale_bench(w: Arc<World>, n: usize) {
    let c = &w.client;
    let ns = namespace(c, "e2e-scale").await;
    let started = std::time::Instant::now();
    let (leader, _) = wait_for("a leader", DEADLINE, || lease_holder(c)).await;
    let before = w.figures(&leader).await.expect("the leader's figures");
    let names: Vec<String> = (0..n).map(|i| format!("scale-{i:03}")).collect();
    for name in &names {
        apply_flow(
            c,
            &ns,
            &CHAIN.replace("name: chain", &format!("name: {name}")),
        )
        .await;
    }
    let deadline = DEADLINE + Duration::from_secs(3 * n as u64);
    wait_for(&format!("{n} Flows Ready"), deadline, || async {
        let flows = list_json(&world::flows(c, &ns), &ListParams::default()).await?;
        let ready = flows
            .iter()
            .filter(|f| has_condition(f, "Ready", "True"))
            .count();
        (ready == n)
            .then_some(())
            .ok_or(format!("{ready}/{n} Ready"))
    })
    .await;
    let converged = started.elapsed();
    let quiet = Duration::from_secs(15);
    wait_for("the operator's writes to settle", deadline, || async {
        let last = operator_requests(&w, &ns, None, None)
            .into_iter()
            .filter(|(_, verb, _, _)| WRITE_VERBS.contains(&verb.as_str()))
            .map(|(at, ..)| at)
            .max();
        let now = k8s_openapi::jiff::Timestamp::now();
        match last {
            Some(at) if now.duration_since(at).as_secs() >= quiet.as_secs() as i64 => Ok(()),
            seen => Err(format!("last write at {seen:?}")),
        }
    })
    .await;
    let (holder, _) = lease_holder(c).await.expect("the Lease");
    assert_eq!(holder, leader, "the leader changed during the bench");
    let steady_from = w.figures(&leader).await.expect("figures");
    let from = k8s_openapi::jiff::Timestamp::now();
    let window = Duration::from_secs(60);
    // The measurement window itself.
    tokio::time::sleep(window).await;
    let to = k8s_openapi::jiff::Timestamp::now();
    let steady_to = w.figures(&leader).await.expect("figures");
    let requests = all_operator_requests(&w, from, to);
    let is_write = |v: &str| WRITE_VERBS.contains(&v);
    let flow_writes = requests
        .iter()
        .filter(|(v, n, _)| is_write(v) && *n == ns)
        .count();
    let flow_reads = requests
        .iter()
        .filter(|(v, n, _)| !is_write(v) && *n == ns)
        .count();
    let lease = requests.iter().filter(|(_, _, r)| r == "leases").count();
    let lease_writes = requests
        .iter()
        .filter(|(v, _, r)| r == "leases" && is_write(v))
        .count();
    let others = requests.len() - flow_writes - flow_reads - lease;
    let reconciles = |t: &str| metric(t, "videoflow_operator_reconciles_total");
    let steady_reconciles = reconciles(&steady_to.metrics) - reconciles(&steady_from.metrics);
    let whole = duration_buckets(&steady_to.metrics);
    let start = duration_buckets(&before.metrics);
    let p99_all = quantile_bound(&whole, &start, 0.99);
    let p50_all = quantile_bound(&whole, &start, 0.50);
    let total_reconciles = reconciles(&steady_to.metrics) - reconciles(&before.metrics);
    let mib = |kib: u64| kib as f64 / 1024.0;
    eprintln!(
        "e2e scale: {n} Flows ({} Deployments) Ready in {:.0} s; {total_reconciles} reconciles \
         until steady, p50 ≤ {p50_all} s, p99 ≤ {p99_all} s (histogram bounds)\n\
         e2e scale: steady minute: {steady_reconciles} reconciles, {} API requests of the \
         operator ({flow_writes} writes and {flow_reads} reads in the Flows' namespace, {lease} \
         on the Lease of which {lease_writes} writes, {others} others); leader RSS {:.1} MiB \
         (anonymous {:.1}, file-backed {:.1}; {} threads; before the Flows {:.1} MiB, \
         anonymous {:.1}; peak {:.1} MiB)",
        3 * n,
        converged.as_secs_f64(),
        requests.len(),
        mib(steady_to.rss_kib),
        mib(steady_to.rss_anon_kib),
        mib(steady_to.rss_file_kib),
        steady_to.threads,
        mib(before.rss_kib),
        mib(before.rss_anon_kib),
        mib(steady_to.peak_rss_kib),
    );
    assert_eq!(
        flow_writes, 0,
        "{n} steady Flows caused writes: {requests:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets.

/// The password of every URL in the scenario's Secret.
const PASSWORD: &str = "s3cret";

/// Broker, payload store and run ledger from a Secret with passwords (`nats://user:s3cret@…`,
/// `redis://:s3cret@…`); a worker then exits quoting both URLs in full (as 1.0.4's
/// traceback does). The password appears in no status field, no Event, no pod object and no
/// line of either operator replica's log; the quoted URLs do reach the status, masked.
async fn secrets_redacted(w: Arc<World>) {
    use k8s_openapi::api::core::v1::Secret;
    let c = &w.client;
    let ns = namespace(c, "e2e-secrets").await;
    let nats_url = format!("nats://user:{PASSWORD}@nats.example:4222");
    let redis_url = format!("redis://:{PASSWORD}@redis.example:6379/0");
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "urls", "namespace": ns},
        "stringData": {"nats": nats_url, "redis": redis_url},
    });
    Api::<Secret>::namespaced(c.clone(), &ns)
        .patch(
            "urls",
            &PatchParams::apply("videoflow-e2e").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|e| panic!("creating the Secret: {e}"));
    let from = |key: &str| format!("{{secretKeyRef: {{name: urls, key: {key}}}}}");
    let yaml = CHAIN.replace(
        "  type: realtime\n",
        &format!(
            "  type: realtime\n  broker: {{urlFrom: {}}}\n  payloadStore: {{urlFrom: {}}}\n  \
             runtimeStore: {{urlFrom: {}}}\n",
            from("nats"),
            from("redis"),
            from("redis")
        ),
    );
    assert_ne!(yaml, CHAIN);
    let name = apply_flow(c, &ns, &yaml).await;
    wait_condition(c, &ns, &name, "Ready", "True").await;

    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let selector = format!("videoflow.io/flow={name},videoflow.io/node=det");
    let pod = wait_for("a running pod of node det", DEADLINE, || async {
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("listing pods: {e}"))?;
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .ok_or_else(|| "no running pod".to_owned())
    })
    .await;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let rendered = serde_json::to_string(&pod).unwrap_or_default();
    assert!(
        rendered.contains("secretKeyRef") && !rendered.contains(PASSWORD),
        "the pod references the Secret and carries no password"
    );
    let traceback = format!(
        "Traceback (most recent call last):\nredis.exceptions.ConnectionError: Error connecting \
         to {redis_url}\nnats.errors.NoServersError: {nats_url}"
    );
    let patch = json!({"metadata": {"annotations": {
        "testenv.videoflow.io/exit-code": "1",
        "testenv.videoflow.io/termination-message": traceback,
    }}});
    pods.patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("annotating pod {pod_name}: {e}"));
    let flow = wait_flow(c, &ns, &name, "det's termination in the status", |f| {
        !node_status(f, "det")["lastTermination"].is_null()
    })
    .await;
    let termination = node_status(&flow, "det")["lastTermination"].to_string();
    assert!(
        termination.contains("redis.example") && termination.contains("***"),
        "the URLs reach the status, masked: {termination}"
    );

    let texts = [
        ("the Flow", serde_json::to_string(&flow).unwrap_or_default()),
        (
            "the Events",
            serde_json::to_string(
                &Api::<k8s_openapi::api::events::v1::Event>::namespaced(c.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .expect("events")
                    .items,
            )
            .unwrap_or_default(),
        ),
        (
            "the core Events",
            serde_json::to_string(
                &Api::<k8s_openapi::api::core::v1::Event>::namespaced(c.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .expect("events")
                    .items,
            )
            .unwrap_or_default(),
        ),
        ("the operator logs", w.operator_logs()),
    ];
    for (what, text) in &texts {
        assert!(!text.is_empty(), "{what}: nothing read");
        assert!(
            !text.contains(PASSWORD),
            "{what} carry the password: {text}"
        );
    }
    delete_flow(c, &ns, &name).await;
    wait_torn_down(c, &ns, &name).await;
}
