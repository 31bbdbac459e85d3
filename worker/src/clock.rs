//! The wall clock: Unix epoch seconds, for event timestamps without one (LOOP-10, JOIN-11),
//! sink records and lease expiry times (§11.2), which other processes compare. Ages and
//! deadlines use monotonic clocks instead (`join::Clock::mono`, `supervision`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix epoch seconds; a clock set before 1970 reads as negative seconds.
pub fn wall_now() -> f64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}
