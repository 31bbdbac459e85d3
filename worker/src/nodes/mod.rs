//! The node API and the built-in node library (design §5 "builtin", protocol §6.2–6.3).
//!
//! A node only computes: the task loop (another module) owns every broker duty — ids, acks,
//! joins, drain, dead letters — and calls the node's methods on a dedicated thread, so nodes
//! are plain synchronous code that may block or sleep.
//!
//! - [`context`] — [`NodeContext`]: run identity, the current group's `input_key` and
//!   `input_info`, and the one-shot output setters of LOOP-8/LOOP-9.
//! - [`Producer`], [`Processor`], [`Consumer`] — the three node families, with [`Input`] for
//!   what a parent contributed to a group.
//! - [`registry`] — `VF_NODE_CLASS` + `VF_NODE_PARAMS_JSON` → a [`BuiltNode`], accepting the
//!   Python reference's class names.
//! - [`producers`], [`processors`], [`aggregators`], [`consumers`] — the built-in nodes.
//! - [`convert`] — how a payload reads as a Python object: `Value`s, `str()` and JSON.
//! - [`selfcheck`] — `Map` (arithmetic, partition keys) and `SelfCheck` (a consumer that
//!   writes a `{ok, expected, actual, details}` artifact): what sample Flows check themselves
//!   with.
//! - [`video`] — the video nodes over FFmpeg (`VideoFileReader`), behind the `video` cargo
//!   feature.
//! - [`vision`] — the reference's image transformers and `BoundingBoxAnnotator`, pixel for
//!   pixel as OpenCV computes them (plain Rust, in every build).
//! - [`testing`] — test-support nodes (`TickProducer`, `FailOn`, `FailingProducer`) that let
//!   end-to-end tests drive time joins, the failure ladder, dead letters and ABORTs.
//!
//! **Python `None` as an output.** 1.0.4 publishes whatever `process()`/`next()` returns,
//! `None` included, as a `videoflow.v1.Value` holding `null_value`; it never skips the
//! publication. Our nodes return `Payload::Value(Value::Null)` for that, and
//! [`normalize_output`] maps a stray [`Payload::None`] (which cannot be a DATA payload) to
//! the same null, so the runtime never drops an output either.

pub mod aggregators;
pub mod consumers;
pub mod context;
pub mod convert;
mod params;
pub mod processors;
pub mod producers;
pub mod registry;
pub mod selfcheck;
pub mod testing;
pub mod video;
pub mod vision;

use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::value::Value;

pub use context::{EnvelopeInfo, GpuPlacement, InputInfo, NodeContext};
pub use registry::{BuiltNode, ConsumerOptions, build_node, canonical_class, known_classes};

/// What one parent contributed to the input group handed to `process`/`consume`.
///
/// Why three cases: a quorum time group may lack a parent entirely (1.0.4 passes `None`), and
/// a collect parent contributes every envelope of its window (1.0.4 passes a list); a node
/// must be able to tell both from a present payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The parent's payload for this group.
    Present(Payload),
    /// The parent is missing from a quorum group (Python `None`).
    Missing,
    /// A time-join collect parent: every payload of the window, in arrival order (a list).
    Collected(Vec<Payload>),
}

/// A node with no parents: mints the flow's data (LOOP-2).
///
/// `Send` because the runtime builds the node on the main thread and runs it on its own.
pub trait Producer: Send {
    /// Acquires resources before the first `next` (LOOP-1); a failure means `close` is not
    /// called.
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Ok(())
    }

    /// The next item, or `Ok(None)` at the end of input (Python's `StopIteration`). Return
    /// `Payload::Value(Value::Null)` to publish Python's `None`.
    fn next(&mut self, ctx: &mut NodeContext) -> Result<Option<Payload>, VfError>;

    /// Whether `next` may block its thread (read a file or a socket, sleep to pace); see
    /// [`Processor::may_block`]. A source that computes its items and returns in
    /// microseconds says `false`. Default: `true`.
    fn may_block(&self) -> bool {
        true
    }

    /// Whether the source has a stable position of its own, item `n` being the same item in
    /// any process, so it can resume with `seek` (MSGID-6); default: a live source. A node
    /// declared replayable (`VF_REPLAYABLE=1`) whose class says false is refused at start.
    fn replayable(&self) -> bool {
        false
    }

    /// Positions a replayable source so the next `next()` yields item `offset + 1`, called
    /// after `open()` when the last accepted offset is > 0 (LOOP-2); a live source ignores
    /// it, as 1.0.4's default `seek` does.
    fn seek(&mut self, _offset: u64) -> Result<(), VfError> {
        Ok(())
    }

    /// Releases resources, once, after the loop on every exit path that followed a
    /// successful `open` (LOOP-1).
    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Ok(())
    }
}

/// A node with parents and children: one output per input group (LOOP-3).
pub trait Processor: Send {
    /// Checks, at startup, that this node can take `parents` positional inputs, so a miswired
    /// flow fails once with `VF_NODE_CONTRACT` instead of on every message. Default: any.
    fn check_inputs(&self, _parents: usize) -> Result<(), VfError> {
        Ok(())
    }

    /// Acquires resources before the first `process` (LOOP-1).
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Ok(())
    }

    /// Computes the output of one group; `inputs` follow the node's parent order (ENV-3).
    /// Python's `None` is `Payload::Value(Value::Null)` and is published like any value.
    fn process(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError>;

    /// Whether `process` may block (I/O, sleeps, long compute). The loop then runs it off the
    /// async runtime (`block_in_place`), so receipts, acks and keepalives go on meanwhile; a
    /// node that always returns in microseconds says `false` and saves that thread hand-off
    /// on every message. Default: `true`. Applies to `submit`/`complete` too.
    fn may_block(&self) -> bool {
        true
    }

    /// Whether this node's output is always its one input, untouched. The runtime may then
    /// hand it an offloaded payload's reference (`Payload::BlobRef`) instead of fetching
    /// the bytes, and publish that reference on: a hop that does not read the pixels does
    /// not move them. Default: `false`.
    fn forwards_input(&self) -> bool {
        false
    }

    /// How many groups this node can have computing at once through [`Processor::submit`] /
    /// [`Processor::complete`] (pipelining, e.g. an exec component working on one group while
    /// the next travels to it). 1 (the default) means the loop only calls `process`.
    fn max_in_flight(&self) -> usize {
        1
    }

    /// Starts computing one group without waiting for its output (only called when
    /// [`Processor::max_in_flight`] > 1, with fewer than that many submitted and not
    /// completed). An error fails this group only; nothing was started for it.
    fn submit(&mut self, _ctx: &mut NodeContext, _inputs: &[Input]) -> Result<(), VfError> {
        Err(not_pipelined("submit"))
    }

    /// Waits for the output of the **oldest** submitted group, so outputs come back in input
    /// order whatever order the work finishes in; one-shot settings (LOOP-8/9) go on `ctx`
    /// as `process` would set them. An error fails that group.
    fn complete(&mut self, _ctx: &mut NodeContext) -> Result<Payload, VfError> {
        Err(not_pipelined("complete"))
    }

    /// Releases resources (LOOP-1).
    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Ok(())
    }
}

/// A node with parents and no children: applies an effect per input group (LOOP-4).
pub trait Consumer: Send {
    /// As [`Processor::check_inputs`].
    fn check_inputs(&self, _parents: usize) -> Result<(), VfError> {
        Ok(())
    }

    /// Acquires resources before the first `consume` (LOOP-1).
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Ok(())
    }

    /// Applies the effect of one group; `inputs` follow the node's parent order. Must not
    /// return before the effect is durable enough to ack (LOOP-5 applies to effects too).
    fn consume(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError>;

    /// As [`Processor::may_block`], for `consume`.
    fn may_block(&self) -> bool {
        true
    }

    /// As [`Processor::max_in_flight`], for [`Consumer::submit`] / [`Consumer::complete`].
    fn max_in_flight(&self) -> usize {
        1
    }

    /// As [`Processor::submit`]: starts the effect of one group.
    fn submit(&mut self, _ctx: &mut NodeContext, _inputs: &[Input]) -> Result<(), VfError> {
        Err(not_pipelined("submit"))
    }

    /// As [`Processor::complete`]: returns once the oldest submitted group's effect is
    /// durable enough to ack (LOOP-5).
    fn complete(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Err(not_pipelined("complete"))
    }

    /// Releases resources (LOOP-1).
    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        Ok(())
    }
}

/// What the runtime publishes for a node's output: [`Payload::None`] (no message, which a
/// DATA envelope cannot carry) becomes a null `Value`, as Python's `None` does in 1.0.4.
pub fn normalize_output(output: Payload) -> Payload {
    match output {
        Payload::None => Payload::Value(Value::Null),
        other => other,
    }
}

/// What the default `submit`/`complete` answer: the loop only calls them on a node whose
/// `max_in_flight` is above 1, so reaching one is a node that says it pipelines and does not.
fn not_pipelined(method: &str) -> VfError {
    VfError::new(
        ErrorCode::NodeContract,
        format!("{method}() called on a node that does not pipeline (max_in_flight 1)"),
    )
    .with_remedy("A node whose max_in_flight() is above 1 must implement submit() and complete().")
}
