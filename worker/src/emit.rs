//! What one replica publishes: DATA, EOS and ABORT envelopes with their identities
//! (WIRE-4/6, MSGID-1/5, LOOP-7/8/10, EOS-7, ABORT-1).
//!
//! Identities decide duplicates: a processor's output reuses its input group's trace id and
//! seq (MSGID-2), so a re-run after a crash republishes the same `Nats-Msg-Id` and the
//! stream's duplicate window drops it. Only producers mint identities (MSGID-5).

use std::collections::BTreeMap;

use videoflow_core::envelope::{Envelope, MsgType, Payload, WireError};
use videoflow_core::msgid::sha256hex;
use videoflow_core::naming;
use videoflow_core::value::Value;

/// Metadata key of the one-shot output partition key (LOOP-8).
pub const PARTITION_KEY_FIELD: &str = "_partition_key";

/// Builds this replica's envelopes and keeps its EOS-7 count.
#[derive(Debug)]
pub struct Emitter {
    flow_id: String,
    run_id: String,
    node: String,
    /// NAME-2's subject, built once: every DATA publication names it.
    data_subject: String,
    replica_id: u32,
    epoch: String,
    minted: u64,
    published: u64,
    /// MSGID-6: identities are the source's offsets, not this process's epoch.
    replayable: bool,
}

/// Per-call timings stamped into output metadata (LOOP-7).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timings {
    /// Seconds spent in this `next()`/`process()` call.
    pub proctime: f64,
    /// Seconds from the end of the previous iteration (or loop start) to the end of this call.
    pub actual_proctime: f64,
}

impl Emitter {
    /// An emitter for one replica. The live-producer epoch is minted here, once per process
    /// (MSGID-5).
    pub fn new(flow_id: &str, run_id: &str, node: &str, replica_id: u32) -> Self {
        Emitter {
            flow_id: flow_id.to_owned(),
            run_id: run_id.to_owned(),
            node: node.to_owned(),
            data_subject: naming::data_subject(flow_id, run_id, node),
            replica_id,
            epoch: mint_epoch(),
            minted: 0,
            published: 0,
            replayable: false,
        }
    }

    /// The data subject this replica publishes on (NAME-2).
    pub fn data_subject(&self) -> &str {
        &self.data_subject
    }

    /// The terminator subject (NAME-4).
    pub fn eos_subject(&self) -> String {
        naming::eos_subject(&self.flow_id, &self.run_id, &self.node)
    }

    /// MSGID-6: from now on identities are the source's offsets, the next one
    /// `last_accepted + 1`, so a restart re-mints the ids its predecessor published.
    pub fn replay_from(&mut self, last_accepted: u64) {
        self.replayable = true;
        self.minted = last_accepted;
    }

    /// Whether identities are offsets (MSGID-6) rather than an epoch's count (MSGID-5).
    pub fn is_replayable(&self) -> bool {
        self.replayable
    }

    /// The next producer identity: `("{node}:{epoch}:{n}", n)` for a live source (MSGID-5),
    /// `("{node}:{offset}", offset)` for a replayable one (MSGID-6). The counter advances on
    /// every publication attempt.
    pub fn mint(&mut self) -> (String, u64) {
        self.minted += 1;
        let trace_id = if self.replayable {
            format!("{}:{}", self.node, self.minted)
        } else {
            format!("{}:{}:{}", self.node, self.epoch, self.minted)
        };
        (trace_id, self.minted)
    }

    /// The epoch of this process (for logs and tests).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// A DATA envelope (WIRE-4): `trace_id`/`seq` of the input group, `event_ts` per LOOP-10
    /// (the caller resolves one-shot > group > wall clock), metadata = the LOOP-7 stamps plus
    /// the one-shot partition key (LOOP-8) when not null.
    pub fn data(
        &self,
        trace_id: &str,
        seq: u64,
        event_ts: f64,
        payload: Payload,
        timings: Timings,
        partition_key: Option<Value>,
    ) -> Envelope {
        let mut metadata = BTreeMap::new();
        metadata.insert("proctime".to_owned(), Value::Double(timings.proctime));
        metadata.insert(
            "actual_proctime".to_owned(),
            Value::Double(timings.actual_proctime),
        );
        if let Some(key) = partition_key.filter(|k| *k != Value::Null) {
            metadata.insert(PARTITION_KEY_FIELD.to_owned(), key);
        }
        Envelope {
            producer_name: self.node.clone(),
            flow_id: self.flow_id.clone(),
            run_id: self.run_id.clone(),
            trace_id: trace_id.to_owned(),
            seq,
            event_ts: Some(event_ts),
            msg_type: MsgType::Data,
            replica_id: self.replica_id,
            metadata,
            payload,
            ..Envelope::default()
        }
    }

    /// EOS-7: a DATA publication was stored for the first time (a duplicate receipt or an
    /// unconfirmed send does not count; without a durable ledger the count restarts with the
    /// process). Under a durable shared ledger the ledger counts instead ([`Emitter::set_published`]).
    pub fn count_published(&mut self) {
        self.published += 1;
    }

    /// Replaces the count with the run ledger's (distinct ids, persisted across restarts).
    pub fn set_published(&mut self, n: u64) {
        self.published = n;
    }

    /// Distinct DATA ids published so far (the terminator's seq, EOS-7).
    pub fn published(&self) -> u64 {
        self.published
    }

    /// The EOS terminator (WIRE-6): trace `eos-r{replica}`, seq per EOS-7, no payload.
    pub fn eos(&self) -> Envelope {
        self.terminator(MsgType::Eos, "eos", None)
    }

    /// The ABORT terminator (ABORT-1): trace `abort-r{replica}`, the error record (cut to
    /// 2048 code points by the encoder), no metadata, no event time.
    pub fn abort(&self, error: WireError) -> Envelope {
        self.terminator(MsgType::Abort, "abort", Some(error))
    }

    fn terminator(&self, msg_type: MsgType, word: &str, error: Option<WireError>) -> Envelope {
        Envelope {
            producer_name: self.node.clone(),
            flow_id: self.flow_id.clone(),
            run_id: self.run_id.clone(),
            trace_id: format!("{word}-r{}", self.replica_id),
            seq: self.published,
            event_ts: None,
            msg_type,
            replica_id: self.replica_id,
            error,
            ..Envelope::default()
        }
    }
}

/// MSGID-5: an opaque epoch of 12 lowercase hex characters, new per process.
fn mint_epoch() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    let mut hex = sha256hex(&format!("{:016x}", h.finish()));
    hex.truncate(12);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;
    use videoflow_core::envelope::{decode, encode};

    #[test]
    fn msgid_5_live_identities() {
        let mut e = Emitter::new("f", "r", "cam", 0);
        assert_eq!(e.epoch().len(), 12);
        assert!(e.epoch().chars().all(|c| c.is_ascii_hexdigit()));
        let (t1, s1) = e.mint();
        let (t2, s2) = e.mint();
        assert_eq!((s1, s2), (1, 2));
        assert_eq!(t1, format!("cam:{}:1", e.epoch()));
        assert_eq!(t2, format!("cam:{}:2", e.epoch()));
        assert_ne!(
            Emitter::new("f", "r", "cam", 0).epoch(),
            e.epoch(),
            "new per process"
        );
    }

    #[test]
    fn msgid_6_replayable_identities_are_offsets() {
        let mut e = Emitter::new("f", "r", "cam", 0);
        e.replay_from(41);
        assert!(e.is_replayable());
        assert_eq!(e.mint(), ("cam:42".to_owned(), 42));
        assert_eq!(e.mint(), ("cam:43".to_owned(), 43));
        let mut fresh = Emitter::new("f", "r", "cam", 0);
        fresh.replay_from(0);
        assert_eq!(
            fresh.mint(),
            ("cam:1".to_owned(), 1),
            "the same id in any process"
        );
    }

    #[test]
    fn wire_4_loop_7_8_data_envelope() {
        let e = Emitter::new("flow-A", "run-1", "det", 2);
        let env = e.data(
            "cam:x:1",
            1,
            1.5,
            Payload::Value(Value::Int(7)),
            Timings {
                proctime: 0.25,
                actual_proctime: 0.5,
            },
            Some(Value::from("k")),
        );
        let back = decode(&encode(&env).expect("encodes")).expect("decodes");
        assert_eq!(back.producer_name, "det");
        assert_eq!(back.replica_id, 2);
        assert_eq!(back.event_ts, Some(1.5));
        assert_eq!(back.metadata.get("proctime"), Some(&Value::Double(0.25)));
        assert_eq!(
            back.metadata.get("actual_proctime"),
            Some(&Value::Double(0.5))
        );
        assert_eq!(
            back.metadata.get(PARTITION_KEY_FIELD),
            Some(&Value::from("k"))
        );
        let no_key = e.data(
            "t",
            1,
            0.0,
            Payload::Value(Value::Null),
            Timings {
                proctime: 0.0,
                actual_proctime: 0.0,
            },
            Some(Value::Null),
        );
        assert!(!no_key.metadata.contains_key(PARTITION_KEY_FIELD));
    }

    #[test]
    fn wire_6_eos_7_terminators() {
        let mut e = Emitter::new("flow-A", "run-1", "cam", 3);
        for _ in 0..40 {
            e.count_published();
        }
        let eos = e.eos();
        assert_eq!((eos.trace_id.as_str(), eos.seq), ("eos-r3", 40));
        assert_eq!(eos.event_ts, None);
        assert!(eos.metadata.is_empty());
        let abort = e.abort(WireError::new("VF_POISON", "bad"));
        assert_eq!(abort.trace_id, "abort-r3");
        assert!(
            decode(&encode(&abort).expect("encodes"))
                .expect("decodes")
                .is_abort()
        );
        assert_eq!(e.data_subject(), "vf.flow-A.run-1.cam");
        assert_eq!(e.eos_subject(), "vf.flow-A.run-1.cam._eos");
    }
}
