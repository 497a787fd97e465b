//! Re-encoding a file through the reader and the writer.
//!
//! Frames are re-interned in the order CPython's writer first met them (each changed
//! stack, innermost first), so re-encoding a file CPython wrote reproduces its tables
//! and its uncompressed sample region exactly. Fixed-width fields come out in this
//! machine's byte order, which normalises a byte-swapped file.

use std::io::{Seek, Write};

use super::error::Result;
use super::reader::TachFile;
use super::writer::{WriteSummary, Writer, WriterBuilder};

/// A builder preset with everything a file's header, stats block and footer say.
pub fn builder_like(src: &TachFile) -> WriterBuilder {
    let h = src.header();
    Writer::builder(h.sample_interval_us)
        .start_time_us(h.start_time_us)
        .compression(h.compression)
        .config(h.config)
        .python_version(h.python_version)
        .stats(src.stats().copied())
        .wall_origin_us(src.footer().wall_origin_us)
}

/// The threads whose pending REPEAT records the original writer flushed at finish, in
/// the order it flushed them (its thread-registration order).
///
/// A thread's last record is a REPEAT only when it was flushed at finish: a flush
/// caused by a stack change is followed by that change, and a flush caused by a full
/// buffer leaves the new entry pending. So these are the threads whose last sample came
/// from a REPEAT record, ordered by that sample's position.
pub fn final_flush_order(src: &TachFile) -> Result<Vec<(u64, u32)>> {
    let mut last: Vec<(u64, bool, u64, u32)> = Vec::new();
    let mut stream = src.samples();
    let mut index = 0u64;
    while let Some(s) = stream.next_sample()? {
        let slot = s.thread as usize;
        if slot == last.len() {
            last.push((0, false, s.thread_id, s.interpreter_id));
        }
        last[slot].0 = index;
        last[slot].1 = s.kind == super::records::RecordKind::Repeat;
        index += 1;
    }
    let mut flushed: Vec<_> = last.into_iter().filter(|t| t.1).collect();
    flushed.sort_by_key(|t| t.0);
    Ok(flushed.into_iter().map(|t| (t.2, t.3)).collect())
}

/// Interns every frame of `src` (and its strings) in `out`, in `src`'s table order;
/// returns each source frame's index in `out`. For tools that write samples of `src`
/// with changes of their own (the benchmark file makers in `examples/`).
pub fn copy_frames<W: Write + Seek>(src: &TachFile, out: &mut Writer<W>) -> Vec<u32> {
    src.frames()
        .iter()
        .map(|e| {
            let filename = out.intern_string(src.string_bytes(e.filename));
            let funcname = out.intern_string(src.string_bytes(e.funcname));
            out.intern_frame(super::tables::FrameEntry {
                filename,
                funcname,
                ..*e
            })
        })
        .collect()
}

/// Copies every sample of `src` into `out`.
pub fn copy_samples<W: Write + Seek>(src: &TachFile, out: &mut Writer<W>) -> Result<()> {
    for (thread_id, interpreter_id) in final_flush_order(src)? {
        out.register_thread(thread_id, interpreter_id);
    }
    let mut remap: Vec<Option<u32>> = vec![None; src.frames().len()];
    let mut mapped: Vec<u32> = Vec::with_capacity(256);
    let mut stream = src.samples();
    let mut last_thread = u32::MAX;
    while let Some(s) = stream.next_sample()? {
        if s.stack_changed || s.thread != last_thread {
            mapped.clear();
            for &f in s.stack {
                let new = match remap[f as usize] {
                    Some(n) => n,
                    None => {
                        let e = src.frames()[f as usize];
                        let filename = out.intern_string(src.string_bytes(e.filename));
                        let funcname = out.intern_string(src.string_bytes(e.funcname));
                        let n = out.intern_frame(super::tables::FrameEntry {
                            filename,
                            funcname,
                            ..e
                        });
                        remap[f as usize] = Some(n);
                        n
                    }
                };
                mapped.push(new);
            }
            last_thread = s.thread;
        }
        out.write_sample(
            s.thread_id,
            s.interpreter_id,
            s.timestamp_us,
            s.status,
            &mapped,
        )?;
    }
    Ok(())
}

/// Re-encodes `src` with `builder`'s settings into `path`.
pub fn rewrite(
    src: &TachFile,
    builder: WriterBuilder,
    path: &std::path::Path,
) -> Result<WriteSummary> {
    let mut w = builder.create(path)?;
    copy_samples(src, &mut w)?;
    w.finish()
}
