//! The process-wide flags every loop checks each iteration: the control stop, SIGTERM and
//! SIGINT.

use crate::broker::StopFlag;

/// The process-wide flags the loops check every iteration.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// The control stop (CTRL-1), set by the control subscription.
    pub stop: StopFlag,
    /// SIGTERM: quiesce and exit 143 (START-2).
    pub quiesce: StopFlag,
    /// SIGINT: a producer ends as at end of input; others ignore it (START-3).
    pub interrupt: StopFlag,
}
