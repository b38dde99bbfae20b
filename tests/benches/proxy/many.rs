//! `--concurrent N`: N downloads begun at once through one proxy pair,
//! against one download alone through the same pair, alternating (see the
//! benchmark's documentation). The proxy pair, the bounds it runs with and
//! the client are those of the test `proxy_1000_concurrent_downloads`
//! (tests/tests/proxy_support.rs): the client is one task per download on
//! one thread of this process in namespace A, each download hashed as it
//! arrives and checked against the server's bytes.

use std::net::SocketAddr;
use std::time::Duration;

use mptun_tests::http::HttpServer;

use super::px::{self, Got, Want};
use super::{arg, parse_bytes};

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn mbit(bps: f64) -> f64 {
    (bps / 1e5).round() / 10.0
}

pub(super) fn main() {
    let n: usize = arg("--concurrent").map_or(1000, |v| v.parse().expect("--concurrent N"));
    let largest = parse_bytes(&arg("--bytes").unwrap_or_else(|| "4M".into()));
    let single = parse_bytes(&arg("--single").unwrap_or_else(|| "512M".into()));
    let runs: usize = arg("--runs").map_or(3, |r| r.parse().expect("--runs N"));
    let budget = arg("--memory-budget").unwrap_or_else(|| px::MANY_BUDGET.into());
    let settle = Duration::from_secs_f64(arg("--settle").map_or(65.0, |s| s.parse().expect("--settle SECS")));
    // This process holds the clients' sockets and the HTTP server's.
    let nofile = px::raise_nofile();
    assert!(
        nofile >= 3 * n as u64,
        "RLIMIT_NOFILE: a hard limit of {nofile}, {} descriptors needed (the clients' sockets and the server's)",
        3 * n
    );
    let (lab, _dir, key) = px::lab_with_key("px-many", 2);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], px::HTTP_PORT))).unwrap();
    let limits = px::many_limits(&budget);
    let limits: Vec<&str> = limits.iter().map(String::as_str).collect();
    let exit = px::exit(&lab, &key, &[&["--allow", "10.0.1.2:8080"], &limits[..]].concat());
    let local = px::local(&lab, &key, &px::exit_addr(&lab), &limits);
    let pids = [local.pid(), exit.pid()];
    let rss = |field: &str| pids.map(|p| px::proc_kib(p, field));
    let before = rss("VmRSS");
    let fetch = |wants: &[Want], secs| {
        px::fetch_all(lab.a.name(), px::SOCKS, px::http_dest(), wants, Duration::from_secs(secs))
    };
    // A failed download is reported and counted, and left out of the
    // goodput (with `--memory-budget 1G`, the default, some are refused).
    let failed = std::cell::Cell::new(0);
    let check = |what: &str, wants: &[Want], got: &[Got]| -> Vec<Want> {
        let bad = px::bad_downloads(wants, got);
        if !bad.is_empty() {
            let e: Vec<&str> = bad.iter().take(5).map(|(_, why)| why.as_str()).collect();
            println!("{what}: {} of {} failed or differ, e.g. {e:?}", bad.len(), wants.len());
            failed.set(failed.get() + bad.len());
        }
        let bad: std::collections::HashSet<usize> = bad.into_iter().map(|(i, _)| i).collect();
        wants.iter().enumerate().filter(|(i, _)| !bad.contains(i)).map(|(_, w)| *w).collect()
    };
    let (mut alone, mut together, mut times) = (Vec::new(), Vec::new(), Vec::new());
    // CPU seconds both ends used during the concurrent phases, and their wall time.
    let (mut cpu, mut busy) = ([0.0f64; 2], 0.0);
    for r in 0..runs {
        let one = [Want { n: single, seed: 1 + r as u64 }];
        let (got, _) = fetch(&one, 300);
        assert_eq!(check("the download alone", &one, &got).len(), 1, "the download alone failed");
        alone.push(px::goodput(&one, got[0].end - got[0].start));
        // Distinct objects in every run.
        let wants: Vec<Want> =
            px::many_wants(n, largest).into_iter().map(|w| Want { seed: w.seed + (r * n) as u64, ..w }).collect();
        let cpu0 = pids.map(px::cpu_secs);
        let (got, wall) = fetch(&wants, 600);
        for (c, (p, c0)) in cpu.iter_mut().zip(pids.iter().zip(cpu0)) {
            *c += px::cpu_secs(*p) - c0;
        }
        busy += wall.as_secs_f64();
        let done = check("the concurrent downloads", &wants, &got);
        let (_, t) = px::completion(&got);
        let at_once = px::most_at_once(&got);
        together.push(px::goodput(&done, wall));
        let peak = rss("VmHWM");
        println!(
            "run {}: alone {:.1} Mbit/s; {n} at once {:.1} Mbit/s ({} MiB in {:.2} s), each {:.2} / {:.2} / {:.2} s \
             (min / median / max), {at_once} receiving at once; peak RSS so far local / exit {:.1} / {:.1} MiB",
            r + 1,
            mbit(alone[r]),
            mbit(together[r]),
            done.iter().map(|w| w.n).sum::<u64>() >> 20,
            wall.as_secs_f64(),
            t[0],
            t[t.len() / 2],
            t[t.len() - 1],
            mib(peak[0]),
            mib(peak[1])
        );
        times.extend(t);
    }
    for r in [&local, &exit] {
        px::wait_events(r, "a summary with no relay left", Duration::from_secs(60), |e| {
            px::of_kind(e, "summary").last().is_some_and(|s| s["active"] == 0)
        });
    }
    std::thread::sleep(Duration::from_secs(2));
    let (peak, after) = (rss("VmHWM"), rss("VmRSS"));
    std::thread::sleep(settle);
    let settled = rss("VmRSS");
    let most = |r: &px::support::Running| {
        px::of_kind(&px::events(r), "summary").iter().filter_map(|s| s["active"].as_u64()).max().unwrap_or(0)
    };
    let (most_local, most_exit) = (most(&local), most(&exit));
    let ends: Vec<serde_json::Value> = [local, exit].into_iter().map(px::interrupt).collect();
    times.sort_by(f64::total_cmp);
    let (a, t) = (px::median(&alone), px::median(&together));
    println!(
        "{n} downloads at once of {} to {} MiB (distinct objects, SHA-256 checked) through mptun proxy local -> exit, \
         two unconstrained veth paths, median of {runs}:",
        largest as f64 / 4.0 / (1 << 20) as f64,
        largest as f64 / (1 << 20) as f64
    );
    println!("  one download of {} MiB alone        {:>9.1} Mbit/s", single >> 20, mbit(a));
    println!("  {n} at once, in all                  {:>9.1} Mbit/s", mbit(t));
    println!("  ratio at once / alone = {:.2}", t / a);
    println!(
        "  each download's completion time over all runs: min {:.2} s, median {:.2} s, max {:.2} s",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
    println!("  most relays at once (1 s summaries): local {most_local}, exit {most_exit}");
    println!(
        "  CPU while the downloads ran: local {:.0} %, exit {:.0} % of one core ({:.1} / {:.1} s in {:.1} s)",
        100.0 * cpu[0] / busy,
        100.0 * cpu[1] / busy,
        cpu[0],
        cpu[1],
        busy
    );
    println!(
        "  RSS local / exit: before {:.1} / {:.1} MiB, peak (VmHWM) {:.1} / {:.1} MiB, 2 s after the last download \
         {:.1} / {:.1} MiB, {:.0} s later {:.1} / {:.1} MiB",
        mib(before[0]),
        mib(before[1]),
        mib(peak[0]),
        mib(peak[1]),
        mib(after[0]),
        mib(after[1]),
        settle.as_secs_f64(),
        mib(settled[0]),
        mib(settled[1])
    );
    for (end, e) in ["local", "exit"].iter().zip(&ends) {
        println!(
            "  {end} at the end: {} closed, {} refused, {} failed, {} evicted, {} over budget",
            e["closed"], e["refused"], e["failed"], e["evicted"], e["over_budget"]
        );
    }
    if failed.get() > 0 {
        println!("  {} downloads failed (left out of the goodput)", failed.get());
    }
    println!("per-run Mbit/s: alone {:?}", alone.iter().map(|&x| mbit(x)).collect::<Vec<_>>());
    println!("                at once {:?}", together.iter().map(|&x| mbit(x)).collect::<Vec<_>>());
}
