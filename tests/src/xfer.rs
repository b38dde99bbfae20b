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

/// Deterministic bytes (xorshift64*), cheap enough not to be the bottleneck.
pub struct Pattern(u64);

impl Pattern {
    pub fn new(seed: u64) -> Self {
        Pattern(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// SHA-256 of the first `len` bytes of `Pattern::new(seed)`.
pub fn pattern_sha(seed: u64, len: usize) -> [u8; 32] {
    let mut p = Pattern::new(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK);
        p.fill(&mut buf[..n]);
        h.update(&buf[..n]);
        left -= n;
    }
    h.finalize().into()
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
    let (mut r, mut w) = tokio::io::split(s);
    let writer = tokio::spawn(async move {
        let mut p = Pattern::new(seed);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut left = len;
        while left > 0 {
            let n = left.min(CHUNK);
            p.fill(&mut buf[..n]);
            h.update(&buf[..n]);
            w.write_all(&buf[..n]).await?;
            left -= n;
        }
        w.shutdown().await?;
        io::Result::Ok((w, <[u8; 32]>::from(h.finalize())))
    });
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut received = 0u64;
    let mut start = None;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        start.get_or_insert_with(Instant::now);
        h.update(&buf[..n]);
        received += n as u64;
        progress.store(received, Ordering::Relaxed);
    }
    let recv_time = start.map_or(Duration::ZERO, |s| s.elapsed());
    let (_w, sent_sha) = writer.await.map_err(io::Error::other)??;
    Ok(Report { sent: len as u64, sent_sha, received, received_sha: h.finalize().into(), recv_time })
}

/// The same over a blocking kernel socket: a writer thread and the calling
/// thread reading. Reads time out after `idle` without data.
pub fn exchange_blocking(s: TcpStream, len: usize, seed: u64, idle: Duration) -> io::Result<Report> {
    s.set_read_timeout(Some(idle))?;
    s.set_write_timeout(Some(idle))?;
    let mut w = s.try_clone()?;
    let writer = std::thread::spawn(move || -> io::Result<[u8; 32]> {
        let mut p = Pattern::new(seed);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut left = len;
        while left > 0 {
            let n = left.min(CHUNK);
            p.fill(&mut buf[..n]);
            h.update(&buf[..n]);
            w.write_all(&buf[..n])?;
            left -= n;
        }
        w.shutdown(Shutdown::Write)?;
        Ok(h.finalize().into())
    });
    let mut r = s;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut received = 0u64;
    let mut start = None;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        start.get_or_insert_with(Instant::now);
        h.update(&buf[..n]);
        received += n as u64;
    }
    let recv_time = start.map_or(Duration::ZERO, |s| s.elapsed());
    let sent_sha = writer.join().map_err(|_| io::Error::other("writer thread panicked"))??;
    Ok(Report { sent: len as u64, sent_sha, received, received_sha: h.finalize().into(), recv_time })
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
