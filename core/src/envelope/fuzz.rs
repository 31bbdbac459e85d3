//! What the fuzz targets (`fuzz/fuzz_targets/envelope*.rs`, `payload.rs`) check on every
//! input, and what `core/tests/fuzz_regressions.rs` replays on every saved input.
//!
//! Why the checks live here and not in the fuzz crate: the targets and the stable replay must
//! run exactly the same code, or a fixed crash could come back unnoticed; and the checks
//! reach the two private decoders (the slice parser in `fast` and the prost-driven fallback
//! in `wire`) that must agree. Each function panics, with what disagreed, on a violated
//! property; that panic is what the fuzzer reports as a crash. Properties:
//!
//! - a decode never panics, and every failure is a decode error (`VF_POISON_DECODE`);
//! - `decode`, `decode_bytes`, `peek` + `hydrate` and `peek_bytes` + `hydrate` give the same
//!   result, and so does the decoder built on the generated types alone ([`super::oracle`]);
//! - where the fast path takes the bytes, the prost-driven fallback reads the same fields;
//! - what decodes re-encodes to the bytes the generated types write, those bytes decode, and
//!   from the second round on decode + encode gives the same bytes (the first round may turn
//!   an empty map into null, as §4.2 says it arrives).
//!
//! Results are compared through their `Debug` text: it shows every field (a NaN equals a NaN,
//! `-0.0` differs from `0.0`), where `PartialEq` would call two NaN payloads different.

use bytes::Bytes;
use prost::Message as _;

use super::codec::{decode, decode_bytes, encode, peek, peek_bytes};
use super::fast;
use super::oracle;
use super::payload::{
    BLOBREF_TYPE, DETECTIONS_TYPE, FRAME_TYPE, Payload, TENSOR_TYPE, TRACKS_TYPE, VALUE_TYPE,
};
use super::payload_codec::{decode_payload, decode_payload_bytes, encode_payload};
use super::record::{Envelope, MsgType};
use super::wire::{WireEnvelope, WireTensor, WireValue};

/// The payload types [`payload`] picks from with its first byte: the six well-known FQNs,
/// an unknown one (opaque, WIRE-9) and the empty one.
pub const PAYLOAD_TYPES: [&str; 8] = [
    VALUE_TYPE,
    TENSOR_TYPE,
    FRAME_TYPE,
    DETECTIONS_TYPE,
    TRACKS_TYPE,
    BLOBREF_TYPE,
    "vendor.v1.Opaque",
    "",
];

/// Panics with `what` and both sides unless `a` and `b` print alike.
fn same<A: std::fmt::Debug, B: std::fmt::Debug>(what: &str, a: &A, b: &B) {
    let (a, b) = (format!("{a:?}"), format!("{b:?}"));
    assert!(a == b, "{what} disagree:\n  {a}\n  {b}");
}

/// Every check on raw envelope bytes (the `envelope` target).
pub fn envelope(data: &[u8]) {
    let owned = Bytes::copy_from_slice(data);
    let decoded = decode(data);
    same(
        "decode and decode_bytes",
        &decoded,
        &decode_bytes(owned.clone()),
    );
    same(
        "the native decoder and the generated types",
        &decoded,
        &oracle::decode(data),
    );
    let peeked = peek(data);
    same("peek and peek_bytes", &peeked, &peek_bytes(owned.clone()));
    match peeked {
        Ok(p) => {
            payload_paths(&p.payload_type, &p.payload);
            same("peek + hydrate and decode", &p.hydrate(), &decoded);
        }
        Err(e) => same("a failed peek and decode", &Err::<(), _>(e), &decoded),
    }
    if let Some(fast) = fast::envelope(data, None) {
        same(
            "the fast path and the prost-driven decoder",
            &Ok::<_, prost::DecodeError>(&fast),
            &WireEnvelope::decode(data).as_ref(),
        );
        same(
            "the fast path from a slice and from Bytes",
            &Some(&fast),
            &fast::envelope(&owned, Some(&owned)).as_ref(),
        );
    }
    match decoded {
        Ok(env) => reencode(&env),
        Err(e) => assert!(e.is_decode(), "a decode failed with an encode error: {e:?}"),
    }
}

/// Every check on a generated envelope (the `envelope_model` target): the native encoder
/// writes what the generated types write, and the bytes pass [`envelope`].
pub fn envelope_model(env: &Envelope) {
    let bytes = encode(env);
    same(
        "the native encoder and the generated types",
        &bytes,
        &oracle::encode(env),
    );
    match bytes {
        Ok(bytes) => {
            let back = decode(&bytes);
            assert!(
                back.is_ok(),
                "an encoded envelope does not decode: {back:?}"
            );
            envelope(&bytes);
        }
        Err(e) => assert!(e.is_encode(), "an encode failed with a decode error: {e:?}"),
    }
}

/// Every check on raw payload bytes (the `payload` target): the first byte picks one of
/// [`PAYLOAD_TYPES`], the rest is the payload.
pub fn payload(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let payload_type = PAYLOAD_TYPES[usize::from(pick) % PAYLOAD_TYPES.len()];
    let decoded = decode_payload(payload_type, body);
    same(
        "decode_payload and decode_payload_bytes",
        &decoded,
        &decode_payload_bytes(payload_type, Bytes::copy_from_slice(body)),
    );
    same(
        "the native payload decoder and the generated types",
        &decoded,
        &oracle::decode_payload(payload_type, body),
    );
    payload_paths(payload_type, body);
    match decoded {
        Ok(p) => reencode_payload(payload_type, &p),
        Err(e) => assert!(e.is_decode(), "a decode failed with an encode error: {e:?}"),
    }
}

/// The fast path and the prost-driven fallback on a value or tensor payload.
fn payload_paths(payload_type: &str, body: &[u8]) {
    let owned = Bytes::copy_from_slice(body);
    match payload_type {
        VALUE_TYPE => {
            if let Some((v, _)) = fast::value(body, None) {
                same(
                    "the fast path and the prost-driven decoder (value)",
                    &Ok::<_, prost::DecodeError>(&v),
                    &WireValue::decode(body).as_ref().map(|w| &w.0),
                );
                same(
                    "the fast path from a slice and from Bytes (value)",
                    &Some(&v),
                    &fast::value(&owned, Some(&owned)).as_ref().map(|(v, _)| v),
                );
            }
        }
        TENSOR_TYPE => {
            if let Some(t) = fast::tensor(body, None) {
                same(
                    "the fast path and the prost-driven decoder (tensor)",
                    &Ok::<_, prost::DecodeError>(&t),
                    &WireTensor::decode(body).as_ref().map(|w| &w.0),
                );
                same(
                    "the fast path from a slice and from Bytes (tensor)",
                    &Some(&t),
                    &fast::tensor(&owned, Some(&owned)).as_ref(),
                );
            }
        }
        _ => {}
    }
}

/// A decoded envelope re-encoded: the native and generated encoders agree; what they write
/// decodes, and from the second round on, encoding what decodes gives the same bytes.
///
/// Why the second round: an empty map is encoded as a value with no member, which decodes as
/// null (§4.2: `{"a": {}}` arrives as `{"a": null}`), and null is encoded as an explicit
/// `null_value` — so the first re-encode may differ from the input's, the next ones may not.
fn reencode(env: &Envelope) {
    let Some(first) = reencode_once(env) else {
        return;
    };
    let again = decoded(&first);
    let Some(second) = reencode_once(&again) else {
        panic!("an envelope encoded once does not encode again: {again:?}");
    };
    let third = reencode_once(&decoded(&second));
    same("a re-encode and the next one", &third, &Some(second));
}

fn decoded(bytes: &[u8]) -> Envelope {
    match decode(bytes) {
        Ok(env) => env,
        Err(e) => panic!("an encoded envelope does not decode: {e:?}"),
    }
}

/// `env` encoded, checked against the generated types; `None` when it is refused (what
/// decodes need not encode: a tensor in metadata (WIRE-15), an error record on DATA, a value
/// nested deeper than encoders write — each an encode error).
fn reencode_once(env: &Envelope) -> Option<Vec<u8>> {
    let bytes = encode(env);
    same(
        "the native encoder and the generated types (re-encode)",
        &bytes,
        &oracle::encode(env),
    );
    match bytes {
        Ok(bytes) => {
            let again = decoded(&bytes);
            assert_eq!(again.msg_type, env.msg_type, "the message type survives");
            if env.msg_type != MsgType::Data {
                assert_eq!(
                    again.payload,
                    Payload::None,
                    "a terminator keeps no payload"
                );
            }
            Some(bytes)
        }
        Err(e) => {
            assert!(
                e.is_encode(),
                "a re-encode failed with a decode error: {e:?}"
            );
            None
        }
    }
}

/// A decoded payload re-encoded, as [`reencode`]: the native and generated encoders agree,
/// the type is the one it was decoded as, and from the second round on the bytes are stable.
fn reencode_payload(payload_type: &str, p: &Payload) {
    let Some(first) = reencode_payload_once(payload_type, p) else {
        return;
    };
    let again = decoded_payload(payload_type, &first);
    let Some(second) = reencode_payload_once(payload_type, &again) else {
        panic!("a payload encoded once does not encode again: {again:?}");
    };
    let third = reencode_payload_once(payload_type, &decoded_payload(payload_type, &second));
    same(
        "a payload re-encode and the next one",
        &third,
        &Some(second),
    );
}

fn decoded_payload(payload_type: &str, bytes: &[u8]) -> Payload {
    match decode_payload(payload_type, bytes) {
        Ok(p) => p,
        Err(e) => panic!("an encoded payload does not decode: {e:?}"),
    }
}

fn reencode_payload_once(payload_type: &str, p: &Payload) -> Option<Vec<u8>> {
    let encoded = encode_payload(p);
    same(
        "the native payload encoder and the generated types",
        &encoded,
        &oracle::encode_payload(p),
    );
    match encoded {
        Ok((ty, bytes)) => {
            assert_eq!(ty, payload_type, "a payload keeps its type");
            Some(bytes)
        }
        Err(e) => {
            assert!(
                e.is_encode(),
                "a payload re-encode failed with a decode error: {e:?}"
            );
            None
        }
    }
}
