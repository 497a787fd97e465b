//! Clocks shared by the recorder and the Python writer.

/// Monotonic clock in microseconds (CPython's `time.perf_counter` on Linux).
pub fn monotonic_us() -> u64 {
    let ts = clock_now(libc::CLOCK_MONOTONIC);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// CPU time of the calling thread, in seconds.
pub fn thread_cpu_sec() -> f64 {
    let ts = clock_now(libc::CLOCK_THREAD_CPUTIME_ID);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn clock_now(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts
}
