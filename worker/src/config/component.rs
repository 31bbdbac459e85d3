//! An exec component's variables (design §5 "exec"): its program (`VF_COMPONENT_COMMAND_JSON`,
//! rendered by the control planes or put there by `videoflow-worker exec -- <argv>`) and the
//! host's deadlines. The deadlines are read only when there is a program, so a built-in node
//! never fails on them.

use std::collections::BTreeMap;
use std::time::Duration;

use videoflow_core::errors::{ErrorCode, VfError};

use super::read::bounded_seconds;

/// The exec component's program and arguments, a JSON array of strings.
pub const COMMAND_VAR: &str = "VF_COMPONENT_COMMAND_JSON";
/// Seconds from starting the program to its Hello (default 60).
pub const START_TIMEOUT_VAR: &str = "VF_COMPONENT_START_TIMEOUT_SECONDS";
/// Seconds one call (open, next, process, consume, close) may take (default 300, 0 = none).
pub const CALL_TIMEOUT_VAR: &str = "VF_COMPONENT_CALL_TIMEOUT_SECONDS";

/// Default [`START_TIMEOUT_VAR`].
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`CALL_TIMEOUT_VAR`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// The shortest start timeout: a smaller value could never see a Hello.
const MIN_START_TIMEOUT: Duration = Duration::from_millis(100);

/// The exec component of a node, when it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentConfig {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// From starting the program to its Hello.
    pub start_timeout: Duration,
    /// Per call; `None` waits forever (`0`).
    pub call_timeout: Option<Duration>,
}

impl ComponentConfig {
    /// `None` when [`COMMAND_VAR`] is unset or blank; else the program with its deadlines.
    ///
    /// # Errors
    /// `VF_CONFIG` naming the variable: a command that is not a non-empty JSON array of
    /// strings, or a deadline that is not a number of seconds ≥ 0.
    pub fn from_env(vars: &BTreeMap<String, String>) -> Result<Option<Self>, VfError> {
        let Some(text) = vars.get(COMMAND_VAR).filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        let command = match serde_json::from_str::<Vec<String>>(text) {
            Ok(argv) if argv.first().is_some_and(|p| !p.is_empty()) => argv,
            _ => {
                return Err(VfError::new(
                    ErrorCode::Config,
                    format!("{COMMAND_VAR} must be a non-empty JSON array of strings, got {text}."),
                )
                .with_remedy("Set component.exec.command in the Flow; the control planes render this variable from it.")
                .with_context("variable", COMMAND_VAR));
            }
        };
        let start_timeout = seconds(vars, START_TIMEOUT_VAR)?
            .map_or(DEFAULT_START_TIMEOUT, |d| d.max(MIN_START_TIMEOUT));
        let call_timeout = match seconds(vars, CALL_TIMEOUT_VAR)? {
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
            None => Some(DEFAULT_CALL_TIMEOUT),
        };
        Ok(Some(ComponentConfig {
            command,
            start_timeout,
            call_timeout,
        }))
    }
}

/// A deadline variable: unset or blank ⇒ `None`; else seconds in `[0, MAX_SECONDS]`.
fn seconds(vars: &BTreeMap<String, String>, var: &str) -> Result<Option<Duration>, VfError> {
    match vars.get(var).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .and_then(|s| bounded_seconds(var, s).ok())
            .map(Some)
            .ok_or_else(|| {
                VfError::new(
                    ErrorCode::Config,
                    format!("{var} must be a number of seconds >= 0, got '{v}'."),
                )
                .with_remedy(format!("Set {var} to e.g. 60, or unset it."))
                .with_context("variable", var)
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn command_parses_or_explains() {
        assert_eq!(ComponentConfig::from_env(&vars(&[])).expect("unset"), None);
        let c = ComponentConfig::from_env(&vars(&[(COMMAND_VAR, r#"["python3","-m","x"]"#)]))
            .expect("parses")
            .expect("set");
        assert_eq!(c.command, vec!["python3", "-m", "x"]);
        assert_eq!(c.start_timeout, DEFAULT_START_TIMEOUT);
        assert_eq!(c.call_timeout, Some(DEFAULT_CALL_TIMEOUT));
        let e = ComponentConfig::from_env(&vars(&[(COMMAND_VAR, "[]")])).expect_err("empty");
        assert_eq!(e.code, ErrorCode::Config);
    }

    #[test]
    fn deadlines_are_bounded() {
        let cmd = (COMMAND_VAR, r#"["x"]"#);
        let c = ComponentConfig::from_env(&vars(&[
            cmd,
            (START_TIMEOUT_VAR, "2"),
            (CALL_TIMEOUT_VAR, "0"),
        ]))
        .expect("parses")
        .expect("set");
        assert_eq!(c.start_timeout, Duration::from_secs(2));
        assert_eq!(c.call_timeout, None);
        for bad in ["-1", "inf", "1e300", "nan", "x"] {
            let e =
                ComponentConfig::from_env(&vars(&[cmd, (CALL_TIMEOUT_VAR, bad)])).expect_err(bad);
            assert!(e.to_string().contains(CALL_TIMEOUT_VAR), "{e}");
        }
        // Without a program the deadlines are not read.
        assert_eq!(
            ComponentConfig::from_env(&vars(&[(CALL_TIMEOUT_VAR, "x")])).expect("unread"),
            None
        );
    }
}
