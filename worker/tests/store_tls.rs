//! `rediss://` for the payload store and the run ledger, against a real TLS redis-server
//! with a CA and a server certificate made at test time (the `openssl` CLI).
//!
//! - trusted (`SSL_CERT_FILE` names the CA that signed the server's certificate): a producer
//!   offloads its frames to the payload store and records its run in the ledger, both over
//!   TLS — read back through the server's plain port;
//! - untrusted (another CA): the worker stops at start with `VF_CONFIG` (exit 2) naming the
//!   variable, the URL with its password masked, and `SSL_CERT_FILE` as the fix.

use std::path::{Path, PathBuf};
use std::process::Command;

use videoflow_testkit::{NatsServer, RedisServer};

const PASSWORD: &str = "tls-Pa55word";

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("vf-tls-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    Scratch(dir)
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA `<name>.crt`/`<name>.key` in `dir`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// `server.crt`/`server.key` for 127.0.0.1 and localhost, signed by CA `ca`.
fn make_server_cert(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("ext file");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
        ],
    );
}

/// A durable redis-server with its plain port (for reading back) and a TLS port.
fn tls_redis(dir: &Path) -> (RedisServer, u16) {
    let tls_port = videoflow_testkit::free_port().expect("port").to_string();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
        "--requirepass",
        PASSWORD,
        // Durable (STORE-6), so the run ledger records into it.
        "--appendonly",
        "yes",
    ])
    .expect("redis-server with TLS");
    (redis, tls_port.parse().expect("port"))
}

/// Runs a REALTIME producer of three 9 KiB frames (offloaded: the inline limit is 1 KiB)
/// with both stores on `url`, trusting `ca_file`; returns (exit status, record, output).
fn run_producer(dir: &Path, nats: &str, url: &str, ca_file: &Path) -> (i32, String, String) {
    let log = dir.join("termination-log");
    let out = Command::new(env!("CARGO_BIN_EXE_videoflow-worker"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SSL_CERT_FILE", ca_file)
        .env("VF_NODE_NAME", "frames")
        .env("VF_NODE_KIND", "producer")
        .env(
            "VF_NODE_CLASS",
            "videoflow.rs.producers.SyntheticFrameProducer",
        )
        .env("VF_NODE_PARAMS_JSON", r#"{"count": 3}"#)
        .env("VF_FLOW_ID", "tls")
        .env("VF_RUN_ID", "r1")
        .env("VF_FLOW_TYPE", "realtime")
        .env("VF_HAS_CHILDREN", "1")
        .env("VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES", "1024")
        .env("VF_NATS_URL", nats)
        .env("VF_BLOB_REDIS_URL", url)
        .env("VF_RUNTIME_STORE_URL", url)
        .env("VF_TERMINATION_LOG", &log)
        .output()
        .expect("worker runs");
    let record = std::fs::read_to_string(&log).unwrap_or_default();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), record, output)
}

/// Keys matching `pattern`, through the server's plain port.
fn keys(redis: &RedisServer, pattern: &str) -> Vec<String> {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/0", redis.port());
    let client = redis::Client::open(url).expect("client");
    let mut conn = client.get_connection().expect("plain connection");
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut conn)
        .expect("KEYS")
}

#[test]
fn rediss_stores_work_with_a_trusted_ca() {
    let dir = scratch("trusted");
    make_ca(&dir.0, "ca");
    make_server_cert(&dir.0, "ca");
    let (redis, tls_port) = tls_redis(&dir.0);
    let nats = NatsServer::start().expect("nats");
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{tls_port}/0");
    let (code, record, output) = run_producer(&dir.0, &nats.url(), &url, &dir.0.join("ca.crt"));
    assert_eq!(code, 0, "record: {record}\n{output}");
    let blobs = keys(&redis, "vf-blob-*");
    assert_eq!(
        blobs.len(),
        3,
        "three frames offloaded over TLS: {blobs:?}\n{output}"
    );
    let all = keys(&redis, "*");
    assert!(
        all.iter()
            .any(|k| !k.starts_with("vf-blob-") && k.contains("tls")),
        "the run ledger wrote over TLS: {all:?}\n{output}"
    );
}

#[test]
fn an_untrusted_certificate_stops_the_worker_with_the_fix() {
    let dir = scratch("untrusted");
    make_ca(&dir.0, "ca");
    make_server_cert(&dir.0, "ca");
    make_ca(&dir.0, "other");
    let (redis, tls_port) = tls_redis(&dir.0);
    let nats = NatsServer::start().expect("nats");
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{tls_port}/0");
    let (code, record, output) = run_producer(&dir.0, &nats.url(), &url, &dir.0.join("other.crt"));
    assert_eq!(code, 2, "record: {record}\n{output}");
    assert!(record.contains("VF_CONFIG"), "{record}");
    assert!(record.contains("VF_BLOB_REDIS_URL"), "{record}");
    assert!(
        record.contains(&format!("rediss://:***@127.0.0.1:{tls_port}/0")),
        "{record}"
    );
    assert!(record.contains("SSL_CERT_FILE"), "{record}");
    assert!(!record.contains(PASSWORD), "{record}");
    assert!(!output.contains(PASSWORD), "{output}");
    assert!(keys(&redis, "vf-blob-*").is_empty());
}
