//! The payload of simulated transfers: a pseudo-random byte stream that the
//! receiver can check at any offset without a hash.
//!
//! Hashing the stream at both ends (SHA-256 over ChaCha8 bytes, say) would
//! cost a fast run much of its CPU. Here the stream is a function of the
//! offset alone, so the receiver regenerates what should have arrived and
//! compares it byte for byte: an exact check (stronger than any digest), at
//! the cost of a memory pass.
//!
//! Word `k` (bytes `8k..8k + 8`, little-endian) is `pad[k mod 512] + k`
//! (wrapping), `pad` being 512 words drawn from ChaCha8 with the stream's
//! seed. Every word of the stream is distinct from every other one at the
//! same place in the pad's cycle (they differ by their `k`), so data that
//! lands at the wrong offset, by any distance, fails the check; the pad's
//! randomness makes a shift by a non-multiple of 8 fail as surely.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Words in the pad: 4 KiB, cache-resident.
const PAD_WORDS: usize = 512;

/// A stream's generator and checker.
#[derive(Clone, Debug)]
pub struct Pattern {
    pad: Box<[u64; PAD_WORDS]>,
}

impl Pattern {
    /// The stream drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pad = Box::new([0u64; PAD_WORDS]);
        pad.iter_mut().for_each(|w| *w = rng.next_u64());
        Pattern { pad }
    }

    /// The stream's first `len` bytes.
    pub fn bytes(&self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(0, &mut v);
        v
    }

    fn word(&self, k: u64) -> u64 {
        self.pad[k as usize % PAD_WORDS].wrapping_add(k)
    }

    /// Writes the stream's bytes `[offset, offset + out.len())` into `out`.
    pub fn fill(&self, offset: u64, out: &mut [u8]) {
        self.walk(offset, out.len(), |span| {
            match span {
                Span::Bytes { at, bytes, n } => out[at..at + n].copy_from_slice(&bytes[..n]),
                Span::Words { at, k0, pad } => {
                    // Arrays, not `chunks_exact_mut` and `copy_from_slice`:
                    // this form vectorises (7 GB/s against 50 here).
                    let (dst, _) = out[at..at + pad.len() * 8].as_chunks_mut::<8>();
                    for (i, (d, p)) in dst.iter_mut().zip(pad).enumerate() {
                        *d = p.wrapping_add(k0 + i as u64).to_le_bytes();
                    }
                }
            }
            true
        });
    }

    /// Where `data`, which claims to be the stream's bytes from `offset` on,
    /// first differs from it (an index into `data`); `None` when it is the
    /// stream.
    pub fn first_mismatch(&self, offset: u64, data: &[u8]) -> Option<usize> {
        let mut bad = None;
        self.walk(offset, data.len(), |span| {
            let (at, n, ok) = match span {
                Span::Bytes { at, bytes, n } => (at, n, data[at..at + n] == bytes[..n]),
                Span::Words { at, k0, pad } => {
                    let (src, _) = data[at..at + pad.len() * 8].as_chunks::<8>();
                    // An OR of differences, which vectorises; the byte is
                    // looked for only once a difference is known.
                    let diff =
                        src.iter().zip(pad).enumerate().fold(0u64, |acc, (i, (s, p))| {
                            acc | (u64::from_le_bytes(*s) ^ p.wrapping_add(k0 + i as u64))
                        });
                    (at, pad.len() * 8, diff == 0)
                }
            };
            if !ok {
                let mut expect = vec![0u8; n];
                self.fill(offset + at as u64, &mut expect);
                bad = data[at..at + n].iter().zip(&expect).position(|(a, b)| a != b).map(|i| at + i);
            }
            ok
        });
        bad
    }

    /// Cuts `[offset, offset + len)` into a partial first word, runs of
    /// whole words that follow the pad without wrapping around it, and a
    /// partial last word; calls `f` on each in order until it returns false.
    fn walk(&self, offset: u64, len: usize, mut f: impl FnMut(Span<'_>) -> bool) {
        let end = offset + len as u64;
        let mut pos = offset;
        while pos < end {
            let at = (pos - offset) as usize;
            let k = pos / 8;
            let in_word = (pos % 8) as usize;
            let (span, n) = if in_word != 0 || end - pos < 8 {
                let n = (8 - in_word).min((end - pos) as usize);
                let w = self.word(k).to_le_bytes();
                let mut bytes = [0u8; 8];
                bytes[..n].copy_from_slice(&w[in_word..in_word + n]);
                (Span::Bytes { at, bytes, n }, n)
            } else {
                let p = k as usize % PAD_WORDS;
                let words = ((end - pos) / 8).min((PAD_WORDS - p) as u64) as usize;
                (Span::Words { at, k0: k, pad: &self.pad[p..p + words] }, words * 8)
            };
            if !f(span) {
                return;
            }
            pos += n as u64;
        }
    }
}

/// A piece of the stream, as [`Pattern::walk`] hands it out.
enum Span<'a> {
    /// The stream's bytes `bytes[..n]` go at `at`.
    Bytes { at: usize, bytes: [u8; 8], n: usize },
    /// Whole words `k0..k0 + pad.len()` go at `at`: word `k0 + i` is
    /// `pad[i] + k0 + i`.
    Words { at: usize, k0: u64, pad: &'a [u64] },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(p: &Pattern, offset: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        p.fill(offset, &mut v);
        v
    }

    #[test]
    fn any_cut_of_the_stream_is_the_same_stream() {
        let p = Pattern::new(7);
        let whole = stream(&p, 0, 20_000);
        for (off, len) in [(0, 1), (3, 5), (5, 8), (7, 9), (8, 4096), (4093, 4100), (4096, 8), (13, 9_000), (19_999, 1)]
        {
            assert_eq!(stream(&p, off as u64, len), whole[off..off + len], "{off}+{len}");
            assert_eq!(p.first_mismatch(off as u64, &whole[off..off + len]), None, "{off}+{len}");
        }
        assert_eq!(p.first_mismatch(0, &[]), None);
    }

    #[test]
    fn a_wrong_byte_anywhere_is_found_where_it_is() {
        let p = Pattern::new(7);
        let whole = stream(&p, 0, 12_000);
        for bad in [0, 1, 7, 8, 100, 4095, 4096, 4097, 8191, 11_999] {
            for off in [0usize, 3, 8] {
                if bad < off {
                    continue;
                }
                let mut v = whole[off..].to_vec();
                v[bad - off] ^= 0x10;
                assert_eq!(p.first_mismatch(off as u64, &v), Some(bad - off), "bad {bad} from {off}");
            }
        }
    }

    #[test]
    fn bytes_at_the_wrong_offset_fail() {
        let p = Pattern::new(1);
        let whole = stream(&p, 0, 1 << 16);
        // Shifted by every distance up to a few pad cycles, word-aligned or
        // not, including whole multiples of the pad (4 KiB).
        for d in (1..64).chain([4096, 8192, 12_288, 4096 * 7 + 3]) {
            assert!(p.first_mismatch(0, &whole[d..d + 1448]).is_some(), "shift {d}");
            assert!(p.first_mismatch(d as u64, &whole[..1448]).is_some(), "shift -{d}");
        }
        assert!(Pattern::new(2).first_mismatch(0, &whole[..64]).is_some(), "another seed");
    }
}
