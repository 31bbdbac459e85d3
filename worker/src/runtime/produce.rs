//! The producer loop (LOOP-2, CTRL-2, ABORT-1a, START-3).

use std::time::Instant;

use videoflow_core::envelope::WireError;
use videoflow_core::errors::{Disposition, VfError};

use super::output::Output;
use super::{Signals, wall_now, wrap_node_error};
use crate::config::WorkerConfig;
use crate::emit::Timings;
use crate::faults::{self, Barrier, barrier};
use crate::nodes::{NodeContext, Producer, normalize_output};

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
) -> Result<ProducerEnd, VfError> {
    let opened = tokio::task::block_in_place(|| node.open(ctx));
    if let Err(e) = opened {
        let e = wrap_node_error(e, cfg, None);
        abort_if_poison(cfg, out, &e).await;
        return Err(e);
    }
    crate::health::mark_ready(); // HEALTH-1: only once `open()` returned
    faults::soft_barrier(Barrier::WorkerReadyAfter, || cfg.node_name.clone()).await;
    let result = produce(cfg, node, ctx, out, signals).await;
    if let Err(e) = tokio::task::block_in_place(|| node.close(ctx)) {
        tracing::error!("close() failed: {}", e.log_line());
    }
    result
}

async fn produce(
    cfg: &WorkerConfig,
    node: &mut dyn Producer,
    ctx: &mut NodeContext,
    out: &mut Output,
    signals: &Signals,
) -> Result<ProducerEnd, VfError> {
    let mut last_end = Instant::now();
    loop {
        crate::health::beat(); // HEALTH-2: each termination check
        if signals.quiesce.is_set() {
            return Ok(ProducerEnd::Quiesced);
        }
        // CTRL-2 / START-3: a control stop or SIGINT ends the source like end of input.
        if signals.stop.is_set() || signals.interrupt.is_set() {
            break;
        }
        let started = Instant::now();
        let item = match tokio::task::block_in_place(|| node.next(ctx)) {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) => {
                let e = wrap_node_error(e, cfg, None);
                abort_if_poison(cfg, out, &e).await;
                return Err(e);
            }
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
        let sent = async {
            out.data(env).await?;
            barrier(Barrier::SourcePublishAfter, || {
                format!("{trace_id} seq {seq}")
            })
            .await
        };
        if let Err(e) = sent.await {
            // A publication failure ends a producer (exit 3 for BrokerUnavailable).
            abort_if_poison(cfg, out, &e).await;
            return Err(e);
        }
    }
    if cfg.has_children {
        out.eos().await?;
    }
    Ok(ProducerEnd::Finished)
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
