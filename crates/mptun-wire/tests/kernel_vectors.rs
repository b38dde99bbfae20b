//! The codec against a real Linux 6.18 MPTCP exchange (`tests/data/`, see its README):
//! every TCP option of every frame decodes, re-emits byte-exact and rebuilds
//! byte-exact through the Linux-layout builders; the decoded values match
//! tshark's independent dissection; token, IDSN and every HMAC recomputed
//! from the captured keys equal the captured values; checksums match both
//! the offload convention of the capture and tcpdump's computed values.

use mptun_wire::checksum;
use mptun_wire::crypto;
use mptun_wire::mptcp::MptcpOption;
use mptun_wire::tcp::{TcpHeader, TcpOption, TcpOptions};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");

/// One captured frame: the IP packet (possibly cut by the snap length).
struct Frame {
    number: usize,
    ip: Vec<u8>,
    whole: bool,
}

/// Classic pcap reader (either byte order, µs or ns), for the link types a
/// Linux capture can have: Ethernet, Linux cooked SLL and SLL2, raw IP.
fn read_pcap(path: &str) -> Vec<Frame> {
    let data = std::fs::read(path).unwrap_or_else(|e| {
        panic!("cannot read {path}: {e} (the vectors live in the repository: crates/mptun-wire/tests/data/)")
    });
    assert!(data.len() >= 24, "pcap shorter than its global header");
    let magic = u32::from_le_bytes(data[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => true,
        0xd4c3b2a1 | 0x4d3cb2a1 => false,
        m => panic!("not a classic pcap file (magic {m:#x})"),
    };
    let u32_at = |b: &[u8], at: usize| {
        let a: [u8; 4] = b[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let linktype = u32_at(&data, 20);
    let link_hdr = match linktype {
        1 => 14,   // Ethernet
        101 => 0,  // raw IP
        113 => 16, // Linux cooked SLL
        276 => 20, // Linux cooked SLL2
        t => panic!("unexpected pcap link type {t}"),
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at < data.len() {
        assert!(at + 16 <= data.len(), "truncated pcap record header");
        let incl = u32_at(&data, at + 8) as usize;
        let orig = u32_at(&data, at + 12) as usize;
        let rec = &data[at + 16..at + 16 + incl];
        at += 16 + incl;
        assert!(rec.len() >= link_hdr);
        frames.push(Frame { number: frames.len() + 1, ip: rec[link_hdr..].to_vec(), whole: incl == orig });
    }
    frames
}

/// tshark's dissection, one row per frame, columns by name.
fn read_fields() -> HashMap<usize, HashMap<String, String>> {
    let text = std::fs::read_to_string(format!("{VECTORS}kernel-mptcp-2paths.fields.csv")).expect("fields.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut rows = HashMap::new();
    for l in lines {
        let cols: Vec<&str> = l.split(',').collect();
        assert_eq!(cols.len(), header.len(), "unexpected CSV row (multi-valued field?): {l}");
        let row: HashMap<String, String> =
            header.iter().zip(cols).map(|(h, c)| (h.to_string(), c.to_string())).collect();
        rows.insert(row["frame.number"].parse().unwrap(), row);
    }
    rows
}

/// Decoded view of one frame's IPv4 + TCP headers, from possibly cut bytes.
struct Decoded {
    src: IpAddr,
    dst: IpAddr,
    /// TCP length according to the IP header (the whole segment on the wire).
    tcp_len: usize,
    tcp: TcpHeader,
    tcp_hlen: usize,
    ihl: usize,
}

fn decode(f: &Frame) -> Decoded {
    let ip = &f.ip;
    assert_eq!(ip[0] >> 4, 4, "frame {}: the capture is IPv4 only", f.number);
    let ihl = (ip[0] & 0x0f) as usize * 4;
    assert!(checksum::verify(&ip[..ihl]), "frame {}: IPv4 header checksum", f.number);
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    let (tcp, tcp_hlen) = TcpHeader::parse(&ip[ihl..]).unwrap_or_else(|e| panic!("frame {}: {e}", f.number));
    Decoded { src, dst, tcp_len: total - ihl, tcp, tcp_hlen, ihl }
}

fn mptcp_opts(o: &TcpOptions) -> Vec<MptcpOption> {
    o.iter()
        .filter_map(|o| match o.unwrap() {
            TcpOption::Mptcp(m) => Some(m),
            _ => None,
        })
        .collect()
}

#[test]
fn every_frame_decodes_and_reemits_byte_exact() {
    let frames = read_pcap(&format!("{VECTORS}kernel-mptcp-2paths.pcap"));
    assert_eq!(frames.len(), 330);
    let mut mptcp_seen = HashMap::<usize, usize>::new();
    for f in &frames {
        let d = decode(f);
        let raw_hdr = &f.ip[d.ihl..d.ihl + d.tcp_hlen];
        // Header re-emit.
        let mut out = [0u8; 60];
        let n = d.tcp.emit(&mut out).unwrap();
        assert_eq!(&out[..n], raw_hdr, "frame {} header re-emit", f.number);
        assert_eq!(d.tcp.header_len(), d.tcp_hlen);
        // Option-by-option: decode without error, re-push raw, byte-exact.
        let mut rebuilt = TcpOptions::new();
        for o in d.tcp.options.iter() {
            let o = o.unwrap_or_else(|e| panic!("frame {}: option error {e}", f.number));
            rebuilt.push(&o).unwrap();
            if let TcpOption::Mptcp(m) = &o {
                let mut b = [0u8; 40];
                let l = m.emit(&mut b).unwrap();
                assert_eq!(l, m.len());
                assert_eq!(MptcpOption::parse(&b[..l]).unwrap(), *m);
                *mptcp_seen.entry(l).or_default() += 1;
            }
        }
        assert_eq!(rebuilt.as_bytes(), d.tcp.options.as_bytes(), "frame {} options re-push", f.number);
        // Rebuild through the Linux-layout builders from the decoded values.
        let s = d.tcp.options.summary();
        assert!(!s.malformed, "frame {}", f.number);
        let canonical = if d.tcp.flags.syn() {
            assert_eq!(s.mptcp.len(), 1);
            TcpOptions::syn(s.mss.unwrap(), s.window_scale, s.sack_permitted, s.timestamp, s.mptcp.first()).unwrap()
        } else {
            assert!(s.mss.is_none() && s.window_scale.is_none() && !s.sack_permitted);
            TcpOptions::established(s.timestamp, &s.sack, &s.mptcp).unwrap()
        };
        assert_eq!(canonical.as_bytes(), d.tcp.options.as_bytes(), "frame {} Linux layout", f.number);
    }
    // The README's inventory: every MPTCP length Linux used is exercised.
    let mut lens: Vec<_> = mptcp_seen.keys().copied().collect();
    lens.sort();
    assert_eq!(lens, [4, 8, 12, 16, 20, 22, 24, 26]);
}

fn field<'a>(row: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    let v = row.get(name).unwrap_or_else(|| panic!("no column {name}"));
    (!v.is_empty()).then_some(v.as_str())
}

fn num(row: &HashMap<String, String>, name: &str) -> Option<u64> {
    field(row, name).map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}")))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn decoded_values_match_tshark() {
    let frames = read_pcap(&format!("{VECTORS}kernel-mptcp-2paths.pcap"));
    let rows = read_fields();
    assert_eq!(rows.len(), frames.len());
    for f in &frames {
        let row = &rows[&f.number];
        let d = decode(f);
        let ctx = format!("frame {}", f.number);
        assert_eq!(field(row, "ip.src").unwrap(), d.src.to_string(), "{ctx}");
        assert_eq!(field(row, "ip.dst").unwrap(), d.dst.to_string(), "{ctx}");
        assert_eq!(num(row, "tcp.srcport"), Some(d.tcp.src_port.into()), "{ctx}");
        assert_eq!(num(row, "tcp.dstport"), Some(d.tcp.dst_port.into()), "{ctx}");
        let flags = field(row, "tcp.flags.str").unwrap();
        assert_eq!(flags.contains('S'), d.tcp.flags.syn(), "{ctx}");
        assert_eq!(flags.contains('A'), d.tcp.flags.ack(), "{ctx}");
        assert_eq!(flags.contains('F'), d.tcp.flags.fin(), "{ctx}");
        assert_eq!(flags.contains('P'), d.tcp.flags.psh(), "{ctx}");

        let m = mptcp_opts(&d.tcp.options);
        assert_eq!(m.len(), 1, "{ctx}: one MPTCP option per frame");
        let m = &m[0];
        assert_eq!(num(row, "tcp.options.mptcp.subtype"), Some(m.subtype().into()), "{ctx}");

        // Every column, both ways: a value we decode must be in tshark's row and vice versa.
        let (mut sendkey, mut recvkey, mut recvtok, mut sendrand, mut trunc, mut sendhmac, mut aahmac) =
            (None, None, None, None, None, None, None);
        let (mut ack, mut dsn, mut ssn, mut dlen) = (None, None, None, None);
        match m {
            MptcpOption::MpCapable { version, sender_key, receiver_key, data_len, .. } => {
                assert_eq!(*version, 1, "{ctx}");
                sendkey = *sender_key;
                recvkey = *receiver_key;
                dlen = data_len.map(u64::from);
            }
            MptcpOption::MpJoinSyn { token, nonce, .. } => {
                recvtok = Some(u64::from(*token));
                sendrand = Some(u64::from(*nonce));
            }
            MptcpOption::MpJoinSynAck { hmac, nonce, .. } => {
                trunc = Some(*hmac);
                sendrand = Some(u64::from(*nonce));
            }
            MptcpOption::MpJoinAck { hmac } => sendhmac = Some(hex(hmac)),
            MptcpOption::AddAddr { hmac, .. } => aahmac = *hmac,
            MptcpOption::Dss { data_ack, mapping, .. } => {
                ack = data_ack.map(|a| a.ack);
                if let Some(mp) = mapping {
                    dsn = Some(mp.dsn);
                    ssn = Some(u64::from(mp.ssn));
                    dlen = Some(u64::from(mp.len));
                }
            }
            other => panic!("{ctx}: unexpected {other:?}"),
        }
        assert_eq!(num(row, "tcp.options.mptcp.sendkey"), sendkey, "{ctx} sendkey");
        assert_eq!(num(row, "tcp.options.mptcp.recvkey"), recvkey, "{ctx} recvkey");
        assert_eq!(num(row, "tcp.options.mptcp.recvtok"), recvtok, "{ctx} recvtok");
        assert_eq!(num(row, "tcp.options.mptcp.sendrand"), sendrand, "{ctx} sendrand");
        assert_eq!(num(row, "tcp.options.mptcp.sendtrunchmac"), trunc, "{ctx} trunc hmac");
        assert_eq!(field(row, "tcp.options.mptcp.sendhmac").map(str::to_owned), sendhmac, "{ctx} hmac");
        assert_eq!(num(row, "tcp.options.mptcp.addaddrtrunchmac"), aahmac, "{ctx} add_addr hmac");
        assert_eq!(num(row, "tcp.options.mptcp.rawdataack"), ack, "{ctx} data ack");
        assert_eq!(num(row, "tcp.options.mptcp.rawdataseqno"), dsn, "{ctx} dsn");
        assert_eq!(num(row, "tcp.options.mptcp.subflowseqno"), ssn, "{ctx} ssn");
        assert_eq!(num(row, "tcp.options.mptcp.datalvllen"), dlen, "{ctx} data-level length");
        // tshark's own token/IDSN oracle, where it printed one.
        if let Some(t) = num(row, "mptcp.expected_token") {
            assert_eq!(u64::from(crypto::token(sendkey.unwrap())), t, "{ctx} token");
        }
        if let Some(i) = num(row, "mptcp.expected_idsn") {
            assert_eq!(crypto::idsn(sendkey.unwrap()), i, "{ctx} idsn");
        }
    }
}

#[test]
fn crypto_recomputed_from_captured_keys() {
    let frames = read_pcap(&format!("{VECTORS}kernel-mptcp-2paths.pcap"));
    let decoded: Vec<(usize, Decoded, MptcpOption)> = frames
        .iter()
        .map(|f| {
            let d = decode(f);
            let m = mptcp_opts(&d.tcp.options).remove(0);
            (f.number, d, m)
        })
        .collect();
    // Keys: the SYN-ACK's MP_CAPABLE carries the server's (B), the third ACK the client's (A) first.
    let (mut key_a, mut key_b) = (None, None);
    for (_, d, m) in &decoded {
        if let MptcpOption::MpCapable { sender_key: Some(k), receiver_key, .. } = m {
            if d.tcp.flags.syn() {
                key_b = Some(*k);
            } else {
                key_a = Some(*k);
                assert_eq!(*receiver_key, key_b, "third ACK echoes the server key");
            }
        }
    }
    let (key_a, key_b) = (key_a.expect("client key"), key_b.expect("server key"));
    let server_port = 5000;
    let key_of_sender = |d: &Decoded| if d.tcp.src_port == server_port { key_b } else { key_a };
    let key_of_receiver = |d: &Decoded| if d.tcp.src_port == server_port { key_a } else { key_b };

    // Every MP_JOIN SYN names the server's token.
    let mut joins = 0;
    let mut add_addrs = 0;
    for (n, d, m) in &decoded {
        match m {
            MptcpOption::MpJoinSyn { token, .. } => assert_eq!(*token, crypto::token(key_b), "frame {n}"),
            MptcpOption::MpJoinSynAck { hmac, nonce: nonce_b, .. } => {
                // The SYN of this join: same 4-tuple, reversed.
                let nonce_a = decoded
                    .iter()
                    .find_map(|(_, s, sm)| match sm {
                        MptcpOption::MpJoinSyn { nonce, .. }
                            if s.tcp.src_port == d.tcp.dst_port && s.src == d.dst && s.dst == d.src =>
                        {
                            Some(*nonce)
                        }
                        _ => None,
                    })
                    .expect("join SYN");
                assert_eq!(crypto::join_synack_hmac(key_b, key_a, *nonce_b, nonce_a), *hmac, "frame {n}");
                // And the third ACK of the same subflow.
                let ack = decoded
                    .iter()
                    .find_map(|(_, s, sm)| match sm {
                        MptcpOption::MpJoinAck { hmac } if s.tcp.src_port == d.tcp.dst_port && s.src == d.dst => {
                            Some(*hmac)
                        }
                        _ => None,
                    })
                    .expect("join ACK");
                assert_eq!(crypto::join_ack_hmac(key_a, key_b, nonce_a, *nonce_b), ack, "frame {n}");
                joins += 1;
            }
            MptcpOption::AddAddr { echo: false, addr_id, addr, port, hmac: Some(h) } => {
                let k1 = key_of_sender(d);
                let k2 = key_of_receiver(d);
                assert_eq!(crypto::add_addr_hmac(k1, k2, *addr_id, *addr, *port), *h, "frame {n}");
                add_addrs += 1;
            }
            _ => {}
        }
    }
    assert_eq!((joins, add_addrs), (2, 1));

    // The first mapping each side sends starts at its IDSN + 1 (RFC 8684 3.3.1: the SYN takes one).
    let first_dsn = |from_server: bool| {
        decoded.iter().find_map(|(_, d, m)| match m {
            MptcpOption::Dss { mapping: Some(mp), .. } if (d.tcp.src_port == server_port) == from_server => {
                Some(mp.dsn)
            }
            _ => None,
        })
    };
    assert_eq!(first_dsn(false), Some(crypto::idsn(key_a).wrapping_add(1)));
    assert_eq!(first_dsn(true), Some(crypto::idsn(key_b).wrapping_add(1)));
}

#[test]
fn checksums_match_capture_and_tcpdump() {
    let frames = read_pcap(&format!("{VECTORS}kernel-mptcp-2paths.pcap"));
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kernel-mptcp-2paths.tcpdump-cksum.csv"
    ))
    .unwrap();
    let tcpdump: HashMap<usize, u16> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (n, c) = l.split_once(',').unwrap();
            (n.parse().unwrap(), u16::from_str_radix(c.trim_start_matches("0x"), 16).unwrap())
        })
        .collect();
    let mut whole = 0;
    for f in &frames {
        let d = decode(f);
        // The capture was taken before checksum offload: the field holds the
        // pseudo-header sum, which needs only the lengths, so every frame counts.
        let pseudo = checksum::pseudo_header_sum(d.src, d.dst, checksum::IPPROTO_TCP, d.tcp_len as u32);
        assert_eq!(d.tcp.checksum, pseudo, "frame {} partial checksum", f.number);
        if !f.whole {
            assert!(!tcpdump.contains_key(&f.number));
            continue;
        }
        whole += 1;
        let seg = &f.ip[d.ihl..];
        assert_eq!(seg.len(), d.tcp_len);
        let ours = checksum::tcp_checksum(d.src, d.dst, seg);
        assert_eq!(Some(&ours), tcpdump.get(&f.number), "frame {} full checksum vs tcpdump", f.number);
        // What the NIC would have written: complement of the sum over the
        // segment with the partial value in place.
        assert_eq!(ours, checksum::checksum(seg), "frame {} offload completion", f.number);
        assert!(!checksum::verify_tcp(d.src, d.dst, seg));
        let mut fixed = f.ip.clone();
        fixed[d.ihl + 16..d.ihl + 18].copy_from_slice(&ours.to_be_bytes());
        assert!(checksum::verify_tcp(d.src, d.dst, &fixed[d.ihl..]));
        let p = mptun_wire::parse_tcp_packet(&fixed).unwrap();
        assert_eq!(p.payload.len(), d.tcp_len - d.tcp_hlen);
        assert_eq!(mptun_wire::parse_tcp_packet(&f.ip), Err(mptun_wire::Error::BadChecksum));
        // Re-emit the whole packet through our emitter: TCP part byte-exact.
        let mut out = vec![0u8; f.ip.len()];
        let n = mptun_wire::emit_tcp_packet(p.src, p.dst, p.ttl, &p.tcp, p.payload, &mut out).unwrap();
        assert_eq!(n, f.ip.len());
        assert_eq!(&out[d.ihl..], &fixed[d.ihl..], "frame {} TCP re-emit", f.number);
        assert!(checksum::verify(&out[..20]));
    }
    assert_eq!(whole, tcpdump.len());
    assert!(whole > 100, "most frames are header-only and captured whole");
}
