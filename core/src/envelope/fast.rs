//! The decoder's fast path: the envelope, a `Value` or a `Tensor` parsed straight out of a
//! contiguous buffer (docs/PERFORMANCE.md, measurement 9).
//!
//! Why a second decoder: prost's merge functions work through the generic `Buf` trait —
//! strings are read through `Take` adapters into growing `Vec`s, every nested message costs a
//! `DecodeContext` and a closure — a large share of a decode on top of the allocations the
//! native values need (see docs/PERFORMANCE.md, measurement 9). This parser reads a slice: one
//! exact allocation per string, a pre-sized `Vec` per list, a slice of the input
//! (`Bytes::slice_ref`) for tensor data.
//!
//! Why it cannot change a result: it only accepts the plain encoding every protobuf writer
//! produces, and gives up (`None`) on anything else — an unknown field, a repeated singular
//! field or oneof member, an unpacked `shape`, a group, a wrong wire type, invalid UTF-8, a
//! truncated or over-long varint, a length past its message, nesting deeper than
//! [`MAX_NESTING`]. The caller then decodes the same bytes with the prost-driven decoder
//! ([`super::wire`]), which decides acceptance and produces prost's exact error. Where it
//! succeeds its values are prost's (same varint arithmetic, `uint32` truncation, non-zero
//! bools, last key wins in maps); the property tests in `wire_tests` compare both paths with
//! the generated types on generated and mutated buffers.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message as _;

use super::proto;
use super::wire::WireEnvelope;
use crate::value::{Tensor, Value};

/// Nested messages (values, lists, maps, map entries, tensors) the fast path follows before it
/// hands over. Why 64: well below prost's limit of 100, so the fast path never accepts what
/// prost would refuse as too deep, and far above what an encoder emits (`MAX_VALUE_DEPTH`).
const MAX_NESTING: u32 = 64;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// A cursor over one message's bytes; `owner`, when set, is the `Bytes` the slice lives in,
/// so byte fields can be sliced out of it instead of copied.
#[derive(Clone, Copy)]
struct Reader<'a> {
    buf: &'a [u8],
    owner: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.buf.is_empty()
    }

    /// prost's varint: at most 10 bytes, the 10th below 2 (no u64 overflow).
    fn varint(&mut self) -> Option<u64> {
        // Keys, lengths and small numbers are one byte.
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Some(u64::from(b));
        }
        let mut value = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b >= 2 {
                    return None;
                }
                self.buf = &self.buf[i + 1..];
                return Some(value);
            }
        }
        None
    }

    /// A field key: tag ≥ 1, key within u32, and a wire type this parser handles.
    fn key(&mut self) -> Option<(u32, u8)> {
        let key = u32::try_from(self.varint()?).ok()?;
        let (tag, wire_type) = (key >> 3, (key & 7) as u8);
        (tag >= 1 && matches!(wire_type, VARINT | FIXED64 | LEN)).then_some((tag, wire_type))
    }

    fn fixed64(&mut self) -> Option<[u8; 8]> {
        let (head, rest) = self.buf.split_first_chunk::<8>()?;
        self.buf = rest;
        Some(*head)
    }

    /// A length-delimited body, as a reader of its own.
    fn body(&mut self) -> Option<Reader<'a>> {
        let len = usize::try_from(self.varint()?).ok()?;
        if len > self.buf.len() {
            return None;
        }
        let (body, rest) = self.buf.split_at(len);
        self.buf = rest;
        Some(Reader {
            buf: body,
            owner: self.owner,
        })
    }

    fn string(&mut self) -> Option<String> {
        let body = self.body()?;
        std::str::from_utf8(body.buf).ok().map(str::to_owned)
    }

    /// A bytes field: a slice of the owner when there is one, else a copy.
    fn bytes(&mut self) -> Option<Bytes> {
        let body = self.body()?;
        Some(match self.owner {
            Some(owner) => owner.slice_ref(body.buf),
            None => Bytes::copy_from_slice(body.buf),
        })
    }

    /// How many fields this message holds, if it reads as plain fields (a capacity hint).
    fn count_fields(mut self) -> usize {
        let mut n = 0;
        while !self.done() {
            let skipped = match self.key() {
                Some((_, VARINT)) => self.varint().map(drop),
                Some((_, FIXED64)) => self.fixed64().map(drop),
                Some((_, LEN)) => self.body().map(drop),
                _ => None,
            };
            if skipped.is_none() {
                break;
            }
            n += 1;
        }
        n
    }
}

/// Expects `wire_type`; `None` (hand over) otherwise.
fn expect(wire_type: u8, want: u8) -> Option<()> {
    (wire_type == want).then_some(())
}

/// Sets a singular field once; a second occurrence hands over (prost merges or replaces).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// The envelope header and payload bytes; `owner` is the `Bytes` that `buf` is, if any.
pub(super) fn envelope(buf: &[u8], owner: Option<&Bytes>) -> Option<WireEnvelope> {
    let mut r = Reader { buf, owner };
    let mut e = WireEnvelope::default();
    // Singular fields are "last one wins" in prost; the plain encoding writes each once, and
    // a repeat is as rare as it is legal, so it hands over rather than being modelled here.
    let mut seen = 0u32;
    while !r.done() {
        let (tag, wire_type) = r.key()?;
        if tag <= 31 {
            let bit = 1u32 << tag;
            if seen & bit != 0 && tag != 12 {
                return None;
            }
            seen |= bit;
        }
        match tag {
            1 => {
                expect(wire_type, VARINT)?;
                e.v = r.varint()? as u32;
            }
            2 => {
                expect(wire_type, VARINT)?;
                e.msg_type = r.varint()? as i32;
            }
            3 => {
                expect(wire_type, LEN)?;
                e.producer_name = r.string()?;
            }
            4 => {
                expect(wire_type, LEN)?;
                e.flow_id = r.string()?;
            }
            5 => {
                expect(wire_type, LEN)?;
                e.run_id = r.string()?;
            }
            6 => {
                expect(wire_type, LEN)?;
                e.trace_id = r.string()?;
            }
            7 => {
                expect(wire_type, VARINT)?;
                e.seq = r.varint()?;
            }
            8 => {
                expect(wire_type, FIXED64)?;
                e.event_ts = Some(f64::from_le_bytes(r.fixed64()?));
            }
            9 => {
                expect(wire_type, LEN)?;
                e.span_id = r.string()?;
            }
            10 => {
                expect(wire_type, LEN)?;
                e.parent_span_id = r.string()?;
            }
            11 => {
                expect(wire_type, VARINT)?;
                e.replica_id = r.varint()? as u32;
            }
            12 => {
                expect(wire_type, LEN)?;
                // Metadata tensors are checked by the caller whatever this flag says.
                entry(r.body()?, 1, &mut false, &mut e.metadata)?;
            }
            13 => {
                expect(wire_type, LEN)?;
                e.payload_type = r.string()?;
            }
            14 => {
                expect(wire_type, LEN)?;
                e.payload = r.bytes()?;
            }
            15 => {
                expect(wire_type, LEN)?;
                // Rare (ABORT only) and small: prost's own decoder, on the field's bytes.
                e.error = Some(proto::Error::decode(r.body()?.buf).ok()?);
            }
            _ => return None,
        }
    }
    Some(e)
}

/// A `videoflow.v1.Value` message body as a payload; `owner` is the `Bytes` `buf` is, if any.
/// The flag says whether a tensor was seen (only then do tensors need checking).
pub(super) fn value(buf: &[u8], owner: Option<&Bytes>) -> Option<(Value, bool)> {
    let mut tensors = false;
    let v = value_body(Reader { buf, owner }, 0, &mut tensors)?;
    Some((v, tensors))
}

/// A `videoflow.v1.Tensor` message body as a payload, unchecked.
pub(super) fn tensor(buf: &[u8], owner: Option<&Bytes>) -> Option<Tensor> {
    tensor_body(Reader { buf, owner })
}

/// One `map<string, Value>` entry into `map`: key (1) and value (2), each at most once,
/// either absent (an absent key is "", an absent value is null — prost's defaults); a later
/// entry with the same key replaces an earlier one, as in prost.
fn entry(
    mut r: Reader<'_>,
    depth: u32,
    tensors: &mut bool,
    map: &mut BTreeMap<String, Value>,
) -> Option<()> {
    if depth > MAX_NESTING {
        return None;
    }
    let (mut key, mut val) = (None, None);
    while !r.done() {
        match r.key()? {
            (1, LEN) => once(&mut key, r.string()?)?,
            (2, LEN) => once(&mut val, value_body(r.body()?, depth + 1, tensors)?)?,
            _ => return None,
        }
    }
    map.insert(key.unwrap_or_default(), val.unwrap_or_default());
    Some(())
}

/// A `Value` message body: no member (null), or exactly one.
fn value_body(mut r: Reader<'_>, depth: u32, tensors: &mut bool) -> Option<Value> {
    if depth > MAX_NESTING {
        return None;
    }
    if r.done() {
        return Some(Value::Null);
    }
    let v = match r.key()? {
        (1, VARINT) => r.varint().map(|_| Value::Null)?,
        (2, FIXED64) => Value::Double(f64::from_le_bytes(r.fixed64()?)),
        (3, VARINT) => {
            let n = r.varint()?;
            Value::Int(((n >> 1) as i64) ^ -((n & 1) as i64))
        }
        (4, LEN) => Value::String(r.string()?),
        (5, LEN) => Value::Bytes(r.body()?.buf.to_vec()),
        (6, VARINT) => Value::Bool(r.varint()? != 0),
        (7, LEN) => Value::List(list_body(r.body()?, depth, tensors)?),
        (8, LEN) => Value::Map(map_body(r.body()?, depth, tensors)?),
        (9, LEN) => {
            *tensors = true;
            Value::Tensor(tensor_body(r.body()?)?)
        }
        _ => return None,
    };
    // A second member (or any other field) merges or replaces in prost: hand over.
    r.done().then_some(v)
}

/// A `ListValue` body: its `values` (1), pre-sized. Kept out of line, as is [`map_body`], so
/// the scalar path of [`value_body`] stays small.
#[inline(never)]
fn list_body(mut body: Reader<'_>, depth: u32, tensors: &mut bool) -> Option<Vec<Value>> {
    let mut items = Vec::with_capacity(body.count_fields());
    while !body.done() {
        expect_key(&mut body, 1, LEN)?;
        items.push(value_body(body.body()?, depth + 2, tensors)?);
    }
    Some(items)
}

/// A `MapValue` body: its `fields` (1) entries.
#[inline(never)]
fn map_body(
    mut body: Reader<'_>,
    depth: u32,
    tensors: &mut bool,
) -> Option<BTreeMap<String, Value>> {
    let mut map = BTreeMap::new();
    while !body.done() {
        expect_key(&mut body, 1, LEN)?;
        entry(body.body()?, depth + 2, tensors, &mut map)?;
    }
    Some(map)
}

fn expect_key(r: &mut Reader<'_>, tag: u32, wire_type: u8) -> Option<()> {
    (r.key()? == (tag, wire_type)).then_some(())
}

/// A `Tensor` message body: packed `shape`, `dtype`, `data`, each at most once.
#[inline(never)]
fn tensor_body(mut r: Reader<'_>) -> Option<Tensor> {
    let (mut shape, mut dtype, mut data) = (None, None, None);
    while !r.done() {
        match r.key()? {
            (1, LEN) => {
                let mut packed = r.body()?;
                let mut dims = Vec::with_capacity(packed.buf.len().min(8));
                while !packed.done() {
                    dims.push(packed.varint()? as i64);
                }
                once(&mut shape, dims)?;
            }
            (2, LEN) => once(&mut dtype, r.string()?)?,
            (3, LEN) => once(&mut data, r.bytes()?)?,
            _ => return None,
        }
    }
    Some(Tensor {
        shape: shape.unwrap_or_default(),
        dtype: dtype.unwrap_or_default(),
        data: data.unwrap_or_default(),
    })
}
