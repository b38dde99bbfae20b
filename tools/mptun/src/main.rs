//! `mptun`: the command users touch first. `serve`/`send` measure a bulk
//! transfer like iperf3 over mptun's TUN-backed stack (or the kernel's with
//! `--kernel`), `demo` shows MPTCP working in the simulator without root,
//! `sim ...` runs the deterministic simulator's scenarios and `lab` runs
//! one in real namespaces behind emulated links.

// A binary: nothing outside the crate can use an item, so `pub(crate)` (or
// narrower) says how far each one really reaches, and a bare `pub` is flagged.
#![warn(unreachable_pub)]

mod conn;
mod ctl;
mod demo;
mod error;
mod flags;
mod host;
mod kernel;
mod lab;
mod pathspec;
mod plot;
mod probe;
mod proxy;
mod report;
mod scenario_file;
mod signals;
mod sim;
mod stack;
#[cfg(test)]
mod test_util;
mod traces;
mod units;
mod xfer;

use clap::{CommandFactory, Parser, Subcommand};
use report::Verdict;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "mptun", version, about = "Userspace Multipath TCP over TUN: simulator, bulk transfer, lab runs")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
    #[command(flatten)]
    log: Log,
}

/// Logging to stderr: `RUST_LOG` (tracing's filter syntax, e.g.
/// `RUST_LOG=mptun=debug`) when set, otherwise by -v.
#[derive(clap::Args)]
struct Log {
    /// More log output on stderr: -v info, -vv debug, -vvv trace (RUST_LOG, when set, decides instead).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// The same as -vv.
    #[arg(long, global = true)]
    debug: bool,
}

impl Log {
    fn init(&self) {
        use tracing_subscriber::EnvFilter;
        let level = match self.verbose.max(if self.debug { 2 } else { 0 }) {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        };
        let filter = match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => EnvFilter::new(v),
            _ => EnvFilter::new(level),
        };
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    }
}

#[derive(Subcommand)]
enum Command {
    /// MPTCP in seconds, without root: a two-path transfer in the simulator,
    /// reported as `mptun send` reports a real one.
    Demo(demo::DemoArgs),
    /// Run a scenario in the deterministic simulator (no root needed).
    Sim(sim::SimArgs),
    /// Accept bulk-transfer tests (like `iperf3 -s`) on mptun's stack or the kernel's.
    Serve(xfer::ServeArgs),
    /// Run a bulk-transfer test against `mptun serve` (like `iperf3 -c`).
    Send(xfer::SendArgs),
    /// Run a scenario in real namespaces behind linkem paths (needs root), reported like `sim`.
    Lab(lab::LabArgs),
    /// Multipath for unmodified applications: a SOCKS5/transparent local proxy and its exit (docs/proxy.md).
    Proxy(proxy::ProxyArgs),
    /// The path manager of a running serve, send or proxy, as `ip mptcp`:
    /// endpoints, limits, monitor, and the userspace PM's commands by token.
    Pm(ctl::PmArgs),
    /// Connections and subflows of a running serve, send or proxy, like `ss -Menitam`.
    Ss(ctl::SsArgs),
    /// Counters of a running serve, send or proxy with their change since the last call, like `nstat`.
    Nstat(ctl::NstatArgs),
    /// Print a shell completion script, e.g. `mptun completions bash > /etc/bash_completion.d/mptun`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `mptun man > ~/.local/share/man/man1/mptun.1`.
    Man,
}

impl Command {
    /// Whether the command prints iperf3's JSON document (`-J`/`--json`),
    /// which then carries an error too.
    fn json_document(&self) -> bool {
        match self {
            Command::Demo(a) => a.json.json,
            Command::Serve(a) => a.json(),
            Command::Send(a) => a.json(),
            Command::Lab(a) => a.json(),
            Command::Sim(_)
            | Command::Proxy(_)
            | Command::Pm(_)
            | Command::Ss(_)
            | Command::Nstat(_)
            | Command::Completions { .. }
            | Command::Man => false,
        }
    }
}

/// Writes generated text to stdout; a closed pipe (`| head`) is no error.
fn print_all(b: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(b) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::anyhow!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// mimalloc rather than glibc's malloc: the runtime's receive path allocates
/// a buffer per received super-segment (up to 64 KiB) and frees it when the
/// application has read it; glibc returns such memory to the kernel at the
/// top of its heap and faults it in again, zeroed, for the next one, a
/// cost that shows in the receiver's goodput.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log.init();
    tracing::debug!(args = ?std::env::args().collect::<Vec<_>>(), "mptun {}", env!("CARGO_PKG_VERSION"));
    let json = cli.cmd.json_document();
    if matches!(cli.cmd, Command::Serve(_) | Command::Send(_) | Command::Lab(_) | Command::Proxy(_)) {
        // The first SIGINT/SIGTERM ends the test cleanly, a second at once.
        signals::install();
    }
    let res = match cli.cmd {
        Command::Demo(a) => demo::run(a).map(|()| Verdict::Pass),
        Command::Sim(a) => sim::run(a).map(|()| Verdict::Pass),
        Command::Serve(a) => xfer::run_serve(a),
        Command::Send(a) => xfer::run_send(a),
        Command::Lab(a) => lab::run(a),
        Command::Proxy(a) => proxy::run(a).map(|()| Verdict::Pass),
        Command::Pm(a) => ctl::run_pm(a).map(|()| Verdict::Pass),
        Command::Ss(a) => ctl::run_ss(a).map(|()| Verdict::Pass),
        Command::Nstat(a) => ctl::run_nstat(a).map(|()| Verdict::Pass),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mptun", &mut out);
            print_all(&out).map(|()| Verdict::Pass)
        }
        Command::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut out).expect("render into memory");
            print_all(&out).map(|()| Verdict::Pass)
        }
    };
    // Interrupted: 128 + the signal, as iperf3 (130 for SIGINT, 143 for SIGTERM).
    let interrupted = signals::exit_code();
    let e = match res {
        Ok(Verdict::Pass) => return interrupted.map_or(ExitCode::SUCCESS, ExitCode::from),
        Ok(Verdict::Fail(e)) => e,
        Err(e) => {
            if json {
                let doc = report::error_document(&format!("{e:#}"));
                println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            e
        }
    };
    eprintln!("mptun: {e:#}");
    interrupted.map_or_else(|| ExitCode::from(error::class_of(&e).code()), ExitCode::from)
}
