//! Sequence-number arithmetic: TCP's 32-bit numbers (RFC 9293 section 3.4)
//! and MPTCP's 64-bit data sequence numbers (RFC 8684 3.3), both compared
//! modulo their size, like Linux's `before()`/`after()` and `before64()`.

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
    /// `self` comes before or is `other`.
    pub fn le(self, other: Seq) -> bool {
        !other.lt(self)
    }
    /// `self` comes strictly after `other` (Linux `after`).
    pub fn gt(self, other: Seq) -> bool {
        other.lt(self)
    }
    /// `self` comes after or is `other`.
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

/// An MPTCP data sequence number (RFC 8684 3.3): the connection-level
/// 64-bit sequence space the subflows' mappings point into. Like [`Seq`]
/// it wraps (an IDSN is derived from a random key, so the space may cross
/// 2^64 in any connection) and is ordered modulo 2^64, which is why it has
/// no `Ord`; comparisons are only meaningful for numbers less than 2^63
/// apart, always the case within one connection's window.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DataSeq(pub u64);

impl DataSeq {
    /// `self` comes strictly before `other` in modular order.
    pub fn lt(self, other: DataSeq) -> bool {
        (self.0.wrapping_sub(other.0) as i64) < 0
    }
    /// `self` comes before or is `other`.
    pub fn le(self, other: DataSeq) -> bool {
        !other.lt(self)
    }
    /// `self` comes strictly after `other`.
    pub fn gt(self, other: DataSeq) -> bool {
        other.lt(self)
    }
    /// `self` comes after or is `other`.
    pub fn ge(self, other: DataSeq) -> bool {
        !self.lt(other)
    }
    /// The later of two data sequence numbers.
    pub fn max(self, other: DataSeq) -> DataSeq {
        if self.lt(other) {
            other
        } else {
            self
        }
    }
    /// The earlier of two data sequence numbers.
    pub fn min(self, other: DataSeq) -> DataSeq {
        if self.lt(other) {
            self
        } else {
            other
        }
    }
    /// Distance from `earlier` to `self`, or 0 if `self` comes before it
    /// (what is left of a window whose edge was passed).
    pub fn saturating_sub(self, earlier: DataSeq) -> u64 {
        if self.lt(earlier) {
            0
        } else {
            self - earlier
        }
    }
}

impl Add<u64> for DataSeq {
    type Output = DataSeq;
    fn add(self, n: u64) -> DataSeq {
        DataSeq(self.0.wrapping_add(n))
    }
}

impl AddAssign<u64> for DataSeq {
    fn add_assign(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(n);
    }
}

impl Sub<DataSeq> for DataSeq {
    type Output = u64;
    /// Distance from `earlier` to `self`; callers ensure `earlier <= self`.
    fn sub(self, earlier: DataSeq) -> u64 {
        self.0.wrapping_sub(earlier.0)
    }
}

impl fmt::Debug for DataSeq {
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

    #[test]
    fn data_seq_orders_modulo_2_64() {
        let a = DataSeq(u64::MAX - 5);
        let b = a + 10;
        assert_eq!(b, DataSeq(4));
        assert!(a.lt(b) && b.gt(a) && a.le(a) && a.ge(a));
        assert_eq!(b - a, 10);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        assert_eq!(b.saturating_sub(a), 10);
        assert_eq!(a.saturating_sub(b), 0);
        let mut c = a;
        c += 6;
        assert_eq!(c, DataSeq(0));
    }
}
