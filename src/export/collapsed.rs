//! Collapsed stacks (Brendan Gregg's format), byte-identical to CPython's
//! `replay --collapsed`: `tid:<thread_id>;frame;...;frame <count>` per (thread, stack),
//! root first, sorted by count descending then by text.
//!
//! Built from the aggregated index, so the work grows with unique stacks, not samples.
//! Lines are never materialised as strings: they are sequences of label ids, sorted in
//! exactly the order of their rendered text, then written straight out.

use std::collections::hash_map::Entry;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

use rustc_hash::{FxHashMap as HashMap, FxHasher};

use super::exporter::{write_error, ExportInput, Exporter, Result};
use super::render::{basename, is_internal, lineno};
use crate::tach::index::ProfileIndex;
use crate::tach::TachFile;

pub struct Collapsed;

/// `file:func:line`, or the bare name of a synthetic frame ("~" with no line).
fn write_frame_label(file: &TachFile, frame: u32, out: &mut Vec<u8>) {
    let filename = file.filename(frame);
    let funcname = file.funcname(frame);
    let line = lineno(file, frame);
    if filename == "~" && line == 0 {
        out.extend_from_slice(funcname.as_bytes());
    } else {
        out.extend_from_slice(basename(filename).as_bytes());
        out.push(b':');
        out.extend_from_slice(funcname.as_bytes());
        out.push(b':');
        out.extend_from_slice(itoa::Buffer::new().format(line).as_bytes());
    }
}

impl Exporter for Collapsed {
    fn name(&self) -> &'static str {
        "collapsed"
    }
    fn description(&self) -> &'static str {
        "collapsed stacks, one line per thread and stack (as CPython's replay --collapsed)"
    }
    fn extension(&self) -> &'static str {
        ".collapsed.txt"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let index = input.index()?;
        let table = LineTable::build(input.file, index);
        table.write(out).map_err(write_error("output"))
    }
}

const UNSEEN: u32 = u32::MAX;
const SKIP: u32 = u32::MAX - 1;

/// Rendered frame labels, one per CPython line key, in one buffer.
#[derive(Default)]
struct Labels {
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl Labels {
    fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }
}

/// Interned sequences of label ids (a line's frames, root first), in one buffer.
#[derive(Default)]
struct Sequences {
    keys: Vec<u32>,
    spans: Vec<(usize, usize)>,
    /// By hash; the rare second sequence with an equal hash goes to `collided`.
    by_hash: HashMap<u64, u32>,
    collided: HashMap<Box<[u32]>, u32>,
}

impl Sequences {
    fn get(&self, id: u32) -> &[u32] {
        let (start, end) = self.spans[id as usize];
        &self.keys[start..end]
    }
    fn push(&mut self, seq: &[u32]) -> u32 {
        let id = self.spans.len() as u32;
        let start = self.keys.len();
        self.keys.extend_from_slice(seq);
        self.spans.push((start, self.keys.len()));
        id
    }
    fn intern(&mut self, seq: &[u32]) -> u32 {
        let mut h = FxHasher::default();
        seq.hash(&mut h);
        match self.by_hash.entry(h.finish()) {
            Entry::Vacant(v) => {
                let id = self.spans.len() as u32;
                v.insert(id);
                self.push(seq)
            }
            Entry::Occupied(o) => {
                let id = *o.get();
                if self.get(id) == seq {
                    return id;
                }
                if let Some(&id) = self.collided.get(seq) {
                    return id;
                }
                let id = self.push(seq);
                self.collided.insert(seq.into(), id);
                id
            }
        }
    }
}

/// One output line: a thread id, a sequence of labels, and its samples.
#[derive(Clone, Copy)]
struct Line {
    count: u64,
    tid: u32,
    seq: u32,
}

struct LineTable {
    labels: Labels,
    seqs: Sequences,
    /// Distinct thread ids as decimal text.
    tids: Vec<String>,
    lines: Vec<Line>,
}

impl LineTable {
    fn build(file: &TachFile, index: &ProfileIndex) -> Self {
        // CPython keys a line on the thread id and the stack's (full filename, line,
        // function) triples, not on the rendered text: two files with the same basename
        // give two lines with identical text, and it writes both. Frames that differ only
        // in columns or opcode merge. The interpreter id is dropped.
        let mut labels = Labels::default();
        // Strings compare by text (a table could hold one text twice): canonical ids.
        let mut canon_string: Vec<u32> = vec![UNSEEN; file.strings().len()];
        let mut string_ids: HashMap<&str, u32> = HashMap::default();
        let mut canon = |s: u32| -> u32 {
            let c = &mut canon_string[s as usize];
            if *c == UNSEEN {
                let n = string_ids.len() as u32;
                *c = *string_ids.entry(file.string(s)).or_insert(n);
            }
            *c
        };
        // Per frame index: its label id, SKIP for dropped frames, UNSEEN until needed.
        let mut label_of_frame: Vec<u32> = vec![UNSEEN; file.frames().len()];
        let mut label_ids: HashMap<(u32, i32, u32), u32> = HashMap::default();
        // Per stack id of the index: its sequence id, SKIP when every frame is dropped.
        let mut seq_of_stack: Vec<u32> = vec![UNSEEN; index.stacks.len()];
        // At most every stack's frames: one allocation instead of copies as it grows.
        let mut seqs = Sequences {
            keys: Vec::with_capacity(index.stacks.frame_count()),
            ..Sequences::default()
        };
        let mut tid_ids: HashMap<u64, u32> = HashMap::default();
        let mut tids: Vec<String> = Vec::new();
        let mut line_ids: HashMap<(u32, u32), usize> = HashMap::default();
        let mut lines: Vec<Line> = Vec::new();
        let mut seq: Vec<u32> = Vec::with_capacity(256);
        for t in &index.threads {
            let tid = *tid_ids.entry(t.thread_id).or_insert_with(|| {
                tids.push(t.thread_id.to_string());
                tids.len() as u32 - 1
            });
            for &(stack_id, count) in &t.stacks {
                let mut s = seq_of_stack[stack_id as usize];
                if s == UNSEEN {
                    seq.clear();
                    for &f in index.stacks.get(stack_id).iter().rev() {
                        let mut k = label_of_frame[f as usize];
                        if k == UNSEEN {
                            k = if is_internal(file, f) {
                                SKIP
                            } else {
                                let e = &file.frames()[f as usize];
                                let key = (canon(e.filename), lineno(file, f), canon(e.funcname));
                                *label_ids.entry(key).or_insert_with(|| {
                                    write_frame_label(file, f, &mut labels.text);
                                    labels.ends.push(labels.text.len());
                                    labels.ends.len() as u32 - 1
                                })
                            };
                            label_of_frame[f as usize] = k;
                        }
                        if k != SKIP {
                            seq.push(k);
                        }
                    }
                    s = if seq.is_empty() {
                        SKIP
                    } else {
                        seqs.intern(&seq)
                    };
                    seq_of_stack[stack_id as usize] = s;
                }
                if s == SKIP {
                    continue;
                }
                let i = *line_ids.entry((tid, s)).or_insert_with(|| {
                    lines.push(Line {
                        count: 0,
                        tid,
                        seq: s,
                    });
                    lines.len() - 1
                });
                lines[i].count += count;
            }
        }
        LineTable {
            labels,
            seqs,
            tids,
            lines,
        }
    }

    /// Writes the lines in Python's order, (-count, text). Lines with equal text may
    /// come from different keys; they are identical, so their order does not show.
    ///
    /// The lines are put in (count, thread) order first (integers: cheap), which leaves
    /// runs of lines of one count and thread to order by their labels: that is the
    /// sort's cost, most of it in one or two runs (a busy thread's stacks seen once).
    /// A second thread sorts runs ahead of this one, which writes them in turn and
    /// sorts a run itself where it has caught up: the text is written while the rest is
    /// sorted. A long run is sorted in two halves, by both threads where they meet, and
    /// merged as it is written.
    fn write(mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut lines = std::mem::take(&mut self.lines);
        let mut text = TextOut::new(out);
        let order = PieceOrder::new(&self);
        lines.sort_unstable_by_key(|l| (std::cmp::Reverse(l.count), order.tid_rank(l)));
        let two_threads = lines.len() >= LINES_FOR_A_SORTING_THREAD;
        let runs: Vec<[Mutex<SortedRun<'_>>; 2]> = lines
            .chunk_by_mut(|a, b| a.count == b.count && a.tid == b.tid)
            .map(|run| {
                let half = if run.len() >= LINES_TO_HALVE {
                    run.len() / 2
                } else {
                    run.len()
                };
                let (first, second) = run.split_at_mut(half);
                [SortedRun::new(first), SortedRun::new(second)].map(Mutex::new)
            })
            .collect();
        let (order, table, runs) = (&order, &self, &runs);
        std::thread::scope(|scope| {
            if two_threads {
                scope.spawn(move || {
                    for half in runs.iter().flatten() {
                        // A half held by the writing thread is sorted by it.
                        if let Ok(mut half) = half.try_lock() {
                            half.sort(order);
                        }
                    }
                });
            }
            for [first, second] in runs {
                // The second half first, if the other thread has not taken it: where
                // the two meet, each sorts one half.
                if let Ok(mut second) = second.try_lock() {
                    second.sort(order);
                }
                let (first, second) = (lock_sorted(first, order), lock_sorted(second, order));
                let (mut x, mut y) = (
                    first.lines.iter().peekable(),
                    second.lines.iter().peekable(),
                );
                loop {
                    let line = match (x.peek(), y.peek()) {
                        (Some(a), Some(b)) if order.cmp_labels(a, b).is_gt() => y.next(),
                        (Some(_), _) => x.next(),
                        (None, _) => y.next(),
                    };
                    let Some(&line) = line else { break };
                    text.line(table, line)?;
                }
            }
            text.finish()
        })
    }

    fn render(&self, line: Line, buf: &mut Vec<u8>) {
        buf.extend_from_slice(b"tid:");
        buf.extend_from_slice(self.tids[line.tid as usize].as_bytes());
        for &k in self.seqs.get(line.seq) {
            buf.push(b';');
            buf.extend_from_slice(self.labels.get(k));
        }
    }
}

/// Below this many lines, sorting on one thread is as quick as starting another.
const LINES_FOR_A_SORTING_THREAD: usize = 2048;
/// Runs of this many lines or more are sorted in two halves.
const LINES_TO_HALVE: usize = 512;

/// A run of lines of one count and thread (or half of one), and whether it is in text
/// order yet.
struct SortedRun<'l> {
    sorted: bool,
    lines: &'l mut [Line],
}

/// A half, once it is sorted: by this thread if no other has done it.
fn lock_sorted<'m, 'l>(
    half: &'m Mutex<SortedRun<'l>>,
    order: &PieceOrder<'_>,
) -> MutexGuard<'m, SortedRun<'l>> {
    let mut half = half.lock().unwrap_or_else(|e| e.into_inner());
    half.sort(order);
    half
}

impl<'l> SortedRun<'l> {
    fn new(lines: &'l mut [Line]) -> Self {
        SortedRun {
            sorted: lines.len() < 2,
            lines,
        }
    }

    fn sort(&mut self, order: &PieceOrder<'_>) {
        if !self.sorted {
            self.lines.sort_unstable_by(|a, b| order.cmp_labels(a, b));
            self.sorted = true;
        }
    }
}

/// Lines of equal count in the order of their text, without rendering it.
///
/// The text of a line is "tid:" T (";" L)*. Thread ids are digits, so the pieces T+";"
/// are prefix-free and two lines of different threads are in the order of those pieces:
/// the few thread ids are ranked once. Two lines of one thread are compared by walking
/// their label sequences to the first differing label id (equal ids are equal text) and
/// comparing the texts from there, a chunk at a time: two ids can still have equal text
/// (files with the same basename), a label can be a prefix of another, and a label can
/// hold ';' or NUL itself (a name CPython's sampler read torn), which the comparison
/// takes as the bytes they are.
struct PieceOrder<'t> {
    tid_rank: Vec<u32>,
    labels: &'t Labels,
    seqs: &'t Sequences,
}

impl<'t> PieceOrder<'t> {
    fn new(table: &'t LineTable) -> Self {
        let tid_rank = ranks(table.tids.len(), |i| (table.tids[i].as_bytes(), b';'));
        PieceOrder {
            tid_rank,
            labels: &table.labels,
            seqs: &table.seqs,
        }
    }

    /// Where a line's thread id comes among the others' in text order.
    fn tid_rank(&self, line: &Line) -> u32 {
        self.tid_rank[line.tid as usize]
    }

    /// The order of two lines of one thread, by their labels.
    fn cmp_labels(&self, a: &Line, b: &Line) -> std::cmp::Ordering {
        let (x, y) = (self.seqs.get(a.seq), self.seqs.get(b.seq));
        let mut i = 0;
        // Lines share long prefixes (a thread's stacks start alike): skip equal ids
        // eight at a time, in one vector compare, before the last few.
        while let (Some(p), Some(q)) = (x[i..].first_chunk::<8>(), y[i..].first_chunk::<8>()) {
            if p != q {
                break;
            }
            i += 8;
        }
        while i < x.len() && i < y.len() && x[i] == y[i] {
            i += 1;
        }
        if i == x.len() || i == y.len() {
            // One is the other plus more labels: the shorter text is a prefix.
            return x.len().cmp(&y.len());
        }
        // Equal ids are equal text: the texts first differ at or after label i.
        let (mut p, mut q) = (
            TextCursor::new(self.labels, &x[i..]),
            TextCursor::new(self.labels, &y[i..]),
        );
        loop {
            let (u, v) = (p.chunk(), q.chunk());
            if u.is_empty() || v.is_empty() {
                // The text that ends first is a prefix of the other.
                return u.len().cmp(&v.len());
            }
            let m = u.len().min(v.len());
            match u[..m].cmp(&v[..m]) {
                std::cmp::Ordering::Equal => {
                    p.advance(m);
                    q.advance(m);
                }
                ord => return ord,
            }
        }
    }
}

/// The text `L0;L1;...;Ln` of a sequence of labels, read a chunk at a time: what is
/// left of the current label, or the `;` after it.
struct TextCursor<'t> {
    labels: &'t Labels,
    seq: &'t [u32],
    /// The current label, and how far into it; past its end, the `;` after it.
    label: usize,
    offset: usize,
}

impl<'t> TextCursor<'t> {
    fn new(labels: &'t Labels, seq: &'t [u32]) -> Self {
        TextCursor {
            labels,
            seq,
            label: 0,
            offset: 0,
        }
    }

    /// The bytes from here to the end of the current piece; empty at the text's end.
    fn chunk(&mut self) -> &'t [u8] {
        loop {
            let Some(&id) = self.seq.get(self.label) else {
                return &[];
            };
            let text = self.labels.get(id);
            if self.offset < text.len() {
                return &text[self.offset..];
            }
            if self.offset == text.len() && self.label + 1 < self.seq.len() {
                return b";";
            }
            if self.label + 1 == self.seq.len() {
                return &[];
            }
            // Past the separator: the next label.
            self.label += 1;
            self.offset = 0;
        }
    }

    /// Moves past `n` bytes of the current chunk.
    fn advance(&mut self, n: usize) {
        self.offset += n;
    }
}

/// The output text, handed over in pieces larger than the output's own buffer
/// (export_file's 128 KiB), which then passes them straight through instead of copying
/// them.
struct TextOut<'o> {
    out: &'o mut dyn Write,
    buf: Vec<u8>,
    digits: itoa::Buffer,
}

impl<'o> TextOut<'o> {
    const PIECE: usize = 256 * 1024;

    fn new(out: &'o mut dyn Write) -> Self {
        TextOut {
            out,
            buf: Vec::with_capacity(Self::PIECE + 64 * 1024),
            digits: itoa::Buffer::new(),
        }
    }

    fn line(&mut self, table: &LineTable, line: Line) -> std::io::Result<()> {
        table.render(line, &mut self.buf);
        self.buf.push(b' ');
        self.buf
            .extend_from_slice(self.digits.format(line.count).as_bytes());
        self.buf.push(b'\n');
        if self.buf.len() >= Self::PIECE {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)
    }
}

/// Compares two pieces: bytes followed by one terminator byte.
fn cmp_piece(x: &[u8], tx: u8, y: &[u8], ty: u8) -> std::cmp::Ordering {
    let m = x.len().min(y.len());
    // Past the common length: the rest of the longer piece, then its terminator.
    x[..m].cmp(&y[..m]).then_with(|| {
        let rest_x = x[m..].iter().chain(std::iter::once(&tx));
        rest_x.cmp(y[m..].iter().chain(std::iter::once(&ty)))
    })
}

/// Ranks `n` pieces (bytes followed by one terminator byte) by their bytes: equal pieces
/// get equal ranks.
fn ranks<'a>(n: usize, piece: impl Fn(usize) -> (&'a [u8], u8)) -> Vec<u32> {
    let cmp = |a: usize, b: usize| {
        let (x, tx) = piece(a);
        let (y, ty) = piece(b);
        cmp_piece(x, tx, y, ty)
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| cmp(a, b));
    let mut rank = vec![0u32; n];
    let mut r = 0u32;
    for i in 0..order.len() {
        if i > 0 && cmp(order[i - 1], order[i]).is_ne() {
            r += 1;
        }
        rank[order[i]] = r;
    }
    rank
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Cursor;

    use super::*;
    use crate::export::{export_to, ExportOptions};
    use crate::tach::{Compression, Location, SampleFilter, Writer};

    /// The plain algorithm: render every line's text, merge by CPython's key, sort the
    /// strings. The rank-based sort must give exactly this.
    fn reference(file: &TachFile) -> String {
        type Key = (u64, Vec<(String, i32, String)>);
        let mut lines: HashMap<Key, (String, u64)> = HashMap::new();
        for s in file.collect_samples().unwrap() {
            let mut key = Vec::new();
            let mut text = format!("tid:{}", s.thread_id);
            for &f in s.stack.iter().rev() {
                if is_internal(file, f) {
                    continue;
                }
                let line = lineno(file, f);
                key.push((
                    file.filename(f).to_owned(),
                    line,
                    file.funcname(f).to_owned(),
                ));
                let mut label = Vec::new();
                write_frame_label(file, f, &mut label);
                text.push(';');
                text.push_str(std::str::from_utf8(&label).unwrap());
            }
            if key.is_empty() {
                continue;
            }
            lines.entry((s.thread_id, key)).or_insert((text, 0)).1 += 1;
        }
        let mut v: Vec<(String, u64)> = lines.into_values().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.iter().map(|(t, c)| format!("{t} {c}\n")).collect()
    }

    fn profile(funcs: &[&str], seed: u64) -> TachFile {
        profile_of(funcs, seed, 3000)
    }

    fn profile_of(funcs: &[&str], seed: u64, samples: u64) -> TachFile {
        let mut buf = Cursor::new(Vec::new());
        let mut w = Writer::builder(1000)
            .compression(Compression::None)
            .to_writer("memory", &mut buf)
            .unwrap();
        // Labels where one is a prefix of another (line 1 / 12 / 123, "f" / "ff"), the
        // same basename in two directories, synthetic "~" frames, the profiler's own frames.
        let files = [
            "a/x.py",
            "b/x.py",
            "x.py",
            "~",
            "/p/_sync_coordinator.py",
            "x.pyc",
        ];
        let mut ids = Vec::new();
        for (i, file) in files.iter().enumerate() {
            for (j, func) in funcs.iter().enumerate() {
                for line in [0, 1, 12, 123, 2] {
                    let loc = (line != 0).then_some(Location {
                        lineno: line,
                        end_lineno: line,
                        column: (i + j) as i32,
                        end_column: -1,
                    });
                    ids.push(w.frame(file, func, loc, None));
                }
            }
        }
        let mut state = seed | 1;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let tids = [1u64, 12, 123, 2, 9, 10];
        for i in 0..samples {
            let depth = next(6);
            let stack: Vec<u32> = (0..depth).map(|_| ids[next(ids.len())]).collect();
            let tid = tids[next(tids.len())];
            w.write_sample(tid, next(2) as u32, i * 1000, 0, &stack)
                .unwrap();
        }
        w.finish().unwrap();
        TachFile::from_bytes("memory", buf.into_inner()).unwrap()
    }

    fn ours(file: &TachFile) -> String {
        let mut out = Vec::new();
        export_to(
            &Collapsed,
            file,
            &SampleFilter::default(),
            &ExportOptions::default(),
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn piece_order_equals_sorting_the_text() {
        for seed in 1..6 {
            let file = profile(&["f", "ff", "f.g", "F", "<module>", "é"], seed);
            assert_eq!(ours(&file), reference(&file), "seed {seed}");
        }
    }

    /// Enough lines for the second sorting thread, with runs of one count and thread
    /// large enough that both threads sort some: the text is still Python's order.
    #[test]
    fn sorting_on_two_threads_equals_sorting_the_text() {
        for seed in 1..4 {
            let file = profile_of(&["f", "ff", "f.g", "F", "<module>", "é", "g"], seed, 40_000);
            let text = ours(&file);
            assert!(text.lines().count() >= LINES_FOR_A_SORTING_THREAD);
            assert_eq!(text, reference(&file), "seed {seed}");
        }
    }

    /// Labels holding the separator or NUL (a torn name from CPython's sampler) are
    /// compared as the bytes they are.
    #[test]
    fn labels_with_separators_sort_as_their_text() {
        for seed in 1..4 {
            let file = profile(&["f", "f;g", "f;", "f\0", "ff"], seed);
            assert_eq!(ours(&file), reference(&file), "seed {seed}");
        }
    }
}
