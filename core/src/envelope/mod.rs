//! The protobuf envelope v4 (WIRE-*): schema, encode, decode.
//!
//! Every DATA, EOS and ABORT publish is one `videoflow.v1.Envelope` (protocol §4). This module
//! is the only place that knows the bytes; the worker sees an [`Envelope`] record whose
//! payload is a native [`Payload`]. Why it must be exact: a Rust worker, a Python reference
//! worker (videoflow 1.0.4) and the operator exchange these bytes, and the golden vectors in
//! `shared/vectors/envelope` pin them.
//!
//! - [`decode`] follows WIRE-3 step by step and never panics; [`peek`] stops before the
//!   payload so ownership and replay decisions can come first. [`decode_bytes`] /
//!   [`peek_bytes`] do the same from a `Bytes` buffer without copying tensor data.
//! - [`encode`] writes fields in field-number order, encodes set oneof members even at their
//!   default, turns an empty map into a null value (1.0.4 parity), refuses tensors in
//!   metadata and applies the ABORT-1 truncation to the error record.
//! - Tensors: the twelve native dtypes are length-checked; any other dtype string is kept
//!   opaque (see [`tensor`]).
//! - Errors: [`EnvelopeError::code`] is `VF_POISON_DECODE` for every decode failure.
//! - `oracle` is the same codec over the generated types alone; the property tests and the
//!   fuzz checks (`fuzz`, hidden: for `fuzz/` and `core/tests/fuzz_regressions.rs` only)
//!   hold the native codec to it.

mod codec;
mod error;
mod fast;
#[doc(hidden)]
pub mod fuzz;
mod oracle;
mod payload;
mod payload_codec;
pub mod proto;
mod record;
pub mod tensor;
pub(crate) mod value_codec;
mod wire;
mod wire_error;

pub use codec::{Peeked, decode, decode_bytes, encode, is_legacy_msgpack, peek, peek_bytes};
pub use error::{CODE_DECODE, CODE_ENCODE, EnvelopeError, TensorError};
pub use payload::{
    BLOBREF_TYPE, DETECTIONS_TYPE, FRAME_TYPE, Payload, TENSOR_TYPE, TRACKS_TYPE, VALUE_TYPE,
};
pub use payload_codec::{
    decode_payload, decode_payload_bytes, encode_payload, encode_payload_segments,
};
pub use record::{ENVELOPE_VERSION, Envelope, MsgType};
pub use value_codec::MAX_VALUE_DEPTH;
pub use wire_error::{MAX_ERROR_TEXT_CHARS, UNKNOWN_ERROR_CODE, WireError};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_tests;
