//! A reusable batch of packet buffers.
//!
//! The runtime moves packets between the TUN devices and the protocol core at
//! line rate, so the buffers are allocated once and recycled: `clear()` keeps
//! every slot's memory, and steady-state receive and send never allocate.
//! Each slot keeps [`HEADROOM`] bytes in front of the packet so that a device
//! running with `IFF_VNET_HDR` can prepend the virtio-net header in place
//! instead of copying the packet.

use std::fmt;

use bytes::Bytes;

use crate::pool::BufferPool;

/// Most payload pieces one packet may carry behind its slot
/// ([`PacketBatch::push_gather`]): with the slot itself, eight buffers
/// for one `writev`.
pub const MAX_TAIL_PARTS: usize = 7;

/// Bytes reserved in front of every packet: the size of `struct virtio_net_hdr`
/// that a TUN device opened with `IFF_VNET_HDR` exchanges before each frame.
pub const HEADROOM: usize = 10;

/// Why a packet could not be added to a [`PacketBatch`].
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
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full => write!(f, "packet batch is full"),
            PushError::Malformed => write!(f, "TSO super-packet is not a well-formed TCP packet"),
            PushError::TooLarge { len, max } => write!(f, "packet of {len} bytes exceeds the slot size of {max}"),
        }
    }
}

impl std::error::Error for PushError {}

impl From<PushError> for std::io::Error {
    fn from(e: PushError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// A fixed set of packet slots, filled by receive and drained by send.
///
/// Invariant between I/O calls: every slot vector is at least
/// `HEADROOM + max_packet_len` bytes long (longer once it held a TSO
/// super-packet), so a device can read straight into it; `lens[i]` says how
/// much of slot `i` (after the headroom) is packet.
pub struct PacketBatch {
    slots: Vec<Vec<u8>>,
    lens: Vec<usize>,
    /// Per slot: payload bytes per wire segment of a TSO super-packet, or 0.
    gso: Vec<u16>,
    /// Per slot, to send: payload pieces that follow the slot's bytes on
    /// the wire ([`Self::push_gather`]), empty for a packet that is
    /// whole in its slot.
    tails: Vec<Vec<Bytes>>,
    /// Per slot: the TCP checksum is the device's business. Received: the
    /// device vouched for it. To send: it holds only the pseudo-header sum
    /// and the device completes it ([`Self::push_swap_partial`]).
    csum_ok: Vec<bool>,
    /// Receive super-packets whole instead of split (see [`Self::set_gro`]).
    gro: bool,
    len: usize,
    sent: usize,
    rejected: usize,
    /// Packets a [`crate::PcapTap`] already recorded (a send that returned
    /// Pending is polled again with the same batch).
    pub(crate) tapped: usize,
    /// Packets the caller asked room for. `slots` may hold more: spare
    /// slots an offload read splits a super-packet into, which can carry
    /// `len` past `limit`.
    limit: usize,
    max_packet_len: usize,
    /// Where buffers lent out by [`Self::take_bytes`] come back.
    pool: BufferPool,
}

impl PacketBatch {
    /// A batch of `capacity` slots that each hold a packet of up to
    /// `max_packet_len` bytes (use the device MTU; a TUN never hands out more
    /// without offload, and with offload the device splits super-packets).
    pub fn new(capacity: usize, max_packet_len: usize) -> Self {
        let mut b = PacketBatch {
            slots: Vec::new(),
            lens: Vec::new(),
            gso: Vec::new(),
            tails: Vec::new(),
            csum_ok: Vec::new(),
            gro: false,
            len: 0,
            sent: 0,
            rejected: 0,
            tapped: 0,
            limit: 0,
            max_packet_len,
            pool: BufferPool::default(),
        };
        b.reserve_slots(capacity.max(1));
        b
    }

    /// A batch sized for `io`: its MTU, and the 128 slots that tun-rs and
    /// wireguard-go found to be the sweet spot for one wakeup.
    pub fn for_io(io: &dyn crate::PacketIo) -> Self {
        Self::new(crate::DEFAULT_BATCH, io.mtu())
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
            self.gso.push(0);
            self.tails.push(Vec::new());
            self.csum_ok.push(false);
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

    /// Forgets every packet but keeps the memory (and lets go of the
    /// payload pieces the packets referred to).
    pub fn clear(&mut self) {
        for t in &mut self.tails[..self.len] {
            t.clear();
        }
        self.len = 0;
        self.sent = 0;
        self.rejected = 0;
        self.tapped = 0;
    }

    /// Packets not yet written by a `poll_send_batch` that stopped half-way.
    pub fn unsent(&self) -> usize {
        self.len - self.sent
    }

    /// Bytes of the packets not yet written (headroom not counted, tails
    /// counted).
    pub fn unsent_bytes(&self) -> usize {
        let tails: usize = self.tails[self.sent..self.len].iter().flatten().map(Bytes::len).sum();
        self.lens[self.sent..self.len].iter().sum::<usize>() + tails
    }

    /// Copies `packet` into the next free slot.
    pub fn push(&mut self, packet: &[u8]) -> Result<(), PushError> {
        if packet.len() > self.max_packet_len {
            return Err(PushError::TooLarge { len: packet.len(), max: self.max_packet_len });
        }
        self.push_with(|buf| {
            buf[..packet.len()].copy_from_slice(packet);
            packet.len()
        })
        .map(|_| ())
    }

    /// Copies a TSO super-packet (up to 64 KiB, cut every `segment_size`
    /// payload bytes by the device) into the next free slot, growing the
    /// slot if needed. Only for devices whose [`crate::DeviceCaps::tso`] says
    /// they take them; [`Self::push_segments`] cuts one for the others.
    pub fn push_gso(&mut self, packet: &[u8], segment_size: usize) -> Result<(), PushError> {
        if packet.len() > mptun_wire::gso::GSO_MAX_SIZE {
            return Err(PushError::TooLarge { len: packet.len(), max: mptun_wire::gso::GSO_MAX_SIZE });
        }
        let size = gso_field(Some(segment_size))?;
        if self.is_full() {
            return Err(PushError::Full);
        }
        self.copy_into_next(packet, size, false);
        Ok(())
    }

    /// Copies `packet` into the next slot (a caller checked it is free),
    /// growing it if needed, and records it.
    fn copy_into_next(&mut self, packet: &[u8], gso: u16, csum_ok: bool) {
        let slot = &mut self.slots[self.len];
        if slot.len() < HEADROOM + packet.len() {
            slot.resize(HEADROOM + packet.len(), 0);
        }
        slot[HEADROOM..HEADROOM + packet.len()].copy_from_slice(packet);
        self.fill_next(packet.len(), gso, csum_ok);
    }

    /// Adds a packet whose headers are `head` (copied into the next free
    /// slot: a hundred bytes or so) and whose payload is `tail`, pieces of
    /// memory the device writes behind them (`writev`) instead of their
    /// being copied in. Only for a device whose `DeviceCaps::gather` is
    /// true. Its TCP checksum must be partial (nothing here reads the
    /// payload), so the device must also complete checksums. `gso` as for
    /// [`Self::push_swap`].
    pub fn push_gather(&mut self, head: &[u8], tail: &[Bytes], gso: Option<usize>) -> Result<(), PushError> {
        if tail.len() > MAX_TAIL_PARTS {
            return Err(PushError::Malformed);
        }
        let len = head.len() + tail.iter().map(Bytes::len).sum::<usize>();
        let max = match gso {
            Some(_) => mptun_wire::gso::GSO_MAX_SIZE,
            None => self.max_packet_len,
        };
        if len > max {
            return Err(PushError::TooLarge { len, max });
        }
        let gso = gso_field(gso)?;
        if self.is_full() {
            return Err(PushError::Full);
        }
        let i = self.len;
        self.copy_into_next(head, gso, true);
        self.tails[i].extend(tail.iter().filter(|b| !b.is_empty()).cloned());
        Ok(())
    }

    /// The payload pieces that follow the packet at `index` on the wire
    /// ([`Self::push_gather`]); empty for a packet that is whole in
    /// its slot.
    pub fn tail(&self, index: usize) -> &[Bytes] {
        if index < self.len {
            &self.tails[index]
        } else {
            &[]
        }
    }

    /// Moves a packet into the next free slot without copying it: `buf`
    /// holds it after [`HEADROOM`] bytes (`buf[HEADROOM..HEADROOM + len]`,
    /// the headroom for the device's header), and is swapped with the slot's
    /// buffer, so on return `buf` is a spare buffer to build the next packet
    /// in. `gso` is the segment size of a TSO super-packet (only for devices
    /// that cut them, see [`Self::push_gso`]). The send path's packets are
    /// built once and then only change hands: a 64 KiB super-segment copied
    /// twice more on its way to the device cost as much as building it.
    pub fn push_swap(&mut self, buf: &mut Vec<u8>, len: usize, gso: Option<usize>) -> Result<(), PushError> {
        let max = match gso {
            Some(_) => mptun_wire::gso::GSO_MAX_SIZE,
            None => self.max_packet_len,
        };
        if len > max || HEADROOM + len > buf.len() {
            return Err(PushError::TooLarge { len, max });
        }
        let gso = gso_field(gso)?;
        if self.is_full() {
            return Err(PushError::Full);
        }
        // The slot invariant: every slot can take an MTU-sized read.
        if buf.len() < self.slot_size() {
            buf.resize(self.slot_size(), 0);
        }
        std::mem::swap(&mut self.slots[self.len], buf);
        self.fill_next(len, gso, false);
        Ok(())
    }

    /// [`Self::push_swap`] for a packet whose TCP checksum the device must
    /// complete (`mptun_wire::emit_tcp_packet_offload`): only for a device
    /// whose `DeviceCaps::checksum_offload` is true.
    pub fn push_swap_partial(&mut self, buf: &mut Vec<u8>, len: usize, gso: Option<usize>) -> Result<(), PushError> {
        self.push_swap(buf, len, gso)?;
        self.csum_ok[self.len - 1] = true;
        Ok(())
    }

    /// Whether the packet at `index` to send has a partial TCP checksum
    /// for the device to complete.
    pub fn checksum_partial(&self, index: usize) -> bool {
        index < self.len && self.csum_ok[index]
    }

    /// Cuts a TSO super-packet into wire segments as a device would
    /// (`mptun_wire::gso`) and adds each: software segmentation for devices
    /// without TSO. All or nothing: `Full` if the segments do not all fit.
    pub fn push_segments(&mut self, packet: &[u8], segment_size: usize) -> Result<(), PushError> {
        let mut segs = mptun_wire::gso::segments(packet, segment_size).map_err(|_| PushError::Malformed)?;
        if segs.layout().segment_count(segment_size) > self.remaining() {
            return Err(PushError::Full);
        }
        let from = self.len;
        for _ in 0..segs.layout().segment_count(segment_size) {
            // A segment that does not fit a slot (the packet's headers are
            // longer than the MTU allows) reads as too large.
            let r = self.push_with(|buf| match segs.next_into(buf) {
                Ok(Some(n)) => n,
                Ok(None) | Err(_) => usize::MAX,
            });
            if let Err(e) = r {
                self.len = from;
                return Err(match e {
                    PushError::TooLarge { .. } => PushError::Malformed,
                    e => e,
                });
            }
        }
        Ok(())
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
        self.gro = on;
    }

    /// Whether received super-packets stay whole ([`Self::set_gro`]).
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Whether the device vouched for the TCP checksum of the received
    /// packet at `index`: the kernel verified it (`DATA_VALID`, Linux
    /// `CHECKSUM_UNNECESSARY`) or the packet comes from a local stack that
    /// left it for the hardware (`NEEDS_CSUM`, `CHECKSUM_PARTIAL`: the field
    /// holds only the pseudo-header sum, and Linux's own receive path trusts
    /// such a packet). Only a batch in [`Self::set_gro`] mode reports it; a
    /// split read has its checksums completed by the splitter.
    pub fn checksum_verified(&self, index: usize) -> bool {
        index < self.len && self.csum_ok[index]
    }

    /// Payload bytes per wire segment if the packet at `index` is a TSO
    /// super-packet.
    pub fn gso_size(&self, index: usize) -> Option<usize> {
        (index < self.len && self.gso[index] != 0).then(|| usize::from(self.gso[index]))
    }

    /// Lets `fill` write a packet straight into the next free slot (no copy):
    /// it gets the whole slot and returns the packet length.
    ///
    /// Returns the index of the new packet. A length past the slot is
    /// rejected rather than truncated, because a truncated IP packet would go
    /// out with a header that lies about its size.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<usize, PushError> {
        if self.is_full() {
            return Err(PushError::Full);
        }
        let max = self.max_packet_len;
        let i = self.len;
        let slot = &mut self.slots[i][HEADROOM..HEADROOM + max];
        let n = fill(slot);
        if n > max {
            return Err(PushError::TooLarge { len: n, max });
        }
        self.fill_next(n, 0, false);
        Ok(i)
    }

    /// The packet at `index` (for one pushed with a tail, only its head:
    /// [`Self::tail`] holds the rest).
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        (index < self.len).then(|| &self.slots[index][HEADROOM..HEADROOM + self.lens[index]])
    }

    /// The packet at `index`, writable (e.g. to rewrite addresses in place).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut [u8]> {
        (index < self.len).then(|| &mut self.slots[index][HEADROOM..HEADROOM + self.lens[index]])
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
        let buf = std::mem::replace(&mut self.slots[index], self.pool.get(size));
        let len = std::mem::take(&mut self.lens[index]);
        Some(self.pool.lend(buf, HEADROOM..HEADROOM + len))
    }

    /// Every packet in order (for one with a tail, only its head: see
    /// [`Self::tail`]).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.slots[..self.len].iter().zip(&self.lens).map(|(s, &l)| &s[HEADROOM..HEADROOM + l])
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
        self.fill_next(n, 0, false);
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
    /// device vouched for if `csum_ok`.
    pub(crate) fn commit_whole(&mut self, n: usize, gso: u16, csum_ok: bool) {
        debug_assert!(self.len < self.slots.len() && HEADROOM + n <= self.slots[self.len].len());
        self.fill_next(n, gso, csum_ok);
    }

    /// Records that the next free slot now holds a packet of `n` bytes (after
    /// the headroom), its TSO segment size (0: none) and checksum state.
    fn fill_next(&mut self, n: usize, gso: u16, csum_ok: bool) {
        let i = self.len;
        self.lens[i] = n;
        if !self.tails[i].is_empty() {
            self.tails[i].clear();
        }
        self.gso[i] = gso;
        self.csum_ok[i] = csum_ok;
        self.len += 1;
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
        self.gso[self.len..self.len + n].fill(0);
        self.csum_ok[self.len..self.len + n].fill(false);
        self.len += n;
    }

    /// Whether the next unsent packet's TCP checksum is left to the device.
    pub(crate) fn next_unsent_partial(&self) -> bool {
        self.sent < self.len && self.csum_ok[self.sent]
    }

    /// TSO segment size of the next unsent packet (0: an ordinary packet).
    pub(crate) fn next_unsent_gso(&self) -> u16 {
        if self.sent < self.len {
            self.gso[self.sent]
        } else {
            0
        }
    }

    /// The next unsent packet, headroom included in front, and the payload
    /// pieces that follow it ([`Self::push_gather`]).
    pub(crate) fn next_unsent_gathered(&mut self) -> Option<(&mut [u8], &[Bytes])> {
        let i = self.sent;
        (i < self.len).then(|| (&mut self.slots[i][..HEADROOM + self.lens[i]], &self.tails[i][..]))
    }

    /// Records that `n` more packets went out.
    pub(crate) fn advance_sent(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.len);
    }

    /// Records that the next unsent packet was refused and dropped.
    pub(crate) fn reject_one(&mut self) {
        if self.sent < self.len {
            self.sent += 1;
            self.rejected += 1;
        }
    }

    /// Ends a send: returns how many packets the device accepted over all
    /// the polls of this batch, and empties it.
    pub(crate) fn finish_send(&mut self) -> usize {
        let accepted = self.sent - self.rejected;
        self.clear();
        accepted
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

impl fmt::Debug for PacketBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketBatch")
            .field("len", &self.len)
            .field("sent", &self.sent)
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
        let mut b = PacketBatch::new(2, 8);
        b.push(&[1, 2, 3]).unwrap();
        b.push(&[4; 8]).unwrap();
        assert_eq!(b.push(&[5]), Err(PushError::Full));
        assert_eq!(b.get(0), Some(&[1u8, 2, 3][..]));
        assert_eq!(b.get(1), Some(&[4u8; 8][..]));
        assert_eq!(b.get(2), None);
        let ptr = b.get(0).unwrap().as_ptr();
        b.clear();
        assert!(b.is_empty());
        b.push(&[9]).unwrap();
        assert_eq!(b.get(0).unwrap().as_ptr(), ptr, "slot memory is recycled");
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![&[9u8][..]]);
    }

    #[test]
    fn a_gathered_packet_carries_its_tail_until_cleared() {
        let mut b = PacketBatch::new(4, 1500);
        let piece = Bytes::from(vec![7u8; 700]);
        let head = [1u8; 60];
        b.push_gather(&head, &[piece.clone(), Bytes::new(), piece.clone()], None).unwrap();
        assert_eq!(b.tail(0), &[piece.clone(), piece.clone()][..], "empty pieces left out");
        assert!(b.checksum_partial(0), "a gathered payload is never summed here");
        assert_eq!((b.get(0).unwrap().len(), b.unsent_bytes()), (60, 1460));
        // The whole packet must fit: 60 + 1500 is over the MTU.
        let big = Bytes::from(vec![0u8; 1500]);
        assert_eq!(b.push_gather(&head, &[big], None), Err(PushError::TooLarge { len: 1560, max: 1500 }));
        let many = vec![Bytes::from_static(b"x"); MAX_TAIL_PARTS + 1];
        assert_eq!(b.push_gather(&head, &many, None), Err(PushError::Malformed));
        assert_eq!(b.get(0), Some(&head[..]), "the headers copied in");
        assert_eq!(b.len(), 1);
        // An ordinary packet in a slot that had a tail has none.
        b.clear();
        assert!(piece.is_unique(), "cleared: the batch let go of the pieces");
        b.push(&[9; 100]).unwrap();
        assert!(b.tail(0).is_empty() && !b.checksum_partial(0));
        assert_eq!(b.unsent_bytes(), 100);
    }

    #[test]
    fn take_bytes_lends_the_slot_s_buffer_and_recycles_it() {
        let mut b = PacketBatch::new(2, 8);
        b.push(&[1, 2, 3]).unwrap();
        b.push(&[4; 8]).unwrap();
        let ptr = b.get(1).unwrap().as_ptr();
        let taken = b.take_bytes(1).unwrap();
        assert_eq!(&taken[..], &[4u8; 8][..]);
        assert_eq!(taken.as_ptr(), ptr, "moved, not copied");
        assert_eq!(b.take_bytes(2), None);
        assert_eq!(b.get(1), Some(&[][..]), "the slot reads as empty");
        // The slot took another buffer: refilling it leaves `taken` alone.
        b.clear();
        b.push(&[7; 8]).unwrap();
        b.push(&[8; 8]).unwrap();
        assert_eq!(&taken[..], &[4u8; 8][..]);
        assert_ne!(b.get(1).unwrap().as_ptr(), ptr);
        // Once dropped, the next take reuses it.
        drop(taken);
        let again = b.take_bytes(0).unwrap();
        assert_eq!(&again[..], &[7u8; 8][..]);
        b.clear();
        b.push(&[9; 8]).unwrap();
        assert_eq!(b.get(0).unwrap().as_ptr(), ptr, "the returned buffer went to the slot");
    }

    #[test]
    fn oversize_is_rejected_not_truncated() {
        let mut b = PacketBatch::new(1, 4);
        assert_eq!(b.push(&[0; 5]), Err(PushError::TooLarge { len: 5, max: 4 }));
        assert_eq!(b.push_with(|_| 100), Err(PushError::TooLarge { len: 100, max: 4 }));
        assert!(b.is_empty());
    }

    #[test]
    fn push_swap_moves_the_buffer_in_and_hands_back_the_slot_s() {
        let mut b = PacketBatch::new(2, 8);
        let mut buf = vec![0u8; HEADROOM + 6];
        buf[HEADROOM..].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        let ptr = buf.as_ptr();
        b.push_swap(&mut buf, 6, None).unwrap();
        assert_eq!(b.get(0), Some(&[1u8, 2, 3, 4, 5, 6][..]));
        assert_eq!(b.get(0).unwrap().as_ptr(), ptr.wrapping_add(HEADROOM), "not copied");
        assert_ne!(buf.as_ptr(), ptr, "the slot's old buffer came back");
        assert!(buf.len() >= HEADROOM + 8);
        // The slot still takes an MTU-sized packet after it held a short buffer.
        b.clear();
        assert_eq!(b.next_free_mut().unwrap().len(), 8);
        // Too long for the slot without GSO, or for its buffer: refused, nothing moved.
        let mut big = vec![0u8; HEADROOM + 100];
        assert_eq!(b.push_swap(&mut big, 100, None), Err(PushError::TooLarge { len: 100, max: 8 }));
        assert_eq!(
            b.push_swap(&mut big, 101, Some(50)).unwrap_err(),
            PushError::TooLarge { len: 101, max: mptun_wire::gso::GSO_MAX_SIZE }
        );
        assert_eq!(b.push_swap(&mut big, 100, Some(0)), Err(PushError::Malformed));
        b.push_swap(&mut big, 100, Some(50)).unwrap();
        assert_eq!((b.len(), b.gso_size(0)), (1, Some(50)));
        b.push(&[9]).unwrap();
        assert_eq!(b.push_swap(&mut buf, 1, None), Err(PushError::Full));
    }

    fn tcp(payload: usize) -> Vec<u8> {
        let (s, d) = ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
        let f = crate::testutil::TcpFields { seq: 7, ack: 1, flags: 0x19, window: 100, options: &[] };
        crate::testutil::tcp_packet(s, d, f, &vec![3u8; payload])
    }

    #[test]
    fn super_packets_go_whole_or_cut_into_wire_segments() {
        let sp = tcp(4000);
        let mut b = PacketBatch::new(4, 1500);
        b.push(&[1; 10]).unwrap();
        b.push_gso(&sp, 1460).unwrap();
        assert_eq!((b.get(1), b.gso_size(1), b.gso_size(0)), (Some(&sp[..]), Some(1460), None));
        b.clear();
        b.push_segments(&sp, 1460).unwrap();
        assert_eq!(b.len(), 3);
        let lens: Vec<usize> = b.iter().map(<[u8]>::len).collect();
        assert_eq!(lens, vec![1500, 1500, 40 + 4000 - 2 * 1460]);
        for (i, p) in b.iter().enumerate() {
            let p = mptun_wire::parse_tcp_packet(p).expect("valid wire segment");
            assert_eq!(p.tcp.seq, 7 + 1460 * i as u32);
            assert_eq!(p.tcp.flags.fin(), i == 2, "FIN on the last only");
        }
        assert!(b.gso_size(0).is_none());
        // All or nothing: three segments do not fit one free slot.
        assert_eq!(b.push_segments(&sp, 1460), Err(PushError::Full));
        assert_eq!(b.len(), 3);
        // Hostile or broken: refused, nothing added.
        b.clear();
        assert_eq!(b.push_segments(&sp[..30], 1460), Err(PushError::Malformed));
        assert_eq!(b.push_segments(&sp, 0), Err(PushError::Malformed));
        assert_eq!(b.push_segments(&sp, 1600), Err(PushError::Malformed), "a segment larger than a slot");
        assert_eq!(b.push_gso(&sp, 0), Err(PushError::Malformed));
        assert!(b.is_empty());
        // A slot that held a super-packet still takes MTU-sized reads.
        b.push_gso(&sp, 1460).unwrap();
        b.clear();
        assert_eq!(b.next_free_mut().unwrap().len(), 1500);
    }
}
