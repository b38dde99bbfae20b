//! minRTT, the default scheduler of the out-of-tree multipath-tcp.org
//! kernel (v0.96, `net/mptcp/mptcp_sched.c`, `get_available_subflow` and
//! `mptcp_next_segment`), with which that kernel's coupled controllers
//! (LIA, OLIA, BALIA) were built and measured.
//!
//! Two things set it apart from upstream Linux's linger-time scheduler
//! ([`DefaultScheduler`](super::DefaultScheduler)):
//!
//! * It ranks by smoothed RTT: the lowest srtt among the subflows that can
//!   send now wins; backup subflows only when every subflow is a backup.
//! * A subflow takes only what its congestion window can send at once:
//!   `mptcp_is_available` refuses a subflow whose window is full (packets
//!   in flight ≥ cwnd) or whose unsent queue already fills the room left,
//!   and the burst is that room, `(cwnd − in_flight) · mss`. A subflow
//!   whose window collapsed holds at most a window of the connection's
//!   data, never a 64 KiB backlog that the receiver waits for while the
//!   other subflows fill its buffer (head-of-line blocking).
//!
//! A subflow in RTO recovery (CA Loss) is not available, as there. The
//! reference's check lets one transmit loop queue up to twice the room
//! (the unsent bytes are tested against the room before the new burst
//! adds to them); here the burst is the room less what is already unsent,
//! so the unsent queue never exceeds the window's room. When no new data
//! can go (the peer's window is full, or the send buffer is), it runs that
//! kernel's receive-buffer optimisation ([`RcvBufOpt`]: the slow subflows
//! holding the oldest data halved, that data sent again on the fast one),
//! as `mptcp_next_segment` does. (The `mptcp-org` penalty policy of
//! [`penalise`](super::penalise) is that optimisation on top of upstream's
//! linger-time pick instead.)

use super::rbuf_opt::RcvBufOpt;
use super::{ConnView, Pick, Request, Scheduler, SubflowView};
use mptun_cc::CaState;
use std::collections::VecDeque;

/// The multipath-tcp.org kernel's default scheduler ("default" there,
/// `minrtt` here and in the literature).
#[derive(Clone, Debug, Default)]
pub struct MinRttScheduler {
    rbuf: RcvBufOpt,
    requests: VecDeque<Request>,
}

impl MinRttScheduler {
    /// A scheduler with no history: the pick reads the views only, the
    /// receive-buffer optimisation keeps when it last penalised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes subflow `v` may still take now, 0 when it is not available
    /// (`mptcp_is_available`).
    pub fn room(v: &SubflowView) -> usize {
        if !v.available || v.ca_state == CaState::Loss || v.in_flight >= v.cwnd || v.send_space == 0 {
            return 0;
        }
        let room = (v.cwnd - v.in_flight) as usize * v.mss.max(1) as usize;
        room.saturating_sub(v.unsent).min(v.send_space)
    }
}

/// minRTT's pick (`get_available_subflow` and the burst of
/// `mptcp_next_segment`), which BLEST, ECF and redundant start from.
pub fn pick(subflows: &[SubflowView]) -> Option<Pick> {
    let live = || subflows.iter().filter(|v| v.available);
    // Backups carry data only when every usable subflow is one
    // (`cnt_established == cnt_backups`).
    let all_backup = live().all(|v| v.backup);
    // A subflow without an RTT sample yet ranks after every measured one.
    let rank = |v: &SubflowView| v.srtt.map_or(u128::MAX, |r| r.as_nanos());
    let best = live()
        .filter(|v| v.backup == all_backup)
        .filter(|v| MinRttScheduler::room(v) > 0)
        .min_by_key(|v| (rank(v), v.id))?;
    Some(Pick::one(best.id, MinRttScheduler::room(best)))
}

impl Scheduler for MinRttScheduler {
    fn name(&self) -> &'static str {
        "minrtt"
    }

    fn select(&mut self, subflows: &[SubflowView], _conn: &ConnView) -> Option<Pick> {
        pick(subflows)
    }

    fn on_pushed(&mut self, _id: usize, _bytes: usize, _subflows: &[SubflowView]) {}

    fn acts_when_blocked(&self) -> bool {
        true
    }

    fn on_blocked(&mut self, subflows: &[SubflowView], conn: &ConnView) {
        self.rbuf.when_blocked(subflows, conn, pick(subflows), &mut self.requests);
    }

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn forget(&mut self, id: usize) {
        self.rbuf.forget(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mptun_time::Duration;

    fn view(id: usize, srtt_ms: u64, cwnd: u32, in_flight: u32) -> SubflowView {
        SubflowView {
            id,
            available: true,
            backup: false,
            queued: in_flight as usize * 1000,
            send_space: 1_000_000,
            pacing_rate: 1_000_000,
            cwnd,
            ssthresh: u32::MAX,
            srtt: Some(Duration::from_millis(srtt_ms)),
            ca_state: CaState::Open,
            cwnd_limited: true,
            in_flight,
            unsent: 0,
            mss: 1000,
            ..SubflowView::default()
        }
    }

    fn pick(v: &[SubflowView]) -> Option<Pick> {
        MinRttScheduler::new().select(v, &ConnView::default())
    }

    #[test]
    fn the_lowest_srtt_with_room_wins_and_gets_its_room() {
        let v = [view(0, 60, 10, 4), view(1, 20, 10, 7)];
        // Subflow 1 is faster: 3 segments of room.
        assert_eq!(pick(&v), Some(Pick::one(1, 3000)));
        // Its window full: the slower one, with its 6 segments.
        let v = [view(0, 60, 10, 4), view(1, 20, 10, 10)];
        assert_eq!(pick(&v), Some(Pick::one(0, 6000)));
        // Both full: nothing, however much data waits.
        let v = [view(0, 60, 10, 10), view(1, 20, 10, 12)];
        assert_eq!(pick(&v), None);
    }

    #[test]
    fn unsent_data_counts_against_the_room() {
        let mut a = view(0, 20, 10, 4);
        a.unsent = 2500;
        assert_eq!(pick(&[a]), Some(Pick::one(0, 3500)));
        // What is unsent already fills the window: not available.
        a.unsent = 6000;
        let b = view(1, 80, 4, 0);
        assert_eq!(pick(&[a, b]), Some(Pick::one(1, 4000)));
        // The send buffer bounds the burst too.
        let mut c = view(2, 10, 100, 0);
        c.send_space = 1500;
        assert_eq!(pick(&[c]), Some(Pick::one(2, 1500)));
    }

    #[test]
    fn backups_only_when_every_subflow_is_one() {
        let mut b = view(1, 5, 10, 0);
        b.backup = true;
        let a = view(0, 50, 10, 10);
        // The active subflow is full: wait rather than use the backup.
        assert_eq!(pick(&[a, b]), None);
        let mut a2 = a;
        a2.available = false;
        assert_eq!(pick(&[a2, b]).map(|p| p.id), Some(1));
        let mut b2 = view(2, 9, 10, 0);
        b2.backup = true;
        // Among backups, the lowest srtt.
        assert_eq!(pick(&[a2, b2, b]).map(|p| p.id), Some(1));
    }

    /// When the peer's window is full, the slow subflow holding the
    /// oldest data is halved and that data goes again on the fast one.
    #[test]
    fn a_full_window_runs_the_receive_buffer_optimisation() {
        let mut s = MinRttScheduler::new();
        let fast = view(0, 10, 10, 2);
        let mut slow = view(1, 100, 10, 10);
        slow.unacked_data = Some((500, 9000));
        let conn = ConnView {
            una: 500,
            nxt: 9000,
            write_seq: 50_000,
            wnd_end: 9000,
            send_buffer: 1 << 20,
            ..ConnView::default()
        };
        assert!(s.acts_when_blocked());
        s.on_blocked(&[fast, slow], &conn);
        assert_eq!(s.poll_request(), Some(Request::ReduceWindow { id: 1, cut: mptun_cc::WindowCut::Halve }));
        assert_eq!(s.poll_request(), Some(Request::Reinject { on: 0, from: 500, to: 1500 }));
        assert_eq!(s.poll_request(), None);
        // Not blocked (window open): nothing.
        s.on_blocked(&[fast, slow], &ConnView { wnd_end: 1 << 20, ..conn });
        assert_eq!(s.poll_request(), None);
    }

    #[test]
    fn rto_recovery_unavailable_and_no_rtt_ranks_last() {
        let mut a = view(0, 10, 10, 0);
        a.ca_state = CaState::Loss;
        let b = view(1, 90, 10, 0);
        assert_eq!(pick(&[a, b]).map(|p| p.id), Some(1));
        let mut c = view(2, 0, 10, 0);
        c.srtt = None;
        assert_eq!(pick(&[c, b]).map(|p| p.id), Some(1));
        assert_eq!(pick(&[c]).map(|p| p.id), Some(2));
    }
}
