//! The reconciler's pure steps: termination classification, condition merging,
//! admission, the apply/prune plan, event transitions, the teardown decision, backoff and
//! metrics — plain unit tests, no API server.

use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerStatus;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use videoflow_operator::controller::Metrics;
use videoflow_operator::controller::admission::{admit, autoscaling_problems};
use videoflow_operator::controller::apply::{Stage, desired_objects, plan};
use videoflow_operator::controller::events::transitions;
use videoflow_operator::controller::observe::Observed;
use videoflow_operator::controller::reconcile::{backoff, jittered_backoff};
use videoflow_operator::controller::status::{Cond, merge_conditions};
use videoflow_operator::controller::teardown::{TeardownOutcome, TeardownStep, teardown_step};
use videoflow_operator::controller::termination::{MESSAGE_MAX, observe_container};
use videoflow_operator::crd::{Flow, FlowPhase, FlowStatus};
use videoflow_operator::render::{self, RenderConfig};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn container(v: serde_json::Value) -> ContainerStatus {
    let mut base =
        json!({"name": "worker", "image": "x", "imageID": "", "ready": false, "restartCount": 0});
    if let (Some(b), Some(extra)) = (base.as_object_mut(), v.as_object()) {
        b.extend(extra.clone());
    }
    serde_json::from_value(base).expect("container status")
}

#[test]
fn oom_killed_is_explained_with_a_memory_remedy() {
    let cs = container(json!({"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}));
    let o = observe_container("p", &cs).expect("a problem");
    assert!(o.current);
    assert_eq!(o.termination.reason, "OOMKilled");
    assert_eq!(o.termination.code, None);
    assert!(
        o.termination
            .remedy
            .as_deref()
            .is_some_and(|r| r.contains("limits.memory"))
    );
    assert_eq!(o.reason(), "OOMKilled");
}

#[test]
fn image_pull_and_config_errors_are_current_problems_with_remedies() {
    for (reason, needle) in [
        ("ImagePullBackOff", "imagePullSecret"),
        ("ErrImagePull", "imagePullSecret"),
        ("CreateContainerConfigError", "Secret or ConfigMap"),
    ] {
        let cs = container(json!({"state": {"waiting": {"reason": reason, "message": "m"}}}));
        let o = observe_container("p", &cs).expect("a problem");
        assert!(o.current, "{reason}");
        assert_eq!(o.termination.reason, reason);
        assert_eq!(o.reason(), reason);
        assert!(
            o.termination
                .remedy
                .as_deref()
                .is_some_and(|r| r.contains(needle)),
            "{reason}"
        );
    }
}

#[test]
fn crash_loop_without_a_record_says_so_and_points_at_the_logs() {
    let cs = container(json!({
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "panicked at main.rs"}}
    }));
    let o = observe_container("p", &cs).expect("a problem");
    assert!(o.current);
    assert_eq!(o.termination.reason, "CrashLoopBackOff");
    assert_eq!(o.termination.exit_code, 1);
    assert_eq!(
        o.termination.message.as_deref(),
        Some("panicked at main.rs")
    );
    let bare = container(json!({"state": {"waiting": {"reason": "CrashLoopBackOff"}}}));
    let o = observe_container("p", &bare).expect("a problem");
    assert!(
        o.termination
            .remedy
            .as_deref()
            .is_some_and(|r| r.contains("--previous"))
    );
}

#[test]
fn worker_record_is_parsed_and_a_recovered_container_is_not_current() {
    let record =
        r#"{"code": "VF_PROGRESS_STALLED", "message": "m", "disposition": "worker_fatal"}"#;
    let cs = container(json!({
        "ready": true,
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 5, "reason": "Error", "message": record}}
    }));
    let o = observe_container("p", &cs).expect("a past problem");
    assert!(!o.current);
    assert_eq!(o.termination.code.as_deref(), Some("VF_PROGRESS_STALLED"));
    assert_eq!(o.termination.disposition.as_deref(), Some("worker_fatal"));
    // No remedy in the record: the exit code's.
    assert!(
        o.termination
            .remedy
            .as_deref()
            .is_some_and(|r| r.contains("progress"))
    );
    assert_eq!(o.reason(), "ProgressStalled");
}

/// A record from a worker that does not redact (1.0.4's), or a log tail, may quote a broker
/// URL with its password: the status never does.
#[test]
fn termination_texts_in_the_status_carry_no_password() {
    let record = r#"{"code": "VF_BROKER_UNAVAILABLE", "message": "could not connect to NATS at nats://vf:s3cret@nats:4222", "remedy": "check redis://:s3cret@r:6379/0"}"#;
    let tail = "Traceback: ConnectionError nats://vf:s3cret@nats:4222 refused";
    for message in [record, tail] {
        let cs = container(json!({
            "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": message}}
        }));
        let o = observe_container("p", &cs).expect("a problem");
        let shown = format!("{:?} {}", o.termination, o.summary());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("nats://vf:***@nats:4222"), "{shown}");
    }
}

#[test]
fn success_is_no_problem_and_log_tails_are_bounded() {
    let ok = container(json!({"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}));
    assert_eq!(observe_container("p", &ok), None);
    let tail = format!("{}END", "x".repeat(5000));
    let cs = container(json!({"state": {"terminated": {"exitCode": 1, "message": tail}}}));
    let message = observe_container("p", &cs)
        .and_then(|o| o.termination.message)
        .expect("message");
    assert!(message.ends_with("END"));
    assert!(message.len() <= MESSAGE_MAX + '…'.len_utf8());
}

#[test]
fn conditions_keep_their_transition_time_unless_they_flip() {
    let t0 = ts("2030-01-01T00:00:00Z");
    let t1 = ts("2030-01-01T01:00:00Z");
    let first = merge_conditions(
        &[],
        vec![
            Cond {
                type_: "Degraded",
                status: false,
                reason: "AllHealthy".into(),
                message: "a".into(),
            },
            Cond {
                type_: "Ready",
                status: true,
                reason: "Running".into(),
                message: "b".into(),
            },
        ],
        Some(1),
        t0,
    );
    assert_eq!(first[0].type_, "Ready", "design order");
    let second = merge_conditions(
        &first,
        vec![
            Cond {
                type_: "Degraded",
                status: true,
                reason: "OOMKilled".into(),
                message: "c".into(),
            },
            Cond {
                type_: "Ready",
                status: true,
                reason: "Running".into(),
                message: "b2".into(),
            },
        ],
        Some(2),
        t1,
    );
    let ready = &second[0];
    assert_eq!(ready.last_transition_time.0, t0, "same status: time kept");
    assert_eq!(ready.message, "b2");
    assert_eq!(ready.observed_generation, Some(2));
    assert_eq!(second[1].last_transition_time.0, t1, "flipped: now");
    // A type not recomputed is kept as it was.
    let third = merge_conditions(&second, vec![], Some(3), t1);
    assert_eq!(third, second);
}

const INVALID: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: bad, namespace: ns}
spec:
  type: batch
  broker: {url: "nats://n:4222"}
  autoscaling: {enabled: true}
  nodes:
  - {name: a, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: b, kind: producer, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: j, kind: processor, parents: [a, b], replicas: 2, component: {builtin: videoflow.processors.basic.JoinerProcessor}}
  - {name: s, kind: consumer, parents: [j], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

const VALID: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: ok, namespace: ns, uid: "u-1"}
spec:
  type: realtime
  broker: {url: "nats://n:4222"}
  nodes:
  - {name: a, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - {name: s, kind: consumer, parents: [a], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

fn flow(text: &str) -> Flow {
    render::load::flow_from_text(text).expect("parses")
}

fn config() -> RenderConfig {
    RenderConfig::default()
}

#[test]
fn admission_collects_validation_and_autoscaling_problems() {
    let problems = admit(&flow(INVALID), &config()).expect_err("invalid");
    let codes: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| (p.code.as_str(), p.path.as_str()))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("VF_GRAPH_UNPARTITIONED_JOIN", "spec.nodes[2].partitionBy"),
            ("VF_CAPABILITY", "spec.autoscaling.enabled"),
        ]
    );
    assert!(problems.iter().all(|p| !p.remedy.is_empty()));
    // Producers and consumers are not refused: only processors rendered as Jobs.
    assert_eq!(autoscaling_problems(&flow(INVALID).spec).len(), 1);
    assert!(admit(&flow(VALID), &config()).is_ok());
    // A render error (no broker anywhere) is a problem too, with its path.
    let no_broker = VALID.replace("  broker: {url: \"nats://n:4222\"}\n", "");
    let problems = admit(&flow(&no_broker), &config()).expect_err("no broker");
    assert_eq!(problems[0].code, "VF_CONFIG");
    assert_eq!(problems[0].path, "spec.broker");
}

/// The user's report: a misspelt built-in class was admitted and failed only when its pod
/// started. Admission now refuses it (and a class of the wrong family, and unknown or
/// mistyped params) with "did you mean", before anything is created.
#[test]
fn admission_refuses_unknown_classes_wrong_families_and_bad_params() {
    let text = VALID
        .replace(
            "component: {builtin: videoflow.consumers.basic.VoidConsumer}",
            "component: {builtin: videoflow.consumers.basic.VoidConsumr}",
        )
        .replace(
            "finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}",
            "finite: false, component: {builtin: videoflow.processors.IdentityProcessor}, params: {fsp: 2}}",
        );
    let problems = admit(&flow(&text), &config()).expect_err("refused");
    let got: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| (p.code.as_str(), p.path.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("VF_FLOW_BUILTIN", "spec.nodes[0].component.builtin"),
            ("VF_FLOW_BUILTIN", "spec.nodes[0].params.fsp"),
            ("VF_FLOW_BUILTIN", "spec.nodes[1].component.builtin"),
        ],
        "{problems:#?}"
    );
    assert!(
        problems[0].remedy.starts_with("Set kind: processor"),
        "{}",
        problems[0].remedy
    );
    assert!(
        problems[1].remedy.starts_with("Did you mean 'fps'?"),
        "{}",
        problems[1].remedy
    );
    assert!(
        problems[2]
            .remedy
            .starts_with("Did you mean 'videoflow.consumers.basic.VoidConsumer'?"),
        "{}",
        problems[2].remedy
    );
}

#[test]
fn plan_applies_only_what_changed_and_prunes_only_our_orphans() {
    let f = flow(VALID);
    let r = render::render(&f, &config()).expect("renders");
    let desired = desired_objects(&r).expect("desired");
    // Nothing exists, not provisioned: only the specs and the provisioning Job.
    let p = plan(&desired, &Observed::default(), false, Some("u-1"));
    assert!(p.apply.iter().all(|d| d.stage == Stage::Prepare));
    assert_eq!(p.apply.len(), 2);
    // Everything exists as rendered: nothing to do.
    let mut observed = Observed::default();
    for d in &desired {
        let body = d.body.clone();
        match d.kind {
            "ConfigMap" => observed
                .config_maps
                .push(serde_json::from_value(body).expect("cm")),
            "Job" => observed
                .jobs
                .push(serde_json::from_value(body).expect("job")),
            "Deployment" => observed
                .deployments
                .push(serde_json::from_value(body).expect("d")),
            _ => {}
        }
    }
    assert!(plan(&desired, &observed, true, Some("u-1")).is_empty());
    // A changed Deployment is applied; a changed Job is not (its template is immutable).
    let mut changed = observed.clone();
    for d in &mut changed.deployments {
        d.metadata.annotations = None;
    }
    for j in &mut changed.jobs {
        j.metadata.annotations = None;
    }
    let p = plan(&desired, &changed, true, Some("u-1"));
    assert_eq!(p.apply.len(), changed.deployments.len());
    assert!(p.apply.iter().all(|d| d.kind == "Deployment"));
    // An orphan is pruned only when this Flow controls it and it is not already going.
    let mut orphans = observed.clone();
    let mut old = orphans.deployments[0].clone();
    old.metadata.name = Some("vf-ok-old-a".into());
    let mut foreign = old.clone();
    foreign.metadata.name = Some("vf-ok-foreign".into());
    if let Some(refs) = foreign.metadata.owner_references.as_mut() {
        refs[0].uid = "someone-else".into();
    }
    let mut going = old.clone();
    going.metadata.name = Some("vf-ok-going".into());
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        ts("2030-01-01T00:00:00Z"),
    ));
    orphans.deployments.extend([old, foreign, going]);
    let p = plan(&desired, &orphans, true, Some("u-1"));
    let pruned: Vec<&str> = p.prune.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(pruned, vec!["vf-ok-old-a"]);
    assert!(p.apply.is_empty());
}

#[test]
fn events_only_on_transitions() {
    let cond = |t: &str, s: &str| json!({"type": t, "status": s, "reason": "R", "message": "m", "lastTransitionTime": "2030-01-01T00:00:00Z"});
    let status = |conds: Vec<serde_json::Value>, run: &str| -> FlowStatus {
        serde_json::from_value(json!({"runId": run, "conditions": conds})).expect("status")
    };
    let a = status(
        vec![cond("Degraded", "False"), cond("Complete", "False")],
        "r1",
    );
    assert!(transitions(&a, &a).is_empty());
    let b = status(
        vec![cond("Degraded", "True"), cond("Complete", "True")],
        "r1",
    );
    let reasons: Vec<String> = transitions(&a, &b).into_iter().map(|t| t.reason).collect();
    assert_eq!(reasons, vec!["Degraded", "Completed"]);
    let reasons: Vec<String> = transitions(&b, &a).into_iter().map(|t| t.reason).collect();
    assert_eq!(reasons, vec!["Recovered"]);
    let c = status(
        vec![cond("Degraded", "False"), cond("Complete", "False")],
        "r2",
    );
    let t = transitions(&a, &c);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].note, "run r2 started; run r1 retired");
}

#[test]
fn teardown_decisions_never_block_forever() {
    let since = ts("2030-01-01T00:00:00Z");
    let soon = ts("2030-01-01T00:01:00Z");
    let late = ts("2030-01-01T00:16:00Z");
    assert_eq!(
        teardown_step(&[("r1", None)], Some(since), soon),
        TeardownStep::Start
    );
    let job: k8s_openapi::api::batch::v1::Job =
        serde_json::from_value(json!({"metadata": {"name": "t"}})).expect("job");
    assert!(
        matches!(teardown_step(&[("r1", Some(&job))], Some(since), soon), TeardownStep::Wait(d) if d <= Duration::from_secs(60))
    );
    assert_eq!(
        teardown_step(&[("r1", Some(&job))], Some(since), late),
        TeardownStep::Release(TeardownOutcome::TimedOut)
    );
    let failed: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "t"},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "m"}]}
    })).expect("job");
    assert_eq!(
        teardown_step(&[("r1", Some(&failed))], Some(since), soon),
        TeardownStep::Release(TeardownOutcome::Failed(
            "run r1: DeadlineExceeded: m".into()
        ))
    );
}

/// One teardown per run: the deletion releases only when every run's teardown finished —
/// a retired run's still running keeps it waiting, a missing one is started, and a failure
/// of any is named with its run.
#[test]
fn teardown_waits_for_every_runs_job() {
    let since = ts("2030-01-01T00:00:00Z");
    let soon = ts("2030-01-01T00:01:00Z");
    let job = |conditions: serde_json::Value| -> k8s_openapi::api::batch::v1::Job {
        serde_json::from_value(
            json!({"metadata": {"name": "t"}, "status": {"conditions": conditions}}),
        )
        .expect("job")
    };
    let done = job(json!([{"type": "Complete", "status": "True"}]));
    let running = job(json!([]));
    let failed = job(
        json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}]),
    );
    assert!(matches!(
        teardown_step(
            &[("r2", Some(&done)), ("r1", Some(&running))],
            Some(since),
            soon
        ),
        TeardownStep::Wait(_)
    ));
    assert_eq!(
        teardown_step(&[("r2", Some(&done)), ("r1", None)], Some(since), soon),
        TeardownStep::Start
    );
    assert_eq!(
        teardown_step(
            &[("r2", Some(&done)), ("r1", Some(&done))],
            Some(since),
            soon
        ),
        TeardownStep::Release(TeardownOutcome::Done)
    );
    assert_eq!(
        teardown_step(
            &[("r2", Some(&done)), ("r1", Some(&failed))],
            Some(since),
            soon
        ),
        TeardownStep::Release(TeardownOutcome::Failed(
            "run r1: BackoffLimitExceeded: x".into()
        ))
    );
}

#[test]
fn backoff_doubles_and_is_capped() {
    assert_eq!(backoff(1), Duration::from_secs(5));
    assert_eq!(backoff(2), Duration::from_secs(10));
    assert_eq!(backoff(4), Duration::from_secs(40));
    assert_eq!(backoff(50), Duration::from_secs(300));
    // Jitter spreads Flows that failed together over up to +20 %.
    let delays: std::collections::BTreeSet<Duration> = (0..40)
        .map(|i| jittered_backoff(3, &format!("ns/flow-{i}")))
        .collect();
    assert!(
        delays
            .iter()
            .all(|d| *d >= backoff(3) && *d <= backoff(3).mul_f64(1.2))
    );
    assert!(delays.len() > 10, "spread: {delays:?}");
}

#[test]
fn metrics_count_reconciles_errors_and_flows_by_phase() {
    let m = Metrics::new();
    m.reconciled(Duration::from_millis(20), None);
    m.reconciled(Duration::from_millis(20), Some("kube_apply".into()));
    m.set_phase("ns/a", Some(FlowPhase::Running));
    m.set_phase("ns/b", Some(FlowPhase::Running));
    m.set_phase("ns/b", None);
    let text = m.encode();
    assert!(
        text.contains("videoflow_operator_reconciles_total 2"),
        "{text}"
    );
    assert!(
        text.contains(r#"videoflow_operator_reconcile_errors_total{error="kube_apply"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"videoflow_operator_flows{phase="Running"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("videoflow_operator_reconcile_duration_seconds_count 2"),
        "{text}"
    );
}

/// A REALTIME flow whose producers are all finite ends like a BATCH one, but its
/// long-running nodes hold rather than complete: once every producer's Job completed the
/// status says so (`Complete=False`/`Progressing=False`, reason `SourcesEnded`, one Event),
/// the flow stays Ready and nothing reads as Degraded.
#[test]
fn a_realtime_flow_whose_finite_sources_ended_says_so_and_stays_ready() {
    use k8s_openapi::api::apps::v1::DeploymentStatus;
    use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
    use videoflow_operator::controller::status::{StatusConfig, compute_status};
    use videoflow_operator::render::Workload;

    let text = std::fs::read_to_string(
        videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../config/samples/toy-fusion.yaml"),
    )
    .expect("sample");
    let mut f = flow(&text);
    f.metadata.namespace = Some("ns".into());
    f.metadata.generation = Some(1);
    let cfg = RenderConfig {
        nats_url: Some("nats://n:4222".into()),
        ..config()
    };
    let r = render::render(&f, &cfg).expect("renders");
    let complete = |mut job: Job| {
        job.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        job
    };
    let running = |mut job: Job| {
        job.status = Some(JobStatus {
            ready: Some(1),
            ..JobStatus::default()
        });
        job
    };
    let observed = |producers_done: bool| {
        let mut o = Observed {
            jobs: vec![complete(r.provision.clone())],
            ..Observed::default()
        };
        for n in &r.nodes {
            match &n.workload {
                Workload::Job(j) if producers_done => o.jobs.push(complete(j.clone())),
                Workload::Job(j) => o.jobs.push(running(j.clone())),
                Workload::Deployment(d) => {
                    let mut d = d.clone();
                    d.status = Some(DeploymentStatus {
                        ready_replicas: Some(1),
                        ..DeploymentStatus::default()
                    });
                    o.deployments.push(d);
                }
                Workload::StatefulSet(_) => panic!("toy-fusion has no StatefulSet"),
            }
        }
        o
    };
    let cond = |s: &FlowStatus, t: &str| {
        let c = s.condition(t).unwrap_or_else(|| panic!("{t}"));
        (c.status.clone(), c.reason.clone())
    };
    let t0 = ts("2030-01-01T00:00:00Z");
    let live = compute_status(&f, &r, &observed(false), t0, &StatusConfig::default()).status;
    assert_eq!(cond(&live, "Complete"), ("False".into(), "Realtime".into()));
    assert_eq!(
        cond(&live, "Progressing"),
        ("True".into(), "Running".into())
    );
    assert_eq!(cond(&live, "Ready").0, "True");

    f.status = Some(live.clone());
    let ended = compute_status(&f, &r, &observed(true), t0, &StatusConfig::default()).status;
    assert_eq!(
        cond(&ended, "Complete"),
        ("False".into(), "SourcesEnded".into()),
        "a realtime flow never completes: its long-running nodes hold"
    );
    assert_eq!(
        cond(&ended, "Progressing"),
        ("False".into(), "SourcesEnded".into())
    );
    assert_eq!(cond(&ended, "Ready").0, "True");
    assert_eq!(cond(&ended, "Degraded").0, "False");
    assert_eq!(ended.phase, Some(FlowPhase::Running));
    let events = transitions(&live, &ended);
    assert_eq!(
        events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
        ["SourcesEnded"],
        "{events:?}"
    );
    assert!(!events[0].warning);
    // Said once: the same status again is no event.
    assert!(transitions(&ended, &ended).is_empty());
}
