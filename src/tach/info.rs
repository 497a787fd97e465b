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
}
