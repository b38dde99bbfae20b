//! What this host tells the report about itself: the CPU time the process
//! used (`getrusage`) over a span of the test, for iperf3's
//! `cpu_utilization_percent`, and `uname` for its `system_info`.

use std::time::{Duration, Instant};

/// User and system CPU time of this process so far, in microseconds
/// (zeros if `getrusage` fails: the report shows 0 % rather than failing).
fn cpu_us() -> (u64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0);
    }
    let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// A span of wall time with the process's CPU time read at both its ends,
/// so that a utilisation divides the CPU time of one window by the length
/// of that same window: CPU spent before the span (setting up, waiting)
/// or after it (storing the last blocks) is never set against a shorter
/// wall time. `getrusage(RUSAGE_SELF)` counts every thread of the process,
/// as iperf3's figure does, so a utilisation may reach 100 % per CPU.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CpuSpan {
    wall: Instant,
    cpu: (u64, u64),
}

/// What a [`CpuSpan`] measured: its length and the CPU time within it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuUse {
    /// The span, in microseconds rounded up: CPU time, read in whole
    /// microseconds at both ends, then never exceeds it on one thread.
    pub(crate) wall_us: u64,
    pub(crate) user_us: u64,
    pub(crate) sys_us: u64,
}

impl CpuSpan {
    /// A span starting now (the clock first, so the CPU time read lies
    /// within the wall time).
    pub(crate) fn start() -> CpuSpan {
        let wall = Instant::now();
        CpuSpan { wall, cpu: cpu_us() }
    }

    /// When the span started.
    pub(crate) fn started(&self) -> Instant {
        self.wall
    }

    /// The span from its start to now (the CPU time first, for the same
    /// reason).
    pub(crate) fn until_now(&self) -> CpuUse {
        let cpu = cpu_us();
        let wall = self.wall.elapsed();
        within_cpus(
            CpuUse {
                wall_us: ceil_us(wall),
                user_us: cpu.0.saturating_sub(self.cpu.0),
                sys_us: cpu.1.saturating_sub(self.cpu.1),
            },
            online_cpus(),
        )
    }
}

/// The CPUs online: what all of a process's threads can run on at once.
fn online_cpus() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as u64
}

/// `u` with its CPU time cut, user and system in proportion, to what `cpus`
/// CPUs can run within its wall time. The kernel adds another thread's run
/// time to the process's at that thread's next tick or switch, so over a
/// span shorter than a tick (a test of a few KiB lasts microseconds) the
/// difference of two `getrusage` readings can hold time run before the span
/// began: more than the span could hold, an accounting lag, not CPU used.
fn within_cpus(u: CpuUse, cpus: u64) -> CpuUse {
    let cap = u.wall_us.saturating_mul(cpus);
    let total = u.user_us + u.sys_us;
    if total <= cap {
        return u;
    }
    let user_us = (u128::from(u.user_us) * u128::from(cap) / u128::from(total)) as u64;
    CpuUse { wall_us: u.wall_us, user_us, sys_us: cap - user_us }
}

fn ceil_us(d: Duration) -> u64 {
    d.as_nanos().div_ceil(1000).min(u128::from(u64::MAX)) as u64
}

/// `cpu_us` of CPU time over `wall_us` of wall time, in percent (0 for an
/// empty span: nothing was measured).
pub(crate) fn utilisation(cpu_us: u64, wall_us: u64) -> f64 {
    if wall_us == 0 {
        return 0.0;
    }
    cpu_us as f64 / wall_us as f64 * 100.0
}

/// `sysname nodename release machine`, as iperf3's `system_info` has it.
pub(crate) fn uname() -> String {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let f = |a: &[libc::c_char]| {
        let b: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    format!("{} {} {} {}", f(&u.sysname), f(&u.nodename), f(&u.release), f(&u.machine))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Busy for `d` of wall time on this thread.
    fn spin(d: Duration) {
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < d {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }

    fn cpus() -> u64 {
        // SAFETY: sysconf has no preconditions.
        (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as u64
    }

    /// CPU time spent before a span is not in it, however short the span:
    /// 100 ms of it just before adds nothing. What a span holds is at most
    /// what this machine's CPUs give in its time, less than a few ticks
    /// more: other threads of this process (other tests) still running
    /// have their time read only at a tick, and one may land in the span.
    #[test]
    fn a_span_counts_only_the_cpu_time_within_it() {
        let ticks_us = 40_000;
        for within in [Duration::ZERO, Duration::from_micros(50), Duration::from_millis(3)] {
            spin(Duration::from_millis(100));
            let span = CpuSpan::start();
            spin(within);
            let u = span.until_now();
            assert!(u.wall_us >= within.as_micros() as u64, "{u:?}");
            assert!(
                u.user_us + u.sys_us <= cpus() * u.wall_us + ticks_us,
                "{u:?} after 100 ms of CPU before the span ({within:?} in it)"
            );
        }
    }

    #[test]
    fn cpu_time_beyond_what_the_cpus_can_run_in_the_span_is_cut() {
        let u = CpuUse { wall_us: 4, user_us: 3, sys_us: 10 };
        assert_eq!(within_cpus(u, 2), CpuUse { wall_us: 4, user_us: 1, sys_us: 7 });
        let fits = CpuUse { wall_us: 4, user_us: 3, sys_us: 5 };
        assert_eq!(within_cpus(fits, 2), fits);
        assert_eq!(within_cpus(CpuUse { wall_us: 0, user_us: 5, sys_us: 0 }, 2).user_us, 0);
    }

    #[test]
    fn utilisation_is_cpu_over_wall() {
        assert_eq!(utilisation(500, 1000), 50.0);
        assert_eq!(utilisation(3000, 1000), 300.0);
        assert_eq!(utilisation(7, 0), 0.0, "an empty span measured nothing");
        assert_eq!(ceil_us(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_us(Duration::from_nanos(3000)), 3);
        assert_eq!(ceil_us(Duration::from_nanos(3001)), 4);
    }
}
