//! Loss detection and recovery: the SACK scoreboard, RACK (RFC 8985), PRR
//! (RFC 6937) and the congestion state machine around them.

use super::*;

/// One transmitted, not yet cumulatively acknowledged segment.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    pub(super) seq: Seq,
    /// Payload bytes.
    pub(super) len: u32,
    pub(super) fin: bool,
    pub(super) tx_time: Instant,
    /// Retransmitted at least once (Karn: no RTT sample).
    pub(super) ever_retrans: bool,
    pub(super) sacked: bool,
    pub(super) lost: bool,
    /// A retransmission of this segment is in flight.
    pub(super) retrans: bool,
}

impl Sent {
    pub(super) fn end(&self) -> Seq {
        self.seq + self.len + self.fin as u32
    }
}

impl Subflow {
    /// Marks SACKed segments; returns how many became SACKed and an RTT
    /// sample from the newest never-retransmitted one.
    pub(super) fn apply_sack(&mut self, now: Instant, blocks: &SackBlocks) -> (u32, Option<Duration>) {
        let mut n = 0;
        let mut rtt: Option<Duration> = None;
        let mut newest: Option<Instant> = None;
        let mut spurious = false;
        let min_rtt = self.rtt.min();
        for &(l, r) in blocks {
            let (l, r) = (Seq(l), Seq(r));
            // Ignore D-SACKs and nonsense (RFC 2883 / RFC 5961 spirit).
            if !l.lt(r) || r.le(self.snd_una) || r.gt(self.snd_nxt) || l.lt(self.snd_una) {
                continue;
            }
            let start = self.scoreboard.partition_point(|s| s.seq.lt(l));
            for i in start..self.scoreboard.len() {
                let s = &mut self.scoreboard[i];
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
            self.rack_spurious();
        }
        if let Some(tx) = newest {
            self.rack_update(now, tx, false);
        }
        (n, rtt)
    }

    /// RACK: remember the latest send time among delivered segments. A
    /// delivery faster than the minimum RTT must be of an earlier copy
    /// (the original of a retransmission) and says nothing (RFC 8985 6.2).
    pub(super) fn rack_update(&mut self, now: Instant, tx: Instant, ever_retrans: bool) {
        let rtt = now - tx;
        if self.rtt.min().is_some_and(|m| rtt < m) {
            if ever_retrans {
                self.rack_spurious();
            }
            return;
        }
        if self.rack_xmit.is_none_or(|(t, _)| tx > t) {
            self.rack_xmit = Some((tx, rtt));
        }
    }

    /// A retransmission turned out unnecessary (the original arrived: the
    /// acknowledgement came sooner than any real round trip). The path
    /// reorders: widen RACK's reordering window (RFC 8985 6.2, step 4,
    /// with this in place of DSACK).
    pub(super) fn rack_spurious(&mut self) {
        self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(16);
        self.reo_wnd_recoveries = 0;
        self.counters.tcp_ext_tcp_spurious_retrans += 1;
    }

    /// RACK loss detection (RFC 8985 6.2): a segment sent before one that
    /// has since been delivered, and older than that delivery's RTT plus a
    /// reordering window, is lost — whether it is an original (a hole too
    /// short for the three-SACK rule) or a retransmission. Returns when the
    /// next not-yet-late candidate becomes late (the RACK reorder timer).
    pub(super) fn rack_detect_loss(&mut self, now: Instant) -> Option<Instant> {
        let (xmit, rtt) = self.rack_xmit?;
        if self.sacked_out == 0 && self.retrans_out == 0 {
            return None;
        }
        let reo_wnd = (self.rtt.min().unwrap_or(rtt) / 4 * self.reo_wnd_mult).min(self.rtt.smoothed().unwrap_or(rtt));
        let mut next = None;
        for s in self.scoreboard.iter_mut() {
            if s.sacked || (s.lost && !s.retrans) || s.tx_time >= xmit {
                continue;
            }
            let deadline = s.tx_time + rtt + reo_wnd;
            if now < deadline {
                next = Instant::min_opt(next, Some(deadline));
                continue;
            }
            if s.retrans {
                s.retrans = false;
                self.retrans_out -= 1;
                self.counters.tcp_ext_tcp_lost_retransmit += 1;
            } else {
                s.lost = true;
                self.lost_out += 1;
            }
        }
        next
    }

    /// RFC 6675 IsLost: a hole with at least `dup_thresh` SACKed segments above it is lost.
    pub(super) fn mark_lost_from_sack(&mut self) {
        let thresh = self.cfg.dup_thresh.max(1);
        if self.sacked_out < thresh {
            return;
        }
        let mut count = 0;
        let mut boundary = 0;
        for (i, s) in self.scoreboard.iter().enumerate().rev() {
            if s.sacked {
                count += 1;
                if count == thresh {
                    boundary = i;
                    break;
                }
            }
        }
        for s in self.scoreboard.range_mut(..boundary) {
            if !s.sacked && !s.lost && !s.retrans {
                s.lost = true;
                self.lost_out += 1;
            }
        }
    }

    /// Marks the first unacknowledged segment lost (dupack threshold without
    /// SACK, NewReno partial ACK).
    pub(super) fn mark_head_lost(&mut self) {
        if let Some(s) = self.scoreboard.iter_mut().find(|s| !s.sacked) {
            if !s.lost {
                s.lost = true;
                self.lost_out += 1;
                if s.retrans {
                    s.retrans = false;
                    self.retrans_out -= 1;
                }
            }
        }
    }

    pub(super) fn enter_recovery(&mut self, now: Instant) {
        if self.sack_ok {
            self.counters.tcp_ext_tcp_sack_recovery += 1;
        } else {
            self.counters.tcp_ext_tcp_reno_recovery += 1;
        }
        self.prior_cwnd = self.ccs.cwnd;
        self.ccs.ssthresh = self.cc.ssthresh(&self.ccs);
        self.high_seq = self.snd_nxt;
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.ca_state = CaState::Recovery;
        self.cc.set_state(&mut self.ccs, CaState::Recovery, now);
    }

    pub(super) fn exit_recovery(&mut self, now: Instant) {
        // RFC 8985: the widened reordering window decays after 16 recoveries.
        self.reo_wnd_recoveries += 1;
        if self.reo_wnd_recoveries >= 16 {
            self.reo_wnd_mult = 1;
            self.reo_wnd_recoveries = 0;
        }
        // Linux tcp_end_cwnd_reduction.
        if self.ccs.ssthresh < u32::MAX {
            self.ccs.cwnd = self.ccs.ssthresh.max(1);
        }
        self.ccs.cwnd_cnt = 0;
        self.ca_state = if self.sacked_out > 0 { CaState::Disorder } else { CaState::Open };
        self.cc.set_state(&mut self.ccs, CaState::Open, now);
        self.cc.cwnd_event(&mut self.ccs, CaEvent::CompleteCwr, now);
    }

    /// Proportional Rate Reduction (RFC 6937, Linux `tcp_cwnd_reduction`).
    pub(super) fn prr_update(&mut self, delivered: u32, una_advanced: bool) {
        if delivered == 0 && !una_advanced {
            return;
        }
        self.prr_delivered += delivered;
        let in_flight = self.in_flight();
        let ssthresh = self.ccs.ssthresh.min(self.prior_cwnd.max(1));
        let delta = ssthresh as i64 - in_flight as i64;
        let mut sndcnt: i64 = if delta < 0 {
            let dividend = ssthresh as u64 * self.prr_delivered as u64 + self.prior_cwnd.max(1) as u64 - 1;
            (dividend / self.prior_cwnd.max(1) as u64) as i64 - self.prr_out as i64
        } else {
            let s = if una_advanced {
                (self.prr_delivered as i64 - self.prr_out as i64).max(delivered as i64)
            } else {
                self.prr_delivered as i64 - self.prr_out as i64
            };
            delta.min(s + 1)
        };
        sndcnt = sndcnt.max(if self.prr_out == 0 { 1 } else { 0 });
        self.ccs.cwnd = (in_flight as i64 + sndcnt).max(1) as u32;
    }

    /// Linux `tcp_packets_in_flight`.
    pub(super) fn in_flight(&self) -> u32 {
        (self.scoreboard.len() as u32 + self.retrans_out).saturating_sub(self.sacked_out + self.lost_out)
    }

    /// Linux `tcp_enter_loss`: everything not SACKed is lost, cwnd back to 1.
    pub(super) fn enter_loss(&mut self, now: Instant) {
        if !matches!(self.ca_state, CaState::Loss) {
            self.prior_cwnd = self.ccs.cwnd;
            if matches!(self.ca_state, CaState::Open | CaState::Disorder) || self.snd_una == self.high_seq {
                self.ccs.ssthresh = self.cc.ssthresh(&self.ccs);
            }
            self.cc.cwnd_event(&mut self.ccs, CaEvent::Loss, now);
        }
        self.ca_state = CaState::Loss;
        self.cc.set_state(&mut self.ccs, CaState::Loss, now);
        self.ccs.cwnd = 1;
        self.ccs.cwnd_cnt = 0;
        self.high_seq = self.snd_nxt;
        self.lost_out = 0;
        self.retrans_out = 0;
        for s in self.scoreboard.iter_mut() {
            s.retrans = false;
            s.lost = !s.sacked;
            self.lost_out += s.lost as u32;
        }
    }
}
