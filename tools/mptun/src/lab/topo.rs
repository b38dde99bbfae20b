//! What every `mptun lab` scenario shares: the client — linkem — server
//! namespaces of `netns-scripts/lab/topo.sh`, torn down whatever happens
//! (an error, SIGINT/SIGTERM: every return drops the [`Topology`]), the
//! leftovers of a crashed run with the same `--name` removed before a new
//! one starts, mptun's TUN routing, and the processes a scenario runs
//! inside the namespaces (killed on drop).
//!
//! Routing plan for mptun's stack (the veths are topo.sh's 10.0.i.0/24):
//!
//! ```text
//! P-cli: TUN mptc<i> 10.9.i.1/24, mptun 10.9.i.2;  rule from 10.9.i.0/24 lookup 20<i>:
//!        default via 10.0.i.2 dev c<i>;  10.8.1.0/24 via 10.0.1.2 dev c1;  forwarding on
//! P-srv: TUN mpts1 10.8.1.1/24, mptun 10.8.1.2;    10.9.i.0/24 via 10.0.i.1 dev s<i>;  forwarding on
//! ```

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};

use crate::flags::JsonDocument;
use crate::signals;

/// Whose MPTCP runs at both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LabStack {
    Mptun,
    Kernel,
}

impl LabStack {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LabStack::Mptun => "mptun",
            LabStack::Kernel => "kernel",
        }
    }
}

/// Options of every lab scenario.
#[derive(Args, Debug, Clone)]
pub(crate) struct LabCommon {
    /// Namespace prefix (P-cli, P-mid, P-srv); default mlab<pid>. A rerun
    /// with the name of a crashed run removes that run's leftovers first.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// The linkem binary (default: next to this one, or in $CARGO_TARGET_DIR).
    #[arg(long, value_name = "BIN")]
    pub(crate) linkem: Option<PathBuf>,
    /// The netns-scripts directory (default: found above the current directory or this binary).
    #[arg(long, value_name = "DIR")]
    pub(crate) scripts: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) json: JsonDocument,
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

fn ip(ns: &str, args: &[&str]) -> Result<()> {
    mptun_io::netns::ip(ns, args).map(drop).map_err(|e| anyhow!("{e}"))
}

/// The controller of every kernel socket in the lab that names none: the
/// simulator's and mptun's default. `lab peer` names it on each kernel
/// socket it opens; the namespaces' default is the belt for the others.
pub(crate) const LAB_DEFAULT_CC: &str = "cubic";

fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    mptun_io::netns::sysctl(ns, key, value).map_err(|e| anyhow!("{e}"))
}

fn namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The lab's namespaces and linkem processes; torn down on drop.
pub(crate) struct Topology {
    script: PathBuf,
    linkem: PathBuf,
    pub(crate) name: String,
    state: PathBuf,
    /// `P-cli`, `P-srv`.
    pub(crate) cli: String,
    pub(crate) srv: String,
    /// topo.sh's `--ends` (multi-link routes through router namespaces).
    ends: Option<String>,
}

impl Topology {
    /// Checks root and the name, finds topo.sh and linkem.
    pub(crate) fn plan(c: &LabCommon) -> Result<Topology> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("mptun lab needs root (it builds network namespaces)");
        }
        let scripts = find_scripts(c.scripts.as_deref())?;
        let linkem = find_linkem(c.linkem.as_deref())?;
        let name = c.name.clone().unwrap_or_else(|| format!("mlab{}", std::process::id() % 100_000));
        if name.is_empty() || name.len() > 20 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            bail!("--name '{name}': 1-20 of [A-Za-z0-9-]");
        }
        Ok(Topology {
            script: scripts.join("lab/topo.sh"),
            linkem,
            state: std::env::temp_dir().join(format!("mptun-lab-{name}")),
            cli: format!("{name}-cli"),
            srv: format!("{name}-srv"),
            ends: None,
            name,
        })
    }

    /// Places each path's ends as `ends` says (topo.sh's `--ends`, from
    /// [`super::routes::Wiring::ends_arg`]); `None` keeps every path
    /// client to server.
    pub(crate) fn with_ends(mut self, ends: Option<String>) -> Topology {
        self.ends = ends;
        self
    }

    /// The namespace of `node`.
    pub(crate) fn ns(&self, node: super::routes::Node) -> String {
        format!("{}-{}", self.name, node.suffix())
    }

    fn down(&self) -> bool {
        Command::new("bash")
            .arg(&self.script)
            .args(["down", "--name", &self.name, "--state"])
            .arg(&self.state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Builds the namespaces with one linkem per path spec (each applies to
    /// both directions, or `UP|DOWN`), and mptun's routes for `stack`
    /// mptun. A crashed run's namespaces and linkems of the same name are
    /// removed first.
    pub(crate) fn up(self, specs: &[String], stack: LabStack, mptcp: bool) -> Result<Topology> {
        let t = self.up_with(specs, &format!("stack {}", stack.name()), mptcp)?;
        if stack == LabStack::Mptun {
            t.mptun_routes(specs.len() as u8)?;
        }
        Ok(t)
    }

    /// [`Topology::up`] without mptun's routes (a scenario file's flows
    /// bring their own, [`Topology::tun_routes`]); `what` names the stacks
    /// in the progress line.
    pub(crate) fn up_with(self, specs: &[String], what: &str, mptcp: bool) -> Result<Topology> {
        let mut ours = vec![format!("{}-cli", self.name), format!("{}-mid", self.name), self.srv.clone()];
        ours.extend((1..=8).map(|r| format!("{}-r{r}", self.name)));
        if namespaces().iter().any(|n| ours.contains(n)) || self.state.exists() {
            eprintln!("lab: removing the leftovers of an earlier run named {}", self.name);
            if !self.down() {
                bail!(
                    "cannot remove the leftovers of {}: delete {}-cli/-mid/-srv/-r1..r8 by hand",
                    self.name,
                    self.name
                );
            }
            let _ = std::fs::remove_dir_all(&self.state);
        }
        let mut up = Command::new("bash");
        up.arg(&self.script).args(["up", "--name", &self.name, "--state"]).arg(&self.state).arg("--linkem");
        up.arg(&self.linkem);
        if !mptcp {
            up.arg("--no-mptcp");
        }
        if let Some(e) = &self.ends {
            up.args(["--ends", e]);
        }
        for s in specs {
            up.args(["--path", s]);
        }
        let placed = self.ends.as_ref().map_or_else(String::new, |e| format!(" (paths' ends {e})"));
        eprintln!("lab: {} — linkem [{}]{placed} — {}, {what}", self.cli, specs.join(" | "), self.srv);
        let out = up.output().context("cannot run bash")?;
        // From here on the namespaces may exist: `self` tears them down on
        // every way out (an error, a signal).
        if signals::received().is_some() {
            return Err(signals::interrupted());
        }
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            bail!("topo.sh up failed: {}", err.trim().lines().last().unwrap_or("no output"));
        }
        for ns in [&self.cli, &self.srv] {
            // Each connection starts from the defaults, as each simulated
            // run does: no ssthresh/RTT cached from the previous one.
            sysctl(ns, "net.ipv4.tcp_no_metrics_save", "1")?;
            // A new namespace inherits the host's default controller (bbr
            // on some hosts): a kernel socket that names none would then
            // run it beside mptun's CUBIC, and the rows would compare two
            // controllers (the handover "kernel has no stall" was that).
            // A namespace other than the host's may only default to what the
            // host's net.ipv4.tcp_allowed_congestion_control lists (EPERM
            // otherwise; "reno bbr" on a host that boots with bbr). The lab
            // leaves the host's list alone: its own sockets name the
            // controller (root may pick any available one per socket).
            match mptun_io::netns::sysctl(ns, "net.ipv4.tcp_congestion_control", LAB_DEFAULT_CC) {
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    if ns == &self.cli {
                        eprintln!(
                            "lab: the host's net.ipv4.tcp_allowed_congestion_control has no {LAB_DEFAULT_CC}: \
                             the namespaces keep the host's default, and every lab socket names {LAB_DEFAULT_CC}"
                        );
                    }
                }
                r => r.map_err(|e| anyhow!("{e}"))?,
            }
        }
        Ok(self)
    }

    /// Routes mptun's TUN subnets across the lab (see the module comment).
    fn mptun_routes(&self, paths: u8) -> Result<()> {
        for ns in [&self.cli, &self.srv] {
            sysctl(ns, "net.ipv4.ip_forward", "1")?;
        }
        for i in 1..=paths {
            let table = (200 + u32::from(i)).to_string();
            ip(&self.cli, &["rule", "add", "from", &format!("10.9.{i}.0/24"), "lookup", &table, "pref", &table])?;
            let via = format!("10.0.{i}.2");
            ip(&self.cli, &["route", "add", "default", "via", &via, "dev", &format!("c{i}"), "table", &table])?;
            let (net, back) = (format!("10.9.{i}.0/24"), format!("10.0.{i}.1"));
            ip(&self.srv, &["route", "add", &net, "via", &back, "dev", &format!("s{i}")])?;
        }
        ip(&self.cli, &["route", "add", "10.8.1.0/24", "via", "10.0.1.2", "dev", "c1"])
    }

    /// `sysctl KEY=VALUE` inside namespace `ns` (one of this lab's).
    pub(crate) fn sysctl(&self, ns: &str, key: &str, value: &str) -> Result<()> {
        sysctl(ns, key, value)
    }

    /// `ip ARGS` inside namespace `ns` (one of this lab's).
    pub(crate) fn ip(&self, ns: &str, args: &[&str]) -> Result<()> {
        ip(ns, args)
    }

    /// Routes mptun's TUN subnets of a scenario file's flows: client
    /// subnet `10.9.k.0/24` leaves by path `p` for each `(k, p)` of
    /// `client`, and the server comes back over it; server subnet
    /// `10.8.f.0/24` is reached by path `p` for each `(f, p)` of `server`
    /// (a subflow's own path takes it there: its rule comes first).
    pub(crate) fn tun_routes(&self, client: &[(u8, u8)], server: &[(u8, u8)]) -> Result<()> {
        if client.is_empty() && server.is_empty() {
            return Ok(());
        }
        for ns in [&self.cli, &self.srv] {
            sysctl(ns, "net.ipv4.ip_forward", "1")?;
        }
        let paths: std::collections::BTreeSet<u8> = client.iter().chain(server).map(|&(_, p)| p).collect();
        for p in paths {
            let table = (200 + u32::from(p)).to_string();
            let via = format!("10.0.{p}.2");
            ip(&self.cli, &["route", "replace", "default", "via", &via, "dev", &format!("c{p}"), "table", &table])?;
        }
        for &(k, p) in client {
            let (table, pref) = ((200 + u32::from(p)).to_string(), (300 + u32::from(k)).to_string());
            let net = format!("10.9.{k}.0/24");
            ip(&self.cli, &["rule", "add", "from", &net, "lookup", &table, "pref", &pref])?;
            ip(&self.srv, &["route", "add", &net, "via", &format!("10.0.{p}.1"), "dev", &format!("s{p}")])?;
        }
        for &(f, p) in server {
            let net = format!("10.8.{f}.0/24");
            ip(&self.cli, &["route", "add", &net, "via", &format!("10.0.{p}.2"), "dev", &format!("c{p}")])?;
        }
        Ok(())
    }

    /// Routes multi-link routes across the routers (and mptun's TUN
    /// subnets with them): [`super::routes::Wiring::commands`].
    pub(crate) fn wire(&self, w: &super::routes::Wiring, client: &[(u8, u8)], server: &[(u8, u8)]) -> Result<()> {
        for ns in [&self.cli, &self.srv] {
            sysctl(ns, "net.ipv4.ip_forward", "1")?;
        }
        for (node, args) in w.commands(client, server) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ip(&self.ns(node), &args)?;
        }
        Ok(())
    }

    /// A command to path `index`'s linkem (`down both`, `up both`, `stats`, `set a2b rate=...`).
    pub(crate) fn ctl(&self, index: u8, cmd: &[&str]) -> Result<String> {
        let out = Command::new(&self.linkem)
            .arg("ctl")
            .arg(self.state.join(format!("path{index}.sock")))
            .args(cmd)
            .output()
            .context("cannot run linkem ctl")?;
        if !out.status.success() {
            bail!("linkem ctl {}: {}", cmd.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts this executable with `args` inside namespace `ns`.
    pub(crate) fn spawn(&self, ns: &str, args: &[String]) -> Result<Proc> {
        let exe = std::env::current_exe().context("own executable")?;
        let mut c = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start `ip netns exec`")?;
        let out = lines(c.stdout.take().expect("piped"));
        let err = lines(c.stderr.take().expect("piped"));
        Ok(Proc { child: Some(c), out, err })
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if !self.down() {
            eprintln!(
                "mptun: warning: `topo.sh down --name {}` failed; remove {0}-cli/-mid/-srv/-r1..r8 by hand",
                self.name
            );
        }
        // The state directory (linkem sockets, pid files, stats) is ours too.
        let _ = std::fs::remove_dir_all(&self.state);
    }
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

/// A child process (`ip netns exec` execs it, so the pid is the child's),
/// killed on drop, with its output collected line by line.
pub(crate) struct Proc {
    child: Option<Child>,
    pub(crate) out: mpsc::Receiver<String>,
    pub(crate) err: mpsc::Receiver<String>,
}

impl Proc {
    /// Waits for a line on stderr containing `ready`; fails on exit, timeout or a signal.
    pub(crate) fn wait_ready(&mut self, ready: &str, limit: Duration) -> Result<()> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        loop {
            if signals::received().is_some() {
                return Err(signals::interrupted());
            }
            match self.err.recv_timeout(Duration::from_millis(50)) {
                Ok(l) if l.contains(ready) => return Ok(()),
                Ok(l) => seen.push(l),
                Err(mpsc::RecvTimeoutError::Timeout) if t0.elapsed() < limit => {}
                Err(_) => bail!("did not start within {} s: {}", limit.as_secs(), seen.join("; ")),
            }
        }
    }

    /// Waits for the exit (bounded, interruptible); returns status, stdout, stderr.
    pub(crate) fn finish(&mut self, limit: Duration) -> Result<(ExitStatus, String, String)> {
        let c = self.child.as_mut().ok_or_else(|| anyhow!("already finished"))?;
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = c.try_wait()? {
                break st;
            }
            if t0.elapsed() > limit {
                bail!("did not finish within {:.0} s", limit.as_secs_f64());
            }
            if signals::received().is_some() {
                return Err(signals::interrupted());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.child = None;
        // The reader threads end with the pipes; give them a moment to drain.
        let drain = |rx: &mpsc::Receiver<String>| {
            let mut v = Vec::new();
            while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
                v.push(l);
            }
            v.join("\n")
        };
        Ok((st, drain(&self.out), drain(&self.err)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
