//! `--flood`: a real download through the proxy pair, alone and under a
//! flood of idle handshakes and slowloris SOCKS5 clients (see the
//! benchmark's documentation). The flood runs on a thread of this process
//! inside namespace A, on its own tokio runtime.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mptun_tests::http::HttpServer;
use mptun_tests::lab::Lab;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::Running;
use super::{arg, curl, exit_addr, key_file, median, parse_bytes, start_pair};

/// What the flood did, for the report.
#[derive(Default)]
struct FloodStats {
    connects: AtomicU64,
    /// Connections the proxies ended (end of stream or reset).
    ended: AtomicU64,
}

/// A running flood; stopped on drop.
struct Flood {
    stop: Arc<AtomicBool>,
    stats: Arc<FloodStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a flood sends at each end.
struct Attack {
    socks: SocketAddr,
    exit: SocketAddr,
    idle: usize,
    slow: usize,
    renew: Duration,
}

impl Attack {
    fn start(&self, ns: &str) -> Flood {
        let fd = mptun_io::Netns::open(ns).expect("open namespace");
        let (stop, stats) = (Arc::new(AtomicBool::new(false)), Arc::new(FloodStats::default()));
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let (socks, exit, idle, slow, renew) = (self.socks, self.exit, self.idle, self.slow, self.renew);
        let thread = std::thread::spawn(move || {
            // SAFETY: setns on this thread only, with an fd that is open.
            assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let mut set = tokio::task::JoinSet::new();
                for i in 0..idle {
                    for to in [socks, exit] {
                        set.spawn(idle_slot(to, renew, stats2.clone(), i));
                    }
                }
                for i in 0..slow {
                    set.spawn(slowloris(socks, renew, stats2.clone(), i));
                }
                while !stop2.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                set.abort_all();
            });
        });
        Flood { stop, stats, thread: Some(thread) }
    }
}

/// Spreads the slots' first connects over the first second.
fn stagger(i: usize) -> Duration {
    Duration::from_micros((i as u64 * 997) % 1_000_000)
}

/// One idle connection at a time to `to`: connects, sends nothing, and
/// once the proxy ends it connects again (at most once per `renew`).
async fn idle_slot(to: SocketAddr, renew: Duration, stats: Arc<FloodStats>, i: usize) {
    tokio::time::sleep(stagger(i)).await;
    loop {
        let t0 = tokio::time::Instant::now();
        if let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(to)).await {
            stats.connects.fetch_add(1, Ordering::Relaxed);
            let mut b = [0u8; 64];
            while matches!(s.read(&mut b).await, Ok(n) if n > 0) {}
            stats.ended.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep_until(t0 + renew).await;
    }
}

/// A SOCKS5 client that sends its greeting and CONNECT a byte a second
/// (13 bytes: longer than the proxy's 10 s for a handshake), again and
/// again.
async fn slowloris(to: SocketAddr, renew: Duration, stats: Arc<FloodStats>, i: usize) {
    const REQUEST: [u8; 13] = [5, 1, 0, 5, 1, 0, 1, 10, 0, 1, 2, 0x1f, 0x90];
    tokio::time::sleep(stagger(i)).await;
    loop {
        let t0 = tokio::time::Instant::now();
        if let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(to)).await {
            stats.connects.fetch_add(1, Ordering::Relaxed);
            let (mut r, mut w) = s.split();
            let dribble = async {
                for b in REQUEST {
                    if w.write_all(&[b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                std::future::pending::<()>().await
            };
            let mut sink = [0u8; 64];
            let ended = async { while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {} };
            tokio::select! {
                () = dribble => {}
                () = ended => {}
            }
            stats.ended.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep_until(t0 + renew).await;
    }
}

/// The mptun processes in namespace `ns` (a proxy end each here).
fn mptun_pids(ns: &str) -> Vec<u32> {
    let o = Command::new("ip").args(["netns", "pids", ns]).output().expect("ip netns pids");
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "mptun"))
        .collect()
}

/// VmRSS of a process, bytes.
fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next().and_then(|k| k.parse::<u64>().ok()))
        .map_or(0, |kb| kb * 1024)
}

/// CPU time a process has used (user + system), s: fields 14 and 15 of
/// /proc/PID/stat, in clock ticks (after the parenthesised comm, which may
/// hold spaces).
fn cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = s.rsplit_once(')').map_or(vec![], |(_, r)| r.split_whitespace().collect());
    // After the comm: state is field 3, utime 14, stime 15.
    let tick = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (tick(14) + tick(15)) / hz.max(1.0)
}

/// Samples the largest RSS of `pids` while `f` runs; also the CPU time each
/// used meanwhile, s.
fn with_usage<T>(pids: &[u32], f: impl FnOnce() -> T) -> (T, Vec<u64>, Vec<f64>) {
    let cpu0: Vec<f64> = pids.iter().map(|&p| cpu_s(p)).collect();
    let (out, rss) = rss_while(pids, f);
    (out, rss, pids.iter().zip(cpu0).map(|(&p, c)| cpu_s(p) - c).collect())
}

/// Sets its flag when dropped: also when the code it guards panics.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The largest RSS of each of `pids`, sampled every 100 ms while `f` runs.
///
/// The sampler stops however `f` ends: were a failed download (a panic in
/// `f`) to leave it running, the scope would wait for it forever, and the
/// bench would hang with its namespaces and proxies alive instead of
/// unwinding through their drops.
fn rss_while<T>(pids: &[u32], f: impl FnOnce() -> T) -> (T, Vec<u64>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let sampler = sc.spawn(|| {
            let mut max = vec![0u64; pids.len()];
            while !stop.load(Ordering::Relaxed) {
                for (m, &p) in max.iter_mut().zip(pids) {
                    *m = (*m).max(rss(p));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            max
        });
        let out = {
            let _stop = SetOnDrop(&stop);
            f()
        };
        (out, sampler.join().expect("sampler"))
    })
}

/// The last summary a proxy end printed.
fn last_summary(r: &Running) -> Value {
    r.output()
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "summary")
        .unwrap_or(Value::Null)
}

/// Both directions of every path through a token bucket of `rate` (tbf:
/// the kernel's shaper, cheap at these rates; it adds no delay).
fn shape(lab: &Lab, rate: &str) {
    for i in 1..=lab.paths {
        for (ns, dev) in [(lab.a.name(), format!("a{i}")), (lab.b.name(), format!("b{i}"))] {
            let st = Command::new("ip")
                .args(["netns", "exec", ns, "tc", "qdisc", "replace", "dev", &dev, "root", "tbf"])
                .args(["rate", rate, "burst", "256kb", "latency", "20ms"])
                .status()
                .expect("tc");
            assert!(st.success(), "tc tbf on {dev}");
        }
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

pub(super) fn main() {
    let n = parse_bytes(&arg("--bytes").unwrap_or_else(|| "512M".into()));
    let runs: usize = arg("--runs").map_or(3, |r| r.parse().expect("--runs N"));
    let rate = arg("--rate").unwrap_or_else(|| "100mbit".into());
    let idle: usize = arg("--idle").map_or(2000, |r| r.parse().expect("--idle N"));
    let slow: usize = arg("--slow").map_or(100, |r| r.parse().expect("--slow N"));
    let renew = Duration::from_secs_f64(arg("--renew").map_or(10.0, |r| r.parse().expect("--renew SECS")));
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct (the flood holds thousands of sockets).
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let lab = Lab::new("px-flood", 2).unwrap();
    if rate != "0" {
        shape(&lab, &rate);
    }
    let (dir, key) = key_file("flood");
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], 8080))).unwrap();
    let (exit, local) = start_pair(&lab, &key, &["-i", "1"]);
    let pids: Vec<u32> = [mptun_pids(lab.a.name()), mptun_pids(lab.b.name())].concat();
    assert_eq!(pids.len(), 2, "one mptun process per namespace: {pids:?}");
    let attack =
        Attack { socks: "127.0.0.1:1080".parse().unwrap(), exit: exit_addr(&lab).parse().unwrap(), idle, slow, renew };
    let url = |seed: usize| format!("http://10.0.1.2:8080/bytes/{n}/{seed}");
    let (mut alone, mut flooded) = (Vec::new(), Vec::new());
    // CPU s per GiB downloaded, local and exit, per run.
    let (mut cpu_alone, mut cpu_flooded) = (vec![Vec::new(); 2], vec![Vec::new(); 2]);
    let gib = n as f64 / (1u64 << 30) as f64;
    // Before any flood, and from the first flood on (memory a flood left
    // behind shows in the later baselines too).
    let (mut rss_before, mut rss_flood) = (vec![0u64; 2], vec![0u64; 2]);
    let (mut connects, mut ended) = (0, 0);
    let (mut lsum, mut xsum) = (Value::Null, Value::Null);
    for r in 0..runs {
        let (bps, m, cpu) = with_usage(&pids, || curl(&lab, &[], &["--socks5", "127.0.0.1:1080", &url(2 * r)], n));
        alone.push(bps);
        cpu_alone.iter_mut().zip(&cpu).for_each(|(v, c)| v.push(c / gib));
        let seen = if r == 0 { &mut rss_before } else { &mut rss_flood };
        seen.iter_mut().zip(&m).for_each(|(a, &b)| *a = (*a).max(b));
        let f = attack.start(lab.a.name());
        std::thread::sleep(Duration::from_secs(3));
        let started = Instant::now();
        let (bps, m, cpu) = with_usage(&pids, || curl(&lab, &[], &["--socks5", "127.0.0.1:1080", &url(2 * r + 1)], n));
        let secs = started.elapsed().as_secs_f64();
        flooded.push(bps);
        cpu_flooded.iter_mut().zip(&cpu).for_each(|(v, c)| v.push(c / gib));
        rss_flood.iter_mut().zip(&m).for_each(|(a, &b)| *a = (*a).max(b));
        std::thread::sleep(Duration::from_millis(1100));
        (lsum, xsum) = (last_summary(&local), last_summary(&exit));
        let (c, e) = (f.stats.connects.load(Ordering::Relaxed), f.stats.ended.load(Ordering::Relaxed));
        drop(f);
        connects += c;
        ended += e;
        println!(
            "run {}: alone {:.1} Mbit/s, flooded {:.1} Mbit/s ({secs:.1} s; the flood opened {c}, the proxies ended {e})",
            r + 1,
            alone[r] / 1e6,
            bps / 1e6
        );
        // Let the flood's connections drain before the next baseline.
        std::thread::sleep(Duration::from_secs(3));
    }
    drop(local);
    drop(exit);
    let _ = std::fs::remove_dir_all(&dir);
    let (a, f) = (median(alone.clone()), median(flooded.clone()));
    println!("one download of {} MiB through the proxy pair, two paths of {rate} each, median of {runs}:", n >> 20);
    println!("  alone                                                  {:>9.1} Mbit/s", a / 1e6);
    println!("  with {idle} idle connections at each end + {slow} slowloris SOCKS5 {:>9.1} Mbit/s", f / 1e6);
    println!("  ratio flooded / alone = {:.3}", f / a);
    println!(
        "  largest RSS, local / exit: before any flood {:.1} / {:.1} MiB, from the first flood on {:.1} / {:.1} MiB",
        mib(rss_before[0]),
        mib(rss_before[1]),
        mib(rss_flood[0]),
        mib(rss_flood[1])
    );
    println!(
        "  CPU s per GiB downloaded, local / exit (the flood's own work included): alone {:.2} / {:.2}, flooded {:.2} / {:.2}",
        median(cpu_alone[0].clone()),
        median(cpu_alone[1].clone()),
        median(cpu_flooded[0].clone()),
        median(cpu_flooded[1].clone())
    );
    println!("  the flood opened {connects} connections, the proxies ended {ended}");
    for (end, s) in [("local", &lsum), ("exit", &xsum)] {
        println!(
            "  {end} under the flood: {} in handshake, {} evicted, {} failed, {} over budget, budget used {} KiB",
            s["handshakes"],
            s["evicted"],
            s["failed"],
            s["over_budget"],
            s["budget_used"].as_u64().unwrap_or(0) >> 10
        );
    }
    println!("per-run Mbit/s: alone {:?}", alone.iter().map(|x| (x / 1e5).round() / 10.0).collect::<Vec<_>>());
    println!("                flooded {:?}", flooded.iter().map(|x| (x / 1e5).round() / 10.0).collect::<Vec<_>>());
}
