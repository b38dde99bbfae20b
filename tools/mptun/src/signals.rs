//! SIGINT and SIGTERM as iperf3 treats them: the first ends the running
//! test cleanly (the sender stops and sends its trailer and DATA_FIN, a
//! receiver tells the sender to stop; both print what was measured) and the
//! process then exits with 128 + the signal (130, 143); a second signal
//! exits at once.
//!
//! The handler only records the signal (an atomic store is all a signal
//! handler may safely do, besides `_exit`); the code that runs a test polls
//! [`received`] or awaits [`wait`].

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    if SIGNAL.swap(sig, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Installs the handler for SIGINT and SIGTERM.
pub(crate) fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask;
        // the handler only touches an atomic and calls _exit.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The first signal received, if any.
pub(crate) fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The exit code for an interrupted run (iperf3's: 128 + signal).
pub(crate) fn exit_code() -> Option<u8> {
    received().map(|s| (128 + s).clamp(0, 255) as u8)
}

/// Its name, for messages.
pub(crate) fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// Completes once a signal has been received.
pub(crate) async fn wait() {
    while received().is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The error a command ends with when a signal cut it short before a test ran.
pub(crate) fn interrupted() -> anyhow::Error {
    anyhow::anyhow!("interrupted by {}", received().map_or("a signal", name))
}
