//! TCP sequence-number arithmetic (RFC 9293 section 3.4): 32-bit values compared
//! modulo 2^32, like Linux's `before()`/`after()`.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A TCP sequence number. Ordering is modular, so `Seq` deliberately does not
/// implement `Ord`: use [`Seq::lt`] and friends, which are only meaningful for
/// numbers less than 2^31 apart.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self` comes strictly before `other` (Linux `before`).
    pub fn lt(self, other: Seq) -> bool {
        (self.0.wrapping_sub(other.0) as i32) < 0
    }
    pub fn le(self, other: Seq) -> bool {
        !other.lt(self)
    }
    pub fn gt(self, other: Seq) -> bool {
        other.lt(self)
    }
    pub fn ge(self, other: Seq) -> bool {
        !self.lt(other)
    }
    /// The later of two sequence numbers.
    pub fn max(self, other: Seq) -> Seq {
        if self.lt(other) {
            other
        } else {
            self
        }
    }
    /// The earlier of two sequence numbers.
    pub fn min(self, other: Seq) -> Seq {
        if self.lt(other) {
            self
        } else {
            other
        }
    }
    /// `lo <= self < hi` in modular order.
    pub fn in_range(self, lo: Seq, hi: Seq) -> bool {
        self.ge(lo) && self.lt(hi)
    }
}

impl Add<u32> for Seq {
    type Output = Seq;
    fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }
}

impl AddAssign<u32> for Seq {
    fn add_assign(&mut self, n: u32) {
        self.0 = self.0.wrapping_add(n);
    }
}

impl Sub<Seq> for Seq {
    type Output = u32;
    /// Distance from `earlier` to `self`; callers ensure `earlier <= self`.
    fn sub(self, earlier: Seq) -> u32 {
        self.0.wrapping_sub(earlier.0)
    }
}

impl Sub<u32> for Seq {
    type Output = Seq;
    fn sub(self, n: u32) -> Seq {
        Seq(self.0.wrapping_sub(n))
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modular_order_across_wrap() {
        let a = Seq(u32::MAX - 5);
        let b = a + 10;
        assert_eq!(b, Seq(4));
        assert!(a.lt(b) && b.gt(a) && a.le(a) && a.ge(a));
        assert_eq!(b - a, 10);
        assert!(Seq(4).in_range(a, b + 1));
        assert!(!b.in_range(a, b));
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
    }
}
