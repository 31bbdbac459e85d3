//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several operator
//! replicas exactly one reconciles.
//!
//! The protocol is client-go's `leaderelection` with a Lease lock, so a platform engineer
//! reads the Lease as for any other controller:
//! - a candidate reads the Lease every `retry_period`; it takes it when it is absent, when
//!   nobody holds it (a leader that stopped cleanly released it), or when the record has not
//!   changed for `lease_duration` **as measured by the candidate's own clock** since it last
//!   saw it change (so clock skew between nodes does not matter, only clock rate);
//! - every write is a replace with the read `resourceVersion`: of two candidates racing for
//!   an expired Lease one gets a conflict and stays a candidate;
//! - the leader renews every `retry_period`; when no renewal succeeded for `renew_deadline`
//!   it stops leading at once (the controller is dropped, in-flight reconciles with it) and
//!   becomes a candidate again. Since `renew_deadline < lease_duration`, it has stopped
//!   before any candidate may take over;
//! - a leader that stops on SIGTERM drains its reconciles while still renewing, then
//!   releases the Lease (no holder, duration 1 s), so a rollout hands over at once.
//!
//! kube-runtime 5 has no elector, and the crates that offer one either hold the lease
//! without a renew deadline (the leader keeps working while it cannot renew) or pull in a
//! second Kubernetes client version; the protocol is small enough to own and test here.
//! The decisions are pure ([`decide`], [`Observation`]); [`Elector`] does the I/O.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// How long a Lease is valid after its last renewal, by default (client-go's default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long a leader keeps leading without a successful renewal, by default.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often a leader renews and a candidate retries, by default.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Why leader election cannot run or a Lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The timings cannot give a single leader (`VF_CONFIG`).
    #[error(
        "leader election timings: {0}; need 0 < retry period < renew deadline < lease duration \
         (--leader-election-retry-period-seconds, --leader-election-renew-deadline-seconds, \
         --leader-election-lease-duration-seconds)"
    )]
    Timings(String),
    /// An API call on the Lease failed.
    #[error("{action} Lease {namespace}/{name}: {source}")]
    Api {
        /// `get`, `create` or `replace`.
        action: &'static str,
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
}

/// Where the Lease is, who this replica is, and the timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    /// The Lease's namespace (the operator's own).
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity in `holderIdentity` (its pod name).
    pub identity: String,
    /// See [`DEFAULT_LEASE_DURATION`].
    pub lease_duration: Duration,
    /// See [`DEFAULT_RENEW_DEADLINE`].
    pub renew_deadline: Duration,
    /// See [`DEFAULT_RETRY_PERIOD`].
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// Checks `0 < retry_period < renew_deadline < lease_duration` and a whole-second lease
    /// of at least one second (the Lease stores seconds).
    pub fn validate(&self) -> Result<(), ElectionError> {
        if self.retry_period.is_zero() {
            return Err(ElectionError::Timings("the retry period is 0".to_owned()));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ElectionError::Timings(format!(
                "retry period {:?} is not below the renew deadline {:?}",
                self.retry_period, self.renew_deadline
            )));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ElectionError::Timings(format!(
                "renew deadline {:?} is not below the lease duration {:?}: a leader that \
                 cannot renew would still be leading when another takes over",
                self.renew_deadline, self.lease_duration
            )));
        }
        if i32::try_from(self.lease_duration.as_secs()).is_err() {
            return Err(ElectionError::Timings(format!(
                "lease duration {:?} does not fit the Lease",
                self.lease_duration
            )));
        }
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// The parts of a Lease that change when its holder renews or changes: a candidate measures
/// expiry from the moment it last saw them change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    transitions: Option<i32>,
    duration: Option<i32>,
}

impl Record {
    fn of(spec: Option<&LeaseSpec>) -> Self {
        Record {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            transitions: spec.and_then(|s| s.lease_transitions),
            duration: spec.and_then(|s| s.lease_duration_seconds),
        }
    }
}

/// What a candidate last saw of the Lease and when (its monotonic clock). Pure.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    seen: Option<(Record, Instant)>,
}

impl Observation {
    /// Records the Lease as read at `now`; the clock restarts only when the record changed.
    pub fn saw(&mut self, spec: Option<&LeaseSpec>, now: Instant) {
        let record = Record::of(spec);
        match &self.seen {
            Some((last, _)) if *last == record => {}
            _ => self.seen = Some((record, now)),
        }
    }

    /// Whether the holder's lease ran out: the record has not changed for its duration
    /// (the Lease's own `leaseDurationSeconds`, else `fallback`) since it was first seen.
    pub fn expired(&self, now: Instant, fallback: Duration) -> bool {
        let Some((record, since)) = &self.seen else {
            return false;
        };
        let duration = record
            .duration
            .and_then(|s| u64::try_from(s).ok())
            .map_or(fallback, Duration::from_secs);
        now.saturating_duration_since(*since) >= duration
    }
}

/// What a replica does with the Lease it read. Pure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No Lease: create it, holding it.
    Create,
    /// Write it with this replica as holder; `transition` when the holder changes (the
    /// acquire time is reset and `leaseTransitions` counts one more).
    Take {
        /// Whether the holder changes.
        transition: bool,
    },
    /// Someone else holds a valid lease: wait.
    Wait,
}

/// Decides from the Lease as read (`None`: there is none), this replica's identity and
/// whether the holder's lease has run out ([`Observation::expired`]).
pub fn decide(lease: Option<&LeaseSpec>, me: &str, expired: bool) -> Decision {
    let Some(spec) = lease else {
        return Decision::Create;
    };
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        Some(holder) if holder == me => Decision::Take { transition: false },
        None => Decision::Take { transition: true },
        Some(_) if expired => Decision::Take { transition: true },
        Some(_) => Decision::Wait,
    }
}

/// The Lease spec a replica writes when it takes or renews at `now`.
pub fn taken(
    previous: Option<&LeaseSpec>,
    config: &ElectionConfig,
    transition: bool,
    now: Timestamp,
) -> LeaseSpec {
    let previous = previous.cloned().unwrap_or_default();
    let transitions = previous.lease_transitions.unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_seconds()),
        acquire_time: if transition || previous.acquire_time.is_none() {
            Some(MicroTime(now))
        } else {
            previous.acquire_time
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if transition {
            transitions.saturating_add(1)
        } else {
            transitions
        }),
        ..previous
    }
}

/// Takes, holds and releases the Lease.
pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    observation: Observation,
}

impl Elector {
    /// An elector for `config` (validated).
    pub fn new(client: Client, config: ElectionConfig) -> Result<Self, ElectionError> {
        config.validate()?;
        Ok(Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observation: Observation::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> ElectionError {
        ElectionError::Api {
            action,
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source: Box::new(source),
        }
    }

    /// One attempt to take or renew the Lease: `Ok(true)` when this replica holds it now.
    /// A conflict (another replica wrote first) is `Ok(false)`.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, ElectionError> {
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.api_error("get", e))?;
        let now = Instant::now();
        self.observation
            .saw(current.as_ref().and_then(|l| l.spec.as_ref()), now);
        let expired = self.observation.expired(now, self.config.lease_duration);
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let wall = Timestamp::now();
        match decide(spec, &self.config.identity, expired) {
            Decision::Wait => Ok(false),
            Decision::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(taken(None, &self.config, true, wall)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(self.api_error("create", e)),
                }
            }
            Decision::Take { transition } => {
                let Some(mut lease) = current else {
                    return Ok(false);
                };
                lease.spec = Some(taken(lease.spec.as_ref(), &self.config, transition, wall));
                self.replace(lease).await
            }
        }
    }

    async fn replace(&mut self, lease: Lease) -> Result<bool, ElectionError> {
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observation.saw(written.spec.as_ref(), Instant::now());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.api_error("replace", e)),
        }
    }

    /// Waits until this replica holds the Lease, trying every retry period; API failures
    /// are logged and retried.
    pub async fn acquire(&mut self) {
        let mut waiting_logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {
                    if !waiting_logged {
                        tracing::info!(
                            lease = %self.config.name,
                            identity = %self.config.identity,
                            "waiting for the leader's lease"
                        );
                        waiting_logged = true;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "leader election"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews every retry period while leading; returns when no renewal succeeded for the
    /// renew deadline (or another replica took the Lease), i.e. when leadership is lost.
    pub async fn hold(&mut self) {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let left = self.config.renew_deadline.saturating_sub(renewed.elapsed());
            let attempt = tokio::time::timeout(left, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Ok(true)) => renewed = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::warn!(lease = %self.config.name, "another replica took the lease");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "renewing the leader's lease"),
                Err(_) => {}
            }
            if renewed.elapsed() >= self.config.renew_deadline {
                tracing::warn!(
                    lease = %self.config.name,
                    deadline_s = self.config.renew_deadline.as_secs(),
                    "no renewal within the renew deadline: no longer leading"
                );
                return;
            }
        }
    }

    /// Gives the Lease up (no holder, 1 s), so a candidate takes it at its next try; only
    /// while this replica still holds it.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let held = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        if !held {
            return;
        }
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now.clone()),
            acquire_time: Some(now),
            ..lease.spec.unwrap_or_default()
        });
        match self.replace(lease).await {
            Ok(_) => tracing::info!(lease = %self.config.name, "released the leader's lease"),
            Err(e) => tracing::warn!(error = %e, "releasing the leader's lease"),
        }
    }
}

/// Runs `work` only while this replica leads, until `shutdown` resolves.
///
/// `work` gets a future that resolves when it should stop gracefully (shutdown while
/// leading); the lease is renewed while it drains, then released. Losing the lease drops
/// the work at once and makes this replica a candidate again; a later term calls `work`
/// anew. Work that ends by itself ends the election too.
pub async fn run_while_leading<W, Fut>(
    mut elector: Elector,
    shutdown: impl Future<Output = ()>,
    mut work: W,
) where
    W: FnMut(tokio::sync::oneshot::Receiver<()>) -> Fut,
    Fut: Future<Output = ()>,
{
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            () = elector.acquire() => {}
        }
        tracing::info!(
            lease = %elector.config().name,
            identity = %elector.config().identity,
            "leading"
        );
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let term = work(stopped);
        tokio::pin!(term);
        let lost = tokio::select! {
            () = &mut term => false,
            () = elector.hold() => true,
            () = &mut shutdown => {
                let _ = stop.send(());
                tokio::select! {
                    () = &mut term => false,
                    () = elector.hold() => true,
                }
            }
        };
        if lost {
            // The term's future is dropped here, before any candidate may take over.
            continue;
        }
        elector.release().await;
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ElectionConfig {
        ElectionConfig {
            namespace: "videoflow-system".into(),
            name: "videoflow-operator".into(),
            identity: "a".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn held_by(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).expect("ts"))),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn timings_must_give_one_leader() {
        assert!(config().validate().is_ok());
        for (retry, renew, lease) in [(0, 10, 15), (10, 10, 15), (2, 15, 15), (2, 16, 15)] {
            let c = ElectionConfig {
                retry_period: Duration::from_secs(retry),
                renew_deadline: Duration::from_secs(renew),
                lease_duration: Duration::from_secs(lease),
                ..config()
            };
            assert!(c.validate().is_err(), "{retry}/{renew}/{lease} accepted");
        }
    }

    #[test]
    fn a_held_lease_expires_only_after_its_duration_unchanged_on_the_candidates_clock() {
        let t0 = Instant::now();
        let mut seen = Observation::default();
        let lease = held_by("b", 1_000);
        seen.saw(Some(&lease), t0);
        let fallback = Duration::from_secs(99);
        assert!(!seen.expired(t0 + Duration::from_secs(14), fallback));
        assert_eq!(decide(Some(&lease), "a", false), Decision::Wait);
        // The holder renews at +10 s: the clock restarts from then.
        let renewed = held_by("b", 1_010);
        seen.saw(Some(&renewed), t0 + Duration::from_secs(10));
        assert!(!seen.expired(t0 + Duration::from_secs(24), fallback));
        assert!(seen.expired(t0 + Duration::from_secs(25), fallback));
        // Re-reading an unchanged record does not restart it.
        seen.saw(Some(&renewed), t0 + Duration::from_secs(24));
        assert!(seen.expired(t0 + Duration::from_secs(25), fallback));
        assert_eq!(
            decide(Some(&renewed), "a", true),
            Decision::Take { transition: true }
        );
        // Never seen: never expired.
        assert!(!Observation::default().expired(t0 + Duration::from_secs(1000), fallback));
    }

    #[test]
    fn free_own_and_absent_leases() {
        assert_eq!(decide(None, "a", false), Decision::Create);
        assert_eq!(
            decide(Some(&held_by("a", 1)), "a", false),
            Decision::Take { transition: false }
        );
        let released = LeaseSpec {
            holder_identity: Some(String::new()),
            ..held_by("b", 1)
        };
        assert_eq!(
            decide(Some(&released), "a", false),
            Decision::Take { transition: true }
        );
    }

    #[test]
    fn taking_counts_a_transition_and_renewing_keeps_the_acquire_time() {
        let now = Timestamp::from_second(2_000).expect("ts");
        let mut previous = held_by("b", 1_000);
        previous.acquire_time = Some(MicroTime(Timestamp::from_second(500).expect("ts")));
        let took = taken(Some(&previous), &config(), true, now);
        assert_eq!(took.holder_identity.as_deref(), Some("a"));
        assert_eq!(took.lease_transitions, Some(4));
        assert_eq!(took.acquire_time, Some(MicroTime(now)));
        assert_eq!(took.lease_duration_seconds, Some(15));
        let later = Timestamp::from_second(2_002).expect("ts");
        let renewed = taken(Some(&took), &config(), false, later);
        assert_eq!(renewed.acquire_time, Some(MicroTime(now)));
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
        assert_eq!(renewed.lease_transitions, Some(4));
    }
}
