//! Arbitrary bytes into the packet parser and the option decoders; whatever
//! parses is re-emitted and must come back identical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptun_wire::mptcp::MptcpOption;
use mptun_wire::tcp::{TcpHeader, TcpOption, TcpOptions};
use mptun_wire::{emit_tcp_packet, parse_tcp_packet, parse_tcp_packet_unverified, tcp_packet_len};

fuzz_target!(|data: &[u8]| {
    // Whole packets, checksums verified: a packet we accept re-emits to a
    // packet we accept with the same fields, and its TCP segment is
    // byte-exact when the original was in our canonical form.
    if let Ok(p) = parse_tcp_packet(data) {
        let mut out = vec![0u8; tcp_packet_len(p.src, &p.tcp, p.payload.len())];
        let n = emit_tcp_packet(p.src, p.dst, p.ttl, &p.tcp, p.payload, &mut out).expect("emit what parsed");
        let q = parse_tcp_packet(&out[..n]).expect("re-parse what we emitted");
        assert_eq!((q.src, q.dst, q.ttl, q.payload), (p.src, p.dst, p.ttl, p.payload));
        assert_eq!((q.tcp.seq, q.tcp.ack, q.tcp.flags, q.tcp.options.as_bytes()), (p.tcp.seq, p.tcp.ack, p.tcp.flags, p.tcp.options.as_bytes()));
        // The TCP segment is byte-exact, unless the input used the bits we
        // normalise: reserved bits (zeroed) or a checksum of 0xffff, the
        // other representation of the 0x0000 we compute.
        let ihl = if data[0] >> 4 == 4 { usize::from(data[0] & 0x0f) * 4 } else { 40 };
        let seg_len = p.tcp.header_len() + p.payload.len();
        let ihl_out = n - seg_len;
        let seg = &data[ihl..ihl + seg_len];
        if seg[12] & 0x0f == 0 && p.tcp.checksum != 0xffff {
            assert_eq!(&out[ihl_out..n], seg, "TCP segment re-emit");
        }
    }
    let _ = parse_tcp_packet_unverified(data);

    // The bytes as a TCP header: re-emit is byte-exact but for the reserved bits.
    if let Ok((h, n)) = TcpHeader::parse(data) {
        let mut out = [0u8; 60];
        assert_eq!(h.emit(&mut out), Ok(n));
        assert_eq!(&out[..12], &data[..12]);
        assert_eq!(out[12], data[12] & 0xf0);
        assert_eq!(&out[13..n], &data[13..n]);
    }

    // The bytes as an option list (first 40): every decoded option re-emits
    // to bytes that decode to the same option; the raw list re-pushes exactly.
    let cut = &data[..data.len().min(40)];
    let opts = TcpOptions::from_bytes(cut).expect("<= 40 bytes");
    let _ = opts.summary();
    let mut rebuilt = TcpOptions::new();
    let mut all_ok = true;
    let mut saw_eol = false;
    for o in opts.iter() {
        match o {
            Ok(o) => {
                let mut b = [0u8; 40];
                let l = o.emit(&mut b).expect("emit decoded option");
                assert_eq!(TcpOption::parse(&b[..l]).expect("re-parse").0, o);
                rebuilt.push(&o).expect("re-push fits where it came from");
                saw_eol |= o == TcpOption::Eol;
                if let TcpOption::Mptcp(m) = &o {
                    assert_eq!(MptcpOption::parse(&b[..l]).as_ref(), Ok(m));
                }
            }
            Err(_) => all_ok = false,
        }
    }
    if all_ok {
        // Re-pushing takes the same room (up to EOL, after which bytes are
        // padding) and decodes the same; bytes may differ only in reserved
        // bits, which we write as zero.
        let r = rebuilt.as_bytes();
        if saw_eol {
            assert!(r.len() <= cut.len());
        } else {
            assert_eq!(r.len(), cut.len());
        }
        assert!(rebuilt.iter().eq(opts.iter()));
    }

    // The bytes as one MPTCP option.
    if let Ok(m) = MptcpOption::parse(data) {
        let mut b = [0u8; 40];
        let l = m.emit(&mut b).expect("emit decoded MPTCP option");
        assert_eq!(l, data.len());
        assert_eq!(MptcpOption::parse(&b[..l]), Ok(m));
    }
});
