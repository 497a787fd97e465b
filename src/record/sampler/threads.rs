//! One tick: every interpreter's thread list, the GIL and the garbage collector in a few
//! batched reads, then each thread's status and stack; with blocking, the thread holding
//! the GIL paused first (`Pausing` holds the pauser and the paused thread).

use crate::tach::filter::status::{
    GIL_REQUESTED, HAS_EXCEPTION, HAS_GIL, MAIN_THREAD, ON_CPU, UNKNOWN,
};

use crate::tach::ProfilingMode;

use super::async_tasks::AsyncPlan;
use super::window::ExceptionFields;
use super::{Sampler, MAX_INTERPRETERS, MAX_THREADS, READ_ATTEMPTS};
use crate::record::interpreter::asyncio::AsyncMode;
use crate::record::interpreter::layout::{field_i32, field_u64, Offsets};
use crate::record::process::memory::ReadError;

/// One thread at one tick, as the thread list gave it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ThreadAt {
    pub tstate: u64,
    /// Native thread id.
    pub tid: u64,
    pub interp_id: u32,
    pub now_us: u64,
    pub is_main: bool,
    /// Sampled without `--async-aware` (the main thread, or every one with
    /// `--all-threads`): its plain stack is written when it runs no asyncio loop.
    pub plain: bool,
    /// The GIL as read this tick, (locked, last holder): before 3.13 a thread state does
    /// not say whether it holds the GIL, this does.
    pub gil: (bool, u64),
}

/// What a read of one thread's stack needs to know: where its innermost frame pointer
/// lives, where a `<GC>` frame goes and which exception fields ride along.
pub(super) struct StackRead<'a> {
    pub tstate: u64,
    pub tid: u64,
    /// Address of the thread's current-frame pointer (`None`: the thread has no frames).
    pub slot: Option<u64>,
    /// 3.15: the frame that triggered a running collection (`<GC>` goes just inside it).
    pub gc_at: Option<u64>,
    /// Before 3.15: a collection runs in this thread, `<GC>` goes on top.
    pub gc_on_top: bool,
    pub fields: &'a ExceptionFields,
    /// `--async-aware`: the running task's coroutine frame, where the stack is cut
    /// (its callers are the event loop's).
    pub cut: Option<u64>,
    /// `--async-aware` on 3.11-3.13: the running task is found in the stack read.
    pub task_from_stack: bool,
}

/// Offset and length of the interpreter fields a tick reads (id, next, threads head).
pub(super) fn interp_span(o: &Offsets) -> (u64, usize) {
    let lo = o.interp.id.min(o.interp.next).min(o.interp.threads_head);
    let hi = o.interp.id.max(o.interp.next).max(o.interp.threads_head) + 8;
    (lo, (hi - lo) as usize)
}

/// Appends the reads of interpreter `interp`'s fields a tick needs: its id, next and
/// threads head; its GIL (from 3.12); with `gc`, whether a collection runs and (3.15)
/// the frame that triggered it. Returns where the collector's fields start in the bytes
/// read, and whether they are read.
pub(super) fn push_interp_ranges(
    o: &Offsets,
    gc: bool,
    interp: u64,
    ranges: &mut Vec<(u64, usize)>,
) -> (usize, bool) {
    let (ilo, ilen) = interp_span(o);
    let first = ranges.len();
    ranges.push((interp.wrapping_add(ilo), ilen));
    if let (false, Some((lo, len))) = (o.gil.in_runtime, gil_span(o)) {
        ranges.push((interp.wrapping_add(lo), len));
    }
    let gc_at = ranges[first..].iter().map(|r| r.1).sum::<usize>();
    match (gc, o.interp.gc_collecting) {
        (true, Some(c)) => {
            ranges.push((interp.wrapping_add(c), 4));
            if let Some(f) = o.interp.gc_frame {
                ranges.push((interp.wrapping_add(f), 8));
            }
            (gc_at, true)
        }
        _ => (gc_at, false),
    }
}

/// Offset (from the runtime or the interpreter) and length of the GIL's `locked` flag
/// and `last_holder`, when known.
pub(super) fn gil_span(o: &Offsets) -> Option<(u64, usize)> {
    let (l, h) = (o.gil.locked?, o.gil.holder?);
    let lo = l.min(h);
    let hi = (l + 4).max(h + 8);
    Some((lo, (hi - lo) as usize))
}

/// (locked, holder) from the bytes of [`gil_span`] starting at offset `lo`.
pub(super) fn gil_fields(o: &Offsets, bytes: &[u8], lo: u64) -> (bool, u64) {
    let locked = o
        .gil
        .locked
        .and_then(|off| field_i32(bytes, off - lo))
        .unwrap_or(0);
    let holder = o
        .gil
        .holder
        .and_then(|off| field_u64(bytes, off - lo))
        .unwrap_or(0);
    (locked != 0, holder)
}

impl Sampler {
    /// Whether a tick looks at every thread (`-a`; async-aware, since any thread may
    /// run a loop), not only the main thread.
    pub(super) fn visits_every_thread(&self) -> bool {
        self.opts.all_threads || self.tasks.enabled()
    }

    pub(super) fn sample_all(&mut self, now_us: u64) -> Result<bool, ReadError> {
        let o = self.target.layout.offsets().clone();
        let mut ok = true;
        // One read for the runtime's fields (and 3.11's GIL, which lives there), one per
        // interpreter for its fields (and the GIL from 3.12): system calls are the cost.
        let runtime = self.target.runtime;
        let gil = gil_span(&o);
        let mut ranges = vec![(runtime.wrapping_add(o.runtime.interpreters_head), 8)];
        if let (true, Some((lo, len))) = (o.gil.in_runtime, gil) {
            ranges.push((runtime.wrapping_add(lo), len));
        }
        let runtime_ranges = ranges.len();
        let visit_all = self.visits_every_thread();
        // In the same system call, on the guess that they have not moved since the last
        // tick: the first interpreter's fields and, sampling the main thread only, its
        // thread state. Checked below; a wrong guess costs the reads it saved.
        let guessed_interp = self.memo.first_interp();
        let guessed_tstate = match (guessed_interp, self.memo.main_tstate()) {
            (Some(first), Some((i, ts))) if !visit_all && i == first => Some(ts),
            _ => None,
        };
        // (the guessed interpreter, its first range, how many).
        let mut interp_fields = None;
        if let Some(first) = guessed_interp {
            let at = ranges.len();
            push_interp_ranges(&o, self.opts.gc, first, &mut ranges);
            interp_fields = Some((first, at, ranges.len() - at));
        }
        if let Some(ts) = guessed_tstate {
            ranges.push((ts, self.bufs.tstate.len()));
        }
        let mut buf = std::mem::take(&mut self.bufs.small);
        buf.resize(ranges.iter().map(|r| r.1).sum(), 0);
        let got = self.target.mem.read_many(&ranges, &mut buf);
        if got < runtime_ranges {
            self.bufs.small = buf;
            return Err(ReadError::Invalid("runtime unreadable"));
        }
        let mut interp = field_u64(&buf, 0).unwrap_or(0);
        let mut gil_state = match (o.gil.in_runtime, gil) {
            (true, Some((lo, _))) => Some(gil_fields(&o, &buf[8..], lo)),
            _ => None,
        };
        self.memo.set_first_interp((interp != 0).then_some(interp));
        // The guessed interpreter's fields, when it is still the first: (where they
        // start in `buf`, their length).
        let mut prefetched = None;
        if let Some((first, at, count)) = interp_fields {
            if first == interp && got >= at + count {
                let start: usize = ranges[..at].iter().map(|r| r.1).sum();
                let len: usize = ranges[at..at + count].iter().map(|r| r.1).sum();
                prefetched = Some((start, len));
            }
        }
        // The main thread's state, read in the same call (a pause below reads it again):
        // the last range.
        let mut tstate_read = None;
        if let (Some(ts), Some(_)) = (guessed_tstate, prefetched) {
            if got == ranges.len() {
                let len = self.bufs.tstate.len();
                let start = buf.len() - len;
                self.bufs.tstate.copy_from_slice(&buf[start..]);
                tstate_read = Some(ts);
            }
        }
        self.memo.begin_tick();
        let (ilo, ilen) = interp_span(&o);
        let mut n_interp = 0;
        while interp != 0 && n_interp < MAX_INTERPRETERS {
            n_interp += 1;
            ranges.clear();
            let (gc_at, gc_fields) = push_interp_ranges(&o, self.opts.gc, interp, &mut ranges);
            let len: usize = ranges.iter().map(|r| r.1).sum();
            match prefetched.take() {
                Some((start, plen)) if n_interp == 1 && plen == len => {
                    buf.copy_within(start..start + len, 0);
                    buf.truncate(len);
                }
                _ => {
                    buf.resize(len, 0);
                    if self.target.mem.read_many(&ranges, &mut buf) < ranges.len() {
                        ok = false;
                        break;
                    }
                }
            }
            (self.gc.collecting, self.gc.trigger) = if gc_fields {
                (
                    field_i32(&buf, gc_at as u64).unwrap_or(0) != 0,
                    field_u64(&buf, gc_at as u64 + 4).unwrap_or(0),
                )
            } else {
                (false, 0)
            };
            let field = |off: u64| field_u64(&buf, off - ilo).unwrap_or(0);
            let interp_id = field(o.interp.id) as u32;
            // `all`: a task left out of this interpreter's stacks makes the tick's error.
            let dropped_before = self.stats.dropped;
            let mut tstate = field(o.interp.threads_head);
            let next_interp = field(o.interp.next);
            if let (false, Some((lo, _))) = (o.gil.in_runtime, gil) {
                gil_state = Some(gil_fields(&o, &buf[ilen..], lo));
            }
            if let (true, Some(state)) = (self.pausing.enabled(), gil_state) {
                if n_interp == 1 {
                    gil_state = Some(self.pause_gil_holder(&o, interp, state, &mut tstate_read));
                }
            }
            let (gil_locked, gil_holder) = gil_state.unwrap_or((false, 0));
            // Main thread only: go straight to the main thread's state found at an
            // earlier tick (it lives as long as the interpreter), checking that it still
            // is what it was, rather than reading every thread state to find it again.
            if !visit_all {
                if let Some((i, ts)) = self.memo.main_tstate() {
                    let still = i == interp
                        && (tstate_read == Some(ts)
                            || self.target.mem.read(ts, &mut self.bufs.tstate).is_ok())
                        && field_u64(&self.bufs.tstate, o.thread.interp) == Some(interp)
                        && self.native_tid(&o, &self.bufs.tstate) == self.target.pid;
                    if still {
                        let tid = self.target.pid;
                        if self
                            .sample_thread(
                                &o,
                                ThreadAt {
                                    tstate: ts,
                                    tid,
                                    interp_id,
                                    now_us,
                                    is_main: true,
                                    plain: true,
                                    gil: (gil_locked, gil_holder),
                                },
                            )
                            .map_err(|e| self.diagnostics.dropped(e))
                            .is_err()
                        {
                            self.stats.dropped += 1;
                            ok = false;
                        }
                        interp = next_interp;
                        continue;
                    }
                    if i == interp {
                        self.memo.set_main_tstate(None);
                    }
                }
            }
            let mut n = 0;
            while tstate != 0 && n < MAX_THREADS {
                n += 1;
                if self.target.mem.read(tstate, &mut self.bufs.tstate).is_err() {
                    // A thread state freed while we walked the list: stop here.
                    ok = false;
                    break;
                }
                if field_u64(&self.bufs.tstate, o.thread.interp) != Some(interp) {
                    ok = false;
                    break;
                }
                let next = field_u64(&self.bufs.tstate, o.thread.next).unwrap_or(0);
                let tid = self.native_tid(&o, &self.bufs.tstate);
                let is_main = tid == self.target.pid;
                // tid 0: a thread state created for a thread that has not started yet
                // (3.13+ create it in the parent); it has no frames and no identity.
                if tid != 0 && (visit_all || is_main) {
                    let thread = ThreadAt {
                        tstate,
                        tid,
                        interp_id,
                        now_us,
                        is_main,
                        plain: self.opts.all_threads || is_main,
                        gil: (gil_locked, gil_holder),
                    };
                    match self.sample_thread(&o, thread) {
                        Ok(()) => {}
                        Err(e) => {
                            self.diagnostics.dropped(e);
                            self.stats.dropped += 1;
                            ok = false;
                        }
                    }
                    if !visit_all {
                        if self.memo.main_tstate().is_none() {
                            self.memo.set_main_tstate(Some((interp, tstate)));
                        }
                        break;
                    }
                }
                tstate = next;
            }
            if self.opts.async_mode == Some(AsyncMode::All)
                && (!self.write_all_tasks(&o, interp, interp_id, now_us)
                    || self.stats.dropped != dropped_before)
            {
                ok = false;
            }
            interp = next_interp;
        }
        self.bufs.small = buf;
        if !self.sample_threads_without_python(now_us) {
            ok = false;
        }
        self.pausing.resume();
        // Forget /proc handles of threads that are gone.
        self.memo.forget_unseen();
        Ok(ok)
    }

    /// The kernel thread id of the thread state whose image is `ts`: its
    /// `native_thread_id`, or (3.9, 3.10) the one in the C library's thread structure
    /// that its `thread_id` (a `pthread_t`) points at. 0 when unknown: such a thread
    /// state is skipped, as one not yet bound to a thread.
    pub(super) fn native_tid(&self, o: &Offsets, ts: &[u8]) -> u64 {
        match o.thread.pthread_tid {
            None => field_u64(ts, o.thread.native_thread_id).unwrap_or(0),
            Some(off) => self.pthread_tid(field_u64(ts, o.thread.thread_id).unwrap_or(0), off),
        }
    }

    /// The kernel thread id in the C library's thread structure at `pthread` (0: unknown).
    fn pthread_tid(&self, pthread: u64, off: u64) -> u64 {
        if pthread == 0 {
            return 0;
        }
        let mut b = [0u8; 4];
        match self.target.mem.read(pthread.wrapping_add(off), &mut b) {
            Ok(()) => u64::try_from(i32::from_ne_bytes(b)).unwrap_or(0),
            Err(_) => 0,
        }
    }

    /// The kernel thread id of the thread state at `tstate`, read now.
    pub(super) fn tid_of_tstate(&self, o: &Offsets, tstate: u64) -> Option<u64> {
        let mem = &self.target.mem;
        match o.thread.pthread_tid {
            None => mem
                .read_u64(tstate.wrapping_add(o.thread.native_thread_id))
                .ok(),
            Some(off) => {
                let pthread = mem.read_u64(tstate.wrapping_add(o.thread.thread_id)).ok()?;
                Some(self.pthread_tid(pthread, off))
            }
        }
    }

    /// Is the thread running on a CPU right now (`R` in /proc/self/task/TID/stat, as
    /// CPython checks)? `None` when it cannot tell.
    pub(super) fn on_cpu(&mut self, tid: u64) -> Option<bool> {
        if let Some(state) = self.pausing.on_cpu_before(tid) {
            return Some(state);
        }
        self.memo.on_cpu(self.target.pid, tid)
    }

    /// Where the thread's exception state lives, to be read with its stack.
    pub(super) fn exception_fields(&self, o: &Offsets, tstate: u64) -> ExceptionFields {
        let current = o
            .thread
            .current_exception
            .map(|off| tstate.wrapping_add(off));
        let handled = o.thread.exc_info.and_then(|off| {
            if o.thread.exc_info_is_pointer {
                // The pointer from the thread state image: it changes only when the
                // thread enters or leaves a generator.
                field_u64(&self.bufs.tstate, off)
                    .filter(|&p| p != 0)
                    .map(|p| p.wrapping_add(o.thread.stackitem_exc_value))
            } else {
                Some(
                    tstate
                        .wrapping_add(off)
                        .wrapping_add(o.thread.stackitem_exc_value),
                )
            }
        });
        let mut f = ExceptionFields::default();
        if let Some(a) = current {
            f.addrs[f.len] = a;
            f.len += 1;
        }
        if let Some(a) = handled {
            f.addrs[f.len] = a;
            f.handled_at = Some(f.len);
            f.len += 1;
        }
        f.current = current.is_some();
        f
    }

    /// The exception state from the thread state image and a read (the fallback when
    /// no snapshot read it with the stack).
    pub(super) fn exception_state(&self, o: &Offsets) -> bool {
        let ts = &self.bufs.tstate;
        if let Some(off) = o.thread.current_exception {
            if field_u64(ts, off).unwrap_or(0) != 0 {
                return true;
            }
        }
        if let Some(off) = o.thread.exc_info {
            let value = if o.thread.exc_info_is_pointer {
                match field_u64(ts, off) {
                    Some(p) if p != 0 => self
                        .target
                        .mem
                        .read_u64(p.wrapping_add(o.thread.stackitem_exc_value))
                        .unwrap_or(0),
                    _ => 0,
                }
            } else {
                field_u64(ts, off.wrapping_add(o.thread.stackitem_exc_value)).unwrap_or(0)
            };
            return value != 0 && value != self.target.types.none;
        }
        false
    }

    /// Samples one thread: its status, then its stack (read again a few times when a
    /// read does not validate), then the sample, unless the mode leaves it out.
    pub(super) fn sample_thread(&mut self, o: &Offsets, thread: ThreadAt) -> Result<(), ReadError> {
        let ThreadAt {
            tstate,
            tid,
            is_main,
            gil: (gil_locked, gil_holder),
            ..
        } = thread;
        self.memo.saw(tid);
        let mut status = 0u8;
        let has_gil = match o.thread.holds_gil {
            Some(off) => field_i32(&self.bufs.tstate, off).unwrap_or(0) != 0,
            None => gil_locked && gil_holder == tstate,
        };
        if has_gil {
            status |= HAS_GIL;
        } else if let Some(off) = o.thread.gil_requested {
            if field_i32(&self.bufs.tstate, off).unwrap_or(0) != 0 {
                status |= GIL_REQUESTED;
            }
        }
        if is_main {
            status |= MAIN_THREAD;
        }
        // As CPython: the CPU state is only looked up when the mode needs it.
        if matches!(self.opts.mode, ProfilingMode::Cpu | ProfilingMode::All) {
            match self.on_cpu(tid) {
                Some(true) => status |= ON_CPU,
                Some(false) => {}
                None => status |= UNKNOWN,
            }
        } else {
            status |= UNKNOWN;
        }
        let keep = match self.opts.mode {
            ProfilingMode::Cpu => status & ON_CPU != 0,
            ProfilingMode::Gil => status & HAS_GIL != 0,
            // Decided below, from the exception state read with the stack.
            _ => true,
        };
        if !keep {
            self.stats.filtered += 1;
            return Ok(());
        }
        // --native: the thread is stopped before its Python stack is read (and released
        // by the next pause or the tick's end).
        let stopped = self.native_stop(tid);
        self.sample_stopped(o, thread, status, has_gil, stopped)
    }

    /// [`Self::sample_thread`] once the thread's status is known and (`--native`) the
    /// thread stopped.
    fn sample_stopped(
        &mut self,
        o: &Offsets,
        thread: ThreadAt,
        mut status: u8,
        has_gil: bool,
        stopped: bool,
    ) -> Result<(), ReadError> {
        let ThreadAt {
            tstate,
            tid,
            interp_id,
            now_us,
            plain,
            ..
        } = thread;
        let mut plan = self.async_plan(tstate, tid, status, now_us, true)?;
        if !self.sampled_under(plan, plain) {
            return Ok(());
        }
        // The exception state is read in the same system call as the stack, just after
        // it: read before, it can belong to another moment than the stack.
        let exc_fields = self.exception_fields(o, tstate);
        let (collecting, gc_frame) = (self.gc.collecting, self.gc.trigger);
        // 3.15 says which frame triggered the collection: <GC> goes just inside it, as
        // CPython puts it. Earlier versions only say that a collection runs: the thread
        // running it holds the GIL, and the collection sits on top of its stack.
        // Async-aware stacks have none, as CPython's sampler makes them.
        let collecting = collecting && !matches!(plan, AsyncPlan::Cut(_));
        let gc_at =
            (collecting && o.interp.gc_frame.is_some() && gc_frame != 0).then_some(gc_frame);
        let gc_on_top = collecting && o.interp.gc_frame.is_none() && has_gil;
        let layout = &self.target.layout;
        let slot = layout.current_frame_slot(tstate, &self.bufs.tstate)?;
        let mut guess = match (slot, self.memo.last_frame(tid)) {
            (None, _) => 0,
            (Some(_), Some(at)) => at,
            (Some(_), None) => layout.current_frame(&*self.target.mem, &self.bufs.tstate)?,
        };
        // The thread runs on while we read it: a read that does not validate (the
        // innermost frame moved, a frame popped under us, a chain that does not end
        // where it should) is taken again, a few times, before the sample is dropped.
        let mut read = StackRead {
            tstate,
            tid,
            slot,
            gc_at,
            gc_on_top,
            fields: &exc_fields,
            cut: None,
            task_from_stack: plan == AsyncPlan::FromStack,
        };
        let mut attempt = 1;
        loop {
            let may_retry = attempt < READ_ATTEMPTS;
            if attempt > 1 && matches!(plan, AsyncPlan::Cut(_)) {
                // The running task is read again with the stack: it may have changed.
                plan = self.async_plan(tstate, tid, status, now_us, false)?;
                if !self.sampled_under(plan, plain) {
                    return Ok(());
                }
            }
            read.cut = match plan {
                AsyncPlan::Cut(frame) => Some(frame),
                _ => None,
            };
            match self.read_stack(o, &read, &mut guess, may_retry) {
                Ok(()) => break,
                Err(e) if attempt < READ_ATTEMPTS => {
                    attempt += 1;
                    self.diagnostics.retried(e);
                    // The first retry reads the held thread again where the failed read
                    // says its frames are (the usual case: the innermost frame moved from
                    // where it was last seen). A held thread that fails twice would read
                    // the same again: it runs on a moment first.
                    if attempt > 2 {
                        self.pausing.step(tid);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if slot.is_some() {
            self.memo.set_last_frame(tid, guess);
        }
        if read.task_from_stack && self.tasks.no_task {
            // 3.11-3.13, no task's step in the stack: a loop between tasks has no sample
            // (as on 3.14+), a thread without one its plain stack if it has one.
            if self.tasks.runs_loop(&self.stack.frames, &self.writer) {
                self.stats.filtered += 1;
                return Ok(());
            }
            if !plain {
                return Ok(());
            }
        }
        self.native_splice(tid, stopped)?;
        let has_exception = match exc_fields.decide(&self.window.fields, self.target.types.none) {
            Some(v) => v,
            None => self.exception_state(o),
        };
        if has_exception {
            status |= HAS_EXCEPTION;
        } else if self.opts.mode == ProfilingMode::Exception {
            self.stats.filtered += 1;
            return Ok(());
        }
        if !self.visits_every_thread() {
            // The main thread alone: its sample was the tick's last read of the target,
            // and the paused thread runs on while the sample is written (a write may
            // compress and write a chunk of the file).
            self.pausing.resume();
        }
        self.write_stack(tid, interp_id, now_us, status);
        Ok(())
    }

    /// Writes `self.stack.frames` as a sample of thread `tid`.
    pub(super) fn write_stack(&mut self, tid: u64, interp_id: u32, now_us: u64, status: u8) {
        match self
            .writer
            .write_sample(tid, interp_id, now_us, status, &self.stack.frames)
        {
            Ok(()) => {
                self.stats.samples += 1;
                if let Some(sink) = &self.opts.sink {
                    let (frames, strings) = (self.writer.frames(), self.writer.strings());
                    sink.sample(tid, status, &self.stack.frames, frames, strings);
                }
            }
            Err(e) => {
                if self.write_error.is_none() {
                    self.write_error = Some(e.to_string());
                }
            }
        }
    }
}

impl Sampler {
    /// Pauses the thread that holds the main interpreter's GIL, so that no thread's
    /// Python stack changes while the tick reads them, and returns the GIL state that
    /// holds while it is paused. The holder can drop the GIL between the read of the
    /// state and the pause; the state is read again once paused, and a new holder is
    /// paused instead (a few times at most). With no holder, or a thread that cannot be
    /// paused in time, the tick reads running threads as without the pause.
    ///
    /// `tstate_read`: the thread state whose image `self.bufs.tstate` holds, read before
    /// the pause. Once a thread is paused it is read again with the GIL, in the same
    /// system call (`None` when that read failed): the image then belongs to the moment
    /// the stacks are read.
    pub(super) fn pause_gil_holder(
        &mut self,
        o: &Offsets,
        interp: u64,
        mut state: (bool, u64),
        tstate_read: &mut Option<u64>,
    ) -> (bool, u64) {
        let Some((lo, len)) = gil_span(o) else {
            return state;
        };
        let base = if o.gil.in_runtime {
            self.target.runtime
        } else {
            interp
        };
        for _ in 0..3 {
            let (locked, holder) = state;
            if !locked || holder == 0 {
                return state;
            }
            // The holder is most often the main thread, whose state this tick read.
            let tid = match *tstate_read {
                Some(ts) if ts == holder => Some(self.native_tid(o, &self.bufs.tstate)),
                _ => self.tid_of_tstate(o, holder),
            };
            let Some(tid) = tid else {
                return state;
            };
            if !self.pausing.enabled() || tid == 0 {
                return state;
            }
            // Paused, the thread is in a signal handler or stopped by ptrace (`t`): its
            // scheduling state is the one it had just before (looked up only where the
            // mode keeps it).
            let before = match self.opts.mode {
                ProfilingMode::Cpu | ProfilingMode::All => self.on_cpu(tid),
                _ => None,
            };
            let Some(pauser) = self.pausing.pauser.as_mut() else {
                return state;
            };
            if !pauser.pause(tid) {
                return state;
            }
            let mut ranges = [(base.wrapping_add(lo), len), (0, 0)];
            let ranges = match *tstate_read {
                Some(ts) => {
                    ranges[1] = (ts, self.bufs.tstate.len());
                    &ranges[..]
                }
                None => &ranges[..1],
            };
            let mut bytes = std::mem::take(&mut self.bufs.paused);
            bytes.resize(ranges.iter().map(|r| r.1).sum(), 0);
            let got = self.target.mem.read_many(ranges, &mut bytes);
            if got == 2 {
                self.bufs.tstate.copy_from_slice(&bytes[len..]);
            } else {
                *tstate_read = None;
            }
            let now = (got >= 1).then(|| gil_fields(o, &bytes[..len], lo));
            self.bufs.paused = bytes;
            let Some(now) = now else {
                return state;
            };
            self.pausing.paused_on_cpu = before.map(|b| (tid, b));
            if now == state {
                return state;
            }
            state = now;
        }
        self.pausing.resume();
        state
    }
}
