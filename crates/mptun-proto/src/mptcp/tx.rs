//! The send path (Linux `protocol.c`'s push and the packet scheduler):
//! bursts of connection data handed to the subflows the scheduler picks,
//! each a DSS mapping; the policy decisions that flag a slow subflow for a
//! cwnd halving or reinject its head elsewhere; reinjection of a failed or
//! stale subflow's unacknowledged data; and the release of what the peer
//! DATA_ACKed.

use super::hook::{Hook, DSS_FULL, DSS_MAP};
use super::{Connection, JoinState, SubflowExt, TxMap, MPTCP_RST_EMIDDLEBOX};
use crate::buf::SendBuf;
use crate::counters::Counters;
use crate::sched::{ConnView, Policy, SubflowView};
use crate::seq::{DataSeq, Seq};
use crate::tcp::config::{TCP_RTO_MAX, TCP_RTO_MIN};
use crate::tcp::{BufferSize, State, Subflow};
use bytes::Bytes;
use mptun_time::{Duration, Instant};
use mptun_wire::checksum::dss_checksum;

/// Memory Linux charges per MSS-sized segment in a subflow's send buffer
/// (`tcp_sndbuf_expand`: skb truesize, about 4352 bytes for a 1448-byte MSS).
const TRUESIZE_PER_MSS: usize = 4352;

/// The longest mapping: as many whole segments of `seg` bytes as a DSS
/// data-level length (16 bits) holds.
fn map_cap(seg: u64) -> u64 {
    let max = u64::from(u16::MAX);
    match max / seg.max(1) {
        0 => max,
        n => n * seg,
    }
}

/// How much of `want` bytes goes to `sf` now, given its send buffer: when
/// the buffer is the limit, whole segments of `seg` bytes, and nothing while
/// less than one segment is free (the rest waits for an ACK, as Linux's
/// `tcp_mss_split_point` waits on a window limit), so that the space one ACK
/// frees does not become a mapping ending in a short segment.
fn mapping_len(sf: &Subflow, seg: u64, want: u64) -> u64 {
    let space = sf.send_space() as u64;
    if want <= space {
        want
    } else if space >= seg {
        space - space % seg
    } else if sf.send_queued() == 0 {
        // A buffer smaller than a segment: never wait for room that cannot come.
        space
    } else {
        0
    }
}

/// Hands `[start, start + len)` of the connection's send buffer to `sf` as
/// slices of the application writes it spans (one mapping; `joined`: it
/// grows the previous one), so that no segment boundary falls between them
/// and nothing is gathered into a fresh allocation. False if it does not fit.
fn hand_over(snd_buf: &SendBuf, sf: &mut Subflow, start: Seq, len: usize, joined: bool) -> bool {
    if len > sf.send_space() {
        return false;
    }
    for (i, part) in snd_buf.slices(start, len).enumerate() {
        let fits = if joined || i > 0 { sf.send_bytes_joined(part) } else { sf.send_bytes(part) };
        debug_assert!(fits.is_ok(), "checked against send_space");
    }
    true
}

impl Connection {
    /// Queues the not yet DATA_ACKed data of subflow `idx` for another subflow.
    pub(super) fn reinject_from(&mut self, idx: usize) {
        // After a fallback the single subflow's byte stream is the data
        // stream: data sent again on it would be read as new data. Before
        // the connection is fully established there is no other subflow,
        // and the peer may have fallen back without our knowing (a third
        // ACK lost): its own retransmissions carry the data.
        if self.shared.infinite || !self.shared.fully_established {
            return;
        }
        let Some((_, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let una = self.shared.snd_una;
        for m in &ext.tx_maps {
            let mut start = m.dsn.max(una);
            if let Some(r) = ext.reinjected_to {
                start = start.max(r);
            }
            let end = m.dsn + m.len as u64;
            if start.lt(end) {
                self.reinject.push_back((start, end));
                self.shared.counters.mptcp_reinjected_bytes += end - start;
            }
        }
        if let Some(m) = ext.tx_maps.back() {
            let end = m.dsn + m.len as u64;
            ext.reinjected_to = Some(ext.reinjected_to.map_or(end, |r| r.max(end)));
        }
    }

    /// Releases the data and mappings the peer DATA_ACKed (and, for a
    /// mapping, that its subflow acknowledged too: it may still retransmit).
    pub(super) fn release_acked(&mut self) {
        let una = self.shared.snd_una;
        let una_rel = Seq(una.0 as u32);
        let head = self.snd_buf.end() - self.snd_buf.len() as u32;
        // Kept for a zero-window probe (the DATA_FIN's DATA_ACK is one past the data).
        let last = una_rel.min(self.snd_buf.end());
        if last.gt(head) {
            self.last_acked_byte = self.snd_buf.slice_bytes(last - 1, 1).first().copied();
        }
        self.snd_buf.ack_to(una_rel);
        let off = self.shared.ssn_off();
        for (sf, ext) in self.subflows.iter_mut().flatten() {
            let sf_una = sf.snd_una() - (sf.iss() - off).0;
            while let Some(m) = ext.tx_maps.front() {
                let sf_done = (Seq(m.ssn) + m.len).le(sf_una);
                if (m.dsn + m.len as u64).le(una) && sf_done {
                    ext.tx_maps.pop_front();
                } else {
                    break;
                }
            }
        }
    }

    /// Linux sizes the msk send buffer as the sum of its subflows'
    /// sk_sndbuf. Those count memory: 2 × cwnd × ~4352 bytes of skb per
    /// MSS-sized segment (tcp_sndbuf_expand), while the msk's queue is
    /// charged about its payload. In payload terms the msk holds ~3× the
    /// subflows' payload buffers, room for the data the receiver holds
    /// out of order while the slow path catches up.
    pub(super) fn grow_send_buffer(&mut self) {
        if let BufferSize::Auto { max, .. } = self.cfg.mptcp.send_buffer {
            let sum: usize = self
                .subflows
                .iter()
                .flatten()
                .map(|(sf, _)| sf.info().send_buffer / sf.mss(0).max(1) as usize * TRUESIZE_PER_MSS)
                .sum();
            self.send_limit = self.send_limit.max(sum.min(max));
        }
    }

    /// Stale subflows (an RTO streak): the scheduler avoids them and their
    /// data is reinjected elsewhere, once per streak.
    pub(super) fn detect_stale(&mut self) {
        let streak = self.cfg.mptcp.stale_rto_streak;
        for i in 0..self.subflows.len() {
            let Some((sf, ext)) = self.subflows[i].as_mut() else { continue };
            let stale_now = sf.rto_streak() >= streak;
            if stale_now && !ext.stale {
                ext.stale = true;
                self.shared.counters.mptcp_subflow_stale += 1;
                self.reinject_from(i);
            } else if !stale_now && ext.stale {
                ext.stale = false;
                self.shared.counters.mptcp_subflow_recover += 1;
            }
        }
    }

    /// What the scheduler sees of each subflow.
    fn views(&self) -> Vec<SubflowView> {
        self.subflows
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .map(|(i, (sf, ext))| {
                let info = sf.info();
                SubflowView {
                    id: i,
                    available: matches!(ext.join, JoinState::Initial | JoinState::Joined)
                        && matches!(sf.state(), State::Established | State::CloseWait)
                        && !ext.stale,
                    backup: ext.backup,
                    queued: sf.send_queued(),
                    send_space: sf.send_space(),
                    pacing_rate: info.pacing_rate,
                    cwnd: info.cwnd,
                    ssthresh: info.ssthresh,
                    srtt: sf.srtt(),
                    ca_state: info.ca_state,
                    cwnd_limited: info.cwnd_limited,
                }
            })
            .collect()
    }

    /// Hands bursts of data (reinjections first) to the subflows the scheduler picks.
    pub(super) fn push_pending(&mut self) {
        if self.shared.infinite {
            self.reinject.clear();
        }
        loop {
            let (start, end, reinj) = match self.reinject.front() {
                Some(&(s, e)) => (s.max(self.shared.snd_una), e, true),
                None => (self.shared.snd_nxt, self.shared.write_seq, false),
            };
            if reinj && start.ge(end) {
                self.reinject.pop_front();
                continue;
            }
            let room = self.shared.wnd_end.saturating_sub(start);
            if start.ge(end) || (room == 0 && !reinj) {
                return;
            }
            let views = self.views();
            let conn = ConnView { rwnd_limited: self.shared.write_seq.gt(self.shared.wnd_end), now: self.last_now };
            let Some(pick) = self.sched.select(&views, &conn) else { return };
            self.apply_decision(pick.id, &views, &conn);
            let recv_window = self.rcv_window();
            let Some((sf, ext)) = self.subflows.get_mut(pick.id).and_then(|s| s.as_mut()) else { return };
            let want = (end - start).min(pick.max_burst as u64);
            let room = if reinj { u64::MAX } else { room };
            let iss = sf.iss() - self.shared.ssn_off();
            let ssn = sf.write_seq() - iss.0;
            let unsent_from = (sf.snd_nxt() - iss.0).0;
            // Linux mptcp_skb_can_collapse_to: data that continues the last
            // mapping of this subflow, none of which has gone out yet, grows
            // that mapping (up to the DSS's 16-bit length) instead of
            // starting one, so a TSO super-segment is not cut at every push.
            let grow = ext.tx_maps.back_mut().filter(|m| {
                !reinj
                    && !self.shared.csum
                    && m.dsn + m.len as u64 == start
                    && m.ssn.wrapping_add(m.len) == ssn.0
                    && Seq(unsent_from).le(Seq(m.ssn))
            });
            if let Some(m) = grow {
                let seg = sf.mss(if m.with_ack == Some(true) { DSS_FULL } else { DSS_MAP }) as u64;
                let len = mapping_len(sf, seg, want.min(map_cap(seg).saturating_sub(u64::from(m.len)))).min(room);
                if len > 0 {
                    if !hand_over(&self.snd_buf, sf, Seq(start.0 as u32), len as usize, true) {
                        return;
                    }
                    m.len += len as u32;
                    self.shared.snd_nxt += len;
                    self.sched.on_pushed(pick.id, len as usize, &views);
                    continue;
                }
            }
            // A mapping ends on a wire segment boundary (Linux sizes an skb, one
            // mapping, to `size_goal`, a multiple of the MSS): a 65,535-byte
            // mapping would end every TSO super-segment in a short segment. The
            // segment size depends on whether the mapping carries the
            // DATA_ACK, so that is decided here, once.
            let mut hook =
                Hook { sh: &mut self.shared, ext, now: self.last_now, iss, next_ssn: unsent_from, recv_window };
            let with_ack = hook.new_map_needs_ack(ssn.0);
            let seg = sf.mss(if with_ack { DSS_FULL } else { DSS_MAP }) as u64;
            let len = mapping_len(sf, seg, want.min(map_cap(seg))).min(room);
            if len == 0 {
                return;
            }
            let csum = if hook.sh.csum {
                let data = self.snd_buf.slice_bytes(Seq(start.0 as u32), len as usize);
                let csum = dss_checksum(start.0, ssn.0, len as u16, &data);
                if sf.send_bytes(data).is_err() {
                    return;
                }
                csum
            } else {
                if !hand_over(&self.snd_buf, sf, Seq(start.0 as u32), len as usize, false) {
                    return;
                }
                0
            };
            hook.note_ack_decision(with_ack);
            hook.ext.tx_maps.push_back(TxMap {
                ssn: ssn.0,
                dsn: start,
                len: len as u32,
                csum,
                with_ack: Some(with_ack),
            });
            if reinj {
                self.shared.allow_infinite_fallback = false;
                let front = self.reinject.front_mut().expect("peeked");
                front.0 = start + len;
            } else {
                self.shared.snd_nxt += len;
            }
            self.sched.on_pushed(pick.id, len as usize, &views);
        }
    }

    /// The MPTCP-level zero-window probe (Linux `mptcp_sendmsg_frag`'s
    /// `zero_window_probe`): when the peer's connection-level window is
    /// closed, data waits and nothing is unacknowledged, the window update
    /// that would reopen it may have been lost, and no ACK will come by
    /// itself. So the last DATA_ACKed byte goes out again as a one-byte
    /// mapping, a duplicate at the data level that the subflow still
    /// acknowledges, with a DATA_ACK and the current window; repeated with
    /// an exponential backoff while the window stays closed.
    pub(super) fn window_probe(&mut self, now: Instant) {
        let sh = &self.shared;
        let closed = sh.wnd_end.le(sh.snd_nxt) && sh.snd_una == sh.snd_nxt && sh.write_seq.gt(sh.snd_nxt);
        if !closed || sh.infinite || !self.reinject.is_empty() {
            self.wnd_probe_at = None;
            self.wnd_probe_backoff = 0;
            return;
        }
        let Some(byte) = self.last_acked_byte else { return };
        let rto = self.live_rto();
        let Some(at) = self.wnd_probe_at else {
            self.wnd_probe_at = Some(now + rto);
            return;
        };
        if at > now {
            return;
        }
        // Whatever happens now, the timer moves on (a timer left due would
        // be polled forever).
        self.wnd_probe_backoff += 1;
        let backoff = rto * (1 << self.wnd_probe_backoff.min(9));
        self.wnd_probe_at = Some(now + backoff.min(TCP_RTO_MAX));
        // No idle subflow: the previous probe still waits in one (its own
        // zero-window probing carries it).
        let Some(i) = self.probe_subflow() else { return };
        if !self.copy_allowed() {
            return;
        }
        let off = self.shared.ssn_off();
        let (sf, ext) = self.subflows[i].as_mut().expect("picked a live subflow");
        let dsn = DataSeq(self.shared.snd_una.0.wrapping_sub(1));
        let ssn = sf.write_seq() - (sf.iss() - off).0;
        if sf.send_bytes(Bytes::copy_from_slice(&[byte])).is_err() {
            return;
        }
        let csum = if self.shared.csum { dss_checksum(dsn.0, ssn.0, 1, &[byte]) } else { 0 };
        ext.tx_maps.push_back(TxMap { ssn: ssn.0, dsn, len: 1, csum, with_ack: Some(true) });
        self.shared.allow_infinite_fallback = false;
        self.shared.counters.mptcp_win_probe += 1;
    }

    /// A usable subflow with nothing queued, the lowest RTT first.
    fn probe_subflow(&self) -> Option<usize> {
        self.subflows
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .filter(|(_, (sf, ext))| {
                matches!(ext.join, JoinState::Initial | JoinState::Joined)
                    && matches!(sf.state(), State::Established | State::CloseWait)
                    && !ext.stale
                    && sf.send_queued() == 0
            })
            .min_by_key(|(_, (sf, _))| sf.srtt().unwrap_or(Duration::MAX))
            .map(|(i, _)| i)
    }

    /// The MPTCP-level retransmission timer (Linux `mptcp_retransmit_timer`
    /// and `__mptcp_retrans`): armed while data is not DATA_ACKed, restarted
    /// whenever `snd_una` moves. When it expires and the oldest
    /// unacknowledged data is no longer in flight on any subflow (a subflow
    /// acknowledged it but the peer never DATA_ACKed it, or its subflow is
    /// gone), that data is sent again on a subflow the scheduler picks.
    pub(super) fn retransmit_timer(&mut self, now: Instant) {
        let sh = &self.shared;
        if sh.infinite || sh.snd_una.ge(sh.snd_nxt) {
            self.rtx_at = None;
            self.rtx_backoff = 0;
            return;
        }
        let rto = self.live_rto();
        if self.rtx_at.is_none() || self.rtx_una != sh.snd_una {
            if self.rtx_una != sh.snd_una {
                self.rtx_backoff = 0;
            }
            self.rtx_una = sh.snd_una;
            self.rtx_at = Some(now + rto * (1 << self.rtx_backoff.min(6)));
            return;
        }
        if self.rtx_at.is_some_and(|t| t > now) {
            return;
        }
        self.rtx_backoff += 1;
        self.rtx_at = Some(now + (rto * (1 << self.rtx_backoff.min(6))).min(TCP_RTO_MAX));
        let una = sh.snd_una;
        if self.reinject.iter().any(|&(a, b)| a.le(una) && una.lt(b)) {
            return;
        }
        // Where is the byte at snd_una? In flight on a live subflow: that
        // subflow's own RTO covers it. In flight on a stale one only (a
        // path that went down): its RTO never succeeds, so it goes again
        // here, as Linux's `__mptcp_retrans` sends the head whatever holds it.
        let mut end = None;
        let off = self.shared.ssn_off();
        for (sf, ext) in self.subflows.iter().flatten() {
            let sf_una = (sf.snd_una() - (sf.iss() - off).0).0;
            for m in &ext.tx_maps {
                let mend = m.dsn + m.len as u64;
                if m.dsn.le(una) && una.lt(mend) {
                    let at_ssn = m.ssn.wrapping_add((una - m.dsn) as u32);
                    if Seq(at_ssn).ge(Seq(sf_una)) && !ext.stale {
                        return;
                    }
                    end = Some(end.map_or(mend, |e: DataSeq| e.max(mend)));
                }
            }
        }
        let mss = self.subflows.iter().flatten().map(|(s, _)| s.mss(0) as u64).max().unwrap_or(1);
        let end = end.unwrap_or(self.shared.snd_nxt).min(una + mss).min(self.shared.snd_nxt);
        if !self.copy_allowed() {
            return;
        }
        self.reinject.push_back((una, end));
        self.shared.counters.mptcp_retrans += 1;
        self.shared.counters.mptcp_reinjected_bytes += end - una;
        self.push_pending();
    }

    /// Whether a data-level copy (an MPTCP-level retransmission or a window
    /// probe) may go onto the subflows. A peer that fell back to TCP on its
    /// only subflow (a middlebox stripped the options of one of our
    /// segments: a client not yet fully established takes a single one,
    /// Linux `check_fully_established`) reads that subflow's bytes as the
    /// stream, and a copy there, at new subflow sequence numbers, would be
    /// delivered twice. Its ACKs tell: after a fallback they carry no MPTCP
    /// option. So while our only subflow is the initial one and the last ACK
    /// of new data on it came without an option, we fall back too instead of
    /// copying (what the subflow acknowledged is then acknowledged, see
    /// [`Connection::fallback_una`]), or, once a copy already went out and a
    /// fallback would misread it (`allow_infinite_fallback` cleared), reset
    /// the subflow (MP_TCPRST "middlebox interference", Linux's answer when
    /// `mptcp_try_fallback` fails). `false` when it did either.
    fn copy_allowed(&mut self) -> bool {
        let mut live = self.subflows.iter_mut().flatten();
        let (Some((sf, ext)), None) = (live.next(), live.next()) else { return true };
        if ext.join != JoinState::Initial || ext.optless_acks == 0 {
            return true;
        }
        let sh = &mut self.shared;
        if sh.allow_infinite_fallback {
            sh.counters.mptcp_dss_fallback += 1;
            Self::fall_back(sh, sf, ext);
            self.fallback_una();
        } else {
            ext.rst_reason = Some(MPTCP_RST_EMIDDLEBOX);
            sh.counters.mptcp_mp_rst_tx += 1;
            sf.abort();
        }
        false
    }

    /// The retransmission timeout the connection-level timers count in: the
    /// largest RTO of the subflows that can carry data. A stale subflow's
    /// RTO, backed off exponentially on a dead path, would otherwise push
    /// the MPTCP-level retransmission (the one thing that can recover data
    /// stuck on that path) out by minutes.
    fn live_rto(&self) -> Duration {
        let rto = |usable: bool| {
            self.subflows.iter().flatten().filter(|(_, ext)| !usable || !ext.stale).map(|(s, _)| s.info().rto).max()
        };
        rto(true).or_else(|| rto(false)).unwrap_or(TCP_RTO_MIN).max(TCP_RTO_MIN)
    }

    /// Records a policy's decision: flag the slow subflow, count, reinject.
    fn apply_decision(&mut self, picked: usize, views: &[SubflowView], conn: &ConnView) {
        let d = self.sched.after_pick(picked, views, conn);
        self.shared.counters.mptcp_penal_candidate += d.candidate as u64;
        if let Some(id) = d.penalise {
            if let Some((_, ext)) = self.subflows.get_mut(id).and_then(|s| s.as_mut()) {
                ext.penalty = Some(self.cfg.mptcp.scheduler == Policy::MptcpOrg);
            }
        }
        if let Some((slow, _fast)) = d.reinject_head {
            // Opportunistic retransmission: the oldest unacknowledged data of
            // the slow subflow goes out again on a fast one.
            let una = self.shared.snd_una;
            let head = self.subflows.get(slow).and_then(|s| s.as_ref()).and_then(|(sf, ext)| {
                let mss = sf.mss(0) as u64;
                ext.tx_maps.iter().find(|m| (m.dsn + m.len as u64).gt(una)).map(|m| {
                    let start = m.dsn.max(una);
                    (start, (m.dsn + m.len as u64).min(start + mss))
                })
            });
            if let Some((s, e)) = head {
                if !self.reinject.iter().any(|&(a, b)| a.le(s) && e.le(b)) {
                    self.reinject.push_back((s, e));
                    self.shared.counters.mptcp_reinjected_bytes += e - s;
                }
            }
        }
    }

    /// The halving a policy flagged, applied from the subflow's own push path
    /// (the equivalent of doing it under the subflow socket lock).
    pub(super) fn apply_penalty(sf: &mut Subflow, ext: &mut SubflowExt, counters: &mut Counters) {
        let Some(always_ssthresh) = ext.penalty.take() else { return };
        sf.penalise(always_ssthresh);
        counters.mptcp_cwnd_penalized += 1;
        ext.penalized += 1;
    }
}
