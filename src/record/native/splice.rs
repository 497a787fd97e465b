//! Which native frames a stack shows, and how the Python frames go in: py-spy's rule
//! (its `native_stack_trace.rs`), so that both name the same frames.
//!
//! Walking the native stack from the innermost frame, each call of the interpreter's
//! evaluation loop (`_PyEval_EvalFrameDefault`, `PyEval_EvalFrameEx` and their split
//! `.cold` parts) is replaced by the Python frames it runs: from 3.11 one call runs a
//! run of Python frames (the Python-to-Python calls it inlines), ended by the frame the
//! interpreter entered from C; before, one frame each. Other frames of the interpreter
//! itself (the executable or `libpython`) are its call machinery and are hidden, except
//! the built-in modules py-spy keeps (`time_sleep`, `os_*`, `sre_*`, the GIL's
//! `PyThread_*`, ...). Frames of every other module are shown, but for the C library's
//! process and thread start.

/// What a native frame becomes in the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NativeKind {
    /// An evaluation loop: the Python frames it runs go here.
    Eval,
    /// Interpreter internals (or the C library's start): left out.
    Hidden,
    /// A frame of its own (the writer's frame index).
    Frame(u32),
}

/// Prefixes (the first `_`/`.`-separated word) of interpreter functions py-spy shows.
const SHOWN_PREFIXES: [&str; 11] = [
    "time",
    "sys",
    "gc",
    "os",
    "unicode",
    "thread",
    "stringio",
    "sre",
    "PyGilState",
    "PyThread",
    "lock",
];

/// The kind of a frame of the interpreter (the executable or `libpython`) named `name`.
pub(crate) fn interpreter_frame(name: Option<&str>) -> Option<bool> {
    let mut words = name?.split(['_', '.']).filter(|w| !w.is_empty());
    match words.next() {
        Some("PyEval") => match words.next() {
            Some("EvalFrameDefault" | "EvalFrameEx") => Some(true),
            _ => None,
        },
        Some(w) if SHOWN_PREFIXES.contains(&w) => Some(false),
        _ => None,
    }
}

/// Frames of other modules that are left out: where the C library starts the process
/// and its threads (py-spy's `ignore_frame`).
pub(crate) fn library_start_frame(name: &str, path: &str) -> bool {
    ((name == "__libc_start_main" || name == "__clone") && path.contains("/libc"))
        || (name == "start_thread" && path.contains("/libpthread"))
}

/// Suffixes GCC gives the copies it makes of a function (a clone with fewer arguments,
/// constants propagated, a part split out, the cold path): the function's own name is
/// what debug information, and so py-spy, names such a copy.
const COPY_SUFFIXES: [&str; 6] = [
    ".isra.",
    ".constprop.",
    ".part.",
    ".cold",
    ".lto_priv.",
    ".localalias",
];

/// A symbol as a function name: Rust's (legacy or v0, without the hash), C++'s
/// (without parameters or return type), anything else as it is, without the suffix of
/// a compiler's copy.
pub(crate) fn demangle(name: &str) -> String {
    let name = match COPY_SUFFIXES.iter().filter_map(|s| name.find(s)).min() {
        Some(at) if at > 0 => &name[..at],
        _ => name,
    };
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with('_') {
        if let Ok(sym) = cpp_demangle::Symbol::new(name.as_bytes()) {
            let opts = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(s) = sym.demangle_with_options(&opts) {
                return s;
            }
        }
    }
    name.to_string()
}

/// How a splice went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Splice {
    /// Every run of Python frames had its evaluation loop.
    Exact,
    /// No evaluation loop in the native stack (a walk cut short near the top, a thread
    /// outside the interpreter): the Python frames follow the native ones, as py-spy
    /// puts them.
    PythonAfter,
    /// The native walk was cut short: the Python runs left over follow the native
    /// frames.
    Truncated,
}

/// The counts of evaluation loops and Python runs disagree: the sample keeps its
/// Python frames only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub eval_loops: u32,
    pub python_runs: u32,
}

/// Splices `python` (writer frame indices, innermost first; `runs[i]` numbers the
/// evaluation loop of `python[i]`, 0 the innermost, `run_count` of them, some possibly
/// with no frame shown) into `native` (innermost first) and writes the stack to `out`.
/// `truncated`: the native walk did not reach the root.
pub(crate) fn splice(
    native: &[NativeKind],
    python: &[u32],
    runs: &[u32],
    run_count: u32,
    truncated: bool,
    out: &mut Vec<u32>,
) -> Result<Splice, Mismatch> {
    out.clear();
    let mut run = 0u32;
    let mut next = 0usize;
    for kind in native {
        match *kind {
            NativeKind::Eval => {
                while next < python.len() && runs.get(next) == Some(&run) {
                    out.push(python[next]);
                    next += 1;
                }
                run += 1;
            }
            NativeKind::Hidden => {}
            NativeKind::Frame(id) => out.push(id),
        }
    }
    // py-spy lets one evaluation loop more than runs pass: a frame popped before its
    // loop returned.
    if run == run_count || run == run_count + 1 {
        if run_count == 0 {
            // Frames outside every run (a `<GC>` frame of a collection at exit, no
            // Python frame running) are what the innermost native frames do.
            out.splice(0..0, python[next..].iter().copied());
        } else {
            out.extend_from_slice(&python[next..]);
        }
        return Ok(Splice::Exact);
    }
    if run == 0 || (truncated && run < run_count) {
        out.extend_from_slice(&python[next..]);
        return Ok(if run == 0 {
            Splice::PythonAfter
        } else {
            Splice::Truncated
        });
    }
    Err(Mismatch {
        eval_loops: run,
        python_runs: run_count,
    })
}

/// [`splice`] for a thread's stack cut under a running asyncio task: `python` (the
/// thread's frames up to the task's coroutine, `run_count` calls of the evaluation loop)
/// goes into the innermost `run_count` evaluation loops of `native`, and the native
/// frames outside them (the event loop's machinery, which the task frames replace)
/// are left out. A native stack with fewer evaluation loops is spliced as [`splice`]
/// does.
pub(crate) fn splice_under_task(
    native: &[NativeKind],
    python: &[u32],
    runs: &[u32],
    run_count: u32,
    truncated: bool,
    out: &mut Vec<u32>,
) -> Result<Splice, Mismatch> {
    let loops = native.iter().filter(|k| **k == NativeKind::Eval).count() as u32;
    if run_count == 0 || loops <= run_count {
        return splice(native, python, runs, run_count, truncated, out);
    }
    let mut seen = 0u32;
    let end = native
        .iter()
        .position(|k| {
            seen += u32::from(*k == NativeKind::Eval);
            seen == run_count
        })
        .map_or(native.len(), |at| at + 1);
    splice(&native[..end], python, runs, run_count, false, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use NativeKind::*;

    #[test]
    fn interpreter_frames_as_pyspy_sorts_them() {
        assert_eq!(
            interpreter_frame(Some("_PyEval_EvalFrameDefault")),
            Some(true)
        );
        assert_eq!(
            interpreter_frame(Some("_PyEval_EvalFrameDefault.cold")),
            Some(true)
        );
        assert_eq!(interpreter_frame(Some("PyEval_EvalFrameEx")), Some(true));
        assert_eq!(interpreter_frame(Some("PyEval_EvalCode")), None);
        assert_eq!(interpreter_frame(Some("_PyObject_MakeTpCall")), None);
        assert_eq!(interpreter_frame(Some("time_sleep")), Some(false));
        assert_eq!(interpreter_frame(Some("sre_ucs1_search")), Some(false));
        assert_eq!(
            interpreter_frame(Some("PyThread_acquire_lock_timed")),
            Some(false)
        );
        assert_eq!(interpreter_frame(None), None);
        assert!(library_start_frame(
            "__libc_start_main",
            "/usr/lib/x86_64-linux-gnu/libc.so.6"
        ));
        assert!(!library_start_frame(
            "__libc_start_call_main",
            "/usr/lib/libc.so.6"
        ));
        assert!(!library_start_frame("deflate", "/usr/lib/libz.so.1"));
    }

    #[test]
    fn names_demangle_as_rust_cpp_or_c() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle("_ZN3foo3barEi"), "foo::bar");
        assert_eq!(demangle("deflate"), "deflate");
        assert_eq!(
            demangle("encoder_listencode_obj.isra.0"),
            "encoder_listencode_obj"
        );
        assert_eq!(demangle("foo.constprop.0.isra.0"), "foo");
        assert_eq!(demangle("bar.cold"), "bar");
        assert_eq!(demangle("_Znot_mangled"), "_Znot_mangled");
    }

    #[test]
    fn each_eval_loop_takes_its_run_of_python_frames() {
        // leaf C function, eval loop running py frames 10, 11 (one run), a C call
        // (hidden), a ctypes-like C frame, eval loop running frame 12, hidden start.
        let native = [Frame(1), Eval, Hidden, Frame(2), Eval, Hidden];
        let mut out = Vec::new();
        let r = splice(&native, &[10, 11, 12], &[0, 0, 1], 2, false, &mut out);
        assert_eq!(r, Ok(Splice::Exact));
        assert_eq!(out, [1, 10, 11, 2, 12]);
        // A `<GC>` frame outside every run stays, innermost.
        let r = splice(
            &[Frame(1), Hidden, Frame(2)],
            &[7],
            &[0],
            0,
            false,
            &mut out,
        );
        assert_eq!(r, Ok(Splice::Exact));
        assert_eq!(out, [7, 1, 2]);
        // A run with every frame hidden still takes its loop.
        let r = splice(&native, &[10, 11], &[0, 0], 2, false, &mut out);
        assert_eq!(r, Ok(Splice::Exact));
        assert_eq!(out, [1, 10, 11, 2]);
    }

    #[test]
    fn disagreements_fall_back_or_fail() {
        let mut out = Vec::new();
        // No eval loop seen: Python after the native frames.
        let r = splice(&[Frame(1), Hidden], &[10, 11], &[0, 1], 2, true, &mut out);
        assert_eq!(r, Ok(Splice::PythonAfter));
        assert_eq!(out, [1, 10, 11]);
        // Cut short after one loop: the rest follows.
        let r = splice(
            &[Frame(1), Eval, Frame(2)],
            &[10, 11],
            &[0, 1],
            2,
            true,
            &mut out,
        );
        assert_eq!(r, Ok(Splice::Truncated));
        assert_eq!(out, [1, 10, 2, 11]);
        // One loop more than runs passes, as in py-spy.
        let r = splice(&[Eval, Eval], &[10], &[0], 1, false, &mut out);
        assert_eq!(r, Ok(Splice::Exact));
        // A complete walk with a loop too few, or two too many: a mismatch.
        let r = splice(&[Eval], &[10, 11], &[0, 1], 2, false, &mut out);
        assert_eq!(
            r,
            Err(Mismatch {
                eval_loops: 1,
                python_runs: 2
            })
        );
        assert!(splice(&[Eval, Eval, Eval], &[10], &[0], 1, false, &mut out).is_err());
    }

    #[test]
    fn a_task_takes_the_innermost_eval_loops_and_drops_the_event_loops() {
        let mut out = Vec::new();
        // zlib under `compress` (run 0), the coroutine entered from C by the task's C step
        // (run 1); then the step, the event loop's Python frames (two more loops) and
        // main, which the task frames stand in for.
        let native = [
            Frame(1),
            Eval,
            Frame(2),
            Eval,
            Frame(3),
            Eval,
            Eval,
            Frame(4),
            Hidden,
        ];
        let how = splice_under_task(&native, &[10, 11], &[0, 1], 2, false, &mut out);
        assert_eq!(how, Ok(Splice::Exact));
        assert_eq!(out, [1, 10, 2, 11]);
        // As many loops as runs: the whole native stack, as `splice`.
        let how = splice_under_task(&native[..6], &[10, 11, 12], &[0, 1, 2], 3, false, &mut out);
        assert_eq!(how, Ok(Splice::Exact));
        assert_eq!(out, [1, 10, 2, 11, 3, 12]);
        // No run (nothing of the thread's own): as `splice`.
        let how = splice_under_task(&native, &[], &[], 0, false, &mut out);
        assert!(how.is_err(), "{how:?}");
    }
}
