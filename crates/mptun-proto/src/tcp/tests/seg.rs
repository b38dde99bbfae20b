//! Segment-exact harness in the style of smoltcp's socket tests: the test
//! plays the peer by hand. [`send!`] builds a segment from a header template
//! ([`SEG`]) and feeds it to the subflow through `handle_segment`; [`recv!`]
//! takes the next `poll_transmit` output, parses it with `mptun-wire` and
//! asserts every field (seq, ack, flags, window, MSS, window scale,
//! SACK-permitted, timestamps, SACK blocks, payload); [`recv_nothing!`]
//! asserts there is nothing to send.
//!
//! Only methods of [`Subflow`] are used, never its fields.

pub(super) use super::super::*;
use crate::test_util::sa;
pub(super) use mptun_wire::{parse_tcp_packet, TcpFlags, TcpHeader, TcpOptions};

pub const LOCAL: &str = "10.0.0.1:40000";
pub const REMOTE: &str = "10.0.0.2:5000";
/// Our initial sequence number.
pub const ISS: u32 = 1000;
/// The peer's initial sequence number.
pub const IRS: u32 = 5000;
/// Our receive buffer (fixed, so no window scale: it fits 16 bits).
pub const BUF: usize = 64_000;
/// The window we advertise with an empty receive buffer.
pub const WIN: u16 = BUF as u16;
/// Our MSS (and the peer's).
pub const MSS: u16 = 1460;
/// Virtual time at the start of each test (ms); our TSval is the time in ms.
pub const T0: u64 = 1000;
/// The peer's TSval in its segments, unless a test says otherwise.
pub const PEER_TS: u32 = 500_000;

pub const ACK: TcpFlags = TcpFlags::ACK;
pub const SYN: TcpFlags = TcpFlags::SYN;
pub const FIN: TcpFlags = TcpFlags::FIN;
pub const RST: TcpFlags = TcpFlags::RST;
pub const PSH: TcpFlags = TcpFlags::PSH;

/// One segment, as the peer sends it or as we expect to see it.
#[derive(Clone, PartialEq, Eq)]
pub struct Seg {
    pub seq: u32,
    /// Zero when the ACK flag is off.
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    pub mss: Option<u16>,
    pub ws: Option<u8>,
    pub sack_perm: bool,
    /// (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
    pub sack: Vec<(u32, u32)>,
    pub payload: Vec<u8>,
}

impl core::fmt::Debug for Seg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "seq={} ack={} {:?} win={}", self.seq, self.ack, self.flags, self.window)?;
        if let Some(m) = self.mss {
            write!(f, " mss={m}")?;
        }
        if let Some(w) = self.ws {
            write!(f, " ws={w}")?;
        }
        if self.sack_perm {
            write!(f, " sackOK")?;
        }
        if let Some((v, e)) = self.ts {
            write!(f, " ts={v}/{e}")?;
        }
        if !self.sack.is_empty() {
            write!(f, " sack={:?}", self.sack)?;
        }
        // The bytes themselves are compared; a checksum of them is enough to read.
        let sum = self.payload.iter().fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(b as u32));
        write!(f, " len={} (sum {sum:08x})", self.payload.len())
    }
}

/// The header template: a pure ACK with our empty-buffer window, no options.
pub const SEG: Seg = Seg {
    seq: 0,
    ack: 0,
    flags: TcpFlags::ACK,
    window: WIN,
    mss: None,
    ws: None,
    sack_perm: false,
    ts: None,
    sack: Vec::new(),
    payload: Vec::new(),
};

impl Seg {
    fn header(&self) -> TcpHeader {
        let local = sa(LOCAL);
        let remote = sa(REMOTE);
        let mut h = TcpHeader::new(remote.port(), local.port(), self.seq, self.ack, self.flags, self.window);
        h.options = if self.flags.syn() {
            TcpOptions::syn(self.mss.unwrap_or(0), self.ws, self.sack_perm, self.ts, None).unwrap()
        } else {
            TcpOptions::established(self.ts, &self.sack, &[]).unwrap()
        };
        if self.flags.syn() && self.mss.is_none() {
            // TcpOptions::syn always writes an MSS: rebuild without it.
            let mut o = TcpOptions::new();
            for opt in h.options.iter().map(|o| o.unwrap()) {
                if !matches!(opt, TcpOption::Mss(_)) {
                    o.push(&opt).unwrap();
                }
            }
            o.pad_to_word();
            h.options = o;
        }
        h
    }

    fn from_packet(pkt: &[u8]) -> Seg {
        let p = parse_tcp_packet(pkt).expect("the subflow emits valid packets");
        assert_eq!(p.src, sa(LOCAL).ip());
        assert_eq!(p.dst, sa(REMOTE).ip());
        assert_eq!(p.tcp.src_port, 40000);
        assert_eq!(p.tcp.dst_port, 5000);
        let o = p.tcp.options.summary();
        assert!(!o.malformed);
        Seg {
            seq: p.tcp.seq,
            ack: p.tcp.ack,
            flags: p.tcp.flags,
            window: p.tcp.window,
            mss: o.mss,
            ws: o.window_scale,
            sack_perm: o.sack_permitted,
            ts: o.timestamp,
            sack: o.sack.iter().copied().collect(),
            payload: p.payload.to_vec(),
        }
    }
}

/// What the peer offers in its SYN (or SYN-ACK).
#[derive(Clone, Copy, Debug)]
pub struct PeerOpts {
    pub mss: Option<u16>,
    pub ws: Option<u8>,
    pub sack_perm: bool,
    pub ts: bool,
}

/// A peer with MSS only: no window scaling, SACK or timestamps.
pub const PLAIN: PeerOpts = PeerOpts { mss: Some(MSS), ws: None, sack_perm: false, ts: false };
/// A peer with everything (window scale 7, as Linux).
pub const FULL: PeerOpts = PeerOpts { mss: Some(MSS), ws: Some(7), sack_perm: true, ts: true };

/// Our configuration: a fixed receive buffer, no pacing (segments leave at
/// once), Linux's defaults otherwise.
pub fn cfg() -> TcpConfig {
    TcpConfig {
        recv_buffer: BufferSize::Fixed(BUF),
        send_buffer: BufferSize::Fixed(1 << 20),
        pacer: mptun_cc::PacerKind::None,
        ..TcpConfig::default()
    }
}

/// The subflow under test and the virtual clock.
pub struct Sf {
    pub sf: Subflow,
    pub now: Instant,
    /// What the subflow made of the last segment fed with `send!`.
    pub verdict: Option<Verdict>,
}

impl Sf {
    /// Active open: SYN-SENT, the SYN not yet taken.
    pub fn connect(cfg: TcpConfig) -> Sf {
        let now = Instant::from_millis(T0);
        let sf = Subflow::connect(now, cfg, sa(LOCAL), sa(REMOTE), ISS, 0);
        Sf { sf, now, verdict: None }
    }

    /// Passive open from the peer's SYN (`syn` is that SYN): SYN-RECEIVED,
    /// the SYN-ACK not yet taken.
    pub fn accept(cfg: TcpConfig, syn: Seg) -> Sf {
        let now = Instant::from_millis(T0);
        let h = syn.header();
        let sf = Subflow::accept(now, cfg, sa(LOCAL), sa(REMOTE), &h, &h.options.summary(), ISS, 0);
        Sf { sf, now, verdict: None }
    }

    /// Our SYN as the peer sees it (for `cfg()`).
    pub fn our_syn(&self) -> Seg {
        Seg {
            seq: ISS,
            ack: 0,
            flags: SYN,
            window: WIN,
            mss: Some(MSS),
            ws: Some(0),
            sack_perm: true,
            ts: Some((self.ms(), 0)),
            ..SEG
        }
    }

    /// The peer's SYN with options `o`.
    pub fn peer_syn(o: PeerOpts) -> Seg {
        Seg {
            seq: IRS,
            flags: SYN,
            window: 65535,
            mss: o.mss,
            ws: o.ws,
            sack_perm: o.sack_perm,
            ts: o.ts.then_some((PEER_TS, 0)),
            ..SEG
        }
    }

    /// ESTABLISHED by an active open with a peer offering `o`, 10 ms RTT.
    /// Afterwards snd_nxt = ISS + 1, rcv_nxt = IRS + 1, peer window 65535
    /// (unscaled), the handshake's ACK taken and `Connected` consumed.
    pub fn client(cfg: TcpConfig, o: PeerOpts) -> Sf {
        let mut t = Sf::connect(cfg);
        let syn = t.recv().expect("a SYN");
        assert!(syn.flags == SYN);
        t.advance(Duration::from_millis(10));
        let ts = o.ts.then_some((PEER_TS, T0 as u32));
        t.send(Seg { ack: ISS + 1, flags: SYN | ACK, ts, ..Sf::peer_syn(o) });
        assert_eq!(t.sf.state(), State::Established);
        let ack = t.recv().expect("the handshake's ACK");
        assert_eq!((ack.seq, ack.ack, ack.flags), (ISS + 1, IRS + 1, ACK));
        t.recv_nothing();
        assert_eq!(t.events(), vec![Event::Connected]);
        t
    }

    /// ESTABLISHED by a passive open from a peer offering `o`, 10 ms RTT;
    /// same sequence numbers as [`Sf::client`].
    pub fn server(cfg: TcpConfig, o: PeerOpts) -> Sf {
        let mut t = Sf::accept(cfg, Sf::peer_syn(o));
        let synack = t.recv().expect("a SYN-ACK");
        assert_eq!((synack.seq, synack.ack, synack.flags), (ISS, IRS + 1, SYN | ACK));
        t.advance(Duration::from_millis(10));
        let ts = o.ts.then_some((PEER_TS, T0 as u32));
        t.send(Seg { seq: IRS + 1, ack: ISS + 1, window: 65535, ts, ..SEG });
        assert_eq!(t.sf.state(), State::Established);
        t.recv_nothing();
        assert_eq!(t.events(), vec![Event::Connected]);
        t
    }

    /// ESTABLISHED with a plain peer (no options but MSS).
    pub fn established() -> Sf {
        Sf::client(cfg(), PLAIN)
    }

    /// Our timestamp clock now.
    pub fn ms(&self) -> u32 {
        self.now.as_millis() as u32
    }

    /// Feeds a segment from the peer.
    pub fn send(&mut self, seg: Seg) {
        let h = seg.header();
        let o = h.options.summary();
        self.verdict = Some(self.sf.handle_segment(self.now, &h, &o, &seg.payload));
    }

    /// The next packet the subflow sends now into a buffer of `room`
    /// bytes, as a device puts it on the wire: its tail (a gathered
    /// payload) behind its headers, its checksum complete.
    pub fn recv_packet(&mut self, room: usize) -> Option<(Transmit, Vec<u8>)> {
        let mut buf = vec![0u8; room];
        let t = self.sf.poll_transmit(self.now, &mut (), &mut buf)?;
        let len = t.assemble(&mut buf);
        buf.truncate(len);
        if t.checksum_partial {
            mptun_wire::gso::complete_checksum(&mut buf).expect("a well-formed packet");
        }
        Some((t, buf))
    }

    /// The next segment the subflow sends now, if any.
    pub fn recv(&mut self) -> Option<Seg> {
        let (t, pkt) = self.recv_packet(1600)?;
        assert!(t.departure <= self.now);
        Some(Seg::from_packet(&pkt))
    }

    /// The next packet the subflow sends now with room for a TSO
    /// super-segment, and the wire segments a device cuts it into.
    pub fn recv_gso(&mut self) -> Option<(Transmit, Vec<Seg>)> {
        let (t, pkt) = self.recv_packet(mptun_wire::gso::GSO_MAX_SIZE)?;
        let pkt = &pkt[..];
        let Some(size) = t.segment_size else { return Some((t, vec![Seg::from_packet(pkt)])) };
        let mut it = mptun_wire::gso::segments(pkt, size).expect("a well-formed super-segment");
        let mut wire = vec![0u8; 1600];
        let mut segs = Vec::new();
        while let Some(n) = it.next_into(&mut wire).expect("segments fit the MTU") {
            segs.push(Seg::from_packet(&wire[..n]));
        }
        Some((t, segs))
    }

    /// Every segment the subflow sends now.
    pub fn recv_all(&mut self) -> Vec<Seg> {
        std::iter::from_fn(|| self.recv()).take(10_000).collect()
    }

    #[track_caller]
    pub fn recv_exact(&mut self, want: Seg) {
        let got = self.recv();
        assert_eq!(got.as_ref(), Some(&want), "at {:?}", self.now);
    }

    #[track_caller]
    pub fn recv_nothing(&mut self) {
        let got = self.recv();
        assert_eq!(got, None, "at {:?}", self.now);
    }

    /// Moves the clock on by `d`, firing a due timer.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        if self.sf.poll_timeout().is_some_and(|t| t <= self.now) {
            self.sf.handle_timeout(self.now);
        }
    }

    /// Jumps to the next timer and fires it; returns how long that was.
    pub fn fire_timer(&mut self) -> Duration {
        let t = self.sf.poll_timeout().expect("a timer is armed");
        assert!(t >= self.now);
        let d = t - self.now;
        self.now = t;
        self.sf.handle_timeout(t);
        d
    }

    pub fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.sf.poll_event()).collect()
    }

    pub fn state(&self) -> State {
        self.sf.state()
    }

    /// Everything ready to read.
    pub fn read(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = self.sf.recv(self.now, &mut buf);
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    /// Queues `data` for sending (all of it must fit).
    pub fn write(&mut self, data: &[u8]) {
        assert_eq!(self.sf.send(data), data.len());
    }
}

/// `n` bytes of a recognisable pattern.
pub fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// Feeds a segment: `send!(t, seq: .., ack: .., flags: .., ...)`, other
/// fields from [`SEG`].
macro_rules! send {
    ($t:expr, $($f:ident : $v:expr),* $(,)?) => {
        $t.send(Seg { $($f: $v,)* ..SEG })
    };
}

/// Asserts the next segment: `recv!(t, seq: .., ack: .., ...)`, other
/// fields as in [`SEG`].
macro_rules! recv {
    ($t:expr, $($f:ident : $v:expr),* $(,)?) => {
        $t.recv_exact(Seg { $($f: $v,)* ..SEG })
    };
}

/// Asserts there is nothing to send.
macro_rules! recv_nothing {
    ($t:expr) => {
        $t.recv_nothing()
    };
}

pub(super) use {recv, recv_nothing, send};

impl Sf {
    /// A plain-peer client driven into `state` by the shortest exchange;
    /// returns it with (snd_nxt, rcv_nxt) there. Every segment on the way
    /// is checked; nothing is left to send.
    pub fn in_state(state: State) -> (Sf, u32, u32) {
        let mut t = Sf::established();
        let (s, r) = (ISS + 1, IRS + 1);
        let fin_wait_1 = |t: &mut Sf| {
            t.sf.close();
            recv!(t, seq: s, ack: r, flags: FIN | ACK);
        };
        let peer_fin = |t: &mut Sf, ack: u32, snd: u32| {
            send!(t, seq: r, ack: ack, flags: FIN | ACK);
            recv!(t, seq: snd, ack: r + 1);
            assert_eq!(t.events(), vec![Event::PeerFin]);
        };
        let out = match state {
            State::Established => (s, r),
            State::FinWait1 => {
                fin_wait_1(&mut t);
                (s + 1, r)
            }
            State::FinWait2 => {
                fin_wait_1(&mut t);
                send!(t, seq: r, ack: s + 1);
                (s + 1, r)
            }
            State::Closing => {
                fin_wait_1(&mut t);
                peer_fin(&mut t, s, s + 1);
                (s + 1, r + 1)
            }
            State::TimeWait => {
                fin_wait_1(&mut t);
                send!(t, seq: r, ack: s + 1);
                peer_fin(&mut t, s + 1, s + 1);
                (s + 1, r + 1)
            }
            State::CloseWait => {
                peer_fin(&mut t, s, s);
                (s, r + 1)
            }
            State::LastAck => {
                peer_fin(&mut t, s, s);
                t.sf.close();
                recv!(t, seq: s, ack: r + 1, flags: FIN | ACK);
                (s + 1, r + 1)
            }
            other => panic!("in_state({other:?}) is not a synchronized state"),
        };
        assert_eq!(t.state(), state);
        recv_nothing!(t);
        (t, out.0, out.1)
    }
}

impl Sf {
    /// The peer fills our receive buffer with `n` bytes from `rcv_nxt` in
    /// MSS-sized segments (nobody reads); the ACKs are drained. Returns the
    /// new `rcv_nxt`.
    pub fn fill(&mut self, rcv_nxt: u32, snd_nxt: u32, n: usize) -> u32 {
        let mut off = 0;
        while off < n {
            let k = (n - off).min(MSS as usize);
            send!(self, seq: rcv_nxt + off as u32, ack: snd_nxt, payload: bytes(k));
            off += k;
            self.recv_all();
        }
        rcv_nxt + n as u32
    }
}
