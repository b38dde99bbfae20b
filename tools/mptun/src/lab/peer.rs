//! `mptun lab peer` (hidden): one end of a lab transfer, run by the
//! scenarios inside a namespace. Unlike `send`/`serve`, both ends send at
//! the same time (the penalty matrix moves 16 MiB one way while 80 KiB go
//! the other), each a deterministic byte stream hashed with SHA-256 on both
//! sides, and the sender can watch its first subflow leave slow start
//! (`hystart`). Either stack: mptun over the lab's TUN address plan, or the
//! kernel's sockets. One JSON object on stdout.
//!
//! As `mptcp_connect` does, a side that has finished sending waits up to
//! 200 ms (or until the peer's stream ended) before its DATA_FIN: the
//! kernel's path manager creates no subflow once the connection has left
//! ESTABLISHED, so a small side closing at once would keep the big
//! transfer on one path.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::Args;
use mptun::pattern::Pattern;
use mptun::{MptcpListener, MptcpStream, Policy, Stack, StreamOptions};
use mptun_cc::{CaState, HystartRoundStart, PacerKind};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::topo::{LabStack, Topology};
use crate::conn::{Conn, CounterSource};
use crate::kernel::{self, KernelOptions};
use crate::pathspec;
use crate::report::{self, Verdict};
use crate::stack::{build_stack, parse_cc, StreamSettings};
use crate::units::parse_size;

/// The line on stderr a listening peer prints when it accepts connections.
pub(crate) const READY: &str = "peer: listening";
/// The line on stderr a connecting peer prints just before it connects (a scenario's time zero).
pub(crate) const CONNECTING: &str = "peer: connecting";
/// How long a side that finished sending waits for the peer's stream before its DATA_FIN.
const LINGER: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub(crate) struct PeerArgs {
    /// Listen on this address and serve one connection.
    #[arg(long, conflicts_with = "connect", required_unless_present = "connect")]
    listen: Option<SocketAddr>,
    /// Connect to this address.
    #[arg(long)]
    connect: Option<SocketAddr>,
    #[arg(long, value_enum, default_value = "mptun")]
    stack: LabStack,
    /// mptun's address plan (`linkem-client:N`, `linkem-server`).
    #[arg(long, conflicts_with = "paths")]
    topology: Option<String>,
    /// mptun's paths one by one instead (`dev=NAME,addr=A/PREFIX,peer=KERNEL_ADDR`, repeatable).
    #[arg(long = "path", value_name = "SPEC", value_parser = crate::pathspec::parse_path)]
    paths: Vec<mptun::pathspec::PathSpec>,
    /// Bytes to send (none by default).
    #[arg(long, value_parser = parse_size, allow_negative_numbers = true)]
    send: Option<u64>,
    /// Send for this many seconds from the moment the connection is up, instead of --send bytes.
    #[arg(long, value_name = "SECS")]
    send_for: Option<f64>,
    #[arg(long, value_parser = parse_size, allow_negative_numbers = true)]
    sndbuf: Option<u64>,
    #[arg(long, value_parser = parse_size, allow_negative_numbers = true)]
    rcvbuf: Option<u64>,
    #[arg(long)]
    cc: Option<String>,
    #[arg(long)]
    scheduler: Option<Policy>,
    /// HyStart's round start (mptun's CUBIC): legacy or fixed.
    #[arg(long)]
    round_start: Option<HystartRoundStart>,
    /// mptun's pacer: edt, quantum or none.
    #[arg(long)]
    pacer: Option<PacerKind>,
    /// Plain TCP.
    #[arg(long)]
    no_mptcp: bool,
    /// SO_MAX_PACING_RATE of the kernel's socket, bytes per second: any value turns on the kernel
    /// TCP's internal pacing (its rate is then cwnd/srtt as in mptun, capped here), with no fq qdisc.
    #[arg(long, value_name = "BYTES_PER_S")]
    max_pacing_rate: Option<u64>,
    /// Sample every this many ms (subflows; with --trace the first subflow's
    /// slow-start exit and the bytes received).
    #[arg(long, default_value_t = 10)]
    sample_ms: u64,
    /// Record the slow-start exit and the received-bytes series.
    #[arg(long)]
    trace: bool,
    /// Seed of the byte stream this side sends.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Request this many objects one after the other instead of a bulk
    /// transfer (connecting side): a 100-byte request each, the next one
    /// when the whole object has arrived; each completion time is reported.
    #[arg(long, requires = "object_size")]
    objects: Option<u64>,
    /// Size of an object: the listening side answers each 100-byte request with this many bytes.
    #[arg(long, value_parser = parse_size, allow_negative_numbers = true)]
    object_size: Option<u64>,
    /// Keep this side's direction open until the peer's stream has ended,
    /// even with nothing to send (a download client, as a browser: Linux
    /// takes no new subflow of a connection once it has our DATA_FIN).
    #[arg(long)]
    hold_open: bool,
    /// Unresponsive UDP instead of a connection (always the kernel's
    /// sockets): the connecting side sends IP bits at this rate while on
    /// (for --send-for seconds), the listening side counts what arrives.
    #[arg(long, value_name = "RATE", value_parser = crate::units::parse_rate)]
    udp: Option<u64>,
    /// IP packet size of --udp, headers included.
    #[arg(long, default_value_t = 1500, requires = "udp")]
    udp_packet: usize,
    /// --udp is on this long, then off for --udp-off, from its start (on first).
    #[arg(long, value_parser = super::udp::parse_span, default_value = "0", requires = "udp")]
    udp_on: Duration,
    /// Off time of --udp's cycle (0: a constant rate).
    #[arg(long, value_parser = super::udp::parse_span, default_value = "0", requires = "udp")]
    udp_off: Duration,
    #[command(flatten)]
    control: crate::ctl::ControlArgs,
}

/// Bytes of an object request.
const REQUEST: usize = 100;

/// How slow start ended, as the sender saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct SlowStartExit {
    /// `train`/`delay` (HyStart, mptun's own account; for the kernel the
    /// caller reads its counters), `hystart` (the kernel left slow start in
    /// the Open state), `loss`.
    pub(crate) reason: String,
    /// cwnd (packets) at the exit (for `loss`: the last cwnd in slow start).
    pub(crate) cwnd: u32,
    /// Seconds after the connection was up.
    pub(crate) t_s: f64,
}

/// One subflow at one sample: what tells which path limited a transfer.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct SubflowPoint {
    /// The subflow's index in its connection (stable while it lives).
    pub(crate) id: usize,
    /// This side's end of it (a handover tells its paths apart by it).
    #[serde(default)]
    pub(crate) local: Option<std::net::SocketAddr>,
    /// The peer's end (a server tells a client's paths apart by it).
    #[serde(default)]
    pub(crate) remote: Option<std::net::SocketAddr>,
    pub(crate) bytes_acked: u64,
    /// Bytes it delivered to this side (what a receiver's paths carried).
    #[serde(default)]
    pub(crate) bytes_received: u64,
    /// Packets.
    pub(crate) cwnd: u64,
    pub(crate) srtt_us: u64,
    /// Payload bytes per second (`u64::MAX`: unpaced).
    #[serde(default)]
    pub(crate) pacing_rate: u64,
    /// BBR's (bandwidth bytes/s, min RTT µs), when it runs BBR.
    #[serde(default)]
    pub(crate) bbr: Option<(u64, u32)>,
}

/// What a peer prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PeerReport {
    pub(crate) stack: String,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) sent_sha256: String,
    pub(crate) received_sha256: String,
    /// From the start of connect (client) or accept (server) until both
    /// streams ended and the peer acknowledged every byte this side sent.
    pub(crate) runtime_s: f64,
    /// When the connection was up, from the same start.
    pub(crate) established_s: f64,
    pub(crate) subflows_max: usize,
    /// `mptcp`, or `tcp` (never offered, or fell back).
    pub(crate) mode: String,
    /// Every subflow's state at every sample (with --trace).
    pub(crate) subflow_series: Vec<(f64, Vec<SubflowPoint>)>,
    /// This side's counters over the test (mptun: the stack's; kernel: the namespace's).
    pub(crate) counters: BTreeMap<String, u64>,
    pub(crate) slow_start_exit: Option<SlowStartExit>,
    pub(crate) final_cwnd: u64,
    /// (seconds after the connection was up, bytes received so far), with --trace.
    pub(crate) rx_series: Vec<(f64, u64)>,
    /// Completion time of every object, in order, ms (with --objects).
    #[serde(default)]
    pub(crate) object_ms: Vec<f64>,
    /// Time this side's data waited for the peer's receive window, s (mptun's connection).
    #[serde(default)]
    pub(crate) rwnd_limited_s: Option<f64>,
    /// Bytes each subflow of this side had acknowledged at the end, by subflow index.
    #[serde(default)]
    pub(crate) subflow_bytes: Vec<u64>,
}

/// This peer's socket options for mptun's connections.
fn stream_settings(a: &PeerArgs) -> Result<StreamSettings> {
    Ok(StreamSettings {
        no_mptcp: a.no_mptcp,
        cc: a.cc.as_deref().map(parse_cc).transpose()?,
        sndbuf: a.sndbuf.map(|b| b as usize),
        rcvbuf: a.rcvbuf.map(|b| b as usize),
        pacer: a.pacer,
        scheduler: a.scheduler,
        round_start: a.round_start,
        ..StreamSettings::default()
    })
}

/// mptun's stack of this peer and its control socket (held as long as it).
fn stack(a: &PeerArgs) -> Result<(Stack, Option<mptun_io::ctl::ControlServer>)> {
    let paths = match a.topology.as_deref() {
        Some(t) => pathspec::topology(t)?,
        None if !a.paths.is_empty() => a.paths.clone(),
        None => bail!("--topology or --path is required for mptun's stack"),
    };
    let mut defaults = stream_settings(a)?.apply(StreamOptions::default());
    // Each path an endpoint with the flags its spec gives (`backup`,
    // `signal`...), ids from 1 in order, as `send`/`serve` make them.
    defaults.config_mut().mptcp.pm.endpoints = mptun::pathspec::PathSpec::endpoints(&paths);
    // The lab reproduces the simulator's scenarios: its receiver takes and
    // acknowledges wire segments one by one, and so does this one (with
    // GRO whole, one ACK per 64 KiB changes the ACK pattern HyStart's delay
    // test judges, and the legacy exit would no longer match the simulator's).
    let st = build_stack(&paths, &defaults, false, None)?;
    let control = a.control.start(&st)?;
    Ok((st, control))
}

/// Both directions of one connection, driven from one task so the
/// connection stays reachable for sampling.
struct Duplex {
    conn: Conn,
    rbuf: Vec<u8>,
    rx_hash: Sha256,
    received: u64,
    rx_eof: bool,
    pattern: Pattern,
    wbuf: Vec<u8>,
    woff: usize,
    tx_hash: Sha256,
    sent: u64,
    /// Bytes still to send (None: sending by time).
    to_send: Option<u64>,
    send_until: Option<Instant>,
    sent_all_at: Option<Instant>,
    closed: bool,
    /// Shut our direction only after the peer's ended (`--hold-open`).
    hold_open: bool,
}

impl Duplex {
    fn sending(&self, now: Instant) -> bool {
        match (self.to_send, self.send_until) {
            (Some(n), _) => n > 0 || self.woff < self.wbuf.len(),
            (None, Some(t)) => now < t || self.woff < self.wbuf.len(),
            (None, None) => false,
        }
    }

    /// Makes progress on whatever can move; Ready when something did.
    fn poll_step(&mut self, cx: &mut Context<'_>, tick: &mut Pin<Box<tokio::time::Sleep>>) -> Poll<io::Result<bool>> {
        let mut moved = false;
        let mut ticked = false;
        while !self.rx_eof {
            let mut rb = ReadBuf::new(&mut self.rbuf);
            match Pin::new(&mut self.conn).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == 0 {
                        self.rx_eof = true;
                    } else {
                        self.rx_hash.update(rb.filled());
                        self.received += n as u64;
                    }
                    moved = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        let now = Instant::now();
        while self.sending(now) {
            if self.woff == self.wbuf.len() {
                let n = self.to_send.map_or(64 * 1024, |r| r.min(64 * 1024)) as usize;
                self.wbuf.resize(n, 0);
                self.pattern.fill(&mut self.wbuf);
                self.woff = 0;
                if let Some(r) = self.to_send.as_mut() {
                    *r -= n as u64;
                }
            }
            match Pin::new(&mut self.conn).poll_write(cx, &self.wbuf[self.woff..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.tx_hash.update(&self.wbuf[self.woff..self.woff + n]);
                    self.woff += n;
                    self.sent += n as u64;
                    moved = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        if !self.sending(now) && !self.closed {
            let at = *self.sent_all_at.get_or_insert(now);
            if self.rx_eof || (!self.hold_open && now >= at + LINGER) {
                match Pin::new(&mut self.conn).poll_shutdown(cx) {
                    Poll::Ready(Ok(())) => {
                        self.closed = true;
                        moved = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
        }
        if tick.as_mut().poll(cx).is_ready() {
            ticked = true;
        }
        if moved || ticked {
            Poll::Ready(Ok(ticked))
        } else {
            Poll::Pending
        }
    }
}

/// The first subflow's (cwnd, ssthresh, in slow start's Open/Disorder
/// states, HyStart's own account of the exit).
type SlowStartState = (u32, u32, bool, Option<(&'static str, u32)>);

fn first_subflow(conn: &Conn) -> Option<SlowStartState> {
    match conn {
        Conn::Mptun(s) => {
            let i = s.info().ok()?;
            let t = i.conn.subflows.first()?.tcp;
            Some((
                t.cwnd,
                t.ssthresh,
                matches!(t.ca_state, CaState::Open | CaState::Disorder),
                t.slow_start_exit.map(|e| (e.reason.name(), e.cwnd)),
            ))
        }
        Conn::Kernel(s) => {
            let (cwnd, ssthresh, ca_state) = tcp_info_cwnd(s.as_raw_fd())?;
            // Linux's "infinite" ssthresh is TCP_INFINITE_SSTHRESH (0x7fffffff).
            let ssthresh = if ssthresh >= 0x7fff_ffff { u32::MAX } else { ssthresh };
            Some((cwnd, ssthresh, ca_state <= 1, None))
        }
    }
}

/// `TCP_INFO`'s snd_cwnd, snd_ssthresh and ca_state (offsets 80, 76, 1 of
/// `struct tcp_info` in linux/tcp.h) of a plain TCP socket.
fn tcp_info_cwnd(fd: std::os::fd::RawFd) -> Option<(u32, u32, u8)> {
    let mut b = [0u8; 104];
    let mut len = b.len() as libc::socklen_t;
    // SAFETY: valid fd; b and len describe writable memory the kernel fills up to len.
    let rc = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, b.as_mut_ptr().cast(), &mut len) };
    if rc != 0 || (len as usize) < 84 {
        return None;
    }
    let at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    Some((at(80), at(76), b[1]))
}

fn subflow_points(p: &crate::probe::Probe) -> Vec<SubflowPoint> {
    p.subflows
        .iter()
        .map(|s| SubflowPoint {
            id: s.id,
            local: s.local,
            remote: s.remote,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            cwnd: s.cwnd,
            srtt_us: s.srtt_us,
            pacing_rate: s.pacing_rate,
            bbr: s.bbr,
        })
        .collect()
}

/// Until every subflow of mptun's connection has its FIN acknowledged (the
/// peer has our DATA_FIN), at most 35 s after `since`: a process that ends
/// earlier takes the connection with it, and the peer waits for an end of
/// stream that never comes (the kernel finishes a close on its own).
async fn fins_acked(conn: &Conn, since: Instant) {
    // A subflow the path manager closed mid-transfer (its path gone) may
    // never see its FIN acknowledged: the peer does not wait for it.
    let open = |c: &Conn| {
        c.probe()
            .subflows
            .iter()
            .any(|s| s.established && !s.withdrawn && !matches!(s.state, "FIN_WAIT2" | "TIME_WAIT" | "CLOSE"))
    };
    if matches!(conn, Conn::Mptun(_)) {
        while open(conn) && since.elapsed() < Duration::from_secs(35) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The object exchange (`--objects`/`--object-size`): the connecting side
/// requests, the listening side answers; both hash what they send and
/// receive as a bulk transfer does.
async fn run_objects(a: &PeerArgs, mut conn: Conn, counters: CounterSource, t0: Instant) -> Result<PeerReport> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Instant::now();
    let size = a.object_size.unwrap_or(0) as usize;
    let (mut tx_hash, mut rx_hash) = (Sha256::new(), Sha256::new());
    let (mut sent, mut received) = (0u64, 0u64);
    let mut pattern = Pattern::new(a.seed);
    let mut buf = vec![0u8; 64 * 1024];
    let mut object_ms = Vec::new();
    if let Conn::Kernel(s) = &conn {
        // A request must not wait for Nagle behind the previous one's ACK.
        s.set_nodelay(true).ok();
    }
    if let Some(n) = a.objects {
        let request = [b'?'; REQUEST];
        for _ in 0..n {
            let t = Instant::now();
            conn.write_all(&request).await.context("request")?;
            tx_hash.update(request);
            sent += REQUEST as u64;
            let mut got = 0;
            while got < size {
                let read = conn.read(&mut buf[..(size - got).min(64 * 1024)]);
                let k = tokio::time::timeout(Duration::from_secs(30), read)
                    .await
                    .map_err(|_| anyhow!("object {} stalled at {got} of {size} bytes for 30 s", object_ms.len() + 1))?
                    .context("object")?;
                if k == 0 {
                    bail!("the server closed after {got} bytes of an object");
                }
                rx_hash.update(&buf[..k]);
                got += k;
            }
            received += got as u64;
            object_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        conn.shutdown().await.context("close")?;
        loop {
            let k = conn.read(&mut buf).await.context("the end of the stream")?;
            if k == 0 {
                break;
            }
            rx_hash.update(&buf[..k]);
            received += k as u64;
        }
    } else {
        let mut pending = 0;
        loop {
            let k = conn.read(&mut buf).await.context("request")?;
            if k == 0 {
                break;
            }
            rx_hash.update(&buf[..k]);
            received += k as u64;
            pending += k;
            while pending >= REQUEST {
                pending -= REQUEST;
                let mut left = size;
                while left > 0 {
                    let n = left.min(buf.len());
                    pattern.fill(&mut buf[..n]);
                    conn.write_all(&buf[..n]).await.context("object")?;
                    tx_hash.update(&buf[..n]);
                    sent += n as u64;
                    left -= n;
                }
            }
        }
        conn.shutdown().await.context("close")?;
    }
    let linger = Instant::now();
    while conn.acked(sent) < sent && linger.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let runtime_s = t0.elapsed().as_secs_f64();
    let probe = conn.probe();
    fins_acked(&conn, linger).await;
    Ok(PeerReport {
        stack: conn.stack_name().into(),
        sent,
        received,
        sent_sha256: report::hex(&tx_hash.finalize()),
        received_sha256: report::hex(&rx_hash.finalize()),
        runtime_s,
        established_s: (up - t0).as_secs_f64(),
        subflows_max: probe.established(),
        mode: probe.mode.into(),
        subflow_series: Vec::new(),
        counters: counters.read(),
        slow_start_exit: None,
        final_cwnd: probe.subflows.first().map_or(0, |s| s.cwnd),
        rx_series: Vec::new(),
        object_ms,
        rwnd_limited_s: conn.rwnd_limited().map(|d| d.as_secs_f64()),
        subflow_bytes: probe.subflows.iter().map(|s| s.bytes_acked).collect(),
    })
}

async fn run_conn(a: &PeerArgs, conn: Conn, counters: CounterSource, t0: Instant) -> Result<PeerReport> {
    if a.objects.is_some() || a.object_size.is_some() {
        return run_objects(a, conn, counters, t0).await;
    }
    let up = Instant::now();
    let mut d = Duplex {
        conn,
        rbuf: vec![0; 64 * 1024],
        rx_hash: Sha256::new(),
        received: 0,
        rx_eof: false,
        pattern: Pattern::new(a.seed),
        wbuf: Vec::new(),
        woff: 0,
        tx_hash: Sha256::new(),
        sent: 0,
        to_send: if a.send_for.is_some() { None } else { Some(a.send.unwrap_or(0)) },
        send_until: a.send_for.map(|s| up + Duration::from_secs_f64(s)),
        sent_all_at: None,
        closed: false,
        hold_open: a.hold_open,
    };
    let every = Duration::from_millis(a.sample_ms.max(1));
    let mut tick = Box::pin(tokio::time::sleep(every));
    let (mut subflows_max, mut exit, mut last_ss_cwnd, mut series) = (0, None, 0u32, Vec::new());
    let mut sf_series = Vec::new();
    loop {
        let ticked = std::future::poll_fn(|cx| d.poll_step(cx, &mut tick)).await.context("transfer")?;
        if ticked {
            tick.as_mut().reset(tokio::time::Instant::now() + every);
            let probe = d.conn.probe();
            subflows_max = subflows_max.max(probe.established());
            let t = up.elapsed().as_secs_f64();
            if a.trace {
                series.push((t, d.received));
                sf_series.push((t, subflow_points(&probe)));
                if exit.is_none() && d.sent > 0 {
                    if let Some((cwnd, ssthresh, open, hystart)) = first_subflow(&d.conn) {
                        if let Some((reason, c)) = hystart {
                            exit = Some(SlowStartExit { reason: reason.into(), cwnd: c, t_s: t });
                        } else if ssthresh != u32::MAX || !open {
                            let (reason, c) = if open { ("hystart", ssthresh) } else { ("loss", last_ss_cwnd) };
                            exit = Some(SlowStartExit { reason: reason.into(), cwnd: c, t_s: t });
                        } else {
                            last_ss_cwnd = cwnd;
                        }
                    }
                }
            }
        }
        if d.rx_eof && d.closed {
            break;
        }
    }
    // The transfer is over when the peer has everything this side sent (the
    // simulator's end: the receiving application has it), not when the last
    // byte entered the send buffer: an autotuned buffer holds megabytes
    // then. (mptun's connection also lives in this process: it must stay
    // until then anyway; the kernel would finish a close on its own.)
    let linger = Instant::now();
    let mut last_sample = linger;
    while d.conn.acked(d.sent) < d.sent && linger.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if a.trace && last_sample.elapsed() >= every {
            last_sample = Instant::now();
            sf_series.push((up.elapsed().as_secs_f64(), subflow_points(&d.conn.probe())));
        }
    }
    if a.trace {
        sf_series.push((up.elapsed().as_secs_f64(), subflow_points(&d.conn.probe())));
    }
    let runtime_s = t0.elapsed().as_secs_f64();
    let probe = d.conn.probe();
    // ... and until every subflow's FIN is acknowledged (the peer has our
    // DATA_FIN too): leaving earlier resets a peer still waiting for it.
    fins_acked(&d.conn, linger).await;
    Ok(PeerReport {
        stack: d.conn.stack_name().into(),
        sent: d.sent,
        received: d.received,
        sent_sha256: report::hex(&d.tx_hash.finalize()),
        received_sha256: report::hex(&d.rx_hash.finalize()),
        runtime_s,
        established_s: (up - t0).as_secs_f64(),
        subflows_max: subflows_max.max(probe.established()),
        mode: probe.mode.into(),
        subflow_series: sf_series,
        counters: counters.read(),
        slow_start_exit: exit,
        final_cwnd: probe.subflows.first().map_or(0, |s| s.cwnd),
        rx_series: series,
        object_ms: Vec::new(),
        rwnd_limited_s: d.conn.rwnd_limited().map(|d| d.as_secs_f64()),
        subflow_bytes: probe.subflows.iter().map(|s| s.bytes_acked).collect(),
    })
}

async fn serve(a: &PeerArgs, at: SocketAddr) -> Result<PeerReport> {
    let (mut listener_k, mut listener_m) = (None, None);
    let mut control_kept = None;
    let (conn, counters, t0) = match a.stack {
        LabStack::Kernel => {
            let l = kernel::listen(at, &kernel_options(a))?;
            eprintln!("{READY} on {at}");
            let counters = CounterSource::kernel();
            let (s, _) = l.accept().await.context("accept")?;
            s.set_nodelay(true).ok();
            // The listener stays open for the test: the kernel answers
            // MP_JOIN SYNs only on a listening socket of the port.
            listener_k = Some(l);
            (Conn::Kernel(s), counters, Instant::now())
        }
        LabStack::Mptun => {
            let (st, control) = stack(a)?;
            control_kept = control;
            let l = MptcpListener::bind(&st, at).await.map_err(|e| anyhow!("listen on {at}: {e}"))?;
            eprintln!("{READY} on {at}");
            let counters = CounterSource::mptun(st.clone());
            let (s, _) = l.accept().await.context("accept")?;
            listener_m = Some(l);
            (Conn::Mptun(s), counters, Instant::now())
        }
    };
    let r = run_conn(a, conn, counters, t0).await;
    drop((listener_k, listener_m, control_kept));
    r
}

async fn connect(a: &PeerArgs, to: SocketAddr) -> Result<PeerReport> {
    let limit = Duration::from_secs(10);
    let mut control_kept = None;
    let (conn, counters, t0) = match a.stack {
        LabStack::Kernel => {
            let counters = CounterSource::kernel();
            eprintln!("{CONNECTING} to {to}");
            let t0 = Instant::now();
            let s = tokio::time::timeout(limit, kernel::connect(to, &kernel_options(a)))
                .await
                .map_err(|_| anyhow!("connect to {to}: timed out"))??;
            (Conn::Kernel(s), counters, t0)
        }
        LabStack::Mptun => {
            let (st, control) = stack(a)?;
            control_kept = control;
            let counters = CounterSource::mptun(st.clone());
            let o = stream_settings(a)?.apply(st.stream_options());
            eprintln!("{CONNECTING} to {to}");
            let t0 = Instant::now();
            let s = tokio::time::timeout(limit, MptcpStream::connect_with(&st, to, o))
                .await
                .map_err(|_| anyhow!("connect to {to}: timed out"))?
                .map_err(|e| crate::stack::connect_error(to, &e))?;
            (Conn::Mptun(s), counters, t0)
        }
    };
    let r = run_conn(a, conn, counters, t0).await;
    drop(control_kept);
    r
}

fn kernel_options(a: &PeerArgs) -> KernelOptions {
    KernelOptions {
        mptcp: !a.no_mptcp,
        // Named on every socket, never left to the namespace's default (which
        // the host may not let the lab set; see topo.rs).
        cc: Some(a.cc.clone().unwrap_or_else(|| super::topo::LAB_DEFAULT_CC.to_string())),
        sndbuf: a.sndbuf.map(|b| b as usize),
        rcvbuf: a.rcvbuf.map(|b| b as usize),
        max_pacing_rate: a.max_pacing_rate,
    }
}

pub(crate) fn run(a: PeerArgs) -> Result<Verdict> {
    if let Some(rate_bps) = a.udp {
        let f = super::udp::UdpFlow { rate_bps, packet: a.udp_packet, on: a.udp_on, off: a.udp_off };
        let r = match (a.listen, a.connect) {
            (Some(at), _) => super::udp::sink(at, f, Duration::from_millis(a.sample_ms.max(1)))?,
            (None, Some(to)) => {
                let secs = a.send_for.ok_or_else(|| anyhow!("--udp sends for --send-for seconds"))?;
                super::udp::send(to, f, Duration::from_secs_f64(secs.max(0.0)))?
            }
            (None, None) => bail!("--listen or --connect"),
        };
        println!("{}", serde_json::to_string(&r)?);
        return Ok(Verdict::Pass);
    }
    if a.stack == LabStack::Kernel && (a.scheduler.is_some() || a.round_start.is_some() || a.pacer.is_some()) {
        bail!("--scheduler/--round-start/--pacer configure mptun's stack");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let r = rt.block_on(async {
        let work = async {
            match (a.listen, a.connect) {
                (Some(at), _) => serve(&a, at).await,
                (None, Some(to)) => connect(&a, to).await,
                (None, None) => bail!("--listen or --connect"),
            }
        };
        tokio::select! {
            r = work => r,
            _ = crate::signals::wait() => Err(crate::signals::interrupted()),
        }
    })?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(Verdict::Pass)
}

/// A change to a path at a time after the client started connecting.
pub(crate) type Event<'a> = (Duration, Box<dyn FnOnce() -> Result<()> + Send + 'a>);

/// Runs one transfer: the server peer (`srv` arguments) in the server
/// namespace, the client peer in the client's, `events` timed from the
/// client's connect; returns (client, server) reports.
pub(crate) fn run_pair(
    topo: &Topology,
    srv: &[String],
    cli: &[String],
    limit: Duration,
    events: Vec<Event<'_>>,
) -> Result<(PeerReport, PeerReport)> {
    let mut server = topo.spawn(&topo.srv, srv)?;
    server.wait_ready(READY, Duration::from_secs(10)).context("the server peer")?;
    let mut client = topo.spawn(&topo.cli, cli)?;
    client.wait_ready(CONNECTING, Duration::from_secs(10)).context("the client peer")?;
    let t0 = Instant::now();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (cr, ev) = std::thread::scope(|sc| {
        let ev = sc.spawn(|| -> Result<()> {
            for (at, f) in events {
                while t0.elapsed() < at {
                    if done.load(std::sync::atomic::Ordering::Relaxed) || crate::signals::received().is_some() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                f()?;
            }
            Ok(())
        });
        let cr = client.finish(limit);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (cr, ev.join())
    });
    ev.map_err(|_| anyhow!("a path event panicked"))??;
    let cr = match cr.context("the client peer").and_then(|r| parse_report("the client", r)) {
        Ok(r) => r,
        // What the server said is often why the client did not finish.
        Err(e) => match server.finish(Duration::from_secs(5)) {
            Ok((st, _, err)) => {
                let tail: Vec<&str> = err.lines().rev().take(5).collect();
                bail!("{e:#}; the server peer ({st}) said: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
            }
            Err(_) => return Err(e),
        },
    };
    let sr = parse_report("the server", server.finish(Duration::from_secs(30)).context("the server peer")?)?;
    Ok((cr, sr))
}

/// A finished peer's report (`what` names it in errors): its JSON line, or
/// the last line of its stderr when it failed.
pub(crate) fn parse_report(
    what: &str,
    (st, out, err): (std::process::ExitStatus, String, String),
) -> Result<PeerReport> {
    if !st.success() {
        bail!("{what} peer failed: {}", err.lines().last().unwrap_or("no message"));
    }
    serde_json::from_str(out.trim()).with_context(|| format!("{what} peer's report: {out}"))
}

impl PeerReport {
    /// Both byte streams arrived whole: `a` sent what `b` received and back.
    pub(crate) fn intact_with(&self, b: &PeerReport) -> bool {
        self.sent == b.received
            && b.sent == self.received
            && self.sent_sha256 == b.received_sha256
            && b.sent_sha256 == self.received_sha256
    }

    /// A counter of this side, 0 when it did not move.
    pub(crate) fn counter(&self, k: &str) -> u64 {
        self.counters.get(k).copied().unwrap_or(0)
    }
}
