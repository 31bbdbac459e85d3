//! KEDA for real (design §7, protocol §19 SCALE-6): the operator's ScaledObjects, read by
//! KEDA's own operator and metrics API server (built from the pinned release by
//! `scripts/testenv build-keda`), served to the HPA controller of the test control plane
//! through the API server's aggregation layer (`scripts/testenv run --keda`).
//!
//! One control plane with KEDA, one nats-server (JetStream and its monitoring port, which
//! KEDA's nats-jetstream scaler reads) and one `videoflow-operator run` serve every scenario,
//! each in a namespace of its own. The nodes' pods are kwok's: they never consume, so a
//! backlog stays until a scenario drains the durable itself, as a worker would (fetch, ack).
//! Each step's duration is printed (`-- --nocapture`); docs/TESTING.md keeps the figures.
//! Needs `scripts/testenv build` and `build-keda` (install-deps runs both).

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;
use videoflow_core::naming::{data_subject, durable_name, eos_subject, stream_name};
use videoflow_testkit::kubectl::{kubectl, wait_for};
use videoflow_testkit::{ControlPlane, NatsServer, free_port, manifest_dir};

/// The bound of every wait; a step's own duration is what the scenarios print.
const WAIT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(250);

fn repo() -> PathBuf {
    manifest_dir(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Everything the scenarios share; stopped when dropped at the end of `main`.
struct World {
    // Field order is drop order: the operator before the broker, both before the cluster.
    operator: Operator,
    js: jetstream::Context,
    rt: tokio::runtime::Runtime,
    nats: NatsServer,
    plane: ControlPlane,
}

impl World {
    fn start() -> Result<World, String> {
        let plane = ControlPlane::start_with_keda().map_err(|e| e.to_string())?;
        let nats = NatsServer::start().map_err(|e| format!("{e} (scripts/install-deps)"))?;
        let kc = plane.kubeconfig().to_path_buf();
        let crd = repo().join("crds/flows.videoflow.io.yaml");
        kubectl(
            &kc,
            &["apply", "--server-side", "-f", &crd.to_string_lossy()],
            None,
        )?;
        kubectl(
            &kc,
            &[
                "wait",
                "--for",
                "condition=established",
                "crd/flows.videoflow.io",
            ],
            None,
        )?;
        let dir = plane
            .state_dir()
            .ok_or("not a control plane of this test")?;
        let operator = Operator::start(&plane, &nats.url(), &dir)?;
        let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
        let js = rt.block_on(async {
            async_nats::connect(nats.url())
                .await
                .map(jetstream::new)
                .map_err(|e| e.to_string())
        })?;
        Ok(World {
            operator,
            js,
            rt,
            nats,
            plane,
        })
    }

    fn kc(&self) -> &Path {
        self.plane.kubeconfig()
    }

    /// What a failed wait shows besides its own last observation.
    fn context(&self) -> String {
        format!(
            "\n--- operator:\n{}\n--- keda-operator:\n{}\n--- keda-adapter:\n{}\n--- controller manager:\n{}",
            self.operator.tail(),
            self.plane.log_tail("keda-operator", 20),
            self.plane.log_tail("keda-adapter", 20),
            self.plane.log_tail("kube-controller-manager", 20)
        )
    }

    fn namespace(&self, base: &str) -> String {
        let ns = format!("e2e-keda-{base}-{}", std::process::id());
        kubectl(self.kc(), &["create", "namespace", &ns], None).unwrap_or_else(|e| panic!("{e}"));
        ns
    }

    fn apply_flow(&self, ns: &str, yaml: &str) {
        let yaml = yaml.replace("MONITORING", &self.nats.monitoring_url());
        kubectl(self.kc(), &["-n", ns, "apply", "-f", "-"], Some(&yaml))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn get(&self, ns: &str, what: &[&str]) -> Result<Value, String> {
        let mut args = vec!["-n", ns, "get"];
        args.extend(what);
        args.extend(["-o", "json"]);
        serde_json::from_str(&kubectl(self.kc(), &args, None)?).map_err(|e| e.to_string())
    }

    /// Waits for the Flow's run and `node`'s workload name, once `ready(node status)`.
    fn wait_node(
        &self,
        ns: &str,
        flow: &str,
        node: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> (String, String) {
        wait_for(&format!("{flow}: node {node}"), WAIT, POLL, || {
            let f = self.get(ns, &["flow", flow])?;
            let status = &f["status"];
            let n = status["nodes"]
                .as_array()
                .and_then(|n| n.iter().find(|n| n["name"] == node));
            match (status["runId"].as_str(), n) {
                (Some(run), Some(n)) if ready(n) => Ok(Some((
                    run.to_owned(),
                    n["workload"]["name"]
                        .as_str()
                        .ok_or("no workload name")?
                        .to_owned(),
                ))),
                _ => Err(format!("{status}{}", self.context())),
            }
        })
    }

    /// Waits until KEDA has taken the ScaledObject (`Ready`) and its HPA has read the
    /// metric at least once; the HPA.
    fn wait_scaling(&self, ns: &str, name: &str) -> Value {
        wait_for(
            &format!("ScaledObject {name} Ready (KEDA)"),
            WAIT,
            POLL,
            || {
                let so = self.get(ns, &["scaledobject", name])?;
                match condition(&so, "Ready") {
                    Some(c) if c["status"] == "True" => Ok(Some(())),
                    c => Err(format!("Ready: {c:?}{}", self.context())),
                }
            },
        );
        let hpa = format!("keda-hpa-{name}");
        wait_for(&format!("HPA {hpa} active"), WAIT, POLL, || {
            let h = self.get(ns, &["hpa", &hpa])?;
            let active = condition(&h, "ScalingActive").is_some_and(|c| c["status"] == "True");
            let read = h["status"]["currentMetrics"]
                .as_array()
                .is_some_and(|m| !m.is_empty());
            if active && read {
                Ok(Some(h))
            } else {
                Err(format!("{}{}", h["status"], self.context()))
            }
        })
    }

    /// The Deployment's `spec.replicas` and `status.readyReplicas`.
    fn replicas(&self, ns: &str, name: &str) -> Result<(i64, i64), String> {
        let d = self.get(ns, &["deployment", name])?;
        Ok((
            d["spec"]["replicas"].as_i64().unwrap_or(-1),
            d["status"]["readyReplicas"].as_i64().unwrap_or(0),
        ))
    }

    /// Waits until the Deployment wants and has `want` ready replicas; how long it took.
    fn wait_replicas(&self, ns: &str, name: &str, want: i64) -> Duration {
        let t0 = Instant::now();
        wait_for(
            &format!("deployment {name} at {want} ready replicas"),
            WAIT,
            POLL,
            || {
                let (spec, ready) = self.replicas(ns, name)?;
                if spec == want && ready == want {
                    return Ok(Some(()));
                }
                let hpa = kubectl(self.kc(), &["-n", ns, "get", "hpa", "-o", "wide"], None)?;
                Err(format!(
                    "spec.replicas {spec}, ready {ready}\n{hpa}{}",
                    self.context()
                ))
            },
        );
        t0.elapsed()
    }

    /// The uids of the Deployment's pods.
    fn pods(&self, ns: &str, deployment: &str) -> BTreeSet<String> {
        let d = self
            .get(ns, &["deployment", deployment])
            .unwrap_or_else(|e| panic!("{e}"));
        let selector = d["spec"]["selector"]["matchLabels"]
            .as_object()
            .expect("a label selector")
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(",");
        let pods = self
            .get(ns, &["pods", "-l", &selector])
            .unwrap_or_else(|e| panic!("{e}"));
        pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Deletes the Flow; waits until its ScaledObjects and KEDA's HPAs are gone.
    fn delete_flow(&self, ns: &str, flow: &str) -> Duration {
        let t0 = Instant::now();
        kubectl(
            self.kc(),
            &["-n", ns, "delete", "flow", flow, "--timeout=170s"],
            None,
        )
        .unwrap_or_else(|e| panic!("{e}{}", self.context()));
        wait_for("the ScaledObjects and HPAs gone", WAIT, POLL, || {
            let left = kubectl(
                self.kc(),
                &["-n", ns, "get", "scaledobjects,hpa", "-o", "name"],
                None,
            )?;
            if left.trim().is_empty() {
                Ok(Some(()))
            } else {
                Err(format!("{left}{}", self.context()))
            }
        });
        t0.elapsed()
    }
}

/// The operator under test, as a process with the admin kubeconfig; stopped on drop.
struct Operator {
    child: Child,
    log: PathBuf,
}

impl Operator {
    fn start(plane: &ControlPlane, nats_url: &str, dir: &Path) -> Result<Operator, String> {
        let log = dir.join("operator.log");
        let out = File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let metrics = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_videoflow-operator"));
        cmd.args(["run", "--nats-url", nats_url, "--metrics-addr", &metrics])
            // The operator's own demand reading every 5 s, so its decision can be compared
            // with the HPA's within a scenario.
            .args(["--demand-interval-seconds", "5"])
            .env("KUBECONFIG", plane.kubeconfig())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("VF_OPERATOR_") {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning videoflow-operator: {e}"))?;
        plane.adopt(child.id()).map_err(|e| e.to_string())?;
        Ok(Operator { child, log })
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// One edge as the provisioning Job shapes it (STREAM-2, STREAM-4, STREAM-15) for a REALTIME
/// node of `nb_tasks` replicas: the parent's stream and the child's shared durable, with one
/// difference. The stream keeps up to 1000 messages (`max_msgs = max(1, realtime_buffer)`
/// with a buffer of 1000) where the provisioning Job keeps 1, the default buffer: on a
/// one-message stream the lag KEDA reads is never above 1 — a newer message evicts the older,
/// delivered or not — so no backlog could scale anything there (docs/TESTING.md, "KEDA").
/// Under kwok no provisioning Job runs, so the scenarios provision the edge themselves.
struct Edge {
    flow: String,
    run: String,
    parent: &'static str,
    child: &'static str,
}

impl Edge {
    async fn provision(&self, js: &jetstream::Context, nb_tasks: i64) {
        let (flow, run, parent) = (&self.flow, &self.run, self.parent);
        let stream = js
            .create_stream(stream::Config {
                name: stream_name(flow, run, parent),
                subjects: vec![
                    data_subject(flow, run, parent),
                    eos_subject(flow, run, parent),
                ],
                retention: stream::RetentionPolicy::Limits,
                discard: stream::DiscardPolicy::Old,
                max_messages: 1000,
                duplicate_window: Duration::from_secs(120),
                ..stream::Config::default()
            })
            .await
            .expect("the parent stream");
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(durable_name(self.child, parent)),
                filter_subject: data_subject(flow, run, parent),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(60),
                max_ack_pending: nb_tasks * 5,
                ..consumer::pull::Config::default()
            })
            .await
            .expect("the shared durable");
    }

    async fn durable(&self, js: &jetstream::Context) -> consumer::PullConsumer {
        js.get_stream(stream_name(&self.flow, &self.run, self.parent))
            .await
            .expect("stream")
            .get_consumer(&durable_name(self.child, self.parent))
            .await
            .expect("durable")
    }

    async fn publish(&self, js: &jetstream::Context, n: usize) {
        for i in 0..n {
            js.publish(
                data_subject(&self.flow, &self.run, self.parent),
                i.to_string().into(),
            )
            .await
            .expect("publish")
            .await
            .expect("stored");
        }
    }

    /// The durable's lag as KEDA's nats-jetstream scaler computes it (SCALE-1).
    async fn lag(&self, js: &jetstream::Context) -> u64 {
        let info = self
            .durable(js)
            .await
            .info()
            .await
            .expect("consumer info")
            .clone();
        info.num_pending + info.num_ack_pending as u64
    }

    /// Fetches and acknowledges (each ack confirmed by the server) `n` messages, as the
    /// node's workers would.
    async fn drain(&self, js: &jetstream::Context, n: usize) -> usize {
        let durable = self.durable(js).await;
        let mut acked = 0;
        while acked < n {
            let mut batch = durable
                .fetch()
                .max_messages(5)
                .expires(Duration::from_secs(2))
                .messages()
                .await
                .expect("fetch");
            while let Some(message) = batch.next().await {
                message
                    .expect("message")
                    .double_ack()
                    .await
                    .expect("ack confirmed");
                acked += 1;
            }
        }
        acked
    }
}

// ---------------------------------------------------------------- backlog up, drain down

/// A producer, the autoscaled processor `work` (1 to 3 replicas, 10 pending messages per
/// replica) and a consumer. `MONITORING` becomes the nats-server's monitoring URL (KEDA's
/// `natsServerMonitoringEndpoint`).
const LAGGING: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: lagging}
spec:
  type: realtime
  broker: {monitoringUrl: "MONITORING"}
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: work
    kind: processor
    parents: [cam]
    autoscaling: {enabled: true, minReplicas: 1, maxReplicas: 3, targetLagPerReplica: 10}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - {name: sink, kind: consumer, parents: [work], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

/// Messages published into `cam`'s stream: 100 pending at 10 per replica asks for 10
/// replicas, which `maxReplicas` caps at 3.
const BACKLOG: usize = 100;
const MAX_REPLICAS: i64 = 3;

fn backlog_up_drain_down(w: &World) {
    let ns = w.namespace("backlog");
    w.apply_flow(&ns, LAGGING);
    let t_applied = Instant::now();
    let (run, workload) = w.wait_node(&ns, "lagging", "work", |n| n["scaler"]["rendered"] == true);
    // The trigger names the edge's stream and the durable the node's workers bind.
    let scaled = wait_for("the ScaledObject", WAIT, POLL, || {
        w.get(&ns, &["scaledobject", &workload])
            .map(Some)
            .map_err(|e| format!("{e}{}", w.context()))
    });
    let t_rendered = t_applied.elapsed();
    let trigger = &scaled["spec"]["triggers"][0]["metadata"];
    assert_eq!(trigger["stream"], stream_name("lagging", &run, "cam"));
    assert_eq!(trigger["consumer"], durable_name("work", "cam"));
    let edge = Edge {
        flow: "lagging".into(),
        run: run.clone(),
        parent: "cam",
        child: "work",
    };
    w.rt.block_on(edge.provision(&w.js, 1));

    // KEDA takes the ScaledObject: its scaler built, its HPA created and reading the metric.
    let hpa = w.wait_scaling(&ns, &workload);
    let t_ready = t_applied.elapsed();
    assert_eq!(hpa["spec"]["minReplicas"], 1, "{hpa}");
    assert_eq!(hpa["spec"]["maxReplicas"], MAX_REPLICAS, "{hpa}");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], workload.as_str());
    let metric = &hpa["spec"]["metrics"][0]["external"];
    assert_eq!(metric["target"]["type"], "AverageValue", "{hpa}");
    assert_eq!(metric["target"]["averageValue"], "10", "{hpa}");
    let metric_name = metric["metric"]["name"]
        .as_str()
        .expect("the HPA's external metric")
        .to_owned();
    assert_eq!(w.replicas(&ns, &workload), Ok((1, 1)));

    // The backlog: BACKLOG messages the node's (kwok) pods never take.
    w.rt.block_on(edge.publish(&w.js, BACKLOG));
    let t_backlog = Instant::now();
    assert_eq!(w.rt.block_on(edge.lag(&w.js)), BACKLOG as u64);
    // The metric as the HPA controller reads it: through the aggregator, KEDA's metrics API
    // server and its operator's scaler, from the nats-server's monitoring endpoint.
    let metric_path = format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric_name}?labelSelector=scaledobject.keda.sh%2Fname%3D{workload}"
    );
    wait_for("KEDA's metric to read the backlog", WAIT, POLL, || {
        let text = kubectl(w.kc(), &["get", "--raw", &metric_path], None)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        if v["items"][0]["value"] == BACKLOG.to_string().as_str() {
            Ok(Some(()))
        } else {
            Err(format!("{text}{}", w.context()))
        }
    });
    let up = w.wait_replicas(&ns, &workload, MAX_REPLICAS);
    let up_from_backlog = t_backlog.elapsed();

    // The operator's own demand decision (SCALE-2 over the same lag) agrees with the HPA's.
    w.wait_node(&ns, "lagging", "work", |n| {
        n["demand"]["diagnosis"] == "backlog" && n["demand"]["replicas"] == MAX_REPLICAS
    });

    // Drained: every message fetched and acknowledged, the lag KEDA reads is 0.
    assert_eq!(w.rt.block_on(edge.drain(&w.js, BACKLOG)), BACKLOG);
    assert_eq!(w.rt.block_on(edge.lag(&w.js)), 0);
    let down = w.wait_replicas(&ns, &workload, 1);

    // The HPA owns the replica count: the operator never applied one for this Deployment.
    let d = w
        .get(&ns, &["deployment", &workload, "--show-managed-fields"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !owns_replicas(&d, "videoflow-operator"),
        "{}",
        d["metadata"]["managedFields"]
    );

    // Deleting the Flow removes the ScaledObject, and KEDA its HPA (KEDA's finalizer).
    let gone = w.delete_flow(&ns, "lagging");
    println!(
        "keda: ScaledObject applied {:.1} s and Ready with its HPA reading the metric {:.1} s \
         after the Flow; {BACKLOG} pending -> {MAX_REPLICAS} ready replicas {:.1} s after the \
         backlog ({:.1} s of waiting for the Deployment); drained -> 1 replica {:.1} s after \
         the drain (HPA sync 5 s, downscale window 15 s); Flow deleted -> ScaledObject and HPA \
         gone in {:.1} s",
        t_rendered.as_secs_f64(),
        t_ready.as_secs_f64(),
        up_from_backlog.as_secs_f64(),
        up.as_secs_f64(),
        down.as_secs_f64(),
        gone.as_secs_f64()
    );
}

/// Whether field manager `manager` owns `spec.replicas` of `object` through an apply.
fn owns_replicas(object: &Value, manager: &str) -> bool {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["manager"] == manager && m["operation"] == "Apply")
        .any(|m| {
            m["fieldsV1"]["f:spec"]
                .as_object()
                .is_some_and(|s| s.contains_key("f:replicas"))
        })
}

// ------------------------------------------------- autoscaling switched on and off in place

/// `work` at 2 replicas; `AUTOSCALING` becomes its autoscaling block (or nothing).
const STEADY: &str = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: steady}
spec:
  type: realtime
  broker: {monitoringUrl: "MONITORING"}
  nodes:
  - {name: cam, kind: producer, finite: false, component: {builtin: videoflow.producers.basic.IntProducer}}
  - name: work
    kind: processor
    parents: [cam]
    replicas: 2AUTOSCALING
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - {name: sink, kind: consumer, parents: [work], component: {builtin: videoflow.consumers.basic.VoidConsumer}}
"#;

fn steady(autoscaling: bool) -> String {
    STEADY.replace(
        "AUTOSCALING",
        if autoscaling {
            "\n    autoscaling: {enabled: true, minReplicas: 2, maxReplicas: 4, targetLagPerReplica: 10}"
        } else {
            ""
        },
    )
}

fn autoscaling_switched_on_and_off(w: &World) {
    let ns = w.namespace("switch");
    w.apply_flow(&ns, &steady(false));
    let (run, workload) = w.wait_node(&ns, "steady", "work", |n| n["ready"] == 2);
    w.wait_replicas(&ns, &workload, 2);
    let pods = w.pods(&ns, &workload);
    assert_eq!(pods.len(), 2);
    let edge = Edge {
        flow: "steady".into(),
        run: run.clone(),
        parent: "cam",
        child: "work",
    };
    w.rt.block_on(edge.provision(&w.js, 2));

    // On: the same run (autoscaling is not topology), the HPA takes the replica count over
    // at 2 (no backlog: the minimum) and no pod of the node is replaced on the way.
    w.apply_flow(&ns, &steady(true));
    let (same_run, _) = w.wait_node(&ns, "steady", "work", |n| n["scaler"]["rendered"] == true);
    assert_eq!(same_run, run);
    let hpa = w.wait_scaling(&ns, &workload);
    assert_eq!(hpa["status"]["desiredReplicas"], 2, "{hpa}");
    assert_eq!(w.replicas(&ns, &workload), Ok((2, 2)));
    assert_eq!(
        w.pods(&ns, &workload),
        pods,
        "pods of {workload} were replaced when autoscaling was switched on"
    );

    // Off: the operator's replica count again, the ScaledObject and KEDA's HPA gone, and
    // still the same pods.
    w.apply_flow(&ns, &steady(false));
    wait_for("the ScaledObject and HPA gone", WAIT, POLL, || {
        let left = kubectl(
            w.kc(),
            &["-n", &ns, "get", "scaledobjects,hpa", "-o", "name"],
            None,
        )?;
        Ok(left.trim().is_empty().then_some(()))
    });
    let d = w
        .get(&ns, &["deployment", &workload, "--show-managed-fields"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        owns_replicas(&d, "videoflow-operator"),
        "{}",
        d["metadata"]["managedFields"]
    );
    assert_eq!(w.replicas(&ns, &workload), Ok((2, 2)));
    assert_eq!(
        w.pods(&ns, &workload),
        pods,
        "pods of {workload} were replaced when autoscaling was switched off"
    );
    w.delete_flow(&ns, "steady");
}

// ---------------------------------------------------------------------------- the harness

/// The world, started by the first scenario that runs.
type Shared = Arc<OnceLock<Result<Arc<World>, String>>>;

fn trial(shared: &Shared, name: &str, f: fn(&World)) -> Trial {
    let shared = shared.clone();
    Trial::test(name, move || {
        let w = shared
            .get_or_init(|| World::start().map(Arc::new))
            .clone()
            .map_err(|e| Failed::from(format!("e2e_keda set-up failed: {e}")))?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&w))).map_err(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned());
            Failed::from(msg)
        })
    })
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let shared: Shared = Arc::new(OnceLock::new());
    let trials = vec![
        trial(
            &shared,
            "a_backlog_scales_an_autoscaled_node_up_through_keda_and_the_hpa_and_the_drain_back",
            backlog_up_drain_down,
        ),
        trial(
            &shared,
            "autoscaling_switched_on_and_off_in_place_replaces_no_pod_of_the_node",
            autoscaling_switched_on_and_off,
        ),
    ];
    let conclusion = libtest_mimic::run(&args, trials);
    // The world (operator, broker, control plane) stops here, before the process exits.
    drop(shared);
    conclusion.exit_code()
}
