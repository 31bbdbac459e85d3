//! How the binary logs: `VF_LOG` (a `tracing` filter, default `info`), `VF_STRUCTURED_LOGS`
//! (one JSON object per line) and `NO_COLOR`. Read before anything else, by every subcommand.

use super::Environment;

/// The logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `VF_LOG`: an `EnvFilter` directive; `info` when unset or empty.
    pub filter: String,
    /// `VF_STRUCTURED_LOGS` is `1`/`true`/`yes` (case-insensitive).
    pub structured: bool,
    /// `NO_COLOR` is set (to anything): no ANSI colours even on a terminal.
    pub no_color: bool,
}

impl LogConfig {
    /// Reads the three variables; none of them can fail.
    pub fn from_env(env: &Environment) -> LogConfig {
        LogConfig {
            filter: env
                .get("VF_LOG")
                .filter(|v| !v.trim().is_empty())
                .unwrap_or("info")
                .to_owned(),
            structured: structured_logs(env.get("VF_STRUCTURED_LOGS")),
            no_color: !env.passthrough(&["NO_COLOR"]).is_empty(),
        }
    }
}

/// `VF_STRUCTURED_LOGS`' truthy words.
pub(super) fn structured_logs(raw: Option<&str>) -> bool {
    raw.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn defaults_and_values() {
        let none = LogConfig::from_env(&Environment::default());
        assert_eq!(
            none,
            LogConfig {
                filter: "info".into(),
                structured: false,
                no_color: false
            }
        );
        let env = Environment::from_map(BTreeMap::from([
            ("VF_LOG".into(), "videoflow_worker=debug".into()),
            ("VF_STRUCTURED_LOGS".into(), "Yes".into()),
            ("NO_COLOR".into(), String::new()),
        ]));
        let c = LogConfig::from_env(&env);
        assert_eq!(c.filter, "videoflow_worker=debug");
        assert!(c.structured && c.no_color);
    }
}
