//! The runtime context a node reads and writes (§6.3, LOOP-8, LOOP-9).
//!
//! Why a value the runtime owns and lends per call (rather than globals or a handle into the
//! messenger): the node stays testable with a context built by hand, and the runtime reads
//! the one-shot settings back with `take_*` at publish time, which is exactly when 1.0.4's
//! messenger consumes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use videoflow_core::value::Value;

/// What the runtime knows about one envelope of the current group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnvelopeInfo {
    /// The envelope's event time (epoch seconds), if it carried one.
    pub event_ts: Option<f64>,
    /// The envelope's metadata map (empty when none).
    pub metadata: BTreeMap<String, Value>,
    /// The envelope's trace id.
    pub trace_id: String,
    /// The envelope's seq.
    pub seq: u64,
    /// The `replica_id` of the replica that published the envelope (WIRE-4): lets a sink
    /// tell which replica of a partitioned or competing parent produced an output.
    pub replica_id: u32,
}

/// One parent's part of the current group, as `ctx.input_info[parent]` reads in 1.0.4.
#[derive(Debug, Clone, PartialEq)]
pub enum InputInfo {
    /// A single envelope (trace joins, time-join sync parents, single-parent nodes).
    Single(EnvelopeInfo),
    /// A collect parent: one entry per envelope of the window. 1.0.4 exposes `trace_id` and
    /// `seq` as `None` and `event_ts`/`metadata` as lists for these; the entries keep all four.
    Collected(Vec<EnvelopeInfo>),
}

impl InputInfo {
    /// The single envelope's info; `None` for a collect parent (which has no one trace id).
    pub fn single(&self) -> Option<&EnvelopeInfo> {
        match self {
            InputInfo::Single(e) => Some(e),
            InputInfo::Collected(_) => None,
        }
    }
}

/// Identity of the running replica plus the current group's inputs, and the two one-shot
/// output settings (LOOP-8, LOOP-9).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeContext {
    /// `VF_FLOW_ID`.
    pub flow_id: String,
    /// `VF_RUN_ID`.
    pub run_id: String,
    /// `VF_NODE_NAME`.
    pub node_name: String,
    /// This replica's id (ENV-5).
    pub replica_id: u32,
    /// The current group's stable identity (`last_input_key`, MSGID §5): what an idempotent
    /// sink keys its effect on. `None` for producers.
    pub input_key: Option<String>,
    /// Per parent, in parent order: the current group's envelope info, `None` for a parent
    /// missing from a quorum group. Empty for producers.
    pub input_info: Vec<(String, Option<InputInfo>)>,
    output_partition_key: Option<Value>,
    output_event_ts: Option<f64>,
    /// Whether the runtime wants the node to stop (a control stop, SIGTERM, SIGINT).
    pub halt: Halt,
    /// What the GPU grant check (START-1 step 6) left this node to run on: what a node that
    /// drives a GPU itself (the video readers' NVDEC decoding) decides by.
    pub gpu: GpuPlacement,
}

/// The GPU a node may use, as the grant check found it before `open()`.
///
/// Why in the context and not read from the environment by the node: the grant check has
/// already weighed the declaration, the recorded grant and the masks; a node that drives a
/// GPU itself should act on that verdict, not on a second reading of its inputs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuPlacement {
    /// The node asked for no GPU (`VF_DEVICE_TYPE=cpu`, the default).
    #[default]
    Cpu,
    /// It asked, and the check delivered these devices (their ids, in CUDA index order).
    /// `required`: it declared `gpu.fallback: none`, so work the GPU cannot take is refused
    /// rather than run on the CPU.
    Granted {
        /// The delivered devices' ids.
        devices: Vec<String>,
        /// `gpu.fallback: none`.
        required: bool,
    },
    /// It asked, and no probe could see the host's GPUs (no NVML, no `nvidia-smi`): whether
    /// a device is there is unknown (the check's reason).
    Unobserved(String),
    /// It asked, and the check delivered no device (the check's problems).
    Denied(String),
}

impl GpuPlacement {
    /// Whether the node asked for a GPU at all.
    pub fn requested(&self) -> bool {
        !matches!(self, GpuPlacement::Cpu)
    }

    /// Whether the node declared it cannot run without its GPU (`gpu.fallback: none`).
    pub fn required(&self) -> bool {
        matches!(self, GpuPlacement::Granted { required: true, .. })
    }
}

/// The runtime's "stop now" question, for a node that waits inside one call (a live
/// source reconnecting): it ends the wait and returns instead of holding the loop.
/// Equal to every other `Halt`, so it does not count in a context's comparison.
#[derive(Clone, Default)]
pub struct Halt(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl Halt {
    /// A halt that asks `requested`.
    pub fn new(requested: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Halt(Some(Arc::new(requested)))
    }

    /// Whether the runtime asked the node to stop (never, for a context built by hand).
    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f())
    }
}

impl PartialEq for Halt {
    fn eq(&self, _other: &Halt) -> bool {
        true
    }
}

impl std::fmt::Debug for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Halt(runtime)"
        } else {
            "Halt(never)"
        })
    }
}

impl NodeContext {
    /// A context for one replica, with no group yet.
    pub fn new(
        flow_id: impl Into<String>,
        run_id: impl Into<String>,
        node_name: impl Into<String>,
        replica_id: u32,
    ) -> Self {
        NodeContext {
            flow_id: flow_id.into(),
            run_id: run_id.into(),
            node_name: node_name.into(),
            replica_id,
            ..NodeContext::default()
        }
    }

    /// Installs the next group's key and info (the runtime's call, before `process`/`consume`).
    pub fn begin_group(
        &mut self,
        input_key: Option<String>,
        input_info: Vec<(String, Option<InputInfo>)>,
    ) {
        self.input_key = input_key;
        self.input_info = input_info;
    }

    /// The info of parent `parent`: outer `None` if it is not a parent, inner `None` if it is
    /// missing from the current quorum group.
    pub fn input_info_for(&self, parent: &str) -> Option<Option<&InputInfo>> {
        self.input_info
            .iter()
            .find(|(name, _)| name == parent)
            .map(|(_, info)| info.as_ref())
    }

    /// The first parent's single-envelope info, if any: what a single-input node reads.
    pub fn first_envelope(&self) -> Option<&EnvelopeInfo> {
        self.input_info
            .iter()
            .find_map(|(_, info)| info.as_ref().and_then(InputInfo::single))
    }

    /// LOOP-8: the partition key of the next published output (metadata `_partition_key`).
    /// A null value clears it, as Python's `None` does.
    pub fn set_output_partition_key(&mut self, value: Value) {
        self.output_partition_key = match value {
            Value::Null => None,
            v => Some(v),
        };
    }

    /// LOOP-9: the event time (epoch seconds) of the next published output; it beats the
    /// input group's event time (LOOP-10).
    pub fn set_output_event_timestamp(&mut self, ts: f64) {
        self.output_event_ts = Some(ts);
    }

    /// Takes the pending partition key (the runtime's call at publish; one-shot).
    pub fn take_output_partition_key(&mut self) -> Option<Value> {
        self.output_partition_key.take()
    }

    /// Takes the pending event time (the runtime's call at publish; one-shot).
    pub fn take_output_event_timestamp(&mut self) -> Option<f64> {
        self.output_event_ts.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_setters_are_taken_once() {
        let mut ctx = NodeContext::new("f", "r", "n", 2);
        ctx.set_output_partition_key(Value::from("cam-1"));
        ctx.set_output_event_timestamp(12.5);
        assert_eq!(ctx.take_output_partition_key(), Some(Value::from("cam-1")));
        assert_eq!(ctx.take_output_partition_key(), None);
        assert_eq!(ctx.take_output_event_timestamp(), Some(12.5));
        assert_eq!(ctx.take_output_event_timestamp(), None);
    }

    #[test]
    fn null_partition_key_clears() {
        let mut ctx = NodeContext::new("f", "r", "n", 0);
        ctx.set_output_partition_key(Value::Int(3));
        ctx.set_output_partition_key(Value::Null);
        assert_eq!(ctx.take_output_partition_key(), None);
    }

    #[test]
    fn input_info_lookup_distinguishes_missing_from_unknown() {
        let mut ctx = NodeContext::new("f", "r", "n", 0);
        let info = EnvelopeInfo {
            trace_id: "t".into(),
            seq: 4,
            ..EnvelopeInfo::default()
        };
        ctx.begin_group(
            Some("k".into()),
            vec![
                ("a".into(), None),
                ("b".into(), Some(InputInfo::Single(info.clone()))),
            ],
        );
        assert_eq!(ctx.input_info_for("a"), Some(None));
        assert_eq!(ctx.input_info_for("zz"), None);
        assert_eq!(ctx.first_envelope(), Some(&info));
    }
}
