//! Reusable batches of packet buffers, one type per direction.
//!
//! The runtime moves packets between the TUN devices and the protocol core at
//! line rate, so the buffers are allocated once and recycled: `clear()` keeps
//! every slot's memory, and steady-state receive and send never allocate.
//! Each slot keeps [`HEADROOM`] bytes in front of the packet so that a device
//! running with `IFF_VNET_HDR` can prepend the virtio-net header in place
//! instead of copying the packet.
//!
//! A receive batch ([`RxBatch`]) is filled by a device and read by the
//! caller; a transmit batch ([`TxBatch`]) is filled by the caller, one
//! [`TxPacket`] at a time, and written by a device. Both are a
//! [`PacketBatch`] and share its slots, but each records its own facts per
//! packet: a received packet's checksum state says whether the device
//! vouched for it, a packet to send's whether the device must complete it,
//! and neither can be read as the other.

use std::fmt;

mod rx;
mod tx;

pub use rx::{Rx, RxBatch};
pub(crate) use tx::Unsent;
pub use tx::{Tx, TxBatch, TxChecksum, TxPacket, MAX_TAIL_PARTS};

/// Bytes reserved in front of every packet: the size of `struct virtio_net_hdr`
/// that a TUN device opened with `IFF_VNET_HDR` exchanges before each frame.
pub const HEADROOM: usize = 10;

/// Why a packet could not be added to a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// Every slot is in use; send or drain the batch first.
    Full,
    /// A TSO super-packet that is not a well-formed TCP packet.
    Malformed,
    /// The packet is longer than the batch's `max_packet_len`.
    TooLarge {
        /// Length of the rejected packet.
        len: usize,
        /// Largest packet a slot holds.
        max: usize,
    },
    /// A TSO super-packet to cut into more wire segments than the batch
    /// has slots: it could never fit, however empty the batch.
    TooManySegments {
        /// Wire segments it would be cut into.
        segments: usize,
        /// Slots of the batch.
        max: usize,
    },
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full => write!(f, "packet batch is full"),
            PushError::Malformed => write!(f, "TSO super-packet is not a well-formed TCP packet"),
            PushError::TooLarge { len, max } => write!(f, "packet of {len} bytes exceeds the slot size of {max}"),
            PushError::TooManySegments { segments, max } => {
                write!(f, "super-packet of {segments} wire segments exceeds the {max} slots of a batch")
            }
        }
    }
}

impl std::error::Error for PushError {}

impl From<PushError> for std::io::Error {
    fn from(e: PushError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Which way a [`PacketBatch`]'s packets go: [`Rx`] (from a device) or
/// [`Tx`] (to one). It holds what the batch keeps for its direction, per
/// batch and per packet; implemented by those two only.
pub trait Direction: sealed::Sealed + Default {
    /// What a slot records about its packet for this direction.
    #[doc(hidden)]
    type Slot: Default;
    /// Forgets the packets in `used` and the batch's progress over them.
    #[doc(hidden)]
    fn forget(&mut self, _used: &mut [SlotMeta<Self::Slot>]) {}
}

/// What a slot records besides its bytes.
#[doc(hidden)]
#[derive(Default)]
pub struct SlotMeta<S> {
    /// Payload bytes per wire segment of a TSO super-packet, or 0.
    gso: u16,
    /// What its direction records.
    dir: S,
}

/// A fixed set of packet slots for one direction: [`RxBatch`] or
/// [`TxBatch`].
///
/// Invariant between I/O calls: every slot vector is at least
/// `HEADROOM + max_packet_len` bytes long (longer once it held a TSO
/// super-packet), so a device can read straight into it; `lens[i]` says how
/// much of slot `i` (after the headroom) is packet.
pub struct PacketBatch<D: Direction> {
    slots: Vec<Vec<u8>>,
    /// Apart from `meta`: tun-rs' `recv_multiple` fills the slots and their
    /// lengths as two slices.
    lens: Vec<usize>,
    meta: Vec<SlotMeta<D::Slot>>,
    len: usize,
    /// Packets the caller asked room for. `slots` may hold more: spare
    /// slots an offload read splits a super-packet into, which can carry
    /// `len` past `limit`.
    limit: usize,
    max_packet_len: usize,
    dir: D,
}

impl<D: Direction> PacketBatch<D> {
    /// A batch of `capacity` slots that each hold a packet of up to
    /// `max_packet_len` bytes (use the device MTU; a TUN never hands out more
    /// without offload, and with offload the device splits super-packets).
    pub fn new(capacity: usize, max_packet_len: usize) -> Self {
        let mut b = PacketBatch {
            slots: Vec::new(),
            lens: Vec::new(),
            meta: Vec::new(),
            len: 0,
            limit: 0,
            max_packet_len,
            dir: D::default(),
        };
        b.reserve_slots(capacity.max(1));
        b
    }

    fn slot_size(&self) -> usize {
        HEADROOM + self.max_packet_len
    }

    /// Grows the batch to at least `capacity` packets. Only ever allocates on
    /// growth, so callers may call it on every wakeup.
    pub fn reserve_slots(&mut self, capacity: usize) {
        self.limit = self.limit.max(capacity);
        self.reserve_spare(capacity);
    }

    /// Makes sure `slots` physically holds `n` slots without raising the
    /// caller's limit.
    pub(crate) fn reserve_spare(&mut self, n: usize) {
        let size = self.slot_size();
        while self.slots.len() < n {
            self.slots.push(vec![0; size]);
            self.lens.push(0);
            self.meta.push(SlotMeta::default());
        }
    }

    /// Number of packets the batch takes before it is full.
    pub fn capacity(&self) -> usize {
        self.limit
    }

    /// Number of packets in the batch (sent ones included until `clear`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the batch holds no packet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when no slot is free. (An offload read may overfill a batch a
    /// little, into spare slots: a super-packet is never split across calls.)
    pub fn is_full(&self) -> bool {
        self.len >= self.limit
    }

    /// Number of free slots.
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.len)
    }

    /// Largest packet one slot holds.
    pub fn max_packet_len(&self) -> usize {
        self.max_packet_len
    }

    /// Forgets every packet but keeps the memory (and, to send, lets go of
    /// the payload pieces the packets referred to).
    pub fn clear(&mut self) {
        self.dir.forget(&mut self.meta[..self.len]);
        self.len = 0;
    }

    /// The packet at `index` (for one to send with a tail, only its head:
    /// [`TxBatch::tail`] holds the rest).
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        (index < self.len).then(|| &self.slots[index][HEADROOM..HEADROOM + self.lens[index]])
    }

    /// The packet at `index`, writable (e.g. to rewrite addresses in place).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut [u8]> {
        (index < self.len).then(|| &mut self.slots[index][HEADROOM..HEADROOM + self.lens[index]])
    }

    /// Every packet in order (for one to send with a tail, only its head).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.slots[..self.len].iter().zip(&self.lens).map(|(s, &l)| &s[HEADROOM..HEADROOM + l])
    }

    /// Payload bytes per wire segment if the packet at `index` is a TSO
    /// super-packet.
    pub fn gso_size(&self, index: usize) -> Option<usize> {
        if index >= self.len {
            return None;
        }
        let size = self.meta[index].gso;
        (size != 0).then(|| usize::from(size))
    }

    /// Lets `fill` write a packet straight into the next free slot (no copy):
    /// it gets the slot's packet area and returns the packet length.
    ///
    /// Returns the index of the new packet. A length past the slot is
    /// rejected rather than truncated, because a truncated IP packet would go
    /// out with a header that lies about its size.
    fn fill_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<usize, PushError> {
        if self.is_full() {
            return Err(PushError::Full);
        }
        let max = self.max_packet_len;
        let i = self.len;
        let n = fill(&mut self.slots[i][HEADROOM..HEADROOM + max]);
        if n > max {
            return Err(PushError::TooLarge { len: n, max });
        }
        self.fill_next(n, SlotMeta::default());
        Ok(i)
    }

    /// Copies `packet` into the next slot (a caller checked it is free),
    /// growing it if needed, and records it.
    fn copy_into_next(&mut self, packet: &[u8], meta: SlotMeta<D::Slot>) {
        let slot = &mut self.slots[self.len];
        if slot.len() < HEADROOM + packet.len() {
            slot.resize(HEADROOM + packet.len(), 0);
        }
        slot[HEADROOM..HEADROOM + packet.len()].copy_from_slice(packet);
        self.fill_next(packet.len(), meta);
    }

    /// Records that the next free slot now holds a packet of `n` bytes
    /// (after the headroom) and what its direction says of it.
    fn fill_next(&mut self, n: usize, meta: SlotMeta<D::Slot>) {
        let i = self.len;
        self.lens[i] = n;
        self.meta[i] = meta;
        self.len += 1;
    }
}

/// A super-packet's segment size as a slot records it (0: an ordinary
/// packet); a size of 0 or over 64 KiB is malformed.
fn gso_field(segment_size: Option<usize>) -> Result<u16, PushError> {
    match segment_size {
        Some(size) => u16::try_from(size).ok().filter(|&s| s != 0).ok_or(PushError::Malformed),
        None => Ok(0),
    }
}

impl<D: Direction> fmt::Debug for PacketBatch<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketBatch")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("max_packet_len", &self.max_packet_len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_get_clear_reuses_memory() {
        let mut b = RxBatch::new(2, 8);
        b.receive(&[1, 2, 3]).unwrap();
        b.receive(&[4; 8]).unwrap();
        assert_eq!(b.receive(&[5]), Err(PushError::Full));
        assert_eq!(b.get(0), Some(&[1u8, 2, 3][..]));
        assert_eq!(b.get(1), Some(&[4u8; 8][..]));
        assert_eq!(b.get(2), None);
        let ptr = b.get(0).unwrap().as_ptr();
        b.clear();
        assert!(b.is_empty());
        b.receive(&[9]).unwrap();
        assert_eq!(b.get(0).unwrap().as_ptr(), ptr, "slot memory is recycled");
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![&[9u8][..]]);
    }

    #[test]
    fn oversize_is_rejected_not_truncated() {
        let mut b = RxBatch::new(1, 4);
        assert_eq!(b.receive(&[0; 5]), Err(PushError::TooLarge { len: 5, max: 4 }));
        assert_eq!(b.receive_with(|_| 100), Err(PushError::TooLarge { len: 100, max: 4 }));
        assert!(b.is_empty());
        let mut t = TxBatch::new(1, 4);
        assert_eq!(t.push(&mut TxPacket::copy_of(&[0; 5])), Err(PushError::TooLarge { len: 5, max: 4 }));
        assert!(t.is_empty());
    }
}
