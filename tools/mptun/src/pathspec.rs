//! `--path dev=NAME,addr=A[/P][,peer=G][,mtu=M][,signal][,subflow][,backup]`
//! and `--topology NAME[:N]`: which TUN devices to create in the current
//! namespace, which address mptun uses on each, and what its path manager
//! does with that address (the flags of `ip mptcp endpoint add`).
//!
//! A TUN is a point where the kernel hands packets to us: the kernel's end
//! gets `peer` (default: the first other host address of the subnet), mptun
//! sources its subflows from `addr` in the same subnet, and the kernel
//! routes that subnet to the TUN. Several `--path`s naming the same device
//! put several addresses (paths) on one TUN.

use anyhow::{anyhow, bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use mptun::EndpointFlags;
use mptun_io::{IfAddr, PacketIo, TunConfig, TunDevice};

/// One path: mptun's address on a TUN device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSpec {
    pub dev: String,
    /// mptun's own address, with the subnet's prefix.
    pub addr: IfAddr,
    /// The kernel's address on the TUN (same subnet).
    pub peer: IpAddr,
    pub mtu: u16,
    /// The path manager's flags for `addr`, as `ip mptcp endpoint add ADDR
    /// [signal] [subflow] [backup]`; `subflow` unless the spec names some.
    pub flags: EndpointFlags,
}

/// The flags a path has when its spec names none: open a subflow from it.
pub const DEFAULT_FLAGS: EndpointFlags = EndpointFlags { signal: false, subflow: true, backup: false };

/// `signal subflow backup`, as `ip mptcp endpoint show` prints them.
pub fn flags_text(f: EndpointFlags) -> String {
    let names = [(f.signal, "signal"), (f.subflow, "subflow"), (f.backup, "backup")];
    let on: Vec<&str> = names.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
    if on.is_empty() {
        "none".into()
    } else {
        on.join(" ")
    }
}

/// Sets the flag named `word` in `f` (`none` names none).
fn set_flag(f: &mut EndpointFlags, word: &str) -> Result<()> {
    match word {
        "signal" => f.signal = true,
        "subflow" => f.subflow = true,
        "backup" => f.backup = true,
        "none" => {}
        _ => bail!("'{word}' is no endpoint flag (signal, subflow, backup, none)"),
    }
    Ok(())
}

impl std::str::FromStr for PathSpec {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let (mut dev, mut addr, mut peer, mut mtu) = (None, None, None, 1500u16);
        let mut flags: Option<EndpointFlags> = None;
        for kv in s.split(',').filter(|p| !p.is_empty()) {
            let Some((k, v)) = kv.split_once('=') else {
                // A bare flag word, as `ip mptcp endpoint add ADDR signal backup`.
                if !matches!(kv, "signal" | "subflow" | "backup") {
                    bail!("path '{s}': '{kv}' is not KEY=VALUE (keys: dev, addr, peer, mtu, flags) nor a flag (signal, subflow, backup)");
                }
                set_flag(flags.get_or_insert_with(EndpointFlags::default), kv)?;
                continue;
            };
            match k {
                "flags" => {
                    let f = flags.get_or_insert_with(EndpointFlags::default);
                    for w in v.split(['+', '|']) {
                        set_flag(f, w).map_err(|e| anyhow!("path '{s}': {e}"))?;
                    }
                }
                "dev" => {
                    TunConfig::new(v).validate().map_err(|e| anyhow!("path '{s}': {e}"))?;
                    dev = Some(v.to_owned());
                }
                "addr" => addr = Some(parse_addr(v).with_context(|| format!("path '{s}'"))?),
                "peer" => peer = Some(v.parse::<IpAddr>().map_err(|e| anyhow!("path '{s}': peer '{v}': {e}"))?),
                "mtu" => {
                    mtu = v.parse().map_err(|_| anyhow!("path '{s}': mtu '{v}' is not a number"))?;
                    if !(576..=65_535).contains(&mtu) {
                        bail!("path '{s}': mtu {mtu} out of range 576..=65535");
                    }
                }
                _ => bail!("path '{s}': unknown key '{k}' (keys: dev, addr, peer, mtu, flags)"),
            }
        }
        let dev = dev.ok_or_else(|| anyhow!("path '{s}': missing device (dev=NAME, the TUN to create)"))?;
        let addr = addr.ok_or_else(|| anyhow!("path '{s}': missing address (addr=A/PREFIX, mptun's address)"))?;
        let peer = match peer {
            Some(p) => {
                if p.is_ipv4() != addr.addr.is_ipv4() || p == addr.addr || !same_subnet(p, addr) {
                    bail!("path '{s}': peer {p} must be another address in {}'s subnet", addr);
                }
                p
            }
            None => default_peer(addr).ok_or_else(|| anyhow!("path '{s}': subnet of {addr} has no room for a peer"))?,
        };
        if addr.addr.is_ipv6() && mtu < 1280 {
            bail!("path '{s}': IPv6 needs mtu >= 1280");
        }
        Ok(PathSpec { dev, addr, peer, mtu, flags: flags.unwrap_or(DEFAULT_FLAGS) })
    }
}

fn parse_addr(v: &str) -> Result<IfAddr> {
    let a = if v.contains('/') {
        v.parse::<IfAddr>().map_err(|e| anyhow!("addr '{v}': {e}"))?
    } else {
        let ip: IpAddr = v.parse().map_err(|e| anyhow!("addr '{v}': {e}"))?;
        IfAddr::new(ip, if ip.is_ipv4() { 24 } else { 64 })?
    };
    let ip = a.addr;
    if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
        bail!("addr '{v}' cannot be a path address");
    }
    if (ip.is_ipv4() && a.prefix > 30) || (ip.is_ipv6() && a.prefix > 126) {
        bail!("addr '{v}': the prefix leaves no room for the kernel's end of the TUN");
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

/// Named address plans, so a lab user need not spell out the paths.
pub const TOPOLOGIES: &str = "lab-a, lab-b (tests/src/lab.rs: two namespaces, N routed veth paths), \
linkem-client, linkem-server (the `mptun lab` plan over netns-scripts/lab/topo.sh)";

/// The paths of topology `name[:N]` (N paths, default 2).
pub fn topology(spec: &str) -> Result<Vec<PathSpec>> {
    let (name, n) = match spec.split_once(':') {
        Some((name, n)) => {
            (name, n.parse::<u8>().map_err(|_| anyhow!("topology '{spec}': path count '{n}' is not 1..=8"))?)
        }
        None => (spec, 2),
    };
    if !(1..=8).contains(&n) {
        bail!("topology '{spec}': path count must be 1..=8");
    }
    let mk = |dev: String, a: [u8; 4], p: [u8; 4]| PathSpec {
        dev,
        addr: IfAddr { addr: IpAddr::from(a), prefix: 24 },
        peer: IpAddr::from(p),
        mtu: 1500,
        flags: DEFAULT_FLAGS,
    };
    Ok(match name {
        // tests/src/lab.rs: side A's path i is 10.(100+i).0.2 behind a TUN with 10.(100+i).0.1.
        "lab-a" => (1..=n).map(|i| mk(format!("mpta{i}"), [10, 100 + i, 0, 2], [10, 100 + i, 0, 1])).collect(),
        "lab-b" => (1..=n).map(|i| mk(format!("mptb{i}"), [10, 200 + i, 0, 2], [10, 200 + i, 0, 1])).collect(),
        // `mptun lab`: client path i 10.9.i.2 (TUN 10.9.i.1), server one address 10.8.1.2 (TUN 10.8.1.1).
        "linkem-client" => (1..=n).map(|i| mk(format!("mptc{i}"), [10, 9, i, 2], [10, 9, i, 1])).collect(),
        "linkem-server" => vec![mk("mpts1".into(), [10, 8, 1, 2], [10, 8, 1, 1])],
        _ => bail!("unknown topology '{name}' (known: {TOPOLOGIES})"),
    })
}

/// Creates the TUN devices of `paths` in the current namespace (one per
/// distinct name, carrying the peers of all its paths) and returns
/// `(mptun address, device)` pairs for the stack builder.
pub fn create_tuns(paths: &[PathSpec]) -> Result<Vec<(IpAddr, Arc<dyn PacketIo>)>> {
    let mut seen = Vec::new();
    for p in paths {
        if seen.contains(&p.addr.addr) {
            bail!("address {} given for two paths", p.addr.addr);
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
                let d: Arc<dyn PacketIo> = Arc::new(TunDevice::create(&cfg).map_err(|e| tun_error(&p.dev, e))?);
                devs.push((p.dev.clone(), d.clone()));
                d
            }
        };
        out.push((p.addr.addr, dev));
    }
    Ok(out)
}

/// One line that says what to do about it.
fn tun_error(dev: &str, e: std::io::Error) -> anyhow::Error {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let text = e.to_string();
    if !std::path::Path::new("/dev/net/tun").exists() {
        return anyhow!("cannot create TUN device {dev}: /dev/net/tun does not exist (load the tun module)");
    }
    if !root
        && (e.kind() == std::io::ErrorKind::PermissionDenied
            || text.contains("ermission")
            || text.contains("not permitted"))
    {
        return anyhow!(
            "cannot create TUN device {dev}: {text} (needs root or CAP_NET_ADMIN; --kernel measures the kernel's stack without TUN)"
        );
    }
    if text.contains("busy") || text.contains("exists") {
        return anyhow!("cannot create TUN device {dev}: {text} (a device of that name is in use)");
    }
    anyhow!("cannot create TUN device {dev}: {text}")
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
        assert_eq!(p.flags, EndpointFlags { signal: true, subflow: false, backup: true });
        assert_eq!(flags_text(p.flags), "signal backup");
        let p: PathSpec = "dev=t,addr=10.0.2.2,flags=subflow+backup".parse().unwrap();
        assert_eq!(p.flags, EndpointFlags { signal: false, subflow: true, backup: true });
        let p: PathSpec = "dev=t,addr=10.0.2.2,flags=signal|subflow".parse().unwrap();
        assert_eq!(p.flags, EndpointFlags { signal: true, subflow: true, backup: false });
        let p: PathSpec = "dev=t,addr=10.0.2.2,flags=none".parse().unwrap();
        assert_eq!(flags_text(p.flags), "none");
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
            ("dev=tun0,addr=10.0.1.2,flags=fullmesh", "no endpoint flag"),
            ("dev=tun0,addr=10.0.1.2,laser", "nor a flag"),
        ] {
            let e = format!("{:#}", s.parse::<PathSpec>().unwrap_err());
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn topologies() {
        let a = topology("lab-a").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].addr.addr.to_string(), "10.102.0.2");
        assert_eq!(topology("lab-b:3").unwrap()[2].peer.to_string(), "10.203.0.1");
        assert_eq!(topology("linkem-server").unwrap().len(), 1);
        assert!(topology("nope").unwrap_err().to_string().contains("unknown topology"));
        assert!(topology("lab-a:9").is_err());
        assert!(topology("lab-a:x").is_err());
    }
}
