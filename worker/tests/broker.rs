//! The JetStream transport against a real nats-server (testkit): STREAM-1…15, MSGID-1,
//! WIRE-2, DELIV-1/3/4/5/8, PART-4's admission hook, §8.4's permit-before-fetch, T11 and
//! CTRL-1. Every test starts its own server on a free port.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType};
use bytes::Bytes;
use videoflow_core::errors::{Disposition, ErrorCode, VfError};
use videoflow_core::naming;
use videoflow_core::scaling::Observation;
use videoflow_testkit::NatsServer;
use videoflow_worker::broker::{
    Admission, Admit, BoundDurable, Broker, BrokerError, DeadLetter, DeadLetterOutcome, Delivery,
    DeliveryKind, DurableKind, DurableRequest, EnsureAction, Inbox, InboxConfig, Publication,
    PublishMode, PublishOutcome, Publisher, ResourceKind, Settlement, StopFlag, StreamRequest,
    SubscriptionSpec,
};
use videoflow_worker::broker::{
    bind_data_durable, bind_or_create, connect, connect_within, create_eos_durable,
    ensure_aged_node_stream, ensure_dlq_stream, ensure_eos_anchor, ensure_node_stream,
    ensure_stream, observe_consumer, publish_dead_letter, send_control_stop, subscribe_control,
};
use videoflow_worker::config::WorkerConfig;

const FLOW: &str = "flow-A";
const RUN: &str = "run-1";

fn server() -> NatsServer {
    NatsServer::start().expect("nats-server starts (run scripts/install-deps)")
}

async fn broker(server: &NatsServer) -> Broker {
    // Logs show only with a failing test; RUST_LOG widens them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(filter)
        .try_init();
    connect(&server.url()).await.expect("connects")
}

async fn stream_config(broker: &Broker, name: &str) -> stream::Config {
    broker
        .jetstream()
        .get_stream(name)
        .await
        .expect("stream exists")
        .cached_info()
        .config
        .clone()
}

async fn message_count(broker: &Broker, name: &str) -> u64 {
    let mut s = broker.jetstream().get_stream(name).await.expect("stream");
    s.info().await.expect("info").state.messages
}

/// A BATCH stream for `node` and a shared durable on it for `child`.
async fn batch_edge(broker: &Broker, node: &str, child: &str, ack_wait: Duration) -> BoundDurable {
    ensure_node_stream(broker, FLOW, RUN, node, false, None)
        .await
        .expect("stream");
    let request = DurableRequest::data(FLOW, RUN, child, node, None, ack_wait, 4, 5);
    bind_data_durable(broker, &request).await.expect("durable")
}

async fn publish_n(broker: &Broker, node: &str, n: usize, tag: &str) {
    let publisher = Publisher::new(broker, node);
    let stop = StopFlag::new();
    for i in 0..n {
        let p = Publication::envelope(
            naming::data_subject(FLOW, RUN, node),
            format!("{tag}-{i}"),
            Bytes::from(format!("payload-{i}")),
        );
        let out = publisher
            .publish(&p, PublishMode::Batch, &stop)
            .await
            .expect("published");
        assert!(matches!(out, PublishOutcome::Stored { .. }), "{out:?}");
    }
}

/// The oldest delivery of the next non-empty receive. A pull request asks for as many
/// messages as the queue has room for, so others may arrive with it: they stay held (renewed,
/// and handed back at close) without being settled here.
async fn recv_one(inbox: &Inbox, within: Duration) -> Delivery {
    let deadline = Instant::now() + within;
    loop {
        let got = inbox.recv(Duration::from_millis(200)).await;
        if let Some(d) = got.into_iter().min_by_key(|d| d.stream_seq) {
            return d;
        }
        assert!(Instant::now() < deadline, "no delivery within {within:?}");
    }
}

async fn counts(broker: &Broker, durable: &BoundDurable) -> (u64, u64) {
    match durable.observe(broker).await {
        Observation::Known(c) => (c.num_pending, c.num_ack_pending),
        other => panic!("unobservable: {other:?}"),
    }
}

#[tokio::test]
async fn stream_7_connect_failure_is_broker_unavailable() {
    let e = connect_within("nats://127.0.0.1:1", Duration::from_secs(3))
        .await
        .expect_err("nothing listens on port 1");
    assert_eq!(e.code(), ErrorCode::BrokerUnavailable);
    assert!(
        e.to_string()
            .starts_with("could not connect to NATS at nats://127.0.0.1:1: "),
        "{e}"
    );
    assert_eq!(e.to_vf_error().exit_code(), 3);
}

#[tokio::test]
async fn stream_1_2_3_8_14_configs_and_labels_read_back() {
    let server = server();
    let b = broker(&server).await;
    ensure_node_stream(&b, FLOW, RUN, "cam", true, None)
        .await
        .expect("realtime");
    ensure_node_stream(&b, FLOW, RUN, "det", false, None)
        .await
        .expect("batch");
    ensure_dlq_stream(&b, FLOW, None).await.expect("dlq");

    let rt = stream_config(&b, "vf-flow-A-run-1-cam").await;
    assert_eq!(
        rt.subjects,
        vec!["vf.flow-A.run-1.cam", "vf.flow-A.run-1.cam._eos"]
    );
    assert_eq!(rt.retention, RetentionPolicy::Limits);
    assert_eq!(rt.discard, DiscardPolicy::Old);
    assert_eq!(rt.max_messages, 1);
    assert_eq!(rt.duplicate_window, Duration::from_secs(120));
    assert_eq!(rt.storage, StorageType::File);
    let labels = |c: &stream::Config| -> BTreeMap<String, String> {
        c.metadata
            .iter()
            .filter(|(k, _)| k.starts_with("videoflow.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    assert_eq!(
        labels(&rt),
        BTreeMap::from([
            ("videoflow.io/flow-id".into(), "flow-A".into()),
            ("videoflow.io/run-id".into(), "run-1".into()),
            ("videoflow.io/node".into(), "cam".into()),
            ("videoflow.io/kind".into(), "stream".into()),
        ])
    );

    let batch = stream_config(&b, "vf-flow-A-run-1-det").await;
    assert_eq!(batch.retention, RetentionPolicy::Interest);
    assert_eq!(batch.discard, DiscardPolicy::New);
    assert_eq!(batch.max_messages, 10_000);
    assert_eq!(batch.duplicate_window, Duration::from_secs(120));
    assert_eq!(labels(&batch)["videoflow.io/node"], "det");

    let dlq = stream_config(&b, "vf-flow-A-dlq").await;
    assert_eq!(dlq.subjects, vec!["vf.flow-A._dlq.>"]);
    assert_eq!(dlq.retention, RetentionPolicy::Limits);
    assert_eq!(dlq.discard, DiscardPolicy::Old);
    assert_eq!(dlq.max_age, Duration::from_secs(604_800));
    assert_eq!(
        labels(&dlq),
        BTreeMap::from([
            ("videoflow.io/flow-id".into(), "flow-A".into()),
            ("videoflow.io/kind".into(), "dlq".into()),
        ])
    );
}

#[tokio::test]
async fn stream_7_ensuring_twice_is_a_no_op() {
    let server = server();
    let b = broker(&server).await;
    let first = ensure_node_stream(&b, FLOW, RUN, "det", false, None)
        .await
        .expect("first");
    assert_eq!(first.action, EnsureAction::Accepted);
    let _durable = batch_edge(&b, "det", "sink", Duration::from_secs(60)).await;
    publish_n(&b, "det", 1, "keep").await;
    let created = b
        .jetstream()
        .get_stream("vf-flow-A-run-1-det")
        .await
        .expect("stream")
        .cached_info()
        .created;
    let second = ensure_node_stream(&b, FLOW, RUN, "det", false, None)
        .await
        .expect("second");
    assert_eq!(
        second.action,
        EnsureAction::Accepted,
        "identical: no update"
    );
    let again = b
        .jetstream()
        .get_stream("vf-flow-A-run-1-det")
        .await
        .expect("stream");
    assert_eq!(again.cached_info().created, created);
    assert_eq!(message_count(&b, "vf-flow-A-run-1-det").await, 1);
}

/// The age bound (`VF_STREAM_MAX_AGE_SECONDS`, an extension of STREAM-2/3): requested and
/// read back like any field, on both shapes; an ensure without it — what a 1.0.4 worker does
/// at start — updates it away (STREAM-7), and our worker's ensure puts it back; messages held
/// are kept through both updates.
#[tokio::test]
async fn stream_2_3_the_age_bound_is_read_back_and_survives_a_1_0_4_style_ensure() {
    let server = server();
    let b = broker(&server).await;
    let hour = Some(Duration::from_secs(3600));
    let made = ensure_aged_node_stream(&b, FLOW, RUN, "cam", true, None, hour)
        .await
        .expect("aged");
    assert_eq!(made.action, EnsureAction::Accepted, "created");
    assert_eq!(made.effective.max_age, Duration::from_secs(3600));
    // A BATCH stream with its durable, as 1.0.4 shapes it, then ours with the bound.
    let _durable = batch_edge(&b, "det", "sink", Duration::from_secs(60)).await;
    let aged = ensure_aged_node_stream(&b, FLOW, RUN, "det", false, None, hour)
        .await
        .expect("aged");
    assert_eq!(aged.action, EnsureAction::Updated);
    assert_eq!(aged.effective.max_age, Duration::from_secs(3600));
    publish_n(&b, "det", 2, "aged").await;
    let stripped = ensure_node_stream(&b, FLOW, RUN, "det", false, None)
        .await
        .expect("1.0.4's shape");
    assert_eq!(stripped.action, EnsureAction::Updated);
    assert_eq!(
        stripped.effective.max_age,
        Duration::ZERO,
        "the bound is gone"
    );
    let restored = ensure_aged_node_stream(&b, FLOW, RUN, "det", false, None, hour)
        .await
        .expect("ours again");
    assert_eq!(restored.action, EnsureAction::Updated);
    assert_eq!(restored.effective.max_age, Duration::from_secs(3600));
    assert_eq!(message_count(&b, "vf-flow-A-run-1-det").await, 2);
    // JetStream refuses an age below the duplicate window; the read-back reports it.
    let e = ensure_aged_node_stream(
        &b,
        FLOW,
        RUN,
        "low",
        false,
        None,
        Some(Duration::from_secs(60)),
    )
    .await
    .expect_err("refused");
    assert!(e.to_string().contains("vf-flow-A-run-1-low"), "{e}");
}

#[tokio::test]
async fn stream_7_a_differing_stream_is_updated_to_the_requested_shape() {
    let server = server();
    let b = broker(&server).await;
    // A BATCH-shaped stream, then a REALTIME worker ensures it (nats-server 2.15 accepts the
    // retention change): 1.0.4 rewrites it (T24).
    ensure_node_stream(&b, FLOW, RUN, "cam", false, None)
        .await
        .expect("batch");
    let out = ensure_node_stream(&b, FLOW, RUN, "cam", true, None)
        .await
        .expect("updated");
    assert_eq!(out.action, EnsureAction::Updated);
    assert_eq!(out.effective.retention, RetentionPolicy::Limits);
    assert_eq!(out.effective.max_messages, 1);
}

#[tokio::test]
async fn stream_14_incompatible_existing_stream_is_incompatible_profile() {
    let server = server();
    let b = broker(&server).await;
    // A work-queue stream under the node stream's name: an update cannot change retention
    // to or from work-queue, so the read-back differs.
    let mut squatter = StreamRequest::node(FLOW, RUN, "cam", true, None).to_config();
    squatter.retention = RetentionPolicy::WorkQueue;
    b.jetstream()
        .create_stream(squatter)
        .await
        .expect("squatter");
    let e = ensure_node_stream(&b, FLOW, RUN, "cam", true, None)
        .await
        .expect_err("incompatible");
    assert_eq!(e.code(), ErrorCode::IncompatibleProfile);
    assert!(matches!(
        e,
        BrokerError::IncompatibleProfile {
            kind: ResourceKind::Stream,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "stream vf-flow-A-run-1-cam exists with a configuration the broker did not change to \
         the requested one: retention: requested 'limits', effective 'workqueue'."
    );
    let vf: VfError = e.into();
    assert_eq!(vf.exit_code(), 2);
}

#[tokio::test]
async fn stream_4_5_6_15_durables_bound_or_created_with_the_computed_credit() {
    let server = server();
    let b = broker(&server).await;
    ensure_node_stream(&b, FLOW, RUN, "cam", false, None)
        .await
        .expect("stream");
    let env: BTreeMap<String, String> = [
        ("VF_NODE_NAME", "det"),
        ("VF_NODE_KIND", "processor"),
        ("VF_PARENT_NAMES", "cam"),
        ("VF_FLOW_ID", FLOW),
        ("VF_RUN_ID", RUN),
        ("VF_NATS_URL", "nats://unused:4222"),
        ("VF_FLOW_TYPE", "batch"),
        ("VF_NB_TASKS", "10"),
        ("VF_ACK_WAIT_SECONDS", "45"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let cfg = WorkerConfig::from_env(&env).expect("config");
    let request = DurableRequest::data_for(&cfg, "cam", false);
    assert_eq!(request.max_ack_pending, Some(50), "10 replicas × (1 + 4)");

    let created = bind_data_durable(&b, &request).await.expect("created");
    assert!(created.created);
    assert_eq!(created.name, "det--from--cam");
    assert_eq!(created.kind, DurableKind::Shared);
    assert_eq!(created.max_ack_pending(), 50);
    assert_eq!(created.max_deliver(), 4, "at-least-once: retries 3 + 1");
    assert_eq!(created.ack_wait(), Duration::from_secs(45));
    assert_eq!(created.effective.filter_subject, "vf.flow-A.run-1.cam");
    assert_eq!(created.effective.metadata["videoflow.io/node"], "det");
    assert_eq!(created.effective.metadata["videoflow.io/kind"], "durable");
    assert!(created.mismatches.is_empty(), "{:?}", created.mismatches);

    // A second replica binds it as it is.
    let bound = bind_data_durable(&b, &request).await.expect("bound");
    assert!(!bound.created);
    assert_eq!(bound.max_ack_pending(), 50);

    // A durable provisioned with another credit is accepted, never updated (T9).
    let legacy = DurableRequest::data(FLOW, RUN, "old", "cam", None, Duration::from_secs(60), 4, 8);
    bind_data_durable(&b, &legacy).await.expect("legacy");
    let mut ours = legacy.clone();
    ours.max_ack_pending = Some(5);
    let accepted = bind_data_durable(&b, &ours).await.expect("accepted");
    assert!(!accepted.created);
    assert_eq!(accepted.max_ack_pending(), 8);
    assert_eq!(
        accepted.mismatches,
        vec!["max_ack_pending: requested 5, effective 8"]
    );

    // NAME-6 partitioned, STREAM-6 EOS durable, the anchor.
    let part = DurableRequest::data(
        FLOW,
        RUN,
        "det",
        "cam",
        Some(3),
        Duration::from_secs(60),
        4,
        5,
    );
    let part = bind_or_create(&b, &part).await.expect("partitioned");
    assert_eq!(part.name, "det--from--cam--p3");
    assert_eq!(
        part.effective.metadata["videoflow.io/kind"],
        "partitioned_durable"
    );
    let eos = create_eos_durable(&b, FLOW, RUN, "det", "cam", "r0-1a2b3c4d")
        .await
        .expect("eos");
    assert_eq!(eos.name, "det--eos--cam--r0-1a2b3c4d");
    assert_eq!(eos.effective.filter_subject, "vf.flow-A.run-1.cam._eos");
    assert_eq!(eos.ack_wait(), Duration::from_secs(30));
    assert_eq!(eos.effective.inactive_threshold, Duration::from_secs(3600));
    assert_eq!(eos.effective.metadata["videoflow.io/kind"], "eos_durable");
    let anchor = ensure_eos_anchor(&b, FLOW, RUN, "cam")
        .await
        .expect("anchor");
    assert_eq!(anchor.name, "cam--eos--anchor");
    assert_eq!(anchor.effective.metadata["videoflow.io/node"], "cam");
    assert_eq!(anchor.effective.metadata["videoflow.io/kind"], "eos_anchor");
    assert_eq!(anchor.effective.inactive_threshold, Duration::ZERO);

    // A durable on a stream that does not exist is BrokerUnavailable.
    let orphan = DurableRequest::data(
        FLOW,
        RUN,
        "det",
        "ghost",
        None,
        Duration::from_secs(60),
        1,
        5,
    );
    let e = bind_data_durable(&b, &orphan).await.expect_err("no stream");
    assert_eq!(e.code(), ErrorCode::BrokerUnavailable);
    assert!(
        e.to_string()
            .starts_with("consumer vf-flow-A-run-1-ghost/det--from--ghost could not be provisioned or read back: "),
        "{e}"
    );
}

#[tokio::test]
async fn msgid_1_wire_2_same_id_twice_is_stored_once() {
    let server = server();
    let b = broker(&server).await;
    let _durable = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    let publisher = Publisher::new(&b, "cam");
    let stop = StopFlag::new();
    let p = Publication::envelope(
        naming::data_subject(FLOW, RUN, "cam"),
        "745708c2eeaf98a60fdbebafe1d04eff",
        Bytes::from_static(b"envelope"),
    );
    let first = publisher
        .publish(&p, PublishMode::Batch, &stop)
        .await
        .expect("first");
    let second = publisher
        .publish(&p, PublishMode::Batch, &stop)
        .await
        .expect("second");
    let PublishOutcome::Stored {
        stream_seq,
        duplicate: false,
    } = first
    else {
        panic!("{first:?}")
    };
    assert_eq!(
        second,
        PublishOutcome::Stored {
            stream_seq,
            duplicate: true
        }
    );
    assert_eq!(message_count(&b, "vf-flow-A-run-1-cam").await, 1);
    let stored = b
        .jetstream()
        .get_stream("vf-flow-A-run-1-cam")
        .await
        .expect("stream")
        .get_raw_message(stream_seq)
        .await
        .expect("message");
    let headers = stored.headers;
    assert_eq!(
        headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some("745708c2eeaf98a60fdbebafe1d04eff")
    );
    assert_eq!(headers.get("VF-Env").map(|v| v.as_str()), Some("4"));
}

#[tokio::test]
async fn deliv_3_keepalive_holds_past_ack_wait_and_a_nak_redelivers() {
    let server = server();
    let b = broker(&server).await;
    let durable = batch_edge(&b, "cam", "det", Duration::from_secs(2)).await;
    let mut inbox = Inbox::new(&b, InboxConfig::default());
    inbox.subscribe(SubscriptionSpec::new(
        0,
        DeliveryKind::Data,
        durable.clone(),
    ));
    publish_n(&b, "cam", 1, "k").await;
    let held = recv_one(&inbox, Duration::from_secs(5)).await;
    assert_eq!(held.kind, DeliveryKind::Data);
    assert_eq!(held.parent, 0);
    assert_eq!(held.num_delivered, 1);
    assert_eq!(held.payload, Bytes::from_static(b"payload-0"));
    assert_eq!(held.header("nats-msg-id"), Some("k-0"));
    // Held 3 × ack_wait: keepalive renews it, so the broker never redelivers it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(inbox.recv(Duration::from_millis(100)).await.is_empty());
    assert!(held.handle.is_held(), "not superseded by a redelivery");
    let info = b
        .jetstream()
        .get_stream("vf-flow-A-run-1-cam")
        .await
        .expect("stream")
        .consumer_info(&durable.name)
        .await
        .expect("info");
    assert_eq!(info.num_redelivered, 0);
    assert_eq!(info.num_ack_pending, 1);
    assert_eq!(held.handle.ack().await, Settlement::Confirmed);
    assert_eq!(held.handle.ack().await, Settlement::NotHeld, "at most once");
    assert_eq!(held.handle.nak(None).await, Settlement::NotHeld);

    // A NAK hands it back: redelivered with the count raised.
    publish_n(&b, "cam", 1, "n").await;
    let first = recv_one(&inbox, Duration::from_secs(5)).await;
    assert_eq!(first.handle.nak(None).await, Settlement::Sent);
    let again = recv_one(&inbox, Duration::from_secs(5)).await;
    assert_eq!(again.stream_seq, first.stream_seq);
    assert_eq!(again.num_delivered, 2);
    assert_eq!(again.handle.term().await, Settlement::Sent);
    inbox.close().await;
}

#[tokio::test]
async fn deliv_1_close_naks_held_deliveries_so_another_subscriber_gets_them_at_once() {
    let server = server();
    let b = broker(&server).await;
    let durable = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    publish_n(&b, "cam", 3, "c").await;
    let mut first = Inbox::new(&b, InboxConfig::default());
    first.subscribe(SubscriptionSpec::new(
        0,
        DeliveryKind::Data,
        durable.clone(),
    ));
    // One handed out, the other two parked (or arriving).
    let handed_out = recv_one(&first, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(first.held(), 3);
    assert_eq!(first.close().await, 3);
    assert_eq!(handed_out.handle.ack().await, Settlement::NotHeld);

    let mut second = Inbox::new(&b, InboxConfig::default());
    second.subscribe(SubscriptionSpec::new(
        0,
        DeliveryKind::Data,
        durable.clone(),
    ));
    let started = Instant::now();
    let mut seqs = Vec::new();
    while seqs.len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not handed back"
        );
        for d in second.recv(Duration::from_millis(500)).await {
            assert_eq!(d.num_delivered, 2);
            seqs.push(d.stream_seq);
            assert!(d.handle.ack().await.is_confirmed());
        }
    }
    seqs.sort_unstable();
    assert_eq!(seqs, vec![1, 2, 3]);
    second.close().await;
}

#[tokio::test]
async fn stream_15_permit_before_fetch_leases_at_most_the_queue_depth() {
    let server = server();
    let b = broker(&server).await;
    let durable = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    publish_n(&b, "cam", 10, "q").await;
    let mut inbox = Inbox::new(&b, InboxConfig::default());
    let sub = inbox.subscribe(SubscriptionSpec::new(
        0,
        DeliveryKind::Data,
        durable.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(inbox.queued(sub), 4);
    assert_eq!(inbox.queued_for_parent(0), 4);
    assert_eq!(counts(&b, &durable).await, (6, 4), "no fifth lease");
    let all = inbox.recv(Duration::from_millis(10)).await;
    assert_eq!(all.len(), 4, "every ready item at once (T18)");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The durable's max_ack_pending (5 = item_credit 1 + prefetch 4) caps the rest.
    assert_eq!(
        counts(&b, &durable).await,
        (5, 5),
        "4 handed out + 1 parked"
    );
    assert_eq!(inbox.queued(sub), 1);
    inbox.close().await;
}

#[tokio::test]
async fn prefetch_bytes_budget_pauses_the_pull_loop() {
    let server = server();
    let b = broker(&server).await;
    let durable = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    publish_n(&b, "cam", 5, "b").await;
    let config = InboxConfig {
        byte_budget: Some(1),
        ..InboxConfig::default()
    };
    let mut inbox = Inbox::new(&b, config);
    inbox.subscribe(SubscriptionSpec::new(
        0,
        DeliveryKind::Data,
        durable.clone(),
    ));
    let d = recv_one(&inbox, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        counts(&b, &durable).await,
        (4, 1),
        "one message over the budget, no more"
    );
    assert_eq!(inbox.resident_bytes(), 9);
    assert!(d.handle.ack().await.is_confirmed());
    let next = recv_one(&inbox, Duration::from_secs(5)).await;
    assert_eq!(next.stream_seq, 2);
    inbox.close().await;
}

/// The server's count of messages it received (`/varz` `in_msgs`): here, pull requests.
fn server_in_msgs(server: &NatsServer) -> u64 {
    let varz = videoflow_testkit::cluster::http_get(&server.monitoring_url(), "/varz");
    let doc: serde_json::Value = serde_json::from_str(&varz).expect("varz is JSON");
    doc["in_msgs"].as_u64().expect("in_msgs")
}

#[tokio::test]
async fn stream_15a_prefetch_bytes_travels_in_the_pull_request() {
    // A budget larger than one message of the broker's max_payload: one pull request asks
    // for every free slot and the budget's bytes, the server stops at the bytes (a 409 that
    // ends the request, not a failure), and one more one-message request takes the
    // tolerance — not one request a message.
    const SIZE: usize = 64 * 1024;
    let server = server();
    let b = broker(&server).await;
    ensure_node_stream(&b, FLOW, RUN, "cam", false, None)
        .await
        .expect("stream");
    let request = DurableRequest::data(
        FLOW,
        RUN,
        "det",
        "cam",
        None,
        Duration::from_secs(60),
        4,
        64,
    );
    let durable = bind_data_durable(&b, &request).await.expect("durable");
    let publisher = Publisher::new(&b, "cam");
    let stop = StopFlag::new();
    for i in 0..48 {
        let p = Publication::envelope(
            naming::data_subject(FLOW, RUN, "cam"),
            format!("big-{i}"),
            Bytes::from(vec![b'x'; SIZE]),
        );
        publisher
            .publish(&p, PublishMode::Batch, &stop)
            .await
            .expect("published");
    }
    let budget = 40 * SIZE as u64 - 1;
    let mut inbox = Inbox::new(
        &b,
        InboxConfig {
            byte_budget: Some(budget),
            ..InboxConfig::default()
        },
    );
    let before = server_in_msgs(&server);
    let mut spec = SubscriptionSpec::new(0, DeliveryKind::Data, durable.clone());
    spec.capacity = 64;
    let sub = inbox.subscribe(spec);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let requests = server_in_msgs(&server) - before;
    assert_eq!(inbox.queued(sub), 40, "up to the budget, then one message");
    assert_eq!(inbox.resident_bytes(), 40 * SIZE as u64);
    assert!(
        requests <= 4,
        "{requests} pull requests for 40 messages: the budget must travel in the request"
    );
    let mut seen = Vec::new();
    while seen.len() < 48 {
        for d in inbox.recv(Duration::from_secs(5)).await {
            assert!(d.handle.ack().await.is_confirmed());
            seen.push(d.stream_seq);
        }
    }
    assert_eq!(
        seen,
        (1..=48).collect::<Vec<u64>>(),
        "nothing stalls or skips"
    );
    inbox.close().await;
}

#[tokio::test]
async fn part_4_admission_filter_acks_and_skips_before_queueing() {
    let server = server();
    let b = broker(&server).await;
    let durable = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    let skips = Arc::new(AtomicUsize::new(0));
    let seen = skips.clone();
    let admission = Admission {
        filter: Arc::new(|d: &Delivery| match d.header("VF-Replay-Target") {
            Some(target) if target != "det" => Admit::AckAndSkip,
            _ => Admit::Queue,
        }),
        on_skipped: Some(Arc::new(move |_d: &Delivery| {
            seen.fetch_add(1, Ordering::SeqCst);
        })),
    };
    let mut inbox = Inbox::new(&b, InboxConfig::default());
    let sub = inbox.subscribe(
        SubscriptionSpec::new(0, DeliveryKind::Data, durable.clone()).with_admission(admission),
    );
    let publisher = Publisher::new(&b, "cam");
    let subject = naming::data_subject(FLOW, RUN, "cam");
    let elsewhere = Publication::envelope(subject.clone(), "x1", Bytes::from_static(b"a"))
        .with_header("VF-Replay-Target", "other");
    let ours = Publication::envelope(subject, "x2", Bytes::from_static(b"b"))
        .with_header("VF-Replay-Target", "det");
    let stop = StopFlag::new();
    for p in [&elsewhere, &ours] {
        publisher
            .publish(p, PublishMode::Batch, &stop)
            .await
            .expect("published");
    }
    let d = recv_one(&inbox, Duration::from_secs(5)).await;
    assert_eq!(d.header("Nats-Msg-Id"), Some("x2"));
    assert_eq!(inbox.skipped(sub), 1);
    assert_eq!(skips.load(Ordering::SeqCst), 1);
    assert_eq!(
        counts(&b, &durable).await,
        (0, 1),
        "the skipped one is acked"
    );
    inbox.close().await;
}

#[tokio::test]
async fn deliv_3_terminator_subscription_has_its_own_queue() {
    let server = server();
    let b = broker(&server).await;
    let data = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    ensure_eos_anchor(&b, FLOW, RUN, "cam")
        .await
        .expect("anchor");
    let eos = create_eos_durable(&b, FLOW, RUN, "det", "cam", "r0-abcdef12")
        .await
        .expect("eos durable");
    let publisher = Publisher::new(&b, "cam");
    let stop = StopFlag::new();
    let terminator = Publication::envelope(
        naming::eos_subject(FLOW, RUN, "cam"),
        "eos-id",
        Bytes::from_static(b"eos"),
    );
    publisher
        .publish(&terminator, PublishMode::Batch, &stop)
        .await
        .expect("eos published");
    let mut inbox = Inbox::new(&b, InboxConfig::default());
    inbox.subscribe(SubscriptionSpec::new(0, DeliveryKind::Data, data));
    let eos_sub = inbox.subscribe(SubscriptionSpec::new(0, DeliveryKind::Terminator, eos));
    let d = recv_one(&inbox, Duration::from_secs(5)).await;
    assert_eq!(d.kind, DeliveryKind::Terminator);
    assert_eq!(d.subscription, eos_sub);
    assert_eq!(d.subject.as_str(), "vf.flow-A.run-1.cam._eos");
    assert!(d.handle.ack().await.is_confirmed());
    inbox.close().await;
}

#[tokio::test]
async fn deliv_5_batch_publish_into_a_full_interest_stream_waits_for_space() {
    let server = server();
    let b = broker(&server).await;
    let mut small = StreamRequest::node(FLOW, RUN, "cam", false, None);
    small.max_msgs = Some(2);
    ensure_stream(&b, &small).await.expect("small stream");
    let durable = bind_data_durable(
        &b,
        &DurableRequest::data(FLOW, RUN, "det", "cam", None, Duration::from_secs(60), 4, 5),
    )
    .await
    .expect("durable");
    publish_n(&b, "cam", 2, "full").await;

    let publisher = Publisher::new(&b, "cam");
    let third = Publication::envelope(
        naming::data_subject(FLOW, RUN, "cam"),
        "third",
        Bytes::from_static(b"3"),
    );
    let stop = StopFlag::new();
    let (p, s) = (publisher.clone(), stop.clone());
    let pending = tokio::spawn(async move { p.publish(&third, PublishMode::Batch, &s).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !pending.is_finished(),
        "a full BATCH stream is backpressure"
    );

    // Make space: consume and ack one (INTEREST retention drops it).
    let mut inbox = Inbox::new(&b, InboxConfig::default());
    inbox.subscribe(SubscriptionSpec::new(0, DeliveryKind::Data, durable));
    let d = recv_one(&inbox, Duration::from_secs(5)).await;
    assert!(d.handle.ack().await.is_confirmed());
    let out = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("completes once there is space")
        .expect("task")
        .expect("stored");
    assert!(
        matches!(
            out,
            PublishOutcome::Stored {
                duplicate: false,
                ..
            }
        ),
        "{out:?}"
    );
    inbox.close().await;
}

#[tokio::test]
async fn deliv_5_batch_publish_gives_broker_unavailable_when_stopped() {
    let server = server();
    let b = broker(&server).await;
    let mut small = StreamRequest::node(FLOW, RUN, "cam", false, None);
    small.max_msgs = Some(1);
    ensure_stream(&b, &small).await.expect("small stream");
    bind_data_durable(
        &b,
        &DurableRequest::data(FLOW, RUN, "det", "cam", None, Duration::from_secs(60), 4, 5),
    )
    .await
    .expect("durable");
    publish_n(&b, "cam", 1, "full").await;
    let publisher = Publisher::new(&b, "cam");
    let blocked = Publication::envelope(
        naming::data_subject(FLOW, RUN, "cam"),
        "blocked",
        Bytes::from_static(b"x"),
    );
    let stop = StopFlag::new();
    let (p, s) = (publisher.clone(), stop.clone());
    let pending = tokio::spawn(async move { p.publish(&blocked, PublishMode::Batch, &s).await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!pending.is_finished());
    stop.set("control");
    let e = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("abandoned promptly")
        .expect("task")
        .expect_err("BrokerUnavailable");
    assert_eq!(e.code(), ErrorCode::BrokerUnavailable);
    let text = e.to_string();
    assert!(
        text.starts_with("cam: publication blocked rejected by the broker: "),
        "{text}"
    );
    assert!(text.to_lowercase().contains("maximum messages"), "{text}");

    // ABORT-2: three attempts within 10 s, then BrokerUnavailable.
    let abort = Publication::envelope(
        naming::data_subject(FLOW, RUN, "cam"),
        "abort-id",
        Bytes::from_static(b"abort"),
    );
    let started = Instant::now();
    let e = publisher
        .publish(&abort, PublishMode::Abort, &StopFlag::new())
        .await
        .expect_err("still full");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        e.to_string()
            .starts_with("cam: publication abort-id still refused after 3 attempts: "),
        "{e}"
    );
}

#[tokio::test]
async fn deliv_4_realtime_publish_never_blocks() {
    let server = server();
    let b = broker(&server).await;
    ensure_node_stream(&b, FLOW, RUN, "cam", true, None)
        .await
        .expect("realtime stream");
    let publisher = Publisher::new(&b, "cam");
    let stop = StopFlag::new();
    let started = Instant::now();
    for i in 0..20 {
        let p = Publication::envelope(
            naming::data_subject(FLOW, RUN, "cam"),
            format!("rt-{i}"),
            Bytes::from_static(b"frame"),
        );
        let out = publisher
            .publish(&p, PublishMode::Realtime, &stop)
            .await
            .expect("never an error");
        assert!(matches!(out, PublishOutcome::Stored { .. }), "{out:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        message_count(&b, "vf-flow-A-run-1-cam").await,
        1,
        "freshest wins"
    );

    // REALTIME onto a stream that refuses (a full discard-NEW one): dropped, not waited on.
    let mut small = StreamRequest::node(FLOW, RUN, "det", false, None);
    small.max_msgs = Some(1);
    ensure_stream(&b, &small).await.expect("small");
    bind_data_durable(
        &b,
        &DurableRequest::data(
            FLOW,
            RUN,
            "sink",
            "det",
            None,
            Duration::from_secs(60),
            4,
            5,
        ),
    )
    .await
    .expect("durable");
    publish_n(&b, "det", 1, "fill").await;
    let p = Publication::envelope(
        naming::data_subject(FLOW, RUN, "det"),
        "dropped",
        Bytes::from_static(b"x"),
    );
    let started = Instant::now();
    let out = publisher
        .publish(&p, PublishMode::Realtime, &stop)
        .await
        .expect("never an error");
    assert!(matches!(out, PublishOutcome::Discarded { .. }), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn deliv_8_dead_letter_headers_exactly() {
    let server = server();
    let b = broker(&server).await;
    ensure_dlq_stream(&b, FLOW, None).await.expect("dlq");
    let error = VfError::new(ErrorCode::PoisonDecode, "x".repeat(300))
        .with_remedy("Fix the producer.")
        .with_disposition(Disposition::Poison);
    let raw = Bytes::from_static(b"\x80not an envelope");
    let letter = DeadLetter::from_error(FLOW, RUN, "det", &error, 2, 17, raw.clone());
    let outcome = publish_dead_letter(&b, &letter).await;
    let DeadLetterOutcome::Accepted {
        msg_id,
        stream_seq,
        duplicate: false,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(msg_id, "dlq:flow-A:run-1:det:17");
    let stored = b
        .jetstream()
        .get_stream("vf-flow-A-dlq")
        .await
        .expect("dlq stream")
        .get_raw_message(stream_seq)
        .await
        .expect("dead letter");
    assert_eq!(stored.subject.as_str(), "vf.flow-A._dlq.run-1.det");
    assert_eq!(stored.payload, raw);
    let headers: BTreeMap<String, String> = stored
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.first().map(|v| v.as_str().to_owned()).unwrap_or_default(),
            )
        })
        .collect();
    let expected: BTreeMap<String, String> = [
        ("Nats-Msg-Id", "dlq:flow-A:run-1:det:17".to_owned()),
        ("VF-Origin-Node", "det".to_owned()),
        ("VF-Run-Id", "run-1".to_owned()),
        ("VF-Code", "VF_POISON_DECODE".to_owned()),
        ("VF-Disposition", "poison".to_owned()),
        ("VF-Error", "x".repeat(256)),
        ("VF-Remedy", "Fix the producer.".to_owned()),
        ("VF-Num-Delivered", "2".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(headers, expected, "no VF-Env, nothing else");

    // A retry under the same id is a duplicate, and still accepted.
    let again = publish_dead_letter(&b, &letter).await;
    assert!(matches!(
        again,
        DeadLetterOutcome::Accepted {
            duplicate: true,
            ..
        }
    ));
}

#[tokio::test]
async fn t11_observe_is_unknown_after_the_server_stops() {
    let server = server();
    let b = broker(&server).await;
    let durable = batch_edge(&b, "cam", "det", Duration::from_secs(60)).await;
    assert_eq!(counts(&b, &durable).await, (0, 0));
    drop(server);
    let observed = observe_consumer(&b, &durable.stream, &durable.name).await;
    assert!(
        matches!(observed, Observation::Unknown { .. }),
        "a failed read is never zero: {observed:?}"
    );
}

#[tokio::test]
async fn ctrl_1_control_stop_is_observed() {
    let server = server();
    let worker = broker(&server).await;
    let supervisor = broker(&server).await;
    let flag = StopFlag::new();
    let control = subscribe_control(&worker, FLOW, RUN, &flag)
        .await
        .expect("subscribed");
    assert!(!flag.is_set());
    send_control_stop(&supervisor, FLOW, RUN)
        .await
        .expect("sent");
    tokio::time::timeout(Duration::from_secs(5), flag.wait())
        .await
        .expect("stop observed");
    assert_eq!(flag.reason().as_deref(), Some("control"));
    assert!(control.observed());
}
