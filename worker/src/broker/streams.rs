//! Streams: the node stream (STREAM-1/2/3) and the flow's DLQ stream (STREAM-8), with owner
//! labels (STREAM-14), ensured the way 1.0.4 ensures them (STREAM-7).
//!
//! Why create-then-update-then-read-back: a 1.0.4 worker brings its own and its parents'
//! streams in line with its flow type at start, and a broker that silently kept another
//! shape (INTEREST where LIMITS was asked, a clamped limit, labels of another run) would run
//! the flow with the wrong semantics. So the effective configuration is always read back and
//! every requested field compared; a mismatch is IncompatibleProfile, never a warning.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy};
use videoflow_core::naming;
use videoflow_core::partition::py_repr_str;

use super::compare::{Mismatches, repr_list};
use super::connect::Broker;
use super::error::{BrokerError, ResourceKind};

/// JetStream's duplicate window on every node stream: the span in which a repeated
/// `Nats-Msg-Id` is dropped (MSGID-1).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// STREAM-2: default REALTIME buffer (`max_msgs = max(1, realtime_buffer)`).
pub const DEFAULT_REALTIME_BUFFER: i64 = 1;
/// STREAM-3: BATCH `max_msgs`.
pub const BATCH_MAX_MSGS: i64 = 10_000;
/// STREAM-8: dead letters are kept 7 days.
pub const DLQ_MAX_AGE: Duration = Duration::from_secs(604_800);

/// The fields a stream is requested with: exactly those STREAM-14 compares on read-back.
/// `None` means "not requested, server default" and is never compared.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRequest {
    /// Stream name (NAME-3 / NAME-9).
    pub name: String,
    /// Bound subjects.
    pub subjects: Vec<String>,
    /// LIMITS (REALTIME, DLQ) or INTEREST (BATCH).
    pub retention: RetentionPolicy,
    /// OLD (REALTIME, DLQ) or NEW (BATCH: a full stream refuses, which is backpressure).
    pub discard: DiscardPolicy,
    /// Message cap.
    pub max_msgs: Option<i64>,
    /// Age cap: the DLQ's 7 days; a node stream's only when the Flow asks for one
    /// (`VF_STREAM_MAX_AGE_SECONDS`, [`StreamRequest::with_max_age`]).
    pub max_age: Option<Duration>,
    /// Duplicate window (node streams).
    pub duplicate_window: Option<Duration>,
    /// Set only when `VF_STREAM_REPLICAS > 1`.
    pub num_replicas: Option<usize>,
    /// Owner labels (STREAM-14).
    pub metadata: BTreeMap<String, String>,
}

/// `num_replicas` is requested only above 1 (§3.1).
fn replicas(stream_replicas: Option<i64>) -> Option<usize> {
    stream_replicas
        .filter(|n| *n > 1)
        .and_then(|n| usize::try_from(n).ok())
}

impl StreamRequest {
    /// The node stream of `node` (STREAM-1 subjects, STREAM-2 REALTIME or STREAM-3 BATCH
    /// shape, STREAM-14 labels with kind `stream`). `realtime` is `VF_FLOW_TYPE ==
    /// "realtime"` exactly (T3).
    pub fn node(
        flow: &str,
        run: &str,
        node: &str,
        realtime: bool,
        stream_replicas: Option<i64>,
    ) -> Self {
        let (retention, discard, max_msgs) = if realtime {
            (
                RetentionPolicy::Limits,
                DiscardPolicy::Old,
                DEFAULT_REALTIME_BUFFER.max(1),
            )
        } else {
            (
                RetentionPolicy::Interest,
                DiscardPolicy::New,
                BATCH_MAX_MSGS,
            )
        };
        StreamRequest {
            name: naming::stream_name(flow, run, node),
            subjects: vec![
                naming::data_subject(flow, run, node),
                naming::eos_subject(flow, run, node),
            ],
            retention,
            discard,
            max_msgs: Some(max_msgs),
            max_age: None,
            duplicate_window: Some(DUPLICATE_WINDOW),
            num_replicas: replicas(stream_replicas),
            metadata: BTreeMap::from([
                (naming::LABEL_FLOW_ID.to_owned(), flow.to_owned()),
                (naming::LABEL_RUN_ID.to_owned(), run.to_owned()),
                (naming::LABEL_NODE.to_owned(), node.to_owned()),
                (naming::LABEL_KIND.to_owned(), "stream".to_owned()),
            ]),
        }
    }

    /// The same request with an age bound (`max_age`), requested and read back like every
    /// other field. An extension of STREAM-2/3: a 1.0.4 worker, which ensures its own and its
    /// parents' streams without one, updates the bound away (STREAM-7), and ours puts it back
    /// when it starts (docs/COMPATIBILITY.md D19).
    #[must_use]
    pub fn with_max_age(mut self, max_age: Option<Duration>) -> Self {
        self.max_age = max_age;
        self
    }

    /// The flow's DLQ stream (STREAM-8; labels flow-id and kind `dlq` only, so no run's
    /// teardown ever owns it).
    pub fn dlq(flow: &str, stream_replicas: Option<i64>) -> Self {
        StreamRequest {
            name: naming::dlq_stream_name(flow),
            subjects: vec![naming::dlq_binding(flow)],
            retention: RetentionPolicy::Limits,
            discard: DiscardPolicy::Old,
            max_msgs: None,
            max_age: Some(DLQ_MAX_AGE),
            duplicate_window: None,
            num_replicas: replicas(stream_replicas),
            metadata: BTreeMap::from([
                (naming::LABEL_FLOW_ID.to_owned(), flow.to_owned()),
                (naming::LABEL_KIND.to_owned(), "dlq".to_owned()),
            ]),
        }
    }

    /// The JetStream configuration sent. Unrequested fields keep the client's defaults,
    /// which the server reads as its own defaults (storage file, unlimited bytes).
    pub fn to_config(&self) -> stream::Config {
        stream::Config {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
            retention: self.retention,
            discard: self.discard,
            max_messages: self.max_msgs.unwrap_or_default(),
            max_age: self.max_age.unwrap_or_default(),
            duplicate_window: self.duplicate_window.unwrap_or_default(),
            num_replicas: self.num_replicas.unwrap_or_default(),
            metadata: self.metadata.clone().into_iter().collect(),
            ..Default::default()
        }
    }

    /// STREAM-14: the requested fields `effective` does not honour, rendered like 1.0.4.
    pub fn mismatches(&self, effective: &stream::Config) -> Vec<String> {
        let mut m = Mismatches::default();
        m.field(
            "name",
            py_repr_str(&self.name),
            py_repr_str(&effective.name),
        );
        m.field(
            "subjects",
            repr_list(&self.subjects),
            repr_list(&effective.subjects),
        );
        m.field(
            "retention",
            py_repr_str(retention_word(self.retention)),
            py_repr_str(retention_word(effective.retention)),
        );
        m.field(
            "discard",
            py_repr_str(discard_word(self.discard)),
            py_repr_str(discard_word(effective.discard)),
        );
        if let Some(want) = self.max_msgs {
            m.field(
                "max_msgs",
                want.to_string(),
                effective.max_messages.to_string(),
            );
        }
        if let Some(want) = self.max_age {
            m.duration("max_age", want, effective.max_age);
        }
        // duplicate_window 0 means "unset" and is skipped (STREAM-14).
        if let Some(want) = self.duplicate_window.filter(|d| !d.is_zero()) {
            m.duration("duplicate_window", want, effective.duplicate_window);
        }
        if let Some(want) = self.num_replicas {
            m.field(
                "num_replicas",
                want.to_string(),
                effective.num_replicas.to_string(),
            );
        }
        m.metadata(&self.metadata, &effective.metadata);
        m.into_vec()
    }
}

/// The protocol word of a retention policy (`limits`, `interest`, `workqueue`).
pub fn retention_word(r: RetentionPolicy) -> &'static str {
    match r {
        RetentionPolicy::Limits => "limits",
        RetentionPolicy::Interest => "interest",
        RetentionPolicy::WorkQueue => "workqueue",
    }
}

/// The protocol word of a discard policy (`old`, `new`).
pub fn discard_word(d: DiscardPolicy) -> &'static str {
    match d {
        DiscardPolicy::Old => "old",
        DiscardPolicy::New => "new",
    }
}

/// How [`ensure_stream`] reached the effective configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnsureAction {
    /// The create was accepted: the stream is new, or existed with an identical
    /// configuration (JetStream's create is idempotent then) — nothing was changed.
    Accepted,
    /// The stream existed with another configuration and was updated (the update replaces
    /// the whole configuration, metadata included).
    Updated,
    /// The update was refused; the configuration was read back as it is.
    ReadBack,
}

/// A stream after [`ensure_stream`]: verified against the request.
#[derive(Debug, Clone)]
pub struct EnsuredStream {
    /// What was done.
    pub action: EnsureAction,
    /// The configuration the broker holds (equal to the request on every requested field).
    pub effective: stream::Config,
}

/// A create refused because the name exists: the server's text is the only stable signal
/// (1.0.4 matches `already in use` too).
fn already_exists(error: &impl std::fmt::Display) -> bool {
    error.to_string().contains("already in use")
}

/// Creates the stream, or updates an existing one that differs, then reads it back and
/// compares every requested field (STREAM-7, STREAM-14).
///
/// # Errors
/// IncompatibleProfile when a requested field is not what the broker holds;
/// BrokerUnavailable when the stream can be neither created/updated nor read back.
pub async fn ensure_stream(
    broker: &Broker,
    request: &StreamRequest,
) -> Result<EnsuredStream, BrokerError> {
    let js = broker.jetstream();
    let config = request.to_config();
    let (action, effective) = match js.create_stream(config.clone()).await {
        Ok(created) => (EnsureAction::Accepted, created.cached_info().config.clone()),
        Err(e) if already_exists(&e) => match js
            .update_stream(&keep_unrequested(js, request, config).await)
            .await
        {
            Ok(info) => (EnsureAction::Updated, info.config),
            Err(refused) => {
                tracing::debug!(stream = %request.name, error = %refused, "stream update refused");
                match js.get_stream(&request.name).await {
                    Ok(existing) => (
                        EnsureAction::ReadBack,
                        existing.cached_info().config.clone(),
                    ),
                    Err(_) => {
                        return Err(BrokerError::unverifiable(
                            ResourceKind::Stream,
                            &request.name,
                            refused,
                        ));
                    }
                }
            }
        },
        Err(e) => {
            return Err(BrokerError::unverifiable(
                ResourceKind::Stream,
                &request.name,
                e,
            ));
        }
    };
    let mismatches = request.mismatches(&effective);
    if !mismatches.is_empty() {
        return Err(BrokerError::IncompatibleProfile {
            kind: ResourceKind::Stream,
            name: request.name.clone(),
            mismatches,
        });
    }
    Ok(EnsuredStream { action, effective })
}

/// `config` for the update of an existing stream: an update replaces the whole configuration,
/// so a field the caller did not request keeps the stream's value instead of the client's
/// default. Today that is `num_replicas`: a worker ensures its streams without a replica count
/// (only the provision job gets `VF_STREAM_REPLICAS`), and sending the default would shrink
/// the R3 streams of a clustered broker to one replica.
async fn keep_unrequested(
    js: &async_nats::jetstream::Context,
    request: &StreamRequest,
    mut config: stream::Config,
) -> stream::Config {
    if request.num_replicas.is_none()
        && let Ok(existing) = js.get_stream(&request.name).await
    {
        config.num_replicas = existing.cached_info().config.num_replicas;
    }
    config
}

/// Ensures `node`'s stream with the shape of the caller's flow type (a worker ensures its
/// own stream and each parent's this way, STREAM-7).
///
/// # Errors
/// As [`ensure_stream`].
pub async fn ensure_node_stream(
    broker: &Broker,
    flow: &str,
    run: &str,
    node: &str,
    realtime: bool,
    stream_replicas: Option<i64>,
) -> Result<EnsuredStream, BrokerError> {
    ensure_aged_node_stream(broker, flow, run, node, realtime, stream_replicas, None).await
}

/// [`ensure_node_stream`] with the Flow's age bound (`VF_STREAM_MAX_AGE_SECONDS`), as the
/// provisioner and every worker of the Flow ensure them.
///
/// # Errors
/// As [`ensure_stream`].
pub async fn ensure_aged_node_stream(
    broker: &Broker,
    flow: &str,
    run: &str,
    node: &str,
    realtime: bool,
    stream_replicas: Option<i64>,
    max_age: Option<Duration>,
) -> Result<EnsuredStream, BrokerError> {
    let request =
        StreamRequest::node(flow, run, node, realtime, stream_replicas).with_max_age(max_age);
    ensure_stream(broker, &request).await
}

/// Ensures the flow-scoped DLQ stream (STREAM-8).
///
/// # Errors
/// As [`ensure_stream`].
pub async fn ensure_dlq_stream(
    broker: &Broker,
    flow: &str,
    stream_replicas: Option<i64>,
) -> Result<EnsuredStream, BrokerError> {
    ensure_stream(broker, &StreamRequest::dlq(flow, stream_replicas)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_2_and_3_shapes() {
        let rt = StreamRequest::node("f", "r", "cam", true, None);
        assert_eq!(rt.name, "vf-f-r-cam");
        assert_eq!(rt.subjects, vec!["vf.f.r.cam", "vf.f.r.cam._eos"]);
        assert_eq!(rt.retention, RetentionPolicy::Limits);
        assert_eq!(rt.discard, DiscardPolicy::Old);
        assert_eq!(rt.max_msgs, Some(1));
        assert_eq!(rt.num_replicas, None);
        let batch = StreamRequest::node("f", "r", "cam", false, Some(3));
        assert_eq!(batch.retention, RetentionPolicy::Interest);
        assert_eq!(batch.discard, DiscardPolicy::New);
        assert_eq!(batch.max_msgs, Some(10_000));
        assert_eq!(batch.num_replicas, Some(3));
        assert_eq!(batch.metadata.len(), 4);
        assert_eq!(batch.max_age, None, "STREAM-3 has no age bound");
        let aged = batch.with_max_age(Some(Duration::from_secs(3600)));
        assert_eq!(aged.to_config().max_age, Duration::from_secs(3600));
        let mut got = aged.to_config();
        got.max_age = Duration::ZERO;
        assert_eq!(
            aged.mismatches(&got),
            vec!["max_age: requested 3600, effective 0.0"]
        );
    }

    #[test]
    fn stream_14_mismatch_rendering() {
        let want = StreamRequest::node("f", "r", "cam", true, None);
        let mut got = want.to_config();
        got.retention = RetentionPolicy::Interest;
        got.max_messages = 10_000;
        got.metadata.insert("_nats.ver".into(), "2.15.1".into());
        assert_eq!(
            want.mismatches(&got),
            vec![
                "retention: requested 'limits', effective 'interest'",
                "max_msgs: requested 1, effective 10000",
            ]
        );
    }
}
