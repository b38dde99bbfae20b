//! What an observer on the wire learnt from the packets the two endpoints
//! sent: per direction of every 4-tuple the ISN, the highest sequence sent,
//! the latest acknowledgment and timestamps, the last few data segments with
//! the options that map them; the MPTCP keys and DATA_ACKs. The forger uses
//! it to build plausible packets, and to keep them truthful (see `forge`).

use mptun_wire::{parse_tcp_packet, MptcpOption};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Data segments remembered per direction, for truthful replays.
const MAX_RECS: usize = 8;
/// MPTCP keys remembered.
const MAX_KEYS: usize = 8;
/// Directions remembered (a flood of new tuples must not grow this).
const MAX_FLOWS: usize = 64;

/// One data segment an endpoint really sent.
pub(crate) struct Rec {
    pub seq: u32,
    pub payload: Vec<u8>,
    /// Its options that say where the bytes belong at the data level (DSS
    /// with a mapping, MP_CAPABLE with a data length): only these may travel
    /// with these bytes in truthful mode.
    pub mapping: Vec<MptcpOption>,
}

/// One direction of a 4-tuple.
pub(crate) struct Flow {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Sent by the client.
    pub from_client: bool,
    pub isn: Option<u32>,
    /// Highest sequence number sent plus one (SYN and FIN count).
    pub hi: Option<u32>,
    /// Latest acknowledgment sent: the sender's `rcv_nxt` at that time, so
    /// everything before it is old for the sender from then on.
    pub ack: Option<u32>,
    pub ts: Option<(u32, u32)>,
    pub recs: VecDeque<Rec>,
}

/// Everything observed.
#[derive(Default)]
pub(crate) struct Observed {
    pub flows: Vec<Flow>,
    pub keys: Vec<u64>,
    /// Latest DATA_ACK sent by the client (`[0]`) and the server (`[1]`).
    pub data_ack: [Option<u64>; 2],
    /// Highest data sequence mapped by the client (`[0]`) and the server (`[1]`).
    pub dsn_hi: [Option<u64>; 2],
}

/// `a` is after `b` in sequence space.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Observed {
    pub(crate) fn flow(&self, src: SocketAddr, dst: SocketAddr) -> Option<&Flow> {
        self.flows.iter().find(|f| f.src == src && f.dst == dst)
    }

    /// Records a packet endpoint `from_client` sent (it emits valid packets only).
    pub(crate) fn record(&mut self, from_client: bool, pkt: &[u8]) {
        let Ok(p) = parse_tcp_packet(pkt) else { return };
        let (src, dst) = (SocketAddr::new(p.src, p.tcp.src_port), SocketAddr::new(p.dst, p.tcp.dst_port));
        let opts = p.tcp.options.summary();
        let side = usize::from(!from_client);
        for o in &opts.mptcp {
            match o {
                MptcpOption::MpCapable { sender_key, receiver_key, .. } => {
                    for k in [sender_key, receiver_key].into_iter().flatten() {
                        if !self.keys.contains(k) && self.keys.len() < MAX_KEYS {
                            self.keys.push(*k);
                        }
                    }
                }
                MptcpOption::Dss { data_ack, mapping, .. } => {
                    if let Some(a) = data_ack.filter(|a| a.ack64) {
                        self.data_ack[side] = Some(a.ack);
                    }
                    if let Some(m) = mapping.filter(|m| m.dsn64) {
                        let end = m.dsn.wrapping_add(u64::from(m.len));
                        let hi = &mut self.dsn_hi[side];
                        if hi.is_none_or(|h| (end.wrapping_sub(h) as i64) > 0) {
                            *hi = Some(end);
                        }
                    }
                }
                _ => {}
            }
        }
        let i = match self.flows.iter().position(|f| f.src == src && f.dst == dst) {
            Some(i) => i,
            None if self.flows.len() < MAX_FLOWS => {
                self.flows.push(Flow {
                    src,
                    dst,
                    from_client,
                    isn: None,
                    hi: None,
                    ack: None,
                    ts: None,
                    recs: VecDeque::new(),
                });
                self.flows.len() - 1
            }
            None => return,
        };
        let f = &mut self.flows[i];
        let fl = p.tcp.flags;
        if fl.syn() && f.isn != Some(p.tcp.seq) {
            // A new incarnation of the tuple: what its predecessor acked
            // says nothing about the new receiver.
            *f = Flow {
                src,
                dst,
                from_client,
                isn: Some(p.tcp.seq),
                hi: None,
                ack: None,
                ts: None,
                recs: VecDeque::new(),
            };
        }
        let end = p.tcp.seq.wrapping_add(p.payload.len() as u32 + u32::from(fl.syn()) + u32::from(fl.fin()));
        if f.hi.is_none_or(|h| after(end, h)) {
            f.hi = Some(end);
        }
        if fl.ack() && f.ack.is_none_or(|a| after(p.tcp.ack, a)) {
            f.ack = Some(p.tcp.ack);
        }
        if opts.timestamp.is_some() {
            f.ts = opts.timestamp;
        }
        if !p.payload.is_empty() {
            let mapping = opts
                .mptcp
                .iter()
                .filter(|o| {
                    matches!(
                        o,
                        MptcpOption::Dss { mapping: Some(_), .. } | MptcpOption::MpCapable { data_len: Some(_), .. }
                    )
                })
                .cloned()
                .collect();
            if f.recs.len() == MAX_RECS {
                f.recs.pop_front();
            }
            f.recs.push_back(Rec { seq: p.tcp.seq, payload: p.payload.to_vec(), mapping });
        }
    }
}
