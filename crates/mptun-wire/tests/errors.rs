//! Every refusal path: truncated input, impossible lengths, data offset
//! below 5, options overrunning the header, inconsistent MPTCP flag/length
//! combinations, and emit-side refusals.

use mptun_wire::mptcp::MptcpOption;
use mptun_wire::tcp::{TcpFlags, TcpHeader, TcpOption, TcpOptions};
use mptun_wire::Error;

fn opts(b: &[u8]) -> Vec<Result<TcpOption, Error>> {
    TcpOptions::from_bytes(b).unwrap().iter().collect()
}

#[test]
fn option_framing_errors_stop_iteration() {
    assert_eq!(opts(&[]), []);
    // Kind without a length byte.
    assert_eq!(opts(&[1, 2]), [Ok(TcpOption::Nop), Err(Error::Truncated)]);
    // Length past the end.
    assert_eq!(opts(&[2, 4, 5]), [Err(Error::Truncated)]);
    assert_eq!(opts(&[30, 20, 0, 1, 2, 3]), [Err(Error::Truncated)]);
    // Length below 2 cannot advance: nothing after it is trusted.
    assert_eq!(opts(&[2, 1, 1, 1]), [Err(Error::BadLength)]);
    assert_eq!(opts(&[99, 0, 1, 1]), [Err(Error::BadLength)]);
    assert_eq!(TcpOption::parse(&[]), Err(Error::Truncated));
}

#[test]
fn option_content_errors_skip_one_option() {
    // MSS of length 5, then a NOP and a window scale still decode (as Linux).
    assert_eq!(
        opts(&[2, 5, 0, 0, 0, 1, 3, 3, 7]),
        [Err(Error::BadLength), Ok(TcpOption::Nop), Ok(TcpOption::WindowScale(7))]
    );
    for bad in [
        &[3, 4, 7, 0][..],             // window scale of length 4
        &[4, 3, 0][..],                // SACK_PERM of length 3
        &[8, 8, 0, 0, 0, 0, 0, 0][..], // timestamps of length 8
        &[5, 2][..],                   // SACK without a block
        &[5, 9, 0, 0, 0, 0, 0, 0, 0][..],
        &[30, 5, 0x00, 1, 0][..], // MP_CAPABLE of length 5
    ] {
        assert_eq!(TcpOption::parse(bad), Err(Error::BadLength), "{bad:?}");
        let mut list = bad.to_vec();
        list.push(1);
        assert_eq!(opts(&list), [Err(Error::BadLength), Ok(TcpOption::Nop)], "{bad:?}");
    }
    let s = TcpOptions::from_bytes(&[2, 5, 0, 0, 0, 1, 3, 3, 7]).unwrap().summary();
    assert!(s.malformed);
    assert_eq!(s.window_scale, Some(7));
    assert_eq!(s.mss, None);
}

#[test]
fn eol_ends_the_list() {
    assert_eq!(opts(&[1, 0, 2, 4, 5, 0xb4]), [Ok(TcpOption::Nop), Ok(TcpOption::Eol)]);
    // Garbage after EOL is padding and is not looked at.
    assert_eq!(opts(&[0, 2, 1]), [Ok(TcpOption::Eol)]);
}

#[test]
fn unknown_kinds_are_kept() {
    let o = opts(&[99, 4, 1, 2, 1]);
    let TcpOption::Unknown { kind, data } = o[0].clone().unwrap() else { panic!() };
    assert_eq!((kind, &data[..]), (99, &[1u8, 2][..]));
    assert_eq!(o[1], Ok(TcpOption::Nop));
}

#[test]
fn option_space_limits() {
    assert_eq!(TcpOptions::from_bytes(&[1; 41]), Err(Error::BadLength));
    let mut o = TcpOptions::from_bytes(&[1; 38]).unwrap();
    assert_eq!(o.push(&TcpOption::Mss(1)), Err(Error::NoSpace));
    assert_eq!(o.len(), 38, "a refused push leaves the list unchanged");
    assert_eq!(o.push_aligned(&TcpOption::WindowScale(1)), Err(Error::NoSpace));
    assert_eq!(o.len(), 38, "push_aligned is all or nothing");
    o.push_nop().unwrap();
    o.push(&TcpOption::Eol).unwrap();
    assert_eq!(o.push_nop(), Err(Error::NoSpace));
    assert_eq!(o.remaining(), 0);
}

#[test]
fn option_emit_refusals() {
    let mut b = [0u8; 40];
    assert_eq!(TcpOption::Sack(Default::default()).emit(&mut b), Err(Error::BadLength));
    for k in [0, 1] {
        let u = TcpOption::Unknown { kind: k, data: Default::default() };
        assert_eq!(u.emit(&mut b), Err(Error::BadLength));
    }
    assert_eq!(TcpOption::Timestamp { tsval: 1, tsecr: 2 }.emit(&mut b[..9]), Err(Error::NoSpace));
}

#[test]
fn header_errors() {
    let mut h = [0u8; 60];
    h[12] = 5 << 4;
    assert!(TcpHeader::parse(&h[..20]).is_ok());
    assert_eq!(TcpHeader::parse(&h[..19]), Err(Error::Truncated));
    assert_eq!(TcpHeader::parse(&[]), Err(Error::Truncated));
    for off in 0..5u8 {
        h[12] = off << 4;
        assert_eq!(TcpHeader::parse(&h), Err(Error::BadHeader), "data offset {off}");
    }
    // Options overrunning the buffer.
    h[12] = 15 << 4;
    assert_eq!(TcpHeader::parse(&h[..59]), Err(Error::Truncated));
    assert_eq!(TcpHeader::parse(&h).map(|(_, n)| n), Ok(60));
    h[12] = 6 << 4;
    assert_eq!(TcpHeader::parse(&h[..23]), Err(Error::Truncated));
    // Emit into a short buffer.
    let mut th = TcpHeader::new(1, 2, 3, 4, TcpFlags::SYN, 5);
    th.options.push(&TcpOption::Mss(1460)).unwrap();
    assert_eq!(th.emit(&mut [0u8; 23]), Err(Error::NoSpace));
    assert_eq!(th.emit(&mut [0u8; 24]), Ok(24));
}

fn mp(b: &[u8]) -> Result<MptcpOption, Error> {
    MptcpOption::parse(b)
}

#[test]
fn mptcp_framing_errors() {
    assert_eq!(mp(&[]), Err(Error::Truncated));
    assert_eq!(mp(&[30]), Err(Error::Truncated));
    assert_eq!(mp(&[31, 4, 0x01, 0x01]), Err(Error::BadMptcp), "not kind 30");
    assert_eq!(mp(&[30, 5, 0x01, 0x01]), Err(Error::Truncated), "length past the slice");
    assert_eq!(mp(&[30, 3, 0x01, 0x01]), Err(Error::BadLength), "slice past the length");
    assert_eq!(mp(&[30, 2]), Err(Error::BadLength));
    assert_eq!(mp(&[30, 4, 0x91, 0]), Err(Error::BadMptcp), "subtype 9");
    assert_eq!(mp(&[30, 4, 0xf1, 0]), Err(Error::BadMptcp), "MP_EXPERIMENTAL");
}

fn with_len(subtype_byte: u8, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[0] = 30;
    v[1] = len as u8;
    if len > 2 {
        v[2] = subtype_byte;
    }
    v
}

#[test]
fn mptcp_lengths_each_subtype() {
    let rm_addr: Vec<usize> = (4..=39).collect(); // 1..=36 ids
    let cases: &[(u8, &[usize])] = &[
        (0x01, &[4, 12, 20, 22, 24]), // MP_CAPABLE
        (0x10, &[12, 16, 24]),        // MP_JOIN
        (0x40, &rm_addr),             // RM_ADDR
        (0x50, &[3]),                 // MP_PRIO
        (0x60, &[12]),                // MP_FAIL
        (0x70, &[12]),                // MP_FASTCLOSE
        (0x80, &[4]),                 // MP_TCPRST
    ];
    for (b, good) in cases {
        for l in 3..=40 {
            let r = mp(&with_len(*b, l));
            if good.contains(&l) {
                assert!(r.is_ok(), "subtype byte {b:#x} len {l}: {r:?}");
            } else {
                assert_eq!(r, Err(Error::BadLength), "subtype byte {b:#x} len {l}");
            }
        }
    }
}

#[test]
fn add_addr_length_and_echo_consistency() {
    // Announcements (no echo) carry the HMAC: 16/18 (v4), 28/30 (v6).
    // Echoes do not: 8/10 (v4), 20/22 (v6).
    for l in 3..=40 {
        let ann = mp(&with_len(0x30, l));
        let echo = mp(&with_len(0x31, l));
        match l {
            16 | 18 | 28 | 30 => {
                assert!(ann.is_ok(), "{l}");
                assert_eq!(echo, Err(Error::BadMptcp), "echo with an HMAC, len {l}");
            }
            8 | 10 | 20 | 22 => {
                assert!(echo.is_ok(), "{l}");
                assert_eq!(ann, Err(Error::BadMptcp), "announcement without HMAC, len {l}");
            }
            _ => {
                assert_eq!(ann, Err(Error::BadLength), "{l}");
                assert_eq!(echo, Err(Error::BadLength), "{l}");
            }
        }
    }
}

#[test]
fn dss_length_follows_flags() {
    let dss = |flags: u8, len: usize| {
        let mut v = with_len(0x20, len);
        v[3] = flags;
        mp(&v)
    };
    // (flags, valid lengths): checksum (+2) only with a mapping.
    let cases: &[(u8, &[usize])] = &[
        (0x00, &[4]),
        (0x01, &[8]),
        (0x03, &[12]),
        (0x04, &[14, 16]),
        (0x0c, &[18, 20]),
        (0x05, &[18, 20]),
        (0x0d, &[22, 24]),
        (0x0f, &[26, 28]),
        (0x1f, &[26, 28]),
        (0x10, &[4]), // DATA_FIN alone
        (0x02, &[4]), // `a` without `A`: ignored
        (0x08, &[4]), // `m` without `M`: ignored
        (0xe0, &[4]), // reserved bits ignored
    ];
    for (f, good) in cases {
        for l in 4..=40 {
            let r = dss(*f, l);
            if good.contains(&l) {
                let Ok(MptcpOption::Dss { data_ack, mapping, data_fin }) = r else { panic!("{f:#x} {l}: {r:?}") };
                assert_eq!(data_ack.is_some(), f & 1 != 0);
                assert_eq!(mapping.is_some(), f & 4 != 0);
                assert_eq!(mapping.is_some_and(|m| m.checksum.is_some()), l == good[0] + 2);
                assert_eq!(data_fin, f & 0x10 != 0);
            } else {
                assert_eq!(r, Err(Error::BadLength), "flags {f:#x} len {l}");
            }
        }
    }
}

#[test]
fn mptcp_emit_refusals() {
    let mut b = [0u8; 40];
    let cap = |s: Option<u64>, r: Option<u64>, d: Option<u16>, c: Option<u16>| MptcpOption::MpCapable {
        version: 1,
        flags: 1,
        sender_key: s,
        receiver_key: r,
        data_len: d,
        checksum: c,
    };
    assert_eq!(cap(None, Some(1), None, None).emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(cap(Some(1), None, Some(1), None).emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(cap(Some(1), Some(1), None, Some(1)).emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(cap(Some(1), Some(1), Some(1), Some(1)).emit(&mut b), Ok(24));
    let mut v = cap(None, None, None, None);
    if let MptcpOption::MpCapable { version, .. } = &mut v {
        *version = 16;
    }
    assert_eq!(v.emit(&mut b), Err(Error::BadMptcp));
    let addr = "10.0.0.1".parse().unwrap();
    let aa = |echo, hmac| MptcpOption::AddAddr { echo, addr_id: 1, addr, port: None, hmac };
    assert_eq!(aa(true, Some(1)).emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(aa(false, None).emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(MptcpOption::RmAddr { ids: Default::default() }.emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(MptcpOption::MpTcpRst { flags: 16, reason: 0 }.emit(&mut b), Err(Error::BadMptcp));
    assert_eq!(MptcpOption::MpFail { dsn: 1 }.emit(&mut b[..11]), Err(Error::NoSpace));
}

#[test]
fn packet_errors_are_typed() {
    use mptun_wire::parse_tcp_packet;
    assert_eq!(parse_tcp_packet(&[]), Err(Error::Truncated));
    assert_eq!(parse_tcp_packet(&[0x45; 10]), Err(Error::Truncated));
    assert_eq!(parse_tcp_packet(&[0x60; 39]), Err(Error::Truncated));
    assert_eq!(parse_tcp_packet(&[0x00; 60]), Err(Error::BadHeader));
    let mut v4 = [0u8; 40];
    v4[0] = 0x43; // IHL 3
    assert_eq!(parse_tcp_packet(&v4), Err(Error::BadHeader));
    v4[0] = 0x4f; // IHL 15 > 40 bytes
    assert_eq!(parse_tcp_packet(&v4), Err(Error::Truncated));
}
