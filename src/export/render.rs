//! Frame rendering shared by the text formats, as CPython's `replay` renders frames.

use crate::tach::TachFile;

/// `os.path.basename` on POSIX: the part after the last `/`.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The line number CPython's collectors print: a missing location prints 0.
pub fn lineno(file: &TachFile, frame: u32) -> i32 {
    let e = &file.frames()[frame as usize];
    if e.lineno == -1 {
        0
    } else {
        e.lineno
    }
}

/// True for frames CPython's collectors drop: the profiler's own coordinator script.
pub fn is_internal(file: &TachFile, frame: u32) -> bool {
    is_internal_filename(file.filename(frame))
}

/// `is_internal` by the frame's filename.
pub fn is_internal_filename(filename: &str) -> bool {
    filename.ends_with("_sync_coordinator.py")
}
