//! The exit path (§15.4): log the one-line reason, write the termination record, exit with
//! the class's code.
//!
//! The record is what the operator reads from the pod's `terminated.message` (and the local
//! runner from the file) to say *why* a worker died, with a remedy, instead of "exit 4".
//! Writing it is best-effort and silent on failure: a read-only filesystem must not turn a
//! clear error into a confusing one.

use std::path::Path;

use videoflow_core::errors::VfError;

/// Writes `error`'s record to `path`, truncating what was there (§15.4). Failures are
/// ignored on purpose; returns whether the write succeeded (for tests and logs).
pub fn write_record(path: &Path, error: &VfError) -> bool {
    std::fs::write(path, error.termination_json()).is_ok()
}

/// Logs `<code>: <message>[ <remedy>]`, writes the record and returns the exit status.
pub fn report(path: &Path, error: &VfError) -> i32 {
    tracing::error!(code = %error.code, "{}", error.log_line());
    write_record(path, error);
    error.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;
    use videoflow_core::errors::ErrorCode;

    #[test]
    fn record_is_written_truncating_and_exit_code_follows_the_class() {
        let dir = std::env::temp_dir().join(format!("vf-term-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("termination-log");
        std::fs::write(&path, "x".repeat(10_000)).expect("prefill");
        let err = VfError::new(ErrorCode::ResourceUnavailable, "no GPU on host h")
            .with_remedy("Schedule it on a GPU node.");
        assert_eq!(report(&path, &err), 3);
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        assert_eq!(record["code"], "VF_RESOURCE_UNAVAILABLE");
        assert_eq!(record["remedy"], "Schedule it on a GPU node.");
        assert!(
            !write_record(&dir.join("missing/dir/log"), &err),
            "silent failure"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
