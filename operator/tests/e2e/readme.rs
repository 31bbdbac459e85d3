//! The README's "## Kubernetes" section as shell commands, so that it works as written against
//! the test control plane: read at test time so the test
//! follows the README, and a shell to run them in: bash, the admin kubeconfig (its context's
//! namespace set to the scenario's own), and `PATH` with the cached kubectl
//! (`scripts/testenv build`) and the pinned helm (`$VF_HELM`) first.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::world::{World, helm_path, repo_root};

/// The commands of every ```sh block under "## Kubernetes", in order: `\`-continued lines
/// joined, blank and comment-only lines dropped (a trailing comment stays; bash ignores it).
pub fn kubernetes_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let (mut in_section, mut fence, mut pending) = (false, None::<bool>, String::new());
    for line in readme.lines() {
        let t = line.trim();
        if fence.is_none() && line.starts_with("## ") {
            in_section = t == "## Kubernetes";
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(info) = t.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(info, "sh" | "bash")),
            };
            continue;
        }
        if fence != Some(true) {
            continue;
        }
        // A continued line's indentation is layout, not part of the command.
        let line = if pending.is_empty() {
            line
        } else {
            line.trim_start()
        };
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending);
        let command = command.trim();
        if !command.is_empty() && !command.starts_with('#') {
            commands.push(command.to_owned());
        }
    }
    commands
}

/// The words of a command before its trailing comment.
pub fn words(command: &str) -> Vec<&str> {
    command
        .split_whitespace()
        .take_while(|w| !w.starts_with('#'))
        .collect()
}

/// Whether the command watches (`-w` / `--watch`) and so runs until interrupted.
pub fn is_watch(command: &str) -> bool {
    words(command).iter().any(|w| *w == "-w" || *w == "--watch")
}

/// `--set natsUrl=<the README's example>` pointed at the test's nats-server instead.
pub fn with_broker(command: &str, nats_url: &str) -> String {
    command
        .split(' ')
        .map(|w| match w.strip_prefix("natsUrl=") {
            Some(_) => format!("natsUrl={nats_url}"),
            None => w.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The image a `docker build ... -t IMAGE ...` command tags.
pub fn built_image(command: &str) -> Option<String> {
    let w = words(command);
    if !w.starts_with(&["docker", "build"]) {
        return None;
    }
    let at = w.iter().position(|w| *w == "-t")?;
    w.get(at + 1).map(|t| (*t).to_owned())
}

/// The file of a `kubectl apply -f FILE` command.
pub fn applied_file(command: &str) -> Option<PathBuf> {
    let w = words(command);
    if w.first() != Some(&"kubectl") || !w.contains(&"apply") {
        return None;
    }
    let at = w.iter().position(|w| *w == "-f")?;
    w.get(at + 1).map(|f| repo_root().join(f))
}

/// The output of one command.
#[derive(Debug)]
pub struct Output {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Where the README's commands run.
pub struct Shell {
    kubeconfig: PathBuf,
    path: OsString,
}

impl Shell {
    /// A kubeconfig of the admin's (flattened) whose context's namespace is `ns`, and a bin
    /// directory with `kubectl` and `helm`.
    pub async fn new(w: &World, ns: &str) -> Result<Shell, String> {
        let dir = w.scratch_dir().join("readme");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).map_err(|e| format!("creating {}: {e}", bin.display()))?;
        let kubectl = testenv_bin()?.join("kubectl");
        if !kubectl.is_file() {
            return Err(format!(
                "{} is missing: run scripts/testenv build (it adds kubectl to an existing cache \
                 without rebuilding the rest)",
                kubectl.display()
            ));
        }
        let helm = helm_path();
        if !helm.is_file() {
            return Err(format!(
                "{} is missing: run scripts/install-deps (it installs the pinned helm)",
                helm.display()
            ));
        }
        for (name, target) in [("kubectl", &kubectl), ("helm", &helm)] {
            let link = bin.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(target, &link)
                .map_err(|e| format!("linking {}: {e}", link.display()))?;
        }
        let mut path = OsString::from(&bin);
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        let admin = w.plane().kubeconfig();
        let flat = run_raw(
            &kubectl,
            &["config", "view", "--flatten", "--minify"],
            admin,
            &path,
        )
        .await?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, flat)
            .map_err(|e| format!("writing {}: {e}", kubeconfig.display()))?;
        let namespace = format!("--namespace={ns}");
        run_raw(
            &kubectl,
            &["config", "set-context", "--current", &namespace],
            &kubeconfig,
            &path,
        )
        .await?;
        Ok(Shell { kubeconfig, path })
    }

    /// Runs `command` with bash (`pipefail`) in the repository root, killed after `secs`
    /// (exit 124, `timeout`'s).
    pub async fn run(&self, command: &str, secs: u64) -> Output {
        let out = tokio::process::Command::new("timeout")
            .arg(secs.to_string())
            .args(["bash", "-o", "pipefail", "-c", command])
            .current_dir(repo_root())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap_or_else(|e| panic!("running `{command}`: {e}"));
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// `$VF_TESTENV_BIN` as scripts/env.sh computes it (one place for the pinned versions).
fn testenv_bin() -> Result<PathBuf, String> {
    let out = std::process::Command::new("bash")
        .args(["-c", ". scripts/env.sh && printf %s \"$VF_TESTENV_BIN\""])
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("sourcing scripts/env.sh: {e}"))?;
    if !out.status.success() || out.stdout.is_empty() {
        return Err(format!(
            "scripts/env.sh gave no VF_TESTENV_BIN: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).as_ref()))
}

async fn run_raw(
    program: &Path,
    args: &[&str],
    kubeconfig: &Path,
    path: &OsString,
) -> Result<Vec<u8>, String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("running {}: {e}", program.display()))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "{} {}: {}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A Flow manifest's name and `spec.type`.
pub fn flow_name_and_type(path: &Path) -> (String, String) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (s(&doc["metadata"]["name"]), s(&doc["spec"]["type"]))
}
