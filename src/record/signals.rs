//! Ctrl-C and SIGTERM while tach records from outside: noted, so that the recording
//! stops and finishes its file instead of tach being killed.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked us to stop (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::Relaxed);
}

/// The signal that asked us to stop since the last call (0: none).
pub(crate) fn take_stop_signal() -> i32 {
    STOP_SIGNAL.swap(0, Ordering::Relaxed)
}

/// Ctrl-C and SIGTERM stop the recording (and finish the file) instead of killing tach.
pub(crate) fn catch_stop_signals() {
    STOP_SIGNAL.store(0, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                note_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}
