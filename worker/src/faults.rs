//! The conformance fault schedule (ENV-16/17, START-1 step 1): named barriers where a test
//! makes this worker crash, raise, sleep, lose a response or wait.
//!
//! Why barriers: a conformance case is a story with a fault in the middle ("crash after the
//! output is published but before the input is acked"). Repeating a happy-path test does not
//! reach those interleavings; a barrier does. The runtime calls [`barrier`] at each named
//! point; in production nothing is installed and the call is one atomic load.
//!
//! The format and the barrier names are the Python reference's
//! (`videoflow/backends/faults.py`), so conformance tests written for it drive this worker:
//! `VF_FAULT_SCHEDULE_JSON` maps a barrier name to an action object
//!
//! ```json
//! {"settle.before": {"kind": "nth", "n": 20, "action": {"kind": "crash", "exit_code": 137}},
//!  "publish.receipt.before": {"kind": "drop"},
//!  "sink.effect.before": {"kind": "raise", "code": "VF_TRANSIENT", "message": "boom",
//!                         "disposition": "transient"},
//!  "payload.read.before": {"kind": "delay", "seconds": 0.5},
//!  "publish.send.before": {"kind": "pause", "name": "p1", "timeout_seconds": 60}}
//! ```
//!
//! and `VF_FAULT_MARKER_DIR` names a directory (created at install) where every fired hit
//! appends `<pid> <epoch seconds>` to `<barrier>.fired`, and where `<name>.release` releases
//! a `pause`. Actions:
//!
//! - `crash` (`exit_code`, default 137): write the marker, then `std::process::exit` — no
//!   termination record, no close, no acks: the death a kill produces.
//! - `raise` (`code`, `message`, `disposition` = `poison` | `transient` | `worker_fatal`,
//!   default `transient`): the barrier returns a typed error of that disposition, which takes
//!   the normal path (in the group path: the failure ladder, DELIV-6).
//! - `delay` (`seconds`): sleep, then continue.
//! - `drop`: continue, but the caller reports the call's outcome as unknown (the lost
//!   receipt: a publication not confirmed, a settlement not confirmed).
//! - `pause` (`name`, `timeout_seconds` default 60): wait until `<dir>/<name>.release`
//!   exists (or [`FaultSchedule::release`]); never released ⇒ an untyped error.
//! - `nth` (`n`, `action`): apply `action` on the n-th hit of the barrier only.
//!
//! A control plane never renders these variables (ENV table); a malformed schedule is a
//! ConfigError naming `VF_FAULT_SCHEDULE_JSON` (the reference fails untyped there).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value as Json;
use videoflow_core::errors::{Disposition, ErrorCode, VfError};

use crate::broker::{PublishMode, PublishOutcome};

use crate::config::FaultConfig;
pub use crate::config::faults::{ENV_MARKER_DIR, ENV_SCHEDULE};
/// Default `crash` exit code (a SIGKILL's status as a shell reports it).
pub const DEFAULT_CRASH_EXIT_CODE: i32 = 137;
/// Default `pause` timeout.
pub const DEFAULT_PAUSE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a `pause` looks for its release marker.
const PAUSE_POLL: Duration = Duration::from_millis(50);

macro_rules! barriers {
    ($($(#[$doc:meta])* $variant:ident => $name:literal),* $(,)?) => {
        /// A named barrier: the reference's `BARRIERS` set, one variant per name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Barrier {
            $($(#[$doc])* $variant,)*
        }

        impl Barrier {
            /// Every barrier, in declaration order.
            pub const ALL: &'static [Barrier] = &[$(Barrier::$variant,)*];

            /// The wire name (`settle.before`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Barrier::$variant => $name,)*
                }
            }

            /// Parses a wire name; `None` for a name outside the set.
            pub fn parse(name: &str) -> Option<Barrier> {
                match name {
                    $($name => Some(Barrier::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

barriers! {
    /// Before an offloaded payload is written to the payload store.
    PayloadWriteBefore => "payload.write.before",
    /// After an offloaded payload was written.
    PayloadWriteAfter => "payload.write.after",
    /// Before an offloaded payload is fetched.
    PayloadReadBefore => "payload.read.before",
    /// After an offloaded payload was fetched and decoded.
    PayloadReadAfter => "payload.read.after",
    /// After a payload obligation was acquired (phase 2 store; not called by this worker).
    ObligationAcquireAfter => "obligation.acquire.after",
    /// Before this reader's share of a blob is released (BLOB-6).
    ObligationReleaseBefore => "obligation.release.before",
    /// After this reader's share of a blob was released.
    ObligationReleaseAfter => "obligation.release.after",
    /// Before one publish attempt is sent.
    PublishSendBefore => "publish.send.before",
    /// After the broker answered a publish.
    PublishSendAfter => "publish.send.after",
    /// Before the publish receipt is taken (`drop` ⇒ the receipt is lost).
    PublishReceiptBefore => "publish.receipt.before",
    /// After the publish receipt was taken.
    PublishReceiptAfter => "publish.receipt.after",
    /// Before a join group is committed to the ledger (phase 2; not called by this worker).
    GroupCommitBefore => "group.commit.before",
    /// After a join group was committed (phase 2; not called by this worker).
    GroupCommitAfter => "group.commit.after",
    /// Before a delivery is settled (ack, NAK or TERM).
    SettleBefore => "settle.before",
    /// After a delivery was settled (`drop` ⇒ the settlement is reported unconfirmed).
    SettleAfter => "settle.after",
    /// Before a consumer's `consume()` (the external effect).
    SinkEffectBefore => "sink.effect.before",
    /// After a consumer's `consume()` returned.
    SinkEffectAfter => "sink.effect.after",
    /// Before a parent's terminator (EOS/ABORT) is recorded.
    EosRecordBefore => "eos.record.before",
    /// After a parent's terminator was recorded.
    EosRecordAfter => "eos.record.after",
    /// Before a checkpoint is written (phase 2; not called by this worker).
    CheckpointWriteBefore => "checkpoint.write.before",
    /// After a checkpoint was written (phase 2; not called by this worker).
    CheckpointWriteAfter => "checkpoint.write.after",
    /// GPU ownership read (control plane; not called by this worker).
    OwnerReadAfter => "owner.read.after",
    /// GPU ownership update (control plane; not called by this worker).
    OwnerUpdateBefore => "owner.update.before",
    /// GPU ownership update (control plane; not called by this worker).
    OwnerUpdateAfter => "owner.update.after",
    /// GPU claim lifecycle (control plane; not called by this worker).
    ClaimCreateAfter => "claim.create.after",
    /// GPU claim lifecycle (control plane; not called by this worker).
    ClaimScheduleAfter => "claim.schedule.after",
    /// GPU claim lifecycle (control plane; not called by this worker).
    ClaimPrepareAfter => "claim.prepare.after",
    /// GPU claim lifecycle (control plane; not called by this worker).
    ClaimReadyAfter => "claim.ready.after",
    /// GPU restore (control plane; not called by this worker).
    RestoreBefore => "restore.before",
    /// GPU restore (control plane; not called by this worker).
    RestoreAfter => "restore.after",
    /// Teardown deletion (control plane; not called by this worker).
    DeleteBefore => "delete.before",
    /// Teardown deletion (control plane; not called by this worker).
    DeleteAfter => "delete.after",
    /// Before a stream is provisioned (not called by this worker yet).
    ProvisionChannelBefore => "provision.channel.before",
    /// After a stream was provisioned (not called by this worker yet).
    ProvisionChannelAfter => "provision.channel.after",
    /// Before a durable is provisioned (not called by this worker yet).
    ProvisionSubscriptionBefore => "provision.subscription.before",
    /// After a durable was provisioned (not called by this worker yet).
    ProvisionSubscriptionAfter => "provision.subscription.after",
    /// Before a subscription's backlog is observed (not called by this worker yet).
    ObserveSubscriptionBefore => "observe.subscription.before",
    /// After the worker became ready (`open()` returned, HEALTH-1).
    WorkerReadyAfter => "worker.ready.after",
    /// After a producer's DATA envelope was published (or definitely refused).
    SourcePublishAfter => "source.publish.after",
}

impl fmt::Display for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a barrier does when it fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write the marker, then exit with `exit_code` — no termination record.
    Crash {
        /// The process exit status (0..=255).
        exit_code: i32,
    },
    /// Return a typed error of `disposition`.
    Raise {
        /// The requested code (`VF_TRANSIENT`, or any code a test names).
        code: String,
        /// The error message.
        message: String,
        /// How the runtime must treat it.
        disposition: Disposition,
    },
    /// Sleep, then continue.
    Delay(Duration),
    /// Continue, but report the call's outcome as unknown.
    Drop,
    /// Wait until released (marker `<dir>/<name>.release`) or `timeout`.
    Pause {
        /// The release name.
        name: String,
        /// How long to wait before failing.
        timeout: Duration,
    },
    /// `action` on the `n`-th hit only (1-based).
    Nth {
        /// The hit that fires.
        n: u64,
        /// The action then (never another `Nth`).
        action: Box<Action>,
    },
}

/// Why a schedule was refused (parse or install).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultError {
    /// The value is not JSON.
    Json(String),
    /// The schedule, or one barrier's action, is not a JSON object.
    NotAnObject {
        /// `None` for the schedule itself.
        barrier: Option<String>,
    },
    /// A barrier name outside the reference's set.
    UnknownBarrier(String),
    /// An action `kind` that does not exist.
    UnknownKind {
        /// The barrier.
        barrier: String,
        /// The kind given.
        kind: String,
    },
    /// A required field is absent.
    MissingField {
        /// The barrier.
        barrier: String,
        /// The field.
        field: &'static str,
    },
    /// A field has the wrong type or an impossible value.
    BadField {
        /// The barrier.
        barrier: String,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The marker directory cannot be created.
    MarkerDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        detail: String,
    },
}

impl fmt::Display for FaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultError::Json(e) => write!(f, "{ENV_SCHEDULE} is not valid JSON: {e}"),
            FaultError::NotAnObject { barrier: None } => write!(
                f,
                "{ENV_SCHEDULE} is not a JSON object of barrier name to action."
            ),
            FaultError::NotAnObject { barrier: Some(b) } => write!(
                f,
                "{ENV_SCHEDULE}: the action of '{b}' is not a JSON object."
            ),
            FaultError::UnknownBarrier(b) => write!(f, "{ENV_SCHEDULE}: unknown barrier '{b}'."),
            FaultError::UnknownKind { barrier, kind } => write!(
                f,
                "{ENV_SCHEDULE}: '{barrier}' has unknown action kind '{kind}' (crash, raise, delay, drop, pause, nth)."
            ),
            FaultError::MissingField { barrier, field } => {
                write!(f, "{ENV_SCHEDULE}: '{barrier}' needs '{field}'.")
            }
            FaultError::BadField {
                barrier,
                field,
                detail,
            } => write!(f, "{ENV_SCHEDULE}: '{barrier}' field '{field}' {detail}."),
            FaultError::MarkerDir { path, detail } => write!(
                f,
                "{ENV_MARKER_DIR}='{}' cannot be created: {detail}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for FaultError {}

impl From<FaultError> for VfError {
    /// A refused schedule is a ConfigError (exit 2) naming the variable.
    fn from(e: FaultError) -> Self {
        VfError::new(ErrorCode::Config, e.to_string()).with_remedy(
            "Fix the conformance test's fault schedule (the reference's FaultSchedule.to_env() format), or unset VF_FAULT_SCHEDULE_JSON; a control plane never sets it.",
        )
    }
}

/// What [`barrier`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hit {
    /// An action ran at this hit.
    pub fired: bool,
    /// The caller must report the call's outcome as unknown (`drop`).
    pub drop_response: bool,
}

/// A parsed schedule with its hit counts.
#[derive(Debug)]
pub struct FaultSchedule {
    actions: BTreeMap<Barrier, Action>,
    marker_dir: Option<PathBuf>,
    counts: Mutex<BTreeMap<Barrier, u64>>,
    released: Mutex<BTreeSet<String>>,
}

impl FaultSchedule {
    /// Parses `json` (the `VF_FAULT_SCHEDULE_JSON` format); markers go to `marker_dir`.
    ///
    /// # Errors
    /// A [`FaultError`] naming the barrier and field at fault.
    pub fn parse(json: &str, marker_dir: Option<PathBuf>) -> Result<Self, FaultError> {
        let value: Json =
            serde_json::from_str(json).map_err(|e| FaultError::Json(e.to_string()))?;
        let Json::Object(map) = value else {
            return Err(FaultError::NotAnObject { barrier: None });
        };
        let mut actions = BTreeMap::new();
        for (name, spec) in &map {
            let barrier =
                Barrier::parse(name).ok_or_else(|| FaultError::UnknownBarrier(name.clone()))?;
            actions.insert(barrier, parse_action(name, spec, true)?);
        }
        Ok(FaultSchedule {
            actions,
            marker_dir,
            counts: Mutex::new(BTreeMap::new()),
            released: Mutex::new(BTreeSet::new()),
        })
    }

    /// The schedule `config` names, if any (unset or blank ⇒ `None`).
    ///
    /// # Errors
    /// As [`FaultSchedule::parse`].
    pub fn from_config(config: &FaultConfig) -> Result<Option<Self>, FaultError> {
        let Some(raw) = &config.schedule_json else {
            return Ok(None);
        };
        Self::parse(raw, config.marker_dir.clone()).map(Some)
    }

    /// The action scheduled at `barrier`, if any.
    pub fn action(&self, barrier: Barrier) -> Option<&Action> {
        self.actions.get(&barrier)
    }

    /// Counts one hit of `barrier` and returns the action to carry out now (an `nth` is
    /// resolved: its inner action on the n-th hit, nothing otherwise).
    pub fn decide(&self, barrier: Barrier) -> Option<&Action> {
        let count = {
            let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            let c = counts.entry(barrier).or_insert(0);
            *c += 1;
            *c
        };
        match self.actions.get(&barrier)? {
            Action::Nth { n, action } => (*n == count).then_some(action.as_ref()),
            other => Some(other),
        }
    }

    /// Hit counts per barrier: this process's hits plus the marker files in the marker
    /// directory (other processes' fired hits).
    pub fn fired(&self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(b, c)| (b.as_str().to_owned(), *c))
            .collect();
        if let Some(dir) = &self.marker_dir {
            for (name, n) in markers_in(dir) {
                *out.entry(name).or_default() += n;
            }
        }
        out
    }

    /// Lets a `pause` named `name` continue, here and in every process sharing the marker
    /// directory.
    pub fn release(&self, name: &str) {
        self.released
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned());
        if let Some(dir) = &self.marker_dir {
            let _ = std::fs::write(dir.join(format!("{name}.release")), "released\n");
        }
    }

    /// Creates the marker directory.
    ///
    /// # Errors
    /// [`FaultError::MarkerDir`].
    pub fn prepare(&self) -> Result<(), FaultError> {
        if let Some(dir) = &self.marker_dir {
            std::fs::create_dir_all(dir).map_err(|e| FaultError::MarkerDir {
                path: dir.clone(),
                detail: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// One hit of `barrier`: counts it and carries out what is scheduled. `context`
    /// describes the call for the log line of a fired hit.
    ///
    /// # Errors
    /// `raise`: the scheduled error; `pause` never released: an untyped error.
    pub async fn hit(
        &self,
        barrier: Barrier,
        context: impl FnOnce() -> String,
    ) -> Result<Hit, VfError> {
        let Some(action) = self.decide(barrier).cloned() else {
            return Ok(Hit::default());
        };
        self.mark(barrier);
        let fired = Hit {
            fired: true,
            drop_response: false,
        };
        match action {
            Action::Crash { exit_code } => {
                eprintln!(
                    "fault schedule: crash at {barrier} ({}), exit {exit_code}",
                    context()
                );
                std::process::exit(exit_code);
            }
            Action::Raise {
                code,
                message,
                disposition,
            } => {
                tracing::warn!(%barrier, context = %context(), %code, "fault schedule: raise");
                Err(raised(&code, &message, disposition))
            }
            Action::Delay(d) => {
                tracing::info!(%barrier, context = %context(), seconds = d.as_secs_f64(), "fault schedule: delay");
                tokio::time::sleep(d).await;
                Ok(fired)
            }
            Action::Drop => {
                tracing::warn!(%barrier, context = %context(), "fault schedule: response dropped");
                Ok(Hit {
                    fired: true,
                    drop_response: true,
                })
            }
            Action::Pause { name, timeout } => {
                tracing::info!(%barrier, context = %context(), %name, "fault schedule: paused");
                self.wait(&name, timeout).await?;
                Ok(fired)
            }
            Action::Nth { .. } => Ok(fired), // never: `decide` resolves it
        }
    }

    fn mark(&self, barrier: Barrier) {
        let Some(dir) = &self.marker_dir else {
            return;
        };
        let path = dir.join(format!("{barrier}.fired"));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| {
                f.write_all(format!("{} {now:.6}\n", std::process::id()).as_bytes())?;
                f.sync_all()
            });
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), "fault marker not written: {e}");
        }
    }

    fn is_released(&self, name: &str) -> bool {
        if self
            .released
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
        {
            return true;
        }
        self.marker_dir
            .as_ref()
            .is_some_and(|d| d.join(format!("{name}.release")).exists())
    }

    async fn wait(&self, name: &str, timeout: Duration) -> Result<(), VfError> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.is_released(name) {
            if tokio::time::Instant::now() >= deadline {
                return Err(VfError::new(
                    ErrorCode::Unknown,
                    format!(
                        "TimeoutError: Pause('{name}') was never released within {}s",
                        timeout.as_secs_f64()
                    ),
                ));
            }
            tokio::time::sleep(PAUSE_POLL).await;
        }
        Ok(())
    }
}

/// The error a `raise` produces: the disposition's class (or the named code when it is a
/// taxonomy class of that disposition), stamped with the disposition; the requested code is
/// kept in the context.
fn raised(code: &str, message: &str, disposition: Disposition) -> VfError {
    let class = ErrorCode::from_code(code)
        .filter(|c| c.disposition() == Some(disposition))
        .unwrap_or_else(|| ErrorCode::for_disposition(disposition));
    VfError::new(class, message)
        .with_remedy("injected by the conformance fault schedule")
        .with_disposition(disposition)
        .with_context("fault_code", code)
}

/// Counts the lines of every `<barrier>.fired` file in `dir`.
fn markers_in(dir: &Path) -> Vec<(String, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if let Some(name) = file.strip_suffix(".fired")
            && Barrier::parse(name).is_some()
        {
            let lines =
                std::fs::read_to_string(entry.path()).map_or(0, |t| t.lines().count() as u64);
            out.push((name.to_owned(), lines));
        }
    }
    out
}

fn parse_action(barrier: &str, spec: &Json, top: bool) -> Result<Action, FaultError> {
    let Json::Object(obj) = spec else {
        return Err(FaultError::NotAnObject {
            barrier: Some(barrier.to_owned()),
        });
    };
    let missing = |field| FaultError::MissingField {
        barrier: barrier.to_owned(),
        field,
    };
    let bad = |field, detail: &str| FaultError::BadField {
        barrier: barrier.to_owned(),
        field,
        detail: detail.to_owned(),
    };
    let text = |field: &'static str| -> Result<String, FaultError> {
        match obj.get(field) {
            None | Some(Json::Null) => Err(missing(field)),
            Some(Json::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(field, "is not a string")),
        }
    };
    let kind = text("kind")?;
    match kind.as_str() {
        "crash" => {
            let exit_code = match obj.get("exit_code") {
                None | Some(Json::Null) => i64::from(DEFAULT_CRASH_EXIT_CODE),
                Some(v) => int_of(v).ok_or_else(|| bad("exit_code", "is not an integer"))?,
            };
            let exit_code = i32::try_from(exit_code)
                .ok()
                .filter(|c| (0..=255).contains(c))
                .ok_or_else(|| bad("exit_code", "is not in 0..=255"))?;
            Ok(Action::Crash { exit_code })
        }
        "raise" => {
            let disposition = match obj.get("disposition") {
                None | Some(Json::Null) => Disposition::Transient,
                Some(Json::String(s)) => Disposition::parse(s).ok_or_else(|| {
                    bad("disposition", "is not poison, transient or worker_fatal")
                })?,
                Some(_) => return Err(bad("disposition", "is not a string")),
            };
            Ok(Action::Raise {
                code: text("code")?,
                message: text("message")?,
                disposition,
            })
        }
        "delay" => {
            let seconds = obj.get("seconds").ok_or_else(|| missing("seconds"))?;
            Ok(Action::Delay(seconds_of(seconds).ok_or_else(|| {
                bad("seconds", "is not a non-negative number")
            })?))
        }
        "drop" => Ok(Action::Drop),
        "pause" => {
            let timeout = match obj.get("timeout_seconds") {
                None | Some(Json::Null) => DEFAULT_PAUSE_TIMEOUT,
                Some(v) => seconds_of(v)
                    .ok_or_else(|| bad("timeout_seconds", "is not a non-negative number"))?,
            };
            Ok(Action::Pause {
                name: text("name")?,
                timeout,
            })
        }
        "nth" if !top => Err(bad("action", "nests an nth inside an nth")),
        "nth" => {
            let n = obj
                .get("n")
                .ok_or_else(|| missing("n"))
                .and_then(|v| int_of(v).ok_or_else(|| bad("n", "is not an integer")))?;
            let n = u64::try_from(n)
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad("n", "is not a hit number >= 1"))?;
            let inner = obj.get("action").ok_or_else(|| missing("action"))?;
            Ok(Action::Nth {
                n,
                action: Box::new(parse_action(barrier, inner, false)?),
            })
        }
        other => Err(FaultError::UnknownKind {
            barrier: barrier.to_owned(),
            kind: other.to_owned(),
        }),
    }
}

/// An integer as Python's `int()` takes one from JSON: an integral number or a numeric string.
fn int_of(v: &Json) -> Option<i64> {
    match v {
        Json::Number(n) => n.as_i64(),
        Json::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Seconds as Python's `float()` takes them: a number or a numeric string, finite, ≥ 0.
fn seconds_of(v: &Json) -> Option<Duration> {
    let s = match v {
        Json::Number(n) => n.as_f64()?,
        Json::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    Duration::try_from_secs_f64(s).ok()
}

static SCHEDULE: OnceLock<FaultSchedule> = OnceLock::new();

/// Installs `schedule` for this process (creating its marker directory). Only the first
/// install takes effect; `false` when one was installed already.
///
/// # Errors
/// [`FaultError::MarkerDir`].
pub fn install(schedule: FaultSchedule) -> Result<bool, FaultError> {
    schedule.prepare()?;
    Ok(SCHEDULE.set(schedule).is_ok())
}

/// START-1 step 1: installs the schedule `config` names, if any, before anything a barrier
/// guards can run.
///
/// # Errors
/// ConfigError (exit 2) naming `VF_FAULT_SCHEDULE_JSON` or `VF_FAULT_MARKER_DIR`.
pub fn install_configured(config: &FaultConfig) -> Result<(), VfError> {
    if let Some(schedule) = FaultSchedule::from_config(config)? {
        let barriers: Vec<&str> = schedule.actions.keys().map(|b| b.as_str()).collect();
        tracing::warn!(
            ?barriers,
            "conformance fault schedule installed (VF_FAULT_SCHEDULE_JSON)"
        );
        install(schedule)?;
    }
    Ok(())
}

/// The installed schedule, if any.
pub fn installed() -> Option<&'static FaultSchedule> {
    SCHEDULE.get()
}

/// The runtime's hook: one atomic load when nothing is installed, else
/// [`FaultSchedule::hit`]. `context` is only evaluated for a fired hit's log line.
///
/// The hit is boxed: every future that awaits a barrier would otherwise carry a hit's state
/// (pauses, waits) inline and copy it on every move — one task spawned per message moves
/// its future several times — though production runs never install a schedule.
///
/// # Errors
/// `raise`: the scheduled error; `pause` never released: an untyped error.
pub async fn barrier(barrier: Barrier, context: impl FnOnce() -> String) -> Result<Hit, VfError> {
    match SCHEDULE.get() {
        None => Ok(Hit::default()),
        Some(s) => Box::pin(s.hit(barrier, context)).await,
    }
}

/// For a call site with no error path (a settlement, a release, a terminator's record): a
/// `raise` there is logged and treated like `drop` — the call's outcome is unknown.
pub fn unraisable(e: VfError) -> Hit {
    tracing::warn!(
        "fault schedule: raise at a barrier without an error path, treated as a lost response: {}",
        e.log_line()
    );
    Hit {
        fired: true,
        drop_response: true,
    }
}

/// [`barrier`] at a call site with no error path: a `raise` is logged and treated like
/// `drop` ([`unraisable`]).
pub async fn soft_barrier(at: Barrier, context: impl FnOnce() -> String) -> Hit {
    barrier(at, context).await.unwrap_or_else(unraisable)
}

/// A `drop` at `publish.receipt.before`: the broker may hold the publication but this worker
/// never learns it — [`PublishOutcome::Unknown`] when live, else the unconfirmed-publication
/// error (BrokerUnavailable; the input is handed back and the re-publish deduplicated,
/// MSGID-1), as when no receipt arrives in time.
///
/// # Errors
/// BATCH/ABORT publications: BrokerUnavailable `<node>: publication <id> could not be
/// confirmed (publication receipt lost)`.
pub fn receipt_lost(
    node: &str,
    msg_id: &str,
    mode: PublishMode,
) -> Result<PublishOutcome, VfError> {
    let reason = "publication receipt lost".to_owned();
    if mode == PublishMode::Realtime {
        return Ok(PublishOutcome::Unknown { reason });
    }
    Err(VfError::new(
        ErrorCode::BrokerUnavailable,
        format!("{node}: publication {msg_id} could not be confirmed ({reason})"),
    )
    .with_remedy("Injected by the conformance fault schedule (publish.receipt.before: drop)."))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh private directory under the system temp dir.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vf-faults-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("ok");
        dir
    }

    fn schedule(json: &str) -> FaultSchedule {
        FaultSchedule::parse(json, None).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn env16_barrier_names_are_the_references_set() {
        assert_eq!(Barrier::ALL.len(), 39);
        for b in Barrier::ALL {
            assert_eq!(Barrier::parse(b.as_str()), Some(*b));
        }
        assert_eq!(Barrier::parse("settle.before"), Some(Barrier::SettleBefore));
        assert_eq!(Barrier::parse("process.before"), None);
    }

    #[test]
    fn env16_parses_every_action_kind_with_the_references_defaults() {
        let s = schedule(
            r#"{"settle.before": {"kind": "crash"},
                "settle.after": {"kind": "crash", "exit_code": "3"},
                "sink.effect.before": {"kind": "raise", "code": "VF_POISON", "message": "bad"},
                "payload.read.before": {"kind": "delay", "seconds": 0.25},
                "publish.receipt.before": {"kind": "drop"},
                "publish.send.before": {"kind": "pause", "name": "p1"},
                "eos.record.before": {"kind": "nth", "n": 3, "action": {"kind": "raise", "code": "X", "message": "m", "disposition": "worker_fatal"}}}"#,
        );
        assert_eq!(
            s.action(Barrier::SettleBefore),
            Some(&Action::Crash { exit_code: 137 })
        );
        assert_eq!(
            s.action(Barrier::SettleAfter),
            Some(&Action::Crash { exit_code: 3 })
        );
        assert_eq!(
            s.action(Barrier::SinkEffectBefore),
            Some(&Action::Raise {
                code: "VF_POISON".into(),
                message: "bad".into(),
                disposition: Disposition::Transient
            })
        );
        assert_eq!(
            s.action(Barrier::PayloadReadBefore),
            Some(&Action::Delay(Duration::from_millis(250)))
        );
        assert_eq!(s.action(Barrier::PublishReceiptBefore), Some(&Action::Drop));
        assert_eq!(
            s.action(Barrier::PublishSendBefore),
            Some(&Action::Pause {
                name: "p1".into(),
                timeout: DEFAULT_PAUSE_TIMEOUT
            })
        );
        assert!(matches!(
            s.action(Barrier::EosRecordBefore),
            Some(Action::Nth { n: 3, action }) if matches!(**action, Action::Raise { disposition: Disposition::WorkerFatal, .. })
        ));
        assert_eq!(s.action(Barrier::WorkerReadyAfter), None);
    }

    #[test]
    fn env16_malformed_schedules_are_typed_errors() {
        let err = |json: &str| FaultSchedule::parse(json, None).expect_err(json);
        assert!(matches!(err("{"), FaultError::Json(_)));
        assert_eq!(err("[]"), FaultError::NotAnObject { barrier: None });
        assert_eq!(
            err(r#"{"process.before": {"kind": "drop"}}"#),
            FaultError::UnknownBarrier("process.before".into())
        );
        assert_eq!(
            err(r#"{"settle.before": 3}"#),
            FaultError::NotAnObject {
                barrier: Some("settle.before".into())
            }
        );
        assert!(matches!(
            err(r#"{"settle.before": {"kind": "explode"}}"#),
            FaultError::UnknownKind { kind, .. } if kind == "explode"
        ));
        assert!(matches!(
            err(r#"{"settle.before": {}}"#),
            FaultError::MissingField { field: "kind", .. }
        ));
        assert!(matches!(
            err(r#"{"settle.before": {"kind": "raise", "code": "X"}}"#),
            FaultError::MissingField {
                field: "message",
                ..
            }
        ));
        assert!(matches!(
            err(
                r#"{"settle.before": {"kind": "raise", "code": "X", "message": "m", "disposition": "fatal"}}"#
            ),
            FaultError::BadField {
                field: "disposition",
                ..
            }
        ));
        assert!(matches!(
            err(r#"{"settle.before": {"kind": "delay", "seconds": -1}}"#),
            FaultError::BadField {
                field: "seconds",
                ..
            }
        ));
        assert!(matches!(
            err(r#"{"settle.before": {"kind": "crash", "exit_code": 300}}"#),
            FaultError::BadField {
                field: "exit_code",
                ..
            }
        ));
        assert!(matches!(
            err(r#"{"settle.before": {"kind": "nth", "n": 0, "action": {"kind": "drop"}}}"#),
            FaultError::BadField { field: "n", .. }
        ));
        assert!(matches!(
            err(
                r#"{"settle.before": {"kind": "nth", "n": 1, "action": {"kind": "nth", "n": 1, "action": {"kind": "drop"}}}}"#
            ),
            FaultError::BadField {
                field: "action",
                ..
            }
        ));
        let vf: VfError = err("{").into();
        assert_eq!(vf.code, ErrorCode::Config);
        assert!(
            vf.message
                .starts_with("VF_FAULT_SCHEDULE_JSON is not valid JSON")
        );
    }

    #[test]
    fn env16_from_env_absent_or_empty_installs_nothing() {
        let from = |vars: &BTreeMap<String, String>| {
            FaultSchedule::from_config(&FaultConfig::from_env(vars)).expect("ok")
        };
        let mut vars = BTreeMap::new();
        assert!(from(&vars).is_none());
        vars.insert(ENV_SCHEDULE.to_owned(), " ".to_owned());
        assert!(from(&vars).is_none());
        vars.insert(
            ENV_SCHEDULE.to_owned(),
            r#"{"settle.before": {"kind": "drop"}}"#.into(),
        );
        vars.insert(ENV_MARKER_DIR.to_owned(), "/tmp/m".into());
        let s = from(&vars).expect("ok");
        assert_eq!(s.marker_dir.as_deref(), Some(Path::new("/tmp/m")));
    }

    #[test]
    fn env16_nth_fires_on_the_nth_hit_only_and_counts_every_hit() {
        let s =
            schedule(r#"{"settle.before": {"kind": "nth", "n": 3, "action": {"kind": "drop"}}}"#);
        let decided: Vec<bool> = (0..5)
            .map(|_| s.decide(Barrier::SettleBefore).is_some())
            .collect();
        assert_eq!(decided, [false, false, true, false, false]);
        assert!(s.decide(Barrier::SettleAfter).is_none());
        let fired = s.fired();
        assert_eq!(fired.get("settle.before"), Some(&5));
        assert_eq!(fired.get("settle.after"), Some(&1));
    }

    #[tokio::test]
    async fn env17_hits_write_markers_and_drop_raise_delay_behave() {
        let dir = scratch("hits");
        let s = FaultSchedule::parse(
            r#"{"settle.after": {"kind": "drop"},
                "sink.effect.before": {"kind": "raise", "code": "VF_POISON", "message": "bad", "disposition": "poison"},
                "sink.effect.after": {"kind": "raise", "code": "CUSTOM", "message": "m"},
                "payload.read.before": {"kind": "delay", "seconds": 0.05}}"#,
            Some(dir.clone()),
        )
        .expect("ok");
        s.prepare().expect("ok");
        let hit = s
            .hit(Barrier::SettleAfter, || "x".into())
            .await
            .expect("ok");
        assert_eq!(
            hit,
            Hit {
                fired: true,
                drop_response: true
            }
        );
        let e = s
            .hit(Barrier::SinkEffectBefore, String::new)
            .await
            .expect_err("an error");
        assert_eq!(
            (e.code, e.disposition),
            (ErrorCode::Poison, Some(Disposition::Poison))
        );
        assert_eq!(e.message, "bad");
        let e = s
            .hit(Barrier::SinkEffectAfter, String::new)
            .await
            .expect_err("an error");
        assert_eq!(
            (e.code, e.disposition),
            (ErrorCode::Transient, Some(Disposition::Transient))
        );
        assert_eq!(e.context["fault_code"], "CUSTOM");
        let t = std::time::Instant::now();
        assert!(
            s.hit(Barrier::PayloadReadBefore, String::new)
                .await
                .expect("ok")
                .fired
        );
        assert!(t.elapsed() >= Duration::from_millis(50));
        // Unscheduled barriers neither fire nor leave a marker.
        assert_eq!(
            s.hit(Barrier::PublishSendBefore, String::new)
                .await
                .expect("ok"),
            Hit::default()
        );
        let marker = std::fs::read_to_string(dir.join("settle.after.fired")).expect("ok");
        assert!(marker.starts_with(&format!("{} ", std::process::id())));
        assert!(!dir.join("publish.send.before.fired").exists());
        assert_eq!(markers_in(&dir).len(), 4);
    }

    #[tokio::test]
    async fn env17_pause_waits_for_the_release_marker_or_times_out() {
        let dir = scratch("pause");
        let s = std::sync::Arc::new(
            FaultSchedule::parse(
                r#"{"publish.send.before": {"kind": "pause", "name": "gate"},
                    "publish.send.after": {"kind": "pause", "name": "never", "timeout_seconds": 0.1}}"#,
                Some(dir.clone()),
            )
            .expect("ok"),
        );
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.hit(Barrier::PublishSendBefore, String::new).await }
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(!waiting.is_finished(), "the pause must hold until released");
        assert!(dir.join("publish.send.before.fired").exists());
        std::fs::write(dir.join("gate.release"), "released\n").expect("ok");
        let hit = tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("released")
            .expect("ok")
            .expect("ok");
        assert!(hit.fired);
        let e = s
            .hit(Barrier::PublishSendAfter, String::new)
            .await
            .expect_err("an error");
        assert_eq!(e.code, ErrorCode::Unknown);
        assert!(e.message.contains("Pause('never') was never released"));
    }

    #[test]
    fn env16_a_dropped_receipt_is_unknown_live_and_unconfirmed_otherwise() {
        assert_eq!(
            receipt_lost("n", "id", PublishMode::Realtime),
            Ok(PublishOutcome::Unknown {
                reason: "publication receipt lost".into()
            })
        );
        let e = receipt_lost("n", "id", PublishMode::Batch).expect_err("an error");
        assert_eq!(e.code, ErrorCode::BrokerUnavailable);
        assert_eq!(
            e.message,
            "n: publication id could not be confirmed (publication receipt lost)"
        );
    }

    #[tokio::test]
    async fn env16_without_a_schedule_a_barrier_is_a_no_op() {
        // Nothing in the unit-test process installs a schedule.
        assert!(installed().is_none());
        assert_eq!(
            barrier(Barrier::SettleBefore, || unreachable!())
                .await
                .expect("ok"),
            Hit::default()
        );
    }
}
