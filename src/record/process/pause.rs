//! Pausing one thread of our own process while the sampler reads it.
//!
//! The in-process sampler reads a running interpreter. A thread that runs Python code
//! while its frames are read can push or pop frames during the read, and every rule
//! that detects a torn read and retries or trims picks a later moment than the tick's,
//! which moves time away from short calls and generator resumes (docs/recorder.md).
//! Only the thread holding the GIL runs Python code, so pausing that one thread makes
//! every thread's Python stack hold still: the read describes one moment, as py-spy's
//! and CPython's `--blocking` modes do by stopping the whole process.
//!
//! The pause is a real-time signal sent to the thread with `rt_tgsigqueueinfo`, carrying
//! a sequence number. Its handler (async-signal-safe: atomics and `futex` only) says it
//! is paused, then waits until the sampler releases that sequence number, or until
//! [`MAX_PAUSE`] has passed, so that a sampler that never releases (it died, or it
//! waits for a lock the paused thread holds, such as a malloc arena's) cannot stop
//! the program for longer. A signal that arrives after the sampler gave up on it finds
//! its sequence number released and returns at once.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::record::native::Registers;

/// How long the sampler waits for the thread to say it is paused.
const ACK_TIMEOUT: Duration = Duration::from_millis(2);
/// The longest a thread stays paused.
const MAX_PAUSE: Duration = Duration::from_millis(20);
/// Both sides spin this long before sleeping on the futex: a thread woken from a futex
/// on a virtual machine takes tens of microseconds to run again, longer than a signal's
/// delivery or a tick's reads, and every one of them would be time the program stands.
const SPIN_NS: u64 = 200_000;

/// The sequence number the paused thread acknowledged.
static ACKED: AtomicU32 = AtomicU32::new(0);
/// Every sequence number up to this one is released.
static RELEASED: AtomicU32 = AtomicU32::new(0);
/// Set while a [`Pauser`] exists. The sequence numbers and the handler are process-wide,
/// so two pausers would release each other's threads: the second gets none.
static CLAIMED: AtomicBool = AtomicBool::new(false);
/// The signal used, once installed (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The paused thread's registers where the signal interrupted it (`--native`: where its
/// native walk starts), and the sequence number they belong to, written by the handler
/// before it acknowledges (a seqlock: the number is written before and after them).
static REGS_SEQ: AtomicU32 = AtomicU32::new(0);
static REGS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
/// Marks [`REGS_SEQ`] while the handler writes the registers.
const REGS_WRITING: u32 = u32::MAX;

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 with a valid timeout; it only reads
    // the word and may return early (EINTR, EAGAIN), which callers handle by looping.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// `a` is at or after `b` in wrapping sequence order.
fn reached(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) < u32::MAX / 2
}

/// The monotonic clock, async-signal-safe.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe and ts is writable.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The interrupted instruction, stack and frame pointers in a signal's context.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn interrupted_registers(context: *mut libc::c_void) -> Option<[u64; 3]> {
    if context.is_null() {
        return None;
    }
    // SAFETY: with SA_SIGINFO the kernel passes a valid ucontext_t as the third
    // argument; its general registers are only read.
    let g = unsafe { &(*(context as *const libc::ucontext_t)).uc_mcontext.gregs };
    Some([
        g[libc::REG_RIP as usize] as u64,
        g[libc::REG_RSP as usize] as u64,
        g[libc::REG_RBP as usize] as u64,
    ])
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn interrupted_registers(_: *mut libc::c_void) -> Option<[u64; 3]> {
    None
}

extern "C" fn on_pause(_: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo (SA_SIGINFO); errno is saved and
    // restored around the futex calls, as a handler must.
    unsafe {
        let errno = *libc::__errno_location();
        let seq = (*info).si_value().sival_ptr as usize as u32;
        if !reached(RELEASED.load(Ordering::Acquire), seq) {
            if let Some(regs) = interrupted_registers(context) {
                REGS_SEQ.store(REGS_WRITING, Ordering::Release);
                for (slot, value) in REGS.iter().zip(regs) {
                    slot.store(value, Ordering::Release);
                }
                REGS_SEQ.store(seq, Ordering::Release);
            }
            ACKED.store(seq, Ordering::Release);
            futex_wake(&ACKED);
            let start = now_ns();
            let limit = MAX_PAUSE.as_nanos() as u64;
            loop {
                let released = RELEASED.load(Ordering::Acquire);
                if reached(released, seq) {
                    break;
                }
                let waited = now_ns().saturating_sub(start);
                if waited >= limit {
                    break;
                }
                if waited < SPIN_NS {
                    std::hint::spin_loop();
                    continue;
                }
                futex_wait(&RELEASED, released, Duration::from_nanos(limit - waited));
            }
        }
        *libc::__errno_location() = errno;
    }
}

/// Installs the handler on a free real-time signal (one whose action is the default,
/// counting down from SIGRTMAX); `None` when there is none.
fn install() -> Option<i32> {
    static INSTALLED: OnceLock<Option<i32>> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        for sig in (lo + 2..=hi - 1).rev() {
            // SAFETY: sigaction with a null new action only reads the current one.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            // SAFETY: a zeroed sigaction with our handler, SA_SIGINFO for its signature,
            // SA_RESTART so that system calls the pause interrupts are restarted.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_pause as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            unsafe { libc::sigemptyset(&mut act.sa_mask) };
            if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } == 0 {
                SIGNAL.store(sig, Ordering::Relaxed);
                return Some(sig);
            }
        }
        None
    })
}

/// Holds one thread of the target still while a tick reads, one thread at a time:
/// [`Pauser`] in-process, [`crate::record::process::ptrace_pause::PtracePauser`] from outside.
pub trait ThreadPause: Send + std::fmt::Debug {
    /// Pauses thread `tid`, releasing any thread paused before. False when it could not
    /// be paused in time: the tick then reads running threads.
    fn pause(&mut self, tid: u64) -> bool;
    /// Releases the paused thread, if any.
    fn resume(&mut self);
    /// Ends a tick, whatever path it took: releases the paused thread and anything a
    /// pause left behind. Nothing of the target stays stopped between ticks.
    fn settle(&mut self) {
        self.resume();
    }
    /// Pauses that took effect.
    fn paused(&self) -> u64;
    /// Requests the thread did not honour in time.
    fn timeouts(&self) -> u64;
    /// The thread held paused now, if any.
    fn holding(&self) -> Option<u64>;
    /// `--native`: the registers of thread `tid`, held paused now, where its walk
    /// starts; None when it is not held or they cannot be read.
    fn registers(&self, tid: u64) -> Option<Registers>;
}

impl ThreadPause for Pauser {
    fn pause(&mut self, tid: u64) -> bool {
        Pauser::pause(self, tid)
    }
    fn resume(&mut self) {
        Pauser::resume(self)
    }
    fn paused(&self) -> u64 {
        self.paused
    }
    fn timeouts(&self) -> u64 {
        self.timeouts
    }
    fn registers(&self, tid: u64) -> Option<Registers> {
        Pauser::registers(self, tid)
    }
    fn holding(&self) -> Option<u64> {
        self.held.map(|(_, tid)| tid)
    }
}

/// Pauses threads of this process, one at a time; [`Pauser::resume`] (or drop)
/// releases the paused one.
#[derive(Debug)]
pub struct Pauser {
    signal: i32,
    pid: i32,
    /// The real user id the signal's sender names (looked up once, not at every pause).
    uid: u32,
    next: u32,
    /// The sequence number and thread id of the thread paused now.
    held: Option<(u32, u64)>,
    /// Pauses that took effect, and requests the thread did not acknowledge in time.
    pub paused: u64,
    pub timeouts: u64,
    /// How long a pause waits for the thread to acknowledge.
    ack_timeout: Duration,
}

impl Pauser {
    /// `None` when no real-time signal is free for the handler, or while another
    /// pauser exists (one recording per process pauses; Python allows only one).
    pub fn new() -> Option<Pauser> {
        let signal = install()?;
        CLAIMED
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(Pauser {
            signal,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            // SAFETY: getuid has no preconditions.
            uid: unsafe { libc::getuid() },
            next: RELEASED.load(Ordering::Acquire),
            held: None,
            paused: 0,
            timeouts: 0,
            ack_timeout: ACK_TIMEOUT,
        })
    }

    /// Waits up to `timeout` for each pause to take effect (`--native`: a thread not
    /// paused has no native stack, and on a busy machine a thread waiting for a CPU takes
    /// the signal only when it runs).
    pub fn with_ack_timeout(mut self, timeout: Duration) -> Pauser {
        self.ack_timeout = timeout;
        self
    }

    /// Pauses thread `tid` (releasing any thread paused before). False when the thread
    /// could not be paused in time (it is gone, blocks the signal, or is not scheduled).
    pub fn pause(&mut self, tid: u64) -> bool {
        self.resume();
        self.next = self.next.wrapping_add(1);
        let seq = self.next;
        // SAFETY: a zeroed siginfo with the fields rt_tgsigqueueinfo reads: signo,
        // SI_QUEUE as the code (a process may send itself any negative code), our pid
        // and uid, and the sequence number as the value.
        let sent = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            info.si_signo = self.signal;
            info.si_code = libc::SI_QUEUE;
            let raw = &mut info as *mut libc::siginfo_t as *mut u8;
            // Linux x86-64/aarch64 layout of the _rt member: pid (i32), uid (u32), then
            // sigval at offset 8 of the union, which starts at offset 16.
            *(raw.add(16) as *mut i32) = self.pid;
            *(raw.add(20) as *mut u32) = self.uid;
            *(raw.add(24) as *mut usize) = seq as usize;
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                self.pid,
                tid as libc::pid_t,
                self.signal,
                &info as *const libc::siginfo_t,
            ) == 0
        };
        if !sent {
            RELEASED.store(seq, Ordering::Release);
            return false;
        }
        let start = Instant::now();
        loop {
            let acked = ACKED.load(Ordering::Acquire);
            if acked == seq {
                self.held = Some((seq, tid));
                self.paused += 1;
                return true;
            }
            let waited = start.elapsed();
            if waited >= self.ack_timeout {
                // Released before it is acknowledged: a late signal returns at once.
                RELEASED.store(seq, Ordering::Release);
                futex_wake(&RELEASED);
                self.timeouts += 1;
                return false;
            }
            if waited.as_nanos() < u128::from(SPIN_NS) {
                std::hint::spin_loop();
                continue;
            }
            futex_wait(&ACKED, acked, self.ack_timeout - waited);
        }
    }

    /// Where thread `tid`, paused now, was interrupted: its registers as its handler
    /// saved them. None when it is not the paused thread, or the registers were
    /// overwritten meanwhile (a late signal's handler).
    pub fn registers(&self, tid: u64) -> Option<Registers> {
        let (seq, held) = self.held?;
        if held != tid || REGS_SEQ.load(Ordering::Acquire) != seq {
            return None;
        }
        let [ip, sp, bp] = [0, 1, 2].map(|i| REGS[i].load(Ordering::Acquire));
        (REGS_SEQ.load(Ordering::Acquire) == seq).then_some(Registers { ip, sp, bp })
    }

    /// Releases the paused thread, if any.
    pub fn resume(&mut self) {
        if let Some((seq, _)) = self.held.take() {
            RELEASED.store(seq, Ordering::Release);
            futex_wake(&RELEASED);
        }
    }
}

impl Drop for Pauser {
    fn drop(&mut self) {
        self.resume();
        // Nothing may stay paused on a sequence number we will not release.
        RELEASED.store(self.next, Ordering::Release);
        futex_wake(&RELEASED);
        CLAIMED.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// A pauser, once the other test's is dropped (tests run in parallel).
    fn pauser() -> Pauser {
        let start = Instant::now();
        loop {
            if let Some(p) = Pauser::new() {
                return p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no pauser: no free signal?"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn only_one_pauser_at_a_time() {
        let first = pauser();
        assert!(
            Pauser::new().is_none(),
            "a second pauser would release the first's thread"
        );
        drop(first);
        drop(pauser());
    }

    /// A busy thread stops counting while paused and goes on once resumed.
    #[test]
    fn a_paused_thread_holds_still_until_resumed() {
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU64::new(0));
        let worker = {
            let (count, stop, tid) = (count.clone(), stop.clone(), tid.clone());
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid.store(unsafe { libc::gettid() } as u64, Ordering::Release);
                while !stop.load(Ordering::Relaxed) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        while tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let mut p = pauser();
        let (mut held_still, mut checked) = (0, 0);
        for _ in 0..20 {
            if !p.pause(tid.load(Ordering::Acquire)) {
                continue;
            }
            let paused_at = std::time::Instant::now();
            let before = count.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(2));
            let still = count.load(Ordering::Relaxed) == before;
            // The handler lets go by itself after MAX_PAUSE (a sampler that died must not
            // hold the program): on a loaded machine this thread can sleep that long.
            if paused_at.elapsed() < MAX_PAUSE {
                checked += 1;
                held_still += usize::from(still);
            }
            p.resume();
            // Resumed: it counts again once scheduled (a loaded machine may take a while).
            let (after, resumed_at) = (count.load(Ordering::Relaxed), Instant::now());
            while count.load(Ordering::Relaxed) == after {
                assert!(resumed_at.elapsed() < Duration::from_secs(5), "not resumed");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        // On a loaded machine a request can time out (the thread was not scheduled
        // within ACK_TIMEOUT); every pause that took effect held the thread still.
        assert!(
            p.paused >= 5 && checked >= 5,
            "{p:?}, {checked} checked in time"
        );
        assert_eq!(held_still, checked, "{p:?}");
    }

    /// A thread that is gone cannot be paused, and nothing waits for it.
    #[test]
    fn a_gone_thread_is_not_paused() {
        let tid = std::thread::spawn(|| unsafe { libc::gettid() } as u64)
            .join()
            .unwrap();
        let mut p = pauser();
        assert!(!p.pause(tid));
    }
}
