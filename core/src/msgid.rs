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
///
/// Every message a worker handles computes two of these (its input's key and its output's
/// id), so the preimage is hashed in pieces, the seq written in decimal on the stack (`itoa`
/// writes what `format!` does) and only the 16 bytes kept are hex-encoded: one allocation,
/// the returned `String`.
pub fn msgid_signed(
    flow_id: &str,
    run_id: &str,
    producer: &str,
    trace_id: &str,
    seq: i128,
    kind: MsgKind,
) -> String {
    let mut hasher = Sha256::new();
    for part in [flow_id, run_id, producer, trace_id] {
        hasher.update(part.as_bytes());
        hasher.update(b":");
    }
    hasher.update(itoa::Buffer::new().format(seq).as_bytes());
    hasher.update(b":");
    hasher.update(kind.as_str().as_bytes());
    hex::encode(&hasher.finalize()[..16])
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

    /// MSGID-1's formula as the protocol writes it, the reference for the pieced hash.
    fn literal(
        flow: &str,
        run: &str,
        producer: &str,
        trace: &str,
        seq: i128,
        kind: MsgKind,
    ) -> String {
        let mut hex = sha256hex(&format!(
            "{flow}:{run}:{producer}:{trace}:{seq}:{}",
            kind.as_str()
        ));
        hex.truncate(32);
        hex
    }

    #[test]
    fn msgid_1_seq_extremes_match_the_formula() {
        for seq in [
            0,
            1,
            -1,
            9,
            10,
            -10,
            i128::from(u64::MAX),
            i128::MAX,
            i128::MIN,
        ] {
            assert_eq!(
                msgid_signed("f", "r", "p", "t", seq, MsgKind::Eos),
                literal("f", "r", "p", "t", seq, MsgKind::Eos),
                "seq {seq}"
            );
        }
    }

    proptest::proptest! {
        /// MSGID-1: the pieced hash equals the formula for any names (colons and non-ASCII
        /// included) and any seq, JOIN-20's negative ones too.
        #[test]
        fn msgid_1_pieced_hash_matches_the_formula(
            flow in ".{0,12}", run in ".{0,12}", producer in "[a-z:]{0,8}",
            trace in ".{0,16}", seq in proptest::num::i128::ANY, kind in 0..3u8,
        ) {
            let kind = [MsgKind::Data, MsgKind::Eos, MsgKind::Abort][usize::from(kind)];
            proptest::prop_assert_eq!(
                msgid_signed(&flow, &run, &producer, &trace, seq, kind),
                literal(&flow, &run, &producer, &trace, seq, kind)
            );
        }
    }
}
