//! How the subflow drives BBR: the [`CongestionControl`] hooks Linux's
//! `tcp_congestion_ops` for BBR names (`cong_control`, `cwnd_event`,
//! `ssthresh`, `undo_cwnd`, `get_info`...), each handing over to the
//! model in `mod.rs`.

use super::*;

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    fn init(&mut self, state: &mut CcState, now: Instant) {
        state.ssthresh = u32::MAX;
        self.min_rtt_stamp = now;
        self.ack_epoch_mstamp = Some(now);
    }

    fn established(&mut self, state: &mut CcState, ctx: &AckContext, now: Instant) {
        self.reinit(state, ctx, now);
    }

    fn seed(&mut self, seed: u64) {
        // splitmix64 spreads close seeds apart; xorshift must not start at zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.rng = (z ^ (z >> 31)) | 1;
    }

    fn pkts_acked(&mut self, _state: &mut CcState, _sample: &crate::AckSample, _now: Instant) {}

    fn cong_avoid(&mut self, _state: &mut CcState, _ack: u32, _acked: u32, _now: Instant) {}

    fn ssthresh(&mut self, state: &CcState) -> u32 {
        self.save_cwnd(state.cwnd);
        state.ssthresh
    }

    fn set_state(&mut self, _state: &mut CcState, new: CaState, _now: Instant) {
        if new == CaState::Loss {
            let rs = RateSample { losses: 1, ..RateSample::new(0) };
            self.prev_ca_state = CaState::Loss;
            self.full_bw = 0;
            self.round_start = true;
            self.lt_bw_sampling(&rs);
        }
    }

    fn cwnd_event(&mut self, state: &mut CcState, event: CaEvent, now: Instant) {
        if event == CaEvent::TxStart && self.delivery.is_app_limited() {
            self.idle_restart = true;
            self.ack_epoch_mstamp = Some(now);
            self.ack_epoch_acked = 0;
            // Restarting from idle and app-limited: pace at the estimate,
            // no faster, to spare the queue.
            if self.mode == BbrMode::ProbeBw {
                let bw = self.bw();
                self.set_pacing_rate(bw, BBR_UNIT, state.cwnd, None);
            } else if self.mode == BbrMode::ProbeRtt {
                self.check_probe_rtt_done(state, now);
            }
        }
    }

    fn reduce_window(&mut self, state: &mut CcState, _cut: crate::WindowCut) {
        // BBR keeps no loss-based window to halve; it restores its model's
        // window at the next ACK. A cut asked from above lasts until then.
        state.cwnd = (state.cwnd / 2).max(BBR_CWND_MIN_TARGET);
    }

    fn observe_delivery(&mut self, delivery: &DeliveryRate) {
        self.delivery = *delivery;
    }

    fn cong_control(
        &mut self,
        state: &mut CcState,
        ctx: &AckContext,
        rate: &mut DeliveryRate,
        rs: &RateSample,
        now: Instant,
    ) -> bool {
        self.note_context(ctx);
        self.delivery = *rate;
        self.mark_app_limited = None;
        // bbr_update_model
        self.update_bw(rs);
        self.update_ack_aggregation(rs, state.cwnd);
        if self.mode == BbrMode::ProbeBw && self.is_next_cycle_phase(rs, ctx, now) {
            self.advance_cycle_phase();
        }
        self.check_full_bw_reached(rs);
        self.check_drain(state, ctx, now);
        self.update_min_rtt(state, rs, ctx, now);
        self.update_gains();
        // bbr_main
        let bw = self.bw();
        self.set_pacing_rate(bw, self.pacing_gain, state.cwnd, ctx.srtt);
        self.set_cwnd(state, rs, rs.acked_sacked, bw, self.cwnd_gain, ctx);
        if let Some(in_flight) = self.mark_app_limited.take() {
            rate.set_app_limited(in_flight);
            self.delivery = *rate;
        }
        true
    }

    fn pacing_rate(&self) -> Option<u64> {
        Some(self.pacing_rate.max(1))
    }

    fn has_cong_control(&self) -> bool {
        true
    }

    fn min_tso_segs(&self) -> Option<u32> {
        Some(self.min_tso_segs_now())
    }

    fn sndbuf_expand(&self) -> u32 {
        // BBR may slow-start even during recovery.
        3
    }

    fn bbr_info(&self) -> Option<BbrInfo> {
        let bw = (u128::from(self.bw()) * u128::from(self.mss) * 1_000_000) >> BW_SCALE;
        Some(BbrInfo {
            bw: u64::try_from(bw).unwrap_or(u64::MAX),
            min_rtt_us: self.min_rtt_us,
            pacing_gain: self.pacing_gain,
            cwnd_gain: self.cwnd_gain,
            mode: self.mode,
        })
    }
}
