//! Runtime stores against a real redis-server and a real directory
//! (STORE-1..6, §11.2 leases, ENV-5 step 3).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use videoflow_core::scaling::Observation;
use videoflow_testkit::RedisServer;
use videoflow_worker::store::{RuntimeStore, StoreCapabilities, claim_slot};

const BIN: &str = env!("CARGO_BIN_EXE_videoflow-worker");

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn durable_redis() -> RedisServer {
    RedisServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", "noeviction"])
        .expect("redis-server")
}

fn caps(url: &str) -> StoreCapabilities {
    rt().block_on(async { RuntimeStore::open(url).expect("store").capabilities().await })
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vf-{tag}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn store_6_appendonly_noeviction_reads_back_durable() {
    let redis = durable_redis();
    let c = caps(&redis.url());
    assert_eq!(c.durable, Observation::Known(true));
    assert!(c.shared && c.durable_and_shared());
}

#[test]
fn store_6_default_redis_is_not_durable() {
    // The test server runs with `save ""` and `appendonly no`: nothing persists.
    let redis = RedisServer::start().expect("redis-server");
    assert_eq!(caps(&redis.url()).durable, Observation::Known(false));
    let evicting =
        RedisServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", "allkeys-lru"])
            .expect("redis-server");
    assert_eq!(
        caps(&evicting.url()).durable,
        Observation::Known(false),
        "eviction loses the ledger"
    );
}

#[test]
fn store_6_config_renamed_away_reads_back_unknown_auth() {
    let redis = RedisServer::start_with(&["--rename-command", "CONFIG", ""]).expect("redis-server");
    let c = caps(&redis.url());
    match &c.durable {
        Observation::Unknown { reason, .. } => assert_eq!(reason, "auth"),
        other => panic!("expected Unknown(auth), got {other:?}"),
    }
    assert!(!c.durable_and_shared());
}

#[test]
fn store_6_unreachable_redis_reads_back_unknown_never_false() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let c = caps(&format!("redis://127.0.0.1:{port}/0"));
    assert!(
        matches!(&c.durable, Observation::Unknown { reason, .. } if reason == "unreachable"),
        "{c:?}"
    );
}

#[test]
fn store_3_4_memory_and_file_capabilities() {
    assert_eq!(caps("memory://").durable, Observation::Known(false));
    assert!(!caps("memory://").shared);
    let dir = temp_dir("caps");
    let c = caps(&format!("file://{}", dir.display()));
    assert!(c.durable_and_shared());
    let _ = std::fs::remove_dir_all(dir);
}

/// STORE-1 semantics, identical for every store.
async fn store_1_contract(s: &RuntimeStore) {
    assert!(s.get("vf/f/r/n/a").await.expect("get").is_none());
    assert!(s.cas("vf/f/r/n/a", None, b"one").await.expect("create"));
    assert!(!s.cas("vf/f/r/n/a", None, b"again").await.expect("exists"));
    let v = s.get("vf/f/r/n/a").await.expect("get").expect("present");
    assert_eq!(
        (v.value.as_slice(), v.version.as_str()),
        (b"one".as_slice(), "1")
    );
    assert!(s.cas("vf/f/r/n/a", Some("1"), b"two").await.expect("cas"));
    assert!(
        !s.cas("vf/f/r/n/a", Some("1"), b"stale")
            .await
            .expect("stale cas")
    );
    assert_eq!(
        s.get("vf/f/r/n/a")
            .await
            .expect("get")
            .expect("present")
            .version,
        "2"
    );
    assert!(s.cas("vf/f/r/n/a*b", None, b"glob").await.expect("create"));
    assert!(s.cas("vf/f/r/m/x", None, b"other").await.expect("create"));
    let rows = s.scan("vf/f/r/n/").await.expect("scan");
    let keys: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(keys, vec!["vf/f/r/n/a", "vf/f/r/n/a*b"]);
    let rows = s
        .scan("vf/f/r/n/a*")
        .await
        .expect("scan of a glob character");
    assert_eq!(rows.len(), 1, "a '*' in the prefix is literal");
    assert_eq!(
        s.append("vf/f/r/n/terminal", b"{\"a\":1}")
            .await
            .expect("append"),
        1
    );
    assert_eq!(
        s.append("vf/f/r/n/terminal", b"{\"b\":2}")
            .await
            .expect("append"),
        2
    );
    assert_eq!(
        s.log_entries("vf/f/r/n/terminal").await.expect("log"),
        vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]
    );
    assert!(s.log_entries("vf/none").await.expect("log").is_empty());
    assert!(
        !s.delete("vf/f/r/n/a", Some("1"))
            .await
            .expect("stale delete")
    );
    assert!(s.delete("vf/f/r/n/a", Some("2")).await.expect("delete"));
    assert!(s.get("vf/f/r/n/a").await.expect("get").is_none());
    assert!(
        s.delete("vf/f/r/n/missing", None)
            .await
            .expect("missing, nothing expected")
    );
    assert!(
        !s.delete("vf/f/r/n/missing", Some("3"))
            .await
            .expect("missing, expected")
    );
    assert!(s.delete("vf/f/r/m/x", None).await.expect("unconditional"));
}

/// Many writers incrementing one counter by CAS: no update is lost.
async fn store_1_concurrent_cas(make: impl Fn() -> RuntimeStore) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = make();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                loop {
                    let cur = s.get("vf/counter").await.expect("get");
                    let (n, version) = cur.map_or((0u64, None), |v| {
                        (
                            String::from_utf8_lossy(&v.value).parse().expect("number"),
                            Some(v.version),
                        )
                    });
                    if s.cas(
                        "vf/counter",
                        version.as_deref(),
                        (n + 1).to_string().as_bytes(),
                    )
                    .await
                    .expect("cas")
                    {
                        break;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let v = make()
        .get("vf/counter")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(String::from_utf8_lossy(&v.value), "80");
}

#[test]
fn store_1_5_redis_cas_logs_scan_delete() {
    let redis = durable_redis();
    rt().block_on(async {
        store_1_contract(&RuntimeStore::open(&redis.url()).expect("store")).await;
        // Separate stores = separate connections: contention goes through WATCH.
        store_1_concurrent_cas(|| RuntimeStore::open(&redis.url()).expect("store")).await;
    });
}

/// STORE-5: the transactions of a window run side by side, each on a connection of its own
/// (WATCH state is per connection), and commands outside them pipeline on a shared one:
/// concurrent CASes and appends from one store all land, versions intact, on more than one
/// connection.
#[test]
fn store_5_redis_transactions_of_a_window_do_not_queue_on_one_connection() {
    let redis = durable_redis();
    rt().block_on(async {
        let client = redis::Client::open(redis.url()).expect("client");
        let mut admin = client
            .get_multiplexed_async_connection()
            .await
            .expect("conn");
        let clients = async |c: &mut redis::aio::MultiplexedConnection| -> usize {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(c)
                .await
                .expect("client list");
            list.lines().count()
        };
        let before = clients(&mut admin).await;
        let s = RuntimeStore::open(&redis.url()).expect("store");
        let writes = (0..32).map(|i| {
            let s = s.clone();
            async move {
                let key = format!("vf/f/r/n/outbox/m{i}");
                assert!(s.cas(&key, None, b"{}").await.expect("create"));
                assert!(s.cas(&key, Some("1"), b"{\"x\":1}").await.expect("update"));
                s.append("vf/f/r/n/received", format!("id{i}").as_bytes())
                    .await
                    .expect("append")
            }
        });
        let mut counts = futures::future::join_all(writes).await;
        counts.sort_unstable();
        assert_eq!(counts, (1..=32).collect::<Vec<u64>>());
        let opened = clients(&mut admin).await - before;
        assert!(
            (3..=1 + videoflow_worker::store::redis::TRANSACTION_CONNECTIONS).contains(&opened),
            "{opened} connections: one shared, the rest for transactions side by side"
        );
        let v = s
            .get("vf/f/r/n/outbox/m7")
            .await
            .expect("get")
            .expect("present");
        assert_eq!(
            (v.value.as_slice(), v.version.as_str()),
            (b"{\"x\":1}".as_slice(), "2")
        );
    });
}

#[test]
fn store_1_5_redis_layout_is_a_hash_with_value_and_version() {
    let redis = durable_redis();
    rt().block_on(async {
        let s = RuntimeStore::open(&redis.url()).expect("store");
        assert!(s.cas("vf/f/r/n/k", None, b"v").await.expect("cas"));
        let client = redis::Client::open(redis.url()).expect("client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("conn");
        let h: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg("vfrt:vf/f/r/n/k")
            .query_async(&mut c)
            .await
            .expect("hgetall");
        assert_eq!(h.get("value").map(String::as_str), Some("v"));
        assert_eq!(h.get("version").map(String::as_str), Some("1"));
    });
}

#[test]
fn store_1_4_file_store_contract_and_layout() {
    let dir = temp_dir("file-store");
    rt().block_on(async {
        let s = RuntimeStore::open(&format!("file://{}", dir.display())).expect("store");
        store_1_contract(&s).await;
        let url = format!("file://{}", dir.display());
        store_1_concurrent_cas(|| RuntimeStore::open(&url).expect("store")).await;
        assert!(s.cas("vf/f/r/n/k", None, b"v").await.expect("cas"));
    });
    let doc =
        std::fs::read_to_string(dir.join("vf%2Ff%2Fr%2Fn%2Fk.json")).expect("one file per key");
    let json: serde_json::Value = serde_json::from_str(&doc).expect("json");
    assert_eq!(json["value"], "76");
    assert_eq!(json["version"], 1);
    assert!(dir.join("vf%2Ff%2Fr%2Fn%2Fterminal.log").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn store_2_unknown_scheme_is_a_clear_error_naming_the_known_ones() {
    let e = RuntimeStore::open("zookeeper://h:1").expect_err("unknown scheme");
    assert!(
        e.message
            .contains("Known schemes: file, memory, redis, rediss."),
        "{}",
        e.message
    );
}

/// ENV-5 step 3 on one shared ledger: two replicas without ids claim slots 0 and 1; a third
/// finds both leases live (renewed while it waits) and is OwnershipConflict.
async fn env_5_claims(ledger: &RuntimeStore) {
    let lease = Duration::from_secs(2);
    let stop = videoflow_worker::broker::StopFlag::new();
    let mut a = claim_slot(ledger, "f", "r", "work", 2, "proc-a", lease)
        .await
        .expect("first");
    a.lease.keep_alive(stop.clone());
    let mut b = claim_slot(ledger, "f", "r", "work", 2, "proc-b", lease)
        .await
        .expect("second");
    b.lease.keep_alive(stop.clone());
    assert_eq!((a.replica, b.replica), (0, 1), "distinct slots");
    let e = claim_slot(ledger, "f", "r", "work", 2, "proc-c", lease)
        .await
        .expect_err("a third replica beyond the slots");
    assert_eq!(e.code.code(), "VF_OWNERSHIP_CONFLICT");
    assert_eq!(e.exit_code(), 3);
    assert_eq!(
        e.message,
        "work: every one of its 2 replica slots is held under a live lease; this process is an extra replica"
    );
    assert!(!stop.is_set(), "the holders kept their authority");
    // A graceful close frees the slot at once.
    a.lease.release().await.expect("release");
    let c = claim_slot(ledger, "f", "r", "work", 2, "proc-c", lease)
        .await
        .expect("freed slot");
    assert_eq!(c.replica, 0);
    assert_eq!(c.lease.epoch, 2, "a new epoch");
}

#[test]
fn env_5_step_3_two_replicas_claim_distinct_slots_third_conflicts_redis_ledger() {
    let redis = durable_redis();
    rt().block_on(async { env_5_claims(&RuntimeStore::open(&redis.url()).expect("store")).await });
}

#[test]
fn env_5_step_3_two_replicas_claim_distinct_slots_third_conflicts_file_ledger() {
    let dir = temp_dir("ledger");
    rt().block_on(async {
        env_5_claims(&RuntimeStore::open(&format!("file://{}", dir.display())).expect("store"))
            .await
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// The worker binary at START-1 step 7: with both slots of a shared durable ledger held, a
/// third replica without an id stops with VF_OWNERSHIP_CONFLICT (exit 3) before it connects.
#[test]
fn env_5_step_3_worker_beyond_the_slots_exits_3_ownership_conflict() {
    let redis = durable_redis();
    let runtime = rt();
    let store = RuntimeStore::open(&redis.url()).expect("store");
    let stop = videoflow_worker::broker::StopFlag::new();
    let lease = Duration::from_secs(1);
    let _held: Vec<_> = ["a", "b"]
        .iter()
        .map(|p| {
            runtime.block_on(async {
                let mut c = claim_slot(&store, "f", "r", "work", 2, p, lease)
                    .await
                    .expect("claim");
                c.lease.keep_alive(stop.clone());
                c
            })
        })
        .collect();
    let dir = temp_dir("worker");
    let log = dir.join("termination.json");
    let vars = BTreeMap::from([
        ("VF_NODE_NAME", "work".to_owned()),
        ("VF_NODE_KIND", "processor".to_owned()),
        (
            "VF_NODE_CLASS",
            "videoflow.processors.basic.IdentityProcessor".to_owned(),
        ),
        ("VF_PARENT_NAMES", "src".to_owned()),
        ("VF_FLOW_ID", "f".to_owned()),
        ("VF_RUN_ID", "r".to_owned()),
        ("VF_FLOW_TYPE", "batch".to_owned()),
        ("VF_NB_TASKS", "2".to_owned()),
        // Nothing listens here: the claim must fail before any connection.
        ("VF_NATS_URL", "nats://127.0.0.1:1".to_owned()),
        ("VF_RUNTIME_STORE_URL", redis.url()),
        ("VF_PARTITION_LEASE_SECONDS", "1".to_owned()),
        ("VF_TERMINATION_LOG", log.display().to_string()),
    ]);
    let out = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars)
        .output()
        .expect("run worker");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&log).expect("termination record"))
            .expect("json");
    assert_eq!(record["code"], "VF_OWNERSHIP_CONFLICT", "{record}");
    assert!(!stop.is_set());
    let _ = std::fs::remove_dir_all(dir);
}
