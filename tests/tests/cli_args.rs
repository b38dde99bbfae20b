//! Argument validation of `mptun`: every mistake a user can make on the
//! command line ends in a clear error and a non-zero exit, never a panic or
//! a backtrace (RUST_BACKTRACE=1 is set to make one visible if it happened).
//! None of these cases gets as far as sending a packet.

#[path = "cli_support.rs"]
mod support;

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use support::mptun_bin;

fn mptun(args: &[&str]) -> Output {
    let mut c = Command::new(mptun_bin());
    c.args(args).env("RUST_BACKTRACE", "1");
    support::own_control_dir(&mut c);
    c.output().expect("run mptun")
}

/// clap's own usage error: exit 2 with its `--help` hint.
const CLAP: Option<i32> = None;
/// Our usage error (the command line or an input file is wrong): one line, exit 2.
const USAGE: Option<i32> = Some(2);
/// Our environment error (this machine or user cannot do it): one line, exit 3.
const ENVIRONMENT: Option<i32> = Some(3);

/// Fails unless `out` is a failure with an error mentioning `want`, free of
/// panics and backtraces; `ours` (the exit status of one of our own errors)
/// also requires exactly one line (clap adds a usage hint to its own).
fn check(args: &[&str], out: &Output, want: &str, ours: Option<i32>) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mptun {args:?} succeeded; stderr {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "mptun {args:?} panicked: {err}");
    assert!(err.contains(want), "mptun {args:?}: expected {want:?} in {err}");
    if let Some(code) = ours {
        assert_eq!(err.trim_end().lines().count(), 1, "mptun {args:?}: not one line: {err}");
        assert!(err.starts_with("mptun: "), "{err}");
        assert_eq!(out.status.code(), Some(code), "mptun {args:?}: {err}");
    } else {
        assert_eq!(out.status.code(), Some(2), "clap's usage errors exit 2");
    }
}

#[test]
fn nonsense_sizes_and_numbers() {
    for (args, want) in [
        (&["send", "10.9.9.9", "-n", "lots"][..], "does not start with a number"),
        (&["send", "10.9.9.9", "-n", "5Q"], "unknown size unit"),
        (&["send", "10.9.9.9", "-n", "0"], "out of range"),
        (&["send", "10.9.9.9", "-n", "-3"], "'-3' out of range: a negative value"),
        (&["send", "10.9.9.9", "-t", "-1"], "'-1' seconds out of range (0, 86400]"),
        (&["send", "10.9.9.9", "-i", "-1"], "'-1' seconds out of range"),
        (&["sim", "aggregate", "--size", "-1"], "'-1' out of range"),
        (&["send", "10.9.9.9", "-t", "forever"], "not a number of seconds"),
        (&["send", "10.9.9.9", "--sndbuf", "12XB"], "unknown size unit"),
        (&["send", "10.9.9.9", "--max-pacing-rate", "fast"], "does not start with a number"),
        (&["send", "10.9.9.9", "--pacer", "fast"], "edt, quantum, none"),
        (&["send", "10.9.9.9", "-n", "1G", "-t", "3"], "cannot be used with"),
        (&["sim", "aggregate", "--size", "huge"], "does not start with a number"),
    ] {
        check(args, &mptun(args), want, CLAP);
    }
    for (args, want) in [
        (&["send", "10.9.9.9", "--kernel", "--sndbuf", "10"][..], "less than 1 KiB"),
        (&["send", "10.9.9.9", "--kernel", "--cc", "no such!"], "no congestion control name"),
        (&["send", "10.9.9.9", "--kernel", "--cc", "foo"], "--cc foo: unable to set TCP congestion control"),
        (&["serve", "--kernel", "--cc", "foo"], "the kernel has no 'foo' (it offers: "),
        (&["send", "10.9.9.9", "--topology", "lab-a", "--cc", "vegas"], "--cc"),
        (&["send", "10.9.9.9", "--topology", "lab-a", "--scheduler", "fastest"], "--scheduler"),
        (&["send", "not an address!", "--kernel"], "not an address"),
        (&["send", "10.9.9.9", "--kernel", "--pacer", "quantum"], "--pacer chooses mptun's pacer"),
    ] {
        check(args, &mptun(args), want, USAGE);
    }
}

#[test]
fn unknown_paths_and_missing_devices() {
    for (args, want) in [
        (&["send", "10.9.9.9", "--path", "addr=10.77.1.2"][..], "missing device"),
        (&["send", "10.9.9.9", "--path", "dev=mptx0"], "missing address"),
        (&["send", "10.9.9.9", "--path", "dev=mptx0,addr=10.77.1.2,colour=red"], "unknown key 'colour'"),
        (&["send", "10.9.9.9", "--path", "dev=mptx0,addr=10.77.1.300"], "invalid IP address"),
        (&["send", "10.9.9.9", "--path", "dev=a-name-far-too-long,addr=10.77.1.2"], "bad interface name"),
        (&["serve", "--path", "tun0"], "KEY=VALUE"),
    ] {
        check(args, &mptun(args), want, CLAP);
    }
    for (args, want) in [
        (&["send", "10.9.9.9", "--topology", "atlantis"][..], "unknown topology 'atlantis'"),
        (&["send", "10.9.9.9"], "no paths: give --path"),
        (&["serve"], "no paths: give --path"),
        (&["send", "10.9.9.9", "--kernel", "--topology", "lab-a"], "--kernel uses the kernel's"),
        (&["send", "10.9.9.9", "--kernel", "--file", "/nonexistent/mptun-file"], "cannot open /nonexistent/mptun-file"),
        (&["serve", "--kernel", "--output-dir", "/nonexistent/mptun-dir"], "not a directory"),
        (&["serve", "--kernel", "--file", "/nonexistent/mptun-file"], "--file /nonexistent/mptun-file"),
    ] {
        check(args, &mptun(args), want, USAGE);
    }
}

/// Creating a TUN needs CAP_NET_ADMIN: without it, one line that says so
/// (and points at --kernel). Run as root, the command is started as user
/// `nobody` so the test means the same everywhere.
#[test]
fn no_root_when_tun_is_needed() {
    let args = ["send", "10.9.9.9", "-n", "1M", "--path", "dev=mptnoroot0,addr=10.77.1.2"];
    let mut cmd = Command::new(mptun_bin());
    cmd.args(args).env("RUST_BACKTRACE", "1");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.uid(65534).gid(65534);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: cannot run mptun as nobody ({e})");
            return;
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("Permission denied") && err.contains("mptun") && !err.starts_with("mptun:") {
        println!("skipped: user nobody cannot execute {} ({err})", mptun_bin().display());
        return;
    }
    check(&args, &out, "needs root or CAP_NET_ADMIN", ENVIRONMENT);
    assert!(err.contains("mptnoroot0"), "{err}");
}

/// Shell completions and the man page come from the CLI's own definition;
/// -v/--debug and RUST_LOG turn the log on (stderr), stdout stays clean.
#[test]
fn completions_man_page_and_logging() {
    let out = mptun(&["completions", "bash"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("_mptun()") && text.contains("--topology"), "{text}");
    let out = mptun(&["completions", "zsh"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("#compdef mptun"));
    let out = mptun(&["man"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(".TH mptun 1"), "{text}");
    let out = mptun(&["-vv", "completions", "fish"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("DEBUG"), "-vv logs at debug");
    let out = mptun(&["completions", "fish"]);
    assert!(out.stderr.is_empty(), "quiet by default: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(mptun_bin()).args(["completions", "fish"]).env("RUST_LOG", "debug").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("DEBUG"), "RUST_LOG=debug logs");
}

/// `send -R --file` refuses to replace an existing file unless --force,
/// before connecting (10.9.9.9 is never reached: --kernel to an address
/// nothing answers would otherwise wait for the connect timeout), and leaves
/// the file as it was.
#[test]
fn reverse_file_is_not_overwritten_without_force() {
    let dir = std::env::temp_dir().join(format!("mptun-cli-args-force-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("back.bin");
    std::fs::write(&path, b"keep me").unwrap();
    let p = path.to_str().unwrap();
    let args = ["send", "10.9.9.9", "--kernel", "-R", "--file", p, "--connect-timeout", "30"];
    let start = std::time::Instant::now();
    check(&args, &mptun(&args), "already exists: give --force", USAGE);
    assert!(start.elapsed() < std::time::Duration::from_secs(10), "checked before connecting");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    let args = ["send", "10.9.9.9", "--kernel", "--force", "--file", p];
    check(&args, &mptun(&args), "--reverse", CLAP);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A control socket nobody listens on (its process was killed) or that is
/// not there: the process is gone, an environment error (exit 3).
#[test]
fn a_control_socket_without_its_process() {
    let dir = std::env::temp_dir().join(format!("mptun-cli-args-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("gone.sock");
    let _ = std::fs::remove_file(&sock);
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let s = sock.to_str().unwrap();
    let args = ["ss", "--socket", s];
    check(&args, &mptun(&args), "no mptun process is behind this control socket", ENVIRONMENT);
    assert!(sock.exists(), "a socket outside the default directory is not ours to remove");
    std::fs::remove_file(&sock).unwrap();
    let args = ["pm", "--socket", s, "endpoint", "show"];
    check(&args, &mptun(&args), "no such control socket", ENVIRONMENT);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `MPTUN_CONTROL_DIR` is where `ss`/`pm`/`nstat` look for control sockets
/// (this test's own directory: it never sees another process's): one left
/// by a process that has ended (`PID.sock`, no such PID) is removed when
/// found, and with none left the error says where it looked.
#[test]
fn stale_control_sockets_of_ours_are_removed() {
    let dir = std::env::temp_dir().join(format!("mptun-cli-args-ctldir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let stale = |name: &str| {
        let p = dir.join(name);
        drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
        p
    };
    let run = |args: &[&str]| {
        let mut c = Command::new(mptun_bin());
        c.args(args).env("MPTUN_CONTROL_DIR", &dir);
        c.output().unwrap()
    };
    // Above any pid_max (at most 2^22): no process has this pid.
    let found = stale("4194305.sock");
    let args = ["ss"];
    check(&args, &run(&args), &format!("no running mptun has a control socket in {}", dir.display()), ENVIRONMENT);
    assert!(!found.exists(), "the stale socket is removed");
    let given = stale("4194306.sock");
    let args = ["nstat", "--socket", given.to_str().unwrap()];
    check(
        &args,
        &run(&args),
        "no mptun process is behind this control socket (the one that made it has ended); removed it",
        ENVIRONMENT,
    );
    assert!(!given.exists());
    let foreign = stale("mine.sock");
    let args = ["ss", "--socket", foreign.to_str().unwrap()];
    check(&args, &run(&args), "no mptun process is behind", ENVIRONMENT);
    assert!(foreign.exists(), "not named PID.sock: not ours to remove");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A wrong scenario file is a usage error of one line that names the file
/// and the place in it (`FILE:LINE:COL: message`), or the route or flow it
/// is about, as a compiler names a line.
#[test]
fn scenario_file_errors_name_the_file_and_place() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/shared-bottleneck.toml"))
            .expect("shipped scenario");
    let (route, flow) = (shipped.find("[[route]]").unwrap(), shipped.find("[[flow]]").unwrap());
    let line_of = |at: usize| shipped[..at].matches('\n').count() + 1;
    let dir = std::env::temp_dir().join(format!("mptun-scenario-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("noroute", format!("{}{}", &shipped[..route], &shipped[flow..]), "noroute.toml: no [[route]]".to_string()),
        (
            "nolink",
            shipped.replacen("links = [\"bottleneck\"]", "links = [\"nolink\"]", 1),
            format!("nolink.toml:{}:1: route 0: through unknown link 'nolink' (links: bottleneck)", line_of(route)),
        ),
        (
            "noto",
            shipped.replacen("to = \"10.0.1.2\"", "to = \"10.0.9.9\"", 1),
            format!("noto.toml:{}:1: flow 0: no route to 10.0.9.9", line_of(flow)),
        ),
        ("syntax", shipped.replacen("duration =", "duration = =", 1), "syntax.toml:6:12: invalid string".to_string()),
    ];
    for (name, text, want) in cases {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap();
        let args = ["sim", "run", p];
        check(&args, &mptun(&args), &want, USAGE);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `sim sweep` builds every point before it runs any: a bad value of an
/// axis is a usage error naming the axis and value and leaves no runs
/// behind; an unknown --figure fails after one run, listing the figures.
#[test]
fn sweep_checks_every_point_and_figure_first() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/shared-bottleneck.toml");
    let dir = std::env::temp_dir().join(format!("mptun-sweep-checks-{}", std::process::id()));
    for (set, want) in [("cc=lia,bogus", "cc=bogus"), ("queue_bdp=1,abc", "queue_bdp \"abc\" is not a number")] {
        let out = dir.join(set.split('=').next().unwrap());
        let args = [
            "sim",
            "sweep",
            file,
            "--set",
            set,
            "--set",
            "duration=1s",
            "--seeds",
            "1",
            "--out",
            out.to_str().unwrap(),
        ];
        check(&args, &mptun(&args), want, USAGE);
        assert!(!out.join("runs.csv").exists(), "{set}: a run was made before the check");
    }
    let out = dir.join("figure");
    let o = out.to_str().unwrap();
    let args = [
        "sim",
        "sweep",
        file,
        "--set",
        "cc=lia,olia",
        "--set",
        "duration=1s",
        "--seeds",
        "1",
        "--figure",
        "flows.9.nope",
        "--out",
        o,
    ];
    let run = mptun(&args);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("--figure flows.9.nope: no such figure (figures: ") && err.contains("flows.0.share"), "{err}");
    assert!(!err.contains("[2/2]"), "the rest of the grid ran: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rerun into the same --out with a smaller grid summarises exactly the
/// grid and seeds asked for, and keeps the other rows of runs.csv.
#[test]
fn sweep_rerun_with_a_smaller_grid_summarises_that_grid() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/shared-bottleneck.toml");
    let out = std::env::temp_dir().join(format!("mptun-sweep-smaller-{}", std::process::id()));
    let o = out.to_str().unwrap();
    let sweep = |cc: &str, seeds: &str| {
        let args = ["sim", "sweep", file, "--set", cc, "--set", "duration=1s", "--seeds", seeds, "--out", o];
        let run = mptun(&args);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        String::from_utf8_lossy(&run.stderr).into_owned()
    };
    sweep("cc=lia,olia", "2");
    let err = sweep("cc=lia", "1");
    assert!(err.contains("= 1 runs, 0 to do (1 in "), "{err}");
    let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let rows: Vec<&str> = summary.lines().skip(1).collect();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r.starts_with("lia,1s,") && r.split(',').nth(3) == Some("1")),
        "{summary}"
    );
    assert_eq!(std::fs::read_to_string(out.join("runs.csv")).unwrap().lines().count(), 5, "runs.csv keeps every row");
    let _ = std::fs::remove_dir_all(&out);
}

/// `sim sweep --shard K/N` as N processes at once (a batch engine's tasks),
/// then `sweep merge` of their directories: runs.csv, summary.csv,
/// sweep.json, the plot and the figures table are the bytes of the same
/// sweep run whole in one process.
#[test]
fn sweep_shards_in_separate_processes_merge_to_the_whole_sweep() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/shared-bottleneck.toml");
    let dir = std::env::temp_dir().join(format!("mptun-sweep-shards-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let grid = ["sim", "sweep", file, "--set", "cc=lia,olia", "--set", "duration=1s", "--seeds", "3", "--jobs", "1"];
    let whole = dir.join("whole");
    let plot = ["--figure", "flows.0.share", "--plot", "cc"];
    let args: Vec<&str> = grid.iter().copied().chain(plot).chain(["--out", whole.to_str().unwrap()]).collect();
    let run = mptun(&args);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let n = 4;
    let outs: Vec<std::path::PathBuf> = (0..n).map(|k| dir.join(format!("shard-{k}"))).collect();
    let shards: Vec<String> = (0..n).map(|k| format!("{k}/{n}")).collect();
    let children: Vec<std::process::Child> = (0..n)
        .map(|k| {
            std::process::Command::new(mptun_bin())
                .args(grid)
                .args(["--shard", &shards[k], "--out", outs[k].to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let merged = dir.join("merged");
    // The directories in another order than the shards'.
    let mut args = vec!["sim", "sweep", "merge", "--out", merged.to_str().unwrap()];
    args.extend(outs.iter().rev().map(|d| d.to_str().unwrap()));
    args.extend(plot);
    let merge = mptun(&args);
    assert!(merge.status.success(), "{}", String::from_utf8_lossy(&merge.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&merge.stdout), "the figures table");
    for f in ["runs.csv", "summary.csv", "sweep.json", "sweep-flows_0_share.svg"] {
        let (a, b) = (std::fs::read(whole.join(f)).unwrap(), std::fs::read(merged.join(f)).unwrap());
        assert!(a == b, "{f} differs:\n{}\n--\n{}", String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
    }
    // An edited scenario file is another sweep.
    let edited = dir.join("edited.toml");
    std::fs::write(&edited, std::fs::read_to_string(file).unwrap() + "\n# edited\n").unwrap();
    let mut args: Vec<&str> = grid.to_vec();
    args[2] = edited.to_str().unwrap();
    args.extend(["--shard", "0/4", "--out", outs[0].to_str().unwrap()]);
    let run = mptun(&args);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("another sweep's") && err.contains("SHA-256"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
