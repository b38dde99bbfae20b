//! Packets the fuzzer makes: structured segments on the live 4-tuples
//! (every MPTCP option, plausible and implausible numbers), the kernel's
//! frames rewritten onto the live tuples, and corruptions of real packets.
//!
//! In *truthful* mode (the default) a forged packet may lie about anything
//! but the stream's content, so that "the receiver delivers a prefix of
//! what the sender wrote" stays a property the stack must keep. TCP and
//! MPTCP without checksums cannot detect an on-path attacker that writes
//! plausible bytes at plausible positions, so in this mode:
//! - payload at a plausible position is a real segment's bytes at their
//!   real sequence number (a replay, whole or a slice), with the real
//!   options that map them; made-up payload sits only where the receiver
//!   must discard it whatever the options say: entirely before what the
//!   receiver acknowledged (old), or 2^30 past it (far);
//! - a made-up DSS mapping (on a segment without made-up payload) maps to
//!   data sequence numbers the receiver acknowledged already or 2^40 past
//!   them, or covers only a DATA_FIN; never an infinite mapping; an
//!   MP_CAPABLE with a data length (a mapping from subflow byte 1) only on
//!   old or far segments;
//! - "before what the receiver acknowledged" needs an acknowledgment seen
//!   on that tuple: a receiver in SYN-SENT takes any sequence number;
//! - no made-up MPTCP option reaches the client before it is fully
//!   established: a server whose third ACK was lost falls back to TCP, and
//!   a client that an on-path DSS convinced otherwise would send data-level
//!   retransmissions that the server reads as stream bytes;
//! - a SYN carries no payload, and on a live tuple only the ISN that
//!   tuple's sender really used (a duplicate with other options).
//!
//! *Liar* mode lifts all of these; only the memory and no-panic invariants
//! are checked then.

use crate::input::Input;
use crate::kernel;
use crate::observe::{Flow, Observed};
use mptun_wire::mptcp::{DataAck, DssMapping};
use mptun_wire::{
    crypto, emit_tcp_packet, parse_tcp_packet, parse_tcp_packet_unverified, MptcpOption, TcpFlags, TcpHeader,
    TcpOption, TcpOptions,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Addresses of the harness: client 10.0.x.1, server 10.0.x.2, as in the
/// kernel capture.
pub const C1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
/// The client's second address.
pub const C2: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
/// The server's first address (the one the client connects to).
pub const S1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
/// The server's second address.
pub const S2: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The server's port.
pub const PORT: u16 = 5000;

/// Sequence distance of a "far" segment: out of any window, in both directions.
const FAR: u32 = 1 << 30;
/// Data sequence distance of a "far" mapping.
const FAR_DSN: u64 = 1 << 40;
/// Largest made-up payload.
const MAX_GARBAGE: usize = 1200;

/// Where a forged segment's payload comes from.
enum Body<'a> {
    None,
    /// Made-up bytes; allowed at a plausible position only for a liar.
    Garbage(&'a [u8]),
    /// A slice of a real segment, with the options that map it.
    Real(&'a [u8], &'a [MptcpOption]),
}

fn addr(inp: &mut Input) -> IpAddr {
    match inp.u8() % 6 {
        0 => C1.into(),
        1 => C2.into(),
        2 => S1.into(),
        3 => S2.into(),
        4 => Ipv4Addr::new(10, 0, 3, inp.u8()).into(),
        _ => Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(inp.u8())).into(),
    }
}

/// A key the observer saw, or any.
fn key(obs: &Observed, inp: &mut Input) -> u64 {
    if inp.bool() && !obs.keys.is_empty() {
        obs.keys[inp.index(obs.keys.len())]
    } else {
        inp.u64()
    }
}

/// Context of one forged segment, for its options.
struct Ctx<'a> {
    obs: &'a Observed,
    /// The segment goes to the client.
    to_client: bool,
    /// Made-up mappings may say anything: the segment is old or far, or we lie.
    free_mapping: bool,
}

impl Ctx<'_> {
    /// What the receiver acknowledged at the data level.
    fn rcv_dsn(&self) -> Option<u64> {
        self.obs.data_ack[usize::from(!self.to_client)]
    }

    /// A DATA_ACK from the sender: around what the receiver mapped, what the
    /// sender acked, far, or any.
    fn data_ack(&self, inp: &mut Input) -> Option<DataAck> {
        let sent_by_rcv = self.obs.dsn_hi[usize::from(!self.to_client)];
        let acked = self.obs.data_ack[usize::from(self.to_client)];
        let d = i64::from(inp.u16() as i16) as u64;
        let ack = match inp.u8() % 6 {
            0 => return None,
            1 => sent_by_rcv.unwrap_or(0).wrapping_add(d),
            2 => acked.unwrap_or(0).wrapping_add(d),
            3 => sent_by_rcv.unwrap_or(0).wrapping_add(FAR_DSN),
            4 => acked.unwrap_or(0).wrapping_sub(FAR_DSN),
            _ => inp.u64(),
        };
        Some(DataAck { ack, ack64: !inp.bool() })
    }

    /// A made-up mapping that keeps truthful mode's rule, or any for a liar
    /// or an old/far segment; `None` when the rule leaves nothing to say.
    fn mapping(&self, inp: &mut Input, data_fin: &mut bool) -> Option<DssMapping> {
        let mut m = DssMapping {
            dsn: inp.u64(),
            dsn64: !inp.bool(),
            ssn: inp.u32(),
            len: inp.u16(),
            checksum: inp.bool().then(|| inp.u16()),
        };
        let mode = inp.u8();
        if self.free_mapping {
            if mode & 1 == 1 {
                if let Some(r) = self.rcv_dsn() {
                    m.dsn = r.wrapping_add(u64::from(mode >> 1));
                }
            }
            return Some(m);
        }
        let r = self.rcv_dsn()?;
        let x = u64::from(inp.u16());
        match mode % 3 {
            // Far past what the receiver acknowledged.
            0 => {
                m.len = m.len.max(1);
                m.dsn = r.wrapping_add(FAR_DSN + x);
            }
            // Entirely acknowledged already.
            1 => {
                m.len = m.len.max(1);
                m.dsn = r.wrapping_sub(u64::from(m.len) + x + 1);
            }
            // A DATA_FIN alone: maps no subflow byte.
            _ => {
                m.len = 1;
                m.dsn = r.wrapping_add(x);
                *data_fin = true;
            }
        }
        Some(m)
    }

    fn option(&self, inp: &mut Input) -> Option<MptcpOption> {
        let obs = self.obs;
        Some(match inp.u8() % 11 {
            0 => {
                let form = inp.u8() % 5;
                let data = form >= 3 && self.free_mapping;
                MptcpOption::MpCapable {
                    version: if inp.bool() { 1 } else { inp.u8() & 15 },
                    flags: inp.u8(),
                    sender_key: (form >= 1).then(|| key(obs, inp)),
                    receiver_key: (form >= 2).then(|| key(obs, inp)),
                    data_len: data.then(|| inp.u16()),
                    checksum: (data && form == 4).then(|| inp.u16()),
                }
            }
            1 => MptcpOption::MpJoinSyn {
                backup: inp.bool(),
                addr_id: inp.u8(),
                token: if inp.bool() { crypto::token(key(obs, inp)) } else { inp.u32() },
                nonce: inp.u32(),
            },
            2 => MptcpOption::MpJoinSynAck { backup: inp.bool(), addr_id: inp.u8(), hmac: inp.u64(), nonce: inp.u32() },
            3 => {
                let mut hmac = [0u8; 20];
                let b = inp.bytes(20);
                hmac[..b.len()].copy_from_slice(b);
                MptcpOption::MpJoinAck { hmac }
            }
            4 => {
                let data_ack = self.data_ack(inp);
                let mut data_fin = inp.bool();
                let mapping = if inp.bool() { self.mapping(inp, &mut data_fin) } else { None };
                if mapping.is_none() && data_ack.is_none() {
                    return None;
                }
                MptcpOption::Dss { data_ack, mapping, data_fin: data_fin && mapping.is_some() }
            }
            5 => {
                let (echo, addr_id, a) = (inp.bool(), inp.u8(), addr(inp));
                let port = inp.bool().then(|| inp.u16());
                let hmac = match inp.u8() % 3 {
                    0 => None,
                    1 => Some(inp.u64()),
                    // Valid for a pair of observed keys (the right pair, in
                    // the right order, if the fuzzer picks it).
                    _ => Some(crypto::add_addr_hmac(key(obs, inp), key(obs, inp), addr_id, a, port)),
                };
                MptcpOption::AddAddr { echo, addr_id, addr: a, port, hmac }
            }
            6 => {
                let n = 1 + inp.index(3);
                MptcpOption::RmAddr { ids: inp.bytes(n).iter().copied().collect() }
            }
            7 => MptcpOption::MpPrio { backup: inp.bool() },
            8 => {
                let r = self.rcv_dsn().unwrap_or(0);
                MptcpOption::MpFail { dsn: if inp.bool() { r.wrapping_add(u64::from(inp.u16())) } else { inp.u64() } }
            }
            9 => MptcpOption::MpFastclose { receiver_key: key(obs, inp) },
            _ => MptcpOption::MpTcpRst { flags: inp.u8() & 15, reason: inp.u8() },
        })
    }
}

/// Options of a forged segment; pieces that do not fit are left out.
fn options(syn: bool, ts: Option<(u32, u32)>, sack: &[(u32, u32)], mptcp: &[MptcpOption], mss: u16) -> TcpOptions {
    if syn {
        let first = mptcp.first();
        for ts in [ts, None] {
            if let Ok(o) = TcpOptions::syn(mss, Some(7), true, ts, first) {
                return o;
            }
        }
        return TcpOptions::syn(mss, Some(7), true, None, None).unwrap_or_default();
    }
    for n in (0..=mptcp.len()).rev() {
        for ts in [ts, None] {
            if let Ok(o) = TcpOptions::established(ts, sack, &mptcp[..n]) {
                return o;
            }
        }
    }
    TcpOptions::new()
}

fn is_server(ip: IpAddr) -> bool {
    ip == IpAddr::from(S1) || ip == IpAddr::from(S2)
}

/// A structured segment, built from the input; `None` if it cannot be emitted.
pub(crate) fn structured(obs: &Observed, inp: &mut Input, liar: bool, client_proved: bool) -> Option<Vec<u8>> {
    // The 4-tuple: a direction the observer saw, or a new one.
    let sel = inp.u8();
    let (src, dst) = if sel < 192 && !obs.flows.is_empty() {
        let f = &obs.flows[usize::from(sel) % obs.flows.len()];
        (f.src, f.dst)
    } else {
        let c = SocketAddr::new(if sel & 1 == 0 { C1.into() } else { C2.into() }, inp.u16());
        let s = SocketAddr::new(
            if sel & 2 == 0 { S1.into() } else { S2.into() },
            if sel & 4 == 0 { PORT } else { inp.u16() },
        );
        if sel & 8 == 0 {
            (c, s)
        } else {
            (s, c)
        }
    };
    let fwd: Option<&Flow> = obs.flow(src, dst);
    let rev: Option<&Flow> = obs.flow(dst, src);
    let live = fwd.is_some() || rev.is_some();
    let mut flags = TcpFlags(inp.u8());
    let seq_mode = inp.u8() % 6;
    let sp = inp.u32();
    let next = fwd.and_then(|f| f.hi.or(f.isn.map(|i| i.wrapping_add(1)))).unwrap_or(sp);
    // What the receiver acknowledged: before it is old for the receiver.
    let rcv = rev.and_then(|f| f.ack);
    let glen = usize::from(inp.u16()) % MAX_GARBAGE;
    let garbage = inp.bytes(glen);
    let (mut seq, body, old_or_far) = match seq_mode {
        0 => (next, Body::None, false),
        1 => (next.wrapping_add(sp & 0xffff), Body::None, false),
        2 => match rcv {
            Some(r) => (r.wrapping_sub(garbage.len() as u32 + (sp & 0xfffff) + 1), Body::Garbage(garbage), true),
            None => (sp, Body::None, false),
        },
        3 => match rcv {
            Some(r) => (r.wrapping_add(FAR + (sp & 0xfffff)), Body::Garbage(garbage), true),
            None => (sp, Body::None, false),
        },
        4 => (sp, Body::None, false),
        _ => match fwd.filter(|f| !f.recs.is_empty()) {
            Some(f) => {
                let r = &f.recs[sp as usize % f.recs.len()];
                let a = usize::from(inp.u16()) % r.payload.len();
                let b = a + 1 + usize::from(inp.u16()) % (r.payload.len() - a);
                // The MP_CAPABLE data form maps from subflow byte 1 whatever
                // the segment's sequence number: replay it whole.
                let whole = r.mapping.iter().any(|m| matches!(m, MptcpOption::MpCapable { .. }));
                let (a, b) = if whole { (0, r.payload.len()) } else { (a, b) };
                (r.seq.wrapping_add(a as u32), Body::Real(&r.payload[a..b], &r.mapping), false)
            }
            None => (next, Body::None, false),
        },
    };
    let (body, old_or_far) = match body {
        Body::None if liar => (Body::Garbage(garbage), old_or_far),
        // A SYN's sequence number is where the receiver's stream starts (a
        // receiver in SYN-SENT or LISTEN takes any): it carries no bytes,
        // and on a live tuple only the ISN its sender really used.
        _ if flags.syn() && !liar => (Body::None, false),
        b => (b, old_or_far),
    };
    if flags.syn() && live && !liar {
        match fwd.and_then(|f| f.isn) {
            Some(isn) => seq = isn,
            None => flags = TcpFlags(flags.0 & !TcpFlags::SYN.0),
        }
    }
    let peer_next = rev.and_then(|f| f.hi);
    let ap = inp.u32();
    let ack = match inp.u8() % 4 {
        0 => peer_next.unwrap_or(ap),
        1 => peer_next.unwrap_or(0).wrapping_add(ap as i16 as u32),
        2 => peer_next.unwrap_or(0).wrapping_add(0x8000_0000),
        _ => ap,
    };
    let window = inp.u16();
    let ts = match inp.u8() % 3 {
        0 => None,
        1 => fwd.and_then(|f| f.ts).map(|(v, e)| (v.wrapping_add(u32::from(inp.u8())), e)),
        _ => Some((inp.u32(), inp.u32())),
    };
    let sack: Vec<(u32, u32)> = (0..inp.index(3))
        .map(|_| {
            let l = ack.wrapping_add(u32::from(inp.u16()));
            (l, l.wrapping_add(u32::from(inp.u16())))
        })
        .collect();
    let ctx = Ctx { obs, to_client: !is_server(dst.ip()), free_mapping: liar || old_or_far };
    let mut mptcp: Vec<MptcpOption> = Vec::new();
    let payload: &[u8] = match body {
        Body::None => &[],
        Body::Garbage(g) => g,
        Body::Real(p, m) => {
            mptcp.extend(m.iter().cloned());
            p
        }
    };
    let real_map = !mptcp.is_empty();
    let may_forge = liar || client_proved || !ctx.to_client;
    for _ in 0..inp.index(3) {
        if let Some(o) = ctx.option(inp).filter(|_| may_forge) {
            // A second mapping next to a real one would be a lie about its bytes.
            let maps = matches!(o, MptcpOption::Dss { mapping: Some(_), .. });
            if !(maps && real_map && !ctx.free_mapping) {
                mptcp.push(o);
            }
        }
    }
    let mut hdr = TcpHeader::new(src.port(), dst.port(), seq, ack, flags, window);
    hdr.urgent = if flags.0 & TcpFlags::URG.0 != 0 { inp.u16() } else { 0 };
    hdr.options = options(flags.syn(), ts, &sack, &mptcp, 536 + inp.u16() % 1000);
    emit(src.ip(), dst.ip(), &hdr, payload)
}

fn emit(src: IpAddr, dst: IpAddr, hdr: &TcpHeader, payload: &[u8]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 60 + 60 + payload.len()];
    let n = emit_tcp_packet(src, dst, 64, hdr, payload, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// One of the kernel capture's frames, moved onto a live subflow: its
/// sequence and acknowledgment numbers rebased on the live ISNs, its
/// options as the kernel wrote them (keys, HMACs, DSNs of another
/// connection: implausible MPTCP values in a plausible TCP segment).
/// Truthful mode strips the payload and MP_CAPABLE's data form (see above).
pub(crate) fn kernel_frame(obs: &Observed, inp: &mut Input, liar: bool, client_proved: bool) -> Option<Vec<u8>> {
    let frames = kernel::frames();
    let f = &frames[usize::from(inp.u16()) % frames.len()];
    // Live subflows, client side first, in order of appearance.
    let subflows: Vec<&Flow> = obs.flows.iter().filter(|x| x.from_client).collect();
    if subflows.is_empty() {
        return None;
    }
    let pick = if inp.bool() { f.subflow } else { inp.u8().into() };
    let c = subflows[pick % subflows.len()];
    let (src, dst) = if f.from_client { (c.src, c.dst) } else { (c.dst, c.src) };
    let own_isn = obs.flow(src, dst).and_then(|x| x.isn);
    let peer_isn = obs.flow(dst, src).and_then(|x| x.isn);
    if f.hdr.flags.syn() && own_isn.is_none() && !liar {
        return None;
    }
    let mut hdr = f.hdr.clone();
    hdr.src_port = src.port();
    hdr.dst_port = dst.port();
    hdr.seq = own_isn.map_or(f.hdr.seq, |i| i.wrapping_add(f.rel_seq));
    if f.hdr.flags.ack() {
        hdr.ack = peer_isn.map_or(f.hdr.ack, |i| i.wrapping_add(f.rel_ack));
    }
    if !liar {
        let mut o = TcpOptions::new();
        let strip_all = !f.from_client && !client_proved;
        for opt in f.hdr.options.iter().flatten() {
            let mptcp = matches!(opt, TcpOption::Mptcp(_));
            let capable_data = matches!(opt, TcpOption::Mptcp(MptcpOption::MpCapable { data_len: Some(_), .. }));
            if !(capable_data || mptcp && strip_all) {
                o.push(&opt).ok()?;
            }
        }
        o.pad_to_word();
        hdr.options = o;
    }
    let payload: &[u8] = if liar { &f.payload } else { &[] };
    emit(src.ip(), dst.ip(), &hdr, payload)
}

/// Corrupts a packet in flight. Without a checksum fix anything goes (the
/// checksum must catch it); with one, truthful mode touches only what
/// cannot move bytes to another position (ACK, flags, window, urgent
/// pointer; a shorter payload), a liar anything.
pub(crate) fn corrupt(pkt: &mut Vec<u8>, inp: &mut Input, liar: bool) {
    let mode = inp.u8() % 4;
    let pos = usize::from(inp.u16());
    let bit = inp.u8() & 7;
    match mode {
        // One flipped bit always changes a ones'-complement sum, two may
        // cancel (a 0->1 and a 1->0 at the same bit of two words): TCP's and
        // the DSS checksum cannot catch that, so a truthful wire flips bits
        // only in a packet whose checksums still verify.
        0 if !liar && parse_tcp_packet(pkt).is_err() => {}
        0 => {
            if !pkt.is_empty() {
                let i = pos % pkt.len();
                pkt[i] ^= 1 << bit;
            }
        }
        1 => pkt.truncate(pos % (pkt.len() + 1)),
        // Re-checksumming a packet an earlier step corrupted would make its
        // corruption valid: a lie about its bytes.
        _ if !liar && parse_tcp_packet(pkt).is_err() => {}
        2 => {
            let Ok(p) = parse_tcp_packet_unverified(pkt) else { return };
            let (src, dst, mut hdr, payload) = (p.src, p.dst, p.tcp.clone(), p.payload.to_vec());
            let field = if liar { inp.u8() % 7 } else { inp.u8() % 4 };
            let x = 1u32 << (pos % 32);
            match field {
                0 => hdr.ack ^= x,
                // A SYN flipped on would start a stream at a data byte's
                // sequence number: a lie about every later byte.
                1 if !liar && bit == 1 => return,
                1 => hdr.flags = TcpFlags(hdr.flags.0 ^ (1 << bit)),
                2 => hdr.window ^= x as u16 | (x >> 16) as u16,
                3 => hdr.urgent ^= x as u16 | (x >> 16) as u16,
                4 => hdr.seq ^= x,
                5 => hdr.src_port ^= x as u16 | (x >> 16) as u16,
                _ => {
                    let mut b = hdr.options.as_bytes().to_vec();
                    if !b.is_empty() {
                        let i = pos % b.len();
                        b[i] ^= 1 << bit;
                    }
                    hdr.options = TcpOptions::from_bytes(&b).unwrap_or_default();
                }
            }
            if let Some(v) = emit(src, dst, &hdr, &payload) {
                *pkt = v;
            }
        }
        _ => {
            let Ok(p) = parse_tcp_packet_unverified(pkt) else { return };
            let cut = pos % (p.payload.len() + 1);
            if let Some(v) = emit(p.src, p.dst, &p.tcp.clone(), &p.payload[..cut]) {
                *pkt = v;
            }
        }
    }
}
