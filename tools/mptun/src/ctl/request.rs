//! The request lines of the control socket, parsed before anything is
//! done, so that hostile input is handled (and tested) without sockets.
//!
//! ```text
//! endpoint add ADDR [port P] [id N] [signal] [subflow] [backup] [fullmesh] [laminar]
//! endpoint delete id N [ADDR]
//! endpoint change id N [backup|nobackup] [fullmesh|nofullmesh]
//! endpoint show [id N]
//! endpoint flush
//! limits set [subflows N] [add_addr_accepted N]
//! limits show
//! monitor
//! announce token T id N ADDR [port P]
//! remove token T id N
//! subflow-create token T [lid N] saddr A daddr B dport P [backup]
//! subflow-destroy token T saddr A [sport P] daddr B [dport P]
//! set-flags token T saddr A [daddr B [dport P]] backup|nobackup
//! ss
//! nstat
//! ```
//!
//! The `endpoint` and `limits` lines are `ip mptcp`'s; the userspace-PM
//! commands take the attributes of `mptcp_pm.yaml` (`token`, `loc-id` as
//! `id`/`lid`, `saddr`, `daddr`, `sport`, `dport`). A token is hex, as
//! events print it.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use mptun::EndpointFlags;

/// Highest `subflows` / `add_addr_accepted` limit (Linux `MPTCP_PM_ADDR_MAX`).
pub(crate) const MAX_LIMIT: u8 = 8;

/// One parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    EndpointAdd { addr: IpAddr, id: u8, flags: EndpointFlags, port: Option<u16> },
    EndpointDelete { id: u8, addr: Option<IpAddr> },
    EndpointChange { id: u8, backup: Option<bool>, fullmesh: Option<bool> },
    EndpointShow { id: Option<u8> },
    EndpointFlush,
    LimitsSet { subflows: Option<u8>, add_addr_accepted: Option<u8> },
    LimitsShow,
    Monitor,
    Announce { token: u32, id: u8, addr: IpAddr, port: Option<u16> },
    Remove { token: u32, id: u8 },
    SubflowCreate { token: u32, local: IpAddr, local_id: u8, remote: SocketAddr, backup: bool },
    SubflowDestroy { token: u32, local: SocketAddr, remote: SocketAddr },
    SetFlags { token: u32, local: IpAddr, remote: Option<SocketAddr>, backup: bool },
    Ss,
    Nstat,
}

/// Why a line was refused: the message the client prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadRequest(pub(crate) String);

impl fmt::Display for BadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad<T>(msg: impl Into<String>) -> Result<T, BadRequest> {
    Err(BadRequest(msg.into()))
}

/// A word of the line, cut short for an error message (it is hostile input).
fn shown(w: &str) -> String {
    let mut s: String = w.chars().take(40).collect();
    if w.chars().count() > 40 {
        s.push('…');
    }
    s
}

/// The words of a request after its command, taken as `key value` pairs
/// and bare words.
struct Words<'a> {
    words: Vec<&'a str>,
}

impl<'a> Words<'a> {
    /// Removes `key VALUE` and returns VALUE.
    fn value(&mut self, key: &str) -> Result<Option<&'a str>, BadRequest> {
        let Some(i) = self.words.iter().position(|w| *w == key) else { return Ok(None) };
        if i + 1 >= self.words.len() {
            return bad(format!("'{key}' needs a value"));
        }
        let v = self.words.remove(i + 1);
        self.words.remove(i);
        Ok(Some(v))
    }

    fn parsed<T: std::str::FromStr>(&mut self, key: &str, what: &str) -> Result<Option<T>, BadRequest> {
        match self.value(key)? {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| BadRequest(format!("{key} '{}' is not {what}", shown(v)))),
        }
    }

    fn required<T: std::str::FromStr>(&mut self, key: &str, what: &str) -> Result<T, BadRequest> {
        self.parsed(key, what)?.ok_or_else(|| BadRequest(format!("'{key}' is missing")))
    }

    fn token(&mut self) -> Result<u32, BadRequest> {
        let v = self.value("token")?.ok_or_else(|| BadRequest("'token' is missing".into()))?;
        let hex = v.strip_prefix("0x").unwrap_or(v);
        u32::from_str_radix(hex, 16).map_err(|_| BadRequest(format!("token '{}' is not 8 hex digits", shown(v))))
    }

    /// Removes a bare `word`; whether it was there.
    fn flag(&mut self, word: &str) -> bool {
        let before = self.words.len();
        self.words.retain(|w| *w != word);
        before != self.words.len()
    }

    /// The single positional word left (an address), if any.
    fn positional(&mut self) -> Option<&'a str> {
        (!self.words.is_empty()).then(|| self.words.remove(0))
    }

    /// Nothing may be left over.
    fn done(self) -> Result<(), BadRequest> {
        match self.words.first() {
            None => Ok(()),
            Some(w) => bad(format!("unexpected '{}'", shown(w))),
        }
    }
}

fn ip(v: &str) -> Result<IpAddr, BadRequest> {
    v.parse().map_err(|_| BadRequest(format!("'{}' is not an IP address", shown(v))))
}

fn id(w: &mut Words<'_>, key: &str) -> Result<u8, BadRequest> {
    let id: u8 = w.required(key, "an address id (0-255)")?;
    Ok(id)
}

fn limit(w: &mut Words<'_>, key: &str) -> Result<Option<u8>, BadRequest> {
    match w.parsed::<u8>(key, "a number")? {
        Some(n) if n > MAX_LIMIT => bad(format!("{key} {n}: at most {MAX_LIMIT}")),
        v => Ok(v),
    }
}

fn backup_word(w: &mut Words<'_>) -> Option<bool> {
    match (w.flag("backup"), w.flag("nobackup")) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    }
}

/// Parses one request line.
pub(crate) fn parse(line: &str) -> Result<Request, BadRequest> {
    let mut all = line.split_whitespace();
    let cmd = all.next().ok_or_else(|| BadRequest("empty request".into()))?;
    let (what, rest): (&str, Vec<&str>) = match cmd {
        "endpoint" | "limits" => (all.next().unwrap_or(""), all.collect()),
        _ => ("", all.collect()),
    };
    let mut w = Words { words: rest };
    let r = match (cmd, what) {
        ("endpoint", "add") => {
            let id = w.parsed::<u8>("id", "an address id (1-255)")?.unwrap_or(0);
            let port: Option<u16> = w.parsed("port", "a port")?;
            let mut flags = EndpointFlags::default();
            for word in ["signal", "subflow", "backup", "fullmesh", "laminar"] {
                if w.flag(word) {
                    mptun::pathspec::set_flag(&mut flags, word).map_err(BadRequest)?;
                }
            }
            if port.is_some() && !flags.signal {
                return bad("a port endpoint is a signal one (as `ip mptcp endpoint add ADDR port P signal`)");
            }
            let addr = ip(w.positional().ok_or_else(|| BadRequest("the address is missing".into()))?)?;
            Request::EndpointAdd { addr, id, flags, port }
        }
        ("endpoint", "delete") => {
            let id = id(&mut w, "id")?;
            let addr = w.positional().map(ip).transpose()?;
            Request::EndpointDelete { id, addr }
        }
        ("endpoint", "change") => {
            let id = id(&mut w, "id")?;
            let backup = backup_word(&mut w);
            let fullmesh = match (w.flag("fullmesh"), w.flag("nofullmesh")) {
                (true, false) => Some(true),
                (false, true) => Some(false),
                _ => None,
            };
            if backup.is_none() && fullmesh.is_none() {
                return bad("change what: backup, nobackup, fullmesh or nofullmesh");
            }
            Request::EndpointChange { id, backup, fullmesh }
        }
        ("endpoint", "show") => Request::EndpointShow { id: w.parsed("id", "an address id")? },
        ("endpoint", "flush") => Request::EndpointFlush,
        ("endpoint", other) => {
            return bad(format!("endpoint '{}': add, delete, change, show or flush", shown(other)))
        }
        ("limits", "set") => {
            let subflows = limit(&mut w, "subflows")?;
            let add_addr_accepted = limit(&mut w, "add_addr_accepted")?;
            if subflows.is_none() && add_addr_accepted.is_none() {
                return bad("limits set: subflows N and/or add_addr_accepted N");
            }
            Request::LimitsSet { subflows, add_addr_accepted }
        }
        ("limits", "show") | ("limits", "") => Request::LimitsShow,
        ("limits", other) => return bad(format!("limits '{}': set or show", shown(other))),
        ("monitor", _) => Request::Monitor,
        ("announce", _) => {
            let token = w.token()?;
            let id = id(&mut w, "id")?;
            let port = w.parsed("port", "a port")?;
            let addr = ip(w.positional().ok_or_else(|| BadRequest("the address is missing".into()))?)?;
            Request::Announce { token, id, addr, port }
        }
        ("remove", _) => Request::Remove { token: w.token()?, id: id(&mut w, "id")? },
        ("subflow-create", _) => {
            let token = w.token()?;
            let local_id = w.parsed("lid", "an address id")?.unwrap_or(0);
            let local = ip(w.value("saddr")?.ok_or_else(|| BadRequest("'saddr' is missing".into()))?)?;
            let daddr = ip(w.value("daddr")?.ok_or_else(|| BadRequest("'daddr' is missing".into()))?)?;
            let dport: u16 = w.required("dport", "a port")?;
            let backup = w.flag("backup");
            Request::SubflowCreate { token, local, local_id, remote: SocketAddr::new(daddr, dport), backup }
        }
        ("subflow-destroy", _) => {
            let token = w.token()?;
            let saddr = ip(w.value("saddr")?.ok_or_else(|| BadRequest("'saddr' is missing".into()))?)?;
            let sport: u16 = w.parsed("sport", "a port")?.unwrap_or(0);
            let daddr = ip(w.value("daddr")?.ok_or_else(|| BadRequest("'daddr' is missing".into()))?)?;
            let dport: u16 = w.parsed("dport", "a port")?.unwrap_or(0);
            Request::SubflowDestroy {
                token,
                local: SocketAddr::new(saddr, sport),
                remote: SocketAddr::new(daddr, dport),
            }
        }
        ("set-flags", _) => {
            let token = w.token()?;
            let local = ip(w.value("saddr")?.ok_or_else(|| BadRequest("'saddr' is missing".into()))?)?;
            let remote = match w.value("daddr")? {
                Some(d) => Some(SocketAddr::new(ip(d)?, w.parsed("dport", "a port")?.unwrap_or(0))),
                None => None,
            };
            let backup = backup_word(&mut w).ok_or_else(|| BadRequest("backup or nobackup".into()))?;
            Request::SetFlags { token, local, remote, backup }
        }
        ("ss", _) => Request::Ss,
        ("nstat", _) => Request::Nstat,
        (other, _) => {
            return bad(format!(
                "unknown request '{}' (endpoint, limits, monitor, announce, remove, subflow-create, subflow-destroy, set-flags, ss, nstat)",
                shown(other)
            ))
        }
    };
    w.done()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Request {
        parse(line).unwrap_or_else(|e| panic!("{line}: {e}"))
    }

    fn err(line: &str) -> String {
        parse(line).expect_err(line).0
    }

    #[test]
    fn ip_mptcp_lines_parse() {
        let signal_backup = EndpointFlags { signal: true, backup: true, ..Default::default() };
        assert_eq!(
            ok("endpoint add 10.0.2.1 id 3 signal backup"),
            Request::EndpointAdd { addr: "10.0.2.1".parse().unwrap(), id: 3, flags: signal_backup, port: None }
        );
        assert_eq!(
            ok("endpoint delete id 3 10.0.2.1"),
            Request::EndpointDelete { id: 3, addr: Some("10.0.2.1".parse().unwrap()) }
        );
        assert_eq!(
            ok("endpoint change id 3 nobackup"),
            Request::EndpointChange { id: 3, backup: Some(false), fullmesh: None }
        );
        assert_eq!(ok("endpoint show"), Request::EndpointShow { id: None });
        assert_eq!(
            ok("limits set subflows 4 add_addr_accepted 2"),
            Request::LimitsSet { subflows: Some(4), add_addr_accepted: Some(2) }
        );
        assert_eq!(ok("limits show"), Request::LimitsShow);
        assert_eq!(ok("  monitor  "), Request::Monitor);
    }

    #[test]
    fn userspace_pm_lines_parse() {
        assert_eq!(
            ok("announce token 0x1a2b3c4d id 5 10.0.3.1 port 7000"),
            Request::Announce { token: 0x1a2b_3c4d, id: 5, addr: "10.0.3.1".parse().unwrap(), port: Some(7000) }
        );
        assert_eq!(ok("remove token ff id 1"), Request::Remove { token: 0xff, id: 1 });
        assert_eq!(
            ok("subflow-create token 1 saddr 10.0.3.1 daddr 10.0.1.2 dport 5201 backup"),
            Request::SubflowCreate {
                token: 1,
                local: "10.0.3.1".parse().unwrap(),
                local_id: 0,
                remote: "10.0.1.2:5201".parse().unwrap(),
                backup: true
            }
        );
        assert_eq!(
            ok("set-flags token 1 saddr fd00::1 daddr fd00::2 nobackup"),
            Request::SetFlags {
                token: 1,
                local: "fd00::1".parse().unwrap(),
                remote: Some("[fd00::2]:0".parse().unwrap()),
                backup: false
            }
        );
    }

    #[test]
    fn hostile_bad_lines_are_refused_with_a_reason() {
        assert_eq!(err(""), "empty request");
        assert!(err("reboot now").starts_with("unknown request 'reboot'"));
        assert!(err("endpoint add").contains("address is missing"));
        assert!(err("endpoint add 10.0.0.1 id 300").contains("id '300'"));
        assert!(err("endpoint add 10.0.0.1 signal fullmesh").contains("fullmesh"));
        assert!(err("endpoint add 10.0.0.1 port 80").contains("signal one"));
        assert!(matches!(ok("endpoint add 10.0.0.1 port 80 signal"), Request::EndpointAdd { port: Some(80), .. }));
        assert!(err("endpoint add 10.0.0.1 frob").contains("unexpected 'frob'"));
        assert!(err("endpoint change id 1").contains("change what"));
        assert!(err("limits set subflows 9").contains("at most 8"));
        assert!(err("limits set").contains("subflows N"));
        assert!(err("remove token zz id 1").contains("hex"));
        assert!(err("remove id 1").contains("'token' is missing"));
        assert!(err("announce token 1 id").contains("needs a value"));
        assert!(err("set-flags token 1 saddr 10.0.0.1").contains("backup or nobackup"));
        // A long word is cut short in the message.
        let long = "x".repeat(1000);
        assert!(err(&long).len() < 200);
    }
}
