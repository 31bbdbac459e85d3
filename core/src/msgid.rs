//! Message identity (MSGID-*): the `Nats-Msg-Id` header every publish carries.
//!
//! Why content-derived: a re-run after a crash republishes the same trace id and seq, so it
//! gets the same id and JetStream's duplicate window drops the repeat (MSGID-2). Ids always
//! use the **raw** flow, run and node names; `:` inside them is never escaped, so `a:b`/`c`
//! and `a`/`b:c` collide exactly as they do in the reference.

use sha2::{Digest, Sha256};

/// The envelope kind as it appears in a message id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// A DATA envelope.
    Data,
    /// An end-of-stream terminator.
    Eos,
    /// An abort terminator.
    Abort,
}

impl MsgKind {
    /// The lowercase word used in ids and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            MsgKind::Data => "data",
            MsgKind::Eos => "eos",
            MsgKind::Abort => "abort",
        }
    }
}

/// Lowercase hex SHA-256 of the UTF-8 bytes of `s` (`sha256hex` of the protocol).
pub fn sha256hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// `msgid(flow, run, producer, trace_id, seq, kind)` (MSGID-1): the first 32 hex characters of
/// `sha256hex("{flow}:{run}:{producer}:{trace_id}:{seq}:{kind}")`.
pub fn msgid(
    flow_id: &str,
    run_id: &str,
    producer: &str,
    trace_id: &str,
    seq: u64,
    kind: MsgKind,
) -> String {
    msgid_signed(flow_id, run_id, producer, trace_id, i128::from(seq), kind)
}

/// Like [`msgid`], for a group seq that may be negative: a time group before the epoch has a
/// negative seq (JOIN-20) and a consumer's `last_input_key` renders it with `-` (IDEM-1).
pub fn msgid_signed(
    flow_id: &str,
    run_id: &str,
    producer: &str,
    trace_id: &str,
    seq: i128,
    kind: MsgKind,
) -> String {
    let mut hex = sha256hex(&format!(
        "{flow_id}:{run_id}:{producer}:{trace_id}:{seq}:{}",
        kind.as_str()
    ));
    hex.truncate(32);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgid_1_worked_examples() {
        // MSGID-1 examples from the protocol §5.
        assert_eq!(
            msgid("flow-A", "run-1", "cam", "cam:1", 1, MsgKind::Data),
            "745708c2eeaf98a60fdbebafe1d04eff"
        );
        assert_eq!(
            msgid(
                "flow-A",
                "run-1",
                "detector",
                "abort-r2",
                11,
                MsgKind::Abort
            ),
            "2a87f320c56cde8ff6e3266c2a1018ee"
        );
    }
}
