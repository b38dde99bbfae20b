//! A private, line-oriented Unix control socket: how a running `linkem`
//! takes `set a2b rate=3mbit`, and how a running `mptun serve`, `send` or
//! `proxy` takes `mptun pm`, `mptun ss` and `mptun nstat`.
//!
//! The socket is its owner's only: bound with mode 0600 whatever the umask
//! (under a temporary name, restricted, then renamed into place, so it is
//! never reachable with a wider mode), and every client is checked again
//! when it connects: its credentials (`SO_PEERCRED`) must be root's or the
//! server's own user, and the socket must still have mode 0600 and belong
//! to the server (someone who changed its mode is refused, not obeyed).
//! Each client is bounded as hostile input is: lines of at most
//! [`ControlLimits::max_line`] bytes, arriving whole within a timeout,
//! replies taken within another, and a bound on clients at once. A client
//! that breaks a bound is told why in one `error ...` line and closed; the
//! others, and what the server controls, go on undisturbed.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bounds on what one control client may hold: a client that never reads
/// its replies, trickles a line, or never closes must not lock out the
/// others, nor keep the server from exiting.
#[derive(Clone, Copy, Debug)]
pub struct ControlLimits {
    /// A line must arrive whole within this, counted from the previous
    /// reply (or the connection).
    pub line_timeout: Duration,
    /// A reply must be taken within this.
    pub write_timeout: Duration,
    /// Longest line, bytes (commands are a few dozen).
    pub max_line: usize,
    /// Clients served at once; one more is told so and closed.
    pub max_clients: usize,
}

impl Default for ControlLimits {
    fn default() -> Self {
        ControlLimits {
            line_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(5),
            max_line: 4096,
            max_clients: 8,
        }
    }
}

/// Why a client's line was not read.
#[derive(Debug)]
enum LineError {
    /// The client closed.
    Closed,
    TooLong,
    TimedOut,
    Io(io::Error),
}

/// One client of a [`ControlServer`]: its request lines, and the stream to
/// answer on.
pub struct Session {
    stream: UnixStream,
    pending: Vec<u8>,
    lim: ControlLimits,
    stop: Arc<AtomicBool>,
}

impl Session {
    /// The next non-empty line (without its newline), `None` when the
    /// client closed or the server stops. A line over the bound or not
    /// whole within the timeout is answered with an `error ...` line and
    /// ends the session (`None`).
    pub fn next_line(&mut self) -> io::Result<Option<String>> {
        let mut line = Vec::new();
        while !self.stopped() {
            let deadline = Instant::now() + self.lim.line_timeout;
            match read_line(&mut self.stream, &mut self.pending, &mut line, self.lim.max_line, deadline) {
                Ok(()) => {}
                Err(LineError::Closed) => return Ok(None),
                Err(LineError::TooLong) => {
                    writeln!(self.stream, "error line longer than {} bytes", self.lim.max_line)?;
                    return Ok(None);
                }
                Err(LineError::TimedOut) => {
                    let _ = writeln!(self.stream, "error no whole line within {:?}", self.lim.line_timeout);
                    return Ok(None);
                }
                Err(LineError::Io(e)) => return Err(e),
            }
            let text = String::from_utf8_lossy(&line);
            if !text.trim().is_empty() {
                return Ok(Some(text.into_owned()));
            }
        }
        Ok(None)
    }

    /// Where replies go (writes are bounded by
    /// [`ControlLimits::write_timeout`]).
    pub fn writer(&mut self) -> &mut UnixStream {
        &mut self.stream
    }

    /// The server is stopping: a session streaming replies (a monitor)
    /// should end.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Reads one line into `line` (without its newline) before `deadline`, at
/// most `max` bytes; bytes read past the newline stay in `pending`.
fn read_line(
    stream: &mut UnixStream,
    pending: &mut Vec<u8>,
    line: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
) -> Result<(), LineError> {
    line.clear();
    loop {
        if let Some(i) = pending.iter().position(|&b| b == b'\n') {
            line.extend(pending.drain(..=i).take(i));
            return if line.len() > max { Err(LineError::TooLong) } else { Ok(()) };
        }
        if pending.len() > max {
            return Err(LineError::TooLong);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LineError::TimedOut);
        }
        stream.set_read_timeout(Some(left)).map_err(LineError::Io)?;
        let mut buf = [0u8; 512];
        match io::Read::read(stream, &mut buf) {
            Ok(0) => return Err(LineError::Closed),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(LineError::TimedOut)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LineError::Io(e)),
        }
    }
}

/// Makes `path` free for a new socket: nothing there, or a socket no
/// server answers on (left by a process that died). Anything else is
/// refused: the path may name a file that is not ours to delete.
fn clear_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a socket: refusing to replace it"));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(io::ErrorKind::AddrInUse, "another server answers on this socket"));
    }
    std::fs::remove_file(path)
}

/// (device, inode) of what `path` names, if anything.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Binds a listener at `path` that only its owner can connect to (mode
/// 0600, whatever the umask): bound under a temporary name beside it,
/// restricted, then renamed into place, so that it is never reachable with
/// a wider mode.
fn bind_private(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let nonce: u64 =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
    let tmp = path.with_file_name(format!(".{}.{nonce:x}.tmp", name.to_string_lossy()));
    let listener = UnixListener::bind(&tmp)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// The uid of the process at the other end of `s` (`SO_PEERCRED`).
pub fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given;
    // the fd is a live socket borrowed for the call.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a connecting client is not served: it is neither root nor the
/// server's user, or the socket is no longer the private one bound.
fn refusal(path: &Path, s: &UnixStream) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = euid();
    match peer_uid(s) {
        Ok(uid) if uid == 0 || uid == me => {}
        Ok(uid) => return Some(format!("error permission denied: uid {uid} is neither root nor the server's user")),
        Err(e) => return Some(format!("error permission denied: no peer credentials ({e})")),
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.mode() & 0o777 == 0o600 && m.uid() == me => None,
        Ok(m) => Some(format!(
            "error {} has mode {:o} and owner {}, not 0600 and {me}: refused until it is private again",
            path.display(),
            m.mode() & 0o777,
            m.uid()
        )),
        Err(e) => Some(format!("error {}: {e}", path.display())),
    }
}

/// One client's place among [`ControlLimits::max_clients`].
struct ClientSlot(Arc<AtomicUsize>);

impl ClientSlot {
    fn take(n: &Arc<AtomicUsize>) -> ClientSlot {
        n.fetch_add(1, Ordering::Relaxed);
        ClientSlot(n.clone())
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a control server does with one client's session.
pub type Handler = dyn Fn(Session) -> io::Result<()> + Send + Sync;

/// A control socket served by a thread of its own (and one per client), so
/// that a slow client never holds back what the server controls; the path
/// is removed when it is dropped (if it is still the socket it bound).
pub struct ControlServer {
    path: PathBuf,
    id: Option<(u64, u64)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket, never anything else) and
    /// serves clients with `handler` until `stop` or the drop, within `lim`.
    /// `name` names the threads and the messages on stderr.
    pub fn start(
        path: &Path,
        name: &str,
        lim: ControlLimits,
        stop: Arc<AtomicBool>,
        handler: Arc<Handler>,
    ) -> io::Result<Self> {
        clear_stale_socket(path)?;
        let listener = bind_private(path)?;
        let id = file_id(path);
        listener.set_nonblocking(true)?;
        let clients = Arc::new(AtomicUsize::new(0));
        let (stop2, path2, name2) = (stop.clone(), path.to_path_buf(), name.to_owned());
        let thread = std::thread::Builder::new().name(format!("{name}-control")).spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_write_timeout(Some(lim.write_timeout));
                        if let Some(why) = refusal(&path2, &s) {
                            let _ = writeln!(s, "{why}");
                            continue;
                        }
                        if clients.load(Ordering::Relaxed) >= lim.max_clients {
                            let _ = writeln!(s, "error busy: {} clients already", lim.max_clients);
                            continue;
                        }
                        // Given back when the client's thread ends however it
                        // ends (a panicking handler too), or if it never starts.
                        let slot = ClientSlot::take(&clients);
                        let (handler, stop) = (handler.clone(), stop2.clone());
                        let who = name2.clone();
                        let session = Session { stream: s, pending: Vec::new(), lim, stop };
                        let spawned =
                            std::thread::Builder::new().name(format!("{name2}-ctl-client")).spawn(move || {
                                let _slot = slot;
                                if let Err(e) = handler(session) {
                                    eprintln!("{who}: control client: {e}");
                                }
                            });
                        if spawned.is_err() {
                            eprintln!("{name2}: control: no thread for a client");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => {
                        eprintln!("{name2}: control accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
        Ok(ControlServer { path: path.to_path_buf(), id, stop, thread: Some(thread) })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        // Client threads are left to their bounds: each ends at its next
        // line, timeout or write timeout, and none is waited for here.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Sends `command` to the control socket at `path` and returns the first
/// reply line.
pub fn send_command(path: &Path, command: &str) -> io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(s, "{command}")?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}
