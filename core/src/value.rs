//! The native value model of the wire (WIRE-10, WIRE-12, WIRE-15).
//!
//! Why a dedicated enum instead of `serde_json::Value`: the wire keeps integers and doubles
//! distinct (`{"d": 2.0}` must never come back as the integer 2), carries raw bytes, and may
//! nest tensors inside lists and maps. JSON can express none of that faithfully.

use std::collections::BTreeMap;

use bytes::Bytes;

/// A dense n-dimensional array as it travels on the wire (`videoflow.v1.Tensor`).
///
/// The data stays raw bytes in the dtype's byte order (C order); nodes that need typed access
/// reinterpret it. Keeping it raw is what lets tensors pass through a worker unre-encoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tensor {
    /// Dimensions; empty for a 0-d array.
    pub shape: Vec<i64>,
    /// numpy `str(dtype)`: `uint8`, `float32`, … (big-endian arrays carry a prefixed name).
    pub dtype: String,
    /// Raw C-order buffer, `product(shape) × itemsize` bytes.
    ///
    /// Why [`Bytes`] rather than `Vec<u8>`: a frame is megabytes, and
    /// [`envelope::decode_bytes`](crate::envelope::decode_bytes) hands out a slice of the
    /// received message instead of a copy (a cheap, reference-counted view that keeps that
    /// buffer alive); cloning a tensor is cheap too. Build one from a `Vec<u8>` with
    /// `.into()`; to modify the data, copy it out (`to_vec()`) and put it back.
    pub data: Bytes,
}

impl Tensor {
    /// A tensor from its parts; `data` is anything that converts into [`Bytes`] (a
    /// `Vec<u8>` moves without a copy). Unchecked: encoders and decoders run
    /// [`Tensor::check`].
    pub fn new(shape: Vec<i64>, dtype: impl Into<String>, data: impl Into<Bytes>) -> Self {
        Tensor {
            shape,
            dtype: dtype.into(),
            data: data.into(),
        }
    }
}

/// One native value: what a node hands the runtime and what metadata holds.
///
/// Maps are ordered by key (`BTreeMap`) because the reference writes map entries in no fixed
/// order (§4.1): nothing may depend on map order, so we pick the canonical one.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// `null_value`, or a `Value` with no member set (also what an empty map decodes to).
    #[default]
    Null,
    /// `bool_value` — never an integer.
    Bool(bool),
    /// `int_value` (sint64) — never a double.
    Int(i64),
    /// `double_value` — never an integer, even when integral.
    Double(f64),
    /// `string_value`.
    String(String),
    /// `bytes_value`.
    Bytes(Vec<u8>),
    /// `list_value` (tuples travel as lists).
    List(Vec<Value>),
    /// `map_value` with string keys.
    Map(BTreeMap<String, Value>),
    /// `tensor_value`: a tensor nested inside a list or map (WIRE-15).
    Tensor(Tensor),
}

impl Value {
    /// Short kind name, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Double(_) => "double",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Tensor(_) => "tensor",
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
