//! The transmit side of a batch: one [`TxPacket`] pushed at a time, in the
//! form the device takes, and written by the device.

use std::fmt;

use arrayvec::ArrayVec;
use bytes::Bytes;
use mptun_wire::gso::GSO_MAX_SIZE;

use super::{gso_field, sealed, Direction, PacketBatch, PushError, SlotMeta, HEADROOM};
use crate::DeviceCaps;

/// Most payload pieces one packet may carry behind its headers
/// ([`TxPacket::with_tail`]): with the headers' own buffer, eight buffers
/// for one `writev`.
pub const MAX_TAIL_PARTS: usize = 7;

/// Payload pieces that follow a packet's headers, in order: kept inline so
/// that a packet and a slot carry them without an allocation.
type Tail = ArrayVec<Bytes, MAX_TAIL_PARTS>;

/// The state of the TCP checksum of a packet to send. (A received packet's
/// state is another matter: whether its device vouched for it,
/// [`crate::RxBatch::checksum_verified`].)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TxChecksum {
    /// Complete: the packet may go on a wire as it is. Also every packet
    /// that is not TCP.
    #[default]
    Complete,
    /// The field holds only the pseudo-header sum
    /// (`mptun_wire::emit_tcp_packet_offload`) and whoever puts the packet
    /// on a wire completes it, as a NIC does for Linux's
    /// `CHECKSUM_PARTIAL`: the stack never summed the payload.
    Partial,
}

/// One packet to send, with everything a device needs to put it on a wire:
/// the bytes built for it, the payload pieces that follow them, its TSO
/// segment size and its checksum state.
///
/// After quinn-udp's `Transmit`, with one difference: it owns the buffer the
/// packet was built in (after [`HEADROOM`] bytes, for the device's own
/// header), so that a [`TxBatch`] can take the buffer in instead of copying
/// the packet out of it.
pub struct TxPacket {
    /// [`HEADROOM`] bytes, then the packet's first `len` bytes (all of it,
    /// or its headers when `tail` holds the payload).
    buf: Vec<u8>,
    len: usize,
    tail: Tail,
    segment_size: Option<usize>,
    checksum: TxChecksum,
}

impl TxPacket {
    /// The packet `buf[HEADROOM..HEADROOM + len]`: an ordinary packet (no
    /// TSO) with a complete checksum and nothing behind it until the
    /// `with_*` methods say otherwise.
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than `HEADROOM + len`.
    pub fn new(buf: Vec<u8>, len: usize) -> TxPacket {
        assert!(HEADROOM + len <= buf.len(), "a packet of {len} bytes in a buffer of {}", buf.len());
        TxPacket { buf, len, tail: Tail::new(), segment_size: None, checksum: TxChecksum::Complete }
    }

    /// A copy of `packet` in a buffer of its own.
    pub fn copy_of(packet: &[u8]) -> TxPacket {
        Self::copy_in(Vec::new(), packet)
    }

    /// A copy of `packet` in `buf` (grown if needed): for a caller that
    /// builds its packets elsewhere and reuses the buffers a batch hands
    /// back ([`Self::into_buffer`]).
    pub fn copy_in(mut buf: Vec<u8>, packet: &[u8]) -> TxPacket {
        if buf.len() < HEADROOM + packet.len() {
            buf.resize(HEADROOM + packet.len(), 0);
        }
        buf[HEADROOM..HEADROOM + packet.len()].copy_from_slice(packet);
        Self::new(buf, packet.len())
    }

    /// Makes it a TSO super-packet: several segments' consecutive payload
    /// behind one header, cut every `segment_size` payload bytes on the wire
    /// (`mptun_wire::gso`), or an ordinary packet for `None`.
    pub fn with_segment_size(mut self, segment_size: Option<usize>) -> TxPacket {
        self.segment_size = segment_size;
        self
    }

    /// Sets the state of its TCP checksum.
    pub fn with_checksum(mut self, checksum: TxChecksum) -> TxPacket {
        self.checksum = checksum;
        self
    }

    /// Puts `pieces` behind the bytes in the buffer: the packet's payload
    /// left where it lies (slices of a send buffer), for a device that
    /// writes it behind the headers itself (a gather write); it is copied
    /// behind them for any other ([`Self::fit_to`]). Empty pieces are left
    /// out; more than [`MAX_TAIL_PARTS`] are `Malformed`.
    pub fn with_tail(mut self, pieces: &[Bytes]) -> Result<TxPacket, PushError> {
        if pieces.len() > MAX_TAIL_PARTS {
            return Err(PushError::Malformed);
        }
        self.tail.clear();
        self.tail.extend(pieces.iter().filter(|b| !b.is_empty()).cloned());
        Ok(self)
    }

    /// The bytes in the buffer: the whole packet, or its headers when
    /// [`Self::tail`] holds the payload.
    pub fn head(&self) -> &[u8] {
        &self.buf[HEADROOM..HEADROOM + self.len]
    }

    /// Length of [`Self::head`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty packet (what a successful [`TxBatch::push`]
    /// leaves behind).
    pub fn is_empty(&self) -> bool {
        self.packet_len() == 0
    }

    /// The payload pieces that follow [`Self::head`] (none for a packet
    /// that is whole in its buffer).
    pub fn tail(&self) -> &[Bytes] {
        &self.tail
    }

    /// Bytes of the whole packet: the head's and the tail's.
    pub fn packet_len(&self) -> usize {
        self.len + self.tail.iter().map(Bytes::len).sum::<usize>()
    }

    /// Payload bytes per wire segment of a TSO super-packet.
    pub fn segment_size(&self) -> Option<usize> {
        self.segment_size
    }

    /// The state of its TCP checksum.
    pub fn checksum(&self) -> TxChecksum {
        self.checksum
    }

    /// The buffer, headroom in front, for the next packet to be built in.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// Moves the packet into `buf` (its headroom and head copied, `buf`
    /// grown if needed) and returns the buffer it was in: for a packet
    /// kept a while, so that a few bytes do not hold a buffer built for
    /// 64 KiB.
    pub fn move_into(&mut self, mut buf: Vec<u8>) -> Vec<u8> {
        let n = HEADROOM + self.len;
        if buf.len() < n {
            buf.resize(n, 0);
        }
        buf[..n].copy_from_slice(&self.buf[..n]);
        std::mem::replace(&mut self.buf, buf)
    }

    /// Puts the packet in the form a device with `caps` takes: its payload
    /// pieces copied behind its headers unless the device writes them
    /// itself ([`DeviceCaps::gather`]), and a partial checksum completed
    /// unless the device completes it ([`DeviceCaps::checksum_offload`] and
    /// the device gets the packet whole: a super-packet is cut on its way
    /// to a device without TSO, and cutting needs the checksum complete).
    /// [`TxBatch::push`] does this itself; a caller that keeps packets a
    /// while before pushing them does it first, so that what it keeps is
    /// what the device will get. Doing it again changes nothing.
    ///
    /// An error says a partial checksum could not be completed (the packet
    /// is not TCP): it is then left as it is, marked complete.
    pub fn fit_to(&mut self, caps: DeviceCaps) -> Result<(), mptun_wire::Error> {
        let whole = self.segment_size.is_none() || caps.tso;
        let device_sums = caps.checksum_offload && whole;
        let gathered = caps.gather && device_sums && self.checksum == TxChecksum::Partial;
        if !self.tail.is_empty() && !gathered {
            self.assemble();
        }
        if self.checksum == TxChecksum::Partial && !device_sums {
            self.checksum = TxChecksum::Complete;
            mptun_wire::gso::complete_checksum(&mut self.buf[HEADROOM..HEADROOM + self.len])?;
        }
        Ok(())
    }

    /// Copies the tail behind the head, in the buffer.
    fn assemble(&mut self) {
        let n = self.packet_len();
        if self.buf.len() < HEADROOM + n {
            self.buf.resize(HEADROOM + n, 0);
        }
        let mut at = HEADROOM + self.len;
        for piece in self.tail.drain(..) {
            self.buf[at..at + piece.len()].copy_from_slice(&piece);
            at += piece.len();
        }
        self.len = n;
    }

    /// What a push leaves: no packet, the buffer a spare one.
    fn consumed(&mut self) {
        self.len = 0;
        self.tail.clear();
        self.segment_size = None;
        self.checksum = TxChecksum::Complete;
    }
}

impl fmt::Debug for TxPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxPacket")
            .field("len", &self.len)
            .field("tail", &self.tail.iter().map(Bytes::len).collect::<Vec<_>>())
            .field("segment_size", &self.segment_size)
            .field("checksum", &self.checksum)
            .finish()
    }
}

/// A batch of packets to send: filled by [`TxBatch::push`], written by a
/// device ([`crate::PacketIo::poll_send_batch`]).
pub type TxBatch = PacketBatch<Tx>;

/// What a transmit batch keeps besides its slots.
#[derive(Default)]
pub struct Tx {
    /// What the device does itself: the form packets go into the batch in.
    caps: DeviceCaps,
    sent: usize,
    rejected: usize,
    /// Packets a [`crate::PcapTap`] already recorded (a send that returned
    /// Pending is polled again with the same batch).
    tapped: usize,
}

/// What a transmit slot records about its packet (besides a super-packet's
/// segment size).
#[derive(Default)]
pub struct TxSlot {
    checksum: TxChecksum,
    /// Payload pieces that follow the slot's bytes on the wire, for a
    /// device that gathers; empty for a packet that is whole in its slot.
    tail: Tail,
}

impl sealed::Sealed for Tx {}

impl Direction for Tx {
    type Slot = TxSlot;

    fn forget(&mut self, used: &mut [SlotMeta<TxSlot>]) {
        for s in used {
            s.dir.tail.clear();
        }
        self.sent = 0;
        self.rejected = 0;
        self.tapped = 0;
    }
}

/// The next packet a device is to write, as it lies in its slot.
pub(crate) struct Unsent<'a> {
    /// [`HEADROOM`] bytes for the device's own header, then the packet (its
    /// headers only when `tail` holds its payload).
    pub(crate) slot: &'a mut [u8],
    /// Payload pieces to write behind the slot's bytes.
    pub(crate) tail: &'a [Bytes],
    /// TSO segment size (0: an ordinary packet).
    pub(crate) gso: u16,
    pub(crate) checksum: TxChecksum,
}

impl Unsent<'_> {
    /// Bytes of the whole packet, headroom not counted.
    pub(crate) fn packet_len(&self) -> usize {
        self.slot.len() - HEADROOM + self.tail.iter().map(Bytes::len).sum::<usize>()
    }
}

impl PacketBatch<Tx> {
    /// A batch for `io`: its MTU, its send offloads ([`crate::PacketIo::caps`])
    /// and the 128 slots that tun-rs and wireguard-go found to be the sweet
    /// spot for one wakeup.
    pub fn for_io(io: &dyn crate::PacketIo) -> Self {
        Self::new(crate::DEFAULT_BATCH, io.mtu()).with_caps(io.caps())
    }

    /// The batch for a device that does what `caps` say (a new batch
    /// assumes [`DeviceCaps::NONE`]).
    pub fn with_caps(mut self, caps: DeviceCaps) -> Self {
        self.dir.caps = caps;
        self
    }

    /// What the device this batch is for does itself.
    pub fn caps(&self) -> DeviceCaps {
        self.dir.caps
    }

    /// Adds `packet` in the form the device takes ([`Self::caps`]), after
    /// fitting it to the device ([`TxPacket::fit_to`]):
    ///
    /// - a TSO super-packet for a device without TSO is cut into wire
    ///   segments, each copied into a slot of its own (all or nothing);
    /// - a packet that kept its payload in pieces (a device that gathers)
    ///   has only its headers copied, the pieces kept beside them;
    /// - any other packet moves in without a copy: its buffer and the
    ///   slot's change places. The send path's packets are built once and
    ///   then only change hands, because a 64 KiB super-segment copied on
    ///   its way to the device costs about as much as building it.
    ///
    /// Once pushed, `packet` is empty, and its buffer is a spare one to
    /// build the next packet in: the slot's old one where the packet moved
    /// in, its own where it was copied. `Full` (no free slot, or not enough
    /// for all of its wire segments) leaves the packet in `packet`, to push
    /// again later; after any other error it can never go out as it is
    /// (`TooManySegments`: a super-packet to cut into more wire segments
    /// than the batch has slots).
    pub fn push(&mut self, packet: &mut TxPacket) -> Result<(), PushError> {
        let caps = self.dir.caps;
        packet.fit_to(caps).map_err(|_| PushError::Malformed)?;
        match packet.segment_size {
            Some(size) if !caps.tso => self.push_cut(packet, size),
            _ => self.push_whole(packet),
        }
    }

    /// Adds a packet the device takes as it is.
    fn push_whole(&mut self, p: &mut TxPacket) -> Result<(), PushError> {
        if self.is_full() {
            return Err(PushError::Full);
        }
        let len = p.packet_len();
        let max = if p.segment_size.is_some() { GSO_MAX_SIZE } else { self.max_packet_len };
        if len > max {
            return Err(PushError::TooLarge { len, max });
        }
        let gso = gso_field(p.segment_size)?;
        let meta = SlotMeta { gso, dir: TxSlot { checksum: p.checksum, tail: std::mem::take(&mut p.tail) } };
        if meta.dir.tail.is_empty() {
            // The slot invariant: every slot can take an MTU-sized packet.
            if p.buf.len() < self.slot_size() {
                p.buf.resize(self.slot_size(), 0);
            }
            std::mem::swap(&mut self.slots[self.len], &mut p.buf);
            self.fill_next(p.len, meta);
        } else {
            self.copy_into_next(&p.buf[HEADROOM..HEADROOM + p.len], meta);
        }
        p.consumed();
        Ok(())
    }

    /// Cuts a TSO super-packet into wire segments as a device would
    /// (`mptun_wire::gso`) and adds each: software segmentation, for a
    /// device without TSO.
    fn push_cut(&mut self, p: &mut TxPacket, size: usize) -> Result<(), PushError> {
        let mut segs = mptun_wire::gso::segments(p.head(), size).map_err(|_| PushError::Malformed)?;
        let count = segs.layout().segment_count(size);
        // One that can never fit is not `Full`: a caller would keep it for
        // a later push, and it would wait for room that never comes.
        if count > self.capacity() {
            return Err(PushError::TooManySegments { segments: count, max: self.capacity() });
        }
        if count > self.remaining() {
            return Err(PushError::Full);
        }
        let from = self.len;
        for _ in 0..count {
            // A segment that does not fit a slot (the packet's headers are
            // longer than the MTU allows) reads as too large.
            let r = self.fill_with(|buf| match segs.next_into(buf) {
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
        p.consumed();
        Ok(())
    }

    /// The payload pieces that follow the packet at `index` on the wire;
    /// empty for a packet that is whole in its slot.
    pub fn tail(&self, index: usize) -> &[Bytes] {
        if index < self.len {
            &self.meta[index].dir.tail
        } else {
            &[]
        }
    }

    /// The state of the TCP checksum of the packet at `index`: `Partial`
    /// for the device to complete.
    pub fn checksum(&self, index: usize) -> Option<TxChecksum> {
        (index < self.len).then(|| self.meta[index].dir.checksum)
    }

    /// Packets not yet written by a `poll_send_batch` that stopped half-way.
    pub fn unsent(&self) -> usize {
        self.len - self.dir.sent
    }

    /// Bytes of the packets not yet written (headroom not counted, tails
    /// counted).
    pub fn unsent_bytes(&self) -> usize {
        let (from, to) = (self.dir.sent, self.len);
        let tails: usize = self.meta[from..to].iter().flat_map(|m| &m.dir.tail).map(Bytes::len).sum();
        self.lens[from..to].iter().sum::<usize>() + tails
    }

    // ---- device-side access (crate-internal) ----

    /// The next unsent packet, with what the device must know to write it.
    pub(crate) fn next_unsent(&mut self) -> Option<Unsent<'_>> {
        let i = self.dir.sent;
        (i < self.len).then(|| {
            let m = &self.meta[i];
            Unsent {
                slot: &mut self.slots[i][..HEADROOM + self.lens[i]],
                tail: &m.dir.tail,
                gso: m.gso,
                checksum: m.dir.checksum,
            }
        })
    }

    /// Records that `n` more packets went out.
    pub(crate) fn advance_sent(&mut self, n: usize) {
        self.dir.sent = (self.dir.sent + n).min(self.len);
    }

    /// Records that the next unsent packet was refused and dropped.
    pub(crate) fn reject_one(&mut self) {
        if self.dir.sent < self.len {
            self.dir.sent += 1;
            self.dir.rejected += 1;
        }
    }

    /// Ends a send: returns how many packets the device accepted over all
    /// the polls of this batch, and empties it.
    pub(crate) fn finish_send(&mut self) -> usize {
        let accepted = self.dir.sent - self.dir.rejected;
        self.clear();
        accepted
    }

    /// Packets a capture already recorded.
    pub(crate) fn tapped(&self) -> usize {
        self.dir.tapped
    }

    /// Records that a capture has recorded every packet in the batch.
    pub(crate) fn set_all_tapped(&mut self) {
        self.dir.tapped = self.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(payload: usize) -> Vec<u8> {
        let (s, d) = ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
        let f = crate::testutil::TcpFields { seq: 7, ack: 1, flags: 0x19, window: 100, options: &[] };
        crate::testutil::tcp_packet(s, d, f, &vec![3u8; payload])
    }

    fn copy(p: &[u8]) -> TxPacket {
        TxPacket::copy_of(p)
    }

    #[test]
    fn a_gathered_packet_carries_its_tail_until_cleared() {
        let mut b = TxBatch::new(4, 1500).with_caps(DeviceCaps::ALL);
        let piece = Bytes::from(vec![7u8; 700]);
        let head = [1u8; 60];
        let gathered = |tail: &[Bytes]| copy(&head).with_checksum(TxChecksum::Partial).with_tail(tail);
        b.push(&mut gathered(&[piece.clone(), Bytes::new(), piece.clone()]).unwrap()).unwrap();
        assert_eq!(b.tail(0), &[piece.clone(), piece.clone()][..], "empty pieces left out");
        assert_eq!(b.checksum(0), Some(TxChecksum::Partial), "a gathered payload is never summed here");
        assert_eq!((b.get(0).unwrap().len(), b.unsent_bytes()), (60, 1460));
        // The whole packet must fit: 60 + 1500 is over the MTU.
        let big = Bytes::from(vec![0u8; 1500]);
        assert_eq!(b.push(&mut gathered(&[big]).unwrap()), Err(PushError::TooLarge { len: 1560, max: 1500 }));
        let many = vec![Bytes::from_static(b"x"); MAX_TAIL_PARTS + 1];
        assert_eq!(gathered(&many).unwrap_err(), PushError::Malformed);
        assert_eq!(b.get(0), Some(&head[..]), "the headers copied in");
        assert_eq!(b.len(), 1);
        // An ordinary packet in a slot that had a tail has none.
        b.clear();
        assert!(piece.is_unique(), "cleared: the batch let go of the pieces");
        b.push(&mut copy(&[9; 100])).unwrap();
        assert!(b.tail(0).is_empty() && b.checksum(0) == Some(TxChecksum::Complete));
        assert_eq!(b.unsent_bytes(), 100);
    }

    #[test]
    fn push_moves_the_buffer_in_and_hands_back_the_slot_s() {
        let mut b = TxBatch::new(2, 8);
        // Six bytes in a buffer with room for a whole slot: growing its
        // length to the slot's needs no new allocation, so it must not move.
        // (A buffer whose capacity is short is reallocated, and whether the
        // allocator grows it in place is luck: a test of that would flake.)
        let mut buf = Vec::with_capacity(HEADROOM + 8);
        buf.resize(HEADROOM, 0);
        buf.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        let ptr = buf.as_ptr();
        let mut p = TxPacket::new(buf, 6);
        b.push(&mut p).unwrap();
        assert_eq!(b.get(0), Some(&[1u8, 2, 3, 4, 5, 6][..]));
        assert_eq!(b.get(0).unwrap().as_ptr(), ptr.wrapping_add(HEADROOM), "not copied");
        assert!(p.is_empty(), "pushed: nothing left in it");
        let buf = p.into_buffer();
        assert_ne!(buf.as_ptr(), ptr, "the slot's old buffer came back");
        assert!(buf.len() >= HEADROOM + 8);
        assert!(b.slots.iter().all(|s| s.len() >= HEADROOM + 8), "every slot still takes an MTU-sized packet");
        // Too long for the slot without GSO: refused, nothing moved.
        b.clear();
        let mut big = TxPacket::new(vec![0u8; HEADROOM + 101], 100);
        assert_eq!(b.push(&mut big), Err(PushError::TooLarge { len: 100, max: 8 }));
        assert_eq!(big.len(), 100);
        // A super-packet for a device that cuts it itself: up to 64 KiB.
        let mut b = b.with_caps(DeviceCaps { tso: true, ..DeviceCaps::NONE });
        let too_big = TxPacket::new(vec![0u8; HEADROOM + GSO_MAX_SIZE + 1], GSO_MAX_SIZE + 1);
        let e = b.push(&mut too_big.with_segment_size(Some(50))).unwrap_err();
        assert_eq!(e, PushError::TooLarge { len: GSO_MAX_SIZE + 1, max: GSO_MAX_SIZE });
        let mut big = big.with_segment_size(Some(0));
        assert_eq!(b.push(&mut big), Err(PushError::Malformed));
        let mut big = big.with_segment_size(Some(50));
        b.push(&mut big).unwrap();
        assert_eq!((b.len(), b.gso_size(0)), (1, Some(50)));
        b.push(&mut copy(&[9])).unwrap();
        let mut p = copy(&[1]);
        assert_eq!(b.push(&mut p), Err(PushError::Full));
        assert_eq!(p.head(), &[1], "a packet that did not fit stays where it was");
    }

    #[test]
    fn super_packets_go_whole_or_cut_into_wire_segments() {
        let sp = tcp(4000);
        let tso = DeviceCaps { tso: true, ..DeviceCaps::NONE };
        let mut b = TxBatch::new(4, 1500).with_caps(tso);
        b.push(&mut copy(&[1; 10])).unwrap();
        b.push(&mut copy(&sp).with_segment_size(Some(1460))).unwrap();
        assert_eq!((b.get(1), b.gso_size(1), b.gso_size(0)), (Some(&sp[..]), Some(1460), None));
        let mut b = TxBatch::new(4, 1500);
        b.push(&mut copy(&sp).with_segment_size(Some(1460))).unwrap();
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
        let mut p = copy(&sp).with_segment_size(Some(1460));
        assert_eq!(b.push(&mut p), Err(PushError::Full));
        assert_eq!((b.len(), p.head()), (3, &sp[..]));
        // Hostile or broken: refused, nothing added.
        b.clear();
        let mut cut = |p: &[u8], size| b.push(&mut copy(p).with_segment_size(Some(size)));
        assert_eq!(cut(&sp[..30], 1460), Err(PushError::Malformed));
        assert_eq!(cut(&sp, 0), Err(PushError::Malformed));
        assert_eq!(cut(&sp, 1600), Err(PushError::Malformed), "a segment larger than a slot");
        assert!(b.is_empty());
        let mut b = b.with_caps(tso);
        assert_eq!(b.push(&mut copy(&sp).with_segment_size(Some(0))), Err(PushError::Malformed));
        assert!(b.is_empty());
        // A slot that held a super-packet still takes MTU-sized packets.
        b.push(&mut copy(&sp).with_segment_size(Some(1460))).unwrap();
        b.clear();
        assert!(b.slots.iter().all(|s| s.len() >= HEADROOM + 1500));
    }

    /// A super-packet cut here into more wire segments than the batch has
    /// slots (a peer announcing a tiny MSS) can never fit: it is refused
    /// as such, not as `Full`, which would have it wait for room that never
    /// comes, and the batch takes the next packet.
    #[test]
    fn hostile_a_super_packet_of_more_segments_than_slots_is_refused_not_full() {
        let sp = tcp(200 * 64);
        let mut b = TxBatch::new(128, 1500);
        let mut p = copy(&sp).with_segment_size(Some(64));
        let r = b.push(&mut p);
        assert!(r.is_err() && r != Err(PushError::Full), "{r:?}: an empty batch will never have room for it");
        assert_eq!(r, Err(PushError::TooManySegments { segments: 200, max: 128 }));
        assert!(b.is_empty());
        b.push(&mut copy(&tcp(100))).unwrap();
    }

    /// What a device does with a slot: the tail behind the headers, a
    /// partial checksum completed, a super-packet cut.
    fn on_the_wire(b: &TxBatch) -> Vec<Vec<u8>> {
        let mut wire = Vec::new();
        for i in 0..b.len() {
            let mut p = b.get(i).unwrap().to_vec();
            b.tail(i).iter().for_each(|piece| p.extend_from_slice(piece));
            if b.checksum(i) == Some(TxChecksum::Partial) {
                mptun_wire::gso::complete_checksum(&mut p).unwrap();
            }
            match b.gso_size(i) {
                Some(size) => {
                    let mut segs = mptun_wire::gso::segments(&p, size).unwrap();
                    let mut seg = vec![0u8; 1500];
                    while let Some(n) = segs.next_into(&mut seg).unwrap() {
                        wire.push(seg[..n].to_vec());
                    }
                }
                None => wire.push(p),
            }
        }
        wire
    }

    /// Every kind of packet (ordinary or super-packet, checksum complete or
    /// partial, payload in the buffer or in pieces) for every device (each
    /// combination of TSO, checksum offload and gather): the batch gives
    /// the device the packet in the form it takes (cut here only without
    /// TSO; the checksum left partial only for a device that completes it
    /// and gets the packet whole; the payload left in pieces only where it
    /// also gathers), and whatever the form, the same bytes reach the wire.
    #[test]
    fn push_gives_each_device_its_form_and_the_wire_the_same_bytes() {
        for bits in 0..8u8 {
            let caps = DeviceCaps { tso: bits & 1 != 0, checksum_offload: bits & 2 != 0, gather: bits & 4 != 0 };
            for (payload, size) in [(1000, None), (4000, Some(1460))] {
                let full = tcp(payload);
                let wire: Vec<Vec<u8>> = match size {
                    Some(size) => {
                        let mut b = TxBatch::new(8, 1500);
                        b.push(&mut copy(&full).with_segment_size(Some(size))).unwrap();
                        b.iter().map(<[u8]>::to_vec).collect()
                    }
                    None => vec![full.clone()],
                };
                assert!(wire.len() == if size.is_some() { 3 } else { 1 });
                for partial in [false, true] {
                    for pieces in [false, true] {
                        let case = format!("{caps:?}, {payload} bytes by {size:?}, partial {partial}, pieces {pieces}");
                        let mut pkt = full.clone();
                        if partial {
                            let l = mptun_wire::gso::Layout::parse(&pkt).unwrap();
                            mptun_wire::gso::set_partial_checksum(&mut pkt, &l);
                        }
                        let checksum = if partial { TxChecksum::Partial } else { TxChecksum::Complete };
                        let p = if pieces {
                            let tail = [Bytes::copy_from_slice(&pkt[40..500]), Bytes::copy_from_slice(&pkt[500..])];
                            copy(&pkt[..40]).with_tail(&tail).unwrap()
                        } else {
                            copy(&pkt)
                        };
                        let mut p = p.with_segment_size(size).with_checksum(checksum);
                        let mut b = TxBatch::new(8, 1500).with_caps(caps);
                        b.push(&mut p).unwrap();
                        assert!(p.is_empty(), "{case}");
                        assert_eq!(on_the_wire(&b), wire, "{case}");
                        let whole = size.is_none() || caps.tso;
                        let device_sums = caps.checksum_offload && whole;
                        let gathered = pieces && partial && caps.gather && device_sums;
                        let left_partial = partial && device_sums;
                        if whole {
                            assert_eq!(b.len(), 1, "{case}");
                            assert_eq!(b.gso_size(0), size, "{case}");
                            assert_eq!(b.get(0).unwrap().len(), if gathered { 40 } else { full.len() }, "{case}");
                            assert_eq!(b.tail(0).len(), if gathered { 2 } else { 0 }, "{case}");
                            assert_eq!(b.checksum(0) == Some(TxChecksum::Partial), left_partial, "{case}");
                        } else {
                            assert_eq!(b.len(), 3, "{case}: cut here");
                            assert!((0..3).all(|i| b.gso_size(i).is_none() && b.tail(i).is_empty()), "{case}");
                            assert!((0..3).all(|i| b.checksum(i) == Some(TxChecksum::Complete)), "{case}");
                        }
                    }
                }
            }
        }
    }

    /// Fitting a packet to its device first (as a caller that keeps it a
    /// while does) puts it in the form the push would, and pushing it then
    /// changes nothing more.
    #[test]
    fn fit_to_is_what_push_does_and_does_it_once() {
        let full = tcp(3000);
        let mut pkt = full.clone();
        let l = mptun_wire::gso::Layout::parse(&pkt).unwrap();
        mptun_wire::gso::set_partial_checksum(&mut pkt, &l);
        let tail = [Bytes::copy_from_slice(&pkt[40..])];
        let build = || copy(&pkt[..40]).with_tail(&tail).unwrap().with_checksum(TxChecksum::Partial);
        let mut p = build();
        p.fit_to(DeviceCaps::NONE).unwrap();
        assert_eq!((p.head(), p.tail().len(), p.checksum()), (&full[..], 0, TxChecksum::Complete));
        p.fit_to(DeviceCaps::NONE).unwrap();
        assert_eq!(p.head(), &full[..], "again: nothing more");
        let mut p = build();
        p.fit_to(DeviceCaps::ALL).unwrap();
        assert_eq!((p.len(), p.tail().len(), p.checksum()), (40, 1, TxChecksum::Partial), "left for the device");
        // Not TCP: a partial checksum cannot be completed; the push refuses it.
        let udp = crate::testutil::udp_packet("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap(), b"x");
        let mut p = copy(&udp).with_checksum(TxChecksum::Partial);
        assert!(p.fit_to(DeviceCaps::NONE).is_err());
        assert_eq!((p.head(), p.checksum()), (&udp[..], TxChecksum::Complete), "left as it was, marked complete");
        let mut b = TxBatch::new(2, 1500);
        assert_eq!(b.push(&mut copy(&udp).with_checksum(TxChecksum::Partial)), Err(PushError::Malformed));
        assert!(b.is_empty());
    }

    /// A packet moved into a buffer of its own keeps its bytes and gives
    /// back the buffer it was built in.
    #[test]
    fn move_into_copies_the_packet_and_returns_its_buffer() {
        let mut p = TxPacket::copy_in(vec![0xee; 4096], &[1, 2, 3]);
        let big = p.move_into(Vec::new());
        assert_eq!(big.len(), 4096);
        assert_eq!(p.head(), &[1u8, 2, 3][..]);
        assert_eq!(p.into_buffer().len(), HEADROOM + 3);
    }
}
