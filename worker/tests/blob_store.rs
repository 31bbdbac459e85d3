//! The blob store (BLOB-*) and sink idempotency markers (IDEM-*) against a real redis-server.

use std::time::Duration;

use videoflow_core::envelope::proto::BlobRef;
use videoflow_core::envelope::{BLOBREF_TYPE, Payload, VALUE_TYPE, decode_payload, encode_payload};
use videoflow_core::errors::{Disposition, ErrorCode};
use videoflow_core::value::Value;
use videoflow_testkit::RedisServer;
use videoflow_worker::blob::{
    AdoptOutcome, BlobError, BlobStore, ReleaseOutcome, check_scheme, counter_key,
    offload_if_needed, resolve, threshold_for,
};
use videoflow_worker::idempotency::{IdempotencyStore, idempotency_key};

fn redis() -> RedisServer {
    RedisServer::start().expect("redis-server must be on PATH (or VF_REDIS_SERVER_BIN)")
}

/// A raw connection for inspecting keys behind the store's back.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

async fn cmd<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    args: &[&str],
) -> T {
    let mut c = redis::cmd(name);
    for a in args {
        c.arg(*a);
    }
    c.query_async(conn).await.expect("raw command")
}

fn two_mib() -> Vec<u8> {
    (0..2 * 1024 * 1024).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn blob3_blob5_put_get_round_trip_of_2_mib() {
    let server = redis();
    let store = BlobStore::connect(&server.url(), 3600, None).expect("store");
    let data = two_mib();
    let r = store.put(&data, "videoflow.v1.Tensor").await.expect("put");
    assert!(r.r#ref.starts_with("vf-blob-"));
    let hex = &r.r#ref["vf-blob-".len()..];
    assert_eq!(hex.len(), 32);
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(&hex[12..13], "4", "UUID4 version nibble");
    assert_eq!(r.inner_payload_type, "videoflow.v1.Tensor");
    assert_eq!(r.size, data.len() as u64);
    assert_eq!(store.get(&r.r#ref).await.expect("get"), data);
    let other = store.put(b"x", "t").await.expect("put");
    assert_ne!(other.r#ref, r.r#ref, "refs are random");
}

#[tokio::test]
async fn blob5_counter_written_only_with_positive_readers() {
    let server = redis();
    let mut conn = raw(&server).await;
    for readers in [None, Some(0), Some(-3)] {
        let store = BlobStore::connect(&server.url(), 3600, readers).expect("store");
        assert_eq!(store.readers(), None);
        let r = store.put(b"abc", "t").await.expect("put");
        let n: i64 = cmd(&mut conn, "EXISTS", &[&counter_key(&r.r#ref)]).await;
        assert_eq!(n, 0, "no counter with readers {readers:?}");
    }
    let store = BlobStore::connect(&server.url(), 3600, Some(3)).expect("store");
    let r = store.put(b"abc", "t").await.expect("put");
    let rc = counter_key(&r.r#ref);
    assert_eq!(rc, format!("vf-blobrc-{}", &r.r#ref["vf-blob-".len()..]));
    let v: String = cmd(&mut conn, "GET", &[&rc]).await;
    assert_eq!(v, "3");
}

#[tokio::test]
async fn blob5_blob7_ttl_set_on_blob_and_counter() {
    let server = redis();
    let mut conn = raw(&server).await;
    let store = BlobStore::connect(&server.url(), 777, Some(2)).expect("store");
    assert_eq!(store.ttl_seconds(), 777);
    let r = store.put(b"abc", "t").await.expect("put");
    for key in [r.r#ref.clone(), counter_key(&r.r#ref)] {
        let ttl: i64 = cmd(&mut conn, "TTL", &[&key]).await;
        assert!((770..=777).contains(&ttl), "{key}: ttl {ttl}");
    }
}

/// BLOB-1/5: a 1080p frame offloaded from its segments (the encoding's header, then the
/// frame's own buffer in 1 MiB pieces: SET, then APPENDs) is stored whole — the bytes
/// `encode_payload` gives — with its TTL and counter, and resolves back to the frame.
#[tokio::test]
async fn blob1_blob5_a_frame_written_in_pieces_is_stored_whole() {
    use videoflow_core::envelope::encode_payload_segments;
    use videoflow_core::value::Tensor;
    let server = redis();
    let mut conn = raw(&server).await;
    let store = BlobStore::connect(&server.url(), 777, Some(2)).expect("store");
    let frame = Tensor {
        shape: vec![1080, 1920, 3],
        dtype: "uint8".into(),
        data: (0..1920 * 1080 * 3)
            .map(|i| (i % 253) as u8)
            .collect::<Vec<u8>>()
            .into(),
    };
    let payload = Payload::Value(Value::List(vec![Value::Int(42), Value::Tensor(frame)]));
    let (_, whole) = encode_payload(&payload).expect("encode");
    let (ptype, parts, len) = encode_payload_segments(&payload).expect("encode");
    assert!(
        len > 5 * videoflow_worker::blob::PUT_PIECE,
        "several pieces"
    );
    let (t, b) = offload_if_needed(ptype, parts, len, 512 * 1024, Some(&store))
        .await
        .expect("offload");
    assert_eq!(t, BLOBREF_TYPE);
    let Payload::BlobRef(r) = decode_payload(&t, &b).expect("blobref") else {
        panic!("not a BlobRef");
    };
    assert_eq!(r.size, whole.len() as u64);
    assert!(
        store.get(&r.r#ref).await.expect("get") == whole,
        "the stored bytes are the contiguous encoding"
    );
    for key in [r.r#ref.clone(), counter_key(&r.r#ref)] {
        let ttl: i64 = cmd(&mut conn, "TTL", &[&key]).await;
        assert!((770..=777).contains(&ttl), "{key}: ttl {ttl}");
    }
    assert_eq!(
        cmd::<String>(&mut conn, "GET", &[&counter_key(&r.r#ref)]).await,
        "2"
    );
    assert_eq!(resolve(&r, Some(&store)).await.expect("resolve"), payload);
}

#[tokio::test]
async fn blob6_release_with_two_readers_needs_two_releases() {
    let server = redis();
    let mut conn = raw(&server).await;
    let store = BlobStore::connect(&server.url(), 3600, Some(2)).expect("store");
    let r = store.put(b"abc", "t").await.expect("put");
    let rc = counter_key(&r.r#ref);
    assert_eq!(
        store.release(&r.r#ref).await,
        ReleaseOutcome::Decremented { remaining: 1 }
    );
    let n: i64 = cmd(&mut conn, "EXISTS", &[&r.r#ref, &rc]).await;
    assert_eq!(n, 2, "both keys survive the first release");
    assert_eq!(store.release(&r.r#ref).await, ReleaseOutcome::Reclaimed);
    let n: i64 = cmd(&mut conn, "EXISTS", &[&r.r#ref, &rc]).await;
    assert_eq!(n, 0, "both keys gone after the last release");
    // A third release finds no counter and does not recreate one (EXISTS guard).
    assert_eq!(store.release(&r.r#ref).await, ReleaseOutcome::NoCounter);
    let n: i64 = cmd(&mut conn, "EXISTS", &[&rc]).await;
    assert_eq!(n, 0);
}

/// BLOB-5/6 across a forwarding hop: the forwarder (one share of the publisher's count)
/// adopts the blob for its own two children before publishing the reference on; the blob
/// then outlives the forwarder's release and both children's first release, and the last
/// of the three reclaims it.
#[tokio::test]
async fn blob5_blob6_an_adopted_blob_counts_the_forwarders_children() {
    let server = redis();
    let mut conn = raw(&server).await;
    let publisher = BlobStore::connect(&server.url(), 3600, Some(1)).expect("store");
    let forwarder = BlobStore::connect(&server.url(), 3600, Some(2)).expect("store");
    let r = publisher.put(b"frame", "t").await.expect("put");
    assert_eq!(
        forwarder.adopt(&r.r#ref).await.expect("adopt"),
        AdoptOutcome::Counted { readers: 3 }
    );
    assert_eq!(
        forwarder.release(&r.r#ref).await,
        ReleaseOutcome::Decremented { remaining: 2 }
    );
    assert_eq!(
        forwarder.release(&r.r#ref).await,
        ReleaseOutcome::Decremented { remaining: 1 }
    );
    assert_eq!(
        publisher.get(&r.r#ref).await.expect("still there"),
        b"frame"
    );
    assert_eq!(forwarder.release(&r.r#ref).await, ReleaseOutcome::Reclaimed);

    // A TTL-only blob is forwarded as it is: no counter is created for it.
    let ttl_only = BlobStore::connect(&server.url(), 3600, None).expect("store");
    let r = ttl_only.put(b"frame", "t").await.expect("put");
    assert_eq!(
        forwarder.adopt(&r.r#ref).await.expect("adopt"),
        AdoptOutcome::NoCounter
    );
    let n: i64 = cmd(&mut conn, "EXISTS", &[&counter_key(&r.r#ref)]).await;
    assert_eq!(n, 0, "no counter created for a TTL-only blob");
}

#[tokio::test]
async fn blob6_release_without_counter_does_nothing() {
    let server = redis();
    let mut conn = raw(&server).await;
    let store = BlobStore::connect(&server.url(), 3600, None).expect("store");
    let r = store.put(b"abc", "t").await.expect("put");
    assert_eq!(store.release(&r.r#ref).await, ReleaseOutcome::NoCounter);
    assert_eq!(store.get(&r.r#ref).await.expect("still there"), b"abc");
    let n: i64 = cmd(&mut conn, "EXISTS", &[&counter_key(&r.r#ref)]).await;
    assert_eq!(n, 0, "no negative counter created");
}

#[tokio::test]
async fn blob6a_release_never_touches_obligation_store_keys() {
    let server = redis();
    let mut conn = raw(&server).await;
    let store = BlobStore::connect(&server.url(), 3600, None).expect("store");
    // A 1.0.4 obligation-store object: blob + meta + obligation set, no counter.
    let r = "vf-blob-0123456789abcdef0123456789abcdef";
    let meta = format!("vf-blobmeta-{{{r}}}");
    let obl = format!("vf-blobobl-{{{r}}}");
    let _: () = cmd(&mut conn, "SET", &[r, "bytes"]).await;
    let _: () = cmd(&mut conn, "SET", &[&meta, "m"]).await;
    let _: i64 = cmd(&mut conn, "SADD", &[&obl, "reader"]).await;
    assert_eq!(store.release(r).await, ReleaseOutcome::NoCounter);
    let n: i64 = cmd(&mut conn, "EXISTS", &[r, &meta, &obl]).await;
    assert_eq!(n, 3);
}

#[tokio::test]
async fn blob3_missing_ref_is_poison_with_counter_store_text() {
    let server = redis();
    let store = BlobStore::connect(&server.url(), 3600, None).expect("store");
    let r = "vf-blob-ffffffffffffffffffffffffffffffff";
    let err = store.get(r).await.expect_err("missing");
    assert!(!err.is_transient());
    assert_eq!(
        err.to_string(),
        format!("Blob {r} not found (expired or never existed)")
    );
    let vf = err.into_decode_error(r);
    assert_eq!(vf.code, ErrorCode::PoisonDecode);
    assert_eq!(vf.disposition, Some(Disposition::Poison));
    assert_eq!(
        vf.message,
        format!("Blob {r} not found (expired or never existed)")
    );
    // Through `resolve` the same.
    let blob_ref = BlobRef {
        r#ref: r.to_owned(),
        inner_payload_type: VALUE_TYPE.to_owned(),
        size: 3,
    };
    let vf = resolve(&blob_ref, Some(&store)).await.expect_err("missing");
    assert_eq!(vf.code, ErrorCode::PoisonDecode);
}

#[tokio::test]
async fn blob3_deliv15_stopped_server_is_transient_not_poison() {
    let server = redis();
    let url = server.url();
    let store = BlobStore::connect(&url, 3600, Some(1))
        .expect("store")
        .with_timeout(Duration::from_secs(2));
    let r = store.put(b"abc", "t").await.expect("put");
    drop(server);
    let err = store.get(&r.r#ref).await.expect_err("server stopped");
    assert!(err.is_transient(), "{err:?}");
    assert!(matches!(err, BlobError::Unavailable { .. }));
    let vf = err.into_decode_error(&r.r#ref);
    assert_eq!(vf.code, ErrorCode::Transient);
    assert_eq!(vf.disposition, Some(Disposition::Transient));
    // A fresh attempt (reconnect) fails the same way, and so does a put.
    let err = store.get(&r.r#ref).await.expect_err("still stopped");
    assert!(err.is_transient(), "{err:?}");
    let err = store.put(b"abc", "t").await.expect_err("put");
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(err.into_publish_error().code, ErrorCode::Transient);
    // Release swallows the failure.
    assert_eq!(store.release(&r.r#ref).await, ReleaseOutcome::Failed);
    // Nothing listens on the port: a store built after the stop connects lazily, then fails
    // transiently.
    let late = BlobStore::connect(&url, 3600, None).expect("lazy connect");
    assert!(late.get(&r.r#ref).await.expect_err("down").is_transient());
}

#[test]
fn blob4_scheme_rules_and_texts() {
    for ok in [
        "redis://127.0.0.1:6379/0",
        "REDIS://127.0.0.1:6379/0",
        "unix:///tmp/redis.sock",
        "Unix:///tmp/redis.sock",
        "rediss://example:6380/0",
    ] {
        assert!(check_scheme(ok).is_ok(), "{ok}");
    }
    let e = BlobStore::connect("localhost:6379", 3600, None).expect_err("no scheme");
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(
        e.message,
        "Blob store URL must include a scheme, got 'localhost:6379'. Known schemes: redis, \
         rediss, unix."
    );
    let e = BlobStore::connect("S3://bucket/key", 3600, None).expect_err("unknown scheme");
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(
        e.message,
        "No blob store registered for URL scheme 's3' (from 'S3://bucket/key'). Known schemes: \
         redis, rediss, unix."
    );
    let e = IdempotencyStore::connect("memcached://x").expect_err("unknown scheme");
    assert!(
        e.message
            .starts_with("No blob store registered for URL scheme 'memcached'")
    );
    assert!(BlobStore::connect("redis://127.0.0.1:1/0", 3600, None).is_ok());
    let e = BlobStore::connect("redis://127.0.0.1:1/0", 0, None).expect_err("ttl 0");
    assert_eq!(e.code, ErrorCode::Config);
}

#[tokio::test]
async fn blob4_unix_socket_store_round_trip() {
    let sock = std::env::temp_dir().join(format!(
        "vf-blob-{}-{}.sock",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let sock_str = sock.to_str().expect("utf-8 temp path").to_owned();
    let _server = RedisServer::start_with(&["--unixsocket", &sock_str, "--unixsocketperm", "700"])
        .expect("redis-server");
    let store = BlobStore::connect(&format!("UNIX://{sock_str}"), 60, Some(1)).expect("store");
    let r = store.put(b"over a socket", "t").await.expect("put");
    assert_eq!(store.get(&r.r#ref).await.expect("get"), b"over a socket");
    assert_eq!(store.release(&r.r#ref).await, ReleaseOutcome::Reclaimed);
    let _ = std::fs::remove_file(&sock);
}

#[tokio::test]
async fn blob1_blob2_offload_only_strictly_above_threshold() {
    let server = redis();
    let store = BlobStore::connect(&server.url(), 3600, None).expect("store");
    let payload = Payload::Value(Value::Bytes(vec![7u8; 1000]));
    let (ptype, bytes) = encode_payload(&payload).expect("encode");
    let n = bytes.len();
    let parts = || vec![bytes::Bytes::from(bytes.clone())];

    // Exactly at the threshold: inline, even without a store.
    let (t, b) = offload_if_needed(ptype.clone(), parts(), n, n, None)
        .await
        .expect("inline");
    assert_eq!((t.as_str(), &b), (VALUE_TYPE, &bytes));
    let (t, b) = offload_if_needed(ptype.clone(), parts(), n, n, Some(&store))
        .await
        .expect("inline");
    assert_eq!((t.as_str(), &b), (VALUE_TYPE, &bytes));

    // One byte over without a store: BLOB-2.
    let e = offload_if_needed(ptype.clone(), parts(), n, n - 1, None)
        .await
        .expect_err("no store");
    assert!(
        e.message.contains("MAX_INLINE_PAYLOAD_BYTES"),
        "{}",
        e.message
    );
    assert!(
        e.message.starts_with(&format!(
            "Payload of {n} bytes exceeds MAX_INLINE_PAYLOAD_BYTES ({})",
            n - 1
        )),
        "{}",
        e.message
    );

    // One byte over with a store: a BlobRef that resolves back to the payload.
    let (t, b) = offload_if_needed(ptype.clone(), parts(), n, n - 1, Some(&store))
        .await
        .expect("offload");
    assert_eq!(t, BLOBREF_TYPE);
    let Payload::BlobRef(r) = decode_payload(&t, &b).expect("blobref") else {
        panic!("not a BlobRef");
    };
    assert_eq!(r.inner_payload_type, VALUE_TYPE);
    assert_eq!(r.size, n as u64);
    assert_eq!(resolve(&r, Some(&store)).await.expect("resolve"), payload);

    // A BlobRef without a store is poison.
    let e = resolve(&r, None).await.expect_err("no store");
    assert_eq!(e.code, ErrorCode::PoisonDecode);
    assert_eq!(
        e.message,
        format!(
            "payload {} is an offloaded reference but no blob store is configured",
            r.r#ref
        )
    );

    // An unknown inner type stays opaque.
    let odd = store.put(b"\x01\x02", "vendor.Thing").await.expect("put");
    assert_eq!(
        resolve(&odd, Some(&store)).await.expect("opaque"),
        Payload::Opaque {
            payload_type: "vendor.Thing".into(),
            data: vec![1, 2]
        }
    );
}

#[test]
fn blob1_threshold_lowered_to_what_the_broker_carries() {
    // NATS' default 1 MiB changes nothing; an unread limit changes nothing.
    assert_eq!(
        threshold_for("n", 524_288, Some(1_048_576), false),
        Ok(524_288)
    );
    assert_eq!(threshold_for("n", 524_288, None, false), Ok(524_288));
    // Exactly enough room: unchanged.
    assert_eq!(
        threshold_for("n", 524_288, Some(524_288 + 4096), false),
        Ok(524_288)
    );
    // Too small with a store: lowered.
    assert_eq!(
        threshold_for("n", 524_288, Some(300_000), true),
        Ok(295_904)
    );
    assert_eq!(threshold_for("n", 524_288, Some(100), true), Ok(0));
    // Too small without a store: ConfigError.
    let e = threshold_for("cam", 524_288, Some(300_000), false).expect_err("config");
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(
        e.message,
        "cam: the inline payload threshold (524288 bytes) exceeds what the broker can carry \
         (max_payload 300000 bytes, 4096 reserved for the envelope) and no blob store is \
         configured to offload the difference to."
    );
}

#[tokio::test]
async fn idem1_seen_and_mark_with_ttl_86400() {
    let server = redis();
    let mut conn = raw(&server).await;
    let store = IdempotencyStore::connect(&server.url()).expect("store");
    let key = "745708c2eeaf98a60fdbebafe1d04eff";
    assert!(!store.seen(key).await.expect("seen"));
    store.mark(key).await.expect("mark");
    assert!(store.seen(key).await.expect("seen"));
    let v: String = cmd(&mut conn, "GET", &[key]).await;
    assert_eq!(v, "1", "the raw 32-hex key is stored");
    let ttl: i64 = cmd(&mut conn, "TTL", &[key]).await;
    assert!((86_390..=86_400).contains(&ttl), "ttl {ttl}");
    drop(server);
    let e = store.seen(key).await.expect_err("stopped");
    assert_eq!(e.code, ErrorCode::Transient);
}

#[test]
fn idem2_idempotency_key_vector() {
    assert_eq!(
        idempotency_key("flow-A", "sink", "745708c2eeaf98a60fdbebafe1d04eff"),
        "vf-idem-77bc88ddd3eec10855b8ee9fffc4d876a6f04eaa727457b5c076a31fb211a49e"
    );
}
