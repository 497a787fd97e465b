//! The frame walk: a thread's chain of interpreter frames from its snapshot, checked
//! frame by frame (owner, code object, the page window's bounds), with the rules for
//! frames that are leaving, generators and the `<GC>` frame.

use crate::tach::MAX_STACK_DEPTH;

use super::async_tasks::MAX_STEPS;
use super::stack::{RawFrame, FRAME_OWNED_BY_GENERATOR, GC_MARK};
use super::threads::StackRead;
use super::window::{Snapshot, MAX_SLOTS, PAGE, WINDOW_MAX_PAGES};
use super::{Sampler, MAX_WALK};
use crate::record::interpreter::layout::{field_i32, field_u64, FrameOwner, Offsets};
use crate::record::interpreter::stack_tasks::{StepFrames, LOCALSPLUS};
use crate::record::process::memory::ReadError;

impl Sampler {
    /// Whether the frame at `frame` (outside the pages read) belongs to a generator or
    /// coroutine, by its owner byte read now.
    pub(super) fn is_generator_frame(&self, o: &Offsets, frame: u64) -> bool {
        let mut owner = [0u8; 1];
        self.target
            .mem
            .read(frame.wrapping_add(o.frame.owner), &mut owner)
            .is_ok()
            && owner[0] == FRAME_OWNED_BY_GENERATOR
    }

    /// A snapshot of the thread's innermost frames from the frame pointer at `slot`.
    ///
    /// 3.11: `slot` is in the C frame of the eval loop the thread ran when its state was
    /// read, a system call earlier. A thread that resumed a generator or called Python
    /// from C since then runs in another eval loop, and that slot still names the frame
    /// that made the call: the sample would go to the caller, while a thread that came
    /// back meanwhile leaves a dead C frame and a failed read. Both move time away from
    /// generators and callbacks, never towards them. So the C frame pointer is read
    /// again in the snapshot, with the slots of the C frames the thread was last seen
    /// in, and the slot of the one current at that moment is used; a C frame not among
    /// them takes one more snapshot from its own slot.
    pub(super) fn snapshot(
        &mut self,
        o: &Offsets,
        read: &StackRead<'_>,
        slot: u64,
        guess: u64,
    ) -> Snapshot {
        let StackRead {
            tstate,
            tid,
            fields,
            ..
        } = *read;
        let fsize = o.frame.size as usize;
        let mem = &*self.target.mem;
        let Some(off) = o.thread.cframe_current_frame else {
            return self
                .window
                .snapshot(mem, &[slot], guess, fsize, fields.addrs(), None);
        };
        let cframe_at = tstate.wrapping_add(o.thread.frame);
        let read_cframe = slot.wrapping_sub(off);
        let mut cframes = [0u64; MAX_SLOTS];
        let mut slots = [0u64; MAX_SLOTS];
        cframes[0] = read_cframe;
        slots[0] = slot;
        let mut n = 1;
        for &seen in self.memo.cframes(tid) {
            if n < MAX_SLOTS && seen != 0 && !cframes[..n].contains(&seen) {
                cframes[n] = seen;
                slots[n] = seen.wrapping_add(off);
                n += 1;
            }
        }
        let mut snap = self.window.snapshot(
            mem,
            &slots[..n],
            guess,
            fsize,
            fields.addrs(),
            Some((cframe_at, &cframes[..n])),
        );
        let mut current = read_cframe;
        if let Snapshot::Stale(c) = snap {
            current = c;
            snap = if c == 0 {
                Snapshot::At(0)
            } else {
                self.window.snapshot(
                    mem,
                    &[c.wrapping_add(off)],
                    guess,
                    fsize,
                    fields.addrs(),
                    Some((cframe_at, &[c])),
                )
            };
        }
        // Most recent first: the C frame the thread state named, and the one current
        // in the snapshot.
        self.memo.saw_cframes(tid, [read_cframe, current]);
        snap
    }

    /// Reads the thread's stack into `self.stack`: a snapshot of its innermost frames,
    /// the walk down the chain, the code objects. `guess` is where the innermost frame
    /// was last seen, updated when the snapshot finds it elsewhere.
    pub(super) fn read_stack(
        &mut self,
        o: &Offsets,
        read: &StackRead<'_>,
        guess: &mut u64,
        may_retry: bool,
    ) -> Result<(), ReadError> {
        let frame = match read.slot {
            None => {
                self.window.clear();
                0
            }
            // 3.9, 3.10: frame objects live on the heap, each where it was allocated,
            // not in a data stack a page window could copy: the walk reads them one by
            // one, from the current frame read now.
            Some(slot) if o.frame.is_object => {
                self.window.clear();
                self.target.mem.read_u64(slot)?
            }
            Some(slot) => {
                self.window.pages = self.window.span_pages;
                match self.snapshot(o, read, slot, *guess) {
                    Snapshot::At(frame) => {
                        if frame != 0 {
                            *guess = frame;
                        }
                        frame
                    }
                    // A generator's or coroutine's frame lives in its object, not in
                    // the data stack, so pages read there would not hold its callers,
                    // and taking the read again picks a later moment, one where the
                    // thread is more likely out of the generator: walk from it here,
                    // its frame read alone, its callers from the pages read.
                    Snapshot::Moved(frame) if self.is_generator_frame(o, frame) => frame,
                    Snapshot::Moved(frame) => {
                        if frame == *guess {
                            // The frame straddles the pages read: take more next time.
                            self.window.span_pages =
                                (self.window.span_pages * 2).min(WINDOW_MAX_PAGES);
                        }
                        *guess = frame;
                        return Err(ReadError::Invalid(
                            "the innermost frame moved out of the pages read",
                        ));
                    }
                    Snapshot::Unreadable => {
                        return Err(ReadError::Invalid("frame pointer unreadable"));
                    }
                    Snapshot::Stale(_) => {
                        return Err(ReadError::Invalid(
                            "the thread changed eval loops during the read",
                        ));
                    }
                }
            }
        };
        self.tasks.cut_found = None;
        let complete = self.walk(o, frame, read.gc_at, read.cut, may_retry)?;
        let base = o
            .thread
            .base_frame
            .and_then(|off| field_u64(&self.bufs.tstate, off))
            .filter(|&b| b != 0);
        if let (Some(base), Some(last)) = (base, complete) {
            // A chain that does not end at the thread's base frame was torn by a call
            // or return during the read (CPython's check too).
            if last != base {
                return Err(ReadError::Invalid(
                    "frame chain does not end at the base frame",
                ));
            }
        }
        let mut gc_on_top = read.gc_on_top;
        self.stack.tasks_raw = None;
        if read.task_from_stack {
            // 3.11-3.13: the running task is found from the frames walked. Its stack has
            // no `<GC>` frame, as on 3.14+ (CPython's async-aware stacks have none).
            self.tasks.no_task = false;
            match self.tasks.task_from_stack(&self.target)? {
                Some(index) => {
                    self.stack.raw.truncate(index + 1);
                    self.stack.raw.retain(|f| f.code != GC_MARK);
                    self.stack.tasks_raw = Some((self.stack.raw.len(), true));
                    self.tasks.append_items(&mut self.stack.raw);
                    gc_on_top = false;
                }
                None => self.tasks.no_task = true,
            }
        }
        if read.cut.is_some() {
            // Async-aware: the thread's frames up to the running task's coroutine, then
            // the task and the tasks awaiting it. A task is also "running" while the
            // machinery of its step runs around its coroutine (scheduling the next step,
            // calling done callbacks): the coroutine is not on the stack then, and the
            // whole stack goes under the task, as CPython's sampler puts it.
            if let Some(k) = self.tasks.cut_found {
                self.stack.raw.truncate(k);
            }
            let cut = self.tasks.cut_found.is_some();
            self.stack.tasks_raw = Some((self.stack.raw.len(), cut));
            self.tasks.append_items(&mut self.stack.raw);
        }
        if gc_on_top {
            self.stack.raw.insert(
                0,
                RawFrame {
                    code: GC_MARK,
                    instr: 0,
                    owner: 0,
                    called_python: false,
                },
            );
            self.stack.raw.truncate(MAX_STACK_DEPTH);
        }
        let exception_read = read
            .fields
            .decide(&self.window.fields, self.target.types.none)
            .is_some();
        if !self.visits_every_thread() && self.native.is_none() && exception_read {
            // The main thread alone, without its native stack, its exception state read
            // with its frames (not by the later fallback, which reads the thread again:
            // frame objects, 3.9 and 3.10, are read one by one): once its frames are
            // copied the paused thread runs on. Resolving them reads their code objects,
            // which a running frame keeps alive and which do not change (a code object
            // freed and its place taken since fails the cache's fingerprint check).
            self.pausing.resume();
        }
        self.resolve_stack(o)
    }

    /// Collects the raw frames of a chain, innermost first, with a `<GC>` frame just
    /// inside `gc_frame`. Returns the last frame of the chain when it was walked to its
    /// end (not cut at the depth limit).
    pub(super) fn walk(
        &mut self,
        o: &Offsets,
        mut frame: u64,
        gc_frame: Option<u64>,
        cut: Option<u64>,
        may_retry: bool,
    ) -> Result<Option<u64>, ReadError> {
        self.stack.raw.clear();
        if let Some(n) = self.native.as_deref_mut() {
            n.clear_entry_frames();
        }
        let fsize = o.frame.size as usize;
        let mut steps = 0;
        let mut last = 0;
        // The pages the chain spans in the snapshot: the next snapshot reads as many.
        let top = self.window.base + self.window.len as u64;
        let mut lowest = top;
        let mut reloaded = false;
        // Whether the frame just above in the chain was a Python frame of the same eval
        // loop (not an entry frame).
        let mut callee_python = false;
        // 3.11-3.13 --async-aware: the last Python frame kept, when it is a generator's
        // (its index and address): a task's step may run it.
        let finds_steps = self.tasks.finds_steps();
        self.tasks.steps.clear();
        let mut last_generator: Option<(usize, u64)> = None;
        while frame != 0 && self.stack.raw.len() < MAX_STACK_DEPTH {
            last = frame;
            if gc_frame == Some(frame) {
                self.stack.raw.push(RawFrame {
                    code: GC_MARK,
                    instr: 0,
                    owner: 0,
                    called_python: false,
                });
                if self.stack.raw.len() >= MAX_STACK_DEPTH {
                    break;
                }
            }
            steps += 1;
            if steps > MAX_WALK {
                return Err(ReadError::Invalid("frame chain too long (a cycle?)"));
            }
            let img: &[u8] = match self.window.get(frame, fsize) {
                Some(img) => {
                    if !reloaded {
                        lowest = lowest.min(frame);
                    }
                    img
                }
                None => {
                    // Just below the pages read: the data stack goes on there. Anywhere
                    // else (an entry frame on the C stack, a generator's frame in its
                    // object): read that frame alone.
                    let below = self.window.base.wrapping_sub(frame);
                    let near = self.window.len > 0
                        && frame < self.window.base
                        && below <= WINDOW_MAX_PAGES * PAGE;
                    if near
                        && may_retry
                        && !reloaded
                        && !self.window.truncated
                        && self.window.span_pages < WINDOW_MAX_PAGES
                    {
                        // Read later, those frames could be from another moment: take a
                        // snapshot deep enough instead.
                        self.window.span_pages =
                            ((top - frame).div_ceil(PAGE) + 1).min(WINDOW_MAX_PAGES);
                        return Err(ReadError::Invalid("the stack runs below the pages read"));
                    }
                    let mut img = None;
                    if near {
                        reloaded = true;
                        self.window.load(&*self.target.mem, frame, fsize);
                        img = self.window.get(frame, fsize);
                    }
                    match img {
                        Some(img) => img,
                        None => {
                            self.target.mem.read(frame, &mut self.bufs.frame)?;
                            &self.bufs.frame
                        }
                    }
                }
            };
            let prev = field_u64(img, o.frame.previous).unwrap_or(0);
            let code =
                field_u64(img, o.frame.executable).unwrap_or(0) & !o.frame.executable_tag_mask;
            let (owner, instr) = if o.frame.is_object {
                // A frame object has no owner; `f_lasti` is a 32-bit offset, -1 before
                // the first instruction (kept negative, sign-extended).
                let lasti = field_i32(img, o.frame.instr).unwrap_or(-1);
                (0, i64::from(lasti) as u64)
            } else {
                let owner = *img
                    .get(o.frame.owner as usize)
                    .ok_or(ReadError::Invalid("short frame"))?;
                (owner, field_u64(img, o.frame.instr).unwrap_or(0))
            };
            match self.target.layout.frame_owner(owner) {
                FrameOwner::Invalid => return Err(ReadError::Invalid("bad frame owner")),
                FrameOwner::Internal => {
                    callee_python = false;
                    // From 3.12 the eval loop's entry frame is a local of its C frame:
                    // `--native` finds the loop's native frame by it.
                    if let Some(n) = self.native.as_deref_mut() {
                        n.entry_frame(frame);
                    }
                }
                FrameOwner::Python => {
                    if code == 0 {
                        // 3.14+ clear a frame's code when they pop it: the thread
                        // returned from its innermost frame while the snapshot was
                        // taken, and the caller is the innermost now (CPython's unwinder
                        // skips such a frame too). Deeper in the chain, the read is torn.
                        if self.stack.raw.iter().all(|f| f.code == GC_MARK) {
                            frame = prev;
                            continue;
                        }
                        return Err(ReadError::Invalid("frame without code"));
                    }
                    if owner == FRAME_OWNED_BY_GENERATOR && prev == 0 {
                        // A generator or coroutine frame links to the frame that resumed
                        // it only while it runs: it yielded while the snapshot was taken.
                        return Err(ReadError::Invalid(
                            "a suspended generator frame in the chain",
                        ));
                    }
                    if callee_python {
                        if let Some(off) = o.frame.stacktop {
                            // 3.13: a frame the eval loop runs has stacktop -1, one that
                            // called a Python function has it set. A running frame with
                            // callees in the chain returned from them while the snapshot
                            // was taken: they are gone, and it is the innermost.
                            if field_i32(img, off) == Some(-1) {
                                self.stack.raw.retain(|f| f.code == GC_MARK);
                                self.tasks.steps.clear();
                                last_generator = None;
                            }
                        }
                    }
                    if finds_steps {
                        // A generator entered from C, called by a Python frame: if that
                        // frame is `Handle._run`, a task's step runs the generator.
                        if let (false, Some((index, generator))) = (callee_python, last_generator) {
                            if owner != FRAME_OWNED_BY_GENERATOR
                                && self.tasks.steps.len() < MAX_STEPS
                            {
                                self.tasks.steps.push(StepFrames {
                                    index,
                                    frame: generator,
                                    caller: frame,
                                    caller_self: field_u64(img, LOCALSPLUS).unwrap_or(0),
                                });
                            }
                        }
                        last_generator = (owner == FRAME_OWNED_BY_GENERATOR)
                            .then_some((self.stack.raw.len(), frame));
                    }
                    self.stack.raw.push(RawFrame {
                        code,
                        instr,
                        owner,
                        called_python: callee_python,
                    });
                    if cut == Some(frame) && self.tasks.cut_found.is_none() {
                        self.tasks.cut_found = Some(self.stack.raw.len());
                    }
                    // 3.11: the first frame of an eval loop was called from C.
                    let entry = o
                        .frame
                        .is_entry
                        .is_some_and(|off| img.get(off as usize).is_some_and(|&b| b != 0));
                    callee_python = !entry;
                }
            }
            frame = prev;
        }
        self.window.span_pages = if reloaded {
            self.window.pages
        } else {
            // One page more than the chain spans: its top moves up and down.
            ((top - lowest).div_ceil(PAGE) + 1).min(WINDOW_MAX_PAGES)
        };
        Ok((frame == 0).then_some(last))
    }
}
