//! DATA payloads to and from their bytes (§4.3): [`encode_payload`], [`decode_payload`] and
//! [`decode_payload_bytes`], on their own because the blob offload (BLOB-1) encodes a payload
//! before any envelope exists and decodes a fetched blob after the envelope was read.

use bytes::Bytes;

use super::error::EnvelopeError;
use super::fast;
use super::payload::{
    BLOBREF_TYPE, DETECTIONS_TYPE, FRAME_TYPE, Payload, TENSOR_TYPE, TRACKS_TYPE, VALUE_TYPE,
};
use super::wire::{
    Segments, Sizes, WireTensor, WireValue, check_value, measure_payload, put_payload,
};

/// Encodes a DATA payload to its `(payload_type, bytes)` pair (§4.3).
///
/// Why public: the blob offload (BLOB-1) needs the encoded length before choosing between
/// inline bytes and a [`Payload::BlobRef`]. Fails for [`Payload::None`] (a DATA envelope
/// always carries a message) and for inconsistent or too-deep values. One allocation of the
/// exact length; an [`Payload::Opaque`] payload is copied once.
pub fn encode_payload(payload: &Payload) -> Result<(String, Vec<u8>), EnvelopeError> {
    let mut sizes = Sizes::default();
    let len = measure_payload(payload, &mut sizes)?;
    let mut data = Vec::with_capacity(len);
    put_payload(&mut data, payload, &mut sizes);
    let payload_type = payload.payload_type().unwrap_or_default().to_owned();
    Ok((payload_type, data))
}

/// [`encode_payload`] as segments whose concatenation is its bytes, tensor data of 64 KiB
/// or more borrowed from the payload rather than copied, with the encoded length.
///
/// Why: the payload store (BLOB-1) writes a large payload in pieces anyway; a 1080p frame
/// then reaches the store's client without a frame-sized copy of its own.
pub fn encode_payload_segments(
    payload: &Payload,
) -> Result<(String, Vec<Bytes>, usize), EnvelopeError> {
    let mut sizes = Sizes::default();
    let len = measure_payload(payload, &mut sizes)?;
    let mut out = Segments::default();
    put_payload(&mut out, payload, &mut sizes);
    let payload_type = payload.payload_type().unwrap_or_default().to_owned();
    Ok((payload_type, out.into_parts(), len))
}

/// Decodes DATA payload bytes by their `payload_type` (§4.3).
///
/// A [`BLOBREF_TYPE`] payload decodes to [`Payload::BlobRef`] (no I/O here); once the worker
/// has fetched the stored bytes it calls this again with `inner_payload_type`. Any FQN other
/// than the six well-known ones becomes [`Payload::Opaque`] (WIRE-9), including an empty one.
/// Tensor data is copied out of `data`; [`decode_payload_bytes`] slices it instead.
pub fn decode_payload(payload_type: &str, data: &[u8]) -> Result<Payload, EnvelopeError> {
    decode_payload_in(payload_type, data, None)
}

/// [`decode_payload`] from a [`Bytes`] buffer: tensor data (a bare tensor, tensors nested in
/// a value, the tensors of a Frame, Detections or Tracks) are slices of `data`, not copies.
///
/// Why: the envelope's payload and a blob fetched from the store are already `Bytes`; a
/// 1080p frame then costs no copy at all on the way in.
pub fn decode_payload_bytes(payload_type: &str, data: Bytes) -> Result<Payload, EnvelopeError> {
    decode_payload_in(payload_type, &data, Some(&data))
}

/// Decodes `data`; `owner`, when set, is the `Bytes` that `data` is (so bytes fields can be
/// sliced out of it). Values and tensors take the fast path ([`fast`]) and fall back to the
/// prost-driven decoder, which decides anything the fast path does not handle.
fn decode_payload_in(
    payload_type: &str,
    data: &[u8],
    owner: Option<&Bytes>,
) -> Result<Payload, EnvelopeError> {
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
            let t = match fast::tensor(data, owner) {
                Some(t) => t,
                None => prost_decode::<WireTensor>(data, owner).map_err(bad)?.0,
            };
            t.check().map_err(bad_tensor)?;
            Payload::Tensor(t)
        }
        VALUE_TYPE => {
            let (v, tensors) = match fast::value(data, owner) {
                Some(parsed) => parsed,
                None => (prost_decode::<WireValue>(data, owner).map_err(bad)?.0, true),
            };
            if tensors {
                check_value(&v).map_err(bad_tensor)?;
            }
            Payload::Value(v)
        }
        FRAME_TYPE => Payload::Frame(prost_decode(data, owner).map_err(bad)?),
        DETECTIONS_TYPE => Payload::Detections(prost_decode(data, owner).map_err(bad)?),
        TRACKS_TYPE => Payload::Tracks(prost_decode(data, owner).map_err(bad)?),
        BLOBREF_TYPE => Payload::BlobRef(prost_decode(data, owner).map_err(bad)?),
        _ => Payload::Opaque {
            payload_type: payload_type.to_owned(),
            data: data.to_vec(),
        },
    })
}

/// A prost decode of `data`, from the owning `Bytes` when there is one (bytes fields are then
/// slices, not copies).
fn prost_decode<M: prost::Message + Default>(
    data: &[u8],
    owner: Option<&Bytes>,
) -> Result<M, prost::DecodeError> {
    match owner {
        Some(bytes) => M::decode(bytes.clone()),
        None => M::decode(data),
    }
}
