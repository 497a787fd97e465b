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
        out.push_str(itoa_i32(line).as_str());
    }
}

fn itoa_i32(v: i32) -> String {
    v.to_string()
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
        // Lines are keyed by text: the interpreter id is dropped, so the same thread id
        // in two interpreters, or two stacks that differ only in dropped frames, merge.
        let mut label_cache: HashMap<u32, String> = HashMap::new();
        let mut lines: HashMap<String, u64> = HashMap::new();
        let mut text = String::new();
        for t in &index.threads {
            for &(stack_id, count) in &t.stacks {
                let stack = index.stacks.get(stack_id);
                let kept: Vec<u32> = stack
                    .iter()
                    .rev()
                    .copied()
                    .filter(|&f| !is_internal(file, f))
                    .collect();
                if kept.is_empty() {
                    continue;
                }
                text.clear();
                text.push_str("tid:");
                text.push_str(&t.thread_id.to_string());
                for f in kept {
                    text.push(';');
                    let label = label_cache.entry(f).or_insert_with(|| {
                        let mut s = String::new();
                        frame_label(file, f, &mut s);
                        s
                    });
                    text.push_str(label);
                }
                *lines.entry(text.clone()).or_insert(0) += count;
            }
        }
        let mut sorted: Vec<(String, u64)> = lines.into_iter().collect();
        sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let err = write_error("output");
        for (line, count) in sorted {
            writeln!(out, "{line} {count}").map_err(&err)?;
        }
        Ok(())
    }
}
