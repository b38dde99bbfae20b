//! One bulk-transfer test over one connection, either side, either stack.
//! Here: the request/response exchange that opens it ([`run_client`],
//! [`run_server`]) and what the two sides agree on. The data phase with its
//! trailers is in `transfer`, its threads that make, hash and store the
//! data in `pipeline`, the per-interval sampling in
//! `meter`, the assembled [`Report`] in `outcome`; the host's own figures
//! (CPU time, uname) in [`crate::host`], the messages themselves in
//! [`crate::xfer::control`].

mod meter;
mod outcome;
mod output;
mod pipeline;
mod transfer;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
pub(crate) use mptun::pattern::Pattern;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conn::{Conn, CounterSource};
use crate::report::{self, Report};
use crate::xfer::control::{self, Amount, Request, Response};
use outcome::{assemble, start_section};
pub(crate) use output::OutputDir;
use transfer::{recv_phase, send_phase};

/// Bytes per write: iperf3's TCP default. A block is made, hashed and
/// written while it is still in the core's cache; larger blocks fall out
/// of it and stall, smaller ones cost more system calls.
pub(crate) const BLKSIZE: usize = 128 * 1024;
/// Bytes a receiver's buffer holds: reads fill it until less than a
/// quarter is left, then it goes to the hashing thread whole (or it is
/// hashed after every read, see `pipeline`).
const RECV_BUF: usize = 128 * 1024;
/// How long the first exchange may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a side reports and what it tells the report about itself.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) client: bool,
    pub(crate) interval: Duration,
    pub(crate) json: bool,
    pub(crate) progress: bool,
    /// No data for this long ends the test with an error.
    pub(crate) idle_timeout: Duration,
    pub(crate) paths: Vec<String>,
    pub(crate) congestion: String,
    pub(crate) scheduler: String,
    pub(crate) connecting_to: Option<(String, u16)>,
    /// The buffer size asked for (iperf3's `sock_bufsize`; 0: autotuned).
    pub(crate) sock_bufsize: u64,
    /// The path manager's settings, when this side runs mptun's.
    pub(crate) path_manager: Option<crate::report::PathManagerInfo>,
    /// A timed test's duration (set once the request is known): its
    /// intervals are the duration's, what arrives or is acknowledged
    /// after it belongs to the last one.
    pub(crate) duration: Option<Duration>,
}

impl Settings {
    fn for_amount(mut self, amount: Amount) -> Settings {
        self.duration = match amount {
            Amount::DurationMs(ms) => Some(Duration::from_millis(ms)),
            Amount::Bytes(_) => None,
        };
        self
    }
}

/// Where the sender's bytes come from.
pub(crate) enum Source {
    Pattern(Pattern),
    File(std::fs::File, PathBuf),
}

/// Where the receiver's bytes go.
pub(crate) enum Sink {
    Discard,
    File(std::fs::File, PathBuf),
}

/// What each side sends after its trailer: the receiver its counters, the
/// sender its subflows' sending figures, which only the sender has (the
/// receiver's own retransmissions and cwnd say nothing of the data).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Summary {
    #[serde(default)]
    pub(crate) counters: BTreeMap<String, u64>,
    #[serde(default)]
    pub(crate) congestion: String,
    #[serde(default)]
    pub(crate) subflows_max: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) subflows: Vec<SenderSubflow>,
}

/// One subflow as its data sender saw it when it wrote its trailer, named
/// by the sender's own addresses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SenderSubflow {
    pub(crate) local: String,
    pub(crate) remote: String,
    pub(crate) retransmits: u64,
    pub(crate) bytes_retrans: u64,
    pub(crate) max_snd_cwnd: u64,
    pub(crate) rtt: u64,
}

async fn read_exact_timeout(conn: &mut Conn, buf: &mut [u8], what: &str) -> Result<()> {
    let r = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.read_exact(buf)) => r,
        _ = crate::signals::wait() => return Err(crate::signals::interrupted()),
    };
    match r {
        Err(_) => bail!("no {what} within {} s", HANDSHAKE_TIMEOUT.as_secs()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => bail!("the peer closed before its {what}"),
        Ok(Err(e)) => bail!("reading the {what}: {e}"),
        Ok(Ok(_)) => Ok(()),
    }
}

/// What the client wants to move.
pub(crate) struct ClientTest {
    pub(crate) request: Request,
    /// Forward: what to send. Reverse: ignored.
    pub(crate) source: Option<Source>,
    /// Reverse: where to put what arrives.
    pub(crate) sink: Sink,
}

/// Runs a test as the client: request, response, then the data phase.
pub(crate) async fn run_client(
    mut conn: Conn,
    test: ClientTest,
    settings: Settings,
    counters: CounterSource,
) -> Result<Report> {
    let req = test.request.encode();
    conn.write_all(&req).await.context("sending the request")?;
    let mut fixed = [0u8; control::RESPONSE_LEN];
    read_exact_timeout(&mut conn, &mut fixed, "response from the server").await?;
    let (resp, mlen) = Response::decode_fixed(&fixed)?;
    let mut msg = vec![0u8; mlen];
    read_exact_timeout(&mut conn, &mut msg, "response message").await?;
    if resp.refused.is_some() {
        bail!("the server refused the test: {}", String::from_utf8_lossy(&msg));
    }
    if crate::signals::received().is_some() {
        return Err(crate::signals::interrupted());
    }
    let settings = settings.for_amount(test.request.amount);
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
        recv_phase(&mut conn, test.sink, total, test.request.hash, settings, &counters, req.len() as u64).await?
    } else {
        let source = test.source.unwrap_or(Source::Pattern(Pattern::new(1)));
        send_phase(&mut conn, source, test.request.amount, test.request.hash, settings, &counters, req.len() as u64)
            .await?
    };
    Ok(assemble(start, intervals, outcome, sfmax, file))
}

/// Turns a client away: reads its request (if it sends one soon) and
/// answers with a refusal carrying `why`, so it fails at once with the
/// reason (iperf3's "the server is busy running a test").
pub(crate) async fn refuse(mut conn: Conn, why: &'static str) {
    let mut fixed = [0u8; control::REQUEST_LEN];
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_exact(&mut fixed)).await;
    let _ = conn.write_all(&Response { refused: Some(why.into()), amount: 0 }.encode()).await;
    let _ = conn.shutdown().await;
    // mptun's stream: give the answer time to be acknowledged before the
    // stream (and with it the connection's last reference) goes.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let mut b = [0u8; 512];
        while conn.read(&mut b).await.is_ok_and(|n| n > 0) {}
    })
    .await;
}

/// What a server offers.
pub(crate) struct ServerConfig {
    /// Where files sent to it go.
    pub(crate) output_dir: Option<OutputDir>,
    /// What it sends to a client asking for its file.
    pub(crate) file: Option<PathBuf>,
}

/// What the server does for `req`: its source (it sends), its sink (it
/// receives), and the byte count it announces; or why it refuses.
fn plan(req: &Request, cfg: &ServerConfig) -> Result<(Option<Source>, Sink, u64)> {
    match (&req.file, req.reverse) {
        (Some(name), false) => {
            let dir = cfg
                .output_dir
                .as_ref()
                .ok_or_else(|| anyhow!("this server stores no files (start it with --output-dir DIR)"))?;
            // Its size is checked before a byte is stored: a file comes
            // with its byte count, never for a duration.
            let Amount::Bytes(len) = req.amount else { bail!("a file is sent with its size, not for a duration") };
            let (f, path) = dir.create(name, len)?;
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
    }
}

/// Answers a request with a refusal carrying `why`, and closes.
async fn refuse_now(conn: &mut Conn, why: &str) {
    conn.write_all(&Response { refused: Some(why.into()), amount: 0 }.encode()).await.ok();
    conn.shutdown().await.ok();
}

/// Runs one test as the server.
pub(crate) async fn run_server(
    mut conn: Conn,
    cfg: &ServerConfig,
    settings: Settings,
    counters: CounterSource,
) -> Result<Report> {
    let mut fixed = [0u8; control::REQUEST_LEN];
    read_exact_timeout(&mut conn, &mut fixed, "request from the client").await?;
    let parsed: Result<Request> = async {
        let (mut req, tail) = Request::decode_fixed(&fixed)?;
        let mut tail = vec![0u8; tail];
        read_exact_timeout(&mut conn, &mut tail, "file name and cookie").await?;
        req.set_tail(&tail)?;
        Ok(req)
    }
    .await;
    let mut req = match parsed {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("bad request: {e:#}");
            refuse_now(&mut conn, &msg).await;
            bail!("{msg}");
        }
    };
    // Decide, and tell the client either way.
    let (source, sink, amount) = match plan(&req, cfg) {
        Ok(p) => p,
        Err(e) => {
            let msg = format!("{e:#}");
            refuse_now(&mut conn, &msg).await;
            bail!("refused the test: {msg}");
        }
    };
    let resp = Response { refused: None, amount }.encode();
    conn.write_all(&resp).await.context("sending the response")?;
    if let (Some(Source::File(..)), true) = (&source, req.reverse) {
        req.amount = Amount::Bytes(amount);
    }
    let settings = settings.for_amount(req.amount);
    let start = start_section(&conn, &settings, &req, req.reverse);
    if !settings.json {
        print!("{}", report::header_lines(&start));
    }
    let (outcome, intervals, sfmax, file) = if req.reverse {
        send_phase(
            &mut conn,
            source.unwrap_or(Source::Pattern(Pattern::new(2))),
            req.amount,
            req.hash,
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
        recv_phase(&mut conn, sink, total, req.hash, settings, &counters, resp.len() as u64).await?
    };
    Ok(assemble(start, intervals, outcome, sfmax, file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::control::HashKind;

    /// A file comes with its size, checked before anything is stored: one
    /// asked for a duration (no size to check) is refused, and nothing is
    /// created.
    #[test]
    fn a_file_for_a_duration_is_refused() {
        let dir = std::env::temp_dir().join(format!("mptun-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = ServerConfig { output_dir: Some(OutputDir::open(&dir, None).unwrap()), file: None };
        let mut req = Request {
            reverse: false,
            amount: Amount::DurationMs(1000),
            file: Some("f".into()),
            cookie: String::new(),
            hash: HashKind::Sha256,
        };
        let why = plan(&req, &cfg).err().map(|e| e.to_string()).unwrap_or_default();
        let created = dir.join("f").exists();
        req.amount = Amount::Bytes(3);
        let stored = plan(&req, &cfg).is_ok() && dir.join("f").exists();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(why.contains("not for a duration"), "{why}");
        assert!(!created && stored);
    }
}
