//! The Gecko profile's one string array: each thread numbers its strings by first use,
//! and the arrays are merged by the sample that first used each (CPython's order).

use super::event::{Map, NONE};
use crate::export::render::basename;
use crate::tach::TachFile;

/// A string a thread uses, named before the shared array exists.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum StrKey {
    /// A canonical TACH string.
    Tach(u32),
    /// The basename of a canonical TACH filename.
    Basename(u32),
    Marker(&'static str),
}

/// A thread's strings, numbered in the order it first used them, each with the sample
/// that first used it. CPython interns into one array while it walks the samples in
/// file order; merging all threads' strings by that sample gives the same order.
#[derive(Default)]
pub(super) struct LocalStrings {
    pub(super) ids: Map<StrKey, u32>,
    pub(super) first_use: Vec<(u64, StrKey)>,
}

impl LocalStrings {
    pub(super) fn intern(&mut self, key: StrKey, seq: u64) -> u32 {
        let first_use = &mut self.first_use;
        *self.ids.entry(key).or_insert_with(|| {
            first_use.push((seq, key));
            first_use.len() as u32 - 1
        })
    }
}

/// The shared string array, interned in CPython's order.
pub(super) struct Strings<'a> {
    pub(super) list: Vec<&'a str>,
    pub(super) ids: Map<&'a str, u32>,
}

impl<'a> Strings<'a> {
    pub(super) fn intern(&mut self, s: &'a str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s);
        self.ids.insert(s, i);
        i
    }

    /// The array of all threads' strings in the order of first use ("(root)" first,
    /// as CPython's collector starts with it), and per thread the shared id of each of
    /// its own.
    pub(super) fn merge(file: &'a TachFile, threads: &[&LocalStrings]) -> (Self, Vec<Vec<u32>>) {
        let mut strings = Strings {
            list: Vec::new(),
            ids: Map::default(),
        };
        strings.intern("(root)");
        // One sample belongs to one thread, so (sample, thread, own id) orders every
        // first use as CPython made them.
        let mut order: Vec<(u64, u32, u32)> = threads
            .iter()
            .enumerate()
            .flat_map(|(t, th)| {
                th.first_use
                    .iter()
                    .enumerate()
                    .map(move |(i, &(seq, _))| (seq, t as u32, i as u32))
            })
            .collect();
        order.sort_unstable();
        let mut shared: Vec<Vec<u32>> = threads
            .iter()
            .map(|th| vec![NONE; th.first_use.len()])
            .collect();
        for (_, t, i) in order {
            let text = match threads[t as usize].first_use[i as usize].1 {
                StrKey::Tach(s) => file.string(s),
                StrKey::Basename(s) => basename(file.string(s)),
                StrKey::Marker(name) => name,
            };
            shared[t as usize][i as usize] = strings.intern(text);
        }
        (strings, shared)
    }
}

/// Per-string facts computed once, with duplicate strings mapped to their first
/// occurrence so that keys built from string ids compare like CPython's string keys.
pub(super) struct StringFacts {
    pub(super) canon: Vec<u32>,
    pub(super) internal: Vec<bool>,
    pub(super) gc: Vec<bool>,
    pub(super) python: Vec<bool>,
    /// Per frame (not string): a native frame of a `--native` recording, which goes in
    /// the Native category whatever its file (CPython's rule looks at the file only,
    /// and calls a module's path Python).
    pub(super) native_frame: Vec<bool>,
}

impl StringFacts {
    pub(super) fn new(file: &TachFile) -> Self {
        let strings = file.strings();
        let mut first: Map<&str, u32> = Map::default();
        let canon = strings
            .iter()
            .enumerate()
            .map(|(i, s)| *first.entry(&**s).or_insert(i as u32))
            .collect();
        StringFacts {
            canon,
            internal: strings
                .iter()
                .map(|s| s.ends_with("_sync_coordinator.py"))
                .collect(),
            gc: strings.iter().map(|s| &**s == "<GC>").collect(),
            python: strings.iter().map(|s| is_python(s)).collect(),
            native_frame: crate::export::exporter::walked_native_frames(file),
        }
    }
}

/// CPython's `_is_python`: not a `<...>` pseudo-file, except `<stdin>`/`<string>`.
pub(super) fn is_python(filename: &str) -> bool {
    !filename.starts_with('<') || filename == "<stdin>" || filename == "<string>"
}
