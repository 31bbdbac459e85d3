//! The demand observer (protocol §19 SCALE-1/2): what the broker's lag says about
//! each node's replica count, written to `status.nodes[].demand`.
//!
//! For every node with parents it reads, per edge, the consumer info of the node's data
//! durable(s) on the parent's stream — `num_pending + num_ack_pending`, the same sum KEDA's
//! `nats-jetstream` trigger reads — and hands the observations to core's
//! [`observe_demand`], which takes the maximum over every parent and diagnoses `idle`,
//! `starved` (a join with one input drained while another backs up) or `backlog`.
//!
//! A read that fails or times out is an `Unknown` observation, never a zero: the node's
//! demand is then `unknown` with the parents named and no replica count, so a broker outage
//! cannot look like an idle flow.
//!
//! Only autoscaled nodes are observed: they are the ones whose replica count the demand
//! decides, and every other node's demand would be a broker read and a status write per
//! interval that nobody acts on. A Flow without an autoscaled node costs no broker read at
//! all. The demand is refreshed at the observer's own interval, not per reconcile: a
//! reconcile within the interval of the last observation (a pod event, an owned object's
//! change) reuses it, so a busy cluster does not turn into a stream of broker reads and lag
//! writes. The reconciler requeues a Flow with autoscaled nodes at that interval.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::future::join_all;
use tokio::sync::Mutex;
use videoflow_core::compile::{CompiledFlow, NodeSpec, compile};
use videoflow_core::naming::{durable_name, partitioned_durable_name, stream_name};
use videoflow_core::redact::{UrlCredentials, redact_text, redact_url, split_credentials};
use videoflow_core::scaling::{
    DemandDecision, DemandDiagnosis, Observation, ScalingError, SubscriptionObservation,
    observe_demand,
};

use crate::crd::{DemandStatus, Flow, FlowStatus};
use crate::render::autoscaling::{ScalingRule, any_requested, requested};
use crate::render::flow_document;

/// How often a Flow's demand is refreshed by default.
pub const DEFAULT_DEMAND_INTERVAL: Duration = Duration::from_secs(30);

/// How long one connect or consumer-info read may take before it is `Unknown` (`timeout`).
pub const DEFAULT_OBSERVE_TIMEOUT: Duration = Duration::from_secs(3);

/// `Unknown.reason` values of the observer.
pub mod reasons {
    /// The Flow names no broker URL and the operator has no default.
    pub const NO_BROKER: &str = "no_broker";
    /// The broker URL comes from a Secret (`urlFrom`), which the operator does not read.
    pub const CREDENTIALS: &str = "credentials";
    /// The broker could not be connected to.
    pub const UNREACHABLE: &str = "unreachable";
    /// No answer within the observe timeout.
    pub const TIMEOUT: &str = "timeout";
    /// The broker answered with an error (no such stream or consumer, permissions, …).
    pub const API: &str = "api";
}

/// One edge of the graph as the broker has it: the parent's stream and the node's data
/// durable(s) on it (one shared durable, or one per replica of a partitioned node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The parent node.
    pub parent: String,
    /// The parent's stream (NAME-3).
    pub stream: String,
    /// The node's data durables on that stream (NAME-5 or NAME-6).
    pub consumers: Vec<String>,
}

/// The edges into `spec`, one per parent, sorted by parent name. Pure.
pub fn edges(compiled: &CompiledFlow, spec: &NodeSpec) -> Vec<Edge> {
    let mut parents: Vec<&String> = spec.parents.iter().collect();
    parents.sort();
    parents.dedup();
    parents
        .into_iter()
        .map(|parent| Edge {
            parent: parent.clone(),
            stream: stream_name(&compiled.flow_id, &compiled.run_id, parent),
            consumers: if spec.is_partitioned() {
                (0..u32::try_from(spec.nb_tasks).unwrap_or(0))
                    .map(|r| partitioned_durable_name(&spec.name, parent, r))
                    .collect()
            } else {
                vec![durable_name(&spec.name, parent)]
            },
        })
        .collect()
}

/// Reads one consumer's counts; a failure or a slow answer is `Unknown` with its reason.
async fn read_consumer(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
    timeout: Duration,
) -> Observation<SubscriptionObservation> {
    let read = async {
        let stream = js
            .get_stream_no_info(stream)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .consumer_info(consumer)
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(info)) => Observation::Known(SubscriptionObservation {
            available: i64::try_from(info.num_pending).unwrap_or(i64::MAX),
            leased: i64::try_from(info.num_ack_pending).unwrap_or(i64::MAX),
            ..SubscriptionObservation::default()
        }),
        Ok(Err(detail)) => Observation::unknown(
            reasons::API,
            format!("consumer {stream}/{consumer}: {detail}"),
        ),
        Err(_) => Observation::unknown(
            reasons::TIMEOUT,
            format!("consumer {stream}/{consumer}: no answer within {timeout:?}"),
        ),
    }
}

/// Observes one edge: the sum over its durables, `Unknown` if any of them is.
pub async fn observe_edge(
    js: &jetstream::Context,
    edge: &Edge,
    timeout: Duration,
) -> Observation<SubscriptionObservation> {
    let reads = join_all(
        edge.consumers
            .iter()
            .map(|c| read_consumer(js, &edge.stream, c, timeout)),
    )
    .await;
    let mut total = SubscriptionObservation::default();
    for read in reads {
        match read {
            Observation::Known(o) => {
                total.available = total.available.saturating_add(o.available);
                total.leased = total.leased.saturating_add(o.leased);
            }
            unknown => return unknown,
        }
    }
    Observation::Known(total)
}

/// `status.nodes[].demand` from core's decision. Pure.
///
/// `lag` is the node's whole input backlog (the sum over parents) when every parent was
/// observed; an invalid rule is reported as `unknown` — never as a number.
pub fn demand_status(decision: Result<DemandDecision, ScalingError>) -> DemandStatus {
    match decision {
        Ok(d) => DemandStatus {
            diagnosis: d.diagnosis.as_str().to_owned(),
            replicas: d.replicas,
            lag: d.parents.iter().map(|p| p.lag).sum::<Option<i64>>(),
            unknown_parents: d.unknown_parents,
        },
        Err(_) => DemandStatus {
            diagnosis: DemandDiagnosis::Unknown.as_str().to_owned(),
            ..DemandStatus::default()
        },
    }
}

/// The demand of one node: every edge read (concurrently), then core's [`observe_demand`]
/// with every parent required. `js` is the broker, or why there is none — then every parent
/// is unknown with that reason.
pub async fn observe_node_demand(
    js: Result<&jetstream::Context, (&str, &str)>,
    compiled: &CompiledFlow,
    spec: &NodeSpec,
    rule: ScalingRule,
    timeout: Duration,
) -> DemandStatus {
    let edges = edges(compiled, spec);
    let observed: Vec<Observation<SubscriptionObservation>> = match js {
        Ok(js) => join_all(edges.iter().map(|e| observe_edge(js, e, timeout))).await,
        Err((reason, detail)) => edges
            .iter()
            .map(|_| Observation::unknown(reason, detail))
            .collect(),
    };
    let observations: BTreeMap<String, Observation<SubscriptionObservation>> = edges
        .iter()
        .map(|e| e.parent.clone())
        .zip(observed)
        .collect();
    let required: Vec<String> = spec.parents.clone();
    demand_status(observe_demand(
        &observations,
        Some(&required),
        rule.target_lag_per_replica,
        rule.min_replicas,
        rule.max_replicas,
    ))
}

/// Replaces each node's `demand` with the observed one (nodes without an entry get none).
pub fn merge_demand(status: &mut FlowStatus, mut demand: BTreeMap<String, DemandStatus>) {
    for node in &mut status.nodes {
        node.demand = demand.remove(&node.name);
    }
}

/// The observer the reconciler shares: its interval, its timeout, one broker connection per
/// URL (async-nats reconnects by itself; a read during an outage times out as `Unknown`) and
/// the last observation per Flow.
#[derive(Debug)]
pub struct DemandObserver {
    interval: Duration,
    timeout: Duration,
    clients: Mutex<HashMap<String, async_nats::Client>>,
    last: Mutex<HashMap<FlowKey, Observed>>,
}

/// A Flow as the observer caches it: namespace, name and uid (a recreated Flow is another).
type FlowKey = (String, String, String);

/// One observation of a Flow: when, of which generation, and what was seen.
#[derive(Debug, Clone)]
struct Observed {
    at: Instant,
    generation: Option<i64>,
    demand: BTreeMap<String, DemandStatus>,
}

fn flow_key(flow: &Flow) -> FlowKey {
    (
        flow.metadata.namespace.clone().unwrap_or_default(),
        flow.metadata.name.clone().unwrap_or_default(),
        flow.metadata.uid.clone().unwrap_or_default(),
    )
}

/// Whether `flow` has a node whose replicas the demand decides (an autoscaled node), i.e.
/// whether the observer reads anything for it and the reconciler requeues it at the
/// observer's interval.
pub fn observes(flow: &Flow) -> bool {
    any_requested(&flow.spec)
}

impl DemandObserver {
    /// An observer refreshing every `interval`, each read bounded by `timeout`.
    pub fn new(interval: Duration, timeout: Duration) -> Self {
        DemandObserver {
            interval,
            timeout,
            clients: Mutex::new(HashMap::new()),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// The demand of every autoscaled node of `flow`, by node name: the last observation
    /// while it is younger than the interval and of the same generation, else a new one
    /// ([`Self::observe_flow`]).
    pub async fn demand_of(
        &self,
        flow: &Flow,
        default_url: Option<&str>,
    ) -> BTreeMap<String, DemandStatus> {
        if !observes(flow) {
            self.forget(flow).await;
            return BTreeMap::new();
        }
        let key = flow_key(flow);
        let generation = flow.metadata.generation;
        if let Some(seen) = self.last.lock().await.get(&key)
            && seen.generation == generation
            && seen.at.elapsed() < self.interval
        {
            return seen.demand.clone();
        }
        let demand = self.observe_flow(flow, default_url).await;
        self.last.lock().await.insert(
            key,
            Observed {
                at: Instant::now(),
                generation,
                demand: demand.clone(),
            },
        );
        demand
    }

    /// Drops the last observation of `flow` (it was deleted, or no longer autoscales).
    pub async fn forget(&self, flow: &Flow) {
        self.last.lock().await.remove(&flow_key(flow));
    }

    /// How often the reconciler should look again.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The JetStream context of `url`, connecting once and then reusing the connection.
    async fn jetstream(&self, url: &str) -> Result<jetstream::Context, String> {
        let mut clients = self.clients.lock().await;
        if let Some(client) = clients.get(url) {
            return Ok(jetstream::new(client.clone()));
        }
        // The client logs its server addresses: give it none with a password in it.
        let (servers, credentials) = split_credentials(url);
        let options = async_nats::ConnectOptions::new().connection_timeout(self.timeout);
        let options = match credentials {
            Some(UrlCredentials::UserPassword { user, password }) => {
                options.user_and_password(user, password)
            }
            Some(UrlCredentials::Token(token)) => options.token(token),
            None => options,
        };
        // A cluster is named by a comma-separated URL list; the client fails over within it.
        let list: Vec<&str> = servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let connect = options.connect(list);
        let client = match tokio::time::timeout(self.timeout, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(redact_text(&format!(
                    "connecting to {}: {e}",
                    redact_url(url)
                )));
            }
            Err(_) => {
                return Err(format!(
                    "connecting to {}: no answer within {:?}",
                    redact_url(url),
                    self.timeout
                ));
            }
        };
        clients.insert(url.to_owned(), client.clone());
        Ok(jetstream::new(client))
    }

    /// The demand of every autoscaled node with parents of `flow`'s current run, by node
    /// name, read now.
    ///
    /// The broker is the Flow's `spec.broker.url`, else `default_url` (the operator's
    /// `--nats-url`). Nothing here fails: an unrenderable Flow has no nodes to observe, and
    /// an unreachable broker makes every node `unknown`.
    pub async fn observe_flow(
        &self,
        flow: &Flow,
        default_url: Option<&str>,
    ) -> BTreeMap<String, DemandStatus> {
        let Ok(compiled) = flow_document(flow).map(|doc| compile(&doc)) else {
            return BTreeMap::new();
        };
        let Ok(compiled) = compiled else {
            return BTreeMap::new();
        };
        if !observes(flow) {
            return BTreeMap::new();
        }
        let broker = flow.spec.broker.as_ref();
        let own_url = broker
            .and_then(|b| b.url.as_deref())
            .filter(|u| !u.is_empty());
        let from_secret = broker.is_some_and(|b| b.url_from.is_some());
        let js = match (own_url, from_secret, default_url) {
            (Some(url), _, _) | (None, false, Some(url)) => self
                .jetstream(url)
                .await
                .map_err(|detail| (reasons::UNREACHABLE, detail)),
            (None, true, _) => Err((
                reasons::CREDENTIALS,
                "spec.broker.urlFrom: the operator does not read broker credentials".to_owned(),
            )),
            (None, false, None) => Err((
                reasons::NO_BROKER,
                "the Flow names no broker and the operator has no --nats-url".to_owned(),
            )),
        };
        let mut out = BTreeMap::new();
        for spec in compiled.nodes.iter().filter(|s| !s.parents.is_empty()) {
            let Some(decl) = flow
                .spec
                .nodes
                .iter()
                .find(|d| d.name == spec.name && requested(&flow.spec, d))
            else {
                continue;
            };
            let rule = ScalingRule::of(&flow.spec, decl);
            let js = js
                .as_ref()
                .map_err(|(reason, detail)| (*reason, detail.as_str()));
            let status = observe_node_demand(js, &compiled, spec, rule, self.timeout).await;
            out.insert(spec.name.clone(), status);
        }
        out
    }
}
