//! Bulk transfers in both directions at once, checked end to end with
//! SHA-256: each side sends a deterministic pseudo-random stream and hashes
//! what it receives; a lost, duplicated, reordered or corrupted byte changes
//! the digest.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Chunk size of every write and read.
const CHUNK: usize = 64 * 1024;

pub use mptun::pattern::Pattern;

/// How a sender cuts its stream into writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    /// 64 KiB writes.
    Chunks,
    /// Seeded random sizes: a quarter of the writes 1–256 bytes, the rest
    /// 1 B – 16 KiB (many small DSS mappings, the TSO-sized ones interleaved).
    Random { seed: u64 },
}

/// When a side starts writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstWrite {
    /// At once, duplex from the start.
    AtOnce,
    /// Once the first bytes from the peer arrived, and then this much later
    /// (a server answering a request: its first data follows its own ACKs
    /// of the request, with the same DATA_ACK).
    AfterFirstRead(Duration),
    /// One write (a request), then the rest once the peer's first bytes
    /// arrived (the answer).
    RequestFirst,
}

/// The sending side of an exchange: `len` bytes of `Pattern::new(seed)` in
/// chunks, hashed as they are produced.
struct Outgoing {
    pattern: Pattern,
    hash: Sha256,
    buf: Vec<u8>,
    left: usize,
    writes: Writes,
}

impl Outgoing {
    fn new(seed: u64, len: usize) -> Self {
        Self::with_writes(seed, len, Writes::Chunks)
    }

    fn with_writes(seed: u64, len: usize, writes: Writes) -> Self {
        Outgoing { pattern: Pattern::new(seed), hash: Sha256::new(), buf: vec![0u8; CHUNK], left: len, writes }
    }

    /// The size of the next write.
    fn next_len(&mut self) -> usize {
        match &mut self.writes {
            Writes::Chunks => CHUNK,
            Writes::Random { seed } => {
                // splitmix64
                *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *seed;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let max = if z % 4 == 0 { 256 } else { 16 << 10 };
                1 + ((z >> 8) % max) as usize
            }
        }
    }

    /// The next chunk to write, `None` once `len` bytes have been produced.
    fn next_chunk(&mut self) -> Option<&[u8]> {
        if self.left == 0 {
            return None;
        }
        let n = self.left.min(self.next_len());
        self.pattern.fill(&mut self.buf[..n]);
        self.hash.update(&self.buf[..n]);
        self.left -= n;
        Some(&self.buf[..n])
    }

    fn sha(self) -> [u8; 32] {
        self.hash.finalize().into()
    }
}

/// The receiving side: bytes counted and hashed, timed from the first.
#[derive(Default)]
struct Incoming {
    hash: Sha256,
    received: u64,
    start: Option<Instant>,
}

impl Incoming {
    fn add(&mut self, data: &[u8]) {
        self.start.get_or_insert_with(Instant::now);
        self.hash.update(data);
        self.received += data.len() as u64;
    }

    fn report(self, sent: usize, sent_sha: [u8; 32]) -> Report {
        Report {
            sent: sent as u64,
            sent_sha,
            received: self.received,
            received_sha: self.hash.finalize().into(),
            recv_time: self.start.map_or(Duration::ZERO, |s| s.elapsed()),
        }
    }
}

/// SHA-256 of the first `len` bytes of `Pattern::new(seed)`.
pub fn pattern_sha(seed: u64, len: usize) -> [u8; 32] {
    let mut out = Outgoing::new(seed, len);
    while out.next_chunk().is_some() {}
    out.sha()
}

/// What one side of an exchange saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub sent: u64,
    pub sent_sha: [u8; 32],
    pub received: u64,
    pub received_sha: [u8; 32],
    /// First byte to end of stream, receive direction.
    pub recv_time: Duration,
}

impl Report {
    /// Receive goodput in Gbit/s.
    pub fn recv_gbps(&self) -> f64 {
        self.received as f64 * 8.0 / self.recv_time.as_secs_f64().max(1e-9) / 1e9
    }
}

/// Sends `len` pattern bytes (then shuts the write side down) while
/// receiving to end of stream, over any tokio stream. `progress` counts
/// received bytes as they arrive.
pub async fn exchange_async<S>(s: S, len: usize, seed: u64, progress: Arc<AtomicU64>) -> io::Result<Report>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    exchange_async_with(s, len, seed, Writes::Chunks, FirstWrite::AtOnce, progress).await
}

/// [`exchange_async`] with the writes cut as `writes` says.
pub async fn exchange_async_with<S>(
    s: S,
    len: usize,
    seed: u64,
    writes: Writes,
    first: FirstWrite,
    progress: Arc<AtomicU64>,
) -> io::Result<Report>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut r, mut w) = tokio::io::split(s);
    let (got_first, mut first_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(async move {
        if let FirstWrite::AfterFirstRead(d) = first {
            // An error means the reader ended (end of stream): write anyway.
            let _ = first_rx.wait_for(|&b| b).await;
            tokio::time::sleep(d).await;
        }
        let mut out = Outgoing::with_writes(seed, len, writes);
        let mut n = 0;
        while let Some(chunk) = out.next_chunk() {
            w.write_all(chunk).await?;
            n += 1;
            if n == 1 && first == FirstWrite::RequestFirst {
                let _ = first_rx.wait_for(|&b| b).await;
            }
        }
        w.shutdown().await?;
        io::Result::Ok((w, out.sha()))
    });
    let mut inc = Incoming::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        inc.add(&buf[..n]);
        got_first.send_replace(true);
        progress.store(inc.received, Ordering::Relaxed);
    }
    drop(got_first);
    let (_w, sent_sha) = writer.await.map_err(io::Error::other)??;
    Ok(inc.report(len, sent_sha))
}

/// The same over a blocking kernel socket: a writer thread and the calling
/// thread reading. Reads time out after `idle` without data.
pub fn exchange_blocking(s: TcpStream, len: usize, seed: u64, idle: Duration) -> io::Result<Report> {
    exchange_blocking_with(s, len, seed, idle, Writes::Chunks, FirstWrite::AtOnce)
}

/// [`exchange_blocking`] with the writes cut as `writes` says.
pub fn exchange_blocking_with(
    s: TcpStream,
    len: usize,
    seed: u64,
    idle: Duration,
    writes: Writes,
    first: FirstWrite,
) -> io::Result<Report> {
    s.set_read_timeout(Some(idle))?;
    s.set_write_timeout(Some(idle))?;
    let mut w = s.try_clone()?;
    let (got_first, first_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || -> io::Result<[u8; 32]> {
        if let FirstWrite::AfterFirstRead(d) = first {
            // A disconnected channel means the reader ended: write anyway.
            let _ = first_rx.recv();
            std::thread::sleep(d);
        }
        let mut out = Outgoing::with_writes(seed, len, writes);
        let mut n = 0;
        while let Some(chunk) = out.next_chunk() {
            w.write_all(chunk)?;
            n += 1;
            if n == 1 && first == FirstWrite::RequestFirst {
                let _ = first_rx.recv();
            }
        }
        w.shutdown(Shutdown::Write)?;
        Ok(out.sha())
    });
    let mut r = s;
    let mut inc = Incoming::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        inc.add(&buf[..n]);
        let _ = got_first.send(());
    }
    drop(got_first);
    let sent_sha = writer.join().map_err(|_| io::Error::other("writer thread panicked"))??;
    Ok(inc.report(len, sent_sha))
}

/// Asserts that what each side received is exactly what the other sent.
pub fn assert_intact(a: &Report, b: &Report) {
    assert_eq!(a.received, b.sent, "A received {} of {} bytes", a.received, b.sent);
    assert_eq!(b.received, a.sent, "B received {} of {} bytes", b.received, a.sent);
    assert_eq!(a.received_sha, b.sent_sha, "A→ data corrupted (SHA-256 differs)");
    assert_eq!(b.received_sha, a.sent_sha, "B→ data corrupted (SHA-256 differs)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_seed_dependent() {
        let mut a = [0u8; 100];
        let mut b = [0u8; 100];
        Pattern::new(1).fill(&mut a);
        Pattern::new(1).fill(&mut b);
        assert_eq!(a, b);
        Pattern::new(2).fill(&mut b);
        assert_ne!(a, b);
        assert_eq!(pattern_sha(5, 200_000), pattern_sha(5, 200_000));
        assert_ne!(pattern_sha(5, 200_000), pattern_sha(5, 200_001));
    }

    #[test]
    fn random_writes_produce_the_same_stream() {
        let mut out = Outgoing::with_writes(5, 200_000, Writes::Random { seed: 9 });
        let mut sizes = Vec::new();
        while let Some(c) = out.next_chunk() {
            sizes.push(c.len());
        }
        assert_eq!(sizes.iter().sum::<usize>(), 200_000);
        assert!(sizes.iter().all(|&n| (1..=16 << 10).contains(&n)));
        assert!(sizes.iter().any(|&n| n <= 256) && sizes.iter().any(|&n| n > 4096), "{sizes:?}");
        // Deterministic per seed (the pattern itself depends on where the
        // writes cut it: both ends hash what was actually sent).
        let mut again = Outgoing::with_writes(5, 200_000, Writes::Random { seed: 9 });
        while again.next_chunk().is_some() {}
        assert_eq!(out.sha(), again.sha());
    }

    #[tokio::test]
    async fn exchange_over_an_in_process_pipe() {
        let (x, y) = tokio::io::duplex(1 << 16);
        let px = Arc::new(AtomicU64::new(0));
        let a = tokio::spawn(exchange_async(x, 300_000, 1, px.clone()));
        let b = tokio::spawn(exchange_async(y, 200_000, 2, Arc::new(AtomicU64::new(0))));
        let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        assert_intact(&a, &b);
        assert_eq!(px.load(Ordering::Relaxed), 200_000);
        assert_eq!(a.sent_sha, pattern_sha(1, 300_000));
    }
}
