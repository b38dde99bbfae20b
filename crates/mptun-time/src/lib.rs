//! Time as a parameter.
//!
//! The protocol core never reads a clock: every entry point takes an [`Instant`]
//! from its driver. The simulator hands out virtual instants (starting at
//! [`Instant::ZERO`]) so a run is reproducible bit for bit; the tokio runtime
//! converts its monotonic clock into the same type. Nanosecond resolution so
//! EDT departure times and serialization delays on fast links do not round to
//! zero.

#![forbid(unsafe_code)]

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
pub use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch fixed by the driver.
///
/// Subtraction saturates at zero instead of panicking: a timestamp from a
/// hostile or reordered packet must never bring the stack down.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch: time zero of a simulation.
    pub const ZERO: Instant = Instant(0);
    /// A time later than any a run reaches; handy as "never".
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    #[inline]
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `micros` microseconds after the epoch.
    #[inline]
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros.saturating_mul(1_000))
    }

    /// An instant `millis` milliseconds after the epoch.
    #[inline]
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Microseconds since the epoch (what TCP timestamps and Linux's `tcp_mstamp` use).
    #[inline]
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Milliseconds since the epoch.
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Seconds since the epoch as a float, for reports and traces.
    #[inline]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    #[inline]
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` past the end of representable time.
    #[inline]
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(d).map(Instant)
    }

    /// The earlier of two optional deadlines (`None` means "no deadline").
    #[inline]
    pub fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::FAR_FUTURE)
    }
}

impl AddAssign<Duration> for Instant {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    #[inline]
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn sub(self, d: Duration) -> Instant {
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(d))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Instant::from_millis(5);
        let b = Instant::from_millis(7);
        assert_eq!(b - a, Duration::from_millis(2));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(a - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::FAR_FUTURE + Duration::from_secs(1), Instant::FAR_FUTURE);
        assert_eq!(a + Duration::from_micros(1), Instant::from_nanos(5_001_000));
    }

    #[test]
    fn min_opt_prefers_a_deadline() {
        let a = Some(Instant::from_millis(1));
        assert_eq!(Instant::min_opt(a, None), a);
        assert_eq!(Instant::min_opt(None, a), a);
        assert_eq!(Instant::min_opt(a, Some(Instant::from_millis(2))), a);
        assert_eq!(Instant::min_opt(None, None), None);
    }
}
