//! The run-time control language and its Unix-socket server.
//!
//! A scenario cuts a path or changes its rate mid-transfer by writing one line to the socket
//! (`set a2b rate=3mbit`, `down both`, `stats`) and reading one line back, so a shell script
//! with `linkem ctl` (or socat) can drive it. Commands are parsed into [`Command`] first, which
//! keeps the hostile-input handling testable without sockets.

use crate::forward::{DirReport, Direction};
use crate::spec::{apply_spec, format_spec, SpecError};
use serde::Serialize;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which direction(s) a command applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    A2b,
    B2a,
    Both,
}

/// One control command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Apply a spec on top of the current configuration.
    Set(Target, String),
    Down(Target),
    Up(Target),
    /// Current counters as one line of JSON.
    Stats,
    /// Current configuration of both directions.
    Config,
    Help,
}

/// Why a control line was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    Empty,
    UnknownCommand(String),
    BadTarget(String),
    MissingArgument(&'static str),
    Spec(SpecError),
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::Empty => write!(f, "empty command"),
            CommandError::UnknownCommand(c) => write!(f, "unknown command `{c}` (try `help`)"),
            CommandError::BadTarget(t) => write!(f, "bad direction `{t}`: expected a2b, b2a or both"),
            CommandError::MissingArgument(a) => write!(f, "missing {a}"),
            CommandError::Spec(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CommandError {}

fn target(s: Option<&str>) -> Result<Target, CommandError> {
    match s {
        None => Err(CommandError::MissingArgument("direction (a2b, b2a or both)")),
        Some("a2b") => Ok(Target::A2b),
        Some("b2a") => Ok(Target::B2a),
        Some("both") => Ok(Target::Both),
        Some(t) => Err(CommandError::BadTarget(t.chars().take(32).collect())),
    }
}

/// Parses one control line.
pub fn parse_command(line: &str) -> Result<Command, CommandError> {
    let mut words = line.split_whitespace();
    let cmd = words.next().ok_or(CommandError::Empty)?;
    match cmd {
        "set" => {
            let t = target(words.next())?;
            let spec: Vec<&str> = words.collect();
            if spec.is_empty() {
                return Err(CommandError::MissingArgument("spec, e.g. rate=3mbit"));
            }
            let spec = spec.join(",");
            // Validate now so the caller gets the error, not a half-applied change.
            apply_spec(&crate::spec::linkem_default(), &spec).map_err(CommandError::Spec)?;
            Ok(Command::Set(t, spec))
        }
        "down" => Ok(Command::Down(target(words.next())?)),
        "up" => Ok(Command::Up(target(words.next())?)),
        "stats" => Ok(Command::Stats),
        "config" => Ok(Command::Config),
        "help" => Ok(Command::Help),
        c => Err(CommandError::UnknownCommand(c.chars().take(32).collect())),
    }
}

/// The whole emulator's state as reported by `stats`, SIGUSR1 and `--stats-json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub uptime_s: f64,
    pub a2b: DirReport,
    pub b2a: DirReport,
}

/// The two directions, as the control server sees them.
#[derive(Clone)]
pub struct Links {
    pub a2b: Arc<Direction>,
    pub b2a: Arc<Direction>,
    pub started: std::time::Instant,
}

impl Links {
    fn dirs(&self, t: Target) -> Vec<&Arc<Direction>> {
        match t {
            Target::A2b => vec![&self.a2b],
            Target::B2a => vec![&self.b2a],
            Target::Both => vec![&self.a2b, &self.b2a],
        }
    }

    pub fn report(&self) -> Report {
        Report { uptime_s: self.started.elapsed().as_secs_f64(), a2b: self.a2b.report(), b2a: self.b2a.report() }
    }

    /// Executes one command and returns the one-line reply.
    pub fn execute(&self, cmd: &Command) -> Result<String, CommandError> {
        let change = |t: Target, spec: &str| -> Result<String, CommandError> {
            let mut out = Vec::new();
            for d in self.dirs(t) {
                let c = apply_spec(&d.config(), spec).map_err(CommandError::Spec)?;
                d.set_config(c);
                out.push(format!("{}: {}", d.name, format_spec(&c)));
            }
            Ok(format!("ok {}", out.join("; ")))
        };
        match cmd {
            Command::Set(t, spec) => change(*t, spec),
            Command::Down(t) => change(*t, "down"),
            Command::Up(t) => change(*t, "up"),
            Command::Stats => Ok(serde_json::to_string(&self.report()).expect("report serializes")),
            Command::Config => {
                Ok(format!("a2b: {}; b2a: {}", format_spec(&self.a2b.config()), format_spec(&self.b2a.config())))
            }
            Command::Help => {
                Ok("commands: set a2b|b2a|both KEY=VAL[,...] | down DIR | up DIR | stats | config | help".into())
            }
        }
    }
}

fn serve_client(links: &Links, stream: UnixStream) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut out = stream.try_clone()?;
    // A bounded line: a client cannot make us buffer without limit.
    let reader = BufReader::new(io::Read::take(stream, 1 << 20));
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match parse_command(&line).and_then(|c| links.execute(&c)) {
            Ok(r) => r,
            Err(e) => format!("error {e}"),
        };
        writeln!(out, "{reply}")?;
    }
    Ok(())
}

/// A control socket; the path is removed when it is dropped.
pub struct ControlServer {
    path: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket) and serves clients one at a time until `stop`.
    pub fn start(path: &Path, links: Links, stop: Arc<AtomicBool>) -> io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        let thread = std::thread::Builder::new().name("linkem-control".into()).spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        if let Err(e) = serve_client(&links, s) {
                            eprintln!("linkem: control client: {e}");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => {
                        eprintln!("linkem: control accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
        Ok(ControlServer { path: path.to_path_buf(), thread: Some(thread) })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends `command` to the control socket at `path` and returns the reply line.
pub fn send_command(path: &Path, command: &str) -> io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(s, "{command}")?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::linkem_default;

    fn links() -> Links {
        Links {
            a2b: Direction::new("a2b", linkem_default()),
            b2a: Direction::new("b2a", linkem_default()),
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn commands_parse() {
        assert_eq!(parse_command("set a2b rate=3mbit"), Ok(Command::Set(Target::A2b, "rate=3mbit".into())));
        assert_eq!(
            parse_command("set both rate=3mbit delay=5ms"),
            Ok(Command::Set(Target::Both, "rate=3mbit,delay=5ms".into()))
        );
        assert_eq!(parse_command("  down b2a "), Ok(Command::Down(Target::B2a)));
        assert_eq!(parse_command("up both"), Ok(Command::Up(Target::Both)));
        assert_eq!(parse_command("stats"), Ok(Command::Stats));
    }

    #[test]
    fn bad_commands_are_refused_with_a_reason() {
        assert_eq!(parse_command(""), Err(CommandError::Empty));
        assert_eq!(parse_command("reboot"), Err(CommandError::UnknownCommand("reboot".into())));
        assert_eq!(parse_command("down sideways"), Err(CommandError::BadTarget("sideways".into())));
        assert!(matches!(parse_command("down"), Err(CommandError::MissingArgument(_))));
        assert!(matches!(parse_command("set a2b"), Err(CommandError::MissingArgument(_))));
        assert!(matches!(parse_command("set a2b rate=lots"), Err(CommandError::Spec(_))));
    }

    #[test]
    fn execute_changes_only_the_named_direction() {
        let l = links();
        l.execute(&parse_command("set both rate=10mbit,delay=20ms").unwrap()).unwrap();
        let r = l.execute(&parse_command("set a2b rate=3mbit").unwrap()).unwrap();
        assert!(r.starts_with("ok a2b: rate=3000000bit"), "{r}");
        assert_eq!(l.a2b.config().rate_bps, Some(3_000_000));
        assert_eq!(l.b2a.config().rate_bps, Some(10_000_000));
        assert_eq!(l.a2b.config().delay, mptun_time::Duration::from_millis(20));
        l.execute(&Command::Down(Target::B2a)).unwrap();
        assert!(l.b2a.config().down && !l.a2b.config().down);
        let stats: serde_json::Value = serde_json::from_str(&l.execute(&Command::Stats).unwrap()).unwrap();
        assert_eq!(stats["a2b"]["forwarded_packets"], 0);
        assert!(stats["b2a"]["config"].as_str().unwrap().ends_with("down"));
    }

    #[test]
    fn socket_round_trip() {
        let dir = std::env::temp_dir().join(format!("linkem-ctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let stop = Arc::new(AtomicBool::new(false));
        let l = links();
        let server = ControlServer::start(&path, l.clone(), stop.clone()).unwrap();
        assert!(send_command(&path, "set b2a loss=2%").unwrap().starts_with("ok b2a:"));
        assert!(send_command(&path, "frobnicate").unwrap().starts_with("error unknown command"));
        assert_eq!(l.b2a.config().loss, mptun_link::LossModel::Bernoulli(0.02));
        stop.store(true, Ordering::Relaxed);
        drop(server);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
