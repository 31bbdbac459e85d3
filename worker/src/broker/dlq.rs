//! Dead letters (DELIV-8): the original raw bytes, with the failure as headers, on the
//! node's subject of the flow's DLQ stream.
//!
//! Why the raw bytes and a sequence-derived id: a dead letter is the evidence, and it must
//! survive even when the bytes are not an envelope (T19); its id
//! `dlq:{flow}:{run}:{node}:{stream_seq}` is unique per original message, so a retry — now or
//! by a replacement process — can never record it twice. No `VF-Env`: it is not an envelope
//! publication.

use bytes::Bytes;
use videoflow_core::errors::{Disposition, VfError};
use videoflow_core::naming;

use super::connect::Broker;
use super::publish::{Attempt, Publication, attempt};

/// DELIV-8: attempts of one dead-letter publish.
pub const DLQ_ATTEMPTS: usize = 3;
/// DELIV-8: bound of each attempt.
pub const DLQ_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// DELIV-8: sleeps after each failed attempt (the last is skipped: nothing follows it).
pub const DLQ_BACKOFF: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(200),
    std::time::Duration::from_millis(300),
];
/// DELIV-8: `VF-Error` and `VF-Remedy` carry at most this many characters.
pub const HEADER_TEXT_MAX: usize = 256;

/// Everything a dead letter records.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// Raw flow id.
    pub flow: String,
    /// Raw run id.
    pub run: String,
    /// Raw node name (the node that failed the message).
    pub node: String,
    /// The error code (`VF_…`).
    pub code: String,
    /// The disposition the ladder used; `None` renders empty.
    pub disposition: Option<Disposition>,
    /// The error message (cut to 256 characters on the wire).
    pub error: String,
    /// The remedy, if any (cut to 256 characters).
    pub remedy: Option<String>,
    /// The broker's delivery count of the original.
    pub num_delivered: u64,
    /// The broker stream sequence of the original.
    pub stream_seq: u64,
    /// The original bytes, verbatim.
    pub raw: Bytes,
}

fn cut(text: &str) -> String {
    text.chars().take(HEADER_TEXT_MAX).collect()
}

impl DeadLetter {
    /// A dead letter for `error` (its code, disposition, message, remedy).
    pub fn from_error(
        flow: &str,
        run: &str,
        node: &str,
        error: &VfError,
        num_delivered: u64,
        stream_seq: u64,
        raw: Bytes,
    ) -> Self {
        DeadLetter {
            flow: flow.to_owned(),
            run: run.to_owned(),
            node: node.to_owned(),
            code: error.code.code().to_owned(),
            disposition: error.disposition,
            error: error.message.clone(),
            remedy: error.remedy_text().map(str::to_owned),
            num_delivered,
            stream_seq,
            raw,
        }
    }

    /// `dlq:{flow}:{run}:{node}:{stream_seq}` with raw ids: the `Nats-Msg-Id`, and the record
    /// reference a TERM carries.
    pub fn msg_id(&self) -> String {
        format!(
            "dlq:{}:{}:{}:{}",
            self.flow, self.run, self.node, self.stream_seq
        )
    }

    /// NAME-9's node subject `vf.{flow}._dlq.{run}.{node}`.
    pub fn subject(&self) -> String {
        naming::dlq_subject(&self.flow, &self.run, &self.node)
    }

    /// The headers besides `Nats-Msg-Id`, in DELIV-8's order.
    pub fn headers(&self) -> Vec<(String, String)> {
        vec![
            ("VF-Origin-Node".into(), self.node.clone()),
            ("VF-Run-Id".into(), self.run.clone()),
            ("VF-Code".into(), self.code.clone()),
            (
                "VF-Disposition".into(),
                self.disposition
                    .map_or_else(String::new, |d| d.as_str().to_owned()),
            ),
            ("VF-Error".into(), cut(&self.error)),
            (
                "VF-Remedy".into(),
                cut(self.remedy.as_deref().unwrap_or_default()),
            ),
            ("VF-Num-Delivered".into(), self.num_delivered.to_string()),
        ]
    }

    /// The publication: raw bytes, DELIV-8 headers, no `VF-Env`.
    pub fn publication(&self) -> Publication {
        self.headers().into_iter().fold(
            Publication::raw(self.subject(), self.msg_id(), self.raw.clone()),
            |p, (name, value)| p.with_header(name, value),
        )
    }
}

/// How a dead-letter publish ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterOutcome {
    /// Stored (a duplicate counts: an earlier attempt recorded it). TERM the original with
    /// `msg_id` as its record reference.
    Accepted {
        /// The dead letter's id.
        msg_id: String,
        /// Its DLQ stream sequence.
        stream_seq: u64,
        /// Whether an earlier attempt had stored it.
        duplicate: bool,
    },
    /// Not recorded: keep the original (NAK 5 s and record a `pending_handoff`).
    NotAccepted {
        /// The dead letter's id, to retry under.
        msg_id: String,
        /// The last failure.
        reason: String,
    },
}

impl DeadLetterOutcome {
    /// Whether the broker holds the dead letter.
    pub fn is_accepted(&self) -> bool {
        matches!(self, DeadLetterOutcome::Accepted { .. })
    }
}

/// Publishes a dead letter: up to 3 attempts of ≤ 5 s, sleeping 0.1/0.2 s between them; a
/// non-retryable rejection stops at once (DELIV-8). Never an error: the caller decides what
/// keeping the original means.
pub async fn publish_dead_letter(broker: &Broker, letter: &DeadLetter) -> DeadLetterOutcome {
    let publication = letter.publication();
    let mut reason = String::new();
    for (i, pause) in DLQ_BACKOFF.iter().enumerate().take(DLQ_ATTEMPTS) {
        match attempt(broker, &publication, DLQ_ATTEMPT_TIMEOUT).await {
            Attempt::Stored {
                stream_seq,
                duplicate,
            } => {
                return DeadLetterOutcome::Accepted {
                    msg_id: publication.msg_id,
                    stream_seq,
                    duplicate,
                };
            }
            Attempt::Rejected {
                reason: r,
                retryable: false,
            } => {
                tracing::error!(msg_id = %publication.msg_id, reason = %r, "dead-letter publish rejected");
                return DeadLetterOutcome::NotAccepted {
                    msg_id: publication.msg_id,
                    reason: r,
                };
            }
            Attempt::Rejected { reason: r, .. } | Attempt::NoReceipt { reason: r } => reason = r,
        }
        if i + 1 < DLQ_ATTEMPTS {
            tokio::time::sleep(*pause).await;
        }
    }
    tracing::error!(msg_id = %publication.msg_id, %reason, "dead-letter publish could not be confirmed");
    DeadLetterOutcome::NotAccepted {
        msg_id: publication.msg_id,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use videoflow_core::errors::ErrorCode;

    #[test]
    fn deliv_8_headers_and_id() {
        let error = VfError::new(ErrorCode::PoisonDecode, "é".repeat(300))
            .with_disposition(Disposition::Poison);
        let letter = DeadLetter::from_error(
            "flow.A",
            "run:1",
            "det",
            &error,
            3,
            42,
            Bytes::from_static(b"\x00raw"),
        );
        assert_eq!(letter.msg_id(), "dlq:flow.A:run:1:det:42");
        assert_eq!(letter.subject(), "vf.flow_A._dlq.run_1.det");
        let headers = letter.headers();
        let get = |k: &str| {
            headers
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("VF-Code"), "VF_POISON_DECODE");
        assert_eq!(get("VF-Disposition"), "poison");
        assert_eq!(get("VF-Error").chars().count(), 256);
        assert_eq!(get("VF-Remedy"), "");
        assert_eq!(get("VF-Num-Delivered"), "3");
        assert!(
            letter
                .publication()
                .headers
                .iter()
                .all(|(n, _)| n != "VF-Env")
        );
    }
}
