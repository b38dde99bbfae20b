//! Data at the connection level: out-of-order and duplicate data across
//! subflows, a mapping outside the window, and where mappings end.

use super::*;

#[test]
fn duplicate_and_out_of_order_data_is_counted_at_the_connection_level() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let data = vec![3u8; 400_000];
    let mut sent = 0;
    let mut got = 0;
    let mut k = 0u32;
    let mut buf = vec![0u8; 65536];
    for _ in 0..300 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        // Drop every 50th data packet on path 1: the receiver sees holes at
        // the data level while path 2 keeps delivering.
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            if from_a && p.len() > 200 && p[19] == 2 {
                k += 1;
                if k.is_multiple_of(50) {
                    return None;
                }
            }
            Some(p)
        });
        loop {
            let r = n.b.recv(sh, n.now, &mut buf).unwrap_or(0);
            if r == 0 {
                break;
            }
            got += r;
        }
        if got == data.len() {
            break;
        }
    }
    assert_eq!(got, data.len());
    let c = n.b.counters();
    assert!(c.mptcp_ofo_queue > 0, "{c:?}");
}

#[test]
fn a_mapping_outside_the_window_resets_the_subflow_and_the_data_arrives_anyway() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 233) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut forged = 0;
    for _ in 0..300 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            // A hostile (or broken) rewrite moves one mapping on path 2 a gigabyte ahead.
            if from_a && forged == 0 && p.len() > 1000 && p[14] == 2 {
                forged += 1;
                return Some(rewrite(&p, &mut |m| {
                    if let MptcpOption::Dss { mapping: Some(map), .. } = m {
                        map.dsn += 1 << 30;
                    }
                }));
            }
            Some(p)
        });
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(forged, 1);
    // The forged segment's data lies past the window: dropped and counted
    // (Linux MPTcpExtNoDSSInWindow); the true mapping of the same subflow
    // bytes then contradicts the forged one, which resets the subflow.
    let c = n.b.counters();
    assert_eq!(c.mptcp_no_dss_in_window, 1, "{}", c.to_nstat());
    assert!(c.mptcp_dss_not_matching >= 1, "{}", c.to_nstat());
    assert_eq!(got, data, "the reset subflow's data is reinjected on the other path");
}

/// A mapping ends on a wire-segment boundary, as Linux sizes an skb (one
/// mapping) to a multiple of the MSS: a 65,535-byte mapping would end every
/// 64 KiB super-segment in a short segment, so would a mapping cut to the
/// send-buffer room an ACK frees, or one sized for segments without the
/// DATA_ACK that then carries it (8 bytes less payload each).
#[test]
fn mappings_end_on_segment_boundaries() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    // (payload length, with a DATA_ACK) of every data segment A sends, by
    // subflow (source port).
    type Seg = (usize, bool);
    let mut segs: std::collections::HashMap<u16, Vec<Seg>> = Default::default();
    let mut tap = |from_a: bool, p: Vec<u8>| {
        if from_a {
            let pkt = parse_tcp_packet(&p).unwrap();
            if !pkt.payload.is_empty() {
                let dss = pkt.tcp.options.summary().mptcp.into_iter().find_map(|o| match o {
                    MptcpOption::Dss { mapping: Some(_), data_ack, .. } => Some(data_ack.is_some()),
                    _ => None,
                });
                let ack = dss.expect("every data segment carries its mapping");
                segs.entry(pkt.tcp.src_port).or_default().push((pkt.payload.len(), ack));
            }
        }
        Some(p)
    };
    let (mut sent, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65536];
    for _ in 0..2000 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(2), &mut tap);
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    assert_eq!(segs.len(), 2, "both subflows carried data");
    let (mut runts, mut total) = (0, 0);
    for (port, v) in &segs {
        // Full segments with and without the DATA_ACK.
        let full = |ack: bool| v.iter().filter(|s| s.1 == ack).map(|s| s.0).max().unwrap_or(0);
        assert!(full(false) > full(true), "port {port}: the DATA_ACK takes payload: {} {}", full(false), full(true));
        runts += v.iter().filter(|s| s.0 < full(s.1)).count();
        total += v.len();
    }
    // Application writes land at any byte, as the freed room allows: the
    // data waiting when a subflow's last mapping went out may end short, but
    // not one segment in 45 (65,535-byte mappings) nor one per ACK.
    assert!(runts * 100 <= total, "{runts} short segments of {total}");
}
