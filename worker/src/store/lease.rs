//! Partition leases and the replica slot claim (§11.2, ENV-5 step 3).
//!
//! Why: replicas started without an id (a Deployment, not a StatefulSet) must still own
//! distinct partitions of the work, and an extra replica must stop rather than silently
//! duplicate one. The run ledger arbitrates: each slot `r` is the record
//! `vf/{flow}/{run}/{node}/epoch/{node}/p{r}` = `{"at","epoch","holder","lease_until","owner",
//! "token"}` (1.0.4's layout, so replicas of another implementation read it), taken by a CAS
//! that bumps the epoch and mints a fresh token, and kept alive by renewals. A lease whose
//! `lease_until` has passed is free; one renewed while we wait proves its holder alive.

use std::time::Duration;

use serde_json::{Value as Json, json};
use videoflow_core::errors::{ErrorCode, VfError};

use super::{CAS_ATTEMPTS, RuntimeStore};
use crate::broker::StopFlag;

/// How often a waiting claimant polls a live lease (≤ 0.5 s, §11.2).
const POLL: Duration = Duration::from_millis(500);
/// The stop reason a lost lease sets (CTRL-2: no EOS).
pub const STOP_REASON_AUTHORITY_LOST: &str = "authority-lost";

fn now() -> f64 {
    crate::clock::wall_now()
}

/// The ledger key of `node`'s partition `replica` (§11.2 key layout).
pub fn epoch_key(flow: &str, run: &str, node: &str, replica: i64) -> String {
    format!("vf/{flow}/{run}/{node}/epoch/{node}/p{replica}")
}

/// A lease this process holds.
#[derive(Debug)]
pub struct LeaseHolder {
    store: RuntimeStore,
    key: String,
    /// The epoch our CAS wrote.
    pub epoch: u64,
    /// The fencing token our CAS wrote (16 hex).
    pub token: String,
    /// `{node}/r{replica}/{process epoch}`.
    pub holder: String,
    owner: String,
    lease: Duration,
    renewal: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for LeaseHolder {
    fn drop(&mut self) {
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
    }
}

/// A claimed replica slot: the id this process runs as, and the lease that proves it.
#[derive(Debug)]
pub struct SlotClaim {
    /// The slot, used as the replica id.
    pub replica: i64,
    /// The lease on `epoch/{node}/p{replica}`.
    pub lease: LeaseHolder,
}

/// What one acquisition attempt found.
enum Attempt {
    Taken(Box<LeaseHolder>),
    /// Another holder's live lease, with the fields that change on renewal.
    Held {
        owner: String,
        lease_until: f64,
        token: String,
    },
}

fn doc_f64(doc: &Json, key: &str) -> f64 {
    doc.get(key).and_then(Json::as_f64).unwrap_or(0.0)
}

fn doc_str(doc: &Json, key: &str) -> String {
    doc.get(key)
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The JSON document of §11.2: sorted keys, no spaces.
fn lease_doc(epoch: u64, holder: &str, lease_until: f64, owner: &str, token: &str) -> Vec<u8> {
    // serde_json's map is sorted unless `preserve_order` is on; the keys are written in
    // sorted order either way.
    json!({
        "at": now(),
        "epoch": epoch,
        "holder": holder,
        "lease_until": lease_until,
        "owner": owner,
        "token": token,
    })
    .to_string()
    .into_bytes()
}

/// One attempt to take `key` for `holder`: free, lapsed or already ours ⇒ CAS `epoch + 1`.
async fn try_acquire(
    store: &RuntimeStore,
    key: &str,
    node: &str,
    replica: i64,
    process_epoch: &str,
    lease: Duration,
) -> Result<Attempt, VfError> {
    let holder = format!("{node}/r{replica}/{process_epoch}");
    let owner = format!("{node}/r{replica}");
    for _ in 0..CAS_ATTEMPTS {
        let current = store.get(key).await?;
        let (expected, epoch) = match &current {
            None => (None, 0),
            Some(v) => {
                let doc: Json = serde_json::from_slice(&v.value).unwrap_or(Json::Null);
                let until = doc_f64(&doc, "lease_until");
                if doc_str(&doc, "holder") != holder && until > now() {
                    return Ok(Attempt::Held {
                        owner: doc_str(&doc, "owner"),
                        lease_until: until,
                        token: doc_str(&doc, "token"),
                    });
                }
                (
                    Some(v.version.clone()),
                    doc.get("epoch").and_then(Json::as_u64).unwrap_or(0),
                )
            }
        };
        let token = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        let until = now() + lease.as_secs_f64();
        let body = lease_doc(epoch + 1, &holder, until, &owner, &token);
        if store.cas(key, expected.as_deref(), &body).await? {
            return Ok(Attempt::Taken(Box::new(LeaseHolder {
                store: store.clone(),
                key: key.to_owned(),
                epoch: epoch + 1,
                token,
                holder,
                owner,
                lease,
                renewal: None,
            })));
        }
    }
    Err(VfError::new(
        ErrorCode::OwnershipConflict,
        format!("{node}: the lease record {key} kept changing through {CAS_ATTEMPTS} attempts"),
    )
    .with_remedy("Another replica is contending for the same slot; retry the start."))
}

/// ENV-5 step 3: claims one of `slots` replica slots of `node` through the ledger. First
/// probes every slot without waiting and takes the first free or lapsed one; then probes
/// again, waiting on each live lease up to one lease length (a renewal seen while waiting
/// proves its holder alive, so the next slot is tried).
///
/// The caller starts the renewal with [`LeaseHolder::keep_alive`].
///
/// # Errors
/// OwnershipConflict (`VF_OWNERSHIP_CONFLICT`, exit 3) `<node>: every one of its <n> replica
/// slots is held under a live lease; this process is an extra replica`; `VF_TRANSIENT` when
/// the ledger cannot be read or written.
pub async fn claim_slot(
    store: &RuntimeStore,
    flow: &str,
    run: &str,
    node: &str,
    slots: i64,
    process_epoch: &str,
    lease: Duration,
) -> Result<SlotClaim, VfError> {
    for replica in 0..slots {
        let key = epoch_key(flow, run, node, replica);
        if let Attempt::Taken(l) =
            try_acquire(store, &key, node, replica, process_epoch, lease).await?
        {
            return Ok(SlotClaim { replica, lease: *l });
        }
    }
    for replica in 0..slots {
        let key = epoch_key(flow, run, node, replica);
        let deadline = tokio::time::Instant::now() + lease;
        let mut first_seen: Option<(f64, String)> = None;
        loop {
            match try_acquire(store, &key, node, replica, process_epoch, lease).await? {
                Attempt::Taken(l) => return Ok(SlotClaim { replica, lease: *l }),
                Attempt::Held {
                    owner,
                    lease_until,
                    token,
                } => {
                    let seen = (lease_until, token);
                    match &first_seen {
                        None => first_seen = Some(seen),
                        Some(first) if *first != seen => {
                            tracing::debug!(%owner, slot = replica, "lease renewed while waiting: holder alive");
                            break;
                        }
                        Some(_) => {}
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(POLL.min(lease)).await;
        }
    }
    Err(VfError::new(
        ErrorCode::OwnershipConflict,
        format!(
            "{node}: every one of its {slots} replica slots is held under a live lease; this \
             process is an extra replica"
        ),
    )
    .with_remedy("Scale the node back to its slot count, or raise VF_REPLICA_SLOTS / nb_tasks.")
    .with_context("node", node)
    .with_context("slots", slots))
}

/// START-1 step 7: opens the runtime store, reads its capabilities and, when ENV-5 step 3
/// applies ([`WorkerConfig::needs_slot_claim`]), claims a slot and keeps its lease alive
/// (a lost lease sets `stop` with `authority-lost`). Returns the configuration with the
/// claimed replica id and the claim, which must live as long as the worker.
///
/// # Errors
/// `VF_CONFIG` for an unknown store scheme; OwnershipConflict (exit 3) for an extra replica;
/// `VF_TRANSIENT` when the ledger cannot be reached while claiming.
pub async fn claim_replica_slot(
    cfg: std::sync::Arc<crate::config::WorkerConfig>,
    store: &RuntimeStore,
    caps: &super::StoreCapabilities,
    stop: &StopFlag,
) -> Result<
    (
        std::sync::Arc<crate::config::WorkerConfig>,
        Option<SlotClaim>,
    ),
    VfError,
> {
    if !cfg.needs_slot_claim(caps.durable_and_shared()) {
        return Ok((cfg, None));
    }
    let lease = Duration::from_secs_f64(cfg.partition_lease_seconds.max(0.001));
    let process_epoch = uuid::Uuid::new_v4().simple().to_string();
    let mut claim = claim_slot(
        store,
        &cfg.flow_id,
        &cfg.run_id,
        &cfg.node_name,
        cfg.replica_slot_count(),
        &process_epoch,
        lease,
    )
    .await?;
    claim.lease.keep_alive(stop.clone());
    tracing::info!(node = %cfg.node_name, slot = claim.replica, epoch = claim.lease.epoch, "claimed a replica slot through the run ledger");
    let mut claimed = (*cfg).clone();
    claimed.replica = crate::config::ReplicaId {
        declared: Some(claim.replica),
        source: crate::config::ReplicaSource::LedgerSlot,
    };
    Ok((std::sync::Arc::new(claimed), Some(claim)))
}

impl LeaseHolder {
    /// The renewal period: `max(0.5 s, lease / 3)`.
    pub fn renew_period(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(500))
    }

    /// One renewal: extends `lease_until` iff the record still carries our epoch and token.
    ///
    /// # Errors
    /// StaleAuthority (`VF_STALE_AUTHORITY`) when another holder took the lease;
    /// `VF_TRANSIENT` when the ledger cannot be reached.
    pub async fn renew(&self) -> Result<(), VfError> {
        self.rewrite(now() + self.lease.as_secs_f64()).await
    }

    /// A graceful close: `lease_until` = 0, so the next claimant need not wait.
    ///
    /// # Errors
    /// As [`LeaseHolder::renew`].
    pub async fn release(mut self) -> Result<(), VfError> {
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
        self.rewrite(0.0).await
    }

    async fn rewrite(&self, lease_until: f64) -> Result<(), VfError> {
        for _ in 0..CAS_ATTEMPTS {
            let current = self.store.get(&self.key).await?;
            let Some(v) = current else {
                return Err(self.stale("the record is gone"));
            };
            let doc: Json = serde_json::from_slice(&v.value).unwrap_or(Json::Null);
            let epoch = doc.get("epoch").and_then(Json::as_u64).unwrap_or(0);
            if epoch != self.epoch || doc_str(&doc, "token") != self.token {
                return Err(self.stale(&format!(
                    "now epoch {epoch} held by {}",
                    doc_str(&doc, "holder")
                )));
            }
            let body = lease_doc(
                self.epoch,
                &self.holder,
                lease_until,
                &self.owner,
                &self.token,
            );
            if self.store.cas(&self.key, Some(&v.version), &body).await? {
                return Ok(());
            }
        }
        Err(VfError::new(
            ErrorCode::Transient,
            format!("the lease record {} kept changing", self.key),
        ))
    }

    fn stale(&self, why: &str) -> VfError {
        VfError::new(
            ErrorCode::StaleAuthority,
            format!(
                "{}: lost the lease {} (epoch {}): {why}",
                self.owner, self.key, self.epoch
            ),
        )
        .with_remedy("Another replica took this partition over; this one stops without EOS.")
    }

    /// Starts renewing every [`renew_period`](Self::renew_period) in the background. A
    /// renewal that finds another epoch or token sets `stop` with `authority-lost` (§11.2)
    /// and ends; a ledger blip is logged and retried at the next period — but once no renewal
    /// has succeeded for a whole lease length, the lease has lapsed as others see it (another
    /// process may claim the slot now), so this one fences itself: `authority-lost` too.
    /// Dropping the holder stops the renewal.
    pub fn keep_alive(&mut self, stop: StopFlag) {
        let period = self.renew_period();
        let renewer = LeaseHolder {
            store: self.store.clone(),
            key: self.key.clone(),
            epoch: self.epoch,
            token: self.token.clone(),
            holder: self.holder.clone(),
            owner: self.owner.clone(),
            lease: self.lease,
            renewal: None,
        };
        self.renewal = Some(tokio::spawn(async move {
            let mut renewed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(period).await;
                match renewer.renew().await {
                    Ok(()) => renewed = tokio::time::Instant::now(),
                    Err(e) if e.code == ErrorCode::StaleAuthority => {
                        tracing::error!("{}", e.log_line());
                        stop.set(STOP_REASON_AUTHORITY_LOST);
                        return;
                    }
                    Err(e) if renewed.elapsed() >= renewer.lease => {
                        tracing::error!(
                            "{}: no lease renewal for {:?}, the lease has lapsed; stopping: {}",
                            renewer.owner,
                            renewer.lease,
                            e.log_line()
                        );
                        stop.set(STOP_REASON_AUTHORITY_LOST);
                        return;
                    }
                    Err(e) => tracing::warn!("lease renewal failed: {}", e.log_line()),
                }
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn env_5_step_3_memory_ledger_claims_in_order() {
        let store = RuntimeStore::Memory(super::super::MemoryStore::new());
        let lease = Duration::from_millis(600);
        let a = claim_slot(&store, "f", "r", "n", 2, "a", lease)
            .await
            .expect("test value");
        let b = claim_slot(&store, "f", "r", "n", 2, "b", lease)
            .await
            .expect("test value");
        assert_eq!((a.replica, b.replica), (0, 1));
        // Nobody renews: after one lease length a third claimant takes a lapsed slot.
        let c = claim_slot(&store, "f", "r", "n", 2, "c", lease)
            .await
            .expect("test value");
        assert_eq!(c.lease.epoch, 2);
        assert!(a.lease.renew().await.is_err() || c.replica == 1);
    }

    /// A holder whose renewals keep failing (the ledger is gone) fences itself once a whole
    /// lease length passed without one: `authority-lost`, as if another holder took it.
    #[tokio::test]
    async fn a_lease_that_cannot_be_renewed_for_a_lease_length_fences_the_holder() {
        let redis = videoflow_testkit::RedisServer::start().expect("redis-server");
        let store = RuntimeStore::open(&redis.url()).expect("redis store");
        let lease = Duration::from_millis(1500);
        let mut claim = claim_slot(&store, "f", "r", "n", 2, "a", lease)
            .await
            .expect("claimed");
        let stop = StopFlag::new();
        claim.lease.keep_alive(stop.clone());
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            stop.reason().is_none(),
            "renewals succeed while the ledger is there"
        );
        // The ledger goes away: every renewal now fails as unreachable (transient), never
        // as stale, so only the fence can stop this holder.
        drop(redis);
        let fenced = tokio::time::timeout(Duration::from_secs(6), stop.wait()).await;
        assert!(fenced.is_ok(), "fenced within a lease length plus a period");
        assert_eq!(stop.reason().as_deref(), Some(STOP_REASON_AUTHORITY_LOST));
    }

    /// A clean release sets `lease_until` to 0: the next claimant takes the slot at once.
    #[tokio::test]
    async fn a_released_slot_is_claimed_at_once() {
        let store = RuntimeStore::Memory(super::super::MemoryStore::new());
        let lease = Duration::from_secs(30);
        let a = claim_slot(&store, "f", "r", "n", 1, "a", lease)
            .await
            .expect("claimed");
        a.lease.release().await.expect("released");
        let started = std::time::Instant::now();
        let b = claim_slot(&store, "f", "r", "n", 1, "b", lease)
            .await
            .expect("claimed after the release");
        assert_eq!(b.replica, 0);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no wait for a 30 s lease"
        );
    }
}
