//! A coupled congestion controller written outside mptun, against its
//! public API only, run in the simulator.
//!
//! EWTCP (equally-weighted TCP; Honda et al., PFLDNeT 2009, and the
//! baseline of Raiciu et al., NSDI 2011): every subflow is NewReno with its
//! additive increase scaled by `1/n²` for `n` subflows that can send, so
//! that `n` of them through one bottleneck take what one TCP flow would.
//! It couples through the same [`Coupling`] that LIA, OLIA and BALIA read.
//!
//! ```sh
//! cargo run --release -p mptun-sim --example ewtcp
//! ```

use mptun_cc::coupled::Coupling;
use mptun_cc::{
    tcp_reno_ssthresh, tcp_slow_start, AckSample, CaEvent, CaState, CcState, CongestionControl, ControllerFactory,
    Instant,
};
use mptun_sim::scenarios::aggregate::{self, Params};
use std::sync::Arc;

/// EWTCP's controller: Reno, its increase weighted by `1/n²`.
#[derive(Debug, Default)]
struct Ewtcp {
    /// Subflows of the connection that can send (1 until coupled).
    senders: usize,
    /// Growth credit, packets.
    credit: f64,
}

impl CongestionControl for Ewtcp {
    fn name(&self) -> &'static str {
        "ewtcp"
    }

    fn init(&mut self, _state: &mut CcState, _now: Instant) {
        self.senders = 1;
    }

    fn pkts_acked(&mut self, _state: &mut CcState, _sample: &AckSample, _now: Instant) {}

    fn cong_avoid(&mut self, state: &mut CcState, _ack: u32, acked: u32, _now: Instant) {
        let mut acked = acked;
        if state.in_slow_start() {
            acked = tcp_slow_start(state, acked);
        }
        let n = self.senders.max(1) as f64;
        self.credit += f64::from(acked) / (n * n * f64::from(state.cwnd.max(1)));
        while self.credit >= 1.0 {
            self.credit -= 1.0;
            state.cwnd = (state.cwnd + 1).min(state.cwnd_clamp);
        }
    }

    fn ssthresh(&mut self, state: &CcState) -> u32 {
        tcp_reno_ssthresh(state)
    }

    fn set_state(&mut self, _state: &mut CcState, new: CaState, _now: Instant) {
        if new != CaState::Open {
            self.credit = 0.0;
        }
    }

    fn cwnd_event(&mut self, _state: &mut CcState, _event: CaEvent, _now: Instant) {}

    fn set_coupling(&mut self, coupling: &Coupling<'_>) {
        self.senders = coupling.subflows.iter().filter(|s| s.can_send()).count();
    }

    fn is_coupled(&self) -> bool {
        true
    }
}

/// Builds one [`Ewtcp`] per subflow.
#[derive(Debug)]
struct EwtcpFactory;

impl ControllerFactory for EwtcpFactory {
    fn build(&self) -> Box<dyn CongestionControl> {
        Box::new(Ewtcp::default())
    }
}

pub fn main() {
    let p = Params::default();
    let (mut client, mut server) = aggregate::mptcp_configs(p.paths.len());
    for cfg in [&mut client, &mut server] {
        cfg.tcp.controller = Some(Arc::new(EwtcpFactory));
    }
    let r = aggregate::run_named("aggregate-ewtcp", &p, client, server);
    println!(
        "EWTCP on the aggregate paths ({}): goodput {:.2} Mbit/s, efficiency {:.3}, bytes per subflow {:?}, SHA-256 {}",
        r.paths.join(" + "),
        r.result.goodput_bps / 1e6,
        r.efficiency,
        r.subflows.iter().map(|s| s.bytes_acked).collect::<Vec<_>>(),
        if r.result.sha256_match { "intact" } else { "MISMATCH" },
    );
    assert!(r.result.sha256_match, "the transfer must arrive intact");
}
