//! The process environment, read once: the only place `std::env::vars_os` is called for the
//! worker's own settings. Every sub-config parses from the [`Environment`] this returns, so a
//! test drives any of them with a plain map and no process state.
//!
//! Why not `std::env::vars()`: it panics on a variable whose name or value is not UTF-8. Here
//! such a variable is kept aside; one that the worker would read (`VF_*`, `VIDEOFLOW_*`, the
//! replica-id and GPU variables) is a `VF_CONFIG` error naming it, any other is ignored, and
//! every variable still reaches a child process byte for byte ([`Environment::passthrough`]).

use std::collections::BTreeMap;
use std::ffi::OsString;

use videoflow_core::errors::{ErrorCode, VfError};

/// The variables a worker started by the local runner inherits from the runner (logging,
/// paths, and the `PATH`/`PYTHONPATH` an exec component's program is found and runs with);
/// never the runner's other variables, so a local run sees exactly what a pod would.
pub const LOCAL_WORKER_PASSTHROUGH: [&str; 8] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "NO_COLOR",
    "VF_LOG",
    "VF_STRUCTURED_LOGS",
    "VIDEOFLOW_MAX_INLINE_PAYLOAD_BYTES",
    "PYTHONPATH",
];

/// Non-`VF_` variables the worker reads; a non-UTF-8 value of one of them is refused too.
const READ_BY_NAME: [&str; 3] = ["POD_NAME", "HOSTNAME", "CUDA_VISIBLE_DEVICES"];

/// A snapshot of the environment: the UTF-8 variables as text, and every variable as the
/// operating system gave it.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
    raw: Vec<(OsString, OsString)>,
}

impl Environment {
    /// Reads the process environment.
    pub fn capture() -> Environment {
        Environment::from_pairs(std::env::vars_os().collect())
    }

    /// An environment of exactly these variables, as the operating system would give them
    /// (names and values need not be UTF-8): what [`Environment::capture`] reads, and what
    /// the fuzz checks feed in.
    pub fn from_pairs(raw: Vec<(OsString, OsString)>) -> Environment {
        let vars = raw
            .iter()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v.to_str()?.to_owned())))
            .collect();
        Environment { vars, raw }
    }

    /// An environment of exactly `vars` (tests, and jobs driven in-process).
    pub fn from_map(vars: BTreeMap<String, String>) -> Environment {
        let raw = vars
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        Environment { vars, raw }
    }

    /// Sets one variable (the `exec` subcommand puts its program into
    /// `VF_COMPONENT_COMMAND_JSON` this way).
    pub fn set(&mut self, name: &str, value: String) {
        self.raw.retain(|(k, _)| k != name);
        self.raw
            .push((OsString::from(name), OsString::from(&value)));
        self.vars.insert(name.to_owned(), value);
    }

    /// The UTF-8 variables.
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    /// One UTF-8 variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Refuses a variable the worker reads whose name or value is not UTF-8.
    ///
    /// # Errors
    /// `VF_CONFIG` naming the variable (its value is not shown: it may be a secret).
    pub fn check_unicode(&self) -> Result<(), VfError> {
        for (name, value) in &self.raw {
            let shown = name.to_string_lossy();
            let read = shown.starts_with("VF_")
                || shown.starts_with("VIDEOFLOW_")
                || READ_BY_NAME.contains(&shown.as_ref());
            if read && (name.to_str().is_none() || value.to_str().is_none()) {
                return Err(VfError::new(
                    ErrorCode::Config,
                    format!("{shown} is not valid UTF-8."),
                )
                .with_remedy(format!("Set {shown} to UTF-8 text, or unset it."))
                .with_context("variable", shown.as_ref()));
            }
        }
        Ok(())
    }

    /// The variables named in `names` exactly as the operating system gave them, for a child
    /// process.
    pub fn passthrough(&self, names: &[&str]) -> Vec<(OsString, OsString)> {
        self.raw
            .iter()
            .filter(|(k, _)| k.to_str().is_some_and(|k| names.contains(&k)))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    fn with_raw(pairs: Vec<(OsString, OsString)>) -> Environment {
        Environment::from_pairs(pairs)
    }

    #[test]
    fn env_1_a_non_utf8_vf_variable_is_a_config_error_naming_it() {
        let env = with_raw(vec![
            ("VF_NODE_NAME".into(), OsString::from_vec(vec![b'a', 0xff])),
            ("PATH".into(), "/bin".into()),
        ]);
        let e = env.check_unicode().expect_err("refused");
        assert_eq!(e.code, ErrorCode::Config);
        assert!(e.to_string().contains("VF_NODE_NAME"), "{e}");
        assert_eq!(env.get("VF_NODE_NAME"), None);
    }

    #[test]
    fn a_non_utf8_variable_the_worker_never_reads_is_ignored_and_still_passed_on() {
        let odd = OsString::from_vec(vec![b'/', 0xfe]);
        let env = with_raw(vec![
            ("PYTHONPATH".into(), odd.clone()),
            ("OTHER".into(), odd.clone()),
            ("VF_LOG".into(), "debug".into()),
        ]);
        env.check_unicode().expect("not read");
        let passed = env.passthrough(&LOCAL_WORKER_PASSTHROUGH);
        assert!(passed.contains(&("PYTHONPATH".into(), odd)));
        assert!(passed.contains(&("VF_LOG".into(), "debug".into())));
        assert_eq!(passed.len(), 2);
    }

    #[test]
    fn set_replaces_a_variable() {
        let mut env = Environment::from_map(BTreeMap::from([("A".into(), "1".into())]));
        env.set("A", "2".into());
        assert_eq!(env.get("A"), Some("2"));
        assert_eq!(env.passthrough(&["A"]), vec![("A".into(), "2".into())]);
    }
}
