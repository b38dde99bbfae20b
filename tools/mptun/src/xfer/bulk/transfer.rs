//! The data phase of a test, each side's half: the sender writes its source
//! then its trailer and reads the receiver's; the receiver hashes to end of
//! stream (the sender's trailer held back), answers with its trailer and
//! summary and lingers until they are acknowledged. Both sample the
//! connection through the [`Meter`] while they wait.

use std::path::PathBuf;
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::meter::Meter;
use super::outcome::{sender_subflows, Outcome};
use super::pipeline::{Block, Consumer, Hash, Producer};
use super::{Settings, Sink, Source, Summary, BLKSIZE, RECV_BUF};
use crate::conn::{Conn, CounterSource};
use crate::host::{CpuSpan, CpuUse};
use crate::probe::Probe;
use crate::report::Interval;
use crate::signals;
use crate::xfer::control::{self, Amount, HashKind, Trailer, STOP_MAGIC};

/// How long a finished receiver waits for its trailer to be acknowledged.
const LINGER: Duration = Duration::from_secs(10);
/// How long an interrupted receiver waits for the sender to end the data.
const STOP_WAIT: Duration = Duration::from_secs(5);

fn progress_deadline(last: Instant, idle: Duration) -> Result<()> {
    if last.elapsed() > idle {
        bail!("no progress for {:.0} s: the peer or the paths are gone", idle.as_secs_f64());
    }
    Ok(())
}

/// What ends a wait of the sending loop.
enum SendEv {
    Tick,
    /// The data ends now: the duration is up or a signal came (`None`),
    /// or the receiver asked (`Some(why)`).
    Stop(Option<&'static str>),
    Peer(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    /// The data thread made all it had to.
    Done,
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
pub(super) async fn send_phase(
    conn: &mut Conn,
    source: Source,
    amount: Amount,
    hash_kind: HashKind,
    settings: Settings,
    counters: &CounterSource,
    pre: u64,
) -> Result<(Outcome, Vec<Interval>, usize, Option<PathBuf>)> {
    let total = match amount {
        Amount::Bytes(n) => Some(n),
        Amount::DurationMs(_) => None,
    };
    // The sender's span, for its trailer and its own figures: from the
    // start of its data to its trailer, and to the receiver's answer.
    let span = CpuSpan::start();
    let mut meter = Meter::new(settings, true, total, conn, span.started());
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + meter.settings.interval, meter.settings.interval);
    let deadline = match amount {
        Amount::DurationMs(ms) => Some(tokio::time::Instant::now() + Duration::from_millis(ms)),
        Amount::Bytes(_) => None,
    };
    let file_path = match &source {
        Source::File(_, path) => Some(path.clone()),
        Source::Pattern(_) => None,
    };
    let mut blocks = Producer::start(source, total, BLKSIZE, hash_kind);
    // The stream's hash after the last block written whole.
    let mut hash = Hash::new(hash_kind);
    // The block being written, and how much of it went out.
    let mut cur: Option<Block> = None;
    let mut off = 0usize;
    let mut sent: u64 = 0;
    let data_acked = |c: &Conn, sent: u64| c.acked(pre + sent).saturating_sub(pre);
    // The receiver's STOP, as far as it has arrived.
    let mut stop_buf = [0u8; 4];
    let mut stop_got = 0usize;
    let mut stopped_by: Option<&'static str> = None;
    let mut last = Instant::now();
    loop {
        if cur.is_none()
            && (deadline.is_some_and(|d| tokio::time::Instant::now() >= d) || signals::received().is_some())
        {
            break;
        }
        let ev = tokio::select! {
            biased;
            _ = ticker.tick() => SendEv::Tick,
            _ = signals::wait() => SendEv::Stop(None),
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() && off == 0 => {
                // Time is up before this block went out: it is not part of the stream.
                SendEv::Stop(None)
            }
            ev = std::future::poll_fn(|cx| {
                // Watch for the receiver's STOP while writing.
                if stop_got < STOP_MAGIC.len() {
                    let mut rb = ReadBuf::new(&mut stop_buf[stop_got..]);
                    if let Poll::Ready(r) = std::pin::Pin::new(&mut *conn).poll_read(cx, &mut rb) {
                        return Poll::Ready(SendEv::Peer(r.map(|()| rb.filled().len())));
                    }
                }
                match &cur {
                    Some(b) => std::pin::Pin::new(&mut *conn).poll_write(cx, &b.data[off..]).map(SendEv::Wrote),
                    None => Poll::Pending,
                }
            }) => ev,
            b = blocks.next(), if cur.is_none() => match b? {
                Some(b) => {
                    cur = Some(b);
                    continue;
                }
                None => SendEv::Done,
            },
        };
        match ev {
            SendEv::Tick => {
                let b = data_acked(conn, sent + off as u64);
                meter.sample(conn, b);
                progress_deadline(last, meter.settings.idle_timeout)?;
            }
            SendEv::Done => {
                // It ends by itself only after a byte count, all written.
                if total != Some(sent) {
                    bail!("the data thread ended after {sent} bytes");
                }
                break;
            }
            SendEv::Stop(who) => {
                stopped_by = who;
                break;
            }
            SendEv::Peer(Ok(0)) => bail!("the receiver closed the connection during the test"),
            SendEv::Peer(Ok(k)) => {
                stop_got += k;
                if stop_got == STOP_MAGIC.len() {
                    if stop_buf != STOP_MAGIC {
                        bail!(
                            "the receiver sent {:?} during the data (not a stop request)",
                            String::from_utf8_lossy(&stop_buf)
                        );
                    }
                    stopped_by = Some("the receiver was interrupted");
                    break;
                }
            }
            SendEv::Peer(Err(e)) => return Err(anyhow!("receive: {e}")),
            SendEv::Wrote(Ok(0)) => bail!("the connection closed while sending"),
            SendEv::Wrote(Ok(k)) => {
                off += k;
                last = Instant::now();
                if let Some(b) = cur.take_if(|b| off == b.data.len()) {
                    sent += off as u64;
                    off = 0;
                    hash = b.after;
                    blocks.recycle(b.data);
                    meter.progress(data_acked(conn, sent));
                }
            }
            SendEv::Wrote(Err(e)) => return Err(anyhow!("send: {e}")),
        }
    }
    // What went out of a block cut short is part of the stream.
    if let Some(b) = &cur {
        hash.update(&b.data[..off]);
        sent += off as u64;
    }
    drop(blocks);
    let digest = hash.finish();
    let probe = conn.probe();
    let trailer = Trailer::new(sent, probe.retrans_segs, span.until_now(), digest);
    let sent_total = sent;
    let mut tail = trailer.encode().to_vec();
    tail.extend_from_slice(&sender_summary(conn, &probe, &meter));
    write_all_metered(conn, &tail, &mut meter, &mut ticker, &|c| data_acked(c, sent_total)).await?;
    conn.shutdown().await.ok();
    // The receiver answers once it has everything: until then, keep sampling.
    let mut back = Vec::new();
    let mut rbuf = vec![0u8; 16 * 1024];
    let mut last = Instant::now();
    let mut acked_seen = 0;
    // The rest of a STOP half read during the data, or a whole one that
    // crossed our trailer, precedes the receiver's trailer: skip it.
    let mut skip = if stop_got > 0 { STOP_MAGIC.len() - stop_got } else { 0 };
    let mut maybe_stop = stop_got == 0;
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
                if skip > 0 && back.len() >= skip {
                    back.drain(..skip);
                    skip = 0;
                }
                if skip == 0 && maybe_stop && back.len() >= STOP_MAGIC.len() {
                    if back[..STOP_MAGIC.len()] == STOP_MAGIC {
                        back.drain(..STOP_MAGIC.len());
                        stopped_by = stopped_by.or(Some("the receiver was interrupted"));
                    }
                    maybe_stop = false;
                }
                if back.len() > control::TRAILER_LEN + 4 + control::MAX_COUNTERS {
                    bail!("the receiver sent more than a trailer and its summary");
                }
                // Complete once the length-prefixed summary is in: no need to
                // wait for the FIN, which a receiver exiting may never retransmit.
                if let Some(len) = back.get(control::TRAILER_LEN..control::TRAILER_LEN + 4) {
                    let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
                    if back.len() >= control::TRAILER_LEN + 4 + len {
                        break;
                    }
                }
            }
            Some(Err(e)) => return Err(anyhow!("waiting for the receiver's trailer: {e}")),
        }
    }
    meter.finish(conn, sent_total);
    let local_elapsed = meter.elapsed();
    let cpu = span.until_now();
    let peer = Trailer::decode(&back[..back.len().min(control::TRAILER_LEN)]).context("the receiver's trailer")?;
    let peer_summary = parse_summary(back.get(control::TRAILER_LEN + 4..).unwrap_or(&[]));
    // One snapshot for the total and its parts, so the total is their sum.
    let final_probe = conn.probe();
    let local = Trailer { retransmits: final_probe.retrans_segs.min(u64::from(u32::MAX)) as u32, ..trailer };
    let outcome = Outcome {
        sender: true,
        local,
        peer,
        local_elapsed,
        cpu,
        final_probe,
        counters: counters.read(),
        peer_summary,
        congestion: conn.congestion(),
        stopped: stopped_by.map(str::to_owned),
        hash: hash_kind,
    };
    Ok((outcome, meter.intervals, meter.subflows_max, file_path))
}

/// The sender's summary region: its controller, subflow count and each
/// subflow's sending figures, as many subflows as fit.
fn sender_summary(conn: &Conn, probe: &Probe, meter: &Meter) -> [u8; control::SENDER_SUMMARY_LEN] {
    let mut summary = Summary {
        counters: Default::default(),
        congestion: conn.congestion(),
        subflows_max: meter.subflows_max,
        subflows: sender_subflows(probe, &meter.intervals),
    };
    loop {
        let js = serde_json::to_vec(&summary).expect("a summary serialises");
        if let Some(b) = control::encode_sender_summary(&js) {
            return b;
        }
        summary.subflows.pop();
    }
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
pub(super) async fn recv_phase(
    conn: &mut Conn,
    sink: Sink,
    total: Option<u64>,
    hash_kind: HashKind,
    settings: Settings,
    counters: &CounterSource,
    pre_written: u64,
) -> Result<(Outcome, Vec<Interval>, usize, Option<PathBuf>)> {
    let mut meter = Meter::new(settings, false, total, conn, Instant::now());
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + meter.settings.interval, meter.settings.interval);
    let mut data = Consumer::start(sink, RECV_BUF, hash_kind);
    // Bytes read: all but the last SENDER_TAIL_LEN are known to be data.
    let mut read: u64 = 0;
    // The receiver's span, its rate's and its CPU figures' alike: from the
    // first data read to the end of the stream.
    let mut first: Option<CpuSpan> = None;
    let mut last = Instant::now();
    // Interrupted: the STOP has gone to the sender, whose data must end by then.
    let mut stop_deadline: Option<tokio::time::Instant> = None;
    loop {
        let r = tokio::select! {
            biased;
            _ = ticker.tick() => None,
            _ = signals::wait(), if stop_deadline.is_none() => {
                conn.write_all(&STOP_MAGIC).await.context("asking the sender to stop")?;
                conn.flush().await.ok();
                stop_deadline = Some(tokio::time::Instant::now() + STOP_WAIT);
                continue;
            }
            _ = async { tokio::time::sleep_until(stop_deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if stop_deadline.is_some() => {
                bail!("interrupted, and the sender did not stop within {} s", STOP_WAIT.as_secs());
            }
            r = conn.read(data.space()) => Some(r),
        };
        let received = read.saturating_sub(control::SENDER_TAIL_LEN as u64);
        match r {
            None => {
                meter.sample(conn, received);
                progress_deadline(last, meter.settings.idle_timeout)?;
            }
            Some(Ok(0)) => break,
            Some(Ok(n)) => {
                first.get_or_insert_with(CpuSpan::start);
                last = Instant::now();
                read += n as u64;
                let received = read.saturating_sub(control::SENDER_TAIL_LEN as u64);
                if let Some(t) = total {
                    if received > t {
                        bail!("the sender sent more than the {t} bytes agreed");
                    }
                }
                data.read(n).await?;
                meter.progress(received);
            }
            Some(Err(e)) => return Err(anyhow!("receive: {e}")),
        }
    }
    let received = read.saturating_sub(control::SENDER_TAIL_LEN as u64);
    meter.finish(conn, received);
    let cpu = first.map_or(CpuUse::default(), |f| f.until_now());
    let (consumed, tail) = data.finish().await?;
    debug_assert_eq!(consumed.bytes, received);
    let (peer, rest) = tail.split_at(tail.len().min(control::TRAILER_LEN));
    let peer = Trailer::decode(peer).context("the sender's trailer")?;
    let peer_summary = parse_summary(control::decode_sender_summary(rest).context("the sender's trailer")?);
    let digest = consumed.digest;
    let file_path = consumed.file;
    let probe = conn.probe();
    let local = Trailer::new(received, probe.retrans_segs, cpu, digest);
    let counters_now = counters.read();
    let summary = Summary {
        counters: counters_now.clone(),
        congestion: conn.congestion(),
        subflows_max: meter.subflows_max,
        ..Default::default()
    };
    let mut out = local.encode().to_vec();
    let mut js = serde_json::to_vec(&summary)?;
    if js.len() > control::MAX_COUNTERS {
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
        local_elapsed: cpu.wall_us as f64 / 1e6,
        cpu,
        final_probe: probe,
        counters: counters_now,
        peer_summary,
        congestion: conn.congestion(),
        stopped: stop_deadline.map(|_| "this side was interrupted".to_owned()),
        hash: hash_kind,
    };
    Ok((outcome, meter.intervals, meter.subflows_max, file_path))
}
