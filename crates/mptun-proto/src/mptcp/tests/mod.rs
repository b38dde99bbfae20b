//! MPTCP connection tests: two endpoints back to back through the real codec,
//! with a hand on every packet in between (to drop or tamper with it).

mod backup;
mod checksum;
mod close;
mod conn;
mod data;
mod dsn;
mod fallback;
mod join;
mod one_sided_fallback;
mod pm;

use super::*;
use crate::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use crate::pm::{EndpointFlags, PmEndpoint};
use crate::test_util::{ip, pass, sa, Pair};
use mptun_time::Duration;
use mptun_wire::{emit_tcp_packet, parse_tcp_packet, MptcpOption, TcpOption};

/// A client and a server endpoint on the shared harness.
type Net = Pair<Endpoint>;

fn net(client: EndpointConfig, server: EndpointConfig) -> Net {
    let mut b = Endpoint::new(server, [2; 32]);
    b.listen(sa("10.0.1.2:5000"));
    Net::new(Endpoint::new(client, [1; 32]), b, Instant::ZERO)
}

/// Two addresses each (paths 1 and 2); the server announces its second.
fn two_path() -> Net {
    two_path_with(|_| {})
}

/// [`two_path`] with the server's configuration changed by `f`.
fn two_path_with(f: impl FnOnce(&mut EndpointConfig)) -> Net {
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint { id: 1, addr: ip("10.0.2.1"), flags: EndpointFlags::default(), port: None });
    c.mptcp.pm.max_add_addr_accepted = 2;
    let mut s = EndpointConfig::default();
    s.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.2"),
        flags: EndpointFlags { signal: true, ..Default::default() },
        port: None,
    });
    f(&mut s);
    net(c, s)
}

trait NetExt {
    fn read_b(&mut self, sh: ConnectionHandle, buf: &mut [u8]) -> Vec<u8>;
    fn connect(&mut self) -> ConnectionHandle;
}

impl NetExt for Net {
    /// Everything connection `sh` of B has ready to read.
    fn read_b(&mut self, sh: ConnectionHandle, buf: &mut [u8]) -> Vec<u8> {
        let mut got = Vec::new();
        loop {
            let k = self.b.recv(sh, self.now, buf).unwrap_or(0);
            if k == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..k]);
        }
    }

    fn connect(&mut self) -> ConnectionHandle {
        self.a.connect(self.now, sa("10.0.1.1:0"), sa("10.0.1.2:5000")).expect("connect")
    }
}

/// Rewrites the MPTCP options of a packet with `f`, re-emitting it.
fn rewrite(p: &[u8], f: &mut dyn FnMut(&mut MptcpOption)) -> Vec<u8> {
    let pkt = parse_tcp_packet(p).unwrap();
    let mut hdr = pkt.tcp.clone();
    let mut opts = mptun_wire::TcpOptions::new();
    for o in pkt.tcp.options.iter() {
        let mut o = o.unwrap();
        if let TcpOption::Mptcp(m) = &mut o {
            f(m);
        }
        opts.push(&o).unwrap();
    }
    hdr.options = opts;
    let mut out = vec![0u8; 1600];
    let n = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &hdr, pkt.payload, &mut out).unwrap();
    out.truncate(n);
    out
}

fn mptcp_opts(p: &[u8]) -> Vec<MptcpOption> {
    parse_tcp_packet(p).unwrap().tcp.options.summary().mptcp.into_iter().collect()
}

/// Removes every MPTCP option from a packet (a middlebox that strips them).
fn strip_mptcp(p: &[u8]) -> Vec<u8> {
    let pkt = parse_tcp_packet(p).unwrap();
    let mut hdr = pkt.tcp.clone();
    let mut opts = mptun_wire::TcpOptions::new();
    for o in pkt.tcp.options.iter() {
        let o = o.unwrap();
        if !matches!(o, TcpOption::Mptcp(_)) {
            opts.push(&o).unwrap();
        }
    }
    opts.pad_to_word();
    hdr.options = opts;
    let mut out = vec![0u8; 1600];
    let n = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &hdr, pkt.payload, &mut out).unwrap();
    out.truncate(n);
    out
}
