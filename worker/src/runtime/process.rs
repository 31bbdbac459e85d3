//! The processor and consumer loop (LOOP-3/4/5/6/7/10, ABORT-5, ERR-5/5a, IDEM-1).
//!
//! **Pipelining.** A node whose `max_in_flight()` is above 1 (an exec component
//! that accepts several requests) gets each group through `submit` as soon as it is received,
//! and its output through `complete`, oldest first — so outputs are published, and inputs
//! settled, in input order, up to `max_in_flight` groups computing at once. The loop takes a
//! result back before any receive that might wait: submitted inputs are unacked, so the
//! broker's credit (STREAM-15) and the drain (EOS-3: nothing ack-pending) wait for them, and a
//! receive that waited for new deliveries could wait for ever. It therefore only receives
//! with groups in flight when a ready group is already folded (one parent, trace mode: every
//! delivery is a ready group on arrival). Under a conformance fault schedule the loop stays
//! one group at a time, as its barriers expect.

use std::collections::VecDeque;
use std::time::Instant;

use futures::FutureExt;
use futures::future::OptionFuture;
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{Disposition, ErrorCode, VfError};
use videoflow_core::model::DeliveryMode;
use videoflow_core::msgid::{MsgKind, msgid_signed};

use super::node_error::wrap_node_error;
use super::output::{Output, Pending};
use super::receive::{Member, Received, Receiver, StopResult};
use super::settle::{self, Held, Settler};
use super::signals::Signals;
use super::window::Window;
use crate::blob::BlobStore;
use crate::broker::PublishOutcome;
use crate::clock::wall_now;
use crate::config::WorkerConfig;
use crate::delivery::{Breaker, classify};
use crate::emit::Timings;
use crate::faults::{self, Barrier, barrier};
use crate::health::{self, metrics};
use crate::idempotency::IdempotencyStore;
use crate::join::{GroupInput, JoinAssembler, ReadyGroup};
use crate::nodes::{
    Consumer, EnvelopeInfo, Input, InputInfo, NodeContext, Processor, normalize_output,
};

/// The node a group goes to.
pub(crate) enum Sink<'a> {
    /// `process()` and publish.
    Processor(&'a mut dyn Processor),
    /// `consume()`, optionally idempotent.
    Consumer(&'a mut dyn Consumer, Option<IdempotencyStore>),
}

/// How the loop ended without an error.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LoopEnd {
    /// Every parent drained (EOS relayed when it has children) or a control stop.
    Finished,
    /// SIGTERM: prefetched deliveries handed back, exit 143 (START-2).
    Quiesced,
}

/// The loop's moving parts.
pub(crate) struct Loop<'a> {
    pub(crate) cfg: &'a WorkerConfig,
    pub(crate) receiver: Receiver,
    pub(crate) settler: Settler,
    pub(crate) output: Output,
    pub(crate) breaker: Breaker,
    pub(crate) signals: &'a Signals,
    /// The progress deadline and its watchdog (SUP-1/2).
    pub(crate) supervision: super::guards::Supervision,
    /// Groups whose output is on the wire and whose inputs are acked after its receipt.
    pub(crate) window: Window<Settling, Settled>,
}

/// What a group in the window leaves behind for the loop: enough to fail it (DELIV-6).
pub(crate) struct Settling {
    trace_id: String,
    seq: i128,
    handles: Vec<Held>,
}

/// A group submitted to a pipelining node whose result is not taken back yet.
pub(crate) struct Submitted {
    settling: Settling,
    event_ts: Option<f64>,
    input_key: String,
    /// When it was submitted: its proctime counts from here.
    started: Instant,
}

/// A group's second half that ended well: its output's outcome (none for a consumer or a
/// processor without children), how many handles were acked and how many were handed back
/// because the ledger could not note them as received (`Held::noted`).
pub(crate) struct Settled {
    outcome: Option<PublishOutcome>,
    acked: u64,
    handed_back: u64,
}

impl Loop<'_> {
    /// Runs `sink` until the stop result or a fatal error; `close()` runs on every path
    /// after a successful `open()` (LOOP-1), and every held delivery is handed back.
    pub(crate) async fn run(
        &mut self,
        mut sink: Sink<'_>,
        ctx: &mut NodeContext,
    ) -> Result<LoopEnd, VfError> {
        let opened = super::offload::off_runtime(|| match &mut sink {
            Sink::Processor(p) => p.open(ctx),
            Sink::Consumer(c, _) => c.open(ctx),
        });
        if let Err(e) = opened {
            self.receiver.close().await;
            return Err(wrap_node_error(e, self.cfg, None));
        }
        health::mark_ready(); // HEALTH-1: only once `open()` returned
        faults::soft_barrier(Barrier::WorkerReadyAfter, || self.cfg.node_name.clone()).await;
        if let Err(e) = self.supervision.opened() {
            tracing::warn!("progress watchdog not started: {}", e.log_line());
        }
        let result = self.groups(&mut sink, ctx).await;
        if result.is_err() {
            self.abandon_window().await;
        }
        self.supervision.closing();
        let closed = super::offload::off_runtime(|| match &mut sink {
            Sink::Processor(p) => p.close(ctx),
            Sink::Consumer(c, _) => c.close(ctx),
        });
        if let Err(e) = closed {
            tracing::error!("close() failed: {}", e.log_line());
        }
        if result != Ok(LoopEnd::Quiesced) {
            self.receiver.close().await;
        }
        result
    }

    async fn groups(
        &mut self,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
    ) -> Result<LoopEnd, VfError> {
        let mut pipe = VecDeque::new();
        let result = self.groups_pipelined(sink, ctx, &mut pipe).await;
        if result.is_err() {
            // Every group still computing is handed back (the component may be gone).
            for submitted in pipe.drain(..) {
                self.settler.nak_all(&submitted.settling.handles).await;
            }
        }
        result
    }

    async fn groups_pipelined(
        &mut self,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
        pipe: &mut VecDeque<Submitted>,
    ) -> Result<LoopEnd, VfError> {
        let depth = pipeline_depth(sink);
        let mut last_end = Instant::now();
        loop {
            health::beat();
            self.reap(false).await?;
            if !pipe.is_empty() && (pipe.len() >= depth || !self.group_is_ready()) {
                self.complete_front(sink, ctx, pipe, &mut last_end).await?;
                continue;
            }
            health::record(|m| m.incr("messages_received", 1));
            let received = self
                .receiver
                .receive(&mut self.settler, &self.signals.quiesce)
                .await?;
            match received {
                None => {
                    self.complete_all(sink, ctx, pipe, &mut last_end).await?;
                    self.drain_window().await?;
                    self.receiver.quiesce().await;
                    return Ok(LoopEnd::Quiesced);
                }
                Some(Received::Stop(stop)) => {
                    self.complete_all(sink, ctx, pipe, &mut last_end).await?;
                    return self.stop(stop).await;
                }
                Some(Received::Group(group)) => {
                    health::record(|m| m.record_offered());
                    if depth > 1 {
                        self.submit(group, sink, ctx, pipe).await?;
                    } else {
                        self.group(group, sink, ctx, &mut last_end).await?;
                    }
                    self.supervision.check().await?; // SUP-1: after each group
                }
            }
        }
    }

    /// Whether the next receive returns at once with a group already folded: with one parent
    /// in trace mode every held delivery is a complete group (JOIN-3).
    fn group_is_ready(&self) -> bool {
        self.cfg.parent_names.len() == 1
            && matches!(self.receiver.join, JoinAssembler::Trace(_))
            && self.receiver.join.pending_count() > 0
    }

    /// Hands one group to a pipelining node; its result is taken back by
    /// [`Loop::complete_front`]. A group that fails here (or an idempotent sink's group
    /// already consumed) is settled at once.
    async fn submit(
        &mut self,
        mut group: ReadyGroup<Held, Member>,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
        pipe: &mut VecDeque<Submitted>,
    ) -> Result<(), VfError> {
        let (input_key, inputs) = begin_group(self.cfg, &mut group, ctx);
        let settling = Settling {
            trace_id: group.trace_id,
            seq: group.seq,
            handles: group.handles,
        };
        let started = Instant::now();
        let submitted = match sink {
            Sink::Processor(node) => blocking(node.may_block(), || node.submit(ctx, &inputs)),
            Sink::Consumer(node, idem) => {
                if let Some(store) = idem {
                    match store.seen(&input_key).await {
                        Ok(true) => return self.finish(settling, Ok(None)).await, // IDEM-1
                        Ok(false) => {}
                        Err(e) => return self.failed(&settling, e).await,
                    }
                }
                blocking(node.may_block(), || node.submit(ctx, &inputs))
            }
        };
        match submitted {
            Ok(()) => {
                pipe.push_back(Submitted {
                    settling,
                    event_ts: group.event_ts,
                    input_key,
                    started,
                });
                Ok(())
            }
            Err(e) => self.failed(&settling, e).await,
        }
    }

    /// Takes back the oldest submitted group's result and publishes it (or runs the ladder).
    async fn complete_front(
        &mut self,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
        pipe: &mut VecDeque<Submitted>,
        last_end: &mut Instant,
    ) -> Result<(), VfError> {
        let Some(submitted) = pipe.pop_front() else {
            return Ok(());
        };
        let outcome = match sink {
            Sink::Processor(node) => match blocking(node.may_block(), || node.complete(ctx)) {
                Ok(output) => {
                    let s = &submitted.settling;
                    let at = (s.trace_id.as_str(), s.seq, submitted.event_ts);
                    self.publish(at, output, submitted.started, ctx, last_end)
                        .await
                }
                Err(e) => Err(e),
            },
            Sink::Consumer(node, idem) => match blocking(node.may_block(), || node.complete(ctx)) {
                Ok(()) => {
                    *last_end = Instant::now();
                    match idem {
                        Some(store) => store.mark(&submitted.input_key).await.map(|()| None),
                        None => Ok(None),
                    }
                }
                Err(e) => Err(e),
            },
        };
        self.finish(submitted.settling, outcome).await
    }

    /// Takes back every submitted group, in order.
    async fn complete_all(
        &mut self,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
        pipe: &mut VecDeque<Submitted>,
        last_end: &mut Instant,
    ) -> Result<(), VfError> {
        while !pipe.is_empty() {
            self.complete_front(sink, ctx, pipe, last_end).await?;
        }
        Ok(())
    }

    /// The stop result: ABORT-5 relay first, then EOS unless it is a hard stop (CTRL-3).
    async fn stop(&mut self, stop: StopResult) -> Result<LoopEnd, VfError> {
        // Every output in flight is confirmed (and counted, EOS-7) before a terminator.
        self.drain_window().await?;
        if let Some((origin, error)) = stop.aborted.into_iter().next() {
            let record = error.clone().unwrap_or_default();
            if self.cfg.has_children
                && let Err(e) = self.output.abort(record.clone()).await
            {
                tracing::error!("could not relay ABORT: {}", e.log_line());
            }
            let json = serde_json::json!({"code": record.code, "message": record.message});
            let origin_error = if error.is_some() {
                json
            } else {
                serde_json::json!({})
            };
            return Err(VfError::upstream_aborted(&origin, &origin_error));
        }
        if !stop.hard && self.cfg.has_children {
            self.output.eos().await?;
        }
        Ok(LoopEnd::Finished)
    }

    /// One group: call the node and put its output on the wire; the window acks the inputs
    /// once the output's receipt is in (publish before ack, LOOP-5; DELIV-2) while this loop
    /// goes on. An error runs the ladder (DELIV-6) and the breaker (ERR-5a).
    async fn group(
        &mut self,
        mut group: ReadyGroup<Held, Member>,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
        last_end: &mut Instant,
    ) -> Result<(), VfError> {
        let (input_key, inputs) = begin_group(self.cfg, &mut group, ctx);
        let outcome = self
            .call(&group, inputs, sink, ctx, &input_key, last_end)
            .await;
        let settling = Settling {
            trace_id: group.trace_id,
            seq: group.seq,
            handles: group.handles,
        };
        self.finish(settling, outcome).await
    }

    /// A group's node call ended: its output (if any) goes into the window, which acks the
    /// inputs after the receipt; an error runs the ladder.
    async fn finish(
        &mut self,
        settling: Settling,
        outcome: Result<Option<Pending>, VfError>,
    ) -> Result<(), VfError> {
        match outcome {
            Ok(pending) => {
                let bytes = pending.as_ref().map_or(0, Pending::bytes);
                let work = settle_after(pending, settling.handles.clone(), self.settler.blob());
                self.window.push(settling, bytes, work);
                self.reap(true).await
            }
            Err(e) => self.failed(&settling, e).await,
        }
    }

    /// Takes back the window's ended entries in order; with `until_room`, also waits for
    /// the front while the window is full.
    async fn reap(&mut self, until_room: bool) -> Result<(), VfError> {
        loop {
            let next = if until_room && self.window.is_full() {
                self.window.next().await
            } else {
                self.window.ready().await
            };
            let Some((settling, result)) = next else {
                return Ok(());
            };
            self.settled(settling, result).await?;
        }
    }

    /// Waits for every entry of the window and takes each back.
    async fn drain_window(&mut self) -> Result<(), VfError> {
        while let Some((settling, result)) = self.window.next().await {
            self.settled(settling, result).await?;
        }
        Ok(())
    }

    /// On the way out after an error: waits for the window and hands back (NAK) the inputs
    /// of every group whose output was not confirmed, without counting a failure.
    async fn abandon_window(&mut self) {
        while let Some((settling, result)) = self.window.next().await {
            match result {
                Ok(settled) => self.settler.counts.acked += settled.acked,
                Err(e) => {
                    tracing::warn!(trace_id = %settling.trace_id, "in-flight output not confirmed on the way out: {}", e.log_line());
                    self.settler.nak_all(&settling.handles).await;
                }
            }
        }
    }

    /// One group's end: counted and acked, or failed (its publication was refused or never
    /// confirmed: the ladder hands the inputs back).
    async fn settled(
        &mut self,
        settling: Settling,
        result: Result<Settled, VfError>,
    ) -> Result<(), VfError> {
        match result {
            Ok(settled) => {
                self.settler.counts.acked += settled.acked;
                if let Some(outcome) = &settled.outcome {
                    self.output.record(outcome);
                }
                if settled.handed_back > 0 {
                    // The ledger refused the inputs' received notes: they went back for a
                    // retry, as they would have before the node ran — neither a success nor
                    // a failed group (ERR-5a counts the node's failures, not the ledger's).
                    self.settler.counts.nacked += settled.handed_back;
                    return Ok(());
                }
                health::record(|m| m.incr("messages_processed", 1));
                self.supervision.deadline.record_progress();
                self.breaker.success();
                Ok(())
            }
            Err(e) => self.failed(&settling, e).await,
        }
    }

    async fn call(
        &mut self,
        group: &ReadyGroup<Held, Member>,
        inputs: Vec<Input>,
        sink: &mut Sink<'_>,
        ctx: &mut NodeContext,
        input_key: &str,
        last_end: &mut Instant,
    ) -> Result<Option<Pending>, VfError> {
        let started = Instant::now();
        match sink {
            Sink::Consumer(node, idem) => {
                if let Some(store) = idem
                    && store.seen(input_key).await?
                {
                    return Ok(None); // IDEM-1: already consumed; ack
                }
                barrier(Barrier::SinkEffectBefore, || input_key.to_owned()).await?;
                if node.may_block() {
                    super::offload::off_runtime(|| node.consume(ctx, &inputs))?;
                } else {
                    node.consume(ctx, &inputs)?;
                }
                barrier(Barrier::SinkEffectAfter, || input_key.to_owned()).await?;
                *last_end = Instant::now();
                if let Some(store) = idem {
                    store.mark(input_key).await?;
                }
                Ok(None)
            }
            Sink::Processor(node) => {
                let output = if node.may_block() {
                    super::offload::off_runtime(|| node.process(ctx, &inputs))?
                } else {
                    node.process(ctx, &inputs)?
                };
                let at = (group.trace_id.as_str(), group.seq, group.event_ts);
                self.publish(at, output, started, ctx, last_end).await
            }
        }
    }

    /// A processor's output on the wire (LOOP-6/10, timings from `started`); `None` when the
    /// node has no children. `group` is the group's trace id, seq and event time.
    async fn publish(
        &mut self,
        group: (&str, i128, Option<f64>),
        output: Payload,
        started: Instant,
        ctx: &mut NodeContext,
        last_end: &mut Instant,
    ) -> Result<Option<Pending>, VfError> {
        let ended = Instant::now();
        let timings = Timings {
            proctime: (ended - started).as_secs_f64(),
            actual_proctime: (ended - *last_end).as_secs_f64(),
        };
        *last_end = ended;
        let key = ctx.take_output_partition_key();
        let explicit_ts = ctx.take_output_event_timestamp();
        if !self.cfg.has_children {
            return Ok(None); // LOOP-6
        }
        let (trace_id, group_seq, group_event_ts) = group;
        let seq = u64::try_from(group_seq).map_err(|_| {
            VfError::new(
                ErrorCode::Unknown,
                format!("ValueError: Value out of range: {group_seq}"),
            )
        })?;
        // LOOP-10: one-shot > group event time > wall clock at publish.
        let event_ts = explicit_ts.or(group_event_ts).unwrap_or_else(wall_now);
        let env = self.output.emitter.data(
            trace_id,
            seq,
            event_ts,
            normalize_output(output),
            timings,
            key,
        );
        Ok(Some(self.output.start_data(env).await?))
    }

    /// ERR-2/5/5a: classify, stamp, run the ladder; a worker_fatal or user error hands the
    /// group back and ends the worker; the breaker may end it too.
    async fn failed(&mut self, group: &Settling, e: VfError) -> Result<(), VfError> {
        let e = wrap_node_error(e, self.cfg, Some((&group.trace_id, group.seq)));
        let user_error = e.code.is_a(ErrorCode::User);
        let disposition = if user_error {
            Disposition::WorkerFatal
        } else {
            classify(&e, self.cfg.on_error)
        };
        let e = e.with_disposition(disposition);
        self.supervision.deadline.record_progress();
        let best_effort = self.cfg.delivery == DeliveryMode::BestEffort;
        health::record(|m| {
            m.incr("messages_failed", 1);
            m.record_error(e.code.code(), disposition.as_str());
            match disposition {
                Disposition::Poison => m.record_drop(metrics::DROP_POISON, 1),
                Disposition::Transient if best_effort => {
                    m.record_drop(metrics::DROP_BEST_EFFORT, 1)
                }
                _ => {}
            }
        });
        if user_error || disposition == Disposition::WorkerFatal {
            self.settler.nak_all(&group.handles).await;
            return Err(e);
        }
        tracing::warn!(code = %e.code, trace_id = %group.trace_id, "group failed: {}", e.message);
        self.settler.fail(&group.handles, &e, disposition).await;
        match self.breaker.failure(&self.cfg.node_name, &e) {
            Some(unhealthy) => Err(unhealthy),
            None => Ok(()),
        }
    }
}

/// A group's second half, on its own task: the output's receipt (the publication finished
/// under its mode's rules), then every input acked (DELIV-2, BLOB-6).
///
/// A chain (`then`), not an `async fn`: one would keep the `Pending` in its state beside the
/// receipt's future made from it, and the acks' future beside both, in a task of its own
/// for every message in flight.
fn settle_after(
    pending: Option<Pending>,
    handles: Vec<Held>,
    blob: Option<BlobStore>,
) -> impl Future<Output = Result<Settled, VfError>> {
    OptionFuture::from(pending.map(Pending::confirm)).then(move |receipt| async move {
        let all = u64::try_from(handles.len()).unwrap_or(u64::MAX);
        let outcome = match receipt.transpose() {
            Ok(outcome) => outcome,
            // A publication that failed while the ledger also refused its inputs' received
            // notes (a store outage): the inputs go back as those notes' failure sends them.
            Err(e) => {
                return if Box::pin(settle::hand_back_if_unnoted(&handles)).await {
                    Ok(Settled {
                        outcome: None,
                        acked: 0,
                        handed_back: all,
                    })
                } else {
                    Err(e)
                };
            }
        };
        let acked = settle::ack_all(&handles, blob.as_ref()).await;
        Ok(Settled {
            outcome,
            acked,
            handed_back: all - acked,
        })
    })
}

/// How many groups the loop keeps submitted to `sink` at once: the node's `max_in_flight`,
/// or 1 (no pipelining) under a conformance fault schedule, whose barriers expect one group
/// at a time, in order (ENV-16/17).
fn pipeline_depth(sink: &Sink<'_>) -> usize {
    if faults::installed().is_some() {
        return 1;
    }
    match sink {
        Sink::Processor(node) => node.max_in_flight(),
        Sink::Consumer(node, _) => node.max_in_flight(),
    }
    .max(1)
}

/// Runs a node call off the async runtime when it may block (see `Processor::may_block`).
fn blocking<T>(may_block: bool, f: impl FnOnce() -> T) -> T {
    if may_block {
        super::offload::off_runtime(f)
    } else {
        f()
    }
}

/// The node's view of a group: one input per parent (ENV-3) and the context's `input_info`.
/// Takes the group's inputs: each payload and its metadata move to the node, uncopied.
/// Starts `group` on the node's context: its input key (the content-derived id its output and
/// an idempotent sink's marker go under, MSGID-1, IDEM-1) and the node's inputs.
fn begin_group(
    cfg: &WorkerConfig,
    group: &mut ReadyGroup<Held, Member>,
    ctx: &mut NodeContext,
) -> (String, Vec<Input>) {
    let input_key = msgid_signed(
        &cfg.flow_id,
        &cfg.run_id,
        &cfg.node_name,
        &group.trace_id,
        group.seq,
        MsgKind::Data,
    );
    let (inputs, info) = node_inputs(cfg, std::mem::take(&mut group.inputs));
    ctx.begin_group(Some(input_key.clone()), info);
    (input_key, inputs)
}

fn node_inputs(
    cfg: &WorkerConfig,
    inputs: Vec<GroupInput<Member>>,
) -> (Vec<Input>, Vec<(String, Option<InputInfo>)>) {
    let split = |e: crate::join::Entry<Member>| {
        let info = EnvelopeInfo {
            event_ts: e.event_ts,
            metadata: e.payload.metadata,
            trace_id: e.trace_id,
            seq: e.seq,
            replica_id: e.payload.replica_id,
        };
        (e.payload.payload, info)
    };
    let mut node_inputs = Vec::with_capacity(inputs.len());
    let mut info = Vec::with_capacity(inputs.len());
    for (parent, input) in cfg.parent_names.iter().zip(inputs) {
        match input {
            GroupInput::Entry(e) => {
                let (payload, one) = split(e);
                node_inputs.push(Input::Present(payload));
                info.push((parent.clone(), Some(InputInfo::Single(one))));
            }
            GroupInput::Window(w) => {
                let (payloads, infos): (Vec<Payload>, Vec<EnvelopeInfo>) =
                    w.entries.into_iter().map(split).unzip();
                node_inputs.push(Input::Collected(payloads));
                info.push((parent.clone(), Some(InputInfo::Collected(infos))));
            }
            GroupInput::Missing => {
                node_inputs.push(Input::Missing);
                info.push((parent.clone(), None));
            }
        }
    }
    (node_inputs, info)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` makes, without making one.
    fn future_size<A, F: Future>(_: impl Fn(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// LOOP-5's window holds one settlement task per message in flight (up to the durable's
    /// credit): its future must stay small, whichever store the ledger is on (the Redis
    /// client's futures are boxed out of the store's) and whatever the publish mode's rare
    /// paths hold (resends and backoff are boxed out of the receipt).
    #[test]
    fn a_settlement_task_stays_under_a_kib() {
        let settle = future_size(
            |(p, h, b): (Option<Pending>, Vec<Held>, Option<BlobStore>)| settle_after(p, h, b),
        );
        assert!(settle <= 1024, "settlement future {settle} bytes");
    }
}
