//! The decoded envelope record (WIRE-3) and its message type.

use std::collections::BTreeMap;

use super::payload::Payload;
use super::wire_error::WireError;
use crate::msgid::{MsgKind, msgid};
use crate::value::Value;

/// The only envelope version this build encodes or decodes (WIRE-1): the wire's `v`, which
/// is why [`Envelope`] has no version field.
pub const ENVELOPE_VERSION: u32 = 4;

/// The kind of envelope (`videoflow.v1.MsgType` without UNSPECIFIED, which is never valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MsgType {
    /// A data message with a payload.
    #[default]
    Data,
    /// Clean end of stream from one replica.
    Eos,
    /// Abnormal end of stream; carries an error record (ABORT-1).
    Abort,
}

impl MsgType {
    /// The protocol's word: `data`, `eos` or `abort`.
    pub fn as_str(self) -> &'static str {
        self.kind().as_str()
    }

    /// The kind used in the message id (MSGID-1).
    pub fn kind(self) -> MsgKind {
        match self {
            MsgType::Data => MsgKind::Data,
            MsgType::Eos => MsgKind::Eos,
            MsgType::Abort => MsgKind::Abort,
        }
    }

    /// True for EOS and ABORT: both mean "no more data from this producer replica".
    pub fn is_terminator(self) -> bool {
        !matches!(self, MsgType::Data)
    }
}

impl From<MsgType> for MsgKind {
    fn from(t: MsgType) -> Self {
        t.kind()
    }
}

/// One envelope, decoded (WIRE-3) or about to be encoded.
///
/// The wire's `v` is not a field: this build only speaks [`ENVELOPE_VERSION`]. `Default` gives
/// an empty DATA envelope with no payload, handy with struct-update syntax; encoding refuses it
/// until a payload is set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Envelope {
    /// The emitter's `VF_NODE_NAME`.
    pub producer_name: String,
    /// Raw flow id.
    pub flow_id: String,
    /// Raw run id.
    pub run_id: String,
    /// Lineage id (MSGID-5/6, or `eos-r{n}` / `abort-r{n}` on terminators).
    pub trace_id: String,
    /// Sequence number; may exceed 2^32.
    pub seq: u64,
    /// Event time in epoch seconds; `None` when absent on the wire (never 0.0 by default).
    pub event_ts: Option<f64>,
    /// DATA, EOS or ABORT.
    pub msg_type: MsgType,
    /// Span id; may be empty (1.0.4 always leaves it empty).
    pub span_id: String,
    /// Parent span id; may be empty.
    pub parent_span_id: String,
    /// The emitting replica.
    pub replica_id: u32,
    /// Metadata values; never tensors on encode (WIRE-15).
    pub metadata: BTreeMap<String, Value>,
    /// The message; [`Payload::None`] on terminators.
    pub payload: Payload,
    /// The error record; present only if the wire's field 15 is (set only on ABORT).
    pub error: Option<WireError>,
}

impl Envelope {
    /// True for EOS and ABORT (ABORT-3): a reader that only knows EOS still stops.
    pub fn is_stop_signal(&self) -> bool {
        self.msg_type.is_terminator()
    }

    /// True only for ABORT: what distinguishes a crash from a clean end.
    pub fn is_abort(&self) -> bool {
        self.msg_type == MsgType::Abort
    }

    /// The blob store key when the payload was offloaded (WIRE-3 step 7), so the receiver can
    /// release its share after the ack (BLOB-6).
    pub fn blob_ref(&self) -> Option<&str> {
        match &self.payload {
            Payload::BlobRef(b) => Some(&b.r#ref),
            _ => None,
        }
    }

    /// The `Nats-Msg-Id` this envelope is published under (MSGID-1).
    pub fn msg_id(&self) -> String {
        msgid(
            &self.flow_id,
            &self.run_id,
            &self.producer_name,
            &self.trace_id,
            self.seq,
            self.msg_type.kind(),
        )
    }
}
