//! Loss detection and recovery: the SACK scoreboard, RACK (RFC 8985), PRR
//! (RFC 6937) and the congestion state machine around them.
//!
//! [`Scoreboard`] owns the list of segments in flight together with the
//! counters derived from their marks (`sacked_out`, `lost_out`,
//! `retrans_out`, as in Linux's `tcp_sock`). A mark only changes inside a
//! `Scoreboard` method, which adjusts the matching counter in the same
//! place, so the counters cannot drift from the list (quinn-proto's
//! `sent_packets.rs` keeps its in-flight totals the same way).

use super::*;
use mptun_cc::rate::{DeliveryRate, RateSample, TxRate};

/// RACK's reordering-window multiplier never grows past this (RFC 8985 6.2
/// step 4 bounds `reo_wnd` by SRTT anyway).
const RACK_REO_WND_MULT_MAX: u32 = 16;
/// Least wait before the RTO that handles SACK reneging (Linux
/// `tcp_check_sack_reneging`: max(srtt/16, 10 ms)).
const SACK_RENEGING_MIN_DELAY: Duration = Duration::from_millis(10);
/// Recoveries after which a widened reordering window decays back to one
/// (Linux `TCP_RACK_RECOVERY_THRESH`).
const TCP_RACK_RECOVERY_THRESH: u32 = 16;

/// One transmitted, not yet cumulatively acknowledged segment.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    /// First sequence number.
    pub(super) seq: Seq,
    /// Payload bytes.
    pub(super) len: u32,
    /// Carries our FIN.
    pub(super) fin: bool,
    /// Time of the last (re)transmission.
    pub(super) tx_time: Instant,
    /// Retransmitted at least once (Karn: no RTT sample).
    ever_retrans: bool,
    sacked: bool,
    lost: bool,
    /// A retransmission of this segment is in flight.
    retrans: bool,
    /// The delivery state at its last transmission (`tcp_rate.c`).
    rate: TxRate,
}

impl Sent {
    fn end(&self) -> Seq {
        self.seq + self.len + self.fin as u32
    }
}

/// Tail loss probe state (RFC 8985 7, Linux `tlp_high_seq`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LossProbe {
    /// `snd_nxt` when the probe in flight was sent; no new probe until
    /// the cumulative ACK passes it.
    high_seq: Option<Seq>,
    /// The probe timer fired: send a probe at the next `poll_transmit`.
    due: bool,
}

impl LossProbe {
    /// A probe is in flight.
    pub(super) fn in_flight(&self) -> bool {
        self.high_seq.is_some()
    }

    /// The probe timer fired.
    pub(super) fn set_due(&mut self) {
        self.due = true;
    }

    /// The RTO fired at the probe's instant: it replaces the probe (RFC 8985 7.3).
    pub(super) fn cancel_due(&mut self) {
        self.due = false;
    }

    /// Whether a probe is due, clearing the flag.
    pub(super) fn take_due(&mut self) -> bool {
        std::mem::take(&mut self.due)
    }

    /// A probe went out with `snd_nxt` at `snd_nxt`.
    pub(super) fn on_probe_sent(&mut self, snd_nxt: Seq) {
        self.high_seq = Some(snd_nxt);
    }

    /// The cumulative ACK reached `snd_una`: a probe it covers is done.
    pub(super) fn on_cumulative_ack(&mut self, snd_una: Seq) {
        if self.high_seq.is_some_and(|h| snd_una.ge(h)) {
            self.high_seq = None;
        }
    }
}

/// What a cumulative ACK removed from the scoreboard.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Acked {
    /// Segments newly delivered (not SACKed before).
    pub(super) segs: u32,
    /// RTT of the oldest newly acked never-retransmitted segment (for the RTO).
    pub(super) rtt_first: Option<Duration>,
    /// RTT of the newest one (for the congestion controller).
    pub(super) rtt_last: Option<Duration>,
    /// Our FIN was among them.
    pub(super) fin: bool,
}

/// RACK (RFC 8985) state.
#[derive(Clone, Copy, Debug)]
struct Rack {
    /// Send time of the most recently sent segment known delivered, and its
    /// RTT; lets a lost retransmission be detected without waiting for the RTO.
    xmit: Option<(Instant, Duration)>,
    /// Reordering-window multiplier.
    reo_wnd_mult: u32,
    /// Recoveries since the multiplier last grew.
    reo_wnd_recoveries: u32,
}

/// Proportional Rate Reduction state (Linux `prior_cwnd`, `prr_delivered`,
/// `prr_out`).
#[derive(Clone, Copy, Debug, Default)]
struct Prr {
    prior_cwnd: u32,
    delivered: u32,
    out: u32,
}

/// The segments in flight, their SACK/lost/retransmitted marks and the
/// counters over them, plus the RACK and PRR state that reads them.
#[derive(Debug)]
pub(super) struct Scoreboard {
    segs: VecDeque<Sent>,
    sacked_out: u32,
    lost_out: u32,
    retrans_out: u32,
    rack: Rack,
    prr: Prr,
    /// The connection's delivery state (Linux `delivered`, `lost`,
    /// `app_limited`...), kept here because every change to it comes with
    /// a change of a segment's marks.
    rate: DeliveryRate,
    /// The rate sample of the ACK being processed.
    rs: RateSample,
    /// `rate.lost()` when that ACK's processing began.
    lost_at_ack: u64,
    /// The receiver reneged on its SACKs in this loss episode (Linux
    /// `is_sack_reneg`): rate samples are invalid until it ends, since the
    /// reneged segments are delivered a second time.
    reneged: bool,
}

impl Default for Scoreboard {
    fn default() -> Self {
        Scoreboard {
            segs: VecDeque::new(),
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            rack: Rack { xmit: None, reo_wnd_mult: 1, reo_wnd_recoveries: 0 },
            prr: Prr::default(),
            rate: DeliveryRate::default(),
            rs: RateSample::new(0),
            lost_at_ack: 0,
            reneged: false,
        }
    }
}

impl Scoreboard {
    /// Segments sent and not cumulatively acknowledged (`packets_out`).
    pub(super) fn len(&self) -> u32 {
        self.segs.len() as u32
    }

    /// Nothing in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Linux `sacked_out`.
    pub(super) fn sacked_out(&self) -> u32 {
        self.sacked_out
    }

    /// Linux `lost_out`.
    pub(super) fn lost_out(&self) -> u32 {
        self.lost_out
    }

    /// Linux `retrans_out`.
    pub(super) fn retrans_out(&self) -> u32 {
        self.retrans_out
    }

    /// Linux `tcp_packets_in_flight`.
    pub(super) fn in_flight(&self) -> u32 {
        (self.len() + self.retrans_out).saturating_sub(self.sacked_out + self.lost_out)
    }

    /// Whether at least `limit` payload bytes are not SACKed (what a loss
    /// probe's timer cares about). It stops counting at `limit`: the
    /// timer is re-armed at every transmission and ACK, and a sum over the
    /// whole window (thousands of segments in flight at 10 Gbit/s) each time
    /// is a visible share of the driver's time.
    pub(super) fn unsacked_at_least(&self, limit: u32) -> bool {
        let mut sum = 0u32;
        for s in self.segs.iter().filter(|s| !s.sacked) {
            sum = sum.saturating_add(s.len);
            if sum >= limit {
                return true;
            }
        }
        false
    }

    /// The delivery state (`tcp_rate.c`).
    pub(super) fn rate(&self) -> &DeliveryRate {
        &self.rate
    }

    /// The delivery state, writable (app-limited marks).
    pub(super) fn rate_mut(&mut self) -> &mut DeliveryRate {
        &mut self.rate
    }

    /// `tcp_rate_skb_sent` for a (super-)segment leaving at `departure`,
    /// before it is pushed: its pieces share the snapshot.
    pub(super) fn rate_on_sent(&mut self, departure: Instant) -> TxRate {
        let packets_out = self.len();
        self.rate.on_sent(packets_out, departure)
    }

    /// The loss episode that reneged ended.
    pub(super) fn clear_reneged(&mut self) {
        self.reneged = false;
    }

    /// Starts the rate sample of an ACK that found `prior_in_flight` in flight.
    pub(super) fn begin_ack(&mut self, prior_in_flight: u32) {
        self.rs = RateSample::new(prior_in_flight);
        self.lost_at_ack = self.rate.lost();
    }

    /// `tcp_rate_gen`: the ACK's sample, `delivered` packets newly
    /// delivered, `rtt` its RTT sample.
    pub(super) fn rate_gen(
        &mut self,
        now: Instant,
        delivered: u32,
        reneged: bool,
        min_rtt: Option<Duration>,
        rtt: Option<Duration>,
    ) -> RateSample {
        let lost = u32::try_from(self.rate.lost() - self.lost_at_ack).unwrap_or(u32::MAX);
        let mut rs = self.rs;
        self.rate.generate(now, delivered, lost, reneged || self.reneged, min_rtt, &mut rs);
        rs.rtt_us = rtt.map_or(-1, |r| i64::try_from(r.as_micros()).unwrap_or(i64::MAX));
        rs
    }

    /// Records a first transmission, with its delivery snapshot `rate`.
    pub(super) fn push(&mut self, seq: Seq, len: u32, fin: bool, now: Instant, rate: TxRate) {
        self.segs.push_back(Sent {
            seq,
            len,
            fin,
            tx_time: now,
            ever_retrans: false,
            sacked: false,
            lost: false,
            retrans: false,
            rate,
        });
    }

    /// Index of the first segment marked lost and not yet retransmitted.
    pub(super) fn next_lost(&self) -> Option<usize> {
        if self.lost_out == 0 {
            return None;
        }
        self.segs.iter().position(|s| s.lost && !s.retrans && !s.sacked)
    }

    /// First sequence number and payload bytes of segment `i`.
    pub(super) fn seg(&self, i: usize) -> (Seq, u32) {
        (self.segs[i].seq, self.segs[i].len)
    }

    /// Linux `tcp_fragment`: cuts segment `i` after `first` payload bytes
    /// (0 < `first` < its length). Both parts keep its marks and send time;
    /// the FIN stays with the second.
    pub(super) fn split(&mut self, i: usize, first: u32) {
        let s = self.segs[i];
        debug_assert!(first > 0 && first < s.len);
        let mut tail = s;
        tail.seq = s.seq + first;
        tail.len = s.len - first;
        self.segs[i].len = first;
        self.segs[i].fin = false;
        self.sacked_out += s.sacked as u32;
        self.lost_out += s.lost as u32;
        self.retrans_out += s.retrans as u32;
        self.segs.insert(i + 1, tail);
    }

    /// Marks every segment not SACKed with more than `mss` payload bytes
    /// lost, dropping any retransmission of it in flight (Linux
    /// `tcp_simple_retransmit` with `tcp_mark_skb_lost`); returns how many
    /// became lost.
    pub(super) fn mark_lost_larger_than(&mut self, mss: u32) -> u32 {
        let mut n = 0u32;
        let mut again = 0u32;
        for s in self.segs.iter_mut().filter(|s| !s.sacked && s.len > mss) {
            if s.retrans {
                s.retrans = false;
                self.retrans_out -= 1;
                again += u32::from(s.lost);
            }
            if !s.lost {
                s.lost = true;
                n += 1;
            }
        }
        self.lost_out += n;
        self.rate.on_lost(n + again);
        n
    }

    /// Whether the segment starting at `seq` is in flight and marked lost.
    pub(super) fn is_lost_at(&self, seq: Seq) -> bool {
        self.segs.iter().find(|s| s.seq == seq).is_some_and(|s| s.lost)
    }

    /// Records the retransmission of segment `i` at `now`, leaving at
    /// `departure`; returns it.
    pub(super) fn on_retransmit(&mut self, i: usize, now: Instant, departure: Instant) -> Sent {
        let s = self.segs[i];
        let rate = self.rate.on_sent(self.len(), departure);
        let seg = &mut self.segs[i];
        seg.retrans = true;
        seg.ever_retrans = true;
        seg.tx_time = now;
        seg.rate = rate;
        self.retrans_out += 1;
        s
    }

    /// First sequence number of the segment a tail loss probe would resend.
    pub(super) fn loss_probe_seq(&self) -> Option<Seq> {
        self.segs.iter().rev().find(|s| !s.sacked).map(|s| s.seq)
    }

    /// Picks the highest segment not SACKed for a tail loss probe (its last
    /// `max_len` bytes, Linux `tcp_send_loss_probe`) and marks it
    /// retransmitted (Karn), without counting it as a retransmission in
    /// flight; returns it.
    pub(super) fn on_loss_probe(&mut self, max_len: u32, now: Instant) -> Option<Sent> {
        let mut i = self.segs.iter().rposition(|s| !s.sacked)?;
        if self.segs[i].len > max_len && max_len > 0 {
            self.split(i, self.segs[i].len - max_len);
            i += 1;
        }
        let s = self.segs[i];
        self.segs[i].ever_retrans = true;
        self.segs[i].rate = self.rate.on_sent(self.len(), now);
        Some(s)
    }

    /// Removes every segment the cumulative ACK `ack` covers.
    pub(super) fn remove_acked(
        &mut self,
        now: Instant,
        ack: Seq,
        min_rtt: Option<Duration>,
        counters: &mut Counters,
    ) -> Acked {
        let mut acked = Acked::default();
        while let Some(front) = self.segs.front() {
            if front.end().gt(ack) {
                break;
            }
            let mut s = self.segs.pop_front().expect("front exists");
            if !s.sacked {
                self.rack_update(now, s.tx_time, s.ever_retrans, min_rtt, counters);
                let (end, retrans) = (s.end().0, s.ever_retrans);
                self.rate.on_delivered(&mut s.rate, end, false, retrans, &mut self.rs);
            }
            if s.sacked {
                self.sacked_out -= 1;
            } else {
                acked.segs += 1;
                if !s.ever_retrans {
                    let rtt = now - s.tx_time;
                    acked.rtt_first.get_or_insert(rtt);
                    acked.rtt_last = Some(rtt);
                }
            }
            if s.lost {
                self.lost_out -= 1;
            }
            if s.retrans {
                self.retrans_out -= 1;
            }
            acked.fin |= s.fin;
        }
        // An ACK inside a segment (a middlebox resegmented it, or cut it
        // short): its acknowledged head is gone from the send buffer, so a
        // retransmission starts at `ack` (Linux trims it, `tcp_trim_head`).
        if let Some(front) = self.segs.front_mut() {
            if front.seq.lt(ack) {
                let cut = ack - front.seq;
                front.seq = ack;
                front.len -= cut.min(front.len);
            }
        }
        acked
    }

    /// Marks SACKed segments; returns how many became SACKed and an RTT
    /// sample from the newest never-retransmitted one. Blocks outside
    /// `snd_una..snd_nxt` (D-SACKs and nonsense) are ignored.
    pub(super) fn mark_sacked(
        &mut self,
        now: Instant,
        blocks: &SackBlocks,
        snd_una: Seq,
        snd_nxt: Seq,
        min_rtt: Option<Duration>,
        counters: &mut Counters,
    ) -> (u32, Option<Duration>) {
        let mut n = 0;
        let mut rtt: Option<Duration> = None;
        let mut newest: Option<Instant> = None;
        let mut spurious = false;
        for &(l, r) in blocks {
            let (l, r) = (Seq(l), Seq(r));
            // Ignore D-SACKs and nonsense (RFC 2883 / RFC 5961 spirit).
            if !l.lt(r) || r.le(snd_una) || r.gt(snd_nxt) || l.lt(snd_una) {
                continue;
            }
            let start = self.segs.partition_point(|s| s.seq.lt(l));
            for i in start..self.segs.len() {
                let s = &mut self.segs[i];
                if s.end().gt(r) {
                    break;
                }
                if s.sacked {
                    continue;
                }
                s.sacked = true;
                n += 1;
                self.sacked_out += 1;
                if s.lost {
                    s.lost = false;
                    self.lost_out -= 1;
                }
                if s.retrans {
                    s.retrans = false;
                    self.retrans_out -= 1;
                }
                let tx = s.tx_time;
                let (end, retrans) = (s.end().0, s.ever_retrans);
                self.rate.on_delivered(&mut s.rate, end, true, retrans, &mut self.rs);
                if !s.ever_retrans {
                    let t = now - tx;
                    rtt = Some(rtt.map_or(t, |x: Duration| x.min(t)));
                } else if min_rtt.is_some_and(|m| now - tx < m) {
                    spurious = true;
                }
                newest = newest.max(Some(tx));
            }
        }
        if spurious {
            self.rack_spurious(counters);
        }
        if let Some(tx) = newest {
            self.rack_update(now, tx, false, min_rtt, counters);
        }
        (n, rtt)
    }

    /// RACK: remember the latest send time among delivered segments. A
    /// delivery faster than the minimum RTT must be of an earlier copy
    /// (the original of a retransmission) and says nothing (RFC 8985 6.2).
    fn rack_update(
        &mut self,
        now: Instant,
        tx: Instant,
        ever_retrans: bool,
        min_rtt: Option<Duration>,
        counters: &mut Counters,
    ) {
        let rtt = now - tx;
        if min_rtt.is_some_and(|m| rtt < m) {
            if ever_retrans {
                self.rack_spurious(counters);
            }
            return;
        }
        if self.rack.xmit.is_none_or(|(t, _)| tx > t) {
            self.rack.xmit = Some((tx, rtt));
        }
    }

    /// A retransmission turned out unnecessary (the original arrived: the
    /// acknowledgement came sooner than any real round trip). The path
    /// reorders: widen RACK's reordering window (RFC 8985 6.2, step 4,
    /// with this in place of DSACK).
    fn rack_spurious(&mut self, counters: &mut Counters) {
        self.rack.reo_wnd_mult = (self.rack.reo_wnd_mult + 1).min(RACK_REO_WND_MULT_MAX);
        self.rack.reo_wnd_recoveries = 0;
        counters.tcp_ext_tcp_spurious_retrans += 1;
    }

    /// RACK loss detection (RFC 8985 6.2): a segment sent before one that
    /// has since been delivered, and older than that delivery's RTT plus a
    /// reordering window, is lost — whether it is an original (a hole too
    /// short for the three-SACK rule) or a retransmission. Returns when the
    /// next not-yet-late candidate becomes late (the RACK reorder timer).
    pub(super) fn rack_detect_loss(
        &mut self,
        now: Instant,
        min_rtt: Option<Duration>,
        srtt: Option<Duration>,
        counters: &mut Counters,
    ) -> Option<Instant> {
        let (xmit, rtt) = self.rack.xmit?;
        if self.sacked_out == 0 && self.retrans_out == 0 {
            return None;
        }
        let reo_wnd = (min_rtt.unwrap_or(rtt) / 4 * self.rack.reo_wnd_mult).min(srtt.unwrap_or(rtt));
        let mut next = None;
        for s in self.segs.iter_mut() {
            if s.sacked || (s.lost && !s.retrans) || s.tx_time >= xmit {
                continue;
            }
            let deadline = s.tx_time + rtt + reo_wnd;
            if now < deadline {
                next = Instant::min_opt(next, Some(deadline));
                continue;
            }
            if s.retrans {
                // A retransmission lost again counts in `lost` too (Linux
                // tcp_mark_skb_lost → tcp_notify_skb_loss_event).
                s.retrans = false;
                self.retrans_out -= 1;
                self.rate.on_lost(1);
                counters.tcp_ext_tcp_lost_retransmit += 1;
            } else {
                s.lost = true;
                self.lost_out += 1;
                self.rate.on_lost(1);
            }
        }
        next
    }

    /// RFC 6675 IsLost: a hole with at least `thresh` SACKed segments above it is lost.
    pub(super) fn mark_lost_from_sack(&mut self, thresh: u32) {
        let thresh = thresh.max(1);
        if self.sacked_out < thresh {
            return;
        }
        let mut count = 0;
        let mut boundary = 0;
        for (i, s) in self.segs.iter().enumerate().rev() {
            if s.sacked {
                count += 1;
                if count == thresh {
                    boundary = i;
                    break;
                }
            }
        }
        for s in self.segs.range_mut(..boundary) {
            if !s.sacked && !s.lost && !s.retrans {
                s.lost = true;
                self.lost_out += 1;
                self.rate.on_lost(1);
            }
        }
    }

    /// Marks the first unacknowledged segment lost (dupack threshold without
    /// SACK, NewReno partial ACK).
    pub(super) fn mark_head_lost(&mut self) {
        if let Some(s) = self.segs.iter_mut().find(|s| !s.sacked) {
            if !s.lost {
                s.lost = true;
                self.lost_out += 1;
                self.rate.on_lost(1);
                if s.retrans {
                    s.retrans = false;
                    self.retrans_out -= 1;
                }
            }
        }
    }

    /// The first segment not cumulatively acknowledged is SACKed: the
    /// receiver dropped what it had SACKed (reneging, RFC 2018 8), since it
    /// would otherwise have acknowledged it.
    pub(super) fn head_sacked(&self) -> bool {
        self.segs.front().is_some_and(|s| s.sacked)
    }

    /// Linux `tcp_timeout_mark_lost`: everything not SACKed is lost and no
    /// retransmission is in flight any more. If the head is SACKed the
    /// receiver reneged: every SACK mark goes too, so that what it dropped
    /// is sent again. Returns whether it reneged.
    pub(super) fn mark_all_lost(&mut self) -> bool {
        let reneged = self.head_sacked();
        if reneged {
            self.sacked_out = 0;
        }
        self.lost_out = 0;
        self.retrans_out = 0;
        self.reneged |= reneged;
        let mut newly = 0;
        for s in self.segs.iter_mut() {
            if reneged {
                s.sacked = false;
            }
            // Newly lost, or a retransmission lost again: Linux counts both
            // in `lost` (tcp_mark_skb_lost).
            newly += u32::from(!s.sacked && (!s.lost || s.retrans));
            s.retrans = false;
            s.lost = !s.sacked;
            self.lost_out += s.lost as u32;
        }
        self.rate.on_lost(newly);
        reneged
    }

    /// RFC 8985: the widened reordering window decays after
    /// [`TCP_RACK_RECOVERY_THRESH`] recoveries.
    pub(super) fn on_recovery_exit(&mut self) {
        self.rack.reo_wnd_recoveries += 1;
        if self.rack.reo_wnd_recoveries >= TCP_RACK_RECOVERY_THRESH {
            self.rack.reo_wnd_mult = 1;
            self.rack.reo_wnd_recoveries = 0;
        }
    }

    /// Remembers the window before a reduction (Linux `prior_cwnd`).
    pub(super) fn set_prior_cwnd(&mut self, cwnd: u32) {
        self.prr.prior_cwnd = cwnd;
    }

    /// Starts PRR for a recovery entered with window `cwnd`.
    pub(super) fn prr_start(&mut self, cwnd: u32) {
        self.prr = Prr { prior_cwnd: cwnd, delivered: 0, out: 0 };
    }

    /// Counts a segment sent during recovery (Linux `prr_out`).
    pub(super) fn prr_on_sent(&mut self) {
        self.prr.out += 1;
    }

    /// Proportional Rate Reduction (RFC 6937, Linux `tcp_cwnd_reduction`):
    /// the congestion window after `delivered` segments were delivered, or
    /// `None` if this ACK changes nothing.
    pub(super) fn prr_cwnd(&mut self, delivered: u32, una_advanced: bool, ssthresh: u32) -> Option<u32> {
        if delivered == 0 && !una_advanced {
            return None;
        }
        let prr = &mut self.prr;
        prr.delivered += delivered;
        let in_flight = (self.segs.len() as u32 + self.retrans_out).saturating_sub(self.sacked_out + self.lost_out);
        let ssthresh = ssthresh.min(prr.prior_cwnd.max(1));
        let delta = ssthresh as i64 - in_flight as i64;
        let mut sndcnt: i64 = if delta < 0 {
            let dividend = ssthresh as u64 * prr.delivered as u64 + prr.prior_cwnd.max(1) as u64 - 1;
            (dividend / prr.prior_cwnd.max(1) as u64) as i64 - prr.out as i64
        } else {
            let s = if una_advanced {
                (prr.delivered as i64 - prr.out as i64).max(delivered as i64)
            } else {
                prr.delivered as i64 - prr.out as i64
            };
            delta.min(s + 1)
        };
        sndcnt = sndcnt.max(if prr.out == 0 { 1 } else { 0 });
        Some((in_flight as i64 + sndcnt).max(1) as u32)
    }
}

impl Subflow {
    /// Linux `tcp_packets_in_flight`.
    pub(super) fn in_flight(&self) -> u32 {
        self.scoreboard.in_flight()
    }

    /// RACK loss detection over the scoreboard with this subflow's RTTs;
    /// returns the next reorder-timer deadline.
    pub(super) fn rack_detect_loss(&mut self, now: Instant) -> Option<Instant> {
        self.scoreboard.rack_detect_loss(now, self.rtt.min(), self.rtt.smoothed(), &mut self.counters)
    }

    /// Linux `tcp_enter_recovery`.
    pub(super) fn enter_recovery(&mut self, now: Instant) {
        if self.sack_ok {
            self.counters.tcp_ext_tcp_sack_recovery += 1;
        } else {
            self.counters.tcp_ext_tcp_reno_recovery += 1;
        }
        let prior_cwnd = self.ccs.cwnd;
        self.mark_loss();
        self.ccs.ssthresh = self.cc.ssthresh(&self.ccs);
        self.high_seq = self.snd_nxt;
        self.scoreboard.prr_start(prior_cwnd);
        self.ca_state = CaState::Recovery;
        self.cc.set_state(&mut self.ccs, CaState::Recovery, now);
    }

    /// Linux `tcp_end_cwnd_reduction` and the return to Open (or Disorder
    /// while SACKed segments remain).
    pub(super) fn exit_recovery(&mut self, now: Instant) {
        self.scoreboard.on_recovery_exit();
        // A controller with its own cong_control (BBR) keeps its window:
        // Linux's tcp_end_cwnd_reduction returns before touching it.
        let own = self.cc.has_cong_control();
        if self.ccs.ssthresh < u32::MAX && !own {
            self.ccs.cwnd = self.ccs.ssthresh.max(1);
        }
        if !own {
            self.ccs.cwnd_cnt = 0;
        }
        self.ca_state = if self.scoreboard.sacked_out() > 0 { CaState::Disorder } else { CaState::Open };
        self.cc.set_state(&mut self.ccs, CaState::Open, now);
        if !own {
            self.cc.cwnd_event(&mut self.ccs, CaEvent::CompleteCwr, now);
        }
    }

    /// PRR's window for this ACK, applied to `cwnd`.
    pub(super) fn prr_update(&mut self, delivered: u32, una_advanced: bool) {
        if let Some(cwnd) = self.scoreboard.prr_cwnd(delivered, una_advanced, self.ccs.ssthresh) {
            self.ccs.cwnd = cwnd;
        }
    }

    /// Linux `tcp_enter_loss`: everything not SACKed is lost, cwnd back to 1.
    pub(super) fn enter_loss(&mut self, now: Instant) {
        if !matches!(self.ca_state, CaState::Loss) {
            self.mark_loss();
            self.scoreboard.set_prior_cwnd(self.ccs.cwnd);
            if matches!(self.ca_state, CaState::Open | CaState::Disorder) || self.snd_una == self.high_seq {
                self.ccs.ssthresh = self.cc.ssthresh(&self.ccs);
            }
            self.cc.cwnd_event(&mut self.ccs, CaEvent::Loss, now);
        }
        self.ca_state = CaState::Loss;
        // Everything is marked lost before the controller hears of the new
        // state (Linux: tcp_timeout_mark_lost, then tcp_set_ca_state), so
        // that BBR's policer sampling counts the RTO's losses.
        if self.scoreboard.mark_all_lost() {
            self.counters.tcp_ext_tcp_sack_reneging += 1;
        }
        self.cc.observe_delivery(self.scoreboard.rate());
        self.cc.set_state(&mut self.ccs, CaState::Loss, now);
        self.ccs.cwnd = 1;
        self.ccs.cwnd_cnt = 0;
        self.high_seq = self.snd_nxt;
    }

    /// Loss detection after an ACK: RACK with SACK, the dupack threshold
    /// without, then RFC 6675's three-SACK rule.
    pub(super) fn detect_loss(&mut self, now: Instant) {
        if self.sack_ok {
            let next = self.rack_detect_loss(now);
            self.timers.set_opt(Timer::RackReorder, next);
        }
        if self.cfg.dup_thresh > 0 && !self.sack_ok && self.dupacks >= self.cfg.dup_thresh {
            self.scoreboard.mark_head_lost();
        }
        if self.sack_ok && self.scoreboard.sacked_out() > 0 {
            self.scoreboard.mark_lost_from_sack(self.cfg.dup_thresh);
        }
    }

    /// Congestion state machine (Linux `tcp_fastretrans_alert`, simplified).
    pub(super) fn fastretrans_alert(&mut self, now: Instant, una_advanced: bool) {
        // Linux tcp_check_sack_reneging: the cumulative ACK stopped at a
        // segment it had SACKed. Do not act at once (the receiver may be
        // only briefly short of memory): an early RTO, which then drops the
        // SACK marks, unless an ACK comes first.
        if una_advanced && self.scoreboard.head_sacked() {
            let delay = self.rtt.smoothed().map_or(Duration::ZERO, |s| s / 16).max(SACK_RENEGING_MIN_DELAY);
            self.timers.set(Timer::Rto, now + delay);
            return;
        }
        match self.ca_state {
            CaState::Open | CaState::Disorder => {
                if self.scoreboard.lost_out() > 0 {
                    self.enter_recovery(now);
                } else if self.scoreboard.sacked_out() > 0 || self.dupacks > 0 {
                    self.ca_state = CaState::Disorder;
                } else {
                    self.ca_state = CaState::Open;
                }
            }
            CaState::Recovery => {
                if self.snd_una.ge(self.high_seq) {
                    self.exit_recovery(now);
                } else if !self.sack_ok && una_advanced {
                    // NewReno partial ACK: the next hole is lost too.
                    self.scoreboard.mark_head_lost();
                }
            }
            CaState::Loss => {
                if self.snd_una.ge(self.high_seq) {
                    self.scoreboard.clear_reneged();
                    self.ca_state = CaState::Open;
                    self.cc.set_state(&mut self.ccs, CaState::Open, now);
                }
            }
        }
    }
}
