//! How a payload reads as a Python object, and the errors nodes raise about it.
//!
//! The Python reference hands nodes decoded objects (numbers, lists, numpy arrays, protobuf
//! messages) and renders them with `str()`; our nodes get [`Input`]s of [`Payload`]s. This
//! module is the one place that bridges the two: to a [`Value`] (what a tuple or list of them
//! encodes to), to Python `str()` text, and to JSON for the self-checking sink.

use sha2::{Digest, Sha256};
use videoflow_core::envelope::{Payload, encode_payload};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_str;
use videoflow_core::value::{Tensor, Value};

use super::Input;

/// `VF_POISON_SCHEMA`: the input is not what `node` requires (the data is bad, so it is
/// dead-lettered instead of retried).
pub fn schema_error(node: &str, message: impl Into<String>) -> VfError {
    VfError::new(
        ErrorCode::PoisonSchema,
        format!("{node}: {}", message.into()),
    )
    .with_remedy(format!(
        "Send {node} inputs of the type it documents, or put a converting processor in front of it."
    ))
    .with_context("node_class", node)
}

/// `VF_NODE_CONTRACT`: the node takes `expected` positional inputs but is wired to `got`
/// parents (1.0.4 raises a `TypeError` on every message instead).
pub fn arity_error(node: &str, expected: usize, got: usize) -> VfError {
    VfError::new(
        ErrorCode::NodeContract,
        format!("{node} takes {expected} input(s), but it is wired to {got} parent(s)."),
    )
    .with_remedy(
        "Give the node exactly that many parents, or join the inputs first with \
         videoflow.processors.basic.JoinerProcessor.",
    )
    .with_context("node_class", node)
    .with_context("expected_inputs", expected)
    .with_context("parents", got)
}

/// `Ok` when a node taking `expected` inputs is wired to `got` parents, else [`arity_error`].
pub fn expect_inputs(node: &str, expected: usize, got: usize) -> Result<(), VfError> {
    if got == expected {
        Ok(())
    } else {
        Err(arity_error(node, expected, got))
    }
}

/// An error outside the taxonomy, as a plain Python exception would be (`OSError: …`): code
/// `VF_UNKNOWN` and no disposition, so the failure ladder classifies it with the node's
/// `VF_ON_ERROR` (ERR-2). `message` is already `<TypeName>: <text>`.
pub fn unclassified(type_name: &str, text: impl std::fmt::Display) -> VfError {
    VfError::new(ErrorCode::Unknown, format!("{type_name}: {text}"))
        .with_context("error_type", type_name)
}

/// An I/O failure as Python's `OSError` family: timeouts and refused connections are
/// transient (ERR-2's built-in classifiers), out-of-memory is worker-fatal, the rest is
/// unclassified.
pub fn io_error(what: &str, e: &std::io::Error) -> VfError {
    use std::io::ErrorKind as K;
    let text = format!("{what}: {e}");
    match e.kind() {
        K::TimedOut | K::ConnectionRefused | K::ConnectionReset | K::ConnectionAborted => {
            VfError::new(ErrorCode::Transient, format!("OSError: {text}"))
        }
        K::OutOfMemory => VfError::new(ErrorCode::ResourceExhausted, format!("OSError: {text}")),
        _ => unclassified("OSError", text),
    }
}

/// The object 1.0.4 hands a node for `input`, as a [`Value`]: `None` for a missing parent, a
/// list for a collect parent, a nested tensor for an array. A protobuf message (frame,
/// detections, …) has no `Value` form — 1.0.4 fails to encode it inside a tuple — so it is a
/// `VF_POISON_SCHEMA` error naming `node`.
pub fn input_to_value(node: &str, input: &Input) -> Result<Value, VfError> {
    match input {
        Input::Present(p) => payload_to_value(node, p),
        Input::Missing => Ok(Value::Null),
        Input::Collected(items) => items
            .iter()
            .map(|p| payload_to_value(node, p))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List),
    }
}

/// As [`input_to_value`] for one payload.
pub fn payload_to_value(node: &str, payload: &Payload) -> Result<Value, VfError> {
    match payload {
        Payload::None => Ok(Value::Null),
        Payload::Value(v) => Ok(v.clone()),
        Payload::Tensor(t) => Ok(Value::Tensor(t.clone())),
        other => Err(schema_error(
            node,
            format!(
                "a {} message cannot be carried inside a list or tuple (only values and \
                 tensors can)",
                other.payload_type().unwrap_or("message")
            ),
        )),
    }
}

/// The payload a processor publishes for a Python object: a bare tensor stays a tensor
/// payload (1.0.4 encodes an ndarray as `videoflow.v1.Tensor`), anything else a `Value`.
pub fn value_to_payload(v: Value) -> Payload {
    match v {
        Value::Tensor(t) => Payload::Tensor(t),
        other => Payload::Value(other),
    }
}

/// Python `str(obj)` of the object 1.0.4 would hand a node for `input` — what `print` and
/// f-strings write. Values follow [`py_str`]; numpy arrays and protobuf messages get a
/// summary instead of numpy's or protobuf's text format (not reproduced).
pub fn input_py_str(input: &Input) -> String {
    match input {
        Input::Present(p) => payload_py_str(p),
        Input::Missing => "None".to_owned(),
        Input::Collected(items) => {
            let parts: Vec<String> = items.iter().map(payload_py_repr).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

fn payload_py_str(p: &Payload) -> String {
    match p {
        Payload::None => "None".to_owned(),
        Payload::Value(v) => py_str(v),
        Payload::Tensor(t) => py_str(&Value::Tensor(t.clone())),
        other => message_summary(other),
    }
}

fn payload_py_repr(p: &Payload) -> String {
    match p {
        Payload::Value(v) => videoflow_core::partition::py_repr(v),
        other => payload_py_str(other),
    }
}

fn message_summary(p: &Payload) -> String {
    format!("<{} message>", p.payload_type().unwrap_or("unknown"))
}

/// JSON for an input, keeping ints and doubles apart (`2` vs `2.0`): missing ⇒ `null`,
/// collect ⇒ array. What JSON cannot say is tagged: non-finite doubles `{"$double": "nan"}`,
/// bytes `{"$bytes_hex": …}`, tensors `{"$tensor": {shape, dtype, nbytes, sha256, head_hex}}`
/// (the digest lets a test verify content end to end), other messages `{"$message": fqn,
/// nbytes, sha256}`.
pub fn input_to_json(input: &Input) -> serde_json::Value {
    match input {
        Input::Present(p) => payload_to_json(p),
        Input::Missing => serde_json::Value::Null,
        Input::Collected(items) => items.iter().map(payload_to_json).collect(),
    }
}

/// As [`input_to_json`] for one payload.
pub fn payload_to_json(p: &Payload) -> serde_json::Value {
    match p {
        Payload::None => serde_json::Value::Null,
        Payload::Value(v) => value_to_json(v),
        Payload::Tensor(t) => tensor_to_json(t),
        other => {
            let (fqn, nbytes, digest) = match encode_payload(other) {
                Ok((fqn, data)) => (fqn, data.len(), sha256_hex(&data)),
                Err(_) => (String::new(), 0, String::new()),
            };
            serde_json::json!({"$message": fqn, "nbytes": nbytes, "sha256": digest})
        }
    }
}

/// As [`input_to_json`] for one value.
pub fn value_to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        Value::Double(x) => match serde_json::Number::from_f64(*x) {
            Some(n) => J::Number(n),
            None => serde_json::json!({"$double": videoflow_core::partition::py_float(*x)}),
        },
        Value::String(s) => J::String(s.clone()),
        Value::Bytes(b) => serde_json::json!({"$bytes_hex": hex::encode(b)}),
        Value::List(items) => items.iter().map(value_to_json).collect(),
        Value::Map(m) => J::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), value_to_json(v)))
                .collect(),
        ),
        Value::Tensor(t) => tensor_to_json(t),
    }
}

fn tensor_to_json(t: &Tensor) -> serde_json::Value {
    let head = &t.data[..t.data.len().min(16)];
    serde_json::json!({"$tensor": {
        "shape": t.shape,
        "dtype": t.dtype,
        "nbytes": t.data.len(),
        "sha256": sha256_hex(&t.data),
        "head_hex": hex::encode(head),
    }})
}

/// Lower-case hex SHA-256, the digest the JSONL sink records (any language can recompute it).
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_collected_read_as_none_and_list() {
        assert_eq!(input_to_value("X", &Input::Missing), Ok(Value::Null));
        let c = Input::Collected(vec![Payload::Value(Value::Int(1)), Payload::None]);
        assert_eq!(
            input_to_value("X", &c),
            Ok(Value::List(vec![Value::Int(1), Value::Null]))
        );
        assert_eq!(input_py_str(&c), "[1, None]");
    }

    #[test]
    fn messages_cannot_nest_in_values() {
        let frame = Payload::Frame(Default::default());
        let err = input_to_value("JoinerProcessor", &Input::Present(frame));
        assert_eq!(err.map_err(|e| e.code), Err(ErrorCode::PoisonSchema));
    }

    #[test]
    fn json_keeps_ints_and_doubles_apart() {
        let v = Value::List(vec![
            Value::Int(2),
            Value::Double(2.0),
            Value::Double(f64::NAN),
        ]);
        assert_eq!(
            serde_json::to_string(&value_to_json(&v)).ok().as_deref(),
            Some(r#"[2,2.0,{"$double":"nan"}]"#)
        );
    }

    #[test]
    fn strings_print_bare_at_top_level_and_quoted_inside() {
        assert_eq!(
            input_py_str(&Input::Present(Payload::Value(Value::from("a")))),
            "a"
        );
        let l = Value::List(vec![Value::from("a"), Value::Bool(true)]);
        assert_eq!(
            input_py_str(&Input::Present(Payload::Value(l))),
            "['a', True]"
        );
    }
}
