//! The test cluster's `kubectl` (built by `scripts/testenv` beside the control plane) and a
//! poll with a deadline, for the scenarios that drive a cluster as a user would.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::control_plane::testenv_bin;

/// Runs `kubectl --kubeconfig KUBECONFIG ARGS…`, feeding `stdin` when given; its stdout, or
/// an error naming the command and its stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let bin = testenv_bin().map_err(|e| e.to_string())?.join("kubectl");
    let mut child = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "{}: {e} (run scripts/testenv build, or scripts/install-deps)",
                bin.display()
            )
        })?;
    if let Some(text) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().ok_or("no stdin")?;
        pipe.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Polls `f` every `every` until it yields, at most `wait`; the panic names what was awaited
/// and the last error seen.
pub fn wait_for<T>(
    what: &str,
    wait: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<Option<T>, String>,
) -> T {
    let deadline = Instant::now() + wait;
    let mut last = String::new();
    loop {
        match f() {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => last = e,
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {}s; last: {last}",
            wait.as_secs()
        );
        std::thread::sleep(every);
    }
}
