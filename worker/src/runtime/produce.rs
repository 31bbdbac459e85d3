//! The producer loop (LOOP-2, CTRL-2, ABORT-1a, START-3), and a replayable source's
//! resume point (MSGID-6).

use std::time::{Duration, Instant};

use videoflow_core::envelope::WireError;
use videoflow_core::errors::{Disposition, ErrorCode, VfError};

use super::node_error::wrap_node_error;
use super::output::Output;
use super::signals::Signals;
use super::window::Window;
use crate::broker::PublishOutcome;
use crate::clock::wall_now;
use crate::config::WorkerConfig;
use crate::emit::Timings;
use crate::faults::{self, Barrier, barrier};
use crate::nodes::{NodeContext, Producer, normalize_output};
use crate::store::ledger::RunLedger;

/// How a producer loop ended without an error.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ProducerEnd {
    /// End of input, SIGINT or a control stop: EOS was published (when it has children).
    Finished,
    /// SIGTERM: no EOS (START-2).
    Quiesced,
}

/// Runs `node` until end of input, a stop, or an error (LOOP-2).
pub(crate) async fn run(
    cfg: &WorkerConfig,
    node: &mut dyn Producer,
    ctx: &mut NodeContext,
    out: &mut Output,
    signals: &Signals,
    ledger: &RunLedger,
) -> Result<ProducerEnd, VfError> {
    // A node that waits inside a call (a live source reconnecting) gives up the wait once
    // the loop would stop anyway.
    let halting = signals.clone();
    ctx.halt = crate::nodes::context::Halt::new(move || {
        halting.stop.is_set() || halting.quiesce.is_set() || halting.interrupt.is_set()
    });
    let opened = super::offload::off_runtime(|| node.open(ctx));
    if let Err(e) = opened {
        let e = wrap_node_error(e, cfg, None);
        abort_if_poison(cfg, out, &e).await;
        return Err(e);
    }
    crate::health::mark_ready(); // HEALTH-1: only once `open()` returned
    faults::soft_barrier(Barrier::WorkerReadyAfter, || cfg.node_name.clone()).await;
    let result = match resume(cfg, node, out, ledger).await {
        Ok(mut checkpoints) => produce(cfg, node, ctx, out, signals, &mut checkpoints).await,
        Err(e) => {
            // A source that breaks while seeking (a file damaged before the resume point)
            // ends like one that breaks in `next()`: poison is announced downstream.
            abort_if_poison(cfg, out, &e).await;
            Err(e)
        }
    };
    if let Err(e) = super::offload::off_runtime(|| node.close(ctx)) {
        tracing::error!("close() failed: {}", e.log_line());
    }
    result
}

/// MSGID-6: a replayable source is positioned after the last offset the broker accepted
/// (LOOP-2: `seek` only when that is > 0) and mints offsets from there; a live one goes on
/// with its epoch.
async fn resume(
    cfg: &WorkerConfig,
    node: &mut dyn Producer,
    out: &mut Output,
    ledger: &RunLedger,
) -> Result<Checkpoints, VfError> {
    if !cfg.replayable {
        return Ok(Checkpoints::default());
    }
    if !node.replayable() {
        return Err(VfError::new(
            ErrorCode::Config,
            format!(
                "VF_REPLAYABLE=1, but {} is a live source with no position to resume from.",
                cfg.node_class.as_deref().unwrap_or("this component")
            ),
        )
        .with_remedy(
            "Unset VF_REPLAYABLE (remove replayable from the node): a restarted live source \
             publishes under a new epoch (MSGID-5).",
        ));
    }
    let last_accepted = ledger.resume_offset().await?;
    if last_accepted > 0 {
        super::offload::off_runtime(|| node.seek(last_accepted))
            .map_err(|e| wrap_node_error(e, cfg, None))?;
        tracing::info!(
            node = %cfg.node_name,
            "replayable source resumes after offset {last_accepted}, its last accepted one"
        );
    }
    out.emitter.replay_from(last_accepted);
    Ok(Checkpoints {
        ledger: Some(ledger.clone()),
        accepted: last_accepted,
        written: last_accepted,
        written_at: None,
        failed: false,
    })
}

/// How often the loop writes a replayable source's checkpoint, at most (the end of the loop
/// always writes): a restart then replays at most this long's publications under the same
/// ids, which the broker's 120 s duplicate window (MSGID-1) drops, and a fast source on a
/// `file://` ledger pays a few writes a second rather than one per item.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// A replayable source's last accepted offset, written to the ledger at most every
/// [`CHECKPOINT_EVERY`] rather than per item.
#[derive(Debug, Default)]
struct Checkpoints {
    /// Set for a replayable source.
    ledger: Option<RunLedger>,
    /// The highest offset the broker stored (receipts come back in order).
    accepted: u64,
    /// The offset last written.
    written: u64,
    /// When it was written (`None`: not yet by this process).
    written_at: Option<Instant>,
    /// A publication failed: nothing after it may be checkpointed, or the restart that
    /// failure causes would resume past an offset the broker never stored.
    failed: bool,
}

impl Checkpoints {
    /// Notes one receipt, in publication order.
    fn note(&mut self, seq: u64, result: &Result<PublishOutcome, VfError>) {
        match result {
            Err(_) => self.failed = true,
            Ok(PublishOutcome::Stored { .. }) if self.ledger.is_some() && !self.failed => {
                self.accepted = self.accepted.max(seq);
            }
            // REALTIME: an item the broker refused is dropped (DELIV-4), never replayed.
            Ok(_) => {}
        }
    }

    /// [`Checkpoints::write`] unless the last write is younger than [`CHECKPOINT_EVERY`].
    async fn write_due(&mut self) -> Result<(), VfError> {
        if self
            .written_at
            .is_some_and(|at| at.elapsed() < CHECKPOINT_EVERY)
        {
            return Ok(());
        }
        self.write().await
    }

    /// Writes the highest accepted offset when it moved.
    async fn write(&mut self) -> Result<(), VfError> {
        if let Some(ledger) = &self.ledger
            && self.accepted > self.written
        {
            ledger.checkpoint_offset(self.accepted).await?;
            self.written = self.accepted;
            self.written_at = Some(Instant::now());
        }
        Ok(())
    }
}

async fn produce(
    cfg: &WorkerConfig,
    node: &mut dyn Producer,
    ctx: &mut NodeContext,
    out: &mut Output,
    signals: &Signals,
    checkpoints: &mut Checkpoints,
) -> Result<ProducerEnd, VfError> {
    // Publications on the wire, confirmed on their own tasks and taken back in order.
    let mut window: Window<(String, u64), PublishOutcome> = Window::for_loops();
    let result = source(cfg, node, ctx, out, signals, &mut window, checkpoints).await;
    // Whatever ended the loop, every publication in flight is confirmed and counted first:
    // the EOS's seq (EOS-7) and an ABORT's count at death include them.
    let mut confirmed = confirm_all(out, &mut window, checkpoints).await;
    if confirmed.is_ok() {
        confirmed = checkpoints.write().await;
    }
    let end = match (result, confirmed) {
        (Err(e), _) | (Ok(_), Err(e)) => {
            // A publication failure ends a producer (exit 3 for BrokerUnavailable).
            abort_if_poison(cfg, out, &e).await;
            return Err(e);
        }
        (Ok(end), Ok(())) => end,
    };
    if end == ProducerEnd::Finished && cfg.has_children {
        out.eos().await?;
    }
    Ok(end)
}

/// Pulls items from the node and puts each on the wire until end of input, a stop or an
/// error; a full window waits for its oldest receipt.
async fn source(
    cfg: &WorkerConfig,
    node: &mut dyn Producer,
    ctx: &mut NodeContext,
    out: &mut Output,
    signals: &Signals,
    window: &mut Window<(String, u64), PublishOutcome>,
    checkpoints: &mut Checkpoints,
) -> Result<ProducerEnd, VfError> {
    let mut last_end = Instant::now();
    loop {
        crate::health::beat(); // HEALTH-2: each termination check
        while let Some(ended) = window.ready().await {
            confirmed(out, ended, checkpoints).await?;
        }
        checkpoints.write_due().await?;
        if signals.quiesce.is_set() {
            return Ok(ProducerEnd::Quiesced);
        }
        // CTRL-2 / START-3: a control stop or SIGINT ends the source like end of input.
        if signals.stop.is_set() || signals.interrupt.is_set() {
            return Ok(ProducerEnd::Finished);
        }
        let started = Instant::now();
        let item = match super::offload::off_runtime(|| node.next(ctx)) {
            Ok(Some(item)) => item,
            Ok(None) => return Ok(ProducerEnd::Finished),
            Err(e) => return Err(wrap_node_error(e, cfg, None)),
        };
        let ended = Instant::now();
        let timings = Timings {
            proctime: (ended - started).as_secs_f64(),
            actual_proctime: (ended - last_end).as_secs_f64(),
        };
        last_end = ended;
        // MSGID-5: the counter advances on every publication attempt, children or not.
        let (trace_id, seq) = out.emitter.mint();
        if !cfg.has_children {
            continue; // LOOP-6
        }
        let event_ts = ctx.take_output_event_timestamp().unwrap_or_else(wall_now);
        let key = ctx.take_output_partition_key();
        let env = out.emitter.data(
            &trace_id,
            seq,
            event_ts,
            normalize_output(item),
            timings,
            key,
        );
        let pending = out.start_data(env).await?;
        window.push((trace_id, seq), pending.bytes(), pending.confirm());
        while window.is_full() {
            if let Some(ended) = window.next().await {
                confirmed(out, ended, checkpoints).await?;
            }
        }
    }
}

/// Waits for every publication still in flight; the first failure is returned after all
/// of them ended.
async fn confirm_all(
    out: &mut Output,
    window: &mut Window<(String, u64), PublishOutcome>,
    checkpoints: &mut Checkpoints,
) -> Result<(), VfError> {
    let mut first_error = None;
    while let Some(ended) = window.next().await {
        if let Err(e) = confirmed(out, ended, checkpoints).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One publication taken back: counted (EOS-7, DELIV-4) and, from a replayable source,
/// noted as accepted (MSGID-6), then the fault schedule's `source.publish.after`.
async fn confirmed(
    out: &mut Output,
    ((trace_id, seq), result): ((String, u64), Result<PublishOutcome, VfError>),
    checkpoints: &mut Checkpoints,
) -> Result<(), VfError> {
    checkpoints.note(seq, &result);
    out.record(&result?);
    barrier(Barrier::SourcePublishAfter, || {
        format!("{trace_id} seq {seq}")
    })
    .await?;
    Ok(())
}

/// ABORT-1a: a death no restart can fix (poison) is announced downstream.
pub(crate) async fn abort_if_poison(cfg: &WorkerConfig, out: &mut Output, e: &VfError) {
    if !cfg.has_children || e.disposition != Some(Disposition::Poison) {
        return;
    }
    if let Err(err) = out.abort(WireError::from_error(e)).await {
        tracing::error!("could not publish ABORT: {}", err.log_line());
    }
}
