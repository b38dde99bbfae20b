//! A small HTTP/1.1 server the proxy tests fetch from, inside a lab
//! namespace: `GET /bytes/N/SEED` answers N bytes of [`body`]`(N, SEED)`,
//! so a client checks what it got without the server's copy. One thread
//! per connection (the concurrency test opens 100 at once), every request
//! answered with `Connection: close`.

use mptun::pattern::Pattern;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The largest body served (a bound on what a request can make it send).
pub const MAX_BODY: u64 = 1 << 30;

/// The content of `/bytes/N/SEED`: the first N bytes of the stream test
/// data comes from everywhere ([`Pattern`], cheap enough that serving does
/// not limit a Gbit/s benchmark), distinct per seed.
pub fn body(n: u64, seed: u64) -> Vec<u8> {
    Pattern::bytes(seed, n as usize)
}

/// What the server writes at a time.
const BLOCK: usize = 64 * 1024;

/// A running server; stopped on drop.
pub struct HttpServer {
    pub addr: SocketAddr,
    /// Requests answered with 200.
    pub served: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Listens on `addr` inside namespace `ns`.
    pub fn start(ns: &str, addr: SocketAddr) -> io::Result<HttpServer> {
        Self::serve(mptun_io::netns::run_in_netns(ns, || TcpListener::bind(addr))??)
    }

    /// As [`HttpServer::start`] on a kernel MPTCP socket (IPPROTO_MPTCP),
    /// for the kernel baseline of the proxy benchmark.
    pub fn start_mptcp(ns: &str, addr: SocketAddr) -> io::Result<HttpServer> {
        use socket2::{Domain, Protocol, Socket, Type};
        let l = mptun_io::netns::run_in_netns(ns, || -> io::Result<TcpListener> {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::from(262)))?;
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(128)?;
            Ok(s.into())
        })??;
        Self::serve(l)
    }

    fn serve(l: TcpListener) -> io::Result<HttpServer> {
        l.set_nonblocking(true)?;
        let addr = l.local_addr()?;
        let (stop, served) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (stop2, served2) = (stop.clone(), served.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let served = served2.clone();
                        std::thread::spawn(move || {
                            if answer(s).unwrap_or(false) {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(HttpServer { addr, served, stop, thread: Some(thread) })
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request head (at most 8 KiB) and answers it.
fn answer(mut s: TcpStream) -> io::Result<bool> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b)?;
        if n == 0 || head.len() > 8192 {
            return Ok(false);
        }
        head.extend_from_slice(&b[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let parsed = path.strip_prefix("/bytes/").and_then(|rest| {
        let (n, seed) = rest.split_once('/')?;
        Some((n.parse::<u64>().ok()?, seed.parse::<u64>().ok()?))
    });
    match parsed {
        Some((n, seed)) if n <= MAX_BODY => {
            let hdr = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
            );
            s.write_all(hdr.as_bytes())?;
            let (mut g, mut block, mut left) = (Pattern::new(seed), vec![0u8; BLOCK], n);
            while left > 0 {
                let k = left.min(BLOCK as u64) as usize;
                g.fill(&mut block[..k]);
                s.write_all(&block[..k])?;
                left -= k as u64;
            }
            s.shutdown(Shutdown::Write)?;
            // Until the client closes (so our FIN is not followed by a RST).
            while s.read(&mut b).is_ok_and(|n| n > 0) {}
            Ok(true)
        }
        _ => {
            s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
            Ok(false)
        }
    }
}
