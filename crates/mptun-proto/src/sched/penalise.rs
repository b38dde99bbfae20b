//! Slow-subflow penalties on top of the default scheduler, as A/B policies.
//!
//! * `penalise` — patch 1/3 of the reference series
//!   ("[PATCH mptcp-next 0/3] mptcp: sched: penalise a slow subflow", #345 of
//!   the multipath-tcp/mptcp_net-next tracker): once a
//!   subflow has been picked, flag a *slow* one for a cwnd halving, applied
//!   later in that subflow's own push path. Slow means its average pacing
//!   rate is below `factor` × the fastest active subflow's; the fastest must
//!   be cwnd-limited and the slow one in CA_Open; at most once per RTT of the
//!   slow subflow. No send-buffer gate (the reference explains why it never fires).
//! * `penalise-guarded` — 1/3 + 2/3: skip while the application has queued
//!   past the send-window edge (`write_seq > wnd_end`): then the receiver,
//!   not our cwnd, is the bottleneck and halving only sheds throughput.
//! * `mptcp-org` — the out-of-tree kernel's `mptcp_rcv_buf_optimization`:
//!   slow = higher srtt, acting only when the connection *is* receive-window
//!   limited; halve cwnd (min 1) and ssthresh (min 2) once per srtt and
//!   reinject the head of the slow subflow's data on the fast one.
//!
//! Each is a scheduler like any other: it picks as the default does and
//! asks the connection for the halving ([`Request::ReduceWindow`]) and, for
//! `mptcp-org`, the reinjection ([`Request::ReinjectHead`]).
//!
//! Counters: `MPTcpExtPenalCandidate` each time a slow subflow qualified
//! (before the guard), `MPTcpExtCwndPenalized` each halving applied.

use super::{ConnView, DefaultScheduler, Pick, Policy, Request, Scheduler, SubflowView};
use crate::counters::Counters;
use mptun_cc::{CaState, WindowCut};
use mptun_time::{Duration, Instant};
use std::collections::VecDeque;

/// Tunables of the penalty.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PenaltyConfig {
    /// A subflow is slow below `factor` × the fastest subflow's rate (reference: ½).
    pub factor: f64,
    /// Minimum spacing of two halvings of one subflow, in units of its srtt (reference: 1 RTT).
    pub interval_rtts: f64,
}

impl Default for PenaltyConfig {
    fn default() -> Self {
        PenaltyConfig { factor: 0.5, interval_rtts: 1.0 }
    }
}

/// What the policy decided after a pick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PenaltyDecision {
    /// A slow subflow qualified (`MPTcpExtPenalCandidate`).
    candidate: bool,
    /// Halve this subflow's cwnd in its push path.
    penalise: Option<usize>,
    /// mptcp-org: reinject the head of this (slow) subflow's data on `fast`.
    reinject_head: Option<(usize, usize)>,
}

/// The default scheduler plus a penalty policy.
#[derive(Debug)]
pub struct PenaltyScheduler {
    inner: DefaultScheduler,
    policy: Policy,
    cfg: PenaltyConfig,
    /// Last time each subflow was penalised.
    last: Vec<Option<Instant>>,
    /// What the last pick asks of the connection.
    requests: VecDeque<Request>,
    /// `MPTcpExtPenalCandidate`.
    penal_candidate: u64,
}

impl PenaltyScheduler {
    /// The default scheduler with `policy`'s penalty decisions on top.
    pub fn new(policy: Policy, cfg: PenaltyConfig) -> Self {
        PenaltyScheduler {
            inner: DefaultScheduler::new(),
            policy,
            cfg,
            last: Vec::new(),
            requests: VecDeque::new(),
            penal_candidate: 0,
        }
    }

    /// The policy it runs, for reports.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    fn due(&self, v: &SubflowView, now: Instant) -> bool {
        let rtt = v.srtt.unwrap_or(Duration::from_millis(200));
        let gap = Duration::from_secs_f64(rtt.as_secs_f64() * self.cfg.interval_rtts);
        self.last.get(v.id).copied().flatten().is_none_or(|t| now - t >= gap)
    }

    fn mark(&mut self, id: usize, now: Instant) {
        if self.last.len() <= id {
            self.last.resize(id + 1, None);
        }
        self.last[id] = Some(now);
    }

    /// Patch 1/3 (and 2/3 when `guarded`).
    fn rate_trigger(&mut self, subflows: &[SubflowView], conn: &ConnView, guarded: bool) -> PenaltyDecision {
        let mut d = PenaltyDecision::default();
        let active: Vec<&SubflowView> = subflows.iter().filter(|v| v.available && !v.backup).collect();
        let rate =
            |s: &Self, v: &SubflowView| s.inner.avg_pacing_rate(v.id).filter(|&r| r > 0).unwrap_or(v.pacing_rate);
        let Some(fast) = active.iter().max_by_key(|v| rate(self, v)) else { return d };
        if !fast.cwnd_limited {
            return d;
        }
        let fast_rate = rate(self, fast) as f64;
        let slow = active
            .iter()
            .filter(|v| v.id != fast.id && v.ca_state == CaState::Open)
            .filter(|v| (rate(self, v) as f64) < self.cfg.factor * fast_rate)
            .find(|v| self.due(v, conn.now));
        let Some(slow) = slow else { return d };
        d.candidate = true;
        if guarded && conn.rwnd_limited {
            return d;
        }
        self.mark(slow.id, conn.now);
        d.penalise = Some(slow.id);
        d
    }

    /// The out-of-tree kernel's `mptcp_rcv_buf_optimization`.
    fn mptcp_org(&mut self, subflows: &[SubflowView], conn: &ConnView) -> PenaltyDecision {
        let mut d = PenaltyDecision::default();
        if !conn.rwnd_limited {
            return d;
        }
        let active: Vec<&SubflowView> = subflows.iter().filter(|v| v.available && v.srtt.is_some()).collect();
        let Some(fast) = active.iter().min_by_key(|v| v.srtt) else { return d };
        let Some(slow) = active.iter().filter(|v| v.srtt > fast.srtt).max_by_key(|v| v.srtt) else { return d };
        if !self.due(slow, conn.now) {
            return d;
        }
        d.candidate = true;
        self.mark(slow.id, conn.now);
        d.penalise = Some(slow.id);
        d.reinject_head = Some((slow.id, fast.id));
        d
    }
}

impl PenaltyScheduler {
    /// The policy's decision once a subflow was picked.
    fn decide(&mut self, subflows: &[SubflowView], conn: &ConnView) -> PenaltyDecision {
        match self.policy {
            Policy::Penalise => self.rate_trigger(subflows, conn, false),
            Policy::PenaliseGuarded => self.rate_trigger(subflows, conn, true),
            Policy::MptcpOrg => self.mptcp_org(subflows, conn),
            // The other policies are never built with a penalty (see `new_scheduler`).
            _ => PenaltyDecision::default(),
        }
    }

    /// How far a halving goes: the out-of-tree kernel halves ssthresh
    /// always, the reference series only past slow start.
    fn cut(&self) -> WindowCut {
        if self.policy == Policy::MptcpOrg {
            WindowCut::HalveWithSsthresh
        } else {
            WindowCut::Halve
        }
    }
}

impl Scheduler for PenaltyScheduler {
    fn name(&self) -> &'static str {
        self.policy.name()
    }

    fn select(&mut self, subflows: &[SubflowView], conn: &ConnView) -> Option<Pick> {
        let pick = self.inner.select(subflows, conn)?;
        let d = self.decide(subflows, conn);
        self.penal_candidate += d.candidate as u64;
        if let Some(id) = d.penalise {
            self.requests.push_back(Request::ReduceWindow { id, cut: self.cut() });
        }
        if let Some((slow, _fast)) = d.reinject_head {
            self.requests.push_back(Request::ReinjectHead { id: slow });
        }
        Some(pick)
    }

    fn on_pushed(&mut self, id: usize, bytes: usize, subflows: &[SubflowView]) {
        self.inner.on_pushed(id, bytes, subflows)
    }

    fn avg_pacing_rate(&self, id: usize) -> Option<u64> {
        self.inner.avg_pacing_rate(id)
    }

    fn forget(&mut self, id: usize) {
        self.inner.forget(id);
        if let Some(t) = self.last.get_mut(id) {
            *t = None;
        }
    }

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn add_counters(&self, c: &mut Counters) {
        c.mptcp_penal_candidate += self.penal_candidate;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: usize, rate: u64, srtt_ms: u64) -> SubflowView {
        SubflowView {
            id,
            available: true,
            backup: false,
            queued: 10_000,
            send_space: 100_000,
            pacing_rate: rate,
            cwnd: 20,
            ssthresh: 30,
            srtt: Some(Duration::from_millis(srtt_ms)),
            ca_state: CaState::Open,
            cwnd_limited: true,
            in_flight: 0,
            unsent: 0,
            mss: 1000,
            ..SubflowView::default()
        }
    }

    fn conn(now_ms: u64, rwnd_limited: bool) -> ConnView {
        ConnView { rwnd_limited, now: Instant::from_millis(now_ms), ..ConnView::default() }
    }

    fn sched(p: Policy) -> PenaltyScheduler {
        PenaltyScheduler::new(p, PenaltyConfig::default())
    }

    /// 10 Mbit/s fast path, 3 Mbit/s slow path.
    fn pair() -> [SubflowView; 2] {
        [view(0, 1_250_000, 20), view(1, 375_000, 50)]
    }

    #[test]
    fn slow_subflow_below_half_the_fastest_is_penalised() {
        let mut s = sched(Policy::Penalise);
        let d = s.decide(&pair(), &conn(0, false));
        assert_eq!(d, PenaltyDecision { candidate: true, penalise: Some(1), reinject_head: None });
    }

    #[test]
    fn no_penalty_above_the_factor() {
        let mut s = sched(Policy::Penalise);
        let v = [view(0, 1_250_000, 20), view(1, 700_000, 50)];
        assert_eq!(s.decide(&v, &conn(0, false)), PenaltyDecision::default());
        // A tunable factor: at 0.6 the same pair qualifies.
        let mut s = PenaltyScheduler::new(Policy::Penalise, PenaltyConfig { factor: 0.6, ..Default::default() });
        assert!(s.decide(&v, &conn(0, false)).candidate);
    }

    #[test]
    fn fastest_must_be_cwnd_limited() {
        let mut s = sched(Policy::Penalise);
        let mut v = pair();
        v[0].cwnd_limited = false;
        assert_eq!(s.decide(&v, &conn(0, false)), PenaltyDecision::default());
    }

    #[test]
    fn slow_subflow_must_be_in_ca_open() {
        for st in [CaState::Recovery, CaState::Loss, CaState::Disorder] {
            let mut s = sched(Policy::Penalise);
            let mut v = pair();
            v[1].ca_state = st;
            assert_eq!(s.decide(&v, &conn(0, false)), PenaltyDecision::default(), "{st:?}");
        }
    }

    #[test]
    fn at_most_once_per_rtt_of_the_slow_subflow() {
        let mut s = sched(Policy::Penalise);
        assert!(s.decide(&pair(), &conn(0, false)).penalise.is_some());
        // Slow subflow's srtt is 50 ms.
        assert_eq!(s.decide(&pair(), &conn(49, false)), PenaltyDecision::default());
        assert!(s.decide(&pair(), &conn(50, false)).penalise.is_some());
        let mut s = PenaltyScheduler::new(Policy::Penalise, PenaltyConfig { interval_rtts: 2.0, ..Default::default() });
        s.decide(&pair(), &conn(0, false));
        assert!(s.decide(&pair(), &conn(99, false)).penalise.is_none());
        assert!(s.decide(&pair(), &conn(100, false)).penalise.is_some());
    }

    #[test]
    fn guard_holds_back_while_receive_window_limited_but_counts_the_candidate() {
        let mut g = sched(Policy::PenaliseGuarded);
        assert_eq!(
            g.decide(&pair(), &conn(0, true)),
            PenaltyDecision { candidate: true, penalise: None, reinject_head: None }
        );
        // Not window-limited: the guarded policy acts like the unguarded one.
        assert_eq!(g.decide(&pair(), &conn(0, false)).penalise, Some(1));
        // The unguarded policy ignores the window.
        let mut u = sched(Policy::Penalise);
        assert_eq!(u.decide(&pair(), &conn(0, true)).penalise, Some(1));
    }

    #[test]
    fn default_policy_never_penalises() {
        let mut s = sched(Policy::Default);
        assert_eq!(s.decide(&pair(), &conn(0, false)), PenaltyDecision::default());
    }

    #[test]
    fn backup_and_unavailable_subflows_are_ignored() {
        let mut s = sched(Policy::Penalise);
        let mut v = pair();
        v[1].backup = true;
        assert_eq!(s.decide(&v, &conn(0, false)), PenaltyDecision::default());
        let mut v = pair();
        v[1].available = false;
        assert_eq!(s.decide(&v, &conn(0, false)), PenaltyDecision::default());
    }

    #[test]
    fn mptcp_org_acts_only_when_receive_window_limited_and_keys_on_srtt() {
        let mut s = sched(Policy::MptcpOrg);
        // Equal rates, unequal delay: slow by RTT.
        let v = [view(0, 1_000_000, 20), view(1, 1_000_000, 60)];
        assert_eq!(s.decide(&v, &conn(0, false)), PenaltyDecision::default());
        let d = s.decide(&v, &conn(0, true));
        assert_eq!(d, PenaltyDecision { candidate: true, penalise: Some(1), reinject_head: Some((1, 0)) });
        assert_eq!(s.decide(&v, &conn(59, true)), PenaltyDecision::default());
    }

    #[test]
    fn decisions_reach_the_connection_as_requests_after_a_pick() {
        let drain = |s: &mut PenaltyScheduler| std::iter::from_fn(|| s.poll_request()).collect::<Vec<_>>();
        let mut s = sched(Policy::Penalise);
        assert!(s.select(&pair(), &conn(0, false)).is_some());
        assert_eq!(drain(&mut s), [Request::ReduceWindow { id: 1, cut: WindowCut::Halve }]);
        let mut c = Counters::default();
        s.add_counters(&mut c);
        assert_eq!(c.mptcp_penal_candidate, 1);
        // mptcp-org: ssthresh halved always, and the slow subflow's head reinjected.
        let mut s = sched(Policy::MptcpOrg);
        let v = [view(0, 1_000_000, 20), view(1, 1_000_000, 60)];
        assert!(s.select(&v, &conn(0, true)).is_some());
        assert_eq!(
            drain(&mut s),
            [Request::ReduceWindow { id: 1, cut: WindowCut::HalveWithSsthresh }, Request::ReinjectHead { id: 1 }]
        );
        // No pick, no decision: nothing asked, nothing counted.
        let mut s = sched(Policy::Penalise);
        let mut v = pair();
        v[0].send_space = 0;
        assert!(s.select(&v, &conn(0, false)).is_none());
        assert!(drain(&mut s).is_empty());
        let mut c = Counters::default();
        s.add_counters(&mut c);
        assert_eq!(c.mptcp_penal_candidate, 0);
    }
}
