//! The `linkem` command: run an emulated link between two interfaces, or talk to a running one.

use clap::{CommandFactory, Parser, Subcommand};
use linkem::control::{send_command, ControlServer, Links, Report};
use linkem::forward::{self, DirReport, Direction, LoopOptions};
use linkem::packet::{self, PacketSocket};
use linkem::spec::{apply_spec, linkem_default};
use mptun_time::Duration;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "linkem",
    version,
    about = "Userspace netem: bridges interfaces A and B, emulating a link in each direction",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// First interface (frames read here go a2b).
    #[arg(long)]
    a: Option<String>,
    /// Second interface (frames read here go b2a).
    #[arg(long)]
    b: Option<String>,
    /// Spec applied to both directions first, e.g. rate=10mbit,delay=20ms,limit=30.
    #[arg(long, default_value = "")]
    both: String,
    /// Spec for A→B, applied on top of --both.
    #[arg(long, default_value = "")]
    a2b: String,
    /// Spec for B→A, applied on top of --both.
    #[arg(long, default_value = "")]
    b2a: String,
    /// More log output on stderr (-v info, -vv debug); RUST_LOG, when set, decides instead.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Unix socket for run-time commands (set/down/up/stats/config).
    #[arg(long)]
    control: Option<PathBuf>,
    /// Write the final statistics as JSON to this file on exit.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Seed of the random processes (loss, jitter, ...); a2b uses it, b2a uses it + 1.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Microseconds before a release at which the thread stops sleeping and spins, at most. It
    /// must cover the timer wake-up latency (~30 µs typical, past 100 µs at p99 on a busy VM);
    /// the loop caps it at half the gap between releases, because a SCHED_FIFO thread spinning
    /// through most of every gap at 100 Mbit/s exceeds the kernel's real-time budget
    /// (sched_rt_runtime_us) and is throttled for tens of milliseconds.
    #[arg(long, default_value_t = 150)]
    spin_us: u64,
    /// SCHED_FIFO priority of the forwarding threads (0 = normal scheduling). Real-time
    /// scheduling is what keeps the wake-up tail in tens of microseconds on a busy machine.
    #[arg(long, default_value_t = 10)]
    fifo: i32,
    /// Receive buffer per interface in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    rcvbuf: usize,
    /// Do not print statistics on exit.
    #[arg(long)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Send one command to a running linkem's control socket and print the reply.
    Ctl {
        socket: PathBuf,
        /// e.g. `set a2b rate=3mbit`, `down both`, `stats`.
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Print a shell completion script, e.g. `linkem completions bash > /etc/bash_completion.d/linkem`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `linkem man > ~/.local/share/man/man1/linkem.1`.
    Man,
}

/// Writes generated text to stdout; a closed pipe (`| head`) is no error.
fn print_all(b: &[u8]) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().lock().write_all(b) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("linkem: stdout: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

static STOP: AtomicBool = AtomicBool::new(false);
static DUMP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGUSR1 {
        DUMP.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

fn install_signals() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe { libc::signal(sig, handler) };
    }
}

fn summary(d: &DirReport) -> String {
    let dr = &d.dropped;
    format!(
        "{}: rx {} pkts/{} B, fwd {} pkts/{} B, dropped loss={} queue={} down={} oversize={} tx_err={} rx_kernel={}, \
         dup={} corrupt={} reorder={}, queue max {} (held max {}), release error p50/p99/max {:.1}/{:.1}/{:.1} us, \
         delay p50/p99 {:.1}/{:.1} us [{}]",
        d.name,
        d.rx_packets,
        d.rx_bytes,
        d.forwarded_packets,
        d.forwarded_bytes,
        dr.loss,
        dr.queue_full,
        dr.link_down,
        dr.oversize,
        dr.tx_error,
        dr.rx_kernel,
        d.duplicated,
        d.corrupted,
        d.reordered,
        d.queue_max_packets,
        d.held_max,
        d.release_error_us.p50,
        d.release_error_us.p99,
        d.release_error_us.max,
        d.delay_us.p50,
        d.delay_us.p99,
        d.config
    )
}

fn print_report(r: &Report) {
    eprintln!("linkem: after {:.1} s", r.uptime_s);
    eprintln!("  {}", summary(&r.a2b));
    eprintln!("  {}", summary(&r.b2a));
}

fn run(cli: Cli) -> Result<(), String> {
    let (Some(a), Some(b)) = (cli.a.as_deref(), cli.b.as_deref()) else {
        return Err("both --a and --b are required (or use `linkem ctl`)".into());
    };
    let base = apply_spec(&linkem_default(), &cli.both).map_err(|e| format!("--both: {e}"))?;
    let c_a2b = apply_spec(&base, &cli.a2b).map_err(|e| format!("--a2b: {e}"))?;
    let c_b2a = apply_spec(&base, &cli.b2a).map_err(|e| format!("--b2a: {e}"))?;
    let open = |what: &str, r: std::io::Result<PacketSocket>| r.map_err(|e| format!("{what}: {e}"));
    let rx_a = open(a, PacketSocket::open_rx(a, cli.rcvbuf))?;
    let rx_b = open(b, PacketSocket::open_rx(b, cli.rcvbuf))?;
    let tx_a = open(a, PacketSocket::open_tx(a))?;
    let tx_b = open(b, PacketSocket::open_tx(b))?;
    // Room for a VLAN tag beyond MTU + Ethernet header.
    let max_frame = |ifn: &str| packet::mtu(ifn).map(|m| m + 18).map_err(|e| format!("{ifn}: {e}"));
    let (max_a, max_b) = (max_frame(a)?, max_frame(b)?);

    install_signals();
    let stop = Arc::new(AtomicBool::new(false));
    let links = Links {
        a2b: Direction::new("a2b", c_a2b),
        b2a: Direction::new("b2a", c_b2a),
        started: std::time::Instant::now(),
    };
    let spin = Duration::from_micros(cli.spin_us);
    let mut threads = Vec::new();
    for (dir, rx, tx, seed, max) in [
        (links.a2b.clone(), rx_a, tx_b, cli.seed, max_b),
        (links.b2a.clone(), rx_b, tx_a, cli.seed.wrapping_add(1), max_a),
    ] {
        let opts = LoopOptions { spin, fifo_priority: (cli.fifo > 0).then_some(cli.fifo), seed, max_frame: max };
        let stop = stop.clone();
        let name = format!("linkem-{}", dir.name);
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || forward::run(dir, rx, tx, opts, stop))
            .map_err(|e| e.to_string())?;
        threads.push(t);
    }
    let control = match &cli.control {
        Some(p) => {
            Some(ControlServer::start(p, links.clone(), stop.clone()).map_err(|e| format!("{}: {e}", p.display()))?)
        }
        None => None,
    };
    println!("linkem: ready a={a} b={b}");
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let mut failure = None;
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if DUMP.swap(false, Ordering::Relaxed) {
            print_report(&links.report());
        }
        if threads.iter().any(|t| t.is_finished()) {
            failure = Some("a forwarding thread stopped".to_string());
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(format!("forwarding: {e}")),
            Err(_) => failure = Some("forwarding thread panicked".into()),
        }
    }
    drop(control);
    let report = links.report();
    if !cli.quiet {
        print_report(&report);
    }
    if let Some(p) = &cli.stats_json {
        let json = serde_json::to_string_pretty(&report).expect("report serializes");
        std::fs::write(p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    }
    failure.map_or(Ok(()), Err)
}

/// Logging to stderr: `RUST_LOG` when set, otherwise warnings (-v: info, -vv: debug).
fn init_log(verbose: u8) {
    let level = ["warn", "info", "debug", "trace"][usize::from(verbose.min(3))];
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => tracing_subscriber::EnvFilter::new(v),
        _ => tracing_subscriber::EnvFilter::new(level),
    };
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_log(cli.verbose);
    match &cli.cmd {
        Some(Cmd::Completions { shell }) => {
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "linkem", &mut out);
            return print_all(&out);
        }
        Some(Cmd::Man) => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut out).expect("render into memory");
            return print_all(&out);
        }
        _ => {}
    }
    if let Some(Cmd::Ctl { socket, command }) = &cli.cmd {
        return match send_command(socket, &command.join(" ")) {
            Ok(reply) => {
                println!("{reply}");
                if reply.starts_with("error") {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("linkem ctl: {}: {e}", socket.display());
                ExitCode::FAILURE
            }
        };
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linkem: {e}");
            ExitCode::FAILURE
        }
    }
}
