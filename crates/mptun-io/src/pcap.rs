//! Classic pcap files: a buffered writer and a strict reader.
//!
//! The writer records raw IP packets (`LINKTYPE_RAW`) so any run of the
//! runtime or the simulator opens in Wireshark, which dissects MPTCP. It
//! takes timestamps as nanoseconds (or a [`mptun_time::Instant`]) so the
//! simulator's virtual clock and the runtime's wall clock both fit.
//!
//! The reader exists for tests: to check what the writer produced and to
//! replay captures such as the kernel MPTCP vectors. Files are hostile input:
//! every malformed header or truncated record is a [`PcapError`], never a
//! panic or an unbounded allocation.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use mptun_time::Instant;

/// `LINKTYPE_RAW`: each record starts with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// `LINKTYPE_LINUX_SLL` (tcpdump -i any, before libpcap 1.10).
pub const LINKTYPE_LINUX_SLL: u32 = 113;
/// `LINKTYPE_LINUX_SLL2` (tcpdump -i any, libpcap 1.10+).
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Default snap length: tcpdump's, large enough for any IP packet.
pub const DEFAULT_SNAPLEN: u32 = 262_144;
const GLOBAL_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;

/// Timestamp resolution of a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsResolution {
    /// Microseconds (magic `a1b2c3d4`): what every tool reads.
    Micro,
    /// Nanoseconds (magic `a1b23c4d`): keeps EDT pacing gaps visible.
    Nano,
}

/// Writes a pcap file of raw IP packets.
pub struct PcapWriter<W: Write = BufWriter<File>> {
    out: W,
    res: TsResolution,
    snaplen: u32,
    packets: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (truncates) `path` with nanosecond timestamps.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::create_with(path, TsResolution::Nano)
    }

    /// Creates (truncates) `path` with the given timestamp resolution.
    pub fn create_with(path: impl AsRef<Path>, res: TsResolution) -> io::Result<Self> {
        let f = File::create(path)?;
        PcapWriter::new(BufWriter::with_capacity(1 << 16, f), res, DEFAULT_SNAPLEN)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header to `out`. Packets longer than `snaplen` are
    /// cut (their original length is still recorded).
    pub fn new(mut out: W, res: TsResolution, snaplen: u32) -> io::Result<Self> {
        let magic = match res {
            TsResolution::Micro => MAGIC_US,
            TsResolution::Nano => MAGIC_NS,
        };
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone = 0, sigfigs = 0
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, res, snaplen: snaplen.max(1), packets: 0 })
    }

    /// Records `packet` at `ts` nanoseconds since the epoch (the Unix epoch
    /// for real captures, time zero for simulations).
    pub fn write_ns(&mut self, ts_ns: u64, packet: &[u8]) -> io::Result<()> {
        let secs = ts_ns / 1_000_000_000;
        let sub = ts_ns % 1_000_000_000;
        let frac = match self.res {
            TsResolution::Micro => sub / 1_000,
            TsResolution::Nano => sub,
        };
        // pcap seconds are 32-bit; past 2106 they wrap like every other tool's.
        let orig = u32::try_from(packet.len()).unwrap_or(u32::MAX);
        let incl = orig.min(self.snaplen);
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&(secs as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(frac as u32).to_le_bytes());
        h[8..12].copy_from_slice(&incl.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&packet[..incl as usize])?;
        self.packets += 1;
        Ok(())
    }

    /// Records `packet` at instant `ts`.
    pub fn write(&mut self, ts: Instant, packet: &[u8]) -> io::Result<()> {
        self.write_ns(ts.as_nanos(), packet)
    }

    /// Records `packet` now (wall clock), for live captures.
    pub fn write_now(&mut self, packet: &[u8]) -> io::Result<()> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.write_ns(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX), packet)
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Pushes buffered records to the file, so a capture can be opened
    /// while the run goes on.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> fmt::Debug for PcapWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PcapWriter").field("res", &self.res).field("packets", &self.packets).finish()
    }
}

/// Why a pcap file could not be read.
#[derive(Debug)]
pub enum PcapError {
    /// Reading failed.
    Io(io::Error),
    /// The first four bytes are no pcap magic (pcapng is not supported).
    BadMagic(u32),
    /// The file ends inside the global header.
    TruncatedHeader,
    /// The file ends inside record number `index` (0-based).
    TruncatedRecord {
        /// Record number.
        index: u64,
    },
    /// A record claims more bytes than the reader accepts (1 MiB).
    OversizeRecord {
        /// Record number.
        index: u64,
        /// Captured length it claims.
        incl_len: u32,
    },
    /// The sub-second field is out of range for the resolution.
    BadTimestamp {
        /// Record number.
        index: u64,
    },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcapError::Io(e) => write!(f, "pcap read error: {e}"),
            PcapError::BadMagic(m) => write!(f, "not a pcap file (magic {m:#010x})"),
            PcapError::TruncatedHeader => write!(f, "pcap file ends inside its global header"),
            PcapError::TruncatedRecord { index } => write!(f, "pcap file ends inside record {index}"),
            PcapError::OversizeRecord { index, incl_len } => {
                write!(f, "pcap record {index} claims {incl_len} bytes (limit {MAX_RECORD})")
            }
            PcapError::BadTimestamp { index } => write!(f, "pcap record {index} has an out-of-range timestamp"),
        }
    }
}

impl std::error::Error for PcapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PcapError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for PcapError {
    fn from(e: io::Error) -> Self {
        PcapError::Io(e)
    }
}

/// One record of a pcap file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapRecord {
    /// Timestamp in nanoseconds since the file's epoch.
    pub ts_ns: u64,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// Captured bytes (at most the snap length).
    pub data: Vec<u8>,
}

/// Reads a classic pcap file (either byte order, µs or ns timestamps).
pub struct PcapReader<R: Read> {
    input: R,
    swapped: bool,
    res: TsResolution,
    snaplen: u32,
    linktype: u32,
    index: u64,
}

/// Largest record accepted whatever the header says: a hostile snap length
/// must not make the reader allocate gigabytes.
const MAX_RECORD: u32 = 1 << 20;

impl PcapReader<io::BufReader<File>> {
    /// Opens `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        PcapReader::new(io::BufReader::new(File::open(path)?))
    }
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the global header.
    pub fn new(mut input: R) -> Result<Self, PcapError> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        read_exact_or(&mut input, &mut h, PcapError::TruncatedHeader)?;
        let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, res) = match le {
            MAGIC_US => (false, TsResolution::Micro),
            MAGIC_NS => (false, TsResolution::Nano),
            m if m.swap_bytes() == MAGIC_US => (true, TsResolution::Micro),
            m if m.swap_bytes() == MAGIC_NS => (true, TsResolution::Nano),
            m => return Err(PcapError::BadMagic(m)),
        };
        let u32_at = |i: usize| {
            let v = u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            if swapped {
                v.swap_bytes()
            } else {
                v
            }
        };
        let snaplen = u32_at(16);
        // The low 16 bits are the link type; the upper ones carry FCS info.
        let linktype = u32_at(20) & 0xffff;
        Ok(PcapReader { input, swapped, res, snaplen, linktype, index: 0 })
    }

    /// The file's link type (`LINKTYPE_*`).
    pub fn linktype(&self) -> u32 {
        self.linktype
    }

    /// The file's snap length.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Timestamp resolution.
    pub fn resolution(&self) -> TsResolution {
        self.res
    }

    /// The next record, `None` at a clean end of file.
    pub fn next_record(&mut self) -> Result<Option<PcapRecord>, PcapError> {
        let mut h = [0u8; RECORD_HEADER_LEN];
        // Distinguish a clean EOF (no byte of a new record) from a cut one.
        let mut got = 0;
        while got < h.len() {
            match self.input.read(&mut h[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(PcapError::TruncatedRecord { index: self.index }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let f = |i: usize| {
            let v = u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            if self.swapped {
                v.swap_bytes()
            } else {
                v
            }
        };
        let (secs, frac, incl, orig) = (f(0), f(4), f(8), f(12));
        let index = self.index;
        // Some writers put a snaplen of 0 or less than what they record; only
        // the hard cap is trusted.
        if incl > MAX_RECORD {
            return Err(PcapError::OversizeRecord { index, incl_len: incl });
        }
        let sub_ns = match self.res {
            TsResolution::Micro if frac < 1_000_000 => u64::from(frac) * 1_000,
            TsResolution::Nano if frac < 1_000_000_000 => u64::from(frac),
            _ => return Err(PcapError::BadTimestamp { index }),
        };
        let mut data = vec![0u8; incl as usize];
        read_exact_or(&mut self.input, &mut data, PcapError::TruncatedRecord { index })?;
        self.index += 1;
        Ok(Some(PcapRecord { ts_ns: u64::from(secs) * 1_000_000_000 + sub_ns, orig_len: orig, data }))
    }

    /// The IP packet inside `record`, with the link-layer header of this
    /// file's link type stripped; `None` for non-IP frames or unknown types.
    pub fn ip_packet<'a>(&self, record: &'a PcapRecord) -> Option<&'a [u8]> {
        strip_link_header(self.linktype, &record.data)
    }
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<PcapRecord, PcapError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

fn read_exact_or<R: Read>(r: &mut R, buf: &mut [u8], short: PcapError) -> Result<(), PcapError> {
    match r.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(short),
        Err(e) => Err(e.into()),
    }
}

/// The IP packet inside a frame of link type `linktype`: `None` when the
/// frame is not IPv4/IPv6 or too short for its link header.
pub fn strip_link_header(linktype: u32, frame: &[u8]) -> Option<&[u8]> {
    const ETH_P_IP: u16 = 0x0800;
    const ETH_P_IPV6: u16 = 0x86dd;
    let be16 = |b: &[u8], i: usize| b.get(i..i + 2).map(|s| u16::from_be_bytes([s[0], s[1]]));
    let (proto, off) = match linktype {
        LINKTYPE_RAW => {
            return frame.first().filter(|&&v| v >> 4 == 4 || v >> 4 == 6).map(|_| frame);
        }
        LINKTYPE_ETHERNET => (be16(frame, 12)?, 14),
        LINKTYPE_LINUX_SLL => (be16(frame, 14)?, 16),
        LINKTYPE_LINUX_SLL2 => (be16(frame, 0)?, 20),
        _ => return None,
    };
    if proto != ETH_P_IP && proto != ETH_P_IPV6 {
        return None;
    }
    frame.get(off..)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28];
        p.resize(28, 0xab);
        p
    }

    #[test]
    fn round_trip_ns_and_us() {
        for res in [TsResolution::Nano, TsResolution::Micro] {
            let mut w = PcapWriter::new(Vec::new(), res, DEFAULT_SNAPLEN).unwrap();
            w.write(Instant::from_nanos(1_500_000_123), &sample()).unwrap();
            w.write_ns(7_000_000_999, &[0x60; 40]).unwrap();
            let bytes = w.into_inner().unwrap();
            assert_eq!(bytes.len(), 24 + 16 + 28 + 16 + 40);
            let mut r = PcapReader::new(&bytes[..]).unwrap();
            assert_eq!(r.linktype(), LINKTYPE_RAW);
            assert_eq!(r.resolution(), res);
            let a = r.next_record().unwrap().unwrap();
            let b = r.next_record().unwrap().unwrap();
            assert!(r.next_record().unwrap().is_none());
            let (ta, tb) = match res {
                TsResolution::Nano => (1_500_000_123, 7_000_000_999),
                TsResolution::Micro => (1_500_000_000, 7_000_000_000),
            };
            assert_eq!((a.ts_ns, a.orig_len, a.data.as_slice()), (ta, 28, sample().as_slice()));
            assert_eq!((b.ts_ns, b.orig_len), (tb, 40));
            assert_eq!(r.ip_packet(&a), Some(sample().as_slice()));
        }
    }

    #[test]
    fn snaplen_cuts_but_keeps_original_length() {
        let mut w = PcapWriter::new(Vec::new(), TsResolution::Nano, 10).unwrap();
        w.write_ns(0, &sample()).unwrap();
        let bytes = w.into_inner().unwrap();
        let rec = PcapReader::new(&bytes[..]).unwrap().next_record().unwrap().unwrap();
        assert_eq!((rec.data.len(), rec.orig_len), (10, 28));
    }

    #[test]
    fn hostile_files_give_typed_errors() {
        assert!(matches!(PcapReader::new(&[0u8; 3][..]), Err(PcapError::TruncatedHeader)));
        assert!(matches!(PcapReader::new(&[0u8; 24][..]), Err(PcapError::BadMagic(0))));
        let mut w = PcapWriter::new(Vec::new(), TsResolution::Micro, DEFAULT_SNAPLEN).unwrap();
        w.write_ns(0, &sample()).unwrap();
        let good = w.into_inner().unwrap();
        // Every truncation point is an error or a clean (shorter) read, never a panic.
        for cut in 24..good.len() {
            let mut r = PcapReader::new(&good[..cut]).unwrap();
            let res = r.next_record();
            if cut == 24 {
                assert!(matches!(res, Ok(None)));
            } else {
                assert!(matches!(res, Err(PcapError::TruncatedRecord { index: 0 })), "cut at {cut}");
            }
        }
        // A record claiming 4 GiB.
        let mut bad = good.clone();
        bad[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let res = PcapReader::new(&bad[..]).unwrap().next_record();
        assert!(matches!(res, Err(PcapError::OversizeRecord { index: 0, incl_len: u32::MAX })));
        // Microseconds out of range.
        let mut bad = good.clone();
        bad[24 + 4..24 + 8].copy_from_slice(&2_000_000u32.to_le_bytes());
        assert!(matches!(PcapReader::new(&bad[..]).unwrap().next_record(), Err(PcapError::BadTimestamp { .. })));
    }

    #[test]
    fn big_endian_files_are_read() {
        let mut h = Vec::new();
        h.extend_from_slice(&MAGIC_US.to_be_bytes());
        h.extend_from_slice(&2u16.to_be_bytes());
        h.extend_from_slice(&4u16.to_be_bytes());
        h.extend_from_slice(&[0; 8]);
        h.extend_from_slice(&65535u32.to_be_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_be_bytes());
        for v in [3u32, 5, 34, 60] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&0x0800u16.to_be_bytes());
        frame.extend_from_slice(&sample()[..20]);
        h.extend_from_slice(&frame);
        let mut r = PcapReader::new(&h[..]).unwrap();
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!(rec.ts_ns, 3_000_005_000);
        assert_eq!(rec.orig_len, 60);
        assert_eq!(r.ip_packet(&rec), Some(&sample()[..20]));
    }

    #[test]
    fn link_headers_are_stripped_only_for_ip() {
        assert_eq!(strip_link_header(LINKTYPE_RAW, &[0x12]), None);
        assert_eq!(strip_link_header(LINKTYPE_ETHERNET, &[0; 13]), None);
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(strip_link_header(LINKTYPE_ETHERNET, &arp), None);
        let mut sll2 = 0x86ddu16.to_be_bytes().to_vec();
        sll2.resize(20, 0);
        sll2.push(0x60);
        assert_eq!(strip_link_header(LINKTYPE_LINUX_SLL2, &sll2), Some(&[0x60u8][..]));
        assert_eq!(strip_link_header(999, &sll2), None);
    }
}
