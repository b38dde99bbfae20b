//! The receive path: segment acceptance (RFC 9293 3.10.7 and RFC 5961),
//! SYN-SENT, the synchronized states, ACK processing, data and FIN.

use super::*;

/// `data` as a slice of `packet` if it lies within it and is long enough to
/// be worth keeping that way (see [`crate::buf::COPY_BELOW`]).
fn shared_slice(packet: &Bytes, data: &[u8]) -> Option<Bytes> {
    let (p, d) = (packet.as_ptr() as usize, data.as_ptr() as usize);
    let within = d >= p && d + data.len() <= p + packet.len();
    (within && data.len() >= crate::buf::COPY_BELOW).then(|| packet.slice_ref(data))
}

/// Delayed-ACK bookkeeping (Linux `icsk_ack`): whether data awaits an ACK,
/// how much, and how many segments are still ACKed at once after the start.
#[derive(Clone, Copy, Debug)]
pub(super) struct DelayedAck {
    pending: bool,
    /// In-order bytes received since our last ACK.
    unacked_bytes: u32,
    /// ACKs still sent without delay (Linux quick-ack mode).
    quickacks: u32,
}

impl Default for DelayedAck {
    fn default() -> Self {
        DelayedAck { pending: false, unacked_bytes: 0, quickacks: TCP_MAX_QUICKACKS }
    }
}

impl DelayedAck {
    /// Counts in-order bytes received.
    pub(super) fn on_data(&mut self, bytes: u32) {
        self.unacked_bytes += bytes;
    }

    /// Marks an ACK as owed; true if it should go out at once rather than
    /// after the delayed-ACK timer: Linux ACKs at least every second
    /// full-sized segment, and at once in quick-ack mode.
    pub(super) fn on_pending(&mut self, mss: u32) -> bool {
        self.pending = true;
        self.quickacks > 0 || self.unacked_bytes >= 2 * mss
    }

    /// An ACK is owed.
    pub(super) fn is_pending(&self) -> bool {
        self.pending
    }

    /// Any segment carrying an ACK went out: nothing is owed any more.
    pub(super) fn on_ack_sent(&mut self) {
        self.pending = false;
        self.unacked_bytes = 0;
        self.quickacks = self.quickacks.saturating_sub(1);
    }
}

impl Subflow {
    pub(super) fn take_syn_options(&mut self, now: Instant, syn: &TcpHeader, opts: &OptionSummary) {
        self.irs = Seq(syn.seq);
        self.rcv_nxt = self.irs + 1;
        self.rcv_adv = self.rcv_nxt;
        self.rcv_edge_max = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.peer_mss = opts.mss.unwrap_or(TCP_MSS_DEFAULT).max(MIN_MSS);
        match opts.window_scale {
            Some(ws) if self.cfg.window_scaling => {
                self.snd_wscale = ws.min(TCP_MAX_WSCALE);
                self.wscale_ok = true;
            }
            _ => {
                self.snd_wscale = 0;
                self.rcv_wscale = 0;
                self.wscale_ok = false;
            }
        }
        self.sack_ok = self.cfg.sack && opts.sack_permitted;
        self.ts_ok = self.cfg.timestamps && opts.timestamp.is_some();
        if let Some((tsval, _)) = opts.timestamp {
            self.ts_recent = tsval;
            self.ts_recent_stamp = now;
        }
        // The window in a SYN is never scaled.
        self.snd_wnd = syn.window as u32;
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = Seq(syn.seq);
        self.snd_wl2 = Seq(syn.ack);
    }

    /// Processes one segment addressed to this subflow, and says whether it
    /// was acceptable: a layer above (MPTCP) acts on a segment's options only
    /// if it was, as Linux processes MPTCP options only after
    /// `tcp_validate_incoming` has accepted the segment.
    pub fn handle_segment(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, payload: &[u8]) -> Verdict {
        self.handle_segment_in(now, hdr, opts, payload, None)
    }

    /// [`Self::handle_segment`] for a payload that is a slice of `packet`:
    /// the data it queues is kept as slices of `packet` (shorter pieces
    /// than [`crate::RECV_ZERO_COPY_MIN`] are copied), not copied out of it.
    pub fn handle_segment_in(
        &mut self,
        now: Instant,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        packet: Option<&Bytes>,
    ) -> Verdict {
        self.counters.tcp_in_segs += 1;
        match self.state {
            State::Closed => Verdict::Dropped,
            State::SynSent => self.handle_syn_sent(now, hdr, opts, payload, packet),
            _ => self.handle_synchronized(now, hdr, opts, payload, packet),
        }
    }

    /// The end of what we sent in SYN-SENT or SYN-RECEIVED: our SYN (or
    /// SYN-ACK) once it went out, also after an RTO moved `snd_nxt` back to
    /// send it again and before it left: an ACK of the first one arriving in
    /// between acknowledges what the peer got (Linux checks against
    /// `snt_isn + 1`; its retransmission never moves `snd_nxt` back).
    fn syn_snd_max(&self) -> Seq {
        if self.syn_retransmitted {
            self.iss + 1
        } else {
            self.snd_nxt
        }
    }

    pub(super) fn handle_syn_sent(
        &mut self,
        now: Instant,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        packet: Option<&Bytes>,
    ) -> Verdict {
        let f = hdr.flags;
        let ack = Seq(hdr.ack);
        if f.ack() && (ack.le(self.iss) || ack.gt(self.syn_snd_max())) {
            if !f.rst() {
                self.queue_rst(ack, Seq(0), TcpFlags::RST);
            }
            return Verdict::Dropped;
        }
        if f.rst() {
            // RFC 5961 3.2 leaves SYN-SENT as RFC 793: acceptable iff it acks our SYN.
            // A failed attempt, not a reset connection (Linux tcp_done).
            if f.ack() {
                self.counters.tcp_attempt_fails += 1;
                self.enter_closed(Some(Event::Reset));
                return Verdict::Reset;
            }
            return Verdict::Dropped;
        }
        if !f.syn() {
            return Verdict::Dropped;
        }
        self.take_syn_options(now, hdr, opts);
        if f.ack() {
            self.snd_una = ack;
            self.snd_nxt = ack;
            self.snd_wl1 = Seq(hdr.seq);
            self.snd_wl2 = ack;
            if !self.syn_retransmitted {
                self.rtt.update(now, now - self.syn_tx_time);
            }
            // Linux sets the pacing rate once the handshake gave an RTT
            // (tcp_init_transfer), not only on the first data ACK.
            self.on_established_cc(now);
            self.timers.stop(Timer::Rto);
            self.retries = 0;
            self.state = State::Established;
            self.events.push_back(Event::Connected);
            self.ack_now = true;
            self.on_data(now, Seq(hdr.seq) + 1, payload, packet, f.fin());
        } else {
            // Simultaneous open (RFC 9293 figure 8): answer with SYN-ACK at
            // the next poll_transmit. It is a new segment, not a timeout's
            // retransmission: no backoff, nothing counted (Linux
            // tcp_rcv_synsent_state_process sends it with tcp_send_synack).
            self.state = State::SynReceived;
            self.snd_nxt = self.iss;
        }
        Verdict::Accepted
    }

    pub(super) fn handle_synchronized(
        &mut self,
        now: Instant,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        packet: Option<&Bytes>,
    ) -> Verdict {
        let f = hdr.flags;
        let seq = Seq(hdr.seq);
        let seg_len = payload.len() as u32 + f.syn() as u32 + f.fin() as u32;

        if self.state == State::SynReceived && f.syn() && !f.ack() && seq == self.irs {
            // Retransmitted SYN: our SYN-ACK was lost.
            self.timers.set(Timer::Rto, now);
            return Verdict::Dropped;
        }

        // 0. PAWS (RFC 7323 5.3; Linux tcp_validate_incoming checks it
        // first): a segment whose timestamp is older than the last one taken
        // is an old duplicate. It is answered, unless it is a RST, which is
        // judged on its sequence number alone.
        let tsval = opts.timestamp.filter(|_| self.ts_ok).map(|(v, _)| v);
        if let Some(tsval) = tsval {
            if !f.rst() && self.paws_discard(now, hdr, tsval, seg_len) {
                if f.syn() {
                    self.counters.tcp_ext_tcp_syn_challenge += 1;
                    self.send_challenge_ack(now);
                    return Verdict::Dropped;
                }
                self.counters.tcp_ext_paws_estab += 1;
                if seg_len > 0 || !self.oow_rate_limited(now) {
                    self.ack_now = true;
                } else {
                    self.counters.tcp_ext_tcp_ack_skipped_paws += 1;
                }
                return Verdict::Dropped;
            }
        }

        // 1. Sequence check (RFC 9293 3.10.7.4).
        let Some(ack_only_ok) = self.check_sequence(now, hdr, payload, seg_len) else { return Verdict::Dropped };

        // 2. RST (RFC 5961 3.2): exact match resets, in-window challenges.
        if f.rst() {
            if seq == self.rcv_nxt {
                if self.state == State::SynReceived {
                    self.counters.tcp_attempt_fails += 1;
                    self.enter_closed(Some(Event::Reset));
                } else {
                    self.counters.tcp_estab_resets += 1;
                    self.enter_closed(Some(Event::Reset));
                }
                return Verdict::Reset;
            }
            self.send_challenge_ack(now);
            return Verdict::Dropped;
        }

        // 3. SYN in a synchronized state (RFC 5961 4.2): challenge ACK.
        if f.syn() {
            self.counters.tcp_ext_tcp_syn_challenge += 1;
            self.send_challenge_ack(now);
            return Verdict::Dropped;
        }

        // 4. No ACK: drop.
        if !f.ack() {
            return Verdict::Dropped;
        }

        // Timestamps: remember the peer's clock for echoing (RFC 7323 4.3).
        if let Some((tsval, tsecr)) = opts.timestamp.filter(|_| self.ts_ok) {
            // Linux tcp_replace_ts_recent: never backwards (a disordered ACK
            // that PAWS let through keeps the newer value).
            if seq.le(self.last_ack_sent) && self.paws_check(now, tsval, 0) {
                self.ts_recent = tsval;
                self.ts_recent_stamp = now;
            }
            if !payload.is_empty() && tsecr != 0 {
                self.rcv_rtt_sample(now, tsecr);
            }
        }

        // 5. ACK processing.
        if !self.take_ack(now, hdr, opts, payload) {
            return Verdict::Dropped;
        }

        // 6. Data and FIN.
        self.take_data(now, seq, payload, packet, f.fin(), ack_only_ok)
    }

    /// The sequence check (RFC 9293 3.10.7.4) of a segment of `seg_len`
    /// sequence numbers: `None` when it is not acceptable (answered as the
    /// RFC and Linux's `tcp_validate_incoming` say, and dropped), else
    /// whether only its ACK is (data at RCV.NXT into a zero window).
    fn check_sequence(&mut self, now: Instant, hdr: &TcpHeader, payload: &[u8], seg_len: u32) -> Option<bool> {
        let f = hdr.flags;
        let seq = Seq(hdr.seq);
        let wnd = self.rcv_accept_wnd();
        let acceptable = if seg_len == 0 {
            if wnd == 0 {
                seq == self.rcv_nxt
            } else {
                seq.in_range(self.rcv_nxt, self.rcv_nxt + wnd)
            }
        } else if wnd == 0 {
            false
        } else {
            seq.in_range(self.rcv_nxt, self.rcv_nxt + wnd)
                || (seq + seg_len - 1).in_range(self.rcv_nxt, self.rcv_nxt + wnd)
        };
        // A zero window still accepts the ACK and window of a segment at rcv_nxt.
        let ack_only_ok = !acceptable && wnd == 0 && seq == self.rcv_nxt;
        if !acceptable && !ack_only_ok {
            if f.syn() && !f.rst() {
                // RFC 5961 4.2: a SYN is challenged whatever its sequence
                // number (Linux tcp_validate_incoming, syn_challenge).
                self.counters.tcp_ext_tcp_syn_challenge += 1;
                self.send_challenge_ack(now);
            } else if !f.rst() {
                if self.state == State::TimeWait && f.fin() {
                    self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
                }
                self.counters.tcp_ext_beyond_window += (seg_len > 0 && seq.gt(self.rcv_nxt)) as u64;
                self.counters.tcp_ext_tcp_duplicate_data += (seg_len > 0 && seq.lt(self.rcv_nxt)) as u64;
                if !payload.is_empty() && seq.lt(self.rcv_nxt) {
                    // Old data sent again: D-SACK it (Linux tcp_send_dupack).
                    let end = seq + payload.len() as u32;
                    self.set_dsack(seq, if end.gt(self.rcv_nxt) { self.rcv_nxt } else { end }, true);
                }
                // Bare segments are what an ACK loop is made of: their
                // duplicate ACKs are spaced (Linux tcp_oow_rate_limited).
                if seg_len > 0 || !self.oow_rate_limited(now) {
                    self.ack_now = true;
                } else {
                    self.counters.tcp_ext_tcp_ack_skipped_seq += 1;
                }
            }
            return None;
        }
        Some(ack_only_ok)
    }

    /// The ACK of an acceptable segment (RFC 9293 3.10.7.4 fifth step): in
    /// SYN-RECEIVED it completes the handshake, else it is checked against
    /// what was sent (RFC 5961 5.2) and processed. `false` when the segment
    /// is dropped.
    fn take_ack(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, payload: &[u8]) -> bool {
        let (f, seq) = (hdr.flags, Seq(hdr.seq));
        let ack = Seq(hdr.ack);
        if self.state == State::SynReceived {
            if ack.gt(self.snd_una) && ack.le(self.syn_snd_max()) {
                self.snd_una = ack;
                self.snd_nxt = ack;
                self.state = State::Established;
                self.timers.stop(Timer::Rto);
                self.retries = 0;
                if !self.syn_retransmitted {
                    self.rtt.update(now, now - self.syn_tx_time);
                }
                self.on_established_cc(now);
                self.snd_wnd = (hdr.window as u32) << self.snd_wscale;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
                self.events.push_back(Event::Connected);
            } else {
                self.queue_rst(ack, Seq(0), TcpFlags::RST);
                return false;
            }
        } else {
            // RFC 5961 5.2: an ACK for data never sent, or far too old.
            if ack.gt(self.snd_nxt) {
                self.send_challenge_ack(now);
                return false;
            }
            if ack.lt(self.snd_una - self.max_snd_wnd.max(1)) {
                self.send_challenge_ack(now);
                return false;
            }
            self.process_ack(now, hdr, opts, payload.is_empty() && !f.fin());
        }
        true
    }

    /// The data and FIN of an acceptable segment whose ACK was taken
    /// (RFC 9293 3.10.7.4 seventh and eighth steps); `ack_only`: only its
    /// ACK was acceptable.
    fn take_data(
        &mut self,
        now: Instant,
        seq: Seq,
        payload: &[u8],
        packet: Option<&Bytes>,
        fin: bool,
        ack_only: bool,
    ) -> Verdict {
        if ack_only {
            // Data at RCV.NXT into a zero window (a zero-window probe that
            // carries a byte): its ACK was taken above, the data is dropped
            // and answered at once with the (zero) window, so the probe
            // learns when the window reopens (RFC 9293 3.10.7.4, 3.8.6.1;
            // Linux tcp_data_queue, TCPZeroWindowDrop). A bare FIN is taken
            // (Linux: it costs no buffer). The segment stays accepted: its
            // ACK was processed, and the layer above must see its
            // connection-level acknowledgement too (Linux runs
            // mptcp_incoming_options before the zero-window drop).
            if payload.is_empty() {
                self.on_data(now, seq, payload, packet, fin);
            } else {
                self.counters.tcp_ext_tcp_zero_window_drop += 1;
                self.ack_now = true;
            }
            return Verdict::Accepted;
        }
        if self.state.can_receive() || (self.fin_received.is_none() && matches!(self.state, State::Closing)) {
            self.on_data(now, seq, payload, packet, fin);
        } else if fin && self.state == State::TimeWait {
            // Retransmitted FIN: ACK again and restart 2MSL.
            self.ack_now = true;
            self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
        } else if !payload.is_empty() || fin {
            self.ack_now = true;
        }
        Verdict::Accepted
    }

    /// Linux `tcp_paws_check`: `tsval` is not older than `ts_recent` by more
    /// than `win`, or `ts_recent` is too old to judge by (24 days idle, RFC
    /// 7323 5.5), or was never set by the peer (some stacks send 0 in SYNs).
    pub(super) fn paws_check(&self, now: Instant, tsval: u32, win: i32) -> bool {
        self.ts_recent.wrapping_sub(tsval) as i32 <= win
            || now - self.ts_recent_stamp >= TCP_PAWS_24DAYS
            || self.ts_recent == 0
    }

    /// Linux `tcp_paws_discard`: PAWS rejects the segment (one tick of slack),
    /// unless it is a disordered ACK.
    fn paws_discard(&self, now: Instant, hdr: &TcpHeader, tsval: u32, seg_len: u32) -> bool {
        !self.paws_check(now, tsval, TCP_PAWS_WINDOW) && !self.disordered_ack(hdr, tsval, seg_len)
    }

    /// Linux `tcp_disordered_ack`: a pure duplicate ACK at RCV.NXT that does
    /// not update the window, reordered by less than an RTO, is harmless
    /// and let through (RFC 7323 5.3 allows it).
    fn disordered_ack(&self, hdr: &TcpHeader, tsval: u32, seg_len: u32) -> bool {
        let (seq, ack) = (Seq(hdr.seq), Seq(hdr.ack));
        let wnd = (hdr.window as u32) << self.snd_wscale;
        let may_update_window =
            ack.gt(self.snd_una) || seq.gt(self.snd_wl1) || (seq == self.snd_wl1 && (wnd > self.snd_wnd || wnd == 0));
        // Linux compares with icsk_rto * 1024 / HZ: the RTO in ms, about.
        let rto_ticks = (self.rtt.rto().as_millis() as u64 * 1024 / 1000).min(i32::MAX as u64) as i32;
        hdr.flags.ack()
            && seg_len == 0
            && seq == self.rcv_nxt
            && ack == self.snd_una
            && !may_update_window
            && self.ts_recent.wrapping_sub(tsval) as i32 <= rto_ticks
    }

    pub(super) fn rcv_rtt_sample(&mut self, now: Instant, tsecr: u32) {
        let now_ts = self.ts_now(now);
        let ms = now_ts.wrapping_sub(tsecr);
        self.rcv_rtt.sample_ms(ms);
    }

    /// Linux `tcp_send_challenge_ack`: at most one per `invalid_ratelimit`
    /// (shared with the duplicate ACKs for out-of-window segments), and at
    /// most `challenge_ack_limit` a second (RFC 5961 7).
    pub(super) fn send_challenge_ack(&mut self, now: Instant) {
        if self.oow_rate_limited(now) {
            self.counters.tcp_ext_tcp_ack_skipped_challenge += 1;
            return;
        }
        if self.cfg.challenge_ack_limit != u32::MAX {
            let second = now.as_millis() / 1000;
            if self.challenge_second != Some(second) {
                self.challenge_second = Some(second);
                self.challenge_count = self.cfg.challenge_ack_limit;
            }
            if self.challenge_count == 0 {
                return;
            }
            self.challenge_count -= 1;
        }
        self.counters.tcp_ext_tcp_challenge_ack += 1;
        self.challenge_ack = true;
    }

    /// Linux `__tcp_oow_rate_limited`: whether an ACK answering an invalid
    /// segment must be skipped, the last one being less than
    /// `invalid_ratelimit` ago; if not, this one is the last one now.
    pub(super) fn oow_rate_limited(&mut self, now: Instant) -> bool {
        if self.last_oow_ack.is_some_and(|t| now - t < self.cfg.invalid_ratelimit) {
            return true;
        }
        self.last_oow_ack = Some(now);
        false
    }

    pub(super) fn queue_rst(&mut self, seq: Seq, ack: Seq, flags: TcpFlags) {
        self.pending_rst = Some((seq, ack, flags));
    }

    /// Accepts payload and FIN that passed the sequence check; `packet`, if
    /// given, is what `payload` is a slice of (kept, not copied).
    pub(super) fn on_data(&mut self, now: Instant, seq: Seq, payload: &[u8], packet: Option<&Bytes>, fin: bool) {
        if payload.is_empty() && !fin {
            return;
        }
        // Convert to stream offsets (offset 0 is the first byte after the SYN).
        let base = self.irs + 1;
        let next_off = self.recv_buf.next();
        let start = next_off as i64 + (seq - self.rcv_nxt) as i32 as i64;
        let fin_off = start + payload.len() as i64;
        let (off, mut data) = if start < next_off as i64 {
            let skip = ((next_off as i64 - start) as usize).min(payload.len());
            if skip > 0 {
                // Partly old (seq < rcv_nxt < end): D-SACK the old part.
                self.set_dsack(seq, seq + skip as u32, true);
            }
            (next_off, &payload[skip..])
        } else {
            (start as u64, payload)
        };
        // Nothing after a FIN already seen is data (Linux purges it).
        let limit = self.rcv_window_edge_off().min(self.fin_received.unwrap_or(u64::MAX));
        let mut trimmed = false;
        let mut spare = 0;
        if off + data.len() as u64 > limit {
            data = &data[..limit.saturating_sub(off).min(data.len() as u64) as usize];
            trimmed = true;
        }
        if !data.is_empty() {
            // Within the memory budget (Linux tcp_try_rmem_schedule): the
            // out-of-order tail past this segment is pruned first; a segment
            // that still does not fit is dropped, never acknowledged.
            let room = self.recv_buf.make_room(off, data.len(), self.rcv_mem_budget());
            spare = room.spare;
            self.counters.tcp_ext_prune_called += room.prune_called as u64;
            self.counters.tcp_ext_ofo_pruned += (room.pruned_chunks > 0) as u64;
            if !room.fits {
                if off > next_off {
                    self.counters.tcp_ext_tcp_ofo_drop += 1;
                } else {
                    self.counters.tcp_ext_rcv_pruned += 1;
                }
                self.ack_now = true;
                data = &[];
                trimmed = true;
            }
        }
        if fin && !trimmed && fin_off >= next_off as i64 && self.fin_received.is_none() {
            self.fin_received = Some(fin_off as u64);
        }
        if fin && fin_off > next_off as i64 {
            // A FIN beyond a hole is out of order like data: duplicate ACK
            // at once (RFC 5681 4.2; Linux queues it out of order and ACKs).
            self.ack_now = true;
        }
        let src = match packet.and_then(|p| shared_slice(p, data)) {
            Some(b) => Src::Bytes(b),
            None => Src::Slice(data),
        };
        let ins = self.recv_buf.insert_within(off, src, spare);
        if ins.queued_ofo {
            self.counters.tcp_ext_tcp_ofo_queue += 1;
            self.counters.tcp_ext_tcp_ofo_merge += ins.merged as u64;
            self.ack_now = true; // dupack with SACK right away (RFC 5681 4.2)
        }
        if ins.duplicate {
            self.counters.tcp_ext_tcp_duplicate_data += 1;
            self.ack_now = true;
            if off > next_off && !data.is_empty() {
                // Already held out of order: D-SACK it (Linux
                // tcp_data_queue_ofo, TCPDSACKOfoSent).
                let s = base + off as u32;
                self.set_dsack(s, s + data.len() as u32, false);
            }
        }
        if ins.in_order > 0 {
            let had_ofo = !self.recv_buf.ofo_is_empty() || ins.in_order > data.len();
            self.delack.on_data(ins.in_order as u32);
            if had_ofo {
                self.ack_now = true; // filled a hole
            }
            self.schedule_ack(now);
        }
        self.rcv_nxt = base + self.recv_buf.next() as u32;
        if let Some(fin_off) = self.fin_received {
            if self.recv_buf.next() == fin_off && self.rcv_nxt == base + fin_off as u32 {
                self.rcv_nxt += 1;
                self.ack_now = true;
                self.on_fin(now);
            }
        }
    }

    /// Reports `[start, end)` as a duplicate in the next ACK (D-SACK, RFC
    /// 2883), counted as Linux counts it: `old` below `rcv_nxt`
    /// (`TCPDSACKOldSent`), else within the out-of-order queue
    /// (`TCPDSACKOfoSent`). Only with SACK agreed, and only the latest.
    fn set_dsack(&mut self, start: Seq, end: Seq, old: bool) {
        if !self.sack_ok || !end.gt(start) {
            return;
        }
        self.dsack = Some((start, end));
        if old {
            self.counters.tcp_ext_tcp_dsack_old_sent += 1;
        } else {
            self.counters.tcp_ext_tcp_dsack_ofo_sent += 1;
        }
    }

    pub(super) fn on_fin(&mut self, now: Instant) {
        self.events.push_back(Event::PeerFin);
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_sent && self.snd_una == self.snd_nxt {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    pub(super) fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.timers.stop(Timer::Rto);
        self.timers.stop(Timer::Persist);
        self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
    }

    pub(super) fn enter_closed(&mut self, ev: Option<Event>) {
        if self.state == State::Closed {
            return;
        }
        self.state = State::Closed;
        // Every timer: a closed subflow has nothing to do (one left due, e.g.
        // a pacing slot, would be polled forever).
        for t in Timer::FIRE_ORDER.into_iter().chain([Timer::Pacing]) {
            self.timers.stop(t);
        }
        self.events.push_back(ev.unwrap_or(Event::Closed));
    }

    /// Linux `__tcp_ack_snd_check`: ACK now, or arm the delayed-ACK timer.
    pub(super) fn schedule_ack(&mut self, now: Instant) {
        // A window about to close is announced at once (Linux does so under
        // receive-buffer pressure), or the sender would wait for the timer.
        let closing = self.free_window() < 2 * self.mss(0) as usize;
        if self.delack.on_pending(self.mss(0)) || closing {
            self.ack_now = true;
        } else if !self.timers.is_set(Timer::DelayedAck) {
            self.timers.set(Timer::DelayedAck, now + self.cfg.delayed_ack);
        }
    }

    /// Linux `tcp_ack`: window update, SACK, cumulative ACK, loss
    /// detection, congestion state, then the controller and the timers.
    pub(super) fn process_ack(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, pure: bool) {
        let ack = Seq(hdr.ack);
        let wnd = (hdr.window as u32) << self.snd_wscale;
        let prior_una = self.snd_una;
        let prior_in_flight = self.in_flight();
        let prior_wnd = self.snd_wnd;

        self.scoreboard.begin_ack(prior_in_flight);
        self.ack_update_window(Seq(hdr.seq), ack, wnd);
        let (newly_sacked, sack_rtt) = self.ack_sacks(now, &opts.sack);
        let mut acked = Acked::default();
        if ack.gt(self.snd_una) {
            acked = self.ack_cumulative(now, ack);
        } else if pure && ack == self.snd_una && !self.scoreboard.is_empty() && wnd == prior_wnd && newly_sacked == 0 {
            self.dupacks += 1;
        }

        // RTT: Linux takes the oldest newly acked segment for the RTO
        // estimator; SACK gives one when nothing was cumulatively acked.
        if let Some(rtt) = acked.rtt_first.or(sack_rtt) {
            self.rtt.update(now, rtt);
        }
        let ca_rtt = acked.rtt_last.or(sack_rtt);
        let delivered = acked.segs + newly_sacked;

        self.detect_loss(now);
        self.pmtu_on_ack(now);
        self.fastretrans_alert(now, ack.gt(prior_una));
        let reneged = self.scoreboard.head_sacked();
        let rs = self.scoreboard.rate_gen(now, delivered, reneged, self.rtt.min(), ca_rtt);
        self.cong_control(now, ack.gt(prior_una), delivered, ca_rtt, prior_in_flight, &rs);
        if acked.fin {
            self.on_fin_acked(now);
        }
        if self.cfg.send_buffer.is_auto() {
            self.send_limit = autotune::sndbuf_expand(
                self.send_limit,
                self.cc.sndbuf_expand(),
                self.ccs.cwnd,
                self.mss(0),
                self.cfg.send_buffer.max(),
            );
        }
    }

    /// Window update (RFC 9293 3.10.7.4, SND.WL1/WL2 rule; Linux
    /// `tcp_ack_update_window`).
    fn ack_update_window(&mut self, seq: Seq, ack: Seq, wnd: u32) {
        if self.snd_wl1.lt(seq) || (self.snd_wl1 == seq && self.snd_wl2.le(ack)) {
            self.snd_wnd = wnd;
            self.max_snd_wnd = self.max_snd_wnd.max(wnd);
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            if wnd > 0 {
                self.timers.stop(Timer::Persist);
                self.persist_backoff = 0;
            }
        }
    }

    /// SACK blocks onto the scoreboard (Linux `tcp_sacktag_write_queue`):
    /// segments newly SACKed and an RTT sample.
    fn ack_sacks(&mut self, now: Instant, blocks: &SackBlocks) -> (u32, Option<Duration>) {
        if !self.sack_ok || blocks.is_empty() {
            return (0, None);
        }
        let min_rtt = self.rtt.min();
        self.scoreboard.mark_sacked(now, blocks, self.snd_una, self.snd_nxt, min_rtt, &mut self.counters)
    }

    /// A cumulative ACK past `snd_una` (Linux `tcp_clean_rtx_queue`): frees
    /// the acknowledged bytes and restarts the retransmission timer.
    fn ack_cumulative(&mut self, now: Instant, ack: Seq) -> Acked {
        let acked = self.scoreboard.remove_acked(now, ack, self.rtt.min(), &mut self.counters);
        self.bytes_acked += (ack - self.snd_una) as u64 - acked.fin as u64;
        self.last_ack_recv = Some(now);
        self.send_buf.ack_to(ack);
        self.snd_una = ack;
        self.retries = 0;
        self.dupacks = 0;
        // Something worked: an earlier ICMP error no longer explains a timeout.
        self.soft_error = None;
        self.rtt.reset_backoff();
        // RFC 6298 5.3: restart the timer when new data is acknowledged.
        self.timers.set_opt(Timer::Rto, (!self.scoreboard.is_empty()).then(|| now + self.rtt.rto()));
        self.tlp.on_cumulative_ack(self.snd_una);
        acked
    }

    /// Linux `tcp_cong_control`: the controller's sample (`pkts_acked`), then
    /// the controller's own `cong_control` with the rate sample if it has
    /// one (BBR), else window growth, or PRR during recovery; pacing rate
    /// and loss probe follow.
    fn cong_control(
        &mut self,
        now: Instant,
        una_advanced: bool,
        delivered: u32,
        ca_rtt: Option<Duration>,
        prior_in_flight: u32,
        rs: &mptun_cc::rate::RateSample,
    ) {
        let sample = AckSample {
            pkts_acked: delivered,
            rtt: ca_rtt,
            snd_una: self.snd_una.0,
            snd_nxt: self.snd_nxt.0,
            in_flight: prior_in_flight,
        };
        if delivered > 0 || ca_rtt.is_some() {
            self.cc.pkts_acked(&mut self.ccs, &sample, now);
        }
        let ctx = self.ack_context(now);
        let mut rate = *self.scoreboard.rate();
        if self.cc.cong_control(&mut self.ccs, &ctx, &mut rate, rs, now) {
            *self.scoreboard.rate_mut() = rate;
        } else if self.ca_state == CaState::Recovery {
            self.prr_update(delivered, una_advanced);
        } else if una_advanced && self.is_cwnd_limited() {
            self.cc.cong_avoid(&mut self.ccs, self.snd_una.0, delivered.max(1), now);
        }
        self.ccs.cwnd = self.ccs.cwnd.clamp(1, self.ccs.cwnd_clamp);
        self.update_pacing_rate();
        if una_advanced || self.ca_state != CaState::Open {
            self.schedule_tlp(now);
        }
    }

    /// Our FIN was acknowledged: the closing states move on.
    fn on_fin_acked(&mut self, now: Instant) {
        match self.state {
            State::FinWait1 => self.state = State::FinWait2,
            State::Closing => self.enter_time_wait(now),
            State::LastAck => self.enter_closed(None),
            _ => {}
        }
    }
}
