//! Worker processes of a local run: spawn one per replica with the rendered environment,
//! prefix their log lines, restart what a restart can fix (ABORT-6), and collect how each
//! one ended.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Restarts per worker before the supervisor gives up (ABORT-6: 1.0.4's local supervisor).
pub const MAX_RESTARTS: u32 = 3;

/// One replica under supervision.
pub struct Worker {
    /// Node name.
    pub node: String,
    /// Replica id.
    pub replica: i64,
    vars: BTreeMap<String, String>,
    /// Where its termination record goes.
    pub termination_log: PathBuf,
    child: Option<Child>,
    /// Restarts so far.
    pub restarts: u32,
    /// Final exit status once it ended for good (`-1` for a signal).
    pub exit: Option<i32>,
    colour: &'static str,
    cwd: Option<PathBuf>,
    inherited: Vec<(OsString, OsString)>,
}

const COLOURS: [&str; 6] = [
    "\x1b[36m", "\x1b[33m", "\x1b[35m", "\x1b[32m", "\x1b[34m", "\x1b[31m",
];

impl Worker {
    /// A worker not yet started.
    pub fn new(
        node: &str,
        replica: i64,
        vars: BTreeMap<String, String>,
        termination_log: PathBuf,
        index: usize,
    ) -> Self {
        Worker {
            node: node.to_owned(),
            replica,
            vars,
            termination_log,
            child: None,
            restarts: 0,
            exit: None,
            colour: COLOURS[index % COLOURS.len()],
            cwd: None,
            inherited: Vec::new(),
        }
    }

    /// The runner's variables the process inherits
    /// ([`crate::config::environment::LOCAL_WORKER_PASSTHROUGH`]); the rendered node
    /// variables win over them.
    pub fn with_inherited(mut self, vars: Vec<(OsString, OsString)>) -> Self {
        self.inherited = vars;
        self
    }

    /// Starts the process in `dir` (the run directory) instead of the runner's own.
    pub fn with_cwd(mut self, dir: PathBuf) -> Self {
        self.cwd = Some(dir);
        self
    }

    /// `node/replica`, the prefix of its log lines.
    pub fn label(&self) -> String {
        format!("{}/{}", self.node, self.replica)
    }

    /// Starts (or restarts) the process, forwarding its output with a prefix.
    pub fn spawn(&mut self, exe: &PathBuf, colour: bool) -> std::io::Result<()> {
        let _ = std::fs::remove_file(&self.termination_log);
        let mut command = Command::new(exe);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        let mut child = command
            .env_clear()
            .envs(self.inherited.iter().cloned())
            .envs(&self.vars)
            .env("VF_TERMINATION_LOG", &self.termination_log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a terminal's Ctrl-C reaches the runner only, which then
            // drains the flow in order.
            .process_group(0)
            .spawn()?;
        let prefix = if colour {
            format!("{}{:>14}\x1b[0m | ", self.colour, self.label())
        } else {
            format!("{:>14} | ", self.label())
        };
        if let Some(out) = child.stdout.take() {
            forward(out, prefix.clone());
        }
        if let Some(err) = child.stderr.take() {
            forward(err, prefix);
        }
        self.child = Some(child);
        Ok(())
    }

    /// Polls the process: `Some(status)` once it exited.
    pub fn try_exit(&mut self) -> Option<i32> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status.code().unwrap_or(-1))
            }
            Ok(None) => None,
            Err(_) => {
                self.child = None;
                Some(-1)
            }
        }
    }

    /// Whether the process is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGINT: a producer ends its input and publishes EOS (START-3).
    pub fn signal_interrupt(&self) {
        let pid = self.child.as_ref().and_then(Child::id);
        if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
    }

    /// Kills the process (end of a run that must not linger).
    pub async fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill().await;
        }
        self.child = None;
    }

    /// The termination record it left, if any.
    pub fn record(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(&self.termination_log).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// ABORT-6: restart unless it ended cleanly, for bad configuration, as poison, or as a
    /// casualty of an upstream abort — none of which a restart can fix — or restarts ran out.
    pub fn should_restart(&self, code: i32) -> bool {
        if code == 0 || code == 2 || self.restarts >= MAX_RESTARTS {
            return false;
        }
        match self.record() {
            Some(r) => r["disposition"] != "poison" && r["code"] != "VF_UPSTREAM_ABORTED",
            None => true,
        }
    }

    /// Backoff before restart number `restarts + 1`: 1, 2, 4 s.
    pub fn backoff(&self) -> Duration {
        Duration::from_secs(1 << self.restarts.min(4))
    }
}

fn forward<R: tokio::io::AsyncRead + Unpin + Send + 'static>(stream: R, prefix: String) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{prefix}{line}");
        }
    });
}
