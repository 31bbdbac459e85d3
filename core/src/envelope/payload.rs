//! DATA payloads: what `payload_type` + `payload` carry (§4.3, WIRE-7..10).

use prost::Message as _;

use super::error::EnvelopeError;
use super::proto;
use super::tensor::tensor_to_proto;
use super::value_codec::{ValueEncodeError, value_from_proto, value_to_proto};
use crate::value::{Tensor, Value};

/// FQN of a bare n-d array payload (WIRE-7).
pub const TENSOR_TYPE: &str = "videoflow.v1.Tensor";
/// FQN of a scalar/list/map payload (WIRE-10).
pub const VALUE_TYPE: &str = "videoflow.v1.Value";
/// FQN of the well-known frame message (WIRE-8).
pub const FRAME_TYPE: &str = "videoflow.v1.Frame";
/// FQN of the well-known detections message (WIRE-8).
pub const DETECTIONS_TYPE: &str = "videoflow.v1.Detections";
/// FQN of the well-known tracks message (WIRE-8).
pub const TRACKS_TYPE: &str = "videoflow.v1.Tracks";
/// FQN of an offloaded-payload reference (BLOB-1).
pub const BLOBREF_TYPE: &str = "videoflow.v1.BlobRef";

/// The message an envelope carries, decoded by its `payload_type`.
///
/// Why an enum rather than bytes: nodes get native values, and the wire stays the single
/// source of truth for which FQN maps to which shape. Well-known messages are the prost
/// structs, as 1.0.4 hands out its generated messages.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Payload {
    /// No message: the payload of a terminator (EOS/ABORT), whose `payload_type` and
    /// `payload` are empty on the wire.
    #[default]
    None,
    /// A bare n-d array (`videoflow.v1.Tensor`, WIRE-7).
    Tensor(Tensor),
    /// A scalar, list or map, possibly with nested tensors (`videoflow.v1.Value`, WIRE-10).
    Value(Value),
    /// A `videoflow.v1.Frame`.
    Frame(proto::Frame),
    /// A `videoflow.v1.Detections`.
    Detections(proto::Detections),
    /// A `videoflow.v1.Tracks`.
    Tracks(proto::Tracks),
    /// A reference to a payload offloaded to the blob store; resolve it only after the
    /// ownership and replay-scope decisions (WIRE-3 step 7, PART-4, DELIV-16).
    BlobRef(proto::BlobRef),
    /// A payload whose FQN this build does not know (WIRE-9): kept verbatim, never
    /// interpreted, and re-encoded to exactly the same type and bytes.
    Opaque {
        /// The fully-qualified name, as received.
        payload_type: String,
        /// The encoded message, as received.
        data: Vec<u8>,
    },
}

impl Payload {
    /// The `payload_type` this payload is encoded under; `None` for [`Payload::None`].
    pub fn payload_type(&self) -> Option<&str> {
        Some(match self {
            Payload::None => return None,
            Payload::Tensor(_) => TENSOR_TYPE,
            Payload::Value(_) => VALUE_TYPE,
            Payload::Frame(_) => FRAME_TYPE,
            Payload::Detections(_) => DETECTIONS_TYPE,
            Payload::Tracks(_) => TRACKS_TYPE,
            Payload::BlobRef(_) => BLOBREF_TYPE,
            Payload::Opaque { payload_type, .. } => payload_type,
        })
    }
}

/// Encodes a DATA payload to its `(payload_type, bytes)` pair (§4.3).
///
/// Why public: the blob offload (BLOB-1) needs the encoded length before choosing between
/// inline bytes and a [`Payload::BlobRef`]. Fails for [`Payload::None`] (a DATA envelope
/// always carries a message) and for inconsistent or too-deep values.
pub fn encode_payload(payload: &Payload) -> Result<(String, Vec<u8>), EnvelopeError> {
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
    let payload_type = payload.payload_type().unwrap_or_default().to_owned();
    Ok((payload_type, data))
}

/// Decodes DATA payload bytes by their `payload_type` (§4.3).
///
/// A [`BLOBREF_TYPE`] payload decodes to [`Payload::BlobRef`] (no I/O here); once the worker
/// has fetched the stored bytes it calls this again with `inner_payload_type`. Any FQN other
/// than the six well-known ones becomes [`Payload::Opaque`] (WIRE-9), including an empty one.
pub fn decode_payload(payload_type: &str, data: &[u8]) -> Result<Payload, EnvelopeError> {
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
