//! The frames of a real Linux MPTCP exchange (`mptun-wire`'s kernel
//! capture: MP_CAPABLE, ADD_ADDR, two MP_JOINs, DSS, DATA_FIN), decoded once,
//! for the harness to inject rewritten onto its live 4-tuples.

use mptun_wire::TcpHeader;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;

/// The capture, taken in the same addressing the harness uses (client
/// 10.0.x.1, server 10.0.x.2, port 5000).
const PCAP: &[u8] = include_bytes!("../../mptun-wire/tests/data/kernel-mptcp-2paths.pcap");

/// One captured TCP segment.
pub(crate) struct Frame {
    /// Sent by the client (10.0.x.1).
    pub from_client: bool,
    /// Which of the capture's subflows (in order of first appearance).
    pub subflow: usize,
    /// Header as captured (options complete: the snap length cut payload only).
    pub hdr: TcpHeader,
    /// The captured part of the payload.
    pub payload: Vec<u8>,
    /// Sequence number relative to the sender's ISN on that subflow.
    pub rel_seq: u32,
    /// Acknowledgment relative to the receiver's ISN (0 without ACK).
    pub rel_ack: u32,
}

/// Every TCP frame of the capture, in order.
pub(crate) fn frames() -> &'static [Frame] {
    static FRAMES: OnceLock<Vec<Frame>> = OnceLock::new();
    FRAMES.get_or_init(|| decode(PCAP))
}

fn decode(raw: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    if raw.len() < 24 {
        return out;
    }
    let le = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) == 0xa1b2_c3d4
        || u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) == 0xa1b2_3c4d;
    let rd = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let skip = match rd(&raw[20..24]) {
        1 => 14,
        113 => 16,
        276 => 20,
        _ => 0,
    };
    // (client port) -> subflow index; (src port, dst port) -> ISN.
    let mut subflows: HashMap<u16, usize> = HashMap::new();
    let mut isn: HashMap<(u16, u16), u32> = HashMap::new();
    let mut at = 24;
    while at + 16 <= raw.len() {
        let incl = rd(&raw[at + 8..]) as usize;
        let frame = &raw[(at + 16).min(raw.len())..(at + 16 + incl).min(raw.len())];
        at += 16 + incl;
        let Some(ip) = frame.get(skip..) else { continue };
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
            continue;
        }
        let ihl = usize::from(ip[0] & 15) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
        let Some(seg) = ip.get(ihl..) else { continue };
        let Ok((hdr, hlen)) = TcpHeader::parse(seg) else { continue };
        let payload = seg.get(hlen..total.saturating_sub(ihl).min(seg.len())).unwrap_or(&[]).to_vec();
        let from_client = matches!(src, IpAddr::V4(a) if a.octets()[3] == 1);
        let cport = if from_client { hdr.src_port } else { hdr.dst_port };
        let n = subflows.len();
        let subflow = *subflows.entry(cport).or_insert(n);
        if hdr.flags.syn() {
            isn.insert((hdr.src_port, hdr.dst_port), hdr.seq);
        }
        let own = isn.get(&(hdr.src_port, hdr.dst_port)).copied().unwrap_or(hdr.seq);
        let peer = isn.get(&(hdr.dst_port, hdr.src_port)).copied().unwrap_or(0);
        let rel_ack = if hdr.flags.ack() { hdr.ack.wrapping_sub(peer) } else { 0 };
        out.push(Frame { from_client, subflow, rel_seq: hdr.seq.wrapping_sub(own), rel_ack, hdr, payload });
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn capture_decodes() {
        let f = super::frames();
        assert!(f.len() > 100, "{} frames", f.len());
        // Client and server, three subflows (initial and two joins).
        assert!(f.iter().any(|f| f.from_client) && f.iter().any(|f| !f.from_client));
        assert_eq!(f.iter().map(|f| f.subflow).max(), Some(2));
        assert!(f[0].hdr.flags.syn() && f[0].rel_seq == 0);
    }
}
