//! The receive side of a batch: filled by a device, read by the caller.

use bytes::Bytes;

use super::{sealed, Direction, PacketBatch, PushError, SlotMeta, HEADROOM};
use crate::pool::BufferPool;

/// A batch of received packets: a device appends what it reads
/// ([`crate::PacketIo::poll_recv_batch`]), the caller reads them and clears
/// it.
pub type RxBatch = PacketBatch<Rx>;

/// What a receive batch keeps besides its slots.
#[derive(Default)]
pub struct Rx {
    /// Receive super-packets whole instead of split (see
    /// [`RxBatch::set_gro`]).
    gro: bool,
    /// Where buffers lent out by [`RxBatch::take_bytes`] come back.
    pool: BufferPool,
}

/// What a receive slot records about its packet (besides a super-packet's
/// segment size, when it was read whole).
#[derive(Default)]
pub struct RxSlot {
    /// The device vouched for the TCP checksum (see
    /// [`RxBatch::checksum_verified`]).
    checksum_verified: bool,
    /// Where the sum of a checksum left partial starts and where its field
    /// is from there (see [`RxBatch::partial_checksum`]).
    partial: Option<(u16, u16)>,
}

impl sealed::Sealed for Rx {}

impl Direction for Rx {
    type Slot = RxSlot;
}

impl PacketBatch<Rx> {
    /// A batch sized for `io`: its MTU, and the 128 slots that tun-rs and
    /// wireguard-go found to be the sweet spot for one wakeup.
    pub fn for_io(io: &dyn crate::PacketIo) -> Self {
        Self::new(crate::DEFAULT_BATCH, io.mtu())
    }

    /// Copies a received `packet` into the next free slot: for a device
    /// whose packets arrive elsewhere first (an in-memory queue).
    pub fn receive(&mut self, packet: &[u8]) -> Result<(), PushError> {
        if packet.len() > self.max_packet_len {
            return Err(PushError::TooLarge { len: packet.len(), max: self.max_packet_len });
        }
        self.receive_with(|buf| {
            buf[..packet.len()].copy_from_slice(packet);
            packet.len()
        })
        .map(|_| ())
    }

    /// Lets `fill` write a received packet straight into the next free slot
    /// (no copy): it gets the slot's packet area and returns the packet
    /// length. Returns the index of the new packet; a length past the slot
    /// is rejected rather than truncated.
    pub fn receive_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<usize, PushError> {
        self.fill_with(fill)
    }

    /// Asks devices that can to hand over received TCP super-packets whole
    /// (a GRO'd or TSO'd skb read from a TUN with offload: up to 64 KiB
    /// behind one header, [`Self::gso_size`] its wire segment size) rather
    /// than cut into wire segments. For consumers that take a segment of any
    /// length, as a TCP receiver does (Linux's stack sees a GRO skb as one
    /// segment): one header, one checksum decision and one copy per 64 KiB
    /// instead of per 1448 bytes. Off by default: a packet forwarder that
    /// counts, drops or delays packets wants wire segments.
    pub fn set_gro(&mut self, on: bool) {
        self.dir.gro = on;
    }

    /// Whether received super-packets stay whole ([`Self::set_gro`]).
    pub fn gro(&self) -> bool {
        self.dir.gro
    }

    /// Whether the device vouched for the TCP checksum of the received
    /// packet at `index`: the kernel verified it (`DATA_VALID`, Linux
    /// `CHECKSUM_UNNECESSARY`) or the packet comes from a local stack that
    /// left it for the hardware (`NEEDS_CSUM`, `CHECKSUM_PARTIAL`: the field
    /// holds only the pseudo-header sum, and Linux's own receive path trusts
    /// such a packet). Only a batch in [`Self::set_gro`] mode reports it; a
    /// split read has its checksums completed by the splitter.
    pub fn checksum_verified(&self, index: usize) -> bool {
        index < self.len && self.meta[index].dir.checksum_verified
    }

    /// For a received packet at `index` whose checksum the sending stack
    /// left for the hardware (`NEEDS_CSUM`): where the sum starts
    /// (`csum_start`, from the IP header on) and where the field lies from
    /// there (`csum_offset`). The field holds only the pseudo-header sum
    /// until [`mptun_wire::checksum::complete_partial`] finishes it, which
    /// whatever shows the packet to a reader (a capture) must do: the stack
    /// itself trusts such a packet ([`Self::checksum_verified`]) and never
    /// needs the sum. Reported only in [`Self::set_gro`] mode, as
    /// `checksum_verified` is.
    pub fn partial_checksum(&self, index: usize) -> Option<(usize, usize)> {
        let (start, offset) = self.meta[..self.len].get(index)?.dir.partial?;
        Some((usize::from(start), usize::from(offset)))
    }

    /// The packet at `index` as `Bytes`, without a copy: the slot's buffer
    /// moves into the result and the slot takes a recycled buffer at least
    /// as large in its place, so the slot no longer holds the packet (it
    /// reads as empty until the batch is cleared). The buffer returns to
    /// this batch's pool (at most [`crate::POOL_MAX`] kept) when the last
    /// slice of it is dropped, possibly on another thread. For a receiver
    /// that keeps super-packets' payloads as they are instead of copying
    /// them out (`Endpoint::handle_packet_bytes`).
    pub fn take_bytes(&mut self, index: usize) -> Option<Bytes> {
        if index >= self.len {
            return None;
        }
        let size = self.slots[index].len();
        let buf = std::mem::replace(&mut self.slots[index], self.dir.pool.get(size));
        let len = std::mem::take(&mut self.lens[index]);
        Some(self.dir.pool.lend(buf, HEADROOM..HEADROOM + len))
    }

    // ---- device-side access (crate-internal) ----

    /// The next free slot's packet area, for a device read.
    pub(crate) fn next_free_mut(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let i = self.len;
        let max = self.max_packet_len;
        self.slots.get_mut(i).map(|s| &mut s[HEADROOM..HEADROOM + max])
    }

    /// Marks the next free slot as holding `n` bytes.
    pub(crate) fn commit(&mut self, n: usize) {
        debug_assert!(n <= self.max_packet_len && self.len < self.slots.len());
        self.fill_next(n, SlotMeta::default());
    }

    /// The next free slot, whole (headroom in front), grown to take `len`
    /// bytes after the headroom: for a read that keeps a super-packet whole.
    /// Call [`Self::commit_whole`] with what landed after the headroom.
    pub(crate) fn next_free_whole(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let slot = self.slots.get_mut(self.len)?;
        if slot.len() < HEADROOM + len {
            slot.resize(HEADROOM + len, 0);
        }
        Some(&mut slot[..])
    }

    /// Marks the slot [`Self::next_free_whole`] gave out as holding `n`
    /// bytes after the headroom: a super-packet cut every `gso` payload
    /// bytes on the wire (0: an ordinary packet), whose TCP checksum the
    /// device vouched for if `checksum_verified`, and left partial at
    /// `partial` (`csum_start`, `csum_offset`) if it says so.
    pub(crate) fn commit_whole(&mut self, n: usize, gso: u16, checksum_verified: bool, partial: Option<(u16, u16)>) {
        debug_assert!(self.len < self.slots.len() && HEADROOM + n <= self.slots[self.len].len());
        self.fill_next(n, SlotMeta { gso, dir: RxSlot { checksum_verified, partial } });
    }

    /// The free slots (whole vectors, headroom included) and their length
    /// cells, for tun-rs' `recv_multiple`, which splits a GSO super-packet into
    /// several slots at once. Call [`Self::commit_many`] with its count.
    pub(crate) fn free_slots_mut(&mut self) -> (&mut [Vec<u8>], &mut [usize]) {
        let i = self.len;
        (&mut self.slots[i..], &mut self.lens[i..])
    }

    /// Marks `n` free slots, already sized by the device, as filled.
    pub(crate) fn commit_many(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.slots.len());
        for l in &mut self.lens[self.len..self.len + n] {
            *l = (*l).min(self.max_packet_len);
        }
        self.meta[self.len..self.len + n].fill_with(SlotMeta::default);
        self.len += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_bytes_lends_the_slot_s_buffer_and_recycles_it() {
        let mut b = RxBatch::new(2, 8);
        for p in [&[1u8, 2, 3][..], &[4; 8]] {
            b.receive(p).unwrap();
        }
        let ptr = b.get(1).unwrap().as_ptr();
        let taken = b.take_bytes(1).unwrap();
        assert_eq!(&taken[..], &[4u8; 8][..]);
        assert_eq!(taken.as_ptr(), ptr, "moved, not copied");
        assert_eq!(b.take_bytes(2), None);
        assert_eq!(b.get(1), Some(&[][..]), "the slot reads as empty");
        // The slot took another buffer: refilling it leaves `taken` alone.
        b.clear();
        b.receive(&[7; 8]).unwrap();
        b.receive(&[8; 8]).unwrap();
        assert_eq!(&taken[..], &[4u8; 8][..]);
        assert_ne!(b.get(1).unwrap().as_ptr(), ptr);
        // Once dropped, the next take reuses it.
        drop(taken);
        let again = b.take_bytes(0).unwrap();
        assert_eq!(&again[..], &[7u8; 8][..]);
        b.clear();
        b.receive(&[9; 8]).unwrap();
        assert_eq!(b.get(0).unwrap().as_ptr(), ptr, "the returned buffer went to the slot");
    }

    /// What a whole read records stays with its slot, and a read into the
    /// slot afterwards records nothing of it.
    #[test]
    fn a_whole_read_records_its_segment_size_and_checksum_trust() {
        let mut b = RxBatch::new(2, 1500);
        b.set_gro(true);
        let slot = b.next_free_whole(4000).unwrap();
        assert!(slot.len() >= HEADROOM + 4000);
        b.commit_whole(4000, 1448, true, Some((20, 16)));
        assert_eq!((b.gso_size(0), b.checksum_verified(0), b.get(0).unwrap().len()), (Some(1448), true, 4000));
        assert_eq!(b.partial_checksum(0), Some((20, 16)));
        b.receive(&[1; 60]).unwrap();
        assert_eq!((b.gso_size(1), b.checksum_verified(1), b.partial_checksum(1)), (None, false, None));
        b.clear();
        b.receive(&[2; 60]).unwrap();
        assert_eq!(
            (b.gso_size(0), b.checksum_verified(0), b.partial_checksum(0)),
            (None, false, None),
            "cleared: nothing left of the last read"
        );
        assert_eq!((b.gso_size(5), b.checksum_verified(5), b.partial_checksum(5)), (None, false, None));
    }
}
