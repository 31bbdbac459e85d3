//! Shared helpers for the golden-vector tests.
//!
//! The vectors are read from `../shared/vectors` at test time and never copied into the repo
//!. A missing folder fails the test loudly: silently skipping would turn a broken
//! checkout into a green suite.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use videoflow_core::value::{Tensor, Value};

/// The crate directory: `CARGO_MANIFEST_DIR` as Cargo sets it when it runs the test, else the
/// compiled-in one (the shared target dir may hold a binary built in another checkout).
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// Where the golden vectors live: `$VF_VECTORS_DIR`, else `<repo>/../shared/vectors`.
pub fn vectors_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VF_VECTORS_DIR") {
        return PathBuf::from(dir);
    }
    let repo = manifest_dir().join("..");
    let dir = repo.join("..").join("shared").join("vectors");
    assert!(
        dir.is_dir(),
        "golden vectors not found at {} (set VF_VECTORS_DIR to the shared/vectors folder)",
        dir.display()
    );
    dir
}

/// Reads a vector file as bytes.
pub fn read_bytes(rel: &str) -> Vec<u8> {
    let path = vectors_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Reads and parses a JSON vector file.
pub fn read_json(rel: &str) -> serde_json::Value {
    serde_json::from_slice(&read_bytes(rel))
        .unwrap_or_else(|e| panic!("parsing {rel} as JSON: {e}"))
}

/// Decodes standard base64 (vectors use it for bytes and tensor data).
pub fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_else(|e| panic!("bad base64 {s:?}: {e}"))
}

/// Converts the vectors' typed value scheme (`{"i": 1}`, `{"d": 2.0}`, `{"d_bits": "…"}`,
/// `{"s": …}`, `{"b64": …}`, `{"list": […]}`, `{"map": {…}}`, `{"tensor": {…}}`,
/// `{"null": true}`, `{"bool": b}`) into a native [`Value`].
pub fn typed(j: &serde_json::Value) -> Value {
    let obj = j
        .as_object()
        .unwrap_or_else(|| panic!("typed value must be an object: {j}"));
    assert_eq!(obj.len(), 1, "typed value must have exactly one key: {j}");
    let (k, v) = obj.iter().next().expect("one key");
    match k.as_str() {
        "null" => Value::Null,
        "bool" => Value::Bool(v.as_bool().expect("bool")),
        "i" => Value::Int(v.as_i64().expect("i64")),
        "d" => Value::Double(v.as_f64().expect("f64")),
        "d_bits" => {
            let bits = u64::from_str_radix(v.as_str().expect("hex"), 16).expect("hex bits");
            Value::Double(f64::from_bits(bits))
        }
        "s" => Value::String(v.as_str().expect("string").to_owned()),
        "b64" => Value::Bytes(b64(v.as_str().expect("b64"))),
        "list" => Value::List(v.as_array().expect("list").iter().map(typed).collect()),
        "map" => Value::Map(
            v.as_object()
                .expect("map")
                .iter()
                .map(|(k, v)| (k.clone(), typed(v)))
                .collect::<BTreeMap<_, _>>(),
        ),
        "tensor" => Value::Tensor(tensor(v)),
        other => panic!("unknown typed-value key {other:?} in {j}"),
    }
}

/// Converts `{shape, dtype, data_b64}` into a [`Tensor`].
pub fn tensor(j: &serde_json::Value) -> Tensor {
    Tensor {
        shape: j["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_i64().expect("dim"))
            .collect(),
        dtype: j["dtype"].as_str().expect("dtype").to_owned(),
        data: b64(j["data_b64"].as_str().unwrap_or("")).into(),
    }
}

/// Typed equality: ints vs doubles vs bools stay distinct, doubles compare by bits (so NaN
/// equals NaN and -0.0 differs from 0.0), maps compare key sets and values.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
