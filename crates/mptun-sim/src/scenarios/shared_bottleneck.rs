//! `shared-bottleneck`: RFC 6356's second goal, do no harm. One MPTCP
//! connection with two subflows and one plain TCP flow go through the same
//! droptail bottleneck (by default 20 Mbit/s, 40 ms RTT, a buffer of one
//! BDP). Uncoupled subflows are two TCP flows to the bottleneck and take
//! about two thirds of it; coupled ones (LIA, OLIA, BALIA) together take
//! about what the TCP flow takes, a half.
//!
//! The two subflows leave host A from two addresses, and both routes run
//! through the one link each way; the TCP flow leaves from the first
//! address. All three flows are backlogged for the whole run, and the shares
//! are counted over its second half, once slow start is long over.

use super::bottleneck::Bottleneck;
use super::ip;
use super::network::{self, Flow, FlowKind, LinkSpec, Route, Spec};
use mptun_cc::Algorithm;
use mptun_proto::sched::Policy;
use mptun_time::Duration;
use std::net::IpAddr;

pub use super::network::Report;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// The bottleneck; its jitter, order-preserving, is there because
    /// without some randomness a droptail queue fed by deterministic senders
    /// drops in phase with them, and every seed is the same run.
    pub bottleneck: Bottleneck,
    /// Length of the run.
    pub duration: Duration,
    /// The MPTCP connection's congestion control.
    pub mptcp_cc: Algorithm,
    /// The TCP flow's.
    pub tcp_cc: Algorithm,
    /// The MPTCP connection's scheduler policy; minRTT by default, the
    /// scheduler the multipath-tcp.org kernel ran its coupled controllers
    /// with (see docs/scenarios/shared-bottleneck.toml).
    pub policy: Policy,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            bottleneck: Bottleneck {
                rate_bps: 20_000_000,
                rtt: Duration::from_millis(40),
                queue_packets: None,
                jitter: Duration::from_micros(500),
                qdisc: Default::default(),
            },
            duration: Duration::from_secs(60),
            mptcp_cc: Algorithm::Cubic,
            tcp_cc: Algorithm::Cubic,
            policy: Policy::MinRtt,
            seed: 1,
        }
    }
}

/// The experiment as a network: two client addresses routed through one
/// bottleneck; the MPTCP connection leaves from both, the TCP flow from
/// the first.
pub fn spec(p: &Params) -> Spec {
    let (a0, a1, b) = (ip("10.0.1.1"), ip("10.0.2.1"), ip("10.0.1.2"));
    let flow = |kind: FlowKind, from: Vec<IpAddr>, cc| Flow {
        // A scheduler is the MPTCP connection's; the TCP flow keeps the default.
        policy: if matches!(kind, FlowKind::Mptcp) { p.policy } else { Policy::Default },
        kind,
        from,
        to: b,
        cc,
        start: Duration::ZERO,
        stop: None,
    };
    Spec {
        name: "shared-bottleneck".into(),
        links: vec![LinkSpec { name: "bottleneck".into(), link: p.bottleneck }],
        routes: [a0, a1].into_iter().map(|a| Route { a, b, links: vec!["bottleneck".into()] }).collect(),
        flows: vec![flow(FlowKind::Mptcp, vec![a0, a1], p.mptcp_cc), flow(FlowKind::Tcp, vec![a0], p.tcp_cc)],
        duration: p.duration,
        measure_from: None,
        seed: p.seed,
    }
}

/// Runs the experiment.
pub fn run(p: &Params) -> Report {
    network::run(&spec(p)).expect("a well-formed network")
}
