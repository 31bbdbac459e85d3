//! How a node's own error becomes a runtime error (ERR-2): classified by `VF_ON_ERROR` and
//! named by node, replica and message.

use videoflow_core::errors::{ErrorCode, VfError};

use crate::config::WorkerConfig;

/// ERR-2: an error outside the runtime classes is wrapped by the disposition `VF_ON_ERROR`
/// gives it, keeping its text; context names the node (and the message being processed).
pub(crate) fn wrap_node_error(e: VfError, cfg: &WorkerConfig, at: Option<(&str, i128)>) -> VfError {
    let mut e = if e.code.is_a(ErrorCode::Runtime)
        || e.code.is_a(ErrorCode::User)
        || e.code.is_a(ErrorCode::Environment)
    {
        e
    } else {
        let d = crate::delivery::classify(&e, cfg.on_error);
        let mut wrapped = VfError::new(ErrorCode::for_disposition(d), e.message.clone());
        wrapped.remedy = e.remedy.clone();
        wrapped.context = e.context.clone();
        wrapped
    };
    e = e
        .with_context("node", cfg.node_name.clone())
        .with_context("replica", cfg.replica_id());
    if let Some((trace_id, seq)) = at {
        e = e
            .with_context("trace_id", trace_id.to_owned())
            .with_context("seq", seq.to_string());
    }
    e
}
