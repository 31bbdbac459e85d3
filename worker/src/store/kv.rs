//! The shapes every store backend shares (STORE-1): a value with the version that wrote it,
//! a scan row, and STORE-5's error for a store that cannot be reached.

use videoflow_core::errors::{ErrorCode, VfError};

/// A stored value and the version that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The bytes stored.
    pub value: Vec<u8>,
    /// The opaque version (`"1"`, `"2"`, … for the built-in stores).
    pub version: String,
}

/// One `scan` row: key, value, version.
pub type ScanRow = (String, Vec<u8>, String);

/// What a `purge` removed: documents (keys) and logs under one prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Keys (documents) deleted.
    pub keys: usize,
    /// Logs deleted.
    pub logs: usize,
}

/// STORE-5's TransientFailure: `runtime store unreachable <verb> '<key>': <detail>`.
pub(crate) fn unreachable(verb: &str, key: &str, detail: impl std::fmt::Display) -> VfError {
    VfError::new(
        ErrorCode::Transient,
        format!("runtime store unreachable {verb} '{key}': {detail}"),
    )
    .with_remedy("Restore the Redis behind VF_RUNTIME_STORE_URL.")
}
