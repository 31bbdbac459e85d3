//! One pull request, read to its true end (§8.4).
//!
//! Why not the client's own batch reader: it ends a request at the first status the server
//! sends and drops its subscription, with whatever data is still on the way. On a replicated
//! consumer the server holds each delivery until the consumer's replicas agree on it, while
//! a status that ends the request (`409 Batch Completed`, `409 Message Size Exceeds
//! MaxBytes`, `408 Request Timeout`) goes out at once — so the status can arrive before the
//! messages it follows. Those messages are leased to this replica and would sit unread until
//! `ack_wait` gave them to someone else. A status that ends a request says how many of the
//! asked-for messages it did *not* deliver (`Nats-Pending-Messages`), so this reader keeps
//! reading until it has the others, within [`LATE_DATA_GRACE`].

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::consumer::pull::BatchConfig;
use async_nats::{StatusCode, Subscriber, jetstream};
use futures::StreamExt;
use tokio::time::Instant;

/// How long a request whose end the server announced waits for the messages it says were
/// delivered and have not arrived yet (replicated deliveries trail the status by a quorum
/// round trip).
const LATE_DATA_GRACE: Duration = Duration::from_secs(2);
/// How long past its expiry a request waits for the server's word that it ended.
const EXPIRY_SLACK: Duration = Duration::from_secs(5);

/// An open pull request.
pub(super) struct PullRequest {
    subscriber: Subscriber,
    context: jetstream::Context,
    asked: usize,
    received: usize,
    /// Messages the server delivered for this request, once a status has said.
    delivered: Option<usize>,
    /// Why the request ended badly, reported once its delivered messages are read.
    failure: Option<String>,
    deadline: Instant,
}

/// What the server's status says about a request.
#[derive(Debug, PartialEq, Eq)]
enum Status {
    /// A heartbeat: nothing.
    Heartbeat,
    /// The request ended; `pending` of the asked-for messages were not delivered (`None`:
    /// the status did not say). `failure` when the end is an error, not the request's
    /// normal end.
    Ended {
        pending: Option<usize>,
        failure: Option<String>,
    },
}

/// Reads a status message: its code, description and `Nats-Pending-Messages` header.
fn status(code: StatusCode, description: Option<&str>, pending: Option<&str>) -> Status {
    if code == StatusCode::IDLE_HEARTBEAT {
        return Status::Heartbeat;
    }
    let pending = pending.and_then(|p| p.trim().parse().ok());
    let what = description.unwrap_or_default();
    // The normal ends of a request: expired, no messages (no-wait), asked-for count reached
    // with bytes to spare, byte limit reached.
    let normal = code == StatusCode::TIMEOUT
        || code == StatusCode::NOT_FOUND
        || (code == StatusCode::REQUEST_TERMINATED
            && (what.eq_ignore_ascii_case("Batch Completed")
                || what.eq_ignore_ascii_case("Message Size Exceeds MaxBytes")));
    Status::Ended {
        pending,
        failure: (!normal).then(|| format!("pull request ended by the server: {code} {what}")),
    }
}

impl PullRequest {
    /// Asks `consumer` for up to `max` messages (and at most `max_bytes` bytes, where given),
    /// expiring after `expiry`.
    pub(super) async fn open(
        consumer: &PullConsumer,
        context: &jetstream::Context,
        max: usize,
        max_bytes: Option<u64>,
        expiry: Duration,
    ) -> Result<Self, String> {
        let client = context.client();
        let inbox = client.new_inbox();
        let subscriber = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| e.to_string())?;
        let request = BatchConfig {
            batch: max,
            expires: Some(expiry),
            max_bytes: max_bytes.map_or(0, |b| usize::try_from(b).unwrap_or(usize::MAX)),
            ..BatchConfig::default()
        };
        consumer
            .request_batch(request, inbox.into())
            .await
            .map_err(|e| e.to_string())?;
        Ok(PullRequest {
            subscriber,
            context: context.clone(),
            asked: max,
            received: 0,
            delivered: None,
            failure: None,
            deadline: Instant::now() + expiry + EXPIRY_SLACK,
        })
    }

    /// The next message of the request; `None` at its end, an error once if it ended badly.
    pub(super) async fn next(&mut self) -> Option<Result<jetstream::Message, String>> {
        loop {
            if self.received >= self.delivered.unwrap_or(self.asked) {
                return self.failure.take().map(Err);
            }
            let message = match tokio::time::timeout_at(self.deadline, self.subscriber.next()).await
            {
                Ok(Some(message)) => message,
                Ok(None) => return self.failure.take().map(Err),
                Err(_) => {
                    if self.delivered.is_some() {
                        tracing::debug!(
                            missing = self.delivered.unwrap_or(0).saturating_sub(self.received),
                            "delivered messages did not arrive; the broker redelivers them after ack_wait"
                        );
                    }
                    return self.failure.take().map(Err);
                }
            };
            let code = message.status.unwrap_or(StatusCode::OK);
            if code == StatusCode::OK {
                self.received += 1;
                return Some(Ok(jetstream::Message {
                    message,
                    context: self.context.clone(),
                }));
            }
            let pending = message
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Pending-Messages"))
                .map(|v| v.as_str().to_owned());
            match status(code, message.description.as_deref(), pending.as_deref()) {
                Status::Heartbeat => {}
                Status::Ended { pending, failure } => {
                    self.failure = failure;
                    // Without the count, what arrived is all there is.
                    let delivered = pending.map_or(self.received, |p| self.asked.saturating_sub(p));
                    self.delivered = Some(delivered.max(self.received));
                    self.deadline = Instant::now() + LATE_DATA_GRACE;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_ends_of_a_request_are_no_failure() {
        for (code, what) in [
            (StatusCode::TIMEOUT, Some("Request Timeout")),
            (StatusCode::NOT_FOUND, Some("No Messages")),
            (StatusCode::REQUEST_TERMINATED, Some("Batch Completed")),
            (
                StatusCode::REQUEST_TERMINATED,
                Some("Message Size Exceeds MaxBytes"),
            ),
        ] {
            assert_eq!(
                status(code, what, Some("3")),
                Status::Ended {
                    pending: Some(3),
                    failure: None
                },
                "{what:?}"
            );
        }
    }

    #[test]
    fn other_conflicts_end_the_request_as_failures() {
        let Status::Ended { pending, failure } = status(
            StatusCode::REQUEST_TERMINATED,
            Some("Leadership Change"),
            None,
        ) else {
            panic!("an end");
        };
        assert_eq!(pending, None);
        assert!(failure.is_some_and(|f| f.contains("Leadership Change")));
    }

    #[test]
    fn a_heartbeat_ends_nothing() {
        assert_eq!(
            status(StatusCode::IDLE_HEARTBEAT, Some("Idle Heartbeat"), None),
            Status::Heartbeat
        );
    }
}
