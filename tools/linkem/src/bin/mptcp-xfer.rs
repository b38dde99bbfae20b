//! `mptcp-xfer`: a bulk transfer over kernel MPTCP (IPPROTO_MPTCP) in both directions at once,
//! the lab's stand-in for the selftests' `mptcp_connect`.
//!
//! Each side sends `--send` bytes of a deterministic pseudo-random stream (so no files are
//! needed and the peer can check integrity) while receiving everything the other side sends, and
//! prints one JSON line: runtime, bytes, SHA-256 of both streams, subflow count. Buffer sizes are
//! set before connect/listen, as `SO_SNDBUF`/`SO_RCVBUF` must be to pin the window.
//!
//! Like `mptcp_connect`, a side that has sent everything waits (`--linger-ms`, default 200, or
//! until the peer's stream ended) before its DATA_FIN: once the connection leaves ESTABLISHED the
//! path manager creates no more subflows, so the small transfer would otherwise finish before the
//! joins and the large one would run on one path.
//!
//! ```text
//! mptcp-xfer server --bind 0.0.0.0:5000 --send 81920 [--sndbuf N] [--rcvbuf N] [--linger-ms 200]
//! mptcp-xfer client --connect 10.0.1.2:5000 --send 16777216 [...]
//! ```

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const IPPROTO_MPTCP: i32 = 262;
const SOL_MPTCP: i32 = 284;
const MPTCP_INFO: i32 = 1;

struct Opts {
    role: String,
    addr: SocketAddr,
    send: u64,
    seed: u64,
    sndbuf: Option<usize>,
    rcvbuf: Option<usize>,
    wait_subflows: u8,
    wait_ms: u64,
    linger_ms: u64,
    tcp: bool,
    timeout_s: u64,
    /// Congestion control by socket option: a namespace's sysctl may only pick from the host's
    /// `tcp_allowed_congestion_control`, a privileged socket may use any available one.
    cc: Option<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: mptcp-xfer server --bind ADDR:PORT | client --connect ADDR:PORT\n  [--send BYTES] [--seed N] \
         [--sndbuf BYTES] [--rcvbuf BYTES] [--wait-subflows N] [--wait-ms MS] [--linger-ms MS] [--cc NAME] [--tcp] [--timeout S]"
    );
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut a = std::env::args().skip(1);
    let role = a.next().unwrap_or_else(|| usage());
    if role != "server" && role != "client" {
        usage();
    }
    let mut o = Opts {
        role,
        addr: "0.0.0.0:5000".parse().unwrap(),
        send: 0,
        seed: 0,
        sndbuf: None,
        rcvbuf: None,
        wait_subflows: 0,
        wait_ms: 500,
        linger_ms: 200,
        tcp: false,
        timeout_s: 120,
        cc: None,
    };
    while let Some(k) = a.next() {
        if k == "--tcp" {
            o.tcp = true;
            continue;
        }
        let v = a.next().unwrap_or_else(|| usage());
        let num = |v: &str| v.parse::<u64>().unwrap_or_else(|_| usage());
        match k.as_str() {
            "--bind" | "--connect" => o.addr = v.parse().unwrap_or_else(|_| usage()),
            "--send" => o.send = num(&v),
            "--seed" => o.seed = num(&v),
            "--sndbuf" => o.sndbuf = Some(num(&v) as usize),
            "--rcvbuf" => o.rcvbuf = Some(num(&v) as usize),
            "--wait-subflows" => o.wait_subflows = num(&v).min(255) as u8,
            "--wait-ms" => o.wait_ms = num(&v),
            "--linger-ms" => o.linger_ms = num(&v),
            "--timeout" => o.timeout_s = num(&v),
            "--cc" => o.cc = Some(v),
            _ => usage(),
        }
    }
    if o.seed == 0 {
        // Different default streams per role so a reflected stream cannot pass the check.
        o.seed = if o.role == "client" { 1 } else { 2 };
    }
    o
}

fn socket(o: &Opts) -> std::io::Result<Socket> {
    let proto = if o.tcp { Protocol::TCP } else { Protocol::from(IPPROTO_MPTCP) };
    let s = Socket::new(Domain::for_address(o.addr), Type::STREAM, Some(proto))?;
    if let Some(b) = o.sndbuf {
        s.set_send_buffer_size(b)?;
    }
    if let Some(b) = o.rcvbuf {
        s.set_recv_buffer_size(b)?;
    }
    if let Some(cc) = &o.cc {
        s.set_tcp_congestion(cc.as_bytes())?;
    }
    Ok(s)
}

/// Subflows of the connection: 1 + the joined ones (`mptcpi_subflows`, the first byte of
/// `struct mptcp_info`, counts only those); 1 for plain TCP or a fallback.
fn subflows(s: &TcpStream) -> u8 {
    use std::os::fd::AsRawFd;
    let mut info = [0u8; 64];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes; the kernel writes at most that much.
    let r = unsafe {
        libc::getsockopt(s.as_raw_fd(), SOL_MPTCP, MPTCP_INFO, info.as_mut_ptr() as *mut libc::c_void, &mut len)
    };
    if r == 0 && len > 0 {
        info[0].saturating_add(1)
    } else {
        1
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn run(o: Opts) -> std::io::Result<String> {
    let start;
    // The listener must outlive the transfer: MP_JOIN SYNs arrive through it, and a closed
    // listener answers them with a reset.
    let mut _listener = None;
    let stream: TcpStream = if o.role == "server" {
        let l = socket(&o)?;
        l.set_reuse_address(true)?;
        l.bind(&SockAddr::from(o.addr))?;
        l.listen(8)?;
        let (s, _) = l.accept()?;
        _listener = Some(l);
        start = Instant::now();
        s.into()
    } else {
        let s = socket(&o)?;
        start = Instant::now();
        s.connect_timeout(&SockAddr::from(o.addr), Duration::from_secs(10))?;
        s.into()
    };
    stream.set_read_timeout(Some(Duration::from_secs(o.timeout_s)))?;
    stream.set_write_timeout(Some(Duration::from_secs(o.timeout_s)))?;
    // Like mptcp_connect -j: give the joins a moment so the transfer uses every path from the start.
    let deadline = start + Duration::from_millis(o.wait_ms);
    while o.wait_subflows > 0 && subflows(&stream) < o.wait_subflows && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut writer = stream.try_clone()?;
    let (send, seed, linger) = (o.send, o.seed, Duration::from_millis(o.linger_ms));
    let (eof_tx, eof_rx) = std::sync::mpsc::channel::<()>();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Subflows come and go during the transfer; sample them throughout.
    let sampler = {
        let s = stream.try_clone()?;
        let done = done.clone();
        std::thread::spawn(move || {
            let mut max = subflows(&s);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(subflows(&s));
                std::thread::sleep(Duration::from_millis(5));
            }
            max
        })
    };
    let sender = std::thread::spawn(move || -> std::io::Result<String> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut left = send;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            rng.fill_bytes(&mut buf[..n]);
            h.update(&buf[..n]);
            writer.write_all(&buf[..n])?;
            left -= n as u64;
        }
        let _ = eof_rx.recv_timeout(linger);
        writer.shutdown(Shutdown::Write)?;
        Ok(hex(&h.finalize()))
    });
    let mut reader = &stream;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut received = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        received += n as u64;
    }
    let _ = eof_tx.send(());
    let sent_sha = sender.join().map_err(|_| std::io::Error::other("sender panicked"))??;
    let runtime = start.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let subflows_max = sampler.join().unwrap_or(0);
    let out = serde_json::json!({
        "role": o.role,
        "runtime_ms": runtime.as_secs_f64() * 1e3,
        "sent": o.send,
        "received": received,
        "sent_sha256": sent_sha,
        "received_sha256": hex(&h.finalize()),
        "subflows_max": subflows_max,
        "mptcp": !o.tcp,
    });
    Ok(out.to_string())
}

fn main() -> ExitCode {
    // Logging to stderr as RUST_LOG says (warnings otherwise).
    let filter = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    let o = parse();
    let role = o.role.clone();
    match run(o) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mptcp-xfer {role}: {e}");
            ExitCode::FAILURE
        }
    }
}
