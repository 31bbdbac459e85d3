//! The flow-wide stop (CTRL-1): a plain-NATS message on NAME-8 sets the termination flag.
//!
//! Why a flag type here: the same "set once, first reason wins, awaitable" flag is what the
//! control subscription sets, what a BATCH publication checks between retries (DELIV-5), and
//! what the task loop reads; one type keeps them from drifting. It is a `tokio::sync::watch`
//! underneath, so it is bounded (one value) and any number of tasks can await it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use videoflow_core::naming;

use super::connect::Broker;
use super::error::{BrokerError, REMEDY_CONNECT};

/// The stop reason a control message records (CTRL-1).
pub const STOP_REASON_CONTROL: &str = "control";
/// The payload senders use; receivers never inspect it (T7).
pub const STOP_PAYLOAD: &[u8] = b"stop";
/// How long subscribing or sending waits for the server to confirm (flush).
pub const CONTROL_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// A termination flag: set once, the first reason wins (CTRL-2), cheap to clone and await.
#[derive(Debug, Clone)]
pub struct StopFlag {
    tx: Arc<watch::Sender<Option<String>>>,
}

impl Default for StopFlag {
    fn default() -> Self {
        StopFlag::new()
    }
}

impl StopFlag {
    /// A flag that is not set.
    pub fn new() -> Self {
        StopFlag {
            tx: Arc::new(watch::Sender::new(None)),
        }
    }

    /// Sets the flag with `reason`; `false` if it was already set (the first reason stays).
    pub fn set(&self, reason: &str) -> bool {
        self.tx.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason.to_owned());
                true
            } else {
                false
            }
        })
    }

    /// Whether the flag is set.
    pub fn is_set(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// The first reason recorded, if set.
    pub fn reason(&self) -> Option<String> {
        self.tx.borrow().clone()
    }

    /// Resolves once the flag is set (at once if it already is).
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// A receiver for `select!`-style use.
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.tx.subscribe()
    }
}

/// The live subscription to NAME-8. Dropping it stops listening.
#[derive(Debug)]
pub struct ControlSubscription {
    observed: StopFlag,
    task: JoinHandle<()>,
}

impl ControlSubscription {
    /// Whether a control message has arrived on this subscription.
    pub fn observed(&self) -> bool {
        self.observed.is_set()
    }

    /// Resolves once a control message has arrived.
    pub async fn wait(&self) {
        self.observed.wait().await;
    }
}

impl Drop for ControlSubscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Subscribes to the run's control subject and sets `flag` with reason `control` at the
/// first message, whatever its payload (CTRL-1). Returns once the server has the
/// subscription (flushed), so a stop sent afterwards is not missed.
///
/// # Errors
/// BrokerUnavailable when the subscription cannot be made or confirmed.
pub async fn subscribe_control(
    broker: &Broker,
    flow: &str,
    run: &str,
    flag: &StopFlag,
) -> Result<ControlSubscription, BrokerError> {
    let subject = naming::control_subject(flow, run);
    let failed = |detail: String| {
        BrokerError::unavailable(
            format!("could not subscribe to the control subject {subject}: {detail}"),
            REMEDY_CONNECT,
        )
    };
    let mut subscriber = broker
        .client()
        .subscribe(subject.clone())
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !round_trip(broker, CONTROL_FLUSH_TIMEOUT).await {
        return Err(failed("the server did not confirm the subscription".into()));
    }
    let observed = StopFlag::new();
    let (seen, flag) = (observed.clone(), flag.clone());
    let task = tokio::spawn(async move {
        if subscriber.next().await.is_some() {
            tracing::info!("flow-wide stop received on the control subject");
            flag.set(STOP_REASON_CONTROL);
            seen.set(STOP_REASON_CONTROL);
        }
        let _ = subscriber.unsubscribe().await;
    });
    Ok(ControlSubscription { observed, task })
}

/// A server round trip on `broker`'s connection: an echo of our own message on a fresh
/// inbox. The server handles one connection's operations in order, so once the echo is back
/// every subscription made before it is registered. (`flush` alone only writes the socket:
/// a stop published on another connection right after could reach the server first and be
/// missed.)
async fn round_trip(broker: &Broker, within: Duration) -> bool {
    let client = broker.client();
    let inbox = client.new_inbox();
    let Ok(mut echo) = client.subscribe(inbox.clone()).await else {
        return false;
    };
    let sent = client.publish(inbox, Bytes::new()).await.is_ok() && broker.flush(within).await;
    let back = sent && matches!(tokio::time::timeout(within, echo.next()).await, Ok(Some(_)));
    let _ = echo.unsubscribe().await;
    back
}

/// Publishes the flow-wide stop (`stop` on NAME-8) and flushes it (CTRL-1). The subject has
/// no retention: a sender that needs the stop observed repeats it (CTRL-1a, ABORT-6).
///
/// # Errors
/// BrokerUnavailable when the publish or the flush fails.
pub async fn send_control_stop(broker: &Broker, flow: &str, run: &str) -> Result<(), BrokerError> {
    let subject = naming::control_subject(flow, run);
    let failed = |detail: String| {
        BrokerError::unavailable(
            format!("could not publish the control stop on {subject}: {detail}"),
            REMEDY_CONNECT,
        )
    };
    broker
        .client()
        .publish(subject.clone(), Bytes::from_static(STOP_PAYLOAD))
        .await
        .map_err(|e| failed(e.to_string()))?;
    if broker.flush(CONTROL_FLUSH_TIMEOUT).await {
        Ok(())
    } else {
        Err(failed("flush not confirmed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ctrl_2_first_reason_wins() {
        let flag = StopFlag::new();
        assert!(!flag.is_set());
        assert!(flag.set("control"));
        assert!(!flag.set("quiesce"));
        assert_eq!(flag.reason().as_deref(), Some("control"));
        flag.wait().await;
    }
}
