//! The conformance fault variables (ENV-16/17): `VF_FAULT_SCHEDULE_JSON` and
//! `VF_FAULT_MARKER_DIR`. A control plane never sets them; conformance tests do. The schedule's
//! grammar is the fault module's ([`crate::faults::FaultSchedule::parse`]): this only reads
//! the variables, so START-1 step 1 can install the schedule before step 2 reads the rest.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// `VF_FAULT_SCHEDULE_JSON` (ENV-16).
pub const ENV_SCHEDULE: &str = "VF_FAULT_SCHEDULE_JSON";
/// `VF_FAULT_MARKER_DIR` (ENV-17).
pub const ENV_MARKER_DIR: &str = "VF_FAULT_MARKER_DIR";

/// The fault schedule a process was started with, if any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FaultConfig {
    /// The schedule's JSON; `None` when unset or blank.
    pub schedule_json: Option<String>,
    /// Where fired hits leave their markers; `None` when unset or empty.
    pub marker_dir: Option<PathBuf>,
}

impl FaultConfig {
    /// Reads both variables; neither can fail here (the schedule is parsed when installed).
    pub fn from_env(vars: &BTreeMap<String, String>) -> FaultConfig {
        FaultConfig {
            schedule_json: vars
                .get(ENV_SCHEDULE)
                .filter(|v| !v.trim().is_empty())
                .cloned(),
            marker_dir: vars
                .get(ENV_MARKER_DIR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }
}
