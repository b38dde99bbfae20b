//! The server side: a running command's stack answers the control
//! socket's requests ([`super::request`]) with JSON lines, then `ok` or
//! `error MESSAGE`; `monitor` answers `ok` and then one JSON line per
//! path-manager event until the client leaves.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use mptun::{PmEndpoint, PmEvent, Stack, StreamInfo, WeakStack};
use mptun_io::ctl::{ControlLimits, ControlServer, Session};
use serde_json::{json, Value};

use super::request::{parse, Request};
use crate::pathspec::flags_text;

/// Serves `stack`'s control socket at `path` until the returned server
/// is dropped. It holds the stack weakly: a program that lets its stack go
/// is not kept from ending it.
pub(crate) fn start(stack: &Stack, path: &std::path::Path) -> io::Result<ControlServer> {
    let weak = stack.downgrade();
    let handler = Arc::new(move |s: Session| serve_client(&weak, s));
    ControlServer::start(path, "mptun", ControlLimits::default(), Arc::new(AtomicBool::new(false)), handler)
}

fn serve_client(weak: &WeakStack, mut s: Session) -> io::Result<()> {
    while let Some(line) = s.next_line()? {
        let Some(stack) = weak.upgrade() else {
            writeln!(s.writer(), "error the stack has ended")?;
            return Ok(());
        };
        match parse(&line) {
            Err(e) => writeln!(s.writer(), "error {e}")?,
            Ok(Request::Monitor) => {
                let events = stack.path_manager().events();
                drop(stack);
                return monitor(events, s);
            }
            Ok(r) => match execute(&stack, r) {
                // The stack is let go before a slow reader gets the answer.
                Ok(lines) => {
                    drop(stack);
                    let w = s.writer();
                    for l in lines {
                        writeln!(w, "{l}")?;
                    }
                    writeln!(w, "ok")?;
                }
                Err(e) => writeln!(s.writer(), "error {e}")?,
            },
        }
    }
    Ok(())
}

/// Streams events until the client hangs up, the server stops or the
/// stack is gone.
fn monitor(mut events: mptun::PmEvents, mut s: Session) -> io::Result<()> {
    writeln!(s.writer(), "ok")?;
    let mut lost = 0;
    loop {
        while let Some(ev) = events.try_recv() {
            writeln!(s.writer(), "{}", event_json(&ev))?;
        }
        if events.lost() != lost {
            lost = events.lost();
            writeln!(s.writer(), "{}", json!({ "lost": lost }))?;
        }
        if s.stopped() || events.closed() || hung_up(s.writer())? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the client closed its end (anything it sends now is ignored).
fn hung_up(w: &mut std::os::unix::net::UnixStream) -> io::Result<bool> {
    w.set_nonblocking(true)?;
    let mut b = [0u8; 64];
    let r = w.read(&mut b);
    w.set_nonblocking(false)?;
    match r {
        Ok(0) => Ok(true),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(_) => Ok(true),
    }
}

fn sock(a: Option<SocketAddr>) -> Value {
    a.map_or(Value::Null, |a| json!(a.to_string()))
}

/// An event as JSON: the `mptcp_pm.yaml` attributes, and the line
/// `ip mptcp monitor` would print.
pub(crate) fn event_json(e: &PmEvent) -> Value {
    json!({
        "type": e.kind.name(),
        "token": format!("{:08x}", e.token),
        "local": sock(e.local),
        "remote": sock(e.remote),
        "loc_id": e.local_id,
        "rem_id": e.remote_id,
        "backup": e.backup,
        "server_side": e.server_side,
        "error": e.error,
        "reset_reason": e.reset_reason,
        "reset_flags": e.reset_flags,
        "line": e.to_string(),
    })
}

fn endpoint_json(e: &PmEndpoint) -> Value {
    json!({ "id": e.id, "addr": e.addr.to_string(), "port": e.port, "flags": flags_text(e.flags) })
}

/// A connection state as `ss` names it (its first column).
fn ss_state(s: mptun::TcpState) -> &'static str {
    use mptun::TcpState::*;
    match s {
        Closed => "CLOSED",
        SynSent => "SYN-SENT",
        SynReceived => "SYN-RECV",
        Established => "ESTAB",
        FinWait1 => "FIN-WAIT-1",
        FinWait2 => "FIN-WAIT-2",
        CloseWait => "CLOSE-WAIT",
        Closing => "CLOSING",
        LastAck => "LAST-ACK",
        TimeWait => "TIME-WAIT",
    }
}

/// One connection as `ss -Menitam` shows it.
fn connection_json(c: &StreamInfo) -> Value {
    let subflows: Vec<Value> = c
        .conn
        .subflows
        .iter()
        .map(|s| {
            json!({
                "local": s.local.to_string(),
                "remote": s.remote.to_string(),
                "loc_id": s.local_id,
                "rem_id": s.remote_id,
                "backup": s.backup,
                "stale": s.stale,
                "joined": s.joined,
                "state": format!("{:?}", s.tcp.state),
                "cwnd": s.tcp.cwnd,
                "ssthresh": s.tcp.ssthresh,
                "mss": s.tcp.mss,
                "srtt_us": s.tcp.srtt.as_micros(),
                "rttvar_us": s.tcp.rttvar.as_micros(),
                "pacing_rate": s.tcp.pacing_rate,
                "cc": s.tcp.cc,
                "delivery_rate": s.tcp.delivery_rate,
                "delivery_rate_app_limited": s.tcp.delivery_rate_app_limited,
                "delivered": s.tcp.delivered,
                "bbr": s.tcp.bbr.map(|b| json!({
                    "bw": b.bw,
                    "min_rtt_us": b.min_rtt_us,
                    "pacing_gain": f64::from(b.pacing_gain) / 256.0,
                    "cwnd_gain": f64::from(b.cwnd_gain) / 256.0,
                    "mode": b.mode.name(),
                })),
                "bytes_sent": s.tcp.bytes_sent,
                "bytes_acked": s.tcp.bytes_acked,
                "bytes_received": s.tcp.bytes_received,
                "bytes_retrans": s.tcp.bytes_retrans,
                "snd_wnd": s.tcp.snd_wnd,
                "rcv_wnd": s.tcp.rcv_wnd,
            })
        })
        .collect();
    json!({
        "local": c.local.to_string(),
        "remote": c.remote.to_string(),
        "established": c.established,
        "state": ss_state(c.conn.state),
        "mode": format!("{:?}", c.conn.mode).to_lowercase(),
        "token": c.conn.local_token.map(|t| format!("{t:08x}")),
        "remote_token": c.conn.remote_token.map(|t| format!("{t:08x}")),
        "fully_established": c.conn.fully_established,
        "scheduler": c.conn.scheduler,
        "bytes_acked": c.conn.bytes_acked,
        "bytes_received": c.conn.bytes_received,
        "subflows": subflows,
    })
}

/// Carries out one request: the JSON lines of its answer, or why not.
fn execute(stack: &Stack, r: Request) -> Result<Vec<Value>, String> {
    let pm = stack.path_manager();
    // "address is not local" says which addresses are.
    let e = |e: mptun::PmError| match e {
        mptun::PmError::AddrNotLocal => {
            let addrs: Vec<String> = stack.paths().iter().map(|p| format!("{} on {}", p.local, p.device)).collect();
            format!("{e}: the stack's addresses are {}", addrs.join(", "))
        }
        e => e.to_string(),
    };
    Ok(match r {
        Request::EndpointAdd { addr, id, flags, port } => {
            let id = pm.endpoint_add(PmEndpoint { id, addr, flags, port }).map_err(|x| format!("{addr}: {}", e(x)))?;
            vec![json!({ "id": id })]
        }
        Request::EndpointDelete { id, addr } => {
            // `delete id 0 ADDR`, as `ip mptcp` withdraws an address by itself: its endpoint's id.
            let id = match (id, addr) {
                (0, Some(a)) => pm.endpoints().iter().find(|x| x.addr == a && x.port.is_none()).map_or(0, |x| x.id),
                (id, _) => id,
            };
            vec![endpoint_json(&pm.endpoint_delete(id).map_err(e)?)]
        }
        Request::EndpointChange { id, backup, fullmesh } => {
            let cur = pm.endpoints().into_iter().find(|x| x.id == id).ok_or_else(|| e(mptun::PmError::NoSuchId))?;
            let mut flags = cur.flags;
            flags.backup = backup.unwrap_or(flags.backup);
            flags.fullmesh = fullmesh.unwrap_or(flags.fullmesh);
            if flags.fullmesh && flags.signal {
                return Err("fullmesh cannot go with signal".into());
            }
            pm.endpoint_change(id, flags).map_err(e)?;
            vec![endpoint_json(&PmEndpoint { flags, ..cur })]
        }
        Request::EndpointShow { id } => {
            pm.endpoints().iter().filter(|x| id.is_none_or(|i| i == x.id)).map(endpoint_json).collect()
        }
        Request::EndpointFlush => pm.endpoint_flush().iter().map(endpoint_json).collect(),
        Request::LimitsSet { subflows, add_addr_accepted } => {
            pm.set_limits(subflows, add_addr_accepted);
            let l = pm.limits();
            vec![json!({ "subflows": l.subflows, "add_addr_accepted": l.add_addr_accepted })]
        }
        Request::LimitsShow => {
            let l = pm.limits();
            vec![json!({ "subflows": l.subflows, "add_addr_accepted": l.add_addr_accepted })]
        }
        Request::Monitor => unreachable!("handled by the session"),
        Request::Announce { token, id, addr, port } => {
            pm.announce(token, id, addr, port).map_err(e)?;
            Vec::new()
        }
        Request::Remove { token, id } => {
            pm.remove(token, id).map_err(e)?;
            Vec::new()
        }
        Request::SubflowCreate { token, local, local_id, remote, backup } => {
            pm.subflow_create(token, local, local_id, remote, backup).map_err(e)?;
            Vec::new()
        }
        Request::SubflowDestroy { token, local, remote } => {
            pm.subflow_destroy(token, local, remote).map_err(e)?;
            Vec::new()
        }
        Request::SetFlags { token, local, remote, backup } => {
            let n = pm.set_flags(token, local, remote, backup).map_err(e)?;
            vec![json!({ "subflows": n })]
        }
        Request::Ss => stack.connections().iter().map(connection_json).collect(),
        Request::Nstat => {
            let c = stack.counters();
            let map: serde_json::Map<String, Value> = c.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            vec![Value::Object(map)]
        }
    })
}
