//! Per-line, per-file and per-function sample counts for the heatmap, from the
//! aggregated stacks.
//!
//! - Stacks first lose the profiler's own frames (`_sync_coordinator.py`, as every
//!   CPython collector); a stack left empty counts nowhere.
//! - Frames whose filename is not a source file are left out: empty, starting with `<`
//!   or `[`, or one of `~`, `...`, `.` (CPython's heatmap skips the same ones), and
//!   `__init__` with line 0. A missing location is line 0.
//! - self: the sample's innermost frame (when it is a source frame); inclusive (total):
//!   each (file, line), file and function counted once per sample however often it
//!   appears on the stack (recursion).
//! - Opcodes: every frame with an opcode adds to its line's (line, opcode) count, once
//!   per occurrence (CPython's heatmap counts the same way), so with recursion a
//!   line's opcode counts can add up to more than its inclusive count.
//! - Calls: each adjacent (callee, caller) pair of source frames adds the stack's
//!   count to that function edge, per occurrence (as pstats' callers).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use crate::export::exporter::{ExportInput, Result};
use crate::export::render::{is_internal, lineno};
use crate::tach::TachFile;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub self_samples: u64,
    pub total: u64,
}

#[derive(Debug, Default)]
pub struct FileHeat {
    pub path: String,
    pub counts: Counts,
    /// Per sampled line.
    pub lines: BTreeMap<i32, Counts>,
    /// (line, opcode) -> samples, for frames that carry an opcode.
    pub opcodes: BTreeMap<(i32, u8), u64>,
}

#[derive(Debug)]
pub struct FuncHeat {
    pub file: u32,
    pub name: String,
    /// The smallest line sampled in the function: where links to it point.
    pub first_line: i32,
    pub counts: Counts,
    pub callers: BTreeMap<u32, u64>,
    pub callees: BTreeMap<u32, u64>,
}

/// Everything the heatmap shows, ids in first-seen order (sorted when written).
#[derive(Debug, Default)]
pub struct Heat {
    /// Samples with at least one frame left after dropping the profiler's own.
    pub total_samples: u64,
    pub files: Vec<FileHeat>,
    pub funcs: Vec<FuncHeat>,
    pub has_opcodes: bool,
}

/// True when `filename` names a source file the heatmap can show.
pub fn is_source_file(filename: &str, line: i32) -> bool {
    !(filename.is_empty()
        || filename.starts_with('<')
        || filename.starts_with('[')
        || matches!(filename, "~" | "..." | ".")
        || (filename == "__init__" && line == 0))
}

/// What a frame maps to: (file id, line id within the heat's line table, func id).
#[derive(Clone, Copy)]
struct FrameSlot {
    file: u32,
    line: u32,
    func: u32,
}

const UNSET: u32 = u32::MAX;
const SKIP: u32 = u32::MAX - 1;

pub fn build(input: &ExportInput<'_>) -> Result<Heat> {
    let index = input.index()?;
    let file: &TachFile = input.file;
    let counts = index.stack_totals();

    let mut heat = Heat::default();
    let mut file_ids: HashMap<&str, u32> = HashMap::default();
    let mut func_ids: HashMap<(u32, &str), u32> = HashMap::default();
    let mut line_ids: HashMap<(u32, i32), u32> = HashMap::default();
    let mut line_keys: Vec<(u32, i32)> = Vec::new();
    // `file` of a slot is UNSET until computed, SKIP for frames left out.
    let mut slots = vec![
        FrameSlot {
            file: UNSET,
            line: 0,
            func: 0
        };
        file.frames().len()
    ];
    // The stack id that last counted each line / file / func (once per sample).
    let (mut line_seen, mut file_seen, mut func_seen) = (Vec::new(), Vec::new(), Vec::new());
    let mut kept: Vec<(u32, Option<u8>)> = Vec::with_capacity(256);

    for (id, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let id = id as u32;
        kept.clear();
        let mut any = false;
        for &f in index.stacks.get(id) {
            if is_internal(file, f) {
                continue;
            }
            any = true;
            let slot = &mut slots[f as usize];
            if slot.file == UNSET {
                let (name, line) = (file.filename(f), lineno(file, f));
                if !is_source_file(name, line) {
                    slot.file = SKIP;
                } else {
                    let fid = *file_ids.entry(name).or_insert_with(|| {
                        heat.files.push(FileHeat {
                            path: name.to_string(),
                            ..Default::default()
                        });
                        file_seen.push(UNSET);
                        (heat.files.len() - 1) as u32
                    });
                    let lid = *line_ids.entry((fid, line)).or_insert_with(|| {
                        line_keys.push((fid, line));
                        line_seen.push(UNSET);
                        (line_keys.len() - 1) as u32
                    });
                    let fname = file.funcname(f);
                    let func = *func_ids.entry((fid, fname)).or_insert_with(|| {
                        heat.funcs.push(FuncHeat {
                            file: fid,
                            name: fname.to_string(),
                            first_line: line,
                            counts: Counts::default(),
                            callers: BTreeMap::new(),
                            callees: BTreeMap::new(),
                        });
                        func_seen.push(UNSET);
                        (heat.funcs.len() - 1) as u32
                    });
                    let fh = &mut heat.funcs[func as usize];
                    fh.first_line = fh.first_line.min(line);
                    *slot = FrameSlot {
                        file: fid,
                        line: lid,
                        func,
                    };
                }
            }
            kept.push((f, file.frames()[f as usize].opcode()));
        }
        if !any {
            continue;
        }
        heat.total_samples += count;
        let mut prev_func: Option<u32> = None;
        for (pos, &(f, opcode)) in kept.iter().enumerate() {
            let slot = slots[f as usize];
            if slot.file == SKIP {
                prev_func = None;
                continue;
            }
            let (fid, line) = line_keys[slot.line as usize];
            let fh = &mut heat.files[fid as usize];
            let lc = fh.lines.entry(line).or_default();
            if pos == 0 {
                lc.self_samples += count;
                fh.counts.self_samples += count;
                heat.funcs[slot.func as usize].counts.self_samples += count;
            }
            if line_seen[slot.line as usize] != id {
                line_seen[slot.line as usize] = id;
                lc.total += count;
            }
            if file_seen[fid as usize] != id {
                file_seen[fid as usize] = id;
                fh.counts.total += count;
            }
            if let Some(op) = opcode {
                heat.has_opcodes = true;
                *fh.opcodes.entry((line, op)).or_default() += count;
            }
            if func_seen[slot.func as usize] != id {
                func_seen[slot.func as usize] = id;
                heat.funcs[slot.func as usize].counts.total += count;
            }
            if let Some(callee) = prev_func {
                *heat.funcs[callee as usize]
                    .callers
                    .entry(slot.func)
                    .or_default() += count;
                *heat.funcs[slot.func as usize]
                    .callees
                    .entry(callee)
                    .or_default() += count;
            }
            prev_func = Some(slot.func);
        }
    }
    Ok(heat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::ExportOptions;
    use crate::tach::SampleFilter;

    #[test]
    fn source_file_names() {
        assert!(is_source_file("/a/b.py", 3));
        assert!(is_source_file("__init__", 1));
        for bad in ["", "<frozen os>", "[native]", "~", "...", "."] {
            assert!(!is_source_file(bad, 1), "{bad}");
        }
        assert!(!is_source_file("__init__", 0));
    }

    /// On a recursive golden profile: inclusive never exceeds the samples, and a
    /// line's self never exceeds its inclusive count.
    #[test]
    fn recursion_counts_once_per_sample() {
        let path = crate::golden_corpus::golden_path("deep_recursion.bin");
        let file = TachFile::open(path).unwrap();
        let (filter, options) = (SampleFilter::default(), ExportOptions::default());
        let input = ExportInput::new(&file, &filter, &options);
        let heat = build(&input).unwrap();
        assert!(heat.total_samples > 0);
        let mut self_sum = 0;
        for f in &heat.files {
            assert!(f.counts.total <= heat.total_samples);
            for c in f.lines.values() {
                assert!(c.self_samples <= c.total && c.total <= f.counts.total);
                self_sum += c.self_samples;
            }
        }
        assert!(self_sum <= heat.total_samples);
        for f in &heat.funcs {
            assert!(f.counts.total <= heat.total_samples);
        }
    }
}
