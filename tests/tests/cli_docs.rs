//! The commands of `docs/cli.md` and of README.md run as written, without
//! root, against the `mptun` this workspace built.
//!
//! How the test reads the doc (the convention the doc follows):
//! - A fenced block whose info string has the word `root` (```` ```console root ````,
//!   ```` ```sh root ````) needs root and namespaces: it is not run here (the
//!   netns tests cover those commands). No other block may mention
//!   `ip netns` or `sudo`, so a root-only block cannot go unmarked.
//! - In every other fenced block, a line starting with `$ ` is a command,
//!   run with `sh -c` and the built `mptun` first on the PATH; the lines
//!   after it, up to the next command or the fence, are its transcript.
//! - A transcript line `(exit N)` is the exit status the command must have
//!   (0 when there is none); each transcript line starting with `mptun:` or
//!   `error:` (an error message) must appear in what the command printed.
//! - A command whose comment says `# as an ordinary user` runs as uid/gid
//!   65534 when the test runs as root, so it means the same everywhere, with
//!   a copy of `mptun` in the scratch directory first on its PATH.

#[path = "cli_support.rs"]
mod support;

use std::os::unix::process::CommandExt;
use std::process::Command;

/// One `$ ` command of the doc, with what its transcript promises.
struct DocCommand {
    line: usize,
    command: String,
    exit: i32,
    messages: Vec<String>,
}

/// The commands of the blocks not marked `root`; panics on an unmarked
/// block that mentions namespaces or sudo.
fn commands(doc: &str) -> Vec<DocCommand> {
    let mut out: Vec<DocCommand> = Vec::new();
    let mut fence: Option<(usize, bool)> = None;
    for (i, l) in doc.lines().enumerate() {
        let n = i + 1;
        if let Some(info) = l.strip_prefix("```") {
            fence = match fence {
                None => Some((n, info.split_whitespace().any(|w| w == "root"))),
                Some(_) => None,
            };
            continue;
        }
        let Some((start, root)) = fence else { continue };
        if root {
            continue;
        }
        assert!(
            !l.contains("ip netns") && !l.contains("sudo "),
            "docs/cli.md:{n}: the block from line {start} needs root: mark its fence `root`"
        );
        if let Some(c) = l.strip_prefix("$ ") {
            out.push(DocCommand { line: n, command: c.to_owned(), exit: 0, messages: Vec::new() });
        } else if let Some(last) = out.last_mut().filter(|c| c.line > start) {
            if let Some(code) = l.strip_prefix("(exit ").and_then(|r| r.strip_suffix(')')) {
                last.exit = code.parse().unwrap_or_else(|_| panic!("docs/cli.md:{n}: bad exit status {l}"));
            } else if l.starts_with("mptun: ") || l.starts_with("error: ") {
                last.messages.push(l.to_owned());
            }
        }
    }
    out
}

#[test]
fn cli_doc_commands_run_as_written() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md")).expect("docs/cli.md");
    let cmds = commands(&doc);
    assert!(cmds.len() >= 5, "the doc's runnable commands were not found: {}", cmds.len());
    let bin = support::mptun_bin();
    let bin_dir = bin.parent().expect("bin dir").to_path_buf();
    let system_path = std::env::var("PATH").unwrap_or_default();
    let path = format!("{}:{system_path}", bin_dir.display());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let scratch = Scratch::new();
    // The ordinary user's `mptun` sits in the scratch directory: the one
    // cargo built lies under the clone, which may be a directory only root
    // can enter (a `mktemp -d`, or /root itself).
    let user_path =
        if root { format!("{}:{system_path}", scratch.reachable_copy(&bin).display()) } else { path.clone() };
    for c in &cmds {
        let as_user = c.command.contains("# as an ordinary user");
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(&c.command).env("PATH", if as_user { &user_path } else { &path }).current_dir(&scratch.0);
        support::own_control_dir(&mut sh);
        if root && as_user {
            sh.uid(65534).gid(65534);
        }
        let out = sh.output().unwrap_or_else(|e| panic!("docs/cli.md:{}: cannot run {}: {e}", c.line, c.command));
        let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // The shell's own refusal (`sh: 1: mptun: Permission denied`: say,
        // the scratch directory is on a file system mounted noexec), not one
        // of mptun's messages, which start their line with `mptun:`.
        if as_user && printed.contains("Permission denied") && !printed.lines().any(|l| l.starts_with("mptun:")) {
            println!("docs/cli.md:{}: skipped: user nobody cannot execute mptun: {}", c.line, printed.trim());
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(c.exit),
            "docs/cli.md:{}: `{}` exited {} (the doc says {}); it printed:\n{printed}",
            c.line,
            c.command,
            out.status,
            c.exit
        );
        for m in &c.messages {
            assert!(
                printed.contains(m.as_str()),
                "docs/cli.md:{}: `{}` did not print\n{m}\nbut:\n{printed}",
                c.line,
                c.command
            );
        }
        println!("docs/cli.md:{}: ok: {}", c.line, c.command);
    }
}

/// One command line of a README.md `sh` block and whether it can run here.
#[derive(Debug)]
struct ReadmeLine {
    line: usize,
    command: String,
    /// Why it is not run by this test, if it is not.
    skip: Option<&'static str>,
}

/// The command lines of README.md's `sh` blocks: `\`-continued lines joined,
/// comment-only lines dropped. The README's convention: a command that needs
/// root says so (`ip netns`, `sudo`, or `(root)` in its comment).
fn readme_lines(doc: &str) -> Vec<ReadmeLine> {
    let mut out: Vec<ReadmeLine> = Vec::new();
    let (mut in_sh, mut pending) = (false, None::<(usize, String)>);
    for (i, l) in doc.lines().enumerate() {
        let n = i + 1;
        if let Some(info) = l.strip_prefix("```") {
            in_sh = !in_sh && info.trim() == "sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let (start, text) = match pending.take() {
            Some((start, before)) => (start, format!("{before} {}", l.trim())),
            None => (n, l.trim().to_owned()),
        };
        if let Some(head) = text.strip_suffix('\\') {
            pending = Some((start, head.trim_end().to_owned()));
            continue;
        }
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let comment = text.split_once(" # ").map_or("", |(_, c)| c);
        let skip = if text.contains("ip netns") || text.contains("sudo ") || comment.contains("(root)") {
            Some("needs root: namespaces, a running serve, or a system directory")
        } else if text.starts_with("cargo ") {
            Some("a cargo command: .ci/run builds and tests the workspace itself")
        } else {
            None
        };
        out.push(ReadmeLine { line: start, command: text, skip });
    }
    out
}

#[test]
fn readme_commands_run_as_written() {
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let doc = std::fs::read_to_string(repo.join("README.md")).expect("README.md");
    let lines = readme_lines(&doc);
    let runnable = lines.iter().filter(|l| l.skip.is_none()).count();
    assert!(runnable >= 10, "README.md's runnable commands were not found: {lines:?}");
    let bin = support::mptun_bin();
    let bin_dir = bin.parent().expect("bin dir").to_path_buf();
    if lines.iter().any(|l| l.skip.is_none() && l.command.starts_with("linkem ")) {
        assert!(
            bin_dir.join("linkem").exists(),
            "{} not built: run `cargo test --workspace`",
            bin_dir.join("linkem").display()
        );
    }
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    // Relative paths of the README (docs/scenarios/...) are the clone's; what
    // the commands write (out/, sweep/, big.iso, ~/.local/...) lands in the
    // scratch directory, which is also their HOME.
    let scratch = Scratch::new();
    std::os::unix::fs::symlink(repo.join("docs").canonicalize().expect("docs"), scratch.0.join("docs"))
        .expect("link docs");
    for l in &lines {
        if let Some(why) = l.skip {
            println!("README.md:{}: not run here ({why}): {}", l.line, l.command);
            continue;
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(&l.command)
            .env("PATH", &path)
            .env("MPTUN_CONTROL_DIR", support::control_dir())
            .env("HOME", &scratch.0)
            .current_dir(&scratch.0)
            .output()
            .unwrap_or_else(|e| panic!("README.md:{}: cannot run {}: {e}", l.line, l.command));
        assert!(
            out.status.success(),
            "README.md:{}: `{}` exited {}; stderr:\n{}",
            l.line,
            l.command,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        println!("README.md:{}: ok: {}", l.line, l.command);
    }
}

/// The namespaces of docs/cli.md's routing plan under names of this test's
/// own, removed (with what runs in them) at the end, pass or fail.
struct Plan {
    a: String,
    b: String,
}

impl Plan {
    /// Runs the plan's script, the `sh root` block of docs/cli.md that
    /// starts with `#!`, with its namespace names set to ours.
    fn new(cli_md: &str) -> Plan {
        // Unique per plan: the tests of this file run in parallel.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = std::process::id() % 100_000;
        let plan = Plan { a: format!("rdA{id}x{n}"), b: format!("rdB{id}x{n}") };
        let script = cli_md
            .split("```sh root\n")
            .skip(1)
            .find(|b| b.starts_with("#!"))
            .and_then(|b| b.split("```").next())
            .expect("docs/cli.md: the routing plan's script");
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("A", &plan.a)
            .env("B", &plan.b)
            .output()
            .expect("run the routing plan's script");
        assert!(out.status.success(), "docs/cli.md's routing plan failed: {}", String::from_utf8_lossy(&out.stderr));
        plan
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("sh").arg("-c").arg(format!("ip netns pids {ns} | xargs -r kill -9")).status();
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A command that runs until stopped (a server or proxy), killed when the
/// test ends, or when a later one on TUN devices starts in its namespace
/// (the doc's reader stops a server before starting the next on the same
/// devices).
struct Daemon {
    doc: &'static str,
    line: usize,
    ns: String,
    /// On mptun's TUN devices (not `--kernel`): a later one in the same
    /// namespace would need the same device names, so it stops this one.
    tun: bool,
    child: std::process::Child,
}

impl Daemon {
    /// Fails if it has already exited: a server that gives up at once (a
    /// device in use, a bad flag) is the error this test is for.
    fn still_running(&mut self, command: &str) {
        if let Some(st) = self.child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("{}:{}: `{command}` exited {st}: {err}", self.doc, self.line);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// As root: README.md's commands in namespaces `A` and `B` run as written
/// on docs/cli.md's routing plan (names of this test's own): each
/// `serve`/`proxy` in the background (stopped when the next one starts in
/// its namespace), each `send` to its end with exit status 0, within a bound.
#[test]
fn readme_netns_commands_run_as_root() {
    if mptun_io::testutil::require_netns().is_some() {
        return;
    }
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let readme = std::fs::read_to_string(repo.join("README.md")).expect("README.md");
    let cli_md = std::fs::read_to_string(repo.join("docs/cli.md")).expect("docs/cli.md");
    let bin = support::mptun_bin();
    let path = format!("{}:{}", bin.parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
    let scratch = Scratch::new();
    let plan = Plan::new(&cli_md);
    let mut daemons: Vec<Daemon> = Vec::new();
    let mut ran = 0;
    for l in readme_lines(&readme) {
        let ns_command = ["A", "B"].into_iter().find_map(|n| {
            let rest = l.command.strip_prefix(&format!("ip netns exec {n} "))?;
            Some((if n == "A" { &plan.a } else { &plan.b }, rest))
        });
        let Some((ns, rest)) = ns_command else {
            // Files and directories the namespace commands use (big.iso,
            // the proxy's key); the simulator's lines run in the test above.
            if l.skip.is_none() && !["mptun", "linkem", "~"].iter().any(|w| l.command.contains(w)) {
                let st = Command::new("sh").arg("-c").arg(&l.command).current_dir(&scratch.0).status().expect("sh");
                assert!(st.success(), "README.md:{}: `{}` exited {st}", l.line, l.command);
            } else if l.skip.is_some() {
                println!("README.md:{}: not run here (not a command in namespace A or B): {}", l.line, l.command);
            }
            continue;
        };
        let command = format!("ip netns exec {ns} {rest}");
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(format!("exec {command}")).env("PATH", &path).current_dir(&scratch.0);
        support::own_control_dir(&mut sh);
        if rest.starts_with("mptun serve") || rest.starts_with("mptun proxy") {
            let tun = !rest.contains("--kernel");
            daemons.retain(|d| !(tun && d.tun && &d.ns == ns));
            sh.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            let child = sh.spawn().unwrap_or_else(|e| panic!("README.md:{}: {command}: {e}", l.line));
            let mut d = Daemon { doc: "README.md", line: l.line, ns: ns.clone(), tun, child };
            // Up (its TUN made, listening) or failed, by then.
            std::thread::sleep(std::time::Duration::from_secs(2));
            d.still_running(&command);
            daemons.push(d);
        } else {
            let out = support::run_command(sh, std::time::Duration::from_secs(120));
            assert!(
                out.status.success(),
                "README.md:{}: `{command}` exited {}; it printed:\n{}{}",
                l.line,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        println!("README.md:{}: ok (as root): {command}", l.line);
        ran += 1;
    }
    for d in &mut daemons {
        d.still_running("the last server or proxy");
    }
    assert!(ran >= 6, "README.md's namespace commands were not found ({ran})");
    drop(daemons);
    drop(plan);
}

/// A command of a `root` block of docs/cli.md (prompt `$ ` or `# `).
#[derive(Debug)]
struct RootCommand {
    line: usize,
    command: String,
    exit: i32,
}

/// The commands of docs/cli.md's `root` blocks but the routing plan's
/// script (which the test runs first), in order.
fn root_commands(doc: &str) -> Vec<RootCommand> {
    let mut out: Vec<RootCommand> = Vec::new();
    let mut fence: Option<bool> = None;
    for (i, l) in doc.lines().enumerate() {
        if let Some(info) = l.strip_prefix("```") {
            fence = match fence {
                None => Some(info.split_whitespace().any(|w| w == "root")),
                Some(_) => None,
            };
            continue;
        }
        if fence != Some(true) {
            continue;
        }
        if let Some(c) = l.strip_prefix("$ ").or_else(|| l.strip_prefix("# ")) {
            out.push(RootCommand { line: i + 1, command: c.to_owned(), exit: 0 });
        } else if let Some(code) = l.strip_prefix("(exit ").and_then(|r| r.strip_suffix(')')) {
            if let Some(last) = out.last_mut() {
                last.exit = code.parse().expect("exit status");
            }
        }
    }
    // The script's lines are comments of its own, not commands.
    out.retain(|c| {
        c.command.starts_with("mptun") || c.command.starts_with("ip ") || !c.command.contains(' ') || {
            let w = c.command.split_whitespace().next().unwrap_or("");
            ["mkdir", "head", "cmp", "echo", "cat", "ls"].contains(&w)
        }
    });
    out
}

/// As root: the commands of docs/cli.md's `root` blocks run in order on
/// the routing plan (namespaces, /tmp and /run/mptun paths of the test's
/// own). A server or proxy, or a command ending in `&`, runs in the
/// background until the next one starts in its namespace; `monitor`
/// ("until Ctrl-C") gets 2 s and a SIGINT; every other command must end
/// within its bound with the exit status its transcript gives (0 if none).
/// A command whose comment says `(not run by the test` is listed, not run.
#[test]
fn cli_doc_root_commands_run_as_root() {
    if mptun_io::testutil::require_netns().is_some() {
        return;
    }
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let doc = std::fs::read_to_string(repo.join("docs/cli.md")).expect("docs/cli.md");
    let cmds = root_commands(&doc);
    assert!(cmds.len() >= 10, "docs/cli.md's root commands were not found: {cmds:?}");
    let bin = support::mptun_bin();
    let path = format!("{}:{}", bin.parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
    let scratch = Scratch::new();
    let plan = Plan::new(&doc);
    let tmp = format!("{}/", scratch.0.display());
    let mut daemons: Vec<Daemon> = Vec::new();
    for c in &cmds {
        if c.command.contains("(not run by the test") {
            println!("docs/cli.md:{}: not run: {}", c.line, c.command);
            continue;
        }
        let command = c
            .command
            .replace("mcA", &plan.a)
            .replace("mcB", &plan.b)
            .replace("/tmp/", &tmp)
            .replace("/run/mptun/", &tmp);
        let run = command.split(" # ").next().unwrap_or(&command).trim().to_owned();
        let mut sh = Command::new("sh");
        sh.env("PATH", &path).current_dir(&scratch.0);
        support::own_control_dir(&mut sh);
        let ns = [&plan.a, &plan.b].into_iter().find(|n| run.starts_with(&format!("ip netns exec {n} "))).cloned();
        let background = run.ends_with('&') || run.contains("mptun serve") || run.contains("mptun proxy");
        if background {
            let ns = ns.unwrap_or_default();
            let tun = !run.contains("--kernel");
            daemons.retain(|d| !(tun && d.tun && d.ns == ns));
            sh.arg("-c").arg(format!("exec {}", run.trim_end_matches('&').trim_end()));
            sh.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            let child = sh.spawn().unwrap_or_else(|e| panic!("docs/cli.md:{}: {run}: {e}", c.line));
            let mut d = Daemon { doc: "docs/cli.md", line: c.line, ns, tun, child };
            std::thread::sleep(std::time::Duration::from_secs(2));
            d.still_running(&run);
            daemons.push(d);
        } else if command.contains("until Ctrl-C") {
            sh.arg("-c").arg(format!("exec {run}"));
            sh.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            // Ctrl-C at a terminal: SIGINT with its default action. A test run
            // started in the background of a shell without job control
            // (`cmd &`, nohup) inherits SIGINT ignored, and the command would
            // never see the signal.
            // SAFETY: signal() is async-signal-safe, called between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut sh, || {
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    Ok(())
                });
            }
            let mut child = sh.spawn().unwrap_or_else(|e| panic!("docs/cli.md:{}: {run}: {e}", c.line));
            std::thread::sleep(std::time::Duration::from_secs(2));
            assert!(child.try_wait().expect("wait").is_none(), "docs/cli.md:{}: `{run}` ended before Ctrl-C", c.line);
            // SAFETY: kill with the pid of a child we hold, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let st = loop {
                if let Some(st) = child.try_wait().expect("wait") {
                    break st;
                }
                if std::time::Instant::now() >= deadline {
                    let _ = child.kill();
                    panic!("docs/cli.md:{}: `{run}` still running 10 s after Ctrl-C", c.line);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            };
            // Ended by the signal (as `ip mptcp monitor`), or by handling it.
            let by_sigint = std::os::unix::process::ExitStatusExt::signal(&st) == Some(libc::SIGINT);
            assert!(
                by_sigint || matches!(st.code(), Some(0 | 130)),
                "docs/cli.md:{}: `{run}` after Ctrl-C: {st}",
                c.line
            );
        } else {
            // bash for pipefail: `mptun send ... | tail -8` fails when mptun does.
            let mut sh = Command::new("bash");
            sh.env("PATH", &path).current_dir(&scratch.0).args(["-o", "pipefail", "-c", &run]);
            let out = support::run_command(sh, std::time::Duration::from_secs(120));
            assert_eq!(
                out.status.code(),
                Some(c.exit),
                "docs/cli.md:{}: `{run}` exited {} (the doc says {}); it printed:\n{}{}",
                c.line,
                out.status,
                c.exit,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        println!("docs/cli.md:{}: ok (as root): {run}", c.line);
    }
    for d in &mut daemons {
        d.still_running("the last server");
    }
    drop(daemons);
    drop(plan);
}

#[test]
fn readme_lines_follow_the_convention() {
    let doc = "```sh\nmptun demo   # x\nip netns exec B mptun serve\nmptun pm show   # a running serve (root)\n\
               mptun sim sweep f \\\n    --out d   # y\ncargo test\n# only a comment\n```\n```toml\nx = 1\n```\n";
    let l = readme_lines(doc);
    let got: Vec<(usize, &str, bool)> = l.iter().map(|l| (l.line, l.command.as_str(), l.skip.is_none())).collect();
    assert_eq!(
        got,
        [
            (2, "mptun demo   # x", true),
            (3, "ip netns exec B mptun serve", false),
            (4, "mptun pm show   # a running serve (root)", false),
            (5, "mptun sim sweep f --out d   # y", true),
            (7, "cargo test", false),
        ]
    );
}

/// The commands' working directory, removed at the end, pass or fail.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        // Tests of this file run in parallel, each in a directory of its own.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mptun-cli-docs-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    /// A copy of `bin` that every user may run, in a directory of the
    /// scratch one that every user may enter (whatever the umask); returns
    /// that directory.
    fn reachable_copy(&self, bin: &std::path::Path) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.0.join("bin");
        std::fs::create_dir_all(&dir).expect("scratch bin dir");
        let to = dir.join("mptun");
        std::fs::copy(bin, &to).unwrap_or_else(|e| panic!("copy {} to {}: {e}", bin.display(), to.display()));
        for p in [&self.0, &dir, &to] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod scratch");
        }
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
