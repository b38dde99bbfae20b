//! The data of a test: a sender's blocks are made (pattern or file) and
//! hashed, a receiver's are hashed (and stored). With a file this happens
//! on a thread of its own, so that the task that writes and reads the
//! connection only moves buffers; they circulate in a fixed pool (no
//! allocation per block, and a disk or hash slower than the network holds
//! the connection back instead of queueing without bound).
//!
//! Each block carries the hash state after it (a sender's thread runs ahead
//! of what was written), so when the data ends in the middle of a block (a
//! duration over, a signal, the receiver's STOP) the digest is that of the
//! bytes that went out, from the previous block's state plus the prefix.
//!
//! Only a file needs the thread, to keep disk I/O off the connection's task.
//! Otherwise (the pattern at a sender, nothing stored at a receiver) the
//! data is made and hashed, or hashed as soon as it is read, inline on the
//! I/O task, in one buffer that stays in the cache as iperf3's does: the
//! hand-over cost more than it saved. A block made on one core and written
//! from another, or read on one and hashed on another, crosses the caches,
//! and the threads' wake-ups stall the connection when the two cores are
//! busy ([`Producer::start`] and [`Consumer::start`] choose).

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::{Sink, Source};
use crate::xfer::control::{HashKind, SENDER_TAIL_LEN};

/// Buffers in flight between the I/O task and its data thread.
const POOL: usize = 4;

/// A stream's running digest.
#[derive(Clone)]
pub(super) enum Hash {
    Sha256(Sha256),
    Blake3(Box<blake3::Hasher>),
    Xxh3(Box<twox_hash::XxHash3_128>),
}

impl Hash {
    pub(super) fn new(kind: HashKind) -> Hash {
        match kind {
            HashKind::Sha256 => Hash::Sha256(Sha256::new()),
            HashKind::Blake3 => Hash::Blake3(Box::default()),
            HashKind::Xxh3 => Hash::Xxh3(Box::default()),
        }
    }

    pub(super) fn update(&mut self, b: &[u8]) {
        match self {
            Hash::Sha256(h) => h.update(b),
            Hash::Blake3(h) => {
                h.update(b);
            }
            Hash::Xxh3(h) => h.write(b),
        }
    }

    pub(super) fn finish(self) -> [u8; 32] {
        match self {
            Hash::Sha256(h) => h.finalize().into(),
            Hash::Blake3(h) => h.finalize().into(),
            // 128 bits, big-endian, in the first half of the trailer's field.
            Hash::Xxh3(h) => {
                let mut d = [0u8; 32];
                d[..16].copy_from_slice(&h.finish_128().to_be_bytes());
                d
            }
        }
    }
}

/// A sender's block: its bytes and the stream's hash after them.
pub(super) struct Block {
    pub(crate) data: Vec<u8>,
    pub(crate) after: Hash,
}

/// The sending side's data: made on a thread of its own, or inline.
pub(super) enum Producer {
    Thread {
        full: mpsc::Receiver<Result<Block>>,
        empty: mpsc::Sender<Vec<u8>>,
    },
    Inline {
        source: Source,
        total: Option<u64>,
        block: usize,
        made: u64,
        hash: Hash,
        /// The one buffer, while it is not out as a block.
        spare: Option<Vec<u8>>,
    },
}

impl Producer {
    /// Starts making `total` bytes (`None`: until dropped) of `source` in
    /// blocks of `block` bytes, hashed with `kind`: inline for the pattern,
    /// on a thread for a file.
    pub(super) fn start(source: Source, total: Option<u64>, block: usize, kind: HashKind) -> Producer {
        if matches!(source, Source::Pattern(_)) {
            return Producer::Inline {
                source,
                total,
                block,
                made: 0,
                hash: Hash::new(kind),
                spare: Some(vec![0u8; block]),
            };
        }
        Self::start_thread(source, total, block, kind)
    }

    fn start_thread(mut source: Source, total: Option<u64>, block: usize, kind: HashKind) -> Producer {
        let (full_tx, full) = mpsc::channel(POOL);
        let (empty, mut empty_rx) = mpsc::channel::<Vec<u8>>(POOL);
        for _ in 0..POOL {
            empty.try_send(vec![0u8; block]).expect("the pool fits its channel");
        }
        tokio::task::spawn_blocking(move || {
            let mut hash = Hash::new(kind);
            let mut made: u64 = 0;
            loop {
                let want = match total {
                    Some(t) if made >= t => return,
                    Some(t) => (t - made).min(block as u64) as usize,
                    None => block,
                };
                // The I/O task dropping its end ends this thread.
                let Some(mut buf) = empty_rx.blocking_recv() else { return };
                buf.resize(want, 0);
                if let Err(e) = fill(&mut source, &mut buf, made) {
                    let _ = full_tx.blocking_send(Err(e));
                    return;
                }
                hash.update(&buf);
                made += want as u64;
                if full_tx.blocking_send(Ok(Block { data: buf, after: hash.clone() })).is_err() {
                    return;
                }
            }
        });
        Producer::Thread { full, empty }
    }

    /// The next block, `None` once `total` bytes were made.
    pub(super) async fn next(&mut self) -> Result<Option<Block>> {
        match self {
            Producer::Thread { full, .. } => full.recv().await.transpose(),
            Producer::Inline { source, total, block, made, hash, spare } => {
                let want = match *total {
                    Some(t) if *made >= t => return Ok(None),
                    Some(t) => (t - *made).min(*block as u64) as usize,
                    None => *block,
                };
                let mut buf = spare.take().unwrap_or_default();
                buf.resize(want, 0);
                fill(source, &mut buf, *made)?;
                hash.update(&buf);
                *made += want as u64;
                Ok(Some(Block { data: buf, after: hash.clone() }))
            }
        }
    }

    /// Gives a written block's buffer back to the pool.
    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        match self {
            Producer::Thread { empty, .. } => {
                let _ = empty.try_send(buf);
            }
            Producer::Inline { spare, .. } => *spare = Some(buf),
        }
    }
}

fn fill(source: &mut Source, buf: &mut [u8], made: u64) -> Result<()> {
    match source {
        Source::Pattern(p) => p.fill(buf),
        Source::File(f, path) => {
            let mut got = 0;
            while got < buf.len() {
                match f.read(&mut buf[got..]) {
                    Ok(0) => {
                        bail!("{} ended after {} bytes (it shrank while being sent)", path.display(), made + got as u64)
                    }
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(anyhow!(e).context(format!("read {}", path.display()))),
                }
            }
        }
    }
    Ok(())
}

/// What the receiving side's data thread found.
pub(super) struct Consumed {
    pub(crate) digest: [u8; 32],
    pub(crate) bytes: u64,
    /// The file written, if the sink was one.
    pub(crate) file: Option<PathBuf>,
}

/// The receiving side: buffers to read into, and the thread that hashes
/// (and stores) what was read, or the hash run inline after every read.
/// Holds back the last [`SENDER_TAIL_LEN`] bytes read, which may be the
/// sender's trailer and summary.
pub(super) struct Consumer {
    cur: Vec<u8>,
    filled: usize,
    mode: ConsumerMode,
}

enum ConsumerMode {
    Thread {
        full: Option<mpsc::Sender<(Vec<u8>, usize)>>,
        empty: mpsc::Receiver<Vec<u8>>,
        thread: tokio::task::JoinHandle<Result<Consumed>>,
        /// Hand a buffer over once less than this is left to read into.
        min_read: usize,
    },
    Inline {
        hash: Hash,
        bytes: u64,
    },
}

impl Consumer {
    /// Starts the receiving side, hashing with `kind`; reads go into
    /// buffers of `size` bytes. Inline with nothing to store, on a thread
    /// for a file.
    pub(super) fn start(sink: Sink, size: usize, kind: HashKind) -> Consumer {
        assert!(size >= 4 * SENDER_TAIL_LEN);
        if matches!(sink, Sink::Discard) {
            let mode = ConsumerMode::Inline { hash: Hash::new(kind), bytes: 0 };
            return Consumer { cur: vec![0u8; size], filled: 0, mode };
        }
        Self::start_thread(sink, size, kind)
    }

    fn start_thread(mut sink: Sink, size: usize, kind: HashKind) -> Consumer {
        assert!(size >= 4 * SENDER_TAIL_LEN);
        let (full, mut full_rx) = mpsc::channel::<(Vec<u8>, usize)>(POOL);
        let (empty_tx, empty) = mpsc::channel::<Vec<u8>>(POOL);
        for _ in 0..POOL - 1 {
            empty_tx.try_send(vec![0u8; size]).expect("the pool fits its channel");
        }
        let thread = tokio::task::spawn_blocking(move || {
            let mut hash = Hash::new(kind);
            let mut bytes = 0u64;
            let mut write_err = None;
            while let Some((buf, len)) = full_rx.blocking_recv() {
                let d = &buf[..len];
                hash.update(d);
                bytes += len as u64;
                if let (Sink::File(f, _), None) = (&mut sink, &write_err) {
                    if let Err(e) = f.write_all(d) {
                        write_err = Some(e);
                    }
                }
                let _ = empty_tx.try_send(buf);
            }
            let file = match sink {
                Sink::File(mut f, path) => {
                    if let Some(e) = write_err {
                        bail!("write {}: {e}", path.display());
                    }
                    f.flush().with_context(|| format!("write {}", path.display()))?;
                    f.sync_all().ok();
                    Some(path)
                }
                Sink::Discard => None,
            };
            Ok(Consumed { digest: hash.finish(), bytes, file })
        });
        let mode = ConsumerMode::Thread { full: Some(full), empty, thread, min_read: size / 4 };
        Consumer { cur: vec![0u8; size], filled: 0, mode }
    }

    /// Where the next read goes.
    pub(super) fn space(&mut self) -> &mut [u8] {
        &mut self.cur[self.filled..]
    }

    /// Takes `n` bytes just read into [`Consumer::space`]; hands the buffer
    /// to the thread once it is nearly full (waiting for a free one).
    pub(super) async fn read(&mut self, n: usize) -> Result<()> {
        self.filled += n;
        let (full, empty, min_read) = match &mut self.mode {
            ConsumerMode::Inline { hash, bytes } => {
                // Hashed while the read's copy is still in the cache; the
                // last SENDER_TAIL_LEN bytes move to the front and wait.
                if self.filled > SENDER_TAIL_LEN {
                    let keep = self.filled - SENDER_TAIL_LEN;
                    hash.update(&self.cur[..keep]);
                    *bytes += keep as u64;
                    self.cur.copy_within(keep..self.filled, 0);
                    self.filled = SENDER_TAIL_LEN;
                }
                return Ok(());
            }
            ConsumerMode::Thread { full, empty, min_read, .. } => (full, empty, *min_read),
        };
        if self.cur.len() - self.filled >= min_read {
            return Ok(());
        }
        let Some(mut next) = empty.recv().await else { return Err(self.failed().await) };
        let keep = self.filled - SENDER_TAIL_LEN;
        next[..SENDER_TAIL_LEN].copy_from_slice(&self.cur[keep..self.filled]);
        let buf = std::mem::replace(&mut self.cur, next);
        self.filled = SENDER_TAIL_LEN;
        let tx = full.as_ref().expect("not finished");
        if tx.send((buf, keep)).await.is_err() {
            return Err(self.failed().await);
        }
        Ok(())
    }

    /// The thread's error, once it stopped early.
    async fn failed(&mut self) -> anyhow::Error {
        let ConsumerMode::Thread { full, thread, .. } = &mut self.mode else {
            return anyhow!("the receiving side has no thread");
        };
        *full = None;
        match thread.await {
            Ok(Err(e)) => e,
            Ok(Ok(_)) => anyhow!("the receiving thread ended early"),
            Err(e) => anyhow!("the receiving thread failed: {e}"),
        }
    }

    /// The stream ended: hashes the rest but the held-back bytes, which it
    /// returns (the sender's trailer, if the stream was well formed).
    pub(super) async fn finish(mut self) -> Result<(Consumed, Vec<u8>)> {
        let keep = self.filled.saturating_sub(SENDER_TAIL_LEN);
        let tail = self.cur[keep..self.filled].to_vec();
        let (full, thread) = match &mut self.mode {
            ConsumerMode::Inline { hash, bytes } => {
                hash.update(&self.cur[..keep]);
                let bytes = *bytes + keep as u64;
                let digest = hash.clone().finish();
                return Ok((Consumed { digest, bytes, file: None }, tail));
            }
            ConsumerMode::Thread { full, thread, .. } => (full, thread),
        };
        if keep > 0 {
            let tx = full.as_ref().expect("not finished");
            if tx.send((std::mem::take(&mut self.cur), keep)).await.is_err() {
                return Err(self.failed().await);
            }
        }
        *full = None;
        let consumed = thread.await.map_err(|e| anyhow!("the receiving thread failed: {e}"))??;
        Ok((consumed, tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::bulk::Pattern;

    fn stream(len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        Pattern::new(5).fill(&mut v);
        v
    }

    /// A file to store into (the threaded consumer) or nothing (inline).
    fn sink(to_file: bool, tag: &str) -> Sink {
        if !to_file {
            return Sink::Discard;
        }
        let path = std::env::temp_dir().join(format!("mptun-pipeline-{tag}-{}", std::process::id()));
        Sink::File(std::fs::File::create(&path).unwrap(), path)
    }

    /// Feeds `s` to a consumer `chunk` bytes per read.
    async fn consume(s: &[u8], chunk: usize, size: usize, kind: HashKind, to_file: bool) -> (Consumed, Vec<u8>) {
        let mut c = Consumer::start(sink(to_file, "consume"), size, kind);
        assert_eq!(matches!(c.mode, ConsumerMode::Thread { .. }), to_file);
        for part in s.chunks(chunk) {
            let mut rest = part;
            while !rest.is_empty() {
                let space = c.space();
                let n = space.len().min(rest.len());
                space[..n].copy_from_slice(&rest[..n]);
                c.read(n).await.unwrap();
                rest = &rest[n..];
            }
        }
        let done = c.finish().await.unwrap();
        if let Some(f) = &done.0.file {
            std::fs::remove_file(f).unwrap();
        }
        done
    }

    fn xxh3(d: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..16].copy_from_slice(&twox_hash::XxHash3_128::oneshot(d).to_be_bytes());
        out
    }

    /// Inline (nothing stored) and on its thread (a file) alike, with
    /// either hash.
    #[tokio::test]
    async fn consumer_hashes_all_but_the_trailer_whatever_the_reads() {
        for len in [0, 10, SENDER_TAIL_LEN, SENDER_TAIL_LEN + 1, 4096, 300_001] {
            let s = stream(len);
            let cut = len.saturating_sub(SENDER_TAIL_LEN);
            for (kind, want) in
                [(HashKind::Sha256, <[u8; 32]>::from(Sha256::digest(&s[..cut]))), (HashKind::Xxh3, xxh3(&s[..cut]))]
            {
                for to_file in [false, true] {
                    for chunk in [1, 71, 72, 73, 1000, SENDER_TAIL_LEN - 1, SENDER_TAIL_LEN + 1, 65536, 1 << 20] {
                        let (c, tail) = consume(&s, chunk, 4 * SENDER_TAIL_LEN, kind, to_file).await;
                        assert_eq!(c.digest, want, "{kind:?} file {to_file} len {len} chunk {chunk}");
                        assert_eq!(c.bytes, cut as u64);
                        assert_eq!(tail, &s[cut..], "{kind:?} file {to_file} len {len} chunk {chunk}");
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn consumer_stores_a_file_sink() {
        let dir = std::env::temp_dir().join(format!("mptun-pipeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.bin");
        let s = stream(100_000);
        let sink = Sink::File(std::fs::File::create(&path).unwrap(), path.clone());
        let mut c = Consumer::start(sink, 4 * SENDER_TAIL_LEN, HashKind::Blake3);
        for part in s.chunks(777) {
            let space = c.space();
            let n = space.len().min(part.len());
            space[..n].copy_from_slice(&part[..n]);
            c.read(n).await.unwrap();
            let rest = &part[n..];
            if !rest.is_empty() {
                c.space()[..rest.len()].copy_from_slice(rest);
                c.read(rest.len()).await.unwrap();
            }
        }
        let (done, _) = c.finish().await.unwrap();
        assert_eq!(done.file.as_deref(), Some(path.as_path()));
        assert_eq!(std::fs::read(&path).unwrap(), &s[..s.len() - SENDER_TAIL_LEN]);
        assert_eq!(done.digest, *blake3::hash(&s[..s.len() - SENDER_TAIL_LEN]).as_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Inline (the pattern) and on its thread (a file of the same bytes)
    /// alike, with every hash.
    #[tokio::test]
    async fn producer_blocks_carry_the_hash_after_them() {
        let s = stream(10_000);
        let path = std::env::temp_dir().join(format!("mptun-pipeline-src-{}", std::process::id()));
        std::fs::write(&path, &s).unwrap();
        for (kind, from_file) in
            [HashKind::Sha256, HashKind::Blake3, HashKind::Xxh3].into_iter().flat_map(|k| [(k, false), (k, true)])
        {
            let source = match from_file {
                false => Source::Pattern(Pattern::new(5)),
                true => Source::File(std::fs::File::open(&path).unwrap(), path.clone()),
            };
            let mut p = Producer::start(source, Some(10_000), 3000, kind);
            assert_eq!(matches!(p, Producer::Thread { .. }), from_file);
            let mut got = Vec::new();
            while let Some(b) = p.next().await.unwrap() {
                got.extend_from_slice(&b.data);
                let want = match kind {
                    HashKind::Sha256 => <[u8; 32]>::from(Sha256::digest(&got)),
                    HashKind::Blake3 => *blake3::hash(&got).as_bytes(),
                    HashKind::Xxh3 => xxh3(&got),
                };
                assert_eq!(b.after.finish(), want, "{kind:?}");
                p.recycle(b.data);
            }
            assert_eq!(got, s, "exactly the pattern, in blocks of at most 3000");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn producer_reports_a_file_that_shrank() {
        let path = std::env::temp_dir().join(format!("mptun-pipeline-short-{}", std::process::id()));
        std::fs::write(&path, [7u8; 100]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let mut p = Producer::start(Source::File(f, path.clone()), Some(1000), 64, HashKind::Sha256);
        let mut n = 0;
        let err = loop {
            match p.next().await {
                Ok(Some(b)) => {
                    n += b.data.len();
                    p.recycle(b.data);
                }
                Ok(None) => panic!("no error for a short file"),
                Err(e) => break e,
            }
        };
        std::fs::remove_file(&path).unwrap();
        assert_eq!(n, 64, "one whole block, then the error");
        assert!(format!("{err:#}").contains("ended after 100 bytes"), "{err:#}");
    }
}
