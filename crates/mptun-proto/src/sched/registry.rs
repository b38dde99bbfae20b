//! The schedulers mptun ships, by name (Linux keeps its registry in
//! `net/mptcp/sched.c`, chosen by the `net.mptcp.scheduler` sysctl).

use super::bpf_selftest::{Pin, PinScheduler};
use super::penalise::{PenaltyConfig, PenaltyScheduler};
use super::{
    BlestScheduler, DefaultScheduler, EcfScheduler, MinRttScheduler, RedundantScheduler, RoundRobinScheduler, Scheduler,
};
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
    /// The multipath-tcp.org kernel's default scheduler: lowest srtt, and
    /// only as much as the chosen subflow's window can send at once.
    MinRtt,
    /// The multipath-tcp.org kernel's round-robin (`mptcp_rr.c`).
    RoundRobin,
    /// Every segment on every active subflow (`mptcp_redundant.c`).
    Redundant,
    /// BLEST, blocking estimation (`mptcp_blest.c`).
    Blest,
    /// ECF, earliest completion first (`mptcp_ecf.c`).
    Ecf,
    /// Everything on the first subflow (upstream's BPF selftest `bpf_first`).
    First,
    /// Everything on the first non-backup subflow (`bpf_bkup`).
    Backup,
}

impl Policy {
    /// Every scheduler mptun ships.
    pub const ALL: [Policy; 11] = [
        Policy::Default,
        Policy::Penalise,
        Policy::PenaliseGuarded,
        Policy::MptcpOrg,
        Policy::MinRtt,
        Policy::RoundRobin,
        Policy::Redundant,
        Policy::Blest,
        Policy::Ecf,
        Policy::First,
        Policy::Backup,
    ];

    /// The slow-subflow penalty matrix: the default scheduler and the
    /// three penalties on top of it (the `penalise` scenario's columns).
    pub const PENALTIES: [Policy; 4] = [Policy::Default, Policy::Penalise, Policy::PenaliseGuarded, Policy::MptcpOrg];

    /// Name on the command line and in reports (what [`FromStr`] parses).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Default => "default",
            Policy::Penalise => "penalise",
            Policy::PenaliseGuarded => "penalise-guarded",
            Policy::MptcpOrg => "mptcp-org",
            Policy::MinRtt => "minrtt",
            Policy::RoundRobin => "roundrobin",
            Policy::Redundant => "redundant",
            Policy::Blest => "blest",
            Policy::Ecf => "ecf",
            Policy::First => "first",
            Policy::Backup => "backup",
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
        Policy::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!("unknown scheduler policy '{s}' ({})", names.join(", "))
        })
    }
}

/// Builds the scheduler for a policy.
pub fn new_scheduler(policy: Policy, cfg: PenaltyConfig) -> Box<dyn Scheduler> {
    match policy {
        Policy::Default => Box::new(DefaultScheduler::new()),
        Policy::MinRtt => Box::new(MinRttScheduler::new()),
        Policy::RoundRobin => Box::new(RoundRobinScheduler::default()),
        Policy::Redundant => Box::new(RedundantScheduler::new()),
        Policy::Blest => Box::new(BlestScheduler::new()),
        Policy::Ecf => Box::new(EcfScheduler::new()),
        Policy::First => Box::new(PinScheduler::new(Pin::First)),
        Policy::Backup => Box::new(PinScheduler::new(Pin::FirstNonBackup)),
        p @ (Policy::Penalise | Policy::PenaliseGuarded | Policy::MptcpOrg) => Box::new(PenaltyScheduler::new(p, cfg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
            assert_eq!(new_scheduler(p, PenaltyConfig::default()).name(), p.name());
        }
        assert!("fastest".parse::<Policy>().is_err());
    }
}
