//! The crash journal: what a recording appends beside its output file while it runs,
//! so that its samples survive a process that dies without finishing the file
//! (SIGKILL, the OOM killer, a segfault or abort in native code, `os._exit`).
//!
//! A TACH file can only be written at the end: its string and frame tables, footer and
//! header come last. The journal (`OUT.tach.journal`) holds the same bytes as they
//! appear, appended with one write(2) per sync (the writer syncs a few times a second),
//! and is deleted once the final file is complete. `tach recover` ([`super::recover`])
//! turns a journal left behind into a TACH file.
//!
//! Layout (journal framing little-endian; sample records in the writer's byte order):
//! - prelude: the 8 bytes `tachjrnl`, u32 version (1);
//! - records: u32 payload length, u32 CRC-32 (IEEE) of the payload, the payload. A
//!   record whose length runs past the end of the file or whose checksum fails is a
//!   torn last write: recovery stops there and drops it.
//! - payload: u8 kind, then
//!   - kind 1, SETTINGS (the first record, exactly once): u8 byte order (0 little,
//!     1 big), u8 × 3 Python version, u64 start_time_us, u64 sample_interval_us, u32
//!     compression code, u32 config word, then optionally an i64 wall-clock origin
//!     (UTC, Unix epoch µs, of start_time_us; see `Footer::wall_origin_us`): a
//!     journal written before origins were recorded has none;
//!   - kind 2, SYNC: u64 timestamp_us (when it was written), u64 samples (all samples
//!     up to this sync), u32 threads, then four blocks, each a varint byte length and
//!     the bytes: new strings (varint count first, then as in the string table), new
//!     frames (varint count first, then as in the frame table), committed sample
//!     records (final bytes of the sample region, in order) and pending records (the
//!     REPEAT runs still buffered by the writer, encoded as it would flush them: valid
//!     only as the tail after this sync's committed records).
//!
//! Fixed-width integers of the journal's own framing are little-endian; thread ids
//! inside the sample records are in the byte order the SETTINGS record names, the same
//! as the final file's.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::error::VarintReason;
use super::header::{ByteOrder, Compression};
use super::varint;

/// The first 8 bytes of every journal. Lower case: a file starting with "TACH" would
/// read as a big-endian TACH file to CPython and to our reader.
pub const JOURNAL_MAGIC: &[u8; 8] = b"tachjrnl";
pub const JOURNAL_VERSION: u32 = 1;
/// Magic and version.
pub const PRELUDE_SIZE: usize = 12;
/// Payload length and checksum.
pub const RECORD_HEADER_SIZE: usize = 8;
/// The largest payload a reader accepts (a sync holds a fraction of a second of data).
pub const MAX_RECORD_SIZE: u32 = 1 << 30;

pub const KIND_SETTINGS: u8 = 1;
pub const KIND_SYNC: u8 = 2;
/// Kind byte and the fixed fields of a SETTINGS payload.
pub const SETTINGS_SIZE: usize = 1 + 1 + 3 + 8 + 8 + 4 + 4;
/// A SETTINGS payload that carries a wall-clock origin after its fixed fields.
pub const SETTINGS_WITH_ORIGIN_SIZE: usize = SETTINGS_SIZE + 8;
/// Kind byte and the fixed fields of a SYNC payload, before its blocks.
pub const SYNC_FIXED_SIZE: usize = 1 + 8 + 8 + 4;

/// Where the journal of an output file lives: the same path with `.journal` appended.
pub fn journal_path(output: &Path) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(".journal");
    PathBuf::from(s)
}

/// The output file a journal belongs to, when its name ends in `.journal`.
pub fn output_of_journal(journal: &Path) -> Option<PathBuf> {
    let s = journal.to_str()?;
    let stem = s.strip_suffix(".journal")?;
    (!stem.is_empty()).then(|| PathBuf::from(stem))
}

/// The header fields a recording fixes at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalSettings {
    pub byte_order: ByteOrder,
    pub python_version: (u8, u8, u8),
    pub start_time_us: u64,
    pub sample_interval_us: u64,
    pub compression: Compression,
    /// The raw config word of the header.
    pub config: u32,
    /// The footer's wall-clock origin, when the recording measured one.
    pub wall_origin_us: Option<i64>,
}

impl JournalSettings {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(KIND_SETTINGS);
        out.push(match self.byte_order {
            ByteOrder::Little => 0,
            ByteOrder::Big => 1,
        });
        let (major, minor, micro) = self.python_version;
        out.extend_from_slice(&[major, minor, micro]);
        out.extend_from_slice(&self.start_time_us.to_le_bytes());
        out.extend_from_slice(&self.sample_interval_us.to_le_bytes());
        out.extend_from_slice(&self.compression.code().to_le_bytes());
        out.extend_from_slice(&self.config.to_le_bytes());
        if let Some(origin) = self.wall_origin_us {
            out.extend_from_slice(&origin.to_le_bytes());
        }
    }

    /// Decodes a SETTINGS payload; the error says what is wrong.
    pub fn decode(p: &[u8]) -> Result<Self, String> {
        let sized = p.len() == SETTINGS_SIZE || p.len() == SETTINGS_WITH_ORIGIN_SIZE;
        if !sized || p[0] != KIND_SETTINGS {
            return Err(format!(
                "expected a SETTINGS record (kind 1, {SETTINGS_SIZE} or \
                 {SETTINGS_WITH_ORIGIN_SIZE} bytes), found kind {} of {} bytes",
                p.first().copied().unwrap_or(0),
                p.len()
            ));
        }
        let byte_order = match p[1] {
            0 => ByteOrder::Little,
            1 => ByteOrder::Big,
            b => return Err(format!("unknown byte order {b} in the SETTINGS record")),
        };
        let u64_at = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(p[at..at + 4].try_into().unwrap());
        Ok(JournalSettings {
            byte_order,
            python_version: (p[2], p[3], p[4]),
            start_time_us: u64_at(5),
            sample_interval_us: u64_at(13),
            compression: Compression::from_header(u32_at(21)),
            config: u32_at(25),
            wall_origin_us: (p.len() == SETTINGS_WITH_ORIGIN_SIZE)
                .then(|| u64_at(SETTINGS_SIZE) as i64),
        })
    }
}

/// One SYNC record: what the recording added since the previous one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sync<'a> {
    pub timestamp_us: u64,
    pub samples: u64,
    pub threads: u32,
    pub string_count: u32,
    /// Encoded as in the string table.
    pub strings: &'a [u8],
    pub frame_count: u32,
    /// Encoded as in the frame table.
    pub frames: &'a [u8],
    pub committed: &'a [u8],
    pub pending: &'a [u8],
}

impl<'a> Sync<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(KIND_SYNC);
        out.extend_from_slice(&self.timestamp_us.to_le_bytes());
        out.extend_from_slice(&self.samples.to_le_bytes());
        out.extend_from_slice(&self.threads.to_le_bytes());
        let mut counted = |count: u32, bytes: &[u8]| {
            let mut n = Vec::with_capacity(5);
            varint::encode_u32(&mut n, count);
            varint::encode_u64(out, (n.len() + bytes.len()) as u64);
            out.extend_from_slice(&n);
            out.extend_from_slice(bytes);
        };
        counted(self.string_count, self.strings);
        counted(self.frame_count, self.frames);
        for block in [self.committed, self.pending] {
            varint::encode_u64(out, block.len() as u64);
            out.extend_from_slice(block);
        }
    }

    /// Decodes a SYNC payload. Errors give the offset in the payload and what is wrong.
    /// Every length is checked against the bytes left before anything is sliced.
    pub fn decode(p: &'a [u8]) -> Result<Self, (usize, String)> {
        if p.len() < SYNC_FIXED_SIZE || p[0] != KIND_SYNC {
            return Err((0, format!("not a SYNC record ({} bytes)", p.len())));
        }
        let u64_at = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().unwrap());
        let mut pos = SYNC_FIXED_SIZE;
        let mut block = |what: &str| -> Result<&'a [u8], (usize, String)> {
            let (len, n) = varint::decode_u64(&p[pos..]).map_err(|e| {
                (
                    pos,
                    format!("malformed length of the {what} block: {}", VarintReason(e)),
                )
            })?;
            let left = (p.len() - pos - n) as u64;
            if len > left {
                return Err((
                    pos,
                    format!("{what} block of {len} bytes but only {left} bytes are left"),
                ));
            }
            let start = pos + n;
            pos = start + len as usize;
            Ok(&p[start..pos])
        };
        let strings = block("strings")?;
        let frames = block("frames")?;
        let committed = block("committed samples")?;
        let pending = block("pending samples")?;
        let end = pos;
        if end != p.len() {
            return Err((
                end,
                format!("{} unexpected bytes after the blocks", p.len() - end),
            ));
        }
        let counted = |b: &'a [u8], what: &str| -> Result<(u32, &'a [u8]), String> {
            let (count, n) = varint::decode_u32(b)
                .map_err(|e| format!("malformed {what} count: {}", VarintReason(e)))?;
            Ok((count, &b[n..]))
        };
        let (string_count, strings) =
            counted(strings, "string").map_err(|e| (SYNC_FIXED_SIZE, e))?;
        let (frame_count, frames) = counted(frames, "frame").map_err(|e| (SYNC_FIXED_SIZE, e))?;
        Ok(Sync {
            timestamp_us: u64_at(1),
            samples: u64_at(9),
            threads: u32::from_le_bytes(p[17..21].try_into().unwrap()),
            string_count,
            strings,
            frame_count,
            frames,
            committed,
            pending,
        })
    }
}

/// Frames a payload as a journal record: length, CRC-32, payload.
pub fn frame_record(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// An open journal being appended to, by the thread that writes the recording.
#[derive(Debug)]
pub struct JournalFile {
    path: PathBuf,
    file: File,
    payload: Vec<u8>,
    record: Vec<u8>,
}

impl JournalFile {
    /// Creates (or truncates) the journal and writes its prelude and SETTINGS record.
    pub fn create(path: PathBuf, settings: &JournalSettings) -> io::Result<Self> {
        let file = File::create(&path)?;
        let mut j = JournalFile {
            path,
            file,
            payload: Vec::new(),
            record: Vec::new(),
        };
        j.record.extend_from_slice(JOURNAL_MAGIC);
        j.record.extend_from_slice(&JOURNAL_VERSION.to_le_bytes());
        settings.encode(&mut j.payload);
        frame_record(&j.payload, &mut j.record);
        j.file.write_all(&j.record)?;
        Ok(j)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one SYNC record with a single write: once write(2) returns, the data
    /// survives the death of the process (the kernel holds it), though not power loss.
    pub fn append_sync(&mut self, sync: &Sync<'_>) -> io::Result<()> {
        self.payload.clear();
        sync.encode(&mut self.payload);
        self.record.clear();
        frame_record(&self.payload, &mut self.record);
        self.file.write_all(&self.record)
    }

    /// Deletes the journal (the final file is complete).
    pub fn remove(self) -> io::Result<()> {
        drop(self.file);
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_and_sync_round_trip() {
        let s = JournalSettings {
            byte_order: ByteOrder::Big,
            python_version: (3, 11, 9),
            start_time_us: 123_456_789,
            sample_interval_us: 1000,
            compression: Compression::Zstd,
            config: 0x49,
            wall_origin_us: None,
        };
        let mut p = Vec::new();
        s.encode(&mut p);
        assert_eq!(p.len(), SETTINGS_SIZE);
        assert_eq!(JournalSettings::decode(&p), Ok(s));
        assert!(JournalSettings::decode(&p[..p.len() - 1]).is_err());
        // A negative origin (before 1970) round-trips too: the field is signed.
        for origin in [1_795_000_000_000_000, -5] {
            let s = JournalSettings {
                wall_origin_us: Some(origin),
                ..s
            };
            let mut p = Vec::new();
            s.encode(&mut p);
            assert_eq!(p.len(), SETTINGS_WITH_ORIGIN_SIZE);
            assert_eq!(JournalSettings::decode(&p), Ok(s));
            assert!(JournalSettings::decode(&p[..p.len() - 1]).is_err());
        }

        let sync = Sync {
            timestamp_us: 5,
            samples: 7,
            threads: 2,
            string_count: 1,
            strings: b"\x01a",
            frame_count: 0,
            frames: b"",
            committed: &[1, 2, 3],
            pending: &[],
        };
        let mut p = Vec::new();
        sync.encode(&mut p);
        assert_eq!(Sync::decode(&p), Ok(sync));
        // Every truncation is an error, never a panic or a misparse.
        for cut in 0..p.len() {
            assert!(Sync::decode(&p[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn journal_names() {
        assert_eq!(
            journal_path(Path::new("a/out.tach")),
            PathBuf::from("a/out.tach.journal")
        );
        assert_eq!(
            output_of_journal(Path::new("a/out.tach.journal")),
            Some(PathBuf::from("a/out.tach"))
        );
        assert_eq!(output_of_journal(Path::new("x.tach")), None);
    }
}
