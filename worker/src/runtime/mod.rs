//! One node replica from its `VF_*` environment: the startup order of START-1, then the
//! producer loop or the processor/consumer loop, then the exit path (§15.4).
//!
//! - [`output`] — encode, offload and publish this node's envelopes.
//! - [`settle`] — acks, the failure ladder and the join's resolutions.
//! - [`receive`] — the receive loop: join, terminators, drain (§8.4, §9).
//! - [`produce`] — the producer loop (LOOP-2).
//! - [`process`] — the processor and consumer loop (LOOP-3/4).
//! - [`guards`] — GPU and asset checks, health server, progress deadline and watchdog.
//! - [`window`] — outputs in flight: receipts and acks on their own tasks, taken back in order.
//! - [`signals`] — the control stop, SIGTERM and SIGINT flags the loops check.
//! - [`hold`] — after a clean end, stay up until stopped when `VF_ON_FINISH=hold`.
//! - [`node_error`] — a node's own error classified by `VF_ON_ERROR` (ERR-2).
//! - [`offload`] — a call that may block, kept from stalling the runtime's I/O.
//!
//! The run ledger is opened at step 7 (`crate::store`): the slot claim, then — when the store
//! is durable and shared — terminators, received ids and completions (receive), published ids
//! (output) and sink effect markers (IDEM-1).

mod guards;
mod hold;
mod node_error;
pub(crate) mod offload;
mod output;
mod process;
mod produce;
mod receive;
mod settle;
mod signals;
mod window;

pub use signals::Signals;

/// Whether the node the environment describes is light: a built-in node whose calls never
/// block (`may_block() == false`: the identity without `fps`, the void sink, an unpaced
/// `IntProducer` or `SyntheticFrameProducer`), with no component and no fault schedule.
/// Such a node runs on a current-thread runtime: its loop and its I/O (the connection,
/// receipts, acks, health) share one thread, so a message crosses no thread on its way
/// through the worker — about a fifth of the identity hop's CPU (docs/PERFORMANCE.md). A node that may block keeps the multi-threaded
/// runtime, where `block_in_place` hands the I/O to another worker while it runs. Anything
/// that does not parse or build is not light; the node's own startup reports it.
pub fn light(env: &Environment) -> bool {
    let vars = env.vars();
    if vars.contains_key(crate::component::COMMAND_VAR)
        || FaultConfig::from_env(vars).schedule_json.is_some()
    {
        return false;
    }
    let Ok(cfg) = WorkerConfig::from_environment(env) else {
        return false;
    };
    let Some(class) = cfg.node_class.as_deref() else {
        return false;
    };
    // Building a source may open its input: only those that compute their items are
    // built here (the others are not light).
    if cfg.kind == NodeKind::Producer
        && !canonical_class(class).is_some_and(|c| COMPUTED_SOURCES.contains(&c))
    {
        return false;
    }
    match build_node(class, cfg.kind, &cfg.node_params) {
        Ok(BuiltNode::Processor(node)) => !node.may_block(),
        Ok(BuiltNode::Consumer { node, .. }) => !node.may_block(),
        Ok(BuiltNode::Producer(node)) => !node.may_block(),
        Err(_) => false,
    }
}

/// Built-in sources that compute their items (no file, socket or device) and so can be built
/// twice without effect: the ones [`light`] considers, when unpaced.
const COMPUTED_SOURCES: [&str; 2] = [
    "videoflow.producers.basic.IntProducer",
    "videoflow.rs.producers.SyntheticFrameProducer",
];

use std::sync::Arc;

use videoflow_core::errors::{EXIT_INTERRUPTED, EXIT_TERMINATED, ErrorCode, VfError};
use videoflow_core::model::NodeKind;

use crate::blob::{self, BlobStore};
use crate::broker::{
    self, Broker, DeliveryKind, DurableRequest, Inbox, InboxConfig, PublishMode, Publisher,
    SubscriptionSpec,
};
use crate::config::{Environment, FaultConfig, WorkerConfig};
use crate::delivery::Breaker;
use crate::emit::Emitter;
use crate::idempotency::IdempotencyStore;
use crate::join::{JoinAssembler, SystemClock};
use crate::nodes::registry::canonical_class;
use crate::nodes::{BuiltNode, NodeContext, build_node};
use crate::store::RunLedger;
use output::Output;
use process::{Loop, LoopEnd, Sink};
use produce::ProducerEnd;
use receive::Receiver;
use settle::Settler;

/// Local queue depth of a REALTIME node's data subscriptions (see `build_loop`).
const REALTIME_QUEUE_CAPACITY: usize = 1;
/// Local queue depth at most, whatever credit a durable grants: one pull request asks for
/// at most this many messages, which keeps a fetch's burst (and its memory) bounded.
const MAX_QUEUE_CAPACITY: usize = 1024;

/// Runs one node from `vars` (the process environment, injected) and returns the exit status.
/// Every typed failure is logged, written to the termination log and mapped to its class's
/// exit code.
pub async fn run_node(env: &Environment, signals: Signals) -> i32 {
    let termination_log = crate::config::termination_log_path(env.vars());
    match start(env, &signals).await {
        Ok(code) => code,
        Err(e) => crate::termination::report(&termination_log, &e),
    }
}

/// The worker's life from configuration to a clean exit status, or the error that ended it.
async fn start(env: &Environment, signals: &Signals) -> Result<i32, VfError> {
    // START-1 step 1: the conformance fault schedule (ENV-16/17), before anything it guards.
    crate::faults::install_configured(&FaultConfig::from_env(env.vars()))?;
    // START-1 step 2: configuration, before any connection.
    let cfg = Arc::new(WorkerConfig::from_environment(env)?);
    tracing::info!(node = %cfg.node_name, kind = %cfg.kind.as_str(), replica = cfg.replica_id(), flow = %cfg.flow_id, run = %cfg.run_id, "starting");
    // HEALTH-2: the first beat is taken now, before the messenger connects.
    crate::health::install(crate::health::HealthState::new(&cfg.node_name));
    // Step 3: explicit profiles read back over its own connection (ADM-3).
    crate::admission::verify_bound_profiles(&cfg).await?;
    // A `rediss://` store whose certificate is not trusted never heals: refuse it now.
    if let Some(url) = &cfg.blob_url {
        crate::store::tls::check_trust("VF_BLOB_REDIS_URL", url).await?;
    }
    crate::store::tls::check_trust("VF_RUNTIME_STORE_URL", &cfg.runtime_store_url).await?;
    // Step 4: the payload store.
    let blob = match &cfg.blob_url {
        Some(url) => Some(BlobStore::connect(
            url,
            cfg.blob_ttl_seconds,
            cfg.blob_readers,
        )?),
        None => None,
    };
    // Step 5: the node — an exec component when a command is given, else a built-in class.
    let node = match &cfg.component {
        Some(component) => crate::component::build_exec_node(&cfg, component)?,
        None => {
            let class = cfg.node_class.clone().ok_or_else(|| {
                VfError::new(ErrorCode::Config, "VF_NODE_CLASS is required.")
                    .with_remedy("Set VF_NODE_CLASS to a built-in node class, e.g. videoflow.processors.basic.IdentityProcessor, or run an exec component with `videoflow-worker exec -- <command>` (or VF_COMPONENT_COMMAND_JSON).")
            })?;
            build_node(&class, cfg.kind, &cfg.node_params)?
        }
    };
    // Step 6: GPU grant check, then asset check — before any connection and `open()`.
    let takes_gpu = matches!(node, BuiltNode::Processor(_) | BuiltNode::Producer(_));
    let gpu = guards::device_checks(&cfg, takes_gpu).await?;
    // Step 7: the runtime store; a replica without an id claims a slot (ENV-5 step 3), then
    // the run ledger under the replica id it ends up with.
    let store = crate::store::RuntimeStore::open(&cfg.runtime_store_url)?;
    // STORE-6: read back once; an unreadable ledger counts as not durable, and says so.
    let caps = store.capabilities().await;
    if let Some(warning) = crate::store::unobserved::ledger_warning("VF_RUNTIME_STORE_URL", &caps) {
        tracing::warn!(node = %cfg.node_name, "{warning}");
    }
    let (cfg, slot) =
        crate::store::lease::claim_replica_slot(cfg, &store, &caps, &signals.stop).await?;
    let replica = u32::try_from(cfg.replica_id()).unwrap_or(0);
    let ledger = RunLedger::open_with(
        store,
        &caps,
        &cfg.flow_id,
        &cfg.run_id,
        &cfg.node_name,
        replica,
        u32::try_from(cfg.nb_tasks).unwrap_or(1),
    )
    .await?;
    let epoch = slot.as_ref().map_or(0, |s| s.lease.epoch);
    // Step 8: the broker.
    let broker = broker::connect(&cfg.nats_url).await?;
    let _control =
        broker::subscribe_control(&broker, &cfg.flow_id, &cfg.run_id, &signals.stop).await?;
    broker::ensure_aged_node_stream(
        &broker,
        &cfg.flow_id,
        &cfg.run_id,
        &cfg.node_name,
        cfg.is_realtime(),
        None,
        cfg.stream_max_age,
    )
    .await?;
    let mut ctx = NodeContext::new(&cfg.flow_id, &cfg.run_id, &cfg.node_name, replica);
    ctx.gpu = gpu;
    let output = output_for(&cfg, &broker, blob.clone(), signals, replica)?.with_ledger(&ledger);
    if signals.interrupt.is_set() {
        return Ok(EXIT_INTERRUPTED); // START-3: SIGINT before the loop
    }
    let code = run_loop(
        &cfg, node, &broker, blob, output, signals, &ledger, epoch, &mut ctx,
    )
    .await?;
    end_of_slot(&cfg, slot, signals).await?;
    Ok(code)
}

/// After the loop: a replica whose slot lease was lost stops with a typed reason and a
/// termination record (another replica carries the slot on; CTRL-2: no EOS was sent); one that
/// ends cleanly releases its lease, so the next claimant of the slot need not wait a lease
/// length (a rollout replaces every replica).
async fn end_of_slot(
    cfg: &WorkerConfig,
    slot: Option<crate::store::SlotClaim>,
    signals: &Signals,
) -> Result<(), VfError> {
    let Some(slot) = slot else {
        return Ok(());
    };
    if signals.stop.reason().as_deref() == Some(crate::store::lease::STOP_REASON_AUTHORITY_LOST) {
        return Err(VfError::new(
            ErrorCode::StaleAuthority,
            format!(
                "{} lost the lease of its replica slot {} (epoch {}): it stopped without an \
                 end-of-stream, so the process that holds the slot now carries on.",
                cfg.node_name, slot.replica, slot.lease.epoch
            ),
        )
        .with_remedy(
            "Usually a ledger outage longer than VF_PARTITION_LEASE_SECONDS, or a process that \
             was paused that long; the platform restarts this replica, which claims a free slot.",
        )
        .with_context("slot", slot.replica));
    }
    if let Err(e) = slot.lease.release().await {
        tracing::warn!(
            "slot lease not released (it lapses by itself): {}",
            e.log_line()
        );
    }
    Ok(())
}

/// The producer loop, or the processor/consumer loop with its inputs, until it ends.
#[allow(clippy::too_many_arguments)]
async fn run_loop(
    cfg: &Arc<WorkerConfig>,
    node: BuiltNode,
    broker: &Broker,
    blob: Option<BlobStore>,
    output: Output,
    signals: &Signals,
    ledger: &RunLedger,
    epoch: u64,
    ctx: &mut NodeContext,
) -> Result<i32, VfError> {
    match node {
        BuiltNode::Producer(mut producer) => {
            let mut output = output;
            let _health = guards::start_health(cfg, broker).await?; // step 9
            let code = match produce::run(cfg, producer.as_mut(), ctx, &mut output, signals, ledger)
                .await?
            {
                ProducerEnd::Finished => 0,
                ProducerEnd::Quiesced => EXIT_TERMINATED,
            };
            Ok(hold::after_finish(cfg, signals, code).await)
        }
        BuiltNode::Processor(mut processor) => {
            processor.check_inputs(cfg.parent_names.len())?;
            let mut lp = build_loop(cfg, broker, blob, output, signals, ledger, epoch).await?;
            if processor.forwards_input() {
                lp.receiver.forward_offloaded();
            }
            let _health = guards::start_health(cfg, broker).await?; // step 9
            let code = finish(lp.run(Sink::Processor(processor.as_mut()), ctx).await?);
            Ok(hold::after_finish(cfg, signals, code).await)
        }
        BuiltNode::Consumer {
            node: mut consumer,
            options,
        } => {
            consumer.check_inputs(cfg.parent_names.len())?;
            // IDEM-1: the ledger's effect markers when it is durable and shared, else the
            // payload store's Redis.
            let idem = match (&cfg.blob_url, options.idempotent) {
                (_, true) if ledger.durable_shared() => {
                    Some(IdempotencyStore::ledger(ledger.clone()))
                }
                (Some(url), true) => Some(IdempotencyStore::connect(url)?),
                (None, true) => {
                    tracing::warn!(
                        "idempotent consumer without a store: effects may repeat after a redelivery"
                    );
                    None
                }
                _ => None,
            };
            let mut lp = build_loop(cfg, broker, blob, output, signals, ledger, epoch).await?;
            let _health = guards::start_health(cfg, broker).await?; // step 9
            let code = finish(lp.run(Sink::Consumer(consumer.as_mut(), idem), ctx).await?);
            Ok(hold::after_finish(cfg, signals, code).await)
        }
    }
}

fn finish(end: LoopEnd) -> i32 {
    match end {
        LoopEnd::Finished => 0,
        LoopEnd::Quiesced => EXIT_TERMINATED,
    }
}

/// The publishing side: emitter, mode (DELIV-4/5) and the inline threshold (BLOB-1).
fn output_for(
    cfg: &WorkerConfig,
    broker: &Broker,
    blob: Option<BlobStore>,
    signals: &Signals,
    replica: u32,
) -> Result<Output, VfError> {
    let configured = cfg.max_inline_payload_bytes;
    let max_payload = Some(broker.client().server_info().max_payload as u64);
    let threshold = blob::threshold_for(&cfg.node_name, configured, max_payload, blob.is_some())?;
    Ok(Output::new(
        Emitter::new(&cfg.flow_id, &cfg.run_id, &cfg.node_name, replica),
        Publisher::new(broker, cfg.node_name.clone()),
        PublishMode::for_flow(cfg.is_realtime()),
        blob,
        threshold,
        signals.stop.clone(),
    ))
}

/// START-1 step 8 for a node with parents: parent streams, data durables (credit check,
/// STREAM-15), EOS durables, the join with its group cap (JOIN-5a), the inbox.
async fn build_loop<'a>(
    cfg: &'a Arc<WorkerConfig>,
    broker: &Broker,
    blob: Option<BlobStore>,
    output: Output,
    signals: &'a Signals,
    ledger: &RunLedger,
    epoch: u64,
) -> Result<Loop<'a>, VfError> {
    let policy = cfg.join_policy.clone();
    let credit = cfg.credit();
    let mut durables = Vec::new();
    let mut inbox = Inbox::new(
        broker,
        InboxConfig {
            byte_budget: cfg.prefetch_bytes.and_then(|b| u64::try_from(b).ok()),
            ..InboxConfig::default()
        },
    );
    let instance = format!("r{}-{}", cfg.replica_id(), &output.emitter.epoch()[..8]);
    let mut group_cap = 0usize;
    let mut share = 0usize;
    for (i, parent) in cfg.parent_names.iter().enumerate() {
        broker::ensure_aged_node_stream(
            broker,
            &cfg.flow_id,
            &cfg.run_id,
            parent,
            cfg.is_realtime(),
            None,
            cfg.stream_max_age,
        )
        .await?;
        let bound = broker::bind_data_durable(
            broker,
            &DurableRequest::data_for(cfg, parent, ledger.durable_shared()),
        )
        .await?;
        let effective = bound.max_ack_pending();
        if cfg.parent_names.len() >= 2 && effective > 0 && effective < credit.item_credit {
            return Err(VfError::new(
                ErrorCode::Capability,
                format!(
                    "{}: the durable for parent '{parent}' admits {effective} un-acked deliveries, but the join policy needs a working set of {} (max_pending × halves + 1); an adversarial parent ordering could fill the credit with halves that never complete.",
                    cfg.node_name, credit.item_credit
                ),
            )
            .with_remedy("Re-provision the flow so the durable gets the join's credit, or lower join.maxPending."));
        }
        group_cap += usize::try_from(if effective > 0 {
            effective
        } else {
            credit.max_ack_pending
        })
        .unwrap_or(0);
        let eos = broker::create_eos_durable(
            broker,
            &cfg.flow_id,
            &cfg.run_id,
            &cfg.node_name,
            parent,
            &instance,
        )
        .await?;
        let mut data = SubscriptionSpec::new(i, DeliveryKind::Data, bound.clone());
        if cfg.parent_names.len() == 1 {
            // STREAM-15a: the local queue and the in-flight window follow the credit the
            // durable grants (whoever provisioned it), less the one input in processing.
            share = usize::try_from(cfg.replica_share(effective)).unwrap_or(1);
            data.capacity = share.saturating_sub(1).clamp(1, MAX_QUEUE_CAPACITY);
        }
        if cfg.is_realtime() {
            // REALTIME: newest matters. Every frame parked locally is one more service time
            // of latency for the next, so hold one; the durable's credit (STREAM-15) is a cap,
            // not a quota, and the stream drops the overflow (DELIV-4).
            data.capacity = REALTIME_QUEUE_CAPACITY;
        }
        inbox.subscribe(data);
        inbox.subscribe(SubscriptionSpec::new(i, DeliveryKind::Terminator, eos));
        durables.push(bound);
    }
    if cfg.has_children {
        broker::ensure_eos_anchor(broker, &cfg.flow_id, &cfg.run_id, &cfg.node_name).await?;
    }
    broker::ensure_dlq_stream(broker, &cfg.flow_id, None).await?;
    let join = JoinAssembler::new(
        &cfg.node_name,
        &cfg.parent_names,
        &policy,
        Some(group_cap.max(1)),
        Arc::new(SystemClock::new()),
    )
    .map_err(|e| VfError::new(ErrorCode::Unknown, e.to_string()))?;
    let max_deliver = durables
        .first()
        .map_or(cfg.max_deliver(false), |d| d.max_deliver());
    let mut settler = Settler::new(
        broker.clone(),
        cfg,
        max_deliver,
        blob.clone(),
        ledger.clone(),
    );
    if ledger.durable_shared() {
        settler.retry_handoffs().await; // DELIV-8: what an earlier process could not hand off
    }
    let supervision = guards::Supervision::new(cfg, broker, &durables)?; // step 10
    let mut receiver = Receiver::new(
        cfg.clone(),
        broker.clone(),
        inbox,
        join,
        durables,
        blob,
        signals.stop.clone(),
    );
    if ledger.durable_shared() {
        receiver.restore_from_ledger(ledger.clone(), epoch).await?;
    }
    Ok(Loop {
        cfg,
        receiver,
        settler,
        output,
        breaker: Breaker::new(cfg.breaker_threshold),
        signals,
        supervision,
        window: if share > 0 {
            window::Window::for_credit(share)
        } else {
            window::Window::for_loops()
        },
    })
}
