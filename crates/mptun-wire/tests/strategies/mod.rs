//! proptest strategies for arbitrary *valid* wire values, shared by the
//! property tests and the oracle tests.
#![allow(dead_code)]

use arrayvec::ArrayVec;
use mptun_wire::mptcp::{DataAck, DssMapping, MptcpOption};
use mptun_wire::tcp::{kind, SackBlocks, TcpFlags, TcpHeader, TcpOption, TcpOptions};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub fn arb_ip_v4() -> impl Strategy<Value = IpAddr> {
    any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a)))
}

pub fn arb_ip_v6() -> impl Strategy<Value = IpAddr> {
    any::<[u8; 16]>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a)))
}

pub fn arb_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![arb_ip_v4(), arb_ip_v6()]
}

/// An address pair of one family.
pub fn arb_ip_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![(arb_ip_v4(), arb_ip_v4()), (arb_ip_v6(), arb_ip_v6())]
}

fn arb_dss() -> impl Strategy<Value = MptcpOption> {
    let ack = proptest::option::of(
        (any::<u64>(), any::<bool>()).prop_map(|(a, w)| DataAck { ack: if w { a } else { a & 0xffff_ffff }, ack64: w }),
    );
    let map = proptest::option::of(
        (any::<u64>(), any::<bool>(), any::<u32>(), any::<u16>(), proptest::option::of(any::<u16>())).prop_map(
            |(dsn, w, ssn, len, checksum)| DssMapping {
                dsn: if w { dsn } else { dsn & 0xffff_ffff },
                dsn64: w,
                ssn,
                len,
                checksum,
            },
        ),
    );
    (ack, map, any::<bool>()).prop_map(|(data_ack, mapping, data_fin)| MptcpOption::Dss { data_ack, mapping, data_fin })
}

pub fn arb_mptcp() -> impl Strategy<Value = MptcpOption> {
    prop_oneof![
        (0u8..16, any::<u8>(), 0usize..5, any::<[u64; 2]>(), any::<u16>(), any::<u16>()).prop_map(
            |(version, flags, form, k, dl, cs)| MptcpOption::MpCapable {
                version,
                flags,
                sender_key: (form >= 1).then_some(k[0]),
                receiver_key: (form >= 2).then_some(k[1]),
                data_len: (form >= 3).then_some(dl),
                checksum: (form >= 4).then_some(cs),
            }
        ),
        (any::<bool>(), any::<u8>(), any::<u32>(), any::<u32>())
            .prop_map(|(backup, addr_id, token, nonce)| MptcpOption::MpJoinSyn { backup, addr_id, token, nonce }),
        (any::<bool>(), any::<u8>(), any::<u64>(), any::<u32>())
            .prop_map(|(backup, addr_id, hmac, nonce)| MptcpOption::MpJoinSynAck { backup, addr_id, hmac, nonce }),
        any::<[u8; 20]>().prop_map(|hmac| MptcpOption::MpJoinAck { hmac }),
        arb_dss(),
        (any::<bool>(), any::<u8>(), arb_ip(), proptest::option::of(any::<u16>()), any::<u64>()).prop_map(
            |(echo, addr_id, addr, port, h)| MptcpOption::AddAddr {
                echo,
                addr_id,
                addr,
                port,
                hmac: (!echo).then_some(h)
            }
        ),
        proptest::collection::vec(any::<u8>(), 1..=36)
            .prop_map(|ids| MptcpOption::RmAddr { ids: ids.into_iter().collect() }),
        any::<bool>().prop_map(|backup| MptcpOption::MpPrio { backup }),
        any::<u64>().prop_map(|dsn| MptcpOption::MpFail { dsn }),
        any::<u64>().prop_map(|receiver_key| MptcpOption::MpFastclose { receiver_key }),
        (0u8..16, any::<u8>()).prop_map(|(flags, reason)| MptcpOption::MpTcpRst { flags, reason }),
    ]
}

fn known_kind(k: u8) -> bool {
    matches!(
        k,
        kind::EOL
            | kind::NOP
            | kind::MSS
            | kind::WINDOW_SCALE
            | kind::SACK_PERMITTED
            | kind::SACK
            | kind::TIMESTAMP
            | kind::MPTCP
    )
}

/// Any option but EOL (which ends a list).
pub fn arb_tcp_option() -> impl Strategy<Value = TcpOption> {
    prop_oneof![
        Just(TcpOption::Nop),
        any::<u16>().prop_map(TcpOption::Mss),
        any::<u8>().prop_map(TcpOption::WindowScale),
        Just(TcpOption::SackPermitted),
        proptest::collection::vec(any::<(u32, u32)>(), 1..=4)
            .prop_map(|b| TcpOption::Sack(b.into_iter().collect::<SackBlocks>())),
        any::<(u32, u32)>().prop_map(|(tsval, tsecr)| TcpOption::Timestamp { tsval, tsecr }),
        arb_mptcp().prop_map(TcpOption::Mptcp),
        (any::<u8>().prop_filter("unknown kind", |k| !known_kind(*k)), proptest::collection::vec(any::<u8>(), 0..=38))
            .prop_map(|(kind, d)| TcpOption::Unknown { kind, data: d.into_iter().collect::<ArrayVec<u8, 38>>() }),
    ]
}

/// Options pushed raw until the 40 bytes are used; the list actually pushed.
pub fn arb_options() -> impl Strategy<Value = (TcpOptions, Vec<TcpOption>)> {
    proptest::collection::vec(arb_tcp_option(), 0..8).prop_map(|opts| {
        let mut o = TcpOptions::new();
        let mut pushed = Vec::new();
        for x in opts {
            if o.push(&x).is_ok() {
                pushed.push(x);
            }
        }
        (o, pushed)
    })
}

pub fn arb_header() -> impl Strategy<Value = TcpHeader> {
    (any::<(u16, u16, u32, u32, u8, u16, u16, u16)>(), arb_options()).prop_map(
        |((src_port, dst_port, seq, ack, flags, window, checksum, urgent), (mut options, _))| {
            options.pad_to_word();
            TcpHeader { src_port, dst_port, seq, ack, flags: TcpFlags(flags), window, checksum, urgent, options }
        },
    )
}
