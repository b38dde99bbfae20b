//! What this host tells the report about itself: the CPU time the process
//! used (`getrusage`), for iperf3's `cpu_utilization_percent`, and `uname`
//! for its `system_info`.

/// User and system CPU time of this process so far, in microseconds
/// (zeros if `getrusage` fails: the report shows 0 % rather than failing).
pub(crate) fn cpu_us() -> (u64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0);
    }
    let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
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
