//! Collapsed stacks (Brendan Gregg's format), byte-identical to CPython's
//! `replay --collapsed`: `tid:<thread_id>;frame;...;frame <count>` per (thread, stack),
//! root first, sorted by count descending then by text.

use rustc_hash::FxHashMap as HashMap;
use std::io::Write;

use super::render::{basename, is_internal, lineno};
use super::{write_error, ExportInput, Exporter, Result};
use crate::tach::TachFile;

pub struct Collapsed;

/// `file:func:line`, or the bare name of a synthetic frame ("~" with no line).
pub fn frame_label(file: &TachFile, frame: u32, out: &mut String) {
    let filename = file.filename(frame);
    let funcname = file.funcname(frame);
    let line = lineno(file, frame);
    if filename == "~" && line == 0 {
        out.push_str(funcname);
    } else {
        out.push_str(basename(filename));
        out.push(':');
        out.push_str(funcname);
        out.push(':');
        out.push_str(&line.to_string());
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
        let file = input.file;
        // CPython keys a line on the thread id and the stack's (full filename, line,
        // function) triples, not on the rendered text: two files with the same basename
        // give two lines with identical text, and it writes both. Frames that differ only
        // in columns or opcode merge. The interpreter id is dropped.
        // Per frame index: its line key, SKIP for dropped frames, UNSEEN until needed.
        const UNSEEN: u32 = u32::MAX;
        const SKIP: u32 = u32::MAX - 1;
        let mut key_of_frame: Vec<u32> = vec![UNSEEN; file.frames().len()];
        let mut keys: HashMap<(&str, i32, &str), u32> = HashMap::default();
        let mut labels: Vec<String> = Vec::new();
        let mut lines: HashMap<(u64, Box<[u32]>), u64> = HashMap::default();
        let mut key: Vec<u32> = Vec::with_capacity(256);
        for t in &index.threads {
            for &(stack_id, count) in &t.stacks {
                let stack = index.stacks.get(stack_id);
                key.clear();
                for &f in stack.iter().rev() {
                    let mut k = key_of_frame[f as usize];
                    if k == UNSEEN {
                        k = if is_internal(file, f) {
                            SKIP
                        } else {
                            let triple = (file.filename(f), lineno(file, f), file.funcname(f));
                            *keys.entry(triple).or_insert_with(|| {
                                let mut label = String::new();
                                frame_label(file, f, &mut label);
                                labels.push(label);
                                labels.len() as u32 - 1
                            })
                        };
                        key_of_frame[f as usize] = k;
                    }
                    if k != SKIP {
                        key.push(k);
                    }
                }
                if key.is_empty() {
                    continue;
                }
                *lines
                    .entry((t.thread_id, key.as_slice().into()))
                    .or_insert(0) += count;
            }
        }
        let mut rendered: Vec<(String, u64)> = lines
            .into_iter()
            .map(|((tid, key), count)| {
                let len: usize = key.iter().map(|&k| labels[k as usize].len() + 1).sum();
                let mut text = String::with_capacity(len + 24);
                text.push_str("tid:");
                text.push_str(&tid.to_string());
                for &k in key.iter() {
                    text.push(';');
                    text.push_str(&labels[k as usize]);
                }
                (text, count)
            })
            .collect();
        // Python's sort by (-count, text); lines with equal keys are identical text.
        rendered.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let err = write_error("output");
        for (line, count) in rendered {
            writeln!(out, "{line} {count}").map_err(&err)?;
        }
        Ok(())
    }
}
