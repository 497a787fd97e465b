//! `tach recover`: turns a crash journal (`journal`) into a TACH file.
//!
//! The journal is read up to its last complete, checksummed record. A torn last write
//! (the process died inside write(2), or the file was cut) is dropped and reported,
//! never parsed. The recovered file is: the header, the committed sample records of
//! every sync in order followed by the pending REPEAT runs of the last sync (compressed
//! as the recording asked), the string and frame tables, and the footer; no stats
//! block (the recording never measured its end). It is then opened and fully verified
//! with the reader before success is reported.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::TachError;
use super::header::{Compression, Config, Footer, Header, FORMAT_VERSION, HEADER_SIZE};
use super::journal::{
    output_of_journal, JournalSettings, Sync, JOURNAL_MAGIC, JOURNAL_VERSION, KIND_SYNC,
    MAX_RECORD_SIZE, PRELUDE_SIZE, RECORD_HEADER_SIZE,
};
use super::reader::TachFile;
use super::tables;

/// CPython's zstd window (the writer's): 2 MiB.
const ZSTD_WINDOW_LOG: u32 = 21;
const ZSTD_LEVEL: i32 = super::writer::DEFAULT_ZSTD_LEVEL;

/// Why a journal could not be recovered.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: byte {offset} of the journal: {what}", path.display())]
    Journal {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("the recovered file does not verify (a bug in tach, please report it): {0}")]
    Verify(TachError),
    #[error("{0}")]
    Usage(String),
}

/// The last bytes of a journal that were not used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTail {
    pub offset: u64,
    pub bytes: u64,
    pub why: String,
}

/// What [`recover`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub output: PathBuf,
    pub syncs: u64,
    pub samples: u64,
    pub threads: u32,
    pub strings: u32,
    pub frames: u32,
    /// Microseconds from the recording's start to its last sync.
    pub covered_us: u64,
    pub file_size: u64,
    pub dropped: Option<DroppedTail>,
}

/// The default output of `tach recover JOURNAL`: the journal's name without `.journal`.
pub fn default_output(journal: &Path) -> Result<PathBuf, RecoverError> {
    output_of_journal(journal).ok_or_else(|| {
        RecoverError::Usage(format!(
            "{}: the name does not end in .journal; name the output with -o",
            journal.display()
        ))
    })
}

/// Recovers the journal at `journal` into a TACH file at `output`.
pub fn recover(journal: &Path, output: &Path) -> Result<Recovered, RecoverError> {
    if journal == output {
        return Err(RecoverError::Usage(
            "the output must not be the journal itself".into(),
        ));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecoverError::Io { path, source }
    };
    let bad = |offset: usize, what: String| RecoverError::Journal {
        path: journal.to_path_buf(),
        offset: offset as u64,
        what,
    };
    let data = std::fs::read(journal).map_err(io(journal))?;
    if data.len() < PRELUDE_SIZE || &data[..8] != JOURNAL_MAGIC {
        return Err(bad(
            0,
            "not a tach crash journal (it does not start with tachjrnl)".into(),
        ));
    }
    let version = u32::from_le_bytes(data[8..12].try_into().unwrap());
    if version != JOURNAL_VERSION {
        return Err(bad(
            8,
            format!("unsupported journal version {version} (this tach reads version 1)"),
        ));
    }
    let mut records = Records {
        data: &data,
        pos: PRELUDE_SIZE,
        dropped: None,
    };
    let settings = match records.next() {
        Some((at, p)) => JournalSettings::decode(p).map_err(|e| bad(at, e))?,
        None => {
            let why = records
                .dropped
                .map(|d| d.why)
                .unwrap_or_else(|| "the journal ends after its prelude".into());
            return Err(bad(PRELUDE_SIZE, format!("no settings record: {why}")));
        }
    };
    let config = Config::parse(settings.config).map_err(|e| bad(PRELUDE_SIZE, e.to_string()))?;

    let file = File::create(output).map_err(io(output))?;
    let mut out = BufWriter::new(file);
    out.write_all(&[0u8; HEADER_SIZE]).map_err(io(output))?;
    let mut sink = match settings.compression {
        Compression::None => RegionSink::Raw(out),
        Compression::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).map_err(io(output))?;
            enc.include_checksum(false).map_err(io(output))?;
            enc.window_log(ZSTD_WINDOW_LOG).map_err(io(output))?;
            RegionSink::Zstd(Box::new(enc))
        }
    };
    let mut string_table = Vec::new();
    let mut frame_table = Vec::new();
    let (mut strings, mut frames) = (0u32, 0u32);
    let mut last: Option<(u64, u64, u32, Vec<u8>)> = None;
    let mut syncs = 0u64;
    while let Some((at, p)) = records.next() {
        if p.first() != Some(&KIND_SYNC) {
            records.stop(
                at,
                format!("unknown record kind {}", p.first().copied().unwrap_or(0)),
            );
            break;
        }
        let sync = Sync::decode(p).map_err(|(off, e)| bad(at + off, e))?;
        // Each block must hold exactly its count of entries: parse it to make sure.
        let string_ranges = tables::parse_strings(sync.strings, 0, sync.string_count);
        match string_ranges {
            Ok(r) if r.last().is_none_or(|l| l.end == sync.strings.len()) => {}
            Ok(_) => return Err(bad(at, "trailing bytes after the new strings".into())),
            Err(e) => return Err(bad(at, format!("new strings: {}", e.error))),
        }
        if sync.string_count == 0 && !sync.strings.is_empty() {
            return Err(bad(at, "trailing bytes after the new strings".into()));
        }
        match tables::parse_frames(sync.frames, 0, sync.frame_count) {
            Ok(parsed) => {
                let mut encoded = Vec::with_capacity(sync.frames.len());
                parsed.iter().for_each(|f| f.encode(&mut encoded));
                if encoded != sync.frames {
                    return Err(bad(
                        at,
                        "the new frames are not as the writer encodes them".into(),
                    ));
                }
            }
            Err(e) => return Err(bad(at, format!("new frames: {}", e.error))),
        }
        strings = strings
            .checked_add(sync.string_count)
            .ok_or_else(|| bad(at, "more than 2^32 strings".into()))?;
        frames = frames
            .checked_add(sync.frame_count)
            .ok_or_else(|| bad(at, "more than 2^32 frames".into()))?;
        string_table.extend_from_slice(sync.strings);
        frame_table.extend_from_slice(sync.frames);
        sink.write_all(sync.committed).map_err(io(output))?;
        last = Some((
            sync.timestamp_us,
            sync.samples,
            sync.threads,
            sync.pending.to_vec(),
        ));
        syncs += 1;
    }
    let (timestamp_us, samples, threads, pending) =
        last.unwrap_or((settings.start_time_us, 0, 0, Vec::new()));
    sink.write_all(&pending).map_err(io(output))?;
    let mut out = sink.finish().map_err(io(output))?;

    let string_table_offset = out.stream_position().map_err(io(output))?;
    let frame_table_offset = string_table_offset + string_table.len() as u64;
    let file_size = frame_table_offset + frame_table.len() as u64 + 32;
    let bo = settings.byte_order;
    out.write_all(&string_table).map_err(io(output))?;
    out.write_all(&frame_table).map_err(io(output))?;
    let footer = Footer {
        string_count: strings,
        frame_count: frames,
        file_size,
        wall_origin_us: settings.wall_origin_us,
    };
    out.write_all(&footer.encode(bo)).map_err(io(output))?;
    let header = Header {
        byte_order: bo,
        version: FORMAT_VERSION,
        python_version: settings.python_version,
        start_time_us: settings.start_time_us,
        sample_interval_us: settings.sample_interval_us,
        sample_count: samples,
        thread_count: threads,
        string_table_offset,
        frame_table_offset,
        compression_code: settings.compression.code(),
        compression: settings.compression,
        config,
    };
    out.seek(SeekFrom::Start(0)).map_err(io(output))?;
    out.write_all(&header.encode()).map_err(io(output))?;
    out.flush().map_err(io(output))?;
    drop(out);

    // What was written must read back whole, with every check.
    TachFile::open(output)
        .and_then(|f| f.verify())
        .map_err(RecoverError::Verify)?;
    Ok(Recovered {
        output: output.to_path_buf(),
        syncs,
        samples,
        threads,
        strings,
        frames,
        covered_us: timestamp_us.saturating_sub(settings.start_time_us),
        file_size,
        dropped: records.dropped,
    })
}

enum RegionSink {
    Raw(BufWriter<File>),
    Zstd(Box<zstd::stream::write::Encoder<'static, BufWriter<File>>>),
}

impl RegionSink {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            RegionSink::Raw(w) => w.write_all(b),
            RegionSink::Zstd(e) => e.write_all(b),
        }
    }
    fn finish(self) -> std::io::Result<BufWriter<File>> {
        match self {
            RegionSink::Raw(w) => Ok(w),
            RegionSink::Zstd(e) => e.finish(),
        }
    }
}

/// The journal's complete records, in order; stops at the first one that is torn.
struct Records<'a> {
    data: &'a [u8],
    pos: usize,
    dropped: Option<DroppedTail>,
}

impl<'a> Records<'a> {
    fn stop(&mut self, at: usize, why: String) {
        self.dropped = Some(DroppedTail {
            offset: at as u64,
            bytes: (self.data.len() - at) as u64,
            why,
        });
        self.pos = self.data.len();
    }

    /// The next record's offset and payload.
    fn next(&mut self) -> Option<(usize, &'a [u8])> {
        let at = self.pos;
        let left = self.data.len() - at;
        if left == 0 {
            return None;
        }
        if left < RECORD_HEADER_SIZE {
            self.stop(at, format!("a record header cut short ({left} bytes)"));
            return None;
        }
        let len = u32::from_le_bytes(self.data[at..at + 4].try_into().unwrap());
        let crc = u32::from_le_bytes(self.data[at + 4..at + 8].try_into().unwrap());
        let room = left - RECORD_HEADER_SIZE;
        if len > MAX_RECORD_SIZE {
            self.stop(at, format!("a record length of {len} bytes (garbage)"));
            return None;
        }
        if len as usize > room {
            self.stop(
                at,
                format!("a record of {len} bytes cut short ({room} bytes written)"),
            );
            return None;
        }
        let payload = &self.data[at + RECORD_HEADER_SIZE..at + RECORD_HEADER_SIZE + len as usize];
        if crc32fast::hash(payload) != crc {
            self.stop(at, format!("a record of {len} bytes whose checksum fails"));
            return None;
        }
        self.pos = at + RECORD_HEADER_SIZE + len as usize;
        Some((at, payload))
    }
}

/// What to tell the user about a file that does not open as TACH, when it is a journal
/// or the unfinished output of a recording: what it is and the command that recovers it.
pub fn diagnose(path: &Path) -> Option<String> {
    let mut head = [0u8; HEADER_SIZE];
    let n = File::open(path)
        .and_then(|mut f| {
            use std::io::Read;
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..])? {
                    0 => break,
                    k => n += k,
                }
            }
            Ok(n)
        })
        .ok()?;
    if head[..n].starts_with(JOURNAL_MAGIC) {
        let out = output_of_journal(path).unwrap_or_else(|| PathBuf::from("out.tach"));
        return Some(format!(
            "{} is a tach crash journal: the recording that wrote it ended without \
             finishing its file (killed, crashed or os._exit). Recover its samples with \
             `tach recover {} -o {}`",
            path.display(),
            path.display(),
            out.display()
        ));
    }
    let journal = super::journal::journal_path(path);
    if journal.is_file() {
        return Some(format!(
            "{} is an unfinished recording; its crash journal {} is beside it. Recover \
             its samples with `tach recover {} -o {}`",
            path.display(),
            journal.display(),
            journal.display(),
            path.display()
        ));
    }
    if n > 0 && head[..n].iter().all(|&b| b == 0) {
        return Some(format!(
            "{}: the header was never written: this looks like a recording that did not \
             finish, and no crash journal ({}) is beside it to recover it from with \
             `tach recover`",
            path.display(),
            journal.display()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tach::journal::journal_path;
    use crate::tach::{Compression, OwnedSample, Writer};

    /// A recording of `n` samples on two threads, with runs of repeats (pending REPEAT
    /// records) and changing stacks, syncing the journal every `sync_every` samples.
    /// Returns the samples written and the writer, unfinished.
    fn record(
        dir: &Path,
        compression: Compression,
        n: u64,
        sync_every: u64,
        journal: bool,
    ) -> (Vec<OwnedSample>, Writer<BufWriter<File>>) {
        let out = dir.join("out.tach");
        let mut w = Writer::builder(1000)
            .start_time_us(1_000_000)
            .compression(compression)
            .python_version((3, 15, 2))
            .journal(journal.then(|| journal_path(&out)))
            .create(&out)
            .unwrap();
        let mut written = Vec::new();
        for i in 0..n {
            let tid = 100 + (i % 2);
            // Stacks change every 7 samples; in between they repeat.
            let depth = 1 + (i / 7) % 5;
            let stack: Vec<u32> = (0..depth)
                .map(|d| {
                    let name = format!("f{}_{}", d, (i / 7) % 3);
                    w.frame("a.py", &name, None, None)
                })
                .collect();
            let ts = 1_000_000 + i * 1000;
            w.write_sample(tid, 0, ts, 1, &stack).unwrap();
            written.push(OwnedSample {
                thread_id: tid,
                interpreter_id: 0,
                timestamp_us: ts,
                status: 1,
                stack,
            });
            if (i + 1) % sync_every == 0 {
                w.sync_journal(ts).unwrap();
            }
        }
        (written, w)
    }

    /// The file's samples in time order (a file groups a thread's REPEAT runs, so its
    /// own order is not the order they were taken in).
    fn samples_of(path: &Path) -> Vec<OwnedSample> {
        let mut s = TachFile::open(path).unwrap().collect_samples().unwrap();
        s.sort_by_key(|s| (s.timestamp_us, s.thread_id));
        s
    }

    #[test]
    fn a_killed_writer_is_recovered_up_to_its_last_sync() {
        for compression in [Compression::None, Compression::Zstd] {
            let dir = tempfile::tempdir().unwrap();
            let (written, w) = record(dir.path(), compression, 1000, 100, true);
            // Dies without finishing: no tables, no header.
            std::mem::forget(w);
            let journal = dir.path().join("out.tach.journal");
            let out = dir.path().join("recovered.tach");
            let r = recover(&journal, &out).unwrap();
            assert_eq!(r.syncs, 10);
            assert_eq!(r.samples, 1000);
            assert_eq!(r.dropped, None);
            assert!(samples_of(&out) == written, "recovered samples differ");
            // The partial output names the way out.
            let hint = diagnose(&dir.path().join("out.tach")).unwrap();
            assert!(hint.contains("tach recover"), "{hint}");
            assert!(diagnose(&journal).unwrap().contains("crash journal"));
        }
    }

    #[test]
    fn a_torn_journal_keeps_every_complete_sync_and_never_misparses() {
        let dir = tempfile::tempdir().unwrap();
        let (written, w) = record(dir.path(), Compression::Zstd, 300, 50, true);
        std::mem::forget(w);
        let journal = dir.path().join("out.tach.journal");
        let full = std::fs::read(&journal).unwrap();
        // Record boundaries, from a walk of the framing.
        let mut ends = vec![];
        let mut pos = PRELUDE_SIZE;
        while pos < full.len() {
            pos += RECORD_HEADER_SIZE
                + u32::from_le_bytes(full[pos..pos + 4].try_into().unwrap()) as usize;
            ends.push(pos);
        }
        assert_eq!(ends.len(), 7, "settings and six syncs");
        let cut_path = dir.path().join("cut.journal");
        let out = dir.path().join("cut.tach");
        for cut in (0..full.len()).step_by(37).chain([full.len() - 1]) {
            std::fs::write(&cut_path, &full[..cut]).unwrap();
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            match recover(&cut_path, &out) {
                Ok(r) => {
                    assert!(complete >= 1, "cut {cut}");
                    let syncs = complete - 1;
                    assert_eq!(r.syncs, syncs as u64, "cut {cut}");
                    let got = samples_of(&out);
                    assert_eq!(got.len() as u64, r.samples);
                    assert!(got[..] == written[..got.len()], "not a prefix, cut {cut}");
                    assert_eq!(got.len(), syncs * 50, "cut {cut}");
                    assert_eq!(r.dropped.is_some(), cut != ends[complete - 1]);
                }
                Err(e) => {
                    assert_eq!(complete, 0, "cut {cut}: {e}");
                    assert!(e.to_string().contains("byte "), "{e}");
                }
            }
        }
        // A flipped byte inside the third sync: its checksum fails, the first two stand.
        let mut bad = full.clone();
        bad[ends[2] + 20] ^= 0x40;
        std::fs::write(&cut_path, &bad).unwrap();
        let r = recover(&cut_path, &out).unwrap();
        assert_eq!(r.samples, 100);
        let d = r.dropped.unwrap();
        assert_eq!(d.offset, ends[2] as u64);
        assert!(d.why.contains("checksum"), "{}", d.why);
        // A huge length does not allocate: it is a torn tail.
        let mut bad = full[..ends[1]].to_vec();
        bad.extend_from_slice(&u32::MAX.to_le_bytes());
        bad.extend_from_slice(&[0; 4]);
        std::fs::write(&cut_path, &bad).unwrap();
        assert!(recover(&cut_path, &out).unwrap().dropped.is_some());
    }

    #[test]
    fn a_clean_finish_writes_the_same_file_and_removes_the_journal() {
        for compression in [Compression::None, Compression::Zstd] {
            let with = tempfile::tempdir().unwrap();
            let (_, w) = record(with.path(), compression, 5000, 30, true);
            w.finish().unwrap();
            assert!(!with.path().join("out.tach.journal").exists());
            let without = tempfile::tempdir().unwrap();
            let (_, w) = record(without.path(), compression, 5000, 30, false);
            w.finish().unwrap();
            let a = std::fs::read(with.path().join("out.tach")).unwrap();
            let b = std::fs::read(without.path().join("out.tach")).unwrap();
            assert!(a == b, "the journal changed the output file");
        }
    }

    #[test]
    fn the_wall_clock_origin_survives_finish_recovery_and_rewrite() {
        let origin = 1_795_870_800_123_456; // 2026-11-28T13:00:00.123456Z
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, finish: bool| {
            let out = dir.path().join(name);
            let mut w = Writer::builder(1000)
                .start_time_us(1_000_000)
                .wall_origin_us(Some(origin))
                .journal(Some(journal_path(&out)))
                .create(&out)
                .unwrap();
            let f = w.frame("a.py", "f", None, None);
            w.write_sample(7, 0, 1_002_500, 1, &[f]).unwrap();
            w.sync_journal(1_002_500).unwrap();
            if finish {
                w.finish().unwrap();
            } else {
                std::mem::forget(w);
            }
            out
        };
        let finished = TachFile::open(write("done.tach", true)).unwrap();
        assert_eq!(finished.footer().wall_origin_us, Some(origin));
        let s = finished.collect_samples().unwrap();
        let wall = finished.footer().wall_time_us(1_000_000, s[0].timestamp_us);
        assert_eq!(wall, Some(origin + 2500));

        write("killed.tach", false);
        let recovered = dir.path().join("recovered.tach");
        recover(&dir.path().join("killed.tach.journal"), &recovered).unwrap();
        let recovered = TachFile::open(&recovered).unwrap();
        assert_eq!(recovered.footer().wall_origin_us, Some(origin));

        let rewritten = dir.path().join("rewritten.tach");
        let mut w = super::super::rewrite::builder_like(&finished)
            .create(&rewritten)
            .unwrap();
        let f = w.frame("a.py", "f", None, None);
        w.write_sample(7, 0, 1_002_500, 1, &[f]).unwrap();
        w.finish().unwrap();
        let rewritten = TachFile::open(&rewritten).unwrap();
        assert_eq!(rewritten.footer().wall_origin_us, Some(origin));
    }

    #[test]
    fn footers_without_the_marker_have_no_origin() {
        use crate::tach::header::{ByteOrder, Footer, WALL_ORIGIN_MARKER};
        for bo in [ByteOrder::Little, ByteOrder::Big] {
            for origin in [None, Some(0), Some(-1), Some(1_795_870_800_000_000)] {
                let f = Footer {
                    string_count: 3,
                    frame_count: 2,
                    file_size: 99,
                    wall_origin_us: origin,
                };
                let bytes = f.encode(bo);
                assert_eq!(Footer::parse(&bytes, bo), f);
                // CPython's footer: reserved bytes all zero.
                if origin.is_none() {
                    assert!(bytes[16..].iter().all(|&b| b == 0));
                } else {
                    assert_eq!(&bytes[24..28], WALL_ORIGIN_MARKER);
                }
            }
        }
    }

    #[test]
    fn not_a_journal_is_an_error_with_an_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.journal");
        std::fs::write(&p, b"HCAT....").unwrap();
        let e = recover(&p, &dir.path().join("x.tach")).unwrap_err();
        assert!(e.to_string().contains("byte 0"), "{e}");
        assert!(e.to_string().contains("not a tach crash journal"), "{e}");
    }
}
