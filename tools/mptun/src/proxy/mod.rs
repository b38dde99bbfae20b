//! `mptun proxy local` and `mptun proxy exit`: multipath for applications
//! that cannot change. The application talks plain TCP (SOCKS5, or
//! redirected by the kernel) to the local proxy, which carries each
//! connection over one MPTCP connection across all its paths to the exit,
//! which connects to the destination with plain TCP. docs/proxy.md shows
//! the setup, the header format and the figures.
//!
//! - `dest`: destinations; `socks5`: the SOCKS5 server side;
//!   `header`: the authenticated exit header; `allow`: the exit's rules;
//!   `admit`: the bounds on handshakes and relays;
//!   `relay`: both directions with backpressure, half-close and an idle
//!   timeout;
//!   `transparent`: `SO_ORIGINAL_DST`; `report`: events and counters;
//!   `local`, `exit`: the two commands.

mod admit;
mod allow;
mod dest;
mod exit;
mod header;
mod local;
mod relay;
mod report;
mod socks5;
mod transparent;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use mptun::Stack;

use crate::conn::Conn;
use crate::kernel::{self, KernelOptions};
use crate::pathspec::{self, parse_path, PathSpec};
use crate::signals;
use crate::stack::{parse_cc, StreamSettings};
use crate::units::{parse_secs, parse_size};

/// `mptun proxy ...`
#[derive(Args, Debug)]
pub(crate) struct ProxyArgs {
    #[command(subcommand)]
    cmd: ProxyCmd,
}

#[derive(Subcommand, Debug)]
enum ProxyCmd {
    /// The application side: a SOCKS5 server (and with --transparent a
    /// target for iptables REDIRECT) carrying each connection over MPTCP to
    /// the exit.
    Local(local::LocalArgs),
    /// The far side: accepts the local proxy's MPTCP connections, checks
    /// their authenticated header against --allow and connects out.
    Exit(exit::ExitArgs),
}

/// Options both ends share: the MPTCP side (paths or the kernel), the key,
/// reporting and limits.
#[derive(Args, Clone, Debug)]
pub(crate) struct Carrier {
    #[command(flatten)]
    control: crate::ctl::ControlArgs,
    /// A path of mptun's stack, `dev=NAME,addr=A[/PREFIX][,peer=KERNEL_ADDR][,mtu=M]`
    /// (repeat for several paths; see docs/cli.md).
    #[arg(long = "path", value_name = "SPEC", value_parser = parse_path)]
    paths: Vec<PathSpec>,
    /// A named address plan instead of --path (lab-a, lab-b, linkem-client, linkem-server, `:N` paths).
    #[arg(long, value_name = "NAME[:N]", conflicts_with = "paths")]
    topology: Option<String>,
    /// Carry the connections over the kernel's MPTCP (IPPROTO_MPTCP sockets) instead of mptun's stack.
    #[arg(long)]
    kernel: bool,
    /// Congestion control of the MPTCP connections between the two ends: reno, cubic, bbr, or coupled
    /// across the subflows: lia, olia, balia (mptun); any the kernel has (--kernel, TCP_CONGESTION). Each end
    /// sets its own sending direction's.
    #[arg(long, value_name = "NAME")]
    cc: Option<String>,
    #[arg(long, value_name = "NAME",
          help = format!("MPTCP scheduler of the connections this end sends on (mptun): {}", mptun::Policy::names()))]
    scheduler: Option<mptun::Policy>,
    /// The pre-shared key both ends read (at least 16 bytes, e.g.
    /// `head -c 32 /dev/urandom | base64`): it authenticates the exit header.
    #[arg(long, value_name = "FILE")]
    key_file: PathBuf,
    /// Print one JSON object per line (events and summaries) instead of text.
    #[arg(long)]
    json: bool,
    /// Seconds between summary lines.
    #[arg(short = 'i', long, default_value = "10", value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    interval: Duration,
    /// Give up on a connect (to the exit, or the exit's to the destination) after this long.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    connect_timeout: Duration,
    /// Connections relayed at once at most; more wait for one to end (within the 10 s a handshake may
    /// take), then are refused.
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections: u32,
    /// Connections in their handshake at once at most (the SOCKS negotiation or the exit header, then
    /// the wait for a relay); a newcomer beyond it ends the oldest.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_handshakes: u32,
    /// Of those, from one address (an IPv6 /64) at most; a newcomer beyond it ends that address's oldest.
    #[arg(long, default_value_t = 128, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_handshakes_per_source: u32,
    /// End a relay when no byte has moved either way for this long (its kernel sockets also get TCP
    /// keepalive).
    #[arg(long, default_value = "600", value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    idle_timeout: Duration,
    /// What the relays may hold in buffers at once (512M, 2G, ...): their copy buffers and their
    /// connections' on mptun's stack; a relay that would go over waits, then is refused.
    #[arg(long, default_value = "1G", value_name = "SIZE", value_parser = parse_size, allow_negative_numbers = true)]
    memory_budget: u64,
}

/// The MPTCP side, checked: mptun's paths and the options of its
/// connections (dialed and accepted), or the kernel's socket options.
enum Stackish {
    Mptun(Vec<PathSpec>, Box<mptun::StreamOptions>),
    Kernel(KernelOptions),
}

impl Carrier {
    fn check(&self) -> Result<Stackish> {
        if self.kernel {
            if !self.paths.is_empty() || self.topology.is_some() {
                bail!("--path/--topology configure mptun's TUN paths; --kernel uses the kernel's addresses and routes");
            }
            if self.scheduler.is_some() {
                bail!("--scheduler chooses mptun's scheduler; the kernel runs its own (net.mptcp.scheduler)");
            }
            if let Some(c) = &self.cc {
                kernel::check_cc_available(c)?;
            }
            return Ok(Stackish::Kernel(KernelOptions { mptcp: true, cc: self.cc.clone(), ..Default::default() }));
        }
        let settings = StreamSettings {
            cc: self.cc.as_deref().map(parse_cc).transpose()?,
            scheduler: self.scheduler,
            ..StreamSettings::default()
        };
        let options = settings.apply(mptun::StreamOptions::default());
        let paths = match &self.topology {
            Some(t) => pathspec::topology(t)?,
            None => self.paths.clone(),
        };
        if paths.is_empty() {
            crate::error::bail_usage!(
                "no paths: give --path dev=NAME,addr=A/PREFIX (repeatable) or --topology NAME, or --kernel"
            );
        }
        Ok(Stackish::Mptun(paths, Box::new(options)))
    }

    /// The bounds of [`admit`]: what a relay costs is its two copy buffers
    /// and, on mptun's stack, its connection's initial buffers (the stack's
    /// defaults, one subflow per path of this end) until the stack says
    /// more. Checked before anything is created.
    fn limits(&self, plan: &Stackish) -> Result<admit::Limits> {
        let carrier_cost = match plan {
            Stackish::Mptun(paths, o) => {
                let c = o.config();
                (c.tcp.send_buffer.initial() + c.tcp.recv_buffer.initial()) as u64 * paths.len().max(1) as u64
            }
            Stackish::Kernel(_) => 0,
        };
        let relay_cost = 2 * relay::BUF as u64 + carrier_cost;
        if self.memory_budget < relay_cost {
            bail!("--memory-budget {} is less than one relay costs ({} KiB)", self.memory_budget, relay_cost >> 10);
        }
        Ok(admit::Limits {
            handshake: admit::HANDSHAKE,
            handshakes: self.max_handshakes as usize,
            per_source: self.max_handshakes_per_source as usize,
            relays: self.max_connections as usize,
            memory: self.memory_budget,
            relay_cost,
            carrier_cost,
        })
    }
}

/// Lifts this process's open-file limit to its hard limit: every handshake
/// and relay holds sockets, and the default soft limit (often 1024) is
/// below what `--max-connections` and `--max-handshakes` allow.
fn raise_nofile() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit; failure leaves the limit as it was.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

pub(crate) fn run(a: ProxyArgs) -> Result<()> {
    raise_nofile();
    match a.cmd {
        ProxyCmd::Local(a) => local::run(a),
        ProxyCmd::Exit(a) => exit::run(a),
    }
}

/// Set once the first SIGINT/SIGTERM arrives: accepting stops, live relays
/// end with reason "interrupted".
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    async fn wait(&mut self) {
        let _ = self.0.wait_for(|&s| s).await;
    }
}

/// The accept loop both ends run: takes every connection at once (the
/// gate bounds those in their handshake by ending the oldest), hands each
/// to `serve` with the end's context, a number and its place among the
/// handshakes, samples the stack's buffers for the memory budget and
/// prints a summary every interval, and on a signal stops accepting, lets
/// live connections end as interrupted (2 s at most) and prints the
/// totals.
async fn serve_loop<C, T, A, AF, S, SF>(
    reporter: Arc<report::Reporter>,
    c: &Carrier,
    limits: admit::Limits,
    stack: Option<Stack>,
    mut accept: A,
    ctx: C,
    serve: S,
) -> Result<()>
where
    C: Clone,
    T: Send + 'static,
    A: FnMut() -> AF,
    AF: Future<Output = std::io::Result<(T, SocketAddr)>>,
    S: Fn(C, T, SocketAddr, u64, Stop, admit::Handshake) -> SF,
    SF: Future<Output = ()> + Send + 'static,
{
    let gate = admit::Gate::new(&limits, reporter.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let summaries = tokio::spawn(reporter.clone().summaries(c.interval));
    let sampler = stack.map(|stack| {
        let gate = gate.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_secs(1));
            loop {
                t.tick().await;
                gate.budget.sample(&stack);
            }
        })
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut next_id = 1u64;
    loop {
        let (conn, peer) = tokio::select! {
            r = accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and the like: say so, back off, go on.
                    eprintln!("mptun: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = signals::wait() => break,
        };
        while tasks.try_join_next().is_some() {}
        report::Counters::bump(&reporter.counters.accepted);
        let handshake = gate.enter(peer);
        tasks.spawn(serve(ctx.clone(), conn, peer, next_id, Stop(stop_rx.clone()), handshake));
        next_id += 1;
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while tasks.join_next().await.is_some() {} }).await;
    summaries.abort();
    if let Some(s) = sampler {
        s.abort();
    }
    reporter.summary(None, true);
    Ok(())
}

/// One relayed connection, for its close event.
struct Session {
    id: u64,
    peer: String,
    dest: String,
    started: Instant,
    /// `--idle-timeout`.
    idle: Duration,
    /// What the near side sent while its connection was being set up,
    /// passed on before the relay reads more.
    early: Vec<u8>,
}

/// Relays between the plain TCP side and the MPTCP side (`tcp_is_near`:
/// the TCP side opened the connection, as at the local proxy) until both
/// directions end, a side fails or a signal stops it, then reports the
/// close with the MPTCP connection's subflows. `names` are the near and far
/// ends as the close reason names them.
async fn relay_and_report(
    r: &report::Reporter,
    s: Session,
    tcp: &mut tokio::net::TcpStream,
    conn: &mut Conn,
    tcp_is_near: bool,
    names: [&str; 2],
    stop: &mut Stop,
) {
    use relay::{End, Moved, Outcome};
    use std::sync::atomic::Ordering::Relaxed;
    use tokio::io::AsyncWriteExt;
    let moved = Arc::new(Moved::default());
    r.track(&moved);
    let idle = s.idle;
    let outcome = {
        let (mut tr, mut tw) = tcp.split();
        let (mut mr, mut mw) = tokio::io::split(&mut *conn);
        let run = async {
            if !s.early.is_empty() {
                let sent = if tcp_is_near { mw.write_all(&s.early).await } else { tw.write_all(&s.early).await };
                if let Err(e) = sent {
                    return Outcome::Failed(End::Far, e);
                }
                moved.up.fetch_add(s.early.len() as u64, Relaxed);
            }
            if tcp_is_near {
                relay::relay((&mut tr, &mut tw), (&mut mr, &mut mw), &moved, idle).await
            } else {
                relay::relay((&mut mr, &mut mw), (&mut tr, &mut tw), &moved, idle).await
            }
        };
        tokio::select! {
            o = run => Some(o),
            _ = stop.wait() => None,
        }
    };
    let probe = conn.probe();
    let reason = match &outcome {
        Some(Outcome::Closed) => "closed".to_string(),
        Some(Outcome::Failed(End::Near, e)) => format!("{}: {e}", names[0]),
        Some(Outcome::Failed(End::Far, e)) => format!("{}: {e}", names[1]),
        Some(Outcome::Idle(d)) => format!("idle for {} s (--idle-timeout)", d.as_secs_f64()),
        None => "interrupted".to_string(),
    };
    if !matches!(outcome, Some(Outcome::Closed)) {
        // Pass an abort on as a reset, not as an orderly end of stream.
        relay::reset_on_drop(tcp);
        if let Conn::Kernel(k) = &*conn {
            relay::reset_on_drop(k);
        }
    }
    r.closed(report::Closed {
        id: s.id,
        peer: s.peer,
        dest: s.dest,
        up: moved.up.load(Relaxed),
        down: moved.down.load(Relaxed),
        duration: s.started.elapsed(),
        reason: &reason,
        probe: Some(probe),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        carrier: Carrier,
    }

    fn carrier(args: &[&str]) -> Carrier {
        let mut v = vec!["x", "--key-file", "/dev/null"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).expect("valid arguments").carrier
    }

    #[test]
    fn cc_and_scheduler_become_the_stack_defaults() {
        let c = carrier(&["--path", "dev=t0,addr=10.9.1.1/24", "--cc", "olia", "--scheduler", "minrtt"]);
        let Ok(Stackish::Mptun(paths, o)) = c.check() else { panic!("mptun's stack") };
        assert_eq!(paths.len(), 1);
        assert_eq!(o.config().tcp.congestion_control, mptun::Algorithm::Olia);
        assert_eq!(o.config().mptcp.scheduler, mptun::Policy::MinRtt);
        // Without them: the stack's own defaults (uncoupled CUBIC, Linux's scheduler).
        let Ok(Stackish::Mptun(_, d)) = carrier(&["--path", "dev=t0,addr=10.9.1.1/24"]).check() else { panic!() };
        assert_eq!(d.config().tcp.congestion_control, mptun::StreamOptions::default().config().tcp.congestion_control);
        assert!(carrier(&["--path", "dev=t0,addr=10.9.1.1/24", "--cc", "vegas"]).check().is_err());
    }

    #[test]
    fn the_kernel_takes_a_cc_name_but_not_our_scheduler() {
        let Ok(Stackish::Kernel(k)) = carrier(&["--kernel", "--cc", "reno"]).check() else { panic!("kernel") };
        assert_eq!((k.mptcp, k.cc.as_deref()), (true, Some("reno")));
        assert!(carrier(&["--kernel", "--scheduler", "minrtt"]).check().is_err());
        assert!(carrier(&["--kernel", "--cc", "no such; name"]).check().is_err());
    }
}
