//! Collapsed stacks (Brendan Gregg's format), byte-identical to CPython's
//! `replay --collapsed`: `tid:<thread_id>;frame;...;frame <count>` per (thread, stack),
//! root first, sorted by count descending then by text.

use std::collections::HashMap;
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
        let mut key_of_frame: HashMap<u32, u32> = HashMap::new();
        let mut keys: HashMap<(&str, i32, &str), u32> = HashMap::new();
        let mut labels: Vec<String> = Vec::new();
        let mut lines: HashMap<(u64, Vec<u32>), u64> = HashMap::new();
        for t in &index.threads {
            for &(stack_id, count) in &t.stacks {
                let stack = index.stacks.get(stack_id);
                let mut key = Vec::with_capacity(stack.len());
                for &f in stack.iter().rev() {
                    if is_internal(file, f) {
                        continue;
                    }
                    let k = *key_of_frame.entry(f).or_insert_with(|| {
                        let triple = (file.filename(f), lineno(file, f), file.funcname(f));
                        *keys.entry(triple).or_insert_with(|| {
                            let mut label = String::new();
                            frame_label(file, f, &mut label);
                            labels.push(label);
                            labels.len() as u32 - 1
                        })
                    });
                    key.push(k);
                }
                if key.is_empty() {
                    continue;
                }
                *lines.entry((t.thread_id, key)).or_insert(0) += count;
            }
        }
        let mut rendered: Vec<(String, u64)> = lines
            .into_iter()
            .map(|((tid, key), count)| {
                let mut text = format!("tid:{tid}");
                for k in key {
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
