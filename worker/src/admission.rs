//! Admission and profiles (§17, ADM-1/2) and the `videoflow-worker provision` job; the
//! worker's bind-time read-back of explicit profiles (ADM-3, [`verify_bound_profiles`]).
//!
//! Why admit before creating anything: a flow deployed onto a broker or store that cannot
//! keep its promises fails late and confusingly (an evictable Redis loses payloads of a BATCH
//! run an hour in). So the job reads the real capabilities back — the broker's account
//! limits, `max_payload`, storage and the run's existing streams; the payload Redis and the
//! runtime store via CONFIG GET — and judges every channel's profile against them. It never
//! downgrades a request: a definite incompatibility is IncompatibleProfile (exit 2), a
//! capability that could not be read is UnobservableState (exit 3) when a request was
//! explicit and a warning otherwise. An unreachable service is never read as "empty".
//!
//! Order of the job: configuration → specs → explicit requests against the stream shape the
//! flow type provisions (nothing created yet) → broker read-back within
//! `VF_ADMISSION_TIMEOUT_SECONDS` → graph size → ADM-1 planning → [`provision_flow`] →
//! explicit requests against the streams as provisioned.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::context::{AccountErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy};
use videoflow_core::compile::{CompiledFlow, NodeSpec};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::FlowType;
use videoflow_core::naming;
use videoflow_core::redact::{redact_text, redact_url};
use videoflow_core::scaling::Observation;

use crate::broker::{self, Broker, StreamRequest};
pub use crate::config::JobConfig;
pub use crate::config::job::DEFAULT_SPECS_PATH;
use crate::config::{ProfileRequest, WorkerConfig};
use crate::provision::{FlowSettings, provision_flow, spec_vars};
use crate::store::{RuntimeStore, StoreCapabilities, redis_durability, unobserved};

/// `live_latest`: LIMITS retention, discard OLD, a bound (the REALTIME preset).
pub const LIVE_LATEST: &str = "live_latest";
/// `reliable_work`: INTEREST/WORK_QUEUE retention, discard NEW (the BATCH preset).
pub const RELIABLE_WORK: &str = "reliable_work";
/// `durable_control`: control state in a durable, shared run ledger.
pub const DURABLE_CONTROL: &str = "durable_control";
/// `replay_archive`: an archive independent of working consumers (not on JetStream).
pub const REPLAY_ARCHIVE: &str = "replay_archive";
/// The four profiles (ADM-1).
pub const PROFILES: [&str; 4] = [LIVE_LATEST, RELIABLE_WORK, DURABLE_CONTROL, REPLAY_ARCHIVE];
/// Default `VF_ADMISSION_TIMEOUT_SECONDS`.
pub const DEFAULT_ADMISSION_TIMEOUT: Duration = Duration::from_secs(60);

/// What the broker offers, read back (ADM-2).
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerCapabilities {
    /// The URL read.
    pub url: String,
    /// JetStream answers for this account (retained, recoverable delivery).
    pub jetstream: Observation<bool>,
    /// The largest message the server accepts.
    pub max_payload: Observation<u64>,
    /// Persistence: the account's file-store allowance is not 0.
    pub persistent_storage: Observation<bool>,
    /// Copies every stream keeps: the smallest `num_replicas` of the run's existing
    /// streams, else what will be requested.
    pub replication: Observation<i64>,
    /// The account's stream limit capped by `VF_MAX_STREAMS` (`None`: unlimited).
    pub max_streams: Option<i64>,
    /// The account's consumer limit capped by `VF_MAX_CONSUMERS` (`None`: unlimited).
    pub max_consumers: Option<i64>,
    /// The run's streams that already exist, by name.
    pub existing: BTreeMap<String, stream::Config>,
}

/// One profile request of the plan: a preset per edge, or an explicit request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelRequest {
    /// The producing node.
    pub channel: String,
    /// The profile name.
    pub profile: String,
    /// The request's options (`latest_per_key`, `restart_safe`, `tolerated_failures`,
    /// `exactly_once_effects`, `effect_guarantee`).
    pub options: serde_json::Map<String, serde_json::Value>,
    /// Whether the operator asked for it (explicit) or it is the flow-type preset.
    pub explicit: bool,
}

/// ADM-1 presets: one request per edge from the consumer's delivery (at-least-once ⇒
/// `reliable_work`, best-effort ⇒ `live_latest`); an explicit request replaces the presets of
/// its channel.
pub fn requirements(
    flow: &CompiledFlow,
    explicit: &[ProfileRequest],
    config_for: &dyn Fn(&NodeSpec) -> Result<WorkerConfig, VfError>,
) -> Result<Vec<ChannelRequest>, VfError> {
    let mut out: Vec<ChannelRequest> = Vec::new();
    for spec in flow.nodes.iter().filter(|n| !n.parents.is_empty()) {
        let cfg = config_for(spec)?;
        let profile = if cfg.is_batch_preset()
            || matches!(
                cfg.delivery,
                videoflow_core::model::DeliveryMode::AtLeastOnce
            ) {
            RELIABLE_WORK
        } else {
            LIVE_LATEST
        };
        for parent in &spec.parents {
            if explicit.iter().any(|r| &r.channel == parent) {
                continue;
            }
            if out
                .iter()
                .any(|r| &r.channel == parent && r.profile == profile)
            {
                continue;
            }
            out.push(ChannelRequest {
                channel: parent.clone(),
                profile: profile.to_owned(),
                options: serde_json::Map::new(),
                explicit: false,
            });
        }
    }
    out.extend(explicit.iter().map(|r| ChannelRequest {
        channel: r.channel.clone(),
        profile: r.profile.clone(),
        options: r.options.clone(),
        explicit: true,
    }));
    Ok(out)
}

/// The semantic findings of `profile` against a stream's effective shape (ADM-3 wording):
/// empty when the stream carries the profile.
pub fn profile_findings(profile: &str, effective: &stream::Config) -> Vec<String> {
    let retention = broker::streams::retention_word(effective.retention);
    let discard = broker::streams::discard_word(effective.discard);
    let mut found = Vec::new();
    if profile == RELIABLE_WORK {
        if effective.retention == RetentionPolicy::Limits {
            found.push(format!(
                "retention: {retention} keeps messages by count, size or age, not until acknowledged"
            ));
        }
        if effective.discard != DiscardPolicy::New {
            found.push(format!(
                "discard: {discard} evicts unacknowledged messages when the stream is full"
            ));
        }
    } else if profile == LIVE_LATEST {
        if effective.retention != RetentionPolicy::Limits {
            found.push(format!(
                "retention: {retention} holds messages for consumers instead of keeping the latest"
            ));
        }
        if effective.discard != DiscardPolicy::Old {
            found.push(format!(
                "discard: {discard} rejects new publishes at the limit instead of dropping the oldest"
            ));
        }
        if effective.max_messages <= 0 && effective.max_bytes <= 0 && effective.max_age.is_zero() {
            found.push("limits: no max_msgs, max_bytes or max_age bounds the backlog".to_owned());
        }
    }
    found
}

/// Explicit requests against the stream shape the flow type provisions, before anything is
/// created: `reliable_work` on a REALTIME channel (or `live_latest` on a BATCH one)
/// contradicts the stream that would exist whatever the broker can do.
///
/// # Errors
/// IncompatibleProfile naming every such channel.
pub fn check_topology_shape(
    flow: &CompiledFlow,
    explicit: &[ProfileRequest],
) -> Result<(), VfError> {
    let realtime = flow.flow_type == FlowType::Realtime;
    let mut findings = Vec::new();
    for r in explicit {
        let shape = StreamRequest::node(&flow.flow_id, &flow.run_id, &r.channel, realtime, None)
            .to_config();
        let found = profile_findings(&r.profile, &shape);
        if !found.is_empty() {
            findings.push(format!(
                "channel '{}' requests {}, but a {} flow provisions its streams as: {}",
                r.channel,
                r.profile,
                flow.flow_type.as_str().to_uppercase(),
                found.join("; ")
            ));
        }
    }
    if findings.is_empty() {
        return Ok(());
    }
    Err(VfError::new(
        ErrorCode::IncompatibleProfile,
        format!(
            "The requested profiles contradict the streams this flow type provisions:\n{}",
            lines(&findings)
        ),
    )
    .with_remedy(
        "Streams are shaped by the flow type: run the flow as BATCH for reliable_work channels \
         and REALTIME for live_latest ones, or drop the --require-profile entry.",
    )
    .with_context(
        "channels",
        explicit
            .iter()
            .map(|r| r.channel.clone())
            .collect::<Vec<_>>()
            .join(", "),
    ))
}

fn lines(items: &[String]) -> String {
    items
        .iter()
        .map(|l| format!("  - {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Connects within `timeout`, retrying a broker that is still starting; then reads the
/// account, `max_payload` and the run's existing streams.
///
/// # Errors
/// No connection within `timeout`: UnobservableState naming the URL when requests are
/// explicit, else BrokerUnavailable naming the URL (both exit 3).
pub async fn observe_broker(
    url: &str,
    timeout: Duration,
    flow: &CompiledFlow,
    stream_replicas: Option<i64>,
    declared_limits: (Option<i64>, Option<i64>),
    explicit: bool,
) -> Result<(Broker, BrokerCapabilities), VfError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let broker = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match broker::connect_within(url, left.max(Duration::from_millis(100))).await {
            Ok(b) => break b,
            Err(e) if tokio::time::Instant::now() + Duration::from_millis(250) >= deadline => {
                let detail = e.to_string();
                return Err(if explicit {
                    VfError::new(
                        ErrorCode::StateUnknown,
                        format!(
                            "A requested guarantee depends on state that could not be observed:\n  - the broker at {url} did not answer within {} s ({detail})",
                            timeout.as_secs_f64()
                        ),
                    )
                    .with_remedy("Restore access to the jetstream configuration and re-run; an unobservable guarantee is not an available one.")
                } else {
                    VfError::new(
                        ErrorCode::BrokerUnavailable,
                        format!("{detail} (no answer within VF_ADMISSION_TIMEOUT_SECONDS={} s)", timeout.as_secs_f64()),
                    )
                    .with_remedy("Check that the NATS server at VF_NATS_URL is running and reachable from this pod, then re-run the job.")
                }
                .with_context("url", url));
            }
            Err(e) => {
                tracing::debug!(url = %redact_url(url), error = %redact_text(&e.to_string()), "broker not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let bound = left.max(Duration::from_secs(1));
    let max_payload = Observation::Known(broker.client().server_info().max_payload as u64);
    let account = tokio::time::timeout(bound, broker.jetstream().query_account()).await;
    let (jetstream, persistent_storage, account_streams, account_consumers) = match account {
        Ok(Ok(a)) => (
            Observation::Known(true),
            Observation::Known(a.limits.max_storage != Some(0)),
            a.limits.max_streams,
            a.limits.max_consumers,
        ),
        Ok(Err(e)) if matches!(e.kind(), AccountErrorKind::JetStreamUnavailable) => (
            Observation::Known(false),
            Observation::Known(false),
            None,
            None,
        ),
        Ok(Err(e)) => (
            Observation::unknown("api", e.to_string()),
            Observation::unknown("api", e.to_string()),
            None,
            None,
        ),
        Err(_) => (
            Observation::unknown("timeout", "the account info did not arrive"),
            Observation::unknown("timeout", "the account info did not arrive"),
            None,
            None,
        ),
    };
    let mut existing = BTreeMap::new();
    let mut replication = Observation::Known(stream_replicas.unwrap_or(1).max(1));
    if matches!(jetstream, Observation::Known(true)) {
        let mut smallest: Option<i64> = None;
        for node in &flow.nodes {
            let name = naming::stream_name(&flow.flow_id, &flow.run_id, &node.name);
            match tokio::time::timeout(bound, broker.jetstream().get_stream(&name)).await {
                Ok(Ok(s)) => {
                    let config = s.cached_info().config.clone();
                    let copies = i64::try_from(config.num_replicas).unwrap_or(1).max(1);
                    smallest = Some(smallest.map_or(copies, |m| m.min(copies)));
                    existing.insert(name, config);
                }
                Ok(Err(e)) if is_not_found(e.kind()) => {}
                Ok(Err(e)) => replication = Observation::unknown("api", format!("{name}: {e}")),
                Err(_) => {
                    replication =
                        Observation::unknown("timeout", format!("{name} was not read back"))
                }
            }
        }
        if let (Some(m), Observation::Known(_)) = (smallest, &replication) {
            replication = Observation::Known(m);
        }
    }
    let combine = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    };
    let caps = BrokerCapabilities {
        url: url.to_owned(),
        jetstream,
        max_payload,
        persistent_storage,
        replication,
        max_streams: combine(account_streams, declared_limits.0),
        max_consumers: combine(account_consumers, declared_limits.1),
        existing,
    };
    Ok((broker, caps))
}

fn is_not_found(kind: GetStreamErrorKind) -> bool {
    matches!(kind, GetStreamErrorKind::JetStream(js)
        if js.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// ADM-2's graph size: (nodes + 1) streams; data durables + EOS anchors + Σ over edges of
/// the child's `nb_tasks` EOS durables.
pub fn graph_size(flow: &CompiledFlow) -> (i64, i64) {
    let streams = flow.nodes.len() as i64 + 1;
    let mut consumers = 0i64;
    for n in &flow.nodes {
        if n.has_children {
            consumers += 1;
        }
        let slots = if n.is_partitioned() { n.nb_tasks } else { 1 };
        consumers += slots * n.parents.len() as i64;
        consumers += n.nb_tasks.max(1) * n.parents.len() as i64;
    }
    (streams, consumers)
}

/// ADM-2: the graph against the broker's known stream and consumer limits.
///
/// # Errors
/// IncompatibleProfile `The graph exceeds the supported size of the composed broker: …`.
pub fn check_graph_size(flow: &CompiledFlow, caps: &BrokerCapabilities) -> Result<(), VfError> {
    let (streams, consumers) = graph_size(flow);
    let mut over = Vec::new();
    if let Some(max) = caps.max_streams.filter(|m| streams > *m) {
        over.push(format!("{streams} streams needed, {max} allowed"));
    }
    if let Some(max) = caps.max_consumers.filter(|m| consumers > *m) {
        over.push(format!("{consumers} consumers needed, {max} allowed"));
    }
    if over.is_empty() {
        return Ok(());
    }
    Err(VfError::new(
        ErrorCode::IncompatibleProfile,
        format!(
            "The graph exceeds the supported size of the composed broker: {}.",
            over.join("; ")
        ),
    )
    .with_remedy("Raise the account's JetStream limits (or VF_MAX_STREAMS / VF_MAX_CONSUMERS), or split the flow."))
}

/// The read-backs ADM-1 judges.
#[derive(Debug, Clone, PartialEq)]
pub struct Composition {
    /// The broker.
    pub broker: BrokerCapabilities,
    /// The payload (blob) Redis's durability, when `VF_BLOB_REDIS_URL` is set.
    pub payload: Option<Observation<bool>>,
    /// The runtime store, read back.
    pub runtime: StoreCapabilities,
}

/// The outcome of planning: definite rejections and unobservable capabilities, each one
/// line `channel '<c>' requests <p>: <why>` with its remedy.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// Definite incompatibilities.
    pub definite: Vec<(String, String)>,
    /// Capabilities that could not be observed.
    pub unobservable: Vec<(String, String)>,
}

impl Plan {
    /// ADM-1/2 binding: definite ⇒ IncompatibleProfile always; unobservable ⇒ UnobservableState
    /// when `unknown_is_fatal` (explicit requests), else `Ok` with the warning text.
    ///
    /// # Errors
    /// As above.
    pub fn bind(&self, unknown_is_fatal: bool) -> Result<Option<String>, VfError> {
        if let Some((_, remedy)) = self.definite.first() {
            let msgs: Vec<String> = self.definite.iter().map(|d| d.0.clone()).collect();
            return Err(VfError::new(
                ErrorCode::IncompatibleProfile,
                format!(
                    "The requested profiles cannot be satisfied by the composed backends:\n{}",
                    lines(&msgs)
                ),
            )
            .with_remedy(remedy.clone()));
        }
        if let Some((_, remedy)) = self.unobservable.first() {
            let msgs: Vec<String> = self.unobservable.iter().map(|d| d.0.clone()).collect();
            let message = format!(
                "A requested guarantee depends on state that could not be observed:\n{}",
                lines(&msgs)
            );
            if unknown_is_fatal {
                return Err(
                    VfError::new(ErrorCode::StateUnknown, message).with_remedy(remedy.clone())
                );
            }
            return Ok(Some(format!("{} ({remedy})", message.replace('\n', " "))));
        }
        Ok(None)
    }
}

/// The fix for an unreadable run ledger ([`unobserved::remedy`]), and why it matters here.
fn runtime_remedy(runtime: &StoreCapabilities) -> String {
    let fix = unobserved::remedy("VF_RUNTIME_STORE_URL", &runtime.durable)
        .unwrap_or_else(|| format!("Restore access to the {} configuration.", runtime.scheme));
    format!("{fix} Then re-run; an unobservable guarantee is not an available one.")
}

fn unobserved(what: &str, o: &Observation<bool>) -> String {
    match o {
        Observation::Unknown { reason, detail } => {
            format!("{what} could not be observed ({reason}: {detail})")
        }
        Observation::Known(_) => String::new(),
    }
}

/// ADM-1: every request against the composition (never a downgrade).
pub fn plan(requests: &[ChannelRequest], c: &Composition) -> Plan {
    let mut p = Plan::default();
    let mut chosen: BTreeMap<&str, &str> = BTreeMap::new();
    let ledger_remedy = "Set VF_RUNTIME_STORE_URL to a durable store shared across processes (redis:// with persistence and noeviction), which keeps the run-state ledger.";
    for r in requests {
        let (ch, pr) = (r.channel.as_str(), r.profile.as_str());
        let head = format!("channel '{ch}' requests {pr}");
        let mut reject = |why: String, remedy: &str| {
            p.definite
                .push((format!("{head}: {why}"), remedy.to_owned()));
        };
        if !PROFILES.contains(&pr) {
            reject(
                "unknown profile".into(),
                &format!("Use one of {}.", PROFILES.join(", ")),
            );
            continue;
        }
        if let Some(prev) = chosen.get(ch) {
            let class = |x: &str| if x == LIVE_LATEST { "limits" } else { "ack" };
            if class(prev) != class(pr) && (*prev == LIVE_LATEST || pr == LIVE_LATEST) {
                reject(
                    format!(
                        "its consumers also request {prev}, and jetstream keeps one retention class per channel"
                    ),
                    "Give the channel one delivery class: move the reliable consumer behind its own producer, or drop the per-node delivery override.",
                );
                continue;
            }
        }
        match pr {
            RELIABLE_WORK => {
                if c.broker.jetstream == Observation::Known(false) {
                    reject("jetstream offers no retained, recoverable delivery (the server answers without JetStream)".into(),
                        "Use a JetStream-enabled broker (INTEREST retention with redelivery) for this channel.");
                    continue;
                }
                if let Some(payload) = &c.payload {
                    match payload {
                        Observation::Unknown { .. } => {
                            let fix = unobserved::remedy("VF_BLOB_REDIS_URL", payload)
                                .unwrap_or_default();
                            p.unobservable.push((format!("{head}: {}", unobserved("payload-store durability", payload)),
                                format!("{fix} Then re-run; an unobservable guarantee is not an available one.")));
                            continue;
                        }
                        Observation::Known(false) => {
                            reject("the redis payload store is evictable, so an accepted envelope could outlive its bytes".into(),
                                "Use a durable payload store (Redis with appendonly and noeviction) or lower the profile to live_latest.");
                            continue;
                        }
                        Observation::Known(true) => {}
                    }
                }
            }
            LIVE_LATEST => {
                if r.options
                    .get("latest_per_key")
                    .and_then(serde_json::Value::as_bool)
                    == Some(true)
                {
                    reject(
                        "jetstream has no per-key latest-value queue".into(),
                        "Request a global latest slot, or use an adapter that implements per-key retention.",
                    );
                    continue;
                }
            }
            DURABLE_CONTROL => match &c.runtime.durable {
                Observation::Unknown { .. } => {
                    p.unobservable.push((
                        format!(
                            "{head}: {}",
                            unobserved("runtime store durability", &c.runtime.durable)
                        ),
                        runtime_remedy(&c.runtime),
                    ));
                    continue;
                }
                _ if !c.runtime.durable_and_shared() => {
                    reject(
                        "no durable, shared run ledger is composed".into(),
                        ledger_remedy,
                    );
                    continue;
                }
                _ => {}
            },
            _ => {
                reject(
                    "jetstream has no archive independent of working consumers".into(),
                    "Compose an archive adapter; an ACK-drained work queue is not an archive.",
                );
                continue;
            }
        }
        chosen.entry(ch).or_insert(pr);
        flags(r, c, &mut p);
    }
    p
}

/// The requirement flags carried in a request's options (`restart_safe`,
/// `tolerated_failures`, `exactly_once_effects`).
fn flags(r: &ChannelRequest, c: &Composition, p: &mut Plan) {
    let head = format!("channel '{}' requests", r.channel);
    let opt = |k: &str| r.options.get(k);
    if opt("restart_safe").and_then(serde_json::Value::as_bool) == Some(true) {
        match &c.runtime.durable {
            Observation::Unknown { .. } => p.unobservable.push((
                format!(
                    "{head} restart_safe: {}",
                    unobserved("runtime store durability", &c.runtime.durable)
                ),
                runtime_remedy(&c.runtime),
            )),
            _ if !c.runtime.durable_and_shared() => p.definite.push((
                format!(
                    "{head} restart_safe: the {} runtime store is not durable across processes",
                    c.runtime.scheme
                ),
                "Use file:// on a single host or redis:// with persistence enabled.".into(),
            )),
            _ => {}
        }
    }
    if let Some(f) = opt("tolerated_failures")
        .and_then(serde_json::Value::as_i64)
        .filter(|f| *f > 0)
    {
        let needed = 2 * f + 1;
        let what = format!("{head} tolerated_failures={f}");
        match &c.broker.persistent_storage {
            Observation::Unknown { .. } => p.unobservable.push((format!("{what}: {}", unobserved("broker storage persistence", &c.broker.persistent_storage)),
                "Restore access to the jetstream configuration and re-run.".into())),
            Observation::Known(false) => p.definite.push((format!("{what}: jetstream keeps streams on ephemeral storage, so a pod loss loses accepted work"),
                "Deploy the broker with persistent volumes before asking it to survive a pod loss.".into())),
            Observation::Known(true) => {}
        }
        match &c.broker.replication {
            Observation::Unknown { reason, detail } => p.unobservable.push((
                format!("{what}: stream replication could not be observed ({reason}: {detail})"),
                "Restore access to the jetstream configuration and re-run.".into(),
            )),
            Observation::Known(n) if *n < needed => p.definite.push((
                format!(
                    "{what}: streams keep {n} copy(ies); surviving {f} loss(es) needs {needed}"
                ),
                format!("Provision streams with num_replicas >= {needed} (VF_STREAM_REPLICAS)."),
            )),
            Observation::Known(_) => {}
        }
        if let Some(Observation::Known(false)) = &c.payload {
            p.definite.push((
                format!("{what}: the redis payload store is not durable"),
                "Use a durable payload store (Redis with appendonly and noeviction on a volume)."
                    .into(),
            ));
        }
    }
    if opt("exactly_once_effects").and_then(serde_json::Value::as_bool) == Some(true)
        && opt("effect_guarantee").and_then(serde_json::Value::as_str) != Some("idempotent_key")
    {
        p.definite.push((
            format!("{head} exactly_once_effects: no backend can make an external effect exactly-once; only a sink using its external system's idempotency key can"),
            "Declare the sink idempotent with an external key (effect_guarantee = 'idempotent_key'), or accept at-least-once effects.".into(),
        ));
    }
}

/// After provisioning: explicit requests against the streams as the broker holds them —
/// profile semantics and the requested fields (`num_replicas` included).
///
/// # Errors
/// IncompatibleProfile (contradiction or field mismatch), BrokerUnavailable (a requested
/// stream is missing), UnobservableState (unreadable).
pub async fn verify_provisioned(
    broker: &Broker,
    flow: &CompiledFlow,
    explicit: &[ProfileRequest],
    stream_replicas: Option<i64>,
    timeout: Duration,
) -> Result<(), VfError> {
    let realtime = flow.flow_type == FlowType::Realtime;
    let mut read = Vec::new();
    for r in explicit.iter().filter(|r| flow.node(&r.channel).is_some()) {
        let request = StreamRequest::node(
            &flow.flow_id,
            &flow.run_id,
            &r.channel,
            realtime,
            stream_replicas,
        );
        let back = read_back_stream(broker, &request.name, timeout).await;
        read.push((r, request, back));
    }
    judge_read_back("provision", &read, true)
}

/// What one requested channel's stream read back as.
#[derive(Debug, Clone)]
enum ReadBack {
    /// The stream's effective configuration.
    Found(Box<stream::Config>),
    /// The broker answered that the stream does not exist.
    Missing,
    /// No usable answer: `<detail> [<reason>]`.
    Unreadable(String),
}

async fn read_back_stream(broker: &Broker, name: &str, timeout: Duration) -> ReadBack {
    match tokio::time::timeout(timeout, broker.jetstream().get_stream(name)).await {
        Ok(Ok(s)) => ReadBack::Found(Box::new(s.cached_info().config.clone())),
        Ok(Err(e)) if is_not_found(e.kind()) => ReadBack::Missing,
        Ok(Err(e)) => ReadBack::Unreadable(format!("{e} [api]")),
        Err(_) => ReadBack::Unreadable("no answer [timeout]".to_owned()),
    }
}

/// ADM-2's post-provision check and ADM-3's bind-time check over what was read back:
/// contradictions first (IncompatibleProfile, exit 2), then missing streams
/// (BrokerUnavailable, exit 3), then unreadable ones (UnobservableState, exit 3). `fields`
/// also counts field mismatches (the provision job knows the requested shape; a worker
/// judges the profile only). `place` prefixes the message (`provision`, `worker <node>`).
fn judge_read_back(
    place: &str,
    read: &[(&ProfileRequest, StreamRequest, ReadBack)],
    fields: bool,
) -> Result<(), VfError> {
    let (mut contradictions, mut missing, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
    for (r, request, back) in read {
        match back {
            ReadBack::Found(effective) => {
                let mut found = profile_findings(&r.profile, effective);
                if fields {
                    found.extend(request.mismatches(effective));
                }
                if !found.is_empty() {
                    contradictions.push(format!(
                        "channel '{}' requests {}, but its stream {} carries: {}",
                        r.channel,
                        r.profile,
                        request.name,
                        found.join("; ")
                    ));
                }
            }
            ReadBack::Missing => missing.push(format!(
                "channel '{}' ({}): stream {} does not exist",
                r.channel, r.profile, request.name
            )),
            ReadBack::Unreadable(detail) => {
                unreadable.push(format!("channel '{}' ({}): {detail}", r.channel, r.profile));
            }
        }
    }
    if !contradictions.is_empty() {
        return Err(VfError::new(ErrorCode::IncompatibleProfile, format!(
            "{place}: the provisioned streams do not carry the requested profiles:\n{}", lines(&contradictions)))
            .with_remedy("Streams are shaped by the flow type (REALTIME: limits/discard-old, BATCH: interest/discard-new); run the flow as the type that provides the profile, or drop the request. A stream that pre-dates this run keeps its shape: tear the run down or use a fresh run id. A clamped field needs its JetStream account limit raised."));
    }
    if !missing.is_empty() {
        return Err(VfError::new(ErrorCode::BrokerUnavailable, format!(
            "{place}: requested channels have no stream on the broker:\n{}", lines(&missing)))
            .with_remedy("Provision the run first and check that VF_FLOW_ID / VF_RUN_ID match the provisioned run."));
    }
    if !unreadable.is_empty() {
        return Err(VfError::new(ErrorCode::StateUnknown, format!(
            "{place}: requested channels could not be read back from the broker:\n{}", lines(&unreadable)))
            .with_remedy("Restore access to the broker and re-run; an unobservable guarantee is not an available one."));
    }
    Ok(())
}

/// ADM-3 (START-1 step 3): the worker binds the operator's explicit profiles to the streams
/// it touches — its own (when it has children) and its parents' — before anything opens.
/// Requests for other channels are other workers' to judge; none ⇒ nothing is read. The
/// streams are read over a connection of its own (no reconnects), the whole read bounded by
/// `VF_ADMISSION_TIMEOUT_SECONDS`, connect included; only the profile semantics are judged.
///
/// # Errors
/// IncompatibleProfile (exit 2) `worker <node>: the provisioned streams do not carry the
/// requested profiles:`, BrokerUnavailable (exit 3) `worker <node>: requested channels have
/// no stream on the broker:`, UnobservableState (exit 3) `worker <node>: requested channels
/// could not be read back from the broker:` — each followed by one line per channel.
pub async fn verify_bound_profiles(cfg: &WorkerConfig) -> Result<(), VfError> {
    let touched = |c: &str| {
        (cfg.has_children && c == cfg.node_name) || cfg.parent_names.iter().any(|p| p == c)
    };
    let mine: Vec<&ProfileRequest> = cfg
        .profile_requests
        .iter()
        .filter(|r| touched(&r.channel))
        .collect();
    if mine.is_empty() {
        return Ok(());
    }
    tracing::info!(
        requests = %mine.iter().map(|r| format!("{}={}", r.channel, r.profile)).collect::<Vec<_>>().join(", "),
        "explicit channel profiles requested"
    );
    let timeout = Duration::try_from_secs_f64(cfg.admission_timeout_seconds)
        .unwrap_or(DEFAULT_ADMISSION_TIMEOUT);
    let deadline = tokio::time::Instant::now() + timeout;
    let request_for = |r: &ProfileRequest| {
        StreamRequest::node(
            &cfg.flow_id,
            &cfg.run_id,
            &r.channel,
            cfg.is_realtime(),
            None,
        )
    };
    let mut read = Vec::new();
    match broker::connect_within(&cfg.nats_url, timeout).await {
        Ok(own) => {
            for r in &mine {
                let request = request_for(r);
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let back = read_back_stream(&own, &request.name, left).await;
                read.push((*r, request, back));
            }
        }
        Err(e) => {
            let detail = format!("{e} [unreachable]");
            for r in &mine {
                read.push((*r, request_for(r), ReadBack::Unreadable(detail.clone())));
            }
        }
    }
    judge_read_back(&format!("worker {}", cfg.node_name), &read, false)?;
    tracing::info!("explicit channel profiles verified at bind");
    Ok(())
}

impl JobConfig {
    /// Replica `r` of `spec` as the job derives it (see [`spec_vars`]).
    ///
    /// # Errors
    /// `VF_CONFIG` when the record does not parse as a worker configuration.
    pub fn node_config(&self, spec: &NodeSpec, replica: i64) -> Result<WorkerConfig, VfError> {
        WorkerConfig::from_env(&spec_vars(
            &self.flow,
            spec,
            replica,
            &self.nats_url,
            self.max_retries,
        ))
    }
}

/// `videoflow-worker provision`: admission, provisioning, verification. Returns the exit
/// status; every refusal is printed in the §15.3 form on stderr.
pub async fn run_provision_job(vars: &BTreeMap<String, String>) -> i32 {
    match provision_job(vars).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}", e.render());
            e.exit_code()
        }
    }
}

async fn provision_job(vars: &BTreeMap<String, String>) -> Result<(), VfError> {
    let job = JobConfig::from_env(vars)?;
    let flow = &job.flow;
    let explicit = !job.explicit.is_empty();
    // Before anything is read or created: what the flow type's streams can carry.
    check_topology_shape(flow, &job.explicit)?;
    let runtime_store = RuntimeStore::open(&job.runtime_store_url)?;
    let (broker, broker_caps) = observe_broker(
        &job.nats_url,
        job.timeout,
        flow,
        job.stream_replicas,
        job.declared_limits,
        explicit,
    )
    .await?;
    check_graph_size(flow, &broker_caps)?;
    let payload = match &job.blob_url {
        Some(url) => Some(redis_durability(url, job.timeout).await),
        None => None,
    };
    let runtime = tokio::time::timeout(job.timeout, runtime_store.capabilities())
        .await
        .unwrap_or_else(|_| StoreCapabilities {
            scheme: crate::store::scheme_of(&job.runtime_store_url),
            durable: Observation::unknown("timeout", "no answer within the admission timeout"),
            shared: true,
        });
    tracing::info!(url = %redact_url(&broker_caps.url), max_payload = ?broker_caps.max_payload, jetstream = ?broker_caps.jetstream, persistent = ?broker_caps.persistent_storage, runtime = ?runtime, payload = ?payload, "admission read-back");
    // STORE-6: an unreadable ledger counts as not durable; without an explicit request that
    // needs it the run goes on (ADM-2), but never silently.
    let ledger_warning = unobserved::ledger_warning("VF_RUNTIME_STORE_URL", &runtime);
    let config_for = |spec: &NodeSpec| job.node_config(spec, 0);
    let requests = requirements(flow, &job.explicit, &config_for)?;
    let composition = Composition {
        broker: broker_caps,
        payload,
        runtime,
    };
    if let Some(warning) = plan(&requests, &composition).bind(explicit)? {
        eprintln!(
            "WARNING: provision: the composition does not provide every requested guarantee — {warning}"
        );
    }
    if let Some(warning) = ledger_warning {
        eprintln!("WARNING: provision: {warning}");
    }
    let settings = FlowSettings {
        stream_replicas: job.stream_replicas,
        stream_max_age: job.stream_max_age,
        // STREAM-15: a durable shared ledger counts attempts, so the broker gets no cap;
        // the workers read the same store back and derive the same value.
        ledger_caps_attempts: composition.runtime.durable_and_shared(),
        strict_durables: true,
    };
    let done = provision_flow(&broker, flow, &settings, |spec, r| job.node_config(spec, r)).await?;
    eprintln!(
        "provisioned flow {} run {}: {} streams, {} EOS anchors, {} data durables, DLQ {} ({} created or changed)",
        flow.flow_id,
        flow.run_id,
        done.streams,
        done.anchors,
        done.durables,
        naming::dlq_stream_name(&flow.flow_id),
        done.changed
    );
    if explicit {
        verify_provisioned(
            &broker,
            flow,
            &job.explicit,
            job.stream_replicas,
            job.timeout,
        )
        .await?;
    }
    Ok(())
}
