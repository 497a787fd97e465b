//! Pausing (`RecordOptions::blocking`; `--native` too): the thread holding the GIL is
//! paused while a tick reads the stacks, so that every sample describes one moment.

use std::time::{Duration, Instant};

use super::super::native::Registers;
use crate::record::process::pause::{Pauser, ThreadPause};
use crate::record::process::ptrace_pause::{PtracePauser, NATIVE_STOP_TIMEOUT};

/// How long a held thread whose stack did not read runs before it is stopped again
/// (thousands of instructions: past any window in which its frames are half linked).
const STEP: Duration = Duration::from_micros(20);

/// The pauser, and the thread it paused this tick. A part of its own so that a tick's
/// end, and a tick that ended early, let go of the paused thread in one place.
pub(super) struct Pausing {
    /// Pauses the GIL holder during a tick: with a signal in-process, with ptrace from
    /// outside. `None`: the tick reads running threads.
    pub(super) pauser: Option<Box<dyn ThreadPause>>,
    /// The thread paused this tick and whether it was on a CPU just before (paused, it
    /// is in a signal handler or stopped: its scheduling state says nothing of its work).
    pub(super) paused_on_cpu: Option<(u64, bool)>,
}

impl Pausing {
    /// What pauses threads in process `pid`: nothing unless `blocking`; with `native`,
    /// ptrace from outside and the pause signal in-process, each given the time to stop
    /// (every sampled thread is stopped in turn).
    pub(super) fn new(pid: u64, blocking: bool, native: bool) -> Pausing {
        let pauser = (blocking || native)
            .then(|| pauser_for(pid, native))
            .flatten();
        Pausing {
            pauser,
            paused_on_cpu: None,
        }
    }

    /// Whether ticks pause threads at all.
    pub(super) fn enabled(&self) -> bool {
        self.pauser.is_some()
    }

    /// Lets the paused thread run again.
    pub(super) fn resume(&mut self) {
        if let Some(p) = &mut self.pauser {
            p.resume();
        }
        self.paused_on_cpu = None;
    }

    /// At a tick's end: a tick that ended early (a read error) must not leave a thread
    /// paused.
    pub(super) fn settle(&mut self) {
        if let Some(p) = &mut self.pauser {
            p.settle();
        }
        self.paused_on_cpu = None;
    }

    /// Whether thread `tid` was on a CPU just before it was paused; `None` when it is not
    /// the paused thread.
    pub(super) fn on_cpu_before(&self, tid: u64) -> Option<bool> {
        match self.paused_on_cpu {
            Some((paused, state)) if paused == tid => Some(state),
            _ => None,
        }
    }

    /// `--native`: stops thread `tid` unless it is stopped already (the one pauser
    /// stops each sampled thread in turn, releasing the one stopped before). Whether it
    /// is stopped.
    pub(super) fn stop(&mut self, tid: u64) -> bool {
        let Some(pauser) = self.pauser.as_mut() else {
            return false;
        };
        if pauser.holding() == Some(tid) {
            return true;
        }
        let stopped = pauser.pause(tid);
        self.paused_on_cpu = None;
        stopped
    }

    /// Lets thread `tid`, when it is the one held, run on a moment, then stops it again:
    /// a stopped thread whose stack did not read reads the same until it runs on. (3.11
    /// and 3.12 point the thread state at an eval loop's new C frame a few instructions
    /// before that frame names its Python frame: each call from C into Python, such as
    /// a ctypes callback, has that moment.) A thread that cannot be stopped again is
    /// read running, as without a pause.
    pub(super) fn step(&mut self, tid: u64) {
        let Some(pauser) = self.pauser.as_mut() else {
            return;
        };
        if pauser.holding() != Some(tid) {
            return;
        }
        pauser.resume();
        // Yielding, not spinning: with one CPU, the thread runs only when we give way.
        let start = Instant::now();
        while start.elapsed() < STEP {
            std::thread::yield_now();
        }
        pauser.pause(tid);
    }

    /// `--native`: the registers of thread `tid`, held paused now.
    pub(super) fn registers(&self, tid: u64) -> Option<Registers> {
        self.pauser.as_ref()?.registers(tid)
    }

    /// (pauses, pauses that timed out) so far, when ticks pause threads.
    pub(super) fn counts(&self) -> Option<(u64, u64)> {
        self.pauser.as_ref().map(|p| (p.paused(), p.timeouts()))
    }
}

/// Our own threads are paused with a signal, another process's with ptrace. With
/// `native` a thread has longer to take its pause: without it, it has no native stack.
fn pauser_for(pid: u64, native: bool) -> Option<Box<dyn ThreadPause>> {
    // SAFETY: getpid has no preconditions.
    if pid == unsafe { libc::getpid() } as u64 {
        // In-process, the signal's handler saves the registers where it interrupted the
        // thread, and the thread waits in it while its stack is walked in place.
        let pauser = Pauser::new()?;
        Some(Box::new(match native {
            true => pauser.with_ack_timeout(NATIVE_STOP_TIMEOUT),
            false => pauser,
        }))
    } else if native {
        Some(Box::new(PtracePauser::with_stop_timeout(
            pid as i32,
            NATIVE_STOP_TIMEOUT,
        )))
    } else {
        Some(Box::new(PtracePauser::new(pid as i32)))
    }
}
