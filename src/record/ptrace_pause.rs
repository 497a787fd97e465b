//! Pausing one thread of another process while the sampler reads it (`tach record
//! --pid`, blocking).
//!
//! The in-process pauser signals its own threads ([`super::pause`]); from outside, the
//! only way to hold a thread still is `ptrace`. Each pause seizes the thread holding the
//! GIL (`PTRACE_SEIZE`, which neither stops it nor sends it a signal), stops it with
//! `PTRACE_INTERRUPT`, waits for the stop, and the resume detaches. Between ticks no
//! thread is traced: a signal the program gets, a `fork` or an `exec` behaves as without
//! tach, and a tach that dies leaves nothing stopped.
//!
//! The stop is collected with `waitid(WSTOPPED)` only, never `WEXITED`: when the target
//! is tach's own child (`tach record -- python app.py`), its exit status stays for the
//! thread that waits for it.
//!
//! A thread that gets a signal while seized stops for that signal instead; it is just as
//! still, and the detach delivers the signal. A thread that does not stop in time (in
//! an uninterruptible sleep) is left with the interrupt pending and detached at the
//! next call, once it has stopped.

use std::time::{Duration, Instant};

use super::pause::ThreadPause;

/// How long a pause waits for the thread to stop.
const STOP_TIMEOUT: Duration = Duration::from_millis(2);
/// How long dropping the pauser waits for a late stop, so that it can detach.
const DROP_WAIT: Duration = Duration::from_millis(200);
/// `PTRACE_EVENT_STOP`, in the high byte of a stop's status.
const EVENT_STOP: i32 = 128;

#[derive(Debug)]
pub struct PtracePauser {
    /// The thread stopped now, and the signal its stop holds back (0: none).
    held: Option<(i32, i32)>,
    /// Threads seized and interrupted that had not stopped in time.
    late: Vec<i32>,
    paused: u64,
    timeouts: u64,
}

/// `waitid(P_PID, pid, options | WNOHANG)`: the reported child's (si_code, si_status),
/// or None when nothing is to report (or `pid` is not ours to wait for).
pub(super) fn wait_child(pid: i32, options: libc::c_int) -> Option<(i32, i32)> {
    // SAFETY: waitid writes a siginfo_t into a zeroed one we own.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            options | libc::WNOHANG,
        )
    };
    // SAFETY: si_pid and si_status are set by waitid for a reported child (si_pid 0
    // when none is).
    let (reported, status) = unsafe { (info.si_pid(), info.si_status()) };
    (r == 0 && reported != 0).then_some((info.si_code, status))
}

/// A stop collected for `tid`: Some(signal to deliver on detach), None if not stopped.
fn collect_stop(tid: i32) -> Option<i32> {
    let (_, status) = wait_child(tid, libc::WSTOPPED | libc::__WALL)?;
    let (signal, event) = (status & 0xff, status >> 8);
    // An interrupt or a group stop holds back no signal; a signal-delivery stop does.
    Some(if event == EVENT_STOP || signal == libc::SIGTRAP {
        0
    } else {
        signal
    })
}

fn ptrace(request: libc::c_uint, tid: i32, data: usize) -> Result<(), i32> {
    // SAFETY: SEIZE, INTERRUPT and DETACH take no pointers (addr 0, data an integer).
    let r = unsafe { libc::ptrace(request, tid, 0usize, data) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl PtracePauser {
    pub fn new() -> PtracePauser {
        PtracePauser {
            held: None,
            late: Vec::new(),
            paused: 0,
            timeouts: 0,
        }
    }

    /// Detaches the threads that stopped after their pause had timed out.
    fn reap_late(&mut self) {
        self.late.retain(|&tid| match collect_stop(tid) {
            Some(signal) => {
                let _ = ptrace(libc::PTRACE_DETACH, tid, signal as usize);
                false
            }
            // Gone (ESRCH): nothing to detach.
            None => ptrace(libc::PTRACE_INTERRUPT, tid, 0) == Ok(()),
        });
    }
}

impl Default for PtracePauser {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadPause for PtracePauser {
    fn pause(&mut self, tid: u64) -> bool {
        self.resume();
        self.reap_late();
        let tid = tid as i32;
        // Gone, traced by someone else this moment (a debugger, py-spy stopping the
        // process for its own sample) or not ours to trace: read it running. A refusal
        // is not final, as another tracer lets go.
        if ptrace(libc::PTRACE_SEIZE, tid, 0).is_err() {
            return false;
        }
        if ptrace(libc::PTRACE_INTERRUPT, tid, 0).is_err() {
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0);
            return false;
        }
        let start = Instant::now();
        loop {
            if let Some(signal) = collect_stop(tid) {
                self.held = Some((tid, signal));
                self.paused += 1;
                return true;
            }
            if start.elapsed() >= STOP_TIMEOUT {
                self.timeouts += 1;
                self.late.push(tid);
                return false;
            }
            std::hint::spin_loop();
        }
    }

    fn resume(&mut self) {
        if let Some((tid, signal)) = self.held.take() {
            let _ = ptrace(libc::PTRACE_DETACH, tid, signal as usize);
        }
    }

    fn settle(&mut self) {
        self.resume();
        self.reap_late();
    }

    fn paused(&self) -> u64 {
        self.paused
    }

    fn timeouts(&self) -> u64 {
        self.timeouts
    }
}

impl Drop for PtracePauser {
    fn drop(&mut self) {
        self.resume();
        let start = Instant::now();
        while !self.late.is_empty() && start.elapsed() < DROP_WAIT {
            self.reap_late();
            std::thread::sleep(Duration::from_micros(200));
        }
        // Still not stopped: the kernel detaches them when this thread exits.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Kills the child when the test ends, passed or not.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A child that counts in a busy loop is held still while paused, and runs again
    /// once resumed; its exit status stays with the parent that waits for it.
    #[test]
    fn pauses_and_resumes_a_child_process() {
        let mut child = Killed(
            Command::new("sh")
                .args(["-c", "i=0; while :; do i=$((i+1)); done"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let tid = child.0.id();
        let stat = || -> Vec<String> {
            let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).unwrap();
            let after = stat.rsplit(')').next().unwrap().to_string();
            after.split_whitespace().map(str::to_string).collect()
        };
        // utime + stime, in clock ticks.
        let cpu = || -> u64 {
            let f = stat();
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
        };
        std::thread::sleep(Duration::from_millis(50));
        let mut p = PtracePauser::new();
        let mut held = 0;
        // On a loaded machine the child may not run within STOP_TIMEOUT: try again later.
        for _ in 0..200 {
            if held == 3 {
                break;
            }
            if !p.pause(tid as u64) {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            held += 1;
            // 't': stopped by a tracer.
            assert_eq!(stat()[0], "t");
            let before = cpu();
            std::thread::sleep(Duration::from_millis(30));
            assert_eq!(cpu(), before, "a paused thread ran");
            p.resume();
            let resumed = Instant::now();
            while stat()[0] == "t" {
                assert!(resumed.elapsed() < Duration::from_secs(5), "not resumed");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(held, 3, "{p:?}");
        drop(p);
        child.0.kill().unwrap();
        // The exit is still ours to collect: the pauser never waits for exits.
        let status = child.0.wait().unwrap();
        assert!(!status.success());
        // A thread that is gone is not paused.
        let mut p = PtracePauser::new();
        assert!(!p.pause(tid as u64));
    }
}
