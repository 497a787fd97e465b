//! An interactive flamegraph SVG, drawn by the `inferno` crate (click to zoom, Ctrl-F
//! to search, a tooltip per frame with its sample count and percentage).
//!
//! Frames read `funcname (file:line)` (`funcname (file)` with no location, the bare name
//! for CPython's synthetic `~` frames, `<unnamed>` if that name is empty). The title is the input's file name (or
//! `--title`), the subtitle the sample and thread counts.
//!
//! Merged (default): all threads in one graph. `--per-thread`: one graph per thread in
//! the same SVG, as one root frame per thread (`[thread <id>]`, or
//! `[thread <id>, interpreter <n>]` outside the main interpreter) under `all`, so a thread's share of the whole profile
//! is its root frame's width and clicking it zooms to that thread alone.
//!
//! Input is the aggregated index (unique stacks with per-thread counts, built without
//! timelines), so memory grows with unique stacks, not with samples. Colors come from a
//! hash of the frame name and lines are sorted, so output is deterministic.

use std::collections::HashMap;
use std::io::Write;

use inferno::flamegraph::{self, color, Options, TextTruncateDirection};

use super::render::{is_internal, lineno};
use super::{ExportError, ExportInput, Exporter, Result};
use crate::tach::index::{IndexOptions, ProfileIndex};
use crate::tach::TachFile;

pub struct Flamegraph;

/// A frame's label in folded-stack form: `;` separates frames and a line break ends a
/// stack there, so both are replaced in names.
fn frame_label(file: &TachFile, frame: u32) -> String {
    let func = file.funcname(frame);
    let path = file.filename(frame);
    let has_location = file.frames()[frame as usize].location().is_some();
    let text = if func.is_empty() && path == "~" && !has_location {
        // An empty label would be an invisible frame, and a stack of only that frame a
        // line inferno cannot parse.
        "<unnamed>".to_string()
    } else if path == "~" && !has_location {
        func.to_string()
    } else if has_location {
        format!("{func} ({path}:{})", lineno(file, frame))
    } else {
        format!("{func} ({path})")
    };
    sanitize(&text)
}

fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect();
    // inferno reads `stack A B` (two trailing numbers) as a differential flamegraph, so
    // a leaf named like `worker 12` must not end in ` <number>`: its last space becomes
    // a no-break space, which looks the same.
    if let Some(i) = out.rfind(' ') {
        let tail = &out[i + 1..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            out.replace_range(i..i + 1, "\u{a0}");
        }
    }
    out
}

/// The folded stacks (`frame;frame;... count`, root first), one line per (thread, stack)
/// in per-thread mode, one per stack in merged mode.
fn folded_lines(file: &TachFile, index: &ProfileIndex, per_thread: bool) -> String {
    let mut labels: HashMap<u32, String> = HashMap::new();
    let mut text = String::new();
    let mut merged: HashMap<u32, u64> = HashMap::new();
    let mut write_stack = |text: &mut String, prefix: Option<&str>, stack_id: u32, count: u64| {
        let start = text.len();
        let mut frames = 0usize;
        if let Some(p) = prefix {
            text.push_str(p);
        }
        for &f in index.stacks.get(stack_id).iter().rev() {
            if is_internal(file, f) {
                continue;
            }
            if frames > 0 || prefix.is_some() {
                text.push(';');
            }
            frames += 1;
            text.push_str(labels.entry(f).or_insert_with(|| frame_label(file, f)));
        }
        if frames == 0 {
            // Samples with no Python frame are left out, as CPython's collapsed output
            // leaves them out, so both modes and CPython agree on the total.
            text.truncate(start);
            return;
        }
        text.push(' ');
        text.push_str(&count.to_string());
        text.push('\n');
    };
    for t in &index.threads {
        if per_thread {
            let prefix = if t.interpreter_id == 0 {
                format!("[thread {}]", t.thread_id)
            } else {
                format!("[thread {}, interpreter {}]", t.thread_id, t.interpreter_id)
            };
            for &(stack_id, count) in &t.stacks {
                write_stack(&mut text, Some(&prefix), stack_id, count);
            }
        } else {
            for &(stack_id, count) in &t.stacks {
                *merged.entry(stack_id).or_insert(0) += count;
            }
        }
    }
    if !per_thread {
        let mut ids: Vec<(u32, u64)> = merged.into_iter().collect();
        ids.sort_unstable();
        for (stack_id, count) in ids {
            write_stack(&mut text, None, stack_id, count);
        }
    }
    text
}

impl Exporter for Flamegraph {
    fn name(&self) -> &'static str {
        "flamegraph"
    }
    fn description(&self) -> &'static str {
        "interactive flamegraph SVG (inferno); --per-thread for one root frame per thread"
    }
    fn extension(&self) -> &'static str {
        ".flamegraph.svg"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let file = input.file;
        // No timelines: a flamegraph needs counts only, and runs grow with samples.
        let index = ProfileIndex::build(file, input.filter, IndexOptions { timelines: false })?;
        let per_thread = input.options.per_thread;
        let lines = folded_lines(file, &index, per_thread);

        let mut opt = Options::default();
        opt.title = input.title();
        let threads = index.threads.len();
        opt.subtitle = Some(format!(
            "{} samples, {threads} thread{}{}",
            index.total_samples,
            if threads == 1 { "" } else { "s" },
            if per_thread {
                ", one root frame per thread"
            } else {
                ""
            }
        ));
        opt.colors = color::Palette::Multi(color::MultiPalette::Python);
        opt.hash = true;
        // Labels start with the function name: cut the path end, not the name.
        opt.text_truncate_direction = TextTruncateDirection::Right;
        opt.count_name = "samples".into();
        opt.name_type = "Function:".into();

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

fn io_err(source: std::io::Error) -> ExportError {
    ExportError::Io {
        path: "output".into(),
        source,
    }
}
