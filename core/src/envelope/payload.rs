//! DATA payloads: what `payload_type` + `payload` carry (§4.3, WIRE-7..10), as native values.
//!
//! Only the model; `payload_codec` turns it into bytes and back.

use super::proto;
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
