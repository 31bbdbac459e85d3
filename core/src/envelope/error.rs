//! Why an envelope could not be encoded or decoded.

use thiserror::Error;

/// The protocol code of every decode failure: an undecodable delivery is poison, classified
/// before any node sees it (DELIV-9 / DELIV-15).
pub const CODE_DECODE: &str = "VF_POISON_DECODE";

/// The protocol code of every encode failure.
///
/// Why `VF_POISON_SCHEMA`: an encode failure is a property of the value a node produced (a
/// tensor in metadata, an inconsistent tensor, a too-deep value, an envelope whose parts
/// contradict each other); resending the same value fails the same way, so it is a schema
/// violation of the data, not a blip. Note that 1.0.4 raises an untyped error here and lets
/// `VF_ON_ERROR` classify it (JOIN-20); a worker mirroring that should use
/// [`EnvelopeError::is_encode`] rather than this code.
pub const CODE_ENCODE: &str = "VF_POISON_SCHEMA";

/// A tensor whose shape, dtype and data do not agree.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TensorError {
    /// A dimension below zero: no array has one.
    #[error("tensor shape {shape:?} has a negative dimension")]
    NegativeDimension {
        /// The offending shape.
        shape: Vec<i64>,
    },
    /// `product(shape) × itemsize` does not fit in memory addresses.
    #[error("tensor shape {shape:?} is too large to address")]
    TooLarge {
        /// The offending shape.
        shape: Vec<i64>,
    },
    /// The buffer is not `product(shape) × itemsize` bytes long.
    #[error("tensor data is {actual} bytes, but shape {shape:?} of dtype {dtype} needs {expected}")]
    DataLength {
        /// The dtype name.
        dtype: String,
        /// The shape.
        shape: Vec<i64>,
        /// `product(shape) × itemsize`.
        expected: usize,
        /// The buffer length on the wire.
        actual: usize,
    },
}

/// Every way encoding or decoding an envelope (or a payload) can fail.
///
/// Decode variants carry the texts of the reference decoder (WIRE-3) so that DLQ records and
/// logs read the same in both runtimes; [`code`](Self::code) gives the stable protocol code.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EnvelopeError {
    /// WIRE-3 step 1: a zero-length buffer.
    #[error("Cannot decode an empty envelope buffer")]
    Empty,
    /// WIRE-3 step 2 / WIRE-1: the first byte is a msgpack map header, i.e. a removed v2/v3
    /// envelope. Refused from the first byte, never parsed.
    #[error(
        "Refusing to decode a legacy msgpack (v2/v3) envelope: that wire has been removed. \
         Re-emit the message on the protobuf v4 wire."
    )]
    LegacyMsgpack,
    /// WIRE-3 step 3: the bytes are not a protobuf `videoflow.v1.Envelope`.
    #[error("Cannot parse the protobuf v4 envelope: {0}")]
    Protobuf(#[source] prost::DecodeError),
    /// WIRE-3 step 4: `v` is not 4.
    #[error("Unsupported protobuf envelope version {0}; expected 4")]
    UnsupportedVersion(u32),
    /// WIRE-3 step 5: `type` is UNSPECIFIED or a value this build does not know.
    #[error("Unspecified/unknown envelope message type {0}")]
    UnknownMsgType(i32),
    /// The payload bytes do not parse as the message `payload_type` names.
    #[error("Cannot decode the {payload_type} payload: {source}")]
    BadPayload {
        /// The payload's fully-qualified name.
        payload_type: String,
        /// The protobuf failure.
        #[source]
        source: prost::DecodeError,
    },
    /// A decoded tensor (payload, nested value or metadata) is inconsistent.
    #[error("Undecodable tensor in {location}: {source}")]
    BadTensor {
        /// Where the tensor sat: `payload` or `metadata key <k>`.
        location: String,
        /// What is wrong with it.
        #[source]
        source: TensorError,
    },
    /// Encode: WIRE-15 forbids tensors in metadata (1.0.4 raises the same).
    #[error(
        "Cannot put a tensor in message metadata (key {key:?}): metadata is for small \
         scalars/strings, not payload arrays. Send the tensor as the payload (or a field of \
         the payload) instead."
    )]
    MetadataTensor {
        /// The top-level metadata key whose value holds the tensor.
        key: String,
    },
    /// Encode: a tensor to send is inconsistent, so every decoder would refuse it.
    #[error("Cannot encode an inconsistent tensor: {0}")]
    InvalidTensor(#[source] TensorError),
    /// Encode: the value nests lists/maps deeper than decoders accept (protobuf recursion
    /// limits), so it would arrive as an undecodable message.
    #[error("Cannot encode a value nested deeper than {max} lists/maps: decoders refuse it")]
    TooDeep {
        /// The deepest nesting accepted.
        max: usize,
    },
    /// Encode: the envelope's parts contradict each other (e.g. an EOS with a payload).
    #[error("Cannot encode the envelope: {0}")]
    Inconsistent(&'static str),
}

impl EnvelopeError {
    /// The stable protocol code: [`CODE_DECODE`] for decode failures, [`CODE_ENCODE`] for
    /// encode failures.
    pub fn code(&self) -> &'static str {
        if self.is_encode() {
            CODE_ENCODE
        } else {
            CODE_DECODE
        }
    }

    /// True for encode failures (of an envelope or of a payload).
    pub fn is_encode(&self) -> bool {
        matches!(
            self,
            Self::MetadataTensor { .. }
                | Self::InvalidTensor(_)
                | Self::TooDeep { .. }
                | Self::Inconsistent(_)
        )
    }

    /// True for decode failures: the delivery is poison
    /// (`VF_POISON_DECODE`).
    pub fn is_decode(&self) -> bool {
        !self.is_encode()
    }
}
