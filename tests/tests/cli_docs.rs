//! The commands of `docs/cli.md` run as written, without root, against the
//! `mptun` this workspace built.
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

/// The commands' working directory, removed at the end, pass or fail.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("mptun-cli-docs-{}", std::process::id()));
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
