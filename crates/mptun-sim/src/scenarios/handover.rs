//! `handover`: a download over a Wi-Fi-like path (20 Mbit/s, 10 ms one way,
//! the initial subflow's) beside an LTE-like one (10 Mbit/s, 60 ms, a deep
//! queue) from a single-homed server. At 5 s the Wi-Fi interface goes away:
//! its link drops everything both ways and the client's operator deletes
//! its endpoint (`ip mptcp endpoint delete`, as mptcpd or NetworkManager
//! does when an interface goes down), so RM_ADDR id 0 tells the server.
//! At 15 s it comes back and the endpoint is added again
//! (`ip mptcp endpoint add ADDR subflow`): the client joins from it and the
//! server uses it again.
//!
//! Two modes, as the handover literature names them:
//! * `break` (break-before-make): LTE is a backup subflow, idle until
//!   Wi-Fi is gone;
//! * `make` (make-before-break): LTE is an active subflow all along.
//!
//! Reported: the longest gap in the bytes delivered to the client's
//! application, the time from the loss of Wi-Fi until LTE carries data it
//! did not before, the time from Wi-Fi's return until it carries data
//! again, and the bytes lost (none: the stream is SHA-256-checked).

use super::aggregate::PathParams;
use super::seed32;
use crate::apps::BulkApp;
use crate::report::{counters_map, WallClock};
use crate::stack::StackHost;
use crate::world::{PathSpec, Sim, SimConfig};
use mptun_cc::Algorithm;
use mptun_proto::endpoint::{Endpoint, EndpointConfig};
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// Break-before-make or make-before-break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// LTE is a backup subflow until Wi-Fi is gone.
    Break,
    /// LTE carries data all along.
    Make,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "break" | "break-before-make" => Ok(Mode::Break),
            "make" | "make-before-break" => Ok(Mode::Make),
            _ => Err(format!("'{s}': break (LTE backup) or make (LTE active)")),
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Break => "break",
            Mode::Make => "make",
        }
    }
}

/// The client's Wi-Fi and LTE addresses, the server's one.
pub const WIFI: [u8; 4] = [10, 0, 1, 1];
pub const LTE: [u8; 4] = [10, 0, 2, 1];
pub const SERVER: [u8; 4] = [10, 0, 9, 2];
/// When Wi-Fi goes away and comes back.
pub const DOWN: Duration = Duration::from_secs(5);
pub const UP: Duration = Duration::from_secs(15);
/// How often the delivered bytes and the subflows are sampled.
pub const SAMPLE: Duration = Duration::from_millis(10);

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    pub mode: Mode,
    pub size: u64,
    pub seed: u64,
    pub cc: Algorithm,
    /// Wi-Fi first, LTE second.
    pub paths: Vec<PathParams>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            mode: Mode::Break,
            size: 48 * 1024 * 1024,
            seed: 1,
            cc: Algorithm::Cubic,
            paths: super::sched_compare::path_params(),
        }
    }
}

/// The figures of one handover, computed alike from the simulator's and
/// the lab's samples ([`figures`]).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Figures {
    /// The longest time the client's application got no data, ms (from
    /// samples every [`SAMPLE`]), anywhere in the run.
    pub longest_gap_ms: f64,
    /// When it began, s from the connect.
    pub longest_gap_at_s: f64,
    /// The longest stall of the handover itself: among those that end after
    /// the loss of Wi-Fi and begin less than [`AROUND`] after it, ms.
    pub handover_gap_ms: f64,
    /// The same around Wi-Fi's return.
    pub return_gap_ms: f64,
    /// From the loss of Wi-Fi until LTE delivered data it had not before, ms.
    pub lte_takeover_ms: Option<f64>,
    /// From the return of Wi-Fi until a new subflow over it delivered data, ms.
    pub wifi_return_ms: Option<f64>,
    /// Bytes LTE had delivered when Wi-Fi went away (none for a backup
    /// subflow that stays idle, as break-before-make wants).
    pub lte_bytes_at_down: u64,
    /// The sender's LTE subflow's largest congestion window while Wi-Fi
    /// was down, packets (from its samples). Above LTE's BDP plus its queue
    /// the queue drops, and the repair waits behind a full queue: the stall
    /// of about one full-queue RTT in the middle of the outage
    /// (docs/mptcp.md "Handover"). Where slow start ended decides whether
    /// CUBIC gets there before Wi-Fi returns.
    pub lte_max_cwnd: u64,
    /// Bytes sent that never arrived (must be 0).
    pub bytes_lost: u64,
    pub sha256_match: bool,
    pub goodput_bps: f64,
    pub duration_s: f64,
}

/// How long after an event a stall counts as the event's.
pub const AROUND: f64 = 2.0;

/// Stalls of a delivered-bytes series (s, bytes): each a (start, length)
/// between two samples at which the count grew, from the first byte on.
fn stalls(series: &[(f64, u64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut last: Option<(f64, u64)> = None;
    for &(t, b) in series {
        match last {
            Some((t0, b0)) if b > b0 => {
                out.push((t0, t - t0));
                last = Some((t, b));
            }
            None if b > 0 => last = Some((t, b)),
            _ => {}
        }
    }
    out
}

/// What the client's transfer ended with.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub size: u64,
    pub received: u64,
    pub intact: bool,
    /// From the connect to the last byte, s.
    pub duration_s: f64,
    /// The sender's LTE subflow's congestion window (s after the connect,
    /// packets), sampled.
    pub lte_cwnd: Vec<(f64, u64)>,
}

/// The figures of a run from its samples: the bytes the client's
/// application had (s after the connect, bytes) and the bytes each
/// subflow delivered ([`Samples`]), every [`SAMPLE`].
pub fn figures(series: &[(f64, u64)], samples: &Samples, wifi: IpAddr, lte: IpAddr, o: Outcome) -> Figures {
    let (down, up) = (DOWN.as_secs_f64(), UP.as_secs_f64());
    let all = stalls(series);
    let (at, longest) = all.iter().copied().fold((0.0, 0.0), |b, s| if s.1 > b.1 { s } else { b });
    let around =
        |t: f64| all.iter().filter(|(s, l)| s + l > t && *s < t + AROUND).map(|(_, l)| *l).fold(0.0, f64::max) * 1e3;
    let (lte_takeover_ms, wifi_return_ms) = figures_from(samples, wifi, lte, down, up);
    let at_down = samples.iter().take_while(|(s, _)| *s <= down).last().map(|(_, m)| m.clone()).unwrap_or_default();
    Figures {
        longest_gap_ms: longest * 1e3,
        longest_gap_at_s: at,
        handover_gap_ms: around(down),
        return_gap_ms: around(up),
        lte_takeover_ms,
        wifi_return_ms,
        lte_bytes_at_down: at_down.iter().filter(|(k, _)| k.ip() == lte).map(|(_, v)| *v).sum(),
        lte_max_cwnd: o.lte_cwnd.iter().filter(|(t, _)| (down..up).contains(t)).map(|&(_, c)| c).max().unwrap_or(0),
        bytes_lost: o.size.saturating_sub(o.received),
        sha256_match: o.intact && o.received == o.size,
        goodput_bps: o.received as f64 * 8.0 / o.duration_s.max(1e-9),
        duration_s: o.duration_s,
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub mode: Mode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cc: Option<&'static str>,
    pub seed: u64,
    pub size_bytes: u64,
    pub paths: Vec<String>,
    pub down_at_s: f64,
    pub up_at_s: f64,
    #[serde(flatten)]
    pub figures: Figures,
    /// Bytes the client's subflows had received, by client address, at the end.
    pub bytes_by_client_addr: BTreeMap<String, u64>,
    pub client_counters: BTreeMap<&'static str, u64>,
    pub server_counters: BTreeMap<&'static str, u64>,
    pub wall_s: f64,
    pub sim_gbps_per_wall_s: f64,
    pub run_digest: String,
}

/// (t in s, bytes each subflow delivered to the client's end of it, by
/// that end's address): the receiver's view, the same in the simulator and
/// the lab, a subflow keeping its last count once it is gone.
pub type Samples = Vec<(f64, BTreeMap<SocketAddr, u64>)>;

/// The takeover and return times from the samples of delivered bytes per
/// subflow, ms: from `down` until the subflows from `lte` delivered more
/// than they had, and from `up` until a subflow from `wifi` that was not
/// there before delivered data (a subflow that only finishes its close
/// once the path is back does not count).
pub fn figures_from(samples: &Samples, wifi: IpAddr, lte: IpAddr, down: f64, up: f64) -> (Option<f64>, Option<f64>) {
    let last_before = |t: f64| samples.iter().take_while(|(s, _)| *s <= t).last().map(|(_, m)| m.clone());
    let sum =
        |m: &BTreeMap<SocketAddr, u64>, a: IpAddr| m.iter().filter(|(k, _)| k.ip() == a).map(|(_, v)| *v).sum::<u64>();
    let at_down = last_before(down).unwrap_or_default();
    let takeover =
        samples.iter().find(|(s, m)| *s > down && sum(m, lte) > sum(&at_down, lte)).map(|(s, _)| (s - down) * 1e3);
    let at_up = last_before(up).unwrap_or_default();
    let back = samples
        .iter()
        .find(|(s, m)| *s > up && m.iter().any(|(k, v)| k.ip() == wifi && !at_up.contains_key(k) && *v > 0))
        .map(|(s, _)| (s - up) * 1e3);
    (takeover, back)
}

fn client_config(p: &Params) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.tcp.congestion_control = p.cc;
    let subflow = |backup| EndpointFlags { subflow: true, backup, ..Default::default() };
    c.mptcp.pm.endpoints = vec![
        PmEndpoint { id: 1, addr: IpAddr::from(WIFI), flags: subflow(false), port: None },
        PmEndpoint { id: 2, addr: IpAddr::from(LTE), flags: subflow(p.mode == Mode::Break), port: None },
    ];
    c
}

/// Runs the handover.
pub fn run(p: &Params) -> Report {
    let wall = std::time::Instant::now();
    let (wifi, lte, server) = (IpAddr::from(WIFI), IpAddr::from(LTE), IpAddr::from(SERVER));
    let specs = vec![
        PathSpec { addr_a: wifi, addr_b: server, a_to_b: p.paths[0].link(), b_to_a: p.paths[0].link() },
        PathSpec { addr_a: lte, addr_b: server, a_to_b: p.paths[1].link(), b_to_a: p.paths[1].link() },
    ];
    let mut scfg = EndpointConfig::default();
    scfg.tcp.congestion_control = p.cc;
    let mut a = StackHost::new(Endpoint::new(client_config(p), seed32(p.seed, 0xA)));
    let mut b = StackHost::new(Endpoint::new(scfg, seed32(p.seed, 0xB)));
    let srv = SocketAddr::new(server, 5201);
    b.ep.listen(srv);
    b.accept_template = Some(BulkApp::new(p.size, p.seed ^ 0x0005_EEDB));
    let h = a.ep.connect(Instant::ZERO, SocketAddr::new(wifi, 0), srv).expect("a fresh endpoint has free ports");
    // The client asks for the download and keeps its side open, as a
    // browser does: a half-closed connection takes no new path from Linux.
    let mut app = BulkApp::new(0, p.seed ^ 0x0005_EEDA).expecting(p.seed ^ 0x0005_EEDB);
    app.close_after_peer = true;
    a.attach(h, app);
    a.pump(Instant::ZERO);
    let mut sim =
        Sim::new(SimConfig { seed: p.seed, max_time: Duration::from_secs(600), ..Default::default() }, a, b, specs);
    let (down, up) = (Instant::ZERO + DOWN, Instant::ZERO + UP);
    let mut dead = p.paths[0].link();
    dead.down = true;
    sim.schedule(crate::world::Action { at: down, path: 0, a_to_b: Some(dead), b_to_a: Some(dead) });
    sim.schedule(crate::world::Action {
        at: up,
        path: 0,
        a_to_b: Some(p.paths[0].link()),
        b_to_a: Some(p.paths[0].link()),
    });
    sim.schedule_host(down, |_, a: &mut StackHost, _| {
        let _ = a.ep.pm_endpoint_delete(1);
    });
    let wifi_ep =
        PmEndpoint { id: 1, addr: wifi, flags: EndpointFlags { subflow: true, ..Default::default() }, port: None };
    sim.schedule_host(up, move |_, a: &mut StackHost, _| {
        let _ = a.ep.pm_endpoint_add(wifi_ep);
    });
    let size = p.size;
    let mut samples: Samples = Vec::new();
    let mut series: Vec<(f64, u64)> = Vec::new();
    let mut lte_cwnd: Vec<(f64, u64)> = Vec::new();
    let end = sim.run(
        |s| s.a.apps.get(&h).is_some_and(|app| app.received >= size),
        Some(SAMPLE),
        |now, a, b| {
            series.push((now.as_secs_f64(), a.apps.get(&h).map_or(0, |app| app.received)));
            for c in b.apps.keys().filter_map(|&sh| b.ep.conn(sh)) {
                for sf in c.info().subflows.iter().filter(|sf| sf.remote.ip() == lte) {
                    lte_cwnd.push((now.as_secs_f64(), u64::from(sf.tcp.cwnd)));
                }
            }
            // What arrived, as the lab counts it (the client's
            // `bytes_received` per subflow): the sender's `bytes_acked`
            // would count a takeover one ACK's trip later.
            let mut m = BTreeMap::new();
            for sf in a.ep.conn(h).map(|c| c.info().subflows).unwrap_or_default() {
                m.insert(sf.local, sf.tcp.bytes_received);
            }
            // Subflows that closed take their count with them: keep the highest seen.
            if let Some((_, last)) = samples.last() {
                for (k, v) in last {
                    let e = m.entry(*k).or_insert(0);
                    *e = (*e).max(*v);
                }
            }
            samples.push((now.as_secs_f64(), m));
        },
    );
    let app = sim.a.apps.get(&h).expect("attached");
    let srv_app = sim.b.apps.values().next();
    let sha = srv_app.is_some_and(|s| app.received == s.sent && app.received_intact() && s.sent == size);
    let last = app.last_rx.unwrap_or(end);
    // The last sample may predate the last byte: the series ends with it.
    series.push((last.as_secs_f64(), app.received));
    let o = Outcome { size, received: app.received, intact: sha, duration_s: last.as_secs_f64(), lte_cwnd };
    let figures = figures(&series, &samples, wifi, lte, o);
    let wc = WallClock::new(wall.elapsed(), app.received);
    let mut r = Report {
        scenario: "handover",
        mode: p.mode,
        cc: (p.cc != Algorithm::default()).then(|| p.cc.name()),
        seed: p.seed,
        size_bytes: size,
        paths: p
            .paths
            .iter()
            .zip(["Wi-Fi", "LTE"])
            .map(|(q, n)| format!("{n}: {} Mbit/s, {} ms one way", q.rate_bps as f64 / 1e6, q.delay.as_millis()))
            .collect(),
        down_at_s: DOWN.as_secs_f64(),
        up_at_s: UP.as_secs_f64(),
        figures,
        bytes_by_client_addr: samples
            .last()
            .map(|(_, m)| {
                let mut by: BTreeMap<String, u64> = BTreeMap::new();
                for (k, v) in m {
                    *by.entry(k.ip().to_string()).or_insert(0) += v;
                }
                by
            })
            .unwrap_or_default(),
        client_counters: counters_map(&sim.a.ep.counters()),
        server_counters: counters_map(&sim.b.ep.counters()),
        wall_s: wc.wall_s,
        sim_gbps_per_wall_s: wc.sim_gbps_per_wall_s,
        run_digest: String::new(),
    };
    r.run_digest = crate::report::run_digest(&r);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_mode(mode: Mode) -> Report {
        run(&Params { mode, size: 40 * 1024 * 1024, ..Params::default() })
    }

    #[test]
    fn both_handovers_lose_nothing_and_use_wifi_again() {
        for mode in [Mode::Break, Mode::Make] {
            let r = run_mode(mode);
            let f = &r.figures;
            assert!(f.sha256_match, "{mode:?}: {r:#?}");
            assert_eq!(f.bytes_lost, 0);
            // The operator's endpoint delete reached the server as RM_ADDR
            // (sent on the LTE subflow: never on the one it withdraws)...
            assert_eq!(r.client_counters.get("MPTcpExtRmAddrTx"), Some(&1), "{mode:?}: {:?}", r.client_counters);
            assert_eq!(r.server_counters.get("MPTcpExtRmAddr"), Some(&1), "{mode:?}: {:?}", r.server_counters);
            // ... and the endpoint added back made a new join from Wi-Fi,
            // which carried data within a few round trips.
            assert_eq!(r.server_counters.get("MPTcpExtMPJoinAckRx"), Some(&2), "{mode:?}: {:?}", r.server_counters);
            let back = f.wifi_return_ms.unwrap_or_else(|| panic!("{mode:?}: Wi-Fi never used again: {r:#?}"));
            assert!(back <= 200.0, "{mode:?}: Wi-Fi back after {back} ms");
            assert!(f.handover_gap_ms < 1_000.0, "{mode:?}: {} ms", f.handover_gap_ms);
            assert!(f.longest_gap_ms >= f.handover_gap_ms && f.longest_gap_ms >= f.return_gap_ms);
        }
    }

    /// The stall in the middle of the outage (docs/mptcp.md "Handover"):
    /// CUBIC's first epoch on LTE grows its window past LTE's BDP plus its
    /// queue before Wi-Fi returns, the full queue drops, and the repair
    /// waits one full-queue round trip. Not a timeout, not the scheduler:
    /// the kernel's CUBIC stalls the same 730 ms when its slow start ends
    /// where mptun's does. Should slow start end earlier (an ACK train the
    /// receiver makes possible), the window stays below the limit and this
    /// test says which of the two changed.
    #[test]
    fn the_mid_outage_stall_is_lte_s_full_queue_dropping() {
        let r = run(&Params::default());
        let f = &r.figures;
        let lte = &Params::default().paths[1];
        let link = lte.link();
        let bdp = link.bdp_bytes(lte.delay * 2) / 1500;
        let limit = bdp + link.limit_packets.expect("LTE has a finite queue") as u64;
        assert!(f.lte_max_cwnd > limit, "LTE's window {} stayed below BDP + queue {limit}", f.lte_max_cwnd);
        let (down, up) = (DOWN.as_secs_f64(), UP.as_secs_f64());
        assert!(f.longest_gap_at_s > down + AROUND && f.longest_gap_at_s < up, "{f:?}");
        // One RTT at a full queue: 120 ms of path plus 500 packets at 10 Mbit/s.
        let full_rtt_ms = 2e3 * lte.delay.as_secs_f64() + limit as f64 * 1500.0 * 8.0 / lte.rate_bps as f64 * 1e3;
        assert!((f.longest_gap_ms - full_rtt_ms).abs() < 0.2 * full_rtt_ms, "{} vs {full_rtt_ms} ms", f.longest_gap_ms);
        // (Repaired by fast recovery; the endpoint's TCPTimeouts are the
        // dead Wi-Fi subflow's.)
        assert!(r.server_counters.get("TcpExtTCPSackRecovery").copied().unwrap_or(0) >= 1, "{:?}", r.server_counters);
    }

    #[test]
    fn an_active_lte_subflow_takes_over_at_once_a_backup_one_later() {
        let (b, m) = (run_mode(Mode::Break), run_mode(Mode::Make));
        let (tb, tm) = (b.figures.lte_takeover_ms.unwrap(), m.figures.lte_takeover_ms.unwrap());
        assert!(tm <= SAMPLE.as_secs_f64() * 1e3, "make: LTE already carries data: {tm} ms");
        assert!(tb > tm, "break: the backup subflow waits for RM_ADDR: {tb} ms, make {tm} ms");
        // The backup's takeover is one LTE round trip: the client's
        // REMOVE_ADDR to the server, the server's data back, counted when it
        // arrives (as the lab counts it, docs/mptcp.md "Handover"), not one
        // more one-way trip later when its ACK reaches the sender.
        let rtt_ms = 2e3 * Params::default().paths[1].delay.as_secs_f64();
        let slack_ms = 3e3 * SAMPLE.as_secs_f64();
        assert!(tb >= rtt_ms && tb < rtt_ms + slack_ms, "break takeover {tb} ms, LTE RTT {rtt_ms} ms");
        // LTE carried data before the loss only when it was active.
        assert_eq!(b.figures.lte_bytes_at_down, 0, "a backup subflow stays idle");
        assert!(m.figures.lte_bytes_at_down > 1_000_000, "{}", m.figures.lte_bytes_at_down);
    }
}

#[cfg(test)]
mod stall_tests {
    use super::stalls;

    #[test]
    fn a_stall_lies_between_two_growths_of_the_count() {
        let s = [(0.0, 0), (0.1, 0), (0.2, 10), (0.3, 20), (0.4, 20), (0.5, 20), (0.9, 30), (1.0, 40)];
        let st = stalls(&s);
        let longest = st.iter().map(|x| x.1).fold(0.0, f64::max);
        assert!((longest - 0.6).abs() < 1e-9, "{st:?}");
        assert!(st.iter().any(|&(t, l)| (t - 0.3).abs() < 1e-9 && (l - 0.6).abs() < 1e-9));
        // The wait for the first byte is no stall.
        assert!(stalls(&[(0.0, 0), (5.0, 0), (5.1, 1)]).is_empty());
    }
}
