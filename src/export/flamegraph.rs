//! An interactive flamegraph SVG, drawn by the `inferno` crate (click to zoom, Ctrl-F
//! to search, a tooltip per frame with its sample count and percentage).
//!
//! Frames read `funcname (file:line)` (`funcname (file)` with no location, the bare name
//! for CPython's synthetic `~` frames, `<unnamed>` if that name is empty). The title is
//! the input's file name (or `--title`), the subtitle the sample and thread counts.
//!
//! Merged (default): all threads in one graph. `--per-thread`: one graph per thread in
//! the same SVG, as one root frame per thread (`[thread <id>]`, or
//! `[thread <id>, interpreter <n>]` outside the main interpreter) under `all`, so a
//! thread's share of the whole profile is its root frame's width and clicking it zooms
//! to that thread alone.
//!
//! The aggregated index (samples per unique stack and thread; see `ProfileIndex::build`)
//! becomes a call tree (a node per distinct label path), and inferno gets
//! only the frames it can draw, so memory grows with unique stacks, not with samples.
//! Colours come from a hash of the frame name and inferno sorts its input, so output is
//! deterministic. Native frames of a `--native` recording
//! ([`FrameEntry::is_native`](crate::tach::FrameEntry::is_native)) are blue (inferno's
//! Python palette gives Python code red, yellow for the standard library and aqua for
//! site-packages); files without native frames are drawn as before.

use std::fmt::Write as _;
use std::io::Write;

use inferno::flamegraph::{self, color, Options, TextTruncateDirection};

use rayon::prelude::*;

use super::exporter::{ExportError, ExportInput, Exporter, Result};
use super::render::{is_internal_filename, lineno};
use crate::tach::TachFile;

pub struct Flamegraph;

/// A frame's label in folded-stack form: `;` separates frames and a line break ends a
/// stack there, so both are replaced in names.
#[cfg(test)]
fn frame_label(file: &TachFile, frame: u32) -> String {
    let mut text = String::new();
    push_frame_label(file, frame, &mut text);
    text
}

/// Appends `frame_label` to `out`. Labels are rendered straight into the stack text
/// they belong to: the synthetic profiles' labels are long and nearly all distinct, and
/// keeping a copy of each cost more memory than the lines that use them.
fn push_frame_label(file: &TachFile, frame: u32, out: &mut String) {
    let func = file.funcname(frame);
    let path = file.filename(frame);
    let has_location = file.frames()[frame as usize].location().is_some();
    let start = out.len();
    if func.is_empty() && path == "~" && !has_location {
        // An empty label would be an invisible frame, and a stack of only that frame a
        // line inferno cannot parse.
        out.push_str("<unnamed>");
    } else if path == "~" && !has_location {
        out.push_str(func);
    } else if has_location {
        write!(out, "{func} ({path}:{})", lineno(file, frame)).expect("writing to a String");
    } else {
        write!(out, "{func} ({path})").expect("writing to a String");
    }
    sanitize_from(out, start);
}

/// Makes `out[start..]` a valid folded-stack label.
fn sanitize_from(out: &mut String, start: usize) {
    let b = &out.as_bytes()[start..];
    // Labels are long in some profiles: map chars only when one needs replacing; the
    // byte scans below are memchr-fast.
    if b.contains(&b';') || b.contains(&b'\n') || b.contains(&b'\r') {
        let mapped: String = out[start..]
            .chars()
            .map(|c| match c {
                ';' => ':',
                '\n' | '\r' => ' ',
                c => c,
            })
            .collect();
        out.truncate(start);
        out.push_str(&mapped);
    }
    // inferno reads `stack A B` (two trailing numbers) as a differential flamegraph, so
    // a leaf named like `worker 12` must not end in ` <number>`: its last space becomes
    // a no-break space, which looks the same.
    if let Some(i) = out[start..].rfind(' ') {
        let i = start + i;
        let tail = &out[i + 1..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            out.replace_range(i..i + 1, "\u{a0}");
        }
    }
}

/// What a tree node shows: a thread root, or the frames with one (funcname, filename,
/// line) key, drawn through a representative frame. Text is rendered only for the nodes
/// inferno gets, as most nodes of a big profile are too narrow to draw.
enum Label {
    /// An index into `Tree::thread_names`.
    Thread(u32),
    Frame(u32),
}

/// The call tree: a node per distinct label path, root first. TACH frames with the same
/// label key are one node.
struct Tree {
    labels: Vec<Label>,
    thread_names: Vec<String>,
    /// Per node: label id (u32::MAX for the root), total samples, first child, next sibling.
    nodes: Vec<Node>,
    /// Per node: its number of children. Nearly every node of a real or synthetic
    /// profile has none or one, and a short sibling list is found faster by walking it
    /// than by hashing; only nodes with more than SCAN_CHILDREN children use `children`.
    child_count: Vec<u32>,
    /// (parent, label) -> child, for the parents with many children.
    children: FxMap<(u32, u32), u32>,
}

/// Children a parent may have before its children are looked up by hash.
const SCAN_CHILDREN: u32 = 8;

#[derive(Clone, Copy)]
struct Node {
    label: u32,
    parent: u32,
    /// Samples ending here while building; samples of the whole subtree after `finish`.
    total: u64,
    first_child: u32,
    next_sibling: u32,
}

const NONE: u32 = u32::MAX;
/// `frame_label_id` mark for the profiler's own frames, which are left out.
const SKIP: u32 = u32::MAX - 1;

/// FxHash (rustc's hasher) for the small integer keys of the tree: deep stacks mean
/// millions of lookups, and SipHash made them most of the export's time.
type FxMap<K, V> = rustc_hash::FxHashMap<K, V>;

impl Tree {
    fn new() -> Self {
        Tree {
            labels: Vec::new(),
            thread_names: Vec::new(),
            nodes: vec![Node {
                label: NONE,
                parent: NONE,
                total: 0,
                first_child: NONE,
                next_sibling: NONE,
            }],
            child_count: vec![0],
            children: FxMap::default(),
        }
    }

    fn child(&mut self, parent: u32, label: u32) -> u32 {
        let count = self.child_count[parent as usize];
        if count <= SCAN_CHILDREN {
            let mut c = self.nodes[parent as usize].first_child;
            while c != NONE {
                let n = &self.nodes[c as usize];
                if n.label == label {
                    return c;
                }
                c = n.next_sibling;
            }
        } else if let Some(&c) = self.children.get(&(parent, label)) {
            return c;
        }
        let id = self.nodes.len() as u32;
        let p = &mut self.nodes[parent as usize];
        let next_sibling = p.first_child;
        p.first_child = id;
        self.nodes.push(Node {
            label,
            parent,
            total: 0,
            first_child: NONE,
            next_sibling,
        });
        self.child_count.push(0);
        self.child_count[parent as usize] = count + 1;
        if count == SCAN_CHILDREN {
            // The parent outgrew the list scan: from now on its children are looked up
            // in the map, so all of them go in.
            let mut c = id;
            while c != NONE {
                let n = &self.nodes[c as usize];
                self.children.insert((parent, n.label), c);
                c = n.next_sibling;
            }
        } else if count > SCAN_CHILDREN {
            self.children.insert((parent, label), id);
        }
        id
    }

    /// Turns per-node sample counts into subtree totals. A child is always created
    /// after its parent, so one backward sweep suffices.
    fn finish(&mut self) {
        for id in (1..self.nodes.len()).rev() {
            let n = self.nodes[id];
            self.nodes[n.parent as usize].total += n.total;
        }
    }
}

/// Per frame of the table: its label id, or SKIP for the profiler's own frames (and for
/// frames naming a string that does not exist, which the decoder rejects before any
/// sample reaches them). A label depends on (funcname, filename, line or none) only, so
/// frames that differ by columns or opcode share one. The keys are sorted (on all
/// cores) rather than hashed: a sort walks the big frame tables of synthetic profiles in
/// order, where a hash map of their keys misses the cache on nearly every frame. Labels
/// are numbered in key order; the number is only a name (inferno sorts what it draws).
fn frame_labels(file: &TachFile, labels: &mut Vec<Label>) -> Vec<u32> {
    let strings = file.strings();
    let internal: Vec<bool> = strings.iter().map(|s| is_internal_filename(s)).collect();
    let bad = file.bad_strings();
    let mut keyed: Vec<(u128, u32)> = file
        .frames()
        .iter()
        .enumerate()
        .filter(|&(i, e)| bad[i].is_none() && !internal[e.filename as usize])
        .map(|(i, e)| {
            // lineno -1 is "no location" (it cannot be a real line).
            let key =
                (e.funcname as u128) << 64 | (e.filename as u128) << 32 | e.lineno as u32 as u128;
            (key, i as u32)
        })
        .collect();
    keyed.par_sort_unstable();
    let mut ids = vec![SKIP; file.frames().len()];
    let mut last = None;
    for &(key, frame) in &keyed {
        if last != Some(key) {
            labels.push(Label::Frame(frame));
            last = Some(key);
        }
        ids[frame as usize] = labels.len() as u32 - 1;
    }
    ids
}

/// Builds the call tree of the kept samples from the aggregated index: per thread under a `[thread …]` node, or merged. Each
/// (thread, stack) pair is one walk down the tree, from the deepest frame it shares
/// with the thread's previous stack (stacks in first-seen order mostly differ only in
/// their innermost frames). Stacks with no Python frame are left out, as CPython's
/// collapsed output does. Returns the tree, the kept samples and the threads that have
/// any.
fn build_tree(input: &ExportInput<'_>, per_thread: bool) -> Result<(Tree, u64, usize)> {
    let file = input.file;
    let index = input.index()?;
    let mut tree = Tree::new();
    let frame_label_id = frame_labels(file, &mut tree.labels);
    // The last stack walked, root first, and the node reached after each of its frames.
    let mut path_frames: Vec<u32> = Vec::new();
    let mut path_nodes: Vec<u32> = Vec::new();
    for thread in &index.threads {
        // The node stacks hang from: the thread's root frame, or the tree root (merged).
        let base = if per_thread {
            let text = if thread.interpreter_id == 0 {
                format!("[thread {}]", thread.thread_id)
            } else {
                format!(
                    "[thread {}, interpreter {}]",
                    thread.thread_id, thread.interpreter_id
                )
            };
            tree.labels
                .push(Label::Thread(tree.thread_names.len() as u32));
            tree.thread_names.push(text);
            let label = tree.labels.len() as u32 - 1;
            tree.child(0, label)
        } else {
            0
        };
        path_frames.clear();
        path_nodes.clear();
        for &(id, count) in &thread.stacks {
            let stack = index.stacks.get(id);
            let shared = path_frames
                .iter()
                .zip(stack.iter().rev())
                .take_while(|(a, b)| a == b)
                .count();
            path_frames.truncate(shared);
            path_nodes.truncate(shared);
            let mut node = path_nodes.last().copied().unwrap_or(base);
            for &f in stack[..stack.len() - shared].iter().rev() {
                // The reader validates frame indices; never index past them.
                let label = frame_label_id.get(f as usize).copied().unwrap_or(SKIP);
                if label != SKIP {
                    node = tree.child(node, label);
                }
                path_frames.push(f);
                path_nodes.push(node);
            }
            if node != base {
                tree.nodes[node as usize].total += count;
            }
        }
    }
    tree.finish();
    Ok((tree, index.total_samples, index.threads.len()))
}

/// The folded stacks (`frame;frame;... count`, root first) inferno draws (it sorts them).
/// A subtree narrower than `min_samples` is written as one line for its top frame:
/// inferno omits such frames and everything above them anyway, and the top frame keeps
/// its width, so the picture is the same (byte for byte on the golden files) while the
/// text no longer grows with every unique stack.
fn folded_lines(file: &TachFile, tree: &Tree, min_samples: f64) -> String {
    // A first walk bounds the text's size (tens of megabytes for deep stacks), so that
    // it is allocated once rather than grown: growing copies it and holds both copies,
    // and fresh memory is what this export spends much of its time faulting in.
    let mut bound = TextLength(0);
    let mut size = 0;
    walk_lines(file, tree, min_samples, &mut bound, |prefix, count| {
        size += prefix.0 + 2 + count.checked_ilog10().unwrap_or(0) as usize + 1;
    });
    let mut out = String::with_capacity(size);
    walk_lines(
        file,
        tree,
        min_samples,
        &mut String::new(),
        |prefix, count| {
            out.push_str(prefix);
            out.push(' ');
            write!(out, "{count}").expect("writing to a String cannot fail");
            out.push('\n');
        },
    );
    debug_assert!(out.len() <= size, "{} > {size}", out.len());
    out
}

/// Calls `line(prefix, count)` for each folded line: a node's stack and its own samples
/// (those not in a drawn child; all of them when it is too narrow to draw children).
fn walk_lines<T: StackText>(
    file: &TachFile,
    tree: &Tree,
    min_samples: f64,
    prefix: &mut T,
    mut line: impl FnMut(&T, u64),
) {
    // (node, prefix length before it) on an explicit stack: stacks can be deep.
    let mut todo: Vec<(u32, usize)> = Vec::new();
    let push_children = |todo: &mut Vec<(u32, usize)>, first: u32, at: usize| {
        let mut c = first;
        while c != NONE {
            todo.push((c, at));
            c = tree.nodes[c as usize].next_sibling;
        }
    };
    push_children(&mut todo, tree.nodes[0].first_child, 0);
    while let Some((id, at)) = todo.pop() {
        let n = tree.nodes[id as usize];
        prefix.truncate(at);
        if at > 0 {
            prefix.push_separator();
        }
        prefix.push_label(file, tree, n.label);
        let wide = (n.total as f64) >= min_samples;
        let mut self_count = n.total;
        if wide {
            let mut c = n.first_child;
            while c != NONE {
                self_count -= tree.nodes[c as usize].total;
                c = tree.nodes[c as usize].next_sibling;
            }
        }
        if self_count > 0 {
            line(prefix, self_count);
        }
        if wide {
            push_children(&mut todo, n.first_child, prefix.len());
        }
    }
}

/// What `walk_lines` builds a stack's text in: the text itself, or a bound on its length.
trait StackText {
    fn len(&self) -> usize;
    fn truncate(&mut self, len: usize);
    fn push_separator(&mut self);
    fn push_label(&mut self, file: &TachFile, tree: &Tree, label: u32);
}

impl StackText for String {
    fn len(&self) -> usize {
        String::len(self)
    }
    fn truncate(&mut self, len: usize) {
        String::truncate(self, len)
    }
    fn push_separator(&mut self) {
        self.push(';')
    }
    fn push_label(&mut self, file: &TachFile, tree: &Tree, label: u32) {
        match tree.labels[label as usize] {
            Label::Thread(i) => self.push_str(&tree.thread_names[i as usize]),
            Label::Frame(f) => push_frame_label(file, f, self),
        }
    }
}

/// At least the length of the text `String` builds: a frame label is at most its
/// funcname and filename, ` (`, `:`, `)`, an i32 (11 bytes) and one byte for the
/// no-break space `sanitize_from` may put in (`<unnamed>` fits too).
struct TextLength(usize);

impl StackText for TextLength {
    fn len(&self) -> usize {
        self.0
    }
    fn truncate(&mut self, len: usize) {
        self.0 = len
    }
    fn push_separator(&mut self) {
        self.0 += 1
    }
    fn push_label(&mut self, file: &TachFile, tree: &Tree, label: u32) {
        self.0 += match tree.labels[label as usize] {
            Label::Thread(i) => tree.thread_names[i as usize].len(),
            Label::Frame(f) => file.funcname(f).len() + file.filename(f).len() + 16,
        }
    }
}

impl Exporter for Flamegraph {
    fn name(&self) -> &'static str {
        "flamegraph"
    }
    fn description(&self) -> &'static str {
        "interactive flamegraph SVG (inferno); --per-thread for one root frame per thread"
    }
    fn options(&self) -> &'static [super::exporter::FormatOption] {
        &[super::exporter::FormatOption {
            name: "per-thread",
            value_name: None,
            repeatable: false,
            help: "one graph per thread",
            apply: |options, _| {
                options.per_thread = true;
                Ok(())
            },
        }]
    }
    fn extension(&self) -> &'static str {
        ".flamegraph.svg"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let file = input.file;
        let per_thread = input.options.per_thread;
        let (tree, samples, threads) = build_tree(input, per_thread)?;

        let mut opt = inferno_options(input.title(), samples, threads, per_thread);
        let mut palette = native_palette(file);
        if let Some(p) = palette.as_mut() {
            opt.palette_map = Some(p);
        }

        // inferno's own cut-off: frames narrower than `min_width` percent of the total
        // are not drawn (computed with inferno's expression, so the same float).
        let total = tree.nodes[0].total;
        let min_samples = opt.min_width / (100.0 / total as f64);
        let lines = folded_lines(file, &tree, min_samples);
        drop(tree);
        if lines.is_empty() {
            // inferno draws an error SVG and fails on empty input: say why instead.
            return Err(ExportError::Unsupported(format!(
                "{}: no samples with Python frames to draw (after filters)",
                file.path().display()
            )));
        }
        flamegraph::from_lines(&mut opt, lines.lines(), out).map_err(io_err)
    }
}

/// inferno's settings: title, subtitle, Python palette with name-hashed (deterministic)
/// colours, and labels cut on the right so the function name shows.
fn inferno_options(
    title: String,
    samples: u64,
    threads: usize,
    per_thread: bool,
) -> Options<'static> {
    let mut opt = Options::default();
    opt.title = title;
    opt.subtitle = Some(format!(
        "{samples} samples, {threads} thread{}{}",
        if threads == 1 { "" } else { "s" },
        if per_thread {
            ", one root frame per thread"
        } else {
            ""
        }
    ));
    opt.colors = color::Palette::Multi(color::MultiPalette::Python);
    opt.hash = true;
    opt.text_truncate_direction = TextTruncateDirection::Right;
    opt.count_name = "samples".into();
    opt.name_type = "Function:".into();
    opt
}

/// The colours of the native frames' labels (blue, varied by a hash of the label so
/// that neighbours differ), or `None` when the file has none. inferno colours every
/// other label as without a map.
fn native_palette(file: &TachFile) -> Option<color::PaletteMap> {
    let native = super::exporter::walked_native_frames(file);
    if !native.contains(&true) {
        return None;
    }
    let mut palette = color::PaletteMap::default();
    let mut label = String::new();
    for (f, _) in native.iter().enumerate().filter(|(_, &n)| n) {
        label.clear();
        push_frame_label(file, f as u32, &mut label);
        // FNV-1a: stable across runs and platforms.
        let h = label.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let c = NATIVE_BLUE;
        let v = (h % 50) as u8;
        palette.insert(
            &label,
            color::Color {
                r: c.r + v,
                g: c.g + v,
                b: c.b,
            },
        );
    }
    Some(palette)
}

/// The darkest native colour (up to 49 lighter in red and green).
const NATIVE_BLUE: color::Color = color::Color {
    r: 80,
    g: 130,
    b: 235,
};

fn io_err(source: std::io::Error) -> ExportError {
    ExportError::Io {
        path: "output".into(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::render::is_internal;
    use crate::export::{export_to, ExportOptions};
    use crate::tach::index::ProfileIndex;
    use crate::tach::SampleFilter;

    /// Every unique stack as a full folded line, the way inferno is usually fed.
    fn naive_lines(file: &TachFile, index: &ProfileIndex, per_thread: bool) -> String {
        let mut out = String::new();
        for t in &index.threads {
            for &(stack, count) in &t.stacks {
                let mut parts: Vec<String> = Vec::new();
                if per_thread {
                    parts.push(if t.interpreter_id == 0 {
                        format!("[thread {}]", t.thread_id)
                    } else {
                        format!("[thread {}, interpreter {}]", t.thread_id, t.interpreter_id)
                    });
                }
                let before = parts.len();
                for &f in index.stacks.get(stack).iter().rev() {
                    if !is_internal(file, f) {
                        parts.push(frame_label(file, f));
                    }
                }
                if parts.len() > before {
                    out.push_str(&format!("{} {count}\n", parts.join(";")));
                }
            }
        }
        out
    }

    /// Pruning the tree before inferno changes nothing in the picture: the SVG equals
    /// the one inferno draws from every full stack, for every golden file with samples.
    /// (In debug builds this also checks that `TextLength` bounds the lines' size.)
    #[test]
    fn pruned_input_draws_the_same_svg_as_full_stacks() {
        let dir = crate::golden_corpus::golden_dir();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".bin") && !n.contains("empty"))
            .collect();
        names.sort();
        assert!(names.len() >= 15, "{names:?}");
        for name in &names {
            let file = TachFile::open(dir.join(name)).unwrap();
            let filter = SampleFilter::default();
            for per_thread in [false, true] {
                let options = ExportOptions {
                    per_thread,
                    title: None,
                    ..Default::default()
                };
                let mut ours = Vec::new();
                export_to(&Flamegraph, &file, &filter, &options, &mut ours).unwrap();

                let index = ProfileIndex::build(&file, &filter).unwrap();
                let lines = naive_lines(&file, &index, per_thread);
                let mut opt = inferno_options(
                    name.to_string(),
                    index.total_samples,
                    index.threads.len(),
                    per_thread,
                );
                let mut full = Vec::new();
                flamegraph::from_lines(&mut opt, lines.lines(), &mut full).unwrap();
                assert!(ours == full, "{name} per_thread={per_thread}");
            }
        }
    }
}
