//! Path MTU: the MSS a subflow may use on its own path.
//!
//! * The device MTU ([`Subflow::set_device_mtu`]) bounds the MSS we announce
//!   and the segments we cut (Linux `dst_mtu` / `icsk_pmtu_cookie`).
//! * ICMP "fragmentation needed" (RFC 1191) and ICMPv6 "packet too big" (RFC
//!   8201) lower it ([`Subflow::handle_too_big`]), once the quoted sequence
//!   number proves the report is about data in flight (RFC 5927, Linux
//!   `tcp_v4_err`/`tcp_v6_err`); what no longer fits is retransmitted at the
//!   new size without a congestion response (Linux `tcp_simple_retransmit`).
//! * Without ICMP, packetization-layer PMTUD (RFC 4821, Linux
//!   `tcp_mtu_probing=1`): repeated RTOs are taken for a black hole, the MSS
//!   falls back to `base_mss`, and single larger probes search upward
//!   (binary search between `search_low` and `search_high`, Linux
//!   `tcp_mtu_probe`, `tcp_mtup_probe_success`, `tcp_mtup_probe_failed`).
//!
//! A subflow that was never told its device MTU (the simulator) keeps the
//! configured MSS and none of this runs.

use super::*;

/// Linux `ip_rt_min_pmtu` (512 + 20 + 20): an IPv4 report below it is
/// raised to it.
const IP_MIN_PMTU: u32 = 552;
/// IPv6 minimum link MTU (RFC 8200 5): a report below it is ignored (Linux
/// `tcp_v6_err`).
const IPV6_MIN_MTU: u32 = 1280;
/// Linux `tcp_retries1`: a black hole is suspected once retransmissions
/// have gone unanswered for as long as this many RTOs from `rto_min` would
/// take, `(2^(n+1) - 1) × rto_min` (Linux `retransmits_timed_out` with
/// `tcp_model_timeout`): 3 s with the default 200 ms.
const TCP_RETRIES1: u32 = 3;
/// The MSS never falls below this on black-hole detection (Linux
/// `tcp_mtu_probe_floor`).
const TCP_MTU_PROBE_FLOOR: u32 = 48;

/// Path-MTU state of one subflow (Linux `icsk_pmtu_cookie` and `icsk_mtup`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PathMtu {
    /// MTU of the device the subflow leaves by; `None`: unknown.
    dev: Option<u32>,
    /// Path MTU in use: the device's, lowered by ICMP.
    pmtu: u32,
    /// Packetization-layer search running (Linux `icsk_mtup.enabled`).
    enabled: bool,
    search_low: u32,
    search_high: u32,
    /// The probe in flight: its first and end sequence numbers and its MTU.
    probe: Option<(Seq, Seq, u32)>,
    /// When the search (re)started (Linux `icsk_mtup.probe_timestamp`).
    probe_timestamp: Option<Instant>,
    /// When the data the current RTO streak retransmits was first sent
    /// (Linux `retrans_stamp`).
    rto_streak_start: Option<Instant>,
    /// Option bytes the segment hook put on the last data segment: what
    /// the segments in flight carry besides timestamps.
    pub(super) hook_space: usize,
}

impl PathMtu {
    /// Whether the device MTU is known (PMTU discovery runs).
    pub(super) fn known(&self) -> bool {
        self.dev.is_some()
    }
}

impl Subflow {
    /// IP + TCP header bytes without options on this subflow.
    fn hdr_len(&self) -> u32 {
        ip_tcp_header_len(&self.local)
    }

    /// Largest payload without options for packets of `mtu` bytes (Linux
    /// `__tcp_mtu_to_mss`).
    fn mtu_to_mss(&self, mtu: u32) -> u32 {
        mtu.saturating_sub(self.hdr_len())
    }

    fn mss_to_mtu(&self, mss: u32) -> u32 {
        mss + self.hdr_len()
    }

    /// The configured MSS and the peer's, whichever is smaller (Linux
    /// `rx_opt.mss_clamp`).
    pub(super) fn mss_clamp(&self) -> u32 {
        u32::from(self.peer_mss.min(self.cfg.mss))
    }

    /// Payload bytes without options a segment may carry on this path: the
    /// clamp, the path MTU and, while searching, the search floor (Linux
    /// `tcp_sync_mss`).
    pub(super) fn mss_cap(&self) -> u32 {
        let clamp = self.mss_clamp();
        if !self.pmtu.known() {
            return clamp;
        }
        let mut mss = clamp.min(self.mtu_to_mss(self.pmtu.pmtu));
        if self.pmtu.enabled {
            mss = mss.min(self.mtu_to_mss(self.pmtu.search_low));
        }
        mss
    }

    /// The MSS we announce in our SYN: the configured one, bounded by the
    /// device MTU (Linux `tcp_advertise_mss`, from `dst_metric_advmss`).
    pub(super) fn advmss(&self) -> u16 {
        match self.pmtu.dev {
            Some(mtu) => self.cfg.mss.min(u16::try_from(self.mtu_to_mss(mtu)).unwrap_or(u16::MAX)),
            None => self.cfg.mss,
        }
    }

    /// Tells the subflow the MTU of the device its packets leave by. Call it
    /// right after creating the subflow, before its first `poll_transmit`:
    /// the SYN then announces `mtu` less the headers as its MSS, no segment
    /// is cut larger than `mtu`, and path-MTU discovery (ICMP and, per
    /// `TcpConfig::mtu_probing`, probing) runs below it.
    pub fn set_device_mtu(&mut self, mtu: u32) {
        let mtu = mtu.max(self.mss_to_mtu(u32::from(MIN_MSS)));
        self.pmtu.dev = Some(mtu);
        self.pmtu.pmtu = mtu;
        self.pmtu.search_high = mtu;
        self.pmtu.search_low = self.mss_to_mtu(u32::from(self.cfg.base_mss)).min(mtu);
        self.pmtu.enabled = self.cfg.mtu_probing > 1;
        self.pacer = mptun_cc::new_pacer(self.cfg.pacer, mtu);
    }

    /// The path MTU the subflow sizes its segments for (Linux `tcpi_pmtu`),
    /// or `None` when no device MTU was given.
    pub fn path_mtu(&self) -> Option<u32> {
        self.pmtu.known().then(|| self.mss_to_mtu(self.mss_cap()))
    }

    /// An ICMP "fragmentation needed" (IPv4) or "packet too big" (IPv6)
    /// quoting one of our segments with sequence number `seq` and reporting
    /// `mtu`. Applied only if `seq` lies in `snd_una..=snd_nxt` (RFC 5927,
    /// Linux `tcp_v4_err`: else `OutOfWindowIcmps`); an MTU that would not
    /// lower the path MTU is ignored. Returns whether the MSS came down.
    pub fn handle_too_big(&mut self, now: Instant, seq: Seq, mtu: u32) -> bool {
        if matches!(self.state, State::Closed | State::TimeWait | State::SynReceived) {
            return false;
        }
        if !(seq.ge(self.snd_una) && seq.le(self.snd_nxt)) {
            self.counters.tcp_ext_out_of_window_icmps += 1;
            return false;
        }
        let mtu = if self.local.is_ipv4() {
            mtu.max(IP_MIN_PMTU)
        } else if mtu < IPV6_MIN_MTU {
            return false;
        } else {
            mtu
        };
        let current = self.mss_to_mtu(self.mss_cap());
        if mtu >= current {
            return false;
        }
        if !self.pmtu.known() {
            // No device MTU given: start from what the segments were cut for.
            self.pmtu.dev = Some(current);
            self.pmtu.search_low = self.mss_to_mtu(u32::from(self.cfg.base_mss)).min(current);
        }
        self.pmtu.pmtu = mtu;
        self.pmtu.search_high = self.pmtu.search_high.min(mtu);
        self.pmtu.search_low = self.pmtu.search_low.min(mtu);
        self.counters.mptun_pmtu_reduced += 1;
        tracing::debug!(local = %self.local, remote = %self.remote, mtu, "path MTU lowered by ICMP");
        self.simple_retransmit(now);
        true
    }

    /// Linux `tcp_simple_retransmit`: every segment in flight larger than the
    /// MSS now (with the options data segments carry) is lost and goes out again (cut to the new size), without
    /// touching the congestion window: no more data is in the network, only
    /// the units changed.
    pub(super) fn simple_retransmit(&mut self, now: Instant) {
        self.scoreboard.mark_lost_larger_than(self.mss(self.pmtu.hook_space));
        if self.scoreboard.lost_out() == 0 {
            return;
        }
        if self.ca_state != CaState::Loss {
            self.high_seq = self.snd_nxt;
            if !matches!(self.ca_state, CaState::Recovery) {
                self.ccs.ssthresh = self.ccs.ssthresh.max(self.ccs.cwnd / 4 * 3);
            }
            self.ca_state = CaState::Loss;
            self.cc.set_state(&mut self.ccs, CaState::Loss, now);
        }
    }

    /// Called on every RTO of data, before the backoff (Linux
    /// `tcp_write_timeout`'s black-hole detection, `tcp_mtu_probing`): a
    /// probe in flight failed; once the streak of RTOs has lasted what
    /// `tcp_retries1` RTOs would, the search starts (its floor is
    /// `base_mss`) or, if it runs already, its floor halves.
    pub(super) fn pmtu_on_rto(&mut self, now: Instant) {
        if self.pmtu.probe.is_some() {
            self.mtu_probe_failed();
        }
        if self.retries <= 1 || self.pmtu.rto_streak_start.is_none() {
            // The timer that just fired was armed when the head was sent.
            self.pmtu.rto_streak_start = Some(now - self.rtt.rto());
        }
        let start = self.pmtu.rto_streak_start.unwrap_or(now);
        let boundary = self.cfg.rto_min.saturating_mul((2 << TCP_RETRIES1) - 1);
        if !self.pmtu.known() || self.cfg.mtu_probing == 0 || now.saturating_duration_since(start) < boundary {
            return;
        }
        if !self.pmtu.enabled {
            self.pmtu.enabled = true;
            self.pmtu.probe_timestamp = Some(now);
            self.counters.mptun_pmtu_black_hole += 1;
        } else {
            let mss = (self.mtu_to_mss(self.pmtu.search_low) >> 1)
                .min(u32::from(self.cfg.base_mss))
                .max(TCP_MTU_PROBE_FLOOR)
                .max(u32::from(MIN_MSS));
            self.pmtu.search_low = self.mss_to_mtu(mss);
        }
        tracing::debug!(local = %self.local, remote = %self.remote, mtu = self.mss_to_mtu(self.mss_cap()),
            "black hole suspected: MSS lowered");
    }

    /// After an ACK: a probe that was acknowledged raises the floor; one
    /// found lost lowers the ceiling (Linux `tcp_mtup_probe_success`,
    /// `tcp_mtup_probe_failed`).
    pub(super) fn pmtu_on_ack(&mut self, now: Instant) {
        let Some((start, end, mtu)) = self.pmtu.probe else { return };
        if self.snd_una.ge(end) {
            // Linux: cwnd scaled to keep the same bytes in flight.
            let old = u64::from(self.mss_to_mtu(self.mss_cap()));
            let cwnd = u64::from(self.ccs.cwnd) * old / u64::from(mtu.max(1));
            self.ccs.cwnd = (cwnd as u32).max(1);
            self.ccs.cwnd_cnt = 0;
            self.pmtu.search_low = mtu;
            self.pmtu.probe = None;
            self.counters.tcp_ext_tcp_mtup_success += 1;
            tracing::debug!(local = %self.local, remote = %self.remote, mtu, "path MTU probe acknowledged");
        } else if self.scoreboard.is_lost_at(start) {
            self.mtu_probe_failed();
            self.simple_retransmit(now);
        }
    }

    fn mtu_probe_failed(&mut self) {
        if let Some((_, _, mtu)) = self.pmtu.probe.take() {
            self.pmtu.search_high = mtu - 1;
            self.counters.tcp_ext_tcp_mtup_fail += 1;
            tracing::debug!(local = %self.local, remote = %self.remote, mtu, "path MTU probe lost");
        }
    }

    /// The top of the search: never above the path MTU or what the peer's
    /// MSS allows.
    fn search_high(&self) -> u32 {
        self.pmtu.search_high.min(self.pmtu.pmtu).min(self.mss_to_mtu(self.mss_clamp()))
    }

    /// Payload length of an MTU probe to send now as the next new segment,
    /// if one is due (Linux `tcp_mtu_probe`): the search runs, nothing is
    /// being recovered, cwnd has room, and enough data waits to fill the
    /// probe plus a few segments behind it. `opt` is the option bytes the
    /// segment carries, `mss` the normal segment size, `contiguous` the
    /// bytes one segment may take from the send buffer.
    pub(super) fn mtu_probe_len(&mut self, now: Instant, opt: u32, mss: u32, contiguous: u32) -> Option<u32> {
        if !self.pmtu.enabled || self.pmtu.probe.is_some() || self.ca_state != CaState::Open || self.ccs.cwnd < 11 {
            return None;
        }
        let (low, high) = (self.pmtu.search_low, self.search_high());
        let probe_mtu = (low + high) / 2;
        if high.saturating_sub(low) < self.cfg.probe_threshold || probe_mtu <= low {
            // Search done: start again after probe_interval (Linux
            // tcp_mtu_check_reprobe).
            let since = self.pmtu.probe_timestamp.get_or_insert(now);
            if now.saturating_duration_since(*since) >= self.cfg.probe_interval {
                self.pmtu.search_high = self.pmtu.pmtu;
                self.pmtu.search_low = self.mss_to_mtu(self.mss_cap());
                self.pmtu.probe_timestamp = Some(now);
            }
            return None;
        }
        let len = self.mtu_to_mss(probe_mtu).checked_sub(opt)?;
        if len <= mss {
            return None;
        }
        let needed = len + (self.cfg.dup_thresh + 1) * mss;
        if self.unsent_bytes() < needed || self.snd_wnd < needed || !self.window_allows(needed) || contiguous < len {
            return None;
        }
        if self.in_flight() + 2 > self.ccs.cwnd {
            return None;
        }
        self.pmtu.probe = Some((self.snd_nxt, self.snd_nxt + len, probe_mtu));
        Some(len)
    }
}
