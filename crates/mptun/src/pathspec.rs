//! One path of a stack as a command line gives it:
//! `dev=NAME,addr=A[/PREFIX][,peer=KERNEL_ADDR][,mtu=M][,signal][,subflow][,backup]`,
//! the syntax of `mptun send --path` and of the examples, parsed in one
//! place so they cannot drift apart. A path is a TUN device (created in
//! the namespace the program runs in, or in another one), the kernel's
//! address on it (`peer`, default the first other host of the subnet),
//! mptun's address on it (`addr`, the source of the path's subflows) and
//! the path manager's flags for that address, as `ip mptcp endpoint add
//! ADDR [signal] [subflow] [backup]` (`subflow` when none is named; also
//! `flags=signal+backup`, `flags=none`).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use mptun_io::{IfAddr, PacketIo, TunConfig, TunDevice};
use mptun_proto::pm::{EndpointFlags, PmConfig, PmEndpoint};
use mptun_proto::MptcpConfig;

/// One path: mptun's address on a TUN device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSpec {
    /// The TUN device to create (several paths may share one).
    pub dev: String,
    /// mptun's own address, with the subnet's prefix.
    pub addr: IfAddr,
    /// The kernel's address on the TUN (same subnet).
    pub peer: IpAddr,
    /// The device's MTU (every subflow's MSS follows from it).
    pub mtu: u16,
    /// The path manager's flags for `addr`.
    pub flags: EndpointFlags,
}

/// A spec that does not describe a path; the message says which part and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSpecError(String);

impl fmt::Display for PathSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PathSpecError {}

/// The flags a path has when its spec names none: open a subflow from it.
pub const DEFAULT_FLAGS: EndpointFlags =
    EndpointFlags { signal: false, subflow: true, backup: false, fullmesh: false, laminar: false };

/// `signal subflow backup fullmesh` (or `none`), as `ip mptcp endpoint show` prints them.
pub fn flags_text(f: EndpointFlags) -> String {
    let names = [
        (f.signal, "signal"),
        (f.subflow, "subflow"),
        (f.backup, "backup"),
        (f.fullmesh, "fullmesh"),
        (f.laminar, "laminar"),
    ];
    let on: Vec<&str> = names.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
    if on.is_empty() {
        "none".into()
    } else {
        on.join(" ")
    }
}

/// Sets the flag named `word` in `f` (`none` names none), as `ip mptcp
/// endpoint add` takes its flag words; `fullmesh` with `signal` is refused
/// as there. Shared by `--path` and `mptun pm endpoint add`.
pub fn set_flag(f: &mut EndpointFlags, word: &str) -> Result<(), String> {
    match word {
        "signal" => f.signal = true,
        "subflow" => f.subflow = true,
        "backup" => f.backup = true,
        "fullmesh" => f.fullmesh = true,
        "laminar" => f.laminar = true,
        "none" => {}
        _ => return Err(format!("'{word}' is no endpoint flag (signal, subflow, backup, fullmesh, laminar, none)")),
    }
    if f.fullmesh && f.signal {
        // As `ip mptcp endpoint add`: a fullmesh endpoint opens subflows, it is not announced.
        return Err("fullmesh cannot go with signal".into());
    }
    Ok(())
}

impl std::str::FromStr for PathSpec {
    type Err = PathSpecError;

    fn from_str(s: &str) -> Result<Self, PathSpecError> {
        parse(s).map_err(|e| PathSpecError(format!("path '{s}': {e}")))
    }
}

fn parse(s: &str) -> Result<PathSpec, String> {
    let (mut dev, mut addr, mut peer, mut mtu) = (None, None, None, 1500u16);
    let mut flags: Option<EndpointFlags> = None;
    for kv in s.split(',').filter(|p| !p.is_empty()) {
        let Some((k, v)) = kv.split_once('=') else {
            // A bare flag word, as `ip mptcp endpoint add ADDR signal backup`.
            if !matches!(kv, "signal" | "subflow" | "backup" | "fullmesh" | "laminar") {
                return Err(format!(
                    "'{kv}' is not KEY=VALUE (keys: dev, addr, peer, mtu, flags) nor a flag (signal, subflow, backup, fullmesh, laminar)"
                ));
            }
            set_flag(flags.get_or_insert_with(EndpointFlags::default), kv)?;
            continue;
        };
        match k {
            "flags" => {
                let f = flags.get_or_insert_with(EndpointFlags::default);
                for w in v.split(['+', '|']) {
                    set_flag(f, w)?;
                }
            }
            "dev" => {
                TunConfig::new(v).validate().map_err(|e| e.to_string())?;
                dev = Some(v.to_owned());
            }
            "addr" => addr = Some(parse_addr(v)?),
            "peer" => peer = Some(v.parse::<IpAddr>().map_err(|e| format!("peer '{v}': {e}"))?),
            "mtu" => {
                mtu = v.parse().map_err(|_| format!("mtu '{v}' is not a number"))?;
                if !(576..=65_535).contains(&mtu) {
                    return Err(format!("mtu {mtu} out of range 576..=65535"));
                }
            }
            _ => return Err(format!("unknown key '{k}' (keys: dev, addr, peer, mtu, flags)")),
        }
    }
    let dev = dev.ok_or("missing device (dev=NAME, the TUN to create)")?;
    let addr = addr.ok_or("missing address (addr=A/PREFIX, mptun's address)")?;
    let peer = match peer {
        Some(p) => {
            if p.is_ipv4() != addr.addr.is_ipv4() || p == addr.addr || !same_subnet(p, addr) {
                return Err(format!("peer {p} must be another address in {addr}'s subnet"));
            }
            p
        }
        None => default_peer(addr).ok_or_else(|| format!("subnet of {addr} has no room for a peer"))?,
    };
    if addr.addr.is_ipv6() && mtu < 1280 {
        return Err("IPv6 needs mtu >= 1280".into());
    }
    Ok(PathSpec { dev, addr, peer, mtu, flags: flags.unwrap_or(DEFAULT_FLAGS) })
}

impl PathSpec {
    /// The path manager's endpoints for `paths`: each path's address with
    /// its flags, ids from 1 in order (as `ip mptcp endpoint add` numbers them).
    pub fn endpoints(paths: &[PathSpec]) -> Vec<PmEndpoint> {
        paths
            .iter()
            .zip(1u8..)
            .map(|(p, id)| PmEndpoint { id, addr: p.addr.addr, flags: p.flags, port: None })
            .collect()
    }

    /// A stack builder over the TUN devices of `paths` (created as
    /// [`PathSpec::create_tuns`] does) whose path manager has their
    /// endpoints, with Linux's limits: what a program taking `--path`s needs
    /// before [`crate::StackBuilder::build`].
    pub fn stack_builder(paths: &[PathSpec], netns: Option<&str>) -> io::Result<crate::StackBuilder> {
        let pm = PmConfig { endpoints: PathSpec::endpoints(paths), ..PmConfig::default() };
        let mut b = crate::Stack::builder().mptcp_config(MptcpConfig { pm, ..MptcpConfig::default() });
        for (addr, dev) in PathSpec::create_tuns(paths, netns)? {
            b = b.path(addr, dev);
        }
        Ok(b)
    }

    /// Creates the TUN devices of `paths` (one per distinct name, carrying
    /// the peers of all its paths), in this namespace or in `netns`, and
    /// returns `(mptun address, device)` pairs for [`crate::StackBuilder::path`].
    /// An error names the device it could not create.
    pub fn create_tuns(paths: &[PathSpec], netns: Option<&str>) -> io::Result<Vec<(IpAddr, Arc<dyn PacketIo>)>> {
        let mut seen = Vec::new();
        for p in paths {
            if seen.contains(&p.addr.addr) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("address {} given for two paths", p.addr.addr),
                ));
            }
            seen.push(p.addr.addr);
        }
        let mut devs: Vec<(String, Arc<dyn PacketIo>)> = Vec::new();
        let mut out = Vec::new();
        for p in paths {
            let dev = match devs.iter().find(|(n, _)| *n == p.dev) {
                Some((_, d)) => d.clone(),
                None => {
                    let mut cfg = TunConfig::new(&p.dev).mtu(p.mtu).tx_queue_len(10_000);
                    for q in paths.iter().filter(|q| q.dev == p.dev) {
                        cfg = cfg.address(q.peer, q.addr.prefix)?;
                    }
                    let created = match netns {
                        Some(ns) => mptun_io::spawn_tun_in_netns(ns, &cfg),
                        None => TunDevice::create(&cfg),
                    };
                    let d: Arc<dyn PacketIo> =
                        Arc::new(created.map_err(|e| {
                            io::Error::new(e.kind(), format!("cannot create TUN device {}: {e}", p.dev))
                        })?);
                    devs.push((p.dev.clone(), d.clone()));
                    d
                }
            };
            out.push((p.addr.addr, dev));
        }
        Ok(out)
    }
}

fn parse_addr(v: &str) -> Result<IfAddr, String> {
    let a = if v.contains('/') {
        v.parse::<IfAddr>().map_err(|e| format!("addr '{v}': {e}"))?
    } else {
        let ip: IpAddr = v.parse().map_err(|e| format!("addr '{v}': {e}"))?;
        IfAddr::new(ip, if ip.is_ipv4() { 24 } else { 64 }).map_err(|e| format!("addr '{v}': {e}"))?
    };
    let ip = a.addr;
    if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
        return Err(format!("addr '{v}' cannot be a path address"));
    }
    if (ip.is_ipv4() && a.prefix > 30) || (ip.is_ipv6() && a.prefix > 126) {
        return Err(format!("addr '{v}': the prefix leaves no room for the kernel's end of the TUN"));
    }
    Ok(a)
}

fn mask(a: IpAddr, prefix: u8) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)) & (u128::from(u32::MAX) << (32 - u32::from(prefix)) & 0xffff_ffff),
        IpAddr::V6(v) => {
            if prefix == 0 {
                0
            } else {
                u128::from(v) & (u128::MAX << (128 - u32::from(prefix)))
            }
        }
    }
}

fn same_subnet(p: IpAddr, a: IfAddr) -> bool {
    mask(p, a.prefix) == mask(a.addr, a.prefix)
}

/// The first host of the subnet that is not `a` itself.
fn default_peer(a: IfAddr) -> Option<IpAddr> {
    let net = mask(a.addr, a.prefix);
    [net + 1, net + 2].into_iter().map(|n| from_u128(a.addr, n)).find(|&p| p != a.addr)
}

fn from_u128(like: IpAddr, n: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_derives_the_peer() {
        let p: PathSpec = "dev=tun0,addr=10.0.1.2".parse().unwrap();
        assert_eq!(p.dev, "tun0");
        assert_eq!(p.addr.to_string(), "10.0.1.2/24");
        assert_eq!(p.peer.to_string(), "10.0.1.1");
        let p: PathSpec = "dev=t,addr=10.0.1.1/24".parse().unwrap();
        assert_eq!(p.peer.to_string(), "10.0.1.2", "the peer is never mptun's own address");
        let p: PathSpec = "addr=fd00::5/64,dev=t6,peer=fd00::9".parse().unwrap();
        assert_eq!(p.peer.to_string(), "fd00::9");
        let p: PathSpec = "dev=t,addr=10.1.2.3/16,mtu=9000".parse().unwrap();
        assert_eq!((p.peer.to_string().as_str(), p.mtu), ("10.1.0.1", 9000));
        assert_eq!(p.flags, DEFAULT_FLAGS, "a path opens subflows unless told otherwise");
        let p: PathSpec = "dev=t,addr=10.0.2.2,signal,backup".parse().unwrap();
        assert_eq!(
            p.flags,
            EndpointFlags { signal: true, subflow: false, backup: true, fullmesh: false, laminar: false }
        );
        assert_eq!(flags_text(p.flags), "signal backup");
        let p: PathSpec = "dev=t,addr=10.0.2.2,flags=subflow+backup".parse().unwrap();
        assert_eq!(
            p.flags,
            EndpointFlags { signal: false, subflow: true, backup: true, fullmesh: false, laminar: false }
        );
        let p: PathSpec = "dev=t,addr=10.0.2.2,flags=signal|subflow".parse().unwrap();
        assert_eq!(
            p.flags,
            EndpointFlags { signal: true, subflow: true, backup: false, fullmesh: false, laminar: false }
        );
        let p: PathSpec = "dev=t,addr=10.0.2.2,subflow,fullmesh".parse().unwrap();
        assert_eq!(
            p.flags,
            EndpointFlags { signal: false, subflow: true, backup: false, fullmesh: true, laminar: false }
        );
        assert_eq!(flags_text(p.flags), "subflow fullmesh");
        let p: PathSpec = "dev=t,addr=10.0.2.2,flags=none".parse().unwrap();
        assert_eq!(flags_text(p.flags), "none");
        let eps = PathSpec::endpoints(&[p.clone(), "dev=t,addr=10.0.3.2".parse().unwrap()]);
        assert_eq!((eps[0].id, eps[1].id, eps[1].flags), (1, 2, DEFAULT_FLAGS));
    }

    #[test]
    fn rejects_bad_paths_with_a_reason() {
        for (s, why) in [
            ("addr=10.0.1.2", "missing device"),
            ("dev=tun0", "missing address"),
            ("dev=tun0,addr=10.0.1.2,colour=red", "unknown key"),
            ("dev=tun0,addr=banana", "addr"),
            ("dev=much-too-long-name,addr=10.0.1.2", "interface name"),
            ("dev=tun0,addr=10.0.1.2,peer=10.0.2.1", "subnet"),
            ("dev=tun0,addr=10.0.1.2/32", "prefix"),
            ("dev=tun0,addr=0.0.0.0", "cannot be"),
            ("dev=tun0,addr=10.0.1.2,mtu=10", "mtu"),
            ("tun0", "KEY=VALUE"),
            ("dev=tun0,addr=10.0.1.2,flags=mesh", "no endpoint flag"),
            ("dev=tun0,addr=10.0.1.2,signal,fullmesh", "cannot go with signal"),
            ("dev=tun0,addr=10.0.1.2,laser", "nor a flag"),
        ] {
            let e = s.parse::<PathSpec>().unwrap_err().to_string();
            assert!(e.contains(why) && e.starts_with(&format!("path '{s}': ")), "{s}: {e}");
        }
    }
}
