//! Shared by the cli_* tests (each includes it with `#[path]`); compiled alone it has no tests.
#![allow(dead_code)]
//! Running the `mptun` command from tests: finding the binary, running it
//! inside a lab namespace, and stopping what was started even when a test
//! fails.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `mptun` binary: `$MPTUN_BIN`, or the one cargo built next to this
/// test (`cargo test --workspace` builds it, because `tools/mptun` has an
/// integration test of its own).
pub fn mptun_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MPTUN_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps");
    let bin = dir.join("mptun");
    assert!(
        bin.exists(),
        "{} not built: run `cargo test --workspace` or `cargo build -p mptun-cli` first (or set MPTUN_BIN)",
        bin.display()
    );
    bin
}

/// This test process's own directory for the control sockets of the
/// mptun commands it starts (`MPTUN_CONTROL_DIR`, mode 0700): `mptun ss`,
/// `pm` and `nstat` without `--socket` then find only this test's
/// processes, never those of other tests or users on the machine.
pub fn control_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let d = std::env::temp_dir().join(format!("mptun-test-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::DirBuilder::new().mode(0o700).create(&d).expect("create the control socket directory");
        d
    })
}

/// Gives `c` this test's [`control_dir`] unless it names one already.
pub fn own_control_dir(c: &mut Command) {
    if !c.get_envs().any(|(k, _)| k == "MPTUN_CONTROL_DIR") {
        c.env("MPTUN_CONTROL_DIR", control_dir());
    }
}

/// The one JSON document `what` printed on stdout (panics with it otherwise).
pub fn json_document(what: &str, stdout: &[u8]) -> serde_json::Value {
    let s = String::from_utf8_lossy(stdout);
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{what}: not one JSON document ({e}): {s}"))
}

/// `mptun ARGS` run to completion (in namespace `ns` if given), bounded in time.
/// Its stdout and stderr are read while it runs: a report larger than a
/// pipe's buffer (64 KiB) would otherwise block it until the deadline.
pub fn run(ns: Option<&str>, args: &[&str], limit: Duration) -> Output {
    let mut c = command(ns, args);
    c.stdin(Stdio::null());
    run_command(c, limit)
}

/// As [`run`], for any command: run to completion within `limit` (killed
/// and a panic otherwise), its output read while it runs.
pub fn run_command(mut c: Command, limit: Duration) -> Output {
    own_control_dir(&mut c);
    let what = format!("{:?}", c.get_args().collect::<Vec<_>>());
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn mptun");
    let drain = |pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut pipe = pipe;
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let mut guard = Running { child: Some(child), what, lines: Default::default(), readers: Vec::new() };
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = guard.child.as_mut().and_then(|ch| ch.try_wait().expect("wait")) {
            break status;
        }
        assert!(Instant::now() < deadline, "{} did not finish within {limit:?}", guard.what);
        std::thread::sleep(Duration::from_millis(20));
    };
    guard.child.take();
    Output { status, stdout: out.join().expect("stdout reader"), stderr: err.join().expect("stderr reader") }
}

fn command(ns: Option<&str>, args: &[&str]) -> Command {
    let bin = mptun_bin();
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    c.args(args);
    own_control_dir(&mut c);
    c
}

/// How [`Running::spawn`] marks the stderr lines it collects.
const STDERR_TAG: &str = "\u{1}stderr: ";

/// A background `mptun` (a server); killed on drop if still running.
pub struct Running {
    child: Option<Child>,
    what: String,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The threads reading its pipes: they end at EOF, once it exited.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Starts `mptun ARGS` in `ns` and waits until a line of its stdout or
    /// stderr contains `ready` (e.g. "Server listening").
    pub fn start(ns: Option<&str>, args: &[&str], ready: &str, limit: Duration) -> Running {
        Running::start_command(command(ns, args), &args.join(" "), ready, limit)
    }

    /// As [`Running::start`], for any command (`what` names it in messages).
    pub fn start_command(mut c: Command, what: &str, ready: &str, limit: Duration) -> Running {
        own_control_dir(&mut c);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let (tx, rx) = mpsc::channel::<String>();
        let mut readers = Vec::new();
        for pipe in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")) as Box<dyn std::io::Read + Send>,
        ] {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }));
        }
        drop(tx);
        let mut r = Running { child: Some(child), what: what.to_owned(), lines: Default::default(), readers };
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) if line.contains(ready) => break,
                Ok(line) => seen.push(line),
                Err(_) => panic!("{} never printed {ready:?}; output: {seen:?}", r.what),
            }
        }
        // Keep draining the pipes so the server never blocks on a full one.
        *r.lines.lock().expect("lines") = seen;
        let l2 = r.lines.clone();
        // Ends once both pipe readers have (their senders gone).
        r.readers.push(std::thread::spawn(move || {
            while let Ok(line) = rx.recv() {
                l2.lock().map(|mut v| v.push(line)).ok();
            }
        }));
        r
    }

    /// Starts `mptun ARGS` in `ns` without waiting for any output; its
    /// stdout and stderr are collected from the start.
    pub fn spawn(ns: Option<&str>, args: &[&str]) -> Running {
        let mut c = command(ns, args);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn mptun");
        let mut r = Running { child: None, what: args.join(" "), lines: Default::default(), readers: Vec::new() };
        for (pipe, tag) in [
            (Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>, ""),
            (Box::new(child.stderr.take().expect("stderr")) as Box<dyn std::io::Read + Send>, STDERR_TAG),
        ] {
            let l2 = r.lines.clone();
            r.readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    l2.lock().map(|mut v| v.push(format!("{tag}{line}"))).ok();
                }
            }));
        }
        r.child = Some(child);
        r
    }

    /// As [`Running::spawn`], returning once a line of its stdout or
    /// stderr contains `ready` (within `limit`), so [`Running::finish`]
    /// later separates what it printed on each.
    pub fn spawn_ready(ns: Option<&str>, args: &[&str], ready: &str, limit: Duration) -> Running {
        let r = Running::spawn(ns, args);
        let deadline = Instant::now() + limit;
        while !r.output().contains(ready) {
            assert!(Instant::now() < deadline, "mptun {} never printed {ready:?}; output: {}", r.what, r.output());
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    /// The process's id (`ip netns exec` execs what it runs, so this is
    /// the program's own: its `/proc/PID/root` shows its mount namespace).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends `sig` (libc::SIGINT, ...) to the process (`ip netns exec`
    /// execs mptun, so the pid is mptun's).
    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id() as i32;
        // SAFETY: kill with a pid we spawned and still hold (not yet reaped).
        unsafe { libc::kill(pid, sig) };
    }

    /// Waits for the exit within `limit` of a process started with
    /// [`Running::spawn`]; its status, stdout and stderr.
    pub fn finish(mut self, limit: Duration) -> (std::process::ExitStatus, String, String) {
        let lines = self.lines.clone();
        let readers = std::mem::take(&mut self.readers);
        let st = self.wait(limit);
        // The reader threads have the last lines once they reach EOF; a child process of its
        // own that kept the pipes open would hold them, hence the bound.
        let deadline = Instant::now() + Duration::from_secs(10);
        while readers.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let all = lines.lock().map(|v| v.clone()).unwrap_or_default();
        let (err, out): (Vec<String>, Vec<String>) = all.into_iter().partition(|l| l.starts_with(STDERR_TAG));
        let err: Vec<&str> = err.iter().map(|l| &l[STDERR_TAG.len()..]).collect();
        (st, out.join("\n"), err.join("\n"))
    }

    /// Everything it printed so far (stdout and stderr interleaved by line).
    pub fn output(&self) -> String {
        self.lines.lock().map(|v| v.join("\n")).unwrap_or_default()
    }

    /// Waits for the process to end within `limit`; its exit status.
    pub fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        let ch = self.child.as_mut().expect("child");
        loop {
            if let Some(st) = ch.try_wait().expect("wait") {
                self.child = None;
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "mptun {} did not exit within {limit:?}; output: {}",
                self.what,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // `ip netns exec` execs the program, so this pid is mptun itself.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether `linkem` was built next to `mptun` (the `mptun lab` tests need
/// it); prints why not, and fails instead under MPTUN_REQUIRE_NETNS=1.
pub fn linkem_built() -> bool {
    let linkem = mptun_bin().with_file_name("linkem");
    if linkem.exists() {
        return true;
    }
    assert!(
        std::env::var("MPTUN_REQUIRE_NETNS").as_deref() != Ok("1"),
        "{} not built (cargo build -p linkem)",
        linkem.display()
    );
    println!("skipped: {} not built (cargo build -p linkem)", linkem.display());
    false
}

/// The network namespaces whose names start with `prefix-`: what a test
/// checks is gone once its lab or script has ended.
pub fn namespaces_named(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(String::from)
        .collect()
}
