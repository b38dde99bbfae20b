//! Delivery-rate sampling, as Linux `tcp_rate.c` does it
//! (draft-cheng-iccrg-delivery-rate-estimation).
//!
//! A rate sample answers "how fast did the network deliver this flow's data
//! over the last round trip?" for every ACK. Each segment, when sent, takes a
//! snapshot of the connection's delivery count and of the time of the last
//! delivery ([`TxRate`]); when an ACK or SACK covers it, the packets delivered
//! since that snapshot over the time elapsed since it is a sample. The
//! interval is the longer of the send phase (first to last send of the
//! sampled window) and the ACK phase, so that ACK compression cannot inflate
//! a sample. A sample whose window had a moment with nothing to send is
//! marked app-limited: it tells what the application offered, not what the
//! path can carry, and BBR keeps it out of its bandwidth filter unless it is
//! the best seen anyway.
//!
//! The subflow owns one [`DeliveryRate`] and calls, in the kernel's order:
//! [`DeliveryRate::on_sent`] for every (re)transmission
//! (`tcp_rate_skb_sent`), [`DeliveryRate::on_delivered`] for every segment an
//! ACK newly covers (`tcp_rate_skb_delivered`, after counting it in
//! `delivered`), [`DeliveryRate::generate`] once per ACK (`tcp_rate_gen`), and
//! [`DeliveryRate::check_app_limited`] whenever the application writes
//! (`tcp_rate_check_app_limited`). Nothing here reads a clock.

use crate::{Duration, Instant};

/// What a segment remembers of the connection's delivery state when it was
/// last sent (Linux `tcp_skb_cb.tx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxRate {
    /// Its own (latest) departure time (`tcp_skb_timestamp_us`).
    pub sent: Instant,
    /// `tp->first_tx_mstamp` then: the start of the send phase.
    pub first_tx: Instant,
    /// `tp->delivered_mstamp` then; `None` once a SACK already used it, so a
    /// later cumulative ACK of the same segment gives no second sample.
    pub delivered_mstamp: Option<Instant>,
    /// `tp->delivered` then.
    pub delivered: u64,
    /// The connection was app-limited then.
    pub is_app_limited: bool,
}

/// One ACK's delivery-rate sample (Linux `struct rate_sample`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSample {
    /// `tx.delivered_mstamp` of the most recently sent segment this ACK covers.
    pub prior_mstamp: Option<Instant>,
    /// `tx.delivered` of that segment: the delivery count at its send.
    pub prior_delivered: u64,
    /// Packets delivered over the interval; `-1` when the sample is invalid.
    pub delivered: i64,
    /// The sampling interval in µs; `-1` when invalid (no timing, SACK
    /// reneging, or shorter than the minimum RTT).
    pub interval_us: i64,
    /// The send phase of the interval, µs.
    pub snd_interval_us: u64,
    /// The ACK phase of the interval, µs.
    pub rcv_interval_us: u64,
    /// The ACK's RTT sample (Karn applied), µs; `-1` when none.
    pub rtt_us: i64,
    /// Packets newly marked lost while processing this ACK.
    pub losses: u32,
    /// Packets newly ACKed or SACKed by this ACK.
    pub acked_sacked: u32,
    /// `tcp_packets_in_flight` before this ACK.
    pub prior_in_flight: u32,
    /// End sequence number of the segment the sample was taken from (the
    /// tie-break between segments sent at the same instant).
    pub last_end_seq: u32,
    /// The sampled window was app-limited.
    pub is_app_limited: bool,
    /// The sampled segment was retransmitted at least once.
    pub is_retrans: bool,
    /// The ACK may have been delayed by the receiver (Linux
    /// `FLAG_ACK_MAYBE_DELAYED`): BBR does not let its RTT refresh an
    /// expired minimum.
    pub is_ack_delayed: bool,
}

impl RateSample {
    /// A sample with nothing in it yet, for an ACK that found `prior_in_flight`
    /// packets in flight.
    pub fn new(prior_in_flight: u32) -> Self {
        RateSample { delivered: -1, interval_us: -1, rtt_us: -1, prior_in_flight, ..RateSample::default() }
    }

    /// Whether the sample can be used as a bandwidth observation.
    pub fn is_valid(&self) -> bool {
        self.delivered >= 0 && self.interval_us > 0
    }

    /// The sample's delivery rate in packets per second, if valid.
    pub fn packets_per_sec(&self) -> Option<f64> {
        self.is_valid().then(|| self.delivered as f64 * 1e6 / self.interval_us as f64)
    }
}

/// Linux `tcp_skb_sent_after`: was the segment sent at `t1` ending at `seq1`
/// sent after the one sent at `t2` ending at `seq2`?
fn sent_after(t1: Instant, t2: Instant, seq1: u32, seq2: u32) -> bool {
    t1 > t2 || (t1 == t2 && (seq1.wrapping_sub(seq2) as i32) > 0)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The connection-level delivery state (Linux `tcp_sock`'s `delivered`,
/// `delivered_mstamp`, `first_tx_mstamp`, `app_limited`, `lost`,
/// `rate_delivered`, `rate_interval_us`, `rate_app_limited`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryRate {
    delivered: u64,
    delivered_mstamp: Option<Instant>,
    first_tx: Option<Instant>,
    /// 0, or the `delivered` count beyond which the app-limited bubble is gone.
    app_limited: u64,
    lost: u64,
    rate_delivered: u64,
    rate_interval_us: u64,
    rate_app_limited: bool,
}

impl DeliveryRate {
    /// Packets delivered (ACKed or SACKed) so far (`tp->delivered`).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Time of the last delivery (`tp->delivered_mstamp`).
    pub fn delivered_mstamp(&self) -> Option<Instant> {
        self.delivered_mstamp
    }

    /// Packets marked lost so far (`tp->lost`).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Counts `n` packets newly marked lost.
    pub fn on_lost(&mut self, n: u32) {
        self.lost += u64::from(n);
    }

    /// Whether the connection is app-limited now (`tp->app_limited != 0`).
    pub fn is_app_limited(&self) -> bool {
        self.app_limited != 0
    }

    /// Linux's raw `tp->app_limited`: 0, or the delivery count at which the
    /// app-limited bubble will have been acknowledged.
    pub fn app_limited_mark(&self) -> u64 {
        self.app_limited
    }

    /// Marks the connection app-limited until everything in flight now is
    /// delivered (what `tcp_rate_check_app_limited` and BBR's PROBE_RTT do).
    pub fn set_app_limited(&mut self, in_flight: u32) {
        self.app_limited = (self.delivered + u64::from(in_flight)).max(1);
    }

    /// The last non-app-limited sample, or the best app-limited one, in
    /// bytes per second for segments of `mss` bytes (Linux
    /// `tcpi_delivery_rate`), and whether it was app-limited.
    pub fn rate(&self, mss: u32) -> (u64, bool) {
        if self.rate_interval_us == 0 {
            return (0, false);
        }
        let r = u128::from(self.rate_delivered) * u128::from(mss) * 1_000_000 / u128::from(self.rate_interval_us);
        (u64::try_from(r).unwrap_or(u64::MAX), self.rate_app_limited)
    }

    /// `tcp_rate_skb_sent`: the snapshot a segment leaving at `sent` takes,
    /// with `packets_out` segments already unacknowledged before it. An idle
    /// connection starts its send and delivery clocks at this segment.
    pub fn on_sent(&mut self, packets_out: u32, sent: Instant) -> TxRate {
        if packets_out == 0 {
            self.first_tx = Some(sent);
            self.delivered_mstamp = Some(sent);
        }
        TxRate {
            sent,
            first_tx: self.first_tx.unwrap_or(sent),
            delivered_mstamp: self.delivered_mstamp,
            delivered: self.delivered,
            is_app_limited: self.app_limited != 0,
        }
    }

    /// `tcp_count_delivered` then `tcp_rate_skb_delivered`: the segment with
    /// snapshot `tx`, ending at `end_seq`, is newly ACKed (`sacked` false) or
    /// SACKed. The most recently sent such segment of the ACK sets the
    /// sample's start; a SACKed one gives up its snapshot so the cumulative
    /// ACK that later covers it gives no second sample.
    pub fn on_delivered(&mut self, tx: &mut TxRate, end_seq: u32, sacked: bool, retrans: bool, rs: &mut RateSample) {
        self.delivered += 1;
        let Some(mstamp) = tx.delivered_mstamp else { return };
        let newest = self.first_tx.unwrap_or(tx.sent);
        if rs.prior_delivered == 0 || sent_after(tx.sent, newest, end_seq, rs.last_end_seq) {
            rs.prior_delivered = tx.delivered;
            rs.prior_mstamp = Some(mstamp);
            rs.is_app_limited = tx.is_app_limited;
            rs.is_retrans = retrans;
            rs.last_end_seq = end_seq;
            self.first_tx = Some(tx.sent);
            rs.interval_us = micros(tx.sent - tx.first_tx) as i64;
        }
        if sacked {
            tx.delivered_mstamp = None;
        }
    }

    /// `tcp_rate_gen`: closes the sample of an ACK processed at `now` that
    /// newly delivered `delivered` packets and marked `lost` lost.
    /// `reneged`: the receiver dropped SACKed data (samples would
    /// overestimate). `min_rtt`: a shorter interval is not a credible
    /// round trip and gives an invalid sample.
    pub fn generate(
        &mut self,
        now: Instant,
        delivered: u32,
        lost: u32,
        reneged: bool,
        min_rtt: Option<Duration>,
        rs: &mut RateSample,
    ) {
        // The app-limited bubble is gone once its last packet is delivered.
        if self.app_limited != 0 && self.delivered > self.app_limited {
            self.app_limited = 0;
        }
        if delivered > 0 {
            self.delivered_mstamp = Some(now);
        }
        rs.acked_sacked = delivered;
        rs.losses = lost;
        let Some(prior) = rs.prior_mstamp.filter(|_| !reneged) else {
            rs.delivered = -1;
            rs.interval_us = -1;
            return;
        };
        rs.delivered = i64::try_from(self.delivered.saturating_sub(rs.prior_delivered)).unwrap_or(i64::MAX);
        let snd_us = rs.interval_us.max(0) as u64;
        let ack_us = micros(now - prior);
        rs.interval_us = snd_us.max(ack_us) as i64;
        rs.snd_interval_us = snd_us;
        rs.rcv_interval_us = ack_us;
        if min_rtt.is_some_and(|m| (rs.interval_us as u64) < micros(m)) {
            rs.interval_us = -1;
            return;
        }
        // Keep the last non-app-limited sample, or the best app-limited one.
        if !rs.is_app_limited
            || u128::from(rs.delivered as u64) * u128::from(self.rate_interval_us)
                >= u128::from(self.rate_delivered) * rs.interval_us as u128
        {
            self.rate_delivered = rs.delivered as u64;
            self.rate_interval_us = rs.interval_us as u64;
            self.rate_app_limited = rs.is_app_limited;
        }
    }

    /// `tcp_rate_check_app_limited`, when the application writes: less than
    /// a segment waiting (`unsent < mss`), not cwnd-limited, and every lost
    /// packet retransmitted means the flow runs out of data, not of
    /// network: mark it app-limited until what is in flight is delivered.
    pub fn check_app_limited(
        &mut self,
        unsent: u64,
        mss: u32,
        in_flight: u32,
        cwnd: u32,
        lost_out: u32,
        retrans_out: u32,
    ) {
        if unsent < u64::from(mss) && in_flight < cwnd && lost_out <= retrans_out {
            self.set_app_limited(in_flight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    /// One ACK per segment for `txs` (end sequence `(i + 1) * 1000`) at the
    /// given times; returns each ACK's sample.
    fn ack_each(d: &mut DeliveryRate, txs: &mut [TxRate], at: &[u64], min_rtt: Option<Duration>) -> Vec<RateSample> {
        let n = txs.len() as u32;
        let mut out = Vec::new();
        for (i, t) in txs.iter_mut().enumerate() {
            let mut rs = RateSample::new(n - i as u32);
            d.on_delivered(t, (i as u32 + 1) * 1000, false, false, &mut rs);
            d.generate(ms(at[i]), 1, 0, false, min_rtt, &mut rs);
            out.push(rs);
        }
        out
    }

    /// Ten segments sent 1 ms apart from idle, ACKed 1 ms apart 100 ms
    /// later: every sample runs from the idle start (the ACK phase is the
    /// longer), so the last covers the whole window, 10 packets in 109 ms.
    #[test]
    fn a_window_gives_a_sample_over_the_longer_phase() {
        let mut d = DeliveryRate::default();
        let mut tx: Vec<TxRate> = (0..10).map(|i| d.on_sent(i, ms(u64::from(i)))).collect();
        let at: Vec<u64> = (100..110).collect();
        let rs = ack_each(&mut d, &mut tx, &at, Some(Duration::from_millis(90)));
        assert_eq!(d.delivered(), 10);
        assert_eq!((rs[0].delivered, rs[0].interval_us), (1, 100_000));
        assert_eq!((rs[1].delivered, rs[1].interval_us, rs[1].snd_interval_us), (2, 101_000, 1_000));
        assert_eq!((rs[9].delivered, rs[9].interval_us), (10, 109_000));
        assert_eq!(d.rate(1000), (10 * 1000 * 1_000_000 / 109_000, false));
        // An interval under the minimum RTT is not a round trip: invalid.
        let mut d = DeliveryRate::default();
        let mut tx = [d.on_sent(0, ms(0))];
        let rs = ack_each(&mut d, &mut tx, &[50], Some(Duration::from_millis(90)));
        assert_eq!((rs[0].delivered, rs[0].interval_us), (1, -1));
        assert!(!rs[0].is_valid());
    }

    /// With ACK compression the ACK phase is the shorter, and the send
    /// phase bounds the sample. A first packet (sent at 0) is delivered at
    /// 100 ms; four more, sent 100 to 130 ms while it was in flight, are all
    /// acknowledged at 135 ms. Their ACK phase is 35 ms (from the last
    /// delivery); their send phase runs from the send of the packet whose
    /// delivery opened the window (0) to the newest's send (130 ms). The
    /// sample is 4 packets over 130 ms, not over the compressed 35.
    #[test]
    fn ack_compression_falls_back_on_the_send_phase() {
        let mut d = DeliveryRate::default();
        let mut first = d.on_sent(0, ms(0));
        let mut rs = RateSample::new(1);
        d.on_delivered(&mut first, 1000, false, false, &mut rs);
        d.generate(ms(100), 1, 0, false, None, &mut rs);
        let mut tx: Vec<TxRate> = (0..4).map(|i| d.on_sent(1 + i, ms(100 + 10 * u64::from(i)))).collect();
        let mut rs = RateSample::new(4);
        for (i, t) in tx.iter_mut().enumerate() {
            d.on_delivered(t, 2000 + i as u32 * 1000, false, false, &mut rs);
        }
        d.generate(ms(135), 4, 0, false, None, &mut rs);
        assert_eq!(rs.prior_delivered, 1);
        assert_eq!(
            (rs.delivered, rs.snd_interval_us, rs.rcv_interval_us, rs.interval_us),
            (4, 130_000, 35_000, 130_000)
        );
    }

    /// A flow that had nothing to send is app-limited until the packets in
    /// flight then are delivered; its samples say so. An app-limited
    /// sample lower than the last good one does not replace it as the
    /// delivery rate; a higher one does, marked app-limited.
    #[test]
    fn the_sample_of_an_app_limited_ack_is_marked_and_kept_out() {
        let mut d = DeliveryRate::default();
        let mut tx: Vec<TxRate> = (0..4).map(|i| d.on_sent(i, ms(0))).collect();
        let rs = ack_each(&mut d, &mut tx, &[100, 110, 120, 130], None);
        assert!(rs.iter().all(|r| !r.is_app_limited));
        let busy = 4 * 1000 * 1_000_000 / 130_000;
        assert_eq!(d.rate(1000), (busy, false));

        // Nothing left to send, nothing in flight: app-limited until the
        // next packet is delivered.
        d.check_app_limited(0, 1000, 0, 10, 0, 0);
        assert!(d.is_app_limited());
        assert_eq!(d.app_limited_mark(), 4);
        let mut one = [d.on_sent(0, ms(200))];
        assert!(one[0].is_app_limited);
        let rs = ack_each(&mut d, &mut one, &[300], None);
        assert!(rs[0].is_app_limited, "the sample of the app-limited packet is marked");
        assert_eq!((rs[0].delivered, rs[0].interval_us), (1, 100_000));
        assert!(!d.is_app_limited(), "the bubble is delivered");
        assert_eq!(d.rate(1000), (busy, false), "a lower app-limited sample is kept out");

        // An app-limited sample above the last good one is taken.
        d.check_app_limited(0, 1000, 0, 10, 0, 0);
        let mut two = [d.on_sent(0, ms(400)), d.on_sent(1, ms(400))];
        let rs = ack_each(&mut d, &mut two, &[410, 420], None);
        assert!(rs[1].is_app_limited);
        assert_eq!(d.rate(1000), (2 * 1000 * 1_000_000 / 20_000, true));

        // Not app-limited when a segment's worth is waiting, or cwnd-limited,
        // or a lost packet still waits for its retransmission.
        let mut d = DeliveryRate::default();
        d.check_app_limited(1000, 1000, 0, 10, 0, 0);
        d.check_app_limited(0, 1000, 10, 10, 0, 0);
        d.check_app_limited(0, 1000, 0, 10, 1, 0);
        assert!(!d.is_app_limited());
    }

    /// A SACKed segment gives up its snapshot: whoever tracks its marks (the
    /// scoreboard, which delivers a SACKed segment only once) cannot take a
    /// second sample from it. Reneging invalidates a sample.
    #[test]
    fn a_sacked_segment_is_sampled_once() {
        let mut d = DeliveryRate::default();
        let mut a = d.on_sent(0, ms(0));
        let mut b = d.on_sent(1, ms(1));
        let mut rs = RateSample::new(2);
        d.on_delivered(&mut b, 2000, true, false, &mut rs);
        d.generate(ms(100), 1, 0, false, None, &mut rs);
        assert_eq!(b.delivered_mstamp, None);
        assert_eq!(rs.delivered, 1);
        let mut rs = RateSample::new(1);
        d.on_delivered(&mut a, 1000, false, false, &mut rs);
        assert_eq!(rs.prior_mstamp, Some(ms(0)));
        d.generate(ms(101), 1, 0, false, None, &mut rs);
        assert_eq!(d.delivered(), 2);
        // The SACKed segment's snapshot is spent: offered again, it sets no sample.
        let mut again = RateSample::new(0);
        d.on_delivered(&mut b, 2000, false, false, &mut again);
        assert_eq!((again.prior_mstamp, again.prior_delivered), (None, 0));
        // Reneging invalidates the sample.
        let mut c = d.on_sent(0, ms(200));
        let mut rs = RateSample::new(1);
        d.on_delivered(&mut c, 3000, false, false, &mut rs);
        d.generate(ms(300), 1, 0, true, None, &mut rs);
        assert_eq!((rs.delivered, rs.interval_us), (-1, -1));
    }
}
