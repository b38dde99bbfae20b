//! The fuzzer's bytes read as a stream of small numbers: a hand-written
//! decoder rather than `arbitrary`, so that the corpus format is this file
//! and nothing else, a truncated input is still a valid (shorter) one, and
//! every byte the fuzzer flips changes one decision.

/// A cursor over the input; reads past the end give zeros.
pub(crate) struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub(crate) fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub(crate) fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(crate) fn u64(&mut self) -> u64 {
        (u64::from(self.u32()) << 32) | u64::from(self.u32())
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.pos = self.pos.max(end);
        &self.data[start..end]
    }

    /// An index below `n` (0 when `n` is 0).
    pub(crate) fn index(&mut self, n: usize) -> usize {
        if n == 0 {
            self.u8();
            return 0;
        }
        usize::from(self.u8()) % n
    }
}
