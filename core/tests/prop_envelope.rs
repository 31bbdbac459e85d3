//! Property tests of the envelope codec: values, metadata, tensors and whole DATA envelopes
//! round-trip through `encode`/`decode`, and no byte string makes `decode` panic.
//!
//! Comparison is typed (`support::same`): ints, doubles and bools stay distinct, doubles
//! compare by bits (NaN, ±inf, -0.0). Generated maps may be empty; the expected value is
//! normalised with the 1.0.4 rule that an empty map arrives as null.

mod support;

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use videoflow_core::envelope::{self, Envelope, MsgType, Payload, tensor::NATIVE_DTYPES};
use videoflow_core::value::{Tensor, Value};

/// Doubles, with the awkward ones made likely.
fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<f64>(),
        1 => prop_oneof![
            Just(f64::NAN),
            Just(-f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(0.0),
            Just(f64::MIN_POSITIVE),
            Just(f64::MAX),
        ],
    ]
}

/// Integers, with the extremes made likely.
fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => any::<i64>(),
        1 => prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0), Just(-1), Just(1)],
    ]
}

/// A consistent tensor: a native dtype with exactly `product(shape) × itemsize` bytes, or an
/// opaque dtype with arbitrary bytes.
fn tensor() -> impl Strategy<Value = Tensor> {
    let native = (0..NATIVE_DTYPES.len(), vec(0i64..4, 0..4)).prop_flat_map(|(i, shape)| {
        let (dtype, itemsize) = NATIVE_DTYPES[i];
        let elements: usize = shape.iter().map(|&d| d as usize).product();
        vec(any::<u8>(), elements * itemsize).prop_map(move |data| Tensor {
            shape: shape.clone(),
            dtype: dtype.to_owned(),
            data: data.into(),
        })
    });
    let opaque = (
        prop_oneof![Just(">i4"), Just("complex128"), Just("<U3")],
        vec(0i64..4, 0..3),
        vec(any::<u8>(), 0..24),
    )
        .prop_map(|(dtype, shape, data)| Tensor {
            shape,
            dtype: dtype.to_owned(),
            data: data.into(),
        });
    prop_oneof![4 => native, 1 => opaque]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        int().prop_map(Value::Int),
        double().prop_map(Value::Double),
        any::<String>().prop_map(Value::String),
        "[a-zé Ω✓]{0,8}".prop_map(Value::String),
        vec(any::<u8>(), 0..16).prop_map(Value::Bytes),
    ]
}

/// Nested lists/maps (depth ≤ 4) over `leaf`; maps may be empty.
fn nested(leaf: BoxedStrategy<Value>) -> impl Strategy<Value = Value> {
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::List),
            btree_map(any::<String>(), inner, 0..5).prop_map(Value::Map),
        ]
    })
}

/// Any value, tensors included (payloads).
fn any_value() -> impl Strategy<Value = Value> {
    nested(prop_oneof![4 => scalar(), 1 => tensor().prop_map(Value::Tensor)].boxed())
}

/// Any value without tensors (metadata).
fn meta_value() -> impl Strategy<Value = Value> {
    nested(scalar().boxed())
}

/// What a value decodes to: every empty map becomes null (1.0.4 parity).
fn normalise(v: &Value) -> Value {
    match v {
        Value::Map(m) if m.is_empty() => Value::Null,
        Value::Map(m) => Value::Map(m.iter().map(|(k, v)| (k.clone(), normalise(v))).collect()),
        Value::List(l) => Value::List(l.iter().map(normalise).collect()),
        other => other.clone(),
    }
}

fn data(payload: Payload, metadata: BTreeMap<String, Value>) -> Envelope {
    Envelope {
        producer_name: "cam".to_owned(),
        flow_id: "flow-A".to_owned(),
        run_id: "run-1".to_owned(),
        trace_id: "cam:1".to_owned(),
        seq: 1,
        event_ts: Some(1.5),
        metadata,
        payload,
        ..Envelope::default()
    }
}

fn roundtrip(env: &Envelope) -> Result<Envelope, TestCaseError> {
    let bytes = envelope::encode(env).map_err(|e| TestCaseError::fail(format!("encode: {e}")))?;
    envelope::decode(&bytes).map_err(|e| TestCaseError::fail(format!("decode: {e}")))
}

fn same_map(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> bool {
    support::same(&Value::Map(a.clone()), &Value::Map(b.clone()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn value_payload_round_trips(v in any_value()) {
        let back = roundtrip(&data(Payload::Value(v.clone()), BTreeMap::new()))?;
        let Payload::Value(got) = &back.payload else {
            return Err(TestCaseError::fail(format!("not a value: {:?}", back.payload)));
        };
        let want = normalise(&v);
        prop_assert!(support::same(got, &want), "got {:?}, want {:?}", got, want);
    }

    #[test]
    fn metadata_round_trips(md in btree_map(any::<String>(), meta_value(), 0..6)) {
        let back = roundtrip(&data(Payload::Value(Value::Null), md.clone()))?;
        let want: BTreeMap<_, _> = md.iter().map(|(k, v)| (k.clone(), normalise(v))).collect();
        prop_assert!(same_map(&back.metadata, &want), "got {:?}, want {:?}", back.metadata, want);
    }

    #[test]
    fn tensor_payload_round_trips(t in tensor()) {
        let back = roundtrip(&data(Payload::Tensor(t.clone()), BTreeMap::new()))?;
        prop_assert_eq!(back.payload, Payload::Tensor(t));
    }

    #[test]
    fn header_round_trips(
        names in vec(any::<String>(), 6),
        seq in any::<u64>(),
        event_ts in proptest::option::of(double()),
        replica_id in any::<u32>(),
        msg_type in prop_oneof![Just(MsgType::Data), Just(MsgType::Eos), Just(MsgType::Abort)],
    ) {
        let env = Envelope {
            producer_name: names[0].clone(),
            flow_id: names[1].clone(),
            run_id: names[2].clone(),
            trace_id: names[3].clone(),
            span_id: names[4].clone(),
            parent_span_id: names[5].clone(),
            seq,
            event_ts,
            replica_id,
            msg_type,
            payload: match msg_type {
                MsgType::Data => Payload::Value(Value::Int(7)),
                MsgType::Eos | MsgType::Abort => Payload::None,
            },
            ..Envelope::default()
        };
        let back = roundtrip(&env)?;
        prop_assert_eq!(&back.producer_name, &env.producer_name);
        prop_assert_eq!(&back.flow_id, &env.flow_id);
        prop_assert_eq!(&back.run_id, &env.run_id);
        prop_assert_eq!(&back.trace_id, &env.trace_id);
        prop_assert_eq!(&back.span_id, &env.span_id);
        prop_assert_eq!(&back.parent_span_id, &env.parent_span_id);
        prop_assert_eq!(back.seq, env.seq);
        prop_assert_eq!(back.event_ts.map(f64::to_bits), env.event_ts.map(f64::to_bits));
        prop_assert_eq!(back.replica_id, env.replica_id);
        prop_assert_eq!(back.msg_type, env.msg_type);
        prop_assert_eq!(&back.payload, &env.payload);
        prop_assert_eq!(back.error.is_some(), msg_type == MsgType::Abort);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        let _ = envelope::decode(&bytes);
        let _ = envelope::peek(&bytes);
    }

    #[test]
    fn corrupted_envelopes_never_panic(
        v in any_value(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let env = data(Payload::Value(v), BTreeMap::new());
        let mut bytes = envelope::encode(&env)
            .map_err(|e| TestCaseError::fail(format!("encode: {e}")))?;
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = envelope::decode(&bytes);
        let _ = envelope::decode(&bytes[..cut.index(bytes.len() + 1)]);
    }
}
