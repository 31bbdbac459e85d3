//! Self-checking built-ins (ours, `videoflow.rs.*`) that let a sample Flow prove, at the end
//! of a distributed run, that it computed the right answer.
//!
//! - [`Map`] — `videoflow.rs.processors.Map`: integer/float arithmetic on its one input
//!   (`identity`, `add`, `mul`, `square`, `mod`), optionally stamping a partition key
//!   (LOOP-8) so a downstream node can be partitioned by a metadata key (PART-2).
//! - [`SelfCheck`] — `videoflow.rs.consumers.SelfCheck`: accumulates statistics over every
//!   group it consumes and, at `close()`, compares them with the `expect` parameter and writes
//!   a JSON artifact `{ok, expected, actual, details}` to `path`.
//!
//! **How a failed check fails the run.** 1.0.4 only logs an error from `close()` (LOOP-1), and
//! so does our runtime, so `SelfCheck::close` returning an error (it does, after writing the
//! artifact with `ok: false`) shows in the worker's log but does not change its exit status.
//! The local runner (`videoflow-worker run`) is what turns the artifact into an answer: it
//! deletes each SelfCheck node's artifact before the run, reads it afterwards, prints the
//! verdict, and exits 4 when an artifact is missing or says `ok: false`.
//!
//! **Where the artifact goes.** A relative `path` resolves against the worker's working
//! directory; the local runner starts every worker in the run directory (`--workdir`,
//! default `videoflow-runs/<flow name>/` under the current directory) and prints it.
//!
//! **Limits.** The statistics live in the worker's memory: a SelfCheck consumer must run as
//! one replica (a second replica fails `open()` with `VF_CONFIG`), and a restart of that
//! replica loses what it had counted, which the artifact then reports as a mismatch.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map as JsonMap, Value as Json, json};
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::{KeyPolicy, owner, py_repr};
use videoflow_core::value::{Tensor, Value};

use super::context::{EnvelopeInfo, InputInfo};
use super::convert::{expect_inputs, input_to_json, io_error, schema_error};
use super::params::Params;
use super::producers::verify_synthetic_frame;
use super::{Consumer, Input, NodeContext, Processor};

/// The metadata key [`NodeContext::set_output_partition_key`] writes (LOOP-8) and a node
/// partitioned with `partitionBy: _partition_key` reads (PART-2).
pub const PARTITION_KEY_METADATA: &str = "_partition_key";

/// What [`Map`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapOp {
    /// The input unchanged.
    Identity,
    /// `x + operand`.
    Add,
    /// `x × operand`.
    Mul,
    /// `x × x`.
    Square,
    /// `x mod operand` (Python's `%`: the sign of the operand).
    Mod,
}

/// A number as Python arithmetic sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn from_json(j: &Json) -> Option<Num> {
        j.as_i64()
            .map(Num::Int)
            .or_else(|| j.as_f64().filter(|x| x.is_finite()).map(Num::Float))
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(x) => x,
        }
    }
}

/// `videoflow.rs.processors.Map` (ours): arithmetic on one numeric input, so a sample's
/// result is predictable.
///
/// Parameters: `op` — `identity` (default), `add`, `mul`, `square`, `mod`; `operand` — a
/// number, required by `add`, `mul` and `mod` (non-zero for `mod`); `key_mod` — optional
/// integer ≥ 1: stamp the output's partition key (LOOP-8, metadata `_partition_key`) with
/// the *input* integer modulo `key_mod`, so a child with `partitionBy: _partition_key` routes
/// every value of one residue class to one replica (PART-2/3).
///
/// An int input with an int operand stays an int (an overflow is `VF_POISON`); anything with
/// a float is a float. A non-numeric input is `VF_POISON_SCHEMA`; `key_mod` needs an int
/// input.
#[derive(Debug, Clone, PartialEq)]
pub struct Map {
    op: MapOp,
    operand: Option<Num>,
    key_mod: Option<i64>,
}

impl Map {
    /// A map computing `op` with `operand` (ignored by `identity` and `square`).
    pub fn new(op: MapOp, operand: Option<f64>, key_mod: Option<i64>) -> Self {
        let operand = operand.map(|x| {
            if x.fract() == 0.0 && x.abs() < 9.0e15 {
                Num::Int(x as i64)
            } else {
                Num::Float(x)
            }
        });
        Map {
            op,
            operand,
            key_mod,
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let op_text = p.string("op", "identity")?;
        let op = match op_text.as_str() {
            "identity" => MapOp::Identity,
            "add" => MapOp::Add,
            "mul" => MapOp::Mul,
            "square" => MapOp::Square,
            "mod" => MapOp::Mod,
            _ => {
                return Err(p.bad(
                    "op",
                    "one of 'identity', 'add', 'mul', 'square', 'mod'",
                    &Json::from(op_text.as_str()),
                ));
            }
        };
        let operand = match p.opt_json("operand") {
            None => None,
            Some(j) => {
                Some(Num::from_json(j).ok_or_else(|| p.bad("operand", "a finite number", j))?)
            }
        };
        let needs_operand = matches!(op, MapOp::Add | MapOp::Mul | MapOp::Mod);
        if needs_operand && operand.is_none() {
            return Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "VF_NODE_PARAMS_JSON: videoflow.rs.processors.Map with op '{op_text}' requires parameter 'operand'."
                ),
            )
            .with_remedy("Add a number 'operand' to the node's params in the Flow.")
            .with_context("variable", "VF_NODE_PARAMS_JSON")
            .with_context("param", "operand"));
        }
        if op == MapOp::Mod && operand.is_some_and(|o| o.as_f64() == 0.0) {
            return Err(p.bad("operand", "a non-zero number for op 'mod'", &Json::from(0)));
        }
        let key_mod = p.opt_int("key_mod")?;
        if let Some(k) = key_mod.filter(|k| *k < 1) {
            return Err(p.bad("key_mod", "an integer >= 1", &Json::from(k)));
        }
        Ok(Map {
            op,
            operand,
            key_mod,
        })
    }

    /// `op` applied to `x`; `None` on a 64-bit overflow.
    fn apply(&self, x: Num) -> Option<Num> {
        let operand = self.operand.unwrap_or(Num::Int(0));
        match (self.op, x, operand) {
            (MapOp::Identity, x, _) => Some(x),
            (MapOp::Square, Num::Int(a), _) => a.checked_mul(a).map(Num::Int),
            (MapOp::Square, x, _) => Some(Num::Float(x.as_f64() * x.as_f64())),
            (MapOp::Add, Num::Int(a), Num::Int(b)) => a.checked_add(b).map(Num::Int),
            (MapOp::Mul, Num::Int(a), Num::Int(b)) => a.checked_mul(b).map(Num::Int),
            (MapOp::Mod, Num::Int(a), Num::Int(b)) => a.checked_rem(b).map(|r| {
                // Python: the result has the sign of the divisor.
                Num::Int(if r != 0 && (r < 0) != (b < 0) {
                    r + b
                } else {
                    r
                })
            }),
            (MapOp::Add, a, b) => Some(Num::Float(a.as_f64() + b.as_f64())),
            (MapOp::Mul, a, b) => Some(Num::Float(a.as_f64() * b.as_f64())),
            (MapOp::Mod, a, b) => {
                let (a, b) = (a.as_f64(), b.as_f64());
                let r = a % b;
                Some(Num::Float(if r != 0.0 && (r < 0.0) != (b < 0.0) {
                    r + b
                } else {
                    r
                }))
            }
        }
    }
}

impl Processor for Map {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("Map", 1, parents)
    }

    fn process(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        expect_inputs("Map", 1, inputs.len())?;
        let x = match &inputs[0] {
            Input::Present(Payload::Value(Value::Int(i))) => Num::Int(*i),
            Input::Present(Payload::Value(Value::Double(x))) => Num::Float(*x),
            other => {
                return Err(schema_error(
                    "Map",
                    format!("expected a number, got {}", input_to_json(other)),
                ));
            }
        };
        if let Some(k) = self.key_mod {
            let Num::Int(i) = x else {
                return Err(schema_error(
                    "Map",
                    "key_mod needs an integer input to derive a partition key",
                ));
            };
            ctx.set_output_partition_key(Value::Int(i.rem_euclid(k)));
        }
        let y = self.apply(x).ok_or_else(|| {
            VfError::new(
                ErrorCode::Poison,
                format!("Map: {:?} of {x:?} overflows a 64-bit integer", self.op),
            )
            .with_remedy("Use a float operand, or smaller inputs.")
        })?;
        Ok(Payload::Value(match y {
            Num::Int(i) => Value::Int(i),
            Num::Float(f) => Value::Double(f),
        }))
    }
}

/// The statistics [`SelfCheck`] can be asked to check, in the order the artifact lists them.
pub const SELFCHECK_KEYS: &[&str] = &[
    "count",
    "distinct",
    "sum",
    "min",
    "max",
    "values",
    "missing",
    "received",
    "duplicates",
    "mismatched",
    "split",
    "collected",
    "collected_duplicates",
    "collect_max_offset_ms",
    "frames_ok",
    "frames_bad",
    "frame_indices",
    "frame_shapes",
    "keys",
    "keys_split",
    "keys_misowned",
    "video_frames",
    "video_size",
    "video_box_frames",
];

/// `videoflow.rs.consumers.SelfCheck` (ours): checks what a whole run delivered.
///
/// Per group it takes an *observation*: the one input as JSON (ints and doubles kept apart,
/// see [`input_to_json`]), or the array of its inputs for several parents. At `close()` it
/// computes these statistics and compares those named in `expect`:
///
/// - `count` — groups consumed; `distinct` — distinct observations (`distinct == count`:
///   nothing delivered twice); `values` — every observation, sorted by its JSON text.
/// - `sum`, `min`, `max` — folded over the observations: numbers add / compare (ints stay
///   ints), arrays fold position by position (so `[[2x, x²], total]` sums each slot), nulls
///   are skipped; a slot that mixes shapes, or holds no number (a string, a tensor), folds
///   to the string `"mixed"`.
/// - `missing` — groups in which some parent was missing (time-join quorum groups).
/// - `received` — per parent, in parent order, the envelopes this node was given: the groups
///   a parent is present in, and for a time-join collect parent the samples it delivered.
///   With the numbers its sources publish as bounds, it says what a REALTIME flow dropped.
/// - `duplicates` — single-envelope members (parent, trace id, seq) already delivered in an
///   earlier group; `mismatched` — groups whose present single-envelope members carry
///   different values; `split` — values carried by single-envelope members that occur in
///   more than one group. For a join of sources that publish the same value for the same
///   instant (ticks of one grid), `mismatched == 0` and `split == 0` say that every pair
///   that arrived was joined, and joined right, whatever else was dropped.
/// - `collected` — samples delivered by time-join collect parents; `collected_duplicates` —
///   those seen before (same parent, trace id and seq); `collect_max_offset_ms` — the largest
///   `|sample event time − group time|` in milliseconds, the group time being the earliest
///   event time of its synchronized members (JOIN-11/18).
/// - `frames_ok` / `frames_bad` — tensors that are / are not exactly the frame
///   `SyntheticFrameProducer` built for their index (every byte checked); `frame_indices` —
///   distinct frame indices; `frame_shapes` — distinct `[h, w, c]` shapes, sorted.
/// - `keys` — distinct `_partition_key` values on the first parent's envelopes;
///   `keys_split` — keys that arrived from more than one replica of that parent;
///   `keys_misowned` (only with the `partitions` parameter) — keys whose groups came from a
///   replica other than the one PART-3 assigns among `partitions` replicas.
/// - `video_frames`, `video_size` (`[h, w]`), `video_box_frames` — with the `video_file`
///   parameter: at `close()` the file is decoded (waiting up to a minute for its writer to
///   finish it) and these say how many frames it holds, their size, and how many show at
///   least 100 pixels of `box_color` (`[b, g, r]` as the frames hold it, default
///   `[255, 225, 0]`: `BoundingBoxAnnotator`'s default on a BGR frame); with
///   `contact_sheet`, a PNG of four of its frames is written there. Both paths are listed
///   under `outputs` in the artifact, and the local runner prints them.
///
/// An expected value matches when equal (numbers compare by value, `2 == 2.0`); `null` inside
/// an expected array or object matches anything (a slot whose value depends on timing), and
/// an object `{at_most: x}` / `{at_least: x}` (or both) bounds a number.
///
/// Parameters: `path` (required; the artifact, folders created), `expect` (required object,
/// keys from the list above), `partitions` (optional int ≥ 1), `video_file`, `box_color`
/// and `contact_sheet` (see the `video_*` keys), and the consumer flags
/// (`idempotent`, `metadata`). See the module docs for how a failure ends the run.
#[derive(Debug)]
pub struct SelfCheck {
    path: PathBuf,
    expect: JsonMap<String, Json>,
    partitions: Option<u32>,
    stats: Stats,
    video: Option<VideoCheck>,
    /// What reading `video` found (filled at `close()`).
    video_actual: JsonMap<String, Json>,
}

/// The written video a [`SelfCheck`] reads back at `close()`.
#[derive(Debug, Clone, PartialEq)]
struct VideoCheck {
    file: String,
    box_color: [u8; 3],
    contact_sheet: Option<String>,
}

/// How long `close()` waits for the video's writer to finish the file.
#[cfg(feature = "video")]
const VIDEO_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What [`SelfCheck`] accumulates.
#[derive(Debug, Default)]
struct Stats {
    count: u64,
    observations: Vec<String>,
    sum: Option<Json>,
    min: Option<Json>,
    max: Option<Json>,
    missing: u64,
    received: Vec<u64>,
    members_seen: BTreeSet<(String, String, u64)>,
    duplicates: u64,
    mismatched: u64,
    /// Per single-envelope member value (JSON text): the groups it occurs in.
    value_groups: BTreeMap<String, u64>,
    collected: u64,
    collected_seen: BTreeSet<(String, String, u64)>,
    collected_duplicates: u64,
    collect_max_offset_ms: Option<f64>,
    frames_ok: u64,
    frames_bad: u64,
    frame_indices: BTreeSet<u64>,
    frame_shapes: BTreeSet<Vec<i64>>,
    key_replicas: BTreeMap<String, (Value, BTreeSet<u32>)>,
}

impl SelfCheck {
    /// A check writing its artifact to `path`, comparing against `expect`.
    pub fn new(path: impl Into<PathBuf>, expect: JsonMap<String, Json>) -> Self {
        SelfCheck {
            path: path.into(),
            expect,
            partitions: None,
            stats: Stats::default(),
            video: None,
            video_actual: JsonMap::new(),
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let path = p.required_string("path")?;
        let expect = match p.opt_json("expect") {
            Some(Json::Object(m)) if !m.is_empty() => m.clone(),
            Some(other) => return Err(p.bad("expect", "a non-empty object", other)),
            None => {
                return Err(VfError::new(
                    ErrorCode::Config,
                    "VF_NODE_PARAMS_JSON: videoflow.rs.consumers.SelfCheck requires parameter 'expect'.",
                )
                .with_remedy(format!(
                    "Add an object 'expect' with some of: {}.",
                    SELFCHECK_KEYS.join(", ")
                ))
                .with_context("variable", "VF_NODE_PARAMS_JSON")
                .with_context("param", "expect"));
            }
        };
        if let Some(unknown) = expect
            .keys()
            .find(|k| !SELFCHECK_KEYS.contains(&k.as_str()))
        {
            return Err(p.bad(
                "expect",
                &format!(
                    "an object whose keys are among {}",
                    SELFCHECK_KEYS.join(", ")
                ),
                &Json::from(unknown.as_str()),
            ));
        }
        let partitions = match p.opt_int("partitions")? {
            None => None,
            Some(n) => Some(
                u32::try_from(n)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| p.bad("partitions", "an integer >= 1", &Json::from(n)))?,
            ),
        };
        // Read whether or not a video is checked, so every parameter is always validated.
        let color = p.int_list("box_color")?;
        let contact_sheet = p.opt_string("contact_sheet")?;
        let video = match p.opt_string("video_file")? {
            None => None,
            Some(file) => {
                let box_color = match color.as_slice() {
                    [] => [255, 225, 0],
                    [b, g, r] if [b, g, r].iter().all(|c| (0..=255).contains(*c)) => {
                        [*b as u8, *g as u8, *r as u8]
                    }
                    _ => {
                        return Err(p.bad(
                            "box_color",
                            "three integers 0..=255",
                            &Json::from(color),
                        ));
                    }
                };
                Some(VideoCheck {
                    file,
                    box_color,
                    contact_sheet,
                })
            }
        };
        if video.is_some() && !super::video::available() {
            return Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "VF_NODE_PARAMS_JSON: SelfCheck's video_file reads a video back with \
                     FFmpeg, and {}.",
                    super::video::missing_text()
                ),
            )
            .with_remedy(super::video::remedy())
            .with_context("variable", "VF_NODE_PARAMS_JSON")
            .with_context("param", "video_file"));
        }
        Ok(SelfCheck {
            partitions,
            video,
            ..SelfCheck::new(path, expect)
        })
    }

    /// Reads the written video back (see the `video_*` keys).
    #[cfg(feature = "video")]
    fn check_video(&mut self) {
        let Some(v) = self.video.clone() else {
            return;
        };
        let a = &mut self.video_actual;
        match super::video::inspect(&v.file, v.box_color, v.contact_sheet.as_deref(), VIDEO_WAIT) {
            Ok(r) => {
                a.insert("video_frames".into(), json!(r.frames));
                a.insert("video_size".into(), json!(r.size));
                a.insert("video_box_frames".into(), json!(r.box_frames));
            }
            Err(e) => {
                a.insert("video_error".into(), json!(e));
            }
        }
    }

    #[cfg(not(feature = "video"))]
    fn check_video(&mut self) {}

    /// The files the check points a person at, as absolute paths.
    fn outputs(&self) -> Json {
        let Some(v) = &self.video else {
            return Json::Null;
        };
        let abs = |p: &str| {
            std::path::absolute(p)
                .map(|a| a.display().to_string())
                .unwrap_or_else(|_| p.to_owned())
        };
        let mut o = JsonMap::new();
        o.insert("video".into(), json!(abs(&v.file)));
        if let Some(sheet) = &v.contact_sheet {
            o.insert("contact_sheet".into(), json!(abs(sheet)));
        }
        Json::Object(o)
    }

    /// The artifact's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records one group.
    fn observe(&mut self, ctx: &NodeContext, inputs: &[Input]) {
        let s = &mut self.stats;
        s.count += 1;
        let obs = match inputs {
            [one] => input_to_json(one),
            many => many.iter().map(input_to_json).collect(),
        };
        s.observations.push(obs.to_string());
        s.sum = Some(fold(s.sum.take(), &obs, Fold::Sum));
        s.min = Some(fold(s.min.take(), &obs, Fold::Min));
        s.max = Some(fold(s.max.take(), &obs, Fold::Max));
        if inputs.iter().any(|i| matches!(i, Input::Missing)) {
            s.missing += 1;
        }
        // Per parent: what was received; single-envelope members: duplicates and pairing.
        if s.received.len() < ctx.input_info.len() {
            s.received.resize(ctx.input_info.len(), 0);
        }
        let mut values = BTreeSet::new();
        for (i, (parent, info)) in ctx.input_info.iter().enumerate() {
            match info {
                Some(InputInfo::Single(e)) => {
                    s.received[i] += 1;
                    if !s
                        .members_seen
                        .insert((parent.clone(), e.trace_id.clone(), e.seq))
                    {
                        s.duplicates += 1;
                    }
                    if let Some(input) = inputs.get(i) {
                        values.insert(input_to_json(input).to_string());
                    }
                }
                Some(InputInfo::Collected(items)) => {
                    s.received[i] += u64::try_from(items.len()).unwrap_or(u64::MAX);
                }
                None => {}
            }
        }
        if values.len() > 1 {
            s.mismatched += 1;
        }
        for v in values {
            *s.value_groups.entry(v).or_insert(0) += 1;
        }
        for input in inputs {
            let tensors: Vec<&Tensor> = match input {
                Input::Present(Payload::Tensor(t)) => vec![t],
                Input::Present(Payload::Value(Value::Tensor(t))) => vec![t],
                Input::Collected(items) => items
                    .iter()
                    .filter_map(|p| match p {
                        Payload::Tensor(t) => Some(t),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for t in tensors {
                match verify_synthetic_frame(t) {
                    Some(index) => {
                        s.frames_ok += 1;
                        s.frame_indices.insert(index);
                    }
                    None => s.frames_bad += 1,
                }
                s.frame_shapes.insert(t.shape.clone());
            }
        }
        // Collect parents (JOIN-18): offsets from the group time, duplicates.
        let group_ts = ctx
            .input_info
            .iter()
            .filter_map(|(_, info)| info.as_ref().and_then(InputInfo::single))
            .filter_map(|e| e.event_ts)
            .reduce(f64::min);
        for (parent, info) in &ctx.input_info {
            let Some(InputInfo::Collected(items)) = info else {
                continue;
            };
            for e in items {
                s.collected += 1;
                if !s
                    .collected_seen
                    .insert((parent.clone(), e.trace_id.clone(), e.seq))
                {
                    s.collected_duplicates += 1;
                }
                if let (Some(g), Some(t)) = (group_ts, e.event_ts) {
                    let off = (t - g).abs() * 1000.0;
                    s.collect_max_offset_ms =
                        Some(s.collect_max_offset_ms.map_or(off, |m| m.max(off)));
                }
            }
        }
        // Partition keys of the first parent's envelope (PART-2).
        if let Some(e) = ctx.first_envelope() {
            record_key(&mut s.key_replicas, e);
        }
    }

    /// The statistics as the artifact's `actual` object.
    fn actual(&self) -> JsonMap<String, Json> {
        let s = &self.stats;
        let mut sorted = s.observations.clone();
        sorted.sort();
        let distinct = sorted.iter().collect::<BTreeSet<_>>().len();
        let mut a = JsonMap::new();
        a.insert("count".into(), json!(s.count));
        a.insert("distinct".into(), json!(distinct));
        a.insert("sum".into(), s.sum.clone().unwrap_or(Json::Null));
        a.insert("min".into(), s.min.clone().unwrap_or(Json::Null));
        a.insert("max".into(), s.max.clone().unwrap_or(Json::Null));
        if self.expect.contains_key("values") {
            let values: Vec<Json> = sorted
                .iter()
                .map(|t| serde_json::from_str(t).unwrap_or(Json::Null))
                .collect();
            a.insert("values".into(), Json::Array(values));
        }
        a.insert("missing".into(), json!(s.missing));
        a.insert("received".into(), json!(s.received));
        a.insert("duplicates".into(), json!(s.duplicates));
        a.insert("mismatched".into(), json!(s.mismatched));
        let split_values = s.value_groups.values().filter(|n| **n > 1).count();
        a.insert("split".into(), json!(split_values));
        a.insert("collected".into(), json!(s.collected));
        a.insert("collected_duplicates".into(), json!(s.collected_duplicates));
        a.insert(
            "collect_max_offset_ms".into(),
            s.collect_max_offset_ms.map_or(Json::Null, |x| json!(x)),
        );
        a.insert("frames_ok".into(), json!(s.frames_ok));
        a.insert("frames_bad".into(), json!(s.frames_bad));
        a.insert("frame_indices".into(), json!(s.frame_indices.len()));
        a.insert("frame_shapes".into(), json!(s.frame_shapes));
        a.insert("keys".into(), json!(s.key_replicas.len()));
        let split = s
            .key_replicas
            .values()
            .filter(|(_, replicas)| replicas.len() > 1)
            .count();
        a.insert("keys_split".into(), json!(split));
        if let Some(n) = self.partitions {
            let misowned = s
                .key_replicas
                .values()
                .filter(|(key, replicas)| {
                    let o = owner(Some(key), n, KeyPolicy::Reject);
                    replicas.iter().any(|r| !o.is_owned_by(*r))
                })
                .count();
            a.insert("keys_misowned".into(), json!(misowned));
        }
        a.extend(self.video_actual.clone());
        a
    }

    /// The artifact: `{ok, expected, actual, details}` plus where it came from.
    pub fn report(&self, ctx: &NodeContext) -> Json {
        let actual = self.actual();
        let mut details = Vec::new();
        for (key, want) in &self.expect {
            let got = actual.get(key).unwrap_or(&Json::Null);
            if !matches(want, got) {
                details.push(format!("{key}: expected {want}, got {got}"));
            }
        }
        if let Some(e) = actual.get("video_error") {
            details.push(format!("video_file: {e}"));
        }
        let mut report = json!({
            "ok": details.is_empty(),
            "expected": self.expect,
            "actual": actual,
            "details": details,
            "flow_id": ctx.flow_id,
            "run_id": ctx.run_id,
            "node": ctx.node_name,
        });
        let outputs = self.outputs();
        if !outputs.is_null() {
            report["outputs"] = outputs;
        }
        report
    }
}

/// Remembers which replica of the first parent published an envelope with this key.
fn record_key(keys: &mut BTreeMap<String, (Value, BTreeSet<u32>)>, e: &EnvelopeInfo) {
    if let Some(key) = e.metadata.get(PARTITION_KEY_METADATA) {
        keys.entry(py_repr(key))
            .or_insert_with(|| (key.clone(), BTreeSet::new()))
            .1
            .insert(e.replica_id);
    }
}

#[derive(Clone, Copy)]
enum Fold {
    Sum,
    Min,
    Max,
}

/// Folds observation `b` into accumulator `a` (see [`SelfCheck`]).
fn fold(a: Option<Json>, b: &Json, how: Fold) -> Json {
    let Some(a) = a else {
        return b.clone();
    };
    match (a, b) {
        (a, Json::Null) => a,
        (Json::Null, b) => b.clone(),
        (Json::Number(x), Json::Number(y)) => fold_number(&x, y, how),
        (Json::Array(xs), Json::Array(ys)) => {
            let n = xs.len().max(ys.len());
            let mut xs = xs.into_iter();
            (0..n)
                .map(|i| {
                    let x = xs.next();
                    match ys.get(i) {
                        Some(y) => fold(x, y, how),
                        None => x.unwrap_or(Json::Null),
                    }
                })
                .collect()
        }
        _ => Json::from("mixed"),
    }
}

fn fold_number(x: &serde_json::Number, y: &serde_json::Number, how: Fold) -> Json {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        let r = match how {
            Fold::Sum => a.checked_add(b),
            Fold::Min => Some(a.min(b)),
            Fold::Max => Some(a.max(b)),
        };
        if let Some(r) = r {
            return Json::from(r);
        }
    }
    let (a, b) = (
        x.as_f64().unwrap_or(f64::NAN),
        y.as_f64().unwrap_or(f64::NAN),
    );
    let r = match how {
        Fold::Sum => a + b,
        Fold::Min => a.min(b),
        Fold::Max => a.max(b),
    };
    serde_json::Number::from_f64(r).map_or(Json::from("mixed"), Json::Number)
}

/// Whether `got` satisfies the expectation `want` (see [`SelfCheck`]).
pub fn matches(want: &Json, got: &Json) -> bool {
    match (want, got) {
        (Json::Null, _) => true,
        (Json::Number(w), Json::Number(g)) => match (w.as_i64(), g.as_i64()) {
            (Some(a), Some(b)) => a == b,
            _ => {
                let (a, b) = (
                    w.as_f64().unwrap_or(f64::NAN),
                    g.as_f64().unwrap_or(f64::NAN),
                );
                (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
            }
        },
        (Json::Object(w), _) if is_bound(w) => {
            let Some(g) = got.as_f64() else {
                return false;
            };
            let le = w
                .get("at_most")
                .and_then(Json::as_f64)
                .is_none_or(|m| g <= m);
            let ge = w
                .get("at_least")
                .and_then(Json::as_f64)
                .is_none_or(|m| g >= m);
            le && ge
        }
        (Json::Array(w), Json::Array(g)) => {
            w.len() == g.len() && w.iter().zip(g).all(|(w, g)| matches(w, g))
        }
        (Json::Object(w), Json::Object(g)) => {
            w.len() == g.len()
                && w.iter()
                    .all(|(k, wv)| g.get(k).is_some_and(|gv| matches(wv, gv)))
        }
        (w, g) => w == g,
    }
}

fn is_bound(m: &JsonMap<String, Json>) -> bool {
    !m.is_empty() && m.keys().all(|k| k == "at_most" || k == "at_least")
}

impl Consumer for SelfCheck {
    fn open(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        if ctx.replica_id != 0 {
            return Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "SelfCheck '{}' runs as replica {}: a self-check counts in memory and must run as one replica.",
                    ctx.node_name, ctx.replica_id
                ),
            )
            .with_remedy("Remove 'replicas' from the SelfCheck node (or set it to 1)."));
        }
        Ok(())
    }

    fn consume(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        self.observe(ctx, inputs);
        Ok(())
    }

    /// Writes the artifact (atomically: a temporary file renamed into place), then fails when
    /// the check failed, so the worker's log says so too.
    fn close(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        self.check_video();
        let report = self.report(ctx);
        let what = format!("writing the self-check artifact {}", self.path.display());
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_error(&what, &e))?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .map_err(|e| io_error(&what, &e))?;
        if report["ok"] == Json::Bool(true) {
            tracing::info!("self-check ok: {}", self.path.display());
            Ok(())
        } else {
            Err(VfError::new(
                ErrorCode::Unknown,
                format!(
                    "self-check failed ({}): {}",
                    self.path.display(),
                    report["details"]
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Input {
        Input::Present(Payload::Value(Value::Int(i)))
    }

    fn params(j: Json) -> JsonMap<String, Json> {
        match j {
            Json::Object(m) => m,
            _ => JsonMap::new(),
        }
    }

    #[test]
    fn map_ops_follow_python_arithmetic() {
        let mut ctx = NodeContext::default();
        let cases = [
            (MapOp::Mul, Some(2.0), 21, Value::Int(42)),
            (MapOp::Add, Some(-5.0), 3, Value::Int(-2)),
            (MapOp::Square, None, -7, Value::Int(49)),
            (MapOp::Mod, Some(3.0), -1, Value::Int(2)),
            (MapOp::Add, Some(0.5), 1, Value::Double(1.5)),
            (MapOp::Identity, None, 9, Value::Int(9)),
        ];
        for (op, operand, x, want) in cases {
            let mut m = Map::new(op, operand, None);
            assert_eq!(
                m.process(&mut ctx, &[int(x)]),
                Ok(Payload::Value(want)),
                "{op:?}"
            );
        }
        let mut m = Map::new(MapOp::Square, None, None);
        assert_eq!(
            m.process(&mut ctx, &[int(i64::MAX)]).map_err(|e| e.code),
            Err(ErrorCode::Poison)
        );
        let s = Input::Present(Payload::Value(Value::from("x")));
        assert_eq!(
            m.process(&mut ctx, &[s]).map_err(|e| e.code),
            Err(ErrorCode::PoisonSchema)
        );
    }

    #[test]
    fn loop_8_map_stamps_the_input_residue_as_partition_key() {
        let mut ctx = NodeContext::default();
        let mut m = Map::new(MapOp::Square, None, Some(4));
        assert_eq!(
            m.process(&mut ctx, &[int(-3)]),
            Ok(Payload::Value(Value::Int(9)))
        );
        assert_eq!(ctx.take_output_partition_key(), Some(Value::Int(1)));
    }

    #[test]
    fn map_params_are_checked() {
        for bad in [
            json!({"op": "div", "operand": 2}),
            json!({"op": "add"}),
            json!({"op": "mod", "operand": 0}),
            json!({"key_mod": 0}),
        ] {
            let m = params(bad.clone());
            let e = Map::from_params(&mut Params::new("M", &m)).err();
            assert_eq!(e.map(|e| e.code), Some(ErrorCode::Config), "{bad}");
        }
    }

    #[test]
    fn folds_are_positional_and_skip_nulls() {
        let obs = [
            json!([[0, 0], 0]),
            json!([[2, 1], null]),
            json!([[4, 4], 5]),
        ];
        let mut sum = None;
        let mut max = None;
        for o in &obs {
            sum = Some(fold(sum, o, Fold::Sum));
            max = Some(fold(max, o, Fold::Max));
        }
        assert_eq!(sum, Some(json!([[6, 5], 5])));
        assert_eq!(max, Some(json!([[4, 4], 5])));
        assert_eq!(fold(Some(json!(1)), &json!(0.5), Fold::Sum), json!(1.5));
        assert_eq!(fold(Some(json!(1)), &json!([1]), Fold::Sum), json!("mixed"));
    }

    #[test]
    fn expectations_match_with_wildcards_and_bounds() {
        assert!(matches(
            &json!([[9900, 328350], null]),
            &json!([[9900, 328350], 17])
        ));
        assert!(!matches(&json!([1, 2]), &json!([1, 3])));
        assert!(matches(&json!(2), &json!(2.0)));
        assert!(matches(&json!({"at_most": 30}), &json!(25.0)));
        assert!(!matches(&json!({"at_most": 30}), &json!(31)));
        assert!(!matches(&json!({"at_least": 1}), &Json::Null));
        assert!(matches(
            &json!([[1080, 1920, 3]]),
            &json!([[1080, 1920, 3]])
        ));
    }

    #[test]
    fn selfcheck_counts_frames_keys_and_reports_mismatches() {
        use super::super::producers::synthetic_frame;
        let expect = params(json!({"count": 3, "frames_ok": 2, "frames_bad": 1, "keys": 1}));
        let mut c = SelfCheck::new("unused.json", expect);
        let mut ctx = NodeContext::new("f", "r", "check", 0);
        let mut bad = synthetic_frame(1, 4, 3, 3);
        let mut data = bad.data.to_vec();
        data[20] ^= 1;
        bad.data = data.into();
        for t in [
            synthetic_frame(0, 4, 3, 3),
            synthetic_frame(1, 4, 3, 3),
            bad,
        ] {
            let mut meta = BTreeMap::new();
            meta.insert(PARTITION_KEY_METADATA.to_owned(), Value::Int(3));
            let info = EnvelopeInfo {
                metadata: meta,
                replica_id: 1,
                ..EnvelopeInfo::default()
            };
            ctx.begin_group(None, vec![("p".into(), Some(InputInfo::Single(info)))]);
            assert_eq!(
                c.consume(&mut ctx, &[Input::Present(Payload::Tensor(t))]),
                Ok(())
            );
        }
        let r = c.report(&ctx);
        assert_eq!(r["ok"], json!(true), "{r:#}");
        assert_eq!(r["actual"]["frame_indices"], json!(2));
        assert_eq!(r["actual"]["keys_split"], json!(0));
        c.expect.insert("count".into(), json!(4));
        let r = c.report(&ctx);
        assert_eq!(r["ok"], json!(false));
        assert_eq!(r["details"], json!(["count: expected 4, got 3"]));
    }

    /// One time-join group of `left`/`right` ticks (`None`: missing) and collected `imu`
    /// sample seqs, fed to `c` the way the receive loop does (JOIN-17/18).
    fn join_group(c: &mut SelfCheck, left: Option<u64>, right: Option<u64>, imu: &[u64]) {
        let mut ctx = NodeContext::new("f", "r", "check", 0);
        let sync = |parent: &str, tick: Option<u64>| {
            let info = tick.map(|t| {
                InputInfo::Single(EnvelopeInfo {
                    event_ts: Some(t as f64 / 10.0),
                    trace_id: format!("{parent}:{t}"),
                    seq: t,
                    ..EnvelopeInfo::default()
                })
            });
            (parent.to_owned(), info)
        };
        let samples = imu
            .iter()
            .map(|s| EnvelopeInfo {
                event_ts: Some(*s as f64 / 40.0),
                trace_id: format!("imu:{s}"),
                seq: *s,
                ..EnvelopeInfo::default()
            })
            .collect();
        ctx.begin_group(
            None,
            vec![
                sync("left", left),
                sync("right", right),
                ("imu".to_owned(), Some(InputInfo::Collected(samples))),
            ],
        );
        let input = |t: Option<u64>| t.map_or(Input::Missing, |t| int(t as i64));
        let collected = Input::Collected(
            imu.iter()
                .map(|s| Payload::Value(Value::Int(*s as i64)))
                .collect(),
        );
        assert_eq!(
            c.consume(&mut ctx, &[input(left), input(right), collected]),
            Ok(())
        );
    }

    #[test]
    fn selfcheck_counts_what_a_join_received_and_how_it_paired_it() {
        let expect = params(json!({
            "received": [{"at_most": 4}, {"at_most": 3}, {"at_most": 16}],
            "duplicates": 0, "mismatched": 0, "split": 0, "count": {"at_most": 4},
        }));
        let mut c = SelfCheck::new("unused.json", expect);
        // Tick 2 of `left` and tick 4 of `right` dropped upstream (REALTIME), tick 3 has no
        // right partner: what arrived is paired right.
        join_group(&mut c, Some(1), Some(1), &[4, 5]);
        join_group(&mut c, None, Some(2), &[8]);
        join_group(&mut c, Some(3), None, &[12, 13]);
        join_group(&mut c, Some(4), None, &[]);
        let r = c.report(&NodeContext::default());
        assert_eq!(r["ok"], json!(true), "{r:#}");
        assert_eq!(r["actual"]["received"], json!([3, 2, 5]));
        // Ticks joined wrong: 5 with 6, 7 in two groups, a left delivered twice.
        join_group(&mut c, Some(5), Some(6), &[]);
        join_group(&mut c, Some(7), None, &[]);
        join_group(&mut c, None, Some(7), &[]);
        join_group(&mut c, Some(7), None, &[]);
        let r = c.report(&NodeContext::default());
        assert_eq!(r["actual"]["mismatched"], json!(1));
        assert_eq!(r["actual"]["split"], json!(1));
        assert_eq!(r["actual"]["duplicates"], json!(1));
        assert_eq!(r["ok"], json!(false));
    }

    #[test]
    fn selfcheck_params_refuse_unknown_expectations_and_a_second_replica() {
        let m = params(json!({"path": "x.json", "expect": {"cnt": 1}}));
        let e = SelfCheck::from_params(&mut Params::new("S", &m)).err();
        assert_eq!(e.map(|e| e.code), Some(ErrorCode::Config));
        let m = params(json!({"path": "x.json"}));
        assert!(SelfCheck::from_params(&mut Params::new("S", &m)).is_err());
        let mut c = SelfCheck::new("x.json", params(json!({"count": 0})));
        let mut ctx = NodeContext::new("f", "r", "check", 1);
        assert_eq!(c.open(&mut ctx).map_err(|e| e.code), Err(ErrorCode::Config));
    }

    #[test]
    fn selfcheck_close_writes_the_artifact_and_fails_on_a_mismatch() {
        let dir = std::env::temp_dir().join(format!("vf-selfcheck-{}", std::process::id()));
        let path = dir.join("a/check.json");
        let mut c = SelfCheck::new(&path, params(json!({"count": 1, "sum": 5})));
        let mut ctx = NodeContext::new("f", "r", "check", 0);
        assert_eq!(c.consume(&mut ctx, &[int(5)]), Ok(()));
        assert_eq!(c.close(&mut ctx), Ok(()));
        let text = std::fs::read_to_string(&path).expect("artifact");
        let j: Json = serde_json::from_str(&text).expect("json");
        assert_eq!(j["ok"], json!(true));
        assert_eq!(c.consume(&mut ctx, &[int(5)]), Ok(()));
        assert!(c.close(&mut ctx).is_err());
        let j: Json =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("artifact")).expect("json");
        assert_eq!(j["ok"], json!(false));
        assert_eq!(j["expected"], json!({"count": 1, "sum": 5}));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
