//! The transmit path: what to send next, the options it carries and the
//! window it advertises.

use super::*;

impl Subflow {
    /// Free receive-buffer space, the basis of the advertised window.
    pub(super) fn free_window(&self) -> usize {
        self.recv_limit.saturating_sub(self.recv_buf.ready_len() + self.recv_buf.ofo_len())
    }

    /// Window currently open to the peer (from what we advertised).
    pub(super) fn rcv_wnd_now(&self) -> u32 {
        if self.rcv_adv.gt(self.rcv_nxt) {
            self.rcv_adv - self.rcv_nxt
        } else {
            0
        }
    }

    /// The window a segment's sequence number is checked against (RFC 9293
    /// 3.10.7.4): what this subflow announced, and under a shared window
    /// also the connection's window now ([`Subflow::set_conn_rcv_window`]).
    pub(super) fn rcv_accept_wnd(&self) -> u32 {
        let own = self.rcv_wnd_now();
        if self.rcv_wnd_shared {
            own.max(self.rcv_wnd_conn)
        } else {
            own
        }
    }

    /// Stream offset of the right edge we accept data up to: the furthest
    /// edge advertised when the window is the connection's (MPTCP: the
    /// subflow's buffer is the connection's, RFC 8684 3.3.4), or the
    /// connection's window now if further; else also what the subflow's own
    /// free buffer allows.
    pub(super) fn rcv_window_edge_off(&self) -> u64 {
        let adv = if self.rcv_edge_max.gt(self.rcv_nxt) { self.rcv_edge_max - self.rcv_nxt } else { 0 };
        if self.rcv_wnd_shared {
            return self.recv_buf.next() + adv.max(self.rcv_wnd_conn) as u64;
        }
        self.recv_buf.next() + self.rcv_wnd_now().max(adv).max(self.free_window() as u32) as u64
    }

    /// Memory budget of the receive queues (`buf::mem_budget`): twice the
    /// largest window advertised (the subflow's own buffer when the window
    /// is not the connection's) plus a fixed slack.
    pub(super) fn rcv_mem_budget(&self) -> usize {
        let own = if self.rcv_wnd_shared { 0 } else { self.recv_limit };
        crate::buf::mem_budget(own.max(self.rcv_wnd_max as usize))
    }

    /// Records a window advertised in a segment.
    fn note_rcv_adv(&mut self, w: u32) {
        self.rcv_adv = self.rcv_nxt + w;
        if self.rcv_adv.gt(self.rcv_edge_max) {
            self.rcv_edge_max = self.rcv_adv;
        }
        self.rcv_wnd_max = self.rcv_wnd_max.max(w);
    }

    /// The window to advertise now (bytes), never shrinking the right edge.
    pub(super) fn select_window(&mut self) -> u32 {
        let free = self.free_window() as u32;
        let mss = self.mss(0);
        let cur = self.rcv_wnd_now();
        // Receiver-side silly window avoidance (RFC 9293 3.8.6.2.2).
        let mut win = if free < (self.recv_limit as u32 / 2).min(mss) { 0 } else { free };
        win = win.max(cur);
        let max = MAX_WINDOW_FIELD << self.rcv_wscale;
        win = win.min(max);
        // Round down to the scale granularity, except to never shrink.
        let gran = (1u32 << self.rcv_wscale) - 1;
        if win & gran != 0 && win > cur {
            win = (win & !gran).max(cur);
        }
        win
    }

    /// Linux `tcp_is_cwnd_limited`.
    pub(super) fn is_cwnd_limited(&self) -> bool {
        if self.is_cwnd_limited {
            return true;
        }
        if self.ccs.in_slow_start() {
            return self.ccs.cwnd < 2 * self.max_packets_out;
        }
        false
    }

    /// Linux `tcp_cwnd_validate`.
    pub(super) fn cwnd_validate(&mut self, cwnd_limited: bool) {
        let packets_out = self.scoreboard.len();
        if self.snd_una.ge(self.cwnd_usage_seq) || cwnd_limited || packets_out > self.max_packets_out {
            self.is_cwnd_limited = cwnd_limited;
            self.max_packets_out = packets_out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
    }

    /// Linux `tcp_update_pacing_rate`: 200 % of cwnd/srtt in slow start, 120 % after;
    /// or the controller's own rate where it sets one (BBR).
    pub(super) fn update_pacing_rate(&mut self) {
        if let Some(rate) = self.cc.pacing_rate() {
            // The controller sets it (BBR's sk_pacing_rate), and paces.
            let rate = rate.min(self.cfg.max_pacing_rate.unwrap_or(u64::MAX));
            self.pacer.set_rate(rate);
            self.cc.set_pacing(rate, true);
            return;
        }
        let cfg = PacingRateConfig {
            max_pacing_rate: self.cfg.max_pacing_rate.unwrap_or(u64::MAX),
            ..PacingRateConfig::default()
        };
        let rate = cfg.rate(self.mss(0), self.ccs.cwnd, self.ccs.ssthresh, self.scoreboard.len(), self.rtt.smoothed());
        self.pacer.set_rate(rate);
        self.cc.set_pacing(rate, self.cfg.pacer != mptun_cc::PacerKind::None && rate != u64::MAX);
    }

    /// The loss probe: the highest segment sent, once more.
    pub(super) fn send_loss_probe(
        &mut self,
        now: Instant,
        hook: &mut dyn SegmentHook,
        out: &mut [u8],
    ) -> Option<Transmit> {
        let max_len = match self.scoreboard.loss_probe_seq() {
            Some(seq) if self.pmtu.known() => self.mss(hook.option_space_at(seq)),
            _ => u32::MAX,
        };
        let s = self.scoreboard.on_loss_probe(max_len, now)?;
        self.tlp.on_probe_sent(self.snd_nxt);
        self.counters.tcp_ext_tcp_loss_probes += 1;
        self.counters.tcp_retrans_segs += 1;
        self.bytes_retrans += s.len as u64;
        self.last_data_send = Some(now);
        let opts = self.ack_options(now, hook.option_space(true));
        let mut flags = TcpFlags::ACK | TcpFlags::PSH;
        if s.fin {
            flags |= TcpFlags::FIN;
        }
        self.emit(now, hook, out, s.seq, self.rcv_nxt, flags, Some(s.len), true, opts)
    }

    /// Pending control segments, or data the windows would let us send.
    pub(super) fn can_send_data(&self) -> bool {
        if !matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::LastAck | State::Closing
        ) {
            return false;
        }
        if self.in_flight() >= self.ccs.cwnd {
            return false;
        }
        if self.scoreboard.next_lost().is_some() {
            return true;
        }
        let unsent = self.unsent_bytes();
        if unsent > 0 {
            return self.window_allows(1);
        }
        self.fin_queued && !self.fin_sent
    }

    pub(super) fn window_allows(&self, len: u32) -> bool {
        (self.snd_nxt + len).le(self.snd_una + self.snd_wnd)
    }

    pub(super) fn ts_now(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts_offset)
    }

    /// Writes the next packet to send at `now` into `out`, if any.
    pub fn poll_transmit(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        if let Some((seq, ack, flags)) = self.pending_rst.take() {
            self.counters.tcp_out_rsts += 1;
            return self.emit(now, hook, out, seq, ack, flags, None, false, TcpOptions::new());
        }
        match self.state {
            State::Closed => return None,
            State::SynSent | State::SynReceived if self.snd_nxt == self.iss => {
                return self.emit_syn(now, hook, out);
            }
            _ => {}
        }
        if self.state.is_synchronized() {
            if let Some(t) = self.poll_data(now, hook, out) {
                return Some(t);
            }
        }
        // Challenge ACKs in every state but SYN-SENT (RFC 5961 3.2), and
        // zero-window probes.
        if self.challenge_ack && self.state != State::SynSent {
            self.challenge_ack = false;
            let seq = if self.state == State::SynReceived {
                self.iss + 1
            } else if self.timers.is_set(Timer::Persist) {
                self.snd_una - 1
            } else {
                self.snd_nxt
            };
            let opts = self.ack_options(now, hook.option_space(false));
            return self.emit(now, hook, out, seq, self.rcv_nxt, TcpFlags::ACK, None, false, opts);
        }
        if self.ack_now && self.state != State::SynSent {
            let opts = self.ack_options(now, hook.option_space(false));
            let seq = if self.state == State::SynReceived { self.iss + 1 } else { self.snd_nxt };
            return self.emit(now, hook, out, seq, self.rcv_nxt, TcpFlags::ACK, None, false, opts);
        }
        None
    }

    pub(super) fn poll_data(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        self.timers.stop(Timer::Pacing);
        if self.tlp.take_due() {
            if let Some(t) = self.send_loss_probe(now, hook, out) {
                return Some(t);
            }
        }
        if !self.can_send_data() {
            self.nothing_sendable(now);
            return None;
        }
        // EDT (Linux tcp_wstamp_ns): a segment leaves at the pacer's time,
        // which may be up to the pacing horizon ahead of now; the driver's
        // departure queue holds it until then. Past the horizon, the next
        // segment is built once its time is within reach.
        let departure = self.pacer.departure(now);
        let horizon = self.cfg.pacing_horizon;
        if departure > now + horizon {
            self.timers.set(Timer::Pacing, departure - horizon);
            return None;
        }
        self.timers.stop(Timer::Pacing);
        let hook_space = hook.option_space(true);
        let opts = self.ack_options(now, hook_space);
        // With a known path MTU, SACK blocks on a data segment take payload
        // room too (Linux tcp_current_mss counts every option).
        let sack_space = if self.pmtu.known() {
            opts.len().saturating_sub(if self.ts_ok { TCPOLEN_TSTAMP_ALIGNED } else { 0 })
        } else {
            0
        };
        let mss = self.mss(hook_space + sack_space);
        if self.pmtu.known() {
            self.pmtu.hook_space = hook_space;
        }
        let mut flags = TcpFlags::ACK;

        // Retransmit the first lost segment, else send new data.
        if let Some(i) = self.scoreboard.next_lost() {
            return self.retransmit_lost(now, hook, out, i, departure, sack_space, opts);
        }

        let unsent = self.unsent_bytes();
        let wnd_room = (self.snd_una + self.snd_wnd) - self.snd_nxt;
        let segs = self.tso_segs(mss, out.len(), opts.len() + hook_space);
        let mut len = unsent.min(mss.saturating_mul(segs)).min(if self.window_allows(1) { wnd_room } else { 0 });
        let contiguous = if self.cfg.segment_at_write_boundaries {
            // One MPTCP mapping per write: a segment never straddles two (Linux
            // refuses to collapse skbs whose MPTCP extensions differ).
            self.send_buf.contiguous_from(self.snd_nxt) as u32
        } else {
            u32::MAX
        };
        len = len.min(contiguous);
        if len > mss && len != unsent && len != contiguous {
            // Only the end of the data may leave a short piece: a super-segment
            // cut by a window is whole segments (Linux tcp_mss_split_point),
            // the rest follows as it would have without TSO.
            len -= len % mss;
        }
        let mut segment_size = mss;
        if len > 0 && self.pmtu.known() {
            let opt = (opts.len() + hook_space) as u32;
            if let Some(probe) = self.mtu_probe_len(now, opt, mss, contiguous) {
                len = probe;
                segment_size = probe;
            }
        }
        if len == 0 && !(self.fin_queued && !self.fin_sent && unsent == 0) {
            return None;
        }
        if self.cfg.nagle && len < mss && !self.scoreboard.is_empty() && !self.fin_queued {
            return None;
        }
        let fin = self.fin_queued && !self.fin_sent && len == unsent;
        if fin {
            flags |= TcpFlags::FIN;
            self.fin_sent = true;
        }
        // Linux sets PSH only on the segment that empties the write queue
        // (tcp_mark_push); segments with identical headers can then be merged
        // by TSO on the way out.
        if len > 0 && len == unsent {
            flags |= TcpFlags::PSH;
        }
        let seq = self.snd_nxt;
        // The scoreboard keeps one entry per wire segment, so SACK, RACK,
        // PRR and every count in packets work as without TSO. Its pieces
        // share one delivery snapshot, taken as the first leaves.
        let rate = self.scoreboard.rate_on_sent(departure);
        let was_idle = self.scoreboard.is_empty();
        let mut off = 0;
        loop {
            let piece = (len - off).min(segment_size);
            self.scoreboard.push(seq + off, piece, fin && off + piece == len, now, rate);
            off += piece;
            if off >= len {
                break;
            }
        }
        self.snd_nxt = seq + len + fin as u32;
        self.bytes_sent += len as u64;
        if len > 0 {
            self.last_data_send = Some(now);
        }
        if self.ca_state == CaState::Recovery {
            self.scoreboard.prr_on_sent();
        }
        // First transmission after idle (Linux CA_EVENT_TX_START, sent when
        // nothing was in flight). A controller with its own cong_control
        // (BBR) gets Linux's rule; the loss-based ones see it only when the
        // send leaves one segment in flight, which misses an idle start that
        // is a TSO burst but keeps their published runs (and digests) as
        // they are.
        let tx_start = if self.cc.has_cong_control() { was_idle } else { self.scoreboard.len() == 1 };
        if tx_start {
            self.cc.observe_delivery(self.scoreboard.rate());
            self.cc.cwnd_event(&mut self.ccs, CaEvent::TxStart, now);
            if self.cc.pacing_rate().is_some() {
                self.update_pacing_rate();
            }
        }
        self.cc.data_sent(now);
        if !self.timers.is_set(Timer::Rto) {
            self.timers.set(Timer::Rto, now + self.rtt.rto());
        }
        let mut t = self.emit(now, hook, out, seq, self.rcv_nxt, flags, Some(len), false, opts);
        if let Some(t) = t.as_mut() {
            t.departure = departure;
        }
        if let Some(t) = t.as_mut().filter(|_| len > segment_size) {
            let pieces = len.div_ceil(segment_size);
            t.segment_size = Some(segment_size as usize);
            self.counters.tcp_out_segs += u64::from(pieces - 1);
            self.data_segs_out += u64::from(pieces - 1);
        }
        self.after_data_sent(now, t.as_ref(), len);
        t
    }

    /// Nothing can be sent now: a zero window with data waiting arms the
    /// persist timer, and a full window validates the congestion window.
    fn nothing_sendable(&mut self, now: Instant) {
        let unsent = self.unsent_bytes();
        if unsent > 0
            && self.scoreboard.is_empty()
            && !self.window_allows(1)
            && !self.timers.is_set(Timer::Persist)
            && self.state.is_synchronized()
        {
            self.arm_persist(now);
        }
        if self.in_flight() >= self.ccs.cwnd {
            self.cwnd_validate(true);
        }
    }

    /// Retransmits the lost segment at scoreboard index `i` (cut first to
    /// the current MSS if the path MTU came down: Linux
    /// `tcp_retransmit_skb` fragments), leaving at `departure`.
    #[allow(clippy::too_many_arguments)]
    fn retransmit_lost(
        &mut self,
        now: Instant,
        hook: &mut dyn SegmentHook,
        out: &mut [u8],
        i: usize,
        departure: Instant,
        sack_space: usize,
        opts: TcpOptions,
    ) -> Option<Transmit> {
        if self.pmtu.known() {
            // Cut what was sent before the MSS came down (Linux
            // tcp_retransmit_skb fragments to the current MSS).
            let (seq, len) = self.scoreboard.seg(i);
            let max = self.mss(hook.option_space_at(seq) + sack_space);
            if len > max {
                self.scoreboard.split(i, max);
            }
        }
        let mut flags = TcpFlags::ACK;
        let s = self.scoreboard.on_retransmit(i, now, departure);
        self.counters.tcp_retrans_segs += 1;
        self.bytes_retrans += s.len as u64;
        self.last_data_send = Some(now);
        if self.ca_state == CaState::Loss {
            self.counters.tcp_ext_tcp_slow_start_retrans += 1;
        } else {
            self.counters.tcp_ext_tcp_fast_retrans += 1;
        }
        if s.fin {
            flags |= TcpFlags::FIN;
        }
        if self.ca_state == CaState::Recovery {
            self.scoreboard.prr_on_sent();
        }
        if !self.timers.is_set(Timer::Rto) {
            self.timers.set(Timer::Rto, now + self.rtt.rto());
        }
        let t = self.emit(now, hook, out, s.seq, self.rcv_nxt, flags, Some(s.len), true, opts);
        let t = t.map(|t| Transmit { departure, ..t });
        self.after_data_sent(now, t.as_ref(), s.len);
        t
    }

    /// Segments one super-segment may carry (1 without TSO): Linux's
    /// `tcp_tso_autosize` (about 1 ms of the pacing rate, the whole 64 KiB
    /// on paths under 512 µs of minimum RTT, at least 2 segments), within
    /// `tcp_cwnd_test`'s quota (at most half the window, so two
    /// super-segments are in flight) and what `out` holds.
    fn tso_segs(&self, mss: u32, out_len: usize, opt_len: usize) -> u32 {
        if !self.cfg.tso || mss == 0 {
            return 1;
        }
        let hdr = ip_tcp_header_len(&self.local) as usize + opt_len;
        let room = out_len.min(mptun_wire::gso::GSO_MAX_SIZE).saturating_sub(hdr);
        let by_buf = (room / mss as usize) as u32;
        if by_buf <= 1 {
            return 1;
        }
        let gso_max = mptun_wire::gso::GSO_MAX_SIZE as u64;
        let rate = self.pacer.rate();
        let mut bytes = if rate == u64::MAX { gso_max } else { rate >> TCP_PACING_SHIFT };
        // Linux tcp_tso_rtt_log: on short paths the burst costs no queueing
        // that matters, and bigger bursts save CPU.
        if let Some(min_rtt) = self.rtt.min() {
            let r = (min_rtt.as_nanos() / 1000) >> TCP_TSO_RTT_LOG;
            if r < 64 {
                bytes = bytes.saturating_add(gso_max >> r);
            }
        }
        let min_segs = self.cc.min_tso_segs().map_or(TCP_MIN_TSO_SEGS, u64::from);
        let by_rate = (bytes.min(gso_max) / u64::from(mss)).max(min_segs) as u32;
        let cwnd = self.ccs.cwnd;
        let quota = cwnd.saturating_sub(self.in_flight()).min((cwnd >> 1).max(1));
        by_buf.min(by_rate).min(quota).max(1)
    }

    /// Bookkeeping after a data segment of `payload` bytes left as `t`.
    /// The pacer counts whole packets, except under a controller that sets
    /// its own pacing rate (BBR): that rate is of payload, as Linux's
    /// `tcp_update_skb_after_send` counts it.
    pub(super) fn after_data_sent(&mut self, now: Instant, t: Option<&Transmit>, payload: u32) {
        if let Some(t) = t {
            self.schedule_tlp(now);
            self.data_segs_out += 1;
            let paced_len = if self.cc.pacing_rate().is_some() { payload as usize } else { t.packet_len() };
            self.pacer.on_send(now, paced_len);
            let limited = self.in_flight() >= self.ccs.cwnd;
            self.cwnd_validate(limited);
        }
    }

    /// Timestamps and SACK blocks for a non-SYN segment, leaving `hook_space` free.
    pub(super) fn ack_options(&self, now: Instant, hook_space: usize) -> TcpOptions {
        let mut o = TcpOptions::new();
        if self.ts_ok {
            let _ = o.push(&TcpOption::Nop);
            let _ = o.push(&TcpOption::Nop);
            let _ = o.push(&TcpOption::Timestamp { tsval: self.ts_now(now), tsecr: self.ts_recent });
        }
        let dsack = self.dsack.filter(|_| self.sack_ok);
        if self.sack_ok && (dsack.is_some() || !self.recv_buf.ofo_is_empty()) {
            let room = MAX_TCP_OPTION_SPACE.saturating_sub(o.len() + hook_space);
            let max_blocks =
                (room.saturating_sub(TCPOLEN_SACK_BASE_ALIGNED) / TCPOLEN_SACK_PERBLOCK).min(TCP_NUM_SACKS);
            if max_blocks > 0 {
                let base = self.irs + 1;
                let mut blocks = SackBlocks::new();
                // A D-SACK block goes first (RFC 2883 4).
                if let Some((s, e)) = dsack {
                    blocks.push((s.0, e.0));
                }
                let first = self.recv_buf.last_ofo.and_then(|l| self.recv_buf.ofo_range_at(l));
                if let Some((s, e)) = first.filter(|_| blocks.len() < max_blocks) {
                    blocks.push(((base + s as u32).0, (base + e as u32).0));
                }
                for (s, e) in self.recv_buf.ofo_ranges().rev() {
                    if blocks.len() >= max_blocks {
                        break;
                    }
                    if Some((s, e)) != first {
                        blocks.push(((base + s as u32).0, (base + e as u32).0));
                    }
                }
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Sack(blocks));
            }
        }
        o
    }

    pub(super) fn emit_syn(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        let mut o = TcpOptions::new();
        let syn_ack = self.state == State::SynReceived;
        let _ = o.push(&TcpOption::Mss(self.advmss()));
        let sack = if syn_ack { self.sack_ok } else { self.cfg.sack };
        let ts = if syn_ack { self.ts_ok } else { self.cfg.timestamps };
        // A SYN-ACK answers Window Scale with Window Scale even when our shift
        // is 0: the peer scales its windows only if both SYNs carried the
        // option (RFC 7323 2.2; Linux tcp_synack_options sends it whenever
        // wscale_ok).
        let ws = if syn_ack { self.wscale_ok } else { self.cfg.window_scaling };
        let tsopt = TcpOption::Timestamp { tsval: self.ts_now(now), tsecr: if syn_ack { self.ts_recent } else { 0 } };
        match (sack, ts) {
            (true, true) => {
                let _ = o.push(&TcpOption::SackPermitted);
                let _ = o.push(&tsopt);
            }
            (true, false) => {
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::SackPermitted);
            }
            (false, true) => {
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&tsopt);
            }
            (false, false) => {}
        }
        if ws {
            let _ = o.push(&TcpOption::Nop);
            let _ = o.push(&TcpOption::WindowScale(self.rcv_wscale));
        }
        let (flags, ack) =
            if syn_ack { (TcpFlags::SYN | TcpFlags::ACK, self.rcv_nxt) } else { (TcpFlags::SYN, Seq(0)) };
        self.syn_tx_time = now;
        self.snd_nxt = self.iss + 1;
        self.timers.set(Timer::Rto, now + self.rtt.rto());
        self.emit(now, hook, out, self.iss, ack, flags, None, self.syn_retransmitted, o)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit(
        &mut self,
        now: Instant,
        hook: &mut dyn SegmentHook,
        out: &mut [u8],
        seq: Seq,
        ack: Seq,
        flags: TcpFlags,
        payload_len: Option<u32>,
        retransmit: bool,
        mut options: TcpOptions,
    ) -> Option<Transmit> {
        let len = payload_len.unwrap_or(0);
        let meta = SegmentMeta { seq, len, flags, retransmit };
        // RSTs go through the hook too: MPTCP may say why (MP_TCPRST).
        let hook_window = hook.on_emit(&meta, &mut options);
        let window = if flags.syn() {
            let w = self.recv_limit.min(MAX_WINDOW_FIELD as usize) as u16;
            if flags.ack() {
                self.note_rcv_adv(w as u32);
            }
            w
        } else if flags.rst() {
            0
        } else {
            let w = match hook_window {
                Some(w) => {
                    self.rcv_wnd_shared = true;
                    w.min((MAX_WINDOW_FIELD as u64) << self.rcv_wscale) as u32
                }
                None => self.select_window(),
            };
            if flags.ack() {
                self.note_rcv_adv(w);
                if w == 0 {
                    self.counters.tcp_ext_tcp_to_zero_window_adv += 1;
                }
            }
            (w >> self.rcv_wscale).min(MAX_WINDOW_FIELD) as u16
        };
        let hdr = TcpHeader {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            seq: seq.0,
            ack: if flags.ack() { ack.0 } else { 0 },
            flags,
            window,
            checksum: 0,
            urgent: 0,
            options,
        };
        // The payload as pieces of the send buffer, written behind the
        // headers by the device, when it need not be read here.
        let tail = if len > 0 && self.cfg.gather_payload && self.cfg.checksum_offload {
            Tail::gather(self.send_buf.slices(seq, len as usize))
        } else {
            None
        };
        let (res, tail) = match tail {
            Some(tail) => {
                let (src, dst) = (self.local.ip(), self.remote.ip());
                let res = mptun_wire::emit_tcp_headers_offload(src, dst, self.cfg.ttl, &hdr, tail.len(), out);
                // `out` must still hold the whole packet, for a path that
                // puts it in one piece after all.
                (
                    res.and_then(|n| if n + tail.len() <= out.len() { Ok(n) } else { Err(mptun_wire::Error::NoSpace) }),
                    tail,
                )
            }
            None => {
                let mut scratch = std::mem::take(&mut self.scratch);
                let payload: &[u8] = if len > 0 { self.send_buf.range(seq, len as usize, &mut scratch) } else { &[] };
                let emit = if self.cfg.checksum_offload {
                    mptun_wire::emit_tcp_packet_offload
                } else {
                    mptun_wire::emit_tcp_packet
                };
                let res = emit(self.local.ip(), self.remote.ip(), self.cfg.ttl, &hdr, payload, out);
                self.scratch = scratch;
                (res, Tail::default())
            }
        };
        let n = match res {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "could not emit segment");
                return None;
            }
        };
        self.counters.tcp_out_segs += 1;
        if flags.ack() {
            self.last_ack_sent = ack;
            // Reported once (with or without room for it: it is advice).
            self.dsack = None;
            self.ack_now = false;
            self.delack.on_ack_sent();
            self.timers.stop(Timer::DelayedAck);
        }
        Some(Transmit {
            len: n,
            tail,
            departure: now,
            segment_size: None,
            src: self.local,
            dst: self.remote,
            checksum_partial: self.cfg.checksum_offload,
        })
    }
}

/// Smallest window scale that lets `max_buffer` be advertised (Linux
/// `tcp_select_initial_window`).
pub(super) fn wscale_for(max_buffer: usize) -> u8 {
    let mut ws = 0;
    while ws < TCP_MAX_WSCALE && (max_buffer >> ws) > MAX_WINDOW_FIELD as usize {
        ws += 1;
    }
    ws
}
