//! Durables: data durables (NAME-5 shared, NAME-6 partitioned; STREAM-4/5/15), per-replica
//! EOS durables (STREAM-6), the EOS interest anchor, and consumer observations.
//!
//! Why bind-don't-fight (T9): a durable is shared state — its ack floor and redelivery
//! counts belong to every replica and survive restarts. So a worker binds an existing durable
//! by name and accepts its effective configuration (never updates it), creates a missing one
//! from its own configuration, and leaves the credit check (STREAM-15) to its caller, which
//! reads [`BoundDurable::max_ack_pending`]. A JetStream 503 while binding is the meta layer
//! without a leader for a moment, so it is retried on STREAM-7's schedule.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::consumer::{
    self, AckPolicy, Consumer, DeliverPolicy, FromConsumer, PullConsumer, ReplayPolicy, pull,
};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::stream::ConsumerCreateStrictErrorKind;
use videoflow_core::naming;
use videoflow_core::partition::py_repr_str;
use videoflow_core::scaling::Observation;

use super::compare::Mismatches;
use super::connect::Broker;
use super::error::{BrokerError, REMEDY_BIND_UNAVAILABLE, ResourceKind};
use crate::config::WorkerConfig;

/// STREAM-6: EOS durables and the anchor wait 30 s for an ack.
pub const EOS_ACK_WAIT: Duration = Duration::from_secs(30);
/// STREAM-6: an EOS durable of a process that is gone is reaped after an hour.
pub const EOS_INACTIVE_THRESHOLD: Duration = Duration::from_secs(3600);
/// STREAM-7: a bind refused with 503 is tried this many times in all.
pub const BIND_ATTEMPTS: usize = 6;
/// STREAM-7: sleeps between bind attempts.
pub const BIND_BACKOFF: [Duration; 5] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];
/// How long one consumer observation may take before it is Unknown.
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a durable is for; its STREAM-14 `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableKind {
    /// NAME-5: shared by every replica of the child (competing consumers).
    Shared,
    /// NAME-6: one replica's own durable on a partitioned edge.
    Partitioned,
    /// NAME-7: one running replica's terminator durable.
    Eos,
    /// The never-fetched interest anchor on a node's own terminator subject.
    Anchor,
}

impl DurableKind {
    /// The `videoflow.io/kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            DurableKind::Shared => "durable",
            DurableKind::Partitioned => "partitioned_durable",
            DurableKind::Eos => "eos_durable",
            DurableKind::Anchor => "eos_anchor",
        }
    }
}

/// The configuration a durable is created with when missing. `None` fields are left to the
/// server (and not compared).
#[derive(Debug, Clone, PartialEq)]
pub struct DurableRequest {
    /// The stream the durable lives on (the parent's, or the node's own for the anchor).
    pub stream: String,
    /// Durable name (NAME-5/6/7 or the anchor).
    pub name: String,
    /// What it is for.
    pub kind: DurableKind,
    /// The one subject it filters.
    pub filter_subject: String,
    /// `ack_wait`.
    pub ack_wait: Duration,
    /// `max_deliver` (STREAM-5); `None` for terminator durables.
    pub max_deliver: Option<i64>,
    /// `max_ack_pending` (STREAM-15); `None` for terminator durables.
    pub max_ack_pending: Option<i64>,
    /// `inactive_threshold` (EOS durables only).
    pub inactive_threshold: Option<Duration>,
    /// Owner labels (STREAM-14): flow, run, the consuming node, kind.
    pub metadata: BTreeMap<String, String>,
}

fn labels(flow: &str, run: &str, node: &str, kind: DurableKind) -> BTreeMap<String, String> {
    BTreeMap::from([
        (naming::LABEL_FLOW_ID.to_owned(), flow.to_owned()),
        (naming::LABEL_RUN_ID.to_owned(), run.to_owned()),
        (naming::LABEL_NODE.to_owned(), node.to_owned()),
        (naming::LABEL_KIND.to_owned(), kind.label().to_owned()),
    ])
}

/// NAME-6 for any declared replica id: 1.0.4 keeps a negative id as it is.
fn partitioned_name(child: &str, parent: &str, replica: i64) -> String {
    match u32::try_from(replica) {
        Ok(r) => naming::partitioned_durable_name(child, parent, r),
        Err(_) => format!("{}--p{replica}", naming::durable_name(child, parent)),
    }
}

impl DurableRequest {
    /// STREAM-4: the data durable `child` reads `parent` through — shared (NAME-5) when
    /// `partition` is `None`, else that replica's own (NAME-6) — on the parent's stream,
    /// filtering the parent's data subject.
    #[allow(clippy::too_many_arguments)]
    pub fn data(
        flow: &str,
        run: &str,
        child: &str,
        parent: &str,
        partition: Option<i64>,
        ack_wait: Duration,
        max_deliver: i64,
        max_ack_pending: i64,
    ) -> Self {
        let (name, kind) = match partition {
            None => (naming::durable_name(child, parent), DurableKind::Shared),
            Some(replica) => (
                partitioned_name(child, parent, replica),
                DurableKind::Partitioned,
            ),
        };
        DurableRequest {
            stream: naming::stream_name(flow, run, parent),
            name,
            kind,
            filter_subject: naming::data_subject(flow, run, parent),
            ack_wait,
            max_deliver: Some(max_deliver),
            max_ack_pending: Some(max_ack_pending),
            inactive_threshold: None,
            metadata: labels(flow, run, child, kind),
        }
    }

    /// The data durable a worker binds for `parent`, from its configuration: partitioned iff
    /// PART-1, `ack_wait` = `VF_ACK_WAIT_SECONDS`, `max_deliver` per STREAM-5
    /// (`ledger_caps_attempts`: the runtime store is durable and shared), `max_ack_pending`
    /// per STREAM-15.
    pub fn data_for(cfg: &WorkerConfig, parent: &str, ledger_caps_attempts: bool) -> Self {
        let partition = cfg.is_partitioned().then(|| cfg.replica_id());
        let ack_wait = Duration::from_secs(u64::try_from(cfg.ack_wait_seconds).unwrap_or(0));
        DurableRequest::data(
            &cfg.flow_id,
            &cfg.run_id,
            &cfg.node_name,
            parent,
            partition,
            ack_wait,
            cfg.max_deliver(ledger_caps_attempts),
            cfg.credit().max_ack_pending,
        )
    }

    /// STREAM-6: this running replica's terminator durable on `parent` (NAME-7).
    pub fn eos(flow: &str, run: &str, child: &str, parent: &str, instance: &str) -> Self {
        DurableRequest {
            stream: naming::stream_name(flow, run, parent),
            name: naming::eos_durable_name(child, parent, instance),
            kind: DurableKind::Eos,
            filter_subject: naming::eos_subject(flow, run, parent),
            ack_wait: EOS_ACK_WAIT,
            max_deliver: None,
            max_ack_pending: None,
            inactive_threshold: Some(EOS_INACTIVE_THRESHOLD),
            metadata: labels(flow, run, child, DurableKind::Eos),
        }
    }

    /// The EOS interest anchor of `node` (on its own stream, never fetched), so a BATCH
    /// terminator published before a slow child binds is retained (T9).
    pub fn eos_anchor(flow: &str, run: &str, node: &str) -> Self {
        DurableRequest {
            stream: naming::stream_name(flow, run, node),
            name: naming::eos_anchor_name(node),
            kind: DurableKind::Anchor,
            filter_subject: naming::eos_subject(flow, run, node),
            ack_wait: EOS_ACK_WAIT,
            max_deliver: None,
            max_ack_pending: None,
            inactive_threshold: None,
            metadata: labels(flow, run, node, DurableKind::Anchor),
        }
    }

    /// `stream/durable`, the name messages use for a consumer.
    pub fn label(&self) -> String {
        format!("{}/{}", self.stream, self.name)
    }

    /// The pull configuration sent on create; deliver/ack/replay policies are the server
    /// defaults (all / explicit / instant).
    pub fn to_config(&self) -> pull::Config {
        pull::Config {
            durable_name: Some(self.name.clone()),
            filter_subject: self.filter_subject.clone(),
            ack_wait: self.ack_wait,
            max_deliver: self.max_deliver.unwrap_or_default(),
            max_ack_pending: self.max_ack_pending.unwrap_or_default(),
            inactive_threshold: self.inactive_threshold.unwrap_or_default(),
            metadata: self.metadata.clone().into_iter().collect(),
            ..Default::default()
        }
    }

    /// STREAM-14's consumer comparison of `effective` against this request. A worker only
    /// logs these (it accepts a bound durable as it is); a provisioner fails on them.
    pub fn mismatches(&self, effective: &consumer::Config) -> Vec<String> {
        let mut m = Mismatches::default();
        let got_name = effective.durable_name.clone().unwrap_or_default();
        m.field(
            "durable_name",
            py_repr_str(&self.name),
            py_repr_str(&got_name),
        );
        m.field(
            "filter_subject",
            py_repr_str(&self.filter_subject),
            py_repr_str(&effective.filter_subject),
        );
        m.field(
            "deliver_policy",
            py_repr_str("all"),
            py_repr_str(deliver_word(&effective.deliver_policy)),
        );
        m.field(
            "ack_policy",
            py_repr_str("explicit"),
            py_repr_str(ack_word(effective.ack_policy)),
        );
        m.field(
            "replay_policy",
            py_repr_str("instant"),
            py_repr_str(replay_word(effective.replay_policy)),
        );
        m.duration("ack_wait", self.ack_wait, effective.ack_wait);
        if let Some(want) = self.max_deliver {
            m.field(
                "max_deliver",
                want.to_string(),
                effective.max_deliver.to_string(),
            );
        }
        if let Some(want) = self.max_ack_pending {
            m.field(
                "max_ack_pending",
                want.to_string(),
                effective.max_ack_pending.to_string(),
            );
        }
        if let Some(want) = self.inactive_threshold {
            m.duration("inactive_threshold", want, effective.inactive_threshold);
        }
        m.metadata(&self.metadata, &effective.metadata);
        m.into_vec()
    }
}

fn deliver_word(p: &DeliverPolicy) -> &'static str {
    match p {
        DeliverPolicy::All => "all",
        DeliverPolicy::Last => "last",
        DeliverPolicy::New => "new",
        DeliverPolicy::ByStartSequence { .. } => "by_start_sequence",
        DeliverPolicy::ByStartTime { .. } => "by_start_time",
        DeliverPolicy::LastPerSubject => "last_per_subject",
    }
}

fn ack_word(p: AckPolicy) -> &'static str {
    match p {
        AckPolicy::Explicit => "explicit",
        AckPolicy::None => "none",
        AckPolicy::All => "all",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

fn replay_word(p: ReplayPolicy) -> &'static str {
    match p {
        ReplayPolicy::Instant => "instant",
        ReplayPolicy::Original => "original",
    }
}

/// A durable this worker is bound to.
#[derive(Debug, Clone)]
pub struct BoundDurable {
    /// The stream it lives on.
    pub stream: String,
    /// Its name.
    pub name: String,
    /// What it is for.
    pub kind: DurableKind,
    /// Whether this call created it (else an existing durable was bound as it is).
    pub created: bool,
    /// The configuration the broker holds — authoritative over the request.
    pub effective: consumer::Config,
    /// Requested fields the effective configuration differs on (informational: a worker
    /// never updates a durable; log them).
    pub mismatches: Vec<String>,
    consumer: PullConsumer,
}

impl BoundDurable {
    /// The effective `ack_wait`: what the keepalive period derives from (DELIV-3).
    pub fn ack_wait(&self) -> Duration {
        self.effective.ack_wait
    }

    /// The effective `max_ack_pending` (STREAM-15's join credit check reads this).
    pub fn max_ack_pending(&self) -> i64 {
        self.effective.max_ack_pending
    }

    /// The effective `max_deliver` (−1: unlimited, the ledger counts attempts).
    pub fn max_deliver(&self) -> i64 {
        self.effective.max_deliver
    }

    /// The pull consumer handle the inbound pull loop fetches from.
    pub fn consumer(&self) -> &PullConsumer {
        &self.consumer
    }

    /// `stream/durable`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.stream, self.name)
    }

    /// This durable's counts now; see [`observe_consumer`].
    pub async fn observe(&self, broker: &Broker) -> Observation<ConsumerCounts> {
        observe_consumer(broker, &self.stream, &self.name).await
    }
}

/// One bind attempt's failure: retryable 503, or final.
enum BindFailure {
    Unavailable(String),
    Fatal(BrokerError),
}

fn is_503(error: &async_nats::jetstream::Error) -> bool {
    error.code() == 503
}

fn bound(
    broker: &Broker,
    request: &DurableRequest,
    info: consumer::Info,
    created: bool,
) -> Result<BoundDurable, BindFailure> {
    let config = pull::Config::try_from_consumer_config(info.config.clone()).map_err(|e| {
        BindFailure::Fatal(BrokerError::unverifiable(
            ResourceKind::Consumer,
            &request.label(),
            format!("not a pull consumer: {e}"),
        ))
    })?;
    let effective = info.config.clone();
    let mismatches = request.mismatches(&effective);
    if !mismatches.is_empty() {
        tracing::info!(
            durable = %request.label(),
            mismatches = %mismatches.join("; "),
            "bound an existing durable whose configuration differs from ours; accepted as is"
        );
    }
    Ok(BoundDurable {
        stream: request.stream.clone(),
        name: request.name.clone(),
        kind: request.kind,
        created,
        effective,
        mismatches,
        consumer: Consumer::new(config, info, broker.jetstream().clone()),
    })
}

async fn bind_once(broker: &Broker, request: &DurableRequest) -> Result<BoundDurable, BindFailure> {
    let label = request.label();
    let fatal = |e: &dyn std::fmt::Display| {
        BindFailure::Fatal(BrokerError::unverifiable(ResourceKind::Consumer, &label, e))
    };
    let stream = broker
        .jetstream()
        .get_stream_no_info(&request.stream)
        .await
        .map_err(|e| fatal(&e))?;
    match stream.consumer_info(&request.name).await {
        Ok(info) => return bound(broker, request, info, false),
        Err(e) => match e.kind() {
            ConsumerInfoErrorKind::NotFound => {}
            ConsumerInfoErrorKind::JetStream(js) if is_503(&js) => {
                return Err(BindFailure::Unavailable(js.to_string()));
            }
            _ => return Err(fatal(&e)),
        },
    }
    match stream.create_consumer_strict(request.to_config()).await {
        Ok(created) => {
            let info = created.cached_info().clone();
            bound(broker, request, info, true)
        }
        Err(e) => {
            if let ConsumerCreateStrictErrorKind::JetStream(js) = e.kind()
                && is_503(&js)
            {
                return Err(BindFailure::Unavailable(js.to_string()));
            }
            // Refused (e.g. another replica created it a moment ago): read it back as it is.
            tracing::debug!(durable = %label, error = %e, "durable create refused; reading back");
            match stream.consumer_info(&request.name).await {
                Ok(info) => bound(broker, request, info, false),
                Err(_) => Err(fatal(&e)),
            }
        }
    }
}

/// Binds the durable `request` names, creating it from `request` when missing (STREAM-7).
/// A 503 is retried [`BIND_ATTEMPTS`] times with [`BIND_BACKOFF`] sleeps.
///
/// # Errors
/// BrokerUnavailable `binding <durable> on <stream>: JetStream stayed unavailable through 6
/// attempts (…)` after the last 503; BrokerUnavailable `consumer <stream>/<durable> could not
/// be provisioned or read back: <error>` for anything else.
pub async fn bind_or_create(
    broker: &Broker,
    request: &DurableRequest,
) -> Result<BoundDurable, BrokerError> {
    let mut attempt = 0;
    loop {
        match bind_once(broker, request).await {
            Ok(durable) => return Ok(durable),
            Err(BindFailure::Fatal(e)) => return Err(e),
            Err(BindFailure::Unavailable(detail)) => {
                attempt += 1;
                if attempt >= BIND_ATTEMPTS {
                    return Err(BrokerError::Unavailable {
                        message: format!(
                            "binding {} on {}: JetStream stayed unavailable through \
                             {BIND_ATTEMPTS} attempts ({detail})",
                            request.name, request.stream
                        ),
                        remedy: REMEDY_BIND_UNAVAILABLE.to_owned(),
                        resource: Some(request.label()),
                    });
                }
                tracing::warn!(
                    durable = %request.name, stream = %request.stream, %detail,
                    "JetStream temporarily unavailable while binding; retrying"
                );
                let pause = BIND_BACKOFF[(attempt - 1).min(BIND_BACKOFF.len() - 1)];
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Binds this worker's data durable on a parent (NAME-5 or NAME-6; see
/// [`DurableRequest::data_for`]). The caller checks STREAM-15's join credit against
/// [`BoundDurable::max_ack_pending`].
///
/// # Errors
/// As [`bind_or_create`].
pub async fn bind_data_durable(
    broker: &Broker,
    request: &DurableRequest,
) -> Result<BoundDurable, BrokerError> {
    bind_or_create(broker, request).await
}

/// Creates (or binds, after a restart under the same instance id) this replica's EOS
/// durable on `parent` (STREAM-6).
///
/// # Errors
/// As [`bind_or_create`].
pub async fn create_eos_durable(
    broker: &Broker,
    flow: &str,
    run: &str,
    child: &str,
    parent: &str,
    instance: &str,
) -> Result<BoundDurable, BrokerError> {
    bind_or_create(
        broker,
        &DurableRequest::eos(flow, run, child, parent, instance),
    )
    .await
}

/// Ensures `node`'s EOS interest anchor (for a node with children).
///
/// # Errors
/// As [`bind_or_create`].
pub async fn ensure_eos_anchor(
    broker: &Broker,
    flow: &str,
    run: &str,
    node: &str,
) -> Result<BoundDurable, BrokerError> {
    bind_or_create(broker, &DurableRequest::eos_anchor(flow, run, node)).await
}

/// A consumer's broker-side counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerCounts {
    /// Messages the durable has not delivered yet.
    pub num_pending: u64,
    /// Messages delivered and not yet acked.
    pub num_ack_pending: u64,
}

/// Reads a durable's counts. A failed or slow read ([`OBSERVE_TIMEOUT`]) is `Unknown` with
/// its reason — never zero (T11): the drain and the progress deadline would otherwise read
/// a broker outage as "nothing left".
pub async fn observe_consumer(
    broker: &Broker,
    stream: &str,
    durable: &str,
) -> Observation<ConsumerCounts> {
    let read = async {
        let stream = broker
            .jetstream()
            .get_stream_no_info(stream)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .consumer_info(durable)
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(OBSERVE_TIMEOUT, read).await {
        Ok(Ok(info)) => Observation::Known(ConsumerCounts {
            num_pending: info.num_pending,
            num_ack_pending: u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
        }),
        Ok(Err(detail)) => Observation::unknown("api", detail),
        Err(_) => Observation::unknown(
            "timeout",
            format!("consumer {stream}/{durable}: no answer within {OBSERVE_TIMEOUT:?}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_4_and_6_requests() {
        let shared =
            DurableRequest::data("f", "r", "det", "cam", None, Duration::from_secs(60), 4, 5);
        assert_eq!(shared.name, "det--from--cam");
        assert_eq!(shared.stream, "vf-f-r-cam");
        assert_eq!(shared.filter_subject, "vf.f.r.cam");
        assert_eq!(shared.metadata[naming::LABEL_KIND], "durable");
        assert_eq!(shared.metadata[naming::LABEL_NODE], "det");
        let part = DurableRequest::data("f", "r", "det", "cam", Some(2), Duration::ZERO, 1, 5);
        assert_eq!(part.name, "det--from--cam--p2");
        assert_eq!(part.metadata[naming::LABEL_KIND], "partitioned_durable");
        let eos = DurableRequest::eos("f", "r", "det", "cam", "r0-1a2b3c4d");
        assert_eq!(eos.name, "det--eos--cam--r0-1a2b3c4d");
        assert_eq!(eos.filter_subject, "vf.f.r.cam._eos");
        assert_eq!(eos.inactive_threshold, Some(Duration::from_secs(3600)));
        let anchor = DurableRequest::eos_anchor("f", "r", "cam");
        assert_eq!(anchor.name, "cam--eos--anchor");
        assert_eq!(anchor.metadata[naming::LABEL_NODE], "cam");
        assert_eq!(anchor.to_config().max_deliver, 0);
    }
}
