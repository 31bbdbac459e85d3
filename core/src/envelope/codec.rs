//! `encode` / `decode` of the whole envelope (WIRE-1, WIRE-3).

use std::collections::BTreeMap;

use prost::Message as _;

use super::error::EnvelopeError;
use super::payload::{BLOBREF_TYPE, Payload, decode_payload, encode_payload};
use super::proto;
use super::record::{Envelope, MsgType};
use super::value_codec::{value_from_proto, value_to_proto};
use super::wire_error::WireError;

/// The only envelope version this build encodes or decodes (WIRE-1).
pub const ENVELOPE_VERSION: u32 = 4;

/// True when `first_byte` opens a msgpack map (fixmap 0x80–0x8F, map16 0xDE, map32 0xDF):
/// the removed v2/v3 envelope. A v4 envelope starts with 0x08 (field 1, varint).
pub fn is_legacy_msgpack(first_byte: u8) -> bool {
    matches!(first_byte, 0x80..=0x8F | 0xDE | 0xDF)
}

/// Encodes an envelope to v4 wire bytes, fields in field-number order.
///
/// Rules beyond the schema: a DATA envelope needs a payload and carries no error record; a
/// terminator carries no payload; an ABORT always carries an error record — `None` degrades
/// to code `VF_UNKNOWN` with an empty message, and [`WireError::to_proto`] applies the
/// ABORT-1 truncation. Metadata values must not contain tensors (WIRE-15).
pub fn encode(env: &Envelope) -> Result<Vec<u8>, EnvelopeError> {
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
    let metadata = env
        .metadata
        .iter()
        .map(|(k, v)| {
            let v = value_to_proto(v, false).map_err(|e| e.in_metadata(k))?;
            Ok((k.clone(), v))
        })
        .collect::<Result<BTreeMap<_, _>, EnvelopeError>>()?;
    let wire = proto::Envelope {
        v: ENVELOPE_VERSION,
        r#type: wire_msg_type(env.msg_type) as i32,
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
    };
    Ok(wire.encode_to_vec())
}

/// Decodes v4 wire bytes, following WIRE-3 in order: empty buffer, legacy msgpack (refused
/// from the first byte), protobuf parse, version, message type, then metadata and payload.
///
/// Never panics, whatever the bytes; every failure is poison (`VF_POISON_DECODE`).
pub fn decode(buf: &[u8]) -> Result<Envelope, EnvelopeError> {
    peek(buf)?.hydrate()
}

/// An envelope whose header and metadata are decoded but whose payload is not (yet).
///
/// Why: a receiver decides ownership and replay scope from the header (PART-4, DELIV-16)
/// before paying for the payload it may never process. `blob` is already parsed so an
/// ack-and-skip can still release the reader's blob share (BLOB-6).
#[derive(Debug, Clone, PartialEq)]
pub struct Peeked {
    /// Every field but the payload, which is [`Payload::None`] here.
    pub header: Envelope,
    /// The payload's FQN (empty on terminators).
    pub payload_type: String,
    /// The encoded payload (empty on terminators).
    pub payload: Vec<u8>,
    /// The parsed reference when a DATA payload is a [`BLOBREF_TYPE`].
    pub blob: Option<proto::BlobRef>,
}

impl Peeked {
    /// The blob store key when the payload was offloaded.
    pub fn blob_ref(&self) -> Option<&str> {
        self.blob.as_ref().map(|b| b.r#ref.as_str())
    }

    /// Decodes the payload and returns the full envelope (terminators keep
    /// [`Payload::None`]).
    pub fn hydrate(self) -> Result<Envelope, EnvelopeError> {
        let mut env = self.header;
        if !env.msg_type.is_terminator() {
            env.payload = match self.blob {
                Some(blob) => Payload::BlobRef(blob),
                None => decode_payload(&self.payload_type, &self.payload)?,
            };
        }
        Ok(env)
    }
}

/// Decodes everything but the payload (WIRE-3 steps 1–6, and the BlobRef of step 7).
pub fn peek(buf: &[u8]) -> Result<Peeked, EnvelopeError> {
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
    let metadata = wire
        .metadata
        .into_iter()
        .map(|(k, v)| match value_from_proto(v) {
            Ok(v) => Ok((k, v)),
            Err(source) => Err(EnvelopeError::BadTensor {
                location: format!("metadata key {k:?}"),
                source,
            }),
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let header = Envelope {
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
        payload: Payload::None,
        error: wire.error.map(WireError::from_proto),
    };
    Ok(Peeked {
        header,
        payload_type: wire.payload_type,
        payload: wire.payload,
        blob,
    })
}

fn wire_msg_type(t: MsgType) -> proto::MsgType {
    match t {
        MsgType::Data => proto::MsgType::Data,
        MsgType::Eos => proto::MsgType::Eos,
        MsgType::Abort => proto::MsgType::Abort,
    }
}
