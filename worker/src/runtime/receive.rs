//! The receive loop of a processor or consumer (§8.4): fold every ready delivery into the
//! join, record terminators, decide when each parent is drained, and hand out either the next
//! complete group or the stop result.
//!
//! Order of one call, as the protocol gives it: (1) stop conditions — the control flag, all
//! parents stopped, or an aborted parent drained; (2) sweep the join; (3) pop a ready group;
//! (4) wait up to a second for deliveries, fold them all, evaluate the drain, loop.
//!
//! With a durable shared run ledger (§11.2) terminators are recorded there and acked at once,
//! every DATA id is noted as received, a restarted process starts from the recorded
//! terminators, and BATCH parents listed in `VF_PARENT_REPLICAS` end by the EOS-7 barrier
//! (counted) instead of the quiescence window (waited).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use videoflow_core::envelope::{self, Envelope, MsgType, Payload, WireError};
use videoflow_core::errors::{Disposition, ErrorCode, VfError};
use videoflow_core::model::JoinMode;
use videoflow_core::partition::{self, KeyPolicy};
use videoflow_core::scaling::Observation;
use videoflow_core::value::Value;

use crate::blob::{self, BlobStore};
use crate::broker::{
    BoundDurable, Broker, Delivery, DeliveryHandle, DeliveryKind, Inbox, StopFlag,
};
use crate::config::WorkerConfig;
use crate::drain::BarrierCheck;
use crate::drain::{DrainTracker, PendingCounts, Recorded, TerminatorKind};
use crate::faults::{Barrier, soft_barrier};
use crate::join::{Entry, GroupInput, JoinAssembler, ReadyGroup};
use crate::runtime::settle::{Held, Settler};
use crate::store::{PendingWrite, RunLedger};

/// How long one receive waits for deliveries before re-checking the stop conditions.
const POLL: Duration = Duration::from_secs(1);
/// The shortest drain probe interval (see [`Receiver::poll`]).
const MIN_DRAIN_PROBE: Duration = Duration::from_millis(10);
/// Idle receive time between end-of-stream flush checks: JOIN-21a's 15 empty 1 s polls,
/// counted as time because drain probes poll faster.
const FLUSH_AFTER_IDLE: Duration = Duration::from_secs(15);
/// Drain probe interval while the EOS-7 barrier governs a draining parent: it waits on no
/// window, so the probe period is all the latency it adds.
const BARRIER_PROBE: Duration = Duration::from_millis(20);
/// The header that addresses a replay to one node (DELIV-16).
const REPLAY_TARGET: &str = "VF-Replay-Target";

/// A member's payload as the node sees it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) payload: Payload,
    pub(crate) metadata: BTreeMap<String, Value>,
    /// The publishing replica (the envelope's `replica_id`), for the node's `input_info`.
    pub(crate) replica_id: u32,
}

/// What one receive returns.
pub(crate) enum Received {
    /// A complete group, handles unresolved.
    Group(ReadyGroup<Held, Member>),
    /// The node must stop (EOS-5, ABORT-4, CTRL-3).
    Stop(StopResult),
}

/// Why the node stops.
#[derive(Debug)]
pub(crate) struct StopResult {
    /// The control flag ended it while parents were still open: no EOS relay (CTRL-3).
    pub(crate) hard: bool,
    /// Parents recorded as aborted, with their error record (ABORT-3), in parent order.
    pub(crate) aborted: Vec<(String, Option<WireError>)>,
}

/// One delivery of a batch being folded.
enum Step {
    Terminator(Delivery),
    Data(Box<Admitted>),
}

/// A DATA delivery that decoded and is for this node, not yet noted as received.
struct Admitted {
    parent: usize,
    held: Held,
    env: Envelope,
}

/// The inbound side of a non-producer.
pub(crate) struct Receiver {
    cfg: Arc<WorkerConfig>,
    broker: Broker,
    pub(crate) inbox: Inbox,
    pub(crate) join: JoinAssembler<Held, Member>,
    drain: DrainTracker,
    data_durables: Vec<BoundDurable>,
    held_terminators: Vec<Vec<DeliveryHandle>>,
    blob: Option<BlobStore>,
    stop: StopFlag,
    started: Instant,
    /// Consecutive time spent in empty waits (JOIN-21a).
    idle_for: Duration,
    /// DATA deliveries dropped before the node: not ours, replays for others, undecodable.
    pub(crate) skipped: u64,
    /// The run ledger, only when durable and shared (EOS-2, EOS-7).
    ledger: Option<RunLedger>,
    /// This replica's partition epoch for completion commits (0 without a lease).
    epoch: u64,
    /// Every group is one delivery (one parent, trace mode): an offloaded payload is then
    /// fetched when its group is handed to the node, not when it is folded, so a fetched
    /// batch of the whole credit does not hold every frame in memory at once.
    fetch_late: bool,
    /// Offloaded payloads reach the node as their `BlobRef`, unfetched
    /// ([`Receiver::forward_offloaded`]).
    forward_refs: bool,
}

impl Receiver {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        cfg: Arc<WorkerConfig>,
        broker: Broker,
        inbox: Inbox,
        join: JoinAssembler<Held, Member>,
        data_durables: Vec<BoundDurable>,
        blob: Option<BlobStore>,
        stop: StopFlag,
    ) -> Self {
        let parents = cfg.parent_names.len();
        let fetch_late = parents == 1 && cfg.join_policy.mode == JoinMode::Trace;
        Receiver {
            drain: DrainTracker::new(parents, cfg.eos_quiescence_ms),
            cfg,
            broker,
            inbox,
            join,
            data_durables,
            held_terminators: vec![Vec::new(); parents],
            blob,
            stop,
            started: Instant::now(),
            idle_for: Duration::ZERO,
            skipped: 0,
            ledger: None,
            epoch: 0,
            fetch_late,
            forward_refs: false,
        }
    }

    /// For a node that forwards its one input untouched
    /// ([`crate::nodes::Processor::forwards_input`]): offloaded payloads are handed to it as
    /// their reference, never fetched, and published on as that reference (the output adopts
    /// the blob, [`BlobStore::adopt`]). Only where a group is one delivery (one parent,
    /// trace mode) and the reference can be counted for the children: a store that writes
    /// reader counters (`VF_BLOB_READERS`) — a TTL-only node downstream of a counted blob
    /// would let its children's releases reclaim it early.
    pub(crate) fn forward_offloaded(&mut self) {
        self.forward_refs =
            self.fetch_late && self.blob.as_ref().is_some_and(|b| b.readers().is_some());
        if self.forward_refs {
            tracing::info!("offloaded payloads are forwarded by reference, not fetched");
        }
    }

    /// Attaches a durable shared run ledger and restores from it (EOS-2): every parent with
    /// a recorded terminator has ended for this process too, and every recorded ABORT makes
    /// its parent aborted — before anything is received. `epoch` fences completion commits.
    ///
    /// # Errors
    /// `VF_TRANSIENT` when the ledger cannot be read.
    pub(crate) async fn restore_from_ledger(
        &mut self,
        ledger: RunLedger,
        epoch: u64,
    ) -> Result<(), VfError> {
        for p in 0..self.cfg.parent_names.len() {
            let parent = self.cfg.parent_names[p].clone();
            for fact in ledger.terminators(&parent).await? {
                tracing::info!(parent = %parent, replica = fact.replica, kind = ?fact.kind, seq = fact.seq, "terminator recorded by an earlier process");
                self.drain
                    .record(p, fact.replica, fact.kind, fact.seq, fact.error);
            }
        }
        self.ledger = Some(ledger);
        self.epoch = epoch;
        Ok(())
    }

    /// `VF_PARENT_REPLICAS[P]` when the EOS-7 barrier governs parent `p`: a durable shared
    /// ledger, a flow type other than realtime, and P listed.
    fn barrier_replicas(&self, p: usize) -> Option<u64> {
        if self.ledger.is_none() || self.cfg.is_realtime() {
            return None;
        }
        self.cfg.parent_replicas.as_ref()?.get(p).copied()
    }

    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// One receive (§8.4). An error is a failure of receive itself (JOIN-20): the worker ends.
    pub(crate) async fn receive(
        &mut self,
        settler: &mut Settler,
        quiesce: &StopFlag,
    ) -> Result<Option<Received>, VfError> {
        loop {
            crate::health::beat(); // HEALTH-2: the loop is alive while it waits
            if quiesce.is_set() {
                return Ok(None);
            }
            // (1) stop conditions.
            let all_stopped = self.drain.all_stopped();
            let abort_drained = self.drain.drained_abort().is_some();
            if self.stop.is_set() || all_stopped || abort_drained {
                return Ok(Some(Received::Stop(StopResult {
                    hard: !all_stopped && !abort_drained,
                    aborted: self
                        .drain
                        .aborted()
                        .into_iter()
                        .map(|(i, e)| (self.cfg.parent_names[i].clone(), e.cloned()))
                        .collect(),
                })));
            }
            // (2) sweep, (3) pop.
            self.join.sweep();
            settler.resolve(self.join.take_resolutions()).await;
            match self.join.pop_ready() {
                Ok(Some(group)) => {
                    if let Some(group) = self.fetch_payloads(group, settler).await {
                        return Ok(Some(Received::Group(group)));
                    }
                    continue; // its delivery was handed back or dead-lettered
                }
                Ok(None) => {}
                Err(e) => return Err(VfError::new(ErrorCode::Unknown, e.to_string())),
            }
            // (4) wait for deliveries and fold every one that is ready.
            let poll = self.poll();
            let batch = self.inbox.recv(poll).await;
            if batch.is_empty() {
                self.idle_for += poll;
            } else {
                self.idle_for = Duration::ZERO;
            }
            self.fold_all(batch, settler).await;
            settler.resolve(self.join.take_resolutions()).await;
            self.evaluate_drain().await?;
            if self.idle_for >= FLUSH_AFTER_IDLE {
                self.idle_for = Duration::ZERO;
                self.end_of_stream_flush(settler).await;
            }
        }
    }

    /// How long the next wait for deliveries may last: [`POLL`], or while a parent has
    /// a terminator but is not stopped yet, a fifth of the quiescence window (10 ms at
    /// least), so EOS-3 ends a parent within about one window of going quiet instead of at
    /// the next whole-second poll (the granularity EOS-3 leaves to the implementation).
    fn poll(&self) -> Duration {
        let draining = |p: &usize| self.drain.has_terminator(*p) && !self.drain.is_stopped(*p);
        let parents = 0..self.cfg.parent_names.len();
        if !parents.clone().any(|p| draining(&p)) {
            return POLL;
        }
        if parents
            .filter(draining)
            .all(|p| self.barrier_replicas(p).is_some())
        {
            return BARRIER_PROBE;
        }
        let window = u64::try_from(self.cfg.eos_quiescence_ms).unwrap_or(0);
        Duration::from_millis(window / 5).clamp(MIN_DRAIN_PROBE, POLL)
    }

    /// Folds a batch of deliveries in order: data into the join, terminators into the drain.
    /// Under a ledger the DATA ids of the whole batch are noted as received together first —
    /// one ledger write for the batch instead of one per delivery, started before any of them
    /// goes on and awaited before any of them is settled for good (EOS-7 (b), `Held::noted`)
    /// or, for a node without children, before its effect.
    async fn fold_all(&mut self, batch: Vec<Delivery>, settler: &mut Settler) {
        let mut steps = Vec::with_capacity(batch.len());
        for d in batch {
            match d.kind {
                DeliveryKind::Terminator => steps.push(Step::Terminator(d)),
                DeliveryKind::Data => {
                    if let Some(admitted) = self.admit_data(d, settler).await {
                        steps.push(Step::Data(Box::new(admitted)));
                    }
                }
            }
        }
        let mut noted = self.note_received(&steps).into_iter();
        for step in steps {
            match step {
                Step::Terminator(d) => self.fold_terminator(d).await,
                Step::Data(mut admitted) => {
                    admitted.held.noted = noted.next().flatten();
                    // A node whose work is an effect (a consumer, or a processor with no
                    // children) does it only once its input is noted: a note that fails
                    // after the effect would hand the input back for a second one. A
                    // processor's publications carry their ids, so a second one is
                    // deduplicated and its work need not wait.
                    if !self.cfg.has_children && !admitted.held.noted_or_handed_back().await {
                        continue;
                    }
                    self.fold_data(*admitted, settler).await;
                }
            }
        }
    }

    /// EOS-7 (b): starts noting the id of every admitted DATA delivery of a batch in the
    /// ledger, one write per parent, all parents at once. One entry per DATA step, in order:
    /// the write its settlement waits for, if its parent is counted.
    ///
    /// Only for parents the barrier governs ([`Receiver::barrier_replicas`]): the ids are its
    /// count and nothing else reads them (nor does 1.0.4, whose barrier excludes REALTIME
    /// too). A REALTIME run — a live source, for days — thus keeps no received-id set or log
    /// at all; its parents end by EOS-3 as before.
    fn note_received(&self, steps: &[Step]) -> Vec<Option<PendingWrite>> {
        let data: Vec<&Admitted> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Data(a) => Some(a.as_ref()),
                Step::Terminator(_) => None,
            })
            .collect();
        let Some(ledger) = &self.ledger else {
            return data.iter().map(|_| None).collect();
        };
        let mut parents: Vec<usize> = data
            .iter()
            .map(|a| a.parent)
            .filter(|&p| self.barrier_replicas(p).is_some())
            .collect();
        parents.sort_unstable();
        parents.dedup();
        let writes: Vec<PendingWrite> = parents
            .iter()
            .map(|&p| {
                let ids: Vec<String> = data
                    .iter()
                    .filter(|a| a.parent == p)
                    .map(|a| a.held.message_id.clone())
                    .collect();
                let durable = self.data_durables[p].name.clone();
                let parent = self.parent_name(p).to_owned();
                let ledger = ledger.clone();
                PendingWrite::spawn(async move {
                    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                    ledger
                        .record_received_all(&parent, &durable, &ids)
                        .await
                        .map(drop)
                })
            })
            .collect();
        data.iter()
            .map(|a| {
                let i = parents.iter().position(|&p| p == a.parent)?;
                Some(writes[i].clone())
            })
            .collect()
    }

    async fn fold_terminator(&mut self, d: Delivery) {
        let p = d.parent;
        let recorded = match envelope::decode_bytes(d.payload.clone()) {
            Ok(env) if env.is_stop_signal() => {
                let kind = if env.msg_type == MsgType::Abort {
                    TerminatorKind::Abort
                } else {
                    TerminatorKind::Eos
                };
                tracing::info!(parent = %self.parent_name(p), kind = ?kind, replica = env.replica_id, seq = env.seq, "terminator");
                let (parent, replica) = (self.parent_name(p).to_owned(), env.replica_id);
                let at = || format!("{parent} replica {replica} {kind:?}");
                soft_barrier(Barrier::EosRecordBefore, at).await;
                let in_ledger = match &self.ledger {
                    Some(ledger) => match ledger
                        .record_terminator(&parent, replica, kind, env.seq, env.error.as_ref())
                        .await
                    {
                        Ok(_) => true,
                        Err(e) => {
                            tracing::warn!(parent = %parent, "terminator not recorded in the ledger, held instead: {}", e.log_line());
                            false
                        }
                    },
                    None => false,
                };
                let recorded = self
                    .drain
                    .record(p, env.replica_id, kind, env.seq, env.error);
                soft_barrier(Barrier::EosRecordAfter, at).await;
                // EOS-2: with a durable shared ledger the record is the fact a replacement
                // recovers, so the terminator is acked once recorded.
                if in_ledger {
                    Recorded::Duplicate
                } else {
                    recorded
                }
            }
            Ok(_) => Recorded::Duplicate, // a DATA envelope on the terminator subject: ignore
            Err(e) => {
                tracing::warn!(parent = %self.parent_name(p), "undecodable terminator: {e}");
                self.drain.record_undecodable(p)
            }
        };
        if recorded == Recorded::New && !self.drain.is_stopped(p) {
            // EOS-2: hold it (kept alive by the transport's keepalive) until P is stopped.
            self.held_terminators[p].push(d.handle);
        } else {
            d.handle.ack().await;
        }
    }

    /// The first half of folding a DATA delivery, everything before it is noted as
    /// received: a replay for another node is acked and skipped (DELIV-16), undecodable bytes
    /// are poison (DELIV-15), a terminator on a data queue is acked and ignored. `None` when
    /// the delivery was settled here.
    async fn admit_data(&mut self, d: Delivery, settler: &mut Settler) -> Option<Admitted> {
        // DELIV-16: a replay addressed to another node.
        if d.header(REPLAY_TARGET)
            .is_some_and(|t| t != self.cfg.node_name)
        {
            d.handle.ack().await;
            self.skipped += 1;
            return None;
        }
        let durable = &self.data_durables[d.parent];
        let message_id = d.header("Nats-Msg-Id").map_or_else(
            || format!("{}:{}", durable.stream, d.stream_seq),
            str::to_owned,
        );
        let held = Held {
            handle: d.handle.clone(),
            raw: d.payload.clone(),
            stream_seq: d.stream_seq,
            num_delivered: d.num_delivered,
            blob_ref: None,
            message_id,
            noted: None,
        };
        let env = match envelope::decode_bytes(d.payload.clone()) {
            Ok(env) => env,
            Err(e) => {
                // DELIV-15: undecodable input is poison, before any node sees it.
                let err = VfError::new(ErrorCode::PoisonDecode, e.to_string())
                    .with_context("node", self.cfg.node_name.clone());
                settler.counts.undecodable += 1;
                crate::health::record(|m| {
                    m.record_drop(crate::health::metrics::DROP_UNDECODABLE, 1);
                });
                settler.fail(&[held], &err, Disposition::Poison).await;
                return None;
            }
        };
        if env.is_stop_signal() {
            d.handle.ack().await; // a terminator on a data queue is acked and ignored
            return None;
        }
        Some(Admitted {
            parent: d.parent,
            held,
            env,
        })
    }

    /// The rest of folding a DATA delivery once it is noted as received: ownership, the blob,
    /// the join.
    async fn fold_data(&mut self, admitted: Admitted, settler: &mut Settler) {
        let Admitted {
            parent: parent_index,
            mut held,
            env,
        } = admitted;
        // PART-4 / PART-3a: ownership.
        if let Some(by) = self.cfg.partition_by.clone()
            && self.cfg.is_partitioned()
        {
            let key = partition::partition_key(&by, &env.trace_id, Some(&env.metadata));
            let nb = u32::try_from(self.cfg.nb_tasks).unwrap_or(u32::MAX);
            let owner = partition::owner(key.as_deref(), nb, KeyPolicy::Reject);
            if !owner.is_owned_by(self.replica()) {
                // PART-4: ack and skip before any blob fetch — once the id is noted — and
                // after a confirmed ack release this replica's share of an offloaded payload
                // (BLOB-6).
                if !held.noted_or_handed_back().await {
                    return;
                }
                let confirmed = held.handle.ack().await.is_confirmed();
                if confirmed && let (Some(store), Some(r)) = (&self.blob, env.blob_ref()) {
                    store.release(r).await;
                }
                self.skipped += 1;
                return;
            }
            if owner.must_reject(KeyPolicy::Reject) {
                let err = VfError::poison_partition_key(&self.cfg.node_name, &by, key.as_deref());
                crate::health::record(|m| {
                    m.record_drop(crate::health::metrics::DROP_INVALID_PARTITION_KEY, 1);
                });
                settler.fail(&[held], &err, Disposition::Poison).await;
                return;
            }
        }
        let env = match self.resolve_blob(env, &mut held).await {
            Ok(env) => env,
            Err(err) => return fail_fetch(held, &err, settler).await,
        };
        let parent = self.parent_name(parent_index).to_owned();
        let entry = Entry {
            producer_name: env.producer_name,
            trace_id: env.trace_id,
            seq: env.seq,
            event_ts: env.event_ts,
            payload: Member {
                payload: env.payload,
                metadata: env.metadata,
                replica_id: env.replica_id,
            },
        };
        if let Err(e) = self.join.add(&parent, entry, held) {
            tracing::error!("join refused a delivery: {e}");
        }
    }

    /// Resolves an offloaded payload (BLOB-3) now, unless it is fetched when its group is
    /// handed to the node ([`Receiver::fetch_payloads`]); either way the blob share is
    /// released after the ack.
    async fn resolve_blob(&self, mut env: Envelope, held: &mut Held) -> Result<Envelope, VfError> {
        if let Payload::BlobRef(r) = &env.payload {
            held.blob_ref = Some(r.r#ref.clone());
            if !self.fetch_late {
                env.payload = blob::resolve(r, self.blob.as_ref()).await?;
            }
        }
        Ok(env)
    }

    /// Fetches the offloaded payload of a group that is one delivery, just before the node
    /// gets it (BLOB-3) — unless the node forwards the reference itself. `None` when the
    /// fetch failed and the delivery was settled (DELIV-15, or NAKed when the store is
    /// unreachable).
    async fn fetch_payloads(
        &self,
        mut group: ReadyGroup<Held, Member>,
        settler: &mut Settler,
    ) -> Option<ReadyGroup<Held, Member>> {
        if !self.fetch_late || self.forward_refs {
            return Some(group);
        }
        let Some(GroupInput::Entry(entry)) = group.inputs.first_mut() else {
            return Some(group);
        };
        let Payload::BlobRef(r) = &entry.payload.payload else {
            return Some(group);
        };
        match blob::resolve(r, self.blob.as_ref()).await {
            Ok(payload) => {
                entry.payload.payload = payload;
                Some(group)
            }
            Err(err) => {
                if let Some(held) = group.handles.into_iter().next() {
                    fail_fetch(held, &err, settler).await;
                }
                None
            }
        }
    }

    /// EOS-3 (or the EOS-7 barrier where it governs) for every parent that has a terminator
    /// and is not stopped yet; EOS-4 on stop.
    ///
    /// # Errors
    /// StaleAuthority when a newer epoch already committed a completion (exit 4).
    async fn evaluate_drain(&mut self) -> Result<(), VfError> {
        for p in 0..self.cfg.parent_names.len() {
            if !self.drain.has_terminator(p) || self.drain.is_stopped(p) {
                continue;
            }
            let queue_empty = self.inbox.queued_for_parent(p) == 0;
            let held = self.join.has_pending_from(&self.cfg.parent_names[p]);
            let observation = if queue_empty && !held {
                self.observe(p).await
            } else {
                Observation::unknown("busy", "local work outstanding")
            };
            let stopped = match self.barrier_replicas(p) {
                Some(expected) => {
                    let check =
                        self.drain
                            .barrier_check(p, expected, queue_empty, held, &observation);
                    self.complete_by_barrier(p, check).await?
                }
                None => self
                    .drain
                    .evaluate(p, self.now(), queue_empty, held, &observation),
            };
            if stopped {
                tracing::info!(parent = %self.parent_name(p), "parent drained");
                for h in std::mem::take(&mut self.held_terminators[p]) {
                    h.ack().await;
                }
            }
        }
        Ok(())
    }

    /// The rest of the EOS-7 barrier: (b) the received count, then the completion commit
    /// (fenced by this replica's epoch). `true` when parent `p` is now stopped. A ledger that
    /// cannot be read or written leaves P open (retried at the next probe).
    async fn complete_by_barrier(
        &mut self,
        p: usize,
        check: BarrierCheck,
    ) -> Result<bool, VfError> {
        let Some(ledger) = self.ledger.clone() else {
            return Ok(false);
        };
        let parent = self.parent_name(p).to_owned();
        let final_count = match check {
            BarrierCheck::NotYet => return Ok(false),
            BarrierCheck::Aborted { final_count } => final_count,
            BarrierCheck::Count { final_count } => {
                let durable = &self.data_durables[p].name;
                match ledger.received_count(&parent, durable).await {
                    Ok(received) if received >= final_count => final_count,
                    Ok(_) => return Ok(false),
                    Err(e) => {
                        tracing::warn!(parent = %parent, "received ids unreadable: {}", e.log_line());
                        return Ok(false);
                    }
                }
            }
        };
        match ledger
            .commit_completion(&parent, self.epoch, final_count)
            .await
        {
            Ok(()) => Ok(self.drain.mark_stopped(p)),
            Err(e) if e.code == ErrorCode::StaleAuthority => Err(e),
            Err(e) => {
                tracing::warn!(parent = %parent, "completion not committed: {}", e.log_line());
                Ok(false)
            }
        }
    }

    async fn observe(&self, p: usize) -> Observation<PendingCounts> {
        match self.data_durables[p].observe(&self.broker).await {
            Observation::Known(c) => Observation::Known(PendingCounts {
                num_pending: c.num_pending,
                num_ack_pending: c.num_ack_pending,
            }),
            Observation::Unknown { reason, detail } => Observation::Unknown { reason, detail },
        }
    }

    /// JOIN-21a: groups that can never complete once every parent ended are evicted.
    async fn end_of_stream_flush(&mut self, settler: &mut Settler) {
        let parents = self.cfg.parent_names.clone();
        if !self.drain.every_terminator()
            || !self.join.holds_any(parents.iter().map(String::as_str))
        {
            return;
        }
        for p in 0..parents.len() {
            if self.drain.is_stopped(p) {
                continue;
            }
            let quiet = self.inbox.queued_for_parent(p) == 0
                && matches!(self.observe(p).await, Observation::Known(c) if c.num_pending == 0);
            if !quiet {
                return;
            }
        }
        let flushed = self.join.flush_all();
        tracing::warn!(
            groups = flushed,
            "end of stream: incomplete join groups evicted"
        );
        settler.resolve(self.join.take_resolutions()).await;
    }

    fn parent_name(&self, p: usize) -> &str {
        self.cfg.parent_names.get(p).map_or("?", String::as_str)
    }

    fn replica(&self) -> u32 {
        u32::try_from(self.cfg.replica_id()).unwrap_or(0)
    }

    /// SIGTERM (START-2): stop fetching and hand back what was prefetched.
    pub(crate) async fn quiesce(&mut self) -> usize {
        self.inbox.quiesce().await
    }

    /// Closing hands back every delivery still held (DELIV-1).
    pub(crate) async fn close(&mut self) -> usize {
        self.inbox.close().await
    }
}

/// Settles a delivery whose offloaded payload could not be fetched: an unreachable store is
/// transient, NAKed with the DELIV-7 delay (BLOB-3); a missing or corrupt blob is poison
/// (DELIV-15).
async fn fail_fetch(held: Held, err: &VfError, settler: &mut Settler) {
    if err.disposition == Some(Disposition::Transient) {
        held.hand_back().await;
    } else {
        settler.counts.undecodable += 1;
        settler.fail(&[held], err, Disposition::Poison).await;
    }
}
