//! Operator control of a running `mptun serve`, `send` or `proxy`, as
//! `ip mptcp`, `ss -M` and `nstat` control and show the kernel's MPTCP.
//!
//! Each of those commands, on mptun's stack, answers on a Unix control
//! socket (root's or its user's only; [`mptun_io::ctl`]): by default
//! `PID.sock` in [`socket_dir`], or the path `--control` gives. `mptun pm`,
//! `mptun ss` and `mptun nstat` are its clients; they find the socket of
//! the only running process, or take `--socket`. One request line per
//! command ([`request`]), answered with JSON lines and `ok` or
//! `error MESSAGE` ([`server`]).

mod client;
pub(crate) mod request;
mod server;

pub(crate) use client::{run_nstat, run_pm, run_ss, NstatArgs, PmArgs, SsArgs};

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use clap::Args;
use mptun_io::ctl::ControlServer;

/// Where running commands put their control sockets unless
/// `MPTUN_CONTROL_DIR` says otherwise.
const DEFAULT_SOCKET_DIR: &str = "/run/mptun";

/// Where running commands put their control sockets by default, and where
/// `pm`/`ss`/`nstat` look for them: `$MPTUN_CONTROL_DIR` (a directory of
/// one's own keeps tests and concurrent users apart), else /run/mptun.
pub(crate) fn socket_dir() -> PathBuf {
    std::env::var_os("MPTUN_CONTROL_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_SOCKET_DIR), PathBuf::from)
}

/// `--control` / `--no-control` of the commands that run a stack.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct ControlArgs {
    /// Unix control socket for `mptun pm`, `mptun ss` and `mptun nstat`
    /// (mode 0600, root's or this user's only; default PID.sock in
    /// $MPTUN_CONTROL_DIR, else /run/mptun).
    #[arg(long, value_name = "PATH", conflicts_with = "no_control")]
    control: Option<PathBuf>,
    /// No control socket.
    #[arg(long)]
    no_control: bool,
}

impl ControlArgs {
    /// Opens the control socket of `stack` (none with `--no-control`). The
    /// default place needs its directory: where it cannot be made (not root),
    /// the command runs without one and says so; a path given that cannot
    /// be bound is an error.
    pub(crate) fn start(&self, stack: &mptun::Stack) -> Result<Option<ControlServer>> {
        if self.no_control {
            return Ok(None);
        }
        let (path, given) = match &self.control {
            Some(p) => (p.clone(), true),
            None => (socket_dir().join(format!("{}.sock", std::process::id())), false),
        };
        if !given {
            let dir = socket_dir();
            if let Err(e) = private_dir(&dir) {
                eprintln!("mptun: no control socket ({}: {e}); --control PATH puts it elsewhere", dir.display());
                return Ok(None);
            }
        }
        match server::start(stack, &path) {
            Ok(s) => {
                tracing::info!(path = %path.display(), "control socket");
                Ok(Some(s))
            }
            Err(e) if given => Err(anyhow!("--control {}: {e}", path.display())),
            Err(e) => {
                eprintln!("mptun: no control socket ({}: {e})", path.display());
                Ok(None)
            }
        }
    }
}

/// Makes `dir` (mode 0700) if it is missing; an existing one must not be
/// writable by others, who could put their own socket in our place.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::metadata(dir)?;
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if m.uid() != me || m.mode() & 0o022 != 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("owned by uid {} with mode {:o}: not private", m.uid(), m.mode() & 0o777),
                ));
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}
