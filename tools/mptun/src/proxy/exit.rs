//! `mptun proxy exit`: accepts the local proxy's MPTCP connections (mptun's
//! stack or the kernel's), reads and authenticates the header, refuses what
//! --allow does not permit or the replay guard has seen, resolves names
//! here (as socks5h), connects out with plain kernel TCP, answers with the
//! SOCKS reply code and relays.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use clap::Args;
use mptun::MptcpListener;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::admit::{Cut, Handshake, NotAdmitted};
use super::allow::{Allow, Denied, Own, Rule};
use super::dest::Dest;
use super::header::{self, Key, Reject, ReplayGuard, Reply};
use super::report::{Counters, Reporter};
use super::socks5::Rep;
use super::{serve_loop, Carrier, Session, Stackish, Stop};
use crate::conn::Conn;
use crate::kernel;
use crate::stack::{build_stack, end_stack, runtime};

#[derive(Args, Debug)]
pub(crate) struct ExitArgs {
    /// Where the local proxies connect (mptun: one of the stack's addresses
    /// or 0.0.0.0 for all; --kernel: any local address).
    #[arg(long, default_value = "0.0.0.0:1081", value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// A destination the exit may connect to: CIDR, CIDR:PORT,
    /// [IPv6-CIDR]:PORT, HOST:PORT or HOST:* (repeat; none given: nothing is allowed).
    #[arg(long, value_name = "RULE")]
    allow: Vec<Rule>,
    #[command(flatten)]
    carrier: Carrier,
}

struct Ctx {
    key: Key,
    allow: Allow,
    /// The stack's own addresses (and the listen address), which the
    /// interfaces do not list: reserved as the host's.
    own_extra: Vec<std::net::IpAddr>,
    replay: Mutex<ReplayGuard>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    reporter: Arc<Reporter>,
}

enum Listener {
    Mptun(MptcpListener),
    Kernel(tokio::net::TcpListener),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<(Conn, SocketAddr)> {
        match self {
            Listener::Mptun(l) => l.accept().await.map(|(s, p)| (Conn::Mptun(s), p)),
            Listener::Kernel(l) => l.accept().await.map(|(s, p)| {
                s.set_nodelay(true).ok();
                (Conn::Kernel(s), p)
            }),
        }
    }
}

pub(crate) fn run(a: ExitArgs) -> Result<()> {
    let key = Key::read(&a.carrier.key_file)?;
    let allow = Allow::new(a.allow.clone());
    if allow.is_empty() {
        eprintln!("mptun: warning: no --allow rule: every destination will be refused");
    }
    let plan = a.carrier.check()?;
    let limits = a.carrier.limits(&plan)?;
    runtime()?.block_on(async move {
        let (listener, what, stack) = match &plan {
            Stackish::Mptun(paths, o) => {
                let stack = build_stack(paths, o, true, None)?;
                let l = MptcpListener::bind(&stack, a.listen).await.map_err(|e| anyhow!("listen {}: {e}", a.listen))?;
                let what = format!("{} (mptun, {} path(s))", a.listen, paths.len());
                (Listener::Mptun(l), what, Some(stack))
            }
            Stackish::Kernel(o) => {
                let l = kernel::listen(a.listen, o)?;
                (Listener::Kernel(l), format!("{} (kernel MPTCP)", a.listen), None)
            }
        };
        let _control = stack.as_ref().map(|s| a.carrier.control.start(s)).transpose()?.flatten();
        let reporter = Reporter::new("exit", a.carrier.json);
        let rules: Vec<String> = a.allow.iter().map(|r| format!("{r:?}")).collect();
        reporter.listening(&what, json!({"listen": a.listen.to_string(), "allow_rules": rules.len()}));
        let mut own_extra: Vec<std::net::IpAddr> = match &plan {
            Stackish::Mptun(paths, _) => paths.iter().map(|p| p.addr.addr).collect(),
            Stackish::Kernel(_) => Vec::new(),
        };
        own_extra.push(a.listen.ip());
        let ctx = Arc::new(Ctx {
            key,
            allow,
            own_extra,
            replay: Mutex::new(ReplayGuard::default()),
            connect_timeout: a.carrier.connect_timeout,
            idle_timeout: a.carrier.idle_timeout,
            reporter: reporter.clone(),
        });
        let served = serve_loop(reporter, &a.carrier, limits, stack.clone(), || listener.accept(), ctx, serve).await;
        drop(listener);
        end_stack(stack).await;
        served
    })
}

/// A refusal before relaying: the reply code sent, the reason, and which
/// counter it goes to.
struct Refused {
    rep: Option<Rep>,
    why: String,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Refused,
    Failed,
    WrongKey,
    Replayed,
    Stale,
}

async fn serve(ctx: Arc<Ctx>, mut conn: Conn, peer: SocketAddr, id: u64, mut stop: Stop, hs: Handshake) {
    let r = &ctx.reporter;
    let peer_s = peer.to_string();
    let started = Instant::now();
    if let Conn::Kernel(k) = &conn {
        super::relay::keepalive(k);
    }
    let req = match hs.bound(header::read_request(&mut conn, &ctx.key)).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return r.refused(id, &peer_s, None, &format!("header: {e}"), &r.counters.failed, "failed"),
        Err(Cut::TimedOut) => {
            let why = format!("no header within {} s", super::admit::HANDSHAKE.as_secs());
            return r.refused(id, &peer_s, None, &why, &r.counters.failed, "failed");
        }
        Err(Cut::Evicted(_)) => {
            if let Conn::Kernel(k) = &conn {
                super::relay::reset_on_drop(k);
            }
            return r.evicted();
        }
    };
    // The request's tag when it is authentic: the answer to a stale or
    // replayed header is then one its sender can verify (a local proxy
    // with a skewed clock learns why); to a wrong key, one it cannot.
    let (checked, tag) = match req {
        Ok(q) => {
            let tag = q.tag;
            (ctx.replay.lock().expect("replay guard").check(&q, header::unix_ms()).map(|()| q), tag)
        }
        Err(rej) => (Err(rej), [0u8; header::TAG_LEN]),
    };
    let req = match checked {
        Ok(q) => q,
        Err(rej) => {
            let kind = match rej {
                Reject::Malformed(_) => Kind::Failed,
                Reject::WrongKey => Kind::WrongKey,
                Reject::Replayed => Kind::Replayed,
                Reject::Stale { .. } => Kind::Stale,
                Reject::CacheFull => Kind::Refused,
            };
            // Bytes that are no header at all get no answer.
            let rep = (kind != Kind::Failed).then_some(Rep::NotAllowed);
            if let Some(rep) = rep {
                let _ = conn.write_all(&header::encode_reply(&ctx.key, &tag, &Reply { rep, bound: None })).await;
            }
            return report_refusal(r, id, &peer_s, None, Refused { rep, why: rej.to_string(), kind });
        }
    };
    let dest_s = req.dest.to_string();
    // The local proxy sends nothing after the header until it has the
    // answer: its connection closing means its client has gone, and the
    // wait for a relay or the dial ends with it.
    let mut early = Vec::new();
    let left = |when: &str, why: String| Refused {
        rep: None,
        why: format!("the local proxy left while {when}: {why}"),
        kind: Kind::Failed,
    };
    let admitted = tokio::select! {
        a = hs.admit() => a.map_err(|e| match e {
            NotAdmitted::Evicted(why) => Refused { rep: Some(Rep::GeneralFailure), why, kind: Kind::Failed },
            NotAdmitted::Full(why) => Refused { rep: Some(Rep::GeneralFailure), why, kind: Kind::Refused },
        }),
        why = super::relay::gone(&mut conn, &mut early) => Err(left("waiting for a relay", why)),
    };
    let out = match admitted {
        Ok(a) => tokio::select! {
            o = connect_out(&ctx, &req.dest) => o.map(|o| (o, a)),
            why = super::relay::gone(&mut conn, &mut early) => Err(left("connecting to the destination", why)),
            _ = stop.wait() => Err(Refused { rep: Some(Rep::GeneralFailure), why: "interrupted".into(), kind: Kind::Failed }),
        },
        Err(f) => Err(f),
    };
    let (mut out, mut admitted) = match out {
        Ok(s) => s,
        Err(f) => {
            if let Some(rep) = f.rep {
                let _ = conn.write_all(&header::encode_reply(&ctx.key, &req.tag, &Reply { rep, bound: None })).await;
            }
            return report_refusal(r, id, &peer_s, Some(&dest_s), f);
        }
    };
    out.set_nodelay(true).ok();
    super::relay::keepalive(&out);
    admitted.track(&conn);
    let bound = out.local_addr().ok();
    let to = out.peer_addr().ok();
    let ok = header::encode_reply(&ctx.key, &req.tag, &Reply { rep: Rep::Succeeded, bound });
    if let Err(e) = conn.write_all(&ok).await {
        return r.refused(id, &peer_s, Some(&dest_s), &format!("local proxy: {e}"), &r.counters.failed, "failed");
    }
    r.connect(id, &peer_s, &dest_s, json!({"address": to.map(|a| a.to_string()), "stack": conn.stack_name()}));
    let session = Session { id, peer: peer_s, dest: dest_s, started, idle: ctx.idle_timeout, early };
    super::relay_and_report(r, session, &mut out, &mut conn, false, ["local proxy", "destination"], &mut stop).await;
    drop(admitted);
}

fn report_refusal(r: &Reporter, id: u64, peer: &str, dest: Option<&str>, f: Refused) {
    let c = &r.counters;
    match f.kind {
        Kind::WrongKey => Counters::bump(&c.wrong_key),
        Kind::Replayed => Counters::bump(&c.replayed),
        Kind::Stale => Counters::bump(&c.stale),
        Kind::Refused | Kind::Failed => {}
    }
    let (counter, kind) = if f.kind == Kind::Failed { (&c.failed, "failed") } else { (&c.refused, "refused") };
    let why = match f.rep {
        Some(rep) => format!("{} (answered: {})", f.why, rep.text()),
        None => f.why,
    };
    r.refused(id, peer, dest, &why, counter, kind);
}

/// The refusal of `dest`, naming the reserved class when only that kept
/// an otherwise covered address out.
fn not_allowed(dest: &Dest, denied: Option<(SocketAddr, Denied)>) -> Refused {
    let why = match denied {
        Some((a, Denied::Reserved(class))) => {
            format!("{dest} is not allowed: {a} is {}, which only a rule written for it allows (--allow)", class.what())
        }
        _ => format!("{dest} is not allowed (--allow)"),
    };
    Refused { rep: Some(Rep::NotAllowed), why, kind: Kind::Refused }
}

/// Checks `dest` against --allow (with the exit host's addresses as they
/// are now), resolves a name, and connects to the first allowed address
/// that answers.
async fn connect_out(ctx: &Ctx, dest: &Dest) -> Result<TcpStream, Refused> {
    let own = Own::here(&ctx.own_extra).map_err(|e| Refused {
        rep: Some(Rep::GeneralFailure),
        why: format!("cannot list the exit host's addresses: {e}"),
        kind: Kind::Failed,
    })?;
    let addrs: Vec<SocketAddr> = match dest {
        Dest::Addr(a) => {
            ctx.allow.permits(None, *a, &own).map_err(|d| not_allowed(dest, Some((*a, d))))?;
            vec![*a]
        }
        Dest::Name(name, port) => {
            if !ctx.allow.permits_name(name, *port) && !ctx.allow.has_networks() {
                return Err(not_allowed(dest, None));
            }
            let resolved = tokio::time::timeout(ctx.connect_timeout, tokio::net::lookup_host((name.as_str(), *port)))
                .await
                .map_err(|_| Refused {
                    rep: Some(Rep::HostUnreachable),
                    why: format!("resolving {name}: timed out"),
                    kind: Kind::Failed,
                })?
                .map_err(|e| Refused {
                    rep: Some(Rep::HostUnreachable),
                    why: format!("resolving {name}: {e}"),
                    kind: Kind::Failed,
                })?;
            let mut denied = None;
            let v: Vec<SocketAddr> = resolved
                .filter(|a| match ctx.allow.permits(Some(name), *a, &own) {
                    Ok(()) => true,
                    Err(d) => {
                        if denied.is_none() || matches!(d, Denied::Reserved(_)) {
                            denied = Some((*a, d));
                        }
                        false
                    }
                })
                .collect();
            if v.is_empty() {
                return Err(not_allowed(dest, denied));
            }
            v
        }
    };
    let mut last = None;
    for a in addrs.iter().take(8) {
        match tokio::time::timeout(ctx.connect_timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = Some((Rep::for_connect_error(&e), format!("{a}: {e}"))),
            Err(_) => last = Some((Rep::HostUnreachable, format!("{a}: connect timed out"))),
        }
    }
    let (rep, why) = last.unwrap_or((Rep::HostUnreachable, format!("{dest}: no address")));
    Err(Refused { rep: Some(rep), why, kind: Kind::Failed })
}
