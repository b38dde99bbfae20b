//! Deterministic test data: `mptun send`/`serve` and the interop tests fill
//! their streams from it, so a receiver can check what arrived by hashing
//! the same pattern, without a file or a second channel.

/// 64-bit words in the random table a stream is built from (4 KiB: it
/// stays in L1 while a block is made).
const TABLE: usize = 512;

/// A stream of bytes made at the speed of a memory copy, so that a sender
/// of tens of Gbit/s spends its time hashing and sending, not generating:
/// word `i` of the stream is `table[i % 512] ^ key(i / 512)`, where the
/// table is 4 KiB of xorshift64* output and each 4 KiB round has its own
/// key (splitmix64 of the round number). No two rounds are alike, so data
/// delivered at the wrong offset, by any amount, does not hash as the
/// stream; the same seed gives the same stream on every machine.
pub struct Pattern {
    table: Box<[u64; TABLE]>,
    seed: u64,
    /// Words of the stream made so far.
    word: u64,
}

impl Pattern {
    /// The stream for `seed` (any value: it is mixed so that 0 works too).
    pub fn new(seed: u64) -> Self {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut table = Box::new([0u64; TABLE]);
        for w in table.iter_mut() {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            *w = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        }
        Pattern { table, seed: x, word: 0 }
    }

    /// Round `r`'s key: splitmix64's output for it.
    fn key(&self, r: u64) -> u64 {
        let mut z = self.seed.wrapping_add(r.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `buf` with the next `buf.len()` bytes of the stream (a last
    /// partial word uses up the whole word).
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut rest = buf;
        while !rest.is_empty() {
            let at = (self.word % TABLE as u64) as usize;
            let key = self.key(self.word / TABLE as u64);
            let words = (TABLE - at).min(rest.len().div_ceil(8));
            let (run, tail) = rest.split_at_mut((words * 8).min(rest.len()));
            let mut chunks = run.chunks_exact_mut(8);
            for (c, w) in chunks.by_ref().zip(&self.table[at..]) {
                c.copy_from_slice(&(w ^ key).to_le_bytes());
            }
            let part = chunks.into_remainder();
            if !part.is_empty() {
                let w = (self.table[at + words - 1] ^ key).to_le_bytes();
                part.copy_from_slice(&w[..part.len()]);
            }
            self.word += words as u64;
            rest = tail;
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
        let mut whole = vec![0u8; 3 * 4096 + 64];
        Pattern::new(9).fill(&mut whole);
        for cut in [8, 16, 4096, 4104, 8192 + 48] {
            let mut parts = vec![0u8; whole.len()];
            let mut p = Pattern::new(9);
            p.fill(&mut parts[..cut]);
            p.fill(&mut parts[cut..]);
            assert_eq!(whole, parts, "cut at {cut}");
        }
        // A partial word uses the word up: the next fill starts at the next one.
        let mut p = Pattern::new(9);
        let mut three = [0u8; 3];
        p.fill(&mut three);
        assert_eq!(three, whole[..3]);
        let mut next = [0u8; 8];
        p.fill(&mut next);
        assert_eq!(next, whole[8..16]);
        assert_eq!(Pattern::bytes(9, whole.len()), whole);
    }

    #[test]
    fn no_two_rounds_alike() {
        let mut s = vec![0u8; 64 * 4096];
        Pattern::new(1).fill(&mut s);
        let rounds: Vec<&[u8]> = s.chunks(4096).collect();
        for (i, a) in rounds.iter().enumerate() {
            for b in &rounds[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Nor any 8-byte word repeated in the first rounds.
        let mut words: Vec<&[u8]> = s[..8 * 4096].chunks(8).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), 4096);
    }
}
