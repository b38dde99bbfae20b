//! Packets per second for the hot path, ours vs etherparse, and checksum
//! throughput. Run: `cargo bench -p mptun-wire --bench ip_codec`.
//! Prints figures; asserts nothing about speed (that is for a human to read).

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use mptun_wire::mptcp::{DataAck, DssMapping, MptcpOption};
use mptun_wire::tcp::{TcpFlags, TcpHeader, TcpOptions};
use mptun_wire::{checksum, emit_tcp_packet, emit_tcp_packet_offload, parse_tcp_packet};
use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Runs `f` repeatedly for about `budget`, returns calls per second.
fn rate(budget: Duration, mut f: impl FnMut()) -> f64 {
    for _ in 0..1000 {
        f();
    }
    let mut n = 0u64;
    let start = Instant::now();
    loop {
        for _ in 0..1000 {
            f();
        }
        n += 1000;
        let el = start.elapsed();
        if el >= budget {
            return n as f64 / el.as_secs_f64();
        }
    }
}

fn header(payload: bool) -> TcpHeader {
    let mut h = TcpHeader::new(57502, 5000, 1, 1, TcpFlags::ACK, 63);
    let dss = MptcpOption::Dss {
        data_ack: Some(DataAck { ack: 2207426194, ack64: false }),
        mapping: payload.then_some(DssMapping {
            dsn: 3649431711931973068,
            dsn64: true,
            ssn: 1,
            len: 10000,
            checksum: None,
        }),
        data_fin: false,
    };
    h.options = TcpOptions::established(Some((1678852935, 493960856)), &[], &[dss]).unwrap();
    h
}

fn etherparse_parse_verify(pkt: &[u8]) -> bool {
    let sp = SlicedPacket::from_ip(pkt).unwrap();
    let Some(TransportSlice::Tcp(t)) = sp.transport else { return false };
    let Some(etherparse::NetSlice::Ipv4(v4)) = sp.net else { return false };
    let h = v4.header();
    let ok_ip = h.to_header().calc_header_checksum() == h.header_checksum();
    ok_ip && t.calc_checksum_ipv4(h.source(), h.destination()).unwrap() == t.checksum()
}

fn main() {
    let budget = Duration::from_millis(std::env::var("BENCH_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(700));
    let src: IpAddr = "10.0.1.1".parse().unwrap();
    let dst: IpAddr = "10.0.1.2".parse().unwrap();
    println!("mptun-wire ip_codec bench ({} ms per figure)", budget.as_millis());

    // Checksum throughput.
    let data: Vec<u8> = (0..1500u32).map(|i| (i * 7 + 3) as u8).collect();
    let ours = rate(budget, || {
        black_box(checksum::sum(black_box(&data)));
    });
    let naive = rate(budget, || {
        let d = black_box(&data);
        let mut acc = 0u32;
        for c in d.chunks(2) {
            acc += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
        }
        black_box(checksum::fold32(acc));
    });
    let ep = rate(budget, || {
        black_box(etherparse::checksum::Sum16BitWords::new().add_slice(black_box(&data)).ones_complement());
    });
    let gbps = |r: f64| r * 1500.0 * 8.0 / 1e9;
    println!(
        "checksum 1500 B: ours {:.1} Gbit/s | naive u16 loop {:.1} Gbit/s | etherparse {:.1} Gbit/s",
        gbps(ours),
        gbps(naive),
        gbps(ep)
    );

    for (name, payload_len, with_map) in [("ACK (72 B)", 0usize, false), ("data (1500 B)", 1500 - 20 - 40, true)] {
        let h = header(with_map);
        let payload = vec![0x6bu8; payload_len];
        let mut buf = vec![0u8; 2000];
        let n = emit_tcp_packet(src, dst, 64, &h, &payload, &mut buf).unwrap();
        let pkt = buf[..n].to_vec();
        assert!(parse_tcp_packet(&pkt).is_ok() && etherparse_parse_verify(&pkt));

        let ours_parse = rate(budget, || {
            black_box(parse_tcp_packet(black_box(&pkt)).is_ok());
        });
        let ep_parse = rate(budget, || {
            black_box(etherparse_parse_verify(black_box(&pkt)));
        });
        let ours_emit = rate(budget, || {
            black_box(emit_tcp_packet(src, dst, 64, black_box(&h), black_box(&payload), &mut buf).unwrap());
        });
        let (IpAddr::V4(s4), IpAddr::V4(d4)) = (src, dst) else { unreachable!() };
        let mut th = etherparse::TcpHeader::new(h.src_port, h.dst_port, h.seq, h.window);
        th.ack = true;
        th.acknowledgment_number = h.ack;
        th.set_options_raw(h.options.as_bytes()).unwrap();
        let ep_emit = rate(budget, || {
            let b = PacketBuilder::ipv4(s4.octets(), d4.octets(), 64).tcp_header(black_box(th.clone()));
            let mut w = &mut buf[..];
            b.write(&mut w, black_box(&payload)).unwrap();
            black_box(&buf);
        });
        println!(
            "{name}: parse+verify ours {:.2} Mpkt/s vs etherparse {:.2} Mpkt/s ({:.1}x) | emit ours {:.2} Mpkt/s vs etherparse {:.2} Mpkt/s ({:.1}x)",
            ours_parse / 1e6,
            ep_parse / 1e6,
            ours_parse / ep_parse,
            ours_emit / 1e6,
            ep_emit / 1e6,
            ours_emit / ep_emit
        );
    }

    // A 64 KiB TSO super-segment (what the send path builds at 10+ Gbit/s)
    // with its checksum computed, and left to a device with checksum
    // offload: the difference is one pass over the payload.
    {
        let h = header(true);
        let payload: Vec<u8> = (0..64_000u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut buf = vec![0u8; 66_000];
        let full = rate(budget, || {
            black_box(emit_tcp_packet(src, dst, 64, black_box(&h), black_box(&payload), &mut buf).unwrap());
        });
        let partial = rate(budget, || {
            black_box(emit_tcp_packet_offload(src, dst, 64, black_box(&h), black_box(&payload), &mut buf).unwrap());
        });
        println!(
            "super-segment (64,000 B payload): emit with checksum {:.2} us ({:.1} Gbit/s) | checksum left to the device {:.2} us ({:.1} Gbit/s), {:.2}x",
            1e6 / full,
            full * 64_000.0 * 8.0 / 1e9,
            1e6 / partial,
            partial * 64_000.0 * 8.0 / 1e9,
            partial / full
        );
    }

    // Option decoding, the per-segment cost on top of framing.
    let h = header(true);
    let dec = rate(budget, || {
        black_box(black_box(&h.options).summary());
    });
    println!("options summary (TS + DSS map): {:.1} M/s", dec / 1e6);
}
