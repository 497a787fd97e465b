//! The stack of the sample being made: the frames the walk collected (with the marks of
//! synthetic frames), then their writer frame indices, and which call of the eval loop
//! runs each (what `--native` splices the native stack by). One per sampler, reused from
//! one sample to the next.

use crate::tach::MAX_STACK_DEPTH;

/// `RawFrame::code` of the synthetic `<GC>` frame.
pub(super) const GC_MARK: u64 = u64::MAX;
/// `RawFrame::code` of a `<task>` frame; its `instr` indexes the sample's task names
/// (`AsyncTasks`).
pub(super) const TASK_MARK: u64 = u64::MAX - 1;

/// `_PyInterpreterFrame.owner` of a generator's or coroutine's frame (3.11 to 3.15), as
/// a [`RawFrame`]'s `owner` holds it.
pub(super) const FRAME_OWNED_BY_GENERATOR: u8 = 1;

/// A synthetic frame (`<GC>`, `<task>`), not a code object.
pub(super) fn is_mark(code: u64) -> bool {
    code >= TASK_MARK
}

/// A raw frame: where its code object is, and its instruction pointer.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawFrame {
    pub code: u64,
    pub instr: u64,
    pub owner: u8,
    /// The frame above it in the chain is a Python frame it called (not a C call).
    pub called_python: bool,
}

/// One sample's stack, innermost first, as it is built.
pub(super) struct SampleStack {
    /// The frames walked, with `<GC>` and `<task>` marks.
    pub raw: Vec<RawFrame>,
    /// Writer frame indices of the frames kept (the sample).
    pub frames: Vec<u32>,
    /// Per frame of `frames`, which call of the eval loop runs it (0: the innermost);
    /// per raw frame the same, and how many calls the stack has (`--native`).
    pub frame_runs: Vec<u32>,
    pub raw_runs: Vec<u32>,
    pub run_count: u32,
    /// `--async-aware`: where the task frames (the running task's `<task>` frame and the
    /// tasks awaiting it) start among the raw frames, and whether the thread's own
    /// frames were cut at the running task's coroutine there (`None`: no task frames).
    pub tasks_raw: Option<(usize, bool)>,
    /// Where the task frames start in `frames` (its length when there are none), and how
    /// many calls of the eval loop run the thread's own frames before them: `--native`
    /// splices the thread's frames alone, the task frames being no native stack's.
    pub tasks_at: usize,
    pub thread_runs: u32,
}

impl Default for SampleStack {
    fn default() -> Self {
        SampleStack {
            raw: Vec::with_capacity(MAX_STACK_DEPTH),
            frames: Vec::with_capacity(MAX_STACK_DEPTH),
            frame_runs: Vec::with_capacity(MAX_STACK_DEPTH),
            raw_runs: Vec::with_capacity(MAX_STACK_DEPTH),
            run_count: 0,
            tasks_raw: None,
            tasks_at: 0,
            thread_runs: 0,
        }
    }
}

impl SampleStack {
    /// Numbers the calls of the eval loop that run the raw frames (0: the innermost), for
    /// `--native`: a frame is the first of its call when the eval loop was entered from
    /// C for it (every frame object, `frame_objects`, before 3.11; from 3.11, one whose
    /// caller in the chain did not call it from the same loop).
    pub(super) fn number_runs(&mut self, frame_objects: bool) {
        self.raw_runs.clear();
        let mut run = 0u32;
        for (i, f) in self.raw.iter().enumerate() {
            self.raw_runs.push(run);
            if f.code == GC_MARK {
                continue;
            }
            let caller = self.raw[i + 1..].iter().find(|c| c.code != GC_MARK);
            if frame_objects || !caller.is_some_and(|c| c.called_python) {
                run += 1;
            }
        }
        self.run_count = run;
    }

    /// Notes, while `frames` are resolved from the raw frames, that raw frame `i` is the
    /// first of the task frames.
    pub(super) fn mark_tasks(&mut self, i: usize) {
        if self.tasks_raw.is_some_and(|(at, _)| at == i) {
            self.tasks_at = self.frames.len();
            self.thread_runs = self.raw_runs[i];
        }
    }

    /// Whether the thread's own frames were cut under a running task (the native frames
    /// outside its coroutine are the event loop's, under the task).
    pub(super) fn cut_under_task(&self) -> bool {
        self.tasks_raw.is_some_and(|(_, cut)| cut)
    }
}
