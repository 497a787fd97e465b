//! A file's facts in one structure: header, footer, stats block, and what a full
//! decode finds (duration, record mix, compression ratio). Serialisable for `--json`.

use serde::Serialize;

use super::error::Result;
use super::header::HEADER_SIZE;
use super::reader::TachFile;
use super::records::RecordKind;

#[derive(Debug, Clone, Serialize)]
pub struct RecordCount {
    pub records: u64,
    pub samples: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatsInfo {
    pub duration_s: f64,
    pub sample_rate_hz: f64,
    pub error_rate_pct: Option<f64>,
    pub missed_samples_pct: Option<f64>,
    pub block_size: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileInfo {
    pub path: String,
    pub file_size: u64,
    pub format_version: u32,
    pub byte_order: super::ByteOrder,
    pub python_version: String,
    pub start_time_us: u64,
    pub sample_interval_us: u64,
    pub sample_count: u64,
    pub thread_count: u32,
    pub compression: super::Compression,
    pub profiling_mode: super::ProfilingMode,
    /// `None` when the writer did not record its capture features.
    pub capture_features: Option<Vec<&'static str>>,
    pub config_word: u32,
    pub string_count: u32,
    pub frame_count: u32,
    pub footer_file_size: u64,
    pub stats: Option<StatsInfo>,
    /// Sample region as stored, and after decompression.
    pub sample_bytes_stored: u64,
    pub sample_bytes: u64,
    pub compression_ratio: Option<f64>,
    pub first_timestamp_us: Option<u64>,
    pub last_timestamp_us: Option<u64>,
    pub duration_s: f64,
    pub records: std::collections::BTreeMap<&'static str, RecordCount>,
    pub frames_per_sample: f64,
    pub frames_written: u64,
}

impl FileInfo {
    /// Decodes the whole file (with every check) and gathers its facts.
    pub fn gather(file: &TachFile) -> Result<FileInfo> {
        let h = file.header();
        let (mut first, mut last) = (None::<u64>, None::<u64>);
        let mut stream = file.samples();
        while let Some(run) = stream.next_run()? {
            for s in run.samples() {
                let t = s.timestamp_us;
                first = Some(first.map_or(t, |v| v.min(t)));
                last = Some(last.map_or(t, |v| v.max(t)));
            }
        }
        let mix = *stream.mix();
        let sample_bytes = stream.bytes_consumed();
        let stored = h.string_table_offset - HEADER_SIZE as u64;
        let samples = mix.samples.iter().sum::<u64>();
        let records = RecordKind::ALL
            .iter()
            .map(|&k| {
                (
                    k.name(),
                    RecordCount {
                        records: mix.records[k as usize],
                        samples: mix.samples[k as usize],
                    },
                )
            })
            .collect();
        Ok(FileInfo {
            path: file.path().display().to_string(),
            file_size: file.file_size(),
            format_version: h.version,
            byte_order: h.byte_order,
            python_version: format!(
                "{}.{}.{}",
                h.python_version.0, h.python_version.1, h.python_version.2
            ),
            start_time_us: h.start_time_us,
            sample_interval_us: h.sample_interval_us,
            sample_count: h.sample_count,
            thread_count: h.thread_count,
            compression: h.compression,
            profiling_mode: h.config.mode,
            capture_features: h.config.features.map(|f| f.names()),
            config_word: h.config.raw,
            string_count: file.footer().string_count,
            frame_count: file.footer().frame_count,
            footer_file_size: file.footer().file_size,
            stats: file.stats().map(|s| StatsInfo {
                duration_s: s.duration_sec,
                sample_rate_hz: s.sample_rate,
                error_rate_pct: s.error_rate(),
                missed_samples_pct: s.missed_samples(),
                block_size: s.size,
            }),
            sample_bytes_stored: stored,
            sample_bytes,
            compression_ratio: (h.compression == super::Compression::Zstd && stored > 0)
                .then(|| sample_bytes as f64 / stored as f64),
            first_timestamp_us: first,
            last_timestamp_us: last,
            duration_s: match (first, last) {
                (Some(a), Some(b)) => (b - a) as f64 / 1e6,
                _ => 0.0,
            },
            records,
            frames_per_sample: if samples > 0 {
                mix.frames_in_samples as f64 / samples as f64
            } else {
                0.0
            },
            frames_written: mix.frames_written,
        })
    }

    /// `tach info`'s text as (label, value) rows: the CLI prints them (the
    /// [`std::fmt::Display`] below), Python's `Info` shows them in its repr and notebook table.
    pub fn rows(&self) -> Vec<(String, String)> {
        let i = self;
        let mut rows = Vec::new();
        let mut row = |k: &str, v: String| rows.push((k.to_string(), v));
        row("file", format!("{} ({} bytes)", i.path, i.file_size));
        row(
            "format",
            format!("version {}, {:?}-endian", i.format_version, i.byte_order).to_lowercase(),
        );
        row("python", i.python_version.clone());
        row(
            "mode",
            format!(
                "{} (config word 0x{:x})",
                i.profiling_mode.name(),
                i.config_word
            ),
        );
        row(
            "capture features",
            match &i.capture_features {
                Some(f) if f.is_empty() => "none".into(),
                Some(f) => f.join(", "),
                None => "not recorded".into(),
            },
        );
        row(
            "interval",
            format!(
                "{} us ({:.0} Hz)",
                i.sample_interval_us,
                if i.sample_interval_us > 0 {
                    1e6 / i.sample_interval_us as f64
                } else {
                    0.0
                }
            ),
        );
        row("start time", format!("{} us (monotonic)", i.start_time_us));
        row("samples", format!("{} (thread-samples)", i.sample_count));
        row("threads", i.thread_count.to_string());
        row(
            "strings / frames",
            format!("{} / {}", i.string_count, i.frame_count),
        );
        row(
            "duration",
            format!("{:.3} s (first to last sample)", i.duration_s),
        );
        let ratio = i
            .compression_ratio
            .map(|r| format!(", ratio {r:.1}x"))
            .unwrap_or_default();
        row(
            "sample data",
            format!(
                "{} bytes stored, {} bytes decoded ({}{ratio})",
                i.sample_bytes_stored,
                i.sample_bytes,
                match i.compression {
                    super::Compression::None => "uncompressed",
                    super::Compression::Zstd => "zstd",
                }
            ),
        );
        match &i.stats {
            Some(st) => {
                let pct = |v: Option<f64>| v.map(|v| format!("{v:.2}%")).unwrap_or("-".into());
                row(
                    "stats block",
                    format!(
                        "duration {:.3} s, rate {:.1} Hz, errors {}, missed {} ({} bytes)",
                        st.duration_s,
                        st.sample_rate_hz,
                        pct(st.error_rate_pct),
                        pct(st.missed_samples_pct),
                        st.block_size
                    ),
                );
            }
            None => row("stats block", "none".into()),
        }
        let total: u64 = i.records.values().map(|r| r.records).sum();
        for name in ["REPEAT", "FULL", "SUFFIX", "POP_PUSH"] {
            let r = &i.records[name];
            let share = if total > 0 {
                100.0 * r.records as f64 / total as f64
            } else {
                0.0
            };
            row(
                &format!("records {name}"),
                format!("{} ({share:.1}%), {} samples", r.records, r.samples),
            );
        }
        row(
            "frames per sample",
            format!(
                "{:.1} ({} frame indices stored)",
                i.frames_per_sample, i.frames_written
            ),
        );
        rows
    }
}

impl std::fmt::Display for FileInfo {
    /// `tach info`'s text: one row per line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (label, value) in self.rows() {
            writeln!(f, "  {label:<22} {value}")?;
        }
        Ok(())
    }
}
