//! `bbr`: BBR's experiments, each a network of one droptail bottleneck.
//!
//! * [`alone`]: one flow alone on a link (10 or 100 Mbit/s, 40 ms RTT, a
//!   deep buffer of 10 BDP): the goodput it takes and the queue it keeps
//!   standing, BBR against CUBIC. A loss-based flow fills any buffer; BBR
//!   aims at one BDP in flight and so at an almost empty queue.
//! * [`versus`]: one BBR flow against `n` CUBIC flows, buffers from half a
//!   BDP to 16: the share each takes. Ware, Mukerjee, Seshan and Sherry
//!   ("Modeling BBR's interactions with loss-based congestion control",
//!   IMC 2019) found BBR's share set by the buffer size (its in-flight cap,
//!   2 BDP, against a queue CUBIC keeps full) and not by how many CUBIC
//!   flows it meets.
//!
//! Every flow is backlogged for the whole run; goodput is counted over its
//! second half, past STARTUP (a BBR flow's PROBE_RTT falls inside it).

use super::bottleneck::Bottleneck;
use super::ip;
use super::network::{self, Flow, FlowKind, LinkSpec, Report, Route, Spec};
use mptun_cc::Algorithm;
use mptun_proto::sched::Policy;
use mptun_time::Duration;

/// The bottleneck of both experiments.
#[derive(Clone, Copy, Debug)]
pub struct Path {
    /// Link rate, bit/s.
    pub rate_bps: u64,
    /// Round-trip propagation delay.
    pub rtt: Duration,
    /// Buffer in BDPs of 1500-byte packets.
    pub buffer_bdp: f64,
    /// Order-preserving delay jitter (breaks droptail's phase effects).
    pub jitter: Duration,
}

impl Path {
    /// A 40 ms path at `rate_bps` with a buffer of `buffer_bdp`.
    pub fn new(rate_bps: u64, buffer_bdp: f64) -> Path {
        Path { rate_bps, rtt: Duration::from_millis(40), buffer_bdp, jitter: Duration::from_micros(500) }
    }

    /// One BDP in 1500-byte packets.
    pub fn bdp_packets(&self) -> f64 {
        self.rate_bps as f64 / 8.0 * self.rtt.as_secs_f64() / 1500.0
    }

    fn bottleneck(&self) -> Bottleneck {
        let queue = (self.bdp_packets() * self.buffer_bdp).round().max(2.0) as usize;
        Bottleneck {
            rate_bps: self.rate_bps,
            rtt: self.rtt,
            queue_packets: Some(queue),
            jitter: self.jitter,
            qdisc: Default::default(),
        }
    }
}

/// TCP flows with controllers `ccs` through `path`, for `duration`.
pub fn spec(name: &str, path: &Path, ccs: &[Algorithm], duration: Duration, seed: u64) -> Spec {
    let (a, b) = (ip("10.0.1.1"), ip("10.0.1.2"));
    let flows = ccs
        .iter()
        .map(|&cc| Flow {
            kind: FlowKind::Tcp,
            from: vec![a],
            to: b,
            cc,
            policy: Policy::Default,
            start: Duration::ZERO,
            stop: None,
        })
        .collect();
    Spec {
        name: name.into(),
        links: vec![LinkSpec { name: "bottleneck".into(), link: path.bottleneck() }],
        routes: vec![Route { a, b, links: vec!["bottleneck".into()] }],
        flows,
        duration,
        measure_from: None,
        seed,
    }
}

/// One flow with controller `cc` alone on `path`.
pub fn alone(path: &Path, cc: Algorithm, duration: Duration, seed: u64) -> Report {
    network::run(&spec("bbr-alone", path, &[cc], duration, seed)).expect("a well-formed network")
}

/// One BBR flow (the first of the report) against `n_cubic` CUBIC flows.
pub fn versus(path: &Path, n_cubic: usize, duration: Duration, seed: u64) -> Report {
    let mut ccs = vec![Algorithm::Bbr];
    ccs.extend(std::iter::repeat_n(Algorithm::Cubic, n_cubic));
    network::run(&spec("bbr-versus-cubic", path, &ccs, duration, seed)).expect("a well-formed network")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flow 0's share of what flows 0 and 1 delivered between `t0` and
    /// `t1` seconds, from a run's samples.
    fn share_between(samples: &[network::FlowSample], t0: f64, t1: f64) -> f64 {
        let at = |flow: usize, t: f64| {
            samples.iter().filter(|x| x.flow == flow && x.t_s <= t + 1e-9).map(|x| x.received).max().unwrap_or(0)
        };
        let (b, c) = ((at(0, t1) - at(0, t0)) as f64, (at(1, t1) - at(1, t0)) as f64);
        b / (b + c)
    }

    /// At 16 BDP BBR's share against one CUBIC flow is still a transient
    /// in the first minute (it keeps the min RTT of its first round until
    /// PROBE_RTT, then grows by its gain cycles) and settles later
    /// (docs/cc.md, "BBR against CUBIC"): a 60 s run's second half says
    /// how fast it converges, not where to. Here (both flows TCP, seed 1)
    /// 0.196 from 30 to 60 s and 0.380 from 150 to 300 s; the scenario
    /// file's run (BBR over MPTCP) 0.16 and 0.33.
    #[test]
    fn bbr_against_cubic_in_16_bdp_settles_only_after_the_first_minute() {
        let path = Path::new(10_000_000, 16.0);
        let s = spec("bbr-versus-cubic", &path, &[Algorithm::Bbr, Algorithm::Cubic], Duration::from_secs(300), 1);
        let (r, samples) = network::run_traced(&s, Some(Duration::from_secs(1))).expect("a well-formed network");
        let steady = r.flows[0].share;
        let early = share_between(&samples, 30.0, 60.0);
        println!("BBR share: 30-60 s {early:.3}, 150-300 s {steady:.3}");
        assert!((0.28..0.45).contains(&steady), "BBR's share from 150 to 300 s: {steady}");
        assert!(early < steady - 0.08, "BBR's share from 30 to 60 s {early} against {steady} later");
    }

    /// At 4 BDP BBR's share against one CUBIC flow does not settle: BBR's
    /// window swings by a factor of two to four in cycles of 20 to 30 s
    /// (its min RTT taken through CUBIC's standing queue, then lower once
    /// CUBIC backs off and the queue drains), so its share of a 10 s window
    /// runs from about a quarter to over two thirds and one of 30 s, what a 60 s run
    /// measures, scatters by more than 0.1 from window to window
    /// (docs/cc.md, "BBR against CUBIC"). Over 150 s the swings average
    /// out to between the two.
    #[test]
    fn bbr_against_cubic_in_4_bdp_swings_so_a_30_s_share_scatters() {
        let path = Path::new(10_000_000, 4.0);
        // As docs/scenarios/bbr-vs-cubic.toml: BBR over an MPTCP connection
        // of one subflow.
        let mut s = spec("bbr-versus-cubic", &path, &[Algorithm::Bbr, Algorithm::Cubic], Duration::from_secs(300), 1);
        s.flows[0].kind = FlowKind::Mptcp;
        let (r, samples) = network::run_traced(&s, Some(Duration::from_secs(1))).expect("a well-formed network");
        let spread = |w: f64| {
            let v: Vec<f64> = (0..)
                .map(|k| 30.0 + k as f64 * w)
                .take_while(|t| t + w <= 300.0)
                .map(|t| share_between(&samples, t, t + w))
                .collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        };
        let ((lo10, hi10), (lo30, hi30)) = (spread(10.0), spread(30.0));
        let steady = r.flows[0].share;
        println!(
            "BBR share: 10 s windows {lo10:.3}-{hi10:.3}, 30 s windows {lo30:.3}-{hi30:.3}, 150-300 s {steady:.3}"
        );
        assert!(lo10 < 0.35 && hi10 > 0.6, "10 s windows {lo10:.3}-{hi10:.3}");
        assert!(hi30 - lo30 > 0.1, "30 s windows {lo30:.3}-{hi30:.3}");
        assert!((0.36..0.56).contains(&steady), "BBR's share from 150 to 300 s: {steady}");
        assert!(lo30 < steady && steady < hi30, "150-300 s {steady} outside the 30 s windows {lo30:.3}-{hi30:.3}");
    }

    /// BBR alone on a deep buffer fills the link and keeps the queue short;
    /// CUBIC fills the link and the buffer. With the link's jitter BBR's
    /// bandwidth filter runs a little over the link rate (its max of noisy
    /// samples) and the 2-BDP window cap, not the pacing, bounds the
    /// queue: at most about a BDP.
    #[test]
    fn bbr_fills_a_10_mbit_link_with_a_short_queue_where_cubic_fills_the_buffer() {
        let d = Duration::from_secs(30);
        for jitter in [Duration::ZERO, Duration::from_micros(500)] {
            let path = Path { jitter, ..Path::new(10_000_000, 10.0) };
            let bbr = alone(&path, Algorithm::Bbr, d, 1);
            let cubic = alone(&path, Algorithm::Cubic, d, 1);
            let (lb, lc) = (&bbr.links[0], &cubic.links[0]);
            assert!(lb.utilisation > 0.97, "BBR used {:.3} of the link", lb.utilisation);
            assert!(bbr.flows[0].goodput_bps > 9.4e6, "BBR's goodput {}", bbr.flows[0].goodput_bps);
            assert!(lc.utilisation > 0.97, "CUBIC used {:.3}", lc.utilisation);
            // 10 BDP is 400 ms of queue: CUBIC keeps it mostly full.
            assert!(lc.queue_delay_p50_ms > 250.0, "CUBIC's median queue {} ms", lc.queue_delay_p50_ms);
            let bound = if jitter.is_zero() { 10.0 } else { 50.0 };
            assert!(lb.queue_delay_p50_ms < bound, "BBR's median queue {} ms ({jitter:?})", lb.queue_delay_p50_ms);
            assert_eq!(lb.dropped_queue, 0);
        }
    }

    /// One BBR flow against CUBIC: BBR takes most of a shallow buffer and
    /// little of a deep one (Ware et al.'s buffer dependence).
    #[test]
    fn bbrs_share_against_cubic_falls_as_the_buffer_deepens() {
        let d = Duration::from_secs(40);
        let share = |bdp: f64| versus(&Path::new(10_000_000, bdp), 1, d, 1).flows[0].share;
        let (shallow, deep) = (share(0.5), share(16.0));
        assert!(shallow > 0.8, "BBR's share at 0.5 BDP: {shallow}");
        assert!(deep < 0.3, "BBR's share at 16 BDP: {deep}");
    }
}
