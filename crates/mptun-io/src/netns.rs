//! Network namespaces: create, enter (per thread), configure with `ip`.
//!
//! `setns(2)` with `CLONE_NEWNET` switches only the calling thread, and a
//! thread cannot be trusted to switch back (a panic half-way would leave a
//! pooled thread in the wrong namespace), so every namespaced operation runs
//! on a fresh thread that is discarded afterwards. Sockets and TUN fds keep
//! the namespace they were created in, so they can be handed back to any
//! thread and used there.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Output};

use crate::tun::{TunConfig, TunDevice};

/// Where `ip netns add` bind-mounts named namespaces.
const NETNS_RUN_DIR: &str = "/run/netns";

/// Named network namespaces as managed by `ip netns`.
pub struct Netns;

impl Netns {
    /// Creates namespace `name` (`ip netns add`); it is deleted when the
    /// guard drops, so a failing test does not leak namespaces.
    pub fn create(name: &str) -> io::Result<NetnsGuard> {
        validate_name(name)?;
        run_ip(None, ["netns", "add", name])?;
        let guard = NetnsGuard { name: name.to_owned() };
        // Loopback is down in a new namespace; most tests expect it up.
        ip(name, ["link", "set", "lo", "up"])?;
        Ok(guard)
    }

    /// Opens the namespace's handle (`/run/netns/NAME`) for `setns`.
    pub fn open(name: &str) -> io::Result<OwnedFd> {
        validate_name(name)?;
        let f = File::open(Self::path(name))
            .map_err(|e| io::Error::new(e.kind(), format!("open network namespace {name:?}: {e}")))?;
        Ok(OwnedFd::from(f))
    }

    /// Path of the namespace's bind mount.
    pub fn path(name: &str) -> PathBuf {
        PathBuf::from(NETNS_RUN_DIR).join(name)
    }

    /// Whether namespace `name` exists.
    pub fn exists(name: &str) -> bool {
        validate_name(name).is_ok() && Self::path(name).exists()
    }
}

fn validate_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() > 64 || name.starts_with('.') || name.contains(['/', '\0', ' ']) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad namespace name {name:?}")));
    }
    Ok(())
}

/// Owns a namespace created by [`Netns::create`]; deletes it on drop.
#[derive(Debug)]
pub struct NetnsGuard {
    name: String,
}

impl NetnsGuard {
    /// The namespace name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS...`.
    pub fn ip<I, S>(&self, args: I) -> io::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        ip(&self.name, args)
    }

    /// Sets a sysctl inside this namespace; see [`sysctl`].
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        sysctl(&self.name, key, value)
    }

    /// Runs `f` on a thread inside this namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        run_in_netns(&self.name, f)
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        // Deleting the namespace also deletes every interface in it (veth
        // peers in other namespaces go with them).
        if let Err(e) = run_ip(None, ["netns", "del", &self.name]) {
            eprintln!("warning: could not delete network namespace {}: {e}", self.name);
        }
    }
}

/// Runs `f` on a dedicated thread that first entered namespace `name`, and
/// returns its result. The thread ends afterwards, so no other code ever
/// runs in the wrong namespace.
pub fn run_in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let ns = Netns::open(name)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            enter(&ns)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Moves the calling thread into the namespace behind `ns`.
fn enter(ns: &OwnedFd) -> io::Result<()> {
    // SAFETY: setns only reads the fd, which `ns` keeps open for the call.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates a TUN device inside namespace `ns` (on a thread that entered it)
/// and registers it with the caller's tokio runtime.
pub fn spawn_tun_in_netns(ns: &str, config: &TunConfig) -> io::Result<TunDevice> {
    let (dev, name) = run_in_netns(ns, || config.build_here())??;
    TunDevice::register(dev, name, config, Some(ns.to_owned()))
}

/// Sets sysctl `key` (dotted, e.g. `net.ipv4.ip_forward`) to `value` inside
/// namespace `ns`. `/proc/sys/net` resolves to the namespace of the thread
/// that opens it, so this needs no `sysctl` binary and no `ip netns exec`.
pub fn sysctl(ns: &str, key: &str, value: &str) -> io::Result<()> {
    if key.is_empty() || key.contains(['/', '\0']) || key.split('.').any(|p| p.is_empty() || p == "..") {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad sysctl key {key:?}")));
    }
    let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    run_in_netns(ns, || std::fs::write(&path, value))?
        .map_err(|e| io::Error::new(e.kind(), format!("sysctl {key}={value} in {ns}: {e}")))
}

/// Runs `ip -n NS ARGS...`; a non-zero exit becomes an error carrying the
/// command line and ip's stderr. Returns stdout.
pub fn ip<I, S>(ns: &str, args: I) -> io::Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    validate_name(ns)?;
    run_ip(Some(ns), args)
}

fn run_ip<I, S>(ns: Option<&str>, args: I) -> io::Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new("ip");
    if let Some(ns) = ns {
        cmd.arg("-n").arg(ns);
    }
    cmd.args(args);
    let Output { status, stdout, stderr } =
        cmd.output().map_err(|e| io::Error::new(e.kind(), format!("cannot run `ip` (is iproute2 installed?): {e}")))?;
    if !status.success() {
        let line: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return Err(io::Error::other(format!(
            "`{}` failed ({status}): {}",
            line.join(" "),
            String::from_utf8_lossy(&stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// Runs `ip ARGS...` in the process's own namespace, for read-only queries
/// (`ip netns list`). Never use it to change the root namespace.
#[cfg(any(test, feature = "testutil"))]
pub(crate) fn ip_here<I, S>(args: I) -> io::Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_ip(None, args)
}
