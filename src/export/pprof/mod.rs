//! pprof (`profile.proto`, gzip-compressed), as read by `go tool pprof`, Pyroscope and
//! speedscope.
//!
//! Content: two sample types, `samples/count` and `<mode>/nanoseconds` where `<mode>` is
//! the recording's mode (`cpu`, `gil`, or `wall` for every other mode); each sample's
//! time is its count times the sampling interval, which is also `period` (with
//! `period_type` the time type). `duration_nanos` spans the kept samples' first to last
//! timestamp plus one interval. `time_nanos` is the wall-clock time of the first kept
//! sample. It comes from [`StartTime`](super::StartTime): given (`--start-time`, the
//! wall time of the recording's first sample), left unset, or by default from the
//! wall-clock origin tach's recorder stores in the footer
//! ([`Footer::wall_origin_us`](crate::tach::Footer::wall_origin_us)); a file without
//! one (CPython's) holds only monotonic clock readings, so its default is the file's
//! modification time minus the time from the first kept sample to the recording's last
//! sample (the writers finish the file right after the last sample).
//!
//! One `Function` per distinct (name, filename), one `Location` per distinct (function,
//! line); TACH records no first line of a function, so `start_line` stays 0.
//! `system_name` is left empty: the proto means it for a name as the system knows it
//! (a mangled C++ symbol), and Python has none. pprof demangles every function whose
//! `system_name` equals its `name` (its sign that nothing demangled it yet), and its
//! simplification for names that look like demangled C++ cuts everything between `<`
//! and `>`, so `<module>`, `<genexpr>`, `<lambda>` and `<GC>` became empty names that
//! `go tool pprof -top` shows as one `<unknown>` row. A `name` with a different (here
//! empty) `system_name` counts as already demangled and is shown as it is. Frames
//! CPython's collectors drop (the profiler's `_sync_coordinator`) are left out, as in
//! `collapsed`. A native frame of a `--native` recording
//! ([`FrameEntry::is_native`](crate::tach::FrameEntry::is_native)) named by its
//! module's path gets that module's `Mapping` (one per path, no addresses, marked as
//! having functions so that pprof does not try to symbolize it); one named by the C
//! source its debug information gives has no mapping (the file keeps no module for
//! it). Files without native frames have no mappings. Each `Sample` is one distinct (stack, thread, interpreter, status byte)
//! with its summed count, labelled with the numeric `thread_id` (and `interpreter_id`
//! when not 0) and one string label per status flag (`has_gil`, `on_cpu`,
//! `gil_requested`, `has_exception`, `main_thread`, `unknown`: `"true"`/`"false"`; the
//! underscore spellings because Pyroscope label names cannot hold `-`).
//!
//! Order is deterministic: tables in first-use order of the file's samples, samples by
//! first appearance. Memory grows with distinct (stack, thread, status) keys and frames.

mod proto;

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use prost::Message;

use super::exporter::{write_error, ExportError, ExportInput, Exporter, Result, StartTime};
use super::render::{is_internal, lineno};
use crate::tach::filter::status;
use crate::tach::stack_table::StackTable;
use crate::tach::ProfilingMode;

pub struct Pprof;

impl Exporter for Pprof {
    fn name(&self) -> &'static str {
        "pprof"
    }
    fn description(&self) -> &'static str {
        "pprof profile.proto (gzip): samples and time per stack, thread and status labels"
    }
    fn options(&self) -> &'static [super::exporter::FormatOption] {
        &[super::exporter::FormatOption {
            name: "start-time",
            value_name: Some("WHEN"),
            repeatable: false,
            help: "wall-clock time of the recording's first sample: RFC 3339 \
                   (2026-11-25T10:00:00Z) or Unix seconds; `file` (the default) takes it \
                   from the wall-clock origin the recording stored, or estimates it from the \
                   file's modification time, `none` leaves it unset",
            apply: |options, value| {
                options.start_time = StartTime::parse(value)?;
                Ok(())
            },
        }]
    }
    fn extension(&self) -> &'static str {
        ".pb.gz"
    }
    fn binary(&self) -> bool {
        true
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let profile = build(input)?;
        let bytes = profile.encode_to_vec();
        // flate2 writes a zero mtime and no name in the gzip header: deterministic.
        let mut gz = GzEncoder::new(out, flate2::Compression::default());
        gz.write_all(&bytes).map_err(write_error("output"))?;
        gz.finish().map_err(write_error("output"))?;
        Ok(())
    }
}

/// The profile's string table: index 0 is "" as pprof requires.
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            table: vec![String::new()],
            ids: HashMap::from([(String::new(), 0)]),
        }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }
}

/// Aggregation key: (stack id, thread id, interpreter id, status byte).
type Key = (u32, u64, u32, u8);

/// `time_nanos`: the wall-clock time of the first kept sample (0, pprof's "unset", when
/// it is unknown). `first_kept` and `last` are sample timestamps (monotonic µs).
fn time_nanos(input: &ExportInput<'_>, first_kept: Option<u64>, last: Option<u64>) -> Result<i64> {
    // Signed µs from `a` to `b`, in ns (timestamps are one clock; wrapping as the format).
    let ns_between = |a: u64, b: u64| (b.wrapping_sub(a) as i64).saturating_mul(1000);
    Ok(match input.options.start_time {
        StartTime::Unset => 0,
        StartTime::At(first_sample_ns) => {
            let offset = match (input.origin_us()?, first_kept) {
                (Some(origin), Some(first)) => ns_between(origin, first),
                _ => 0,
            };
            first_sample_ns.saturating_add(offset)
        }
        StartTime::FromFileTime => {
            let h = input.file.header();
            let stored = first_kept
                .and_then(|first| input.file.footer().wall_time_us(h.start_time_us, first));
            if let Some(us) = stored {
                return Ok(us.saturating_mul(1000));
            }
            let modified = std::fs::metadata(input.file.path())
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_nanos()).ok());
            match (modified, first_kept, last) {
                (Some(m), Some(first), Some(last)) => m.saturating_sub(ns_between(first, last)),
                (Some(m), _, _) => m,
                (None, _, _) => 0,
            }
        }
    })
}

/// Whether a native frame's file is its module (an executable or shared library, as
/// `/proc/PID/maps` names it) and not the source file its debug information names.
fn is_module_path(path: &str) -> bool {
    const SOURCES: [&str; 9] = [".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".rs", ".S", ".s"];
    path != "~" && !SOURCES.iter().any(|s| path.ends_with(s))
}

/// The sample-time value type for the recording's mode.
fn time_type(mode: ProfilingMode) -> &'static str {
    match mode {
        ProfilingMode::Cpu => "cpu",
        ProfilingMode::Gil => "gil",
        _ => "wall",
    }
}

fn build(input: &ExportInput<'_>) -> Result<proto::Profile> {
    let file = input.file;
    let interval_ns = file.header().sample_interval_us.saturating_mul(1000);

    // One pass: count each distinct key, in first-seen order. The walk's memo is the
    // slot's stack id.
    let mut stacks = StackTable::default();
    let mut counts: HashMap<Key, usize> = HashMap::new();
    let mut keys: Vec<(Key, u64)> = Vec::new();
    let mut span: Option<(u64, u64)> = None;
    let mut last_timestamp: Option<u64> = None;
    let mut runs = input.kept_runs::<u32>()?;
    while let Some(mut r) = runs.next_run()? {
        let times = r.run.timestamps_us;
        let latest = times.iter().copied().max().unwrap_or(0);
        last_timestamp = Some(last_timestamp.map_or(latest, |t| t.max(latest)));
        if !r.thread_kept {
            continue;
        }
        // The run's samples share a stack and a thread: only a change of status
        // (rare within a run) looks the key up again.
        let mut last_key: Option<(u8, usize)> = None;
        for (&ts, &status) in times.iter().zip(r.run.statuses) {
            if !r.keeps_sample(status, ts) {
                continue;
            }
            span = Some(span.map_or((ts, ts), |(a, b)| (a.min(ts), b.max(ts))));
            let at = match last_key {
                Some((st, at)) if st == status => at,
                _ => {
                    let stack = *r.memo_or_insert_with(|run| stacks.intern(run.stack));
                    let key = (stack, r.run.thread_id, r.run.interpreter_id, status);
                    let n = keys.len();
                    let at = *counts.entry(key).or_insert(n);
                    if at == n {
                        keys.push((key, 0));
                    }
                    last_key = Some((status, at));
                    at
                }
            };
            keys[at].1 += 1;
        }
    }

    let mut strings = Strings::new();
    let time = strings.id(time_type(file.header().config.mode));
    let nanoseconds = strings.id("nanoseconds");
    let samples_type = proto::ValueType {
        r#type: strings.id("samples"),
        unit: strings.id("count"),
    };
    let time_type = proto::ValueType {
        r#type: time,
        unit: nanoseconds,
    };
    let thread_key = strings.id("thread_id");
    let interpreter_key = strings.id("interpreter_id");
    let flag_keys: Vec<(u8, i64)> = status::FLAGS
        .iter()
        .map(|f| (f.bit, strings.id(f.column)))
        .collect();
    let (yes, no) = (strings.id("true"), strings.id("false"));

    // Frames to locations, assigned as stacks first use them; 0 marks a dropped frame.
    const UNSEEN: u64 = u64::MAX;
    let frame_count = file.frames().len();
    let mut frame_location: Vec<u64> = vec![UNSEEN; frame_count];
    let mut function_ids: HashMap<(i64, i64), u64> = HashMap::new();
    let mut location_ids: HashMap<(u64, i64), u64> = HashMap::new();
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    let native = super::exporter::walked_native_frames(file);
    let mut mapping_ids: HashMap<i64, u64> = HashMap::new();
    let mut mappings: Vec<proto::Mapping> = Vec::new();
    let mut stack_locations: Vec<Option<Vec<u64>>> = vec![None; stacks.len()];

    let mut samples = Vec::with_capacity(keys.len());
    for &((stack, thread_id, interpreter_id, status_byte), count) in &keys {
        let ids = match &stack_locations[stack as usize] {
            Some(ids) => ids.clone(),
            None => {
                let mut ids = Vec::with_capacity(stacks.get(stack).len());
                for &f in stacks.get(stack) {
                    let slot = frame_location.get_mut(f as usize).ok_or_else(|| {
                        ExportError::Unsupported(format!(
                            "{}: stack refers to frame {f}, beyond the frame table of {frame_count}",
                            file.path().display()
                        ))
                    })?;
                    if *slot == UNSEEN {
                        *slot = if is_internal(file, f) {
                            0
                        } else {
                            let name = strings.id(file.funcname(f));
                            let filename = strings.id(file.filename(f));
                            let function =
                                *function_ids.entry((name, filename)).or_insert_with(|| {
                                    let id = functions.len() as u64 + 1;
                                    functions.push(proto::Function {
                                        id,
                                        name,
                                        // Empty: see the module comment.
                                        system_name: 0,
                                        filename,
                                        start_line: 0,
                                    });
                                    id
                                });
                            let line = i64::from(lineno(file, f));
                            let mapping_id =
                                if native[f as usize] && is_module_path(file.filename(f)) {
                                    *mapping_ids.entry(filename).or_insert_with(|| {
                                        let id = mappings.len() as u64 + 1;
                                        mappings.push(proto::Mapping {
                                            id,
                                            filename,
                                            has_functions: true,
                                            ..Default::default()
                                        });
                                        id
                                    })
                                } else {
                                    0
                                };
                            *location_ids.entry((function, line)).or_insert_with(|| {
                                let id = locations.len() as u64 + 1;
                                locations.push(proto::Location {
                                    id,
                                    mapping_id,
                                    line: vec![proto::Line {
                                        function_id: function,
                                        line,
                                        column: 0,
                                    }],
                                    ..Default::default()
                                });
                                id
                            })
                        };
                    }
                    if *slot != 0 {
                        ids.push(*slot);
                    }
                }
                stack_locations[stack as usize] = Some(ids.clone());
                ids
            }
        };
        let mut label = Vec::with_capacity(2 + flag_keys.len());
        label.push(proto::Label {
            key: thread_key,
            num: thread_id as i64,
            ..Default::default()
        });
        if interpreter_id != 0 {
            label.push(proto::Label {
                key: interpreter_key,
                num: i64::from(interpreter_id),
                ..Default::default()
            });
        }
        for &(bit, key) in &flag_keys {
            label.push(proto::Label {
                key,
                str: if status_byte & bit != 0 { yes } else { no },
                ..Default::default()
            });
        }
        samples.push(proto::Sample {
            location_id: ids,
            value: vec![count as i64, (count.saturating_mul(interval_ns)) as i64],
            label,
        });
    }

    let duration_ns = span.map_or(0, |(a, b)| {
        (b - a).saturating_mul(1000).saturating_add(interval_ns)
    });
    let comment = strings.id(&format!(
        "tach {}: {}",
        env!("CARGO_PKG_VERSION"),
        input.title()
    ));
    Ok(proto::Profile {
        sample_type: vec![samples_type, time_type.clone()],
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos: time_nanos(input, span.map(|(first, _)| first), last_timestamp)?,
        duration_nanos: duration_ns as i64,
        period_type: Some(time_type),
        period: interval_ns as i64,
        comment: vec![comment],
        default_sample_type: time,
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Read};

    use super::*;
    use crate::tach::{SampleFilter, TachFile, Writer};

    /// A recording's stored wall-clock origin is the default `time_nanos`: the origin
    /// plus the first kept sample's offset from the start.
    #[test]
    fn the_default_time_is_the_stored_origin_of_the_first_kept_sample() {
        let origin = 1_795_874_400_000_000; // 2026-11-28T14:00:00Z
        let mut buf = Cursor::new(Vec::new());
        let mut w = Writer::builder(1000)
            .start_time_us(5_000_000)
            .wall_origin_us(Some(origin))
            .to_writer("w.bin", &mut buf)
            .unwrap();
        let f = w.frame("a.py", "f", None, None);
        for i in 0..10 {
            w.write_sample(1, 0, 5_002_000 + i * 1000, 1, &[f]).unwrap();
        }
        w.finish().unwrap();
        let file = TachFile::from_bytes("w.bin", buf.into_inner()).unwrap();
        let time = |filter: &SampleFilter| {
            let mut out = Vec::new();
            let exporter = crate::export::find("pprof").unwrap();
            crate::export::export_to(exporter, &file, filter, &Default::default(), &mut out)
                .unwrap();
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(&out[..])
                .read_to_end(&mut raw)
                .unwrap();
            proto::Profile::decode(&raw[..]).unwrap().time_nanos
        };
        assert_eq!(time(&SampleFilter::default()), (origin + 2000) * 1000);
        let later = SampleFilter {
            since_us: Some(origin + 5000),
            ..SampleFilter::default()
        };
        assert_eq!(time(&later), (origin + 5000) * 1000);
    }
}
