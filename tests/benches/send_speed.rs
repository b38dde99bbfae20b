//! Whether `mptun send` is the bottleneck of its own measurement: over two
//! unconstrained veth paths between two namespaces,
//! `iperf3` over the kernel's MPTCP (`mptcpize run` at both ends) against
//! `mptun send --kernel` / `mptun serve --kernel` on the same kernel
//! connection with the integrity check on (SHA-256, the default, and
//! `--hash blake3` and `--hash xxh3`), and `mptun send` over mptun's own stack; optionally
//! the same rows for an older `mptun` (`--before PATH`), so a change is
//! measured against its baseline in the same run. Rounds are interleaved
//! (every row once per round) and each figure is the median of the rounds.
//! Needs root, iperf3 and mptcpize (mptcpd's tool), and release builds:
//!
//! ```sh
//! cargo build --release -p mptun-cli
//! cargo bench -p mptun-tests --bench send_speed -- --time 5 --runs 3 [--before OLD/mptun] [--nice -10]
//! ```
//!
//! `--bin PATH` is the build measured (default `target/release/mptun`),
//! `--case NAME` goes into the namespaces' names (`mpt-NAME-...`), `--only
//! TEXT` keeps the iperf3 row and the rows whose label has TEXT.
//! `--nice N` runs every tool of every row under `nice -n N` (the same
//! for all rows): on a shared machine it keeps other load from deciding
//! which row wins. `--cc NAME` sets the kernel's congestion control in
//! both namespaces (default: the host's, inherited at their creation;
//! printed with the figures): it decides the baseline, BBR without fq
//! pacing itself far below what CUBIC moves on the same paths.
//! The load average is printed with the figures. Prints
//! figures and ratios, asserts nothing about speed; it fails only when a
//! transfer does (a tool erroring, or a digest mismatch).

#[path = "../tests/cli_support.rs"]
mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::Running;

fn arg(name: &str) -> Option<String> {
    let a: Vec<String> = std::env::args().collect();
    a.iter().position(|x| x == name).and_then(|i| a.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or("?".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// How every tool is started: in a namespace, under `nice` if asked.
struct Runner {
    nice: Option<String>,
}

impl Runner {
    fn command(&self, ns: &str, prog: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        if let Some(n) = &self.nice {
            c.args(["nice", "-n", n]);
        }
        c.args(prog);
        c
    }

    /// Starts a server and returns once a line of its output has `ready`.
    fn server(&self, ns: &str, prog: &[&str], ready: &str) -> Running {
        Running::start_command(self.command(ns, prog), &prog.join(" "), ready, Duration::from_secs(15))
    }

    /// Runs a client to completion; its stdout as one JSON document.
    fn client(&self, ns: &str, prog: &[&str]) -> Value {
        let out = self.command(ns, prog).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{prog:?}: {e}"));
        assert!(
            out.status.success(),
            "{prog:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{prog:?}: not JSON ({e})"))
    }
}

/// One figure: goodput (bit/s) and the two ends' CPU (% of one core).
struct Figure {
    bps: f64,
    cpu: f64,
}

fn cpu_of(v: &Value) -> f64 {
    let c = &v["end"]["cpu_utilization_percent"];
    c["host_total"].as_f64().unwrap_or(0.0) + c["remote_total"].as_f64().unwrap_or(0.0)
}

fn iperf3(r: &Runner, lab: &Lab, secs: &str) -> Figure {
    let srv = r.server(
        lab.b.name(),
        &["mptcpize", "run", "iperf3", "-s", "-1", "-p", "5301", "--forceflush"],
        "Server listening",
    );
    let dst = lab.kernel_addr(Side::B, 1).to_string();
    let v = r.client(lab.a.name(), &["mptcpize", "run", "iperf3", "-c", &dst, "-p", "5301", "-t", secs, "-J"]);
    let _ = srv.wait(Duration::from_secs(15));
    Figure {
        bps: v["end"]["sum_received"]["bits_per_second"].as_f64().expect("iperf3's sum_received"),
        cpu: cpu_of(&v),
    }
}

/// `mptun send` against `mptun serve` of the same binary, on the kernel's
/// MPTCP or on mptun's stack.
fn mptun(r: &Runner, lab: &Lab, bin: &str, kernel: bool, hash: &str, secs: &str) -> Figure {
    let (srv_args, dst, topo): (Vec<&str>, String, Vec<&str>) = if kernel {
        (
            vec!["serve", "--kernel", "-1", "-p", "5302"],
            format!("{}:5302", lab.kernel_addr(Side::B, 1)),
            vec!["--kernel"],
        )
    } else {
        (
            vec!["serve", "--topology", "lab-b:1", "-1", "-p", "5303"],
            format!("{}:5303", lab.mptun_addr(Side::B, 1)),
            vec!["--topology", "lab-a:2"],
        )
    };
    let mut sargs = vec![bin];
    sargs.extend(srv_args);
    let srv = r.server(lab.b.name(), &sargs, "Server listening");
    let mut args = vec![bin, "send", dst.as_str(), "-t", secs, "--json"];
    args.extend(topo);
    if hash != "sha256" {
        args.extend(["--hash", hash]);
    }
    let v = r.client(lab.a.name(), &args);
    let _ = srv.wait(Duration::from_secs(15));
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true, "{args:?}: digests differ: {}", v["end"]["mptcp"]);
    Figure { bps: v["end"]["sum_received"]["bits_per_second"].as_f64().expect("bits_per_second"), cpu: cpu_of(&v) }
}

/// What one core does alone, GB/s: making the pattern, SHA-256 (sha2,
/// SHA-NI where the CPU has it) and BLAKE3 (its SIMD) over 256 KiB blocks,
/// as the data threads do. Each end of a test needs one hash pass per byte,
/// so these bound what the check lets through on a machine this size.
fn one_core() -> (f64, f64, f64, f64) {
    use sha2::Digest;
    let mut buf = vec![0u8; 256 << 10];
    let n = 1024; // 256 MiB
    let mut rate = |f: &mut dyn FnMut(&mut [u8])| {
        let t = std::time::Instant::now();
        for _ in 0..n {
            f(&mut buf);
        }
        (n * buf.len()) as f64 / t.elapsed().as_secs_f64() / 1e9
    };
    let mut p = mptun::pattern::Pattern::new(1);
    let fill = rate(&mut |b| p.fill(b));
    let mut h = sha2::Sha256::new();
    let sha = rate(&mut |b| h.update(&*b));
    let mut h3 = blake3::Hasher::new();
    let b3 = rate(&mut |b| {
        h3.update(b);
    });
    let mut hx = twox_hash::XxHash3_128::new();
    let xx = rate(&mut |b| hx.write(b));
    std::hint::black_box((h.finalize(), h3.finalize(), hx.finish_128()));
    (fill, sha, b3, xx)
}

fn main() {
    if require_netns().is_some() {
        return;
    }
    let have =
        |t: &[&str]| Command::new(t[0]).args(&t[1..]).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !have(&["iperf3", "--version"]) || !have(&["mptcpize", "--help"]) {
        println!("skipped: iperf3 and mptcpize (mptcpd) are needed");
        return;
    }
    let secs = arg("--time").unwrap_or_else(|| "5".into());
    let runs: usize = arg("--runs").map_or(3, |r| r.parse().expect("--runs N"));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = arg("--bin").unwrap_or_else(|| root.join("target/release/mptun").display().to_string());
    assert!(std::path::Path::new(&bin).exists(), "{bin} not built: cargo build --release -p mptun-cli");
    let before = arg("--before");
    let runner = Runner { nice: arg("--nice") };
    let lab = Lab::new(&arg("--case").unwrap_or_else(|| "send-speed".into()), 2).unwrap();
    lab.kernel_mptcp(Side::A, true).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    // `/proc/sys/net` is the namespace's own as seen from inside it.
    let cc_file = "/proc/sys/net/ipv4/tcp_congestion_control";
    if let Some(cc) = arg("--cc") {
        for ns in [lab.a.name(), lab.b.name()] {
            let ok = Command::new("ip")
                .args(["netns", "exec", ns, "sh", "-c", &format!("echo {cc} > {cc_file}")])
                .status()
                .is_ok_and(|s| s.success());
            // A namespace may only pick one the host allows (EIO otherwise).
            assert!(
                ok,
                "cannot set {cc} in {ns}'s {cc_file}: is it in the host's \
                 net.ipv4.tcp_allowed_congestion_control (`cat /proc/sys/net/ipv4/tcp_allowed_congestion_control`)?"
            );
        }
    }
    let cc_of = |ns: &str| {
        let o = Command::new("ip").args(["netns", "exec", ns, "cat", cc_file]).output().expect("ip netns exec");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let cc = cc_of(lab.a.name());
    assert_eq!(cc, cc_of(lab.b.name()), "both ends run the same congestion control");
    // Rows: (label, what runs it).
    type Row<'a> = (String, Box<dyn Fn() -> Figure + 'a>);
    let mut rows: Vec<Row> =
        vec![("iperf3 -c (mptcpize run, kernel MPTCP)".into(), Box::new(|| iperf3(&runner, &lab, &secs)))];
    let mut add = |label: &str, b: &str| {
        let b = b.to_owned();
        // An older build (`--before`) may lack a hash: its rows are left out.
        let help = Command::new(&b).args(["send", "--help"]).output().map(|o| o.stdout).unwrap_or_default();
        let help = String::from_utf8_lossy(&help).into_owned();
        for (what, kernel, hash) in [
            ("--kernel", true, "sha256"),
            ("--kernel --hash blake3", true, "blake3"),
            ("--kernel --hash xxh3", true, "xxh3"),
            ("(mptun's stack)", false, "sha256"),
            ("(mptun's stack) --hash blake3", false, "blake3"),
            ("(mptun's stack) --hash xxh3", false, "xxh3"),
        ] {
            if hash != "sha256" && !help.contains(hash) {
                continue;
            }
            let (b, r, l, s) = (b.clone(), &runner, &lab, &secs);
            rows.push((format!("{label}: mptun send {what}"), Box::new(move || mptun(r, l, &b, kernel, hash, s))));
        }
    };
    if let Some(b) = &before {
        add("before", b);
    }
    add("this build", &bin);
    // `--only TEXT`: the iperf3 row and the rows whose label has TEXT.
    if let Some(only) = arg("--only") {
        let mut first = true;
        rows.retain(|(label, _)| std::mem::take(&mut first) || label.contains(&only));
    }
    let (fill, sha, b3, xx) = one_core();
    let load0 = load();
    let mut figs: Vec<Vec<Figure>> = rows.iter().map(|_| Vec::new()).collect();
    for round in 0..runs {
        for (i, (label, run)) in rows.iter().enumerate() {
            let f = run();
            println!("round {round}: {label:<52} {:>7.2} Gbit/s  cpu {:>4.0} %  (load {})", f.bps / 1e9, f.cpu, load());
            figs[i].push(f);
        }
    }
    println!(
        "\ntwo unconstrained veth paths, kernel congestion control {cc}, {secs} s per test, median of {runs} interleaved round(s){}; load average before: {load0}, after: {}",
        runner.nice.as_ref().map_or(String::new(), |n| format!(", every tool at nice {n}")),
        load()
    );
    println!("  one core alone, GB/s: pattern {fill:.1}, SHA-256 {sha:.2}, BLAKE3 {b3:.2}, XXH3-128 {xx:.2} (before the rounds)");
    let base = median(figs[0].iter().map(|f| f.bps).collect());
    println!("  {:<52} {:>8} {:>9} {:>13} {:>10}", "", "Gbit/s", "/ iperf3", "CPU % (both)", "CPU s/GiB");
    for ((label, _), f) in rows.iter().zip(&figs) {
        let bps = median(f.iter().map(|f| f.bps).collect());
        let cpu = median(f.iter().map(|f| f.cpu).collect());
        // Both processes' CPU time (getrusage: user and system, the
        // kernel's work in their context included) per GiB delivered.
        let per_gib = median(f.iter().map(|f| f.cpu / 100.0 * 8.0 * f64::from(1u32 << 30) / f.bps).collect());
        println!("  {label:<52} {:>8.2} {:>9.2} {cpu:>13.0} {per_gib:>10.2}", bps / 1e9, bps / base);
    }
}
