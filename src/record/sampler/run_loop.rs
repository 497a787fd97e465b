//! The sampling loop (`Sampler::run`), on the thread a `Session` starts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::super::clock::monotonic_us;
use super::{RecordStats, Sampler, JOURNAL_SYNC_US, MAX_BACKLOG_TICKS};

impl Sampler {
    /// Runs the sampling loop until `stop` is set or the duration has passed, then
    /// finishes the file.
    pub fn run(mut self, stop: &AtomicBool) -> RecordStats {
        let interval = self.opts.interval_us.max(1);
        let deadline = self
            .opts
            .duration
            .map(|d| self.start_us + d.as_micros() as u64);
        let mut next = self.start_us + interval;
        let mut next_sync = self.start_us + JOURNAL_SYNC_US;
        let mut failure = None;
        // Wake up on time: the default timer slack (50 us) is 5% of a 1 kHz interval.
        // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        // Best effort: a sampler that gets the CPU late samples the moments when the
        // profiled threads are descheduled, which skews attribution on a busy machine.
        // Raising its priority needs privileges; without them this silently fails.
        // SAFETY: gettid and setpriority on this thread only.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, -10);
        }
        while !stop.load(Ordering::Acquire) {
            let now = monotonic_us();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            if now < next {
                std::thread::park_timeout(Duration::from_micros(next - now));
                continue;
            }
            self.tick(now);
            self.progress
                .store(self.samples_so_far(), Ordering::Relaxed);
            if let Some(e) = self.write_error.take() {
                failure = Some(e);
                break;
            }
            // `--rotate`: a segment the finisher could not finish (a full disk) stops the
            // recording at once, rather than when this segment's own writes fail.
            if let Some(e) = self.rotation.as_ref().and_then(|r| r.finisher.failure()) {
                failure = Some(e.to_string());
                break;
            }
            let sync = now >= next_sync;
            if sync {
                next_sync = now + JOURNAL_SYNC_US;
                if let Err(e) = self.writer.sync_journal(now) {
                    eprintln!("tach: {e}; recording on without a crash journal");
                }
            }
            // `--rotate`: the next segment starts after this tick, before the next one.
            if self.segment_due(now, sync) {
                if let Err(e) = self.switch_segment(now) {
                    failure = Some(e);
                    break;
                }
            }
            next += interval;
            // Behind schedule (a late wake-up on a busy machine): catch up, but by at
            // most MAX_BACKLOG_TICKS; older ticks are skipped and show as missed.
            let backlog = MAX_BACKLOG_TICKS * interval;
            if now > next + backlog {
                next += (now - next - backlog) / interval * interval;
            }
        }
        let mut stats = self.finish(monotonic_us());
        if stats.error.is_none() {
            stats.error = failure;
        }
        stats
    }
}
