//! Reports over one or several profiles: `tach top` (the pstats summary table) and
//! `tach diff` (which functions' share of the samples changed between two sets of
//! runs, beyond noise). Both read the tach reader's samples and index, never bytes.
//!
//! Rows are keyed by function (filename, function name), by line (filename, line,
//! function name: CPython's pstats key) or by file. Frames of the profiler's own
//! `_sync_coordinator.py` are dropped first, as CPython's collectors do.

mod diff;
mod flamediff;
mod output;
mod top;

pub use diff::{diff, DiffOptions, DiffReport, DiffRow, Metric, Side, Verdict};
pub use flamediff::write_flamegraph;
pub use output::{write_diff, write_top, Format};
pub use top::{top, SortBy, TopOptions, TopReport, TopRow};

use std::collections::HashMap;

use serde::Serialize;

use crate::export::render::{is_internal, lineno};
use crate::tach::{TachError, TachFile};

/// Errors of the reports.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Read(#[from] TachError),
    #[error("{0}")]
    Usage(String),
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;

/// What one row of a report stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// (filename, function name): every line of a function together.
    #[default]
    Function,
    /// (filename, line, function name), as CPython's pstats.
    Line,
    /// The file.
    File,
}

impl GroupBy {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "function" => Ok(GroupBy::Function),
            "line" => Ok(GroupBy::Line),
            "file" => Ok(GroupBy::File),
            _ => Err(ReportError::Usage(format!(
                "unknown grouping '{name}': use function, line or file"
            ))),
        }
    }
}

/// A row's identity. `lineno` is 0 unless grouped by line (0 also for a frame without
/// a location, as pstats); `funcname` is empty when grouped by file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Key {
    pub filename: String,
    pub lineno: i32,
    pub funcname: String,
}

impl Key {
    /// pstats' `filename:lineno(function)`; `filename(function)` by function; the
    /// filename by file.
    pub fn label(&self, by: GroupBy) -> String {
        match by {
            GroupBy::Line => format!("{}:{}({})", self.filename, self.lineno, self.funcname),
            GroupBy::Function => format!("{}({})", self.filename, self.funcname),
            GroupBy::File => self.filename.clone(),
        }
    }
}

/// Keys interned across files, in first-seen order.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    pub list: Vec<Key>,
    ids: HashMap<Key, u32>,
}

impl Keys {
    fn intern(&mut self, key: Key) -> u32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.list.len() as u32;
        self.ids.insert(key.clone(), id);
        self.list.push(key);
        id
    }
}

const UNSET: u32 = u32::MAX;
const INTERNAL: u32 = u32::MAX - 1;

/// One file's frames resolved to keys (cached per frame).
pub(crate) struct FrameKeys<'a> {
    file: &'a TachFile,
    by: GroupBy,
    frame_key: Vec<u32>,
}

impl<'a> FrameKeys<'a> {
    pub fn new(file: &'a TachFile, by: GroupBy) -> Self {
        FrameKeys {
            file,
            by,
            frame_key: vec![UNSET; file.frames().len()],
        }
    }

    /// The keys of `stack`'s frames, innermost first, without internal frames (a key
    /// appears once per frame: recursion repeats it).
    pub fn stack_keys(&mut self, keys: &mut Keys, stack: &[u32], out: &mut Vec<u32>) {
        out.clear();
        for &f in stack {
            let mut k = self.frame_key[f as usize];
            if k == UNSET {
                k = if is_internal(self.file, f) {
                    INTERNAL
                } else {
                    let file = self.file;
                    let filename = file.filename(f).to_string();
                    keys.intern(match self.by {
                        GroupBy::Line => Key {
                            filename,
                            lineno: lineno(file, f),
                            funcname: file.funcname(f).to_string(),
                        },
                        GroupBy::Function => Key {
                            filename,
                            lineno: 0,
                            funcname: file.funcname(f).to_string(),
                        },
                        GroupBy::File => Key {
                            filename,
                            lineno: 0,
                            funcname: String::new(),
                        },
                    })
                };
                self.frame_key[f as usize] = k;
            }
            if k != INTERNAL {
                out.push(k);
            }
        }
    }
}

/// The seconds `samples` samples stand for at this interval, with CPython's float
/// arithmetic (`samples * (interval_us / 1e6)`, as its pstats collector).
pub(crate) fn seconds(samples: u64, file: &TachFile) -> f64 {
    samples as f64 * (file.header().sample_interval_us as f64 / 1_000_000.0)
}
