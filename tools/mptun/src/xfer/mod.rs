//! `mptun serve` and `mptun send`: iperf3-style bulk transfer over mptun's
//! TUN-backed stack, or over the kernel's MPTCP with `--kernel`.
//! `bulk` runs one test over one connection, `control` is the wire format
//! of its request, response and trailers.

mod bulk;
mod control;

pub(crate) use bulk::BLKSIZE;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use mptun::{MptcpListener, MptcpStream, PacerKind, PmConfig, Policy, Stack, StreamOptions};

use crate::conn::{Conn, CounterSource};
use crate::ctl::ControlArgs;
use crate::flags::JsonDocument;
use crate::kernel::{self, KernelOptions};
use crate::pathspec::{self, parse_path, PathSpec};
use crate::report::{self, PathManagerInfo, Report, Verdict};
use crate::signals;
use crate::stack::{build_stack, connect_error, end_stack, parse_cc, runtime, StreamSettings};
use crate::units::{parse_rate, parse_secs, parse_size};
use bulk::{ClientTest, OutputDir, Pattern, ServerConfig, Settings, Sink, Source};
use control::{Amount, HashKind, Request, MAX_BYTES};

/// Options both ends share: the stack, its paths, the socket options, output.
#[derive(Args, Clone, Debug)]
#[command(mut_arg("json", |a| a.help("Print one iperf3-shaped JSON document at the end instead of text")))]
pub(crate) struct Common {
    /// A path of mptun's stack: a TUN device to create in this namespace and
    /// mptun's address on it, `dev=NAME,addr=A[/PREFIX][,peer=KERNEL_ADDR][,mtu=M][,FLAG...]`
    /// (repeat for several paths). FLAGs are `ip mptcp endpoint`'s, as words
    /// or `flags=signal+backup`: `subflow` opens a subflow from the address
    /// (the default when none is given), `signal` announces it to the peer
    /// (ADD_ADDR), `backup` makes its subflows backup ones, `fullmesh` joins
    /// every address the peer announces from it, `laminar` makes it the
    /// source of one announced address's join.
    #[arg(long = "path", value_name = "SPEC", value_parser = parse_path)]
    paths: Vec<PathSpec>,
    /// `ip mptcp limits set add_addr_accepted N`: how many addresses the
    /// peer announces (ADD_ADDR) this side joins per connection (mptun;
    /// default 0, as Linux).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=8))]
    add_addr_accepted: Option<u8>,
    /// `ip mptcp limits set subflows N`: additional subflows per
    /// connection, opened or accepted (mptun; default 2, as Linux).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=8))]
    subflows: Option<u8>,
    /// Subflows per address pair (ndiffports-like, each from its own source
    /// port; mptun): N on every pair the path manager opens, the initial
    /// pair included, within --subflows. For single-homed, ECMP and
    /// shared-bottleneck experiments. Endpoint flags `fullmesh` and
    /// `laminar` go in --path as the others do.
    #[arg(long, value_name = "N", default_value = "1", value_parser = clap::value_parser!(u8).range(1..=8))]
    subflows_per_pair: u8,
    /// A named address plan instead of --path: lab-a, lab-b, linkem-client,
    /// linkem-server, optionally with `:N` paths.
    #[arg(long, value_name = "NAME[:N]", conflicts_with = "paths")]
    topology: Option<String>,
    /// Use the kernel's stack (an IPPROTO_MPTCP socket) instead of mptun.
    #[arg(long)]
    kernel: bool,
    /// Plain TCP instead of MPTCP (either stack).
    #[arg(long)]
    no_mptcp: bool,
    /// Congestion control: reno, cubic, bbr (per subflow, uncoupled), or coupled across the subflows:
    /// lia, olia, balia (mptun); any the kernel has (--kernel).
    #[arg(long, value_name = "NAME")]
    cc: Option<String>,
    #[arg(long, value_name = "POLICY",
          help = format!("MPTCP scheduler (mptun; a server's accepted connections run it): {}", Policy::names()))]
    scheduler: Option<String>,
    /// SO_SNDBUF: a fixed send buffer (autotuning off), e.g. 256K.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_negative_numbers = true)]
    sndbuf: Option<u64>,
    /// SO_RCVBUF: a fixed receive buffer (autotuning off).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_negative_numbers = true)]
    rcvbuf: Option<u64>,
    /// SO_MAX_PACING_RATE per subflow, e.g. 100mbit.
    #[arg(long, value_name = "RATE", value_parser = parse_rate, allow_negative_numbers = true)]
    max_pacing_rate: Option<u64>,
    /// mptun's pacer: edt (Linux >= 4.20, the default), quantum (the sch_fq
    /// throttle before it, for comparison) or none.
    #[arg(long, value_name = "PACER")]
    pacer: Option<PacerKind>,
    /// Seconds between interval reports.
    #[arg(short = 'i', long, default_value = "1", value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    interval: Duration,
    #[command(flatten)]
    json: JsonDocument,
    /// No progress bar (it is off anyway when stderr is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Give up when no data moves for this long.
    #[arg(long, default_value = "30", value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    idle_timeout: Duration,
    /// Record mptun's packets into a pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// Port to listen on.
    #[arg(short, long, default_value_t = 5201)]
    port: u16,
    /// Address to listen on (default: all of the stack's).
    #[arg(short = 'B', long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Serve one test, then exit.
    #[arg(short = '1', long)]
    one_off: bool,
    /// Where files sent with `send --file` are stored (under their base
    /// name; only new files: a name already taken is refused).
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// Refuse a file larger than this, e.g. 1G (one that does not fit in
    /// the output directory's free space is refused anyway).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "output_dir", allow_negative_numbers = true)]
    max_file_size: Option<u64>,
    /// The file a client asking `send --reverse --file` receives.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct SendArgs {
    /// The server: ADDR, ADDR:PORT or HOST.
    server: String,
    #[command(flatten)]
    common: Common,
    /// Server port (when SERVER has none).
    #[arg(short, long, default_value_t = 5201)]
    port: u16,
    /// Bytes to move, e.g. 64M, 1G, 20MB (default: -t 10).
    #[arg(short = 'n', long, value_name = "SIZE", value_parser = parse_size, conflicts_with_all = ["time", "file"], allow_negative_numbers = true)]
    bytes: Option<u64>,
    /// Seconds to send for.
    #[arg(short = 't', long, value_name = "SECS", value_parser = parse_secs, conflicts_with = "file", allow_negative_numbers = true)]
    time: Option<Duration>,
    /// Send this file (the server stores it, checked with --hash); with
    /// --reverse, receive the server's --file into it.
    #[arg(short = 'F', long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// The server sends, this side receives.
    #[arg(short = 'R', long)]
    reverse: bool,
    /// With --reverse --file: replace the file if it exists (without this
    /// an existing file is refused, as `serve --output-dir` refuses one).
    #[arg(long, requires_all = ["reverse", "file"])]
    force: bool,
    /// How both ends check the data: xxh3 (XXH3-128, the default: it keeps
    /// up with the kernel's TCP on one veth; catches any accidental damage,
    /// not deliberate tampering), blake3, or sha256 (a cryptographic digest,
    /// which costs about two thirds of the throughput on that path).
    #[arg(long, value_enum, default_value_t = HashKind::Xxh3, value_name = "HASH")]
    hash: HashKind,
    /// Give up connecting after this long.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    connect_timeout: Duration,
}

impl ServeArgs {
    pub(crate) fn json(&self) -> bool {
        self.common.json.json
    }
}

impl SendArgs {
    pub(crate) fn json(&self) -> bool {
        self.common.json.json
    }
}

/// The checked form of [`Common`].
struct Plan {
    kernel: bool,
    paths: Vec<PathSpec>,
    /// Applied to the stack's own defaults (which carry its path manager's
    /// endpoints), as setsockopt on a socket of that stack.
    options: StreamSettings,
    kernel_options: KernelOptions,
    settings: Settings,
    pcap: Option<PathBuf>,
    control: ControlArgs,
    /// The control socket of the stack, once there is one (held for the run).
    control_server: std::sync::Mutex<Option<mptun_io::ctl::ControlServer>>,
}

impl Common {
    fn check(&self, client: bool) -> Result<Plan> {
        let scheduler: Policy = match &self.scheduler {
            Some(s) => s.parse().map_err(|e: String| anyhow!("--scheduler: {e}"))?,
            None => Policy::Default,
        };
        let sz = |v: Option<u64>, what: &str| -> Result<Option<usize>> {
            match v {
                Some(b) if b > 1 << 31 => bail!("--{what} of {b} bytes is more than 2 GiB"),
                Some(b) if b < 1024 => bail!("--{what} of {b} bytes is less than 1 KiB"),
                v => Ok(v.map(|b| b as usize)),
            }
        };
        let (sndbuf, rcvbuf) = (sz(self.sndbuf, "sndbuf")?, sz(self.rcvbuf, "rcvbuf")?);
        let pacing = self.max_pacing_rate.map(|bits| (bits / 8).max(1));
        let mut paths = Vec::new();
        if self.kernel {
            if !self.paths.is_empty() || self.topology.is_some() {
                bail!("--path/--topology configure mptun's TUN paths; --kernel uses the kernel's addresses and routes");
            }
            if scheduler != Policy::Default {
                bail!("--scheduler {scheduler}: the kernel stack runs its own scheduler (net.mptcp.scheduler)");
            }
            if self.pcap.is_some() {
                bail!("--pcap records mptun's packets; for --kernel use tcpdump");
            }
            if self.pacer.is_some() {
                bail!("--pacer chooses mptun's pacer; the kernel paces by EDT (with --max-pacing-rate or sch_fq)");
            }
            if self.add_addr_accepted.is_some() || self.subflows.is_some() {
                bail!(
                    "--add-addr-accepted/--subflows set mptun's path manager; for --kernel use `ip mptcp limits set`"
                );
            }
        } else {
            paths = match &self.topology {
                Some(t) => pathspec::topology(t)?,
                None => self.paths.clone(),
            };
            if let Some(dir) = self.pcap.as_deref().and_then(std::path::Path::parent) {
                if !dir.as_os_str().is_empty() && !dir.is_dir() {
                    crate::error::bail_usage!(
                        "--pcap {}: no directory {}",
                        self.pcap.as_deref().unwrap_or(dir).display(),
                        dir.display()
                    );
                }
            }
            if paths.is_empty() {
                crate::error::bail_usage!(
                    "no paths: give --path dev=NAME,addr=A/PREFIX (repeatable) or --topology NAME, or --kernel for the kernel's stack"
                );
            }
        }
        let pm = (!self.kernel).then(|| self.path_manager(&paths));
        let mut options = StreamSettings {
            no_mptcp: self.no_mptcp,
            sndbuf,
            rcvbuf,
            pacing,
            pacer: self.pacer,
            scheduler: Some(scheduler),
            pm: pm.clone(),
            ..StreamSettings::default()
        };
        let cc_name = match &self.cc {
            Some(c) if !self.kernel => {
                let a = parse_cc(c)?;
                options.cc = Some(a);
                a.to_string()
            }
            Some(c) => {
                kernel::check_cc_available(c)?;
                c.clone()
            }
            None if self.kernel => "default".into(),
            None => StreamOptions::default().config().tcp.congestion_control.to_string(),
        };
        let kernel_options = KernelOptions {
            mptcp: !self.no_mptcp,
            cc: self.cc.clone().filter(|_| self.kernel),
            sndbuf,
            rcvbuf,
            max_pacing_rate: pacing,
        };
        let path_names = if self.kernel {
            vec!["kernel routes".into()]
        } else {
            paths.iter().map(|p| format!("{} on {}", p.addr.addr, p.dev)).collect()
        };
        Ok(Plan {
            kernel: self.kernel,
            paths,
            options,
            kernel_options,
            settings: Settings {
                client,
                interval: self.interval,
                json: self.json.json,
                progress: !self.no_progress,
                idle_timeout: self.idle_timeout,
                paths: path_names,
                congestion: cc_name,
                scheduler: if self.kernel { "kernel".into() } else { scheduler.to_string() },
                connecting_to: None,
                sock_bufsize: rcvbuf.or(sndbuf).unwrap_or(0) as u64,
                duration: None,
                path_manager: pm.as_ref().map(|pm| PathManagerInfo {
                    add_addr_accepted: u32::from(pm.max_add_addr_accepted),
                    subflows: u32::from(pm.max_subflows),
                    endpoints: pm
                        .endpoints
                        .iter()
                        .map(|e| format!("{} id {} {}", e.addr, e.id, pathspec::flags_text(e.flags)))
                        .collect(),
                }),
            },
            pcap: self.pcap.clone(),
            control: self.control.clone(),
            control_server: std::sync::Mutex::new(None),
        })
    }
}

impl Common {
    /// mptun's path manager: every path an endpoint with its flags (ids
    /// from 1 in order, as `ip mptcp endpoint add` numbers them), Linux's
    /// limits unless given.
    fn path_manager(&self, paths: &[PathSpec]) -> PmConfig {
        let linux = PmConfig::default();
        PmConfig {
            endpoints: PathSpec::endpoints(paths),
            max_subflows: self.subflows.unwrap_or(linux.max_subflows),
            max_add_addr_accepted: self.add_addr_accepted.unwrap_or(linux.max_add_addr_accepted),
            subflows_per_pair: self.subflows_per_pair,
        }
    }
}

impl Plan {
    /// mptun's stack over freshly created TUN devices.
    fn stack(&self) -> Result<Stack> {
        // Listeners take the stack's defaults: make them these settings.
        let defaults = self.options.apply(StreamOptions::default());
        let stack = build_stack(&self.paths, &defaults, true, self.pcap.as_deref())?;
        let server = self.control.start(&stack)?;
        *self.control_server.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = server;
        Ok(stack)
    }
}

fn emit(r: &Report, json: bool) -> Result<()> {
    report::emit(r, json)?;
    Ok(())
}

/// Connects with either stack within `limit`, or fails with the cause.
async fn connect(plan: &Plan, to: SocketAddr, limit: Duration) -> Result<(Conn, CounterSource)> {
    let timed_out = || anyhow!("cannot connect to {to}: timed out (no answer within {} s)", limit.as_secs_f64());
    let interrupted = signals::wait();
    if plan.kernel {
        let counters = CounterSource::kernel();
        let s = tokio::select! {
            r = tokio::time::timeout(limit, kernel::connect(to, &plan.kernel_options)) => r.map_err(|_| timed_out())??,
            _ = interrupted => return Err(signals::interrupted()),
        };
        Ok((Conn::Kernel(s), counters))
    } else {
        let stack = plan.stack()?;
        // Counted from here: the handshake is part of the test.
        let counters = CounterSource::mptun(stack.clone());
        let options = plan.options.apply(stack.stream_options());
        let s = tokio::select! {
            r = tokio::time::timeout(limit, MptcpStream::connect_with(&stack, to, options)) => {
                r.map_err(|_| timed_out())?.map_err(|e| connect_error(to, &e))?
            }
            _ = interrupted => return Err(signals::interrupted()),
        };
        Ok((Conn::Mptun(s), counters))
    }
}

pub(crate) fn run_send(a: SendArgs) -> Result<Verdict> {
    let mut plan = a.common.check(true).map_err(crate::error::usage)?;
    let (host, port) = split_host_port(&a.server, a.port).map_err(crate::error::usage)?;
    let amount = match (a.bytes, a.time, &a.file) {
        (Some(n), _, _) => {
            if n > MAX_BYTES {
                crate::error::bail_usage!("-n {n}: at most {MAX_BYTES} bytes");
            }
            Amount::Bytes(n)
        }
        (None, Some(t), _) => Amount::DurationMs((t.as_millis() as u64).max(1)),
        (None, None, Some(_)) => Amount::Bytes(1), // replaced by the file's size below
        (None, None, None) => Amount::DurationMs(10_000),
    };
    let (mut source, mut sink, mut amount, file_name) = (None, Sink::Discard, amount, None::<String>);
    let mut file_name = file_name;
    // A file this run created, removed again if the run ends before any of
    // it arrived (so that trying again needs no --force).
    let mut created = None;
    if let Some(path) = &a.file {
        if a.reverse {
            let mut open = std::fs::OpenOptions::new();
            open.write(true);
            if a.force {
                open.create(true).truncate(true);
            } else {
                open.create_new(true);
            }
            let f = open.open(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    crate::error::usage(anyhow!("{} already exists: give --force to replace it", path.display()))
                } else {
                    crate::error::usage(anyhow!("cannot create {}: {e}", path.display()))
                }
            })?;
            if !a.force {
                created = Some(path.clone());
            }
            sink = Sink::File(f, path.clone());
            file_name = Some(String::new());
        } else {
            let f = std::fs::File::open(path)
                .map_err(|e| crate::error::usage(anyhow!("cannot open {}: {e}", path.display())))?;
            let meta = f.metadata().with_context(|| format!("stat {}", path.display()))?;
            if !meta.is_file() {
                crate::error::bail_usage!("{} is not a regular file", path.display());
            }
            if meta.len() == 0 {
                crate::error::bail_usage!("{} is empty", path.display());
            }
            amount = Amount::Bytes(meta.len());
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| anyhow!("{}: the file name must be UTF-8", path.display()))?;
            if name.len() > control::MAX_NAME {
                bail!("file name {name} is longer than {} bytes", control::MAX_NAME);
            }
            file_name = Some(name.to_owned());
            source = Some(Source::File(f, path.clone()));
        }
    }
    if source.is_none() && !a.reverse {
        source = Some(Source::Pattern(Pattern::new(1)));
    }
    let request = Request { reverse: a.reverse, amount, file: file_name, cookie: control::new_cookie(), hash: a.hash };
    plan.settings.connecting_to = Some((host.clone(), port));
    let json = plan.settings.json;
    let rt = runtime()?;
    let report = rt.block_on(async move {
        let to = resolve(&host, port).await?;
        let (conn, counters) = connect(&plan, to, a.connect_timeout).await?;
        let stack = counters.stack();
        let r = bulk::run_client(conn, ClientTest { request, source, sink }, plan.settings.clone(), counters).await;
        end_stack(stack).await;
        r
    });
    let mut report = match report {
        Ok(r) => r,
        Err(e) => {
            if let Some(p) = created.filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == 0)) {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let interrupted = signals::received().is_some();
    if interrupted {
        report.error = Some("interrupt - the client has terminated".into());
    }
    emit(&report, json)?;
    if !report.end.mptcp.sha256_match {
        return Ok(Verdict::Fail(anyhow!(
            "integrity check failed: sent {} bytes ({} {}), the receiver got {} ({1} {})",
            report.end.sum_sent.bytes,
            report.end.mptcp.hash,
            report.end.mptcp.sha256_sent,
            report.end.sum_received.bytes,
            report.end.mptcp.sha256_received
        )));
    }
    if interrupted {
        return Ok(Verdict::Fail(anyhow!("interrupt - the client has terminated")));
    }
    Ok(Verdict::Pass)
}

pub(crate) fn run_serve(a: ServeArgs) -> Result<Verdict> {
    let plan = a.common.check(false).map_err(crate::error::usage)?;
    // Opened now, once: what a client sends goes into this directory
    // whatever its path names later.
    let output_dir = a
        .output_dir
        .as_deref()
        .map(|d| OutputDir::open(d, a.max_file_size))
        .transpose()
        .map_err(crate::error::usage)?;
    if let Some(f) = &a.file {
        let m = std::fs::metadata(f).map_err(|e| crate::error::usage(anyhow!("--file {}: {e}", f.display())))?;
        if !m.is_file() {
            crate::error::bail_usage!("--file {}: not a regular file", f.display());
        }
    }
    let cfg = ServerConfig { output_dir, file: a.file.clone() };
    let json = plan.settings.json;
    let rt = runtime()?;
    rt.block_on(async move {
        // Dual-stack by default, as iperf3: `[::]` takes IPv4 too (mptun:
        // every path address; kernel: IPV6_V6ONLY off).
        let bind_ip = a.bind.unwrap_or(IpAddr::from([0u16; 8]));
        let bind = SocketAddr::new(bind_ip, a.port);
        enum L {
            K(tokio::net::TcpListener),
            M(MptcpListener, Stack),
        }
        let listener = if plan.kernel {
            match kernel::listen(bind, &plan.kernel_options) {
                // No IPv6 on this host: IPv4 only, as iperf3 falls back.
                Err(_) if a.bind.is_none() => {
                    L::K(kernel::listen(SocketAddr::new(IpAddr::from([0u8; 4]), a.port), &plan.kernel_options)?)
                }
                r => L::K(r?),
            }
        } else {
            let stack = plan.stack()?;
            let l = MptcpListener::bind(&stack, bind).await.map_err(|e| anyhow!("listen on {bind}: {e}"))?;
            L::M(l, stack)
        };
        let what = match &plan.settings.path_manager {
            None => "kernel".to_string(),
            Some(pm) => format!("mptun, {} path(s); {}", plan.paths.len(), report::path_manager_text(pm)),
        };
        let line = format!("Server listening on {bind} ({what})");
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
            println!("-----------------------------------------------------------");
        }
        async fn accept(l: &L) -> Result<(Conn, SocketAddr)> {
            Ok(match l {
                L::K(l) => {
                    let (s, peer) = l.accept().await.context("accept")?;
                    s.set_nodelay(true).ok();
                    (Conn::Kernel(s), peer)
                }
                L::M(l, _) => {
                    let (s, peer) = l.accept().await.context("accept")?;
                    (Conn::Mptun(s), peer)
                }
            })
        }
        let stack = match &listener {
            L::M(_, stack) => Some(stack.clone()),
            L::K(_) => None,
        };
        // Whether a test's report is out: a failure after it is the verdict
        // of a reported run, with no error document of its own.
        let mut reported = false;
        let served = async {
            loop {
                let counters = match &listener {
                    L::K(_) => CounterSource::kernel(),
                    L::M(_, stack) => CounterSource::mptun(stack.clone()),
                };
                let (conn, peer) = tokio::select! {
                    r = accept(&listener) => r?,
                    _ = signals::wait() => bail!("interrupt - the server has terminated"),
                };
                if !json {
                    println!("Accepted connection from {}, port {}", peer.ip(), peer.port());
                }
                // One test at a time, as iperf3: a client arriving meanwhile
                // is told the server is busy, not queued in silence.
                let test = bulk::run_server(conn, &cfg, plan.settings.clone(), counters);
                tokio::pin!(test);
                let result = loop {
                    tokio::select! {
                        r = &mut test => break r,
                        r = accept(&listener) => {
                            if let Ok((other, from)) = r {
                                eprintln!("mptun: {from} refused: the server is busy running a test");
                                tokio::spawn(bulk::refuse(other, "the server is busy running a test"));
                            }
                        }
                    }
                };
                let interrupted = signals::received().is_some();
                match result {
                    Ok(mut r) => {
                        if interrupted {
                            r.error = Some("interrupt - the server has terminated".into());
                        }
                        emit(&r, json)?;
                        reported = true;
                        if !r.end.mptcp.sha256_match && a.one_off {
                            bail!("integrity check failed");
                        }
                    }
                    Err(e) if a.one_off || interrupted => return Err(e),
                    Err(e) => eprintln!("mptun: test with {peer} failed: {e:#}"),
                }
                if interrupted {
                    bail!("interrupt - the server has terminated");
                }
                if a.one_off {
                    return Ok(());
                }
                if !json {
                    println!("-----------------------------------------------------------");
                    println!("Server listening on {bind} ({what})");
                }
            }
        }
        .await;
        drop(listener);
        end_stack(stack).await;
        match served {
            Ok(()) => Ok(Verdict::Pass),
            Err(e) if reported => Ok(Verdict::Fail(e)),
            Err(e) => Err(e),
        }
    })
}

fn split_host_port(s: &str, default_port: u16) -> Result<(String, u16)> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip.to_string(), default_port));
    }
    let (h, p) = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p.parse::<u16>().map_err(|_| anyhow!("'{s}': bad port '{p}'"))?),
        _ => (s, default_port),
    };
    if h.is_empty() || !h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') {
        bail!("'{s}' is not an address or host name");
    }
    Ok((h.to_owned(), p))
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| anyhow!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| anyhow!("{host} has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port() {
        assert_eq!(split_host_port("10.0.0.1", 5201).unwrap(), ("10.0.0.1".into(), 5201));
        assert_eq!(split_host_port("10.0.0.1:7", 5201).unwrap(), ("10.0.0.1".into(), 7));
        assert_eq!(split_host_port("[fd00::1]:7", 5201).unwrap(), ("fd00::1".into(), 7));
        assert_eq!(split_host_port("fd00::1", 9).unwrap(), ("fd00::1".into(), 9));
        assert_eq!(split_host_port("host-a:80", 9).unwrap(), ("host-a".into(), 80));
        assert!(split_host_port("a b", 9).is_err());
        assert!(split_host_port("h:xx", 9).is_err());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        common: Common,
    }

    fn plan(args: &[&str]) -> Result<Plan> {
        use clap::Parser;
        let argv = std::iter::once("mptun").chain(args.iter().copied());
        Cli::try_parse_from(argv).map_err(|e| anyhow!("{e}"))?.common.check(true)
    }

    /// `--pacer` and `--max-pacing-rate` reach the configuration both the
    /// connecting socket and the stack's listeners are built from.
    #[test]
    fn pacer_and_pacing_rate_reach_the_stream_options() {
        let path = "--path=dev=t0,addr=10.9.1.2/24";
        for (name, kind) in [("edt", PacerKind::Edt), ("quantum", PacerKind::Quantum), ("none", PacerKind::None)] {
            let p = plan(&[path, "--pacer", name, "--max-pacing-rate", "80mbit"]).unwrap();
            let cfg = p.options.apply(StreamOptions::default()).config().clone();
            assert_eq!(cfg.tcp.pacer, kind, "--pacer {name}");
            assert_eq!(cfg.tcp.max_pacing_rate, Some(10_000_000), "80 Mbit/s in bytes per second");
        }
        let p = plan(&[path]).unwrap();
        let cfg = p.options.apply(StreamOptions::default()).config().clone();
        assert_eq!(cfg.tcp.pacer, StreamOptions::default().config().tcp.pacer, "no --pacer: the runtime's default");
        assert_eq!(cfg.tcp.max_pacing_rate, None);
        assert!(plan(&[path, "--pacer", "fast"]).is_err(), "an unknown pacer is refused");
        let e = plan(&["--kernel", "--pacer", "quantum"]).err().expect("--pacer with --kernel is refused");
        assert!(e.to_string().contains("--pacer"), "{e}");
    }
}
