//! `mptun serve` against clients that want more than a test: a file name
//! that is already taken (by a file, or by a symlink planted to point
//! elsewhere), an output directory swapped for a symlink while the server
//! runs, files larger than the server allows or than its disk holds. The
//! server must never change what existed before the request, must write
//! only into the directory it was given, and must tell the client why it
//! refuses (the client prints it and fails). And the CPU figures of tests
//! far shorter than a scheduler tick, which must still be ones a machine
//! can have.
//!
//! Each test runs `serve --kernel` and `send --kernel` as a user does, over
//! loopback in a namespace of its own, with scratch directories of its own.
//! Needs root: skipped with a reason otherwise, failed when
//! MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use mptun_io::testutil::{require_netns, unique_name};
use mptun_io::{Netns, NetnsGuard};
use support::{json_document, mptun_bin, run, Running};

/// A directory of the test's own, removed with all it holds (symlinks
/// themselves, not what they point to) when the test ends, passed or not.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(unique_name(&format!("mptun-{tag}-"), 60));
        std::fs::create_dir(&p).expect("scratch directory");
        Scratch(p)
    }

    /// `rel` under the scratch directory.
    fn at(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    /// A new directory `rel` under it.
    fn dir(&self, rel: &str) -> PathBuf {
        let p = self.at(rel);
        std::fs::create_dir(&p).expect("directory");
        p
    }

    /// A file `rel` of `len` bytes that differ from any other file's here.
    fn file(&self, rel: &str, len: usize) -> PathBuf {
        let p = self.at(rel);
        let seed = rel.bytes().fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect();
        std::fs::write(&p, data).expect("write a file");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one test runs in: a namespace of its own with loopback up, and a
/// scratch directory with the server's `out` and the client's `client`
/// directories (all deleted on drop). `None`: skipped (the reason printed).
struct Case {
    ns: NetnsGuard,
    s: Scratch,
    out: PathBuf,
}

fn case(tag: &str) -> Option<Case> {
    if require_netns().is_some() {
        return None;
    }
    let ns = Netns::create(&unique_name(&format!("mpt-{tag}-"), 40)).expect("create a namespace");
    ns.ip(["link", "set", "lo", "up"]).expect("loopback up");
    let s = Scratch::new(tag);
    let out = s.dir("out");
    s.dir("client");
    Some(Case { ns, s, out })
}

/// `mptun serve --kernel` on 127.0.0.1:`port` in `ns`, ready.
fn serve(ns: &NetnsGuard, port: &str, extra: &[&str]) -> Running {
    let mut args = vec!["serve", "--kernel", "-B", "127.0.0.1", "-p", port, "--no-progress"];
    args.extend_from_slice(extra);
    Running::start(Some(ns.name()), &args, "Server listening", Duration::from_secs(10))
}

/// `mptun send --kernel 127.0.0.1 -p PORT ARGS` in `ns`, to its end.
fn send(ns: &NetnsGuard, port: &str, extra: &[&str]) -> Output {
    let mut args = vec!["send", "127.0.0.1", "--kernel", "-p", port, "--no-progress"];
    args.extend_from_slice(extra);
    run(Some(ns.name()), &args, Duration::from_secs(20))
}

/// `send --file PATH`: whether it succeeded, and what it printed on stderr.
fn send_file(ns: &NetnsGuard, port: &str, file: &Path) -> (bool, String) {
    let out = send(ns, port, &["--file", file.to_str().expect("UTF-8 path")]);
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The client failed, saying the server refused and `why`.
fn assert_refused(sent: (bool, String), why: &str, server: &Running) {
    let (ok, err) = sent;
    assert!(!ok, "the client succeeded; it should have been refused ({why}); server: {}", server.output());
    assert!(err.contains("the server refused the test") && err.contains(why), "no reason {why:?} in: {err}");
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// A name already in the output directory is not the client's to take:
/// the file keeps its bytes and the client is told why; a new name is
/// stored, and sending it again is refused in its turn.
#[test]
fn hostile_tool_serve_never_replaces_a_file_that_exists() {
    let Some(Case { ns, s, out }) = case("hsx") else { return };
    let planted = out.join("victim");
    std::fs::write(&planted, b"the server's own file\n").unwrap();
    let victim = s.file("client/victim", 4096);
    let fresh = s.file("client/fresh", 5000);
    let srv = serve(&ns, "5201", &["--output-dir", out.to_str().unwrap()]);

    assert_refused(send_file(&ns, "5201", &victim), "already exists", &srv);
    assert_eq!(bytes(&planted), b"the server's own file\n", "the planted file was changed");

    let (ok, err) = send_file(&ns, "5201", &fresh);
    assert!(ok, "a new name is stored: {err}; server: {}", srv.output());
    let stored = bytes(&fresh);
    assert_eq!(bytes(&out.join("fresh")), stored);
    std::fs::write(&fresh, b"other bytes under the same name").unwrap();
    assert_refused(send_file(&ns, "5201", &fresh), "already exists", &srv);
    assert_eq!(bytes(&out.join("fresh")), stored, "the first transfer's file was changed by the second");
}

/// A symlink planted in the output directory, to a file outside it or to
/// a name that does not exist yet: neither is written through, and the
/// symlink stays what it was.
#[test]
fn hostile_tool_serve_never_writes_through_a_planted_symlink() {
    let Some(Case { ns, s, out }) = case("hsl") else { return };
    let outside = s.dir("outside");
    let target = outside.join("target");
    std::fs::write(&target, b"not the client's\n").unwrap();
    std::os::unix::fs::symlink(&target, out.join("link")).unwrap();
    let absent = outside.join("absent");
    std::os::unix::fs::symlink(&absent, out.join("dangling")).unwrap();
    let link = s.file("client/link", 4096);
    let dangling = s.file("client/dangling", 4096);
    let srv = serve(&ns, "5201", &["--output-dir", out.to_str().unwrap()]);

    assert_refused(send_file(&ns, "5201", &link), "already exists", &srv);
    assert_eq!(bytes(&target), b"not the client's\n", "written through the symlink");
    assert_refused(send_file(&ns, "5201", &dangling), "already exists", &srv);
    assert!(!absent.exists(), "created {} through a dangling symlink", absent.display());
    for (name, to) in [("link", &target), ("dangling", &absent)] {
        assert_eq!(&std::fs::read_link(out.join(name)).unwrap(), to, "the symlink {name} was replaced");
    }
}

/// The output directory is the one the server was started with, whatever
/// its path names later: moved away and replaced by a symlink to another
/// directory, files still go into it, none into the other.
#[test]
fn hostile_tool_serve_keeps_to_the_directory_it_opened() {
    let Some(Case { ns, s, out }) = case("hsd") else { return };
    let elsewhere = s.dir("elsewhere");
    let file = s.file("client/moved", 4096);
    let srv = serve(&ns, "5201", &["--output-dir", out.to_str().unwrap()]);
    let moved = s.at("out.orig");
    std::fs::rename(&out, &moved).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &out).unwrap();

    let (ok, err) = send_file(&ns, "5201", &file);
    assert!(ok, "{err}; server: {}", srv.output());
    assert!(!elsewhere.join("moved").exists(), "stored through the symlink that replaced the directory");
    assert_eq!(bytes(&moved.join("moved")), bytes(&file), "not stored in the directory the server opened");
}

/// `--max-file-size`: a file over it is refused before a byte is stored,
/// with the limit named; one within it is stored.
#[test]
fn hostile_tool_serve_refuses_a_file_over_its_limit() {
    let Some(Case { ns, s, out }) = case("hsm") else { return };
    let small = s.file("client/small", 8192);
    let large = s.file("client/large", 8193);
    let srv = serve(&ns, "5201", &["--output-dir", out.to_str().unwrap(), "--max-file-size", "8K"]);

    assert_refused(send_file(&ns, "5201", &large), "--max-file-size", &srv);
    assert!(!out.join("large").exists(), "a refused file was created");
    let (ok, err) = send_file(&ns, "5201", &small);
    assert!(ok, "{err}; server: {}", srv.output());
    assert_eq!(bytes(&out.join("small")), bytes(&small));
}

/// A file larger than the output directory's free space is refused before
/// a byte is stored, with the free space named; a small one is stored.
/// The directory is a 256 KiB tmpfs mounted in the server's own mount
/// namespace (`ip netns exec` makes one), so it ends with the server; the
/// test looks into it through `/proc/PID/root`.
#[test]
fn hostile_tool_serve_refuses_a_file_the_disk_cannot_hold() {
    let Some(Case { ns, s, out }) = case("hsf") else { return };
    let small = s.file("client/small", 16 * 1024);
    let large = s.file("client/large", 1 << 20);
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name(), "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=256k mptun-test "$0" && exec "$1" serve --kernel -B 127.0.0.1 -p 5201 --no-progress --output-dir "$0""#)
        .arg(&out)
        .arg(mptun_bin());
    let srv = Running::start_command(c, "serve on a small tmpfs", "Server listening", Duration::from_secs(10));
    let seen =
        |name: &str| PathBuf::from(format!("/proc/{}/root", srv.pid())).join(out.strip_prefix("/").unwrap()).join(name);

    assert_refused(send_file(&ns, "5201", &large), "free", &srv);
    assert!(!seen("large").exists(), "a refused file was created");
    let (ok, err) = send_file(&ns, "5201", &small);
    assert!(ok, "{err}; server: {}", srv.output());
    assert_eq!(bytes(&seen("small")), bytes(&small), "stored on the tmpfs");
    assert!(!out.join("small").exists(), "the tmpfs was not the server's directory");
}

/// The CPUs this machine has: no process uses more than their time.
fn cpus() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as f64
}

/// Tests of a few KiB, a file and the pattern, either way: every CPU
/// utilisation either end reports (its own and the peer's, total, user and
/// system) is one a process can have on this machine, at most 100 % per
/// CPU; and what the receiver reports of itself is what its peer reports
/// of it (one window, measured once).
#[test]
fn hostile_tool_cpu_utilisation_of_a_tiny_transfer_is_a_possible_one() {
    let Some(Case { ns, s, out }) = case("hsc") else { return };
    let limit = 100.0 * cpus();
    let mut runs: Vec<Vec<String>> = Vec::new();
    for i in 0..4 {
        let f = s.file(&format!("client/f{i}"), 4096);
        runs.push(vec!["--file".into(), f.to_str().unwrap().into()]);
    }
    for _ in 0..2 {
        runs.push(vec!["-n".into(), "4K".into()]);
        runs.push(vec!["-n".into(), "4K".into(), "-R".into()]);
    }
    let mut bad = Vec::new();
    for (i, args) in runs.iter().enumerate() {
        let port = (5301 + i).to_string();
        let srv = Running::spawn_ready(
            Some(ns.name()),
            &[
                "serve",
                "--kernel",
                "-B",
                "127.0.0.1",
                "-p",
                &port,
                "-1",
                "--json",
                "--output-dir",
                out.to_str().unwrap(),
            ],
            "Server listening",
            Duration::from_secs(10),
        );
        let mut extra: Vec<&str> = vec!["--json"];
        extra.extend(args.iter().map(String::as_str));
        let o = send(&ns, &port, &extra);
        assert!(o.status.success(), "send {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        let client = json_document("send", &o.stdout);
        let (st, stdout, stderr) = srv.finish(Duration::from_secs(10));
        assert!(st.success(), "serve: {stderr}");
        let server = json_document("serve", stdout.as_bytes());
        for (side, doc) in [("client", &client), ("server", &server)] {
            let cpu = &doc["end"]["cpu_utilization_percent"];
            for key in ["host_total", "host_user", "host_system", "remote_total", "remote_user", "remote_system"] {
                let v = cpu[key].as_f64().unwrap_or_else(|| panic!("{side}: no {key} in {cpu}"));
                if !(0.0..=limit).contains(&v) {
                    bad.push(format!("send {args:?}: the {side}'s {key} is {v:.1} % (at most {limit} %)"));
                }
            }
        }
        // The receiver's own figure and the one its trailer gave the sender.
        let reverse = args.iter().any(|a| a == "-R");
        let (receiver, sender) = if reverse { (&client, &server) } else { (&server, &client) };
        let own = receiver["end"]["cpu_utilization_percent"]["host_total"].as_f64().unwrap();
        let told = sender["end"]["cpu_utilization_percent"]["remote_total"].as_f64().unwrap();
        if (own - told).abs() > 1e-6 * own.abs().max(1.0) {
            bad.push(format!("send {args:?}: the receiver reports {own} % of itself, the sender {told} % of it"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
