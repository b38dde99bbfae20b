//! The benches' namespaces: `netns-scripts/topo.sh`'s client and server
//! namespaces joined by routed veth paths, deleted again on drop (even when
//! the bench panics).

use std::io;
use std::path::PathBuf;
use std::process::Command;

/// A lab made by `topo.sh up --prefix PREFIX ARGS...`.
pub struct Topo {
    prefix: String,
}

fn topo_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netns-scripts/topo.sh")
}

impl Topo {
    /// `args` are `topo.sh up`'s options after `--prefix` (paths, octet, MTU, ...).
    pub fn up(prefix: &str, args: &[&str]) -> io::Result<Topo> {
        let t = Topo { prefix: prefix.to_owned() };
        let out = Command::new("bash").arg(topo_sh()).args(["up", "--prefix", prefix]).args(args).output()?;
        if !out.status.success() {
            return Err(io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        Ok(t)
    }

    /// The client namespace (where mptun's TUN devices go).
    pub fn cli(&self) -> String {
        format!("{}-cli", self.prefix)
    }

    /// The server namespace (the kernel peer).
    pub fn srv(&self) -> String {
        format!("{}-srv", self.prefix)
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(topo_sh()).args(["down", "--prefix", &self.prefix]).output();
    }
}
