//! After a clean end under `VF_ON_FINISH=hold`: the worker stays up, ready and live, until
//! SIGTERM or SIGINT.
//!
//! Why: a Kubernetes Deployment or StatefulSet restarts every exit, a clean one too. A
//! REALTIME flow whose sources are finite drains to its end like a BATCH one, and each of its
//! long-running workers would then be restarted into a replica with nothing left to read
//! and, on its next exit, into `CrashLoopBackOff`. Holding keeps the finished replica where
//! it is — its output written, its close() done — until the Flow is deleted.

use std::time::Duration;

use super::Signals;
use crate::config::{OnFinish, WorkerConfig};
use crate::health;

/// Beats well inside the liveness bound ([`health::LIVENESS_STALL`]) while holding.
const BEAT: Duration = Duration::from_secs(5);

/// The exit status after the loop ended with `code`: unchanged unless the end was clean (0)
/// and `VF_ON_FINISH=hold`; then this waits for SIGTERM or SIGINT and returns 0.
pub(crate) async fn after_finish(cfg: &WorkerConfig, signals: &Signals, code: i32) -> i32 {
    if code != 0 || cfg.on_finish != OnFinish::Hold {
        return code;
    }
    tracing::info!("finished; holding until stopped (VF_ON_FINISH=hold)");
    health::mark_finished();
    let mut beat = tokio::time::interval(BEAT);
    loop {
        tokio::select! {
            () = signals.quiesce.wait() => break,
            () = signals.interrupt.wait() => break,
            _ = beat.tick() => health::beat(),
        }
    }
    tracing::info!("stopped after finishing");
    0
}
