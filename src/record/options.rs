//! How to record, once for every front end: [`RecordSpec`] is the recorder's options as
//! one typed value. clap derives `tach record`'s and `tach top`'s flags from it, and
//! `python -m tach run` and `%%tach` parse their arguments with the same clap definition
//! (flattened into their own parsers, beside the Python front end); `tach.start(...)`'s
//! keywords fill the same struct. [`RecordSpec::record_options`] validates it, for every
//! front end.
//!
//! Adding a recorder option: one field of [`RecordSpec`] (its doc comment is its help),
//! and its use in [`RecordSpec::record_options`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::names;
use crate::tach::{Compression, ProfilingMode};

use super::sampler::RecordOptions;
use super::segments::{self, Limit, SegmentPolicy};
pub use crate::record::interpreter::asyncio::AsyncMode;

/// What a recording keeps (the modes of CPython's sampler a recording can be made in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Mode {
    /// Every sample.
    #[default]
    Wall,
    /// Samples of threads on a CPU.
    Cpu,
    /// Samples of the thread holding the GIL.
    Gil,
    /// Samples of threads handling an exception.
    Exception,
}

impl From<Mode> for ProfilingMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Wall => ProfilingMode::Wall,
            Mode::Cpu => ProfilingMode::Cpu,
            Mode::Gil => ProfilingMode::Gil,
            Mode::Exception => ProfilingMode::Exception,
        }
    }
}

/// A recording's compression. zstd is always built in, so `auto` is zstd, as in CPython
/// with zstd available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum CompressionChoice {
    #[default]
    Auto,
    Zstd,
    None,
}

impl From<CompressionChoice> for Compression {
    fn from(choice: CompressionChoice) -> Self {
        match choice {
            CompressionChoice::Auto | CompressionChoice::Zstd => Compression::Zstd,
            CompressionChoice::None => Compression::None,
        }
    }
}

/// Sampling slower than this (1 kHz and below) pauses the program by default: each
/// pause costs it the tick's reads, 2% at 1 kHz and 30% at 10 kHz (docs/recorder.md).
/// `python -m tach run` uses the same threshold (`BLOCKING_MIN_INTERVAL_US`).
pub const BLOCKING_MIN_INTERVAL_US: u64 = 1000;

/// Why recording options were refused (for every front end).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("the rate must be a positive number of samples per second, not {0}")]
    BadRate(f64),
    #[error("interval_us must be at least 1")]
    BadInterval,
    #[error("the duration must be a positive number of seconds, not {0}")]
    BadDuration(f64),
    #[error("--async-mode needs --async-aware")]
    AsyncModeAlone,
    #[error("--async-aware records in wall mode only, as CPython's sampler (not --mode {0})")]
    AsyncNotWall(String),
    #[error("--native stops each thread while it reads it: it cannot be --no-blocking")]
    NativeNotBlocking,
    #[error("{0} needs --rotate (rotation writes a directory of segments)")]
    NeedsRotate(&'static str),
    #[error(
        "--keep {keep} is less than one segment (--rotate {rotate}): keep at least one whole \
         segment"
    )]
    KeepBelowSegment { keep: String, rotate: String },
    #[error("--rotate writes a directory of segments, not one file: give -o DIR, not -o {0}")]
    RotateIntoFile(String),
}

/// How to record: the options of `tach record`, `tach top`'s live view, `python -m tach
/// run` and `tach.start()`. The doc comments are the flags' `--help`.
#[derive(Debug, Clone, Default, PartialEq, Args, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordSpec {
    /// Output file (default: tach_<pid>.tach; tach top: none).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Samples per second (default 1000).
    #[arg(short, long)]
    pub rate: Option<f64>,
    /// The interval between samples in microseconds, instead of a rate (`tach.start`'s
    /// `interval_us=`); wins over `rate`.
    #[arg(skip)]
    pub interval_us: Option<u64>,
    /// What to keep (default wall).
    #[arg(long, value_parser = names::parser::<Mode>("mode"))]
    #[serde(deserialize_with = "names::optional::mode")]
    pub mode: Option<Mode>,
    /// Sample every thread, not only the main thread.
    #[arg(short = 'a', long)]
    pub all_threads: bool,
    /// Record each frame's base opcode.
    #[arg(long)]
    pub opcodes: bool,
    /// No <GC> frames.
    #[arg(long)]
    pub no_gc: bool,
    /// Pause the thread holding the GIL while each sample is read (the default up to
    /// 1 kHz): every sample is one moment's stacks.
    #[arg(long, conflicts_with = "no_blocking")]
    pub blocking: bool,
    /// Read running threads instead (the default above 1 kHz, where pausing costs the
    /// program more; samples can mix two moments).
    #[arg(long)]
    pub no_blocking: bool,
    /// Native stacks: C, C++ and Rust frames, with the Python frames where the
    /// interpreter runs them (x86-64; from outside and in-process). Implies --blocking: every sampled
    /// thread is stopped while its stack is read. With -a, threads that run no Python
    /// (OpenBLAS, OpenMP, Rust threads) are recorded too, by their native stacks.
    #[arg(long, conflicts_with = "no_blocking")]
    pub native: bool,
    /// Async-aware stacks: a thread running an asyncio task shows it as a <task> frame
    /// under the tasks awaiting it, as CPython 3.15's sampler does (3.14, 3.15; on
    /// 3.11-3.13 the running task alone, with no tasks above it, and no --async-mode
    /// all). Wall mode only. With --native, the native frames go under the task's
    /// Python frames.
    #[arg(long)]
    pub async_aware: bool,
    /// With --async-aware: running (default for a recording) is the task on each thread;
    /// all adds every waiting task (3.14, 3.15).
    #[arg(long, value_parser = names::parser::<AsyncMode>("async mode"), requires = "async_aware")]
    #[serde(deserialize_with = "names::optional::async_mode")]
    pub async_mode: Option<AsyncMode>,
    /// Compression of the sample data (default auto: zstd).
    #[arg(long, value_parser = names::parser::<CompressionChoice>("compression"))]
    #[serde(deserialize_with = "names::optional::compression")]
    pub compression: Option<CompressionChoice>,
    /// Stop sampling after this many seconds.
    #[arg(short, long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Rotate: write a directory of complete TACH files (-o DIR, default tach_<pid>),
    /// a new segment every DURATION (60s, 5m, 1h) or SIZE (100MB, 1GiB); both may be
    /// given, whichever comes first. Each segment verifies and replays on its own.
    #[arg(long, value_name = "DURATION|SIZE", value_parser = parse_limit("--rotate"))]
    #[serde(deserialize_with = "segments::deserialize_limits")]
    pub rotate: Vec<Limit>,
    /// With --rotate: delete the oldest finished segments once they are older than
    /// DURATION (24h) or take more than SIZE (10GB) in all; both may be given.
    #[arg(long, value_name = "DURATION|SIZE", value_parser = parse_limit("--keep"))]
    #[serde(deserialize_with = "segments::deserialize_limits")]
    pub keep: Vec<Limit>,
    /// With --rotate: run CMD with each finished segment's path as its last argument
    /// (by sh; also in the environment as TACH_SEGMENT), without holding up the
    /// sampling; its failures are reported, never fatal.
    #[arg(long, value_name = "CMD")]
    pub on_segment: Option<String>,
}

/// clap's parser of a `--rotate` or `--keep` value, its errors naming the option.
fn parse_limit(option: &'static str) -> impl Fn(&str) -> Result<Limit, String> + Clone {
    move |text| text.parse().map_err(|e| format!("{option}: {e}"))
}

impl RecordSpec {
    /// `--blocking` (Some(true)), `--no-blocking` (Some(false)) or neither (by the rate).
    pub fn blocking(&self) -> Option<bool> {
        match (self.blocking, self.no_blocking) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }

    /// Checks what clap's types cannot (positive numbers), as [`Self::record_options`]
    /// does: front ends that start nothing yet call it to refuse early.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.record_options(0).map(drop)
    }

    /// The recorder's options, validated, for a target whose pid is `pid` (the default
    /// file name is `tach_<pid>.tach`, as `python -m tach run` names it).
    pub fn record_options(&self, pid: i32) -> Result<RecordOptions, SpecError> {
        let segments = self.segment_policy()?;
        // Rotating, the output is a directory: `tach_<pid>` rather than a file's name.
        let default = match segments {
            Some(_) => format!("tach_{pid}"),
            None => format!("tach_{pid}.tach"),
        };
        let path = self
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(default));
        let mut opts = RecordOptions::new(path);
        opts.segments = segments;
        if let Some(interval) = self.interval_us {
            if interval == 0 {
                return Err(SpecError::BadInterval);
            }
            opts.interval_us = interval;
        } else if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(SpecError::BadRate(r));
            }
            opts.interval_us = ((1e6 / r).round() as u64).max(1);
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(SpecError::BadDuration(d));
            }
            opts.duration = Some(Duration::from_secs_f64(d));
        }
        opts.mode = self.mode.unwrap_or_default().into();
        opts.compression = self.compression.unwrap_or_default().into();
        opts.all_threads = self.all_threads;
        opts.opcodes = self.opcodes;
        opts.gc = !self.no_gc;
        opts.blocking = self
            .blocking()
            .unwrap_or(opts.interval_us >= BLOCKING_MIN_INTERVAL_US);
        // A thread's registers are read while it is stopped.
        if self.native {
            if self.no_blocking {
                return Err(SpecError::NativeNotBlocking);
            }
            opts.blocking = true;
            opts.native = true;
        }
        if self.async_mode.is_some() && !self.async_aware {
            return Err(SpecError::AsyncModeAlone);
        }
        if self.async_aware {
            if opts.mode != ProfilingMode::Wall {
                let mode = names::name(&self.mode.unwrap_or_default());
                return Err(SpecError::AsyncNotWall(mode));
            }
            opts.async_mode = Some(self.async_mode.unwrap_or(AsyncMode::Running));
        }
        Ok(opts)
    }

    /// `--rotate`, `--keep` and `--on-segment` checked together.
    fn segment_policy(&self) -> Result<Option<SegmentPolicy>, SpecError> {
        if self.rotate.is_empty() {
            if !self.keep.is_empty() {
                return Err(SpecError::NeedsRotate("--keep"));
            }
            if self.on_segment.is_some() {
                return Err(SpecError::NeedsRotate("--on-segment"));
            }
            return Ok(None);
        }
        if let Some(out) = &self.output {
            if out.extension().is_some_and(|e| e == "tach") && !out.is_dir() {
                return Err(SpecError::RotateIntoFile(out.display().to_string()));
            }
        }
        let (max_age, max_bytes) = segments::smallest(&self.rotate);
        let (keep_age, keep_bytes) = segments::smallest(&self.keep);
        let below = |keep: String, rotate: String| SpecError::KeepBelowSegment { keep, rotate };
        if let (Some(k), Some(r)) = (keep_age, max_age) {
            if k < r {
                return Err(below(Limit::Age(k).to_string(), Limit::Age(r).to_string()));
            }
        }
        if let (Some(k), Some(r)) = (keep_bytes, max_bytes) {
            if k < r {
                return Err(below(
                    Limit::Bytes(k).to_string(),
                    Limit::Bytes(r).to_string(),
                ));
            }
        }
        Ok(Some(SegmentPolicy {
            max_age,
            max_bytes,
            keep_age,
            keep_bytes,
            on_segment: self.on_segment.clone(),
            pid_suffix: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_validates_numbers() {
        let spec = |f: fn(&mut RecordSpec)| {
            let mut s = RecordSpec::default();
            f(&mut s);
            s.validate().map_err(|e| e.to_string())
        };
        assert!(spec(|_| {}).is_ok());
        assert_eq!(
            spec(|s| s.rate = Some(0.0)).unwrap_err(),
            "the rate must be a positive number of samples per second, not 0"
        );
        assert!(spec(|s| s.duration = Some(f64::NAN)).is_err());
        assert!(spec(|s| s.interval_us = Some(0)).is_err());
        let opts = RecordSpec {
            rate: Some(10_000.0),
            mode: Some(Mode::Gil),
            compression: Some(CompressionChoice::None),
            ..RecordSpec::default()
        }
        .record_options(7)
        .unwrap();
        assert_eq!(opts.path, PathBuf::from("tach_7.tach"));
        assert_eq!((opts.interval_us, opts.blocking), (100, false));
        assert_eq!(opts.mode, ProfilingMode::Gil);
        assert_eq!(opts.compression, Compression::None);
    }

    #[test]
    fn rotation_options_are_checked_together() {
        let limit = |s: &str| s.parse::<Limit>().unwrap();
        let spec = |rotate: &[&str], keep: &[&str]| RecordSpec {
            rotate: rotate.iter().map(|s| limit(s)).collect(),
            keep: keep.iter().map(|s| limit(s)).collect(),
            ..RecordSpec::default()
        };
        let opts = spec(&["60s", "100MB", "2m"], &["24h", "10GB"])
            .record_options(7)
            .unwrap();
        assert_eq!(opts.path, PathBuf::from("tach_7"));
        let policy = opts.segments.unwrap();
        assert_eq!(policy.max_age, Some(Duration::from_secs(60)));
        assert_eq!(policy.max_bytes, Some(100_000_000));
        assert_eq!(policy.keep_age, Some(Duration::from_secs(86400)));
        assert_eq!(policy.keep_bytes, Some(10_000_000_000));
        let refused = |s: RecordSpec| s.validate().unwrap_err().to_string();
        assert_eq!(
            refused(spec(&["60s"], &["1s"])),
            "--keep 1s is less than one segment (--rotate 60s): keep at least one whole segment"
        );
        assert!(refused(spec(&["100MB"], &["1MB"])).starts_with("--keep 1MB is less"));
        assert_eq!(
            refused(spec(&[], &["1h"])),
            "--keep needs --rotate (rotation writes a directory of segments)"
        );
        let mut hook = spec(&[], &[]);
        hook.on_segment = Some("true".into());
        assert!(refused(hook).starts_with("--on-segment needs --rotate"));
        let mut file = spec(&["60s"], &[]);
        file.output = Some("x.tach".into());
        assert_eq!(
            refused(file),
            "--rotate writes a directory of segments, not one file: give -o DIR, not -o x.tach"
        );
        // tach.start()'s keywords: one limit as text, or a list of them.
        let given: RecordSpec =
            serde_json::from_str(r#"{"rotate": "60s", "keep": ["24h", "10GB"]}"#).unwrap();
        assert_eq!(given.rotate, [limit("60s")]);
        assert_eq!(given.keep, [limit("24h"), limit("10GB")]);
        let bad = serde_json::from_str::<RecordSpec>(r#"{"rotate": 60}"#).unwrap_err();
        assert!(
            bad.to_string().contains("a duration or a size as text"),
            "{bad}"
        );
        // A size keep beside an age rotation cannot be compared: allowed.
        assert!(spec(&["60s"], &["1KB"]).validate().is_ok());
        assert_eq!(
            parse_limit("--rotate")("0").unwrap_err(),
            "--rotate: \"0\" must be more than zero"
        );
    }
}
