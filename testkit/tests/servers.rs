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
