//! `videoflow-worker provision` and `teardown` against a real nats-server and redis-server
//! (STREAM-7/9/14, ADM-1/2, STORE-6, §15.3).

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use videoflow_core::compile::{CompiledFlow, compile};
use videoflow_core::load::parse_flow;
use videoflow_core::naming;
use videoflow_testkit::{NatsServer, RedisServer};
use videoflow_worker::store::RuntimeStore;

const BIN: &str = env!("CARGO_BIN_EXE_videoflow-worker");

/// A BATCH flow with a competing processor (2 replicas), a partitioned join (2 replicas) and
/// a sink: shared and per-replica durables, anchors, the DLQ.
fn flow(kind: &str, name: &str) -> CompiledFlow {
    let yaml = format!(
        r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: {name}}}
spec:
  type: {kind}
  runId: r1
  nodes:
  - name: numbers
    kind: producer
    component: {{builtin: videoflow.producers.basic.IntProducer}}
    params: {{start_value: 0, end_value: 3}}
  - name: same
    kind: processor
    parents: [numbers]
    replicas: 2
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: pair
    kind: processor
    parents: [numbers, same]
    replicas: 2
    partitionBy: trace_id
    component: {{builtin: videoflow.processors.basic.JoinerProcessor}}
  - name: sink
    kind: consumer
    parents: [pair]
    component: {{builtin: videoflow.consumers.basic.CommandlineConsumer}}
"#
    );
    let doc = parse_flow(&yaml).expect("flow parses");
    compile(&doc).expect("flow compiles")
}

/// Runs `videoflow-worker <sub>` with exactly `vars` (plus PATH) and returns its output.
fn run(sub: &str, vars: &BTreeMap<String, String>) -> Output {
    Command::new(BIN)
        .arg(sub)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("VF_LOG", "warn")
        .envs(vars)
        .output()
        .expect("run videoflow-worker")
}

fn job_env(flow: &CompiledFlow, url: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("VF_FLOW_SPECS_JSON".to_owned(), flow.specs_json()),
        ("VF_FLOW_ID".to_owned(), flow.flow_id.clone()),
        ("VF_RUN_ID".to_owned(), flow.run_id.clone()),
        (
            "VF_FLOW_TYPE".to_owned(),
            flow.flow_type.as_str().to_owned(),
        ),
        ("VF_NATS_URL".to_owned(), url.to_owned()),
        ("VF_ADMISSION_TIMEOUT_SECONDS".to_owned(), "10".to_owned()),
    ])
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Every stream (name → metadata) and every consumer (`stream/durable` → metadata).
type Inventory = (
    BTreeMap<String, std::collections::HashMap<String, String>>,
    BTreeMap<String, std::collections::HashMap<String, String>>,
);

fn inventory(url: &str) -> Inventory {
    rt().block_on(async {
        let client = async_nats::connect(url).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let mut streams = BTreeMap::new();
        let mut consumers = BTreeMap::new();
        let mut list = js.streams();
        while let Some(info) = list.next().await {
            let info = info.expect("stream info");
            let name = info.config.name.clone();
            let stream = js.get_stream_no_info(&name).await.expect("stream");
            let mut cs = stream.consumers();
            while let Some(c) = cs.next().await {
                let c = c.expect("consumer info");
                consumers.insert(format!("{name}/{}", c.name), c.config.metadata.clone());
            }
            streams.insert(name, info.config.metadata.clone());
        }
        (streams, consumers)
    })
}

#[test]
fn stream_7_14_provision_twice_is_a_noop_and_everything_carries_owner_metadata() {
    let nats = NatsServer::start().expect("nats-server");
    let flow = flow("batch", "prov");
    let env = job_env(&flow, &nats.url());
    let first = run("provision", &env);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let before = inventory(&nats.url());
    let second = run("provision", &env);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("(0 created or changed)"),
        "second provisioning changed nothing: {}",
        stderr(&second)
    );
    let after = inventory(&nats.url());
    assert_eq!(before, after, "provisioning twice is a no-op");

    let (streams, consumers) = after;
    // 4 node streams + the DLQ.
    assert_eq!(streams.len(), 5, "{streams:?}");
    for (name, m) in &streams {
        assert_eq!(
            m.get(naming::LABEL_FLOW_ID).map(String::as_str),
            Some("prov"),
            "{name}"
        );
        if name == &naming::dlq_stream_name("prov") {
            assert_eq!(m.get(naming::LABEL_KIND).map(String::as_str), Some("dlq"));
            assert!(
                !m.contains_key(naming::LABEL_RUN_ID),
                "the DLQ has no run label"
            );
        } else {
            assert_eq!(
                m.get(naming::LABEL_RUN_ID).map(String::as_str),
                Some("r1"),
                "{name}"
            );
            assert_eq!(
                m.get(naming::LABEL_KIND).map(String::as_str),
                Some("stream")
            );
            assert!(m.contains_key(naming::LABEL_NODE));
        }
    }
    // Anchors: numbers, same, pair. Durables: same←numbers (shared), pair←numbers and
    // pair←same per replica (p0, p1), sink←pair.
    let names: Vec<&str> = consumers
        .keys()
        .map(|k| k.split_once('/').map_or("", |(_, d)| d))
        .collect();
    for expected in [
        "numbers--eos--anchor",
        "same--eos--anchor",
        "pair--eos--anchor",
        "same--from--numbers",
        "pair--from--numbers--p0",
        "pair--from--numbers--p1",
        "pair--from--same--p0",
        "pair--from--same--p1",
        "sink--from--pair",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    assert_eq!(consumers.len(), 9, "{names:?}");
    for (label, m) in &consumers {
        assert_eq!(
            m.get(naming::LABEL_FLOW_ID).map(String::as_str),
            Some("prov"),
            "{label}"
        );
        assert_eq!(
            m.get(naming::LABEL_RUN_ID).map(String::as_str),
            Some("r1"),
            "{label}"
        );
        assert!(m.contains_key(naming::LABEL_NODE), "{label}");
        let kind = m.get(naming::LABEL_KIND).map(String::as_str);
        if label.ends_with("--anchor") {
            assert_eq!(kind, Some("eos_anchor"), "{label}");
        } else if label.ends_with("--p0") || label.ends_with("--p1") {
            assert_eq!(kind, Some("partitioned_durable"), "{label}");
        } else {
            assert_eq!(kind, Some("durable"), "{label}");
        }
    }
}

/// `VF_STREAM_MAX_AGE_SECONDS` (`spec.broker.streamMaxAgeSeconds`): every node stream gets
/// the age bound, read back; the DLQ keeps its 7 days; without the variable no node stream
/// has one (STREAM-2/3 exactly); a value under the duplicate window is refused naming it.
#[test]
fn stream_2_3_the_flows_age_bound_is_provisioned_on_every_node_stream() {
    let nats = NatsServer::start().expect("nats-server");
    let aged = flow("batch", "aged");
    let mut env = job_env(&aged, &nats.url());
    env.insert("VF_STREAM_MAX_AGE_SECONDS".into(), "7200".into());
    let out = run("provision", &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plain = flow("batch", "plain");
    let out = run("provision", &job_env(&plain, &nats.url()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ages: BTreeMap<String, Duration> = rt().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("nats"));
        let mut out = BTreeMap::new();
        let mut list = js.streams();
        while let Some(info) = list.next().await {
            let info = info.expect("info");
            out.insert(info.config.name.clone(), info.config.max_age);
        }
        out
    });
    for node in ["numbers", "same", "pair", "sink"] {
        assert_eq!(
            ages[&naming::stream_name("aged", "r1", node)],
            Duration::from_secs(7200),
            "{node}"
        );
        assert_eq!(
            ages[&naming::stream_name("plain", "r1", node)],
            Duration::ZERO,
            "{node}"
        );
    }
    assert_eq!(
        ages[&naming::dlq_stream_name("aged")],
        Duration::from_secs(604_800)
    );
    env.insert("VF_STREAM_MAX_AGE_SECONDS".into(), "60".into());
    let out = run("provision", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("VF_STREAM_MAX_AGE_SECONDS=60"), "{err}");
}

#[test]
fn adm_1_explicit_reliable_work_on_a_realtime_channel_exits_2_and_creates_nothing() {
    let nats = NatsServer::start().expect("nats-server");
    let flow = flow("realtime", "live");
    let mut env = job_env(&flow, &nats.url());
    env.insert(
        "VF_PROFILE_REQUESTS_JSON".into(),
        r#"[{"channel": "numbers", "profile": "reliable_work"}]"#.into(),
    );
    let out = run("provision", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ERROR [VF_INCOMPATIBLE_PROFILE]: The requested profiles contradict the streams this flow type provisions:"),
        "{err}"
    );
    assert!(
        err.contains("  - channel 'numbers' requests reliable_work, but a REALTIME flow provisions its streams as: retention: limits keeps messages by count, size or age, not until acknowledged; discard: old evicts unacknowledged messages when the stream is full"),
        "{err}"
    );
    assert!(
        err.contains("\n  Streams are shaped by the flow type: run the flow as BATCH"),
        "the remedy line follows: {err}"
    );
    let (streams, consumers) = inventory(&nats.url());
    assert!(
        streams.is_empty() && consumers.is_empty(),
        "nothing created: {streams:?}"
    );
}

#[test]
fn adm_2_broker_down_exits_3_within_the_timeout_naming_the_url() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let flow = flow("batch", "down");
    let mut env = job_env(&flow, &url);
    env.insert("VF_ADMISSION_TIMEOUT_SECONDS".into(), "2".into());
    let started = Instant::now();
    let out = run("provision", &env);
    let took = started.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        took < Duration::from_secs(10),
        "bounded by the timeout: {took:?}"
    );
    assert!(
        took >= Duration::from_millis(1500),
        "retried until the timeout: {took:?}"
    );
    assert!(err.contains("ERROR [VF_BROKER_UNAVAILABLE]"), "{err}");
    assert!(err.contains(&url), "names the URL: {err}");
}

#[test]
fn adm_2_store_6_config_denied_runtime_store_with_explicit_durable_request_exits_3() {
    let nats = NatsServer::start().expect("nats-server");
    let redis = RedisServer::start_with(&["--rename-command", "CONFIG", ""]).expect("redis");
    let flow = flow("batch", "ledger");
    let mut env = job_env(&flow, &nats.url());
    env.insert("VF_RUNTIME_STORE_URL".into(), redis.url());
    env.insert(
        "VF_PROFILE_REQUESTS_JSON".into(),
        r#"[{"channel": "numbers", "profile": "durable_control"}]"#.into(),
    );
    let out = run("provision", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("ERROR [VF_STATE_UNKNOWN]: A requested guarantee depends on state that could not be observed:"),
        "{err}"
    );
    assert!(
        err.contains("channel 'numbers' requests durable_control: runtime store durability could not be observed (auth:"),
        "names the reason: {err}"
    );
    let (streams, _) = inventory(&nats.url());
    assert!(
        streams.is_empty(),
        "refused before creating anything: {streams:?}"
    );
}

/// ADM-2 with a run ledger that refuses the job's password: the Flow asked for restart
/// safety, so the unobservable ledger refuses the run (exit 3) before anything is created,
/// naming the store without its password and the fix for refused credentials.
#[test]
fn adm_2_store_6_restart_safe_with_a_ledger_refusing_its_password_exits_3_with_the_fix() {
    let nats = NatsServer::start().expect("nats-server");
    let redis = RedisServer::start_with(&["--requirepass", "right-Pa55", "--appendonly", "yes"])
        .expect("redis");
    let flow = flow("batch", "auth");
    let mut env = job_env(&flow, &nats.url());
    env.insert(
        "VF_RUNTIME_STORE_URL".into(),
        format!("redis://:wrong-Pa55@127.0.0.1:{}/0", redis.port()),
    );
    env.insert(
        "VF_PROFILE_REQUESTS_JSON".into(),
        r#"[{"channel": "same", "profile": "reliable_work", "options": {"restart_safe": true}}]"#
            .into(),
    );
    let out = run("provision", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("ERROR [VF_STATE_UNKNOWN]"), "{err}");
    assert!(
        err.contains(&format!(
            "restart_safe: runtime store durability could not be observed (auth: redis://:***@127.0.0.1:{}/0: credentials refused",
            redis.port()
        )),
        "names the store and why: {err}"
    );
    assert!(
        err.contains("put the password (and user) it requires into VF_RUNTIME_STORE_URL"),
        "the fix: {err}"
    );
    assert!(!err.contains("wrong-Pa55"), "no secret: {err}");
    let (streams, _) = inventory(&nats.url());
    assert!(streams.is_empty(), "nothing created: {streams:?}");
}

/// Without an explicit request that needs the ledger, the run goes on (ADM-2: unobservable
/// is a warning then) — but the job says the ledger is off, and why, and how to fix it.
#[test]
fn adm_2_store_6_a_ledger_refusing_its_password_is_a_warning_without_requests() {
    let nats = NatsServer::start().expect("nats-server");
    let redis = RedisServer::start_with(&["--requirepass", "right-Pa55"]).expect("redis");
    let flow = flow("batch", "warn");
    let mut env = job_env(&flow, &nats.url());
    env.insert(
        "VF_RUNTIME_STORE_URL".into(),
        format!("redis://:wrong-Pa55@127.0.0.1:{}/0", redis.port()),
    );
    let out = run("provision", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let warning = err
        .lines()
        .find(|l| l.starts_with("WARNING: provision: the run ledger (VF_RUNTIME_STORE_URL, redis)"))
        .unwrap_or_else(|| panic!("a warning: {err}"));
    assert!(warning.contains("credentials refused"), "{warning}");
    assert!(
        warning.contains("retries capped by the broker"),
        "{warning}"
    );
    assert!(!err.contains("wrong-Pa55"), "no secret: {err}");
}

#[test]
fn adm_1_batch_flow_with_an_evictable_blob_redis_is_refused_with_exit_2() {
    let nats = NatsServer::start().expect("nats-server");
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]).expect("redis");
    let flow = flow("batch", "evict");
    let mut env = job_env(&flow, &nats.url());
    env.insert("VF_BLOB_REDIS_URL".into(), redis.url());
    let out = run("provision", &env);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "binding without explicit requests: {err}"
    );
    assert!(
        err.contains("the redis payload store is evictable"),
        "{err}"
    );
}

#[test]
fn adm_2_durable_payload_and_ledger_admit_explicit_durable_control() {
    let nats = NatsServer::start().expect("nats-server");
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", "noeviction"])
            .expect("redis");
    let flow = flow("batch", "durable");
    let mut env = job_env(&flow, &nats.url());
    env.insert("VF_BLOB_REDIS_URL".into(), redis.url());
    env.insert("VF_RUNTIME_STORE_URL".into(), redis.url());
    env.insert(
        "VF_PROFILE_REQUESTS_JSON".into(),
        r#"[{"channel": "numbers", "profile": "durable_control"}, {"channel": "pair", "profile": "reliable_work"}]"#.into(),
    );
    let out = run("provision", &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn stream_9_14_teardown_deletes_only_this_runs_objects_and_keeps_the_dlq() {
    let nats = NatsServer::start().expect("nats-server");
    // Run `r1` and run `r1-x` of the same flow: names that a prefix would confuse.
    let mine = flow("batch", "td");
    let mut other = mine.clone();
    other.run_id = "r1-x".into();
    for f in [&mine, &other] {
        let out = run("provision", &job_env(f, &nats.url()));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let env = BTreeMap::from([
        ("VF_NATS_URL".to_owned(), nats.url()),
        ("VF_FLOW_ID".to_owned(), "td".to_owned()),
        ("VF_RUN_ID".to_owned(), "r1".to_owned()),
    ]);
    let out = run("teardown", &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (streams, consumers) = inventory(&nats.url());
    for (name, m) in &streams {
        assert_ne!(
            m.get(naming::LABEL_RUN_ID).map(String::as_str),
            Some("r1"),
            "{name} left"
        );
    }
    for (label, m) in &consumers {
        assert_ne!(
            m.get(naming::LABEL_RUN_ID).map(String::as_str),
            Some("r1"),
            "{label} left"
        );
    }
    assert!(
        streams.contains_key(&naming::dlq_stream_name("td")),
        "the DLQ stays"
    );
    let others = streams
        .values()
        .filter(|m| m.get(naming::LABEL_RUN_ID).map(String::as_str) == Some("r1-x"))
        .count();
    assert_eq!(others, 4, "run r1-x is untouched: {streams:?}");
    // Teardown again: nothing of the run left, still a complete cleanup.
    let again = run("teardown", &env);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
}

/// Records of three runs in one run ledger: `td`/`r1` (the one torn down), `td`/`r1-x` (a
/// run whose id extends it), `td2`/`r1` (another flow), plus a key `vf/td/r1` that is no
/// run's record. Keys and logs alike.
fn seed_ledger(url: &str) {
    rt().block_on(async {
        // A store per runtime: its connections live on the runtime that made them.
        let store = RuntimeStore::open(url).expect("store");
        for run in ["vf/td/r1/", "vf/td/r1-x/", "vf/td2/r1/"] {
            for key in [
                "same/terminator/numbers/r0/eos",
                "sink/outbox/0123abcd",
                "same/epoch/same/p0",
            ] {
                assert!(
                    store
                        .cas(&format!("{run}{key}"), None, b"{}")
                        .await
                        .expect("cas")
                );
            }
            for log in [
                "same/received/numbers/same--from--numbers/r0",
                "sink/terminal",
            ] {
                store
                    .append_all(&format!("{run}{log}"), vec![b"a".to_vec(), b"b".to_vec()])
                    .await
                    .expect("append");
            }
        }
        assert!(store.cas("vf/td/r1", None, b"{}").await.expect("cas"));
    });
}

/// What is left in the ledger: (keys, non-empty logs) under `vf/`.
fn ledger_left(url: &str) -> (Vec<String>, Vec<String>) {
    rt().block_on(async {
        let store = RuntimeStore::open(url).expect("store");
        let keys: Vec<String> = store
            .scan("vf/")
            .await
            .expect("scan")
            .into_iter()
            .map(|(k, _, _)| k)
            .collect();
        let mut logs = Vec::new();
        for run in ["vf/td/r1/", "vf/td/r1-x/", "vf/td2/r1/"] {
            for log in [
                "same/received/numbers/same--from--numbers/r0",
                "sink/terminal",
            ] {
                let name = format!("{run}{log}");
                if !store.log_entries(&name).await.expect("log").is_empty() {
                    logs.push(name);
                }
            }
        }
        (keys, logs)
    })
}

/// The run ledger's keys go with the run: `videoflow-worker teardown` deletes every key and
/// log under `vf/td/r1/` and nothing of run `r1-x`, flow `td2` or the bare `vf/td/r1`.
fn teardown_purges_the_runs_ledger(store_url: &str) {
    let nats = NatsServer::start().expect("nats-server");
    let out = run("provision", &job_env(&flow("batch", "td"), &nats.url()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    seed_ledger(store_url);
    let env = BTreeMap::from([
        ("VF_NATS_URL".to_owned(), nats.url()),
        ("VF_FLOW_ID".to_owned(), "td".to_owned()),
        ("VF_RUN_ID".to_owned(), "r1".to_owned()),
        ("VF_RUNTIME_STORE_URL".to_owned(), store_url.to_owned()),
    ]);
    let out = run("teardown", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("and 3 keys and 2 logs of the run ledger"),
        "{err}"
    );
    let (keys, logs) = ledger_left(store_url);
    assert!(
        keys.iter().all(|k| !k.starts_with("vf/td/r1/")),
        "run r1's keys are gone: {keys:?}"
    );
    assert_eq!(keys.len(), 7, "every other key stays: {keys:?}");
    assert!(keys.contains(&"vf/td/r1".to_owned()), "{keys:?}");
    assert_eq!(
        logs,
        vec![
            "vf/td/r1-x/same/received/numbers/same--from--numbers/r0",
            "vf/td/r1-x/sink/terminal",
            "vf/td2/r1/same/received/numbers/same--from--numbers/r0",
            "vf/td2/r1/sink/terminal",
        ]
    );
    let (streams, _) = inventory(&nats.url());
    assert!(
        streams.keys().all(|s| !s.starts_with("vf-td-r1-")),
        "and its streams: {streams:?}"
    );
    let again = run("teardown", &env);
    let err = stderr(&again);
    assert_eq!(again.status.code(), Some(0), "{err}");
    assert!(
        err.contains("and 0 keys and 0 logs of the run ledger"),
        "{err}"
    );
}

#[test]
fn stream_9_teardown_deletes_the_runs_records_from_a_redis_run_ledger_and_no_others() {
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", "noeviction"])
            .expect("redis");
    teardown_purges_the_runs_ledger(&redis.url());
    // Glob characters in a run id are matched literally: run `r*` is not every run.
    rt().block_on(async {
        let store = RuntimeStore::open(&redis.url()).expect("store");
        assert!(store.cas("vf/td/r*/n/k", None, b"{}").await.expect("cas"));
        assert!(store.cas("vf/td/rz/n/k", None, b"{}").await.expect("cas"));
        let purged = store.purge("vf/td/r*/").await.expect("purge");
        assert_eq!((purged.keys, purged.logs), (1, 0));
        assert!(store.get("vf/td/rz/n/k").await.expect("get").is_some());
    });
}

#[test]
fn stream_9_teardown_deletes_the_runs_records_from_a_file_run_ledger_and_no_others() {
    let dir = std::env::temp_dir().join(format!("vf-td-ledger-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let url = format!("file://{}", dir.display());
    std::fs::create_dir_all(&dir).expect("dir");
    // A temporary file a crash left behind belongs to its key.
    std::fs::write(
        dir.join("vf%2Ftd%2Fr1%2Fsink%2Foutbox%2F0123abcd.json.tmp"),
        b"{",
    )
    .expect("tmp");
    teardown_purges_the_runs_ledger(&url);
    let files: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().all(|f| !f.contains("vf%2Ftd%2Fr1%2F")),
        "no document, log, lock or temporary file of run r1: {files:?}"
    );
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("vf%2Ftd%2Fr1-x%2F") && f.ends_with(".json.lock")),
        "another run's locks stay: {files:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ids with `/` make `vf/{flow}/{run}/` ambiguous (flow `a`, run `b/c` vs flow `a/b`, run
/// `c`): the teardown leaves the ledger alone and reports an incomplete cleanup naming why.
#[test]
fn stream_9_a_run_id_with_a_slash_leaves_the_ledger_and_says_so() {
    let nats = NatsServer::start().expect("nats-server");
    let redis = RedisServer::start().expect("redis");
    rt().block_on(async {
        let store = RuntimeStore::open(&redis.url()).expect("store");
        assert!(store.cas("vf/a/b/c/n/k", None, b"{}").await.expect("cas"));
    });
    let env = BTreeMap::from([
        ("VF_NATS_URL".to_owned(), nats.url()),
        ("VF_FLOW_ID".to_owned(), "a".to_owned()),
        ("VF_RUN_ID".to_owned(), "b/c".to_owned()),
        ("VF_RUNTIME_STORE_URL".to_owned(), redis.url()),
    ]);
    let out = run("teardown", &env);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("contain '/'"), "{err}");
    rt().block_on(async {
        let store = RuntimeStore::open(&redis.url()).expect("store");
        assert!(store.get("vf/a/b/c/n/k").await.expect("get").is_some());
    });
}

#[test]
fn stream_14_teardown_against_a_dead_broker_is_exit_3_never_nothing_to_delete() {
    let port = free_port();
    let env = BTreeMap::from([
        ("VF_NATS_URL".to_owned(), format!("nats://127.0.0.1:{port}")),
        ("VF_FLOW_ID".to_owned(), "td".to_owned()),
        ("VF_RUN_ID".to_owned(), "r1".to_owned()),
        ("VF_ADMISSION_TIMEOUT_SECONDS".to_owned(), "1".to_owned()),
    ]);
    let out = run("teardown", &env);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}

/// STREAM-7: the job's durables (from `specs.json` + its own variables) are exactly the ones
/// the Flow-document path derives — one implementation, two sources of configuration.
#[test]
fn stream_7_specs_path_and_document_path_derive_the_same_durables() {
    let yaml = r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {name: same}
spec:
  type: batch
  runId: r1
  nodes:
  - name: numbers
    kind: producer
    component: {builtin: videoflow.producers.basic.IntProducer}
  - name: pair
    kind: processor
    parents: [numbers]
    replicas: 3
    partitionBy: trace_id
    credit: {messages: 40}
    component: {builtin: videoflow.processors.basic.IdentityProcessor}
  - name: sink
    kind: consumer
    parents: [pair]
    delivery: best-effort
    component: {builtin: videoflow.consumers.basic.CommandlineConsumer}
"#;
    let doc = parse_flow(yaml).expect("flow parses");
    let flow = compile(&doc).expect("compiles");
    let url = "nats://127.0.0.1:4222";
    let job =
        videoflow_worker::admission::JobConfig::from_env(&job_env(&flow, url)).expect("job env");
    for spec in &flow.nodes {
        let from_doc = videoflow_worker::provision::data_durables(spec, false, &|s, r| {
            videoflow_worker::provision::node_config(&doc, &flow, &s.name, r, url)
        })
        .expect("doc path");
        let from_specs =
            videoflow_worker::provision::data_durables(spec, false, &|s, r| job.node_config(s, r))
                .expect("specs path");
        assert_eq!(from_doc, from_specs, "{}", spec.name);
        // STREAM-15a: the Flow's credit (pair) and the default (sink) on both paths.
        let want = match spec.name.as_str() {
            "pair" => Some(40),
            "sink" => Some(videoflow_core::model::DEFAULT_CREDIT_MESSAGES),
            _ => None,
        };
        let got: Vec<Option<i64>> = from_specs.iter().map(|d| d.max_ack_pending).collect();
        assert!(got.iter().all(|m| *m == want), "{}: {got:?}", spec.name);
    }
}
