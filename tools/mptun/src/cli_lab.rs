//! `mptun lab aggregate`: the simulator's `aggregate` scenario in real
//! namespaces. netns-scripts/lab/topo.sh builds client — linkem — server
//! with the same two paths (10 Mbit/s/20 ms and 3 Mbit/s/40 ms one way,
//! one-BDP droptail limits); this command adds the routing for mptun's TUN
//! subnets, runs `mptun serve` and `mptun send` inside the namespaces (or
//! `--kernel` for the kernel's MPTCP), and prints the `send` report plus
//! the same summary line `mptun sim aggregate` prints. The topology is torn
//! down whatever happens.
//!
//! Routing plan (mptun stack; the veths are topo.sh's 10.0.i.0/24):
//!
//! ```text
//! P-cli: TUN mptc<i> 10.9.i.1/24, mptun 10.9.i.2;  rule from 10.9.i.0/24 lookup 20<i>:
//!        default via 10.0.i.2 dev c<i>;  10.8.1.0/24 via 10.0.1.2 dev c1;  forwarding on
//! P-srv: TUN mpts1 10.8.1.1/24, mptun 10.8.1.2;    10.9.i.0/24 via 10.0.i.1 dev s<i>;  forwarding on
//! ```

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use mptun_sim::scenarios::aggregate::Params;

use crate::cli_shared::JsonDocument;
use crate::report::{self, AggregateLine, Report};
use crate::signals;
use crate::units::parse_size;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LabScenario {
    /// Two paths, 10 Mbit/s/20 ms and 3 Mbit/s/40 ms, one MPTCP connection.
    Aggregate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LabStack {
    Mptun,
    Kernel,
}

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the client's JSON report (with efficiency) instead of text")))]
pub struct LabArgs {
    scenario: LabScenario,
    /// Whose MPTCP runs at both ends.
    #[arg(long, value_enum, default_value = "mptun")]
    stack: LabStack,
    /// Bytes to transfer (client to server).
    #[arg(long, short = 'n', default_value = "32M", value_parser = parse_size)]
    size: u64,
    /// Namespace prefix (P-cli, P-mid, P-srv); default mlab<pid>.
    #[arg(long)]
    name: Option<String>,
    /// The linkem binary (default: next to this one, or in $CARGO_TARGET_DIR).
    #[arg(long, value_name = "BIN")]
    linkem: Option<PathBuf>,
    /// The netns-scripts directory (default: found above the current directory or this binary).
    #[arg(long, value_name = "DIR")]
    scripts: Option<PathBuf>,
    /// Congestion control at both ends.
    #[arg(long)]
    cc: Option<String>,
    #[command(flatten)]
    pub json: JsonDocument,
}

fn find_scripts(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = given {
        if d.join("lab/topo.sh").is_file() {
            return Ok(d.to_path_buf());
        }
        bail!("{}: no lab/topo.sh there", d.display());
    }
    let mut starts = vec![std::env::current_dir()?];
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    for s in starts {
        for dir in s.ancestors() {
            let c = dir.join("netns-scripts");
            if c.join("lab/topo.sh").is_file() {
                return Ok(c);
            }
        }
    }
    bail!("netns-scripts/lab/topo.sh not found: run from the repository or pass --scripts DIR")
}

fn find_linkem(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return if p.is_file() { Ok(p.to_path_buf()) } else { Err(anyhow!("--linkem {}: no such file", p.display())) };
    }
    let mut cands = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        cands.push(dir.join("linkem"));
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        for p in ["release", "debug"] {
            cands.push(PathBuf::from(&t).join(p).join("linkem"));
        }
    }
    cands
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("linkem not found: build it (cargo build --release -p linkem) or pass --linkem BIN"))
}

/// Tears the topology down on drop.
struct Topology {
    script: PathBuf,
    name: String,
    state: PathBuf,
}

impl Drop for Topology {
    fn drop(&mut self) {
        let st = Command::new("bash")
            .arg(&self.script)
            .args(["down", "--name", &self.name, "--state"])
            .arg(&self.state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !st.is_ok_and(|s| s.success()) {
            eprintln!("mptun: warning: `topo.sh down --name {}` failed; remove {0}-cli/-mid/-srv by hand", self.name);
        }
        // The state directory (linkem sockets, pid files, stats) is ours too.
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// A child process (`ip netns exec` execs it, so the pid is mptun's), killed on drop.
struct Proc(Option<Child>);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ip(ns: &str, args: &[&str]) -> Result<()> {
    mptun_io::netns::ip(ns, args).map(drop).map_err(|e| anyhow!("{e}"))
}

/// Routes mptun's TUN subnets across the lab (see the module comment).
fn mptun_routes(name: &str, paths: u8) -> Result<()> {
    let (cli, srv) = (format!("{name}-cli"), format!("{name}-srv"));
    for ns in [&cli, &srv] {
        mptun_io::netns::sysctl(ns, "net.ipv4.ip_forward", "1").map_err(|e| anyhow!("{e}"))?;
    }
    for i in 1..=paths {
        let table = (200 + u32::from(i)).to_string();
        ip(&cli, &["rule", "add", "from", &format!("10.9.{i}.0/24"), "lookup", &table, "pref", &table])?;
        ip(
            &cli,
            &["route", "add", "default", "via", &format!("10.0.{i}.2"), "dev", &format!("c{i}"), "table", &table],
        )?;
        ip(&srv, &["route", "add", &format!("10.9.{i}.0/24"), "via", &format!("10.0.{i}.1"), "dev", &format!("s{i}")])?;
    }
    ip(&cli, &["route", "add", "10.8.1.0/24", "via", "10.0.1.2", "dev", "c1"])?;
    Ok(())
}

fn spawn(ns: &str, args: &[String]) -> Result<Child> {
    let exe = std::env::current_exe().context("own executable")?;
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start `ip netns exec`")
}

/// Collects a pipe's lines on a thread.
fn lines(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

pub fn run(a: LabArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("mptun lab needs root (it builds network namespaces)");
    }
    let scripts = find_scripts(a.scripts.as_deref())?;
    let linkem = find_linkem(a.linkem.as_deref())?;
    let name = a.name.clone().unwrap_or_else(|| format!("mlab{}", std::process::id() % 100_000));
    if name.is_empty() || name.len() > 20 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        bail!("--name '{name}': 1-20 of [A-Za-z0-9-]");
    }
    let params = Params::default();
    let specs: Vec<String> = params
        .paths
        .iter()
        .map(|p| {
            let l = p.link();
            // The simulator's `aggregate` buffer is a router queue (packets
            // waiting for the link); linkem's default counts the delay line
            // too (netem `limit`), which would make the lab's buffer smaller.
            format!(
                "rate={}mbit,delay={}ms,limit={},limit-scope=bottleneck",
                p.rate_bps / 1_000_000,
                p.delay.as_millis(),
                l.limit_packets.unwrap_or(100)
            )
        })
        .collect();
    let sum_path_bps: f64 = params.paths.iter().map(|p| p.rate_bps as f64).sum();
    let state = std::env::temp_dir().join(format!("mptun-lab-{name}"));
    let script = scripts.join("lab/topo.sh");
    let mut up = Command::new("bash");
    up.arg(&script).args(["up", "--name", &name, "--state"]).arg(&state).arg("--linkem").arg(&linkem);
    for s in &specs {
        up.args(["--path", s]);
    }
    eprintln!("lab: {name}-cli — linkem [{}] — {name}-srv, stack {:?}", specs.join(" | "), a.stack);
    let out = up.output().context("cannot run bash")?;
    // From here on the namespaces may exist: tear down whatever happens
    // (an error, a signal: every return below drops this).
    let _topo = Topology { script: script.clone(), name: name.clone(), state: state.clone() };
    if signals::received().is_some() {
        return Err(signals::interrupted());
    }
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("topo.sh up failed: {}", err.trim().lines().last().unwrap_or("no output"));
    }
    let (cli, srv) = (format!("{name}-cli"), format!("{name}-srv"));
    let cc: Vec<String> = a.cc.iter().flat_map(|c| ["--cc".to_string(), c.clone()]).collect();
    let size = a.size.to_string();
    let (serve_args, send_args): (Vec<String>, Vec<String>) = match a.stack {
        LabStack::Mptun => {
            mptun_routes(&name, params.paths.len() as u8)?;
            (
                ["serve", "--topology", "linkem-server", "-1", "--json", "--no-progress"].map(String::from).to_vec(),
                ["send", "10.8.1.2", "-n", &size, "--topology", "linkem-client:2", "--json", "--no-progress"]
                    .map(String::from)
                    .to_vec(),
            )
        }
        LabStack::Kernel => (
            ["serve", "--kernel", "-B", "10.0.1.2", "-1", "--json", "--no-progress"].map(String::from).to_vec(),
            ["send", "10.0.1.2", "-n", &size, "--kernel", "--json", "--no-progress"].map(String::from).to_vec(),
        ),
    };
    let mut server = Proc(Some(spawn(&srv, &[serve_args, cc.clone()].concat())?));
    let s = server.0.as_mut().expect("just spawned");
    let s_err = lines(s.stderr.take().expect("piped"));
    let s_out = lines(s.stdout.take().expect("piped"));
    let t0 = Instant::now();
    loop {
        if signals::received().is_some() {
            return Err(signals::interrupted());
        }
        match s_err.recv_timeout(Duration::from_millis(100)) {
            Ok(l) if l.contains("Server listening") => break,
            Ok(l) => bail!("the server failed to start: {l}"),
            Err(mpsc::RecvTimeoutError::Timeout) if t0.elapsed() < Duration::from_secs(10) => {}
            Err(_) => bail!("the server did not start listening within 10 s"),
        }
    }
    // Generous: the paths' rate at half efficiency, plus setup.
    let limit = Duration::from_secs_f64(a.size as f64 * 8.0 / (sum_path_bps * 0.5) + 60.0);
    let mut client = Proc(Some(spawn(&cli, &[send_args, cc].concat())?));
    let c = client.0.as_mut().expect("just spawned");
    let c_out = lines(c.stdout.take().expect("piped"));
    let c_err = lines(c.stderr.take().expect("piped"));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = c.try_wait()? {
            break st;
        }
        if t0.elapsed() > limit {
            bail!("the transfer did not finish within {:.0} s", limit.as_secs_f64());
        }
        if signals::received().is_some() {
            // The client and server are killed and the namespaces removed on the way out.
            return Err(signals::interrupted());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    client.0 = None;
    let text: Vec<String> = c_out.try_iter().collect();
    if !status.success() {
        let err: Vec<String> = c_err.try_iter().collect();
        bail!("mptun send failed: {}", err.last().map_or("no message", String::as_str));
    }
    let mut r: Report = serde_json::from_str(&text.join("\n")).context("the client's JSON report")?;
    if let Some(s) = server.0.as_mut() {
        let t0 = Instant::now();
        while s.try_wait()?.is_none() && t0.elapsed() < Duration::from_secs(15) && signals::received().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    drop(s_out);
    r.end.mptcp.efficiency = Some(r.end.sum_received.bits_per_second / sum_path_bps);
    let label = format!(
        "aggregate (lab, {})",
        match a.stack {
            LabStack::Mptun => "mptun",
            LabStack::Kernel => "kernel",
        }
    );
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        report::mark_reported();
    } else {
        print!("{}", report::header_lines(&r.start));
        for i in &r.intervals {
            print!("{}", report::interval_lines(i));
        }
        print!("{}", report::end_lines(&r));
        print!("{}", AggregateLine::from_report(&label, &r, sum_path_bps));
    }
    if !r.end.mptcp.sha256_match {
        bail!("integrity check failed");
    }
    Ok(())
}
