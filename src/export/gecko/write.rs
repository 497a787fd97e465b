//! The JSON text of the Gecko profile, as CPython's `json.dumps` writes it.

use std::io::Write;

use super::super::pyjson::{push_float, push_i64, push_u64};
use super::event::NONE;
use super::thread::Thread;

/// Python's `platform.system()` for this build's OS.
pub(super) fn platform_system() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        "windows" => "Windows",
        "freebsd" => "FreeBSD",
        other => other,
    }
}

pub(super) fn push_list<T>(buf: &mut Vec<u8>, items: &[T], mut each: impl FnMut(&mut Vec<u8>, &T)) {
    buf.push(b'[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        each(buf, x);
    }
    buf.push(b']');
}

/// `[item,item,...]` with `n` items, copied in blocks (a thread's null columns are as
/// long as its frame table).
pub(super) fn push_repeat(buf: &mut Vec<u8>, item: &str, n: usize) {
    buf.push(b'[');
    push_items(buf, item, n);
    buf.push(b']');
}

/// `item,item,...` with `n` items (nothing for 0), copied in blocks.
fn push_items(buf: &mut Vec<u8>, item: &str, n: usize) {
    if n == 0 {
        return;
    }
    buf.extend_from_slice(item.as_bytes());
    let unit = item.len() + 1;
    let mut block = Vec::with_capacity(unit * n.min(256));
    for _ in 0..n.min(256) {
        block.push(b',');
        block.extend_from_slice(item.as_bytes());
    }
    let mut left = n - 1;
    while left > 0 {
        let take = left.min(256);
        buf.extend_from_slice(&block[..take * unit]);
        left -= take;
    }
}

pub(super) fn push_opt_u32(buf: &mut Vec<u8>, v: u32) {
    if v == NONE {
        buf.extend_from_slice(b"null");
    } else {
        push_u64(buf, v as u64);
    }
}

pub(super) fn push_opt_i32(buf: &mut Vec<u8>, v: Option<i32>) {
    match v {
        Some(v) => push_i64(buf, v as i64),
        None => buf.extend_from_slice(b"null"),
    }
}

/// Samples written between two calls of `push_thread`'s `flush`.
const SAMPLE_BLOCK: usize = 1 << 16;

/// `[v,v,...]`, one item per sample, handed to `flush` every SAMPLE_BLOCK items.
fn push_sample_column<T>(
    buf: &mut Vec<u8>,
    items: impl Iterator<Item = T>,
    push: fn(&mut Vec<u8>, T),
    flush: &mut dyn FnMut(&mut Vec<u8>),
) {
    buf.push(b'[');
    for (i, v) in items.enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        push(buf, v);
        if (i + 1) % SAMPLE_BLOCK == 0 {
            flush(buf);
        }
    }
    buf.push(b']');
    flush(buf);
}

/// One thread's JSON object. `flush` is called between blocks of its sample columns,
/// so that a caller streaming a large thread can write `buf` out and clear it.
pub(super) fn push_thread(buf: &mut Vec<u8>, th: &Thread, flush: &mut dyn FnMut(&mut Vec<u8>)) {
    let tid = th.tid;
    let _ = write!(
        buf,
        "{{\"name\":\"Thread-{tid}\",\"isMainThread\":{},\"processStartupTime\":0,\
         \"processShutdownTime\":null,\"registerTime\":0,\"unregisterTime\":null,\
         \"pausedRanges\":[],\"pid\":\"0\",\"tid\":{tid},\"processType\":\"default\",\
         \"processName\":\"Python Process\",\"samples\":{{\"stack\":",
        th.is_main
    );
    // The sample columns are as long as the thread's samples: written in blocks,
    // handed to `flush` between them.
    let n = th.samples.len();
    push_sample_column(buf, th.samples.stacks(), push_opt_u32, flush);
    buf.extend_from_slice(b",\"time\":");
    push_sample_column(buf, th.samples.times_ms(), push_float, flush);
    buf.extend_from_slice(b",\"eventDelay\":[");
    for start in (0..n).step_by(SAMPLE_BLOCK) {
        if start > 0 {
            buf.push(b',');
        }
        push_items(buf, "null", (n - start).min(SAMPLE_BLOCK));
        flush(buf);
    }
    buf.push(b']');
    let _ = write!(
        buf,
        ",\"weight\":null,\"weightType\":\"samples\",\"length\":{n}}},\"stackTable\":{{\"frame\":"
    );
    push_list(buf, &th.stacks.frame, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"category\":");
    push_list(buf, &th.stacks.category, |b, &v| push_u64(b, v as u64));
    buf.extend_from_slice(b",\"subcategory\":");
    push_repeat(buf, "0", th.stacks.frame.len());
    buf.extend_from_slice(b",\"prefix\":");
    push_list(buf, &th.stacks.prefix, |b, &v| push_opt_u32(b, v));
    let nf = th.frames.func.len();
    let _ = write!(
        buf,
        ",\"length\":{}}},\"frameTable\":{{\"address\":",
        th.stacks.frame.len()
    );
    push_repeat(buf, "-1", nf);
    buf.extend_from_slice(b",\"category\":");
    push_list(buf, &th.frames.category, |b, &v| push_u64(b, v as u64));
    buf.extend_from_slice(b",\"subcategory\":");
    push_repeat(buf, "0", nf);
    buf.extend_from_slice(b",\"func\":");
    push_list(buf, &th.frames.func, |b, &v| push_opt_u32(b, v));
    for key in ["innerWindowID", "implementation", "optimizations"] {
        let _ = write!(buf, ",\"{key}\":");
        push_repeat(buf, "null", nf);
    }
    buf.extend_from_slice(b",\"line\":");
    push_list(buf, &th.frames.line, |b, &v| push_opt_i32(b, v));
    buf.extend_from_slice(b",\"column\":");
    push_list(buf, &th.frames.column, |b, &v| push_opt_i32(b, v));
    buf.extend_from_slice(b",\"inlineDepth\":");
    push_repeat(buf, "0", nf);
    buf.extend_from_slice(b",\"nativeSymbol\":");
    push_repeat(buf, "null", nf);
    let nfunc = th.funcs.name.len();
    let _ = write!(buf, ",\"length\":{nf}}},\"funcTable\":{{\"name\":");
    push_list(buf, &th.funcs.name, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"isJS\":");
    push_list(buf, &th.funcs.is_js, |b, &v| {
        b.extend_from_slice(if v { b"true" } else { b"false" })
    });
    buf.extend_from_slice(b",\"relevantForJS\":");
    push_list(buf, &th.funcs.is_js, |b, &v| {
        b.extend_from_slice(if v { b"true" } else { b"false" })
    });
    buf.extend_from_slice(b",\"resource\":");
    push_list(buf, &th.funcs.resource, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"fileName\":");
    push_list(buf, &th.funcs.file, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"lineNumber\":");
    push_list(buf, &th.funcs.line, |b, &v| push_opt_i32(b, v));
    buf.extend_from_slice(b",\"columnNumber\":");
    push_repeat(buf, "null", nfunc);
    let nr = th.resources.name.len();
    let _ = write!(buf, ",\"length\":{nfunc}}},\"resourceTable\":{{\"lib\":");
    push_repeat(buf, "null", nr);
    buf.extend_from_slice(b",\"name\":");
    push_list(buf, &th.resources.name, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"host\":");
    push_repeat(buf, "null", nr);
    buf.extend_from_slice(b",\"type\":");
    push_repeat(buf, "1", nr);
    let _ = write!(
        buf,
        ",\"length\":{nr}}},\"nativeSymbols\":{{\"libIndex\":[],\"address\":[],\"name\":[],\
         \"functionSize\":[],\"length\":0}},\"markers\":{{\"data\":"
    );
    push_list(buf, &th.markers, |b, m| {
        b.extend_from_slice(b"{\"type\":\"");
        b.extend_from_slice(m.kind.as_bytes());
        b.extend_from_slice(b"\",\"duration\":");
        push_float(b, m.end - m.start);
        b.extend_from_slice(b",\"tid\":");
        push_u64(b, tid);
        b.push(b'}');
    });
    buf.extend_from_slice(b",\"name\":");
    push_list(buf, &th.markers, |b, m| push_opt_u32(b, m.name));
    buf.extend_from_slice(b",\"startTime\":");
    push_list(buf, &th.markers, |b, m| push_float(b, m.start));
    buf.extend_from_slice(b",\"endTime\":");
    push_list(buf, &th.markers, |b, m| push_float(b, m.end));
    buf.extend_from_slice(b",\"phase\":");
    push_repeat(buf, "1", th.markers.len());
    buf.extend_from_slice(b",\"category\":");
    push_list(buf, &th.markers, |b, m| push_u64(b, m.category as u64));
    let _ = write!(buf, ",\"length\":{}}}}}", th.markers.len());
}
