//! Speedscope JSON (<https://www.speedscope.app/file-format-schema.json>).
//!
//! Layout: `shared.frames` is the TACH frame table in file order, each with `name`,
//! `file` (the full path), and `line`/`col` when known (`col` 1-based); TACH frames that
//! would render identically share one entry. There is one `sampled` profile per
//! (thread, interpreter), in the order the threads first appear among the kept samples,
//! with stacks root first and `unit: "microseconds"`.
//!
//! Weights are time, not counts: a kept sample weighs the gap to the next sample of the
//! same thread in the file, whether or not that next sample is kept (so a `--status`
//! filter does not hand the filtered-out time to the kept samples), and a thread's last
//! sample weighs the header's sampling interval. Consecutive samples of a thread with
//! the same stack are merged into one entry carrying the summed weight, and entries of
//! zero weight (equal timestamps) are dropped, as speedscope itself ignores them; the
//! total weight per thread is unchanged by both. Frames CPython's collectors drop (the
//! profiler's `_sync_coordinator`) are left out of stacks, as in `collapsed`.
//!
//! Memory grows with unique stacks plus one entry per run of equal stacks; the output
//! is written as it is produced. Output is deterministic.

use std::collections::HashMap;
use std::io::Write;

use super::exporter::{write_error, ExportError, ExportInput, Exporter, Result};
use super::render::is_internal;
use crate::tach::stack_table::StackTable;
use crate::tach::TachFile;

pub struct Speedscope;

/// One thread's profile while it is being built.
struct Track {
    thread_id: u64,
    interpreter_id: u32,
    first_us: u64,
    /// (stack id, weight in µs), consecutive equal stacks merged.
    entries: Vec<(u32, u64)>,
    total_us: u64,
}

impl Track {
    fn push(&mut self, stack: u32, weight: u64) {
        if weight == 0 {
            return;
        }
        self.total_us += weight;
        match self.entries.last_mut() {
            Some((s, w)) if *s == stack => *w += weight,
            _ => self.entries.push((stack, weight)),
        }
    }
}

/// Per decoder thread slot: the track it feeds, and its last kept sample still waiting
/// for a weight (track, stack id, timestamp). The slot's current stack id is the walk's
/// memo.
#[derive(Default, Clone, Copy)]
struct Slot {
    track: Option<usize>,
    pending: Option<(usize, u32, u64)>,
}

impl Slot {
    /// The slot's track, made (starting at `first_us`) at its first kept sample.
    fn track(
        &mut self,
        tracks: &mut Vec<Track>,
        thread_id: u64,
        interpreter_id: u32,
        first_us: u64,
    ) -> usize {
        *self.track.get_or_insert_with(|| {
            tracks.push(Track {
                thread_id,
                interpreter_id,
                first_us,
                entries: Vec::new(),
                total_us: 0,
            });
            tracks.len() - 1
        })
    }
}

/// The per-thread tracks and their unique stacks, from one pass over the samples.
struct Tracks {
    stacks: StackTable,
    tracks: Vec<Track>,
    /// The first timestamp of the whole profile (before filtering).
    origin_us: u64,
}

fn collect(input: &ExportInput<'_>) -> Result<Tracks> {
    let file = input.file;
    let interval = file.header().sample_interval_us;
    let mut stacks = StackTable::default();
    let mut tracks: Vec<Track> = Vec::new();
    let mut slots: Vec<Slot> = Vec::new();
    let mut first: Option<u64> = None;
    let mut runs = input.kept_runs::<u32>()?;
    while let Some(mut r) = runs.next_run()? {
        let times = r.run.timestamps_us;
        let earliest = times.iter().copied().min().unwrap_or(u64::MAX);
        first = Some(first.map_or(earliest, |m| m.min(earliest)));
        let i = r.run.thread as usize;
        if i >= slots.len() {
            slots.resize(i + 1, Slot::default());
        }
        let slot = &mut slots[i];
        if !r.thread_kept {
            // None of the run is kept; its first sample ends the previous kept one's time.
            if let Some((t, stack, at)) = slot.pending.take() {
                tracks[t].push(stack, times[0].saturating_sub(at));
            }
            continue;
        }
        let (thread_id, interpreter_id) = (r.run.thread_id, r.run.interpreter_id);
        if r.keeps_whole() {
            // Its samples share a stack, so their weights (each the time to the next
            // sample) are one sum.
            if let Some((t, stack, at)) = slot.pending.take() {
                tracks[t].push(stack, times[0].saturating_sub(at));
            }
            let stack = *r.memo_or_insert_with(|run| stacks.intern(run.stack));
            let t = slot.track(&mut tracks, thread_id, interpreter_id, times[0]);
            let weight: u64 = times.windows(2).map(|w| w[1].saturating_sub(w[0])).sum();
            tracks[t].push(stack, weight);
            slot.pending = Some((t, stack, times[times.len() - 1]));
            continue;
        }
        for (&ts, &status) in times.iter().zip(r.run.statuses) {
            // Every sample of the thread, kept or not, ends the previous kept one's time.
            if let Some((t, stack, at)) = slot.pending.take() {
                tracks[t].push(stack, ts.saturating_sub(at));
            }
            if !r.keeps_sample(status, ts) {
                continue;
            }
            let stack = *r.memo_or_insert_with(|run| stacks.intern(run.stack));
            let t = slot.track(&mut tracks, thread_id, interpreter_id, ts);
            slot.pending = Some((t, stack, ts));
        }
    }
    for slot in &slots {
        if let Some((t, stack, _)) = slot.pending {
            tracks[t].push(stack, interval);
        }
    }
    Ok(Tracks {
        stacks,
        tracks,
        origin_us: first.unwrap_or(0),
    })
}

fn json_str(out: &mut dyn Write, s: &str) -> Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(|e| ExportError::Io {
        path: "output".into(),
        source: e.into(),
    })
}

/// Writes `shared.frames` and returns the speedscope index of each TACH frame. TACH
/// frames that render the same (they differ only in end positions or opcode) share one
/// speedscope frame, so speedscope's views do not show two identical entries.
fn write_frames(file: &TachFile, out: &mut dyn Write) -> Result<Vec<u32>> {
    let err = write_error("output");
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut map = Vec::with_capacity(file.frames().len());
    let mut text = Vec::new();
    for (i, e) in file.frames().iter().enumerate() {
        text.clear();
        text.extend_from_slice(b"{\"name\":");
        json_str(&mut text, file.funcname(i as u32))?;
        text.extend_from_slice(b",\"file\":");
        json_str(&mut text, file.filename(i as u32))?;
        if let Some(loc) = e.location() {
            write!(text, ",\"line\":{}", loc.lineno).map_err(&err)?;
            // CPython's columns are 0-based; speedscope's (like Chrome's) are 1-based.
            if loc.column >= 0 {
                write!(text, ",\"col\":{}", i64::from(loc.column) + 1).map_err(&err)?;
            }
        }
        text.push(b'}');
        // Frame JSON is built from strings, so it is valid UTF-8.
        let key = String::from_utf8_lossy(&text).into_owned();
        let next = seen.len() as u32;
        let id = *seen.entry(key).or_insert(next);
        if id == next {
            if next > 0 {
                out.write_all(b",").map_err(&err)?;
            }
            out.write_all(&text).map_err(&err)?;
        }
        map.push(id);
    }
    Ok(map)
}

impl Exporter for Speedscope {
    fn name(&self) -> &'static str {
        "speedscope"
    }
    fn description(&self) -> &'static str {
        "speedscope JSON: one sampled profile per thread, weights in microseconds"
    }
    fn extension(&self) -> &'static str {
        ".speedscope.json"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let file = input.file;
        let Tracks {
            stacks,
            tracks,
            origin_us: origin,
        } = collect(input)?;
        let err = write_error("output");
        out.write_all(b"{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\"")
            .map_err(&err)?;
        write!(
            out,
            ",\"exporter\":\"tach {}\",\"name\":",
            env!("CARGO_PKG_VERSION")
        )
        .map_err(&err)?;
        json_str(out, &input.title())?;
        out.write_all(b",\"activeProfileIndex\":0,\"shared\":{\"frames\":[")
            .map_err(&err)?;
        let frame_ids = write_frames(file, out)?;
        out.write_all(b"]},\"profiles\":[").map_err(&err)?;
        let internal: Vec<bool> = (0..file.frames().len() as u32)
            .map(|f| is_internal(file, f))
            .collect();
        let mut kept: Vec<u32> = Vec::new();
        for (n, t) in tracks.iter().enumerate() {
            if n > 0 {
                out.write_all(b",").map_err(&err)?;
            }
            let name = if t.interpreter_id == 0 {
                format!("Thread {}", t.thread_id)
            } else {
                format!("Thread {} (interpreter {})", t.thread_id, t.interpreter_id)
            };
            // Times are relative to the profile's first sample, so profiles line up.
            let start = t.first_us.saturating_sub(origin);
            out.write_all(b"{\"type\":\"sampled\",\"name\":")
                .map_err(&err)?;
            json_str(out, &name)?;
            write!(
                out,
                ",\"unit\":\"microseconds\",\"startValue\":{start},\"endValue\":{},\"samples\":[",
                start + t.total_us
            )
            .map_err(&err)?;
            for (k, &(stack, _)) in t.entries.iter().enumerate() {
                if k > 0 {
                    out.write_all(b",").map_err(&err)?;
                }
                kept.clear();
                kept.extend(
                    stacks
                        .get(stack)
                        .iter()
                        .rev()
                        .copied()
                        .filter(|&f| !internal.get(f as usize).copied().unwrap_or(false)),
                );
                out.write_all(b"[").map_err(&err)?;
                for (j, f) in kept.iter().enumerate() {
                    if j > 0 {
                        out.write_all(b",").map_err(&err)?;
                    }
                    let id = frame_ids.get(*f as usize).ok_or_else(|| {
                        ExportError::Unsupported(format!(
                            "{}: stack refers to frame {f}, beyond the frame table",
                            file.path().display()
                        ))
                    })?;
                    write!(out, "{id}").map_err(&err)?;
                }
                out.write_all(b"]").map_err(&err)?;
            }
            out.write_all(b"],\"weights\":[").map_err(&err)?;
            for (k, &(_, w)) in t.entries.iter().enumerate() {
                if k > 0 {
                    out.write_all(b",").map_err(&err)?;
                }
                write!(out, "{w}").map_err(&err)?;
            }
            out.write_all(b"]}").map_err(&err)?;
        }
        out.write_all(b"]}\n").map_err(&err)?;
        Ok(())
    }
}
