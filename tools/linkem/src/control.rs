//! The run-time control language and its Unix-socket server.
//!
//! A scenario cuts a path or changes its rate mid-transfer by writing one line to the socket
//! (`set a2b rate=3mbit`, `down both`, `stats`) and reading one line back, so a shell script
//! with `linkem ctl` (or socat) can drive it. Commands are parsed into [`Command`] first, which
//! keeps the hostile-input handling testable without sockets.

use crate::forward::{DirReport, Direction};
use crate::spec::{apply_spec, format_spec, SpecError};
use mptun_io::ctl::Session;
use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

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

pub use mptun_io::ctl::{send_command, ControlLimits};

/// Answers one control client: a reply line per command line.
fn serve_client(links: &Links, mut session: Session) -> io::Result<()> {
    while let Some(text) = session.next_line()? {
        let reply = match parse_command(&text).and_then(|c| links.execute(&c)) {
            Ok(r) => r,
            Err(e) => format!("error {e}"),
        };
        // The write timeout bounds a client that does not read.
        writeln!(session.writer(), "{reply}")?;
    }
    Ok(())
}

/// linkem's control socket ([`mptun_io::ctl::ControlServer`]); the path is
/// removed when it is dropped (if it is still the socket this server bound).
pub struct ControlServer(mptun_io::ctl::ControlServer);

impl ControlServer {
    /// Binds `path` (replacing a stale socket, never anything else) and
    /// serves clients until `stop`, each in a thread of its own within
    /// [`ControlLimits::default`].
    pub fn start(path: &Path, links: Links, stop: Arc<AtomicBool>) -> io::Result<Self> {
        Self::start_with(path, links, stop, ControlLimits::default())
    }

    /// [`ControlServer::start`] with other bounds.
    pub fn start_with(path: &Path, links: Links, stop: Arc<AtomicBool>, lim: ControlLimits) -> io::Result<Self> {
        let handler = Arc::new(move |s: Session| serve_client(&links, s));
        mptun_io::ctl::ControlServer::start(path, "linkem", lim, stop, handler).map(ControlServer)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::linkem_default;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

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

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("linkem-ctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A server within `lim` on a socket in a fresh directory: (dir, socket, server).
    fn serve(tag: &str, lim: ControlLimits) -> (PathBuf, PathBuf, ControlServer) {
        let dir = temp_dir(tag);
        let path = dir.join("ctl.sock");
        let server = ControlServer::start_with(&path, links(), Arc::new(AtomicBool::new(false)), lim).unwrap();
        (dir, path, server)
    }

    /// A client that writes commands and never reads the replies fills its
    /// socket buffer; the server's write to it must time out, and the other
    /// clients must be answered meanwhile. Dropping the server must not wait
    /// for that client either.
    #[test]
    fn hostile_tool_linkem_ctl_client_that_never_reads_locks_out_nobody() {
        let lim = ControlLimits { write_timeout: Duration::from_millis(300), ..ControlLimits::default() };
        let (dir, path, server) = serve("noread", lim);
        let mut hog = UnixStream::connect(&path).unwrap();
        hog.set_nonblocking(true).unwrap();
        // `stats` replies are a few hundred bytes each: many megabytes of
        // replies nobody reads.
        let mut written = 0;
        let t0 = std::time::Instant::now();
        while written < 64 << 20 && t0.elapsed() < Duration::from_secs(3) {
            match hog.write(&b"stats\n".repeat(1024)) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break,
            }
        }
        let t = std::time::Instant::now();
        let reply = send_command(&path, "config").unwrap();
        assert!(reply.starts_with("a2b: "), "{reply}");
        assert!(t.elapsed() < Duration::from_secs(2), "another client waited {:?}", t.elapsed());
        let t = std::time::Instant::now();
        drop(server);
        assert!(t.elapsed() < Duration::from_secs(2), "drop waited {:?} for the hog", t.elapsed());
        drop(hog);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A line trickled one byte at a time, slower than the line timeout in
    /// all, is cut off at the timeout: the timeout is per line, not per read.
    #[test]
    fn hostile_tool_linkem_ctl_trickled_line_times_out() {
        let lim = ControlLimits { line_timeout: Duration::from_millis(400), ..ControlLimits::default() };
        let (dir, path, server) = serve("trickle", lim);
        let mut s = UnixStream::connect(&path).unwrap();
        let t = std::time::Instant::now();
        // 100 ms a byte: each read comes well inside 400 ms, the line never does.
        for b in b"set a2b rate=3mbit".iter().take(10) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reply = String::new();
        let _ = BufReader::new(&s).read_line(&mut reply);
        assert!(reply.starts_with("error no whole line"), "{reply:?}");
        assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A line over the bound is refused and the client closed.
    #[test]
    fn hostile_tool_linkem_ctl_long_line_refused() {
        let (dir, path, server) = serve("long", ControlLimits::default());
        let reply = send_command(&path, &"x".repeat(100_000)).unwrap();
        assert!(reply.starts_with("error line longer than 4096 bytes"), "{reply}");
        assert!(send_command(&path, "help").unwrap().starts_with("commands:"));
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The socket is its owner's only (mode 0600), whatever the umask, and
    /// the server removes only its own socket.
    #[test]
    fn hostile_tool_linkem_ctl_socket_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, path, server) = serve("mode", ControlLimits::default());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "socket mode {mode:o}");
        // Someone replaced the socket with a file of theirs: not ours to delete.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"theirs").unwrap();
        drop(server);
        assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--control PATH` naming a file that is not a socket (or a live
    /// server's socket) is refused, and the file is left as it was; a
    /// stale socket is replaced.
    #[test]
    fn hostile_tool_linkem_ctl_refuses_to_replace_what_is_not_a_stale_socket() {
        let dir = temp_dir("replace");
        let path = dir.join("ctl.sock");
        let stop = Arc::new(AtomicBool::new(false));
        std::fs::write(&path, b"precious").unwrap();
        let err = ControlServer::start(&path, links(), stop.clone()).err().expect("refused");
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
        std::fs::remove_file(&path).unwrap();
        // A live server's socket is not taken over.
        let live = ControlServer::start(&path, links(), stop.clone()).unwrap();
        let err = ControlServer::start(&path, links(), Arc::new(AtomicBool::new(false))).err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
        drop(live);
        // A stale one (nobody listening) is.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let again = ControlServer::start(&path, links(), Arc::new(AtomicBool::new(false))).unwrap();
        assert!(send_command(&path, "help").unwrap().starts_with("commands:"));
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
