//! No secret in anything a reader sees: broker and store URLs come from Secrets with their
//! passwords, and a worker that fails quotes them. Real servers that require the password,
//! given the wrong one, and the worker binary's termination record and logs checked for it.

use std::path::PathBuf;
use std::process::Command;

use videoflow_testkit::{NatsServer, RedisServer};

const SECRET: &str = "s3cret-Pa55";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vf-redact-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Runs one producer replica with `vars`; returns (exit status, termination record, output).
fn run_worker(name: &str, vars: &[(&str, String)]) -> (i32, String, String) {
    let dir = scratch(name);
    let log = dir.join("termination-log");
    let out = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("VF_NODE_NAME", "numbers")
        .env("VF_NODE_KIND", "producer")
        .env("VF_NODE_CLASS", "videoflow.producers.basic.IntProducer")
        .env(
            "VF_NODE_PARAMS_JSON",
            r#"{"start_value": 0, "end_value": 3}"#,
        )
        .env("VF_FLOW_ID", "redact")
        .env("VF_RUN_ID", "r1")
        .env("VF_FLOW_TYPE", "batch")
        .env("VF_HAS_CHILDREN", "0")
        .env("VF_LOG", "debug")
        .env("VF_TERMINATION_LOG", &log)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("worker runs");
    let record = std::fs::read_to_string(&log).unwrap_or_default();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.code().unwrap_or(-1), record, output)
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the password:\n{text}");
}

/// The broker refuses the credentials (and, separately, is not there at all): the record and
/// every log line name the URL with `***` for the password.
#[test]
fn a_broker_url_password_is_in_no_record_and_no_log_line() {
    let nats = NatsServer::start_with(&["--user", "vf", "--pass", "right-one"]).expect("nats");
    let wrong = format!("nats://vf:{SECRET}@127.0.0.1:{}", nats.port());
    let (code, record, output) = run_worker("auth", &[("VF_NATS_URL", wrong)]);
    assert_eq!(code, 3, "BrokerUnavailable exits 3: {record}\n{output}");
    assert!(record.contains("VF_BROKER_UNAVAILABLE"), "{record}");
    assert!(record.contains("nats://vf:***@127.0.0.1"), "{record}");
    assert_no_secret("the termination record", &record);
    assert_no_secret("the worker's output", &output);

    let closed = videoflow_testkit::free_port().expect("port");
    let token = format!("nats://{SECRET}@127.0.0.1:{closed}");
    let (code, record, output) = run_worker("token", &[("VF_NATS_URL", token)]);
    assert_eq!(code, 3, "{record}\n{output}");
    assert!(record.contains("nats://***@127.0.0.1"), "{record}");
    assert_no_secret("the termination record", &record);
    assert_no_secret("the worker's output", &output);
}

/// A payload store and a run ledger that refuse the password.
#[test]
fn a_store_url_password_is_in_no_record_and_no_log_line() {
    let nats = NatsServer::start().expect("nats");
    let redis = RedisServer::start_with(&["--requirepass", "right-one"]).expect("redis");
    let wrong = format!("redis://:{SECRET}@127.0.0.1:{}/0", redis.port());
    for (name, var) in [
        ("blob", "VF_BLOB_REDIS_URL"),
        ("ledger", "VF_RUNTIME_STORE_URL"),
    ] {
        let (code, record, output) =
            run_worker(name, &[("VF_NATS_URL", nats.url()), (var, wrong.clone())]);
        // Neither stops this producer (its small ints stay inline; a ledger whose
        // capabilities cannot be read is not durable, STORE-6), but whatever it says about
        // the store must not carry the password.
        let _ = code;
        assert_no_secret(&format!("{var}: the termination record"), &record);
        assert_no_secret(&format!("{var}: the worker's output"), &output);
    }
}

/// `videoflow-worker provision` prints its refusal in the §15.3 form: no password there either.
#[test]
fn the_provision_job_prints_no_password() {
    let closed = videoflow_testkit::free_port().expect("port");
    let out = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"))
        .arg("provision")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("VF_FLOW_SPECS_JSON", "[]")
        .env("VF_FLOW_ID", "redact")
        .env("VF_RUN_ID", "r1")
        .env("VF_ADMISSION_TIMEOUT_SECONDS", "1")
        .env("VF_LOG", "debug")
        .env(
            "VF_NATS_URL",
            format!("nats://vf:{SECRET}@127.0.0.1:{closed}"),
        )
        .output()
        .expect("provision runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{output}");
    assert!(output.contains("nats://vf:***@127.0.0.1"), "{output}");
    assert_no_secret("the provision job's output", &output);
}
