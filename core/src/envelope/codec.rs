//! `encode` / `decode` of the whole envelope (WIRE-1, WIRE-3).

use bytes::Bytes;
use prost::Message as _;

use super::error::EnvelopeError;
use super::fast;
use super::payload::{BLOBREF_TYPE, Payload};
use super::payload_codec::decode_payload_bytes;
use super::proto;
use super::record::{ENVELOPE_VERSION, Envelope, MsgType};
use super::wire;
use super::wire_error::WireError;

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
///
/// Cost: one allocation of exactly the encoded length, every byte written once (tensor data
/// is a single copy; `envelope/wire.rs`).
pub fn encode(env: &Envelope) -> Result<Vec<u8>, EnvelopeError> {
    wire::encode_envelope(env)
}

/// Decodes v4 wire bytes, following WIRE-3 in order: empty buffer, legacy msgpack (refused
/// from the first byte), protobuf parse, version, message type, then metadata and payload.
///
/// Never panics, whatever the bytes; every failure is poison (`VF_POISON_DECODE`). The
/// payload is copied once out of `buf`; when the bytes are already a [`Bytes`] (a NATS
/// message payload), [`decode_bytes`] avoids even that copy.
pub fn decode(buf: &[u8]) -> Result<Envelope, EnvelopeError> {
    peek(buf)?.hydrate()
}

/// [`decode`] from a [`Bytes`] buffer, without copying the payload: tensor data (a
/// [`Payload::Tensor`], tensors nested in a value, a Frame's pixels) comes out as slices of
/// `buf`, which they keep alive.
///
/// Why a second entry point: a `&[u8]` cannot be sliced into owned buffers, so `decode` must
/// copy; the worker already holds each delivery as `Bytes` and should call this one. Same
/// rules, same results, same errors as [`decode`].
pub fn decode_bytes(buf: Bytes) -> Result<Envelope, EnvelopeError> {
    peek_bytes(buf)?.hydrate()
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
    /// The encoded payload (empty on terminators): a slice of the input of [`peek_bytes`],
    /// a copy out of the input of [`peek`].
    pub payload: Bytes,
    /// The parsed reference when a DATA payload is a [`BLOBREF_TYPE`].
    pub blob: Option<proto::BlobRef>,
}

impl Peeked {
    /// The blob store key when the payload was offloaded.
    pub fn blob_ref(&self) -> Option<&str> {
        self.blob.as_ref().map(|b| b.r#ref.as_str())
    }

    /// Decodes the payload and returns the full envelope (terminators keep
    /// [`Payload::None`]). Tensor data is sliced out of the payload, not copied.
    pub fn hydrate(self) -> Result<Envelope, EnvelopeError> {
        let mut env = self.header;
        if !env.msg_type.is_terminator() {
            env.payload = match self.blob {
                Some(blob) => Payload::BlobRef(blob),
                None => decode_payload_bytes(&self.payload_type, self.payload)?,
            };
        }
        Ok(env)
    }
}

/// Decodes everything but the payload (WIRE-3 steps 1–6, and the BlobRef of step 7).
///
/// The parse takes the fast path (`envelope/fast.rs`) and falls back to the prost-driven decoder
/// for anything it does not handle; the result is the same either way.
pub fn peek(buf: &[u8]) -> Result<Peeked, EnvelopeError> {
    check_first_byte(buf.first().copied())?;
    let wire = match fast::envelope(buf, None) {
        Some(wire) => wire,
        None => wire::WireEnvelope::decode(buf).map_err(EnvelopeError::Protobuf)?,
    };
    finish_peek(wire)
}

/// [`peek`] from a [`Bytes`] buffer: the payload is a slice of `buf`, not a copy.
pub fn peek_bytes(buf: Bytes) -> Result<Peeked, EnvelopeError> {
    check_first_byte(buf.first().copied())?;
    let wire = match fast::envelope(&buf, Some(&buf)) {
        Some(wire) => wire,
        None => wire::WireEnvelope::decode(buf).map_err(EnvelopeError::Protobuf)?,
    };
    finish_peek(wire)
}

/// WIRE-3 steps 1 and 2: an empty buffer, a legacy msgpack envelope.
fn check_first_byte(first: Option<u8>) -> Result<(), EnvelopeError> {
    let first = first.ok_or(EnvelopeError::Empty)?;
    if is_legacy_msgpack(first) {
        return Err(EnvelopeError::LegacyMsgpack);
    }
    Ok(())
}

/// WIRE-3 steps 4–6 on a parsed envelope, and the BlobRef of step 7.
fn finish_peek(wire: wire::WireEnvelope) -> Result<Peeked, EnvelopeError> {
    if wire.v != ENVELOPE_VERSION {
        return Err(EnvelopeError::UnsupportedVersion(wire.v));
    }
    let msg_type = match proto::MsgType::try_from(wire.msg_type) {
        Ok(proto::MsgType::Data) => MsgType::Data,
        Ok(proto::MsgType::Eos) => MsgType::Eos,
        Ok(proto::MsgType::Abort) => MsgType::Abort,
        Ok(proto::MsgType::Unspecified) | Err(_) => {
            return Err(EnvelopeError::UnknownMsgType(wire.msg_type));
        }
    };
    let blob = if !msg_type.is_terminator() && wire.payload_type == BLOBREF_TYPE {
        Some(
            proto::BlobRef::decode(wire.payload.clone()).map_err(|source| {
                EnvelopeError::BadPayload {
                    payload_type: BLOBREF_TYPE.to_owned(),
                    source,
                }
            })?,
        )
    } else {
        None
    };
    for (k, v) in &wire.metadata {
        wire::check_value(v).map_err(|source| EnvelopeError::BadTensor {
            location: format!("metadata key {k:?}"),
            source,
        })?;
    }
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
        metadata: wire.metadata,
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
