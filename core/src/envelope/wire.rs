//! The envelope's hot path: native values to bytes and back, with no intermediate prost
//! structs (docs/PERFORMANCE.md, measurement 9).
//!
//! Why not the generated types: encoding through them cloned every string, tensor and map
//! into a `proto::Value` tree, encoded the payload into its own `Vec` and copied that into the
//! envelope; decoding built the proto tree and then rebuilt every map and list as native
//! values. Here an encode measures once (validating as it goes), reserves the exact length
//! and writes each byte once — tensor data is one `extend_from_slice`; a decode parses
//! straight into [`Value`] / [`Tensor`], and from a `Bytes` input tensor data is a slice of
//! the input, never a copy.
//!
//! Exactness: the bytes are those prost writes for the same message (fields in number order,
//! proto3 defaults skipped, set oneof members always written, packed `shape`, a map entry's
//! empty key and default value left out, as `prost::encoding::btree_map` does); the unit tests
//! compare both encoders on generated envelopes and the golden vectors pin the result.
//!
//! Decoding has two tiers. The fast path (`fast.rs`) parses the plain encoding from a slice
//! and gives up on anything unusual; the decoder here then decides. It reuses prost's own
//! merge functions (`prost::encoding`) through small decode-only `Message` impls, so what it
//! accepts or refuses, its recursion limit and its error texts are prost's; tensors are
//! checked after the parse, in the order `value_codec::value_from_proto` checks them.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut as _, Bytes};
use prost::encoding::{
    self, DecodeContext, WireType, encode_key, encode_varint, encoded_len_varint, key_len,
};
use prost::{DecodeError, Message};

use super::error::{EnvelopeError, TensorError};
use super::payload::Payload;
use super::proto;
use super::record::{ENVELOPE_VERSION, Envelope, MsgType};
use super::value_codec::{MAX_VALUE_DEPTH, ValueEncodeError};
use crate::value::{Tensor, Value};

// -- encode ----------------------------------------------------------------------------------

/// Length of a length-delimited field: key, length varint, body.
fn delimited_len(tag: u32, body: usize) -> usize {
    key_len(tag) + encoded_len_varint(body as u64) + body
}

/// Length of a proto3 string/bytes field, which is left out when empty.
fn str_field_len(tag: u32, s: &[u8]) -> usize {
    if s.is_empty() {
        0
    } else {
        delimited_len(tag, s.len())
    }
}

fn put_str_field(buf: &mut Vec<u8>, tag: u32, s: &[u8]) {
    if !s.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(s.len() as u64, buf);
        buf.extend_from_slice(s);
    }
}

fn put_varint_field(buf: &mut Vec<u8>, tag: u32, v: u64) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Body length of a `videoflow.v1.Tensor`: packed `shape`, `dtype`, `data`.
fn tensor_body_len(t: &Tensor) -> usize {
    let shape = if t.shape.is_empty() {
        0
    } else {
        let packed: usize = t.shape.iter().map(|&d| encoded_len_varint(d as u64)).sum();
        delimited_len(1, packed)
    };
    shape + str_field_len(2, t.dtype.as_bytes()) + str_field_len(3, &t.data)
}

/// Where an encode writes: one contiguous buffer, or [`Segments`] that borrow large tensor
/// data instead of copying it. Everything but tensor data goes through [`Out::buf`].
pub(super) trait Out {
    /// The buffer small fields are written to.
    fn buf(&mut self) -> &mut Vec<u8>;

    /// A tensor's `data` bytes (their field key and length are already written).
    fn tensor_data(&mut self, data: &Bytes) {
        self.buf().extend_from_slice(data);
    }
}

impl Out for Vec<u8> {
    fn buf(&mut self) -> &mut Vec<u8> {
        self
    }
}

/// Tensor data at least this long is borrowed by [`Segments`], not copied.
const BORROW_AT_LEAST: usize = 64 * 1024;

/// An encoding as a list of byte strings whose concatenation is the contiguous encoding:
/// small fields copied into owned segments, large tensor data borrowed (a reference-counted
/// view of the tensor's own buffer).
///
/// Why: a 1080p frame offloaded to the payload store (BLOB-1) is 6 MB that the store's client
/// copies anyway; encoding it into one contiguous buffer first only added a copy and a
/// frame-sized allocation per publication.
#[derive(Debug, Default)]
pub(super) struct Segments {
    done: Vec<Bytes>,
    current: Vec<u8>,
}

impl Segments {
    /// The segments, in order (none empty).
    pub(super) fn into_parts(mut self) -> Vec<Bytes> {
        self.flush();
        self.done
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.done
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
    }
}

impl Out for Segments {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.current
    }

    fn tensor_data(&mut self, data: &Bytes) {
        if data.len() < BORROW_AT_LEAST {
            self.current.extend_from_slice(data);
        } else {
            self.flush();
            self.done.push(data.clone());
        }
    }
}

fn put_tensor_body(out: &mut impl Out, t: &Tensor) {
    let buf = out.buf();
    if !t.shape.is_empty() {
        let packed: usize = t.shape.iter().map(|&d| encoded_len_varint(d as u64)).sum();
        encode_key(1, WireType::LengthDelimited, buf);
        encode_varint(packed as u64, buf);
        for &d in &t.shape {
            encode_varint(d as u64, buf);
        }
    }
    put_str_field(buf, 2, t.dtype.as_bytes());
    if !t.data.is_empty() {
        encode_key(3, WireType::LengthDelimited, buf);
        encode_varint(t.data.len() as u64, buf);
        out.tensor_data(&t.data);
    }
}

/// The body lengths of the lists and non-empty maps of one value tree, in pre-order.
///
/// Why: a nested message is prefixed by its length, so a one-pass writer needs every nested
/// length before it writes the parent. Measuring once and replaying the lengths in the same
/// order keeps an encode linear in the size of the value (prost re-measures at every level).
#[derive(Default)]
pub(super) struct Sizes {
    lens: Vec<usize>,
    next: usize,
}

impl Sizes {
    /// The length recorded for the container the writer is about to enter.
    fn peek(&self) -> usize {
        self.lens.get(self.next).copied().unwrap_or_default()
    }

    fn take(&mut self) -> usize {
        let len = self.peek();
        self.next += 1;
        len
    }
}

/// Length of `v` as a `videoflow.v1.Value` message (its `kind` member; 0 for an empty map,
/// which travels with no member set) — and the validation `value_codec::value_to_proto` does, in
/// the same order: depth before children, tensors refused before they are checked.
pub(super) fn measure_value(
    v: &Value,
    allow_tensor: bool,
    depth: usize,
    sizes: &mut Sizes,
) -> Result<usize, ValueEncodeError> {
    Ok(match v {
        Value::Null | Value::Bool(_) => 2,
        Value::Int(i) => 1 + encoded_len_varint(zigzag(*i)),
        Value::Double(_) => 9,
        Value::String(s) => delimited_len(4, s.len()),
        Value::Bytes(b) => delimited_len(5, b.len()),
        Value::List(items) => {
            if depth >= MAX_VALUE_DEPTH {
                return Err(ValueEncodeError::TooDeep);
            }
            let slot = sizes.lens.len();
            sizes.lens.push(0);
            let mut body = 0;
            for item in items {
                body += delimited_len(1, measure_value(item, allow_tensor, depth + 1, sizes)?);
            }
            sizes.lens[slot] = body;
            delimited_len(7, body)
        }
        // 1.0.4 parity: an empty map is a Value with no member set (it arrives as null).
        Value::Map(m) if m.is_empty() => 0,
        Value::Map(m) => {
            if depth >= MAX_VALUE_DEPTH {
                return Err(ValueEncodeError::TooDeep);
            }
            let slot = sizes.lens.len();
            sizes.lens.push(0);
            let mut body = 0;
            for (k, x) in m {
                let entry = entry_len(k, measure_value(x, allow_tensor, depth + 1, sizes)?);
                body += delimited_len(1, entry);
            }
            sizes.lens[slot] = body;
            delimited_len(8, body)
        }
        Value::Tensor(t) => {
            if !allow_tensor {
                return Err(ValueEncodeError::TensorNotAllowed);
            }
            t.check().map_err(ValueEncodeError::Tensor)?;
            delimited_len(9, tensor_body_len(t))
        }
    })
}

/// Length of a `map<string, Value>` entry body: prost leaves out an empty key and a value
/// equal to the default (no member set, i.e. a message length of 0).
fn entry_len(key: &str, value_len: usize) -> usize {
    let key = str_field_len(1, key.as_bytes());
    let value = if value_len == 0 {
        0
    } else {
        delimited_len(2, value_len)
    };
    key + value
}

/// [`measure_value`]'s result again, from the recorded sizes (nothing re-walked).
fn value_len(v: &Value, sizes: &Sizes) -> usize {
    match v {
        Value::List(_) => delimited_len(7, sizes.peek()),
        Value::Map(m) if !m.is_empty() => delimited_len(8, sizes.peek()),
        Value::Map(_) => 0,
        Value::Tensor(t) => delimited_len(9, tensor_body_len(t)),
        Value::Null | Value::Bool(_) => 2,
        Value::Int(i) => 1 + encoded_len_varint(zigzag(*i)),
        Value::Double(_) => 9,
        Value::String(s) => delimited_len(4, s.len()),
        Value::Bytes(b) => delimited_len(5, b.len()),
    }
}

/// Writes `v` as a `videoflow.v1.Value` message body; [`measure_value`] ran first.
pub(super) fn put_value(out: &mut impl Out, v: &Value, sizes: &mut Sizes) {
    let buf = out.buf();
    match v {
        Value::Null => {
            encode_key(1, WireType::Varint, buf);
            buf.push(0);
        }
        Value::Double(d) => {
            encode_key(2, WireType::SixtyFourBit, buf);
            buf.put_f64_le(*d);
        }
        Value::Int(i) => {
            encode_key(3, WireType::Varint, buf);
            encode_varint(zigzag(*i), buf);
        }
        Value::String(s) => {
            encode_key(4, WireType::LengthDelimited, buf);
            encode_varint(s.len() as u64, buf);
            buf.extend_from_slice(s.as_bytes());
        }
        Value::Bytes(b) => {
            encode_key(5, WireType::LengthDelimited, buf);
            encode_varint(b.len() as u64, buf);
            buf.extend_from_slice(b);
        }
        Value::Bool(b) => {
            encode_key(6, WireType::Varint, buf);
            buf.push(u8::from(*b));
        }
        Value::List(items) => {
            encode_key(7, WireType::LengthDelimited, buf);
            encode_varint(sizes.take() as u64, buf);
            for item in items {
                let buf = out.buf();
                encode_key(1, WireType::LengthDelimited, buf);
                encode_varint(value_len(item, sizes) as u64, buf);
                put_value(out, item, sizes);
            }
        }
        Value::Map(m) if m.is_empty() => {}
        Value::Map(m) => {
            encode_key(8, WireType::LengthDelimited, buf);
            encode_varint(sizes.take() as u64, buf);
            put_entries(out, 1, m, sizes);
        }
        Value::Tensor(t) => {
            encode_key(9, WireType::LengthDelimited, buf);
            encode_varint(tensor_body_len(t) as u64, buf);
            put_tensor_body(out, t);
        }
    }
}

/// Writes the entries of a `map<string, Value>` field numbered `tag`.
fn put_entries(out: &mut impl Out, tag: u32, m: &BTreeMap<String, Value>, sizes: &mut Sizes) {
    for (k, x) in m {
        let vlen = value_len(x, sizes);
        let buf = out.buf();
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(entry_len(k, vlen) as u64, buf);
        put_str_field(buf, 1, k.as_bytes());
        if vlen != 0 {
            encode_key(2, WireType::LengthDelimited, buf);
            encode_varint(vlen as u64, buf);
            put_value(out, x, sizes);
        }
    }
}

/// Validates a DATA payload and returns its encoded length (the envelope's `payload` bytes).
pub(super) fn measure_payload(p: &Payload, sizes: &mut Sizes) -> Result<usize, EnvelopeError> {
    Ok(match p {
        Payload::None => {
            return Err(EnvelopeError::Inconsistent(
                "a DATA envelope needs a payload (Payload::None is for terminators)",
            ));
        }
        Payload::Tensor(t) => {
            t.check().map_err(EnvelopeError::InvalidTensor)?;
            tensor_body_len(t)
        }
        Payload::Value(v) => {
            measure_value(v, true, 0, sizes).map_err(ValueEncodeError::in_payload)?
        }
        Payload::Frame(m) => m.encoded_len(),
        Payload::Detections(m) => m.encoded_len(),
        Payload::Tracks(m) => m.encoded_len(),
        Payload::BlobRef(m) => m.encoded_len(),
        Payload::Opaque { data, .. } => data.len(),
    })
}

/// Writes a payload [`measure_payload`] accepted.
pub(super) fn put_payload(out: &mut impl Out, p: &Payload, sizes: &mut Sizes) {
    match p {
        Payload::None => {}
        Payload::Tensor(t) => put_tensor_body(out, t),
        Payload::Value(v) => put_value(out, v, sizes),
        Payload::Frame(m) => m.encode_raw(out.buf()),
        Payload::Detections(m) => m.encode_raw(out.buf()),
        Payload::Tracks(m) => m.encode_raw(out.buf()),
        Payload::BlobRef(m) => m.encode_raw(out.buf()),
        Payload::Opaque { data, .. } => out.buf().extend_from_slice(data),
    }
}

/// Encodes a whole envelope; `encode`'s rules (which parts a message type may carry, the
/// ABORT record) are checked here in the order the prost-based reference encoder (the oracle
/// in `wire_tests`) checks them, so the same input fails with the same error.
pub(super) fn encode_envelope(env: &Envelope) -> Result<Vec<u8>, EnvelopeError> {
    let mut payload_sizes = Sizes::default();
    let payload_len = match env.msg_type {
        MsgType::Data => measure_payload(&env.payload, &mut payload_sizes)?,
        MsgType::Eos | MsgType::Abort => {
            if env.payload != Payload::None {
                return Err(EnvelopeError::Inconsistent(
                    "a terminator (EOS/ABORT) carries no payload",
                ));
            }
            0
        }
    };
    let payload_type = match env.msg_type {
        MsgType::Data => env.payload.payload_type().unwrap_or_default(),
        MsgType::Eos | MsgType::Abort => "",
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
    let mut meta_sizes = Sizes::default();
    let mut metadata_len = 0;
    for (k, v) in &env.metadata {
        let vlen = measure_value(v, false, 0, &mut meta_sizes).map_err(|e| e.in_metadata(k))?;
        metadata_len += delimited_len(12, entry_len(k, vlen));
    }
    let msg_type = match env.msg_type {
        MsgType::Data => proto::MsgType::Data,
        MsgType::Eos => proto::MsgType::Eos,
        MsgType::Abort => proto::MsgType::Abort,
    } as i32;
    let error_len = error.as_ref().map(Message::encoded_len);
    let total = 2 // v = 4
        + if msg_type == 0 { 0 } else { 1 + encoded_len_varint(msg_type as u64) }
        + str_field_len(3, env.producer_name.as_bytes())
        + str_field_len(4, env.flow_id.as_bytes())
        + str_field_len(5, env.run_id.as_bytes())
        + str_field_len(6, env.trace_id.as_bytes())
        + if env.seq == 0 { 0 } else { 1 + encoded_len_varint(env.seq) }
        + if env.event_ts.is_some() { 9 } else { 0 }
        + str_field_len(9, env.span_id.as_bytes())
        + str_field_len(10, env.parent_span_id.as_bytes())
        + if env.replica_id == 0 { 0 } else { 1 + encoded_len_varint(u64::from(env.replica_id)) }
        + metadata_len
        + str_field_len(13, payload_type.as_bytes())
        + if payload_len == 0 { 0 } else { delimited_len(14, payload_len) }
        + error_len.map_or(0, |len| delimited_len(15, len));

    let mut buf = Vec::with_capacity(total);
    put_varint_field(&mut buf, 1, u64::from(ENVELOPE_VERSION));
    put_varint_field(&mut buf, 2, msg_type as u64);
    put_str_field(&mut buf, 3, env.producer_name.as_bytes());
    put_str_field(&mut buf, 4, env.flow_id.as_bytes());
    put_str_field(&mut buf, 5, env.run_id.as_bytes());
    put_str_field(&mut buf, 6, env.trace_id.as_bytes());
    put_varint_field(&mut buf, 7, env.seq);
    if let Some(ts) = env.event_ts {
        encode_key(8, WireType::SixtyFourBit, &mut buf);
        buf.put_f64_le(ts);
    }
    put_str_field(&mut buf, 9, env.span_id.as_bytes());
    put_str_field(&mut buf, 10, env.parent_span_id.as_bytes());
    put_varint_field(&mut buf, 11, u64::from(env.replica_id));
    put_entries(&mut buf, 12, &env.metadata, &mut meta_sizes);
    put_str_field(&mut buf, 13, payload_type.as_bytes());
    if payload_len != 0 {
        encode_key(14, WireType::LengthDelimited, &mut buf);
        encode_varint(payload_len as u64, &mut buf);
        put_payload(&mut buf, &env.payload, &mut payload_sizes);
    }
    if let (Some(error), Some(len)) = (&error, error_len) {
        encode_key(15, WireType::LengthDelimited, &mut buf);
        encode_varint(len as u64, &mut buf);
        error.encode_raw(&mut buf);
    }
    debug_assert_eq!(buf.len(), total, "measured and written lengths agree");
    Ok(buf)
}

// -- decode ----------------------------------------------------------------------------------
//
// The types below implement `prost::Message` only so that prost's merge functions (maps,
// nested messages, the recursion limit) can drive them; they are never encoded — the writer
// above encodes native values — so `encode_raw` writes nothing and `encoded_len` is 0.

/// Adds `(message, field)` to a decode error's location, as prost's generated code does.
fn at(message: &'static str, field: &'static str) -> impl FnOnce(DecodeError) -> DecodeError {
    move |mut e| {
        e.push(message, field);
        e
    }
}

/// `videoflow.v1.Envelope`, decoded straight into native fields; the payload stays undecoded
/// bytes, so a receiver can read the header before it pays for the payload.
#[derive(Debug, Default)]
pub(super) struct WireEnvelope {
    pub v: u32,
    pub msg_type: i32,
    pub producer_name: String,
    pub flow_id: String,
    pub run_id: String,
    pub trace_id: String,
    pub seq: u64,
    pub event_ts: Option<f64>,
    pub span_id: String,
    pub parent_span_id: String,
    pub replica_id: u32,
    pub metadata: BTreeMap<String, Value>,
    pub payload_type: String,
    /// A slice of the input when it was a `Bytes`, else a copy.
    pub payload: Bytes,
    pub error: Option<proto::Error>,
}

impl Message for WireEnvelope {
    fn encode_raw(&self, _buf: &mut impl bytes::BufMut) {}

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        const M: &str = "Envelope";
        match tag {
            1 => encoding::uint32::merge(wire_type, &mut self.v, buf, ctx).map_err(at(M, "v")),
            2 => encoding::int32::merge(wire_type, &mut self.msg_type, buf, ctx)
                .map_err(at(M, "r#type")),
            3 => encoding::string::merge(wire_type, &mut self.producer_name, buf, ctx)
                .map_err(at(M, "producer_name")),
            4 => encoding::string::merge(wire_type, &mut self.flow_id, buf, ctx)
                .map_err(at(M, "flow_id")),
            5 => encoding::string::merge(wire_type, &mut self.run_id, buf, ctx)
                .map_err(at(M, "run_id")),
            6 => encoding::string::merge(wire_type, &mut self.trace_id, buf, ctx)
                .map_err(at(M, "trace_id")),
            7 => encoding::uint64::merge(wire_type, &mut self.seq, buf, ctx).map_err(at(M, "seq")),
            8 => encoding::double::merge(
                wire_type,
                self.event_ts.get_or_insert_with(Default::default),
                buf,
                ctx,
            )
            .map_err(at(M, "event_ts")),
            9 => encoding::string::merge(wire_type, &mut self.span_id, buf, ctx)
                .map_err(at(M, "span_id")),
            10 => encoding::string::merge(wire_type, &mut self.parent_span_id, buf, ctx)
                .map_err(at(M, "parent_span_id")),
            11 => encoding::uint32::merge(wire_type, &mut self.replica_id, buf, ctx)
                .map_err(at(M, "replica_id")),
            12 => merge_map(wire_type, &mut self.metadata, buf, ctx).map_err(at(M, "metadata")),
            13 => encoding::string::merge(wire_type, &mut self.payload_type, buf, ctx)
                .map_err(at(M, "payload_type")),
            14 => encoding::bytes::merge(wire_type, &mut self.payload, buf, ctx)
                .map_err(at(M, "payload")),
            15 => encoding::message::merge(
                wire_type,
                self.error.get_or_insert_with(Default::default),
                buf,
                ctx,
            )
            .map_err(at(M, "error")),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        *self = WireEnvelope::default();
    }
}

/// One entry of a `map<string, Value>` field, as prost's generated code merges it (the
/// wire-type check is the generated code's, not `btree_map::merge`'s).
fn merge_map<B: Buf>(
    wire_type: WireType,
    map: &mut BTreeMap<String, Value>,
    buf: &mut B,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    encoding::check_wire_type(WireType::LengthDelimited, wire_type).and_then(|()| {
        encoding::btree_map::merge(encoding::string::merge, merge_value, map, buf, ctx)
    })
}

/// A `videoflow.v1.Value` message into a native value (the map-value merge function).
fn merge_value<B: Buf>(
    wire_type: WireType,
    value: &mut Value,
    buf: &mut B,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    let mut msg = WireValue(std::mem::take(value));
    let merged = encoding::message::merge(wire_type, &mut msg, buf, ctx);
    *value = msg.0;
    merged
}

/// `videoflow.v1.Value` as a native [`Value`].
///
/// The oneof follows prost's generated merge: a message member merges into the same member
/// when it is already set (a repeated `list_value` appends, a repeated `map_value` adds
/// entries), anything else replaces the value. A `null_value` and "no member" are both
/// [`Value::Null`]; they merge alike, so nothing is lost.
#[derive(Debug, Default)]
pub(super) struct WireValue(pub Value);

impl Message for WireValue {
    fn encode_raw(&self, _buf: &mut impl bytes::BufMut) {}

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let v = &mut self.0;
        let merged = match tag {
            1 => {
                let mut n = 0i32;
                encoding::int32::merge(wire_type, &mut n, buf, ctx).map(|()| *v = Value::Null)
            }
            2 => {
                let mut d = 0f64;
                encoding::double::merge(wire_type, &mut d, buf, ctx).map(|()| *v = Value::Double(d))
            }
            3 => {
                let mut i = 0i64;
                encoding::sint64::merge(wire_type, &mut i, buf, ctx).map(|()| *v = Value::Int(i))
            }
            4 => {
                let mut s = String::new();
                encoding::string::merge(wire_type, &mut s, buf, ctx).map(|()| *v = Value::String(s))
            }
            5 => {
                let mut b = Vec::new();
                encoding::bytes::merge(wire_type, &mut b, buf, ctx).map(|()| *v = Value::Bytes(b))
            }
            6 => {
                let mut b = false;
                encoding::bool::merge(wire_type, &mut b, buf, ctx).map(|()| *v = Value::Bool(b))
            }
            7 => {
                let mut list = WireList(match std::mem::take(v) {
                    Value::List(items) => items,
                    _ => Vec::new(),
                });
                let merged = encoding::message::merge(wire_type, &mut list, buf, ctx);
                *v = Value::List(list.0);
                merged
            }
            8 => {
                let mut map = WireMap(match std::mem::take(v) {
                    Value::Map(m) => m,
                    _ => BTreeMap::new(),
                });
                let merged = encoding::message::merge(wire_type, &mut map, buf, ctx);
                *v = Value::Map(map.0);
                merged
            }
            9 => {
                let mut t = WireTensor(match std::mem::take(v) {
                    Value::Tensor(t) => t,
                    _ => Tensor::default(),
                });
                let merged = encoding::message::merge(wire_type, &mut t, buf, ctx);
                *v = Value::Tensor(t.0);
                merged
            }
            _ => return encoding::skip_field(wire_type, tag, buf, ctx),
        };
        merged.map_err(at("Value", "kind"))
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        self.0 = Value::Null;
    }
}

/// `videoflow.v1.ListValue` as the items of a [`Value::List`].
#[derive(Debug, Default)]
struct WireList(Vec<Value>);

impl Message for WireList {
    fn encode_raw(&self, _buf: &mut impl bytes::BufMut) {}

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        if tag != 1 {
            return encoding::skip_field(wire_type, tag, buf, ctx);
        }
        // `message::merge_repeated`, pushing the native value.
        let merged =
            encoding::check_wire_type(WireType::LengthDelimited, wire_type).and_then(|()| {
                let mut item = WireValue::default();
                encoding::message::merge(WireType::LengthDelimited, &mut item, buf, ctx)?;
                self.0.push(item.0);
                Ok(())
            });
        merged.map_err(at("ListValue", "values"))
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// `videoflow.v1.MapValue` as the entries of a [`Value::Map`].
#[derive(Debug, Default)]
struct WireMap(BTreeMap<String, Value>);

impl Message for WireMap {
    fn encode_raw(&self, _buf: &mut impl bytes::BufMut) {}

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        if tag != 1 {
            return encoding::skip_field(wire_type, tag, buf, ctx);
        }
        merge_map(wire_type, &mut self.0, buf, ctx).map_err(at("MapValue", "fields"))
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// `videoflow.v1.Tensor` as a native [`Tensor`], unchecked (see [`check_value`]); its data
/// is `Bytes`, a slice of a `Bytes` input.
#[derive(Debug, Default)]
pub(super) struct WireTensor(pub Tensor);

impl Message for WireTensor {
    fn encode_raw(&self, _buf: &mut impl bytes::BufMut) {}

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        const M: &str = "Tensor";
        let t = &mut self.0;
        match tag {
            1 => encoding::int64::merge_repeated(wire_type, &mut t.shape, buf, ctx)
                .map_err(at(M, "shape")),
            2 => encoding::string::merge(wire_type, &mut t.dtype, buf, ctx).map_err(at(M, "dtype")),
            3 => encoding::bytes::merge(wire_type, &mut t.data, buf, ctx).map_err(at(M, "data")),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        self.0 = Tensor::default();
    }
}

/// Checks every tensor nested in a decoded value, lists in order and maps in key order (the
/// order of the proto-to-native conversion, `value_codec::value_from_proto`), so the first inconsistent one is reported.
pub(super) fn check_value(v: &Value) -> Result<(), TensorError> {
    match v {
        Value::List(items) => items.iter().try_for_each(check_value),
        Value::Map(m) => m.values().try_for_each(check_value),
        Value::Tensor(t) => t.check(),
        _ => Ok(()),
    }
}
