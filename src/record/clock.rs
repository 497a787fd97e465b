//! Clocks shared by the recorder and the Python writer.

/// Monotonic clock in microseconds (CPython's `time.perf_counter` on Linux).
pub fn monotonic_us() -> u64 {
    let ts = clock_now(libc::CLOCK_MONOTONIC);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// The wall-clock time (UTC, Unix epoch µs) at the monotonic instant `monotonic_us`:
/// the origin that a recording keeps in its footer.
///
/// The realtime clock is read between two monotonic reads, and the tightest of a few
/// such pairs is kept: a preemption between the reads would otherwise put up to a
/// scheduling slice of error into every wall-clock time of the recording.
pub fn wall_time_at(monotonic_us: u64) -> i64 {
    const PAIRS: usize = 5;
    let ns = |ts: libc::timespec| ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
    let mut best: Option<(i128, i128, i128)> = None;
    for _ in 0..PAIRS {
        let before = ns(clock_now(libc::CLOCK_MONOTONIC));
        let real = ns(clock_now(libc::CLOCK_REALTIME));
        let after = ns(clock_now(libc::CLOCK_MONOTONIC));
        let width = after - before;
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, real));
        }
    }
    let (_, mono_ns, real_ns) = best.unwrap_or_default();
    let origin_ns = real_ns - (mono_ns - monotonic_us as i128 * 1000);
    (origin_ns.div_euclid(1000)) as i64
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
