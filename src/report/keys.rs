//! What a report's rows stand for: the grouping ([`GroupBy`]), a row's identity
//! ([`Key`]) and the keys of a file's frames ([`FrameKeys`]), shared by every report.

use std::collections::HashMap;

use serde::Serialize;

use super::error::{ReportError, Result};
use crate::export::render::{is_internal_filename, lineno};
use crate::tach::TachFile;

/// What one row of a report stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "record", derive(clap::ValueEnum))]
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
        crate::names::parse(Self::WHAT, name).map_err(ReportError::Usage)
    }
    /// What a value is, in messages (`unknown grouping 'x': use function, line or file`).
    pub const WHAT: &'static str = "grouping";
}

/// A named value of the reports' options: `Display` is its name (clap's
/// `default_value_t` shows and parses it), and serde reads it by name with the message
/// of every other front end (`unknown grouping 'x': use function, line or file`).
macro_rules! named_value {
    ($ty:ty) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&crate::names::name(self))
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                crate::names::deserialize(d, <$ty>::WHAT)
            }
        }
    };
}
pub(crate) use named_value;

named_value!(GroupBy);

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

/// Where a report finds a frame's names: a file's frame table, or the live view's
/// frames as the recorder interns them (`live`).
pub(crate) trait FrameNames {
    fn filename(&self, frame: u32) -> &str;
    fn funcname(&self, frame: u32) -> &str;
    /// The frame's line, 0 when it has none (as pstats).
    fn lineno(&self, frame: u32) -> i32;
}

impl FrameNames for TachFile {
    fn filename(&self, frame: u32) -> &str {
        TachFile::filename(self, frame)
    }
    fn funcname(&self, frame: u32) -> &str {
        TachFile::funcname(self, frame)
    }
    fn lineno(&self, frame: u32) -> i32 {
        lineno(self, frame)
    }
}

/// One source's frames resolved to keys (cached per frame).
pub(crate) struct FrameKeys<'a, F: FrameNames + ?Sized = TachFile> {
    file: &'a F,
    by: GroupBy,
    frame_key: Vec<u32>,
}

impl<'a, F: FrameNames + ?Sized> FrameKeys<'a, F> {
    pub fn new(file: &'a F, by: GroupBy) -> Self {
        FrameKeys {
            file,
            by,
            frame_key: Vec::new(),
        }
    }

    /// The keys of `stack`'s frames, innermost first, without internal frames (a key
    /// appears once per frame: recursion repeats it).
    pub fn stack_keys(&mut self, keys: &mut Keys, stack: &[u32], out: &mut Vec<u32>) {
        out.clear();
        for &f in stack {
            // Grown on demand: a live recording interns frames as it goes.
            if f as usize >= self.frame_key.len() {
                self.frame_key.resize(f as usize + 1, UNSET);
            }
            let mut k = self.frame_key[f as usize];
            if k == UNSET {
                let file = self.file;
                let filename = file.filename(f);
                k = if is_internal_filename(filename) {
                    INTERNAL
                } else {
                    let filename = filename.to_string();
                    keys.intern(match self.by {
                        GroupBy::Line => Key {
                            filename,
                            lineno: file.lineno(f),
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

/// The seconds `samples` samples stand for at a sampling interval of `interval_us`,
/// with CPython's float arithmetic (`samples * (interval_us / 1e6)`, as its pstats
/// collector).
pub(crate) fn seconds_at(samples: u64, interval_us: u64) -> f64 {
    samples as f64 * (interval_us as f64 / 1_000_000.0)
}
