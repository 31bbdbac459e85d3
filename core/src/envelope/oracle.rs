//! A second codec built on the prost-generated types alone: what the native codec
//! ([`super::wire`], [`super::fast`]) must agree with, byte for byte and error for error.
//!
//! Why it is not test-only: the property tests and the fuzz checks compare against the same
//! oracle, so the two can never drift apart. It is
//! the straightforward path the native one replaced (docs/PERFORMANCE.md, measurement 9):
//! slower, but with no code of its own that could share a bug with the fast path.

use std::collections::BTreeMap;

use prost::Message as _;

use super::codec::is_legacy_msgpack;
use super::error::EnvelopeError;
use super::payload::{
    BLOBREF_TYPE, DETECTIONS_TYPE, FRAME_TYPE, Payload, TENSOR_TYPE, TRACKS_TYPE, VALUE_TYPE,
};
use super::proto;
use super::record::{ENVELOPE_VERSION, Envelope, MsgType};
use super::tensor::tensor_to_proto;
use super::value_codec::{ValueEncodeError, value_from_proto, value_to_proto};
use super::wire_error::WireError;

/// [`super::encode_payload`] through the generated messages.
pub(super) fn encode_payload(payload: &Payload) -> Result<(String, Vec<u8>), EnvelopeError> {
    let data = match payload {
        Payload::None => {
            return Err(EnvelopeError::Inconsistent(
                "a DATA envelope needs a payload (Payload::None is for terminators)",
            ));
        }
        Payload::Tensor(t) => tensor_to_proto(t)
            .map_err(EnvelopeError::InvalidTensor)?
            .encode_to_vec(),
        Payload::Value(v) => value_to_proto(v, true)
            .map_err(ValueEncodeError::in_payload)?
            .encode_to_vec(),
        Payload::Frame(m) => m.encode_to_vec(),
        Payload::Detections(m) => m.encode_to_vec(),
        Payload::Tracks(m) => m.encode_to_vec(),
        Payload::BlobRef(m) => m.encode_to_vec(),
        Payload::Opaque { data, .. } => data.clone(),
    };
    Ok((payload.payload_type().unwrap_or_default().to_owned(), data))
}

/// [`super::encode`] through the generated messages.
pub(super) fn encode(env: &Envelope) -> Result<Vec<u8>, EnvelopeError> {
    let (payload_type, payload) = match env.msg_type {
        MsgType::Data => encode_payload(&env.payload)?,
        MsgType::Eos | MsgType::Abort => {
            if env.payload != Payload::None {
                return Err(EnvelopeError::Inconsistent(
                    "a terminator (EOS/ABORT) carries no payload",
                ));
            }
            (String::new(), Vec::new())
        }
    };
    let error = match env.msg_type {
        MsgType::Abort => Some(env.error.clone().unwrap_or_default().to_proto()),
        MsgType::Data | MsgType::Eos => {
            if env.error.is_some() {
                return Err(EnvelopeError::Inconsistent(
                    "only an ABORT carries an error record",
                ));
            }
            None
        }
    };
    let mut metadata = BTreeMap::new();
    for (k, v) in &env.metadata {
        let v = value_to_proto(v, false).map_err(|e| e.in_metadata(k))?;
        metadata.insert(k.clone(), v);
    }
    let r#type = match env.msg_type {
        MsgType::Data => proto::MsgType::Data,
        MsgType::Eos => proto::MsgType::Eos,
        MsgType::Abort => proto::MsgType::Abort,
    } as i32;
    Ok(proto::Envelope {
        v: ENVELOPE_VERSION,
        r#type,
        producer_name: env.producer_name.clone(),
        flow_id: env.flow_id.clone(),
        run_id: env.run_id.clone(),
        trace_id: env.trace_id.clone(),
        seq: env.seq,
        event_ts: env.event_ts,
        span_id: env.span_id.clone(),
        parent_span_id: env.parent_span_id.clone(),
        replica_id: env.replica_id,
        metadata,
        payload_type,
        payload,
        error,
    }
    .encode_to_vec())
}

/// [`super::decode_payload`] through the generated messages.
pub(super) fn decode_payload(payload_type: &str, data: &[u8]) -> Result<Payload, EnvelopeError> {
    let bad = |source| EnvelopeError::BadPayload {
        payload_type: payload_type.to_owned(),
        source,
    };
    let bad_tensor = |source| EnvelopeError::BadTensor {
        location: "payload".to_owned(),
        source,
    };
    Ok(match payload_type {
        TENSOR_TYPE => {
            let t = proto::Tensor::decode(data).map_err(bad)?;
            Payload::Tensor(t.try_into().map_err(bad_tensor)?)
        }
        VALUE_TYPE => {
            let v = proto::Value::decode(data).map_err(bad)?;
            Payload::Value(value_from_proto(v).map_err(bad_tensor)?)
        }
        FRAME_TYPE => Payload::Frame(proto::Frame::decode(data).map_err(bad)?),
        DETECTIONS_TYPE => Payload::Detections(proto::Detections::decode(data).map_err(bad)?),
        TRACKS_TYPE => Payload::Tracks(proto::Tracks::decode(data).map_err(bad)?),
        BLOBREF_TYPE => Payload::BlobRef(proto::BlobRef::decode(data).map_err(bad)?),
        _ => Payload::Opaque {
            payload_type: payload_type.to_owned(),
            data: data.to_vec(),
        },
    })
}

/// [`super::decode`] (WIRE-3) through the generated messages.
pub(super) fn decode(buf: &[u8]) -> Result<Envelope, EnvelopeError> {
    let first = *buf.first().ok_or(EnvelopeError::Empty)?;
    if is_legacy_msgpack(first) {
        return Err(EnvelopeError::LegacyMsgpack);
    }
    let wire = proto::Envelope::decode(buf).map_err(EnvelopeError::Protobuf)?;
    if wire.v != ENVELOPE_VERSION {
        return Err(EnvelopeError::UnsupportedVersion(wire.v));
    }
    let msg_type = match proto::MsgType::try_from(wire.r#type) {
        Ok(proto::MsgType::Data) => MsgType::Data,
        Ok(proto::MsgType::Eos) => MsgType::Eos,
        Ok(proto::MsgType::Abort) => MsgType::Abort,
        Ok(proto::MsgType::Unspecified) | Err(_) => {
            return Err(EnvelopeError::UnknownMsgType(wire.r#type));
        }
    };
    let blob = if !msg_type.is_terminator() && wire.payload_type == BLOBREF_TYPE {
        Some(
            proto::BlobRef::decode(wire.payload.as_slice()).map_err(|source| {
                EnvelopeError::BadPayload {
                    payload_type: BLOBREF_TYPE.to_owned(),
                    source,
                }
            })?,
        )
    } else {
        None
    };
    let mut metadata = BTreeMap::new();
    for (k, v) in wire.metadata {
        let v = value_from_proto(v).map_err(|source| EnvelopeError::BadTensor {
            location: format!("metadata key {k:?}"),
            source,
        })?;
        metadata.insert(k, v);
    }
    let payload = if msg_type.is_terminator() {
        Payload::None
    } else {
        match blob {
            Some(blob) => Payload::BlobRef(blob),
            None => decode_payload(&wire.payload_type, &wire.payload)?,
        }
    };
    Ok(Envelope {
        producer_name: wire.producer_name,
        flow_id: wire.flow_id,
        run_id: wire.run_id,
        trace_id: wire.trace_id,
        seq: wire.seq,
        event_ts: wire.event_ts,
        msg_type,
        span_id: wire.span_id,
        parent_span_id: wire.parent_span_id,
        replica_id: wire.replica_id,
        metadata,
        payload,
        error: wire.error.map(WireError::from_proto),
    })
}
