//! JSONL: CPython's record stream (`JsonlCollector` in
//! `profiling/sampling/jsonl_collector.py`), byte for byte except `run_id`.
//!
//! Records, one JSON object per line, in this order: `meta` (interval, and the mode
//! when the file records one), `string_table` chunks, `frame_table` chunks, `agg`
//! chunks (self / cumulative per frame), `end`. Chunks hold at most 256 entries.
//!
//! - Strings and frames get ids in first-seen order: for each sample, frames
//!   innermost first, the function name interned before the file name.
//! - A frame is (file, function, line, end_line?, col?, end_col?): frames that differ
//!   only in opcode share an id. A frame without a location has line 0 and no other
//!   fields; `end_line` is omitted when <= 0, `col`/`end_col` when negative.
//! - cumulative counts a frame id once per sample; samples_total counts samples with a
//!   non-empty stack after dropping `_sync_coordinator.py` frames.
//! - `run_id` is CPython's random UUID4 hex; ours is derived from the file's bytes so
//!   the output is deterministic (still 32 hex digits, version-4 shaped).
//! - JSON text is as Python's `json.dumps(separators=(",", ":"))`: non-ASCII escaped.

use std::collections::HashMap;
use std::io::Write;

use super::exporter::{write_error, ExportInput, Exporter, Result};
use super::pyjson::push_str;
use super::render::is_internal;
use crate::tach::header::ProfilingMode;
use crate::tach::totals::totals;
use crate::tach::TachFile;

pub struct Jsonl;

const CHUNK: usize = 256;

/// A frame record's location fields, `None` meaning "omitted".
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Fields {
    line: i32,
    end_line: Option<i32>,
    col: Option<i32>,
    end_col: Option<i32>,
}

fn fields(file: &TachFile, frame: u32) -> Fields {
    match file.frames()[frame as usize].location() {
        None => Fields {
            line: 0,
            end_line: None,
            col: None,
            end_col: None,
        },
        Some(l) => Fields {
            line: l.lineno,
            end_line: (l.end_lineno > 0).then_some(l.end_lineno),
            col: (l.column >= 0).then_some(l.column),
            end_col: (l.end_column >= 0).then_some(l.end_column),
        },
    }
}

/// A deterministic stand-in for CPython's random run id: FNV-1a over the file's
/// bytes, shaped like a UUID4 hex string.
fn run_id(file: &TachFile) -> String {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x8422_2325_cbf2_9ce4;
    for &byte in file.raw_bytes() {
        a = (a ^ byte as u64).wrapping_mul(0x100_0000_01b3);
        b = (b ^ byte as u64)
            .wrapping_mul(0x100_0000_01b3)
            .rotate_left(7);
    }
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!("{a:016x}{b:016x}")
}

impl Exporter for Jsonl {
    fn name(&self) -> &'static str {
        "jsonl"
    }
    fn description(&self) -> &'static str {
        "JSON Lines records: strings, frames, per-frame self/cumulative (as CPython's replay --jsonl)"
    }
    fn extension(&self) -> &'static str {
        ".jsonl"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let index = input.index()?;
        let file = input.file;

        let mut string_ids: HashMap<&str, u32> = HashMap::new();
        let mut strings: Vec<&str> = Vec::new();
        // CPython's frame table: one entry per (path, function, location), numbered in
        // the order its collector meets them, strings numbered as each frame is first met.
        let totals = totals(index, file.frames().len(), false, |f| {
            if is_internal(file, f) {
                return None;
            }
            let mut ids = [0u32; 2];
            for (id, s) in ids.iter_mut().zip([file.funcname(f), file.filename(f)]) {
                *id = *string_ids.entry(s).or_insert_with(|| {
                    strings.push(s);
                    (strings.len() - 1) as u32
                });
            }
            let [func_id, path_id] = ids;
            Some((path_id, func_id, fields(file, f)))
        });
        let total = totals.samples;

        let rid = run_id(file);
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
        let base = |buf: &mut Vec<u8>, ty: &str| {
            buf.extend_from_slice(b"{\"type\":\"");
            buf.extend_from_slice(ty.as_bytes());
            buf.extend_from_slice(b"\",\"v\":0,\"run_id\":\"");
            buf.extend_from_slice(rid.as_bytes());
            buf.push(b'"');
        };

        base(&mut buf, "meta");
        let _ = write!(
            buf,
            ",\"sample_interval_usec\":{}",
            file.header().sample_interval_us
        );
        let mode = file.header().config.mode;
        if mode != ProfilingMode::Unknown {
            let _ = write!(buf, ",\"mode\":\"{}\"", mode.name());
        }
        buf.extend_from_slice(b"}\n");

        for (c, chunk) in strings.chunks(CHUNK).enumerate() {
            base(&mut buf, "string_table");
            buf.extend_from_slice(b",\"strings\":[");
            for (i, s) in chunk.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                let _ = write!(buf, "{{\"str_id\":{},\"value\":", c * CHUNK + i);
                push_str(&mut buf, s);
                buf.push(b'}');
            }
            buf.extend_from_slice(b"]}\n");
        }

        for (c, chunk) in totals.keys.chunks(CHUNK).enumerate() {
            base(&mut buf, "frame_table");
            buf.extend_from_slice(b",\"frames\":[");
            for (i, (path, func, fl)) in chunk.iter().map(|k| &k.key).enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                let _ = write!(
                    buf,
                    "{{\"frame_id\":{},\"path_str_id\":{path},\"func_str_id\":{func},\"line\":{}",
                    c * CHUNK + i,
                    fl.line
                );
                if let Some(v) = fl.end_line {
                    let _ = write!(buf, ",\"end_line\":{v}");
                }
                if let Some(v) = fl.col {
                    let _ = write!(buf, ",\"col\":{v}");
                }
                if let Some(v) = fl.end_col {
                    let _ = write!(buf, ",\"end_col\":{v}");
                }
                buf.push(b'}');
            }
            buf.extend_from_slice(b"]}\n");
        }

        for c in 0..totals.keys.len().div_ceil(CHUNK) {
            base(&mut buf, "agg");
            let _ = write!(
                buf,
                ",\"kind\":\"frame\",\"scope\":\"final\",\"samples_total\":{total},\"entries\":["
            );
            let end = ((c + 1) * CHUNK).min(totals.keys.len());
            for fid in c * CHUNK..end {
                if fid > c * CHUNK {
                    buf.push(b',');
                }
                let _ = write!(
                    buf,
                    "{{\"frame_id\":{fid},\"self\":{},\"cumulative\":{}}}",
                    totals.keys[fid].self_samples, totals.keys[fid].cumulative
                );
            }
            buf.extend_from_slice(b"]}\n");
            if buf.len() > 1 << 20 {
                out.write_all(&buf).map_err(write_error("output"))?;
                buf.clear();
            }
        }

        base(&mut buf, "end");
        let _ = writeln!(buf, ",\"samples_total\":{total}}}");
        out.write_all(&buf).map_err(write_error("output"))
    }
}
