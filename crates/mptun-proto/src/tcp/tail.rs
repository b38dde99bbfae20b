//! A packet's payload carried by reference: the pieces of the send buffer
//! it lies in, for a device that writes them behind the packet's headers
//! itself (a gather write, `writev`), as Linux hands a NIC an skb whose
//! payload is page fragments of the socket's memory.

use bytes::Bytes;

/// At most this many send-buffer pieces make one packet's [`Tail`]; a
/// payload spread over more is copied behind its header instead. A plain
/// TCP send buffer holds one piece per application write, and a 64 KiB
/// super-segment rarely spans more than two or three of them.
pub const TAIL_PARTS: usize = 4;

/// The payload of a [`super::Transmit`] that is not in the output buffer:
/// it follows the buffer's bytes, in order. Empty for a packet that is
/// whole in the buffer (every packet unless
/// [`super::TcpConfig::gather_payload`] is on).
///
/// The pieces are zero-copy slices (`Bytes`) of the send buffer, so they
/// keep their memory alive until dropped, after the write, even if the
/// data is acknowledged meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tail {
    parts: [Bytes; TAIL_PARTS],
    n: usize,
    len: usize,
}

impl Tail {
    /// The pieces, in order (none are empty).
    pub fn parts(&self) -> &[Bytes] {
        &self.parts[..self.n]
    }

    /// Payload bytes in all the pieces.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a packet that is whole in its buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the pieces into `out` (which must be [`Self::len`] long): for
    /// a path that needs the packet in one piece after all (a device that
    /// cannot gather, a packet held for a later departure, a capture).
    pub fn copy_to(&self, out: &mut [u8]) {
        let mut at = 0;
        for p in self.parts() {
            out[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        debug_assert_eq!(at, out.len());
    }

    /// Gathers up to [`TAIL_PARTS`] non-empty pieces; `None` if there are
    /// more.
    pub fn gather(pieces: impl IntoIterator<Item = Bytes>) -> Option<Tail> {
        let mut t = Tail::default();
        for p in pieces {
            if p.is_empty() {
                continue;
            }
            if t.n == TAIL_PARTS {
                return None;
            }
            t.len += p.len();
            t.parts[t.n] = p;
            t.n += 1;
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_in_order_up_to_the_limit() {
        let pieces: Vec<Bytes> = (0..TAIL_PARTS as u8).map(|i| Bytes::from(vec![i; usize::from(i) + 1])).collect();
        let t = Tail::gather(pieces.iter().cloned().chain([Bytes::new()])).unwrap();
        assert_eq!(t.parts(), &pieces[..]);
        let mut out = vec![0u8; t.len()];
        t.copy_to(&mut out);
        assert_eq!(out, pieces.concat());
        assert!(Tail::gather(pieces.iter().cloned().chain([Bytes::from_static(b"x")])).is_none());
        assert!(Tail::gather([]).unwrap().is_empty());
    }
}
