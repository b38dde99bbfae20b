//! The one report format of `send`, `serve`, `demo` and `lab`: iperf3's JSON
//! (`start`, `intervals[].streams[]`, `end.sum_sent`, `end.sum_received`,
//! `end.streams[]`, `cpu_utilization_percent`) so existing iperf3 tooling
//! reads it, with MPTCP additions: `subflows[]` next to each stream and an
//! `end.mptcp` object (mode, subflows, SHA-256 of both ends, counters).
//! The human rendering follows iperf3's layout, with one line per subflow.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Report {
    pub(crate) start: Start,
    pub(crate) intervals: Vec<Interval>,
    pub(crate) end: End,
    /// iperf3's top-level `error`: why the test ended early (an interrupt:
    /// "interrupt - the client has terminated"); the figures are what was
    /// measured until then.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) error: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Start {
    pub(crate) connected: Vec<Connected>,
    pub(crate) version: String,
    pub(crate) system_info: String,
    pub(crate) timestamp: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) connecting_to: Option<HostPort>,
    /// The server's: the client's address and port (iperf3: of its control
    /// connection; mptun's control is the measured connection itself).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) accepted_connection: Option<HostPort>,
    /// The test's identity, the same string at both ends (the client draws
    /// it, as iperf3: 36 characters of `a-z2-7`, and sends it in its request).
    pub(crate) cookie: String,
    /// MSS of the connection's first subflow when the test began (iperf3:
    /// `TCP_MAXSEG` of its control socket).
    pub(crate) tcp_mss_default: u64,
    /// iperf3's `-b`: mptun's tests are never rate-limited by the
    /// application (0), pacing is `--max-pacing-rate`.
    pub(crate) target_bitrate: u64,
    /// The buffer size asked for (`--rcvbuf`, else `--sndbuf`; 0: autotuned),
    /// iperf3's `-w`.
    pub(crate) sock_bufsize: u64,
    /// `SO_SNDBUF` / `SO_RCVBUF` of the socket when the test began (mptun:
    /// its first subflow's send and receive buffer limits).
    pub(crate) sndbuf_actual: u64,
    pub(crate) rcvbuf_actual: u64,
    pub(crate) test_start: TestStart,
    /// mptun addition: which stack, which side, over what.
    pub(crate) mptun: StartExtra,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Connected {
    pub(crate) socket: u32,
    pub(crate) local_host: String,
    pub(crate) local_port: u16,
    pub(crate) remote_host: String,
    pub(crate) remote_port: u16,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Timestamp {
    pub(crate) time: String,
    pub(crate) timesecs: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct HostPort {
    pub(crate) host: String,
    pub(crate) port: u16,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct TestStart {
    /// Always "TCP", as iperf3 says for an MPTCP socket: whether MPTCP was
    /// negotiated is `start.mptun.mode` and `end.mptcp.mode`.
    pub(crate) protocol: String,
    pub(crate) num_streams: u32,
    pub(crate) blksize: u64,
    pub(crate) omit: u32,
    /// Seconds (0: a byte count or file decides).
    pub(crate) duration: u64,
    pub(crate) bytes: u64,
    pub(crate) blocks: u64,
    pub(crate) reverse: u8,
    /// IP TOS of the test's packets (iperf3's `-S`; mptun sends 0).
    pub(crate) tos: u8,
    /// See [`Start::target_bitrate`].
    pub(crate) target_bitrate: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct StartExtra {
    /// `mptun`, `kernel` or `sim`.
    pub(crate) stack: String,
    /// `client` or `server`.
    pub(crate) role: String,
    /// Whether this side sends the data.
    pub(crate) sender: bool,
    /// `mptcp` or `tcp` once connected (never offered, or fell back).
    #[serde(default)]
    pub(crate) mode: String,
    /// The path manager's settings this side ran with.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) path_manager: Option<PathManagerInfo>,
    pub(crate) paths: Vec<String>,
    pub(crate) congestion: String,
    pub(crate) scheduler: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) file: Option<String>,
}

/// One reporting interval.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Interval {
    pub(crate) streams: Vec<IntervalStream>,
    pub(crate) sum: Sum,
}

/// iperf3's per-interval and end-of-test figures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct Sum {
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) seconds: f64,
    pub(crate) bytes: u64,
    pub(crate) bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) retransmits: Option<u64>,
    pub(crate) omitted: bool,
    pub(crate) sender: bool,
}

impl Sum {
    pub(crate) fn new(start: f64, end: f64, bytes: u64, retransmits: Option<u64>, sender: bool) -> Sum {
        let seconds = (end - start).max(0.0);
        Sum {
            start,
            end,
            seconds,
            bytes,
            bits_per_second: if seconds > 0.0 { bytes as f64 * 8.0 / seconds } else { 0.0 },
            retransmits,
            omitted: false,
            sender,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct IntervalStream {
    pub(crate) socket: u32,
    #[serde(flatten)]
    pub(crate) sum: Sum,
    /// Sum of the subflows' congestion windows, bytes (iperf3: the socket's).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) snd_cwnd: Option<u64>,
    /// The peer's receive window (`tcpi_snd_wnd`) seen by the first
    /// subflow, bytes: under MPTCP it is the connection-level window, the
    /// same on every subflow. Sender only, as iperf3.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) snd_wnd: Option<u64>,
    /// Smoothed RTT of the first subflow, µs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) rttvar: Option<u64>,
    /// Path MTU of the first subflow (`tcpi_pmtu`). Sender only, as iperf3.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) pmtu: Option<u64>,
    /// mptun addition: the stream's subflows over the interval.
    pub(crate) subflows: Vec<SubflowInterval>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct SubflowInterval {
    pub(crate) id: usize,
    pub(crate) local: String,
    pub(crate) remote: String,
    /// Bytes this subflow carried in the interval (acknowledged at the
    /// sender, received at the receiver).
    pub(crate) bytes: u64,
    pub(crate) bits_per_second: f64,
    pub(crate) retransmits: u64,
    /// Congestion window at the end of the interval, bytes and packets.
    pub(crate) snd_cwnd: u64,
    pub(crate) snd_cwnd_packets: u64,
    /// Smoothed RTT, µs.
    pub(crate) rtt: u64,
    pub(crate) rttvar: u64,
    /// Slow-subflow halvings so far.
    pub(crate) penalized: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct End {
    pub(crate) streams: Vec<EndStream>,
    pub(crate) sum_sent: Sum,
    pub(crate) sum_received: Sum,
    pub(crate) cpu_utilization_percent: Cpu,
    pub(crate) sender_tcp_congestion: String,
    pub(crate) receiver_tcp_congestion: String,
    /// mptun addition.
    pub(crate) mptcp: MptcpEnd,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct EndStream {
    pub(crate) sender: EndSender,
    pub(crate) receiver: EndReceiver,
    /// mptun addition: what each subflow carried over the whole test.
    pub(crate) subflows: Vec<SubflowEnd>,
}

/// `end.streams[].sender`: the sender's figures with the extremes iperf3
/// takes from the sender's interval samples (0 at a receiver, which has
/// none, as iperf3 reports them there).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct EndSender {
    pub(crate) socket: u32,
    #[serde(flatten)]
    pub(crate) sum: Sum,
    /// Largest interval `snd_cwnd`, bytes.
    pub(crate) max_snd_cwnd: u64,
    /// Largest interval `snd_wnd`, bytes.
    pub(crate) max_snd_wnd: u64,
    /// Extremes and mean of the interval `rtt` samples, µs.
    pub(crate) max_rtt: u64,
    pub(crate) min_rtt: u64,
    pub(crate) mean_rtt: u64,
}

impl EndSender {
    /// The sender's end figures: `sum` and the extremes of the intervals'
    /// samples (this side's only when it is the sender).
    pub(crate) fn new(sum: Sum, intervals: &[Interval]) -> EndSender {
        let streams = || intervals.iter().filter(|i| i.sum.sender).flat_map(|i| i.streams.first());
        let rtts: Vec<u64> = streams().filter_map(|s| s.rtt).collect();
        EndSender {
            socket: 5,
            sum,
            max_snd_cwnd: streams().filter_map(|s| s.snd_cwnd).max().unwrap_or(0),
            max_snd_wnd: streams().filter_map(|s| s.snd_wnd).max().unwrap_or(0),
            max_rtt: rtts.iter().copied().max().unwrap_or(0),
            min_rtt: rtts.iter().copied().min().unwrap_or(0),
            mean_rtt: if rtts.is_empty() { 0 } else { rtts.iter().sum::<u64>() / rtts.len() as u64 },
        }
    }
}

/// `end.streams[].receiver`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct EndReceiver {
    pub(crate) socket: u32,
    #[serde(flatten)]
    pub(crate) sum: Sum,
}

/// The path manager's settings (`ip mptcp limits` and the endpoints'
/// flags) a side ran with, for the banner and the JSON.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct PathManagerInfo {
    /// ADD_ADDR announcements accepted per connection.
    pub(crate) add_addr_accepted: u32,
    /// Additional subflows per connection.
    pub(crate) subflows: u32,
    /// Each endpoint: address and flags (`signal`, `subflow`, `backup`).
    pub(crate) endpoints: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct SubflowEnd {
    pub(crate) id: usize,
    pub(crate) local: String,
    pub(crate) remote: String,
    pub(crate) bytes: u64,
    /// Share of all subflows' bytes.
    pub(crate) share: f64,
    pub(crate) retransmits: u64,
    pub(crate) bytes_retrans: u64,
    pub(crate) max_snd_cwnd: u64,
    pub(crate) rtt: u64,
    /// Whether `retransmits`, `bytes_retrans`, `max_snd_cwnd` and `rtt` are
    /// the data sender's: this side's when it sent, else the sender's as its
    /// trailer reported them (false: the sender did not report this subflow,
    /// and they are zero).
    #[serde(default)]
    pub(crate) sender_figures: bool,
    pub(crate) penalized: u64,
    /// TCP state at the end (Linux's names); "never established (SYN_SENT)"
    /// for a subflow that never came up, which is not counted in
    /// `mptcp.subflows_max`.
    #[serde(default)]
    pub(crate) state: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct Cpu {
    pub(crate) host_total: f64,
    pub(crate) host_user: f64,
    pub(crate) host_system: f64,
    pub(crate) remote_total: f64,
    pub(crate) remote_user: f64,
    pub(crate) remote_system: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub(crate) struct MptcpEnd {
    /// `mptcp` or `tcp` (never offered, refused, or fell back).
    pub(crate) mode: String,
    /// Most subflows seen at once.
    pub(crate) subflows_max: usize,
    /// The hash of the `sha256_*` digests: `sha256`, what their names say,
    /// unless the client asked for `blake3` or `xxh3` (`send --hash`; an
    /// XXH3-128 digest fills the first 16 of the 32 bytes).
    #[serde(default = "sha256_name")]
    pub(crate) hash: String,
    pub(crate) sha256_sent: String,
    pub(crate) sha256_received: String,
    pub(crate) sha256_match: bool,
    /// Goodput (sum_received) over the sum of the path rates, when known (sim, lab).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) efficiency: Option<f64>,
    /// This side's counters (mptun: the stack's; kernel: the namespace's
    /// increase during the test), nstat names.
    pub(crate) counters: BTreeMap<String, u64>,
    /// The peer's, as it sent them at the end.
    pub(crate) peer_counters: BTreeMap<String, u64>,
    /// Why the data ended early (an interrupt at either end), if it did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) stopped: Option<String>,
}

fn sha256_name() -> String {
    "sha256".into()
}

impl MptcpEnd {
    /// A counter of the data receiver (this side's or the peer's).
    pub(crate) fn receiver_counter(&self, sender: bool, name: &str) -> u64 {
        let m = if sender { &self.peer_counters } else { &self.counters };
        m.get(name).copied().unwrap_or(0)
    }
}

/// Prints a report as `--json` asks (one JSON document) or as text.
pub(crate) fn emit(r: &Report, json: bool) -> serde_json::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        print!("{}", end_lines(r));
    }
    Ok(())
}

/// How a command that prints a report ends once its report is out: the
/// checks of what it reports passed, or failed. A command that fails
/// before its report is out returns `Err` instead, and `main` then prints,
/// under `--json`, the [`error_document`] in the report's place, so that
/// stdout carries one document either way.
#[must_use]
pub(crate) enum Verdict {
    Pass,
    /// The report is out and the run failed (its data arrived damaged, a
    /// signal ended it, ...): the command fails with this error.
    Fail(anyhow::Error),
}

/// The document `--json` prints when a run fails before it has a report,
/// as `iperf3 -J` does: `start` with what is known, empty `intervals` and
/// `end`, and the cause in `error`.
pub(crate) fn error_document(error: &str) -> serde_json::Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    serde_json::json!({
        "start": {
            "connected": [],
            "version": format!("mptun {}", env!("CARGO_PKG_VERSION")),
            "system_info": crate::host::uname(),
            "timestamp": { "time": http_date(now), "timesecs": now },
        },
        "intervals": [],
        "end": {},
        "error": error,
    })
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().fold(String::with_capacity(b.len() * 2), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// `12.3 MBytes` (iperf3 uses powers of 1024 for sizes).
pub(crate) fn bytes_h(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GBytes", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.2} MBytes", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1} KBytes", b / 1024.0)
    } else {
        format!("{b:.0} Bytes")
    }
}

/// `9.41 Mbits/sec` (powers of 1000 for rates, as iperf3).
pub(crate) fn rate_h(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbits/sec", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.2} Mbits/sec", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} Kbits/sec", bps / 1e3)
    } else {
        format!("{bps:.0} bits/sec")
    }
}

/// The header before the interval lines.
pub(crate) fn header_lines(r: &Start) -> String {
    let mut s = String::new();
    let x = &r.mptun;
    if let Some(c) = &r.connecting_to {
        let _ = writeln!(s, "Connecting to host {}, port {} ({})", c.host, c.port, x.stack);
    }
    for c in &r.connected {
        let _ = writeln!(
            s,
            "[{:>3}] local {} port {} connected to {} port {}",
            c.socket, c.local_host, c.local_port, c.remote_host, c.remote_port
        );
    }
    let _ = writeln!(
        s,
        "      {} {} over {} path(s) [{}], congestion {}, scheduler {}",
        x.role,
        if x.sender { "sending" } else { "receiving" },
        x.paths.len(),
        x.paths.join(", "),
        x.congestion,
        x.scheduler
    );
    if let Some(pm) = &x.path_manager {
        let _ = writeln!(s, "      {}", path_manager_text(pm));
    }
    let _ = writeln!(s, "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd");
    s
}

/// `path manager: subflows 2, add_addr_accepted 0; endpoints 10.0.1.2 id 1 subflow, ...`
pub(crate) fn path_manager_text(pm: &PathManagerInfo) -> String {
    format!(
        "path manager: subflows {}, add_addr_accepted {}; endpoints {}",
        pm.subflows,
        pm.add_addr_accepted,
        pm.endpoints.join(", ")
    )
}

/// One interval: the stream line, then one line per subflow.
pub(crate) fn interval_lines(i: &Interval) -> String {
    let mut s = String::new();
    for st in &i.streams {
        let _ = writeln!(
            s,
            "[{:>3}] {:>6.2}-{:<6.2} sec  {:>12}  {:>15}  {:>4}  {}",
            st.socket,
            st.sum.start,
            st.sum.end,
            bytes_h(st.sum.bytes),
            rate_h(st.sum.bits_per_second),
            st.sum.retransmits.map_or(String::new(), |r| r.to_string()),
            st.snd_cwnd.map_or(String::new(), bytes_h),
        );
        for sf in &st.subflows {
            let _ = writeln!(
                s,
                "        sf{} {} -> {}  {:>12}  {:>15}  retr {:<4} cwnd {:>4} pkts  srtt {:.1} ms{}",
                sf.id,
                sf.local,
                sf.remote,
                bytes_h(sf.bytes),
                rate_h(sf.bits_per_second),
                sf.retransmits,
                sf.snd_cwnd_packets,
                sf.rtt as f64 / 1000.0,
                if sf.penalized > 0 { format!("  penalized {}", sf.penalized) } else { String::new() }
            );
        }
    }
    s
}

/// The end-of-test summary.
pub(crate) fn end_lines(r: &Report) -> String {
    let mut s = String::new();
    let e = &r.end;
    let _ = writeln!(s, "- - - - - - - - - - - - - - - - - - - - - - - - -");
    let _ = writeln!(s, "[ ID] Interval           Transfer     Bitrate         Retr");
    let sock = r.start.connected.first().map_or(5, |c| c.socket);
    for (sum, label) in [(&e.sum_sent, "sender"), (&e.sum_received, "receiver")] {
        let _ = writeln!(
            s,
            "[{sock:>3}] {:>6.2}-{:<6.2} sec  {:>12}  {:>15}  {:>4}  {label}",
            sum.start,
            sum.end,
            bytes_h(sum.bytes),
            rate_h(sum.bits_per_second),
            sum.retransmits.map_or(String::new(), |r| r.to_string()),
        );
    }
    for st in &e.streams {
        for sf in &st.subflows {
            if sf.state.starts_with("never") {
                let _ = writeln!(s, "        sf{} {} -> {}  {}", sf.id, sf.local, sf.remote, sf.state);
                continue;
            }
            let sending = if sf.sender_figures {
                format!("retr {}  max cwnd {}", sf.retransmits, bytes_h(sf.max_snd_cwnd))
            } else {
                "retr -  max cwnd - (not reported by the sender)".to_string()
            };
            let _ = writeln!(
                s,
                "        sf{} {} -> {}  {:>12} ({:>5.1}%)  {sending}{}",
                sf.id,
                sf.local,
                sf.remote,
                bytes_h(sf.bytes),
                sf.share * 100.0,
                if sf.penalized > 0 { format!("  penalized {}", sf.penalized) } else { String::new() }
            );
        }
    }
    let m = &e.mptcp;
    let is_digest = |d: &str| !d.is_empty() && d.chars().all(|c| c.is_ascii_hexdigit());
    if is_digest(&m.sha256_sent) {
        let _ = writeln!(
            s,
            "{} with {} subflow(s); {} sent {}… received {}… ({})",
            m.mode.to_uppercase(),
            m.subflows_max,
            match m.hash.as_str() {
                "blake3" => "BLAKE3",
                "xxh3" => "XXH3-128",
                _ => "SHA-256",
            },
            m.sha256_sent.get(..16).unwrap_or(&m.sha256_sent),
            m.sha256_received.get(..16).unwrap_or(&m.sha256_received),
            if m.sha256_match { "match" } else { "MISMATCH" }
        );
    } else {
        // The simulator compares the bytes themselves and keeps no digest.
        let _ = writeln!(
            s,
            "{} with {} subflow(s); received data checked against what was sent ({})",
            m.mode.to_uppercase(),
            m.subflows_max,
            if m.sha256_match { "match" } else { "MISMATCH" }
        );
    }
    let c = &e.cpu_utilization_percent;
    let _ = writeln!(
        s,
        "CPU Utilization: local/{} {:.1}% ({:.1}%u/{:.1}%s), remote/{} {:.1}% ({:.1}%u/{:.1}%s)",
        if r.start.mptun.sender { "sender" } else { "receiver" },
        c.host_total,
        c.host_user,
        c.host_system,
        if r.start.mptun.sender { "receiver" } else { "sender" },
        c.remote_total,
        c.remote_user,
        c.remote_system
    );
    let ofo = m.receiver_counter(r.start.mptun.sender, "MPTcpExtOFOQueue");
    let interesting: Vec<String> = m
        .counters
        .iter()
        .filter(|(k, _)| k.starts_with("MPTcpExt"))
        .map(|(k, v)| format!("{} {v}", k.trim_start_matches("MPTcpExt")))
        .collect();
    let _ = writeln!(s, "receiver MPTcpExtOFOQueue {ofo}; local MPTcpExt: {}", interesting.join(", "));
    s
}

/// The `aggregate` summary shared by `sim aggregate`, `demo` and `lab`, so
/// simulator and real results read the same way.
pub(crate) struct AggregateLine<'a> {
    pub(crate) name: &'a str,
    pub(crate) goodput_bps: f64,
    pub(crate) sum_path_bps: f64,
    pub(crate) duration_s: f64,
    pub(crate) ofo_queue: u64,
    pub(crate) sha256_match: bool,
    /// (local, remote, bytes)
    pub(crate) subflows: Vec<(String, String, u64)>,
}

impl std::fmt::Display for AggregateLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: {:.2} Mbit/s goodput over {:.1} Mbit/s of paths (efficiency {:.3}), {:.2} s, OFOQueue {}, sha256 {}",
            self.name,
            self.goodput_bps / 1e6,
            self.sum_path_bps / 1e6,
            if self.sum_path_bps > 0.0 { self.goodput_bps / self.sum_path_bps } else { 0.0 },
            self.duration_s,
            self.ofo_queue,
            if self.sha256_match { "match" } else { "MISMATCH" }
        )?;
        for (l, r, b) in &self.subflows {
            writeln!(f, "  subflow {l} -> {r}: {b} bytes")?;
        }
        Ok(())
    }
}

impl<'a> AggregateLine<'a> {
    /// The line for a report of `send` (or `demo`) whose paths sum to `sum_path_bps`.
    pub(crate) fn from_report(name: &'a str, r: &Report, sum_path_bps: f64) -> Self {
        AggregateLine {
            name,
            goodput_bps: r.end.sum_received.bits_per_second,
            sum_path_bps,
            duration_s: r.end.sum_received.seconds,
            ofo_queue: r.end.mptcp.receiver_counter(r.start.mptun.sender, "MPTcpExtOFOQueue"),
            sha256_match: r.end.mptcp.sha256_match,
            subflows: r
                .end
                .streams
                .iter()
                .flat_map(|s| s.subflows.iter())
                .map(|s| (s.local.clone(), s.remote.clone(), s.bytes))
                .collect(),
        }
    }
}

/// `Tue, 02 Jan 2024 10:00:00 GMT`, as iperf3 writes it.
pub(crate) fn http_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days.rem_euclid(7)) as usize];
    let mon = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][(m - 1) as usize];
    format!("{wd}, {d:02} {mon} {y} {:02}:{:02}:{:02} GMT", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_like_iperf3() {
        assert_eq!(bytes_h(11_796_480), "11.25 MBytes");
        assert_eq!(bytes_h(512), "512 Bytes");
        assert_eq!(rate_h(9_410_000.0), "9.41 Mbits/sec");
        assert_eq!(rate_h(2.5e9), "2.50 Gbits/sec");
        let s = Sum::new(1.0, 3.0, 250_000, Some(2), true);
        assert_eq!((s.seconds, s.bits_per_second), (2.0, 1_000_000.0));
        assert_eq!(Sum::new(1.0, 1.0, 5, None, false).bits_per_second, 0.0);
        assert_eq!(hex(&[0, 0xab]), "00ab");
    }

    #[test]
    fn dates_like_iperf3() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(1_704_189_600), "Tue, 02 Jan 2024 10:00:00 GMT");
    }
}
