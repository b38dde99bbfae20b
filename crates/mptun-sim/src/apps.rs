//! Applications that run on simulated hosts: a bulk transfer in either or
//! both directions, whose bytes are hashed on both ends so a run proves the
//! stream arrived intact, not just that enough bytes arrived.

use mptun_time::Instant;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

/// Largest chunk handed to the stack in one write.
const CHUNK: usize = 64 * 1024;

/// A bulk sender and/or receiver bound to one connection.
#[derive(Clone, Debug)]
pub struct BulkApp {
    /// Bytes to send in total; the app closes its direction after the last one.
    pub to_send: u64,
    pub sent: u64,
    gen: ChaCha8Rng,
    send_hash: Sha256,
    pub received: u64,
    recv_hash: Sha256,
    /// When the first and the last byte arrived.
    pub first_rx: Option<Instant>,
    pub last_rx: Option<Instant>,
    /// The peer closed its direction (FIN / DATA_FIN seen and everything read).
    pub peer_closed: bool,
    /// We closed our direction after sending everything.
    pub closed: bool,
    /// Close our direction only once the peer closed its own: a download
    /// client that keeps its connection open, as a browser does, so that
    /// its path manager may still add subflows (Linux takes no join once
    /// it has our DATA_FIN).
    pub close_after_peer: bool,
    scratch: Vec<u8>,
}

impl BulkApp {
    /// An app that sends `to_send` pseudo-random bytes drawn from `seed` and
    /// reads whatever the peer sends.
    pub fn new(to_send: u64, seed: u64) -> Self {
        BulkApp {
            to_send,
            sent: 0,
            gen: ChaCha8Rng::seed_from_u64(seed),
            send_hash: Sha256::new(),
            received: 0,
            recv_hash: Sha256::new(),
            first_rx: None,
            last_rx: None,
            peer_closed: false,
            closed: false,
            close_after_peer: false,
            scratch: Vec::new(),
        }
    }

    /// Everything was written.
    pub fn send_done(&self) -> bool {
        self.sent >= self.to_send
    }

    /// The next chunk to write given `space` bytes of room; generated and
    /// hashed only once it is certain to be written.
    pub fn next_chunk(&mut self, space: usize) -> Option<Vec<u8>> {
        let n = (self.to_send - self.sent).min(space as u64).min(CHUNK as u64) as usize;
        if n == 0 {
            return None;
        }
        let mut v = std::mem::take(&mut self.scratch);
        v.resize(n, 0);
        self.gen.fill_bytes(&mut v);
        self.send_hash.update(&v);
        self.sent += n as u64;
        Some(v)
    }

    /// Records received bytes.
    pub fn on_receive(&mut self, now: Instant, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.first_rx.get_or_insert(now);
        self.last_rx = Some(now);
        self.received += data.len() as u64;
        self.recv_hash.update(data);
    }

    /// SHA-256 of what was sent so far.
    pub fn sent_digest(&self) -> [u8; 32] {
        self.send_hash.clone().finalize().into()
    }

    /// SHA-256 of what was received so far.
    pub fn received_digest(&self) -> [u8; 32] {
        self.recv_hash.clone().finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_only_for_the_same_stream() {
        let mut s = BulkApp::new(100_000, 9);
        let mut r = BulkApp::new(0, 0);
        while let Some(c) = s.next_chunk(30_000) {
            r.on_receive(Instant::ZERO, &c);
        }
        assert!(s.send_done());
        assert_eq!(s.sent_digest(), r.received_digest());
        let mut other = BulkApp::new(100_000, 10);
        while other.next_chunk(100_000).is_some() {}
        assert_ne!(other.sent_digest(), r.received_digest());
    }
}
