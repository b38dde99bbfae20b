//! Deterministic test data: `mptun send`/`serve` and the interop tests fill
//! their streams from it, so a receiver can check what arrived by hashing
//! the same pattern, without a file or a second channel.

/// An xorshift64* stream of bytes: cheap next to the SHA-256 that checks
/// it, and the same for the same seed on every machine.
pub struct Pattern(u64);

impl Pattern {
    /// The stream for `seed` (any value: it is mixed so that 0 works too).
    pub fn new(seed: u64) -> Self {
        Pattern(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// Fills `buf` with the next `buf.len()` bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }

    /// The first `len` bytes of the stream for `seed`, for a test or
    /// benchmark that wants its whole payload in one buffer.
    pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        Pattern::new(seed).fill(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    #[test]
    fn deterministic_per_seed() {
        let (mut a, mut b) = ([0u8; 37], [0u8; 37]);
        Pattern::new(3).fill(&mut a);
        Pattern::new(3).fill(&mut b);
        assert_eq!(a, b);
        Pattern::new(4).fill(&mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn chunking_does_not_change_the_stream_at_word_boundaries() {
        let mut whole = [0u8; 64];
        Pattern::new(9).fill(&mut whole);
        let mut parts = [0u8; 64];
        let mut p = Pattern::new(9);
        p.fill(&mut parts[..16]);
        p.fill(&mut parts[16..]);
        assert_eq!(whole, parts);
        assert_eq!(Pattern::bytes(9, 64), whole);
    }
}
