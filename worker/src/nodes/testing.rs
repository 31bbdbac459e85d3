//! Test-support nodes (ours, `videoflow.rs.*`): deterministic sources and failures that let
//! end-to-end tests drive the time join, the failure ladder, the dead-letter queue and the
//! ABORT relay without custom code.
//!
//! - [`TickProducer`] — `videoflow.rs.producers.TickProducer`: ticks on a fixed event-time
//!   grid (LOOP-9), optionally with gaps, so two producers line up for a time join.
//! - [`FailOn`] — `videoflow.rs.processors.FailOn`: a passthrough that fails listed values
//!   with a typed error (DELIV-6/8).
//! - [`FailingProducer`] — `videoflow.rs.producers.FailingProducer`: emits a few values, then
//!   fails `next()` with an unclassified error so `VF_ON_ERROR` decides (ERR-2, ABORT-1a).
//! - [`Hang`] — `videoflow.rs.processors.Hang`: a `process()` that never returns (SUP-1/2),
//!   optionally after a slow `open()` (HEALTH-1).
//! - [`Constant`] — `videoflow.rs.processors.Constant`: the same literal for every input, so
//!   a flow can feed a node's second parent (a resize size, a list of boxes) from the lineage
//!   of its first and the two join by input key.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::value::Value;

use super::convert::{arity_error, input_to_value, unclassified, value_to_payload};
use super::params::Params;
use super::{Input, NodeContext, Processor, Producer, normalize_output};

/// The default `start_ts` of [`TickProducer`]: 2023-11-14T22:13:20Z, a fixed epoch so runs
/// (and the time-join ids derived from it, JOIN-20/23) are reproducible.
pub const DEFAULT_TICK_START_TS: f64 = 1_700_000_000.0;

/// The default `period_ms` of [`TickProducer`].
pub const DEFAULT_TICK_PERIOD_MS: f64 = 100.0;

/// `videoflow.rs.producers.TickProducer` (ours): ticks `1..=count` (forever when `count` is
/// absent). Tick `i` is published with event time [`TickProducer::tick_ts`]`(start_ts,
/// period_ms, i)` set through `ctx.set_output_event_timestamp` (LOOP-9), and carries `value`
/// (any JSON literal) or, by default, the int `i`.
///
/// Parameters: `count` (int ≥ 0, optional), `period_ms` (> 0, default 100), `start_ts` (epoch
/// seconds, default [`DEFAULT_TICK_START_TS`]), `skip_every` (int ≥ 0, default 0 = none: skip
/// every k-th tick, i.e. the ticks `k, 2k, 3k, …`, leaving a gap on the grid), `value`
/// (optional), `pace` (bool, default false: with it, tick `i` is not released before the wall
/// clock reaches its event time, like a live sensor; ticks already in the past — all of them
/// with the default `start_ts` — go out at once), `pace_relative` (bool, default false: with
/// `pace`, tick `i` is released `tick_ts(i) − tick_ts(1)` after the first `next()` instead,
/// so a Flow *file* gets a live rate while its event times stay on the fixed, reproducible
/// grid; two such producers release a tick at nearly the same instant, apart by the gap
/// between their starts).
///
/// Two producers with the same `start_ts`/`period_ms` give identical event times per tick
/// index, whatever their wall-clock start, so a time join pairs them deterministically. Paced
/// with a `start_ts` a few seconds ahead, they also release each tick at the same wall-clock
/// instant, whichever process started first: a live, aligned pair.
#[derive(Debug, Clone, PartialEq)]
pub struct TickProducer {
    count: Option<u64>,
    period_ms: f64,
    start_ts: f64,
    skip_every: u64,
    value: Option<Value>,
    pace: bool,
    pace_relative: bool,
    /// With `pace_relative`: when the first tick was asked for.
    paced_from: Option<std::time::Instant>,
    /// The last tick index handed out or skipped.
    tick: u64,
}

impl TickProducer {
    /// A producer of ticks `1..=count` (unbounded when `None`) on the grid `start_ts +
    /// i × period_ms / 1000`, skipping every `skip_every`-th tick (0 = none), unpaced, each
    /// carrying its index.
    pub fn new(count: Option<u64>, period_ms: f64, start_ts: f64, skip_every: u64) -> Self {
        TickProducer {
            count,
            period_ms,
            start_ts,
            skip_every,
            value: None,
            pace: false,
            pace_relative: false,
            paced_from: None,
            tick: 0,
        }
    }

    /// The event time of tick `i`: `start_ts + i × period_ms / 1000`, computed exactly this
    /// way so a test can predict the time-join seq (JOIN-20) of every tick.
    pub fn tick_ts(start_ts: f64, period_ms: f64, i: u64) -> f64 {
        start_ts + i as f64 * (period_ms / 1000.0)
    }

    /// Whether tick `i` is skipped by `skip_every` (0 = none).
    pub fn is_skipped(skip_every: u64, i: u64) -> bool {
        skip_every > 0 && i.is_multiple_of(skip_every)
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let count = match p.opt_int("count")? {
            None => None,
            Some(c) => Some(
                u64::try_from(c)
                    .map_err(|_| p.bad("count", "a non-negative integer", &Json::from(c)))?,
            ),
        };
        let period_ms = p.float("period_ms", DEFAULT_TICK_PERIOD_MS)?;
        if period_ms <= 0.0 {
            return Err(p.bad("period_ms", "a positive number", &Json::from(period_ms)));
        }
        let start_ts = p.float("start_ts", DEFAULT_TICK_START_TS)?;
        let skip = p.int("skip_every", 0)?;
        let skip_every = u64::try_from(skip)
            .map_err(|_| p.bad("skip_every", "a non-negative integer", &Json::from(skip)))?;
        let value = p.opt_json("value").map(json_to_value);
        let pace = p.bool("pace", false)?;
        let pace_relative = p.bool("pace_relative", false)?;
        Ok(TickProducer {
            value,
            pace,
            pace_relative,
            ..TickProducer::new(count, period_ms, start_ts, skip_every)
        })
    }

    /// When pacing, sleeps until the wall clock reaches tick `i`'s event time.
    fn wait_for(&mut self, i: u64) {
        if !self.pace {
            return;
        }
        if self.pace_relative {
            let origin = *self.paced_from.get_or_insert_with(std::time::Instant::now);
            let offset =
                Self::tick_ts(0.0, self.period_ms, i) - Self::tick_ts(0.0, self.period_ms, 1);
            let due = origin + Duration::try_from_secs_f64(offset).unwrap_or_default();
            std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            return;
        }
        let due = Self::tick_ts(self.start_ts, self.period_ms, i);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if let Ok(wait) = Duration::try_from_secs_f64(due - now) {
            std::thread::sleep(wait);
        }
    }
}

impl Producer for TickProducer {
    fn next(&mut self, ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        loop {
            let i = self.tick + 1;
            if self.count.is_some_and(|c| i > c) {
                return Ok(None);
            }
            self.tick = i;
            if Self::is_skipped(self.skip_every, i) {
                continue;
            }
            self.wait_for(i);
            ctx.set_output_event_timestamp(Self::tick_ts(self.start_ts, self.period_ms, i));
            let value = match &self.value {
                Some(v) => v.clone(),
                None => Value::Int(i64::try_from(i).unwrap_or(i64::MAX)),
            };
            return Ok(Some(value_to_payload(value)));
        }
    }
}

/// `videoflow.rs.processors.Constant` (ours): publishes `value` (any JSON literal; lists
/// become tuples on the wire) once per input, whatever the input.
#[derive(Debug, Clone, PartialEq)]
pub struct Constant {
    value: Value,
}

impl Constant {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let Some(value) = p.opt_json("value").map(json_to_value) else {
            return Err(p.missing("value"));
        };
        Ok(Constant { value })
    }
}

impl Processor for Constant {
    fn process(&mut self, _ctx: &mut NodeContext, _inputs: &[Input]) -> Result<Payload, VfError> {
        Ok(value_to_payload(self.value.clone()))
    }

    fn may_block(&self) -> bool {
        false
    }
}

/// A JSON literal as a wire value: integers stay ints, other numbers are doubles, objects
/// are string-keyed maps.
fn json_to_value(j: &Json) -> Value {
    match j {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => n
            .as_i64()
            .map_or_else(|| Value::Double(n.as_f64().unwrap_or(f64::NAN)), Value::Int),
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::List(items.iter().map(json_to_value).collect()),
        Json::Object(m) => Value::Map(
            m.iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect(),
        ),
    }
}

/// `videoflow.rs.processors.FailOn` (ours): passes its input through (one input unchanged,
/// several as a list, like `ServiceTimeProcessor`), but fails the group when an input is an
/// int listed in `values`, with an error of class `code`: `poison` (`VF_POISON`), `transient`
/// (`VF_TRANSIENT`), `worker_fatal` (`VF_WORKER_FATAL`) or any explicit `VF_…` code of the
/// taxonomy (e.g. `VF_POISON_SCHEMA`; `VF_UNKNOWN` leaves the disposition to
/// `VF_ON_ERROR`). Default `poison`.
///
/// The error message is `FailOn: input value <v> is listed to fail`, with context `value`,
/// so a dead letter (DELIV-8) or a termination record shows which input it was.
#[derive(Debug, Clone, PartialEq)]
pub struct FailOn {
    values: Vec<i64>,
    code: ErrorCode,
}

impl FailOn {
    /// A passthrough failing the ints in `values` with class `code`.
    pub fn new(values: Vec<i64>, code: ErrorCode) -> Self {
        FailOn { values, code }
    }

    /// `poison` / `transient` / `worker_fatal`, or an explicit `VF_…` code.
    pub fn parse_code(code: &str) -> Option<ErrorCode> {
        match code {
            "poison" => Some(ErrorCode::Poison),
            "transient" => Some(ErrorCode::Transient),
            "worker_fatal" => Some(ErrorCode::WorkerFatal),
            other => ErrorCode::from_code(other),
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let values = p.int_list("values")?;
        let code = p.string("code", "poison")?;
        let code = FailOn::parse_code(&code).ok_or_else(|| {
            p.bad(
                "code",
                "'poison', 'transient', 'worker_fatal' or a VF_… error code",
                &Json::from(code.as_str()),
            )
        })?;
        Ok(FailOn::new(values, code))
    }

    /// The error for input value `v`.
    pub fn error_for(&self, v: i64) -> VfError {
        VfError::new(
            self.code,
            format!("FailOn: input value {v} is listed to fail"),
        )
        .with_remedy("FailOn is a test node: remove the value from its 'values' parameter.")
        .with_context("value", v)
    }
}

impl Processor for FailOn {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        if parents >= 1 {
            Ok(())
        } else {
            Err(arity_error("FailOn", 1, parents))
        }
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        for input in inputs {
            if let Input::Present(Payload::Value(Value::Int(v))) = input
                && self.values.contains(v)
            {
                return Err(self.error_for(*v));
            }
        }
        match inputs {
            [] => Err(arity_error("FailOn", 1, 0)),
            [Input::Present(p)] => Ok(normalize_output(p.clone())),
            many => many
                .iter()
                .map(|i| input_to_value("FailOn", i))
                .collect::<Result<Vec<_>, _>>()
                .map(|items| match items.as_slice() {
                    [one] => value_to_payload(one.clone()),
                    _ => Payload::Value(Value::List(items)),
                }),
        }
    }
}

/// `videoflow.rs.processors.Hang` (ours): a passthrough whose `process()` never returns for
/// the ints listed in `hang_on` (absent or empty: for every input), the way a node wedged on
/// a lock or an unbounded read does, so the progress watchdog has something to catch
/// (SUP-1/2). `open_seconds` (≥ 0, default 0) makes `open()` that slow, so readiness can be
/// seen to wait for it (HEALTH-1).
#[derive(Debug, Clone, PartialEq)]
pub struct Hang {
    hang_on: Vec<i64>,
    open: Duration,
}

impl Hang {
    /// Hangs on `hang_on` (empty: on everything) after an `open()` that takes `open`.
    pub fn new(hang_on: Vec<i64>, open: Duration) -> Self {
        Hang { hang_on, open }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let hang_on = p.int_list("hang_on")?;
        let open_seconds = p.float("open_seconds", 0.0)?;
        let open = p.seconds_value("open_seconds", open_seconds)?;
        Ok(Hang::new(hang_on, open))
    }

    /// Whether `inputs` make `process()` hang.
    pub fn hangs_on(&self, inputs: &[Input]) -> bool {
        self.hang_on.is_empty()
            || inputs.iter().any(|i| {
                matches!(i, Input::Present(Payload::Value(Value::Int(v))) if self.hang_on.contains(v))
            })
    }
}

impl Processor for Hang {
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        std::thread::sleep(self.open);
        Ok(())
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        if self.hangs_on(inputs) {
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        match inputs {
            [Input::Present(p)] => Ok(normalize_output(p.clone())),
            many => many
                .iter()
                .map(|i| input_to_value("Hang", i))
                .collect::<Result<Vec<_>, _>>()
                .map(|items| Payload::Value(Value::List(items))),
        }
    }
}

/// The default `message` of [`FailingProducer`].
pub const DEFAULT_FAILING_MESSAGE: &str = "FailingProducer failed on purpose";

/// `videoflow.rs.producers.FailingProducer` (ours): emits the ints `0..emit` (default 0),
/// then fails `next()` with an unclassified error — code `VF_UNKNOWN`, no disposition,
/// message `ValueError: <message>` — as a plain Python exception would, so the node's
/// `VF_ON_ERROR` decides what the death is (ERR-2) and whether an ABORT goes out (ABORT-1a).
#[derive(Debug, Clone, PartialEq)]
pub struct FailingProducer {
    emit: u64,
    message: String,
    next_value: u64,
}

impl FailingProducer {
    /// A producer of `0..emit` that then fails with `ValueError: <message>`.
    pub fn new(emit: u64, message: impl Into<String>) -> Self {
        FailingProducer {
            emit,
            message: message.into(),
            next_value: 0,
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let emit = p.int("emit", 0)?;
        let emit = u64::try_from(emit)
            .map_err(|_| p.bad("emit", "a non-negative integer", &Json::from(emit)))?;
        let message = p.string("message", DEFAULT_FAILING_MESSAGE)?;
        Ok(FailingProducer::new(emit, message))
    }
}

impl Producer for FailingProducer {
    fn next(&mut self, _ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        if self.next_value >= self.emit {
            return Err(unclassified("ValueError", &self.message));
        }
        let v = self.next_value;
        self.next_value += 1;
        Ok(Some(Payload::Value(Value::Int(
            i64::try_from(v).unwrap_or(i64::MAX),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use videoflow_core::errors::Disposition;

    use super::*;

    fn int(i: i64) -> Input {
        Input::Present(Payload::Value(Value::Int(i)))
    }

    fn params(j: Json) -> serde_json::Map<String, Json> {
        match j {
            Json::Object(m) => m,
            _ => serde_json::Map::new(),
        }
    }

    /// Every (payload, event time) a producer yields until end of input or an error.
    fn run(p: &mut dyn Producer) -> (Vec<(Payload, Option<f64>)>, Option<VfError>) {
        let mut ctx = NodeContext::default();
        let mut out = Vec::new();
        loop {
            match p.next(&mut ctx) {
                Ok(Some(item)) => out.push((item, ctx.take_output_event_timestamp())),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[test]
    fn loop_9_ticks_carry_their_grid_time_and_skip_every_kth() {
        let mut p = TickProducer::new(Some(7), 250.0, 100.0, 3);
        let (items, err) = run(&mut p);
        assert!(err.is_none());
        let got: Vec<(Payload, Option<f64>)> = items;
        let want: Vec<(Payload, Option<f64>)> = [1u64, 2, 4, 5, 7]
            .iter()
            .map(|&i| {
                (
                    Payload::Value(Value::Int(i as i64)),
                    Some(100.0 + i as f64 * 0.25),
                )
            })
            .collect();
        assert_eq!(got, want);
        assert!(TickProducer::is_skipped(3, 6));
        assert!(!TickProducer::is_skipped(0, 6));
    }

    #[test]
    fn tick_params_value_default_start_and_refusals() {
        let m = params(serde_json::json!({"count": 2, "value": {"a": [1, 2.5, "x"]}}));
        let mut p = TickProducer::from_params(&mut Params::new("T", &m)).expect("builds");
        let (items, _) = run(&mut p);
        let want = Value::Map(
            [(
                "a".to_owned(),
                Value::List(vec![
                    Value::Int(1),
                    Value::Double(2.5),
                    Value::String("x".into()),
                ]),
            )]
            .into_iter()
            .collect(),
        );
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].0, value_to_payload(want));
        assert_eq!(
            items[1].1,
            Some(TickProducer::tick_ts(
                DEFAULT_TICK_START_TS,
                DEFAULT_TICK_PERIOD_MS,
                2
            ))
        );
        for bad in [
            serde_json::json!({"period_ms": 0}),
            serde_json::json!({"skip_every": -1}),
            serde_json::json!({"count": -2}),
        ] {
            let m = params(bad);
            let e = TickProducer::from_params(&mut Params::new("T", &m)).err();
            assert_eq!(e.map(|e| e.code), Some(ErrorCode::Config));
        }
    }

    #[test]
    fn paced_ticks_wait_for_the_wall_clock_to_reach_their_time() {
        let wall = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        let mut p = TickProducer::new(Some(3), 20.0, wall() + 0.02, 2);
        p.pace = true;
        let (items, _) = run(&mut p);
        assert_eq!(items.len(), 2); // ticks 1 and 3
        let last = items[1].1.expect("event time");
        assert!(wall() >= last, "tick 3 released at its time, not before");
        // A grid in the past is not paced.
        let mut p = TickProducer::new(Some(1000), 1000.0, 0.0, 0);
        p.pace = true;
        let started = std::time::Instant::now();
        assert_eq!(run(&mut p).0.len(), 1000);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn deliv_6_fail_on_fails_listed_values_with_the_requested_class() {
        let mut f = FailOn::new(vec![3, 5], ErrorCode::Poison);
        let mut ctx = NodeContext::default();
        assert_eq!(
            f.process(&mut ctx, &[int(4)]),
            Ok(Payload::Value(Value::Int(4)))
        );
        let e = f.process(&mut ctx, &[int(5)]).expect_err("fails");
        assert_eq!(e.code, ErrorCode::Poison);
        assert_eq!(e.disposition, Some(Disposition::Poison));
        assert_eq!(e.message, "FailOn: input value 5 is listed to fail");
        assert_eq!(e.context.get("value"), Some(&Json::from(5)));
        // Several inputs: any listed one fails; else the list passes through.
        assert!(f.process(&mut ctx, &[int(1), int(3)]).is_err());
        assert_eq!(
            f.process(&mut ctx, &[int(1), Input::Missing]),
            Ok(Payload::Value(Value::List(vec![
                Value::Int(1),
                Value::Null
            ])))
        );
    }

    #[test]
    fn fail_on_codes_parse_by_disposition_word_or_vf_code() {
        assert_eq!(FailOn::parse_code("poison"), Some(ErrorCode::Poison));
        assert_eq!(FailOn::parse_code("transient"), Some(ErrorCode::Transient));
        assert_eq!(
            FailOn::parse_code("worker_fatal"),
            Some(ErrorCode::WorkerFatal)
        );
        assert_eq!(
            FailOn::parse_code("VF_POISON_SCHEMA"),
            Some(ErrorCode::PoisonSchema)
        );
        assert_eq!(FailOn::parse_code("sometimes"), None);
        let m = params(serde_json::json!({"values": [1], "code": "sometimes"}));
        let e = FailOn::from_params(&mut Params::new("F", &m)).err();
        assert_eq!(e.map(|e| e.code), Some(ErrorCode::Config));
        let m = params(serde_json::json!({"values": [1, "2"]}));
        let e = FailOn::from_params(&mut Params::new("F", &m)).err();
        assert_eq!(e.map(|e| e.code), Some(ErrorCode::Config));
        let m = params(serde_json::json!({"values": [2], "code": "transient"}));
        let f = FailOn::from_params(&mut Params::new("F", &m)).expect("builds");
        assert_eq!(f.error_for(2).disposition, Some(Disposition::Transient));
    }

    #[test]
    fn sup_2_hang_params_and_which_inputs_hang() {
        let m = params(serde_json::json!({"hang_on": [2], "open_seconds": 0.01}));
        let mut h = Hang::from_params(&mut Params::new("H", &m)).expect("builds");
        assert!(h.hangs_on(&[int(2)]));
        assert!(!h.hangs_on(&[int(1)]));
        let mut ctx = NodeContext::default();
        assert!(h.open(&mut ctx).is_ok());
        assert_eq!(
            h.process(&mut ctx, &[int(1)]),
            Ok(Payload::Value(Value::Int(1)))
        );
        assert!(Hang::new(Vec::new(), Duration::ZERO).hangs_on(&[int(7)]));
        let m = params(serde_json::json!({"open_seconds": -1}));
        let e = Hang::from_params(&mut Params::new("H", &m)).err();
        assert_eq!(e.map(|e| e.code), Some(ErrorCode::Config));
    }

    #[test]
    fn abort_1a_failing_producer_emits_then_fails_unclassified() {
        let mut p = FailingProducer::new(3, "boom");
        let (items, err) = run(&mut p);
        let values: Vec<Payload> = items.into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            values,
            (0..3)
                .map(|i| Payload::Value(Value::Int(i)))
                .collect::<Vec<_>>()
        );
        let e = err.expect("fails after emitting");
        assert_eq!(e.code, ErrorCode::Unknown);
        assert_eq!(e.disposition, None);
        assert_eq!(e.message, "ValueError: boom");
    }
}
