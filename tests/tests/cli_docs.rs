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
