//! What the sampler remembers of each thread from one tick to the next: guesses that
//! save reads (where its innermost frame was, 3.11's eval-loop C frames, which thread
//! state is the main thread's) and its open `/proc` status file. Threads not seen in a
//! tick are forgotten at its end.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::window::MAX_SLOTS;

/// Per-thread memory of the sampler, keyed by native thread id.
#[derive(Default)]
pub(super) struct ThreadMemo {
    /// `/proc/PID/task/TID/stat`, kept open (one `pread` per look).
    proc_stat: HashMap<u64, File>,
    /// Where its innermost frame was at the last sample, the guess that picks the pages
    /// of the next snapshot (3.11 would need a read to find it).
    last_frame: HashMap<u64, u64>,
    /// 3.11: the C frames of the eval loops it was last seen in, most recent first.
    cframes: HashMap<u64, [u64; MAX_SLOTS]>,
    /// Threads sampled this tick.
    seen: HashSet<u64>,
    /// (interpreter, thread state) of the main thread, once found.
    main_tstate: Option<(u64, u64)>,
    /// The first interpreter of the runtime's list at the last tick.
    first_interp: Option<u64>,
}

impl ThreadMemo {
    /// A tick starts: no thread seen yet.
    pub fn begin_tick(&mut self) {
        self.seen.clear();
    }

    /// Thread `tid` is sampled this tick.
    pub fn saw(&mut self, tid: u64) {
        self.seen.insert(tid);
    }

    /// Whether thread `tid` was sampled this tick.
    pub fn seen(&self, tid: u64) -> bool {
        self.seen.contains(&tid)
    }

    /// A tick ended: forgets the `/proc` handles and frame guesses of threads that are
    /// gone (not seen in it).
    pub fn forget_unseen(&mut self) {
        let seen = &self.seen;
        if self.proc_stat.len() > seen.len() {
            self.proc_stat.retain(|tid, _| seen.contains(tid));
        }
        if self.last_frame.len() > seen.len() {
            self.last_frame.retain(|tid, _| seen.contains(tid));
        }
    }

    pub fn last_frame(&self, tid: u64) -> Option<u64> {
        self.last_frame.get(&tid).copied()
    }

    pub fn set_last_frame(&mut self, tid: u64, frame: u64) {
        self.last_frame.insert(tid, frame);
    }

    /// 3.11: the C frames thread `tid` was last seen in, most recent first (0: none).
    pub fn cframes(&self, tid: u64) -> &[u64] {
        self.cframes.get(&tid).map_or(&[], |c| &c[..])
    }

    /// 3.11: thread `tid` was seen in these C frames (the one its thread state named,
    /// then the one current in the snapshot): each moves to the front.
    pub fn saw_cframes(&mut self, tid: u64, recent: [u64; 2]) {
        let seen = self.cframes.entry(tid).or_insert([0; MAX_SLOTS]);
        for c in recent {
            if c != 0 && seen[0] != c {
                if let Some(k) = seen.iter().position(|&s| s == c) {
                    seen[..=k].rotate_right(1);
                } else {
                    seen.rotate_right(1);
                    seen[0] = c;
                }
            }
        }
    }

    pub fn main_tstate(&self) -> Option<(u64, u64)> {
        self.main_tstate
    }

    pub fn set_main_tstate(&mut self, at: Option<(u64, u64)>) {
        self.main_tstate = at;
    }

    /// The first interpreter of the runtime's list, as the last tick found it: its
    /// fields are read with the runtime's, on the guess that it is still the first.
    pub fn first_interp(&self) -> Option<u64> {
        self.first_interp
    }

    pub fn set_first_interp(&mut self, interp: Option<u64>) {
        self.first_interp = interp;
    }

    /// Is thread `tid` of process `pid` running on a CPU right now (`R` in its
    /// `/proc/PID/task/TID/stat`, as CPython checks)? `None` when it cannot tell.
    pub fn on_cpu(&mut self, pid: u64, tid: u64) -> Option<bool> {
        let f = match self.proc_stat.entry(tid) {
            Entry::Occupied(f) => f.into_mut(),
            Entry::Vacant(v) => v.insert(File::open(format!("/proc/{pid}/task/{tid}/stat")).ok()?),
        };
        let mut buf = [0u8; 512];
        let n = f.read_at(&mut buf, 0).ok()?;
        let text = &buf[..n];
        let close = text.iter().rposition(|&b| b == b')')?;
        let state = *text.get(close + 2)?;
        Some(state == b'R')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cframes_move_to_the_front_and_gone_threads_are_forgotten() {
        let mut m = ThreadMemo::default();
        m.begin_tick();
        m.saw(7);
        m.saw(8);
        m.set_last_frame(7, 0x100);
        m.set_last_frame(8, 0x200);
        m.saw_cframes(7, [0xa, 0xb]);
        assert_eq!(&m.cframes(7)[..2], &[0xb, 0xa]);
        m.saw_cframes(7, [0xa, 0]);
        assert_eq!(&m.cframes(7)[..2], &[0xa, 0xb]);
        assert!(m.cframes(9).is_empty());
        m.begin_tick();
        m.saw(8);
        m.forget_unseen();
        assert_eq!((m.last_frame(7), m.last_frame(8)), (None, Some(0x200)));
    }

    #[test]
    fn this_thread_is_on_a_cpu() {
        let pid = std::process::id() as u64;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u64;
        let mut m = ThreadMemo::default();
        assert_eq!(m.on_cpu(pid, tid), Some(true));
        assert_eq!(m.on_cpu(pid, u32::MAX as u64), None);
    }
}
