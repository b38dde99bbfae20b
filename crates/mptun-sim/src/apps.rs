//! Applications that run on simulated hosts: a bulk transfer in either or
//! both directions, whose bytes the receiver checks against the sender's
//! stream, so a run proves the stream arrived intact, not just that enough
//! bytes arrived.

use crate::pattern::Pattern;
use bytes::Bytes;
use mptun_time::Instant;

/// Largest chunk handed to the stack in one write.
const CHUNK: usize = 64 * 1024;

/// A bulk sender and/or receiver bound to one connection.
#[derive(Clone, Debug)]
pub struct BulkApp {
    /// Bytes to send in total; the app closes its direction after the last one.
    pub to_send: u64,
    pub sent: u64,
    gen: Pattern,
    pub received: u64,
    /// The peer's stream, when this end checks what it receives.
    expect: Option<Pattern>,
    /// Offset of the first received byte that was not the peer's.
    first_bad: Option<u64>,
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
}

impl BulkApp {
    /// An app that sends `to_send` pseudo-random bytes drawn from `seed`
    /// ([`Pattern`]) and reads whatever the peer sends.
    pub fn new(to_send: u64, seed: u64) -> Self {
        BulkApp {
            to_send,
            sent: 0,
            gen: Pattern::new(seed),
            received: 0,
            expect: None,
            first_bad: None,
            first_rx: None,
            last_rx: None,
            peer_closed: false,
            closed: false,
            close_after_peer: false,
        }
    }

    /// Checks what arrives against the stream of a peer app made with
    /// `peer_seed`.
    pub fn expecting(mut self, peer_seed: u64) -> Self {
        self.expect = Some(Pattern::new(peer_seed));
        self
    }

    /// Everything was written.
    pub fn send_done(&self) -> bool {
        self.sent >= self.to_send
    }

    /// The next chunk to write given `space` bytes of room; generated only
    /// once it is certain to be written, and handed over without a copy.
    pub fn next_chunk(&mut self, space: usize) -> Option<Bytes> {
        let n = (self.to_send - self.sent).min(space as u64).min(CHUNK as u64) as usize;
        if n == 0 {
            return None;
        }
        let mut v = vec![0; n];
        self.gen.fill(self.sent, &mut v);
        self.sent += n as u64;
        Some(Bytes::from(v))
    }

    /// Records received bytes (and checks them, when [`BulkApp::expecting`]).
    pub fn on_receive(&mut self, now: Instant, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.first_rx.get_or_insert(now);
        self.last_rx = Some(now);
        if let (Some(p), None) = (&self.expect, self.first_bad) {
            self.first_bad = p.first_mismatch(self.received, data).map(|i| self.received + i as u64);
        }
        self.received += data.len() as u64;
    }

    /// Everything received so far is the peer's stream, byte for byte: what
    /// "the SHA-256 of what arrived is that of what was sent" says, checked
    /// without hashing. False when nothing is expected (no
    /// [`BulkApp::expecting`]).
    pub fn received_intact(&self) -> bool {
        self.expect.is_some() && self.first_bad.is_none()
    }

    /// Where the received stream first went wrong (stream offset).
    pub fn first_bad_offset(&self) -> Option<u64> {
        self.first_bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_knows_its_peers_stream_and_nothing_else() {
        let mut s = BulkApp::new(100_000, 9);
        let mut r = BulkApp::new(0, 0).expecting(9);
        let mut wrong = BulkApp::new(0, 0).expecting(10);
        let mut unchecked = BulkApp::new(0, 0);
        let mut cut = BulkApp::new(0, 0).expecting(9);
        let mut chunks = Vec::new();
        while let Some(c) = s.next_chunk(30_000) {
            for a in [&mut r, &mut wrong, &mut unchecked] {
                a.on_receive(Instant::ZERO, &c);
            }
            chunks.push(c);
        }
        assert!(s.send_done());
        assert_eq!((r.received, s.sent), (100_000, 100_000));
        assert!(r.received_intact());
        assert!(!wrong.received_intact());
        assert_eq!(wrong.first_bad_offset(), Some(0));
        assert!(!unchecked.received_intact(), "nothing to check against");
        // The second chunk lost: what follows is at the wrong offset.
        cut.on_receive(Instant::ZERO, &chunks[0]);
        cut.on_receive(Instant::ZERO, &chunks[2]);
        assert!(!cut.received_intact());
        assert_eq!(cut.first_bad_offset(), Some(30_000));
    }
}
