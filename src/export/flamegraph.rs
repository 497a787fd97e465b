//! An interactive flamegraph SVG, drawn by the `inferno` crate (click to zoom, Ctrl-F
//! to search, a tooltip per frame with its sample count and percentage).
//!
//! Frames read `funcname (file:line)` (`funcname (file)` with no location, the bare name
//! for CPython's synthetic `~` frames). The title is the input's file name (or
//! `--title`), the subtitle the sample and thread counts.
//!
//! Merged (default): all threads in one graph. `--per-thread`: one graph per thread in
//! the same SVG, as one root frame per thread (`thread <id>`, with `interpreter <n>`
//! when not the main interpreter) under `all`, so a thread's share of the whole profile
//! is its root frame's width and clicking it zooms to that thread alone.
//!
//! Input is the aggregated index (unique stacks with per-thread counts, built without
//! timelines), so memory grows with unique stacks, not with samples. Colors come from a
//! hash of the frame name and lines are sorted, so output is deterministic.

use std::collections::HashMap;
use std::io::Write;

use inferno::flamegraph::{self, color, Options};

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
    let text = if path == "~" && !has_location {
        func.to_string()
    } else if has_location {
        format!("{func} ({path}:{})", lineno(file, frame))
    } else {
        format!("{func} ({path})")
    };
    sanitize(&text)
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// The folded stacks (`frame;frame;... count`, root first), one line per (thread, stack)
/// in per-thread mode, one per stack in merged mode.
fn folded_lines(file: &TachFile, index: &ProfileIndex, per_thread: bool) -> String {
    let mut labels: HashMap<u32, String> = HashMap::new();
    let mut text = String::new();
    let mut merged: HashMap<u32, u64> = HashMap::new();
    let mut write_stack = |text: &mut String, prefix: Option<&str>, stack_id: u32, count: u64| {
        let start = text.len();
        let mut any = false;
        if let Some(p) = prefix {
            text.push_str(p);
            any = true;
        }
        for &f in index.stacks.get(stack_id).iter().rev() {
            if is_internal(file, f) {
                continue;
            }
            if any {
                text.push(';');
            }
            any = true;
            text.push_str(labels.entry(f).or_insert_with(|| frame_label(file, f)));
        }
        if !any {
            // An empty stack has nothing to draw in the merged graph.
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
                format!("thread {}", t.thread_id)
            } else {
                format!("thread {} interpreter {}", t.thread_id, t.interpreter_id)
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
        opt.subtitle = Some(format!(
            "{} samples, {} threads{}",
            index.total_samples,
            index.threads.len(),
            if per_thread {
                ", one root frame per thread"
            } else {
                ""
            }
        ));
        opt.colors = color::Palette::Multi(color::MultiPalette::Python);
        opt.hash = true;
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
