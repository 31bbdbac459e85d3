//! The native codec ([`super::wire`]) against an oracle built on the prost-generated types: the same
//! bytes (or the same error) for every generated envelope, and the same decode outcome —
//! value or error, error text included — for every generated and mutated buffer, from a
//! slice and from `Bytes`.

use bytes::Bytes;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use prost::Message as _;

use super::error::{EnvelopeError, TensorError};
use super::oracle::{
    decode as oracle_decode, decode_payload as oracle_decode_payload, encode as oracle_encode,
    encode_payload as oracle_encode_payload,
};
use super::tensor::NATIVE_DTYPES;
use super::*;
use crate::value::{Tensor, Value};

// -- generators ------------------------------------------------------------------------------

/// Tensors: consistent native ones, opaque dtypes, and some inconsistent or negative shapes.
fn tensor() -> impl Strategy<Value = Tensor> {
    let native = (0..NATIVE_DTYPES.len(), vec(0i64..4, 0..4)).prop_flat_map(|(i, shape)| {
        let (dtype, itemsize) = NATIVE_DTYPES[i];
        let elements: usize = shape.iter().map(|&d| d as usize).product();
        vec(any::<u8>(), elements * itemsize)
            .prop_map(move |data| Tensor::new(shape.clone(), dtype, data))
    });
    let odd = (
        prop_oneof![Just(">i4"), Just("uint8"), Just("float32"), Just("")],
        vec(-2i64..300, 0..3),
        vec(any::<u8>(), 0..24),
    )
        .prop_map(|(dtype, shape, data)| Tensor::new(shape, dtype, data));
    prop_oneof![6 => native, 1 => odd]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        (-3i64..3).prop_map(Value::Int),
        any::<f64>().prop_map(Value::Double),
        "[a-zé✓]{0,6}".prop_map(Value::String),
        vec(any::<u8>(), 0..8).prop_map(Value::Bytes),
    ]
}

fn value(tensors: bool) -> impl Strategy<Value = Value> {
    let leaf = if tensors {
        prop_oneof![5 => scalar(), 1 => tensor().prop_map(Value::Tensor)].boxed()
    } else {
        scalar().boxed()
    };
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::List),
            btree_map("[a-c]{0,2}", inner, 0..4).prop_map(Value::Map),
        ]
    })
}

fn wire_tensor() -> impl Strategy<Value = Option<proto::Tensor>> {
    proptest::option::of(tensor().prop_map(proto::Tensor::from))
}

fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        6 => value(true).prop_map(Payload::Value),
        3 => tensor().prop_map(Payload::Tensor),
        1 => Just(Payload::None),
        1 => (wire_tensor(), "[a-z0-9]{0,5}", proptest::option::of(any::<f64>())).prop_map(
            |(pixels, pixel_format, capture_ts)| Payload::Frame(proto::Frame {
                pixels,
                pixel_format,
                capture_ts,
            })
        ),
        1 => (wire_tensor(), vec("[a-z]{0,4}", 0..3)).prop_map(|(boxes, class_names)| {
            Payload::Detections(proto::Detections { boxes, class_names })
        }),
        1 => wire_tensor().prop_map(|tracks| Payload::Tracks(proto::Tracks { tracks })),
        1 => ("[a-z0-9-]{0,8}", prop_oneof![Just(VALUE_TYPE), Just("x.Y")], any::<u64>())
            .prop_map(|(r, inner, size)| Payload::BlobRef(proto::BlobRef {
                r#ref: r,
                inner_payload_type: inner.to_owned(),
                size,
            })),
        1 => (prop_oneof![Just("vendor.X"), Just("")], vec(any::<u8>(), 0..12))
            .prop_map(|(t, data)| Payload::Opaque { payload_type: t.to_owned(), data }),
    ]
}

fn wire_error() -> impl Strategy<Value = Option<WireError>> {
    proptest::option::of(
        (
            "[A-Z_]{0,6}",
            "[a-z ]{0,10}",
            proptest::option::of("[a-z]{0,4}"),
            proptest::option::of(0u32..3),
            btree_map("[a-b]{0,2}", "[a-z]{0,3}", 0..3),
        )
            .prop_map(|(code, message, remedy, n, context)| WireError {
                code,
                message,
                remedy,
                num_delivered: n,
                context,
                ..WireError::default()
            }),
    )
}

/// Envelopes, mostly valid; some break a rule (a terminator with a payload, a tensor in
/// metadata, an error record on DATA) so both encoders' refusals are compared too.
fn envelope() -> impl Strategy<Value = Envelope> {
    (
        prop_oneof![6 => Just(MsgType::Data), 1 => Just(MsgType::Eos), 1 => Just(MsgType::Abort)],
        (
            "[a-z]{0,4}",
            "[a-z]{0,3}",
            "[a-z0-9]{0,3}",
            "[a-z:0-9]{0,6}",
        ),
        (
            prop_oneof![Just(0u64), any::<u64>()],
            proptest::option::of(any::<f64>()),
        ),
        (
            "[a-z]{0,2}",
            "[a-z]{0,2}",
            prop_oneof![Just(0u32), any::<u32>()],
        ),
        btree_map("[a-c]{0,3}", value(false), 0..3),
        proptest::option::of(("[a-c]{0,2}", value(true))),
        payload(),
        wire_error(),
    )
        .prop_map(
            |(msg_type, (p, f, r, t), (seq, event_ts), (s, ps, rid), mut md, extra, pl, err)| {
                if let Some((k, v)) = extra {
                    md.insert(k, v);
                }
                let payload = if msg_type == MsgType::Data {
                    pl.clone()
                } else {
                    Payload::None
                };
                Envelope {
                    producer_name: p,
                    flow_id: f,
                    run_id: r,
                    trace_id: t,
                    seq,
                    event_ts,
                    msg_type,
                    span_id: s,
                    parent_span_id: ps,
                    replica_id: rid,
                    metadata: md,
                    // Mostly consistent; the generated payload/error leak through sometimes.
                    payload: if seq % 17 == 3 { pl } else { payload },
                    error: if msg_type == MsgType::Abort || seq % 13 == 5 {
                        err
                    } else {
                        None
                    },
                }
            },
        )
}

/// Byte edits: flip, overwrite, truncate, insert, remove.
fn mutate(mut b: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, op, byte) in edits {
        if b.is_empty() {
            break;
        }
        let at = at % b.len();
        match op % 5 {
            0 => b[at] ^= 1 << (byte % 8),
            1 => b[at] = byte,
            2 => b.truncate(at),
            3 => b.insert(at, byte),
            _ => {
                b.remove(at);
            }
        }
    }
    b
}

/// Decodes `b` every way: from a slice, from `Bytes`, and the oracle.
fn decode_all_ways(b: &[u8]) -> [Result<Envelope, EnvelopeError>; 3] {
    [
        decode(b),
        decode_bytes(Bytes::copy_from_slice(b)),
        oracle_decode(b),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn encode_writes_the_bytes_prost_wrote(env in envelope()) {
        prop_assert_eq!(encode(&env), oracle_encode(&env));
        if env.msg_type == MsgType::Data {
            prop_assert_eq!(encode_payload(&env.payload), oracle_encode_payload(&env.payload));
        }
    }

    #[test]
    fn decode_agrees_with_prost_on_valid_and_mutated_bytes(
        env in envelope(),
        edits in vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..4),
    ) {
        let Ok(bytes) = oracle_encode(&env) else { return Ok(()) };
        let [a, b, c] = decode_all_ways(&mutate(bytes, &edits));
        prop_assert_eq!(&a, &c);
        prop_assert_eq!(&b, &c);
    }

    #[test]
    fn payload_decode_agrees_with_prost(
        p in payload(),
        edits in vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..3),
    ) {
        let Ok((ty, bytes)) = oracle_encode_payload(&p) else { return Ok(()) };
        let bytes = mutate(bytes, &edits);
        let want = oracle_decode_payload(&ty, &bytes);
        prop_assert_eq!(&decode_payload(&ty, &bytes), &want);
        prop_assert_eq!(&decode_payload_bytes(&ty, Bytes::from(bytes)), &want);
    }
}

#[test]
fn tensor_data_is_a_slice_of_a_bytes_input() {
    let t = Tensor::new(vec![4, 4, 3], "uint8", vec![9u8; 48]);
    let env = Envelope {
        payload: Payload::Value(Value::List(vec![Value::Tensor(t.clone())])),
        ..Envelope::default()
    };
    let wire = match encode(&Envelope {
        payload: Payload::Tensor(t.clone()),
        ..env.clone()
    }) {
        Ok(b) => Bytes::from(b),
        Err(e) => panic!("encodes: {e}"),
    };
    let range = wire.as_ptr_range();
    let Ok(Envelope {
        payload: Payload::Tensor(got),
        ..
    }) = decode_bytes(wire.clone())
    else {
        panic!("decodes to a tensor");
    };
    assert_eq!(got, t);
    assert!(
        range.contains(&got.data.as_ptr()),
        "no copy: the data points into the input"
    );
    // Nested in a value too.
    let wire = Bytes::from(encode(&env).unwrap_or_default());
    let range = wire.as_ptr_range();
    let Ok(Envelope {
        payload: Payload::Value(Value::List(items)),
        ..
    }) = decode_bytes(wire.clone())
    else {
        panic!("decodes to a list");
    };
    let [Value::Tensor(got)] = items.as_slice() else {
        panic!("one tensor");
    };
    assert!(range.contains(&got.data.as_ptr()));
}

#[test]
fn deep_values_hit_prost_s_recursion_limit_the_same_way() {
    // 60 nested lists: deeper than the encoder allows (MAX_VALUE_DEPTH), so built with the
    // generated types; each level is two messages (Value, ListValue), past prost's 100.
    let mut v = proto::Value {
        kind: Some(proto::value::Kind::IntValue(1)),
    };
    for _ in 0..60 {
        v = proto::Value {
            kind: Some(proto::value::Kind::ListValue(proto::ListValue {
                values: vec![v],
            })),
        };
    }
    let bytes = v.encode_to_vec();
    let got = decode_payload(VALUE_TYPE, &bytes);
    assert_eq!(got, oracle_decode_payload(VALUE_TYPE, &bytes));
    assert!(got.is_err(), "past prost's limit of 100 nested messages");
}

#[test]
fn an_inconsistent_nested_tensor_is_reported_where_it_was() {
    let bad = Tensor::new(vec![3], "uint16", vec![1u8; 5]);
    let v = proto::Value {
        kind: Some(proto::value::Kind::TensorValue(proto::Tensor::from(bad))),
    };
    let bytes = v.encode_to_vec();
    let got = decode_payload(VALUE_TYPE, &bytes);
    assert!(matches!(
        got,
        Err(EnvelopeError::BadTensor {
            source: TensorError::DataLength { .. },
            ..
        })
    ));
    assert_eq!(got, oracle_decode_payload(VALUE_TYPE, &bytes));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The fast path must take what encoders write, or it would be dead weight (that it
    /// agrees with the prost-driven decoder is what the tests above check).
    #[test]
    fn the_fast_path_takes_every_plain_encoding(env in envelope()) {
        let Ok(bytes) = oracle_encode(&env) else { return Ok(()) };
        let Some(wire) = super::fast::envelope(&bytes, None) else {
            return Err(TestCaseError::fail(format!("fast path refused {}", hex::encode(&bytes))));
        };
        let payload = &wire.payload[..];
        match wire.payload_type.as_str() {
            _ if env.msg_type != MsgType::Data || payload.is_empty() => {}
            VALUE_TYPE => prop_assert!(super::fast::value(payload, None).is_some()),
            TENSOR_TYPE => prop_assert!(super::fast::tensor(payload, None).is_some()),
            _ => {}
        }
    }
}
