//! Opening a TACH file: validate the header, tables, stats block and footer, then
//! decode the sample region as a stream.
//!
//! The file is memory-mapped with sequential-access advice. Nothing is allocated from a
//! count in the file before that count is checked against the bytes that could hold it.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{FormatError, Located, Region, Result, TachError};
use super::header::{Compression, Footer, Header, Stats, FOOTER_SIZE, HEADER_SIZE};
use super::records::{
    DecoderSetup, FrameCheck, OwnedSample, RecordMix, Run, Sample, SampleDecoder,
};
use super::source::{ByteSource, SliceSource, ThreadedZstdSource, ZstdSource};
use super::tables::{self, FrameEntry};

/// The bytes of an opened file.
enum Backing {
    Map(memmap2::Mmap),
    Bytes(Vec<u8>),
}

impl AsRef<[u8]> for Backing {
    fn as_ref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Bytes(b) => b,
        }
    }
}

/// A sub-range of shared file bytes that can cross threads.
struct SharedRange {
    data: Arc<Backing>,
    range: Range<usize>,
}

impl AsRef<[u8]> for SharedRange {
    fn as_ref(&self) -> &[u8] {
        &self.data.as_ref().as_ref()[self.range.clone()]
    }
}

/// How the sample region is decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Decompression {
    /// On a helper thread when the region is compressed and large enough to pay.
    #[default]
    Auto,
    /// Always on the calling thread.
    SameThread,
}

/// Compressed regions smaller than this are decompressed on the calling thread:
/// starting a thread costs more than it saves.
const THREADED_ZSTD_MIN: usize = 256 * 1024;

/// An opened, validated TACH file.
pub struct TachFile {
    path: PathBuf,
    data: Arc<Backing>,
    header: Header,
    footer: Footer,
    stats: Option<Stats>,
    string_ranges: Vec<Range<usize>>,
    strings: Vec<Box<str>>,
    frames: Vec<FrameEntry>,
    /// Per frame: the first string index that is out of range, if any. CPython only
    /// rejects such a frame when a sample uses it.
    bad_string: Vec<Option<u32>>,
}

impl std::fmt::Debug for TachFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TachFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl TachFile {
    /// Opens and validates `path`. The sample region is checked when it is decoded
    /// (see [`TachFile::samples`] and [`TachFile::verify`]).
    pub fn open(path: impl AsRef<Path>) -> Result<TachFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| TachError::io(path, e))?;
        let len = file.metadata().map_err(|e| TachError::io(path, e))?.len();
        let backing = if len == 0 {
            Backing::Bytes(Vec::new())
        } else {
            // SAFETY: the map is read-only and private. A file truncated by another
            // process while mapped could fault; profiles are written once and closed.
            let map = unsafe { memmap2::MmapOptions::new().map(&file) }
                .map_err(|e| TachError::io(path, e))?;
            #[cfg(unix)]
            {
                let _ = map.advise(memmap2::Advice::Sequential);
            }
            Backing::Map(map)
        };
        Self::from_backing(path.to_path_buf(), backing)
    }

    /// Validates a file already in memory; `name` is used in error messages.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<TachFile> {
        Self::from_backing(name.into(), Backing::Bytes(bytes))
    }

    fn from_backing(path: PathBuf, backing: Backing) -> Result<TachFile> {
        let fail = |at: Located| TachError::format(path.clone(), at);
        let data = backing.as_ref();
        let size = data.len() as u64;
        // Checks run in CPython's order, so a file with several defects reports the
        // same first one. A 64-byte file is valid: its "footer" is header bytes 32..64.
        if data.len() < HEADER_SIZE {
            return Err(fail(Located::file(0, FormatError::FileTooSmall { size })));
        }
        let header = Header::parse(data).map_err(|(off, e)| fail(Located::file(off, e)))?;
        let footer_at = data.len() - FOOTER_SIZE;
        let footer = Footer::parse(&data[footer_at..], header.byte_order);
        let stats =
            Stats::find(data, header.byte_order).map_err(|(off, e)| fail(Located::file(off, e)))?;

        let table_err = |off: u64, table: &'static str, offset: u64, why: String| {
            fail(Located::file(
                off,
                FormatError::TableOffset { table, offset, why },
            ))
        };
        let (st, ft) = (header.string_table_offset, header.frame_table_offset);
        if st > size {
            return Err(table_err(
                40,
                "string",
                st,
                format!("beyond the end of the {size}-byte file"),
            ));
        }
        if ft > size {
            return Err(table_err(
                48,
                "frame",
                ft,
                format!("beyond the end of the {size}-byte file"),
            ));
        }
        if st < HEADER_SIZE as u64 {
            return Err(table_err(40, "string", st, "inside the header".into()));
        }
        if ft < HEADER_SIZE as u64 {
            return Err(table_err(48, "frame", ft, "inside the header".into()));
        }
        if st > ft {
            return Err(fail(Located::file(
                40,
                FormatError::TablesOutOfOrder {
                    string: st,
                    frame: ft,
                },
            )));
        }
        let string_ranges =
            tables::parse_strings(data, st as usize, footer.string_count).map_err(fail)?;
        let strings = string_ranges
            .iter()
            .map(|r| String::from_utf8_lossy(&data[r.clone()]).into())
            .collect();
        let frames = tables::parse_frames(data, ft as usize, footer.frame_count).map_err(fail)?;
        let string_count = footer.string_count;
        let bad_string = frames
            .iter()
            .map(|f| {
                [f.filename, f.funcname]
                    .into_iter()
                    .find(|&i| i >= string_count)
            })
            .collect();
        Ok(TachFile {
            path,
            data: Arc::new(backing),
            header,
            footer,
            stats,
            string_ranges,
            strings,
            frames,
            bad_string,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn footer(&self) -> &Footer {
        &self.footer
    }
    pub fn stats(&self) -> Option<&Stats> {
        self.stats.as_ref()
    }
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }
    fn bytes(&self) -> &[u8] {
        self.data.as_ref().as_ref()
    }
    /// The whole file.
    pub fn raw_bytes(&self) -> &[u8] {
        self.bytes()
    }
    /// The sample region as stored (compressed or not): bytes 64..string_table_offset.
    pub fn sample_region(&self) -> &[u8] {
        &self.bytes()[HEADER_SIZE..self.header.string_table_offset as usize]
    }
    /// Strings decoded as UTF-8 with invalid bytes replaced, as CPython decodes them.
    pub fn strings(&self) -> &[Box<str>] {
        &self.strings
    }
    pub fn string(&self, index: u32) -> &str {
        &self.strings[index as usize]
    }
    /// A string's bytes exactly as stored.
    pub fn string_bytes(&self, index: u32) -> &[u8] {
        &self.bytes()[self.string_ranges[index as usize].clone()]
    }
    pub fn frames(&self) -> &[FrameEntry] {
        &self.frames
    }
    /// Per frame of the frame table: whether it is a native frame
    /// ([`FrameEntry::is_native`]). All false in a file without native capture.
    pub fn native_frames(&self) -> Vec<bool> {
        let capture = self.header.config.features;
        let name = |i: u32| self.strings.get(i as usize).map_or("", |s| &**s);
        self.frames
            .iter()
            .map(|f| f.is_native(capture, name(f.filename), name(f.funcname)))
            .collect()
    }
    /// Per frame: the first out-of-range string index it names, if any.
    pub(crate) fn bad_strings(&self) -> &[Option<u32>] {
        &self.bad_string
    }
    /// A frame's function name (frames in samples are always validated).
    pub fn funcname(&self, frame: u32) -> &str {
        self.string(self.frames[frame as usize].funcname)
    }
    pub fn filename(&self, frame: u32) -> &str {
        self.string(self.frames[frame as usize].filename)
    }

    /// A pull decoder over the samples.
    pub fn samples(&self) -> SampleStream<'_> {
        self.samples_with(Decompression::Auto)
    }

    /// The decoder settings for this file's sample region.
    fn decoder_setup(&self, region: Region) -> DecoderSetup<'_> {
        DecoderSetup {
            byte_order: self.header.byte_order,
            start_time_us: self.header.start_time_us,
            thread_count: self.header.thread_count,
            sample_count: self.header.sample_count,
            frames: self.frame_check(),
            region,
            file_offset: HEADER_SIZE as u64,
        }
    }

    /// What the records' frame indices are checked against.
    pub(crate) fn frame_check(&self) -> FrameCheck<'_> {
        FrameCheck::new(
            self.frames.len() as u32,
            &self.bad_string,
            self.footer.string_count,
        )
    }

    pub fn samples_with(&self, how: Decompression) -> SampleStream<'_> {
        let region = self.sample_region();
        let (source, region_kind, init_error) = match self.header.compression {
            Compression::None => (
                AnySource::Slice(SliceSource::new(region)),
                Region::File,
                None,
            ),
            Compression::Zstd => {
                let threaded = how == Decompression::Auto && region.len() >= THREADED_ZSTD_MIN;
                if threaded {
                    let shared = SharedRange {
                        data: self.data.clone(),
                        range: HEADER_SIZE..self.header.string_table_offset as usize,
                    };
                    (
                        AnySource::Threaded(Box::new(ThreadedZstdSource::new(shared))),
                        Region::DecompressedSamples,
                        None,
                    )
                } else {
                    match ZstdSource::new(region) {
                        Ok(s) => (
                            AnySource::Zstd(Box::new(s)),
                            Region::DecompressedSamples,
                            None,
                        ),
                        Err(e) => (
                            AnySource::Slice(SliceSource::new(&[])),
                            Region::DecompressedSamples,
                            Some(e),
                        ),
                    }
                }
            }
        };
        let decoder = SampleDecoder::new(source, self.decoder_setup(region_kind));
        SampleStream {
            path: &self.path,
            decoder,
            init_error,
        }
    }

    /// Decodes every sample, checking everything CPython's reader checks.
    pub fn verify(&self) -> Result<RecordMix> {
        let mut stream = self.samples();
        while stream.next_run()?.is_some() {}
        Ok(*stream.mix())
    }

    /// Calls `f` for every sample in file order.
    pub fn for_each_sample(&self, mut f: impl FnMut(&Sample<'_>)) -> Result<RecordMix> {
        let mut stream = self.samples();
        while let Some(run) = stream.next_run()? {
            for s in run.samples() {
                f(&s);
            }
        }
        Ok(*stream.mix())
    }

    /// Every sample, owned. Convenient for tests and small files; memory grows with
    /// the number of samples, so prefer [`TachFile::samples`] for real work.
    pub fn collect_samples(&self) -> Result<Vec<OwnedSample>> {
        let mut out = Vec::new();
        self.for_each_sample(|s| out.push(s.to_owned()))?;
        Ok(out)
    }
}

/// The source behind a [`SampleStream`].
pub enum AnySource<'a> {
    Slice(SliceSource<'a>),
    Zstd(Box<ZstdSource<'a>>),
    Threaded(Box<ThreadedZstdSource>),
}

impl ByteSource for AnySource<'_> {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        match self {
            AnySource::Slice(s) => s.window(),
            AnySource::Zstd(s) => s.window(),
            AnySource::Threaded(s) => s.window(),
        }
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        match self {
            AnySource::Slice(s) => s.refill(consumed),
            AnySource::Zstd(s) => s.refill(consumed),
            AnySource::Threaded(s) => s.refill(consumed),
        }
    }
    fn is_complete(&self) -> bool {
        match self {
            AnySource::Slice(s) => s.is_complete(),
            AnySource::Zstd(s) => s.is_complete(),
            AnySource::Threaded(s) => s.is_complete(),
        }
    }
}

/// A stream of samples from one file, with errors naming the file.
pub struct SampleStream<'a> {
    path: &'a Path,
    decoder: SampleDecoder<'a, AnySource<'a>>,
    init_error: Option<FormatError>,
}

impl<'a> SampleStream<'a> {
    /// The next sample, `Ok(None)` at the end.
    #[inline(always)]
    pub fn next_sample(&mut self) -> Result<Option<Sample<'_>>> {
        if self.init_error.is_some() {
            if let Some(e) = self.take_init_error() {
                return Err(e);
            }
        }
        let path = self.path;
        self.decoder
            .next_sample()
            .map_err(|at| TachError::format(path, at))
    }

    /// This stream for a reader that counts samples and never reads their times:
    /// [`next_run`](Self::next_run)'s runs then carry no times (`timestamps_us` is
    /// empty), and REPEAT records, most of a file's bytes, are read without decoding
    /// their deltas. Errors are found and reported exactly as before.
    pub fn untimed(mut self) -> Self {
        self.decoder.set_timed(false);
        self
    }

    /// The next run of samples with one stack (see [`Run`]), `Ok(None)` at the end.
    #[inline(always)]
    pub fn next_run(&mut self) -> Result<Option<Run<'_>>> {
        if self.init_error.is_some() {
            if let Some(e) = self.take_init_error() {
                return Err(e);
            }
        }
        let path = self.path;
        self.decoder
            .next_run()
            .map_err(|at| TachError::format(path, at))
    }

    /// The zstd stream could not be started: reported once, at offset 0.
    #[cold]
    fn take_init_error(&mut self) -> Option<TachError> {
        let error = self.init_error.take()?;
        Some(TachError::format(
            self.path,
            Located {
                offset: 0,
                region: Region::DecompressedSamples,
                error,
            },
        ))
    }

    pub fn mix(&self) -> &RecordMix {
        self.decoder.mix()
    }

    /// Samples decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoder.decoded()
    }

    /// Bytes of the decompressed sample stream consumed so far.
    pub fn bytes_consumed(&self) -> u64 {
        self.decoder.bytes_consumed()
    }

    /// The (thread_id, interpreter_id) pairs seen so far, in first-seen order.
    pub fn threads(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.decoder
            .threads()
            .iter()
            .map(|t| (t.thread_id, t.interpreter_id))
    }
}

/// Input paths with each directory replaced by the `*.tach` files directly in it, in
/// time order (by the wall-clock time of their start where they record one, then by
/// name: a rotating recording's segments, or files without an origin, sort by name).
/// A directory without one is an error naming it.
pub fn expand_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        if !path.is_dir() {
            out.push(path.clone());
            continue;
        }
        let entries = std::fs::read_dir(path).map_err(|e| TachError::io(path, e))?;
        let mut found = Vec::new();
        for entry in entries {
            let p = entry.map_err(|e| TachError::io(path, e))?.path();
            if p.extension().is_some_and(|e| e == "tach") && p.is_file() {
                let origin = TachFile::open(&p)?.footer().wall_origin_us;
                found.push((origin.is_none(), origin, p));
            }
        }
        if found.is_empty() {
            return Err(TachError::Usage(format!(
                "{}: a directory with no .tach file in it",
                path.display()
            )));
        }
        found.sort();
        out.extend(found.into_iter().map(|(_, _, p)| p));
    }
    Ok(out)
}

#[cfg(test)]
mod checked_path {
    //! The decoder reads a record from its window in one go when the window surely holds
    //! it, and falls back to a checked read of every field otherwise (src/tach/records.rs).
    //! Here the same uncompressed regions are decoded through a source that shows a few
    //! bytes at a time, so that every record takes the checked path, and the samples and
    //! errors must be the same, on golden files and on corrupted copies of them.

    use super::*;

    /// Shows at most `step` bytes more than the decoder has consumed.
    struct Trickle<'a> {
        data: &'a [u8],
        end: usize,
        step: usize,
    }

    impl ByteSource for Trickle<'_> {
        fn window(&self) -> &[u8] {
            &self.data[..self.end]
        }
        fn refill(&mut self, consumed: usize) -> std::result::Result<bool, FormatError> {
            self.data = &self.data[consumed..];
            self.end = (self.end - consumed + self.step).min(self.data.len());
            Ok(self.end < self.data.len())
        }
        fn is_complete(&self) -> bool {
            // As for a zstd stream: the REPEAT count is not bounded up front.
            false
        }
    }

    /// Every sample, or the error's text, decoding `file` sample by sample.
    fn decode_whole(file: &TachFile) -> std::result::Result<Vec<OwnedSample>, String> {
        let mut stream = file.samples();
        let mut out = Vec::new();
        loop {
            match stream.next_sample() {
                Ok(Some(s)) => out.push(s.to_owned()),
                Ok(None) => return Ok(out),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The same through [`SampleStream::next_run`], run by run.
    fn decode_whole_by_runs(file: &TachFile) -> std::result::Result<Vec<OwnedSample>, String> {
        let mut stream = file.samples();
        let mut out = Vec::new();
        loop {
            match stream.next_run() {
                Ok(Some(run)) => out.extend(run.samples().map(|s| s.to_owned())),
                Ok(None) => return Ok(out),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn decode_trickled(
        file: &TachFile,
        step: usize,
        by_runs: bool,
    ) -> std::result::Result<Vec<OwnedSample>, String> {
        let source = Trickle {
            data: file.sample_region(),
            end: 0,
            step,
        };
        let mut decoder = SampleDecoder::new(source, file.decoder_setup(Region::File));
        let mut out = Vec::new();
        loop {
            let step = if by_runs {
                decoder
                    .next_run()
                    .map(|run| run.map(|r| out.extend(r.samples().map(|s| s.to_owned()))))
            } else {
                decoder
                    .next_sample()
                    .map(|s| s.map(|s| out.push(s.to_owned())))
            };
            match step {
                Ok(Some(())) => {}
                Ok(None) => return Ok(out),
                Err(at) => return Err(TachError::format(file.path(), at).to_string()),
            }
        }
    }

    fn golden(name: &str) -> Vec<u8> {
        std::fs::read(crate::golden_corpus::golden_path(name)).unwrap()
    }

    #[test]
    fn golden_files_decode_the_same_through_the_checked_path() {
        for name in [
            "cpu_recursive_none.bin",
            "synthetic_rle.bin",
            "synthetic_timestamps.bin",
        ] {
            let file = TachFile::from_bytes(name, golden(name)).unwrap();
            let whole = decode_whole(&file).unwrap();
            assert!(!whole.is_empty(), "{name}");
            for step in [1, 3, 17] {
                for by_runs in [false, true] {
                    assert_eq!(
                        decode_trickled(&file, step, by_runs).unwrap(),
                        whole,
                        "{name} step {step}, by runs: {by_runs}"
                    );
                }
            }
        }
    }

    /// Runs hold the samples `next_sample` gives, on every golden file (raw and zstd,
    /// REPEAT records longer than a run included).
    #[test]
    fn runs_hold_the_same_samples() {
        let mut files = 0;
        for path in crate::golden_corpus::golden_bins() {
            let file = TachFile::open(&path).unwrap();
            assert_eq!(
                decode_whole_by_runs(&file),
                decode_whole(&file),
                "{}",
                path.display()
            );
            files += 1;
        }
        assert!(files >= 10, "{files} golden files");
    }

    #[test]
    fn corrupted_files_fail_the_same_through_the_checked_path() {
        let name = "cpu_recursive_none.bin";
        let bytes = golden(name);
        let region = HEADER_SIZE
            ..TachFile::from_bytes(name, bytes.clone())
                .unwrap()
                .header()
                .string_table_offset as usize;
        let mut compared = 0;
        let mut failed = 0;
        // Every 7th byte of the first 3,000 of the region, three ways.
        for at in region.clone().step_by(7).take(3000 / 7) {
            for value in [0x00u8, 0x7f, 0xff] {
                let mut copy = bytes.clone();
                copy[at] = value;
                let Ok(file) = TachFile::from_bytes(name, copy) else {
                    continue;
                };
                let whole = decode_whole(&file);
                let checked = decode_trickled(&file, 5, false);
                assert_eq!(decode_whole_by_runs(&file), whole, "runs, byte {at}");
                assert_eq!(
                    decode_trickled(&file, 5, true),
                    checked,
                    "checked runs, byte {at}"
                );
                // The one designed difference: a REPEAT count too large for the bytes
                // left is refused up front only when the whole region is at hand.
                if let Err(e) = &whole {
                    if e.contains("RLE") {
                        assert!(checked.is_err(), "byte {at} = {value:#x}: {e}");
                        continue;
                    }
                }
                failed += usize::from(whole.is_err());
                assert_eq!(checked, whole, "byte {at} = {value:#x}");
                compared += 1;
            }
        }
        assert!(
            compared > 1000 && failed > 100,
            "{compared} compared, {failed} failed"
        );
    }
}
