//! `mptun pm`, `mptun ss` and `mptun nstat`: the clients of a running
//! command's control socket, printing what `ip mptcp`, `ss -M` and `nstat`
//! print for the kernel.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;

use super::socket_dir;
use crate::error::environment;

/// Which running process to talk to.
#[derive(Args, Clone, Debug)]
pub(crate) struct Target {
    /// The control socket of the running `mptun serve`, `send` or `proxy`
    /// (default: the only one in $MPTUN_CONTROL_DIR, else /run/mptun).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the server's answer as JSON lines instead of text.
    #[arg(short, long)]
    json: bool,
}

/// Words of a request after its command, passed on as typed.
#[derive(Args, Clone, Debug)]
pub(crate) struct Words {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    words: Vec<String>,
}

#[derive(Args, Debug)]
pub(crate) struct PmArgs {
    #[command(flatten)]
    target: Target,
    #[command(subcommand)]
    cmd: PmCommand,
}

#[derive(Subcommand, Debug)]
enum PmCommand {
    /// The path manager's endpoints, as `ip mptcp endpoint`.
    #[command(subcommand)]
    Endpoint(EndpointOp),
    /// The path manager's limits, as `ip mptcp limits`.
    #[command(subcommand)]
    Limits(LimitsOp),
    /// Print path-manager events as they happen, like `ip mptcp monitor`
    /// (created, established, closed, announced, removed, sub-established,
    /// sub-closed, sub-priority, listener-created, listener-closed).
    Monitor,
    /// Userspace PM: `token T id N ADDR [port P]`: ADD_ADDR of a local address on one connection.
    Announce(Words),
    /// Userspace PM: `token T id N`: RM_ADDR; our subflows from that address close.
    Remove(Words),
    /// Userspace PM: `token T [lid N] saddr A daddr B dport P [backup]`: open a subflow.
    SubflowCreate(Words),
    /// Userspace PM: `token T saddr A [sport P] daddr B [dport P]`: close a subflow.
    SubflowDestroy(Words),
    /// Userspace PM: `token T saddr A [daddr B [dport P]] backup|nobackup`: MP_PRIO.
    SetFlags(Words),
}

#[derive(Subcommand, Debug)]
enum EndpointOp {
    /// `ADDR [port P] [id N] [signal] [subflow] [backup] [fullmesh] [laminar]`: a new endpoint (one
    /// of the stack's path addresses; with a port, a signal one joined at that port); live
    /// connections use it too.
    Add(Words),
    /// `id N [ADDR]`: RM_ADDR where it was announced; subflows from it close.
    Delete(Words),
    /// `id N backup|nobackup [fullmesh|nofullmesh]`: a change of backup sends MP_PRIO.
    Change(Words),
    /// `[id N]`: list the endpoints.
    Show(Words),
    /// Delete every endpoint.
    Flush,
}

#[derive(Subcommand, Debug)]
enum LimitsOp {
    /// `[subflows N] [add_addr_accepted N]` (0-8 each): for new and live connections.
    Set(Words),
    /// Print the limits.
    Show,
}

#[derive(Args, Debug)]
pub(crate) struct SsArgs {
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub(crate) struct NstatArgs {
    #[command(flatten)]
    target: Target,
    /// Absolute values, not the change since the last call.
    #[arg(short, long)]
    absolute: bool,
    /// Counters that are zero too.
    #[arg(short, long)]
    zeros: bool,
    /// Forget the history: the next call counts from now.
    #[arg(short, long)]
    reset: bool,
    /// Update the history without printing.
    #[arg(short = 'n', long)]
    nooutput: bool,
    /// Only counters matching these names (`*` matches any run, as nstat's patterns).
    patterns: Vec<String>,
}

/// The pid in the name of a control socket of ours: `PID.sock` in the
/// default directory.
fn own_pid(p: &Path) -> Option<u32> {
    if p.parent() != Some(socket_dir().as_path()) {
        return None;
    }
    p.extension().filter(|x| *x == "sock").and_then(|_| p.file_stem()?.to_str()?.parse::<u32>().ok())
}

/// Removes `p` when it is a control socket of ours that nothing listens on
/// any more (its process is gone: killed ones leave their socket behind);
/// says whether it did.
fn remove_if_stale(p: &Path) -> bool {
    let dead = own_pid(p).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
    dead && matches!(UnixStream::connect(p), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
        && std::fs::remove_file(p).is_ok()
}

/// The control socket to talk to.
fn socket(given: &Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.clone());
    }
    let mut live = Vec::new();
    let dir = socket_dir();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let p = e.path();
            if remove_if_stale(&p) {
                continue;
            }
            // A live process's socket that answers (its pid may be another
            // process's by now). (One that refuses this user is listed:
            // connecting says why.)
            let answers = |p: &Path| match UnixStream::connect(p) {
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
            };
            if let Some(pid) = own_pid(&p).filter(|pid| Path::new(&format!("/proc/{pid}")).exists() && answers(&p)) {
                live.push((pid, p));
            }
        }
    }
    match live.len() {
        0 => Err(environment(anyhow!(
            "no running mptun has a control socket in {}: start `mptun serve`/`send`/`proxy` (mptun's stack), or give --socket PATH",
            dir.display()
        ))),
        1 => Ok(live.remove(0).1),
        _ => {
            let list: Vec<String> = live
                .iter()
                .map(|(pid, p)| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                    format!("  {} ({})", p.display(), cmd.trim())
                })
                .collect();
            crate::error::bail_usage!("several running mptun processes; choose one with --socket:\n{}", list.join("\n"))
        }
    }
}

/// Connects to a control socket; what stands in the way is the
/// environment's (exit 3): no such socket, nobody behind it, not ours.
fn connect(path: &Path) -> Result<UnixStream> {
    use std::io::ErrorKind;
    UnixStream::connect(path).map_err(|e| {
        let p = path.display();
        environment(match e.kind() {
            ErrorKind::PermissionDenied => {
                anyhow!("{p}: permission denied (the control socket is its owner's only: run as root)")
            }
            ErrorKind::NotFound => {
                anyhow!("{p}: no such control socket (is the mptun serve/send/proxy that made it still running?)")
            }
            ErrorKind::ConnectionRefused => {
                let removed = if remove_if_stale(path) { "; removed it" } else { "" };
                anyhow!("{p}: no mptun process is behind this control socket (the one that made it has ended){removed}")
            }
            _ => anyhow!("{p}: {e}"),
        })
    })
}

/// Sends `line`, returns the JSON lines of the answer, or the server's error.
fn request(target: &Target, line: &str) -> Result<Vec<Value>> {
    let path = socket(&target.socket)?;
    let mut s = connect(&path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(s, "{line}").with_context(|| format!("{}", path.display()))?;
    let mut out = Vec::new();
    for l in BufReader::new(s).lines() {
        let l = l.with_context(|| format!("reading the answer of {}", path.display()))?;
        if l == "ok" {
            return Ok(out);
        }
        if let Some(e) = l.strip_prefix("error ") {
            bail!("{e}");
        }
        out.push(serde_json::from_str(&l).with_context(|| format!("not an answer: {l:?}"))?);
    }
    bail!("{} closed before answering", path.display())
}

fn print_json(values: &[Value]) {
    for v in values {
        println!("{v}");
    }
}

fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub(crate) fn run_pm(a: PmArgs) -> Result<()> {
    let join = |head: &str, w: &Words| format!("{head} {}", w.words.join(" "));
    let line = match &a.cmd {
        PmCommand::Endpoint(EndpointOp::Add(w)) => join("endpoint add", w),
        PmCommand::Endpoint(EndpointOp::Delete(w)) => join("endpoint delete", w),
        PmCommand::Endpoint(EndpointOp::Change(w)) => join("endpoint change", w),
        PmCommand::Endpoint(EndpointOp::Show(w)) => join("endpoint show", w),
        PmCommand::Endpoint(EndpointOp::Flush) => "endpoint flush".into(),
        PmCommand::Limits(LimitsOp::Set(w)) => join("limits set", w),
        PmCommand::Limits(LimitsOp::Show) => "limits show".into(),
        PmCommand::Monitor => return monitor(&a.target),
        PmCommand::Announce(w) => join("announce", w),
        PmCommand::Remove(w) => join("remove", w),
        PmCommand::SubflowCreate(w) => join("subflow-create", w),
        PmCommand::SubflowDestroy(w) => join("subflow-destroy", w),
        PmCommand::SetFlags(w) => join("set-flags", w),
    };
    let out = request(&a.target, &line)?;
    if a.target.json {
        print_json(&out);
        return Ok(());
    }
    match &a.cmd {
        PmCommand::Endpoint(EndpointOp::Show(_)) => {
            for e in &out {
                let port = e["port"].as_u64().map_or(String::new(), |p| format!(" port {p}"));
                println!("{}{port} id {} {}", text(e, "addr"), text(e, "id"), text(e, "flags"));
            }
        }
        PmCommand::Endpoint(EndpointOp::Add(_)) => {
            if let Some(e) = out.first() {
                println!("id {}", text(e, "id"));
            }
        }
        PmCommand::Limits(_) => {
            if let Some(l) = out.first() {
                println!("add_addr_accepted {} subflows {}", text(l, "add_addr_accepted"), text(l, "subflows"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// `mptun pm monitor`: one line per event until interrupted.
fn monitor(target: &Target) -> Result<()> {
    let path = socket(&target.socket)?;
    let mut s = connect(&path)?;
    writeln!(s, "monitor")?;
    let mut r = BufReader::new(s);
    let mut first = String::new();
    r.read_line(&mut first)?;
    match first.trim_end() {
        "ok" => {}
        l => bail!("{}", l.strip_prefix("error ").unwrap_or(l)),
    }
    let mut out = std::io::stdout().lock();
    for l in r.lines() {
        let l = l?;
        let v: Value = serde_json::from_str(&l).with_context(|| format!("not an event: {l:?}"))?;
        let shown = if target.json {
            writeln!(out, "{v}")
        } else if let Some(n) = v.get("lost") {
            writeln!(out, "[{:>16}] {n} events lost (the monitor fell behind)", "LOST")
        } else {
            writeln!(out, "{}", text(&v, "line"))
        };
        if shown.and_then(|()| out.flush()).is_err() {
            // stdout closed (`| head`): done.
            return Ok(());
        }
    }
    Ok(())
}

pub(crate) fn run_ss(a: SsArgs) -> Result<()> {
    let out = request(&a.target, "ss")?;
    if a.target.json {
        print_json(&out);
        return Ok(());
    }
    println!("{:<10} {:<24} {:<24}", "State", "Local Address:Port", "Peer Address:Port");
    for c in &out {
        println!("{:<10} {:<24} {:<24}", text(c, "state"), text(c, "local"), text(c, "remote"));
        let subs = c["subflows"].as_array().cloned().unwrap_or_default();
        println!(
            "\t {} token:{} remote_token:{} fully_established:{} subflows:{} sched:{} bytes_acked:{} bytes_received:{}",
            text(c, "mode"),
            text(c, "token"),
            text(c, "remote_token"),
            c["fully_established"] == true,
            subs.len(),
            text(c, "scheduler"),
            text(c, "bytes_acked"),
            text(c, "bytes_received"),
        );
        for s in &subs {
            let srtt = s["srtt_us"].as_f64().unwrap_or(0.0) / 1000.0;
            let rttvar = s["rttvar_us"].as_f64().unwrap_or(0.0) / 1000.0;
            // ss -ti's `bbr:(bw:…bps,mrtt:…,pacing_gain:…,cwnd_gain:…)`, mptun's mode added.
            let bbr = match &s["bbr"] {
                Value::Object(b) => format!(
                    " bbr:(bw:{}bps,mrtt:{:.3},pacing_gain:{},cwnd_gain:{},mode:{})",
                    b["bw"].as_u64().unwrap_or(0) * 8,
                    b["min_rtt_us"].as_f64().unwrap_or(0.0) / 1000.0,
                    b["pacing_gain"],
                    b["cwnd_gain"],
                    b["mode"].as_str().unwrap_or("?"),
                ),
                _ => String::new(),
            };
            let app_limited = if s["delivery_rate_app_limited"] == true { " app_limited" } else { "" };
            println!(
                "\t subflow {} -> {} {} loc-id:{} rem-id:{} backup:{} {}{bbr} cwnd:{} ssthresh:{} mss:{} rtt:{srtt:.3}/{rttvar:.3} pacing_rate:{}bps delivery_rate:{}bps{app_limited} delivered:{} bytes_sent:{} bytes_acked:{} bytes_received:{} bytes_retrans:{}",
                text(s, "local"),
                text(s, "remote"),
                text(s, "state"),
                text(s, "loc_id"),
                text(s, "rem_id"),
                (s["backup"] == true) as u8,
                text(s, "cc"),
                text(s, "cwnd"),
                text(s, "ssthresh"),
                text(s, "mss"),
                s["pacing_rate"].as_u64().unwrap_or(0) * 8,
                s["delivery_rate"].as_u64().unwrap_or(0) * 8,
                text(s, "delivered"),
                text(s, "bytes_sent"),
                text(s, "bytes_acked"),
                text(s, "bytes_received"),
                text(s, "bytes_retrans"),
            );
        }
    }
    Ok(())
}

/// nstat's `*` patterns.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => name.strip_prefix(head).is_some_and(|tail| {
            tail.char_indices().map(|(i, _)| i).chain([tail.len()]).any(|i| matches(rest, &tail[i..]))
        }),
    }
}

/// Where the last values are kept between calls: per user and socket, as
/// nstat keeps `/tmp/.nstat.uUID` (in $XDG_RUNTIME_DIR when there is one).
fn history_file(socket: &Path) -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let tag: String =
        socket.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let dir = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    dir.join(format!(".mptun-nstat.u{uid}.{tag}"))
}

/// The history as it was: nothing when it is missing, unreadable, or not a
/// plain file of ours (a link someone else put in a shared directory).
fn read_history(path: &Path) -> serde_json::Map<String, Value> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() && m.uid() == me => {
            std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
        }
        _ => Default::default(),
    }
}

/// Writes the history without following a link at its path: into a new
/// file beside it (mode 0600, created exclusively), then renamed over it.
fn write_history(path: &Path, values: &serde_json::Map<String, Value>) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("history {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec(values)?)?;
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("history {}", path.display()))
}

pub(crate) fn run_nstat(a: NstatArgs) -> Result<()> {
    let path = socket(&a.target.socket)?;
    let target = Target { socket: Some(path.clone()), json: a.target.json };
    let now = request(&target, "nstat")?;
    let now = now.first().and_then(Value::as_object).cloned().ok_or_else(|| anyhow!("no counters in the answer"))?;
    let hist = history_file(&path);
    let before = if a.reset || a.absolute { Default::default() } else { read_history(&hist) };
    write_history(&hist, &now)?;
    if a.nooutput {
        return Ok(());
    }
    let mut rows = Vec::new();
    for (name, v) in &now {
        let v = v.as_u64().unwrap_or(0);
        let d = v.saturating_sub(before.get(name).and_then(Value::as_u64).unwrap_or(0));
        let shown = if a.absolute { v } else { d };
        if (shown != 0 || a.zeros) && (a.patterns.is_empty() || a.patterns.iter().any(|p| matches(p, name))) {
            rows.push((name.clone(), shown));
        }
    }
    if a.target.json {
        let m: serde_json::Map<String, Value> = rows.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        println!("{}", Value::Object(m));
    } else {
        println!("#mptun {}", path.display());
        for (k, v) in rows {
            println!("{k:<32}{v:<16}0.0");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn nstat_patterns() {
        assert!(matches("MPTcpExt*", "MPTcpExtRmAddr"));
        assert!(matches("*Rm*", "MPTcpExtRmAddrTx"));
        assert!(matches("TcpInSegs", "TcpInSegs"));
        assert!(!matches("Tcp", "TcpInSegs"));
        assert!(!matches("*Prio", "MPTcpExtMPPrioRx"));
    }
}
