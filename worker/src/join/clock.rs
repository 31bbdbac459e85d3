//! The two clocks a join reads (§0): **mono** for group ages, settle holds and collect
//! retention; **wall** for the event time of a message that carries none (JOIN-11).
//!
//! Injected rather than read from the OS so every timing rule (JOIN-8, JOIN-15, JOIN-17,
//! JOIN-19) is testable deterministically with [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A source of the current time in seconds. `Send + Sync` so an assembler holding one can
/// move into whichever thread or task runs the receive loop.
pub trait Clock: Send + Sync {
    /// Monotonic seconds from an arbitrary origin: ages and deadlines, never event times.
    fn mono(&self) -> f64;
    /// Unix epoch seconds: the fallback event time of a message without `event_ts`.
    fn wall(&self) -> f64;
}

/// The real clocks: [`Instant`] for mono (origin = construction) and [`SystemTime`] for wall.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose mono origin is now; only differences of mono readings mean anything.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn mono(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    fn wall(&self) -> f64 {
        crate::clock::wall_now()
    }
}

/// A clock tests move by hand. Clones share the same readings, so a test keeps one clone and
/// hands another to the assembler.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    mono_bits: Arc<AtomicU64>,
    wall_bits: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `mono` and `wall` until it is moved.
    pub fn new(mono: f64, wall: f64) -> Self {
        let clock = ManualClock::default();
        clock.set_mono(mono);
        clock.set_wall(wall);
        clock
    }

    /// Sets the monotonic reading (tests may move it anywhere; real mono never goes back).
    pub fn set_mono(&self, secs: f64) {
        self.mono_bits.store(secs.to_bits(), Ordering::SeqCst);
    }

    /// Sets the wall reading.
    pub fn set_wall(&self, secs: f64) {
        self.wall_bits.store(secs.to_bits(), Ordering::SeqCst);
    }

    /// Moves both clocks forward by `secs`, as real time passing would.
    pub fn advance(&self, secs: f64) {
        self.set_mono(self.mono() + secs);
        self.set_wall(self.wall() + secs);
    }

    /// Shares this clock as the trait object an assembler takes.
    pub fn shared(&self) -> Arc<dyn Clock> {
        Arc::new(self.clone())
    }
}

impl Clock for ManualClock {
    fn mono(&self) -> f64 {
        f64::from_bits(self.mono_bits.load(Ordering::SeqCst))
    }

    fn wall(&self) -> f64 {
        f64::from_bits(self.wall_bits.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_readings() {
        let a = ManualClock::new(1.0, 100.0);
        let b = a.shared();
        a.advance(2.5);
        assert_eq!((b.mono(), b.wall()), (3.5, 102.5));
        a.set_wall(7.0);
        assert_eq!(b.wall(), 7.0);
    }

    #[test]
    fn system_clock_mono_does_not_go_back() {
        let c = SystemClock::new();
        let first = c.mono();
        assert!(c.mono() >= first);
        assert!(c.wall() > 1_600_000_000.0);
    }
}
