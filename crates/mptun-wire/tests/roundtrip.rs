//! Properties: `parse(emit(x)) == x` for every valid value, parsing arbitrary
//! bytes never panics and is idempotent through emit, the Linux-layout
//! builders keep their invariants, and the incremental checksum agrees with
//! recomputation.

mod strategies;

use mptun_wire::checksum;
use mptun_wire::mptcp::MptcpOption;
use mptun_wire::tcp::{TcpHeader, TcpOption, TcpOptions};
use proptest::prelude::*;
use strategies::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mptcp_option_roundtrip(m in arb_mptcp()) {
        let mut buf = [0u8; 40];
        let n = m.emit(&mut buf).unwrap();
        prop_assert_eq!(n, m.len());
        prop_assert_eq!(buf[0], 30);
        prop_assert_eq!(buf[1] as usize, n);
        prop_assert_eq!(MptcpOption::parse(&buf[..n]).unwrap(), m.clone());
        // One byte short of room is refused, not truncated.
        prop_assert_eq!(m.emit(&mut buf[..n - 1]), Err(mptun_wire::Error::NoSpace));
        prop_assert_eq!((n + m.linux_padding()) % 4, 0);
    }

    #[test]
    fn tcp_option_roundtrip(o in arb_tcp_option()) {
        let mut buf = [0u8; 40];
        let n = o.emit(&mut buf).unwrap();
        prop_assert_eq!(n, o.len());
        prop_assert_eq!(TcpOption::parse(&buf[..n]).unwrap(), (o.clone(), n));
        // Trailing bytes do not change what is parsed.
        buf[n..].fill(0xa5);
        prop_assert_eq!(TcpOption::parse(&buf).unwrap(), (o, n));
    }

    #[test]
    fn option_list_roundtrip((opts, pushed) in arb_options()) {
        let decoded: Vec<TcpOption> = opts.iter().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&decoded, &pushed);
        let again = TcpOptions::from_bytes(opts.as_bytes()).unwrap();
        prop_assert_eq!(&again, &opts);
        let s = opts.summary();
        prop_assert!(!s.malformed);
        let n_mptcp = pushed.iter().filter(|o| matches!(o, TcpOption::Mptcp(_))).count();
        prop_assert_eq!(s.mptcp.len(), n_mptcp.min(4));
    }

    #[test]
    fn header_roundtrip(h in arb_header(), extra in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = vec![0u8; 60];
        let n = h.emit(&mut buf).unwrap();
        prop_assert_eq!(n, h.header_len());
        buf.truncate(n);
        buf.extend_from_slice(&extra);
        let (p, l) = TcpHeader::parse(&buf).unwrap();
        prop_assert_eq!(l, n);
        prop_assert_eq!(p, h);
    }

    #[test]
    fn unpadded_header_pads_with_eol(h in arb_header(), cut in 0usize..4) {
        // Options not a word multiple: emit pads with EOL, parse sees them.
        let mut h = h;
        let raw = h.options.as_bytes();
        let keep = raw.len().saturating_sub(cut);
        h.options = TcpOptions::from_bytes(&raw[..keep]).unwrap();
        let mut buf = [0u8; 60];
        let n = h.emit(&mut buf).unwrap();
        prop_assert_eq!(n % 4, 0);
        let (p, _) = TcpHeader::parse(&buf[..n]).unwrap();
        prop_assert_eq!(&p.options.as_bytes()[..keep], h.options.as_bytes());
        prop_assert!(p.options.as_bytes()[keep..].iter().all(|&b| b == 0));
    }

    #[test]
    fn arbitrary_option_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=40)) {
        let o = TcpOptions::from_bytes(&bytes).unwrap();
        let _ = o.summary();
        let _ = format!("{o:?}");
        for x in o.iter().flatten() {
            // Whatever parsed re-emits to something that parses to the same value.
            let mut buf = [0u8; 40];
            let n = x.emit(&mut buf).unwrap();
            prop_assert_eq!(TcpOption::parse(&buf[..n]).unwrap().0, x);
        }
    }

    #[test]
    fn arbitrary_mptcp_bytes_never_panic(len in 0usize..=40, body in proptest::collection::vec(any::<u8>(), 0..=40)) {
        // Mostly well-framed kind 30 options, so the subtype parsers are reached.
        let mut b = body;
        if b.len() >= 2 {
            b[0] = 30;
            b[1] = len as u8;
        }
        if let Ok(m) = MptcpOption::parse(&b) {
            let mut out = [0u8; 40];
            let n = m.emit(&mut out).unwrap();
            prop_assert_eq!(n, b.len());
            prop_assert_eq!(MptcpOption::parse(&out[..n]).unwrap(), m);
        }
    }

    #[test]
    fn arbitrary_header_and_packet_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        if let Ok((h, n)) = TcpHeader::parse(&bytes) {
            let mut out = [0u8; 60];
            prop_assert_eq!(h.emit(&mut out).unwrap(), n);
            // Byte-exact apart from the reserved bits, which we zero.
            let mut expect = bytes[..n].to_vec();
            expect[12] &= 0xf0;
            prop_assert_eq!(&out[..n], &expect[..]);
        }
        let _ = mptun_wire::parse_tcp_packet(&bytes);
        let mut v4 = bytes.clone();
        if !v4.is_empty() { v4[0] = 0x45; }
        let _ = mptun_wire::parse_tcp_packet_unverified(&v4);
    }

    #[test]
    fn established_builder_invariants(
        ts in proptest::option::of(any::<(u32, u32)>()),
        sack in proptest::collection::vec(any::<(u32, u32)>(), 0..5),
        mptcp in proptest::collection::vec(arb_mptcp(), 0..3),
    ) {
        match TcpOptions::established(ts, &sack, &mptcp) {
            Ok(o) => {
                prop_assert_eq!(o.len() % 4, 0);
                let s = o.summary();
                prop_assert!(!s.malformed);
                prop_assert_eq!(s.timestamp, ts);
                prop_assert_eq!(&s.mptcp[..], &mptcp[..]);
                // SACK blocks kept are a prefix, and as many as fit.
                prop_assert!(s.sack.len() <= sack.len());
                prop_assert_eq!(&s.sack[..], &sack[..s.sack.len()]);
                if s.sack.len() < sack.len() && s.sack.len() < 4 {
                    let one_more = if s.sack.is_empty() { 12 } else { 8 };
                    prop_assert!(o.remaining() < one_more);
                }
            }
            Err(e) => {
                prop_assert_eq!(e, mptun_wire::Error::NoSpace);
                let need: usize = mptcp.iter().map(|m| m.len() + m.linux_padding()).sum::<usize>()
                    + if ts.is_some() { 12 } else { 0 };
                prop_assert!(need > 40);
            }
        }
    }

    #[test]
    fn syn_builder_invariants(
        mss in any::<u16>(), ws in proptest::option::of(0u8..15), sack in any::<bool>(),
        ts in proptest::option::of(any::<(u32, u32)>()), m in proptest::option::of(arb_mptcp()),
    ) {
        if let Ok(o) = TcpOptions::syn(mss, ws, sack, ts, m.as_ref()) {
            prop_assert_eq!(o.len() % 4, 0);
            let s = o.summary();
            prop_assert_eq!(s.mss, Some(mss));
            prop_assert_eq!(s.window_scale, ws);
            prop_assert_eq!(s.sack_permitted, sack);
            prop_assert_eq!(s.timestamp, ts);
            prop_assert_eq!(s.mptcp.first(), m.as_ref());
        } else {
            prop_assert!(m.is_some());
        }
    }

    #[test]
    fn checksum_incremental_matches_recompute(
        mut data in proptest::collection::vec(any::<u8>(), 4..200),
        at in any::<proptest::sample::Index>(),
        new16 in any::<u16>(),
        new32 in any::<u32>(),
    ) {
        let same = |a: u16, b: u16| a == b || (a | b == 0xffff && (a == 0 || b == 0));
        let c = checksum::checksum(&data);
        let i = at.index(data.len() / 2 - 1) * 2;
        let old = u16::from_be_bytes([data[i], data[i + 1]]);
        data[i..i + 2].copy_from_slice(&new16.to_be_bytes());
        let inc = checksum::update_u16(c, old, new16);
        prop_assert!(same(inc, checksum::checksum(&data)), "{:#x} vs {:#x}", inc, checksum::checksum(&data));

        let c = checksum::checksum(&data);
        let i = at.index(data.len() / 2 - 1) * 2;
        let i = i.min(data.len() - 4) & !1;
        let old = u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        data[i..i + 4].copy_from_slice(&new32.to_be_bytes());
        let inc = checksum::update_u32(c, old, new32);
        prop_assert!(same(inc, checksum::checksum(&data)));
    }

    #[test]
    fn tcp_checksum_ignores_field_and_verifies(
        (src, dst) in arb_ip_pair(),
        mut seg in proptest::collection::vec(any::<u8>(), 20..300),
    ) {
        let c = checksum::tcp_checksum(src, dst, &seg);
        seg[16..18].copy_from_slice(&c.to_be_bytes());
        prop_assert!(checksum::verify_tcp(src, dst, &seg));
        prop_assert_eq!(checksum::tcp_checksum(src, dst, &seg), c);
        let last = seg.len() - 1;
        seg[last] ^= 0x10;
        prop_assert!(!checksum::verify_tcp(src, dst, &seg));
    }
}
