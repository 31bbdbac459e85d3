//! Inbound: one pull loop per (parent, data|terminator) subscription feeding a bounded local
//! queue, the keepalive ticker, and the hand-back on close (§8.4, DELIV-1, DELIV-3).
//!
//! Why permit-before-fetch: a message fetched into a full queue would sit leased in the
//! loop's hands — a lease STREAM-15's credit (`item_credit + prefetch`) does not account for.
//! So each loop first takes the free queue slots (semaphore permits; at least one), then
//! waits for the byte budget, and only then opens one pull request for as many messages as
//! it holds slots, with a short expiry ([`FETCH_EXPIRY`]) and, under a budget, the bytes the
//! budget has left ([`pull_bytes`]). Each permit travels with the queued delivery and is
//! returned when the receiver takes it out, so "room in the queue" is exact. From the moment
//! it is fetched until it is resolved, a delivery sits in the held set, where the ticker
//! renews its lease every `max(1 s, ack_wait / 3)`: nothing ages past `ack_wait` while
//! parked or processed, and close knows exactly what to hand back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::connect::Broker;
use super::delivery::{
    ACK_CONFIRM_TIMEOUT, Core, Delivery, DeliveryHandle, DeliveryKind, Settlement,
};
use super::durables::BoundDurable;
use super::held::{HeldSet, HoldKey, keepalive_period};
use super::pull::PullRequest;

/// Local queue depth per subscription (STREAM-15 `prefetch`, §8.4), data and terminators.
pub const QUEUE_CAPACITY: usize = 4;
/// How long one pull request stays open (§8.4 leaves it to the implementation). Short,
/// because closing waits for the open request to end rather than drop what it may deliver:
/// 250 ms bounds that wait (a worker's exit after its drain) for four idle requests a second.
pub const FETCH_EXPIRY: Duration = Duration::from_millis(250);
/// How often the keepalive ticker looks for due renewals; fine enough that a 1 s period
/// renews well inside a 2 s `ack_wait`.
pub const KEEPALIVE_TICK: Duration = Duration::from_millis(250);
/// Pause after a failed fetch before the loop tries again.
pub const FETCH_ERROR_PAUSE: Duration = Duration::from_millis(500);
/// Extra time close gives a pull loop to finish the fetch it has in flight, so a message the
/// server already dispatched is handed back rather than left leased.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long close waits for the hand-back NAKs to reach the server.
pub const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// An admission decision, made in the pull loop before a delivery is queued (PART-4,
/// DELIV-16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Queue it for the receiver.
    Queue,
    /// Not ours (another replica owns it, or a replay addressed elsewhere): ack it at once
    /// (ack-sync) and never queue it.
    AckAndSkip,
}

/// Decides from headers and a payload-free peek. Runs on the pull loop: keep it cheap and
/// non-blocking; when in doubt (bytes it cannot parse) return [`Admit::Queue`].
pub type AdmissionFilter = Arc<dyn Fn(&Delivery) -> Admit + Send + Sync>;

/// Called after a skip's ack was *confirmed* (an unconfirmed skip calls nothing: the
/// redelivery repeats the decision). Runs on the pull loop: spawn anything slow.
pub type SkipHook = Arc<dyn Fn(&Delivery) + Send + Sync>;

/// The admission hook of one subscription.
#[derive(Clone)]
pub struct Admission {
    /// The decision.
    pub filter: AdmissionFilter,
    /// What to do after a confirmed skip (EOS-7 received set, BLOB-6 share release).
    pub on_skipped: Option<SkipHook>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("on_skipped", &self.on_skipped.is_some())
            .finish_non_exhaustive()
    }
}

/// What to subscribe: a bound durable, whose parent and kind it serves.
#[derive(Debug, Clone)]
pub struct SubscriptionSpec {
    /// Parent index (in `VF_PARENT_NAMES` order), copied into every delivery.
    pub parent: usize,
    /// Data or terminator.
    pub kind: DeliveryKind,
    /// The durable to fetch from; its *effective* `ack_wait` sets the keepalive period.
    pub durable: BoundDurable,
    /// Local queue depth ([`QUEUE_CAPACITY`] unless a test says otherwise).
    pub capacity: usize,
    /// Optional admission hook (data subscriptions of partitioned nodes, replays).
    pub admission: Option<Admission>,
}

impl SubscriptionSpec {
    /// A subscription with the protocol's queue depth and no admission hook.
    pub fn new(parent: usize, kind: DeliveryKind, durable: BoundDurable) -> Self {
        SubscriptionSpec {
            parent,
            kind,
            durable,
            capacity: QUEUE_CAPACITY,
            admission: None,
        }
    }

    /// Adds an admission hook.
    #[must_use]
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Some(admission);
        self
    }
}

/// Receiver-wide settings.
#[derive(Debug, Clone, Copy)]
pub struct InboxConfig {
    /// `VF_PREFETCH_BYTES`: the most payload bytes held unresolved (parked or handed out)
    /// before the pull loops pause; each subscription may exceed it by one message (see
    /// [`pull_bytes`]).
    pub byte_budget: Option<u64>,
    /// Pull request expiry ([`FETCH_EXPIRY`]).
    pub fetch_expiry: Duration,
    /// Ack confirmation wait ([`ACK_CONFIRM_TIMEOUT`]).
    pub ack_confirm: Duration,
    /// Keepalive ticker granularity ([`KEEPALIVE_TICK`]).
    pub keepalive_tick: Duration,
}

impl Default for InboxConfig {
    fn default() -> Self {
        InboxConfig {
            byte_budget: None,
            fetch_expiry: FETCH_EXPIRY,
            ack_confirm: ACK_CONFIRM_TIMEOUT,
            keepalive_tick: KEEPALIVE_TICK,
        }
    }
}

/// A delivery parked in a local queue, with the queue slot it occupies.
struct Parked {
    delivery: Delivery,
    _slot: OwnedSemaphorePermit,
}

/// One subscription's local state.
struct Lane {
    parent: usize,
    kind: DeliveryKind,
    label: String,
    queue: Mutex<VecDeque<Parked>>,
    slots: Arc<Semaphore>,
    skipped: AtomicU64,
}

impl Lane {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Parked>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Everything a pull loop needs.
struct LoopContext {
    index: usize,
    lane: Arc<Lane>,
    core: Arc<Core>,
    consumer: PullConsumer,
    context: jetstream::Context,
    period: Duration,
    admission: Option<Admission>,
    arrived: Arc<Notify>,
    stop: watch::Receiver<bool>,
    config: InboxConfig,
    /// Subscriptions sharing the byte budget.
    lanes: Arc<AtomicUsize>,
    /// The smallest `max_bytes` a pull request may carry ([`pull_floor`]).
    floor: u64,
}

/// The receiving side of the broker: subscriptions, their pull loops and queues, keepalive.
///
/// The receive loop calls [`Inbox::recv`]; the task loop settles the handles it was given;
/// shutdown calls [`Inbox::quiesce`] (SIGTERM: hand back what is parked) and/or
/// [`Inbox::close`] (hand back everything still held).
pub struct Inbox {
    broker: Broker,
    core: Arc<Core>,
    config: InboxConfig,
    lanes: Vec<Arc<Lane>>,
    /// `lanes.len()`, shared with the pull loops that split the byte budget.
    lane_count: Arc<AtomicUsize>,
    loops: Vec<JoinHandle<()>>,
    keepalive: Option<JoinHandle<()>>,
    arrived: Arc<Notify>,
    stop_pulling: watch::Sender<bool>,
    closed: bool,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("subscriptions", &self.lanes.len())
            .field("held", &self.core.held.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Inbox {
    /// A receiver on `broker` with no subscriptions yet; starts the keepalive ticker, so it
    /// must be called inside a Tokio runtime.
    pub fn new(broker: &Broker, config: InboxConfig) -> Self {
        let core = Arc::new(Core {
            held: HeldSet::default(),
            client: broker.client().clone(),
            ack_confirm: config.ack_confirm,
        });
        let (stop_pulling, _) = watch::channel(false);
        let keepalive = tokio::spawn(keepalive_loop(core.clone(), config.keepalive_tick));
        Inbox {
            broker: broker.clone(),
            core,
            config,
            lanes: Vec::new(),
            lane_count: Arc::new(AtomicUsize::new(0)),
            loops: Vec::new(),
            keepalive: Some(keepalive),
            arrived: Arc::new(Notify::new()),
            stop_pulling,
            closed: false,
        }
    }

    /// Starts pulling from `spec.durable` into its own bounded queue; returns the
    /// subscription index deliveries carry. A closed or quiesced inbox starts no loop.
    pub fn subscribe(&mut self, spec: SubscriptionSpec) -> usize {
        let index = self.lanes.len();
        let lane = Arc::new(Lane {
            parent: spec.parent,
            kind: spec.kind,
            label: spec.durable.label(),
            queue: Mutex::new(VecDeque::with_capacity(spec.capacity)),
            slots: Arc::new(Semaphore::new(spec.capacity.max(1))),
            skipped: AtomicU64::new(0),
        });
        self.lanes.push(lane.clone());
        self.lane_count.store(self.lanes.len(), Ordering::Relaxed);
        if self.closed || *self.stop_pulling.borrow() {
            return index;
        }
        let context = LoopContext {
            index,
            lane,
            core: self.core.clone(),
            consumer: spec.durable.consumer().clone(),
            context: self.broker.jetstream().clone(),
            period: keepalive_period(spec.durable.ack_wait()),
            admission: spec.admission,
            arrived: self.arrived.clone(),
            stop: self.stop_pulling.subscribe(),
            config: self.config,
            lanes: self.lane_count.clone(),
            floor: pull_floor(self.broker.client().server_info().max_payload),
        };
        self.loops.push(tokio::spawn(pull_loop(context)));
        index
    }

    /// Takes every delivery parked right now, from every queue (T18: fold everything).
    pub fn try_recv(&self) -> Vec<Delivery> {
        let mut out = Vec::new();
        for lane in &self.lanes {
            let parked: Vec<Parked> = lane.queue().drain(..).collect();
            // Dropping each `Parked` returns its queue slot to the pull loop.
            out.extend(parked.into_iter().map(|p| p.delivery));
        }
        out
    }

    /// Waits up to `wait` for any queue to hold a delivery, then returns every delivery
    /// parked at that moment (data and terminators alike); empty after `wait` or once closed.
    pub async fn recv(&self, wait: Duration) -> Vec<Delivery> {
        let deadline = Instant::now() + wait;
        loop {
            let ready = self.try_recv();
            if !ready.is_empty() || self.closed {
                return ready;
            }
            if tokio::time::timeout_at(deadline, self.arrived.notified())
                .await
                .is_err()
            {
                return self.try_recv();
            }
        }
    }

    /// Deliveries parked in one subscription's queue (JOIN-21a needs "empty local queue").
    pub fn queued(&self, subscription: usize) -> usize {
        self.lanes.get(subscription).map_or(0, |l| l.queue().len())
    }

    /// Deliveries parked in every queue of `parent` (data and terminator).
    pub fn queued_for_parent(&self, parent: usize) -> usize {
        self.lanes
            .iter()
            .filter(|l| l.parent == parent)
            .map(|l| l.queue().len())
            .sum()
    }

    /// Deliveries the admission hook skipped with a confirmed ack, on one subscription.
    pub fn skipped(&self, subscription: usize) -> u64 {
        self.lanes
            .get(subscription)
            .map_or(0, |l| l.skipped.load(Ordering::Relaxed))
    }

    /// Deliveries held unresolved (parked or handed out).
    pub fn held(&self) -> usize {
        self.core.held.len()
    }

    /// Payload bytes held unresolved (what `VF_PREFETCH_BYTES` bounds).
    pub fn resident_bytes(&self) -> u64 {
        self.core.held.resident()
    }

    /// Stops every pull loop (letting an in-flight fetch land and be handed back) and NAKs,
    /// without delay, every delivery still *parked*; handed-out deliveries stay held and
    /// renewed for the task to settle. The quiesce half of a SIGTERM. Returns how many
    /// parked deliveries were handed back. Idempotent.
    pub async fn quiesce(&mut self) -> usize {
        let _ = self.stop_pulling.send(true);
        let grace = self.config.fetch_expiry + CLOSE_GRACE;
        let loops = std::mem::take(&mut self.loops);
        futures::future::join_all(loops.into_iter().map(|mut task| async move {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                task.abort();
            }
        }))
        .await;
        let mut handed_back = 0;
        for delivery in self.try_recv() {
            if delivery.handle.nak(None).await == Settlement::Sent {
                handed_back += 1;
            }
        }
        if handed_back > 0 && !self.broker.flush(CLOSE_FLUSH_TIMEOUT).await {
            tracing::debug!("hand-back NAKs not flushed at quiesce");
        }
        handed_back
    }

    /// Stops pulling and hands back (NAK, no delay) every delivery still held — parked,
    /// handed out, held terminators — so survivors get them at once (DELIV-1); stops the
    /// keepalive. Handles settled afterwards are no-ops. Returns how many were handed back.
    /// Idempotent.
    pub async fn close(&mut self) -> usize {
        if self.closed {
            return 0;
        }
        let mut handed_back = self.quiesce().await;
        self.closed = true;
        if let Some(ticker) = self.keepalive.take() {
            ticker.abort();
        }
        for reply in self.core.held.drain() {
            match self
                .core
                .client
                .publish(reply, AckKind::Nak(None).into())
                .await
            {
                Ok(()) => handed_back += 1,
                Err(e) => tracing::debug!(error = %e, "hand-back NAK failed at close"),
            }
        }
        if !self.broker.flush(CLOSE_FLUSH_TIMEOUT).await {
            tracing::debug!("hand-back NAKs not flushed at close");
        }
        if handed_back > 0 {
            tracing::info!(handed_back, "handed back unsettled deliveries at close");
        }
        self.arrived.notify_waiters();
        handed_back
    }
}

impl Drop for Inbox {
    /// Without `close()` nothing can be NAKed here (no async in drop): the tasks stop and
    /// the leases lapse after `ack_wait`, as for a crashed process.
    fn drop(&mut self) {
        for task in &self.loops {
            task.abort();
        }
        if let Some(ticker) = &self.keepalive {
            ticker.abort();
        }
    }
}

/// Renews every held delivery whose period has passed (DELIV-3).
async fn keepalive_loop(core: Arc<Core>, tick: Duration) {
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        for reply in core.held.due(Instant::now()) {
            if let Err(e) = core.client.publish(reply, AckKind::Progress.into()).await {
                tracing::debug!(error = %e, "keepalive in_progress failed");
            }
        }
    }
}

/// Resolves when `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Room a pull request's `max_bytes` leaves above the broker's `max_payload`: the server
/// counts a message's subject (a control line is at most 4 KiB) and its stored overhead
/// with its payload and headers, and never splits a message.
const PULL_BYTES_ROOM: u64 = 8 * 1024;

/// The smallest `max_bytes` a pull request carries: one message of the largest size the
/// broker accepts. A pull request whose `max_bytes` cannot hold the next message ends with
/// a 409 without delivering it, so a smaller one could stall the subscription.
fn pull_floor(max_payload: usize) -> u64 {
    u64::try_from(max_payload)
        .unwrap_or(u64::MAX)
        .saturating_add(PULL_BYTES_ROOM)
}

/// How many messages, and how many bytes (`None`: no byte limit), the next pull request asks
/// for, given `slots` free queue slots.
///
/// Under a budget each of the `lanes` subscriptions asks for its share of what the budget
/// has left, so the server stops at the budget itself; when that share is below `floor`
/// the request asks for one message, as the spec's one-message tolerance allows. A
/// subscription thus exceeds its share by one message at most.
fn pull_bytes(
    slots: usize,
    budget: Option<u64>,
    resident: u64,
    lanes: usize,
    floor: u64,
) -> (usize, Option<u64>) {
    let Some(budget) = budget else {
        return (slots, None);
    };
    let lanes = u64::try_from(lanes.max(1)).unwrap_or(u64::MAX);
    let share = budget.saturating_sub(resident) / lanes;
    if share < floor {
        (1, None)
    } else {
        (slots, Some(share))
    }
}

/// The pull loop of one subscription.
async fn pull_loop(mut cx: LoopContext) {
    loop {
        if *cx.stop.borrow() {
            return;
        }
        // 1. Room in the local queue first: at least one slot, then every other free one,
        //    so one pull request asks for as many messages as the queue can take.
        let first = tokio::select! {
            slot = cx.lane.slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            () = stopped(&mut cx.stop) => return,
        };
        let mut slots = vec![first];
        while let Ok(slot) = cx.lane.slots.clone().try_acquire_owned() {
            slots.push(slot);
        }
        // 2. Then the byte budget.
        if let Some(budget) = cx.config.byte_budget {
            while cx.core.held.resident() >= budget {
                tokio::select! {
                    () = cx.core.held.released.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    () = stopped(&mut cx.stop) => return,
                }
            }
        }
        // 3. Then one pull request for `slots.len()` messages (and the budget's share of
        //    bytes), read to its end and never cancelled midway: a message the server
        //    dispatched must end up held (and handed back at close), not dropped in a client
        //    buffer. Slots left unused when the request ends go back to the queue.
        let (max, max_bytes) = pull_bytes(
            slots.len(),
            cx.config.byte_budget,
            cx.core.held.resident(),
            cx.lanes.load(Ordering::Relaxed),
            cx.floor,
        );
        slots.truncate(max);
        let request = PullRequest::open(
            &cx.consumer,
            &cx.context,
            max,
            max_bytes,
            cx.config.fetch_expiry,
        );
        let mut batch = match request.await {
            Ok(batch) => batch,
            Err(e) => {
                fetch_failed(&mut cx, &e).await;
                continue;
            }
        };
        while let Some(next) = batch.next().await {
            match next {
                Ok(message) => {
                    let Some(slot) = slots.pop() else {
                        // More than asked for cannot happen; never drop what was dispatched.
                        tracing::warn!(durable = %cx.lane.label, "pull request over-delivered");
                        if let Some(delivery) = hold(&cx, message) {
                            let _ = delivery.handle.nak(None).await;
                        }
                        continue;
                    };
                    take(&cx, message, slot).await;
                }
                Err(e) => {
                    fetch_failed(&mut cx, &e).await;
                    break;
                }
            }
        }
    }
}

/// A failed pull request: logged (unless stopping) and paused before the next one.
async fn fetch_failed(cx: &mut LoopContext, error: &str) {
    if *cx.stop.borrow() {
        return;
    }
    tracing::warn!(durable = %cx.lane.label, %error, "pull fetch failed");
    tokio::select! {
        () = tokio::time::sleep(FETCH_ERROR_PAUSE) => {}
        () = stopped(&mut cx.stop) => {}
    }
}

/// One fetched message: held, then skipped (admission) or queued with the slot it occupies.
///
/// Also while stopping: a delivery NAKed here would be redelivered into this same open pull
/// request and NAKed again, each time spending one of its `max_deliver` deliveries until the
/// broker gives up on it. Parked, it is handed back once, after the pull loops have ended
/// (`Inbox::quiesce`).
async fn take(cx: &LoopContext, message: jetstream::Message, slot: OwnedSemaphorePermit) {
    let Some(delivery) = hold(cx, message) else {
        return;
    };
    if let Some(admission) = &cx.admission
        && (admission.filter)(&delivery) == Admit::AckAndSkip
    {
        skip(cx, admission, &delivery).await;
        return;
    }
    cx.lane.queue().push_back(Parked {
        delivery,
        _slot: slot,
    });
    cx.arrived.notify_one();
}

/// Puts a fetched message in the held set and builds its [`Delivery`]; `None` (with a
/// warning) for a message without JetStream metadata, which cannot be settled.
fn hold(cx: &LoopContext, message: jetstream::Message) -> Option<Delivery> {
    let (stream_seq, num_delivered) = match message.info() {
        Ok(info) => (
            info.stream_sequence,
            u64::try_from(info.delivered).unwrap_or(1),
        ),
        Err(e) => {
            tracing::warn!(durable = %cx.lane.label, error = %e, "fetched message without JetStream metadata; ignored");
            return None;
        }
    };
    let message = message.message;
    let reply = message.reply?;
    let key = HoldKey {
        subscription: cx.index,
        stream_seq,
    };
    let size = u64::try_from(message.payload.len()).unwrap_or(u64::MAX);
    let (token, superseded_older) = cx.core.held.insert(key, reply, size, cx.period);
    Some(Delivery {
        parent: cx.lane.parent,
        kind: cx.lane.kind,
        subscription: cx.index,
        subject: message.subject,
        payload: message.payload,
        headers: message.headers,
        stream_seq,
        num_delivered,
        superseded_older,
        handle: DeliveryHandle::new(cx.core.clone(), key, token),
    })
}

/// Acks a delivery the admission hook refused; only a confirmed ack counts and calls the
/// hook. An unconfirmed one is dropped from the held set, so the broker redelivers it after
/// `ack_wait` if the ack was lost, and the hook decides again.
async fn skip(cx: &LoopContext, admission: &Admission, delivery: &Delivery) {
    match delivery.handle.ack().await {
        Settlement::Confirmed => {
            cx.lane.skipped.fetch_add(1, Ordering::Relaxed);
            if let Some(hook) = &admission.on_skipped {
                hook(delivery);
            }
        }
        other => tracing::debug!(
            durable = %cx.lane.label, stream_seq = delivery.stream_seq, outcome = ?other,
            "skip ack not confirmed; the redelivery decides again"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: u64 = 1024 * 1024 + PULL_BYTES_ROOM;

    #[test]
    fn without_a_budget_a_request_asks_for_every_slot_and_no_bytes() {
        assert_eq!(pull_bytes(64, None, 5_000_000, 2, FLOOR), (64, None));
    }

    #[test]
    fn under_a_budget_each_subscription_asks_for_its_share_of_what_is_left() {
        let budget = 16 * 1024 * 1024;
        assert_eq!(
            pull_bytes(64, Some(budget), 0, 2, FLOOR),
            (64, Some(budget / 2))
        );
        assert_eq!(
            pull_bytes(64, Some(budget), budget - 4 * FLOOR, 2, FLOOR),
            (64, Some(2 * FLOOR))
        );
    }

    #[test]
    fn a_share_below_one_whole_message_asks_for_one_message() {
        // The spec's one-message tolerance: a byte limit the next message might not fit
        // would end the request without it.
        assert_eq!(pull_bytes(64, Some(FLOOR), 1, 1, FLOOR), (1, None));
        assert_eq!(pull_bytes(64, Some(1), 0, 1, FLOOR), (1, None));
        assert_eq!(pull_bytes(64, Some(FLOOR), FLOOR + 7, 1, FLOOR), (1, None));
        assert_eq!(pull_bytes(64, Some(3 * FLOOR), 0, 4, FLOOR), (1, None));
    }

    #[test]
    fn the_floor_holds_the_largest_message_the_broker_accepts() {
        assert_eq!(pull_floor(1 << 20), (1 << 20) + PULL_BYTES_ROOM);
        assert_eq!(pull_floor(usize::MAX), u64::MAX);
    }
}
