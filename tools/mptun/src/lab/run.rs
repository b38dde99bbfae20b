//! `mptun lab run FILE`: a scenario file (the one `mptun sim run` takes)
//! on real packets. Each `[[link]]` becomes one linkem path of the lab
//! (client — linkem — server namespaces, `topo.sh`), each route the path
//! of its link, and each flow a pair of `mptun lab peer` processes:
//!
//! * an MPTCP flow runs on mptun's stack at both ends (`--stack mptun`,
//!   the default; TUN devices, one per address it leaves from, routed
//!   through the link of that address's route), or on the kernel's MPTCP
//!   at both ends (`--stack kernel`: uncoupled, its own scheduler; one
//!   `subflow` endpoint per further address);
//! * a TCP flow is the kernel's TCP at both ends, with the flow's
//!   controller or `--tcp-cc` (any the kernel has: cubic, bbr, reno).
//!
//! Each flow's goodput is what its server received over the file's
//! measurement window, and the simulator's run of the same file, seed and
//! `--cc` stands beside it. Unresponsive (`udp`) flows are kernel UDP
//! sockets (`lab peer --udp`, the simulator's on/off source). Routes
//! through several links are chains of linkem paths joined by router
//! namespaces ([`super::routes`]). What the lab cannot build is refused
//! before anything is: more than 8 links, routes that no placement of the
//! links carries (a link back into the client), more than 8 routers.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use mptun_cc::Algorithm;
use mptun_link::Qdisc;
use mptun_sim::scenarios::network::{FlowKind, Spec};
use serde::Serialize;

use super::peer::{parse_report, PeerReport, READY};
use super::routes::Wiring;
use super::topo::{LabCommon, LabStack, Proc, Topology};
use crate::report::Verdict;
use crate::scenario_file::{self, Overrides};
use crate::units::parse_duration;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the report (each flow's lab and simulator figures) as JSON")))]
pub(crate) struct RunArgs {
    /// The scenario file (TOML; docs/scenarios/ has examples).
    file: PathBuf,
    /// The MPTCP flows' congestion control, as `mptun sim run --cc` (the kernel's MPTCP, uncoupled,
    /// runs cubic or reno: a coupled name becomes cubic there).
    #[arg(long)]
    cc: Option<Algorithm>,
    /// Whose MPTCP carries the MPTCP flows, at both ends.
    #[arg(long, value_enum, default_value = "mptun")]
    stack: LabStack,
    /// Whose TCP carries the TCP flows, at both ends (mptun: plain TCP over its TUN devices).
    #[arg(long, value_enum, default_value = "kernel")]
    tcp_stack: LabStack,
    /// The TCP flows' controller (the kernel's: cubic, bbr, reno, ...); default each flow's `cc`.
    #[arg(long, value_name = "NAME")]
    tcp_cc: Option<String>,
    /// mptun's pacer for its MPTCP flows: edt (the default), quantum or none (the kernel's TCP here
    /// paces only under BBR: this machine has no fq qdisc).
    #[arg(long)]
    pacer: Option<mptun::PacerKind>,
    /// Whether the kernel's TCP flows pace, as the simulator's do: on sets SO_MAX_PACING_RATE (far
    /// above any link here), which turns on the kernel TCP's internal pacing without an fq qdisc;
    /// off leaves the kernel's default, unpaced CUBIC (bursts of ACK-clocked segments). The kernel's
    /// MPTCP socket refuses the option: its flows go unpaced either way.
    #[arg(long, value_enum, default_value = "on")]
    kernel_pacing: OnOff,
    /// Seed of the simulator's run (the lab's own randomness is linkem's, seeded per path).
    #[arg(long)]
    seed: Option<u64>,
    /// Every link's buffer, in BDPs of its round trip (the file's `queue` otherwise), in the lab
    /// and in the simulator's run beside it.
    #[arg(long, value_name = "BDP")]
    queue_bdp: Option<f64>,
    /// Run this long instead of the file's duration (the measurement then starts at half of it,
    /// unless the file's `measure_from` still falls inside).
    #[arg(long, value_parser = parse_duration, allow_negative_numbers = true)]
    duration: Option<mptun_time::Duration>,
    /// Write each sender's per-subflow samples (every 100 ms: cwnd, srtt, bytes acknowledged,
    /// pacing rate, BBR's model) as DIR/<scenario>.lab.csv, time from the scenario's start, to set
    /// beside `mptun sim run --csv`'s.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) common: LabCommon,
}

/// A switch on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// SO_MAX_PACING_RATE that turns the kernel's internal pacing on without
/// limiting it: 10 Gbit/s, beyond every lab link.
const KERNEL_PACING_CAP: u64 = 1_250_000_000;

/// How one flow of the file is carried.
#[derive(Clone, Debug, PartialEq)]
enum Carrier {
    /// mptun at both ends: server TUN `10.8.f.2`, client TUNs `10.9.k.2`
    /// (one per address); plain TCP when `tcp` (a TCP flow on mptun's stack).
    Mptun { f: u8, ks: Vec<u8>, tcp: bool },
    /// The kernel's MPTCP at both ends.
    KernelMptcp,
    /// The kernel's TCP at both ends.
    KernelTcp,
    /// Unresponsive UDP from a kernel socket to a kernel socket (`lab peer --udp`).
    KernelUdp(super::udp::UdpFlow),
}

/// One flow as the lab runs it.
#[derive(Clone, Debug)]
struct LabFlow {
    carrier: Carrier,
    /// Lab path (1-based) of each address the flow leaves from, the first
    /// one's first; with multi-link routes, its lab route instead
    /// ([`Plan::wiring`]).
    paths: Vec<u8>,
    /// Where a kernel flow's server listens and its client connects.
    server_addr: Ipv4Addr,
    cc: String,
    scheduler: Option<mptun::Policy>,
    port: u16,
    start: Duration,
    /// Seconds of sending, from its connection's start.
    send_for: f64,
}

/// The lab's plan for a file: the linkem specs, each flow's carrier and
/// the routes mptun's TUN subnets need.
#[derive(Debug)]
struct Plan {
    specs: Vec<String>,
    flows: Vec<LabFlow>,
    /// (client TUN subnet k, lab path).
    client_nets: Vec<(u8, u8)>,
    /// (server TUN subnet f, lab path its first subflow takes).
    server_nets: Vec<(u8, u8)>,
    /// With a route through several links: how the paths chain into the
    /// routes, and then every `paths` above is a lab route of it.
    wiring: Option<Wiring>,
}

/// A link of the file as linkem spells it: the simulator's router queue
/// (`limit-scope=bottleneck`), its jitter order-preserving.
fn linkem_spec(l: &mptun_sim::scenarios::bottleneck::Bottleneck) -> String {
    let (_, queue, _) = l.link();
    let mut s =
        format!("rate={}bit,delay={}us,limit={queue},limit-scope=bottleneck", l.rate_bps, (l.rtt / 2).as_micros());
    if !l.jitter.is_zero() {
        s.push_str(&format!(",jitter={}us,jitter-mode=ordered", l.jitter.as_micros()));
    }
    if let Qdisc::Codel(p) = l.qdisc {
        s.push_str(&format!(
            ",qdisc=codel,codel-target={}us,codel-interval={}us",
            p.target.as_micros(),
            p.interval.as_micros()
        ));
    }
    if let Qdisc::Red(p) = l.qdisc {
        s.push_str(&format!(
            ",qdisc=red,red-min={},red-max={},red-probability={}",
            p.min_bytes,
            p.max_bytes,
            f64::from(p.max_p_ppm) / 1e6
        ));
    }
    s
}

fn plan(spec: &Spec, stack: LabStack, tcp_stack: LabStack, tcp_cc: Option<&str>) -> Result<Plan> {
    if spec.links.is_empty() || spec.links.len() > 8 {
        bail!("the lab builds 1 to 8 links; the file has {}", spec.links.len());
    }
    let specs = spec.links.iter().map(|l| linkem_spec(&l.link)).collect();
    let link_index = |name: &str| -> Result<u8> {
        let i = spec.links.iter().position(|l| l.name == name).ok_or_else(|| anyhow!("no link named {name}"))?;
        Ok(i as u8 + 1)
    };
    // The file's route each address leaves by.
    let route_of = |flow: usize, a: IpAddr, to: IpAddr| -> Result<usize> {
        spec.routes
            .iter()
            .position(|r| r.a == a && r.b == to)
            .or_else(|| spec.routes.iter().position(|r| r.a == a))
            .ok_or_else(|| anyhow!("flow {flow}: no route from {a}"))
    };
    let mut used: Vec<usize> = Vec::new();
    for (i, f) in spec.flows.iter().enumerate() {
        for &a in &f.from {
            let r = route_of(i, a, f.to)?;
            if !used.contains(&r) {
                used.push(r);
            }
        }
    }
    let routes = used
        .iter()
        .map(|&r| spec.routes[r].links.iter().map(|l| link_index(l)).collect::<Result<Vec<u8>>>())
        .collect::<Result<Vec<Vec<u8>>>>()?;
    // One link per route: topo.sh's flat lab, each address on the path of
    // its link. Otherwise the paths chain into routes through routers.
    let wiring =
        if routes.iter().all(|r| r.len() == 1) { None } else { Some(Wiring::build(spec.links.len() as u8, &routes)?) };
    let path_of = |flow: usize, a: IpAddr, to: IpAddr| -> Result<u8> {
        let r = route_of(flow, a, to)?;
        let r = used.iter().position(|&u| u == r).expect("every address's route is listed above");
        Ok(if wiring.is_some() { r as u8 + 1 } else { routes[r][0] })
    };
    let server_addr = |route: u8, kernel_mptcp: bool| match &wiring {
        Some(w) => w.server_addr(route),
        None if kernel_mptcp => Ipv4Addr::new(10, 0, 1, 2),
        None => Ipv4Addr::new(10, 0, route, 2),
    };
    let (mut flows, mut client_nets, mut server_nets) = (Vec::new(), Vec::new(), Vec::new());
    let (mut next_f, mut next_k, mut kernel_mptcp) = (1u8, 1u8, 0);
    for (i, f) in spec.flows.iter().enumerate() {
        let paths = f.from.iter().map(|&a| path_of(i, a, f.to)).collect::<Result<Vec<u8>>>()?;
        if paths.is_empty() {
            bail!("flow {i}: no address to leave from");
        }
        let end = f.stop.unwrap_or(spec.duration).min(spec.duration);
        if end <= f.start {
            bail!("flow {i}: it stops before it starts");
        }
        let on_mptun = match f.kind {
            FlowKind::Mptcp => stack == LabStack::Mptun,
            FlowKind::Tcp => tcp_stack == LabStack::Mptun,
            FlowKind::Unresponsive { .. } => false,
        };
        let (carrier, cc) = match (&f.kind, stack) {
            (FlowKind::Mptcp | FlowKind::Tcp, _) if on_mptun => {
                let tcp = f.kind == FlowKind::Tcp;
                let cc = match (tcp, tcp_cc) {
                    (true, Some(name)) => name.parse::<Algorithm>().map_err(|e| anyhow!("--tcp-cc: {e}"))?.name(),
                    _ => f.cc.name(),
                };
                let ks: Vec<u8> = (0..paths.len() as u8).map(|j| next_k + j).collect();
                next_k += paths.len() as u8;
                client_nets.extend(ks.iter().copied().zip(paths.iter().copied()));
                server_nets.push((next_f, paths[0]));
                next_f += 1;
                (Carrier::Mptun { f: next_f - 1, ks, tcp }, cc.to_string())
            }
            (FlowKind::Mptcp, _) => {
                kernel_mptcp += 1;
                if paths[0] != 1 && wiring.is_none() {
                    bail!("flow {i}: the kernel's MPTCP flow must leave from an address routed over the first link");
                }
                // Uncoupled: the kernel has reno, cubic and bbr; a coupled name becomes cubic.
                let cc = match f.cc {
                    Algorithm::Reno => "reno",
                    Algorithm::Bbr => "bbr",
                    _ => "cubic",
                };
                (Carrier::KernelMptcp, cc.to_string())
            }
            (FlowKind::Tcp, _) => (Carrier::KernelTcp, tcp_cc.map_or_else(|| f.cc.name().to_string(), String::from)),
            (&FlowKind::Unresponsive { rate_bps, packet, on, off }, _) => {
                let span = |d: mptun_time::Duration| Duration::from_nanos(d.as_nanos() as u64);
                let u = super::udp::UdpFlow { rate_bps, packet, on: span(on), off: span(off) };
                (Carrier::KernelUdp(u), "none".to_string())
            }
        };
        if next_k > 200 || next_f > 200 {
            bail!("too many mptun flows and addresses for the lab's address plan");
        }
        flows.push(LabFlow {
            server_addr: server_addr(paths[0], carrier == Carrier::KernelMptcp),
            carrier,
            paths,
            cc,
            scheduler: (f.kind == FlowKind::Mptcp && stack == LabStack::Mptun).then_some(f.policy),
            port: 5600 + i as u16,
            start: f.start,
            send_for: (end - f.start).as_secs_f64(),
        });
    }
    if kernel_mptcp > 1 {
        bail!("the kernel's endpoints are per namespace: one kernel MPTCP flow per run");
    }
    Ok(Plan { specs, flows, client_nets, server_nets, wiring })
}

/// Whether the kernel's internal pacing carries flow `f`: its TCP flows
/// with `kernel_pacing` (the kernel's MPTCP socket refuses
/// SO_MAX_PACING_RATE, EOPNOTSUPP on Linux 6.18, so its flows go unpaced).
fn paced_by_kernel(f: &LabFlow, kernel_pacing: bool) -> bool {
    kernel_pacing && f.carrier == Carrier::KernelTcp
}

/// The peers' arguments for flow `f`: (server, client); `pacer` for
/// mptun's sender, `kernel_pacing` for the kernel's.
fn peer_args(f: &LabFlow, pacer: Option<mptun::PacerKind>, kernel_pacing: bool) -> (Vec<String>, Vec<String>) {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let mut srv = s(&["lab", "peer", "--trace", "--sample-ms", "100"]);
    let mut cli = s(&["lab", "peer", "--trace", "--sample-ms", "100", "--send-for"]);
    cli.push(format!("{:.3}", f.send_for));
    if paced_by_kernel(f, kernel_pacing) {
        cli.extend(["--max-pacing-rate".into(), KERNEL_PACING_CAP.to_string()]);
    }
    match &f.carrier {
        Carrier::Mptun { f: n, ks, tcp } => {
            let sched = f.scheduler.unwrap_or_default().to_string();
            srv.extend(s(&["--stack", "mptun", "--cc", &f.cc, "--scheduler", &sched, "--path"]));
            srv.push(format!("dev=mlrs{n},addr=10.8.{n}.2/24,peer=10.8.{n}.1"));
            srv.extend(["--listen".into(), format!("10.8.{n}.2:{}", f.port)]);
            cli.extend(s(&["--stack", "mptun", "--cc", &f.cc, "--scheduler", &sched]));
            if *tcp {
                cli.push("--no-mptcp".into());
            }
            if let Some(p) = pacer {
                cli.extend(["--pacer".into(), p.to_string()]);
            }
            for k in ks {
                cli.extend(["--path".into(), format!("dev=mlrc{k},addr=10.9.{k}.2/24,peer=10.9.{k}.1")]);
            }
            cli.extend(["--connect".into(), format!("10.8.{n}.2:{}", f.port)]);
        }
        Carrier::KernelMptcp => {
            srv.extend(s(&["--stack", "kernel", "--listen"]));
            srv.push(format!("0.0.0.0:{}", f.port));
            cli.extend(s(&["--stack", "kernel", "--cc", &f.cc, "--connect"]));
            cli.push(format!("{}:{}", f.server_addr, f.port));
        }
        Carrier::KernelUdp(u) => {
            let to = format!("{}:{}", f.server_addr, f.port);
            let udp = |v: &mut Vec<String>| {
                v.extend(s(&["--stack", "kernel", "--udp", &u.rate_bps.to_string()]));
                v.extend(["--udp-packet".into(), u.packet.to_string()]);
                v.extend(["--udp-on".into(), format!("{}us", u.on.as_micros())]);
                v.extend(["--udp-off".into(), format!("{}us", u.off.as_micros())]);
            };
            udp(&mut srv);
            srv.extend(["--listen".into(), to.clone()]);
            udp(&mut cli);
            cli.extend(["--connect".into(), to]);
        }
        Carrier::KernelTcp => {
            let to = format!("{}:{}", f.server_addr, f.port);
            srv.extend(s(&["--stack", "kernel", "--no-mptcp", "--listen", &to]));
            cli.extend(s(&["--stack", "kernel", "--no-mptcp", "--cc", &f.cc, "--connect", &to]));
        }
    }
    (srv, cli)
}

/// Bytes received by `t` seconds after the connection was up, from the
/// server's samples (linear between two).
fn received_at(series: &[(f64, u64)], t: f64) -> f64 {
    let mut prev = (0.0, 0u64);
    for &(ts, b) in series {
        if ts >= t {
            let span = ts - prev.0;
            let frac = if span > 0.0 { (t - prev.0) / span } else { 1.0 };
            return prev.1 as f64 + (b as f64 - prev.1 as f64) * frac.clamp(0.0, 1.0);
        }
        prev = (ts, b);
    }
    prev.1 as f64
}

#[derive(Serialize)]
struct FlowRow {
    kind: &'static str,
    /// Who runs it, at both ends.
    stack: &'static str,
    cc: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduler: Option<String>,
    subflows: usize,
    /// Its sender paced (mptun's pacer, or the kernel's internal pacing).
    paced: bool,
    goodput_bps: f64,
    share: f64,
    sim_goodput_bps: f64,
    sim_share: f64,
    /// Lab share minus the simulator's.
    share_delta: f64,
    bytes: u64,
    sha256_match: bool,
    /// The sender's first subflow over the measurement window, medians of
    /// its 100 ms samples: what BBR's model and pacing made of the path.
    sender: Option<SenderMedians>,
}

/// The senders' samples of a lab run as CSV (`--csv`): one row per subflow
/// per sample, the time from the scenario's start (a flow's own start
/// added), so a lab run and the simulator's trace of the same file can be
/// plotted on one axis.
fn write_csv(
    path: &std::path::Path,
    plan: &Plan,
    reports: &[(PeerReport, PeerReport)],
    flows: &[FlowRow],
) -> Result<()> {
    use std::io::Write;
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "t_s,flow,kind,cc,subflow,cwnd,srtt_us,bytes_acked,pacing_rate_bps,bbr_bw_bps,bbr_min_rtt_us")?;
    for (i, ((pf, (cr, _)), row)) in plan.flows.iter().zip(reports).zip(flows).enumerate() {
        let start = pf.start.as_secs_f64();
        for (t, points) in &cr.subflow_series {
            for p in points {
                let pacing = if p.pacing_rate == u64::MAX { String::new() } else { (p.pacing_rate * 8).to_string() };
                let (bw, mrtt) =
                    p.bbr.map_or((String::new(), String::new()), |(b, m)| ((b * 8).to_string(), m.to_string()));
                writeln!(
                    f,
                    "{:.3},{i},{},{},{},{},{},{},{pacing},{bw},{mrtt}",
                    start + t,
                    row.kind,
                    row.cc,
                    p.id,
                    p.cwnd,
                    p.srtt_us,
                    p.bytes_acked
                )?;
            }
        }
    }
    f.flush()?;
    Ok(())
}

/// Medians of a sender's samples (see [`sender_medians`]).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
struct SenderMedians {
    samples: usize,
    cwnd: f64,
    srtt_ms: f64,
    /// Payload bit/s; `None` when unpaced.
    pacing_rate_bps: Option<f64>,
    /// BBR's bandwidth estimate, bit/s, and min RTT, ms (`ss -ti`'s
    /// `bbr:(bw:…,mrtt:…)` for the kernel's TCP).
    bbr_bw_bps: Option<f64>,
    bbr_min_rtt_ms: Option<f64>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// The medians of the first subflow's samples taken from `from` to `to`
/// seconds of the flow's life.
fn sender_medians(series: &[(f64, Vec<super::peer::SubflowPoint>)], from: f64, to: f64) -> Option<SenderMedians> {
    let pts: Vec<&super::peer::SubflowPoint> =
        series.iter().filter(|(t, _)| *t >= from && *t <= to).filter_map(|(_, v)| v.first()).collect();
    if pts.is_empty() {
        return None;
    }
    let paced: Vec<f64> = pts
        .iter()
        .filter(|p| p.pacing_rate != u64::MAX && p.pacing_rate > 0)
        .map(|p| p.pacing_rate as f64 * 8.0)
        .collect();
    Some(SenderMedians {
        samples: pts.len(),
        cwnd: median(pts.iter().map(|p| p.cwnd as f64).collect())?,
        srtt_ms: median(pts.iter().map(|p| p.srtt_us as f64 / 1000.0).collect())?,
        pacing_rate_bps: if paced.len() * 2 > pts.len() { median(paced) } else { None },
        bbr_bw_bps: median(pts.iter().filter_map(|p| p.bbr).map(|b| b.0 as f64 * 8.0).collect()),
        bbr_min_rtt_ms: median(pts.iter().filter_map(|p| p.bbr).map(|b| f64::from(b.1) / 1000.0).collect()),
    })
}

/// One link of the file, lab beside simulator: which links each route's
/// traffic crossed and where it was dropped, so a multi-link route is seen
/// to take its links.
#[derive(Serialize)]
struct LinkRow {
    name: String,
    /// Frames linkem forwarded, client to server (Ethernet headers
    /// included: 14 bytes per frame over the simulator's IP bytes); `None`
    /// where its counters could not be read.
    lab_a2b_bytes: Option<u64>,
    /// And server to client.
    lab_b2a_bytes: Option<u64>,
    /// Dropped by the full queue, client to server (the simulator counts
    /// that direction).
    lab_dropped_queue: Option<u64>,
    /// Dropped by the queue discipline (CoDel, RED), client to server.
    lab_dropped_aqm: Option<u64>,
    sim_a2b_bytes: u64,
    sim_dropped_queue: u64,
    sim_dropped_aqm: u64,
}

#[derive(Serialize)]
struct LabRunReport {
    scenario: String,
    seed: u64,
    duration_s: f64,
    measure_from_s: f64,
    mptcp_stack: &'static str,
    flows: Vec<FlowRow>,
    links: Vec<LinkRow>,
    sim_run_digest: String,
}

/// Carries out `plan` on `topo`: the TUN routes, the kernel's endpoints.
fn prepare(topo: &Topology, spec: &Spec, plan: &Plan) -> Result<()> {
    match &plan.wiring {
        None => topo.tun_routes(&plan.client_nets, &plan.server_nets)?,
        Some(w) => topo.wire(w, &plan.client_nets, &plan.server_nets)?,
    }
    for (f, fl) in plan.flows.iter().zip(&spec.flows) {
        if f.carrier != Carrier::KernelMptcp {
            continue;
        }
        topo.ip(&topo.cli, &["mptcp", "endpoint", "flush"])?;
        match &plan.wiring {
            Some(w) => {
                // topo.sh made no MPTCP setup with routers (--no-mptcp).
                for ns in [&topo.cli, &topo.srv] {
                    topo.sysctl(ns, "net.mptcp.enabled", "1")?;
                }
                // Each further address is its own route's client address,
                // which the client's rules send over that route.
                for &r in &f.paths[1..] {
                    let (addr, dev) = (w.client_addr(r).to_string(), format!("c{}", w.routes[usize::from(r) - 1][0]));
                    topo.ip(&topo.cli, &["mptcp", "endpoint", "add", &addr, "dev", &dev, "subflow"])?;
                }
            }
            None => {
                let mut used = BTreeSet::from([1u8]);
                for (j, &p) in f.paths.iter().enumerate().skip(1) {
                    let addr = if used.insert(p) {
                        // This path's own address (topo.sh routes it over that path).
                        format!("10.0.{p}.1")
                    } else {
                        // A further address on the same path.
                        let a = format!("10.0.{p}.{}", 10 + j);
                        topo.ip(&topo.cli, &["addr", "add", &format!("{a}/24"), "dev", &format!("c{p}")])?;
                        if p > 1 {
                            let table = (100 + u32::from(p)).to_string();
                            topo.ip(&topo.cli, &["rule", "add", "from", &a, "table", &table])?;
                        }
                        a
                    };
                    topo.ip(&topo.cli, &["mptcp", "endpoint", "add", &addr, "dev", &format!("c{p}"), "subflow"])?;
                }
            }
        }
        let n = (fl.from.len() - 1).to_string();
        for ns in [&topo.cli, &topo.srv] {
            topo.ip(ns, &["mptcp", "limits", "set", "subflows", &n, "add_addr_accepted", "0"])?;
        }
    }
    Ok(())
}

pub(crate) fn run(a: RunArgs) -> Result<Verdict> {
    let mut spec = scenario_file::load(&a.file, Overrides { mptcp_cc: a.cc, seed: a.seed, queue_bdp: a.queue_bdp })?;
    if let Some(d) = a.duration {
        spec.duration = d;
        spec.measure_from = spec.measure_from.filter(|&m| m < d);
    }
    let plan = plan(&spec, a.stack, a.tcp_stack, a.tcp_cc.as_deref())?;
    // The simulator's run beside it takes --tcp-cc too where mptun has it.
    if let Some(alg) = a.tcp_cc.as_deref().and_then(|n| n.parse::<Algorithm>().ok()) {
        spec.flows.iter_mut().filter(|f| f.kind == FlowKind::Tcp).for_each(|f| f.cc = alg);
    }
    let sim = scenario_file::run(&spec)?;
    let what = format!("MPTCP flows on {}'s stack, TCP flows on {}'s", a.stack.name(), a.tcp_stack.name());
    let ends = plan.wiring.as_ref().map(Wiring::ends_arg);
    let topo = Topology::plan(&a.common)?.with_ends(ends).up_with(&plan.specs, &what, plan.wiring.is_none())?;
    prepare(&topo, &spec, &plan)?;
    let mut servers: Vec<Proc> = Vec::new();
    let mut args = Vec::new();
    for f in &plan.flows {
        let (srv, cli) = peer_args(f, a.pacer, a.kernel_pacing == OnOff::On);
        let mut p = topo.spawn(&topo.srv, &srv)?;
        p.wait_ready(READY, Duration::from_secs(10)).context("a server peer")?;
        servers.push(p);
        args.push(cli);
    }
    // The clients, each at its flow's start.
    let mut order: Vec<usize> = (0..plan.flows.len()).collect();
    order.sort_by_key(|&i| plan.flows[i].start);
    let t0 = Instant::now();
    let mut clients: Vec<Option<Proc>> = (0..plan.flows.len()).map(|_| None).collect();
    for i in order {
        while t0.elapsed() < plan.flows[i].start {
            if crate::signals::received().is_some() {
                return Err(crate::signals::interrupted());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        clients[i] = Some(topo.spawn(&topo.cli, &args[i])?);
    }
    let parse = |what: &str, i: usize, r: Result<(std::process::ExitStatus, String, String)>| -> Result<PeerReport> {
        let what = format!("flow {i}'s {what}");
        parse_report(&what, r.with_context(|| what.clone())?)
    };
    let mut reports = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let limit = Duration::from_secs_f64(plan.flows[i].send_for + 60.0);
        let cr = parse("client", i, c.as_mut().expect("started").finish(limit))?;
        let sr = parse("server", i, servers[i].finish(Duration::from_secs(30)))?;
        reports.push((cr, sr));
    }
    // Each linkem's counters before the teardown removes its socket. The
    // flows' figures are in hand by now: a link whose counters cannot be
    // read is left out of the links table with a warning, not the run.
    let lab_links: Vec<serde_json::Value> = (1..=plan.specs.len() as u8)
        .map(|i| {
            let stats = topo.ctl(i, &["stats"]).and_then(|s| {
                serde_json::from_str::<serde_json::Value>(&s).map_err(|e| anyhow!("linkem {i}'s stats: {e}"))
            });
            stats.unwrap_or_else(|e| {
                eprintln!("lab: warning: no counters from link {i}: {e:#}");
                serde_json::Value::Null
            })
        })
        .collect();
    drop(topo);
    let n = |v: &serde_json::Value| v.as_u64();
    let links = lab_links
        .iter()
        .zip(&sim.links)
        .map(|(l, s)| LinkRow {
            name: s.name.clone(),
            lab_a2b_bytes: n(&l["a2b"]["forwarded_bytes"]),
            lab_b2a_bytes: n(&l["b2a"]["forwarded_bytes"]),
            lab_dropped_queue: n(&l["a2b"]["dropped"]["queue_full"]),
            lab_dropped_aqm: n(&l["a2b"]["dropped"]["aqm"]),
            sim_a2b_bytes: s.delivered_bytes,
            sim_dropped_queue: s.dropped_queue,
            sim_dropped_aqm: s.dropped_aqm,
        })
        .collect();
    let measure = spec.measure_from.unwrap_or(spec.duration / 2).min(spec.duration).as_secs_f64();
    let end = spec.duration.as_secs_f64();
    let goodputs: Vec<f64> = plan
        .flows
        .iter()
        .zip(&reports)
        .map(|(f, (_, sr))| {
            let s = f.start.as_secs_f64();
            let (from, to) = ((measure - s).max(0.0), (end - s).max(0.0));
            if to <= from {
                return 0.0;
            }
            (received_at(&sr.rx_series, to) - received_at(&sr.rx_series, from)) * 8.0 / (end - measure)
        })
        .collect();
    let total: f64 = goodputs.iter().sum::<f64>().max(1e-9);
    let stack_name = |c: &Carrier| match c {
        Carrier::Mptun { .. } => "mptun",
        Carrier::KernelMptcp | Carrier::KernelTcp | Carrier::KernelUdp(_) => "kernel",
    };
    let flows: Vec<FlowRow> = plan
        .flows
        .iter()
        .zip(&reports)
        .zip(&goodputs)
        .zip(&sim.flows)
        .map(|(((f, (cr, sr)), &g), s)| FlowRow {
            kind: s.kind,
            stack: stack_name(&f.carrier),
            cc: f.cc.clone(),
            scheduler: match f.carrier {
                Carrier::KernelMptcp => Some("kernel".into()),
                _ => f.scheduler.map(|p| p.to_string()),
            },
            subflows: cr.subflows_max,
            paced: match f.carrier {
                Carrier::Mptun { .. } => a.pacer != Some(mptun::PacerKind::None),
                _ => paced_by_kernel(f, a.kernel_pacing == OnOff::On),
            },
            goodput_bps: g,
            share: g / total,
            sim_goodput_bps: s.goodput_bps,
            sim_share: s.share,
            share_delta: g / total - s.share,
            bytes: sr.received,
            // A UDP flow loses what the queue drops: intact means every
            // datagram that arrived was the one sent, and no more arrived.
            sha256_match: match f.carrier {
                Carrier::KernelUdp(_) => sr.counter("UdpDatagramsCorrupt") == 0 && sr.received <= cr.sent,
                _ => cr.intact_with(sr),
            },
            sender: {
                let s = f.start.as_secs_f64();
                sender_medians(&cr.subflow_series, (measure - s).max(0.0), (end - s).max(0.0))
            },
        })
        .collect();
    if let Some(dir) = &a.csv {
        let path = dir.join(format!("{}.lab.csv", spec.name));
        write_csv(&path, &plan, &reports, &flows).with_context(|| format!("writing {}", path.display()))?;
    }
    let r = LabRunReport {
        scenario: spec.name.clone(),
        seed: spec.seed,
        duration_s: end,
        measure_from_s: measure,
        mptcp_stack: a.stack.name(),
        flows,
        links,
        sim_run_digest: sim.run_digest.clone(),
    };
    super::emit(a.common.json.json, &r, || {
        println!(
            "{} on real packets, MPTCP on {}'s stack; goodput from {measure:.1} s to {end:.1} s:",
            r.scenario, r.mptcp_stack
        );
        println!("  flow kind   stack   cc      subflows  lab Mbit/s  share   sim Mbit/s  share   delta  sha256");
        for (i, f) in r.flows.iter().enumerate() {
            println!(
                "  {i:<4} {:<6} {:<7} {:<7} {:>8}  {:>10.2}  {:.3}  {:>10.2}  {:.3}  {:>+.3}  {}",
                f.kind,
                f.stack,
                f.cc,
                f.subflows,
                f.goodput_bps / 1e6,
                f.share,
                f.sim_goodput_bps / 1e6,
                f.sim_share,
                f.share_delta,
                if f.sha256_match { "match" } else { "MISMATCH" }
            );
        }
        println!("  links, client to server over the whole run (lab bytes are frames):");
        println!("  link              lab MB  sim MB  lab drops (queue/aqm)  sim drops");
        let num = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |x| x.to_string());
        for l in &r.links {
            println!(
                "  {:<16} {:>7} {:>7.2}  {:>10}/{:<10} {:>6}/{}",
                l.name,
                l.lab_a2b_bytes.map_or_else(|| "-".to_string(), |b| format!("{:.2}", b as f64 / 1e6)),
                l.sim_a2b_bytes as f64 / 1e6,
                num(l.lab_dropped_queue),
                num(l.lab_dropped_aqm),
                l.sim_dropped_queue,
                l.sim_dropped_aqm
            );
        }
        println!("  senders over the same window (medians of 100 ms samples, first subflow):");
        println!("  flow  cwnd   srtt ms  pacing Mbit/s  bbr bw Mbit/s  bbr mrtt ms");
        let opt = |v: Option<f64>, scale: f64| v.map_or("-".to_string(), |x| format!("{:.2}", x / scale));
        for (i, f) in r.flows.iter().enumerate() {
            if let Some(m) = &f.sender {
                println!(
                    "  {i:<4}  {:>5.0}  {:>7.1}  {:>13}  {:>13}  {:>11}",
                    m.cwnd,
                    m.srtt_ms,
                    opt(m.pacing_rate_bps, 1e6),
                    opt(m.bbr_bw_bps, 1e6),
                    opt(m.bbr_min_rtt_ms, 1.0)
                );
            }
        }
    })?;
    if let Some((i, _)) = r.flows.iter().enumerate().find(|(_, f)| !f.sha256_match) {
        return Ok(Verdict::Fail(anyhow!("flow {i}: integrity check failed")));
    }
    if let Some((i, _)) = r.flows.iter().enumerate().find(|(_, f)| f.goodput_bps <= 0.0) {
        return Ok(Verdict::Fail(anyhow!("flow {i} moved nothing in the measurement window")));
    }
    Ok(Verdict::Pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: &str = include_str!("../../../../docs/scenarios/shared-bottleneck.toml");
    const POOLING: &str = include_str!("../../../../docs/scenarios/pooling.toml");
    const CODEL: &str = include_str!("../../../../docs/scenarios/shared-bottleneck-codel.toml");
    const CROSS: &str = include_str!("../../../../docs/scenarios/cross-traffic.toml");

    fn spec(text: &str) -> Spec {
        scenario_file::parse(text, "x", Overrides::default()).unwrap()
    }

    #[test]
    fn the_shared_bottleneck_is_one_path_both_subflows_on_it() {
        let p = plan(&spec(SHARED), LabStack::Mptun, LabStack::Kernel, None).unwrap();
        assert_eq!(
            p.specs,
            ["rate=20000000bit,delay=20000us,limit=66,limit-scope=bottleneck,jitter=500us,jitter-mode=ordered"]
        );
        assert_eq!(p.flows[0].carrier, Carrier::Mptun { f: 1, ks: vec![1, 2], tcp: false });
        assert_eq!(p.client_nets, [(1, 1), (2, 1)], "both TUN subnets through path 1");
        assert_eq!(p.server_nets, [(1, 1)]);
        assert_eq!((p.flows[1].carrier.clone(), p.flows[1].cc.as_str()), (Carrier::KernelTcp, "cubic"));
        assert_eq!(p.flows[0].scheduler, Some(mptun::Policy::MinRtt));
        let (srv, cli) = peer_args(&p.flows[0], None, true);
        assert!(!cli.contains(&"--max-pacing-rate".to_string()), "mptun paces by itself");
        assert!(srv.contains(&"10.8.1.2:5600".to_string()) && cli.contains(&"10.8.1.2:5600".to_string()));
        assert_eq!(cli.iter().filter(|a| *a == "--path").count(), 2);
        let (_, tcp) = peer_args(&p.flows[1], Some(mptun::PacerKind::None), true);
        assert!(!tcp.contains(&"--pacer".to_string()), "the kernel's flows take no pacer of ours");
        assert!(tcp.contains(&"--max-pacing-rate".to_string()), "but pace by SO_MAX_PACING_RATE");
        let (_, unpaced) = peer_args(&p.flows[1], None, false);
        assert!(!unpaced.contains(&"--max-pacing-rate".to_string()));
        assert!(tcp.contains(&"10.0.1.2:5601".to_string()) && tcp.contains(&"--no-mptcp".to_string()));
        // The kernel's MPTCP instead, and BBR for the TCP flow.
        let k = plan(&spec(SHARED), LabStack::Kernel, LabStack::Kernel, Some("bbr")).unwrap();
        assert_eq!((k.flows[0].carrier.clone(), k.flows[0].cc.as_str()), (Carrier::KernelMptcp, "cubic"));
        assert_eq!(k.flows[1].cc, "bbr");
        assert!(k.client_nets.is_empty());
    }

    #[test]
    fn pooling_is_two_paths_codel_keeps_its_parameters_udp_is_a_kernel_socket() {
        let p = plan(&spec(POOLING), LabStack::Mptun, LabStack::Kernel, None).unwrap();
        assert_eq!(p.specs.len(), 2);
        assert_eq!(p.client_nets, [(1, 1), (2, 2)]);
        assert_eq!(p.flows.iter().filter(|f| f.carrier == Carrier::KernelTcp).count(), 2);
        let c = plan(&spec(CODEL), LabStack::Mptun, LabStack::Kernel, None).unwrap();
        assert!(c.specs[0].ends_with(",qdisc=codel,codel-target=5000us,codel-interval=100000us"), "{}", c.specs[0]);
        let x = plan(&spec(CROSS), LabStack::Mptun, LabStack::Kernel, None).unwrap();
        let u = super::super::udp::UdpFlow {
            rate_bps: 5_000_000,
            packet: 1500,
            on: Duration::from_secs(2),
            off: Duration::from_secs(2),
        };
        assert_eq!(x.flows[2].carrier, Carrier::KernelUdp(u));
        let (srv, cli) = peer_args(&x.flows[2], None, true);
        let udp = ["--udp", "5000000", "--udp-packet", "1500", "--udp-on", "2000000us", "--udp-off", "2000000us"];
        for args in [&srv, &cli] {
            assert!(args.windows(udp.len()).any(|w| w == udp), "{args:?}");
        }
        assert!(!cli.contains(&"--max-pacing-rate".to_string()), "UDP is not paced by the kernel's TCP");
    }

    #[test]
    fn routes_through_two_links_meet_in_a_router_each_flow_on_its_own_addresses() {
        const SERVER: &str = include_str!("../../../../docs/scenarios/olia-a-server/olia-a-server.toml");
        let p = plan(&spec(SERVER), LabStack::Mptun, LabStack::Kernel, None).unwrap();
        let w = p.wiring.as_ref().expect("routes through two links");
        // private, server, ap, server2: the private link and the AP meet the two server links in r1.
        assert_eq!(w.ends_arg(), "cli-r1,r1-srv,cli-r1,r1-srv");
        assert_eq!(w.routes.len(), 30, "10 users' two paths and 10 TCP users' one");
        // A type-1 user's subflows: its own routes, private+server and ap+server.
        assert_eq!(w.routes[usize::from(p.flows[0].paths[0]) - 1], [1, 2]);
        assert_eq!(w.routes[usize::from(p.flows[0].paths[1]) - 1], [3, 2]);
        // A type-2 TCP user: the kernel's TCP to its route's own server address over ap+server2.
        let tcp = &p.flows[10];
        assert_eq!(tcp.carrier, Carrier::KernelTcp);
        let r = tcp.paths[0];
        assert_eq!(w.routes[usize::from(r) - 1], [3, 4]);
        assert_eq!(tcp.server_addr, w.server_addr(r));
        assert_eq!(tcp.server_addr.octets()[..3], [10, 0, 4]);
        let (srv, cli) = peer_args(tcp, None, true);
        let to = format!("{}:{}", tcp.server_addr, tcp.port);
        assert!(srv.contains(&to) && cli.contains(&to), "{srv:?} {cli:?}");
        // mptun's TUN subnets follow the route numbers.
        assert_eq!(p.client_nets[..2], [(1, p.flows[0].paths[0]), (2, p.flows[0].paths[1])]);
        // The flat files stay flat.
        assert!(plan(&spec(POOLING), LabStack::Mptun, LabStack::Kernel, None).unwrap().wiring.is_none());
    }

    #[test]
    fn a_route_graph_the_lab_cannot_place_is_refused_before_anything_is_built() {
        // Link a is the first link of one route and the second of the other.
        let text = r#"
name = "loop"
duration = "10s"
[[link]]
name = "a"
rate = "10mbit"
delay = "10ms"
[[link]]
name = "b"
rate = "10mbit"
delay = "10ms"
[[route]]
a = "10.1.1.1"
b = "10.0.1.2"
links = ["a"]
[[route]]
a = "10.2.1.1"
b = "10.0.1.2"
links = ["b", "a"]
[[flow]]
kind = "mptcp"
from = ["10.1.1.1", "10.2.1.1"]
to = "10.0.1.2"
"#;
        let e = plan(&spec(text), LabStack::Mptun, LabStack::Kernel, None).unwrap_err().to_string();
        assert!(e.contains("link 2 would run from cli to cli"), "{e}");
    }

    #[test]
    fn goodput_reads_the_server_series_between_two_instants() {
        let s = [(1.0, 100), (2.0, 300), (3.0, 600)];
        assert_eq!(received_at(&s, 0.5), 50.0);
        assert_eq!(received_at(&s, 2.5), 450.0);
        assert_eq!(received_at(&s, 9.0), 600.0);
    }
}
