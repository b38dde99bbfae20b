//! Operator control of a running `mptun serve` through its control socket,
//! against the kernel's MPTCP as the client: `mptun pm endpoint` changes
//! what the next connection announces, `mptun pm monitor` prints the
//! transfer's events, `mptun ss` and `mptun nstat` read the running
//! server; the socket refuses a non-root user, a socket whose mode was
//! changed and an over-long line without disturbing the transfer; and
//! the kernel's counters show each command on the wire (RM_ADDR ->
//! `MPTcpExtRmAddr`, MP_PRIO -> `MPTcpExtMPPrioRx`, ADD_ADDR with a port
//! -> the kernel's join to that port). Needs root: skipped with a reason
//! otherwise, failed when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::{json_document as parse, mptun_bin, run, Running};

/// A private directory for this test's control socket, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("mptun-ctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `mptun CMD --socket SOCK ARGS` (outside any namespace: the socket is a file).
fn ctl(sock: &Path, args: &[&str]) -> std::process::Output {
    let mut a: Vec<&str> = vec![args[0], "--socket", sock.to_str().unwrap()];
    a.extend_from_slice(&args[1..]);
    run(None, &a, Duration::from_secs(15))
}

fn ctl_ok(sock: &Path, args: &[&str]) -> String {
    let out = ctl(sock, args);
    assert!(out.status.success(), "mptun {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The JSON lines `mptun ... --json` printed.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn counter(v: &Value, map: &str, name: &str) -> u64 {
    v["end"]["mptcp"][map][name].as_u64().unwrap_or(0)
}

/// Waits until `f` holds, checking every 50 ms, at most `limit`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One raw line to the socket, the first reply line back.
fn raw(sock: &Path, line: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(line);
    let _ = s.write_all(b"\n");
    let mut r = String::new();
    let _ = BufReader::new(s).read_line(&mut r);
    r.trim_end().to_owned()
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `mptun ss --socket SOCK` as uid/gid 65534 (nobody).
fn ss_as_nobody(sock: &Path) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    Command::new(mptun_bin())
        .args(["ss", "--socket", sock.to_str().unwrap()])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run mptun ss as nobody")
}

/// `mptun serve` in B on its path 1 and `args`, answering on `sock`.
fn serve(lab: &Lab, sock: &Path, args: &[&str]) -> Running {
    let mut a = vec!["serve", "--no-progress", "--path", "dev=mptb1,addr=10.201.0.2/24", "--control"];
    a.push(sock.to_str().unwrap());
    a.extend_from_slice(args);
    Running::spawn_ready(Some(lab.b.name()), &a, "Server listening", Duration::from_secs(10))
}

#[test]
fn cli_pm_endpoint_monitor_ss_and_nstat_drive_and_read_a_running_serve() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clctl", 2).unwrap();
    lab.a.sysctl("net.mptcp.enabled", "1").unwrap();
    lab.mptcp(Side::A, &["limits", "set", "add_addr_accepted", "1", "subflows", "2"]).unwrap();
    let dir = TempDir::new("serve");
    let sock = dir.0.join("serve.sock");
    let s = sock.to_str().unwrap();
    // The second address is no endpoint yet: nothing to announce.
    let server = serve(&lab, &sock, &["--path", "dev=mptb2,addr=10.202.0.2/24,flags=none"]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(ctl_ok(&sock, &["pm", "endpoint", "show"]), "10.201.0.2 id 1 subflow\n10.202.0.2 id 2 none\n");
    // `ip mptcp endpoint` as the operator would: the address becomes a signal endpoint.
    let refused = ctl(&sock, &["pm", "endpoint", "add", "10.202.0.2", "signal"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("in use"), "{refused:?}");
    let foreign = ctl(&sock, &["pm", "endpoint", "add", "10.9.3.2", "signal"]);
    assert!(
        String::from_utf8_lossy(&foreign.stderr).contains(
            "10.9.3.2: address is not local: the stack's addresses are 10.201.0.2 on mptb1, 10.202.0.2 on mptb2"
        ),
        "{foreign:?}"
    );
    ctl_ok(&sock, &["pm", "endpoint", "delete", "id", "2"]);
    assert_eq!(ctl_ok(&sock, &["pm", "endpoint", "add", "10.202.0.2", "signal"]), "id 2\n");
    assert_eq!(ctl_ok(&sock, &["pm", "limits", "show"]), "add_addr_accepted 0 subflows 2\n");

    let monitor = Running::spawn(None, &["pm", "--socket", s, "--json", "monitor"]);
    std::thread::sleep(Duration::from_millis(300));
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let client = Running::spawn(Some(lab.a.name()), &["send", "--kernel", &dst, "-t", "4", "--json"]);

    // While it runs: ss sees the connection and its joined subflow, nstat the announcement.
    let mut conns = Vec::new();
    wait_for("ss shows two subflows", Duration::from_secs(6), || {
        conns = json_lines(&ctl_ok(&sock, &["ss", "--json"]));
        conns.first().and_then(|c| c["subflows"].as_array()).is_some_and(|s| s.len() == 2)
    });
    let c = &conns[0];
    assert_eq!((&c["mode"], &c["state"]), (&Value::from("mptcp"), &Value::from("ESTAB")), "{c}");
    assert!(c["token"].as_str().is_some_and(|t| t.len() == 8), "{c}");
    let joined =
        c["subflows"].as_array().unwrap().iter().find(|s| s["local"].as_str().unwrap().starts_with("10.202.0.2:"));
    assert_eq!(joined.expect("a subflow to the announced address")["loc_id"], 2, "{c}");
    let text = ctl_ok(&sock, &["ss"]);
    assert!(text.contains("subflow 10.202.0.2:") && text.contains("loc-id:2") && text.contains("cwnd:"), "{text}");
    let n = json_lines(&ctl_ok(&sock, &["nstat", "--json", "-a", "MPTcpExt*"]));
    assert!(n[0]["MPTcpExtAddAddrTx"].as_u64().unwrap_or(0) >= 1, "{}", n[0]);
    assert!(n[0]["MPTcpExtMPJoinAckRx"].as_u64().unwrap_or(0) >= 1, "{}", n[0]);
    assert!(n[0].get("TcpInSegs").is_none(), "the pattern filters: {}", n[0]);

    // Hostile clients, the transfer running meanwhile.
    let nobody = ss_as_nobody(&sock);
    assert!(!nobody.status.success());
    assert!(String::from_utf8_lossy(&nobody.stderr).contains("permission denied"), "{nobody:?}");
    set_mode(&sock, 0o666);
    let dir_mode = std::fs::metadata(&dir.0).unwrap().permissions().mode();
    set_mode(&dir.0, 0o755);
    let nobody = ss_as_nobody(&sock);
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("uid 65534 is neither root"),
        "the server checks who connects: {nobody:?}"
    );
    let root = ctl(&sock, &["ss"]);
    assert!(String::from_utf8_lossy(&root.stderr).contains("not 0600"), "a widened socket is refused: {root:?}");
    set_mode(&sock, 0o600);
    set_mode(&dir.0, dir_mode);
    let long = raw(&sock, &vec![b'x'; 10_000]);
    assert!(long.starts_with("error line longer than 4096 bytes"), "{long}");
    assert!(raw(&sock, b"reboot").starts_with("error unknown request"));

    let (st, out, err) = client.finish(Duration::from_secs(30));
    assert!(st.success(), "kernel client: {err}");
    let v = parse("mptun send --kernel", out.as_bytes());
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true, "intact despite the hostile clients");
    assert!(counter(&v, "counters", "MPTcpExtAddAddr") >= 1, "{:#}", v["end"]["mptcp"]);
    assert!(counter(&v, "counters", "MPTcpExtMPJoinSynAckRx") >= 1, "{:#}", v["end"]["mptcp"]);

    // Over: whatever is still listed is not shown as established.
    let after = json_lines(&ctl_ok(&sock, &["ss", "--json"]));
    assert!(after.iter().all(|c| c["state"] != "ESTAB"), "{after:?}");
    // The monitor printed the transfer's events in order.
    wait_for("the monitor saw the close", Duration::from_secs(10), || monitor.output().contains("\"closed\""));
    let events: Vec<Value> = json_lines(&monitor.output());
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("no {k}: {kinds:?}"));
    assert!(pos("created") < pos("established") && pos("established") < pos("sub-established"), "{kinds:?}");
    assert!(pos("sub-established") < pos("closed"), "{kinds:?}");
    let created = &events[pos("created")];
    assert_eq!(created["server_side"], true);
    assert!(created["line"].as_str().unwrap().starts_with("[         CREATED] token="), "{created}");
    drop(monitor);
    // Interrupted, the server removes its socket (killed, it would leave
    // a stale one, which the next server on that path replaces).
    server.signal(libc::SIGINT);
    server.wait(Duration::from_secs(10));
    assert!(!sock.exists(), "the socket is removed");
}

/// A running `mptun serve` with a `signal` second path and a kernel client
/// that joins it; mid-transfer the operator changes the endpoint to backup
/// (MP_PRIO), announces a third address with a port (the kernel joins
/// that port), then deletes the second endpoint (RM_ADDR: the kernel
/// closes its subflow) and adds a port endpoint in its place (the kernel
/// joins its port). The kernel's counters show each.
#[test]
fn cli_pm_commands_reach_the_kernel_mp_prio_rm_addr_and_add_addr_with_a_port() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clctk", 2).unwrap();
    lab.a.sysctl("net.mptcp.enabled", "1").unwrap();
    lab.mptcp(Side::A, &["limits", "set", "add_addr_accepted", "3", "subflows", "3"]).unwrap();
    // The default place, PID.sock in this test's MPTUN_CONTROL_DIR (which
    // the support module gives every mptun it starts): `ss` finds it alone.
    let server = Running::spawn_ready(
        Some(lab.b.name()),
        &["serve", "--no-progress", "-1", "--json", "--subflows", "4", "--path", "dev=mptb1,addr=10.201.0.2/24"]
            .into_iter()
            .chain(["--path", "dev=mptb2,addr=10.202.0.2/24,signal"])
            .collect::<Vec<_>>(),
        "Server listening",
        Duration::from_secs(10),
    );
    let sock = support::control_dir().join(format!("{}.sock", server.pid()));
    assert!(sock.exists(), "{} missing", sock.display());
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let client = Running::spawn(Some(lab.a.name()), &["send", "--kernel", &dst, "-t", "8", "--json"]);
    let mut token = String::new();
    wait_for("the join to the signal path", Duration::from_secs(6), || {
        let out = run(None, &["ss", "--json"], Duration::from_secs(15));
        assert!(out.status.success(), "ss without --socket: {}", String::from_utf8_lossy(&out.stderr));
        let conns = json_lines(&String::from_utf8_lossy(&out.stdout));
        let Some(c) = conns.first() else { return false };
        token = c["token"].as_str().unwrap_or("").to_owned();
        c["subflows"].as_array().is_some_and(|s| s.len() == 2)
    });
    // MP_PRIO: the endpoint becomes backup.
    ctl_ok(&sock, &["pm", "endpoint", "change", "id", "2", "backup"]);
    // ADD_ADDR with a port, on this connection (the userspace PM's announce):
    // the kernel joins 10.201.0.2:7000 (its path 1, a second subflow there).
    ctl_ok(&sock, &["pm", "announce", "token", &token, "id", "7", "10.201.0.2", "port", "7000"]);
    wait_for("the join to port 7000", Duration::from_secs(6), || {
        let conns = json_lines(&ctl_ok(&sock, &["ss", "--json"]));
        conns.first().and_then(|c| c["subflows"].as_array()).is_some_and(|s| {
            s.iter().any(|f| f["local"].as_str().is_some_and(|l| l.ends_with(":7000")) && f["state"] == "Established")
        })
    });
    // RM_ADDR: the second endpoint is deleted.
    let deleted = json_lines(&ctl_ok(&sock, &["pm", "--json", "endpoint", "delete", "id", "2"]));
    assert_eq!(deleted[0]["addr"], "10.202.0.2");
    wait_for("the kernel closed its subflow to 10.202.0.2", Duration::from_secs(6), || {
        let conns = json_lines(&ctl_ok(&sock, &["ss", "--json"]));
        conns.first().and_then(|c| c["subflows"].as_array()).is_some_and(|s| {
            !s.iter().any(|f| {
                f["local"].as_str().is_some_and(|l| l.starts_with("10.202.0.2:")) && f["state"] == "Established"
            })
        })
    });
    // A port endpoint (`ip mptcp endpoint add ADDR port P signal`): announced
    // with its port on the live connection, and the kernel joins it there.
    assert_eq!(ctl_ok(&sock, &["pm", "endpoint", "add", "10.202.0.2", "port", "7001", "signal"]), "id 2\n");
    assert!(ctl_ok(&sock, &["pm", "endpoint", "show"]).contains("10.202.0.2 port 7001 id 2 signal"));
    wait_for("the join to port 7001", Duration::from_secs(6), || {
        let conns = json_lines(&ctl_ok(&sock, &["ss", "--json"]));
        conns
            .first()
            .and_then(|c| c["subflows"].as_array())
            .is_some_and(|s| s.iter().any(|f| f["local"] == "10.202.0.2:7001" && f["state"] == "Established"))
    });
    let (st, out, err) = client.finish(Duration::from_secs(30));
    assert!(st.success(), "kernel client: {err}");
    let v = parse("mptun send --kernel", out.as_bytes());
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
    let k = |n: &str| counter(&v, "counters", n);
    assert!(k("MPTcpExtMPPrioRx") >= 1, "MP_PRIO reached the kernel: {:#}", v["end"]["mptcp"]["counters"]);
    assert!(k("MPTcpExtRmAddr") >= 1, "RM_ADDR reached the kernel: {:#}", v["end"]["mptcp"]["counters"]);
    assert!(k("MPTcpExtPortAdd") >= 2, "two announcements with a port: {:#}", v["end"]["mptcp"]["counters"]);
    assert!(k("MPTcpExtMPJoinPortSynAckRx") >= 2, "joins to both ports: {:#}", v["end"]["mptcp"]["counters"]);
    assert!(k("MPTcpExtAddAddr") >= 3, "the three announcements: {:#}", v["end"]["mptcp"]["counters"]);
    assert!(k("MPTcpExtMPJoinSynAckRx") >= 3, "the three joins: {:#}", v["end"]["mptcp"]["counters"]);
    let (st, _, err) = server.finish(Duration::from_secs(15));
    assert!(st.success(), "mptun serve: {err}");
}
