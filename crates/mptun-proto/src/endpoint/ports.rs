//! Ephemeral port choice, bounded like Linux's `__inet_hash_connect`: a
//! random offset into the range, then a linear scan of the whole range, and
//! failure once every port is in use. A loop that draws until it finds a
//! free port never ends once the ports towards one destination are used up.

use rand::Rng;

/// Local ports an outgoing connection (or subflow) is given when it asks for
/// port 0: Linux's default `net.ipv4.ip_local_port_range` (32768–60999), so
/// that our connections look like the kernel's to firewalls and NATs. Public
/// so that the runtime draws from the same range.
pub const IP_LOCAL_PORT_RANGE: core::ops::RangeInclusive<u16> = 32768..=60999;

/// The first port of the range, from a random offset on, that `in_use` does
/// not claim; `None` when it claims them all. One random draw whatever the
/// outcome (the first port tried is the one the draw names).
pub(super) fn pick(
    rng: &mut impl Rng,
    range: &core::ops::RangeInclusive<u16>,
    in_use: impl Fn(u16) -> bool,
) -> Option<u16> {
    let (lo, hi) = (*range.start(), (*range.end()).max(*range.start()));
    let n = u32::from(hi - lo) + 1;
    // One draw over the whole range, so that the random stream (and every
    // seeded run with it) is the same whichever ports are in use.
    let first = rng.random_range(lo..=hi);
    let off = u32::from(first - lo);
    (0..n).map(|i| lo + ((off + i) % n) as u16).find(|&p| !in_use(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn finds_the_last_free_port_and_fails_when_none_is_left() {
        let mut rng = ChaCha20Rng::from_seed([3; 32]);
        let last = 45_000;
        assert_eq!(pick(&mut rng, &IP_LOCAL_PORT_RANGE, |p| p != last), Some(last));
        assert_eq!(pick(&mut rng, &IP_LOCAL_PORT_RANGE, |_| true), None);
    }

    #[test]
    fn every_port_of_the_range_can_come_first() {
        let mut rng = ChaCha20Rng::from_seed([4; 32]);
        let ps: Vec<u16> = (0..1000).map(|_| pick(&mut rng, &IP_LOCAL_PORT_RANGE, |_| false).unwrap()).collect();
        assert!(ps.iter().all(|p| IP_LOCAL_PORT_RANGE.contains(p)));
        assert!(ps.iter().collect::<std::collections::HashSet<_>>().len() > 900);
    }
}
