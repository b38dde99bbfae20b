//! `--topology NAME[:N]`: named plans of `--path`s (whose syntax,
//! [`PathSpec`], the runtime crate parses for the CLI and the examples
//! alike), and the TUN devices of a stack created in the current namespace
//! with errors that say what to do about them.
//!
//! A TUN is a point where the kernel hands packets to us: the kernel's end
//! gets `peer` (default: the first other host address of the subnet), mptun
//! sources its subflows from `addr` in the same subnet, and the kernel
//! routes that subnet to the TUN. Several `--path`s naming the same device
//! put several addresses (paths) on one TUN.

use anyhow::{anyhow, bail, Result};
use std::net::IpAddr;
use std::sync::Arc;

pub(crate) use mptun::pathspec::{flags_text, PathSpec, DEFAULT_FLAGS};
use mptun_io::{IfAddr, PacketIo};

/// Named address plans, so a lab user need not spell out the paths.
pub(crate) const TOPOLOGIES: &str = "lab-a, lab-b (tests/src/lab.rs: two namespaces, N routed veth paths), \
linkem-client, linkem-server (the `mptun lab` plan over netns-scripts/lab/topo.sh)";

/// `--path SPEC`, as clap's value parser.
pub(crate) fn parse_path(s: &str) -> Result<PathSpec, mptun::pathspec::PathSpecError> {
    s.parse()
}

/// The paths of topology `name[:N]` (N paths, default 2).
pub(crate) fn topology(spec: &str) -> Result<Vec<PathSpec>> {
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
        _ => crate::error::bail_usage!("unknown topology '{name}' (known: {TOPOLOGIES})"),
    })
}

/// Creates the TUN devices of `paths` in the current namespace and
/// returns `(mptun address, device)` pairs for the stack builder.
pub(crate) fn create_tuns(paths: &[PathSpec]) -> Result<Vec<(IpAddr, Arc<dyn PacketIo>)>> {
    PathSpec::create_tuns(paths, None).map_err(tun_error)
}

/// One line that says what to do about it (`e` names the device).
fn tun_error(e: std::io::Error) -> anyhow::Error {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let text = e.to_string();
    if !std::path::Path::new("/dev/net/tun").exists() {
        return crate::error::environment(anyhow!("{text}: /dev/net/tun does not exist (load the tun module)"));
    }
    if !root
        && (e.kind() == std::io::ErrorKind::PermissionDenied
            || text.contains("ermission")
            || text.contains("not permitted"))
    {
        return crate::error::environment(anyhow!(
            "{text} (needs root or CAP_NET_ADMIN; --kernel measures the kernel's stack without TUN)"
        ));
    }
    if text.contains("busy") || text.contains("exists") {
        return anyhow!("{text} (a device of that name is in use)");
    }
    anyhow!("{text}")
}

#[cfg(test)]
mod tests {
    use super::*;

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
