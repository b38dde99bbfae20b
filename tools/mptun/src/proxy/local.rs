//! `mptun proxy local`: accepts the application's TCP connections (SOCKS5,
//! or redirected by the kernel with --transparent), opens one MPTCP
//! connection to the exit for each, sends the authenticated header, passes
//! the exit's answer on as the SOCKS reply and relays.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use clap::Args;
use mptun::{MptcpStream, Stack};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::admit::{Cut, Handshake, NotAdmitted, HANDSHAKE};
use super::dest::Dest;
use super::header::{self, BadReply, Key};
use super::report::Reporter;
use super::socks5::{self, Refusal, Rep, Users};
use super::{serve_loop, Carrier, Session, Stackish, Stop};
use crate::conn::Conn;
use crate::kernel::{self, KernelOptions};
use crate::stack::{build_stack, connect_error, end_stack, runtime};

/// The exit's port when --exit gives none.
pub(crate) const DEFAULT_EXIT_PORT: u16 = 1081;

#[derive(Args, Debug)]
pub(crate) struct LocalArgs {
    /// Where applications connect (SOCKS5; with --transparent also the REDIRECT target).
    #[arg(long, default_value = "127.0.0.1:1080", value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// The exit's address on its MPTCP side: ADDR or ADDR:PORT (default port 1081).
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_exit)]
    exit: SocketAddr,
    /// Also serve connections redirected here by the kernel (iptables/nft
    /// REDIRECT): their original destination is read with SO_ORIGINAL_DST.
    #[arg(long)]
    transparent: bool,
    /// Require SOCKS5 username/password (RFC 1929): a file of `user:password` lines.
    #[arg(long, value_name = "FILE")]
    auth_file: Option<PathBuf>,
    #[command(flatten)]
    carrier: Carrier,
}

fn parse_exit(s: &str) -> Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<std::net::IpAddr>()
        .map(|ip| SocketAddr::new(ip, DEFAULT_EXIT_PORT))
        .map_err(|_| anyhow!("'{s}' is not ADDR or ADDR:PORT"))
}

/// How the MPTCP connections to the exit are opened.
enum Dialer {
    Mptun(Stack),
    Kernel(KernelOptions),
}

struct Ctx {
    exit: SocketAddr,
    key: Key,
    users: Users,
    transparent: bool,
    dialer: Dialer,
    connect_timeout: Duration,
    idle_timeout: Duration,
    reporter: Arc<Reporter>,
}

pub(crate) fn run(a: LocalArgs) -> Result<()> {
    let key = Key::read(&a.carrier.key_file)?;
    let users = match &a.auth_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| anyhow!("--auth-file {}: {e}", f.display()))?;
            Users::parse(&text).map_err(|e| anyhow!("--auth-file {}: {e}", f.display()))?
        }
        None => Users::default(),
    };
    let plan = a.carrier.check()?;
    let limits = a.carrier.limits(&plan)?;
    runtime()?.block_on(async move {
        let dialer = match &plan {
            Stackish::Mptun(paths, o) => Dialer::Mptun(build_stack(paths, o, true, None)?),
            Stackish::Kernel(o) => Dialer::Kernel(o.clone()),
        };
        let stack = match &dialer {
            Dialer::Mptun(s) => Some(s.clone()),
            Dialer::Kernel(_) => None,
        };
        let _control = stack.as_ref().map(|s| a.carrier.control.start(s)).transpose()?.flatten();
        let listener = tokio::net::TcpListener::bind(a.listen).await.map_err(|e| anyhow!("listen {}: {e}", a.listen))?;
        let reporter = Reporter::new("local", a.carrier.json);
        let via = match &plan {
            Stackish::Mptun(p, _) => p.iter().map(|p| format!("{} on {}", p.addr.addr, p.dev)).collect::<Vec<_>>(),
            Stackish::Kernel(_) => vec!["kernel MPTCP".into()],
        };
        reporter.listening(
            &format!("{} (SOCKS5{}) -> exit {} via {}", a.listen, if a.transparent { ", transparent" } else { "" }, a.exit, via.join(", ")),
            json!({"listen": a.listen.to_string(), "exit": a.exit.to_string(), "transparent": a.transparent, "paths": via}),
        );
        let ctx = Arc::new(Ctx {
            exit: a.exit,
            key,
            users,
            transparent: a.transparent,
            dialer,
            connect_timeout: a.carrier.connect_timeout,
            idle_timeout: a.carrier.idle_timeout,
            reporter: reporter.clone(),
        });
        let served = serve_loop(reporter, &a.carrier, limits, stack.clone(), || listener.accept(), ctx, serve).await;
        end_stack(stack).await;
        served
    })
}

/// A failure to set a connection up, with the SOCKS reply it earns.
struct SetupError {
    rep: Rep,
    why: String,
    /// Counted as refused (policy) rather than failed.
    refused: bool,
    wrong_key: bool,
}

impl SetupError {
    fn failed(rep: Rep, why: impl Into<String>) -> Self {
        SetupError { rep, why: why.into(), refused: false, wrong_key: false }
    }
}

async fn serve(ctx: Arc<Ctx>, mut client: TcpStream, peer: SocketAddr, id: u64, mut stop: Stop, hs: Handshake) {
    let r = &ctx.reporter;
    let peer_s = peer.to_string();
    client.set_nodelay(true).ok();
    super::relay::keepalive(&client);
    let redirected = if ctx.transparent { super::transparent::original_dst(&client) } else { Ok(None) };
    let (dest, socks) = match redirected {
        Ok(Some(orig)) => (Dest::Addr(orig), false),
        Ok(None) => match hs.bound(socks5::accept(&mut client, &ctx.users)).await {
            Ok(Ok(d)) => (d, true),
            Ok(Err(e @ (Refusal::Auth | Refusal::Reply(..)))) => {
                return r.refused(id, &peer_s, None, &e.to_string(), &r.counters.refused, "refused")
            }
            Ok(Err(e)) => return r.refused(id, &peer_s, None, &e.to_string(), &r.counters.failed, "failed"),
            Err(Cut::TimedOut) => {
                return r.refused(id, &peer_s, None, "SOCKS negotiation timed out", &r.counters.failed, "failed")
            }
            Err(Cut::Evicted(_)) => {
                super::relay::reset_on_drop(&client);
                return r.evicted();
            }
        },
        Err(e) => return r.refused(id, &peer_s, None, &format!("SO_ORIGINAL_DST: {e}"), &r.counters.failed, "failed"),
    };
    let dest_s = dest.to_string();
    let started = Instant::now();
    // The client owes nothing until the SOCKS reply: it leaving ends the
    // wait, and what it sends early is passed on first.
    let mut early = Vec::new();
    let left =
        |why: String| SetupError::failed(Rep::GeneralFailure, format!("the client left while connecting: {why}"));
    let setup = tokio::select! {
        a = hs.admit() => match a {
            Ok(a) => Ok(a),
            Err(NotAdmitted::Evicted(why)) => Err(SetupError::failed(Rep::GeneralFailure, why)),
            Err(NotAdmitted::Full(why)) => Err(SetupError { rep: Rep::GeneralFailure, why, refused: true, wrong_key: false }),
        },
        why = super::relay::gone(&mut client, &mut early) => Err(left(why)),
    };
    let setup = match setup {
        Ok(mut admitted) => tokio::select! {
            s = open(&ctx, &dest) => s.map(|(conn, bound)| {
                admitted.track(&conn);
                (conn, bound, admitted)
            }),
            why = super::relay::gone(&mut client, &mut early) => Err(left(why)),
            _ = stop.wait() => Err(SetupError::failed(Rep::GeneralFailure, "interrupted")),
        },
        Err(e) => Err(e),
    };
    let (mut conn, bound, _admitted) = match setup {
        Ok(x) => x,
        Err(e) => {
            if socks {
                let _ = socks5::write_reply(&mut client, e.rep, None).await;
            }
            if e.wrong_key {
                super::report::Counters::bump(&r.counters.wrong_key);
            }
            let (counter, kind) =
                if e.refused { (&r.counters.refused, "refused") } else { (&r.counters.failed, "failed") };
            return r.refused(id, &peer_s, Some(&dest_s), &e.why, counter, kind);
        }
    };
    if let Conn::Kernel(k) = &conn {
        super::relay::keepalive(k);
    }
    if socks {
        if let Err(e) = socks5::write_reply(&mut client, Rep::Succeeded, bound).await {
            return r.refused(id, &peer_s, Some(&dest_s), &format!("client: {e}"), &r.counters.failed, "failed");
        }
    }
    r.connect(
        id,
        &peer_s,
        &dest_s,
        json!({"mode": if socks { "socks5" } else { "transparent" }, "exit_bound": bound.map(|b| b.to_string()), "stack": conn.stack_name()}),
    );
    let session = Session { id, peer: peer_s, dest: dest_s, started, idle: ctx.idle_timeout, early };
    super::relay_and_report(r, session, &mut client, &mut conn, true, ["client", "exit"], &mut stop).await;
}

/// Connects to the exit, sends the header and waits for its answer.
async fn open(ctx: &Ctx, dest: &Dest) -> Result<(Conn, Option<SocketAddr>), SetupError> {
    let to = ctx.exit;
    let gf = |why: String| SetupError::failed(Rep::GeneralFailure, why);
    let connect = async {
        match &ctx.dialer {
            Dialer::Mptun(stack) => {
                MptcpStream::connect(stack, to).await.map(Conn::Mptun).map_err(|e| connect_error(to, &e))
            }
            Dialer::Kernel(o) => kernel::connect(to, o).await.map(Conn::Kernel),
        }
    };
    let mut conn = tokio::time::timeout(ctx.connect_timeout, connect)
        .await
        .map_err(|_| gf(format!("exit {to}: connect timed out")))?
        .map_err(|e| gf(format!("exit: {e:#}")))?;
    let nonce = header::nonce().map_err(|e| gf(e.to_string()))?;
    let (bytes, tag) = header::encode_request(&ctx.key, dest, header::unix_ms(), nonce);
    conn.write_all(&bytes).await.map_err(|e| gf(format!("exit {to}: {e}")))?;
    let reply = tokio::time::timeout(HANDSHAKE + ctx.connect_timeout, header::read_reply(&mut conn, &ctx.key, &tag))
        .await
        .map_err(|_| gf(format!("exit {to}: no answer")))?
        .map_err(|e| gf(format!("exit {to} closed without answering ({e}): is it an mptun proxy exit?")))?;
    match reply {
        Ok(rep) if rep.rep == Rep::Succeeded => Ok((conn, rep.bound)),
        Ok(rep) => Err(SetupError {
            rep: rep.rep,
            why: format!("exit: {}", rep.rep.text()),
            refused: rep.rep == Rep::NotAllowed,
            wrong_key: false,
        }),
        Err(BadReply::WrongKey) => Err(SetupError {
            rep: Rep::GeneralFailure,
            why: format!("exit {to} refused us: its answer does not authenticate under our key (the key files differ)"),
            refused: true,
            wrong_key: true,
        }),
        Err(BadReply::Malformed(m)) => Err(gf(format!("exit {to}: bad answer: {m}"))),
    }
}
