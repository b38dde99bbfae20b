//! The builders produce Linux's exact option bytes (`tcp_options_write`,
//! `mptcp_write_options`). Expected bytes are copied from the kernel capture
//! where it has the case, and derived from the kernel's word-wise writes
//! otherwise.

use mptun_wire::mptcp::{DataAck, DssMapping, MptcpOption};
use mptun_wire::tcp::{TcpOption, TcpOptions};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn mpc_syn() -> MptcpOption {
    MptcpOption::MpCapable {
        version: 1,
        flags: 0x01,
        sender_key: None,
        receiver_key: None,
        data_len: None,
        checksum: None,
    }
}

#[test]
fn syn_matches_capture_frame_1() {
    let o = TcpOptions::syn(1460, Some(10), true, Some((1678852433, 0)), Some(&mpc_syn())).unwrap();
    assert_eq!(o.as_bytes(), hex("0204 05b4 0402 080a 6411 4151 0000 0000 0103 030a 1e04 0101"));
}

#[test]
fn join_synack_matches_capture_frame_7() {
    let m = MptcpOption::MpJoinSynAck { backup: false, addr_id: 1, hmac: 0xbaa38b996a32f81f, nonce: 0x931b8ce0 };
    let o = TcpOptions::syn(1460, Some(10), true, Some((3395648699, 3944033231)), Some(&m)).unwrap();
    assert_eq!(
        o.as_bytes(),
        hex("0204 05b4 0402 080a ca65 7cbb eb15 2bcf 0103 030a 1e10 1001 baa3 8b99 6a32 f81f 931b 8ce0")
    );
}

#[test]
fn syn_without_timestamps() {
    let o = TcpOptions::syn(1460, Some(7), true, None, None).unwrap();
    assert_eq!(o.as_bytes(), hex("0204 05b4 0101 0402 0103 0307"));
    let o = TcpOptions::syn(536, None, false, Some((1, 2)), None).unwrap();
    assert_eq!(o.as_bytes(), hex("0204 0218 0101 080a 0000 0001 0000 0002"));
}

#[test]
fn dss_with_mapping_matches_capture_frame_14() {
    let m = MptcpOption::Dss {
        data_ack: Some(DataAck { ack: 2207426194, ack64: false }),
        mapping: Some(DssMapping { dsn: 3649431711931973068, dsn64: true, ssn: 1, len: 10000, checksum: None }),
        data_fin: false,
    };
    let o = TcpOptions::established(Some((1678852935, 493960856)), &[], &[m]).unwrap();
    assert_eq!(
        o.as_bytes(),
        hex("0101 080a 6411 4347 1d71 3e98 1e16 200d 8392 a692 32a5 62ce 75c0 3dcc 0000 0001 2710 0101")
    );
}

#[test]
fn data_fin_matches_capture() {
    // The server's DATA_FIN: 64-bit ack and DSN, subflow seq 0, length 1.
    let m = MptcpOption::Dss {
        data_ack: Some(DataAck { ack: 3649431711932273068, ack64: true }),
        mapping: Some(DssMapping { dsn: 223706062469115490, dsn64: true, ssn: 0, len: 1, checksum: None }),
        data_fin: true,
    };
    let o = TcpOptions::established(Some((493961948, 1678853525)), &[], &[m]).unwrap();
    assert_eq!(
        o.as_bytes(),
        hex("0101 080a 1d71 42dc 6411 4595 1e1a 201f 32a5 62ce 75c4 d1ac 031a c37a 8392 ae62 0000 0000 0001 0101")
    );
}

#[test]
fn add_addr_and_echo_match_capture_frames_4_and_5() {
    let addr = "10.0.2.2".parse().unwrap();
    let ann = MptcpOption::AddAddr { echo: false, addr_id: 1, addr, port: None, hmac: Some(0xe6dd93b5f4034b8e) };
    let o = TcpOptions::established(Some((493960856, 1678852433)), &[], &[ann]).unwrap();
    assert_eq!(o.as_bytes(), hex("0101 080a 1d71 3e98 6411 4151 1e10 3001 0a00 0202 e6dd 93b5 f403 4b8e"));
    let echo = MptcpOption::AddAddr { echo: true, addr_id: 1, addr, port: None, hmac: None };
    let o = TcpOptions::established(Some((1678852433, 493960856)), &[], &[echo]).unwrap();
    assert_eq!(o.as_bytes(), hex("0101 080a 6411 4151 1d71 3e98 1e08 3101 0a00 0202"));
}

#[test]
fn odd_length_mptcp_options_are_nop_padded_after() {
    let mut o = TcpOptions::new();
    o.push_aligned(&TcpOption::Mptcp(MptcpOption::MpPrio { backup: true })).unwrap();
    assert_eq!(o.as_bytes(), hex("1e03 5101"));
    let mut o = TcpOptions::new();
    let ids = [1u8, 2].into_iter().collect();
    o.push_aligned(&TcpOption::Mptcp(MptcpOption::RmAddr { ids })).unwrap();
    assert_eq!(o.as_bytes(), hex("1e05 4001 0201 0101"));
    // ADD_ADDR with a port: port after the address, HMAC after the port, two NOPs.
    let mut o = TcpOptions::new();
    let addr = "10.0.0.9".parse().unwrap();
    let m = MptcpOption::AddAddr { echo: false, addr_id: 2, addr, port: Some(5001), hmac: Some(0x1122334455667788) };
    o.push_aligned(&TcpOption::Mptcp(m)).unwrap();
    assert_eq!(o.as_bytes(), hex("1e12 3002 0a00 0009 1389 1122 3344 5566 7788 0101"));
    // MP_CAPABLE with data, no checksum: `data_len 01 01`.
    let m = MptcpOption::MpCapable {
        version: 1,
        flags: 0x01,
        sender_key: Some(1),
        receiver_key: Some(2),
        data_len: Some(100),
        checksum: None,
    };
    let o = TcpOptions::established(None, &[], &[m]).unwrap();
    assert_eq!(o.as_bytes(), hex("1e16 0101 0000 0000 0000 0001 0000 0000 0000 0002 0064 0101"));
}

#[test]
fn sack_before_mptcp_and_trimmed_to_fit() {
    let ack = MptcpOption::Dss { data_ack: Some(DataAck { ack: 5, ack64: false }), mapping: None, data_fin: false };
    let blocks = [(10, 20), (30, 40), (50, 60), (70, 80)];
    let o = TcpOptions::established(Some((1, 2)), &blocks, std::slice::from_ref(&ack)).unwrap();
    // 12 (TS) + 8 (DSS) leave 20: SACK header + 2 blocks.
    assert_eq!(
        o.as_bytes(),
        hex("0101 080a 0000 0001 0000 0002 0101 0512 0000 000a 0000 0014 0000 001e 0000 0028 1e08 2001 0000 0005")
    );
    // Without timestamps, 3 blocks fit beside the DSS ack.
    let o = TcpOptions::established(None, &blocks, &[ack]).unwrap();
    assert_eq!(o.summary().sack.len(), 3);
    // With nothing else, the 4th block fits too (4 + 32 = 36).
    let o = TcpOptions::established(None, &blocks, &[]).unwrap();
    assert_eq!(o.summary().sack.len(), 4);
    assert_eq!(o.len(), 36);
}

#[test]
fn debug_prints_decoded_options() {
    let o = TcpOptions::syn(1460, Some(10), true, Some((5, 0)), Some(&mpc_syn())).unwrap();
    let s = format!("{o:?}");
    assert!(
        s.starts_with(
            "[Mss(1460), SackPermitted, Timestamp { tsval: 5, tsecr: 0 }, Nop, WindowScale(10), Mptcp(MpCapable"
        ),
        "{s}"
    );
    let bad = TcpOptions::from_bytes(&[2, 5, 0, 0, 0]).unwrap();
    assert_eq!(format!("{bad:?}"), "[<bad option length>]");
}
