//! The error record an ABORT carries (`videoflow.v1.Error`, §9.3 ABORT-1, §15.3).

use std::collections::BTreeMap;

use super::proto;
use crate::errors::Disposition;

/// ABORT-1: code, message, remedy and every context value are cut to this many **code
/// points** (not bytes). Why: an abort rides the terminator path, where an unbounded
/// exception text could outgrow a broker message.
pub const MAX_ERROR_TEXT_CHARS: usize = 2048;

/// The code an error record without one degrades to (ABORT-1).
pub const UNKNOWN_ERROR_CODE: &str = "VF_UNKNOWN";

/// A decoded `videoflow.v1.Error`, as the reference decoder reports it (§15.3).
///
/// `code` and `message` are always present (either may be empty); every other field is
/// `None` / empty exactly when the wire field is empty, zero or `DISPOSITION_UNSPECIFIED`.
/// Why optional rather than raw defaults: consumers (ABORT-5 relay, operator rendering)
/// branch on presence, and "absent" is what 1.0.4 reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireError {
    /// Stable code, e.g. `VF_DEVICE`.
    pub code: String,
    /// Human-readable text.
    pub message: String,
    /// What to do about it.
    pub remedy: Option<String>,
    /// Disposition; `None` for UNSPECIFIED or an unknown enum number.
    pub disposition: Option<Disposition>,
    /// The node that raised it (a relayed record keeps the origin node, ABORT-5).
    pub node: Option<String>,
    /// Trace id of the message being processed.
    pub trace_id: Option<String>,
    /// Delivery count of that message.
    pub num_delivered: Option<u32>,
    /// Free-form context, values rendered as text.
    pub context: BTreeMap<String, String>,
}

impl WireError {
    /// A record with just a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        WireError {
            code: code.into(),
            message: message.into(),
            ..WireError::default()
        }
    }

    /// The wire record of a worker's own error (§15.3, ABORT-1): code, message, remedy,
    /// disposition, and the context values rendered with Python `str()`. An error object
    /// keeps `node` and `trace_id` in its context, so they stay there (vector
    /// `abort_producer_poison`); the top-level fields are for relayed records only.
    pub fn from_error(e: &crate::errors::VfError) -> Self {
        WireError {
            code: e.code.code().to_owned(),
            message: e.message.clone(),
            remedy: e.remedy_text().map(str::to_owned),
            disposition: e.disposition,
            node: None,
            trace_id: None,
            num_delivered: None,
            context: e
                .context
                .iter()
                .map(|(k, v)| (k.clone(), crate::errors::context_text(v)))
                .collect(),
        }
    }

    /// Reads a wire record; empty/zero/UNSPECIFIED fields become absent.
    pub fn from_proto(p: proto::Error) -> Self {
        let non_empty = |s: String| (!s.is_empty()).then_some(s);
        let disposition = match proto::Disposition::try_from(p.disposition) {
            Ok(proto::Disposition::Poison) => Some(Disposition::Poison),
            Ok(proto::Disposition::Transient) => Some(Disposition::Transient),
            Ok(proto::Disposition::WorkerFatal) => Some(Disposition::WorkerFatal),
            Ok(proto::Disposition::Unspecified) | Err(_) => None,
        };
        WireError {
            code: p.code,
            message: p.message,
            remedy: non_empty(p.remedy),
            disposition,
            node: non_empty(p.node),
            trace_id: non_empty(p.trace_id),
            num_delivered: (p.num_delivered != 0).then_some(p.num_delivered),
            context: p.context,
        }
    }

    /// Builds the wire record, applying ABORT-1: `code`, `message`, `remedy` and every context
    /// value are cut to their first [`MAX_ERROR_TEXT_CHARS`] code points (`node` and
    /// `trace_id` are never cut), and an empty `code` becomes [`UNKNOWN_ERROR_CODE`].
    ///
    /// Cutting is idempotent, so a decoded record relayed as is (ABORT-5) is re-encoded
    /// unchanged.
    pub fn to_proto(&self) -> proto::Error {
        let code = if self.code.is_empty() {
            UNKNOWN_ERROR_CODE
        } else {
            &self.code
        };
        let disposition = match self.disposition {
            None => proto::Disposition::Unspecified,
            Some(Disposition::Poison) => proto::Disposition::Poison,
            Some(Disposition::Transient) => proto::Disposition::Transient,
            Some(Disposition::WorkerFatal) => proto::Disposition::WorkerFatal,
        };
        proto::Error {
            code: cut(code),
            message: cut(&self.message),
            remedy: self.remedy.as_deref().map(cut).unwrap_or_default(),
            disposition: disposition as i32,
            node: self.node.clone().unwrap_or_default(),
            trace_id: self.trace_id.clone().unwrap_or_default(),
            num_delivered: self.num_delivered.unwrap_or(0),
            context: self
                .context
                .iter()
                .map(|(k, v)| (k.clone(), cut(v)))
                .collect(),
        }
    }
}

/// The first [`MAX_ERROR_TEXT_CHARS`] code points of `s` (Python's `s[:2048]`).
fn cut(s: &str) -> String {
    match s.char_indices().nth(MAX_ERROR_TEXT_CHARS) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_error_keeps_node_and_trace_in_context() {
        // The shape of vector `abort_producer_poison` (§15.3, ABORT-1).
        use crate::errors::{ErrorCode, VfError};
        let e = VfError::new(ErrorCode::Poison, "ValueError: bad frame header")
            .with_context("node", "cam")
            .with_context("replica", 1)
            .with_context("seq", serde_json::Value::Null)
            .with_context("trace_id", serde_json::Value::Null);
        let w = WireError::from_error(&e);
        assert_eq!(w.code, "VF_POISON");
        assert_eq!(w.disposition, Some(Disposition::Poison));
        assert_eq!((w.node.as_deref(), w.trace_id.as_deref()), (None, None));
        let ctx: Vec<(&str, &str)> = w
            .context
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            ctx,
            vec![
                ("node", "cam"),
                ("replica", "1"),
                ("seq", "None"),
                ("trace_id", "None")
            ]
        );
    }

    #[test]
    fn cut_counts_code_points() {
        let long = "é".repeat(MAX_ERROR_TEXT_CHARS + 5);
        let c = cut(&long);
        assert_eq!(c.chars().count(), MAX_ERROR_TEXT_CHARS);
        assert_eq!(c.len(), 2 * MAX_ERROR_TEXT_CHARS);
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn abort_1_applies_to_text_fields_but_not_node_or_trace() {
        let long = "x".repeat(3000);
        let mut e = WireError::new("", long.clone());
        e.remedy = Some(long.clone());
        e.node = Some(long.clone());
        e.trace_id = Some(long.clone());
        e.context.insert("k".to_owned(), long.clone());
        let p = e.to_proto();
        assert_eq!(p.code, UNKNOWN_ERROR_CODE);
        assert_eq!(p.message.len(), MAX_ERROR_TEXT_CHARS);
        assert_eq!(p.remedy.len(), MAX_ERROR_TEXT_CHARS);
        assert_eq!(
            p.context.get("k").map(String::len),
            Some(MAX_ERROR_TEXT_CHARS)
        );
        assert_eq!(p.node, long);
        assert_eq!(p.trace_id, long);
    }

    #[test]
    fn defaults_decode_as_absent() {
        let e = WireError::from_proto(proto::Error {
            disposition: 42,
            ..proto::Error::default()
        });
        assert_eq!(e, WireError::default());
    }
}
