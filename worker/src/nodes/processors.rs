//! Built-in stateless processors: the reference's `IdentityProcessor` and `JoinerProcessor`,
//! and our service-time stage for load tests.

use std::time::{Duration, Instant};

use videoflow_core::envelope::Payload;
use videoflow_core::errors::VfError;
use videoflow_core::value::Value;

use super::convert::{arity_error, expect_inputs, input_to_value, value_to_payload};
use super::params::Params;
use super::{Input, NodeContext, Processor, normalize_output};

/// The wait 1.0.4 derives from an `fps` parameter: `1 / fps` when positive, else none.
fn fps_wait(p: &mut Params<'_>) -> Result<Duration, VfError> {
    Ok(p.fps_period("fps")?.unwrap_or(Duration::ZERO))
}

fn pause(wait: Duration) {
    if !wait.is_zero() {
        std::thread::sleep(wait);
    }
}

/// What a node returning its input unchanged publishes: the payload itself (messages
/// included), `None` ⇒ null, a collect list ⇒ a list `Value`.
fn passthrough(node: &str, input: &Input) -> Result<Payload, VfError> {
    match input {
        Input::Present(p) => Ok(normalize_output(p.clone())),
        other => input_to_value(node, other).map(value_to_payload),
    }
}

/// `videoflow.processors.basic.IdentityProcessor`: returns its one input unchanged, after
/// sleeping `1 / fps` seconds when `fps > 0` (as 1.0.4).
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityProcessor {
    wait: Duration,
}

impl IdentityProcessor {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        Ok(IdentityProcessor { wait: fps_wait(p)? })
    }
}

impl Processor for IdentityProcessor {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("IdentityProcessor", 1, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let [input] = inputs else {
            return Err(arity_error("IdentityProcessor", 1, inputs.len()));
        };
        pause(self.wait);
        passthrough("IdentityProcessor", input)
    }

    /// Blocks only when it paces (`fps`).
    fn may_block(&self) -> bool {
        !self.wait.is_zero()
    }

    fn forwards_input(&self) -> bool {
        true
    }
}

/// `videoflow.processors.basic.JoinerProcessor`: the tuple of its inputs, in parent order,
/// published as a list `Value` (arrays nest as tensor values, a missing parent as null, a
/// collect parent as a list), after sleeping `1 / fps` when `fps > 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinerProcessor {
    wait: Duration,
}

impl JoinerProcessor {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        Ok(JoinerProcessor { wait: fps_wait(p)? })
    }
}

impl Processor for JoinerProcessor {
    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        pause(self.wait);
        let items = inputs
            .iter()
            .map(|i| input_to_value("JoinerProcessor", i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Payload::Value(Value::List(items)))
    }
}

/// How the service-time stage spends its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceMode {
    /// Sleep: models I/O-bound work (the thread is free, the CPU idle).
    Sleep,
    /// Spin: models CPU-bound work (one core busy for the whole duration).
    Busy,
}

/// `videoflow.rs.processors.ServiceTimeProcessor` (ours): spends `ms` milliseconds per group
/// (`mode` `sleep` or `busy`), then passes its input through — one input unchanged, several
/// as the joiner's list. Gives load and scaling tests a stage with a known cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceTimeProcessor {
    service: Duration,
    mode: ServiceMode,
}

impl ServiceTimeProcessor {
    /// A stage spending `service` per group in `mode`.
    pub fn new(service: Duration, mode: ServiceMode) -> Self {
        ServiceTimeProcessor { service, mode }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let ms = p.float("ms", 0.0)?;
        let service = Duration::try_from_secs_f64(ms / 1000.0)
            .map_err(|_| p.bad("ms", "a non-negative number", &serde_json::json!(ms)))?;
        let mode = match p.string("mode", "sleep")?.as_str() {
            "sleep" => ServiceMode::Sleep,
            "busy" => ServiceMode::Busy,
            other => {
                return Err(p.bad("mode", "'sleep' or 'busy'", &serde_json::json!(other)));
            }
        };
        Ok(ServiceTimeProcessor::new(service, mode))
    }

    fn spend(&self) {
        match self.mode {
            ServiceMode::Sleep => pause(self.service),
            ServiceMode::Busy => {
                let start = Instant::now();
                while start.elapsed() < self.service {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

impl Processor for ServiceTimeProcessor {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        if parents >= 1 {
            Ok(())
        } else {
            Err(arity_error("ServiceTimeProcessor", 1, parents))
        }
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        self.spend();
        match inputs {
            [] => Err(arity_error("ServiceTimeProcessor", 1, 0)),
            [one] => passthrough("ServiceTimeProcessor", one),
            many => many
                .iter()
                .map(|i| input_to_value("ServiceTimeProcessor", i))
                .collect::<Result<Vec<_>, _>>()
                .map(|items| Payload::Value(Value::List(items))),
        }
    }
}

#[cfg(test)]
mod tests {
    use videoflow_core::value::Tensor;

    use super::*;

    fn int(i: i64) -> Input {
        Input::Present(Payload::Value(Value::Int(i)))
    }

    #[test]
    fn identity_returns_its_input_and_none_as_null() {
        let mut p = IdentityProcessor {
            wait: Duration::ZERO,
        };
        let mut ctx = NodeContext::default();
        assert_eq!(
            p.process(&mut ctx, &[int(4)]),
            Ok(Payload::Value(Value::Int(4)))
        );
        assert_eq!(
            p.process(&mut ctx, &[Input::Missing]),
            Ok(Payload::Value(Value::Null))
        );
        assert!(p.process(&mut ctx, &[int(1), int(2)]).is_err());
    }

    #[test]
    fn joiner_nests_tensors_as_values() {
        let t = Tensor {
            shape: vec![1],
            dtype: "uint8".into(),
            data: vec![9].into(),
        };
        let mut p = JoinerProcessor {
            wait: Duration::ZERO,
        };
        let out = p.process(
            &mut NodeContext::default(),
            &[
                int(1),
                Input::Present(Payload::Tensor(t.clone())),
                Input::Missing,
            ],
        );
        assert_eq!(
            out,
            Ok(Payload::Value(Value::List(vec![
                Value::Int(1),
                Value::Tensor(t),
                Value::Null
            ])))
        );
    }

    #[test]
    fn busy_service_time_takes_at_least_its_duration() {
        let mut p = ServiceTimeProcessor::new(Duration::from_millis(5), ServiceMode::Busy);
        let start = Instant::now();
        let out = p.process(&mut NodeContext::default(), &[int(3)]);
        assert!(start.elapsed() >= Duration::from_millis(5));
        assert_eq!(out, Ok(Payload::Value(Value::Int(3))));
    }
}
