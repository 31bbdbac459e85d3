//! The harness starts real servers that answer their protocols, in parallel, on distinct
//! ports — and removes their directories afterwards.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use videoflow_testkit::{NatsServer, RedisServer};

#[test]
fn nats_server_with_jetstream_answers() {
    let nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let mut s = TcpStream::connect(("127.0.0.1", nats.port())).expect("connect");
    let mut info = String::new();
    BufReader::new(&mut s).read_line(&mut info).expect("INFO");
    assert!(info.starts_with("INFO "), "{info}");
    // JetStream is on and the version is new enough for stream metadata (>= 2.10).
    assert!(info.contains("\"jetstream\":true"), "{info}");
    let version = info
        .split("\"version\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("version");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    assert!(
        (major, minor) >= (2, 10),
        "nats-server {version} is older than 2.10"
    );
    let dir = nats.dir().to_path_buf();
    drop(nats);
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn redis_server_answers_and_two_run_side_by_side() {
    let a = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let b = RedisServer::start_with(&["--appendonly", "yes"]).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(a.port(), b.port());
    for r in [&a, &b] {
        let mut s = TcpStream::connect(("127.0.0.1", r.port())).expect("connect");
        s.write_all(b"SET k v\r\nGET k\r\n").expect("write");
        let mut reader = BufReader::new(s);
        let mut line = String::new();
        reader.read_line(&mut line).expect("reply");
        assert_eq!(line, "+OK\r\n");
    }
    let mut s = TcpStream::connect(("127.0.0.1", b.port())).expect("connect");
    s.write_all(b"CONFIG GET appendonly\r\n").expect("write");
    let mut reader = BufReader::new(s);
    let mut lines = Vec::new();
    for _ in 0..5 {
        let mut l = String::new();
        reader.read_line(&mut l).expect("reply");
        lines.push(l.trim_end().to_owned());
    }
    assert_eq!(lines[4], "yes", "{lines:?}");
}

/// Three routed servers form one JetStream cluster: the meta group elects a leader and every
/// server sees three peers, so R3 streams can be created on it.
#[test]
fn a_three_node_jetstream_cluster_forms() {
    let cluster = videoflow_testkit::NatsCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cluster.url().matches("nats://127.0.0.1:").count(), 3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut last = String::new();
    for base in cluster.monitoring_urls() {
        loop {
            last = http_get(&base, "/jsz");
            if last.contains("\"leader\"") && last.contains("\"cluster_size\": 3") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no JetStream meta leader over 3 peers at {base}: {last}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    assert!(last.contains("\"meta_cluster\""), "{last}");
}

/// A SIGKILLed server restarts on the same port with the same directory: JetStream's files
/// and Redis's append-only file survive, so a restart is a node coming back, not a new one.
/// A SIGSTOPped server answers nothing until SIGCONT.
#[test]
fn a_killed_server_restarts_with_its_store_and_a_paused_one_answers_after_resume() {
    let mut nats = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let marker = nats.dir().join("jetstream").join("marker");
    std::fs::create_dir_all(nats.dir().join("jetstream")).expect("store dir");
    std::fs::write(&marker, b"kept").expect("marker");
    let port = nats.port();
    nats.kill();
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still listening"
    );
    assert!(marker.exists(), "the kill removed the store");
    nats.restart().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nats.port(), port);
    assert!(marker.exists(), "the restart removed the store");
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect after restart");
    let mut info = String::new();
    BufReader::new(&mut s).read_line(&mut info).expect("INFO");
    assert!(info.starts_with("INFO "), "{info}");

    nats.pause().unwrap_or_else(|e| panic!("{e}"));
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the kernel still accepts");
    s.set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .expect("timeout");
    let mut line = String::new();
    assert!(
        BufReader::new(&mut s).read_line(&mut line).is_err() || line.is_empty(),
        "a paused server greeted: {line}"
    );
    nats.resume().unwrap_or_else(|e| panic!("{e}"));
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut line = String::new();
    BufReader::new(&mut s)
        .read_line(&mut line)
        .expect("INFO after resume");
    assert!(line.starts_with("INFO "), "{line}");

    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
        .unwrap_or_else(|e| panic!("{e}"));
    let redis_port = redis.port();
    let mut s = TcpStream::connect(("127.0.0.1", redis_port)).expect("connect");
    s.write_all(b"SET k kept\r\n").expect("write");
    let mut reply = String::new();
    BufReader::new(&mut s).read_line(&mut reply).expect("reply");
    assert_eq!(reply, "+OK\r\n");
    redis.kill();
    redis.restart().unwrap_or_else(|e| panic!("{e}"));
    let mut s = TcpStream::connect(("127.0.0.1", redis_port)).expect("connect after restart");
    s.write_all(b"GET k\r\n").expect("write");
    let mut reader = BufReader::new(s);
    let mut lines = [String::new(), String::new()];
    for l in &mut lines {
        reader.read_line(l).expect("reply");
    }
    assert_eq!(lines, ["$4\r\n", "kept\r\n"], "the AOF was not replayed");
}

fn http_get(base: &str, path: &str) -> String {
    videoflow_testkit::cluster::http_get(base, path)
}
