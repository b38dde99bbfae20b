//! The report `mptun send` would print, made from a simulated transfer's
//! trace: what `mptun demo` shows.

use std::collections::BTreeMap;

use mptun_sim::scenarios::transfer::{SubflowSample, Traced, TransferResult};

use crate::report::{
    http_date, Connected, Cpu, End, EndReceiver, EndSender, EndStream, Interval, IntervalStream, MptcpEnd, Report,
    Start, StartExtra, SubflowEnd, SubflowInterval, Sum, TestStart, Timestamp,
};
use crate::traces::SAMPLE;

/// The report `mptun send` would print for a simulated transfer: 1 s
/// intervals from the sender's subflow trace, the end from the result.
pub(crate) fn sim_report(
    t: &Traced,
    size: u64,
    paths: &[String],
    sum_path_bps: Option<f64>,
    congestion: &str,
    wall_s: f64,
) -> Report {
    let r: &TransferResult = &t.result;
    let mut intervals: Vec<Interval> = Vec::new();
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    let names: BTreeMap<usize, (String, String)> =
        r.client_subflows.iter().map(|s| (s.id, (s.local.to_string(), s.remote.to_string()))).collect();
    let name = |id: usize| names.get(&id).cloned().unwrap_or_else(|| ("?".into(), "?".into()));
    let end_t = r.duration_s.max(SAMPLE.as_secs_f64());
    let mut edge = 1.0f64;
    let mut prev_edge = 0.0f64;
    while prev_edge < end_t - 1e-9 {
        let hi = edge.min(end_t);
        // The last sample of each subflow at or before the edge.
        let mut at: BTreeMap<usize, &SubflowSample> = BTreeMap::new();
        for s in t.subflow_trace.iter().take_while(|s| s.t_s <= hi + 1e-9) {
            at.insert(s.subflow, s);
        }
        let secs = hi - prev_edge;
        let subflows: Vec<SubflowInterval> = at
            .values()
            .map(|s| {
                let d = s.bytes_acked.saturating_sub(last.get(&s.subflow).copied().unwrap_or(0));
                SubflowInterval {
                    id: s.subflow,
                    local: name(s.subflow).0,
                    remote: name(s.subflow).1,
                    bytes: d,
                    bits_per_second: if secs > 0.0 { d as f64 * 8.0 / secs } else { 0.0 },
                    retransmits: 0,
                    snd_cwnd: u64::from(s.cwnd) * 1448,
                    snd_cwnd_packets: u64::from(s.cwnd),
                    rtt: s.srtt_us,
                    rttvar: 0,
                    penalized: s.penalized,
                }
            })
            .collect();
        for s in at.values() {
            last.insert(s.subflow, s.bytes_acked);
        }
        let bytes = subflows.iter().map(|s| s.bytes).sum();
        let sum = Sum::new(prev_edge, hi, bytes, None, true);
        intervals.push(Interval {
            streams: vec![IntervalStream {
                socket: 5,
                sum: sum.clone(),
                snd_cwnd: Some(subflows.iter().map(|s| s.snd_cwnd).sum()),
                snd_wnd: None,
                rtt: subflows.first().map(|s| s.rtt),
                rttvar: None,
                pmtu: None,
                subflows,
            }],
            sum,
        });
        prev_edge = hi;
        edge += 1.0;
    }
    // What was acknowledged after the last sample belongs to the last interval.
    if let Some(iv) = intervals.last_mut() {
        for s in &r.client_subflows {
            let d = s.tcp.bytes_acked.saturating_sub(last.get(&s.id).copied().unwrap_or(0));
            if d == 0 {
                continue;
            }
            let st = &mut iv.streams[0];
            match st.subflows.iter_mut().find(|x| x.id == s.id) {
                Some(x) => x.bytes += d,
                None => st.subflows.push(SubflowInterval {
                    id: s.id,
                    local: s.local.to_string(),
                    remote: s.remote.to_string(),
                    bytes: d,
                    ..Default::default()
                }),
            }
            let secs = st.sum.seconds.max(1e-9);
            for x in &mut st.subflows {
                x.bits_per_second = x.bytes as f64 * 8.0 / secs;
            }
            let bytes = st.subflows.iter().map(|x| x.bytes).sum();
            st.sum = Sum::new(st.sum.start, st.sum.end, bytes, None, true);
            iv.sum = st.sum.clone();
        }
    }
    let total_acked: u64 = r.client_subflows.iter().map(|s| s.tcp.bytes_acked).sum();
    let subflows = r
        .client_subflows
        .iter()
        .map(|s| SubflowEnd {
            id: s.id,
            local: s.local.to_string(),
            remote: s.remote.to_string(),
            bytes: s.tcp.bytes_acked,
            share: if total_acked > 0 { s.tcp.bytes_acked as f64 / total_acked as f64 } else { 0.0 },
            retransmits: s.tcp.bytes_retrans.div_ceil(u64::from(s.tcp.mss.max(1))),
            bytes_retrans: s.tcp.bytes_retrans,
            max_snd_cwnd: t
                .subflow_trace
                .iter()
                .filter(|x| x.subflow == s.id)
                .map(|x| u64::from(x.cwnd) * u64::from(s.tcp.mss))
                .max()
                .unwrap_or(0),
            rtt: s.tcp.srtt.as_micros() as u64,
            sender_figures: true,
            penalized: s.penalized,
            state: "ESTABLISHED".into(),
        })
        .collect();
    let sum_sent = Sum::new(0.0, r.duration_s, size, Some(r.retransmits), true);
    // The report is the client's, which sends: `sender` true throughout, as iperf3.
    let sum_received = Sum::new(0.0, r.duration_s, r.bytes_received, None, true);
    let end_streams = vec![EndStream {
        sender: EndSender::new(sum_sent.clone(), &intervals),
        receiver: EndReceiver { socket: 5, sum: sum_received.clone() },
        subflows,
    }];
    let conv = |m: &BTreeMap<&'static str, u64>| m.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    let first = r.client_subflows.first();
    let sim_cpu = if r.duration_s > 0.0 { wall_s / r.duration_s * 100.0 } else { 0.0 };
    Report {
        start: Start {
            connected: vec![Connected {
                socket: 5,
                local_host: first.map_or("10.0.1.1".into(), |s| s.local.ip().to_string()),
                local_port: first.map_or(0, |s| s.local.port()),
                remote_host: first.map_or("10.0.1.2".into(), |s| s.remote.ip().to_string()),
                remote_port: first.map_or(5201, |s| s.remote.port()),
            }],
            version: format!("mptun {}", env!("CARGO_PKG_VERSION")),
            system_info: "deterministic simulator (virtual time)".into(),
            timestamp: Timestamp { time: http_date(0), timesecs: 0 },
            connecting_to: None,
            accepted_connection: None,
            cookie: String::new(),
            tcp_mss_default: first.map_or(0, |s| u64::from(s.tcp.mss)),
            target_bitrate: 0,
            sock_bufsize: 0,
            sndbuf_actual: first.map_or(0, |s| s.tcp.send_buffer as u64),
            rcvbuf_actual: first.map_or(0, |s| s.tcp.recv_buffer as u64),
            test_start: TestStart {
                protocol: "TCP".into(),
                num_streams: 1,
                blksize: crate::xfer::BLKSIZE as u64,
                omit: 0,
                duration: 0,
                bytes: size,
                blocks: 0,
                reverse: 0,
                tos: 0,
                target_bitrate: 0,
            },
            mptun: StartExtra {
                stack: "sim".into(),
                role: "client".into(),
                sender: true,
                mode: r.client_mode.into(),
                path_manager: None,
                paths: paths.to_vec(),
                congestion: congestion.into(),
                scheduler: "default".into(),
                file: None,
            },
        },
        intervals,
        end: End {
            streams: end_streams,
            sum_sent,
            sum_received: sum_received.clone(),
            // The simulator runs both hosts in one thread: wall time per simulated second.
            cpu_utilization_percent: Cpu { host_total: sim_cpu, host_user: sim_cpu, ..Default::default() },
            sender_tcp_congestion: congestion.into(),
            receiver_tcp_congestion: congestion.into(),
            mptcp: MptcpEnd {
                mode: r.client_mode.into(),
                subflows_max: r.client_subflows.len(),
                hash: "sha256".into(),
                sha256_sent: "checked-in-sim".into(),
                sha256_received: if r.sha256_match { "checked-in-sim".into() } else { "differs".into() },
                sha256_match: r.sha256_match,
                efficiency: sum_path_bps.map(|s| sum_received.bits_per_second / s),
                counters: conv(&r.client_counters),
                peer_counters: conv(&r.server_counters),
                stopped: None,
            },
        },
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_report_adds_up() {
        let (t, paths) = crate::traces::aggregate_traced(2 << 20, 1, false);
        let names: Vec<String> = paths.iter().map(|p| format!("{}", p.rate_bps)).collect();
        let sum: f64 = paths.iter().map(|p| p.rate_bps as f64).sum();
        let r = sim_report(&t, 2 << 20, &names, Some(sum), "cubic", 0.01);
        assert!(r.end.mptcp.sha256_match);
        let total: u64 = r.intervals.iter().map(|i| i.sum.bytes).sum();
        let acked: u64 = r.end.streams[0].subflows.iter().map(|s| s.bytes).sum();
        assert_eq!(total, acked, "intervals add up to the subflows' bytes");
        assert!(r.end.streams[0].subflows.len() == 2 && r.end.streams[0].subflows.iter().all(|s| s.bytes > 0));
        let e = r.end.mptcp.efficiency.unwrap();
        assert!(e > 0.3 && e <= 1.0, "efficiency {e}");
    }
}
