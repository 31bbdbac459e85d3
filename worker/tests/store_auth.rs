//! STORE-6 against a password-protected redis-server: a run ledger that refuses the worker's
//! credentials reads back Unknown(`auth`) — never durable — and says so, naming the store with
//! its password masked and the fix. The provision job's side (ADM-2: refusal with an
//! explicit `restart_safe`, a warning without) is in `provision_job.rs`.

use std::process::Command;

use videoflow_core::scaling::Observation;
use videoflow_testkit::{NatsServer, RedisServer};
use videoflow_worker::store::{RuntimeStore, StoreCapabilities};

const PASSWORD: &str = "ledger-Pa55";
const WRONG: &str = "not-the-Pa55";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A durable redis-server that requires [`PASSWORD`].
fn protected_redis() -> RedisServer {
    RedisServer::start_with(&[
        "--requirepass",
        PASSWORD,
        "--appendonly",
        "yes",
        "--maxmemory-policy",
        "noeviction",
    ])
    .expect("redis-server")
}

fn url(redis: &RedisServer, password: Option<&str>) -> String {
    match password {
        Some(p) => format!("redis://:{p}@127.0.0.1:{}/0", redis.port()),
        None => format!("redis://127.0.0.1:{}/0", redis.port()),
    }
}

fn caps(url: &str) -> StoreCapabilities {
    rt().block_on(async { RuntimeStore::open(url).expect("store").capabilities().await })
}

#[test]
fn store_6_refused_credentials_read_back_unknown_auth_naming_the_store() {
    let redis = protected_redis();
    let port = redis.port();
    for (password, shown) in [
        (Some(WRONG), format!("redis://:***@127.0.0.1:{port}/0")),
        (None, format!("redis://127.0.0.1:{port}/0")),
    ] {
        let c = caps(&url(&redis, password));
        let Observation::Unknown { reason, detail } = &c.durable else {
            panic!("{password:?}: {c:?}");
        };
        assert_eq!(reason, "auth", "{detail}");
        assert!(detail.starts_with(&shown), "names the store: {detail}");
        assert!(
            detail.contains("credentials refused"),
            "says the credentials were refused, not CONFIG: {detail}"
        );
        assert!(!detail.contains(WRONG), "no secret: {detail}");
        assert!(!c.durable_and_shared());
    }
    assert_eq!(
        caps(&url(&redis, Some(PASSWORD))).durable,
        Observation::Known(true),
        "the right password reads it back"
    );
}

/// The defect: a worker whose run ledger refused its password ran on as if it had no
/// ledger, and said nothing. It still runs on (STORE-6: Unknown is not durable, as in
/// 1.0.4), but with one WARNING naming the variable, the store without its password, what
/// is off, and the fix.
#[test]
fn store_6_a_worker_whose_ledger_refuses_its_password_warns_and_runs_on() {
    let redis = protected_redis();
    let nats = NatsServer::start().expect("nats-server");
    let dir = std::env::temp_dir().join(format!("vf-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let log = dir.join("termination-log");
    let out = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("VF_NODE_NAME", "numbers")
        .env("VF_NODE_KIND", "producer")
        .env("VF_NODE_CLASS", "videoflow.producers.basic.IntProducer")
        .env(
            "VF_NODE_PARAMS_JSON",
            r#"{"start_value": 0, "end_value": 2}"#,
        )
        .env("VF_FLOW_ID", "auth")
        .env("VF_RUN_ID", "r1")
        .env("VF_FLOW_TYPE", "batch")
        .env("VF_HAS_CHILDREN", "1")
        .env("VF_NATS_URL", nats.url())
        .env("VF_RUNTIME_STORE_URL", url(&redis, Some(WRONG)))
        .env("VF_TERMINATION_LOG", &log)
        .output()
        .expect("worker runs");
    let _ = std::fs::remove_dir_all(&dir);
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "runs on: {output}");
    let warning = output
        .lines()
        .find(|l| l.contains("the run ledger (VF_RUNTIME_STORE_URL, redis) could not be read back"))
        .unwrap_or_else(|| panic!("a warning about the ledger: {output}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains(&format!("redis://:***@127.0.0.1:{}/0", redis.port())),
        "names the store: {warning}"
    );
    assert!(warning.contains("credentials refused"), "{warning}");
    assert!(
        warning.contains("no EOS-7 barrier"),
        "what is off: {warning}"
    );
    assert!(
        warning.contains("put the password (and user) it requires into VF_RUNTIME_STORE_URL"),
        "the fix: {warning}"
    );
    assert!(!output.contains(WRONG), "no secret anywhere: {output}");
}
