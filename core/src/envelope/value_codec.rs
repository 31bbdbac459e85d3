//! [`Value`] ↔ `videoflow.v1.Value` (WIRE-10, WIRE-12, WIRE-15).
//!
//! The 1.0.4 encoding facts this reproduces (§4.1): a set oneof member is encoded even at its
//! default (prost always writes a set oneof member); a `Value` with no member set decodes as
//! null; an **empty map** is encoded as a `Value` with no member set, so it arrives as null
//! exactly as from the reference; an empty list stays an empty `list_value`; ints and doubles
//! stay distinct; nested tensors travel as `tensor_value`.

use std::collections::BTreeMap;

use super::error::{EnvelopeError, TensorError};
use super::proto;
use super::proto::value::Kind;
use super::tensor::tensor_to_proto;
use crate::value::Value;

/// The deepest nesting of lists/maps an encoder emits.
///
/// Why a limit: protobuf decoders stop at 100 nested messages (prost and the reference's
/// runtime alike), and each map level costs three (value, map, entry), so a deeper value would
/// encode fine and then be refused as undecodable by every receiver. 32 levels keeps even a
/// metadata value (two more levels) inside that limit.
pub const MAX_VALUE_DEPTH: usize = 32;

/// Why a value could not be encoded; the caller adds where it sat.
#[derive(Debug)]
pub(crate) enum ValueEncodeError {
    /// A tensor where none is allowed (metadata).
    TensorNotAllowed,
    /// An inconsistent tensor.
    Tensor(TensorError),
    /// Nested deeper than [`MAX_VALUE_DEPTH`].
    TooDeep,
}

impl ValueEncodeError {
    /// The envelope error for a failure inside a DATA payload.
    pub(crate) fn in_payload(self) -> EnvelopeError {
        match self {
            ValueEncodeError::Tensor(e) => EnvelopeError::InvalidTensor(e),
            ValueEncodeError::TooDeep => EnvelopeError::TooDeep {
                max: MAX_VALUE_DEPTH,
            },
            // Payload values allow tensors; kept total rather than panicking.
            ValueEncodeError::TensorNotAllowed => {
                EnvelopeError::Inconsistent("a tensor where none is allowed")
            }
        }
    }

    /// The envelope error for a failure inside the metadata value under `key`.
    pub(crate) fn in_metadata(self, key: &str) -> EnvelopeError {
        match self {
            ValueEncodeError::TensorNotAllowed => EnvelopeError::MetadataTensor {
                key: key.to_owned(),
            },
            other => other.in_payload(),
        }
    }
}

/// Encodes `v`; `allow_tensor = false` refuses tensors anywhere inside it (metadata).
pub(crate) fn value_to_proto(
    v: &Value,
    allow_tensor: bool,
) -> Result<proto::Value, ValueEncodeError> {
    to_proto(v, allow_tensor, 0)
}

fn to_proto(v: &Value, allow_tensor: bool, depth: usize) -> Result<proto::Value, ValueEncodeError> {
    let kind = match v {
        Value::Null => Some(Kind::NullValue(proto::NullValue::NullValue as i32)),
        Value::Bool(b) => Some(Kind::BoolValue(*b)),
        Value::Int(i) => Some(Kind::IntValue(*i)),
        Value::Double(d) => Some(Kind::DoubleValue(*d)),
        Value::String(s) => Some(Kind::StringValue(s.clone())),
        Value::Bytes(b) => Some(Kind::BytesValue(b.clone())),
        Value::List(items) => {
            if depth >= MAX_VALUE_DEPTH {
                return Err(ValueEncodeError::TooDeep);
            }
            let values = items
                .iter()
                .map(|x| to_proto(x, allow_tensor, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Kind::ListValue(proto::ListValue { values }))
        }
        // 1.0.4 parity: an empty map is a Value with no member set (it arrives as null).
        Value::Map(m) if m.is_empty() => None,
        Value::Map(m) => {
            if depth >= MAX_VALUE_DEPTH {
                return Err(ValueEncodeError::TooDeep);
            }
            let fields = m
                .iter()
                .map(|(k, x)| Ok((k.clone(), to_proto(x, allow_tensor, depth + 1)?)))
                .collect::<Result<BTreeMap<_, _>, _>>()?;
            Some(Kind::MapValue(proto::MapValue { fields }))
        }
        Value::Tensor(t) => {
            if !allow_tensor {
                return Err(ValueEncodeError::TensorNotAllowed);
            }
            Some(Kind::TensorValue(
                tensor_to_proto(t).map_err(ValueEncodeError::Tensor)?,
            ))
        }
    };
    Ok(proto::Value { kind })
}

/// Decodes a wire value; only an inconsistent nested tensor can fail.
///
/// Recursion is bounded by the protobuf decoder's own nesting limit, so no input can exhaust
/// the stack here.
pub(crate) fn value_from_proto(v: proto::Value) -> Result<Value, TensorError> {
    Ok(match v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::IntValue(i)) => Value::Int(i),
        Some(Kind::DoubleValue(d)) => Value::Double(d),
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::BytesValue(b)) => Value::Bytes(b),
        Some(Kind::ListValue(l)) => Value::List(
            l.values
                .into_iter()
                .map(value_from_proto)
                .collect::<Result<_, _>>()?,
        ),
        Some(Kind::MapValue(m)) => Value::Map(
            m.fields
                .into_iter()
                .map(|(k, x)| Ok((k, value_from_proto(x)?)))
                .collect::<Result<_, TensorError>>()?,
        ),
        Some(Kind::TensorValue(t)) => Value::Tensor(t.try_into()?),
    })
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn bytes_of(v: &Value) -> Vec<u8> {
        match value_to_proto(v, true) {
            Ok(p) => p.encode_to_vec(),
            Err(e) => panic!("encode failed: {e:?}"),
        }
    }

    #[test]
    fn defaults_of_set_members_are_on_the_wire() {
        assert_eq!(bytes_of(&Value::Null), [0x08, 0x00]);
        assert_eq!(bytes_of(&Value::Bool(false)), [0x30, 0x00]);
        assert_eq!(bytes_of(&Value::Int(0)), [0x18, 0x00]);
        assert_eq!(bytes_of(&Value::Int(1)), [0x18, 0x02]);
        assert_eq!(bytes_of(&Value::Double(0.0))[0], 0x11);
        assert_eq!(bytes_of(&Value::String(String::new())), [0x22, 0x00]);
        assert_eq!(bytes_of(&Value::Bytes(Vec::new())), [0x2a, 0x00]);
        assert_eq!(bytes_of(&Value::List(Vec::new())), [0x3a, 0x00]);
    }

    #[test]
    fn empty_map_is_no_member_and_decodes_as_null() {
        let empty = Value::Map(BTreeMap::new());
        assert!(bytes_of(&empty).is_empty());
        let nested = Value::Map(BTreeMap::from([("a".to_owned(), empty)]));
        let back = proto::Value::decode(bytes_of(&nested).as_slice())
            .map_err(|e| e.to_string())
            .and_then(|p| value_from_proto(p).map_err(|e| e.to_string()));
        assert_eq!(
            back,
            Ok(Value::Map(BTreeMap::from([("a".to_owned(), Value::Null)])))
        );
    }

    #[test]
    fn no_member_decodes_as_null() {
        assert_eq!(
            value_from_proto(proto::Value { kind: None }),
            Ok(Value::Null)
        );
    }
}
