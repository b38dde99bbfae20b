//! Real time for the link model, and a sleep that wakes at an absolute instant.
//!
//! The model speaks `mptun_time::Instant`; here that is CLOCK_MONOTONIC in nanoseconds, the
//! same clock the kernel stamps packets with, so release times computed from one packet's arrival
//! stay valid however long the forwarding loop took to get to it. Sleeping is done against an
//! absolute deadline (a `timerfd` armed with `TFD_TIMER_ABSTIME`, which a packet arrival can also
//! interrupt through `poll`) and the last microseconds are spun, because a relative timeout
//! accumulates the time spent computing it and timer slack rounds it up by ~50 µs.

use mptun_time::Instant;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The current CLOCK_MONOTONIC time.
pub fn now() -> Instant {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Instant::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Asks the kernel not to coalesce this thread's timers: the default 50 µs slack would alone
/// exhaust the release-error budget.
pub fn minimise_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Moves this thread to SCHED_FIFO at `priority`, so a busy CPU cannot hold a release back by a
/// scheduler tick. Fails without CAP_SYS_NICE.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: priority };
    // SAFETY: `p` is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A CLOCK_MONOTONIC timerfd that fires at absolute instants.
pub struct DeadlineTimer {
    fd: OwnedFd,
}

impl DeadlineTimer {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the returned fd is checked before being owned.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we exclusively own.
        Ok(DeadlineTimer { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Arms the timer to expire at `at` (an instant in the past expires immediately).
    pub fn arm(&self, at: Instant) -> io::Result<()> {
        let ns = at.as_nanos().max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ },
        };
        // SAFETY: valid fd and itimerspec; the old value is not requested.
        let r =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Consumes a pending expiry so the fd stops polling readable.
    pub fn clear(&self) {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a u64 from our own non-blocking timerfd; EAGAIN is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), &mut n as *mut u64 as *mut libc::c_void, 8) };
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Blocks until `fd` is readable or the timer expires. Returns whether `fd` is readable.
pub fn wait_readable_or_timer(fd: RawFd, timer: &DeadlineTimer) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: timer.raw_fd(), events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: `fds` is a valid array of two pollfds for the duration of the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    if fds[1].revents != 0 {
        timer.clear();
    }
    Ok(fds[0].revents & libc::POLLIN != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mptun_time::Duration;

    #[test]
    fn clock_is_monotonic_and_nanosecond_scaled() {
        let a = now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now();
        assert!(b - a >= Duration::from_millis(2));
        assert!(b - a < Duration::from_secs(1));
    }

    #[test]
    fn timer_fires_at_the_absolute_deadline_not_before() {
        minimise_timer_slack();
        let timer = DeadlineTimer::new().unwrap();
        // A pipe that never becomes readable stands in for the packet socket.
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors pipe() writes.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let deadline = now() + Duration::from_millis(3);
        timer.arm(deadline).unwrap();
        let readable = wait_readable_or_timer(p[0], &timer).unwrap();
        let woke = now();
        assert!(!readable);
        assert!(woke >= deadline, "woke {:?} early", deadline - woke);
        // SAFETY: closing the pipe ends we created.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }
}
