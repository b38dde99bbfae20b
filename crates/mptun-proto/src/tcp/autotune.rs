//! Buffer autotuning: Linux's dynamic right-sizing of the receive buffer
//! (DRS, `tcp_rcv_space_adjust`), the receiver-side RTT estimate it runs on
//! (`tcp_rcv_rtt_measure_ts`), and send-buffer growth (`tcp_sndbuf_expand`).
//!
//! The state is kept out of the subflow so the MPTCP connection, which sizes
//! its own connection-level receive buffer the same way
//! (`mptcp_rcv_space_adjust`), can use the same types.

use mptun_time::{Duration, Instant};

use super::config::TCP_INIT_CWND;

/// Segments of slack DRS adds on top of twice what was read in an RTT (Linux
/// `tcp_rcv_space_adjust`: `rcvwin = 2 * copied + 16 * advmss`).
const DRS_SLACK_SEGS: usize = 16;

/// Receiver-side RTT samples above this are taken for clock trouble (a
/// timestamp echo from long ago) and ignored.
const RCV_RTT_MAX_MS: u32 = 60_000;

/// The receiver's RTT estimate from timestamp echoes (Linux `rcv_rtt_est`),
/// which a pure receiver has even though it never samples `srtt`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RcvRtt {
    /// Smoothed estimate in microseconds; zero before the first sample.
    us: u32,
}

impl RcvRtt {
    /// Feeds the age, in timestamp milliseconds, of an echoed timestamp.
    pub(crate) fn sample_ms(&mut self, ms: u32) {
        if ms < RCV_RTT_MAX_MS {
            let us = (ms.max(1)) * 1000;
            self.us = if self.us == 0 { us } else { (7 * self.us + us) / 8 };
        }
    }

    /// The estimate, once there is one.
    pub(crate) fn get(&self) -> Option<Duration> {
        (self.us > 0).then(|| Duration::from_micros(self.us as u64))
    }
}

/// Linux DRS (`rcvq_space`): once per RTT, compares what the application
/// read in that RTT with the previous measurement and proposes a receive
/// buffer that holds twice as much, plus room for growth.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RcvSpace {
    /// Bytes read in the best RTT so far (Linux `rcvq_space.space`).
    space: usize,
    /// `read` at the start of the current measurement (`rcvq_space.seq`).
    copied_at: u64,
    /// Start of the current measurement (`rcvq_space.time`).
    time: Instant,
    /// Bytes the application has read in total (`copied_seq`).
    read: u64,
}

impl RcvSpace {
    /// Starts measuring at `now` with an initial `space` (see [`Self::initial_space`]).
    pub(crate) fn new(now: Instant, space: usize) -> Self {
        RcvSpace { space, copied_at: 0, time: now, read: 0 }
    }

    /// Linux `tcp_init_buffer_space`: `min(rcv_wnd, TCP_INIT_CWND × advmss)`.
    pub(crate) fn initial_space(advmss: usize, rcv_wnd: usize) -> usize {
        (TCP_INIT_CWND as usize * advmss).min(rcv_wnd)
    }

    /// Counts `n` bytes read by the application.
    pub(crate) fn on_read(&mut self, n: usize) {
        self.read += n as u64;
    }

    /// Once `rtt` has passed since the last measurement, closes it: returns
    /// the receive buffer DRS wants if the application read more than ever
    /// before (uncapped: the caller clamps it to its maximum and only grows).
    pub(crate) fn adjust(&mut self, now: Instant, rtt: Duration, mss: usize) -> Option<usize> {
        if now - self.time < rtt {
            return None;
        }
        let copied = (self.read - self.copied_at) as usize;
        let mut want = None;
        if copied > self.space {
            let mut rcvwin = 2 * copied + DRS_SLACK_SEGS * mss;
            let grow = rcvwin * (copied - self.space) / self.space.max(1);
            rcvwin += 2 * grow;
            want = Some(rcvwin);
            self.space = copied;
        }
        self.copied_at = self.read;
        self.time = now;
        want
    }
}

/// Linux `tcp_sndbuf_expand`: a send buffer with room for `factor`
/// congestion windows of segments (the controller's `sndbuf_expand`, 2 by
/// default, 3 for BBR), never shrinking and never past `max`.
pub(crate) fn sndbuf_expand(limit: usize, factor: u32, cwnd: u32, mss: u32, max: usize) -> usize {
    let want = factor as usize * cwnd as usize * mss as usize;
    limit.max(want.min(max))
}
