//! The schedulers mptun ships, by name (Linux keeps its registry in
//! `net/mptcp/sched.c`, chosen by the `net.mptcp.scheduler` sysctl).

use super::bpf_selftest::{Pin, PinScheduler};
use super::penalise::{PenaltyConfig, PenaltyScheduler};
use super::{
    BlestScheduler, DefaultScheduler, EcfScheduler, MinRttScheduler, RedundantScheduler, RoundRobinScheduler, Scheduler,
};
use std::fmt;
use std::str::FromStr;

/// Declares a scheduler table: one line per scheduler (variant, name on
/// the command line and in reports, one-line description, constructor),
/// from which the policy enum, its `ALL`, `name()`, `about()`, `Display`,
/// `FromStr` and the constructor function are all derived. Adding a
/// scheduler is its file and one line here.
macro_rules! scheduler_table {
    ($(#[$meta:meta])* $vis:vis enum $enum:ident, fn $build:ident;
     $($variant:ident => $name:literal, $about:literal, $ctor:expr;)+) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $enum {
            $(#[doc = $about] $variant,)+
        }

        impl $enum {
            /// Every scheduler of the table, in its order.
            pub const ALL: [$enum; [$($name),+].len()] = [$($enum::$variant),+];

            /// Name on the command line and in reports (what [`FromStr`] parses).
            pub fn name(self) -> &'static str {
                match self {
                    $($enum::$variant => $name,)+
                }
            }

            /// One line on what it does (`--help`, docs/schedulers.md).
            pub fn about(self) -> &'static str {
                match self {
                    $($enum::$variant => $about,)+
                }
            }

            /// The names of all, comma-separated, for `--help`.
            pub fn names() -> String {
                Self::ALL.map(Self::name).join(", ")
            }
        }

        impl Default for $enum {
            /// The first of the table.
            fn default() -> Self {
                Self::ALL[0]
            }
        }

        impl fmt::Display for $enum {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $enum {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
                    format!("unknown scheduler policy '{s}' ({})", Self::names())
                })
            }
        }

        /// Builds the scheduler for a policy.
        $vis fn $build(policy: $enum, cfg: PenaltyConfig) -> Box<dyn Scheduler> {
            let ctor: fn($enum, PenaltyConfig) -> Box<dyn Scheduler> = match policy {
                $($enum::$variant => $ctor,)+
            };
            ctor(policy, cfg)
        }
    };
}

scheduler_table! {
    /// Which scheduler policy a connection runs.
    pub enum Policy, fn new_scheduler;
    Default => "default", "The kernel's default scheduler (lowest linger time, backup last), no penalty.", |_, _| Box::new(DefaultScheduler::new());
    Penalise => "penalise", "Raiciu et al. (NSDI 2012): reinject a blocking slow subflow's data on the fast one and halve the slow cwnd.", |p, cfg| Box::new(PenaltyScheduler::new(p, cfg));
    PenaliseGuarded => "penalise-guarded", "The penalty with guards (once per slow RTT, a cwnd-limited fast subflow, a slow one in CA Open).", |p, cfg| Box::new(PenaltyScheduler::new(p, cfg));
    MptcpOrg => "mptcp-org", "The multipath-tcp.org kernel's penalty: ssthresh halved too, always.", |p, cfg| Box::new(PenaltyScheduler::new(p, cfg));
    MinRtt => "minrtt", "The multipath-tcp.org default: lowest srtt, as much as that subflow's window sends at once.", |_, _| Box::new(MinRttScheduler::new());
    RoundRobin => "roundrobin", "The multipath-tcp.org round-robin (mptcp_rr.c).", |_, _| Box::new(RoundRobinScheduler::default());
    Redundant => "redundant", "Every segment on every active subflow (mptcp_redundant.c).", |_, _| Box::new(RedundantScheduler::new());
    Blest => "blest", "BLEST, blocking estimation (mptcp_blest.c).", |_, _| Box::new(BlestScheduler::new());
    Ecf => "ecf", "ECF, earliest completion first (mptcp_ecf.c).", |_, _| Box::new(EcfScheduler::new());
    First => "first", "Everything on the first subflow (upstream's BPF selftest bpf_first).", |_, _| Box::new(PinScheduler::new(Pin::First));
    Backup => "backup", "Everything on the first non-backup subflow (bpf_bkup).", |_, _| Box::new(PinScheduler::new(Pin::FirstNonBackup));
}

impl Policy {
    /// The slow-subflow penalty matrix: the default scheduler and the
    /// three penalties on top of it (the `penalise` scenario's columns).
    pub const PENALTIES: [Policy; 4] = [Policy::Default, Policy::Penalise, Policy::PenaliseGuarded, Policy::MptcpOrg];
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

    mod added {
        use super::super::*;
        use crate::sched::RoundRobinScheduler;

        // A table with one scheduler more, as a new file would add it: its
        // line is all it takes to be listed, parsed, named and built.
        scheduler_table! {
            enum Extended, fn new_extended;
            Default => "default", "The default.", |_, _| Box::new(DefaultScheduler::new());
            Spread => "spread", "A test scheduler.", |_, _| Box::new(RoundRobinScheduler::default());
        }

        #[test]
        fn one_line_adds_a_scheduler_everywhere() {
            assert_eq!(Extended::ALL, [Extended::Default, Extended::Spread]);
            assert_eq!("spread".parse::<Extended>(), Ok(Extended::Spread));
            assert_eq!(Extended::Spread.to_string(), "spread");
            assert_eq!(Extended::Spread.about(), "A test scheduler.");
            assert_eq!(Extended::names(), "default, spread");
            assert_eq!(Extended::default(), Extended::Default);
            assert_eq!(new_extended(Extended::Spread, PenaltyConfig::default()).name(), "roundrobin");
            let err = "nope".parse::<Extended>().unwrap_err();
            assert!(err.contains("default, spread"), "{err}");
        }
    }
}
