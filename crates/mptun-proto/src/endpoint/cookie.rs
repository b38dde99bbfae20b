//! SYN cookies (RFC 4987): once the half-open queue is full, a SYN is
//! answered without keeping anything, the connection's parameters encoded in
//! our initial sequence number, and the connection is built when the third
//! ACK brings the cookie back.
//!
//! The cookie (32 bits, our ISS): bits 0–1 the peer's MSS rounded down to
//! Linux's table (536, 1300, 1440, 1460), bit 2 SACK permitted, bits 3–6 the
//! peer's window scale (15: none), bit 7 unused (0), bits 8–31 a MAC
//! (HMAC-SHA256 truncated to 24 bits) of the endpoint's secret, the 4-tuple,
//! the peer's ISN, the low byte and a 64-second time slot. The ACK is taken
//! in the slot it was made in or the next one (64 to 128 s, Linux's
//! `MAX_SYNCOOKIE_AGE` is two minutes). Timestamps need no bits: the third
//! ACK carries the option if the SYN did, and our timestamp offset for the
//! pair is derived from the secret, so the rebuilt subflow's clock is the
//! one the SYN-ACK showed.
//!
//! MP_CAPABLE, as Linux does it (`mptcp_subflow_init_cookie_req`): in MPTCP
//! v1 the third ACK carries both keys, so the SYN-ACK offers a fresh key
//! that is not stored and the connection is rebuilt with the key the ACK
//! echoes as ours (refused as plain TCP if its token is in use). MP_JOIN
//! SYNs are never answered with a cookie: they do not count against the
//! listener's half-open queue here, but against their connection's
//! `subflows` limit and `max_join_syn_per_sec`, which need the token
//! of a live connection (Linux keeps a small table of join requests to
//! restore them statelessly; bounded per-connection state serves the same
//! end with less machinery).

use mptun_time::{Duration, Instant};
use mptun_wire::crypto::hmac_sha256;
use mptun_wire::tcp::OptionSummary;
use std::net::SocketAddr;

/// Linux's `msstab` (IPv4): the MSS a cookie can carry.
const MSSTAB: [u16; 4] = [536, 1300, 1440, 1460];
const WS_NONE: u32 = 15;
const SLOT: Duration = Duration::from_secs(64);

/// What a valid cookie says about the SYN it answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cookie {
    pub mss: u16,
    pub wscale: Option<u8>,
    pub sack: bool,
}

/// The secret and the time the last cookie went out.
pub(super) struct CookieJar {
    secret: (u64, u64),
    /// Cookies are only taken while some were sent recently (Linux
    /// `tcp_synq_no_recent_overflow`): an ACK guessing a cookie gets no
    /// chance while the queue never overflowed.
    last_sent: Option<Instant>,
}

fn slot(now: Instant) -> u64 {
    now.saturating_duration_since(Instant::ZERO).as_secs() / SLOT.as_secs()
}

impl CookieJar {
    pub fn new(secret: (u64, u64)) -> Self {
        CookieJar { secret, last_sent: None }
    }

    fn mac(&self, local: SocketAddr, remote: SocketAddr, peer_isn: u32, slot: u64, low: u8) -> u32 {
        let mut m = Vec::with_capacity(64);
        for a in [local, remote] {
            match a.ip() {
                std::net::IpAddr::V4(ip) => m.extend_from_slice(&ip.octets()),
                std::net::IpAddr::V6(ip) => m.extend_from_slice(&ip.octets()),
            }
            m.extend_from_slice(&a.port().to_be_bytes());
        }
        m.extend_from_slice(&peer_isn.to_be_bytes());
        m.extend_from_slice(&slot.to_be_bytes());
        m.push(low);
        let h = hmac_sha256(self.secret.0, self.secret.1, &m);
        u32::from_be_bytes([0, h[0], h[1], h[2]])
    }

    /// The ISS answering a SYN with options `syn` and sequence `peer_isn`.
    pub fn make(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        peer_isn: u32,
        syn: &OptionSummary,
    ) -> u32 {
        self.last_sent = Some(now);
        let mss = syn.mss.unwrap_or(536);
        let idx = MSSTAB.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32;
        let ws = syn.window_scale.map_or(WS_NONE, |w| u32::from(w.min(14)));
        let low = (idx | (syn.sack_permitted as u32) << 2 | ws << 3) as u8;
        self.mac(local, remote, peer_isn, slot(now), low) << 8 | u32::from(low)
    }

    /// The cookie an ACK acknowledges (its `ack - 1`), if it is ours, recent
    /// and cookies were sent lately.
    pub fn check(
        &self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        peer_isn: u32,
        cookie: u32,
    ) -> Option<Cookie> {
        let recent = self.last_sent.is_some_and(|t| now.saturating_duration_since(t) < SLOT * 2);
        if !recent {
            return None;
        }
        let low = cookie as u8;
        if low & 0x80 != 0 {
            return None;
        }
        let s = slot(now);
        let ok = [s, s.wrapping_sub(1)].iter().any(|&sl| self.mac(local, remote, peer_isn, sl, low) == cookie >> 8);
        if !ok {
            return None;
        }
        let ws = u32::from(low >> 3) & 0xf;
        Some(Cookie {
            mss: MSSTAB[usize::from(low & 3)],
            wscale: (ws != WS_NONE).then_some(ws as u8),
            sack: low & 4 != 0,
        })
    }

    /// Whether cookies went out lately (an ACK to a listener may carry one).
    pub fn active(&self, now: Instant) -> bool {
        self.last_sent.is_some_and(|t| now.saturating_duration_since(t) < SLOT * 2)
    }

    /// Our timestamp offset towards the pair: the same for the SYN-ACK and
    /// the connection rebuilt from its cookie (Linux derives it from the
    /// addresses too, `secure_tcp_ts_off`).
    pub fn ts_offset(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        self.mac(local, remote, 0, u64::MAX, 0xff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::sa;

    #[test]
    fn a_cookie_carries_its_syn_options_and_is_bound_to_pair_isn_and_time() {
        let mut j = CookieJar::new((1, 2));
        let (l, r) = (sa("10.0.0.1:80"), sa("10.0.0.2:4000"));
        let syn = OptionSummary { mss: Some(1450), window_scale: Some(7), sack_permitted: true, ..Default::default() };
        let t0 = Instant::ZERO + Duration::from_secs(1000);
        let c = j.make(t0, l, r, 77, &syn);
        let want = Cookie { mss: 1440, wscale: Some(7), sack: true };
        assert_eq!(j.check(t0, l, r, 77, c), Some(want));
        assert_eq!(j.check(t0 + Duration::from_secs(30), l, r, 77, c), Some(want), "the next slot");
        assert_eq!(j.check(t0 + Duration::from_secs(200), l, r, 77, c), None, "too old");
        assert_eq!(j.check(t0, l, r, 78, c), None, "another ISN");
        assert_eq!(j.check(t0, l, sa("10.0.0.2:4001"), 77, c), None, "another pair");
        assert_eq!(j.check(t0, l, r, 77, c ^ 0x100), None, "a forged MAC");
        assert_eq!(j.check(t0, l, r, 77, c ^ 0x4), None, "options are covered by the MAC");
        let bare = OptionSummary::default();
        let c = j.make(t0, l, r, 5, &bare);
        assert_eq!(j.check(t0, l, r, 5, c), Some(Cookie { mss: 536, wscale: None, sack: false }));
    }

    #[test]
    fn no_cookie_is_taken_while_none_was_sent() {
        let j = CookieJar::new((1, 2));
        assert_eq!(j.check(Instant::ZERO, sa("10.0.0.1:80"), sa("10.0.0.2:1"), 0, 0), None);
    }
}
