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
//! Counters: `MPTcpExtPenalCandidate` each time a slow subflow qualified
//! (before the guard), `MPTcpExtCwndPenalized` each halving applied.

use super::{ConnView, DefaultScheduler, Pick, Scheduler, SubflowView};
use mptun_cc::CaState;
use mptun_time::{Duration, Instant};
use std::fmt;
use std::str::FromStr;

/// Which scheduler policy a connection runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Kernel default scheduler, no penalty.
    #[default]
    Default,
    /// Raiciu et al. (NSDI 2012) opportunistic retransmission and
    /// penalisation: when the fast subflow is blocked by the slow one's
    /// unacknowledged data, reinject that data and halve the slow cwnd.
    Penalise,
    /// [`Policy::Penalise`] with guards (at most once per slow RTT, only a
    /// cwnd-limited fast subflow, a slow one in CA Open) so that it does not
    /// starve a subflow that is merely a little slower.
    PenaliseGuarded,
    /// The out-of-tree multipath-tcp.org kernel's variant: ssthresh is
    /// halved too, always.
    MptcpOrg,
}

impl Policy {
    /// Every policy, for sweeps (the `penalise` simulator scenario).
    pub const ALL: [Policy; 4] = [Policy::Default, Policy::Penalise, Policy::PenaliseGuarded, Policy::MptcpOrg];

    /// Name on the command line and in reports (what [`FromStr`] parses).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Default => "default",
            Policy::Penalise => "penalise",
            Policy::PenaliseGuarded => "penalise-guarded",
            Policy::MptcpOrg => "mptcp-org",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown scheduler policy '{s}' (default, penalise, penalise-guarded, mptcp-org)"))
    }
}

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
pub struct PenaltyDecision {
    /// A slow subflow qualified (`MPTcpExtPenalCandidate`).
    pub candidate: bool,
    /// Halve this subflow's cwnd in its push path.
    pub penalise: Option<usize>,
    /// mptcp-org: reinject the head of this (slow) subflow's data on `fast`.
    pub reinject_head: Option<(usize, usize)>,
}

/// The default scheduler plus a penalty policy.
#[derive(Debug)]
pub struct PenaltyScheduler {
    inner: DefaultScheduler,
    policy: Policy,
    cfg: PenaltyConfig,
    /// Last time each subflow was penalised.
    last: Vec<Option<Instant>>,
}

impl PenaltyScheduler {
    /// The default scheduler with `policy`'s penalty decisions on top.
    pub fn new(policy: Policy, cfg: PenaltyConfig) -> Self {
        PenaltyScheduler { inner: DefaultScheduler::new(), policy, cfg, last: Vec::new() }
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

impl Scheduler for PenaltyScheduler {
    fn name(&self) -> &'static str {
        self.policy.name()
    }

    fn select(&mut self, subflows: &[SubflowView], conn: &ConnView) -> Option<Pick> {
        self.inner.select(subflows, conn)
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

    fn after_pick(&mut self, _picked: usize, subflows: &[SubflowView], conn: &ConnView) -> PenaltyDecision {
        match self.policy {
            Policy::Default => PenaltyDecision::default(),
            Policy::Penalise => self.rate_trigger(subflows, conn, false),
            Policy::PenaliseGuarded => self.rate_trigger(subflows, conn, true),
            Policy::MptcpOrg => self.mptcp_org(subflows, conn),
        }
    }
}

/// Builds the scheduler for a policy.
pub fn new_scheduler(policy: Policy, cfg: PenaltyConfig) -> Box<dyn Scheduler> {
    match policy {
        Policy::Default => Box::new(DefaultScheduler::new()),
        p => Box::new(PenaltyScheduler::new(p, cfg)),
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
        }
    }

    fn conn(now_ms: u64, rwnd_limited: bool) -> ConnView {
        ConnView { rwnd_limited, now: Instant::from_millis(now_ms) }
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
        let d = s.after_pick(0, &pair(), &conn(0, false));
        assert_eq!(d, PenaltyDecision { candidate: true, penalise: Some(1), reinject_head: None });
    }

    #[test]
    fn no_penalty_above_the_factor() {
        let mut s = sched(Policy::Penalise);
        let v = [view(0, 1_250_000, 20), view(1, 700_000, 50)];
        assert_eq!(s.after_pick(0, &v, &conn(0, false)), PenaltyDecision::default());
        // A tunable factor: at 0.6 the same pair qualifies.
        let mut s = PenaltyScheduler::new(Policy::Penalise, PenaltyConfig { factor: 0.6, ..Default::default() });
        assert!(s.after_pick(0, &v, &conn(0, false)).candidate);
    }

    #[test]
    fn fastest_must_be_cwnd_limited() {
        let mut s = sched(Policy::Penalise);
        let mut v = pair();
        v[0].cwnd_limited = false;
        assert_eq!(s.after_pick(0, &v, &conn(0, false)), PenaltyDecision::default());
    }

    #[test]
    fn slow_subflow_must_be_in_ca_open() {
        for st in [CaState::Recovery, CaState::Loss, CaState::Disorder] {
            let mut s = sched(Policy::Penalise);
            let mut v = pair();
            v[1].ca_state = st;
            assert_eq!(s.after_pick(0, &v, &conn(0, false)), PenaltyDecision::default(), "{st:?}");
        }
    }

    #[test]
    fn at_most_once_per_rtt_of_the_slow_subflow() {
        let mut s = sched(Policy::Penalise);
        assert!(s.after_pick(0, &pair(), &conn(0, false)).penalise.is_some());
        // Slow subflow's srtt is 50 ms.
        assert_eq!(s.after_pick(0, &pair(), &conn(49, false)), PenaltyDecision::default());
        assert!(s.after_pick(0, &pair(), &conn(50, false)).penalise.is_some());
        let mut s = PenaltyScheduler::new(Policy::Penalise, PenaltyConfig { interval_rtts: 2.0, ..Default::default() });
        s.after_pick(0, &pair(), &conn(0, false));
        assert!(s.after_pick(0, &pair(), &conn(99, false)).penalise.is_none());
        assert!(s.after_pick(0, &pair(), &conn(100, false)).penalise.is_some());
    }

    #[test]
    fn guard_holds_back_while_receive_window_limited_but_counts_the_candidate() {
        let mut g = sched(Policy::PenaliseGuarded);
        assert_eq!(
            g.after_pick(0, &pair(), &conn(0, true)),
            PenaltyDecision { candidate: true, penalise: None, reinject_head: None }
        );
        // Not window-limited: the guarded policy acts like the unguarded one.
        assert_eq!(g.after_pick(0, &pair(), &conn(0, false)).penalise, Some(1));
        // The unguarded policy ignores the window.
        let mut u = sched(Policy::Penalise);
        assert_eq!(u.after_pick(0, &pair(), &conn(0, true)).penalise, Some(1));
    }

    #[test]
    fn default_policy_never_penalises() {
        let mut s = sched(Policy::Default);
        assert_eq!(s.after_pick(0, &pair(), &conn(0, false)), PenaltyDecision::default());
    }

    #[test]
    fn backup_and_unavailable_subflows_are_ignored() {
        let mut s = sched(Policy::Penalise);
        let mut v = pair();
        v[1].backup = true;
        assert_eq!(s.after_pick(0, &v, &conn(0, false)), PenaltyDecision::default());
        let mut v = pair();
        v[1].available = false;
        assert_eq!(s.after_pick(0, &v, &conn(0, false)), PenaltyDecision::default());
    }

    #[test]
    fn mptcp_org_acts_only_when_receive_window_limited_and_keys_on_srtt() {
        let mut s = sched(Policy::MptcpOrg);
        // Equal rates, unequal delay: slow by RTT.
        let v = [view(0, 1_000_000, 20), view(1, 1_000_000, 60)];
        assert_eq!(s.after_pick(0, &v, &conn(0, false)), PenaltyDecision::default());
        let d = s.after_pick(0, &v, &conn(0, true));
        assert_eq!(d, PenaltyDecision { candidate: true, penalise: Some(1), reinject_head: Some((1, 0)) });
        assert_eq!(s.after_pick(0, &v, &conn(59, true)), PenaltyDecision::default());
    }

    #[test]
    fn policy_names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
        }
        assert!("fastest".parse::<Policy>().is_err());
    }
}
