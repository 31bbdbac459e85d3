//! Supervision (§16): the progress deadline (SUP-1) and the watchdog thread (SUP-2) that
//! re-checks it while the node is inside `process()`/`consume()`.
//!
//! Why a std thread: the loop checks the deadline between groups, which misses the failure
//! the deadline exists for — a callback that never returns. A wedged `process()` holds its
//! runtime worker (and, in the worst case, every worker), so the watchdog must not need the
//! async runtime to act: it reads the pending count through a bounded probe, writes the
//! termination record with plain file I/O and calls `std::process::exit` itself.
//!
//! The deadline takes an injected clock and probe, so "does it fire, and does it *not* fire"
//! is testable without waiting on real time; the watchdog only runs `tick()` on a schedule.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::scaling::Observation;

/// Reads the node's pending work: local queues + Σ over parents of the broker's
/// `num_pending + num_ack_pending`, Unknown when any read failed (SUP-1).
pub type PendingProbe = Arc<dyn Fn() -> Observation<i64> + Send + Sync>;
/// Monotonic seconds.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;

#[derive(Debug)]
struct DeadlineState {
    last_progress: f64,
    unknown_since: Option<f64>,
}

/// SUP-1: how long the node may acknowledge nothing while work is pending. One instance is
/// shared by the loop (which records progress and checks between groups) and the watchdog.
pub struct ProgressDeadline {
    node: String,
    timeout: f64,
    probe: PendingProbe,
    clock: Clock,
    state: Mutex<DeadlineState>,
}

impl std::fmt::Debug for ProgressDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressDeadline")
            .field("node", &self.node)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A monotonic clock starting now.
pub fn monotonic_clock() -> Clock {
    let start = Instant::now();
    Arc::new(move || start.elapsed().as_secs_f64())
}

impl ProgressDeadline {
    /// A deadline of `timeout` seconds (≤ 0 disables it) for `node`.
    pub fn new(node: &str, timeout: f64, probe: PendingProbe, clock: Clock) -> Self {
        let now = clock();
        ProgressDeadline {
            node: node.to_owned(),
            timeout,
            probe,
            clock,
            state: Mutex::new(DeadlineState {
                last_progress: now,
                unknown_since: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DeadlineState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every ack and every failure, and the return of `open()`, reset the silence clock.
    pub fn record_progress(&self) {
        let now = (self.clock)();
        self.state().last_progress = now;
    }

    /// Whether [`check`](Self::check) would return Ok without reading the probe: the
    /// deadline is off, or the node is silent for less than the timeout.
    pub fn within(&self) -> bool {
        self.timeout <= 0.0 || self.silent_for() < self.timeout
    }

    /// Seconds since the last progress.
    pub fn silent_for(&self) -> f64 {
        (self.clock)() - self.state().last_progress
    }

    /// SUP-1 `check()`: Ok while within the deadline or idle; ProgressStalled (exit 5) when
    /// silent past the timeout with Known pending work; BrokerUnavailable (exit 3) once
    /// Unknown has lasted twice the timeout. The probe is read only past the threshold.
    pub fn check(&self) -> Result<(), VfError> {
        if self.timeout <= 0.0 {
            return Ok(());
        }
        let silence = self.silent_for();
        if silence < self.timeout {
            return Ok(());
        }
        let observed = (self.probe)();
        let now = (self.clock)();
        let mut st = self.state();
        match observed {
            Observation::Unknown { reason, detail } => {
                let since = *st.unknown_since.get_or_insert(now);
                let unknown = now - since;
                if unknown >= 2.0 * self.timeout {
                    return Err(VfError::new(
                        ErrorCode::BrokerUnavailable,
                        format!(
                            "{} could not observe its pending work for {unknown:.0}s ({reason}: {detail}); the broker state is unknown, which is not the same as empty.",
                            self.node
                        ),
                    )
                    .with_remedy("Restore broker connectivity/permissions (consumer_info must be readable); the node neither completed nor stalled while the query failed.")
                    .with_context("node", self.node.clone())
                    .with_context("unknown_seconds", round1(unknown)));
                }
                Ok(())
            }
            Observation::Known(pending) => {
                st.unknown_since = None;
                if pending <= 0 {
                    st.last_progress = now; // idle, not stalled
                    return Ok(());
                }
                Err(VfError::new(
                    ErrorCode::ProgressStalled,
                    format!(
                        "{} has acknowledged nothing for {silence:.0}s while {pending} message(s) are pending — it is not slow, it is stuck.",
                        self.node
                    ),
                )
                .with_remedy("Look for a blocking call in process()/consume() with no timeout: an unbounded read, a lock, or a request to a service that never answers. Raise VF_PROGRESS_TIMEOUT_SECONDS if the node is legitimately this slow.")
                .with_context("node", self.node.clone())
                .with_context("silent_seconds", round1(silence))
                .with_context("pending", pending))
            }
        }
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// What the watchdog does with the stall: the worker's exits the process.
pub type OnStall = Box<dyn FnOnce(VfError) + Send>;

/// SUP-2: re-checks a [`ProgressDeadline`] every interval on a thread named
/// `vf-watchdog-<node>` and hands the first ProgressStalled/BrokerUnavailable to `on_stall`,
/// exactly once.
pub struct ProgressWatchdog {
    deadline: Arc<ProgressDeadline>,
    interval: Duration,
    name: String,
    on_stall: Arc<Mutex<Option<OnStall>>>,
    fired: Arc<Mutex<Option<VfError>>>,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProgressWatchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressWatchdog")
            .field("name", &self.name)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl ProgressWatchdog {
    /// A watchdog over `deadline`; an interval ≤ 0 is ConfigError (SUP-2).
    pub fn new(
        deadline: Arc<ProgressDeadline>,
        interval_seconds: f64,
        on_stall: OnStall,
        name: &str,
    ) -> Result<Self, VfError> {
        if interval_seconds.is_nan() || interval_seconds <= 0.0 || !interval_seconds.is_finite() {
            return Err(VfError::new(
                ErrorCode::Config,
                format!(
                    "A progress watchdog needs a positive interval, not {}.",
                    videoflow_core::partition::py_float(interval_seconds)
                ),
            )
            .with_remedy("Set VF_WATCHDOG_INTERVAL_SECONDS to a positive number of seconds, or to 0 to run without the watchdog thread."));
        }
        Ok(ProgressWatchdog {
            deadline,
            interval: Duration::from_secs_f64(interval_seconds),
            name: name.to_owned(),
            on_stall: Arc::new(Mutex::new(Some(on_stall))),
            fired: Arc::new(Mutex::new(None)),
            stop: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
            running: Arc::new(AtomicBool::new(false)),
            thread: None,
        })
    }

    /// One check; true if the watchdog has fired (now or before). `on_stall` runs at most
    /// once; any error other than a stall is logged and ignored.
    pub fn tick(&self) -> bool {
        tick(&self.deadline, &self.fired, &self.on_stall)
    }

    /// The error it fired with, if any.
    pub fn stall(&self) -> Option<VfError> {
        self.fired.lock().ok().and_then(|f| f.clone())
    }

    /// Starts the thread; idempotent, and a no-op after firing.
    pub fn start(&mut self) -> Result<(), VfError> {
        if self.running.load(Ordering::SeqCst) || self.stall().is_some() {
            return Ok(());
        }
        if let Ok(mut s) = self.stop.0.lock() {
            *s = false;
        }
        let (deadline, fired, on_stall, stop, running, interval) = (
            self.deadline.clone(),
            self.fired.clone(),
            self.on_stall.clone(),
            self.stop.clone(),
            self.running.clone(),
            self.interval,
        );
        running.store(true, Ordering::SeqCst);
        let handle = std::thread::Builder::new()
            .name(format!("vf-watchdog-{}", self.name))
            .spawn(move || {
                let (lock, cv) = &*stop;
                loop {
                    let Ok(guard) = lock.lock() else { break };
                    let Ok((guard, _)) = cv.wait_timeout_while(guard, interval, |s| !*s) else {
                        break;
                    };
                    if *guard {
                        break;
                    }
                    drop(guard);
                    if tick(&deadline, &fired, &on_stall) {
                        break;
                    }
                }
                running.store(false, Ordering::SeqCst);
            })
            .map_err(|e| {
                VfError::new(
                    ErrorCode::ResourceUnavailable,
                    format!("cannot start the progress watchdog thread: {e}"),
                )
            })?;
        self.thread = Some(handle);
        Ok(())
    }

    /// Stops the thread and joins it (unless called from the watchdog thread itself).
    pub fn stop(&mut self) {
        if let Ok(mut s) = self.stop.0.lock() {
            *s = true;
        }
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Drop for ProgressWatchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tick(
    deadline: &ProgressDeadline,
    fired: &Mutex<Option<VfError>>,
    on_stall: &Mutex<Option<OnStall>>,
) -> bool {
    if fired.lock().map(|f| f.is_some()).unwrap_or(true) {
        return true;
    }
    match deadline.check() {
        Ok(()) => false,
        Err(e)
            if matches!(
                e.code,
                ErrorCode::ProgressStalled | ErrorCode::BrokerUnavailable
            ) =>
        {
            if let Ok(mut f) = fired.lock() {
                *f = Some(e.clone());
            }
            let callback = on_stall.lock().ok().and_then(|mut c| c.take());
            if let Some(cb) = callback {
                cb(e);
            }
            true
        }
        Err(e) => {
            tracing::warn!(
                "progress watchdog could not check the deadline; will retry: {}",
                e.log_line()
            );
            false
        }
    }
}

/// The worker's `on_stall` (SUP-2): log, write the termination record, exit the process with
/// the error's code at once — `close()` is skipped on purpose, the node is wedged inside a
/// call no thread can unwind.
pub fn exit_process(termination_log: PathBuf) -> OnStall {
    Box::new(move |e: VfError| {
        let code = crate::termination::report(&termination_log, &e);
        std::process::exit(code);
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use super::*;

    struct Fake {
        now: Arc<Mutex<f64>>,
        pending: Arc<Mutex<Observation<i64>>>,
    }

    fn fake(timeout: f64) -> (Fake, Arc<ProgressDeadline>) {
        let now = Arc::new(Mutex::new(0.0));
        let pending = Arc::new(Mutex::new(Observation::Known(3)));
        let (n, p) = (now.clone(), pending.clone());
        let d = ProgressDeadline::new(
            "hang",
            timeout,
            Arc::new(move || p.lock().expect("lock").clone()),
            Arc::new(move || *n.lock().expect("lock")),
        );
        (Fake { now, pending }, Arc::new(d))
    }

    impl Fake {
        fn at(&self, t: f64) {
            *self.now.lock().expect("lock") = t;
        }
        fn pending(&self, o: Observation<i64>) {
            *self.pending.lock().expect("lock") = o;
        }
    }

    #[test]
    fn sup_1_stalls_only_past_the_timeout_with_pending_work() {
        let (f, d) = fake(10.0);
        f.at(9.9);
        assert!(d.check().is_ok());
        f.at(12.34);
        let e = d.check().expect_err("stalled");
        assert_eq!(e.code, ErrorCode::ProgressStalled);
        assert_eq!(e.exit_code(), 5);
        assert_eq!(
            e.message,
            "hang has acknowledged nothing for 12s while 3 message(s) are pending — it is not slow, it is stuck."
        );
        assert_eq!(e.context.get("pending"), Some(&serde_json::json!(3)));
        assert_eq!(
            e.context.get("silent_seconds"),
            Some(&serde_json::json!(12.3))
        );
        d.record_progress();
        assert!(d.check().is_ok(), "an ack resets the clock");
    }

    #[test]
    fn sup_1_idle_resets_and_unknown_neither_resets_nor_trips_until_twice_the_timeout() {
        let (f, d) = fake(10.0);
        f.pending(Observation::Known(0));
        f.at(15.0);
        assert!(d.check().is_ok());
        f.pending(Observation::Known(1));
        f.at(20.0);
        assert!(d.check().is_ok(), "idle reset the silence clock at 15");
        f.pending(Observation::unknown("timeout", "no answer"));
        f.at(30.0);
        assert!(d.check().is_ok(), "first unknown starts the grace");
        f.at(49.0);
        assert!(d.check().is_ok());
        f.at(50.0);
        let e = d.check().expect_err("unknown too long");
        assert_eq!(e.code, ErrorCode::BrokerUnavailable);
        assert_eq!(e.exit_code(), 3);
        assert!(
            e.message
                .contains("could not observe its pending work for 20s (timeout: no answer)")
        );
        // A Known answer clears the grace.
        f.pending(Observation::Known(2));
        assert_eq!(
            d.check().map_err(|e| e.code),
            Err(ErrorCode::ProgressStalled)
        );
    }

    #[test]
    fn sup_1_a_non_positive_timeout_disables_the_deadline() {
        let (f, d) = fake(0.0);
        f.at(1e9);
        assert!(d.check().is_ok());
    }

    #[test]
    fn sup_2_tick_fires_once_and_interval_must_be_positive() {
        let (f, d) = fake(1.0);
        let calls = Arc::new(AtomicI64::new(0));
        let c = calls.clone();
        let w = ProgressWatchdog::new(
            d.clone(),
            0.5,
            Box::new(move |_| {
                c.fetch_add(1, Ordering::SeqCst);
            }),
            "hang",
        )
        .expect("builds");
        assert!(!w.tick());
        f.at(2.0);
        assert!(w.tick());
        assert!(w.tick());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(w.stall().map(|e| e.code), Some(ErrorCode::ProgressStalled));
        for bad in [0.0, -1.0] {
            let e =
                ProgressWatchdog::new(d.clone(), bad, Box::new(|_| {}), "x").expect_err("refused");
            assert_eq!(e.code, ErrorCode::Config);
            assert!(
                e.message
                    .starts_with("A progress watchdog needs a positive interval, not ")
            );
        }
    }

    #[test]
    fn sup_2_thread_detects_within_timeout_plus_interval_and_stops() {
        let d = Arc::new(ProgressDeadline::new(
            "hang",
            0.2,
            Arc::new(|| Observation::Known(1)),
            monotonic_clock(),
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let started = Instant::now();
        let mut w = ProgressWatchdog::new(
            d,
            0.05,
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
            "hang",
        )
        .expect("builds");
        w.start().expect("starts");
        w.start().expect("idempotent");
        let e = rx.recv_timeout(Duration::from_secs(5)).expect("fired");
        assert_eq!(e.code, ErrorCode::ProgressStalled);
        assert!(started.elapsed() < Duration::from_millis(250 + 500));
        w.stop();
        // A watchdog stopped before it fires never calls back.
        let d = Arc::new(ProgressDeadline::new(
            "n",
            100.0,
            Arc::new(|| Observation::Known(1)),
            monotonic_clock(),
        ));
        let mut w = ProgressWatchdog::new(d, 0.01, Box::new(|_| panic!("must not fire")), "n")
            .expect("builds");
        w.start().expect("starts");
        std::thread::sleep(Duration::from_millis(30));
        w.stop();
    }
}
