//! Unit tests of the envelope codec: every WIRE-3 error path, the encoder's own refusals and
//! the 1.0.4 encoding facts (empty map, depth limit, blob refs).

use std::collections::BTreeMap;

use prost::Message as _;

use super::*;
use crate::value::{Tensor, Value};

fn wire(v: u32, t: i32) -> Vec<u8> {
    proto::Envelope {
        v,
        r#type: t,
        producer_name: "cam".to_owned(),
        ..proto::Envelope::default()
    }
    .encode_to_vec()
}

fn data(payload: Payload) -> Envelope {
    Envelope {
        producer_name: "cam".to_owned(),
        flow_id: "f".to_owned(),
        run_id: "r".to_owned(),
        trace_id: "cam:1".to_owned(),
        seq: 1,
        event_ts: Some(1.5),
        payload,
        ..Envelope::default()
    }
}

fn roundtrip(env: &Envelope) -> Envelope {
    match encode(env).and_then(|b| decode(&b)) {
        Ok(e) => e,
        Err(e) => panic!("round trip failed: {e}"),
    }
}

fn nest(depth: usize, as_map: bool) -> Value {
    (0..depth).fold(Value::Int(1), |v, _| {
        if as_map {
            Value::Map(BTreeMap::from([("k".to_owned(), v)]))
        } else {
            Value::List(vec![v])
        }
    })
}

#[test]
fn wire3_step1_empty_buffer() {
    let err = decode(&[]).err();
    assert_eq!(err, Some(EnvelopeError::Empty));
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("Cannot decode an empty envelope buffer")
    );
}

#[test]
fn wire3_step2_legacy_msgpack_refused_from_first_byte() {
    let heads = (0x80..=0x8Fu8).chain([0xDE, 0xDF]);
    for head in heads {
        // Valid-looking protobuf after the head must not matter: no parse is attempted.
        let mut buf = vec![head];
        buf.extend(wire(4, 1));
        let err = decode(&buf).err();
        assert_eq!(err, Some(EnvelopeError::LegacyMsgpack), "head {head:#x}");
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("msgpack"), "{text}");
        assert!(text.starts_with("Refusing to decode a legacy msgpack (v2/v3) envelope"));
        assert_eq!(peek(&buf).err(), Some(EnvelopeError::LegacyMsgpack));
    }
    assert!(!is_legacy_msgpack(0x08));
    assert!(!is_legacy_msgpack(0x90));
}

#[test]
fn wire3_step3_protobuf_failure() {
    // A truncated varint, and a length-delimited field longer than the buffer.
    for buf in [&[0x08][..], &[0x08, 0x04, 0x1a, 0x05, b'c']] {
        let err = decode(buf).err();
        assert!(matches!(err, Some(EnvelopeError::Protobuf(_))), "{err:?}");
        assert_eq!(err.map(|e| e.code()), Some(CODE_DECODE));
    }
}

#[test]
fn wire3_step4_version() {
    for v in [0, 3, 5] {
        let err = decode(&wire(v, 1)).err();
        assert_eq!(err, Some(EnvelopeError::UnsupportedVersion(v)));
        assert_eq!(
            err.map(|e| e.to_string()),
            Some(format!(
                "Unsupported protobuf envelope version {v}; expected 4"
            ))
        );
    }
}

#[test]
fn wire3_step5_message_type() {
    for t in [0, 4, -1] {
        let err = decode(&wire(4, t)).err();
        assert_eq!(err, Some(EnvelopeError::UnknownMsgType(t)));
        assert_eq!(
            err.map(|e| e.to_string()),
            Some(format!("Unspecified/unknown envelope message type {t}"))
        );
    }
}

#[test]
fn wire3_step6_terminators_ignore_payload_and_keep_error_presence() {
    let buf = proto::Envelope {
        v: 4,
        r#type: proto::MsgType::Eos as i32,
        payload_type: VALUE_TYPE.to_owned(),
        payload: vec![0x18, 0x02],
        error: Some(proto::Error::default()),
        ..proto::Envelope::default()
    }
    .encode_to_vec();
    let env = decode(&buf).ok();
    assert_eq!(env.as_ref().map(|e| &e.payload), Some(&Payload::None));
    assert_eq!(env.as_ref().map(Envelope::is_stop_signal), Some(true));
    assert_eq!(env.as_ref().map(Envelope::is_abort), Some(false));
    // Field 15 present (even empty) ⇒ an error record with empty code and message.
    assert_eq!(env.and_then(|e| e.error), Some(WireError::default()));
}

#[test]
fn wire3_step7_blob_ref_is_exposed_not_resolved() {
    let blob = proto::BlobRef {
        r#ref: "vf-blob-1".to_owned(),
        inner_payload_type: TENSOR_TYPE.to_owned(),
        size: 600_000,
    };
    let env = roundtrip(&data(Payload::BlobRef(blob.clone())));
    assert_eq!(env.blob_ref(), Some("vf-blob-1"));
    assert_eq!(env.payload, Payload::BlobRef(blob));
    let peeked = encode(&env).and_then(|b| peek(&b)).ok();
    assert_eq!(
        peeked.as_ref().and_then(Peeked::blob_ref),
        Some("vf-blob-1")
    );
    assert_eq!(peeked.map(|p| p.header.payload), Some(Payload::None));
    // A BlobRef that does not parse is an undecodable payload, already at peek.
    let mut bad = wire(4, 1);
    bad.extend(
        proto::Envelope {
            payload_type: BLOBREF_TYPE.to_owned(),
            payload: vec![0x0a, 0x09],
            ..proto::Envelope::default()
        }
        .encode_to_vec(),
    );
    assert!(matches!(
        peek(&bad).err(),
        Some(EnvelopeError::BadPayload { .. })
    ));
}

#[test]
fn undecodable_payloads_are_poison() {
    let mut buf = wire(4, 1);
    buf.extend(
        proto::Envelope {
            payload_type: TENSOR_TYPE.to_owned(),
            payload: proto::Tensor {
                shape: vec![2, 2],
                dtype: "float32".to_owned(),
                data: vec![0; 15].into(),
            }
            .encode_to_vec(),
            ..proto::Envelope::default()
        }
        .encode_to_vec(),
    );
    let err = decode(&buf).err();
    assert!(
        matches!(err, Some(EnvelopeError::BadTensor { .. })),
        "{err:?}"
    );
    assert_eq!(err.map(|e| e.code()), Some(CODE_DECODE));
    // Peek does not touch the payload.
    assert!(peek(&buf).is_ok());
}

#[test]
fn unknown_fqn_is_opaque_and_reencodes_verbatim() {
    let opaque = Payload::Opaque {
        payload_type: "vendor.acme.Thing".to_owned(),
        data: vec![0x80, 0x05, 0xff],
    };
    let env = roundtrip(&data(opaque.clone()));
    assert_eq!(env.payload, opaque);
    assert_eq!(
        encode_payload(&opaque).ok(),
        Some(("vendor.acme.Thing".to_owned(), vec![0x80, 0x05, 0xff]))
    );
}

#[test]
fn empty_map_arrives_as_null() {
    let empty = Value::Map(BTreeMap::new());
    let mut env = data(Payload::Value(empty.clone()));
    env.metadata.insert("a".to_owned(), empty.clone());
    env.metadata.insert(
        "b".to_owned(),
        Value::Map(BTreeMap::from([("c".to_owned(), empty)])),
    );
    let back = roundtrip(&env);
    assert_eq!(back.payload, Payload::Value(Value::Null));
    assert_eq!(back.metadata.get("a"), Some(&Value::Null));
    assert_eq!(
        back.metadata.get("b"),
        Some(&Value::Map(BTreeMap::from([("c".to_owned(), Value::Null)])))
    );
    // An empty list stays a list.
    let back = roundtrip(&data(Payload::Value(Value::List(Vec::new()))));
    assert_eq!(back.payload, Payload::Value(Value::List(Vec::new())));
}

#[test]
fn metadata_refuses_tensors_anywhere() {
    let t = Value::Tensor(Tensor {
        shape: vec![1],
        dtype: "uint8".to_owned(),
        data: vec![7].into(),
    });
    for v in [t.clone(), Value::List(vec![Value::Int(1), t])] {
        let mut env = data(Payload::Value(Value::Null));
        env.metadata.insert("key".to_owned(), v);
        let err = encode(&env).err();
        assert_eq!(
            err,
            Some(EnvelopeError::MetadataTensor {
                key: "key".to_owned()
            })
        );
        assert_eq!(err.map(|e| e.code()), Some(CODE_ENCODE));
    }
}

#[test]
fn encoder_refuses_contradictions() {
    let eos_with_payload = Envelope {
        msg_type: MsgType::Eos,
        payload: Payload::Value(Value::Null),
        ..Envelope::default()
    };
    let data_without_payload = Envelope::default();
    let data_with_error = Envelope {
        error: Some(WireError::new("VF_X", "x")),
        ..data(Payload::Value(Value::Null))
    };
    let bad_tensor = data(Payload::Tensor(Tensor {
        shape: vec![3],
        dtype: "int32".to_owned(),
        data: vec![0; 4].into(),
    }));
    for env in [
        eos_with_payload,
        data_without_payload,
        data_with_error,
        bad_tensor,
    ] {
        let err = encode(&env).err();
        assert!(
            err.as_ref().is_some_and(EnvelopeError::is_encode),
            "{err:?}"
        );
        assert_eq!(err.map(|e| e.code()), Some(CODE_ENCODE));
    }
}

#[test]
fn abort_without_error_degrades_to_vf_unknown() {
    let env = Envelope {
        msg_type: MsgType::Abort,
        trace_id: "abort-r0".to_owned(),
        ..Envelope::default()
    };
    let back = roundtrip(&env);
    assert_eq!(back.error, Some(WireError::new(UNKNOWN_ERROR_CODE, "")));
    assert!(back.is_abort() && back.is_stop_signal());
}

#[test]
fn depth_limit_matches_what_decoders_accept() {
    for as_map in [false, true] {
        let deepest = nest(MAX_VALUE_DEPTH, as_map);
        let mut env = data(Payload::Value(deepest.clone()));
        env.metadata.insert("deep".to_owned(), deepest.clone());
        let back = roundtrip(&env);
        assert_eq!(back.payload, Payload::Value(deepest.clone()));
        assert_eq!(back.metadata.get("deep"), Some(&deepest));

        let too_deep = nest(MAX_VALUE_DEPTH + 1, as_map);
        let err = encode(&data(Payload::Value(too_deep.clone()))).err();
        assert_eq!(
            err,
            Some(EnvelopeError::TooDeep {
                max: MAX_VALUE_DEPTH
            })
        );
        let mut env = data(Payload::Value(Value::Null));
        env.metadata.insert("deep".to_owned(), too_deep);
        assert!(matches!(
            encode(&env).err(),
            Some(EnvelopeError::TooDeep { .. })
        ));
    }
    // A tensor at the deepest level still decodes.
    let t = Value::Tensor(Tensor {
        shape: vec![2],
        dtype: "uint8".to_owned(),
        data: vec![1, 2].into(),
    });
    let deep =
        (0..MAX_VALUE_DEPTH).fold(t, |v, _| Value::Map(BTreeMap::from([("k".to_owned(), v)])));
    let back = roundtrip(&data(Payload::Value(deep.clone())));
    assert_eq!(back.payload, Payload::Value(deep));
}

#[test]
fn header_fields_round_trip() {
    let env = Envelope {
        producer_name: "caméra-Ω".to_owned(),
        flow_id: "flujo".to_owned(),
        run_id: "ejecución".to_owned(),
        trace_id: "t".to_owned(),
        seq: u64::MAX,
        event_ts: Some(0.0),
        span_id: "s".to_owned(),
        parent_span_id: "p".to_owned(),
        replica_id: u32::MAX,
        ..data(Payload::Value(Value::Int(-1)))
    };
    assert_eq!(roundtrip(&env), env);
    // event_ts absent stays absent (not 0.0).
    let env = Envelope {
        event_ts: None,
        ..env
    };
    assert_eq!(roundtrip(&env).event_ts, None);
}

#[test]
fn msg_type_words() {
    assert_eq!(MsgType::Data.as_str(), "data");
    assert_eq!(MsgType::Eos.as_str(), "eos");
    assert_eq!(MsgType::Abort.as_str(), "abort");
}

/// BLOB-1: the segmented encoding is the contiguous one cut into pieces — for every payload
/// shape — and a large tensor's data travels as a view of the tensor's own buffer.
#[test]
fn blob_1_segments_concatenate_to_the_contiguous_encoding() {
    let frame = Tensor {
        shape: vec![480, 640, 3],
        dtype: "uint8".into(),
        data: (0..640 * 480 * 3)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into(),
    };
    let small = Tensor {
        shape: vec![2, 2],
        dtype: "float32".into(),
        data: vec![0u8; 16].into(),
    };
    let mut meta = BTreeMap::new();
    meta.insert("boxes".to_owned(), Value::Tensor(small.clone()));
    meta.insert("frame".to_owned(), Value::Tensor(frame.clone()));
    meta.insert("empty".to_owned(), Value::Map(BTreeMap::new()));
    let payloads = [
        Payload::Tensor(frame.clone()),
        Payload::Tensor(small),
        Payload::Value(Value::List(vec![
            Value::Int(7),
            Value::Tensor(frame.clone()),
        ])),
        Payload::Value(Value::Map(meta)),
        Payload::Value(Value::String("x".repeat(100_000))),
        Payload::Opaque {
            payload_type: "my.Type".into(),
            data: vec![1, 2, 3],
        },
    ];
    for p in &payloads {
        let (ty, whole) = encode_payload(p).expect("encodes");
        let (seg_ty, parts, len) = encode_payload_segments(p).expect("encodes");
        assert_eq!(seg_ty, ty);
        assert_eq!(len, whole.len());
        assert!(parts.iter().all(|s| !s.is_empty()), "no empty segment");
        assert_eq!(parts.concat(), whole, "{ty}");
    }
    let (_, parts, _) = encode_payload_segments(&payloads[2]).expect("encodes");
    assert!(
        parts
            .iter()
            .any(|s| s.as_ptr() == frame.data.as_ptr() && s.len() == frame.data.len()),
        "the frame's data is borrowed, not copied"
    );
}
