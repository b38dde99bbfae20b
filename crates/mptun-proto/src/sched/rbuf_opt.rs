//! The multipath-tcp.org kernel's receive-buffer optimisation
//! (`mptcp_rcv_buf_optimization` in `mptcp_sched.c`, copied into
//! `mptcp_blest.c`), which its schedulers run from `mptcp_next_segment`
//! when the connection cannot send new data: the peer's window is full
//! (`penal`), or everything is sent and the send buffer is two-thirds full
//! (`SOCK_NOSPACE` with less than `sk_stream_min_wspace` left). The slow
//! subflows holding the oldest data are halved, once per srtt of the fast
//! one, in the first case and in the second once the buffer is full
//! (`!sk_stream_memory_free`). Either way the oldest data not DATA_ACKed
//! goes again on the fast subflow when the subflows holding it are much
//! slower (4× its srtt) or their window is tiny (≤ 4 segments).
//!
//! Written on the scheduler framework: the halving is a
//! [`Request::ReduceWindow`], the retransmission a [`Request::Reinject`]
//! of the head, at most one segment, as the kernel sends one skb.
//! `last_rbuf_opti` starts unset here (the kernel starts it at the
//! subflow's creation), so the first halving may come within the first
//! srtt.

use super::{ConnView, Pick, Request, SubflowView};
use mptun_cc::{CaState, WindowCut};
use mptun_time::Instant;
use std::collections::VecDeque;

/// Why the connection could not send new data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The peer's connection-level window is full (`!tcp_snd_wnd_test`):
    /// halve the slow subflows (the kernel's `penal = 1`).
    Window,
    /// Everything written is on a subflow and the send buffer is two-thirds
    /// full (`SOCK_NOSPACE`, `penal = 0`): halve only once it is full.
    SendBuffer,
}

impl Blocked {
    /// Which of the two, if either, holds for `conn`.
    pub fn of(conn: &ConnView) -> Option<Blocked> {
        if conn.unsent() > 0 && conn.nxt >= conn.wnd_end {
            Some(Blocked::Window)
        } else if conn.unsent() == 0 && 3 * conn.buffered() as usize >= 2 * conn.send_buffer {
            Some(Blocked::SendBuffer)
        } else {
            None
        }
    }
}

/// Per-subflow state of the optimisation.
#[derive(Clone, Debug, Default)]
pub struct RcvBufOpt {
    /// `last_rbuf_opti` of each subflow (the fast one that penalised).
    last: Vec<Option<Instant>>,
}

impl RcvBufOpt {
    /// Runs the optimisation with `fast` the subflow the scheduler would
    /// send on; pushes its requests onto `out`. Returns whether it went
    /// past the "optional and the send buffer not full" exit, which BLEST
    /// records as a retransmission of the slow flow (`retrans_flag`).
    pub fn run(
        &mut self,
        subflows: &[SubflowView],
        conn: &ConnView,
        fast: &SubflowView,
        why: Blocked,
        out: &mut VecDeque<Request>,
    ) -> bool {
        if conn.buffered() == 0 {
            return false;
        }
        // The subflows (other than `fast`) that carry the oldest data.
        let holders =
            || subflows.iter().filter(|v| v.id != fast.id && v.unacked_data.is_some_and(|(a, _)| a == conn.una));
        let fast_srtt = fast.srtt.map_or(u64::MAX, |d| d.as_micros() as u64);
        let srtt = |v: &SubflowView| v.srtt.map_or(u64::MAX, |d| d.as_micros() as u64);
        let penal = why == Blocked::Window || conn.buffered() as usize >= conn.send_buffer;
        if penal {
            let due =
                self.last.get(fast.id).copied().flatten().is_none_or(|t| fast.srtt.is_some_and(|r| conn.now - t >= r));
            if due {
                let mut cut = false;
                for v in holders().filter(|v| fast_srtt < srtt(v) && v.ca_state == CaState::Open) {
                    out.push_back(Request::ReduceWindow { id: v.id, cut: WindowCut::Halve });
                    cut = true;
                }
                if cut {
                    if self.last.len() <= fast.id {
                        self.last.resize(fast.id + 1, None);
                    }
                    self.last[fast.id] = Some(conn.now);
                }
            }
        }
        // Not yet on `fast`: take it there if a holder is tiny or much slower.
        let on_fast = fast.unacked_data.is_some_and(|(a, _)| a == conn.una);
        if !on_fast {
            let mut retrans = false;
            for v in holders() {
                if v.cwnd <= 4 {
                    retrans = true;
                    break;
                }
                if fast_srtt.saturating_mul(4) >= srtt(v) {
                    retrans = false;
                    break;
                }
                retrans = true;
            }
            if retrans {
                let to = conn.una + u64::from(fast.mss.max(1));
                out.push_back(Request::Reinject { on: fast.id, from: conn.una, to: to.min(conn.nxt) });
            }
        }
        penal
    }

    /// The optimisation when the connection is blocked (`Blocked::of`),
    /// with `pick` the scheduler's own choice of subflow now (the kernel's
    /// `get_subflow` of that scheduler; nothing when it declines, as BLEST
    /// and ECF may): what minRTT's, BLEST's and ECF's `on_blocked` do.
    /// Returns what [`RcvBufOpt::run`] returns, false when not blocked.
    pub fn when_blocked(
        &mut self,
        subflows: &[SubflowView],
        conn: &ConnView,
        pick: Option<Pick>,
        out: &mut VecDeque<Request>,
    ) -> bool {
        let Some(why) = Blocked::of(conn) else { return false };
        let Some(pick) = pick else { return false };
        let Some(sk) = subflows.iter().find(|v| v.id == pick.id) else { return false };
        self.run(subflows, conn, sk, why, out)
    }

    /// Subflow `id` is gone.
    pub fn forget(&mut self, id: usize) {
        if let Some(t) = self.last.get_mut(id) {
            *t = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mptun_time::Duration;

    fn v(id: usize, srtt_ms: u64, cwnd: u32, holds_head: bool) -> SubflowView {
        SubflowView {
            id,
            cwnd,
            srtt: Some(Duration::from_millis(srtt_ms)),
            mss: 1000,
            unacked_data: holds_head.then_some((100, 5000)),
            ..SubflowView::default()
        }
    }

    fn window_full(now_ms: u64) -> ConnView {
        ConnView {
            una: 100,
            nxt: 9000,
            write_seq: 20_000,
            wnd_end: 9000,
            send_buffer: 1 << 20,
            now: Instant::from_millis(now_ms),
            ..ConnView::default()
        }
    }

    #[test]
    fn a_full_window_halves_the_slow_holder_and_sends_the_head_on_the_fast_subflow() {
        let (fast, slow) = (v(0, 10, 20, false), v(1, 100, 20, true));
        let mut o = RcvBufOpt::default();
        let mut out = VecDeque::new();
        let conn = window_full(1000);
        assert_eq!(Blocked::of(&conn), Some(Blocked::Window));
        assert!(o.run(&[fast, slow], &conn, &fast, Blocked::Window, &mut out));
        assert_eq!(
            out.drain(..).collect::<Vec<_>>(),
            [Request::ReduceWindow { id: 1, cut: WindowCut::Halve }, Request::Reinject { on: 0, from: 100, to: 1100 }]
        );
        // Within one fast srtt: no second halving, the head still goes.
        o.run(&[fast, slow], &window_full(1005), &fast, Blocked::Window, &mut out);
        assert_eq!(out.drain(..).collect::<Vec<_>>(), [Request::Reinject { on: 0, from: 100, to: 1100 }]);
        o.run(&[fast, slow], &window_full(1011), &fast, Blocked::Window, &mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn a_holder_less_than_four_times_slower_keeps_the_head_unless_its_window_is_tiny() {
        let (fast, slow) = (v(0, 10, 20, false), v(1, 30, 20, true));
        let mut out = VecDeque::new();
        RcvBufOpt::default().run(&[fast, slow], &window_full(0), &fast, Blocked::SendBuffer, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let tiny = v(1, 30, 4, true);
        RcvBufOpt::default().run(&[fast, tiny], &window_full(0), &fast, Blocked::SendBuffer, &mut out);
        assert_eq!(out.drain(..).collect::<Vec<_>>(), [Request::Reinject { on: 0, from: 100, to: 1100 }]);
        // A slow holder outside CA Open is not halved.
        let mut lossy = v(1, 100, 20, true);
        lossy.ca_state = CaState::Recovery;
        RcvBufOpt::default().run(&[fast, lossy], &window_full(0), &fast, Blocked::Window, &mut out);
        assert_eq!(out.drain(..).collect::<Vec<_>>(), [Request::Reinject { on: 0, from: 100, to: 1100 }]);
    }
}
