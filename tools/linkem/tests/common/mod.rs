//! Shared scaffolding for the netns tests: a topology built by `netns-scripts/lab/topo.sh` and
//! torn down by a Drop guard, threads that run inside a namespace, UDP probes.
#![allow(dead_code)]

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Whether the netns tests can run here. Not root: skip with a reason, unless CI demands them.
pub fn netns_available(test: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let have_ip = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    // linkem forwards frames as they are: with checksum offload left on by a
    // missing ethtool, UDP and TCP arrive with partial checksums and are
    // dropped by the receiver, so these tests cannot mean anything.
    let have_ethtool = Command::new("ethtool").arg("--version").output().is_ok_and(|o| o.status.success());
    let why = if !root {
        "not root"
    } else if !have_ip {
        "iproute2 (`ip`) not installed"
    } else if !have_ethtool {
        "ethtool not installed (apt-get install ethtool: linkem needs offloads off)"
    } else {
        return true;
    };
    if std::env::var("MPTUN_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: MPTUN_REQUIRE_NETNS=1 but {why}");
    }
    eprintln!("{test}: skipped: {why}");
    false
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A client — linkem — server topology; deleted (linkem stopped, namespaces removed) on drop,
/// including when the test panics.
pub struct Topo {
    pub name: String,
    pub state: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Topo {
    /// Builds a topology with one path per spec (netem-style; `UP|DOWN` for asymmetric).
    pub fn up(tag: &str, specs: &[&str]) -> Topo {
        Self::up_with(tag, specs, &[])
    }

    /// As [`Topo::up`], with extra `topo.sh up` arguments (e.g. `--bridge`, `--no-mptcp`).
    pub fn up_with(tag: &str, specs: &[&str], extra: &[&str]) -> Topo {
        let name = format!("lk{}{}{}", tag, std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let state = std::env::temp_dir().join(format!("linkem-test-{name}"));
        let topo = Topo { name: name.clone(), state: state.clone() };
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("netns-scripts/lab/topo.sh"))
            .args(["up", "--name", &name, "--state"])
            .arg(&state)
            .args(["--linkem", env!("CARGO_BIN_EXE_linkem")]);
        for s in specs {
            cmd.args(["--path", s]);
        }
        cmd.args(extra);
        let out = cmd.output().expect("run topo.sh");
        eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "topo.sh up failed");
        topo
    }

    pub fn cli(&self) -> String {
        format!("{}-cli", self.name)
    }
    pub fn mid(&self) -> String {
        format!("{}-mid", self.name)
    }
    pub fn srv(&self) -> String {
        format!("{}-srv", self.name)
    }

    /// Sends a control command to path `i`'s linkem; panics on an `error` reply.
    pub fn ctl(&self, i: usize, command: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .arg("ctl")
            .arg(self.state.join(format!("path{i}.sock")))
            .args(command.split_whitespace())
            .output()
            .expect("linkem ctl");
        let reply = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(out.status.success(), "ctl `{command}`: {reply} {}", String::from_utf8_lossy(&out.stderr));
        reply
    }

    pub fn stats(&self, i: usize) -> serde_json::Value {
        serde_json::from_str(&self.ctl(i, "stats")).expect("stats JSON")
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("netns-scripts/lab/topo.sh"))
            .args(["down", "--name", &self.name, "--state"])
            .arg(&self.state)
            .output();
        // Belt and braces if the script itself failed.
        for ns in [self.cli(), self.mid(), self.srv()] {
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        }
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// Runs `f` on a thread that has entered network namespace `ns`; sockets it creates live there.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on a namespace fd; it affects only this thread.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Sends `n` datagrams carrying a big-endian u64 sequence number, paced at `pps`.
pub fn udp_send(ns: &str, dst: SocketAddr, n: u64, pps: u64, size: usize) -> std::thread::JoinHandle<u64> {
    in_netns(ns, move || {
        let bind: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().unwrap();
        let s = UdpSocket::bind(bind).unwrap();
        s.connect(dst).unwrap();
        let mut buf = vec![0u8; size.max(8)];
        let start = Instant::now();
        let mut sent = 0;
        for i in 0..n {
            buf[..8].copy_from_slice(&i.to_be_bytes());
            // A full socket buffer (ENOBUFS) must not count as a link loss: retry.
            while s.send(&buf).is_err() {
                std::thread::sleep(Duration::from_micros(50));
            }
            sent += 1;
            if i % 16 == 15 {
                let due = start + Duration::from_secs_f64((i + 1) as f64 / pps as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
        }
        sent
    })
}

/// Receives datagrams on `bind` until `idle` passes without one (after the first), returning
/// the sequence numbers in arrival order. The socket is bound before this returns.
pub fn udp_collect(ns: &str, bind: SocketAddr, idle: Duration) -> std::thread::JoinHandle<Vec<u64>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_netns(ns, move || {
        let s = socket2::Socket::new(
            if bind.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 },
            socket2::Type::DGRAM,
            None,
        )
        .unwrap();
        // Plain SO_RCVBUF is capped near 416 KB, some 10 ms of these datagrams at 40,000 a
        // second: a receiver descheduled that long would drop at its socket what the link
        // model delivered, and the test would count it as the model's loss.
        linkem::packet::force_recv_buffer(std::os::fd::AsRawFd::as_raw_fd(&s), 16 << 20).unwrap();
        s.bind(&bind.into()).unwrap();
        let s: UdpSocket = s.into();
        tx.send(()).unwrap();
        // The first datagram may legitimately never come (a link that is down).
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut seqs = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = s.recv(&mut buf) {
            if n >= 8 {
                seqs.push(u64::from_be_bytes(buf[..8].try_into().unwrap()));
            }
            s.set_read_timeout(Some(idle)).unwrap();
        }
        seqs
    });
    rx.recv().expect("receiver bound");
    h
}

/// Packets that arrived after one with a higher sequence number.
pub fn inversions(seqs: &[u64]) -> usize {
    let mut max = None;
    let mut n = 0;
    for &s in seqs {
        if max.is_some_and(|m| s < m) {
            n += 1;
        }
        max = max.max(Some(s));
    }
    n
}

/// The `q` quantile of `v` (sorted in place).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}
