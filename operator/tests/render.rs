//! Desired-state rendering (design §5 and §7): a Flow → the Kubernetes objects of
//! its run.
//!
//! - every sample in `config/samples/` renders to its committed snapshot
//!   (`operator/tests/snapshots/<sample>.yaml`; `VF_UPDATE_SNAPSHOTS=1` rewrites them);
//! - the workload-kind rules: BATCH → Jobs, REALTIME finite producer → Job, partitioned →
//!   StatefulSet + headless Service, otherwise Deployment;
//! - labels and owner references on every object; secretKeyRef env; GPU limits; the exec
//!   wrapper; PodDisruptionBudgets; determinism; typed errors.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
use videoflow_operator::crd::Flow;
use videoflow_operator::render::labels::{
    LABEL_COMPONENT, LABEL_FLOW, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_NODE,
    LABEL_PART_OF, LABEL_RUN,
};
use videoflow_operator::render::{
    self, Object, RenderConfig, RenderError, Rendered, Workload, WorkloadKind,
};
use videoflow_testkit::sample_on_cluster;

const UID: &str = "6f1c2d3e-0000-4000-8000-000000000001";

fn repo_root() -> PathBuf {
    videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the operator crate sits inside the workspace")
        .to_path_buf()
}

fn config() -> RenderConfig {
    RenderConfig {
        worker_image: "videoflow-worker:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        namespace: "videoflow".into(),
        nats_url: Some("nats://nats.videoflow.svc:4222".into()),
    }
}

fn flow(text: &str) -> Flow {
    render::load::flow_from_text(text).unwrap_or_else(|d| panic!("flow parses: {d:?}"))
}

fn with_uid(mut flow: Flow) -> Flow {
    flow.metadata.uid = Some(UID.into());
    flow
}

fn rendered(text: &str) -> Rendered {
    render::render(&with_uid(flow(text)), &config()).unwrap_or_else(|e| panic!("renders: {e}"))
}

fn pod<'a>(r: &'a Rendered, node: &str) -> &'a PodSpec {
    let objects = r.node(node).unwrap_or_else(|| panic!("node {node}"));
    let template = match &objects.workload {
        Workload::Deployment(d) => &d.spec.as_ref().expect("spec").template,
        Workload::StatefulSet(s) => &s.spec.as_ref().expect("spec").template,
        Workload::Job(j) => &j.spec.as_ref().expect("spec").template,
    };
    template.spec.as_ref().expect("pod spec")
}

fn worker<'a>(r: &'a Rendered, node: &str) -> &'a Container {
    let pod = pod(r, node);
    assert_eq!(pod.containers.len(), 1);
    &pod.containers[0]
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|e| e.name == name)
}

fn literal<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
    env(c, name).and_then(|e| e.value.as_deref())
}

fn kind_of(r: &Rendered, node: &str) -> WorkloadKind {
    r.node(node).expect("node").workload.kind()
}

// ---------------------------------------------------------------------------------------------
// (1) Snapshots of every sample.

/// The Redis the samples' `payloadStore: {}` gets on a cluster.
const SAMPLE_REDIS: &str = "redis://redis.videoflow.svc:6379/0";

fn check_snapshot(sample: &Path) {
    let stem = sample
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("utf-8 name");
    let text = sample_on_cluster(
        &std::fs::read_to_string(sample).expect("read the sample"),
        SAMPLE_REDIS,
    );
    let yaml = render::render(&with_uid(flow(&text)), &config())
        .and_then(|r| r.to_yaml())
        .unwrap_or_else(|e| panic!("{stem} renders: {e}"));
    let path = videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{stem}.yaml"));
    if std::env::var("VF_UPDATE_SNAPSHOTS").as_deref() == Ok("1") {
        std::fs::write(&path, &yaml).expect("write the snapshot");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != yaml {
        let line = committed
            .lines()
            .zip(yaml.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(yaml.lines().count()));
        panic!(
            "{} is stale or missing: rendering changed. First difference at line {}:\n  \
             committed: {:?}\n  rendered:  {:?}\nReview the change, then rewrite the snapshots \
             with:\n    VF_UPDATE_SNAPSHOTS=1 cargo test -p videoflow-operator --test render",
            path.display(),
            line + 1,
            committed.lines().nth(line),
            yaml.lines().nth(line),
        );
    }
}

#[test]
fn every_sample_matches_its_snapshot() {
    let mut samples: Vec<PathBuf> = std::fs::read_dir(repo_root().join("config/samples"))
        .expect("config/samples")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    samples.sort();
    assert!(!samples.is_empty(), "no samples found");
    for sample in &samples {
        check_snapshot(sample);
    }
}

/// Every securityContext that says `runAsNonRoot` also names a numeric user and group: the
/// kubelet refuses to start an image whose `USER` is a name (or root) under `runAsNonRoot`
/// alone, and users bring their own images for exec components.
#[test]
fn every_container_runs_as_a_numeric_non_root_user() {
    fn walk(v: &serde_json::Value, at: &str, seen: &mut usize) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(sc) = m.get("securityContext")
                    && sc.get("runAsNonRoot") == Some(&serde_json::Value::Bool(true))
                {
                    *seen += 1;
                    for key in ["runAsUser", "runAsGroup"] {
                        assert!(
                            sc.get(key)
                                .and_then(serde_json::Value::as_i64)
                                .is_some_and(|id| id > 0),
                            "{at}: securityContext without a numeric {key}: {sc}"
                        );
                    }
                }
                for (k, child) in m {
                    walk(child, &format!("{at}.{k}"), seen);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{at}[{i}]"), seen);
                }
            }
            _ => {}
        }
    }
    let mut seen = 0;
    for entry in std::fs::read_dir(repo_root().join("config/samples")).expect("config/samples") {
        let sample = entry.expect("dir entry").path();
        if sample.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = sample_on_cluster(
            &std::fs::read_to_string(&sample).expect("read the sample"),
            SAMPLE_REDIS,
        );
        let yaml = render::render(&with_uid(flow(&text)), &config())
            .and_then(|r| r.to_yaml())
            .expect("renders");
        for doc in serde_yaml::Deserializer::from_str(&yaml) {
            let v = <serde_json::Value as serde::Deserialize>::deserialize(doc)
                .expect("a YAML document");
            walk(&v, &sample.display().to_string(), &mut seen);
        }
    }
    assert!(seen > 10, "containers checked: {seen}");
}

// ---------------------------------------------------------------------------------------------
// (2) Workload kinds (design §7).

const REALTIME: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: cams, namespace: vision}
spec:
  type: realtime
  runId: r1
  broker: {url: "nats://nats:4222"}
  nodes:
  - {name: live, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: file, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: det, kind: processor, parents: [live], replicas: 3, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: track, kind: processor, parents: [det], replicas: 2, partitionBy: trace_id, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: one, kind: processor, parents: [file], partitionBy: trace_id, component: {builtin: videoflow.processors.basic.IdentityProcessor}}
  - {name: sink, kind: consumer, parents: [track], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
  - {name: sink2, kind: consumer, parents: [one], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

#[test]
fn batch_flows_render_every_node_as_a_job() {
    let text = std::fs::read_to_string(repo_root().join("config/samples/toy-calculator.yaml"))
        .expect("sample");
    let r = rendered(&text);
    for node in &r.nodes {
        assert_eq!(node.workload.kind(), WorkloadKind::Job, "{}", node.node);
        assert!(
            node.pdb.is_none() && node.service.is_none(),
            "{}",
            node.node
        );
        assert_eq!(pod(&r, &node.node).restart_policy.as_deref(), Some("Never"));
    }
}

#[test]
fn realtime_kinds_follow_the_rules() {
    let r = rendered(REALTIME);
    assert_eq!(
        kind_of(&r, "live"),
        WorkloadKind::Deployment,
        "live producer"
    );
    assert_eq!(kind_of(&r, "file"), WorkloadKind::Job, "finite producer");
    assert_eq!(kind_of(&r, "det"), WorkloadKind::Deployment, "competing");
    assert_eq!(
        kind_of(&r, "track"),
        WorkloadKind::StatefulSet,
        "partitioned"
    );
    assert_eq!(
        kind_of(&r, "one"),
        WorkloadKind::Deployment,
        "partitionBy at 1 replica"
    );
    assert_eq!(kind_of(&r, "sink"), WorkloadKind::Deployment);
    for node in ["live", "det", "track", "sink"] {
        assert_eq!(
            pod(&r, node).restart_policy.as_deref(),
            Some("Always"),
            "{node}"
        );
    }
    let file = pod(&r, "file");
    assert_eq!(file.restart_policy.as_deref(), Some("Never"));
}

/// A Deployment or StatefulSet restarts every exit, a clean one too: its worker holds after
/// a clean end (a REALTIME flow's finite sources ended and it drained) instead of exiting
/// into `CrashLoopBackOff`; a Job's worker exits 0, which completes the Job.
#[test]
fn long_running_workers_hold_after_a_clean_end_and_job_workers_exit() {
    let r = rendered(REALTIME);
    for node in ["live", "det", "track", "one", "sink"] {
        assert_eq!(
            literal(worker(&r, node), "VF_ON_FINISH"),
            Some("hold"),
            "{node}"
        );
    }
    assert_eq!(literal(worker(&r, "file"), "VF_ON_FINISH"), None);
    let fusion = std::fs::read_to_string(repo_root().join("config/samples/toy-fusion.yaml"))
        .expect("sample");
    let f = rendered(&fusion);
    assert_eq!(kind_of(&f, "check"), WorkloadKind::Deployment);
    assert_eq!(literal(worker(&f, "check"), "VF_ON_FINISH"), Some("hold"));
    for producer in ["left", "right", "imu"] {
        assert_eq!(kind_of(&f, producer), WorkloadKind::Job);
        assert_eq!(literal(worker(&f, producer), "VF_ON_FINISH"), None);
    }
    let batch = std::fs::read_to_string(repo_root().join("config/samples/toy-calculator.yaml"))
        .expect("sample");
    let b = rendered(&batch);
    for node in ["numbers", "double", "pair", "check"] {
        assert_eq!(literal(worker(&b, node), "VF_ON_FINISH"), None, "{node}");
    }
    // Nobody may turn it off by hand: it is the workload's, not the node's.
    let text = SECRETS.replace(
        "{name: LOG_LEVEL, value: debug}",
        "{name: VF_ON_FINISH, value: exit}",
    );
    let err = render::render(&flow(&text), &config()).expect_err("refused");
    assert!(
        matches!(&err, RenderError::InvalidField { path, .. } if path == "spec.nodes[0].env[0].name"),
        "{err:?}"
    );
}

#[test]
fn partitioned_nodes_get_a_statefulset_with_a_headless_service() {
    let r = rendered(REALTIME);
    let track = r.node("track").expect("track");
    let Workload::StatefulSet(sts) = &track.workload else {
        panic!("track is a StatefulSet");
    };
    let spec = sts.spec.as_ref().expect("spec");
    let service = track.service.as_ref().expect("headless service");
    assert_eq!(spec.service_name, service.metadata.name);
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    assert_eq!(spec.replicas, Some(2));
    let svc = service.spec.as_ref().expect("service spec");
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(
        Some(&svc.selector.clone().unwrap_or_default()),
        spec.selector.match_labels.as_ref()
    );
    // ENV-5 step 2: the ordinal in POD_NAME is the replica id; no explicit id.
    let c = worker(&r, "track");
    let pod_name = env(c, "POD_NAME").expect("POD_NAME");
    let field = pod_name
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref());
    assert_eq!(field.map(|f| f.field_path.as_str()), Some("metadata.name"));
    assert!(env(c, "VF_REPLICA_ID").is_none());
    // Non-partitioned nodes have no Service.
    assert!(r.node("det").expect("det").service.is_none());
}

#[test]
fn indexed_jobs_hand_over_the_completion_index_and_deployments_no_replica_id() {
    let text = std::fs::read_to_string(repo_root().join("config/samples/toy-calculator.yaml"))
        .expect("sample");
    let r = rendered(&text);
    let Workload::Job(job) = &r.node("double").expect("double").workload else {
        panic!("double is a Job");
    };
    let spec = job.spec.as_ref().expect("spec");
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
    assert_eq!(spec.backoff_limit, Some(3), "ABORT-6");
    let id = env(worker(&r, "double"), "VF_REPLICA_ID").expect("VF_REPLICA_ID");
    let field = id
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .expect("fieldRef");
    assert_eq!(
        field.field_path,
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    // A single-replica Job is not indexed.
    let Workload::Job(square) = &r.node("square").expect("square").workload else {
        panic!("square is a Job");
    };
    assert_eq!(
        square.spec.as_ref().and_then(|s| s.completion_mode.clone()),
        None
    );
    assert!(env(worker(&r, "square"), "VF_REPLICA_ID").is_none());

    let rt = rendered(REALTIME);
    assert!(
        env(worker(&rt, "det"), "VF_REPLICA_ID").is_none(),
        "workers compete"
    );
}

#[test]
fn disruption_budgets_only_for_long_running_multi_replica_nodes() {
    let r = rendered(REALTIME);
    for (node, expected) in [
        ("live", false),
        ("file", false),
        ("det", true),
        ("track", true),
        ("one", false),
        ("sink", false),
    ] {
        let objects = r.node(node).expect("node");
        assert_eq!(objects.pdb.is_some(), expected, "{node}");
        if let Some(pdb) = &objects.pdb {
            let spec = pdb.spec.as_ref().expect("spec");
            assert_eq!(
                spec.max_unavailable,
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
            );
            assert_eq!(pdb.metadata.name.as_deref(), Some(objects.workload.name()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (3) Metadata: names, labels, owner references, namespace.

#[test]
fn every_object_is_labelled_owned_and_namespaced() {
    let r = rendered(REALTIME);
    assert_eq!(r.run_id, "r1");
    let objects = r.objects();
    assert_eq!(
        objects.len(),
        2 + r.nodes.len() + 1 + 2,
        "specs, provision, workloads, svc, pdbs"
    );
    for object in &objects {
        let meta = object.meta();
        let what = format!("{} {}", object.kind(), object.name());
        assert!(object.name().starts_with("vf-cams-r1"), "{what}");
        assert_eq!(meta.namespace.as_deref(), Some("vision"), "{what}");
        let labels = meta.labels.as_ref().expect("labels");
        for (key, value) in [
            (LABEL_NAME, "videoflow"),
            (LABEL_INSTANCE, "cams"),
            (LABEL_PART_OF, "videoflow"),
            (LABEL_MANAGED_BY, "videoflow-operator"),
            (LABEL_FLOW, "cams"),
            (LABEL_RUN, "r1"),
        ] {
            assert_eq!(
                labels.get(key).map(String::as_str),
                Some(value),
                "{what}: {key}"
            );
        }
        assert!(labels.contains_key(LABEL_COMPONENT), "{what}");
        let owners = meta.owner_references.as_deref().expect("owner references");
        assert_eq!(owners.len(), 1, "{what}");
        let owner = &owners[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("videoflow.io/v1alpha1", "Flow", "cams", UID),
            "{what}"
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
    }
    // Worker objects and their pods carry the node label; the selector is run-scoped.
    let det = r.node("det").expect("det");
    let Workload::Deployment(d) = &det.workload else {
        panic!("det is a Deployment")
    };
    assert_eq!(d.metadata.name.as_deref(), Some("vf-cams-r1-det"));
    let spec = d.spec.as_ref().expect("spec");
    let selector = spec.selector.match_labels.clone().expect("matchLabels");
    assert_eq!(
        selector.keys().collect::<Vec<_>>(),
        [LABEL_FLOW, LABEL_NODE, LABEL_RUN]
    );
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .expect("pod labels");
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    assert_eq!(pod_labels.get(LABEL_NODE).map(String::as_str), Some("det"));
    assert_eq!(r.specs.metadata.name.as_deref(), Some("vf-cams-r1-specs"));
    assert_eq!(
        r.provision.metadata.name.as_deref(),
        Some("vf-cams-r1-provision")
    );
}

#[test]
fn no_uid_no_owner_references_and_namespace_falls_back() {
    let mut f = flow(REALTIME);
    f.metadata.namespace = None;
    let r = render::render(&f, &config()).expect("renders");
    for object in r.objects() {
        assert!(
            object.meta().owner_references.is_none(),
            "{}",
            object.name()
        );
        assert_eq!(object.meta().namespace.as_deref(), Some("videoflow"));
    }
}

// ---------------------------------------------------------------------------------------------
// (4) Environment, Secrets, provisioning.

const SECRETS: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: sec}
spec:
  runId: r1
  broker: {urlFrom: {secretKeyRef: {name: nats-creds, key: url}}, streamReplicas: 3}
  payloadStore: {urlFrom: {secretKeyRef: {name: redis-creds, key: url}}}
  nodes:
  - name: cam
    kind: producer
    finite: false
    component: {builtin: videoflow.producers.basic.IntProducer}
    env: [{name: LOG_LEVEL, value: debug}]
  - {name: sink, kind: consumer, parents: [cam], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

fn secret_ref(e: &EnvVar) -> Option<(&str, &str)> {
    let s = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
    Some((s.name.as_str(), s.key.as_str()))
}

#[test]
fn url_from_becomes_a_secret_key_ref_everywhere() {
    let r = rendered(SECRETS);
    let c = worker(&r, "cam");
    let nats = env(c, "VF_NATS_URL").expect("VF_NATS_URL");
    assert_eq!(secret_ref(nats), Some(("nats-creds", "url")));
    assert!(nats.value.is_none());
    let redis = env(c, "VF_BLOB_REDIS_URL").expect("VF_BLOB_REDIS_URL");
    assert_eq!(secret_ref(redis), Some(("redis-creds", "url")));
    // The config fallback never overrides the Flow's own broker.
    assert!(!r.to_yaml().expect("yaml").contains("nats.videoflow.svc"));
    // The provisioning pod gets the same reference.
    let job_pod = r
        .provision
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod");
    let p = &job_pod.containers[0];
    assert_eq!(
        secret_ref(env(p, "VF_NATS_URL").expect("nats")),
        Some(("nats-creds", "url"))
    );
    assert_eq!(literal(p, "VF_STREAM_REPLICAS"), Some("3"));
}

#[test]
fn worker_env_has_the_core_set_identity_termination_log_and_user_env() {
    let r = rendered(SECRETS);
    let c = worker(&r, "cam");
    assert_eq!(literal(c, "VF_NODE_NAME"), Some("cam"));
    assert_eq!(literal(c, "VF_HEALTH_PORT"), Some("8080"));
    assert_eq!(
        literal(c, "VF_TERMINATION_LOG"),
        Some("/dev/termination-log")
    );
    assert_eq!(literal(c, "LOG_LEVEL"), Some("debug"));
    assert!(env(c, "POD_NAME").is_some());
    assert_eq!(
        c.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    let names: Vec<&str> = c
        .env
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    let mut dedup = names.clone();
    dedup.sort_unstable();
    dedup.dedup();
    assert_eq!(dedup.len(), names.len(), "no variable twice: {names:?}");
}

#[test]
fn user_env_cannot_shadow_rendered_variables() {
    let text = SECRETS.replace(
        "{name: LOG_LEVEL, value: debug}",
        "{name: VF_NODE_NAME, value: x}",
    );
    let err = render::render(&flow(&text), &config()).expect_err("refused");
    assert!(
        matches!(&err, RenderError::InvalidField { path, .. } if path == "spec.nodes[0].env[0].name"),
        "{err:?}"
    );
}

#[test]
fn provisioning_job_runs_the_worker_with_the_specs_mounted() {
    let r = rendered(REALTIME);
    let job = r.provision.spec.as_ref().expect("job spec");
    assert_eq!(job.backoff_limit, Some(6));
    let pod = job.template.spec.as_ref().expect("pod");
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let c = &pod.containers[0];
    assert_eq!(
        c.command.as_deref(),
        Some(
            &[
                "/usr/local/bin/videoflow-worker".to_owned(),
                "provision".to_owned()
            ][..]
        )
    );
    assert_eq!(
        literal(c, "VF_FLOW_SPECS_PATH"),
        Some("/etc/videoflow/specs.json")
    );
    assert_eq!(literal(c, "VF_FLOW_ID"), Some("cams"));
    assert_eq!(literal(c, "VF_RUN_ID"), Some("r1"));
    assert_eq!(literal(c, "VF_FLOW_TYPE"), Some("realtime"));
    assert_eq!(literal(c, "VF_NATS_URL"), Some("nats://nats:4222"));
    assert_eq!(
        c.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    let volume = pod
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|v| v.config_map.is_some());
    assert_eq!(
        volume
            .and_then(|v| v.config_map.as_ref())
            .map(|c| c.name.as_str()),
        r.specs.metadata.name.as_deref()
    );
    let data = r.specs.data.as_ref().expect("data");
    let records: serde_json::Value =
        serde_json::from_str(data.get("specs.json").expect("specs.json")).expect("json");
    assert_eq!(records.as_array().map(Vec::len), Some(7));
}

// ---------------------------------------------------------------------------------------------
// (5) Pods: security, probes, GPU, runtimes, pod settings.

const GPU: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: gpu}
spec:
  runId: r1
  broker: {url: "nats://nats:4222"}
  gpu: {resourceName: example.com/gpu, runtimeClassName: nvidia}
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: det
    kind: processor
    parents: [cam]
    gpu: {count: 2}
    resources: {requests: {cpu: "1", memory: 2Gi}, limits: {memory: 4Gi}}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: seg
    kind: processor
    parents: [cam]
    gpu: {resourceName: nvidia.com/mig-1g.10gb}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - {name: sink, kind: consumer, parents: [det, seg], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

#[test]
fn gpu_nodes_claim_their_devices_and_runtime_class() {
    let r = rendered(GPU);
    let det = worker(&r, "det");
    let res = det.resources.as_ref().expect("resources");
    let limits = res.limits.as_ref().expect("limits");
    assert_eq!(
        limits.get("example.com/gpu").map(|q| q.0.as_str()),
        Some("2")
    );
    assert_eq!(limits.get("memory").map(|q| q.0.as_str()), Some("4Gi"));
    assert_eq!(
        res.requests
            .as_ref()
            .and_then(|r| r.get("cpu"))
            .map(|q| q.0.as_str()),
        Some("1")
    );
    assert_eq!(pod(&r, "det").runtime_class_name.as_deref(), Some("nvidia"));
    let seg = worker(&r, "seg");
    let limits = seg
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits");
    assert_eq!(
        limits.get("nvidia.com/mig-1g.10gb").map(|q| q.0.as_str()),
        Some("1")
    );
    assert!(
        !limits.contains_key("example.com/gpu"),
        "the node's name wins"
    );
    // CPU nodes: no GPU, no runtime class.
    assert!(worker(&r, "sink").resources.is_none());
    assert!(pod(&r, "sink").runtime_class_name.is_none());
    // A single-replica GPU Deployment rolls without a surge pod.
    let Workload::Deployment(d) = &r.node("det").expect("det").workload else {
        panic!()
    };
    let strategy = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .expect("strategy");
    let rolling = strategy.rolling_update.as_ref().expect("rollingUpdate");
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(0)));
}

#[test]
fn default_gpu_resource_is_nvidia() {
    let text = GPU.replace(
        "  gpu: {resourceName: example.com/gpu, runtimeClassName: nvidia}\n",
        "",
    );
    let r = rendered(&text);
    let limits = worker(&r, "det")
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .expect("limits");
    assert_eq!(
        limits.get("nvidia.com/gpu").map(|q| q.0.as_str()),
        Some("2")
    );
    assert!(pod(&r, "det").runtime_class_name.is_none());
}

/// Kubernetes MIG grants: `gpu.migProfile` claims `nvidia.com/mig-<profile>` (the device
/// plugin's mixed strategy), `count` instances of it, over the Flow-wide resource name; the
/// worker learns the resource name and the fallback.
#[test]
fn mig_profile_claims_the_device_plugins_mig_resource() {
    let text = GPU.replace(
        "    gpu: {resourceName: nvidia.com/mig-1g.10gb}\n",
        "    gpu: {migProfile: 1g.18gb, count: 2, fallback: none}\n",
    );
    let r = rendered(&text);
    let seg = worker(&r, "seg");
    let limits = seg
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits");
    assert_eq!(
        limits.get("nvidia.com/mig-1g.18gb").map(|q| q.0.as_str()),
        Some("2")
    );
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!(
        literal(seg, "VF_GPU_RESOURCE_NAME"),
        Some("nvidia.com/mig-1g.18gb")
    );
    assert_eq!(literal(seg, "VF_GPU_COUNT"), Some("2"));
    assert_eq!(literal(seg, "VF_GPU_FALLBACK"), Some("none"));
    assert_eq!(pod(&r, "seg").runtime_class_name.as_deref(), Some("nvidia"));
}

/// Kubernetes UUID grants: the device plugin hands a container its devices by UUID (card
/// `GPU-…` or MIG `MIG-…`) in `NVIDIA_VISIBLE_DEVICES`, which the worker's grant check reads.
/// The operator must not render either device variable (that would override the plugin's
/// selection) nor a recorded grant it never observed; it renders the claim, the fallback and
/// the peer requirement.
#[test]
fn uuid_grants_are_left_to_the_device_plugin() {
    let text = GPU.replace(
        "    gpu: {count: 2}\n",
        "    gpu: {count: 2, fallback: cpu, requiresPeerAccess: true}\n",
    );
    let r = rendered(&text);
    for node in ["det", "seg"] {
        let c = worker(&r, node);
        for var in [
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "VF_GPU_GRANT_JSON",
        ] {
            assert!(env(c, var).is_none(), "{node} renders {var}");
        }
        assert_eq!(literal(c, "VF_DEVICE_TYPE"), Some("gpu"), "{node}");
    }
    let det = worker(&r, "det");
    assert_eq!(literal(det, "VF_GPU_FALLBACK"), Some("cpu"));
    assert_eq!(literal(det, "VF_GPU_REQUIRES_PEER_ACCESS"), Some("1"));
    assert_eq!(
        det.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("example.com/gpu"))
            .map(|q| q.0.as_str()),
        Some("2")
    );
}

/// A node cannot name both a resource and a MIG profile: the render refuses the Flow as the
/// controller would.
#[test]
fn mig_profile_with_a_resource_name_is_refused() {
    let text = GPU.replace(
        "    gpu: {resourceName: nvidia.com/mig-1g.10gb}\n",
        "    gpu: {resourceName: nvidia.com/gpu, migProfile: 1g.18gb}\n",
    );
    let err = render::render(&with_uid(flow(&text)), &config()).expect_err("refused");
    assert!(format!("{err}").contains("migProfile"), "{err}");
}

#[test]
fn every_container_is_restricted_with_a_writable_tmp_and_probes() {
    let r = rendered(&EXEC.replace("__IMAGE__", "image: registry.example/det:1,"));
    let mut containers: Vec<&Container> = Vec::new();
    for node in &r.nodes {
        let pod = pod(&r, &node.node);
        containers.extend(&pod.containers);
        containers.extend(pod.init_containers.as_deref().unwrap_or_default());
    }
    let provision = r
        .provision
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod");
    containers.extend(&provision.containers);
    for c in containers {
        let sc = c.security_context.as_ref().expect("securityContext");
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_owned()])
        );
        assert_eq!(
            sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault")
        );
    }
    for node in &r.nodes {
        let c = worker(&r, &node.node);
        let mounts = c.volume_mounts.as_deref().unwrap_or_default();
        assert!(
            mounts
                .iter()
                .any(|m| m.mount_path == "/tmp" && m.read_only.is_none())
        );
        let live = c
            .liveness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("liveness");
        let ready = c
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("readiness");
        assert_eq!(live.path.as_deref(), Some("/healthz"));
        assert_eq!(ready.path.as_deref(), Some("/readyz"));
        let port = c.ports.as_deref().unwrap_or_default();
        assert_eq!(
            (port[0].container_port, port[0].name.as_deref()),
            (8080, Some("health"))
        );
    }
}

const EXEC: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: ex}
spec:
  runId: r1
  broker: {url: "nats://nats:4222"}
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: det
    kind: processor
    parents: [cam]
    component: {exec: {__IMAGE__ command: [python3, det.py], args: ["--model", "yolo"]}}
  - name: py
    kind: consumer
    parents: [det]
    component: {python: {image: registry.example/py:1, class: my.nodes.Sink}}
"#;

#[test]
fn exec_components_run_the_copied_worker_in_the_users_image() {
    let r = rendered(&EXEC.replace("__IMAGE__", "image: registry.example/det:1,"));
    let pod = pod(&r, "det");
    let init = pod.init_containers.as_deref().expect("init containers");
    assert_eq!(init.len(), 1);
    assert_eq!(init[0].image.as_deref(), Some("videoflow-worker:test"));
    let cp = init[0].command.clone().unwrap_or_default();
    assert_eq!(
        cp,
        [
            "cp",
            "/usr/local/lib/videoflow/videoflow-worker-static",
            "/videoflow/bin/videoflow-worker"
        ]
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example/det:1"));
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        ["/videoflow/bin/videoflow-worker"]
    );
    assert_eq!(
        c.args.clone().unwrap_or_default(),
        ["exec", "--", "python3", "det.py", "--model", "yolo"]
    );
    let mount = c
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|m| m.mount_path == "/videoflow/bin")
        .expect("wrapper mount");
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|v| v.name == mount.name);
    assert!(
        volume.and_then(|v| v.empty_dir.as_ref()).is_some(),
        "an emptyDir"
    );
    assert_eq!(
        literal(c, "VF_COMPONENT_REF"),
        Some("registry.example/det:1")
    );
    // Builtin nodes have no init container.
    assert!(self::pod(&r, "cam").init_containers.is_none());
    // The user's image keeps its working directory (its program may import from it).
    assert_eq!(c.working_dir, None);
}

/// The worker image's root is read-only: a built-in node's relative paths (a self-check's
/// verdict, a sink's file) must land in the writable scratch volume, as the local runner
/// puts them in its run directory — not fail at `close()` with a read-only file system.
#[test]
fn builtin_workers_run_in_the_writable_scratch_directory() {
    let text = std::fs::read_to_string(repo_root().join("config/samples/toy-calculator.yaml"))
        .expect("sample");
    let r = rendered(&text);
    for node in ["numbers", "double", "pair", "check"] {
        let c = worker(&r, node);
        assert_eq!(c.working_dir.as_deref(), Some("/tmp"), "{node}");
        let scratch = c
            .volume_mounts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|m| m.mount_path == "/tmp")
            .expect("the scratch mount");
        assert_ne!(scratch.read_only, Some(true), "{node}: /tmp is writable");
    }
}

#[test]
fn python_components_run_the_reference_worker_in_the_users_image() {
    let r = rendered(&EXEC.replace("__IMAGE__", "image: registry.example/det:1,"));
    let c = worker(&r, "py");
    assert_eq!(c.image.as_deref(), Some("registry.example/py:1"));
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        ["python", "-m", "videoflow.worker"]
    );
    assert_eq!(literal(c, "VF_NODE_CLASS"), Some("my.nodes.Sink"));
}

#[test]
fn exec_without_an_image_is_a_typed_error() {
    let err =
        render::render(&flow(&EXEC.replace("__IMAGE__", "")), &config()).expect_err("refused");
    assert_eq!(
        err,
        RenderError::MissingComponentImage {
            node: "det".into(),
            component: "exec",
            path: "spec.nodes[1].component.exec.image".into()
        }
    );
    assert!(err.remedy().contains("spec.nodes[1].component.exec.image"));
}

#[test]
fn pod_settings_reach_every_pod() {
    let text = REALTIME.replace(
        "  broker: {url: \"nats://nats:4222\"}\n",
        r#"  broker: {url: "nats://nats:4222"}
  image: {worker: "registry.example/worker:2", pullPolicy: Always}
  pod:
    serviceAccountName: vf-workers
    priorityClassName: video
    nodeSelector: {pool: video}
    tolerations: [{key: dedicated, operator: Equal, value: video, effect: NoSchedule}]
    volumes: [{name: models, persistentVolumeClaim: {claimName: models}}]
    volumeMounts: [{name: models, mountPath: /models, readOnly: true}]
"#,
    );
    let r = rendered(&text);
    for node in &r.nodes {
        let pod = pod(&r, &node.node);
        assert_eq!(pod.service_account_name.as_deref(), Some("vf-workers"));
        assert_eq!(pod.priority_class_name.as_deref(), Some("video"));
        assert_eq!(
            pod.node_selector
                .as_ref()
                .and_then(|s| s.get("pool"))
                .map(String::as_str),
            Some("video")
        );
        assert_eq!(pod.tolerations.as_ref().map(Vec::len), Some(1));
        assert!(
            pod.volumes
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|v| v.name == "models")
        );
        let c = &pod.containers[0];
        assert!(
            c.volume_mounts
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|m| m.mount_path == "/models")
        );
        assert_eq!(c.image.as_deref(), Some("registry.example/worker:2"));
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    }
    // The provisioning pod schedules like the workers but never mounts node data.
    let p = r
        .provision
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod");
    assert_eq!(p.service_account_name.as_deref(), Some("vf-workers"));
    assert_eq!(p.priority_class_name.as_deref(), Some("video"));
    assert!(
        !p.volumes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|v| v.name == "models")
    );
}

/// Security context, affinity, topology spread, annotations and the grace period reach every
/// pod, the provisioning pod included; the container context is ours with the Flow's fields
/// over it, and a pod-level user replaces our default user.
#[test]
fn pod_security_placement_annotations_and_grace_reach_every_pod() {
    let text = REALTIME.replace(
        "  nodes:\n",
        r#"  pod:
    securityContext: {runAsUser: 1000, runAsGroup: 1000, fsGroup: 2000}
    containerSecurityContext: {readOnlyRootFilesystem: false}
    affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [video]}]}]}}}
    topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]
    annotations: {sidecar.istio.io/inject: "false"}
    terminationGracePeriodSeconds: 120
  nodes:
"#,
    );
    let r = rendered(&text);
    let provision = r
        .provision
        .spec
        .as_ref()
        .map(|s| &s.template)
        .expect("template");
    let mut templates: Vec<(&str, &k8s_openapi::api::core::v1::PodTemplateSpec)> =
        vec![("provision", provision)];
    for node in &r.nodes {
        let t = match &node.workload {
            render::workloads::Workload::Job(j) => j.spec.as_ref().map(|s| &s.template),
            render::workloads::Workload::Deployment(d) => d.spec.as_ref().map(|s| &s.template),
            render::workloads::Workload::StatefulSet(s) => s.spec.as_ref().map(|s| &s.template),
        };
        templates.push((&node.node, t.expect("template")));
    }
    for (name, t) in templates {
        let annotations = t.metadata.as_ref().and_then(|m| m.annotations.as_ref());
        assert_eq!(
            annotations
                .and_then(|a| a.get("sidecar.istio.io/inject"))
                .map(String::as_str),
            Some("false"),
            "{name}"
        );
        let pod = t.spec.as_ref().expect("pod");
        assert_eq!(pod.termination_grace_period_seconds, Some(120), "{name}");
        assert_eq!(
            pod.security_context.as_ref().and_then(|s| s.fs_group),
            Some(2000),
            "{name}"
        );
        assert!(
            pod.affinity
                .as_ref()
                .is_some_and(|a| a.node_affinity.is_some()),
            "{name}"
        );
        assert_eq!(
            pod.topology_spread_constraints.as_ref().map(Vec::len),
            Some(1),
            "{name}"
        );
        for c in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let sc = c.security_context.as_ref().expect("security context");
            assert_eq!(sc.run_as_user, Some(1000), "{name}/{}", c.name);
            assert_eq!(
                sc.read_only_root_filesystem,
                Some(false),
                "{name}/{}",
                c.name
            );
            assert_eq!(
                sc.allow_privilege_escalation,
                Some(false),
                "{name}/{}",
                c.name
            );
            assert_eq!(sc.run_as_non_root, Some(true), "{name}/{}", c.name);
        }
    }
}

#[test]
fn invalid_pod_settings_are_errors_with_paths() {
    for (pod, path) in [
        (
            "tolerations: [{tolerationSeconds: soon}]",
            "spec.pod.tolerations[0]",
        ),
        (
            "volumes: [{name: vf-tmp, emptyDir: {}}]",
            "spec.pod.volumes[0].name",
        ),
        (
            "volumeMounts: [{name: x, mountPath: /tmp}]",
            "spec.pod.volumeMounts[0].mountPath",
        ),
        (
            "probes: {startupSeconds: 5}",
            "spec.pod.probes.startupSeconds",
        ),
        (
            "probes: {livenessSeconds: 100000}",
            "spec.pod.probes.livenessSeconds",
        ),
        (
            "containerSecurityContext: {allowPrivilegeEscalation: true}",
            "spec.pod.containerSecurityContext.allowPrivilegeEscalation",
        ),
        (
            "containerSecurityContext: {capabilities: {add: [SYS_ADMIN]}}",
            "spec.pod.containerSecurityContext.capabilities.add[0]",
        ),
        (
            "securityContext: {runAsUser: 0}",
            "spec.pod.securityContext.runAsUser",
        ),
        (
            "securityContext: {fsGroup: many}",
            "spec.pod.securityContext",
        ),
        (
            "annotations: {videoflow.io/run: x}",
            "spec.pod.annotations.videoflow.io/run",
        ),
        (
            "terminationGracePeriodSeconds: -1",
            "spec.pod.terminationGracePeriodSeconds",
        ),
        (
            "topologySpreadConstraints: [{maxSkew: one}]",
            "spec.pod.topologySpreadConstraints[0]",
        ),
    ] {
        let text = REALTIME.replace("  nodes:\n", &format!("  pod: {{{pod}}}\n  nodes:\n"));
        let err = render::render(&flow(&text), &config()).expect_err("refused");
        assert!(
            matches!(&err, RenderError::InvalidField { path: p, .. } if p == path),
            "{pod}: {err:?}"
        );
    }
    let text = REALTIME.replace("  nodes:\n", "  image: {pullPolicy: Sometimes}\n  nodes:\n");
    let err = render::render(&flow(&text), &config()).expect_err("refused");
    assert!(
        matches!(&err, RenderError::InvalidField { path, .. } if path == "spec.image.pullPolicy")
    );
}

/// A slow `open()` (a model load) is never a restart: start-up ends at `/readyz` (HEALTH-1,
/// after `open()` returned) within the Flow's budget, and liveness only runs after it.
#[test]
fn startup_waits_for_readiness_within_the_flows_budget() {
    let probe = |c: &Container, which: &str| {
        let p = match which {
            "startup" => c.startup_probe.as_ref(),
            _ => c.liveness_probe.as_ref(),
        }
        .unwrap_or_else(|| panic!("a {which} probe"));
        let path = p
            .http_get
            .as_ref()
            .and_then(|h| h.path.clone())
            .unwrap_or_default();
        let budget = p.period_seconds.unwrap_or(10) * p.failure_threshold.unwrap_or(3);
        (path, budget)
    };
    let r = rendered(REALTIME);
    let c = worker(&r, "det");
    assert_eq!(probe(c, "startup"), ("/readyz".to_owned(), 600));
    assert_eq!(probe(c, "liveness"), ("/healthz".to_owned(), 45));
    let text = REALTIME.replace(
        "  nodes:\n",
        "  pod: {probes: {startupSeconds: 1800, livenessSeconds: 120}}\n  nodes:\n",
    );
    let r = rendered(&text);
    let c = worker(&r, "det");
    assert_eq!(probe(c, "startup"), ("/readyz".to_owned(), 1800));
    assert_eq!(probe(c, "liveness"), ("/healthz".to_owned(), 120));
}

// ---------------------------------------------------------------------------------------------
// (6) Determinism and errors.

#[test]
fn rendering_is_deterministic() {
    for text in [REALTIME, SECRETS, GPU] {
        let a = rendered(text);
        let b = rendered(text);
        assert_eq!(a, b);
        assert_eq!(a.to_yaml().expect("yaml"), b.to_yaml().expect("yaml"));
    }
    // Apply order: specs, provisioning, then per node Service → workload → PDB.
    let kinds: Vec<&str> = rendered(REALTIME)
        .objects()
        .iter()
        .map(Object::kind)
        .collect();
    assert_eq!(&kinds[..2], ["ConfigMap", "Job"]);
    let sts = kinds.iter().position(|k| *k == "StatefulSet").expect("sts");
    assert_eq!(kinds[sts - 1], "Service");
}

#[test]
fn no_broker_is_a_typed_error_naming_the_field() {
    let text = REALTIME.replace("  broker: {url: \"nats://nats:4222\"}\n", "");
    let offline = RenderConfig {
        nats_url: None,
        ..config()
    };
    let err = render::render(&flow(&text), &offline).expect_err("no broker");
    assert_eq!(err, RenderError::NoBroker);
    assert!(err.to_string().contains("spec.broker.url"), "{err}");
    assert!(err.remedy().contains("--nats-url"), "{}", err.remedy());
    assert_eq!(err.code().code(), "VF_CONFIG");
    // The operator's fallback fills in.
    let r = render::render(&flow(&text), &config()).expect("fallback");
    assert_eq!(
        literal(worker(&r, "det"), "VF_NATS_URL"),
        Some("nats://nats.videoflow.svc:4222")
    );
}

/// `payloadStore: {}` asks `videoflow-worker run` for a private Redis; a cluster has none to
/// start, so a store without a URL is refused at admission, naming the field (found on the
/// real node: the samples' `payloadStore: {}` was admitted and its workers got no URL).
#[test]
fn a_store_without_a_url_is_refused_naming_the_field() {
    for (store, path) in [
        ("  payloadStore: {}\n", "spec.payloadStore"),
        (
            "  payloadStore: {url: \"\", ttlSeconds: 60}\n",
            "spec.payloadStore",
        ),
        ("  runtimeStore: {}\n", "spec.runtimeStore"),
    ] {
        let text = REALTIME.replace("  nodes:\n", &format!("{store}  nodes:\n"));
        let err = render::render(&flow(&text), &config()).expect_err(store);
        assert_eq!(err, RenderError::NoStoreUrl { path }, "{store}");
        assert!(err.to_string().contains(&format!("{path}.url")), "{err}");
        assert!(
            err.remedy().contains("urlFrom.secretKeyRef"),
            "{}",
            err.remedy()
        );
        assert_eq!(err.code().code(), "VF_CONFIG");
    }
    for store in [
        "  payloadStore: {url: \"redis://r:6379/0\"}\n",
        "  payloadStore: {urlFrom: {secretKeyRef: {name: redis-creds, key: url}}}\n",
        "  runtimeStore: {url: \"redis://r:6379/1\"}\n",
    ] {
        let text = REALTIME.replace("  nodes:\n", &format!("{store}  nodes:\n"));
        render::render(&flow(&text), &config()).expect(store);
    }
}

#[test]
fn invalid_flows_and_name_collisions_are_refused() {
    let text = REALTIME.replace("parents: [live]", "parents: [nowhere]");
    let err = render::render(&flow(&text), &config()).expect_err("invalid");
    assert!(
        matches!(&err, RenderError::Invalid(d) if !d.is_empty()),
        "{err:?}"
    );

    // A node named like a run object collides with it.
    let text = REALTIME
        .replace("name: file,", "name: provision,")
        .replace("[file]", "[provision]");
    let err = render::render(&flow(&text), &config()).expect_err("collision");
    assert!(
        matches!(&err, RenderError::NameCollision { kind: "Job", name, .. } if name == "vf-cams-r1-provision"),
        "{err:?}"
    );

    let mut nameless = flow(REALTIME);
    nameless.metadata.name = None;
    assert_eq!(
        render::render(&nameless, &config()),
        Err(RenderError::MissingName)
    );
}

#[test]
fn long_statefulset_names_are_refused() {
    let long = "t".repeat(45);
    let text = REALTIME
        .replace("name: track,", &format!("name: {long},"))
        .replace("[track]", &format!("[{long}]"));
    let err = render::render(&flow(&text), &config()).expect_err("too long");
    assert!(
        matches!(
            err,
            RenderError::NameTooLong {
                kind: "StatefulSet",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn cluster_objects_render_too_but_spec_typos_do_not() {
    let text = REALTIME.replace(
        "metadata: {name: cams, namespace: vision}",
        "metadata: {name: cams, namespace: vision, uid: abc, resourceVersion: \"7\"}\nstatus: {phase: Running}",
    );
    let f = flow(&text);
    assert_eq!(f.metadata.uid.as_deref(), Some("abc"));
    let typo = REALTIME.replace("replicas: 3", "replica: 3");
    let diags = render::load::flow_from_text(&typo).expect_err("typo");
    assert_eq!(diags[0].path, "spec.nodes[2].replica");
}

#[test]
fn render_command_prints_yaml_offline() {
    let bin = env!("CARGO_BIN_EXE_videoflow-operator");
    let sample = repo_root().join("config/samples/toy-calculator.yaml");
    let ok = std::process::Command::new(bin)
        .args(["render", "-f"])
        .arg(&sample)
        .args(["--nats-url", "nats://nats:4222", "--image", "w:1"])
        .output()
        .expect("run the binary");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let yaml = String::from_utf8_lossy(&ok.stdout);
    // 8 documents: toy-calculator's 6 nodes (one Job each), the provisioning Job and the
    // specs ConfigMap.
    assert_eq!(
        yaml.matches("\n---\n").count() + usize::from(yaml.starts_with("---")),
        8
    );
    assert!(yaml.contains("image: w:1"));
    let refused = std::process::Command::new(bin)
        .args(["render", "-f"])
        .arg(&sample)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the binary");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("spec.broker.url"), "{stderr}");
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an invalid Flow is the user's input"
    );
    // The controller's own admission: autoscaling a BATCH processor (it renders as a Job,
    // SCALE-6) is refused here as the operator refuses it, not rendered.
    let dir = std::env::temp_dir().join(format!("vf-render-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let scaled = dir.join("scaled.yaml");
    std::fs::write(
        &scaled,
        r#"apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: scaled}
spec:
  type: batch
  broker: {url: "nats://nats:4222"}
  nodes:
  - {name: a, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: work
    kind: processor
    parents: [a]
    autoscaling: {enabled: true, maxReplicas: 4}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - {name: sink, kind: consumer, parents: [work], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#,
    )
    .expect("write the flow");
    let refused = std::process::Command::new(bin)
        .args(["render", "-f"])
        .arg(&scaled)
        .output()
        .expect("run the binary");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("spec.nodes[1].autoscaling"),
        "the autoscaling refusal with its path: {stderr}"
    );
    assert!(refused.stdout.is_empty(), "nothing rendered");
}
