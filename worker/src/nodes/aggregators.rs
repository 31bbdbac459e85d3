//! The reference's running aggregators (`videoflow.processors.aggregators`): one input per
//! group, one output per group — the aggregate over everything seen so far, this input
//! included.
//!
//! Python arithmetic is reproduced: `int op int` stays an int, anything with a float is a
//! float, a bool counts as 0/1, and int/float comparisons are exact. Two deliberate limits:
//! arrays are not aggregated (numpy broadcasting is not reproduced; a tensor input is
//! `VF_POISON_SCHEMA`, as a string or null is in 1.0.4), and an int result beyond 64 bits
//! (which 1.0.4 computes but cannot publish) is `VF_POISON` for that input, leaving the
//! aggregate as it was.

use std::cmp::Ordering;

use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::value::Value;

use super::convert::{arity_error, expect_inputs, schema_error};
use super::{Input, NodeContext, Processor};

/// A Python number: `int` (64-bit here) or `float`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn value(self) -> Value {
        match self {
            Num::Int(i) => Value::Int(i),
            Num::Float(x) => Value::Double(x),
        }
    }
}

/// The one input of a single-input node (1.0.4's `process(self, inp)`).
fn single<'a>(node: &str, inputs: &'a [Input]) -> Result<&'a Input, VfError> {
    match inputs {
        [one] => Ok(one),
        other => Err(arity_error(node, 1, other.len())),
    }
}

/// The input as a Python number (bools are ints), with the value it arrived as.
fn number(node: &str, input: &Input) -> Result<(Value, Num), VfError> {
    let num = match input {
        Input::Present(Payload::Value(v)) => match v {
            Value::Int(i) => Some(Num::Int(*i)),
            Value::Double(x) => Some(Num::Float(*x)),
            Value::Bool(b) => Some(Num::Int(i64::from(*b))),
            _ => None,
        },
        _ => None,
    };
    match (num, input) {
        (Some(n), Input::Present(Payload::Value(v))) => Ok((v.clone(), n)),
        _ => Err(schema_error(
            node,
            format!("expected a number, got {}", describe(input)),
        )),
    }
}

fn describe(input: &Input) -> String {
    match input {
        Input::Present(Payload::Value(v)) => format!("a {} value", v.kind_name()),
        Input::Present(Payload::None) | Input::Missing => "None (a missing input)".to_owned(),
        Input::Present(p) => format!("a {} payload", p.payload_type().unwrap_or("empty")),
        Input::Collected(_) => "a list (a collect parent)".to_owned(),
    }
}

/// Python's `a op b` for `+` and `*`: exact for two ints (`None` on 64-bit overflow), else
/// float arithmetic with the int rounded to the nearest float, as Python converts it.
fn arith(
    a: Num,
    b: Num,
    int_op: fn(i64, i64) -> Option<i64>,
    float_op: fn(f64, f64) -> f64,
) -> Option<Num> {
    Some(match (a, b) {
        (Num::Int(x), Num::Int(y)) => Num::Int(int_op(x, y)?),
        (Num::Int(x), Num::Float(y)) => Num::Float(float_op(x as f64, y)),
        (Num::Float(x), Num::Int(y)) => Num::Float(float_op(x, y as f64)),
        (Num::Float(x), Num::Float(y)) => Num::Float(float_op(x, y)),
    })
}

/// Python's exact comparison of two numbers; `None` when a NaN is involved (every
/// comparison with NaN is false).
fn py_cmp(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(x), Num::Float(y)) => int_float_cmp(x, y),
        (Num::Float(x), Num::Int(y)) => int_float_cmp(y, x).map(Ordering::reverse),
    }
}

/// `i` vs `f` without rounding `i` to a float (which would make 2^53 + 1 equal 2^53).
fn int_float_cmp(i: i64, f: f64) -> Option<Ordering> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return None;
    }
    if f >= TWO_63 {
        return Some(Ordering::Less);
    }
    if f < -TWO_63 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // |whole| < 2^63 and integral, so the cast is exact.
    let by_whole = i.cmp(&(whole as i64));
    Some(by_whole.then_with(|| {
        let frac = f - whole;
        0.0_f64.partial_cmp(&frac).unwrap_or(Ordering::Equal)
    }))
}

fn overflow(node: &str, what: &str) -> VfError {
    VfError::new(
        ErrorCode::Poison,
        format!("{node}: the running {what} no longer fits a 64-bit integer, the wire's int range"),
    )
    .with_remedy("Aggregate floats instead, or reset the aggregate with a new run.")
    .with_context("node_class", node)
}

/// `SumAggregator`: the running sum, starting from the int 0.
#[derive(Debug, Clone, PartialEq)]
pub struct SumAggregator {
    sum: Num,
}

impl Default for SumAggregator {
    fn default() -> Self {
        SumAggregator { sum: Num::Int(0) }
    }
}

impl Processor for SumAggregator {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("SumAggregator", 1, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let (_, x) = number("SumAggregator", single("SumAggregator", inputs)?)?;
        self.sum = arith(self.sum, x, i64::checked_add, |a, b| a + b)
            .ok_or_else(|| overflow("SumAggregator", "sum"))?;
        Ok(Payload::Value(self.sum.value()))
    }
}

/// `MultiplicationAggregator`: the running product, starting from the int 1.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiplicationAggregator {
    product: Num,
}

impl Default for MultiplicationAggregator {
    fn default() -> Self {
        MultiplicationAggregator {
            product: Num::Int(1),
        }
    }
}

impl Processor for MultiplicationAggregator {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("MultiplicationAggregator", 1, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let node = "MultiplicationAggregator";
        let (_, x) = number(node, single(node, inputs)?)?;
        self.product = arith(self.product, x, i64::checked_mul, |a, b| a * b)
            .ok_or_else(|| overflow(node, "product"))?;
        Ok(Payload::Value(self.product.value()))
    }
}

/// `CountAggregator`: how many inputs so far (of any type, `None` included).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CountAggregator {
    count: i64,
}

impl Processor for CountAggregator {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("CountAggregator", 1, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        single("CountAggregator", inputs)?;
        self.count = self.count.saturating_add(1);
        Ok(Payload::Value(Value::Int(self.count)))
    }
}

/// The extreme seen so far, kept as the value it arrived as (an int stays an int, a bool a
/// bool), starting from the float `-inf` (max) or `inf` (min) as 1.0.4 does.
#[derive(Debug, Clone, PartialEq)]
struct Extreme {
    node: &'static str,
    keep_if: Ordering,
    value: Value,
    num: Num,
}

impl Extreme {
    fn new(node: &'static str, keep_if: Ordering, start: f64) -> Self {
        Extreme {
            node,
            keep_if,
            value: Value::Double(start),
            num: Num::Float(start),
        }
    }

    /// 1.0.4's `if inp > self._max: self._max = inp` (or `<` for min); NaN never wins.
    fn update(&mut self, inputs: &[Input]) -> Result<Payload, VfError> {
        let (v, x) = number(self.node, single(self.node, inputs)?)?;
        if py_cmp(x, self.num) == Some(self.keep_if) {
            self.value = v;
            self.num = x;
        }
        Ok(Payload::Value(self.value.clone()))
    }
}

/// `MaxAggregator`: the largest value seen so far.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxAggregator(Extreme);

impl Default for MaxAggregator {
    fn default() -> Self {
        MaxAggregator(Extreme::new(
            "MaxAggregator",
            Ordering::Greater,
            f64::NEG_INFINITY,
        ))
    }
}

impl Processor for MaxAggregator {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs(self.0.node, 1, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        self.0.update(inputs)
    }
}

/// `MinAggregator`: the smallest value seen so far.
#[derive(Debug, Clone, PartialEq)]
pub struct MinAggregator(Extreme);

impl Default for MinAggregator {
    fn default() -> Self {
        MinAggregator(Extreme::new("MinAggregator", Ordering::Less, f64::INFINITY))
    }
}

impl Processor for MinAggregator {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs(self.0.node, 1, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        self.0.update(inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_int_float_comparison() {
        let big = 1_i64 << 53;
        assert_eq!(
            py_cmp(Num::Int(big + 1), Num::Float(big as f64)),
            Some(Ordering::Greater)
        );
        assert_eq!(py_cmp(Num::Int(2), Num::Float(2.5)), Some(Ordering::Less));
        assert_eq!(
            py_cmp(Num::Int(-2), Num::Float(-2.5)),
            Some(Ordering::Greater)
        );
        assert_eq!(py_cmp(Num::Int(3), Num::Float(3.0)), Some(Ordering::Equal));
        assert_eq!(py_cmp(Num::Float(f64::NAN), Num::Int(1)), None);
        assert_eq!(
            py_cmp(Num::Int(i64::MAX), Num::Float(f64::INFINITY)),
            Some(Ordering::Less)
        );
        assert_eq!(
            py_cmp(Num::Float(f64::NEG_INFINITY), Num::Int(i64::MIN)),
            Some(Ordering::Less)
        );
    }
}
