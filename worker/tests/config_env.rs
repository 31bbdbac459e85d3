//! The `VF_*` environment contract (protocol §1): ENV-1…ENV-19, WIRE-2, JOIN-2, STREAM-5/15,
//! PART-1, DELIV-10 and the exact ConfigError texts of the §1.1 table.

use std::collections::BTreeMap;

use videoflow_core::errors::{EXIT_USER, ErrorCode, VfError};
use videoflow_core::model::{DeliveryMode, GpuFallback, MissingPolicy, NodeKind, OnError};
use videoflow_worker::config::{DeviceType, ReplicaSource, WorkerConfig};

/// A minimal valid processor environment.
fn base() -> BTreeMap<String, String> {
    [
        ("VF_NODE_NAME", "det"),
        ("VF_NODE_KIND", "processor"),
        ("VF_PARENT_NAMES", "cam"),
        ("VF_FLOW_ID", "f"),
        ("VF_RUN_ID", "r1"),
        ("VF_NATS_URL", "nats://n:4222"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn with(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut m = base();
    for (k, v) in pairs {
        m.insert((*k).to_owned(), (*v).to_owned());
    }
    m
}

fn ok(vars: &BTreeMap<String, String>) -> WorkerConfig {
    WorkerConfig::from_env(vars).expect("valid environment")
}

fn err(vars: &BTreeMap<String, String>) -> VfError {
    let e = WorkerConfig::from_env(vars).expect_err("must fail");
    assert_eq!(e.code, ErrorCode::Config, "{e:?}");
    assert_eq!(e.exit_code(), EXIT_USER);
    assert!(e.remedy_text().is_some(), "ENV-1 wants a remedy: {e:?}");
    e
}

fn msg(pairs: &[(&str, &str)]) -> String {
    err(&with(pairs)).message
}

#[test]
fn env_1_defaults() {
    let c = ok(&base());
    assert_eq!(c.node_name, "det");
    assert_eq!(c.kind, NodeKind::Processor);
    assert!(c.has_children);
    assert_eq!(c.flow_type, "realtime");
    assert_eq!(c.nb_tasks, 1);
    assert_eq!(c.ack_wait_seconds, 60);
    assert_eq!(c.max_retries, 3);
    assert_eq!(c.eos_quiescence_ms, 500);
    assert_eq!(c.health_port, 0);
    assert_eq!(c.envelope_version, 4);
    assert_eq!(c.breaker_threshold, 10);
    assert_eq!(c.progress_timeout_seconds, 300.0);
    assert_eq!(c.watchdog_interval_seconds, 5.0);
    assert_eq!(c.termination_log.to_str(), Some("/dev/termination-log"));
    assert_eq!(c.runtime_store_url, "memory://");
    assert_eq!(c.partition_lease_seconds, 10.0);
    assert_eq!(c.admission_timeout_seconds, 60.0);
    assert_eq!(c.replica_slots, 1);
    assert_eq!(c.on_error, OnError::Transient);
    assert_eq!(c.delivery, DeliveryMode::BestEffort);
    assert_eq!(c.blob_ttl_seconds, 3600);
    assert_eq!(c.blob_readers, None);
    assert_eq!(c.parent_replicas, None);
    assert!(c.node_params.is_empty());
    assert_eq!(c.device.device_type, DeviceType::Cpu);
    assert_eq!(c.device.gpu_count, 1);
    assert!(!c.structured_logs);
    assert_eq!(c.partition_by, None);
}

#[test]
fn env_1_each_required_variable_missing_has_exact_message() {
    for var in [
        "VF_NODE_NAME",
        "VF_NODE_KIND",
        "VF_FLOW_ID",
        "VF_RUN_ID",
        "VF_NATS_URL",
    ] {
        let mut vars = base();
        vars.remove(var);
        // Another invalid value must not mask the missing variable.
        vars.insert("VF_NB_TASKS".into(), "x".into());
        let e = err(&vars);
        assert_eq!(e.message, format!("{var} is required."));
        assert_eq!(
            e.context.get("variable").and_then(|v| v.as_str()),
            Some(var)
        );
    }
    // VF_PARENT_NAMES is not required (a producer has none).
    let mut vars = base();
    vars.remove("VF_PARENT_NAMES");
    assert!(ok(&vars).parent_names.is_empty());
}

#[test]
fn env_1_non_number_in_each_numeric_variable_names_it() {
    for var in [
        "VF_NB_TASKS",
        "VF_ACK_WAIT_SECONDS",
        "VF_MAX_RETRIES",
        "VF_EOS_QUIESCENCE_MS",
        "VF_HEALTH_PORT",
        "VF_ENVELOPE_VERSION",
        "VF_BREAKER_THRESHOLD",
        "VF_PROGRESS_TIMEOUT_SECONDS",
        "VF_WATCHDOG_INTERVAL_SECONDS",
        "VF_REPLICA_SLOTS",
        "VF_BLOB_READERS",
        "VF_BLOB_TTL_SECONDS",
        "VF_PREFETCH_BYTES",
        "VF_CREDIT_MESSAGES",
        "VF_GPU_COUNT",
        "VF_STORE_BACKPRESSURE_SECONDS",
    ] {
        let e = err(&with(&[(var, "abc")]));
        assert_eq!(e.message, format!("{var}='abc' is not a number."), "{var}");
        assert_eq!(e.context.get("value").and_then(|v| v.as_str()), Some("abc"));
    }
    // int() refuses an empty value where 1.0.4 reads `get(VAR, default)`.
    assert_eq!(
        msg(&[("VF_NB_TASKS", "")]),
        "VF_NB_TASKS='' is not a number."
    );
    // … and a float where it calls int().
    assert_eq!(
        msg(&[("VF_MAX_RETRIES", "1.5")]),
        "VF_MAX_RETRIES='1.5' is not a number."
    );
}

#[test]
fn env_1_python_int_and_float_forms_accepted() {
    let c = ok(&with(&[
        ("VF_NB_TASKS", " 2 "),
        ("VF_MAX_RETRIES", "+5"),
        ("VF_ACK_WAIT_SECONDS", "1_0"),
        ("VF_PROGRESS_TIMEOUT_SECONDS", " 1_0.5 "),
    ]));
    assert_eq!((c.nb_tasks, c.max_retries, c.ack_wait_seconds), (2, 5, 10));
    assert_eq!(c.progress_timeout_seconds, 10.5);
}

#[test]
fn env_1_json_variables_not_valid_json() {
    for var in [
        "VF_JOIN_POLICY_JSON",
        "VF_PROFILE_REQUESTS_JSON",
        "VF_NODE_PARAMS_JSON",
        "VF_ASSETS_JSON",
    ] {
        let m = msg(&[(var, "{nope")]);
        assert!(
            m.starts_with(&format!("{var} is not valid JSON: ")),
            "{var}: {m}"
        );
    }
    assert_eq!(
        msg(&[("VF_NODE_PARAMS_JSON", "[1]")]),
        "VF_NODE_PARAMS_JSON='[1]' is not a JSON object."
    );
    let c = ok(&with(&[("VF_NODE_PARAMS_JSON", r#"{"k": 1}"#)]));
    assert_eq!(c.node_params.get("k"), Some(&serde_json::json!(1)));
}

#[test]
fn env_1_unknown_node_kind_exact_text() {
    assert_eq!(
        msg(&[("VF_NODE_KIND", "sink")]),
        "Unknown VF_NODE_KIND: 'sink'."
    );
    assert_eq!(
        ok(&with(&[
            ("VF_NODE_KIND", "producer"),
            ("VF_PARENT_NAMES", "")
        ]))
        .kind,
        NodeKind::Producer
    );
}

#[test]
fn env_3_parent_order_and_empty_pieces() {
    let c = ok(&with(&[("VF_PARENT_NAMES", "b,,a, c,")]));
    assert_eq!(c.parent_names, vec!["b", "a", " c"]);
}

#[test]
fn env_has_children_exactly_one() {
    for (v, want) in [
        ("1", true),
        ("0", false),
        ("true", false),
        (" 1", false),
        ("", false),
    ] {
        assert_eq!(
            ok(&with(&[("VF_HAS_CHILDREN", v)])).has_children,
            want,
            "{v:?}"
        );
    }
}

#[test]
fn env_4_unknown_vf_variables_ignored() {
    let c = ok(&with(&[
        ("VF_RFC0006", "1"),
        ("VF_SOMETHING_NEW", "{garbage"),
        ("VF_STREAM_REPLICAS", "x"),
        ("VF_MAX_STREAMS", "x"),
        ("VF_COMPONENT_REF", "python3"),
        ("VF_PROTOCOL_VERSION", "zz"),
    ]));
    assert_eq!(c.node_name, "det");
}

#[test]
fn env_5_replica_id_cases() {
    let rid = |pairs: &[(&str, &str)]| ok(&with(pairs)).replica;
    let r = rid(&[("VF_REPLICA_ID", " 3 ")]);
    assert_eq!(
        (r.declared, r.source),
        (Some(3), ReplicaSource::ReplicaIdVar)
    );
    assert_eq!(rid(&[("VF_REPLICA_ID", "+2")]).declared, Some(2));
    assert_eq!(rid(&[("VF_REPLICA_ID", "1_0")]).declared, Some(10));
    assert_eq!(rid(&[("VF_REPLICA_ID", "-1")]).declared, Some(-1));
    let r = rid(&[("VF_REPLICA_ID", "abc"), ("POD_NAME", "web-7")]);
    assert_eq!((r.declared, r.source), (Some(7), ReplicaSource::PodName));
    let r = rid(&[
        ("VF_REPLICA_ID", ""),
        ("POD_NAME", "web"),
        ("HOSTNAME", "h-a-12"),
    ]);
    assert_eq!((r.declared, r.source), (Some(12), ReplicaSource::Hostname));
    let r = rid(&[("HOSTNAME", "x-")]);
    assert_eq!((r.declared, r.source), (None, ReplicaSource::NotDeclared));
    assert_eq!(ok(&with(&[("HOSTNAME", "x-")])).replica_id(), 0);
    assert_eq!(rid(&[("POD_NAME", "web-7a")]).declared, None);
}

#[test]
fn env_5_step_3_hook() {
    let c = ok(&with(&[("VF_NB_TASKS", "1"), ("VF_REPLICA_SLOTS", "3")]));
    assert_eq!(c.replica_slot_count(), 3);
    assert!(c.needs_slot_claim(true));
    assert!(!c.needs_slot_claim(false));
    let c = ok(&with(&[("VF_NB_TASKS", "3"), ("VF_REPLICA_ID", "1")]));
    assert!(!c.needs_slot_claim(true));
    let c = ok(&with(&[
        ("VF_NB_TASKS", "3"),
        ("VF_PARTITION_BY", "trace_id"),
    ]));
    assert!(!c.needs_slot_claim(true));
    // ENV-19: empty = VF_NB_TASKS.
    assert_eq!(
        ok(&with(&[("VF_NB_TASKS", "4"), ("VF_REPLICA_SLOTS", "")])).replica_slots,
        4
    );
}

#[test]
fn wire_2_envelope_version() {
    let e = err(&with(&[("VF_ENVELOPE_VERSION", "3")]));
    assert_eq!(
        e.message,
        "VF_ENVELOPE_VERSION=3 is not emittable by this build."
    );
    assert_eq!(e.remedy_text(), Some("Supported versions: (4,)."));
    assert_eq!(
        msg(&[("VF_ENVELOPE_VERSION", " +5 ")]),
        "VF_ENVELOPE_VERSION=5 is not emittable by this build."
    );
    assert_eq!(
        msg(&[("VF_ENVELOPE_VERSION", "v4")]),
        "VF_ENVELOPE_VERSION='v4' is not a number."
    );
    assert_eq!(
        ok(&with(&[("VF_ENVELOPE_VERSION", " 4")])).envelope_version,
        4
    );
}

#[test]
fn join_2_defaults_per_preset_flow_type() {
    let two = [("VF_PARENT_NAMES", "a,b")];
    for raw in [None, Some(""), Some("{}"), Some("null")] {
        for (ft, timeout, missing) in [
            ("batch", None, MissingPolicy::Wait),
            ("realtime", Some(10.0), MissingPolicy::Drop),
            // T3: any other value is not the batch preset.
            ("BATCH", Some(10.0), MissingPolicy::Drop),
        ] {
            let mut vars = with(&two);
            vars.insert("VF_FLOW_TYPE".into(), ft.into());
            if let Some(r) = raw {
                vars.insert("VF_JOIN_POLICY_JSON".into(), r.into());
            }
            let c = ok(&vars);
            assert_eq!(c.join_policy.timeout_seconds, timeout, "{ft} {raw:?}");
            assert_eq!(c.join_policy.missing, missing);
            assert_eq!(c.join_policy.max_pending, 256);
            assert!(!c.join_policy_explicit);
        }
    }
}

#[test]
fn join_1_explicit_policy_uses_constructor_defaults_and_is_validated() {
    let c = ok(&with(&[
        ("VF_PARENT_NAMES", "a,b"),
        ("VF_FLOW_TYPE", "batch"),
        ("VF_JOIN_POLICY_JSON", r#"{"max_pending": 8}"#),
    ]));
    assert!(c.join_policy_explicit);
    assert_eq!(c.join_policy.missing, MissingPolicy::Drop);
    assert_eq!(c.join_policy.timeout_seconds, None);
    assert_eq!(c.join_policy.max_pending, 8);
    let c = ok(&with(&[(
        "VF_JOIN_POLICY_JSON",
        r#"{"missing": "wait", "timeout_seconds": 3}"#,
    )]));
    assert_eq!(c.join_policy.timeout_seconds, None);

    let e = err(&with(&[
        ("VF_PARENT_NAMES", "a,b"),
        ("VF_JOIN_POLICY_JSON", r#"{"mode": "time"}"#),
    ]));
    assert_eq!(
        e.message,
        "VF_JOIN_POLICY_JSON is not a valid join policy: mode='time' requires a positive tolerance_ms"
    );
    assert!(msg(&[("VF_JOIN_POLICY_JSON", "[1]")]).contains("is not a JSON object"));
    assert!(msg(&[("VF_JOIN_POLICY_JSON", r#"{"missing": "x"}"#)]).contains("invalid missing"));
}

#[test]
fn stream_15_credit_examples() {
    let c = ok(&base());
    let credit = c.credit();
    assert_eq!(
        (credit.item_credit, credit.prefetch, credit.max_ack_pending),
        (1, 4, 5)
    );
    assert_eq!(
        ok(&with(&[("VF_NB_TASKS", "10")])).credit().max_ack_pending,
        50
    );
    let join = ok(&with(&[("VF_PARENT_NAMES", "a,b")]));
    assert_eq!(join.credit().item_credit, 257);
    assert_eq!(join.credit().max_ack_pending, 261);
    // Partitioned: per replica, not multiplied.
    let part = ok(&with(&[
        ("VF_NB_TASKS", "10"),
        ("VF_PARTITION_BY", "trace_id"),
    ]));
    assert!(part.is_partitioned());
    assert_eq!(part.credit().max_ack_pending, 5);
}

#[test]
fn stream_15a_requested_credit_and_replica_share() {
    let asked = ok(&with(&[("VF_CREDIT_MESSAGES", "64")]));
    assert_eq!(asked.credit_messages, Some(64));
    assert_eq!(asked.credit().max_ack_pending, 64);
    assert_eq!(asked.credit().item_credit, 1);
    // Shared by 10 replicas: 10 × 64; partitioned: 64 each.
    let shared = ok(&with(&[
        ("VF_CREDIT_MESSAGES", "64"),
        ("VF_NB_TASKS", "10"),
    ]));
    assert_eq!(shared.credit().max_ack_pending, 640);
    let part = ok(&with(&[
        ("VF_CREDIT_MESSAGES", "64"),
        ("VF_NB_TASKS", "10"),
        ("VF_PARTITION_BY", "trace_id"),
    ]));
    assert_eq!(part.credit().max_ack_pending, 64);
    // A join keeps the working-set rule whatever it is asked for.
    let join = ok(&with(&[
        ("VF_CREDIT_MESSAGES", "64"),
        ("VF_PARENT_NAMES", "a,b"),
    ]));
    assert_eq!(join.credit().max_ack_pending, 261);
    // Unset, empty, 0 or negative: STREAM-15's numbers.
    for v in ["", "0", "-3"] {
        let c = ok(&with(&[("VF_CREDIT_MESSAGES", v)]));
        assert_eq!(
            (c.credit_messages, c.credit().max_ack_pending),
            (None, 5),
            "{v:?}"
        );
    }
    // The share of a bound durable follows what it reports, not what was asked for.
    assert_eq!(asked.replica_share(5), 5);
    assert_eq!(asked.replica_share(300), 300);
    assert_eq!(shared.replica_share(50), 5, "10 replicas share 50");
    assert_eq!(shared.replica_share(7), 1, "at least one each");
    assert_eq!(
        part.replica_share(12),
        12,
        "a partitioned durable is the replica's own"
    );
    assert_eq!(asked.replica_share(-1), 64, "no limit: what it asked for");
}

#[test]
fn part_1_partitioning_active() {
    assert!(!ok(&with(&[("VF_PARTITION_BY", "cam")])).is_partitioned());
    assert!(!ok(&with(&[("VF_PARTITION_BY", ""), ("VF_NB_TASKS", "3")])).is_partitioned());
    assert!(ok(&with(&[("VF_PARTITION_BY", "cam"), ("VF_NB_TASKS", "3")])).is_partitioned());
}

#[test]
fn deliv_10_and_stream_5_delivery_presets() {
    let d = |pairs: &[(&str, &str)]| ok(&with(pairs));
    let batch = d(&[("VF_FLOW_TYPE", "batch")]);
    assert_eq!(batch.delivery, DeliveryMode::AtLeastOnce);
    assert_eq!(batch.max_deliver(false), 4);
    assert_eq!(batch.max_deliver(true), -1);
    let rt = d(&[]);
    assert_eq!(rt.delivery, DeliveryMode::BestEffort);
    assert_eq!(rt.max_deliver(false), 1);
    assert_eq!(rt.max_deliver(true), 1);
    assert_eq!(
        d(&[("VF_DELIVERY", "at-least-once"), ("VF_MAX_RETRIES", "0")]).max_deliver(false),
        1
    );
    assert_eq!(
        d(&[("VF_DELIVERY", "at-least-once")]).delivery,
        DeliveryMode::AtLeastOnce
    );
    // Unvalidated: any other non-empty value is best-effort, even in batch.
    let odd = d(&[("VF_FLOW_TYPE", "batch"), ("VF_DELIVERY", "exactly-once")]);
    assert_eq!(odd.delivery, DeliveryMode::BestEffort);
    // Empty = unset = preset.
    assert_eq!(
        d(&[("VF_FLOW_TYPE", "batch"), ("VF_DELIVERY", "")]).delivery,
        DeliveryMode::AtLeastOnce
    );
}

#[test]
fn t3_flow_type_predicates() {
    let odd = ok(&with(&[("VF_FLOW_TYPE", "BATCH")]));
    assert!(!odd.is_realtime());
    assert!(!odd.is_batch_preset());
    assert_eq!(odd.blob_ttl_seconds, 86400);
    assert_eq!(odd.delivery, DeliveryMode::BestEffort);
    let batch = ok(&with(&[("VF_FLOW_TYPE", "batch")]));
    assert!(batch.is_batch_preset() && !batch.is_realtime());
    assert_eq!(batch.blob_ttl_seconds, 86400);
}

#[test]
fn eos_3_quiescence_clamped() {
    assert_eq!(
        ok(&with(&[("VF_EOS_QUIESCENCE_MS", "-5")])).eos_quiescence_ms,
        0
    );
}

#[test]
fn err_2_on_error_exact_text() {
    let e = err(&with(&[("VF_ON_ERROR", "retry")]));
    assert_eq!(e.message, "VF_ON_ERROR='retry' is not a known disposition.");
    assert_eq!(
        e.remedy_text(),
        Some("Use one of: poison, transient, worker_fatal.")
    );
    let c = ok(&with(&[("VF_ON_ERROR", "worker_fatal")]));
    assert_eq!(c.on_error, OnError::WorkerFatal);
    assert!(c.on_error_explicit);
    assert_eq!(
        ok(&with(&[("VF_ON_ERROR", "")])).on_error,
        OnError::Transient
    );
}

#[test]
fn env_15_watchdog_exact_texts() {
    assert_eq!(
        msg(&[("VF_WATCHDOG_INTERVAL_SECONDS", "soon")]),
        "VF_WATCHDOG_INTERVAL_SECONDS='soon' is not a number."
    );
    assert_eq!(
        msg(&[("VF_WATCHDOG_INTERVAL_SECONDS", "-1")]),
        "VF_WATCHDOG_INTERVAL_SECONDS='-1' is negative."
    );
    assert_eq!(
        ok(&with(&[("VF_WATCHDOG_INTERVAL_SECONDS", "0")])).watchdog_interval_seconds,
        0.0
    );
    assert_eq!(
        ok(&with(&[("VF_WATCHDOG_INTERVAL_SECONDS", "")])).watchdog_interval_seconds,
        5.0
    );
}

#[test]
fn env_13_profile_requests_and_admission_timeout() {
    let req = r#"[{"channel": "det", "profile": "live_latest"}]"#;
    let c = ok(&with(&[
        ("VF_PROFILE_REQUESTS_JSON", req),
        ("VF_ADMISSION_TIMEOUT_SECONDS", "2.5"),
    ]));
    assert_eq!(c.profile_requests.len(), 1);
    assert_eq!(c.profile_requests[0].channel, "det");
    assert_eq!(c.profile_requests[0].profile, "live_latest");
    assert_eq!(c.admission_timeout_seconds, 2.5);
    assert_eq!(
        msg(&[
            ("VF_PROFILE_REQUESTS_JSON", req),
            ("VF_ADMISSION_TIMEOUT_SECONDS", "x")
        ]),
        "VF_ADMISSION_TIMEOUT_SECONDS='x' is not a number."
    );
    assert_eq!(
        msg(&[
            ("VF_PROFILE_REQUESTS_JSON", req),
            ("VF_ADMISSION_TIMEOUT_SECONDS", "0")
        ]),
        "VF_ADMISSION_TIMEOUT_SECONDS='0' is not positive."
    );
    // Parsed only when requests are named.
    for unnamed in ["", "[]"] {
        ok(&with(&[
            ("VF_PROFILE_REQUESTS_JSON", unnamed),
            ("VF_ADMISSION_TIMEOUT_SECONDS", "x"),
        ]));
    }
    assert!(
        msg(&[("VF_PROFILE_REQUESTS_JSON", r#"[{"channel": "det"}]"#)])
            .contains("has no 'profile'")
    );
}

#[test]
fn env_11_parent_replicas_exact_texts() {
    let c = ok(&with(&[
        ("VF_PARENT_NAMES", "a,b"),
        ("VF_PARENT_REPLICAS", " 2, 0"),
    ]));
    assert_eq!(c.parent_replicas, Some(vec![2, 0]));
    let e = err(&with(&[
        ("VF_PARENT_NAMES", "a,b"),
        ("VF_PARENT_REPLICAS", "x"),
    ]));
    // The count check comes first.
    assert_eq!(e.message, "VF_PARENT_REPLICAS has 1 entries for 2 parents.");
    assert_eq!(
        e.remedy_text(),
        Some("Emit one entry per name in VF_PARENT_NAMES, in the same order: a,b.")
    );
    assert_eq!(
        msg(&[("VF_PARENT_NAMES", "a,b"), ("VF_PARENT_REPLICAS", "1,-1")]),
        "VF_PARENT_REPLICAS entry '-1' for parent 'b' is not a count."
    );
    assert_eq!(
        ok(&with(&[("VF_PARENT_REPLICAS", "")])).parent_replicas,
        None
    );
}

#[test]
fn partition_lease_exact_texts() {
    assert_eq!(
        msg(&[("VF_PARTITION_LEASE_SECONDS", "ten")]),
        "VF_PARTITION_LEASE_SECONDS='ten' is not a number of seconds."
    );
    assert_eq!(
        msg(&[("VF_PARTITION_LEASE_SECONDS", "0")]),
        "VF_PARTITION_LEASE_SECONDS='0' must be positive."
    );
    assert_eq!(
        ok(&with(&[("VF_PARTITION_LEASE_SECONDS", " ")])).partition_lease_seconds,
        10.0
    );
}

#[test]
fn blob_16_store_admission_and_backpressure_exact_texts() {
    let redis = ("VF_BLOB_REDIS_URL", "redis://r:6379/0");
    assert_eq!(
        msg(&[redis, ("VF_STORE_ADMISSION", "x")]),
        "VF_STORE_ADMISSION='x' is not a number."
    );
    assert_eq!(
        msg(&[redis, ("VF_STORE_ADMISSION", "1.5")]),
        "VF_STORE_ADMISSION='1.5' is not in (0, 1]."
    );
    // Checked only when the obligation store is built.
    ok(&with(&[("VF_STORE_ADMISSION", "x")]));
    assert_eq!(
        msg(&[("VF_STORE_BACKPRESSURE_SECONDS", "-1")]),
        "VF_STORE_BACKPRESSURE_SECONDS='-1' is negative."
    );
}

#[test]
fn blob_5_and_7_readers_and_ttl() {
    for v in ["", "0", "-2"] {
        assert_eq!(
            ok(&with(&[("VF_BLOB_READERS", v)])).blob_readers,
            None,
            "{v:?}"
        );
    }
    assert_eq!(ok(&with(&[("VF_BLOB_READERS", "2")])).blob_readers, Some(2));
    assert_eq!(
        ok(&with(&[("VF_BLOB_TTL_SECONDS", "60")])).blob_ttl_seconds,
        60
    );
    let c = ok(&with(&[
        ("VF_BLOB_READER_IDS", "a,,b"),
        ("VF_BLOB_REDIS_URL", "unix:///s"),
    ]));
    assert_eq!(c.blob_reader_ids, vec!["a", "b"]);
    assert_eq!(c.blob_url.as_deref(), Some("unix:///s"));
}

#[test]
fn env_10_store_url_and_termination_log_defaults() {
    let c = ok(&with(&[
        ("VF_RUNTIME_STORE_URL", ""),
        ("VF_TERMINATION_LOG", ""),
    ]));
    assert_eq!(c.runtime_store_url, "memory://");
    assert_eq!(c.termination_log.to_str(), Some("/dev/termination-log"));
    let c = ok(&with(&[
        ("VF_RUNTIME_STORE_URL", "file:///tmp/l"),
        ("VF_TERMINATION_LOG", "/tmp/t"),
    ]));
    assert_eq!(c.runtime_store_url, "file:///tmp/l");
    assert_eq!(c.termination_log.to_str(), Some("/tmp/t"));
}

#[test]
fn env_14_device_variables() {
    let c = ok(&with(&[
        ("VF_DEVICE_TYPE", "gpu"),
        ("VF_GPU_COUNT", "2"),
        ("VF_GPU_FALLBACK", "cpu"),
        ("VF_GPU_REQUIRES_PEER_ACCESS", "1"),
        ("VF_GPU_RESOURCE_NAME", "nvidia.com/gpu"),
        ("VF_GPU_GRANT_JSON", r#"{"workload_id": "w"}"#),
        (
            "VF_ASSETS_JSON",
            r#"[{"path": "/m.bin", "sha256": "ab", "portable": true}]"#,
        ),
    ]));
    assert_eq!(c.device.device_type, DeviceType::Gpu);
    assert_eq!(c.device.gpu_count, 2);
    assert_eq!(c.device.gpu_fallback, Some(GpuFallback::Cpu));
    assert!(c.device.requires_peer_access);
    assert_eq!(
        c.device.gpu_resource_name.as_deref(),
        Some("nvidia.com/gpu")
    );
    assert!(c.device.gpu_grant_json.is_some());
    assert_eq!(c.device.assets.len(), 1);
    assert_eq!(c.device.assets[0].path, "/m.bin");
    assert!(c.device.assets[0].portable);
    assert!(msg(&[("VF_DEVICE_TYPE", "tpu")]).starts_with("VF_DEVICE_TYPE='tpu'"));
    assert!(
        msg(&[("VF_GPU_FALLBACK", "x")])
            .contains("gpu_fallback must be one of ('cpu', 'none'), got 'x'")
    );
    assert!(
        msg(&[("VF_GPU_REQUIRES_PEER_ACCESS", "yes")])
            .starts_with("VF_GPU_REQUIRES_PEER_ACCESS='yes'")
    );
    assert!(msg(&[("VF_ASSETS_JSON", r#"[{"sha256": "x"}]"#)]).contains("is not a list of assets"));
}

#[test]
fn structured_logs_truthy_words() {
    for (v, want) in [
        ("1", true),
        ("TRUE", true),
        ("Yes", true),
        ("0", false),
        ("on", false),
    ] {
        assert_eq!(
            ok(&with(&[("VF_STRUCTURED_LOGS", v)])).structured_logs,
            want,
            "{v}"
        );
    }
}

#[test]
fn env_1_prefetch_bytes_and_node_class() {
    let c = ok(&with(&[
        ("VF_PREFETCH_BYTES", "1048576"),
        ("VF_NODE_CLASS", "pkg.Det"),
    ]));
    assert_eq!(c.prefetch_bytes, Some(1_048_576));
    assert_eq!(c.node_class.as_deref(), Some("pkg.Det"));
    assert_eq!(ok(&with(&[("VF_PREFETCH_BYTES", "")])).prefetch_bytes, None);
}

/// Seconds a `Duration` cannot hold (`inf`, `1e300`) are refused at parse time with the
/// variable named, instead of panicking where the worker later waits on them.
#[test]
fn env_1_seconds_beyond_any_clock_are_config_errors_naming_the_variable() {
    for (var, value) in [
        ("VF_WATCHDOG_INTERVAL_SECONDS", "1e300"),
        ("VF_WATCHDOG_INTERVAL_SECONDS", "inf"),
        ("VF_PARTITION_LEASE_SECONDS", "inf"),
        ("VF_PARTITION_LEASE_SECONDS", "1e300"),
        ("VF_STORE_BACKPRESSURE_SECONDS", "1e300"),
        ("VF_PROGRESS_TIMEOUT_SECONDS", "inf"),
        ("VF_PROGRESS_TIMEOUT_SECONDS", "nan"),
        ("VF_PROGRESS_TIMEOUT_SECONDS", "1e300"),
    ] {
        let m = msg(&[(var, value)]);
        assert!(m.starts_with(var), "{var}={value}: {m}");
        assert!(m.contains("usable number of seconds"), "{var}={value}: {m}");
    }
    let e = err(&with(&[
        (
            "VF_PROFILE_REQUESTS_JSON",
            r#"[{"channel": "det", "profile": "live_latest"}]"#,
        ),
        ("VF_ADMISSION_TIMEOUT_SECONDS", "1e300"),
    ]));
    assert!(
        e.message.starts_with("VF_ADMISSION_TIMEOUT_SECONDS"),
        "{e:?}"
    );
    // The largest sensible values still parse.
    let c = ok(&with(&[
        ("VF_WATCHDOG_INTERVAL_SECONDS", "86400"),
        ("VF_PROGRESS_TIMEOUT_SECONDS", "-inf"),
    ]));
    assert_eq!(c.watchdog_interval_seconds, 86400.0);
    assert!(c.progress_timeout_seconds < 0.0, "≤ 0 disables (ERR-7)");
}

/// The exec component's variables are part of the typed contract; a bad deadline names its
/// variable, and `VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES` is read here too (BLOB-1).
#[test]
fn component_and_inline_threshold_are_typed() {
    let c = ok(&with(&[
        ("VF_COMPONENT_COMMAND_JSON", r#"["python3", "-m", "det"]"#),
        ("VF_COMPONENT_CALL_TIMEOUT_SECONDS", "0"),
        ("VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES", "1024"),
    ]));
    let component = c.component.expect("a component");
    assert_eq!(component.command, ["python3", "-m", "det"]);
    assert_eq!(component.call_timeout, None);
    assert_eq!(c.max_inline_payload_bytes, 1024);
    assert_eq!(ok(&base()).max_inline_payload_bytes, 524_288);
    assert!(ok(&base()).component.is_none());
    let e = WorkerConfig::from_env(&with(&[
        ("VF_COMPONENT_COMMAND_JSON", r#"["x"]"#),
        ("VF_COMPONENT_START_TIMEOUT_SECONDS", "1e300"),
    ]))
    .expect_err("refused");
    assert!(
        e.message.contains("VF_COMPONENT_START_TIMEOUT_SECONDS"),
        "{e:?}"
    );
}

#[test]
fn on_finish_exits_by_default_holds_when_asked_and_refuses_anything_else() {
    use videoflow_worker::config::OnFinish;
    assert_eq!(ok(&base()).on_finish, OnFinish::Exit);
    assert_eq!(ok(&with(&[("VF_ON_FINISH", "")])).on_finish, OnFinish::Exit);
    assert_eq!(
        ok(&with(&[("VF_ON_FINISH", "exit")])).on_finish,
        OnFinish::Exit
    );
    assert_eq!(
        ok(&with(&[("VF_ON_FINISH", "hold")])).on_finish,
        OnFinish::Hold
    );
    let e = err(&with(&[("VF_ON_FINISH", "Hold")]));
    assert!(e.message.contains("VF_ON_FINISH='Hold'"), "{}", e.message);
}

/// MSGID-6: `VF_REPLAYABLE` (a node's `replayable: true`) is `1`/`true` or `0`/`false`;
/// unset or empty is a live producer; anything else is `VF_CONFIG` naming the variable.
#[test]
fn msgid_6_vf_replayable_is_a_boolean() {
    assert!(!ok(&base()).replayable);
    for (v, want) in [
        ("", false),
        ("0", false),
        ("false", false),
        ("1", true),
        ("true", true),
    ] {
        assert_eq!(ok(&with(&[("VF_REPLAYABLE", v)])).replayable, want, "{v:?}");
    }
    let e = err(&with(&[("VF_REPLAYABLE", "yes")]));
    assert_eq!(e.code, ErrorCode::Config);
    assert!(e.message.contains("VF_REPLAYABLE='yes'"), "{}", e.message);
    assert!(
        e.remedy.as_deref().is_some_and(|r| r.contains("MSGID-6")),
        "{e:?}"
    );
}

/// `VF_STREAM_MAX_AGE_SECONDS` (`spec.broker.streamMaxAgeSeconds`): unset is no age bound;
/// a value is the `max_age` the worker ensures its streams with; below the streams' 120 s
/// duplicate window (JetStream refuses it) or not an integer is `VF_CONFIG` naming it.
#[test]
fn stream_max_age_is_read_and_bounded_by_the_duplicate_window() {
    assert_eq!(ok(&base()).stream_max_age, None);
    let mut v = base();
    v.insert("VF_STREAM_MAX_AGE_SECONDS".into(), "3600".into());
    assert_eq!(
        ok(&v).stream_max_age,
        Some(std::time::Duration::from_secs(3600))
    );
    for bad in ["119", "-1", "1.5", "soon"] {
        v.insert("VF_STREAM_MAX_AGE_SECONDS".into(), bad.into());
        let e = err(&v);
        assert!(
            e.message.contains("VF_STREAM_MAX_AGE_SECONDS"),
            "{bad}: {e:?}"
        );
    }
}

/// Which nodes run on a current-thread runtime (`runtime::light`): built-in processors and
/// consumers whose calls never block, without a component or a fault schedule.
#[test]
fn light_nodes_are_the_ones_that_never_block() {
    use videoflow_worker::config::Environment;
    use videoflow_worker::runtime::light;
    let node = |extra: &[(&str, &str)]| Environment::from_map(with(extra));
    let identity = ("VF_NODE_CLASS", "videoflow.processors.IdentityProcessor");
    assert!(light(&node(&[identity])));
    // Pacing sleeps in `process`: it may block.
    assert!(!light(&node(&[
        identity,
        ("VF_NODE_PARAMS_JSON", r#"{"fps": 5}"#)
    ])));
    assert!(light(&node(&[
        ("VF_NODE_KIND", "consumer"),
        ("VF_NODE_CLASS", "videoflow.consumers.VoidConsumer"),
    ])));
    // A sink that writes a file may block.
    assert!(!light(&node(&[
        ("VF_NODE_KIND", "consumer"),
        ("VF_NODE_CLASS", "videoflow.rs.consumers.JsonlSink"),
        ("VF_NODE_PARAMS_JSON", r#"{"path": "out.jsonl"}"#),
    ])));
    // A source that computes its items is, unpaced; paced, or reading its input, it is not.
    let source = |class, params| {
        light(&node(&[
            ("VF_NODE_KIND", "producer"),
            ("VF_PARENT_NAMES", ""),
            ("VF_NODE_CLASS", class),
            ("VF_NODE_PARAMS_JSON", params),
        ]))
    };
    assert!(source("videoflow.producers.IntProducer", "{}"));
    assert!(!source(
        "videoflow.producers.IntProducer",
        r#"{"wait_time_in_seconds": 0.1}"#
    ));
    assert!(source(
        "videoflow.rs.producers.SyntheticFrameProducer",
        r#"{"count": 3}"#
    ));
    assert!(!source(
        "videoflow.rs.producers.SyntheticFrameProducer",
        r#"{"count": 3, "fps": 30}"#
    ));
    assert!(!source(
        "videoflow.producers.VideoFileReader",
        r#"{"video_file": "in.mp4"}"#
    ));
    assert!(!source("videoflow.rs.producers.TickProducer", "{}"));
    // A component, a fault schedule, an unknown class, a broken environment: not light.
    assert!(!light(&node(&[
        identity,
        ("VF_COMPONENT_COMMAND_JSON", r#"["python3", "-m", "x"]"#),
    ])));
    assert!(!light(&node(&[
        identity,
        (
            "VF_FAULT_SCHEDULE_JSON",
            r#"[{"at": "after_open", "action": "crash"}]"#
        ),
    ])));
    assert!(!light(&node(&[("VF_NODE_CLASS", "no.such.Node")])));
    assert!(!light(&node(&[identity, ("VF_NODE_KIND", "sideways")])));
}
