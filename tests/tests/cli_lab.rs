//! `mptun lab` scenarios as a user runs them: the penalty
//! matrix's `sndbuf` case on real packets under `default` and
//! `penalise-guarded`, and the HyStart experiment (legacy exits by delay
//! below the BDP, fixed by ACK train at or above it; the kernel's CUBIC as
//! the anchor, after a crashed run's leftovers of the same name are
//! removed), failover (a path down and back up), fallback to a plain-TCP
//! server, a scenario file (`lab run`: the shared bottleneck), and the
//! handover (mptun and the kernel's MPTCP in one run). Each report carries the simulator's prediction beside the lab's
//! figures. Needs root and linkem: skipped with a reason otherwise, failed
//! when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use mptun_io::testutil::require_netns;
use serde_json::Value;
use support::run;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../netns-scripts");

/// One lab at a time on this host. Every test here measures timing on real
/// packets through linkem, a userspace forwarder: two labs at once on a
/// 2-core machine share its cores with each other's senders and release
/// ACKs milliseconds late (HyStart's ACK train is 2 ms), or cost a BBR run
/// 5 % of its goodput (8.93 against 9.38 Mbit/s alone, measured). A
/// researcher does not run two labs on one host at once; neither do these
/// tests.
static HOST: Mutex<()> = Mutex::new(());

/// The host's lab lock if the lab can run here (root, linkem built);
/// prints why not otherwise. A test that failed while holding it must not
/// stop the others, so a poisoned lock is taken as it is.
fn lab_ready() -> Option<MutexGuard<'static, ()>> {
    if require_netns().is_some() || !support::linkem_built() {
        return None;
    }
    Some(HOST.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

fn name(suffix: &str) -> String {
    format!("lb{}{suffix}", std::process::id() % 100_000)
}

/// `mptun lab ARGS --json --name NAME`, which must succeed and leave no namespace behind.
fn lab_json(args: &[&str], name: &str, limit: Duration) -> (Value, String) {
    let mut all = vec!["lab"];
    all.extend_from_slice(args);
    all.extend(["--json", "--name", name, "--scripts", SCRIPTS]);
    let _teardown = Teardown(name.to_string());
    let out = run(None, &all, limit);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "mptun {}: {}\n{err}", all.join(" "), out.status);
    assert!(support::namespaces_named(name).is_empty(), "namespaces left: {:?}", support::namespaces_named(name));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    (v, err)
}

/// The lab named `.0` torn down on drop (its linkems stopped, its
/// namespaces deleted) even when the test fails or the run was killed
/// before its own teardown.
struct Teardown(String);

impl Drop for Teardown {
    fn drop(&mut self) {
        let state = std::env::temp_dir().join(format!("mptun-lab-{}", self.0));
        let _ = Command::new("bash")
            .arg(format!("{SCRIPTS}/lab/topo.sh"))
            .args(["down", "--name", &self.0, "--state"])
            .arg(&state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(state);
    }
}

fn figure<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["vs_sim"].as_array().expect("vs_sim").iter().find(|f| f["figure"] == name).expect(name)
}

/// The `sndbuf` case (10/3 Mbit/s, no delay, limits 30/20, 64 KiB send
/// buffers): 16 MiB and 80 KiB at once in both directions, both digests
/// intact, both paths used, the simulator's prediction beside the lab's.
#[test]
fn cli_lab_penalise_sndbuf_default_and_guarded() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let csv = std::env::temp_dir().join(format!("mptun-cli-lab-csv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&csv);
    for (policy, suffix) in [("default", "pd"), ("penalise-guarded", "pg")] {
        let mut args = vec!["penalise", "--scenario", "sndbuf", "--policy", policy, "--runs", "1"];
        let csv_arg = csv.to_string_lossy().into_owned();
        if policy == "default" {
            args.extend(["--csv", &csv_arg]);
        }
        let (v, err) = lab_json(&args, &name(suffix), Duration::from_secs(150));
        println!("{policy}: {err}");
        assert_eq!(v["stack"], "mptun");
        assert_eq!(v["policy"], policy);
        assert_eq!(v["sha256_match"], true, "{v:#}");
        let runs = v["per_seed"].as_array().expect("per_seed");
        assert_eq!(runs.len(), 2, "a forward and a reverse run");
        for r in runs {
            assert_eq!(r["sha256_match"], true, "{r}");
            assert_eq!(r["subflows"], 2, "both paths carry the transfer: {r}");
            assert!(r["ofo_queue"].as_u64().unwrap() > 0, "two paths reorder at the receiver: {r}");
            // 16 MiB over 13 Mbit/s of paths takes at least 10.3 s; the 3 Mbit/s path alone 45 s.
            let t = r["runtime_s"].as_f64().unwrap();
            assert!((10.3..45.0).contains(&t), "runtime {t} s: {r}");
        }
        for f in ["runtime_s", "goodput_bps", "ofo_queue"] {
            let x = figure(&v, f);
            let (sim, lab) = (x["sim"].as_f64().unwrap(), x["lab"].as_f64().unwrap());
            assert!(sim > 0.0 && lab > 0.0, "{x}");
            assert!(((lab - sim) / sim - x["delta"].as_f64().unwrap()).abs() < 1e-9, "{x}");
        }
        assert_eq!(v["sim"]["policy"], policy);
        assert_eq!(v["sim"]["seeds"], 1);
        if policy == "default" {
            for r in runs {
                sender_series_reaches_the_end(&csv, r);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&csv);
}

/// `--csv`: the 16 MiB sender's series of run `r` covers the transfer (its
/// subflows' acknowledged bytes add up to the 16 MiB, less what the last
/// 100 ms samples may miss) and, when the client sends, ends no later than
/// the run's runtime: the runtime covers the delivery, not only the
/// sender's last write into its buffer (the series' last sample is taken
/// once everything is acknowledged).
fn sender_series_reaches_the_end(dir: &std::path::Path, r: &Value) {
    let direction = r["direction"].as_str().expect("direction");
    let file = std::fs::read_dir(dir)
        .expect("the --csv directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(&format!("-run1-{direction}.csv")))
        .unwrap_or_else(|| panic!("no {direction} series in {}", dir.display()));
    let text = std::fs::read_to_string(&file).expect("read the series");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("t_s,subflow,cwnd,srtt_us,bytes_acked"), "{}", file.display());
    let mut last_t = 0.0f64;
    let mut acked = std::collections::BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        last_t = f[0].parse().expect("t_s");
        let b: u64 = f[4].parse().expect("bytes_acked");
        let e = acked.entry(f[1].to_string()).or_insert(0);
        *e = b.max(*e);
    }
    assert_eq!(acked.len(), 2, "{direction}: two subflows in {}", file.display());
    let sum: u64 = acked.values().sum();
    assert!(sum >= 15 << 20, "{direction}: the subflows acknowledged {sum} bytes ({})", file.display());
    // The runtime is the client's: only in `forward` is its clock the sender's.
    let runtime = r["runtime_s"].as_f64().unwrap();
    if direction == "forward" {
        assert!(last_t <= runtime, "{direction}: last sample at {last_t} s, after the runtime {runtime} s");
    }
}

/// HyStart on real packets: legacy round start exits by delay below the
/// BDP, the fix by ACK train at or above it (mptun's CUBIC, unpaced, as in
/// the patch); a crashed run's leftover namespace of the same name does not
/// stop the kernel's run, whose CUBIC (with the fix) also exits by train.
///
/// The ACK train needs ACKs no more than 2 ms apart (`hystart_ack_delta`),
/// and the ACKs reach the sender through linkem, a userspace forwarder: on a
/// shared VM it can release them late by milliseconds, SCHED_FIFO
/// notwithstanding (the report's `emulator_release_error_us`), and the fix
/// then often misses its train and leaves slow start by loss. Likewise the
/// legacy delay exit comes at a cwnd that the latency noise moves, not always
/// below the BDP. So the mptun run is tried up to eight times and must show
/// each variant's behaviour once, unless linkem held ACKs back over 2 ms in
/// every attempt (then the result is printed as inconclusive: the host, not
/// the stack, decided it); in every attempt the fix must not leave slow start
/// below the BDP, which noise cannot cause. The kernel's run is tried up to
/// four times and must exit by train once, under the same rule (inconclusive
/// only if linkem was late in all four). The simulator's `hystart` test
/// asserts both exits exactly, every time.
#[test]
fn cli_lab_hystart_legacy_by_delay_fixed_by_train() {
    const MPTUN_ATTEMPTS: u32 = 8;
    let Some(_host) = lab_ready() else {
        return;
    };
    let n = name("hy");
    let mut bdp = 0;
    let mut fixed_by_train = false;
    let mut legacy_below_bdp = false;
    // Attempts in which linkem held some ACK back longer than the train's
    // 2 ms spacing: a missed train there is the host's, not the stack's.
    let mut emulator_late = 0;
    for attempt in 1..=MPTUN_ATTEMPTS {
        let (v, _) = lab_json(&["hystart"], &n, Duration::from_secs(60));
        let vars = v["variants"].as_array().expect("variants");
        let (legacy, fixed) = (&vars[0], &vars[1]);
        bdp = legacy["bdp_packets"].as_u64().unwrap();
        assert_eq!(bdp, 619);
        assert_eq!((legacy["round_start"].as_str(), fixed["round_start"].as_str()), (Some("legacy"), Some("fixed")));
        assert_eq!(v["sim"]["fixed"]["exit_reason"], "train");
        assert!(fixed["vs_sim"].as_array().unwrap().iter().any(|f| f["figure"] == "delivered_bytes"));
        let late_us = v["emulator_release_error_us"]["acks"]["max"].as_f64().expect("the emulator's lateness");
        println!(
            "attempt {attempt}: legacy exited by {} at cwnd {}, fixed by {} at cwnd {}; linkem's ACK release lateness {}",
            legacy["exit_reason"],
            legacy["exit_cwnd"],
            fixed["exit_reason"],
            fixed["exit_cwnd"],
            v["emulator_release_error_us"]["acks"]
        );
        // The fixed round start takes its delay samples from whole rounds:
        // it leaves slow start below the BDP only if the host held ACKs
        // back by more than HyStart's smallest delay threshold (4 ms), for
        // the first samples of a round, which a host busy with the other
        // lab tests can do (linkem's ACK lateness then runs to several ms).
        // Where linkem stayed on time, an early exit is the stack's.
        let noisy = late_us >= 4000.0;
        if !noisy {
            assert!(fixed["exit_cwnd"].as_u64().unwrap() >= bdp, "the fix left slow start below the BDP: {fixed:#}");
        }
        legacy_below_bdp |= legacy["exit_reason"] == "delay" && legacy["exit_cwnd"].as_u64().unwrap() < bdp;
        fixed_by_train |= fixed["exit_reason"] == "train";
        emulator_late += (late_us > 2000.0) as u32;
        if fixed_by_train && legacy_below_bdp {
            break;
        }
    }
    if !(fixed_by_train && legacy_below_bdp) {
        // On a host that delayed linkem's ACKs past the train's spacing in
        // every run, the exits are samples of the host's latency and cannot
        // be judged; anywhere else both must show.
        assert_eq!(
            emulator_late, MPTUN_ATTEMPTS,
            "in {MPTUN_ATTEMPTS} runs, with linkem on time in some: fix by ACK train seen {fixed_by_train}, \
             legacy by delay below the BDP seen {legacy_below_bdp}"
        );
        println!(
            "inconclusive on this host (fix by train seen {fixed_by_train}, legacy below the BDP seen \
             {legacy_below_bdp}): linkem held ACKs back over 2 ms in every run"
        );
    }

    // A run killed before its teardown left a namespace behind.
    let k = name("hk");
    let left = format!("{k}-mid");
    assert!(Command::new("ip").args(["netns", "add", &left]).status().unwrap().success());
    const KERNEL_ATTEMPTS: u32 = 4;
    let mut runs = Vec::new();
    // As for mptun: attempts in which linkem held an ACK back past the
    // train's 2 ms spacing, where the kernel's missed train is the host's.
    let mut kernel_late = 0;
    for attempt in 1..=KERNEL_ATTEMPTS {
        let (v, err) = lab_json(&["hystart", "--stack", "kernel"], &k, Duration::from_secs(60));
        if attempt == 1 {
            assert!(err.contains("leftovers"), "{err}");
        }
        let kernel = v["variants"][0].clone();
        if kernel["exit_reason"] == "train" {
            assert!(kernel["exit_cwnd"].as_u64().unwrap() >= bdp, "{kernel:#}");
            assert!(kernel["server_counters"]["TcpExtTCPHystartTrainDetect"].as_u64() == Some(1), "{kernel:#}");
            return;
        }
        let late_us = v["emulator_release_error_us"]["acks"]["max"].as_f64().expect("the emulator's lateness");
        kernel_late += (late_us > 2000.0) as u32;
        runs.push((kernel, v["emulator_release_error_us"].clone()));
    }
    assert_eq!(
        kernel_late, KERNEL_ATTEMPTS,
        "the kernel's CUBIC never exited by ACK train in {KERNEL_ATTEMPTS} runs, with linkem on time in some: {runs:#?}"
    );
    println!("the kernel's part inconclusive on this host: linkem held ACKs back over 2 ms in every run: {runs:#?}");
}

/// Failover on real packets: path 1 goes down both ways at 5 s and comes
/// back at 15 s (linkem's control socket) during the simulator's 32 MiB
/// duplex workload. The transfer completes intact over the other path, the
/// dead path's data is reinjected, the recovered path carries data again,
/// and goodput stays near the simulator's prediction (within 25 %, room for
/// a loaded host).
#[test]
fn cli_lab_failover_reinjects_and_uses_the_recovered_path() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let (v, err) = lab_json(&["failover"], &name("fo"), Duration::from_secs(150));
    println!("{err}");
    assert_eq!(v["scenario"], "failover");
    assert_eq!(v["sha256_match"], true, "{v:#}");
    assert_eq!(v["subflows"], 2, "{v:#}");
    assert!(v["reinjected_bytes"].as_u64().unwrap_or(0) > 0, "the dead path's data is reinjected: {v:#}");
    assert_eq!(v["recovered_path_used"], true, "{v:#}");
    assert!(v["path0_bytes_at_end"].as_u64() > v["path0_bytes_at_up"].as_u64(), "{v:#}");
    let g = figure(&v, "goodput_bps");
    assert!(g["delta"].as_f64().unwrap().abs() < 0.25, "goodput far from the simulator's: {g}");
}

/// Fallback on real packets: the client offers MPTCP to a plain-TCP kernel
/// server; the connection falls back to TCP on one subflow and the
/// simulator's workload completes intact, near the simulator's goodput.
#[test]
fn cli_lab_fallback_to_a_plain_tcp_server() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let (v, err) = lab_json(&["fallback", "-n", "16M"], &name("fb"), Duration::from_secs(120));
    println!("{err}");
    assert_eq!(v["scenario"], "fallback");
    assert_eq!(v["sha256_match"], true, "{v:#}");
    assert_eq!(v["fallback"], true, "{v:#}");
    assert_eq!(v["subflows"], 1, "{v:#}");
    let g = figure(&v, "goodput_bps");
    assert!(g["delta"].as_f64().unwrap().abs() < 0.25, "goodput far from the simulator's: {g}");
}

/// `lab run` on the shared-bottleneck file, shortened to 16 s: mptun's
/// two-subflow MPTCP connection and the kernel's CUBIC flow through one
/// linkem queue, each intact and each with a share beside the
/// simulator's. The bound is loose (one short run on a shared machine);
/// the 60 s figures are in docs/cc.md.
#[test]
fn cli_lab_run_shared_bottleneck_file() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/shared-bottleneck.toml");
    let csv = std::env::temp_dir().join(format!("mptun-lab-csv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&csv);
    let csv_arg = csv.to_str().expect("a UTF-8 temp dir");
    let args = ["run", file, "--cc", "lia", "--duration", "16s", "--csv", csv_arg];
    let (v, err) = lab_json(&args, &name("rn"), Duration::from_secs(90));
    println!("{err}");
    // The senders' samples: every subflow of both flows, over the run.
    let text = std::fs::read_to_string(csv.join("shared-bottleneck.lab.csv")).expect("--csv wrote its file");
    let _ = std::fs::remove_dir_all(&csv);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("t_s,flow,kind,cc,subflow,cwnd,srtt_us,bytes_acked,pacing_rate_bps,bbr_bw_bps,bbr_min_rtt_us")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let seen: BTreeSet<(&str, &str)> = rows.iter().map(|r| (r[1], r[4])).collect();
    assert_eq!(seen, BTreeSet::from([("0", "0"), ("0", "1"), ("1", "0")]), "flows and subflows sampled");
    let last_t = rows.iter().map(|r| r[0].parse::<f64>().unwrap()).fold(0.0, f64::max);
    assert!(last_t > 12.0, "samples until {last_t} s of a 16 s run");
    assert!(rows.iter().all(|r| r[5].parse::<u64>().unwrap() > 0), "a window of 0 packets");
    assert_eq!(v["scenario"], "shared-bottleneck");
    let flows = v["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 2, "{v:#}");
    assert_eq!((flows[0]["kind"].as_str(), flows[0]["stack"].as_str()), (Some("mptcp"), Some("mptun")));
    assert_eq!((flows[1]["kind"].as_str(), flows[1]["stack"].as_str()), (Some("tcp"), Some("kernel")));
    assert_eq!(flows[0]["subflows"], 2, "both subflows through the one queue: {v:#}");
    let mut shares = 0.0;
    for f in flows {
        assert_eq!(f["sha256_match"], true, "{f}");
        assert!(f["goodput_bps"].as_f64().unwrap() > 1e6, "{f}");
        let (share, sim) = (f["share"].as_f64().unwrap(), f["sim_share"].as_f64().unwrap());
        assert!((share - sim).abs() < 0.3, "lab share {share} far from the simulator's {sim}: {v:#}");
        shares += share;
    }
    assert!((shares - 1.0).abs() < 1e-9);
}

/// `lab run` on a file whose routes cross two links: the OLIA draft's
/// (10, 10) with the server bottleneck (docs/cc.md, "OLIA-A"), shortened to
/// 60 s. Each type-1 user's private path and its access-point path end on
/// one 10 Mbit/s server link, the type-2 users cross the access point to a
/// second server: four linkem paths joined by a router namespace. Every
/// byte the private link and the access point carried for type 1 crosses
/// the server link (linkem's counters balance), so the type-1 users gain
/// nothing from their second path, as in the draft and the simulator;
/// both classes within 10 % (type 1) and 15 % (type 2, one short run) of
/// the simulator's run of the same file.
#[test]
fn cli_lab_run_routes_through_two_links() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/olia-a-server/olia-a-server.toml");
    let (v, err) = lab_json(&["run", file, "--duration", "60s"], &name("mh"), Duration::from_secs(200));
    println!("{err}");
    assert!(err.contains("paths' ends cli-r1,r1-srv,cli-r1,r1-srv"), "{err}");
    let flows = v["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 20, "{v:#}");
    for f in flows {
        assert_eq!(f["sha256_match"], true, "{f}");
    }
    let bytes = |name: &str| -> (f64, f64) {
        let l = v["links"].as_array().expect("links").iter().find(|l| l["name"] == name).expect(name);
        (l["lab_a2b_bytes"].as_f64().unwrap(), l["lab_dropped_queue"].as_f64().unwrap())
    };
    let ((private, _), (server, server_drops), (ap, _), (server2, _)) =
        (bytes("private"), bytes("server"), bytes("ap"), bytes("server2"));
    // Into the router: the private link and the access point; out of it:
    // the server link (less what its queue dropped, frames of at most 1514
    // bytes) and the second server's link.
    let into_server = private + ap - server2;
    let carried = server + 1514.0 * server_drops;
    assert!(
        (carried / into_server - 1.0).abs() < 0.02,
        "server link {carried} B against {into_server} B routed to it: {v:#}"
    );
    assert!(server2 > 0.3 * ap && server > private, "{v:#}");
    let mean = |fs: &[Value], key: &str| fs.iter().map(|f| f[key].as_f64().unwrap()).sum::<f64>() / fs.len() as f64;
    let (t1, t2) = flows.split_at(10);
    assert!(t1.iter().all(|f| f["kind"] == "mptcp" && f["subflows"] == 2), "{v:#}");
    assert!(t2.iter().all(|f| f["kind"] == "tcp"), "{v:#}");
    let (lab1, sim1) = (mean(t1, "goodput_bps"), mean(t1, "sim_goodput_bps"));
    let (lab2, sim2) = (mean(t2, "goodput_bps"), mean(t2, "sim_goodput_bps"));
    println!("type 1: lab {lab1:.0} sim {sim1:.0} bit/s per user; type 2: lab {lab2:.0} sim {sim2:.0}");
    assert!(lab1 < 1.0e6, "a type-1 user above its share of the 10 Mbit/s server link: {lab1}");
    assert!((lab1 / sim1 - 1.0).abs() < 0.10, "type 1: lab {lab1}, sim {sim1}");
    assert!((lab2 / sim2 - 1.0).abs() < 0.15, "type 2: lab {lab2}, sim {sim2}");
}

/// `lab run` on the cross-traffic file, shortened: the unresponsive UDP
/// flow runs on real packets (a kernel UDP socket, on 2 s and off 2 s, at
/// 5 Mbit/s while on) beside the responsive flows, and moves what the
/// simulator's source moves, less what the queue drops.
#[test]
fn cli_lab_run_cross_traffic_with_udp_on_real_packets() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/cross-traffic.toml");
    let (v, err) = lab_json(&["run", file, "--duration", "16s"], &name("ct"), Duration::from_secs(90));
    println!("{err}");
    let flows = v["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 3, "{v:#}");
    let udp = &flows[2];
    assert_eq!((udp["kind"].as_str(), udp["stack"].as_str()), (Some("udp"), Some("kernel")), "{v:#}");
    let (lab, sim) = (udp["goodput_bps"].as_f64().unwrap(), udp["sim_goodput_bps"].as_f64().unwrap());
    // 8 s of measurement: two on periods of 2 s at 5 Mbit/s, 2.5 Mbit/s at most.
    assert!(lab > 1.5e6 && lab <= 2.6e6, "UDP moved {lab} bit/s: {v:#}");
    assert!((lab - sim).abs() < 0.25 * sim, "UDP: lab {lab}, simulator {sim} bit/s");
    for f in flows {
        assert_eq!(f["sha256_match"], true, "{f}");
    }
    let shares: f64 = flows.iter().map(|f| f["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9);
}

/// `lab sched-compare` on real packets, short: BLEST and the kernel's
/// MPTCP with a 256 KiB receive buffer (BLEST keeps clear of the window
/// stall: a fraction of the out-of-order arrivals the kernel's linger-time
/// scheduler has), and 10 objects under BLEST, each row intact and beside
/// the simulator's. The full table is in docs/schedulers.md.
#[test]
fn cli_lab_sched_compare_blest_and_the_kernel() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let args =
        ["sched-compare", "--scheduler", "blest", "--workload", "bulk-256k,objects", "--size", "4M", "--objects", "10"];
    let (v, err) = lab_json(&args, &name("sc"), Duration::from_secs(120));
    println!("{err}");
    let rows = v["rows"].as_array().expect("rows");
    let find = |w: &str, s: &str| {
        rows.iter()
            .find(|r| r["lab"]["workload"] == w && r["lab"]["scheduler"] == s)
            .unwrap_or_else(|| panic!("no {w}/{s}: {v:#}"))
    };
    for r in rows {
        assert_eq!(r["lab"]["complete"], true, "{r}");
        assert!(r["lab"]["goodput_mbps"].as_f64().unwrap() > 1.0, "{r}");
        assert!(r["sim"]["goodput_mbps"].as_f64().unwrap() > 1.0, "{r}");
    }
    let (blest, kernel) = (find("bulk-256k", "blest"), find("bulk-256k", "kernel"));
    assert_eq!(kernel["stack"], "kernel");
    let (b, k) = (blest["lab"]["ofo_queue"].as_u64().unwrap(), kernel["lab"]["ofo_queue"].as_u64().unwrap());
    assert!(b * 3 < k.max(3), "BLEST {b} out-of-order segments, kernel {k}: {v:#}");
    let objects = find("objects", "blest");
    assert!(objects["lab"]["object_p50_ms"].as_f64().unwrap() > 40.0, "an object takes 40 ms at 20 Mbit/s: {objects}");
}

/// The handover on real packets, break-before-make, mptun and the kernel
/// in one run: Wi-Fi's linkem path down at 5 s with its endpoint deleted
/// (mptun's control socket, `ip mptcp endpoint delete`), back at 15 s with
/// it added again. Both stacks lose nothing, keep the backup LTE subflow
/// idle until the loss, let it carry data within a second of it, and use
/// a new Wi-Fi subflow within a second of the return; mptun's stall at the
/// loss stays within twice the kernel's and the simulator's (room for a
/// loaded host), and the simulator's row is first.
#[test]
fn cli_lab_handover_break_before_make_mptun_and_the_kernel() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let (v, err) = lab_json(&["handover", "--mode", "break", "--size", "40M"], &name("ho"), Duration::from_secs(200));
    println!("{err}");
    let rows = v["rows"].as_array().expect("rows");
    let who: Vec<&str> = rows.iter().map(|r| r["who"].as_str().unwrap()).collect();
    assert_eq!(who, ["mptun (sim)", "mptun (lab)", "kernel (lab)"], "{v:#}");
    for r in rows {
        assert_eq!(r["sha256_match"], true, "{r}");
        assert_eq!(r["bytes_lost"], 0, "{r}");
        assert_eq!(r["lte_bytes_at_down"], 0, "the backup subflow is idle before the loss: {r}");
        let takeover = r["lte_takeover_ms"].as_f64().unwrap_or_else(|| panic!("LTE never took over: {r}"));
        assert!(takeover < 1_000.0, "{r}");
        let back = r["wifi_return_ms"].as_f64().unwrap_or_else(|| panic!("Wi-Fi never used again: {r}"));
        // Typically 50-80 ms; a join SYN lost or late when the path comes back
        // costs its 1 s retransmission timeout (a host running the lab tests
        // side by side on two cores can delay it that long).
        assert!(back < 2_500.0, "{r}");
    }
    // Both stacks run CUBIC, whatever the host's default controller (a
    // kernel row that ran the host's bbr once made "the kernel does not
    // stall" look like mptun's fault).
    assert_eq!(v["cc"], "cubic", "{v:#}");
    // A stall in the middle of the outage, on either stack, is LTE's full
    // queue dropping: only a window that reached LTE's BDP + queue (100 +
    // 500 packets) has one; one that stayed well below it has none.
    for r in rows {
        let (at, gap) = (r["longest_gap_at_s"].as_f64().unwrap(), r["longest_gap_ms"].as_f64().unwrap());
        let cwnd = r["lte_max_cwnd"].as_u64().expect("lte_max_cwnd");
        if gap > 500.0 && at > 7.0 && at < 15.0 {
            assert!(cwnd >= 580, "a {gap} ms stall at {at} s with LTE's window at most {cwnd}: {r}");
        }
        if cwnd < 560 {
            assert!(gap < 500.0 || !(7.0..15.0).contains(&at), "LTE's window stayed at {cwnd}, yet: {r}");
        }
    }
    let gap = |i: usize| rows[i]["handover_gap_ms"].as_f64().unwrap();
    assert!(
        gap(1) < 2.0 * gap(2).max(gap(0)) + 100.0,
        "mptun's stall {} ms, kernel's {} ms, sim {} ms",
        gap(1),
        gap(2),
        gap(0)
    );
}

/// mptun's BBR and the kernel's BBR through one bottleneck (20 Mbit/s,
/// 40 ms, 2 BDP): each gets its share (0.4 to 0.6), both intact, and both
/// senders' models read the same path (bandwidth estimate and min RTT).
#[test]
fn cli_lab_bbr_mptun_against_the_kernels_bbr() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/bbr-vs-bbr.toml");
    let (v, err) = lab_json(&["run", file, "--duration", "30s"], &name("bb"), Duration::from_secs(100));
    println!("{err}\n{v:#}");
    let flows = v["flows"].as_array().expect("flows");
    assert_eq!((flows[0]["stack"].as_str(), flows[0]["cc"].as_str()), (Some("mptun"), Some("bbr")));
    assert_eq!((flows[1]["stack"].as_str(), flows[1]["cc"].as_str()), (Some("kernel"), Some("bbr")));
    for f in flows {
        assert_eq!(f["sha256_match"], true, "{f}");
        let share = f["share"].as_f64().unwrap();
        assert!((0.4..=0.6).contains(&share), "share {share}: {f}");
        let bw = f["sender"]["bbr_bw_bps"].as_f64().expect("the sender's BBR bandwidth");
        assert!((5e6..25e6).contains(&bw), "bw {bw}: {f}");
        let mrtt = f["sender"]["bbr_min_rtt_ms"].as_f64().expect("the sender's BBR min RTT");
        assert!((39.0..50.0).contains(&mrtt), "mrtt {mrtt}: {f}");
    }
}

/// BBR alone on 10 Mbit/s, 40 ms, 10 BDP of buffer, mptun's TCP then the
/// kernel's: mptun's median pacing rate and cwnd within 10 % of the
/// kernel's (the kernel's read as `ss -ti` does, TCP_INFO and TCP_CC_INFO).
#[test]
fn cli_lab_bbr_alone_follows_the_kernels_bbr() {
    let Some(_host) = lab_ready() else {
        return;
    };
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/bbr-alone-10.toml");
    let mut medians = Vec::new();
    for stack in ["mptun", "kernel"] {
        let args = ["run", file, "--tcp-stack", stack, "--duration", "24s"];
        let (v, err) = lab_json(&args, &name(&format!("ba{}", &stack[..1])), Duration::from_secs(90));
        println!("{err}\n{v:#}");
        let f = &v["flows"][0];
        assert_eq!((f["stack"].as_str(), f["sha256_match"].as_bool()), (Some(stack), Some(true)), "{f}");
        assert!(f["goodput_bps"].as_f64().unwrap() > 9.0e6, "{f}");
        let s = &f["sender"];
        medians.push((s["pacing_rate_bps"].as_f64().expect("paced"), s["cwnd"].as_f64().unwrap()));
    }
    let ((mp, mc), (kp, kc)) = (medians[0], medians[1]);
    assert!((mp / kp - 1.0).abs() <= 0.10, "pacing rate: mptun {mp}, kernel {kp}");
    assert!((mc / kc - 1.0).abs() <= 0.10, "cwnd: mptun {mc}, kernel {kc}");
}
