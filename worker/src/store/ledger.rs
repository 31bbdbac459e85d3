//! The run ledger (§11.2, CTRL-4): the facts a node keeps in its runtime store so that a
//! replacement process — or a sibling replica, or a 1.0.4 worker reading the same store —
//! starts from them instead of from process memory.
//!
//! Why these records and no others: they are what end of stream needs to be decided by
//! counting rather than by waiting. A parent is complete when every replica's terminator is
//! recorded and as many distinct DATA ids were received as the terminators say were
//! published (the EOS-7 barrier) — no quiescence window. That needs, per node,
//! the terminators (`terminator/…`, EOS-2), the received ids (`received/…` logs), this
//! replica's published ids (`outbox/…`, the terminator's seq across restarts) and the
//! completion commit (`completion/…`). Sink effect markers (`effect/…`, IDEM-1) live here too
//! when the store is durable and shared.
//!
//! Layout and encoding are 1.0.4's (a replacement may run the other implementation): keys
//! under `vf/{flow}/{run}/{node}/`, JSON documents with sorted keys and compact separators,
//! wall-clock epoch seconds in `at`, every change a read-modify-write CAS on one key retried
//! [`CAS_ATTEMPTS`] times.
//!
//! The settlement side keeps its records here too: attempt counts (STREAM-15's budget when a
//! durable has `max_deliver = −1`), the terminal log every TERM without a dead letter names
//! (DELIV-15) and dead letters the broker did not accept (DELIV-8 handoffs).
//!
//! Not kept (phase 2, see docs/COMPATIBILITY.md): outbox *intents* and reconciliation, open
//! join groups and checkpoints.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value as Json, json};
use videoflow_core::envelope::WireError;
use videoflow_core::errors::{Disposition, ErrorCode, VfError};

use super::{CAS_ATTEMPTS, PendingWrite, RuntimeStore};
use crate::drain::TerminatorKind;

/// The prefix of every record of run `run` of flow `flow`: `vf/{flow}/{run}/` (every node's
/// `P` starts with it), what a teardown purges.
///
/// `None` when either id contains `/`: the layout joins raw ids with `/`, so flow `a` run `b`
/// and flow `a/b` run `c` (or run `b/c`) share the prefix `vf/a/b/`, and a purge by it could
/// delete another run's records.
pub fn run_prefix(flow: &str, run: &str) -> Option<String> {
    (!flow.is_empty() && !run.is_empty() && !flow.contains('/') && !run.contains('/'))
        .then(|| format!("vf/{flow}/{run}/"))
}

/// One recorded terminator (EOS-2), as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct TerminatorFact {
    /// The parent's publishing replica (the envelope's `replica_id`).
    pub replica: u32,
    /// EOS or ABORT.
    pub kind: TerminatorKind,
    /// Distinct DATA ids that replica published (EOS-7).
    pub seq: u64,
    /// The ABORT's error record, if any.
    pub error: Option<WireError>,
}

/// What a terminal record says (DELIV-15; 1.0.4's fields).
#[derive(Debug, Clone)]
pub struct TerminalRecord<'a> {
    /// The delivery's message id (`Nats-Msg-Id`, else `{stream}:{seq}`).
    pub message_id: &'a str,
    /// The broker stream sequence.
    pub stream_seq: u64,
    /// The broker's delivery count.
    pub attempt: u64,
    /// The error code that ended it.
    pub code: &'a str,
    /// `sampled-out`, `terminated` or `dlq-publish-failed`.
    pub reason: &'a str,
}

/// A dead letter kept for a later attempt (DELIV-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingHandoff {
    /// The dead letter's id (`dlq:{flow}:{run}:{node}:{stream_seq}`).
    pub record_id: String,
    /// Its headers.
    pub headers: BTreeMap<String, String>,
    /// The original delivery's bytes.
    pub raw: Vec<u8>,
    /// How many times it was not accepted.
    pub attempts: u64,
}

/// A publication's definite outcome, as the outbox records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Stored for the first time.
    New,
    /// Inside the duplicate window: the broker already held it (still counts, EOS-7).
    Duplicate,
}

/// The per-node ledger over a [`RuntimeStore`]. Cheap to clone (one shared state).
#[derive(Debug, Clone)]
pub struct RunLedger {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: RuntimeStore,
    prefix: String,
    node: String,
    replica: u32,
    nb_tasks: u32,
    durable_shared: bool,
    /// Mirrors of what this replica wrote, so the hot paths need no re-read.
    received: Mutex<HashMap<(String, String), HashSet<String>>>,
    /// The received-id appends in flight ([`RunLedger::record_received_all`]); the lock puts
    /// the calls' set updates in turn.
    received_writes: tokio::sync::Mutex<Vec<PendingWrite>>,
    published: Mutex<HashSet<String>>,
    /// Terminal records numbered but not stored (a process-local ledger).
    terminal_unstored: AtomicU64,
}

impl RunLedger {
    /// The ledger of node `node`, replica `replica` of `nb_tasks`, in run `flow`/`run`.
    /// Reads the store's capabilities back once (STORE-6) and, when it is durable and shared,
    /// reloads this replica's published ids from the outbox (EOS-7: the count persists
    /// across restarts).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be scanned.
    pub async fn open(
        store: RuntimeStore,
        flow: &str,
        run: &str,
        node: &str,
        replica: u32,
        nb_tasks: u32,
    ) -> Result<Self, VfError> {
        let caps = store.capabilities().await;
        Self::open_with(store, &caps, flow, run, node, replica, nb_tasks).await
    }

    /// [`RunLedger::open`] with the capabilities the caller already read back (the worker
    /// reads them once, for the slot claim, this ledger and its warning).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be scanned.
    pub async fn open_with(
        store: RuntimeStore,
        caps: &super::StoreCapabilities,
        flow: &str,
        run: &str,
        node: &str,
        replica: u32,
        nb_tasks: u32,
    ) -> Result<Self, VfError> {
        let durable_shared = caps.durable_and_shared();
        let ledger = RunLedger {
            inner: Arc::new(Inner {
                store,
                prefix: format!("vf/{flow}/{run}/{node}/"),
                node: node.to_owned(),
                replica,
                nb_tasks: nb_tasks.max(1),
                durable_shared,
                received: Mutex::new(HashMap::new()),
                received_writes: tokio::sync::Mutex::new(Vec::new()),
                published: Mutex::new(HashSet::new()),
                terminal_unstored: AtomicU64::new(0),
            }),
        };
        if durable_shared {
            ledger.load_published().await?;
        }
        Ok(ledger)
    }

    /// Whether records outlive this process *and* are seen by sibling replicas: the gate of
    /// the EOS-7 barrier, of acking terminators once recorded, and of ledger sink markers.
    pub fn durable_shared(&self) -> bool {
        self.inner.durable_shared
    }

    /// The store underneath.
    pub fn store(&self) -> &RuntimeStore {
        &self.inner.store
    }

    /// `vf/{flow}/{run}/{node}/` + `parts` joined by `/`.
    pub fn key(&self, parts: &[&str]) -> String {
        format!("{}{}", self.inner.prefix, parts.join("/"))
    }

    // -- terminators (EOS-2) --------------------------------------------------------------

    /// Records a parent replica's terminator before it is acked; `true` when the fact is
    /// new, `false` when `(parent, replica, kind)` was already recorded (by this process,
    /// an earlier one, or a sibling replica of this node).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn record_terminator(
        &self,
        parent: &str,
        replica: u32,
        kind: TerminatorKind,
        seq: u64,
        error: Option<&WireError>,
    ) -> Result<bool, VfError> {
        let key = self.key(&[
            "terminator",
            parent,
            &format!("r{replica}"),
            kind_word(kind),
        ]);
        let mut new = false;
        self.update(&key, |doc| {
            if doc.is_some() {
                return None;
            }
            new = true;
            Some(object(json!({
                "at": now(),
                "error": error.map_or(Json::Null, error_to_json),
                "seq": seq,
            })))
        })
        .await?;
        Ok(new)
    }

    /// Every terminator recorded for `parent`, by replica then kind.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be scanned.
    pub async fn terminators(&self, parent: &str) -> Result<Vec<TerminatorFact>, VfError> {
        let prefix = self.key(&["terminator", parent, ""]);
        let mut out = Vec::new();
        for (key, raw, _) in self.inner.store.scan(&prefix).await? {
            let rest = &key[prefix.len()..];
            let Some((replica, kind)) = rest.split_once('/') else {
                continue;
            };
            let (Some(replica), Some(kind)) = (
                replica
                    .strip_prefix('r')
                    .and_then(|r| r.parse::<u32>().ok()),
                kind_from_word(kind),
            ) else {
                continue;
            };
            let doc = parse(&raw);
            out.push(TerminatorFact {
                replica,
                kind,
                seq: doc.get("seq").and_then(Json::as_u64).unwrap_or(0),
                error: doc.get("error").and_then(error_from_json),
            });
        }
        out.sort_by_key(|f| (f.replica, f.kind));
        Ok(out)
    }

    // -- received ids (EOS-7 (b)) ---------------------------------------------------------

    /// Notes a distinct DATA id delivered from `parent` on `durable` to this replica;
    /// `false` when it was already noted. The log is loaded once per `(parent, durable)`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read or appended to.
    pub async fn record_received(
        &self,
        parent: &str,
        durable: &str,
        message_id: &str,
    ) -> Result<bool, VfError> {
        let fresh = self
            .record_received_all(parent, durable, &[message_id])
            .await?;
        Ok(fresh.first().copied().unwrap_or(false))
    }

    /// [`RunLedger::record_received`] for every id of a batch of deliveries at once: the
    /// new ones are appended in one operation (one write and one sync on `file://`), durable
    /// when this returns, so none of them is acked before it is recorded (EOS-7 (b)). One
    /// answer per id, in order: `true` when it was new (a repeat within `ids` is not).
    ///
    /// Calls overlap: each takes its ids into the set and starts its append in turn, then
    /// waits for its own append — and, when it has ids an earlier call put in the set, for
    /// every append still in flight, so such an id is in the log by the time this call
    /// answers `false` for it. The appends of a fetch window thus share the store's group
    /// commits instead of queueing for one each.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read or appended to, here or in an append it
    /// waited for; then none of this call's new ids counts as noted, so a redelivery notes
    /// them again.
    pub async fn record_received_all(
        &self,
        parent: &str,
        durable: &str,
        ids: &[&str],
    ) -> Result<Vec<bool>, VfError> {
        let slot = (parent.to_owned(), durable.to_owned());
        let log = self.received_log(parent, durable, self.inner.replica);
        let (fresh, own, earlier) = {
            let mut in_flight = self.inner.received_writes.lock().await;
            in_flight.retain(|w| !w.is_done());
            let loaded = self.lock_received().contains_key(&slot);
            if !loaded {
                let ids = self.read_ids(&log).await?;
                self.lock_received().entry(slot.clone()).or_insert(ids);
            }
            let fresh: Vec<bool> = {
                let mut received = self.lock_received();
                let seen = received.entry(slot.clone()).or_default();
                ids.iter().map(|id| seen.insert((*id).to_owned())).collect()
            };
            // In the order the ids came, so the log reads as they were delivered.
            let new: Vec<String> = ids
                .iter()
                .zip(&fresh)
                .filter(|(_, new)| **new)
                .map(|(id, _)| (*id).to_owned())
                .collect();
            // An id answered `false` that this call is not appending: an earlier call took it.
            let has_older = ids
                .iter()
                .zip(&fresh)
                .any(|(id, new_here)| !new_here && !new.iter().any(|n| n == id));
            let earlier = if has_older {
                in_flight.clone()
            } else {
                Vec::new()
            };
            let own = (!new.is_empty()).then(|| {
                let ledger = self.clone();
                let write =
                    PendingWrite::spawn(
                        async move { ledger.append_received(&log, slot, new).await },
                    );
                in_flight.push(write.clone());
                write
            });
            (fresh, own, earlier)
        };
        for write in own.iter().chain(&earlier) {
            write.outcome().await?;
        }
        Ok(fresh)
    }

    /// Appends `new` ids to the received `log` of `slot`; on failure takes them out of the
    /// set again (not in the log, so not noted: a redelivery must append them again).
    async fn append_received(
        &self,
        log: &str,
        slot: (String, String),
        new: Vec<String>,
    ) -> Result<(), VfError> {
        let records = new.iter().map(|id| id.as_bytes().to_vec()).collect();
        if let Err(e) = self.inner.store.append_all(log, records).await {
            let mut received = self.lock_received();
            if let Some(seen) = received.get_mut(&slot) {
                for id in &new {
                    seen.remove(id);
                }
            }
            return Err(e);
        }
        Ok(())
    }

    /// The number of distinct ids delivered from `parent` on `durable`: the union over this
    /// node's replicas `r0..r{nb_tasks−1}` (competing replicas share a durable; a partitioned
    /// replica's durable is its own, so only its own log names it).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn received_count(&self, parent: &str, durable: &str) -> Result<u64, VfError> {
        let mut ids: HashSet<String> = HashSet::new();
        for r in 0..self.inner.nb_tasks {
            if r == self.inner.replica
                && let Some(own) = self
                    .lock_received()
                    .get(&(parent.to_owned(), durable.to_owned()))
            {
                ids.extend(own.iter().cloned());
                continue;
            }
            ids.extend(
                self.read_ids(&self.received_log(parent, durable, r))
                    .await?,
            );
        }
        Ok(ids.len() as u64)
    }

    fn received_log(&self, parent: &str, durable: &str, replica: u32) -> String {
        self.key(&["received", parent, durable, &format!("r{replica}")])
    }

    async fn read_ids(&self, log: &str) -> Result<HashSet<String>, VfError> {
        Ok(self
            .inner
            .store
            .log_entries(log)
            .await?
            .into_iter()
            .map(|r| String::from_utf8_lossy(&r).into_owned())
            .collect())
    }

    fn lock_received(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, String), HashSet<String>>> {
        self.inner
            .received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    // -- completion (EOS-7 barrier commit) --------------------------------------------------

    /// Commits that `parent` is complete for this replica's partition `{node}/p{replica}`
    /// under `epoch` (0 without a partition lease), with `final_count` = the sum of its
    /// terminators' seqs. Rewriting an own commit is harmless.
    ///
    /// # Errors
    /// StaleAuthority (`VF_STALE_AUTHORITY`, exit 4) when a newer epoch already committed
    /// it; `VF_TRANSIENT` when the store cannot be written.
    pub async fn commit_completion(
        &self,
        parent: &str,
        epoch: u64,
        final_count: u64,
    ) -> Result<(), VfError> {
        let partition = format!("{}/p{}", self.inner.node, self.inner.replica);
        let key = self.key(&["completion", parent, &partition]);
        let mut stale = None;
        self.update(&key, |doc| {
            let committed = doc
                .as_ref()
                .and_then(|d| d.get("epoch"))
                .and_then(Json::as_u64);
            if committed.is_some_and(|c| c > epoch) {
                stale = committed;
                return None;
            }
            stale = None;
            Some(object(
                json!({"at": now(), "epoch": epoch, "final": final_count}),
            ))
        })
        .await?;
        match stale {
            Some(newer) => Err(VfError::new(
                ErrorCode::StaleAuthority,
                format!(
                    "{}: completion of {parent} already committed under epoch {newer} of {partition}",
                    self.inner.node
                ),
            )
            .with_remedy("Stop this replica; a newer owner committed the completion.")
            .with_context("node", self.inner.node.clone())),
            None => Ok(()),
        }
    }

    // -- published ids (EOS-7 seq) --------------------------------------------------------

    /// Records a DATA publication with a definite outcome in the outbox
    /// (`outbox/{publication_id}`) and counts its id towards the terminator's seq. Only a
    /// durable shared ledger writes the record (a process-local one would forget it anyway);
    /// the count is kept either way.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn record_published(
        &self,
        publication_id: &str,
        digest: &str,
        outcome: Accepted,
        stream_seq: u64,
    ) -> Result<(), VfError> {
        if self.inner.durable_shared {
            let key = self.key(&["outbox", publication_id]);
            let word = match outcome {
                Accepted::New => "accepted",
                Accepted::Duplicate => "duplicate",
            };
            let replica = self.inner.replica;
            // An id this process has not counted yet is almost always a new key: try the
            // create first and read only when the key turns out to exist (a re-publication
            // after a restart). Same result as reading first, one locked read fewer.
            let first = if self.lock_published().contains(publication_id) {
                FirstGuess::Read
            } else {
                FirstGuess::Absent
            };
            // A competing replica that died between its record and its input's ack left
            // the id recorded as its own; it counts the id again when it restarts, so
            // counting the re-publication here too would make the replicas' seqs sum to
            // more than the distinct ids their child can ever receive (the EOS-7 barrier
            // would never complete). The record's owner counts it; this replica leaves it.
            let mut counted_elsewhere = false;
            self.update_from(&key, first, |doc| {
                counted_elsewhere = false;
                let mut doc = match doc {
                    Some(doc) if settled_by_other(&doc, replica) => {
                        counted_elsewhere = true;
                        return None;
                    }
                    Some(doc) => doc,
                    None => object(json!({
                        "at": now(),
                        "digest": digest,
                        "kind": "data",
                        "readers": [],
                        "refs": [],
                        "replica": replica,
                    })),
                };
                doc.insert("outcome".into(), json!(word));
                doc.insert("resolved_at".into(), json!(now()));
                doc.insert("seq".into(), json!(stream_seq));
                Some(doc)
            })
            .await?;
            if counted_elsewhere {
                return Ok(());
            }
        }
        self.lock_published().insert(publication_id.to_owned());
        Ok(())
    }

    /// Distinct DATA ids this replica published (stored or deduplicated) and no other replica
    /// of this node recorded first: the terminator's
    /// seq (EOS-7).
    pub fn published_count(&self) -> u64 {
        self.lock_published().len() as u64
    }

    async fn load_published(&self) -> Result<(), VfError> {
        let prefix = self.key(&["outbox", ""]);
        let mut ids = HashSet::new();
        for (key, raw, _) in self.inner.store.scan(&prefix).await? {
            let doc = parse(&raw);
            let accepted = matches!(
                doc.get("outcome").and_then(Json::as_str),
                Some("accepted" | "duplicate")
            );
            let data = doc.get("kind").and_then(Json::as_str) == Some("data");
            let mine = doc.get("replica").and_then(Json::as_u64) == Some(self.inner.replica.into());
            if accepted && data && mine {
                ids.insert(key[prefix.len()..].to_owned());
            }
        }
        self.lock_published().extend(ids);
        Ok(())
    }

    fn lock_published(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    // -- attempt counts (STREAM-15) --------------------------------------------------------

    /// One failed attempt of `message_id` under `disposition` (`attempts/{id}`,
    /// `{"<disposition>": n, …, "at"}`); returns the budgeted count — the sum over
    /// dispositions other than `worker_fatal`, which never counts (and is not written).
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read or written.
    pub async fn record_attempt(
        &self,
        message_id: &str,
        disposition: Disposition,
    ) -> Result<u64, VfError> {
        let key = self.key(&["attempts", message_id]);
        if disposition == Disposition::WorkerFatal {
            return self.attempts_for(message_id).await;
        }
        let mut budgeted = 0;
        self.update(&key, |doc| {
            let mut doc = doc.unwrap_or_default();
            let word = disposition.as_str();
            let n = doc.get(word).and_then(Json::as_u64).unwrap_or(0) + 1;
            doc.insert(word.into(), json!(n));
            doc.insert("at".into(), json!(now()));
            budgeted = budgeted_attempts(&doc);
            Some(doc)
        })
        .await?;
        Ok(budgeted)
    }

    /// Failed attempts of `message_id` that count against its budget.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn attempts_for(&self, message_id: &str) -> Result<u64, VfError> {
        let key = self.key(&["attempts", message_id]);
        Ok(self
            .inner
            .store
            .get(&key)
            .await?
            .map_or(0, |v| budgeted_attempts(&parse(&v.value))))
    }

    // -- the terminal log (DELIV-15) ---------------------------------------------------------

    /// Appends a terminal record — a delivery ended without a dead letter — to `terminal`
    /// and returns its reference `ledger:{node}/terminal:{position}` (the log length after
    /// the append), the record a TERM names.
    ///
    /// Only a durable shared ledger stores it. A process-local one would keep every record of
    /// a long best-effort run with steady bad input in memory until the process ends — and
    /// lose them then — so it only numbers them; the caller logs the record with its
    /// reference, which outlives the process as well as the memory store would not.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be appended to.
    pub async fn record_terminal(&self, record: &TerminalRecord<'_>) -> Result<String, VfError> {
        let doc = json!({
            "at": now(),
            "attempt": record.attempt,
            "code": record.code,
            "message_id": record.message_id,
            "reason": record.reason,
            "stream_seq": record.stream_seq,
        });
        let position = if self.inner.durable_shared {
            let bytes = serde_json::to_vec(&doc)
                .map_err(|e| VfError::new(ErrorCode::Unknown, format!("terminal record: {e}")))?;
            self.inner
                .store
                .append(&self.key(&["terminal"]), &bytes)
                .await?
        } else {
            self.inner.terminal_unstored.fetch_add(1, Ordering::Relaxed) + 1
        };
        Ok(format!("ledger:{}/terminal:{position}", self.inner.node))
    }

    /// The terminal log's records, oldest first.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn terminal_entries(&self) -> Result<Vec<Map<String, Json>>, VfError> {
        Ok(self
            .inner
            .store
            .log_entries(&self.key(&["terminal"]))
            .await?
            .iter()
            .map(|r| parse(r))
            .collect())
    }

    // -- pending dead-letter handoffs (DELIV-8) ------------------------------------------------

    /// A dead letter the broker did not accept (`handoff/{record id}`): kept so a later
    /// attempt — or a replacement process at start — re-publishes it under the same id.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn record_pending_handoff(
        &self,
        record_id: &str,
        headers: &BTreeMap<String, String>,
        raw: &[u8],
    ) -> Result<(), VfError> {
        let key = self.key(&["handoff", record_id]);
        self.update(&key, |doc| {
            let attempts = doc
                .as_ref()
                .and_then(|d| d.get("attempts"))
                .and_then(Json::as_u64)
                .unwrap_or(0);
            Some(object(json!({
                "at": now(),
                "attempts": attempts + 1,
                "headers": headers,
                "raw": hex::encode(raw),
            })))
        })
        .await
    }

    /// Every pending handoff: `(record id, headers, raw bytes, attempts)`.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be scanned.
    pub async fn pending_handoffs(&self) -> Result<Vec<PendingHandoff>, VfError> {
        let prefix = self.key(&["handoff", ""]);
        Ok(self
            .inner
            .store
            .scan(&prefix)
            .await?
            .into_iter()
            .map(|(key, raw, _)| {
                let doc = parse(&raw);
                PendingHandoff {
                    record_id: key[prefix.len()..].to_owned(),
                    headers: doc
                        .get("headers")
                        .and_then(Json::as_object)
                        .map(|h| {
                            h.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                .collect()
                        })
                        .unwrap_or_default(),
                    raw: doc
                        .get("raw")
                        .and_then(Json::as_str)
                        .and_then(|h| hex::decode(h).ok())
                        .unwrap_or_default(),
                    attempts: doc.get("attempts").and_then(Json::as_u64).unwrap_or(0),
                }
            })
            .collect())
    }

    /// Forgets a handoff once its dead letter was accepted.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn clear_pending_handoff(&self, record_id: &str) -> Result<(), VfError> {
        let key = self.key(&["handoff", record_id]);
        if let Some(v) = self.inner.store.get(&key).await? {
            self.inner.store.delete(&key, Some(&v.version)).await?;
        }
        Ok(())
    }

    // -- sink effect markers (IDEM-1) -------------------------------------------------------

    /// Whether an effect keyed `key` was marked and its retention has not run out.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read.
    pub async fn effect_seen(&self, key: &str) -> Result<bool, VfError> {
        let doc = self
            .inner
            .store
            .get(&self.key(&["effect", key]))
            .await?
            .map(|v| parse(&v.value));
        Ok(doc
            .and_then(|d| d.get("until").and_then(Json::as_f64))
            .is_some_and(|until| until > now()))
    }

    /// Marks an effect as applied for `retention_seconds`; `false` when it already was.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn mark_effect(&self, key: &str, retention_seconds: f64) -> Result<bool, VfError> {
        let mut new = false;
        self.update(&self.key(&["effect", key]), |doc| {
            let at = now();
            let live = doc
                .as_ref()
                .and_then(|d| d.get("until").and_then(Json::as_f64))
                .is_some_and(|until| until > at);
            if live {
                return None;
            }
            new = true;
            Some(object(json!({"at": at, "until": at + retention_seconds})))
        })
        .await?;
        Ok(new)
    }

    // -- checkpoints of replayable sources (MSGID-6) ------------------------------------------

    /// The last offset of this replica's replayable source that the broker accepted, from
    /// 1.0.4's `checkpoint/r{replica}` record (`position.offset`); 0 when none was written.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be read; `VF_STATE_UNKNOWN` when the record holds
    /// no offset a restart could trust (resuming at 0 would re-mint, at a guess lose, items).
    pub async fn resume_offset(&self) -> Result<u64, VfError> {
        let key = self.checkpoint_key();
        let Some(doc) = self.inner.store.get(&key).await?.map(|v| parse(&v.value)) else {
            return Ok(0);
        };
        match doc.get("position").and_then(|p| p.get("offset")) {
            None => Ok(0),
            Some(offset) => offset.as_u64().ok_or_else(|| {
                VfError::new(
                    ErrorCode::StateUnknown,
                    format!(
                        "{}: the checkpoint {key} holds offset {offset}, not a source position.",
                        self.inner.node
                    ),
                )
                .with_remedy(
                    "Delete the record to publish the source again from its start (the \
                     broker's duplicate window and an idempotent sink absorb what was already \
                     accepted), or write the last accepted offset into position.offset.",
                )
            }),
        }
    }

    /// Records `offset` as the last accepted one (1.0.4's record: `position.offset`, the
    /// source's `state` kept as written, `at`). Never moves back: a zombie predecessor still
    /// confirming older offsets cannot rewind its replacement.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the store cannot be written.
    pub async fn checkpoint_offset(&self, offset: u64) -> Result<(), VfError> {
        self.update(&self.checkpoint_key(), |doc| {
            let doc = doc.unwrap_or_default();
            let current = doc
                .get("position")
                .and_then(|p| p.get("offset"))
                .and_then(Json::as_u64);
            if current.is_some_and(|c| c >= offset) {
                return None;
            }
            let state = doc.get("state").cloned().unwrap_or_else(|| json!(""));
            Some(object(json!({
                "at": now(),
                "position": {"offset": offset},
                "state": state,
            })))
        })
        .await
    }

    fn checkpoint_key(&self) -> String {
        self.key(&["checkpoint", &format!("r{}", self.inner.replica)])
    }

    // -- the CAS loop ---------------------------------------------------------------------

    /// Read-modify-write under compare-and-swap (§11.2): `mutate` gets the current document
    /// (`None` when absent) and returns the new one, or `None` to leave the key as it is.
    async fn update(
        &self,
        key: &str,
        mutate: impl FnMut(Option<Map<String, Json>>) -> Option<Map<String, Json>>,
    ) -> Result<(), VfError> {
        self.update_from(key, FirstGuess::Read, mutate).await
    }

    /// [`RunLedger::update`], whose first attempt may assume the key is absent instead of
    /// reading it: the CAS (expected: no version) then is the check, and a key that exists
    /// only costs the read the plain loop starts with.
    async fn update_from(
        &self,
        key: &str,
        first: FirstGuess,
        mut mutate: impl FnMut(Option<Map<String, Json>>) -> Option<Map<String, Json>>,
    ) -> Result<(), VfError> {
        // The guess is not one of the CAS_ATTEMPTS read-modify-writes §11.2 allows.
        let guessed = usize::from(first == FirstGuess::Absent);
        for attempt in 0..CAS_ATTEMPTS + guessed {
            let current = if attempt < guessed {
                None
            } else {
                self.inner.store.get(key).await?
            };
            let doc = current.as_ref().map(|v| parse(&v.value));
            let Some(updated) = mutate(doc) else {
                return Ok(());
            };
            let bytes = serde_json::to_vec(&Json::Object(updated)).map_err(|e| {
                VfError::new(ErrorCode::Unknown, format!("ledger record for {key}: {e}"))
            })?;
            let expected = current.as_ref().map(|v| v.version.as_str());
            if self.inner.store.cas(key, expected, &bytes).await? {
                return Ok(());
            }
        }
        Err(VfError::new(
            ErrorCode::Transient,
            format!(
                "runtime store: {key} kept changing under {CAS_ATTEMPTS} compare-and-swap attempts"
            ),
        )
        .with_remedy(
            "Another process keeps rewriting this ledger record; check for a duplicate replica.",
        ))
    }
}

/// What the first attempt of a CAS loop starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstGuess {
    /// The key as read.
    Read,
    /// No key (checked by the CAS itself).
    Absent,
}

/// STREAM-15: the sum of an attempts document's counts, `at` and `worker_fatal` excluded.
fn budgeted_attempts(doc: &Map<String, Json>) -> u64 {
    doc.iter()
        .filter(|(k, _)| k.as_str() != "at" && k.as_str() != Disposition::WorkerFatal.as_str())
        .filter_map(|(_, v)| v.as_u64())
        .sum()
}

/// The `kind` segment of a terminator key.
fn kind_word(kind: TerminatorKind) -> &'static str {
    match kind {
        TerminatorKind::Eos => "eos",
        TerminatorKind::Abort => "abort",
    }
}

fn kind_from_word(word: &str) -> Option<TerminatorKind> {
    match word {
        "eos" => Some(TerminatorKind::Eos),
        "abort" => Some(TerminatorKind::Abort),
        _ => None,
    }
}

/// A stored document; anything unreadable reads as empty (as 1.0.4's `_loads` of a record
/// it cannot parse would fail — here a damaged record never crashes the worker).
/// An outbox record another replica owns with a definite outcome (`accepted`/`duplicate`):
/// that replica counts its id towards its terminator's seq (EOS-7), restarts included.
fn settled_by_other(doc: &Map<String, Json>, replica: u32) -> bool {
    let owner = doc.get("replica").and_then(Json::as_u64);
    let settled = matches!(
        doc.get("outcome").and_then(Json::as_str),
        Some("accepted" | "duplicate")
    );
    settled && owner.is_some_and(|r| r != u64::from(replica))
}

fn parse(raw: &[u8]) -> Map<String, Json> {
    match serde_json::from_slice::<Json>(raw) {
        Ok(Json::Object(m)) => m,
        _ => Map::new(),
    }
}

fn object(v: Json) -> Map<String, Json> {
    match v {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

/// Wall-clock epoch seconds (§11.2 `at`).
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// An error record as 1.0.4's `error_from_proto` gives it: `code` and `message` always,
/// the other fields only when set.
pub fn error_to_json(e: &WireError) -> Json {
    let mut m = Map::new();
    m.insert("code".into(), json!(e.code));
    m.insert("message".into(), json!(e.message));
    if let Some(r) = e.remedy.as_deref().filter(|r| !r.is_empty()) {
        m.insert("remedy".into(), json!(r));
    }
    if let Some(d) = e.disposition {
        m.insert("disposition".into(), json!(d.as_str()));
    }
    if let Some(n) = e.node.as_deref().filter(|n| !n.is_empty()) {
        m.insert("node".into(), json!(n));
    }
    if let Some(t) = e.trace_id.as_deref().filter(|t| !t.is_empty()) {
        m.insert("trace_id".into(), json!(t));
    }
    if let Some(n) = e.num_delivered.filter(|n| *n > 0) {
        m.insert("num_delivered".into(), json!(n));
    }
    if !e.context.is_empty() {
        m.insert("context".into(), json!(e.context));
    }
    Json::Object(m)
}

/// The inverse of [`error_to_json`]; `None` for `null` or a non-object.
pub fn error_from_json(v: &Json) -> Option<WireError> {
    let m = v.as_object()?;
    let text = |k: &str| m.get(k).and_then(Json::as_str).map(str::to_owned);
    Some(WireError {
        code: text("code").unwrap_or_default(),
        message: text("message").unwrap_or_default(),
        remedy: text("remedy"),
        disposition: text("disposition").and_then(|d| Disposition::parse(&d)),
        node: text("node"),
        trace_id: text("trace_id"),
        num_delivered: m
            .get("num_delivered")
            .and_then(Json::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
        context: m
            .get("context")
            .and_then(Json::as_object)
            .map(|c| {
                c.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                        )
                    })
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;
