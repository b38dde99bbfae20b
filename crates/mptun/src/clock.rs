//! The stack's clock: tokio's monotonic time mapped to the protocol core's
//! [`mptun_time::Instant`], which counts nanoseconds from the stack's creation.
//!
//! The core never reads a clock (the simulator drives it with virtual time),
//! so every call into it takes `now` from here. Using tokio's `Instant` rather
//! than `std`'s keeps the mapping consistent with tokio's timers.

use mptun_time::Instant;
use std::time::Duration;

/// Converts between tokio's clock and the core's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    epoch: tokio::time::Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub(crate) fn new() -> Self {
        Clock { epoch: tokio::time::Instant::now() }
    }

    /// The current time on the core's scale.
    pub(crate) fn now(self) -> Instant {
        self.to_core(tokio::time::Instant::now())
    }

    /// A tokio instant on the core's scale (instants before the epoch map to zero).
    pub(crate) fn to_core(self, t: tokio::time::Instant) -> Instant {
        let d = t.saturating_duration_since(self.epoch);
        Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// A core instant as a tokio instant (saturating far in the future).
    pub(crate) fn to_tokio(self, t: Instant) -> tokio::time::Instant {
        let far = self.epoch + Duration::from_secs(86_400 * 365 * 30);
        self.epoch.checked_add(Duration::from_nanos(t.as_nanos())).map_or(far, |x| x.min(far))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trips_and_saturates() {
        let c = Clock::new();
        let t = Instant::from_micros(1_234_567);
        assert_eq!(c.to_core(c.to_tokio(t)), t);
        assert!(c.now() < Instant::from_millis(10_000));
        let before = c.epoch.checked_sub(Duration::from_millis(1)).unwrap_or(c.epoch);
        assert_eq!(c.to_core(before), Instant::ZERO);
        // FAR_FUTURE must not overflow tokio's Instant.
        assert!(c.to_tokio(Instant::FAR_FUTURE) > c.to_tokio(t));
    }
}
