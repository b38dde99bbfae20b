//! One bulk-transfer test over one connection, either side, either stack:
//! the request/response exchange, the data phase with per-interval
//! sampling, SHA-256 of the stream on both ends, the trailers, and the
//! assembled [`Report`].

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conn::{Conn, CounterSource, Probe};
use crate::report::{
    self, Connected, Cpu, End, EndStream, HostPort, Interval, IntervalStream, MptcpEnd, Report, Start, StartExtra,
    SubflowEnd, SubflowInterval, Sum, TestStart, Timestamp,
};
use crate::wire::{self, Amount, Holdback, Request, Response, Trailer};

/// Bytes per write/read, iperf3's TCP default.
pub const BLKSIZE: usize = 128 * 1024;
/// How long the first exchange may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a finished receiver waits for its trailer to be acknowledged.
const LINGER: Duration = Duration::from_secs(10);

/// How a side reports and what it tells the report about itself.
#[derive(Clone, Debug)]
pub struct Settings {
    pub client: bool,
    pub interval: Duration,
    pub json: bool,
    pub progress: bool,
    /// No data for this long ends the test with an error.
    pub idle_timeout: Duration,
    pub paths: Vec<String>,
    pub congestion: String,
    pub scheduler: String,
    pub connecting_to: Option<(String, u16)>,
}

/// Deterministic test data (xorshift64*), cheap next to SHA-256.
pub struct Pattern(u64);

impl Pattern {
    pub fn new(seed: u64) -> Self {
        Pattern(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// Where the sender's bytes come from.
pub enum Source {
    Pattern(Pattern),
    File(std::fs::File, PathBuf),
}

/// Where the receiver's bytes go.
pub enum Sink {
    Discard,
    File(std::fs::File, PathBuf),
}

/// What the receiver sends after its trailer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    #[serde(default)]
    pub congestion: String,
    #[serde(default)]
    pub subflows_max: usize,
}

fn cpu_us() -> (u64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0);
    }
    let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// Samples the connection every interval and keeps the intervals.
struct Meter {
    settings: Settings,
    sender: bool,
    start: Instant,
    last_t: f64,
    last_bytes: u64,
    last_retrans: u64,
    base_retrans: u64,
    last_sf: HashMap<usize, u64>,
    last_sf_retrans: HashMap<usize, u64>,
    max_cwnd: HashMap<usize, u64>,
    subflows_max: usize,
    intervals: Vec<Interval>,
    pb: Option<ProgressBar>,
}

impl Meter {
    fn new(settings: Settings, sender: bool, total: Option<u64>, conn: &Conn) -> Meter {
        let pb = match total {
            Some(t) if settings.progress && !settings.json && std::io::stderr().is_terminal() => {
                let pb = ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr());
                if let Ok(style) =
                    ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
                {
                    pb.set_style(style);
                }
                Some(pb)
            }
            _ => None,
        };
        let probe = conn.probe();
        Meter {
            settings,
            sender,
            start: Instant::now(),
            last_t: 0.0,
            last_bytes: 0,
            last_retrans: probe.retrans_segs,
            base_retrans: probe.retrans_segs,
            last_sf: HashMap::new(),
            last_sf_retrans: probe.subflows.iter().map(|s| (s.id, s.retrans_segs)).collect(),
            max_cwnd: HashMap::new(),
            subflows_max: probe.subflows.len(),
            intervals: Vec::new(),
            pb,
        }
    }

    fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn print(&self, text: &str) {
        if self.settings.json || text.is_empty() {
            return;
        }
        match &self.pb {
            Some(pb) => pb.suspend(|| print!("{text}")),
            None => print!("{text}"),
        }
    }

    fn progress(&self, bytes: u64) {
        if let Some(pb) = &self.pb {
            pb.set_position(bytes);
        }
    }

    fn sf_bytes(&self, s: &crate::conn::SubflowProbe) -> u64 {
        if self.sender {
            s.bytes_acked
        } else {
            s.bytes_received
        }
    }

    /// Closes the interval ending now with `bytes` moved in total.
    fn sample(&mut self, conn: &Conn, bytes: u64) {
        let t = self.elapsed();
        if t - self.last_t < 0.005 {
            return;
        }
        let probe = conn.probe();
        self.subflows_max = self.subflows_max.max(probe.subflows.len());
        let secs = t - self.last_t;
        let mut subflows = Vec::new();
        for s in &probe.subflows {
            let b = self.sf_bytes(s);
            let prev = self.last_sf.insert(s.id, b).unwrap_or(0);
            let cwnd = s.cwnd * s.mss;
            let m = self.max_cwnd.entry(s.id).or_insert(0);
            *m = (*m).max(cwnd);
            let d = b.saturating_sub(prev);
            let prev_r = self.last_sf_retrans.insert(s.id, s.retrans_segs).unwrap_or(0);
            subflows.push(SubflowInterval {
                id: s.id,
                local: s.local.map_or("?".into(), |a| a.to_string()),
                remote: s.remote.map_or("?".into(), |a| a.to_string()),
                bytes: d,
                bits_per_second: d as f64 * 8.0 / secs,
                retransmits: s.retrans_segs.saturating_sub(prev_r),
                snd_cwnd: cwnd,
                snd_cwnd_packets: s.cwnd,
                rtt: s.srtt_us,
                rttvar: s.rttvar_us,
                penalized: s.penalized,
            });
        }
        let retr = probe.retrans_segs.saturating_sub(self.last_retrans);
        self.last_retrans = probe.retrans_segs;
        let sum =
            Sum::new(self.last_t, t, bytes.saturating_sub(self.last_bytes), self.sender.then_some(retr), self.sender);
        let stream = IntervalStream {
            socket: 5,
            sum: sum.clone(),
            snd_cwnd: self.sender.then(|| probe.subflows.iter().map(|s| s.cwnd * s.mss).sum()),
            rtt: probe.subflows.first().map(|s| s.srtt_us),
            rttvar: probe.subflows.first().map(|s| s.rttvar_us),
            subflows,
        };
        let iv = Interval { streams: vec![stream], sum };
        self.print(&report::interval_lines(&iv));
        self.intervals.push(iv);
        self.last_t = t;
        self.last_bytes = bytes;
        self.progress(bytes);
    }

    fn finish(&self) {
        if let Some(pb) = &self.pb {
            pb.finish_and_clear();
        }
    }
}

/// Everything a finished test knows, before it becomes a [`Report`].
struct Outcome {
    sender: bool,
    local: Trailer,
    peer: Trailer,
    /// Local end of the data phase (sender: the receiver's trailer arrived).
    local_elapsed: f64,
    cpu: (u64, u64),
    final_probe: Probe,
    counters: BTreeMap<String, u64>,
    peer_summary: Summary,
    congestion: String,
}

fn progress_deadline(last: Instant, idle: Duration) -> Result<()> {
    if last.elapsed() > idle {
        bail!("no progress for {:.0} s: the peer or the paths are gone", idle.as_secs_f64());
    }
    Ok(())
}

/// Writes `data` completely, sampling while blocked.
async fn write_all_metered(
    conn: &mut Conn,
    data: &[u8],
    meter: &mut Meter,
    ticker: &mut tokio::time::Interval,
    bytes: &dyn Fn(&Conn) -> u64,
) -> Result<()> {
    let mut off = 0;
    let mut last = Instant::now();
    while off < data.len() {
        let r = tokio::select! {
            biased;
            _ = ticker.tick() => None,
            r = conn.write(&data[off..]) => Some(r),
        };
        match r {
            None => {
                let b = bytes(conn);
                meter.sample(conn, b);
                progress_deadline(last, meter.settings.idle_timeout)?;
            }
            Some(Ok(0)) => bail!("the connection closed while sending"),
            Some(Ok(n)) => {
                off += n;
                last = Instant::now();
            }
            Some(Err(e)) => return Err(anyhow!("send: {e}")),
        }
    }
    Ok(())
}

/// The sending side: data, trailer, FIN; then the receiver's trailer and summary.
#[allow(clippy::too_many_arguments)]
async fn send_phase(
    conn: &mut Conn,
    mut source: Source,
    amount: Amount,
    settings: Settings,
    counters: &CounterSource,
    pre: u64,
) -> Result<(Outcome, Vec<Interval>, usize, Option<PathBuf>)> {
    let total = match amount {
        Amount::Bytes(n) => Some(n),
        Amount::DurationMs(_) => None,
    };
    let mut meter = Meter::new(settings, true, total, conn);
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + meter.settings.interval, meter.settings.interval);
    let deadline = match amount {
        Amount::DurationMs(ms) => Some(tokio::time::Instant::now() + Duration::from_millis(ms)),
        Amount::Bytes(_) => None,
    };
    let cpu0 = cpu_us();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BLKSIZE];
    let mut sent: u64 = 0;
    let mut file_path = None;
    let data_acked = |c: &Conn, sent: u64| c.acked(pre + sent).saturating_sub(pre);
    'data: loop {
        let want = match total {
            Some(t) if sent >= t => break,
            Some(t) => (t - sent).min(BLKSIZE as u64) as usize,
            None => BLKSIZE,
        };
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
        let n = match &mut source {
            Source::Pattern(p) => {
                p.fill(&mut buf[..want]);
                want
            }
            Source::File(f, path) => {
                file_path = Some(path.clone());
                let n = f.read(&mut buf[..want]).with_context(|| format!("read {}", path.display()))?;
                if n == 0 {
                    bail!("{} ended after {sent} bytes (it shrank while being sent)", path.display());
                }
                n
            }
        };
        let mut off = 0;
        let mut last = Instant::now();
        while off < n {
            let r = tokio::select! {
                biased;
                _ = ticker.tick() => None,
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() && off == 0 => {
                    // Time is up before this block went out: it is not part of the stream.
                    break 'data;
                }
                r = conn.write(&buf[off..n]) => Some(r),
            };
            match r {
                None => {
                    let b = data_acked(conn, sent + off as u64);
                    meter.sample(conn, b);
                    progress_deadline(last, meter.settings.idle_timeout)?;
                }
                Some(Ok(0)) => bail!("the connection closed while sending"),
                Some(Ok(k)) => {
                    off += k;
                    last = Instant::now();
                }
                Some(Err(e)) => return Err(anyhow!("send: {e}")),
            }
        }
        hasher.update(&buf[..n]);
        sent += n as u64;
        meter.progress(data_acked(conn, sent));
    }
    let digest: [u8; 32] = hasher.finalize().into();
    let probe = conn.probe();
    let cpu1 = cpu_us();
    let trailer = Trailer {
        bytes: sent,
        retransmits: probe.retrans_segs.saturating_sub(meter.base_retrans).min(u64::from(u32::MAX)) as u32,
        elapsed_us: meter.start.elapsed().as_micros() as u64,
        cpu_user_us: cpu1.0 - cpu0.0,
        cpu_sys_us: cpu1.1 - cpu0.1,
        sha256: digest,
    };
    let sent_total = sent;
    write_all_metered(conn, &trailer.encode(), &mut meter, &mut ticker, &|c| data_acked(c, sent_total)).await?;
    conn.shutdown().await.ok();
    // The receiver answers once it has everything: until then, keep sampling.
    let mut back = Vec::new();
    let mut rbuf = vec![0u8; 16 * 1024];
    let mut last = Instant::now();
    let mut acked_seen = 0;
    loop {
        let r = tokio::select! {
            biased;
            _ = ticker.tick() => None,
            r = conn.read(&mut rbuf) => Some(r),
        };
        match r {
            None => {
                let b = data_acked(conn, sent_total);
                if b > acked_seen {
                    acked_seen = b;
                    last = Instant::now();
                }
                meter.sample(conn, b);
                progress_deadline(last, meter.settings.idle_timeout)?;
            }
            Some(Ok(0)) => break,
            Some(Ok(n)) => {
                back.extend_from_slice(&rbuf[..n]);
                last = Instant::now();
                if back.len() > wire::TRAILER_LEN + 4 + wire::MAX_COUNTERS {
                    bail!("the receiver sent more than a trailer and its summary");
                }
                // Complete once the length-prefixed summary is in: no need to
                // wait for the FIN, which a receiver exiting may never retransmit.
                if let Some(len) = back.get(wire::TRAILER_LEN..wire::TRAILER_LEN + 4) {
                    let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
                    if back.len() >= wire::TRAILER_LEN + 4 + len {
                        break;
                    }
                }
            }
            Some(Err(e)) => return Err(anyhow!("waiting for the receiver's trailer: {e}")),
        }
    }
    meter.sample(conn, sent_total);
    meter.finish();
    let local_elapsed = meter.elapsed();
    let peer = Trailer::decode(&back[..back.len().min(wire::TRAILER_LEN)]).context("the receiver's trailer")?;
    let peer_summary = parse_summary(back.get(wire::TRAILER_LEN + 4..).unwrap_or(&[]));
    let cpu2 = cpu_us();
    let local = Trailer {
        retransmits: conn.probe().retrans_segs.saturating_sub(meter.base_retrans).min(u64::from(u32::MAX)) as u32,
        ..trailer
    };
    let outcome = Outcome {
        sender: true,
        local,
        peer,
        local_elapsed,
        cpu: (cpu2.0 - cpu0.0, cpu2.1 - cpu0.1),
        final_probe: conn.probe(),
        counters: counters.read(),
        peer_summary,
        congestion: conn.congestion(),
    };
    Ok((outcome, meter.intervals, meter.subflows_max, file_path))
}

fn parse_summary(b: &[u8]) -> Summary {
    if b.is_empty() {
        return Summary::default();
    }
    match serde_json::from_slice(b) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mptun: warning: the peer's summary is malformed ({e}); ignoring it");
            Summary::default()
        }
    }
}

/// The receiving side: data to EOF (the sender's trailer held back), then
/// our trailer and summary, FIN, and a linger until they are acknowledged.
async fn recv_phase(
    conn: &mut Conn,
    mut sink: Sink,
    total: Option<u64>,
    settings: Settings,
    counters: &CounterSource,
    pre_written: u64,
) -> Result<(Outcome, Vec<Interval>, usize, Option<PathBuf>)> {
    let mut meter = Meter::new(settings, false, total, conn);
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + meter.settings.interval, meter.settings.interval);
    let cpu0 = cpu_us();
    let mut hasher = Sha256::new();
    let mut hold = Holdback::default();
    let mut buf = vec![0u8; BLKSIZE];
    let mut received: u64 = 0;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut write_err: Option<std::io::Error> = None;
    loop {
        let r = tokio::select! {
            biased;
            _ = ticker.tick() => None,
            r = conn.read(&mut buf) => Some(r),
        };
        match r {
            None => {
                meter.sample(conn, received);
                progress_deadline(last, meter.settings.idle_timeout)?;
            }
            Some(Ok(0)) => break,
            Some(Ok(n)) => {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
                hold.push(&buf[..n], |d| {
                    hasher.update(d);
                    received += d.len() as u64;
                    if let Sink::File(f, _) = &mut sink {
                        if write_err.is_none() {
                            if let Err(e) = f.write_all(d) {
                                write_err = Some(e);
                            }
                        }
                    }
                });
                if let Some(t) = total {
                    if received > t {
                        bail!("the sender sent more than the {t} bytes agreed");
                    }
                }
                meter.progress(received);
            }
            Some(Err(e)) => return Err(anyhow!("receive: {e}")),
        }
    }
    meter.sample(conn, received);
    meter.finish();
    let elapsed = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    let peer = Trailer::decode(hold.tail()).context("the sender's trailer")?;
    let digest: [u8; 32] = hasher.finalize().into();
    let file_path = match sink {
        Sink::File(mut f, path) => {
            if let Some(e) = write_err {
                bail!("write {}: {e}", path.display());
            }
            f.flush().with_context(|| format!("write {}", path.display()))?;
            f.sync_all().ok();
            Some(path)
        }
        Sink::Discard => None,
    };
    let cpu1 = cpu_us();
    let probe = conn.probe();
    let local = Trailer {
        bytes: received,
        retransmits: probe.retrans_segs.saturating_sub(meter.base_retrans).min(u64::from(u32::MAX)) as u32,
        elapsed_us: (elapsed * 1e6) as u64,
        cpu_user_us: cpu1.0 - cpu0.0,
        cpu_sys_us: cpu1.1 - cpu0.1,
        sha256: digest,
    };
    let counters_now = counters.read();
    let summary =
        Summary { counters: counters_now.clone(), congestion: conn.congestion(), subflows_max: meter.subflows_max };
    let mut out = local.encode().to_vec();
    let mut js = serde_json::to_vec(&summary)?;
    if js.len() > wire::MAX_COUNTERS {
        js = b"{}".to_vec();
    }
    out.extend_from_slice(&(js.len() as u32).to_be_bytes());
    out.extend_from_slice(&js);
    conn.write_all(&out).await.context("sending the trailer")?;
    conn.shutdown().await.ok();
    let written = pre_written + out.len() as u64;
    // mptun's streams live in this process: give the peer time to get the
    // trailer before the stack goes away (a kernel socket lingers by itself).
    if let Conn::Mptun(_) = conn {
        let t0 = Instant::now();
        while conn.acked(written) < written && t0.elapsed() < LINGER {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let outcome = Outcome {
        sender: false,
        local,
        peer,
        local_elapsed: elapsed,
        cpu: (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
        final_probe: probe,
        counters: counters_now,
        peer_summary: Summary::default(),
        congestion: conn.congestion(),
    };
    Ok((outcome, meter.intervals, meter.subflows_max, file_path))
}

async fn read_exact_timeout(conn: &mut Conn, buf: &mut [u8], what: &str) -> Result<()> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.read_exact(buf)).await {
        Err(_) => bail!("no {what} within {} s", HANDSHAKE_TIMEOUT.as_secs()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => bail!("the peer closed before its {what}"),
        Ok(Err(e)) => bail!("reading the {what}: {e}"),
        Ok(Ok(_)) => Ok(()),
    }
}

/// What the client wants to move.
pub struct ClientTest {
    pub request: Request,
    /// Forward: what to send. Reverse: ignored.
    pub source: Option<Source>,
    /// Reverse: where to put what arrives.
    pub sink: Sink,
}

/// Runs a test as the client: request, response, then the data phase.
pub async fn run_client(
    mut conn: Conn,
    test: ClientTest,
    settings: Settings,
    counters: CounterSource,
) -> Result<Report> {
    let req = test.request.encode();
    conn.write_all(&req).await.context("sending the request")?;
    let mut fixed = [0u8; wire::RESPONSE_LEN];
    read_exact_timeout(&mut conn, &mut fixed, "response from the server").await?;
    let (resp, mlen) = Response::decode_fixed(&fixed)?;
    let mut msg = vec![0u8; mlen];
    read_exact_timeout(&mut conn, &mut msg, "response message").await?;
    if resp.refused.is_some() {
        bail!("the server refused the test: {}", String::from_utf8_lossy(&msg));
    }
    let start = start_section(&conn, &settings, &test.request, !test.request.reverse);
    if !settings.json {
        print!("{}", report::header_lines(&start));
    }
    let (outcome, intervals, sfmax, file) = if test.request.reverse {
        let total = match test.request.amount {
            Amount::Bytes(_) if resp.amount > 0 => Some(resp.amount),
            Amount::Bytes(n) => Some(n),
            Amount::DurationMs(_) => None,
        };
        recv_phase(&mut conn, test.sink, total, settings, &counters, req.len() as u64).await?
    } else {
        let source = test.source.unwrap_or(Source::Pattern(Pattern::new(1)));
        send_phase(&mut conn, source, test.request.amount, settings, &counters, req.len() as u64).await?
    };
    Ok(assemble(start, intervals, outcome, sfmax, file))
}

/// What a server offers.
pub struct ServerConfig {
    pub output_dir: Option<PathBuf>,
    pub file: Option<PathBuf>,
}

/// Runs one test as the server.
pub async fn run_server(
    mut conn: Conn,
    cfg: &ServerConfig,
    settings: Settings,
    counters: CounterSource,
) -> Result<Report> {
    let mut fixed = [0u8; wire::REQUEST_LEN];
    read_exact_timeout(&mut conn, &mut fixed, "request from the client").await?;
    let parsed: Result<Request> = async {
        let (mut req, nlen) = Request::decode_fixed(&fixed)?;
        let mut name = vec![0u8; nlen];
        read_exact_timeout(&mut conn, &mut name, "file name").await?;
        req.set_name(&name)?;
        Ok(req)
    }
    .await;
    let mut req = match parsed {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("bad request: {e:#}");
            conn.write_all(&Response { refused: Some(msg.clone()), amount: 0 }.encode()).await.ok();
            conn.shutdown().await.ok();
            bail!("{msg}");
        }
    };
    // Decide, and tell the client either way.
    let plan: Result<(Option<Source>, Sink, u64)> = (|| match (&req.file, req.reverse) {
        (Some(name), false) => {
            let dir = cfg
                .output_dir
                .as_ref()
                .ok_or_else(|| anyhow!("this server stores no files (start it with --output-dir DIR)"))?;
            let path = dir.join(name);
            let f = std::fs::File::create(&path).map_err(|e| anyhow!("cannot create {}: {e}", path.display()))?;
            Ok((None, Sink::File(f, path), 0))
        }
        (Some(_), true) => {
            let path = cfg
                .file
                .as_ref()
                .ok_or_else(|| anyhow!("this server has no file to send (start it with --file PATH)"))?;
            let f = std::fs::File::open(path).map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
            let len = f.metadata()?.len();
            if len == 0 {
                bail!("{} is empty", path.display());
            }
            Ok((Some(Source::File(f, path.clone())), Sink::Discard, len))
        }
        (None, true) => {
            let n = match req.amount {
                Amount::Bytes(n) => n,
                Amount::DurationMs(_) => 0,
            };
            Ok((Some(Source::Pattern(Pattern::new(2))), Sink::Discard, n))
        }
        (None, false) => Ok((None, Sink::Discard, 0)),
    })();
    let (source, sink, amount) = match plan {
        Ok(p) => p,
        Err(e) => {
            let msg = format!("{e:#}");
            conn.write_all(&Response { refused: Some(msg.clone()), amount: 0 }.encode()).await.ok();
            conn.shutdown().await.ok();
            bail!("refused the test: {msg}");
        }
    };
    let resp = Response { refused: None, amount }.encode();
    conn.write_all(&resp).await.context("sending the response")?;
    if let (Some(Source::File(..)), true) = (&source, req.reverse) {
        req.amount = Amount::Bytes(amount);
    }
    let start = start_section(&conn, &settings, &req, req.reverse);
    if !settings.json {
        print!("{}", report::header_lines(&start));
    }
    let (outcome, intervals, sfmax, file) = if req.reverse {
        send_phase(
            &mut conn,
            source.unwrap_or(Source::Pattern(Pattern::new(2))),
            req.amount,
            settings,
            &counters,
            resp.len() as u64,
        )
        .await?
    } else {
        let total = match req.amount {
            Amount::Bytes(n) => Some(n),
            Amount::DurationMs(_) => None,
        };
        recv_phase(&mut conn, sink, total, settings, &counters, resp.len() as u64).await?
    };
    Ok(assemble(start, intervals, outcome, sfmax, file))
}

fn uname() -> String {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let f = |a: &[libc::c_char]| {
        let b: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    format!("{} {} {} {}", f(&u.sysname), f(&u.nodename), f(&u.release), f(&u.machine))
}

/// `Tue, 02 Jan 2024 10:00:00 GMT`, as iperf3 writes it.
pub fn http_date(secs: u64) -> String {
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

fn start_section(conn: &Conn, s: &Settings, req: &Request, sender: bool) -> Start {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (l, r) = (conn.local_addr(), conn.peer_addr());
    let (duration, bytes) = match req.amount {
        Amount::DurationMs(ms) => (ms.div_ceil(1000), 0),
        Amount::Bytes(n) => (0, n),
    };
    Start {
        connected: vec![Connected {
            socket: 5,
            local_host: l.map_or("?".into(), |a| a.ip().to_string()),
            local_port: l.map_or(0, |a| a.port()),
            remote_host: r.map_or("?".into(), |a| a.ip().to_string()),
            remote_port: r.map_or(0, |a| a.port()),
        }],
        version: format!("mptun {}", env!("CARGO_PKG_VERSION")),
        system_info: uname(),
        timestamp: Timestamp { time: http_date(now), timesecs: now },
        connecting_to: s.connecting_to.as_ref().map(|(h, p)| HostPort { host: h.clone(), port: *p }),
        test_start: TestStart {
            protocol: if conn.probe().mode == "mptcp" { "MPTCP".into() } else { "TCP".into() },
            num_streams: 1,
            blksize: BLKSIZE as u64,
            omit: 0,
            duration,
            bytes,
            blocks: 0,
            reverse: u8::from(req.reverse),
        },
        mptun: StartExtra {
            stack: conn.stack_name().into(),
            role: if s.client { "client" } else { "server" }.into(),
            sender,
            paths: s.paths.clone(),
            congestion: s.congestion.clone(),
            scheduler: s.scheduler.clone(),
            file: req.file.clone().filter(|f| !f.is_empty()),
        },
    }
}

fn pct(us: u64, elapsed_s: f64) -> f64 {
    if elapsed_s <= 0.0 {
        0.0
    } else {
        us as f64 / 1e6 / elapsed_s * 100.0
    }
}

fn assemble(mut start: Start, intervals: Vec<Interval>, o: Outcome, sfmax: usize, file: Option<PathBuf>) -> Report {
    if let Some(f) = file {
        start.mptun.file = Some(f.display().to_string());
    }
    let (snd, rcv) = if o.sender { (&o.local, &o.peer) } else { (&o.peer, &o.local) };
    let snd_secs = if o.sender { o.local_elapsed } else { snd.elapsed_us as f64 / 1e6 };
    let rcv_secs = rcv.elapsed_us as f64 / 1e6;
    let sum_sent = Sum::new(0.0, snd_secs, snd.bytes, Some(u64::from(snd.retransmits)), true);
    let sum_received = Sum::new(0.0, rcv_secs, rcv.bytes, None, false);
    let sf_total: u64 =
        o.final_probe.subflows.iter().map(|s| if o.sender { s.bytes_acked } else { s.bytes_received }).sum();
    let max_cwnd: HashMap<usize, u64> = intervals
        .iter()
        .flat_map(|i| i.streams.iter().flat_map(|s| s.subflows.iter()))
        .fold(HashMap::new(), |mut m, s| {
            let e = m.entry(s.id).or_insert(0);
            *e = (*e).max(s.snd_cwnd);
            m
        });
    let subflows = o
        .final_probe
        .subflows
        .iter()
        .map(|s| {
            let b = if o.sender { s.bytes_acked } else { s.bytes_received };
            SubflowEnd {
                id: s.id,
                local: s.local.map_or("?".into(), |a| a.to_string()),
                remote: s.remote.map_or("?".into(), |a| a.to_string()),
                bytes: b,
                share: if sf_total > 0 { b as f64 / sf_total as f64 } else { 0.0 },
                retransmits: s.retrans_segs,
                bytes_retrans: s.bytes_retrans,
                max_snd_cwnd: max_cwnd.get(&s.id).copied().unwrap_or(0).max(s.cwnd * s.mss),
                rtt: s.srtt_us,
                penalized: s.penalized,
            }
        })
        .collect();
    let local_secs = o.local_elapsed.max(1e-9);
    let remote_secs = (o.peer.elapsed_us as f64 / 1e6).max(1e-9);
    let cpu = Cpu {
        host_total: pct(o.cpu.0 + o.cpu.1, local_secs),
        host_user: pct(o.cpu.0, local_secs),
        host_system: pct(o.cpu.1, local_secs),
        remote_total: pct(o.peer.cpu_user_us + o.peer.cpu_sys_us, remote_secs),
        remote_user: pct(o.peer.cpu_user_us, remote_secs),
        remote_system: pct(o.peer.cpu_sys_us, remote_secs),
    };
    let peer_cc =
        if o.peer_summary.congestion.is_empty() { "unknown".to_string() } else { o.peer_summary.congestion.clone() };
    let (scc, rcc) = if o.sender { (o.congestion.clone(), peer_cc) } else { (peer_cc, o.congestion.clone()) };
    let mptcp = MptcpEnd {
        mode: o.final_probe.mode.into(),
        subflows_max: sfmax.max(o.peer_summary.subflows_max).max(o.final_probe.subflows.len()),
        sha256_sent: report::hex(&snd.sha256),
        sha256_received: report::hex(&rcv.sha256),
        sha256_match: snd.sha256 == rcv.sha256 && snd.bytes == rcv.bytes,
        efficiency: None,
        counters: o.counters,
        peer_counters: o.peer_summary.counters,
    };
    Report {
        start,
        intervals,
        end: End {
            streams: vec![EndStream { sender: sum_sent.clone(), receiver: sum_received.clone(), subflows }],
            sum_sent,
            sum_received,
            cpu_utilization_percent: cpu,
            sender_tcp_congestion: scc,
            receiver_tcp_congestion: rcc,
            mptcp,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_like_iperf3() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(1_704_189_600), "Tue, 02 Jan 2024 10:00:00 GMT");
    }

    #[test]
    fn pattern_is_deterministic() {
        let (mut a, mut b) = ([0u8; 37], [0u8; 37]);
        Pattern::new(3).fill(&mut a);
        Pattern::new(3).fill(&mut b);
        assert_eq!(a, b);
        Pattern::new(4).fill(&mut b);
        assert_ne!(a, b);
    }
}
