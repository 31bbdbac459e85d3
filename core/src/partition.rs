//! Partition keys and owners (PART-*), with the Python `str()`/`repr()` parity they rest on.
//!
//! Why Python renderings: 1.0.4 hashes `str(key)`, so a Rust replica only agrees with a Python
//! replica on who owns a record if it renders the key exactly as Python does (§10.2). Only
//! valid keys (bool, int, double, non-empty string) are ever hashed; the container and bytes
//! renderings exist for error messages (`repr` of an unusable key) and the informational rows
//! of `partition/owners.json`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::value::Value;

/// PART-2: the `VF_PARTITION_BY` value that partitions by the envelope's trace id.
pub const PARTITION_BY_TRACE_ID: &str = "trace_id";

/// PART-1: whether partitioning is in force; when it is not, every replica owns every message.
pub fn is_active(partition_by: &str, nb_tasks: u32) -> bool {
    !partition_by.is_empty() && nb_tasks > 1
}

/// PART-2: the partition key of a record — its trace id when `partition_by == "trace_id"`,
/// else `metadata[partition_by]`; `None` when the metadata (or the entry) is absent.
///
/// Returned as a `Cow` so the common metadata case borrows instead of cloning the value.
pub fn partition_key<'a>(
    partition_by: &str,
    trace_id: &str,
    metadata: Option<&'a BTreeMap<String, Value>>,
) -> Option<Cow<'a, Value>> {
    if partition_by == PARTITION_BY_TRACE_ID {
        return Some(Cow::Owned(Value::String(trace_id.to_owned())));
    }
    metadata?.get(partition_by).map(Cow::Borrowed)
}

/// PART-3: a key is valid iff it is a bool, an integer, a double (non-finite included) or a
/// non-empty string. Invalid keys are never hashed (PART-3a).
pub fn is_valid_key(key: &Value) -> bool {
    match key {
        Value::Bool(_) | Value::Int(_) | Value::Double(_) => true,
        Value::String(s) => !s.is_empty(),
        _ => false,
    }
}

/// PART-3: `h` = the first 8 hex digits of `sha256hex(py_str(key))` as a u32, i.e. the first
/// four digest bytes read big-endian.
pub fn partition_hash(key_text: &str) -> u32 {
    let d = Sha256::digest(key_text.as_bytes());
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// What a partitioned node does with an invalid key (PART-3a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyPolicy {
    /// Replica 0 takes the record and dead-letters it as `VF_POISON_PARTITION_KEY`; the
    /// default, so unusable keys surface instead of silently piling onto one partition.
    #[default]
    Reject,
    /// The record is processed normally by replica `min(partition, nb_tasks - 1)`.
    Fallback {
        /// The declared `fallback_partition`.
        partition: u32,
    },
}

/// The owner decision for one record (PART-3/3a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The replica that takes the record; every other replica acks and skips it (PART-4).
    pub replica: u32,
    /// The key was invalid: under [`KeyPolicy::Reject`] the owner must dead-letter the
    /// record instead of processing it; under fallback it counts a partition fallback.
    pub invalid_key: bool,
}

impl Owner {
    /// Whether replica `replica_id` owns the record.
    pub fn is_owned_by(self, replica_id: u32) -> bool {
        self.replica == replica_id
    }

    /// Whether the owner must reject the record as poison rather than process it.
    pub fn must_reject(self, policy: KeyPolicy) -> bool {
        self.invalid_key && policy == KeyPolicy::Reject
    }
}

/// PART-3/3a: which replica owns a record with this key (`None` = no key at all).
///
/// A valid key goes to `h % nb_tasks`; an invalid one to replica 0 under reject, or to
/// `min(p, nb_tasks - 1)` under fallback. `nb_tasks` 0 is treated as 1 rather than dividing
/// by zero (partitioning is inactive then anyway, PART-1).
pub fn owner(key: Option<&Value>, nb_tasks: u32, policy: KeyPolicy) -> Owner {
    let nb_tasks = nb_tasks.max(1);
    match key.filter(|k| is_valid_key(k)) {
        Some(k) => Owner {
            replica: partition_hash(&py_str(k)) % nb_tasks,
            invalid_key: false,
        },
        None => Owner {
            replica: match policy {
                KeyPolicy::Reject => 0,
                KeyPolicy::Fallback { partition } => partition.min(nb_tasks - 1),
            },
            invalid_key: true,
        },
    }
}

/// Python 3 `str(v)` of a decoded value (§10.2): what 1.0.4 hashes for a partition key.
///
/// Equal to [`py_repr`] except that a string renders as itself. A nested tensor (which
/// Python would render as a numpy array) has no Python-exact rendering here; it is never a
/// valid key, so its text is only ever informational.
pub fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Python 3 `repr(v)` of a decoded value: strings quoted, containers rendered recursively.
///
/// Used inside list/map renderings and for the unusable key quoted by
/// `VF_POISON_PARTITION_KEY` (PART-3a).
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, v);
    out
}

fn write_repr(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Double(x) => out.push_str(&py_float(*x)),
        Value::String(s) => out.push_str(&py_repr_str(s)),
        Value::Bytes(b) => out.push_str(&py_repr_bytes(b)),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&py_repr_str(k));
                out.push_str(": ");
                write_repr(out, item);
            }
            out.push('}');
        }
        Value::Tensor(t) => {
            let dims: Vec<String> = t.shape.iter().map(i64::to_string).collect();
            out.push_str(&format!(
                "array(shape=({}), dtype={})",
                dims.join(", "),
                t.dtype
            ));
        }
    }
}

/// Python `repr(float)`: shortest round-trip digits, scientific iff the decimal exponent is
/// < −4 or ≥ 16 (`d[.ddd]e±XX`, at least two exponent digits), else positional with at least
/// one fractional digit; `inf`, `-inf`, `nan`, `-0.0`.
///
/// Built from Rust's `{:e}`, which yields the same shortest round-trip digits (up to the
/// tie-break fixed in `shortest_sci`); only the layout differs.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    let sci = shortest_sci(x.abs());
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{x:?}"); // unreachable: `{:e}` always writes an exponent
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return format!("{x:?}"); // unreachable: the exponent is always an integer
    };
    let digits = mantissa.replace('.', "");
    let body = if !(-4..16).contains(&exp) {
        let (lead, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{lead}{frac}e{exp_sign}{:02}", exp.unsigned_abs())
    } else if exp >= 0 {
        let int_len = exp.unsigned_abs() as usize + 1;
        if digits.len() <= int_len {
            format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
        } else {
            let (int_part, frac) = digits.split_at(int_len);
            format!("{int_part}.{frac}")
        }
    } else {
        let zeros = "0".repeat(exp.unsigned_abs() as usize - 1);
        format!("0.{zeros}{digits}")
    };
    format!("{sign}{body}")
}

/// The shortest round-trip digits of `a > 0` in `{:e}` form, ties broken as Python does.
///
/// Rust's `{:e}` and Python's `repr` pick the same number of digits, and the same digits
/// except when `a` lies exactly halfway between the two nearest candidates (e.g.
/// `1059438285926254.25`): Rust then rounds up, Python to even. The correctly rounded
/// `{:.Ne}` at that length rounds half to even, so it is preferred whenever it round-trips.
fn shortest_sci(a: f64) -> String {
    let shortest = format!("{a:e}");
    let digits = shortest
        .split('e')
        .next()
        .map_or(0, |m| m.bytes().filter(u8::is_ascii_digit).count());
    let nearest = format!("{a:.*e}", digits.saturating_sub(1));
    if nearest != shortest && nearest.parse::<f64>() == Ok(a) {
        nearest
    } else {
        shortest
    }
}

/// Python `repr(str)`: single quotes unless the text contains `'` and no `"`; `\\`, the
/// quote, `\t`, `\n`, `\r` escaped; non-printable characters as `\xhh`, `\uhhhh` or
/// `\Uhhhhhhhh`; printable non-ASCII kept as is.
///
/// Printability follows [`is_py_printable`], which covers control, format, separator and
/// private-use characters but not Python's full table of unassigned code points.
pub fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_py_printable(c) => out.push(c),
            c => {
                let n = u32::from(c);
                let esc = match n {
                    0..=0xff => format!("\\x{n:02x}"),
                    0x100..=0xffff => format!("\\u{n:04x}"),
                    _ => format!("\\U{n:08x}"),
                };
                out.push_str(&esc);
            }
        }
    }
    out.push(quote);
    out
}

/// Python `repr(bytes)`: `b'…'` (double quotes when the data contains `'` and no `"`),
/// `\\`, the quote, `\t`, `\n`, `\r` escaped, other bytes outside 0x20–0x7E as `\xhh`.
pub fn py_repr_bytes(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut out = String::with_capacity(b.len() + 3);
    out.push('b');
    out.push(char::from(quote));
    for &byte in b {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            q if q == quote => {
                out.push('\\');
                out.push(char::from(q));
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push(char::from(quote));
    out
}

/// Python's `str.isprintable()` for one character, which decides whether `repr` escapes it:
/// false for controls (Cc), format characters (Cf), separators other than the space (Zs,
/// Zl, Zp) and private use (Co), matching Python 3.11 on every assigned code point.
///
/// Unassigned code points (Cn), which Python also escapes, are treated as printable: doing
/// better needs the Unicode database, and no hashed key ever goes through `repr`.
pub fn is_py_printable(c: char) -> bool {
    !matches!(
        u32::from(c),
        0x00..=0x1f
            | 0x7f..=0xa0
            | 0xad
            | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x1680
            | 0x180e
            | 0x2000..=0x200f
            | 0x2028..=0x202f
            | 0x205f..=0x2064
            | 0x2066..=0x206f
            | 0x3000
            | 0xe000..=0xf8ff
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x13438
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
            | 0xf0000..=0x10ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_float_table() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.0001, "0.0001"),
            (1e-05, "1e-05"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (2.5, "2.5"),
            (5e-324, "5e-324"),
            (1e22, "1e+22"),
            (1.5e300, "1.5e+300"),
            (123456789.123, "123456789.123"),
            (0.1 + 0.2, "0.30000000000000004"),
            // Exact ties between two shortest candidates: Python rounds to even.
            (1_059_438_285_926_254.2, "1059438285926254.2"),
            (26_363_981_746_409.312, "26363981746409.312"),
            (-1.5, "-1.5"),
            (100.0, "100.0"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-2.5e-7, "-2.5e-07"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for &(x, want) in cases {
            assert_eq!(py_float(x), want, "py_float({x:?})");
        }
    }

    #[test]
    fn py_str_scalars_and_containers() {
        assert_eq!(py_str(&Value::Null), "None");
        assert_eq!(py_str(&Value::Bool(true)), "True");
        assert_eq!(py_str(&Value::Int(-9_000_000_000)), "-9000000000");
        assert_eq!(py_str(&Value::from("cam:1")), "cam:1");
        assert_eq!(py_str(&Value::Bytes(b"ab\x00".to_vec())), r"b'ab\x00'");
        assert_eq!(py_str(&Value::Bytes(b"it's".to_vec())), r#"b"it's""#);
        assert_eq!(py_str(&Value::Bytes(b"'\"\\\n".to_vec())), r#"b'\'"\\\n'"#);
        let list = Value::List(vec![Value::from("a"), Value::Int(1), Value::Null]);
        assert_eq!(py_str(&list), "['a', 1, None]");
        let map = Value::Map(BTreeMap::from([("k".to_owned(), Value::Double(1.5))]));
        assert_eq!(py_str(&map), "{'k': 1.5}");
    }

    #[test]
    fn py_repr_str_quotes_and_escapes() {
        assert_eq!(py_repr_str("a"), "'a'");
        assert_eq!(py_repr_str("it's"), "\"it's\"");
        assert_eq!(py_repr_str("'\""), r#"'\'"'"#);
        assert_eq!(
            py_repr_str("a\tb\x01\u{7f}é\u{a0}Ω🎥"),
            r"'a\tb\x01\x7fé\xa0Ω🎥'"
        );
        assert_eq!(
            py_repr_str("\u{200b}\u{e000}\u{f0000}"),
            r"'\u200b\ue000\U000f0000'"
        );
    }

    #[test]
    fn worked_hashes_and_owners() {
        // §10.2: (py_str, h, owners for nb_tasks 2 / 3 / 4).
        let cases: &[(Value, u32, [u32; 3])] = &[
            (Value::from("cam:1"), 0xbf56_7e7c, [0, 2, 0]),
            (Value::from("cam:2"), 0x3f72_e1cd, [1, 1, 1]),
            (Value::Int(1), 0x6b86_b273, [1, 0, 3]),
            (Value::Double(1.0), 0xd0ff_5974, [0, 2, 0]),
            (Value::Bool(true), 0x3cbc_87c7, [1, 0, 3]),
            (Value::Double(1e-05), 0x5a95_30d3, [1, 0, 3]),
            (Value::Double(1e16), 0xa144_8385, [1, 1, 1]),
            (Value::from("cam:3f9c1a2b7d4e:1"), 0xeae8_8e0a, [0, 0, 2]),
        ];
        assert_eq!(0xbf56_7e7c_u32, 3_210_116_732);
        for (key, h, owners) in cases {
            assert_eq!(partition_hash(&py_str(key)), *h, "{key:?}");
            for (n, want) in (2..=4).zip(owners) {
                let got = owner(Some(key), n, KeyPolicy::Reject);
                assert_eq!(
                    got,
                    Owner {
                        replica: *want,
                        invalid_key: false
                    },
                    "{key:?} n={n}"
                );
            }
        }
        assert_eq!(partition_hash("None"), 0xdc93_7b59);
        assert_eq!(partition_hash(""), 0xe3b0_c442);
    }

    #[test]
    fn invalid_keys_follow_the_policy() {
        let invalid = [
            None,
            Some(Value::Null),
            Some(Value::from("")),
            Some(Value::Bytes(vec![1])),
            Some(Value::List(vec![])),
            Some(Value::Map(BTreeMap::new())),
        ];
        for key in &invalid {
            let key = key.as_ref();
            let rejected = owner(key, 4, KeyPolicy::Reject);
            assert_eq!(
                rejected,
                Owner {
                    replica: 0,
                    invalid_key: true
                }
            );
            assert!(rejected.must_reject(KeyPolicy::Reject));
            let fb = KeyPolicy::Fallback { partition: 5 };
            assert_eq!(owner(key, 4, fb).replica, 3);
            assert_eq!(owner(key, 7, fb).replica, 5);
            assert!(!owner(key, 7, fb).must_reject(fb));
        }
        assert_eq!(
            owner(Some(&Value::from("x")), 0, KeyPolicy::Reject).replica,
            0
        );
    }

    #[test]
    fn key_extraction_and_activity() {
        let meta = BTreeMap::from([("key".to_owned(), Value::Int(7))]);
        let by_trace = partition_key("trace_id", "cam:1", Some(&meta));
        assert_eq!(by_trace.as_deref(), Some(&Value::from("cam:1")));
        assert_eq!(
            partition_key("key", "cam:1", Some(&meta)).as_deref(),
            Some(&Value::Int(7))
        );
        assert_eq!(partition_key("other", "cam:1", Some(&meta)), None);
        assert_eq!(partition_key("key", "cam:1", None), None);
        assert!(is_active("key", 2));
        assert!(!is_active("key", 1));
        assert!(!is_active("", 4));
    }
}
