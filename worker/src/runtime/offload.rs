//! A call that may block its thread, kept from stalling the runtime's other tasks.

/// Runs `f`, which may block its thread, without stalling the runtime's other tasks where
/// the runtime allows: on the multi-threaded runtime through `block_in_place` (its I/O
/// moves to another worker meanwhile); on a current-thread runtime — a light node's, see
/// `runtime::light` — inline, the only choice there.
pub(crate) fn off_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::CurrentThread) | Err(_) => f(),
        Ok(_) => tokio::task::block_in_place(f),
    }
}
