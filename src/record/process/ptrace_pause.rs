//! Pausing one thread of another process while the sampler reads it (`tach record
//! --pid`, blocking).
//!
//! The in-process pauser signals its own threads ([`crate::record::process::pause`]); from outside, the
//! only way to hold a thread still is `ptrace`. Each pause seizes the thread holding the
//! GIL (`PTRACE_SEIZE`, which neither stops it nor sends it a signal), stops it with
//! `PTRACE_INTERRUPT`, waits for the stop, and the resume detaches. Between ticks no
//! thread is traced: a signal the program gets, a `fork` or an `exec` behaves as without
//! tach, and a tach that dies leaves nothing stopped.
//!
//! A thread that gets a signal while seized stops for that signal instead; it is just as
//! still, and the detach delivers the signal. A thread that does not stop in time (in
//! an uninterruptible sleep) is left with the interrupt pending and detached at the
//! next call, once it has stopped.
//!
//! A thread that exits while seized (it ends, or the process exits while the thread is
//! stopped or on its way to the stop) cannot be detached: it stays a zombie, reported
//! to its tracer only, until the tracer collects its exit. Until then the kernel does not
//! release it, and a process leader whose thread group is not empty is not reported to
//! its parent either: a `tach record -- python app.py` whose program had exited waited
//! for it forever (docs/recorder.md). So every thread seized and not detached is kept
//! ([`PtracePauser::loose`]) and, at the next call, detached once stopped or its exit
//! collected (`waitid(WEXITED)`), which is what the kernel does itself for an untraced
//! thread. The one exit never collected here is the leader's (the thread whose id is
//! the process id): that is the process's exit status, which belongs to its parent (tach
//! itself for `tach record --`). A traced leader's exit reaches the parent once the
//! tracer's thread exits, and tach stops sampling when the leader is a zombie.

use crate::record::native::Registers;
use std::time::{Duration, Instant};

use crate::record::process::pause::ThreadPause;

/// How long a pause waits for the thread to stop.
const STOP_TIMEOUT: Duration = Duration::from_millis(2);
/// The same with `--native`, where a thread not stopped has no native stack: a thread
/// on a busy machine can wait that long for a CPU to take the stop on.
pub(crate) const NATIVE_STOP_TIMEOUT: Duration = Duration::from_millis(20);
/// How long dropping the pauser waits for a late stop, so that it can detach.
const DROP_WAIT: Duration = Duration::from_millis(200);
/// `PTRACE_EVENT_STOP`, in the high byte of a stop's status.
const EVENT_STOP: i32 = 128;

#[derive(Debug)]
pub struct PtracePauser {
    /// The process whose threads are paused (the thread group id).
    pid: i32,
    /// The thread stopped now, and the signal its stop holds back (0: none).
    held: Option<(i32, i32)>,
    /// Threads seized and not detached: interrupted ones that had not stopped in time,
    /// and ones that could not be detached because they were exiting.
    loose: Vec<i32>,
    paused: u64,
    timeouts: u64,
    stop_timeout: Duration,
}

/// `waitid(P_PID, pid, options | WNOHANG)`: the reported child's (si_code, si_status),
/// or None when nothing is to report (or `pid` is not ours to wait for).
pub(crate) fn wait_child(pid: i32, options: libc::c_int) -> Option<(i32, i32)> {
    wait_tid(pid, options).ok().flatten()
}

/// `waitid(P_PID, tid, options | WNOHANG)`: Ok(Some((si_code, si_status))) for a
/// reported event, Ok(None) when there is nothing to report yet, Err(errno) when `tid`
/// is not (or no longer) ours to wait for (ECHILD).
fn wait_tid(tid: i32, options: libc::c_int) -> Result<Option<(i32, i32)>, i32> {
    // SAFETY: waitid writes a siginfo_t into a zeroed one we own.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            tid as libc::id_t,
            &mut info,
            options | libc::WNOHANG,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: si_pid and si_status are set by waitid for a reported child (si_pid 0
    // when none is).
    let (reported, status) = unsafe { (info.si_pid(), info.si_status()) };
    Ok((reported != 0).then_some((info.si_code, status)))
}

/// What became of a thread we trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traced {
    /// In a ptrace stop (collected now): the signal to deliver on detach (0: none).
    Stopped(i32),
    /// Not stopped yet.
    Running,
    /// Its exit was collected, or it is not ours to wait for any more (gone, or a
    /// zombie leader whose exit is its parent's): nothing to detach.
    Gone,
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
    /// A pauser for the threads of process `pid`.
    pub fn new(pid: i32) -> PtracePauser {
        PtracePauser {
            pid,
            held: None,
            loose: Vec::new(),
            paused: 0,
            timeouts: 0,
            stop_timeout: STOP_TIMEOUT,
        }
    }

    /// A pauser that waits up to `timeout` for each stop.
    pub fn with_stop_timeout(pid: i32, timeout: Duration) -> PtracePauser {
        let mut p = PtracePauser::new(pid);
        p.stop_timeout = timeout;
        p
    }

    /// Collects a stop or (not for the leader) an exit of traced thread `tid`.
    fn collect(&self, tid: i32) -> Traced {
        let exits = if tid == self.pid { 0 } else { libc::WEXITED };
        match wait_tid(tid, libc::WSTOPPED | exits | libc::__WALL) {
            Ok(Some((libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED, _))) => Traced::Gone,
            Ok(Some((_, status))) => {
                let (signal, event) = (status & 0xff, status >> 8);
                // An interrupt or a group stop holds back no signal; a signal-delivery
                // stop does.
                Traced::Stopped(if event == EVENT_STOP || signal == libc::SIGTRAP {
                    0
                } else {
                    signal
                })
            }
            Ok(None) => Traced::Running,
            // Gone, or a traced zombie leader (whose exit we leave alone).
            Err(libc::ECHILD) => Traced::Gone,
            Err(_) => Traced::Running,
        }
    }

    /// Detaches `tid`, stopped, delivering `signal`; a thread that cannot be detached
    /// (killed while stopped: it is exiting) is kept until its exit is collected.
    fn detach(&mut self, tid: i32, signal: i32) {
        if ptrace(libc::PTRACE_DETACH, tid, signal as usize).is_err() {
            self.loose.push(tid);
        }
    }

    /// Detaches the threads left traced that have stopped since, and collects the exits
    /// of those that exited.
    fn reap_loose(&mut self) {
        for tid in std::mem::take(&mut self.loose) {
            match self.collect(tid) {
                Traced::Stopped(signal) => self.detach(tid, signal),
                Traced::Running => self.loose.push(tid),
                Traced::Gone => {}
            }
        }
    }

    /// Threads seized and not yet detached or collected.
    #[cfg(test)]
    fn loose(&self) -> &[i32] {
        &self.loose
    }
}

/// How long a pause spins for the stop before it sleeps between looks (a running
/// thread stops within a few microseconds).
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);

impl ThreadPause for PtracePauser {
    fn pause(&mut self, tid: u64) -> bool {
        self.resume();
        self.reap_loose();
        let tid = tid as i32;
        // Only a thread of the target: a thread id read from a freed thread state may
        // name nothing, or a thread of another process (ESRCH). EPERM (no right to
        // signal it, though ptrace may be allowed: CAP_SYS_PTRACE) says it exists.
        // SAFETY: tgkill with signal 0 only checks that `tid` is a thread of `pid`.
        if unsafe { libc::syscall(libc::SYS_tgkill, self.pid, tid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            return false;
        }
        let late = self.stop_timeout > STOP_TIMEOUT;
        if let Some(k) = self.loose.iter().position(|&t| late && t == tid) {
            // With a long wait (`--native`): seized and interrupted at an earlier pause
            // that did not wait long enough, its stop is still coming (or it exits):
            // wait for that.
            self.loose.swap_remove(k);
        } else {
            // Gone, traced by someone else this moment (a debugger, py-spy stopping the
            // process for its own sample) or not ours to trace: read it running. A
            // refusal is not final, as another tracer lets go.
            let start = Instant::now();
            while let Err(e) = ptrace(libc::PTRACE_SEIZE, tid, 0) {
                // With a long wait (`--native`), another tracer's short stop (py-spy
                // sampling the same process) is waited out.
                if e != libc::EPERM || self.stop_timeout <= STOP_TIMEOUT {
                    return false;
                }
                if start.elapsed() >= self.stop_timeout {
                    self.timeouts += 1;
                    return false;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            if ptrace(libc::PTRACE_INTERRUPT, tid, 0).is_err() {
                self.detach(tid, 0);
                return false;
            }
        }
        let start = Instant::now();
        loop {
            match self.collect(tid) {
                Traced::Stopped(signal) => {
                    self.held = Some((tid, signal));
                    self.paused += 1;
                    return true;
                }
                Traced::Gone => return false,
                Traced::Running => {}
            }
            let waited = start.elapsed();
            if waited >= self.stop_timeout {
                self.timeouts += 1;
                self.loose.push(tid);
                return false;
            }
            if waited < SPIN_BEFORE_SLEEP {
                std::hint::spin_loop();
            } else if !late {
                // Not stopped yet: the thread may wait for the CPU this loop spins on (2
                // cores, the target and the sampler on one). Spinning on until the 2 ms
                // timeout left it to stop after it and stay stopped until the next tick
                // (12 ms of every 20 at 100 Hz, for seconds, measured). Yielding lets
                // it run on this CPU, at no cost when it is on another.
                std::thread::yield_now();
            } else {
                // `--native`, not stopped yet: the thread waits for a CPU to take the
                // stop on (more runnable threads than cores: `-a` stops OpenBLAS workers
                // beside the program's threads). Spinning would hold one of those CPUs,
                // for a scheduler slice (3 ms a stop, 146 ticks a second, measured);
                // sleeping lends it.
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    fn resume(&mut self) {
        if let Some((tid, signal)) = self.held.take() {
            self.detach(tid, signal);
        }
    }

    fn settle(&mut self) {
        self.resume();
        self.reap_loose();
    }

    fn paused(&self) -> u64 {
        self.paused
    }

    fn timeouts(&self) -> u64 {
        self.timeouts
    }

    fn holding(&self) -> Option<u64> {
        self.held.map(|(tid, _)| tid as u64)
    }

    fn registers(&self, tid: u64) -> Option<Registers> {
        if self.holding() != Some(tid) {
            return None;
        }
        crate::record::native::registers(tid as i32).ok()
    }
}

impl Drop for PtracePauser {
    fn drop(&mut self) {
        self.resume();
        let start = Instant::now();
        while !self.loose.is_empty() && start.elapsed() < DROP_WAIT {
            self.reap_loose();
            if !self.loose.is_empty() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // Still not stopped: the kernel detaches them (and releases any that exited)
        // when this thread exits.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Kills the child when the test ends, passed or not. Its exit is collected if it
    /// is reported within 2 s: a test that fails because the exit is not reported must
    /// fail, not wait for it.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let start = Instant::now();
            while matches!(self.0.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(2)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
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
        // The recorder's 2 ms wait for a stop is too short where other tests keep both
        // cores busy (CI: the spinning child then waits for a CPU longer than that at
        // every try): this test is about holding and releasing, so it waits as
        // `--native` does.
        let mut p = PtracePauser::with_stop_timeout(tid as i32, NATIVE_STOP_TIMEOUT);
        let mut held = 0;
        // On a loaded machine the child may not run within the wait: try again later.
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
        // A thread of another process than the pauser's is not paused (a thread id read
        // from a freed thread state can name one).
        let mut other = PtracePauser::new(std::process::id() as i32);
        assert!(!other.pause(tid as u64));
        assert_eq!(stat()[0], "R", "{other:?}");
        child.0.kill().unwrap();
        // The exit is still ours to collect: the pauser never waits for exits.
        let status = child.0.wait().unwrap();
        assert!(!status.success());
        // A thread that is gone is not paused.
        let mut p = PtracePauser::new(tid as i32);
        assert!(!p.pause(tid as u64));
    }

    /// Not a test: the multi-threaded target of the tests below, this test binary run
    /// again with `TACH_PTRACE_HELPER` set. `spin`: one thread spins, its id printed;
    /// `churn`: threads start, count a little and end, one after another. Either way it
    /// exits (every thread at once, as a Python program's exit does) when its standard
    /// input closes.
    #[test]
    #[ignore]
    fn helper_process() {
        use std::io::{Read, Write};
        let Ok(mode) = std::env::var("TACH_PTRACE_HELPER") else {
            return;
        };
        if mode == "spin" {
            std::thread::spawn(|| {
                // SAFETY: gettid has no preconditions.
                println!("helper-tid {}", unsafe { libc::gettid() });
                std::io::stdout().flush().unwrap();
                let mut i = 0u64;
                loop {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            });
        } else {
            std::thread::spawn(|| loop {
                std::thread::spawn(|| {
                    let mut s = 0u64;
                    for i in 0..20_000u64 {
                        s = std::hint::black_box(s.wrapping_add(i));
                    }
                })
                .join()
                .unwrap();
            });
            println!("helper-tid 0");
            std::io::stdout().flush().unwrap();
        }
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        std::process::exit(0);
    }

    /// The helper process in `mode`, and the thread id it printed (0 for `churn`).
    fn helper(mode: &str) -> (Killed, i32) {
        use std::io::BufRead;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "record::process::ptrace_pause::tests::helper_process",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TACH_PTRACE_HELPER", mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let tid = loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the helper said nothing"
            );
            // After libtest's "test ... " on the same line.
            if let Some((_, t)) = line.trim().split_once("helper-tid ") {
                break t.parse().unwrap();
            }
        };
        (Killed(child), tid)
    }

    /// Waits (up to 10 s, settling the pauser meanwhile as the sampler's ticks do) for
    /// the exit of `child` to be reported to its parent, without collecting it.
    fn exit_reported(p: &mut PtracePauser, child: &std::process::Child) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            p.settle();
            if matches!(
                wait_child(child.id() as i32, libc::WEXITED | libc::WNOWAIT),
                Some((libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED, _))
            ) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// A thread killed while paused (its process exits) cannot be detached; its exit is
    /// collected, so that the process's exit reaches the parent while the pauser lives.
    /// Before, it stayed a traced zombie and `tach record --` waited for its program
    /// forever.
    #[test]
    fn a_thread_killed_while_paused_does_not_hold_up_the_exit() {
        let (mut child, tid) = helper("spin");
        let pid = child.0.id() as i32;
        let mut p = PtracePauser::new(pid);
        let start = Instant::now();
        while !p.pause(tid as u64) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never paused: {p:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: kill with our child's pid.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(exit_reported(&mut p, &child.0), "{p:?}");
        assert!(p.loose().is_empty(), "{p:?}");
        let status = child.0.wait().unwrap();
        assert!(!status.success());
    }

    /// Threads that start and end all the time, each paused as the GIL holder would be
    /// (some end while seized): the process's exit still reaches its parent while the
    /// pauser lives, and none of its threads stays traced by us.
    #[test]
    fn threads_ending_while_paused_do_not_hold_up_the_exit() {
        let (mut child, _) = helper("churn");
        let pid = child.0.id() as i32;
        let mut p = PtracePauser::new(pid);
        let start = Instant::now();
        let mut tries = 0;
        while start.elapsed() < Duration::from_secs(2) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                break;
            };
            for t in tasks.flatten() {
                let tid: i32 = t.file_name().to_string_lossy().parse().unwrap_or(pid);
                if tid != pid {
                    tries += 1;
                    p.pause(tid as u64);
                    p.settle();
                }
            }
        }
        assert!(tries > 100 && p.paused() > 0, "{tries} tries, {p:?}");
        // None of its threads is left traced (a zombie thread would be).
        let me = std::process::id().to_string();
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let tracer = status
                .lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .map(str::trim);
            // Traced by one of our threads: the tracer id is a thread of this process.
            let ours = tracer.is_some_and(|t| {
                t != "0" && std::path::Path::new(&format!("/proc/{me}/task/{t}")).exists()
            });
            let tid = t.file_name().to_string_lossy().into_owned();
            assert!(
                !ours || p.loose().iter().any(|l| l.to_string() == tid),
                "{tid} {status}"
            );
        }
        drop(child.0.stdin.take());
        assert!(exit_reported(&mut p, &child.0), "{p:?}");
        assert_eq!(child.0.wait().unwrap().code(), Some(0));
    }
}
