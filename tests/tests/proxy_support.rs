//! Shared by the proxy tests and the proxy benchmark (each includes it
//! with `#[path]`); compiled alone it has no tests. The proxy pair as the
//! tests run it: a lab (tests/src/lab.rs), the exit in namespace B on
//! mptun's stack, the local proxy in A on two paths, curl in A, and the
//! JSON events both ends print.
#![allow(dead_code)]

#[path = "cli_support.rs"]
pub mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use sha2::{Digest, Sha256};
use support::Running;

pub const HTTP_PORT: u16 = 8080;

/// A scratch directory (key files, downloads), removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(case: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("mptun-px-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub fn key(&self, name: &str, content: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p.display().to_string()
    }

    pub fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const KEY: &str = "px-test-key: 9f2c1e77a0b34d55c1\n";

/// Whether `tool` is installed; when not, the test is skipped with a
/// reason, or fails under MPTUN_REQUIRE_NETNS=1 (CI installs it).
pub fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        assert!(
            std::env::var("MPTUN_REQUIRE_NETNS").as_deref() != Ok("1"),
            "{tool} is not installed (apt-get install {tool})"
        );
        println!("skipped: {tool} is not installed");
    }
    ok
}

/// linkem next to mptun, or None (skipped with a reason; a failure under
/// MPTUN_REQUIRE_NETNS=1).
pub fn linkem_bin() -> Option<PathBuf> {
    support::linkem_built().then(|| support::mptun_bin().with_file_name("linkem"))
}

/// A lab of `paths` paths (namespaces `mpt-CASE...`), a scratch directory
/// and the key file in it, as most proxy tests begin.
pub fn lab_with_key(case: &str, paths: u8) -> (Lab, Dir, String) {
    let lab = Lab::new(case, paths).unwrap();
    let dir = Dir::new(case);
    let key = dir.key("key", KEY);
    (lab, dir, key)
}

pub fn start(lab: &Lab, side: Side, args: &[&str]) -> Running {
    let mut v = vec!["proxy"];
    v.extend_from_slice(args);
    v.extend_from_slice(&["--json", "-i", "1"]);
    Running::start(Some(lab.ns(side).name()), &v, "\"listening\"", Duration::from_secs(15))
}

/// The exit in B on mptun's stack (path 1), allowing the test server.
pub fn exit(lab: &Lab, key: &str, extra: &[&str]) -> Running {
    let mut v = vec!["exit", "--topology", "lab-b:1", "--key-file", key];
    v.extend_from_slice(extra);
    start(lab, Side::B, &v)
}

/// The local proxy in A on mptun's two paths, to the exit at `exit_addr`.
pub fn local(lab: &Lab, key: &str, exit_addr: &str, extra: &[&str]) -> Running {
    let mut v = vec!["local", "--topology", "lab-a:2", "--exit", exit_addr, "--key-file", key];
    v.extend_from_slice(extra);
    start(lab, Side::A, &v)
}

pub fn exit_addr(lab: &Lab) -> String {
    format!("{}:1081", lab.mptun_addr(Side::B, 1))
}

/// `curl ARGS` in namespace A, bounded by `--max-time`.
pub fn curl(lab: &Lab, args: &[&str], max_secs: u32) -> Output {
    Command::new("ip")
        .args(["netns", "exec", lab.a.name(), "curl", "-sS", "--max-time", &max_secs.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run curl")
}

pub fn url(host: &str, n: u64, seed: u64) -> String {
    format!("http://{host}:{HTTP_PORT}/bytes/{n}/{seed}")
}

pub fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

/// The JSON event lines a proxy end printed so far.
pub fn events(r: &Running) -> Vec<Value> {
    r.output().lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

/// Waits (bounded) until `pred` holds for the events of `r`; returns them.
pub fn wait_events(r: &Running, what: &str, limit: Duration, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let ev = events(r);
        if pred(&ev) {
            return ev;
        }
        assert!(Instant::now() < deadline, "{what} not seen within {limit:?}; output:\n{}", r.output());
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn of_kind<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["event"] == kind).collect()
}

/// Ends a proxy end with SIGINT as a user's Ctrl-C: exit code 130 and a
/// final `end` line with the counters, which is returned.
pub fn interrupt(r: Running) -> Value {
    r.signal(libc::SIGINT);
    let (st, out, err) = r.finish(Duration::from_secs(10));
    assert_eq!(st.code(), Some(130), "SIGINT ends the proxy with 130: {st}; {err}");
    let end = out.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|e| e["event"] == "end");
    end.unwrap_or_else(|| panic!("no end line after SIGINT: {out}"))
}

/// curl's verdict on SOCKS5 reply 2, "connection not allowed by ruleset"
/// (RFC 1928): exit status 97 (CURLE_PROXY) and the reply code, which curl
/// 7.88 (Debian 12) prints as "Can't complete SOCKS5 connection to HOST. (2)"
/// and later versions may spell out.
pub fn assert_not_allowed(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(97), "curl: {err}");
    assert!(err.contains("not allowed by ruleset") || err.trim_end().ends_with(". (2)"), "curl said: {err}");
}
