//! The fixed-width parts of a TACH file: the 64-byte header, the 32-byte footer, the
//! optional stats block and the config word.
//!
//! Fixed-width fields are in the writer's native byte order; the magic tells which.

use super::error::FormatError;

pub const MAGIC: u32 = 0x5441_4348;
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 64;
pub const FOOTER_SIZE: usize = 32;
pub const STATS_SIZE: usize = 56;
pub const STATS_OLD_SIZE: usize = 32;
pub const STATS_MAGIC: &[u8; 8] = b"TACHSTAT";
pub const MAX_STACK_DEPTH: usize = 256;

/// Byte order of a file's fixed-width fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };

    #[inline]
    pub fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            ByteOrder::Little => u32::from_le_bytes(b),
            ByteOrder::Big => u32::from_be_bytes(b),
        }
    }
    #[inline]
    pub fn u64(self, b: [u8; 8]) -> u64 {
        match self {
            ByteOrder::Little => u64::from_le_bytes(b),
            ByteOrder::Big => u64::from_be_bytes(b),
        }
    }
    #[inline]
    pub fn f64(self, b: [u8; 8]) -> f64 {
        f64::from_bits(self.u64(b))
    }
    pub fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        })
    }
    pub fn put_u64(self, out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        })
    }
    pub fn put_f64(self, out: &mut Vec<u8>, v: f64) {
        self.put_u64(out, v.to_bits())
    }
}

/// Reads fixed-width fields from a slice at known offsets. Callers check lengths first.
pub(crate) fn array<const N: usize>(data: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&data[at..at + N]);
    out
}

/// Sample-data compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Zstd,
}

impl Compression {
    /// CPython reads 1 as zstd and any other value as none.
    pub fn from_header(v: u32) -> Self {
        if v == 1 {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
    pub fn code(self) -> u32 {
        match self {
            Compression::None => 0,
            Compression::Zstd => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
        }
    }
}

/// The profiling mode recorded in bits 0-2 of the config word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfilingMode {
    Unknown,
    Wall,
    Cpu,
    Gil,
    All,
    Exception,
}

impl ProfilingMode {
    pub fn name(self) -> &'static str {
        match self {
            ProfilingMode::Unknown => "unknown",
            ProfilingMode::Wall => "wall",
            ProfilingMode::Cpu => "cpu",
            ProfilingMode::Gil => "gil",
            ProfilingMode::All => "all",
            ProfilingMode::Exception => "exception",
        }
    }
    /// The value stored in the config word (mode + 1; 0 = unknown).
    pub fn code(self) -> u32 {
        match self {
            ProfilingMode::Unknown => 0,
            ProfilingMode::Wall => 1,
            ProfilingMode::Cpu => 2,
            ProfilingMode::Gil => 3,
            ProfilingMode::All => 4,
            ProfilingMode::Exception => 5,
        }
    }
    pub fn from_code(v: u32) -> Result<Self, FormatError> {
        Ok(match v {
            0 => ProfilingMode::Unknown,
            1 => ProfilingMode::Wall,
            2 => ProfilingMode::Cpu,
            3 => ProfilingMode::Gil,
            4 => ProfilingMode::All,
            5 => ProfilingMode::Exception,
            other => return Err(FormatError::InvalidProfilingMode(other)),
        })
    }
    pub fn parse(name: &str) -> Option<Self> {
        [
            ProfilingMode::Wall,
            ProfilingMode::Cpu,
            ProfilingMode::Gil,
            ProfilingMode::All,
            ProfilingMode::Exception,
            ProfilingMode::Unknown,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }
}

/// Capture features (config word bits 4 and up, valid when bit 3 is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CaptureFeatures {
    pub all_threads: bool,
    pub native: bool,
    pub gc: bool,
    pub opcodes: bool,
    pub blocking: bool,
}

impl CaptureFeatures {
    const BITS: [(u32, &'static str); 5] = [
        (1, "all_threads"),
        (2, "native"),
        (4, "gc"),
        (8, "opcodes"),
        (16, "blocking"),
    ];

    pub fn from_bits(bits: u32) -> Self {
        CaptureFeatures {
            all_threads: bits & 1 != 0,
            native: bits & 2 != 0,
            gc: bits & 4 != 0,
            opcodes: bits & 8 != 0,
            blocking: bits & 16 != 0,
        }
    }
    pub fn bits(self) -> u32 {
        (self.all_threads as u32)
            | (self.native as u32) << 1
            | (self.gc as u32) << 2
            | (self.opcodes as u32) << 3
            | (self.blocking as u32) << 4
    }
    pub fn names(self) -> Vec<&'static str> {
        Self::BITS
            .iter()
            .filter(|(b, _)| self.bits() & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// The config word at header offset 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Config {
    pub mode: ProfilingMode,
    /// `None` when bit 3 is clear (the writer did not record its features).
    pub features: Option<CaptureFeatures>,
    /// The raw word, kept so a rewrite preserves bits this reader does not know.
    pub raw: u32,
}

impl Config {
    pub fn parse(raw: u32) -> Result<Self, FormatError> {
        let mode = ProfilingMode::from_code(raw & 7)?;
        let features = (raw & 8 != 0).then(|| CaptureFeatures::from_bits(raw >> 4));
        Ok(Config {
            mode,
            features,
            raw,
        })
    }
    pub fn new(mode: ProfilingMode, features: Option<CaptureFeatures>) -> Self {
        let mut raw = mode.code();
        if let Some(f) = features {
            raw |= 8 | (f.bits() << 4);
        }
        Config {
            mode,
            features,
            raw,
        }
    }
}

/// The parsed 64-byte header.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Header {
    pub byte_order: ByteOrder,
    pub version: u32,
    pub python_version: (u8, u8, u8),
    pub start_time_us: u64,
    pub sample_interval_us: u64,
    pub sample_count: u64,
    pub thread_count: u32,
    pub string_table_offset: u64,
    pub frame_table_offset: u64,
    pub compression_code: u32,
    pub compression: Compression,
    pub config: Config,
}

impl Header {
    /// Parses the header; `data` must hold at least `HEADER_SIZE` bytes.
    /// Returns the error with the byte offset of the offending field.
    pub fn parse(data: &[u8]) -> Result<Header, (u64, FormatError)> {
        let magic_le = u32::from_le_bytes(array(data, 0));
        let byte_order = if magic_le == MAGIC {
            ByteOrder::Little
        } else if magic_le == MAGIC.swap_bytes() {
            ByteOrder::Big
        } else {
            return Err((0, FormatError::BadMagic(u32::from_ne_bytes(array(data, 0)))));
        };
        let bo = byte_order;
        let version = bo.u32(array(data, 4));
        let python_version = (data[8], data[9], data[10]);
        if version != FORMAT_VERSION {
            let err = if version > FORMAT_VERSION {
                FormatError::NewerVersion {
                    version,
                    major: data[8],
                    minor: data[9],
                    micro: data[10],
                }
            } else {
                FormatError::UnsupportedVersion(version)
            };
            return Err((4, err));
        }
        let compression_code = bo.u32(array(data, 56));
        let config = Config::parse(bo.u32(array(data, 60))).map_err(|e| (60, e))?;
        Ok(Header {
            byte_order,
            version,
            python_version,
            start_time_us: bo.u64(array(data, 12)),
            sample_interval_us: bo.u64(array(data, 20)),
            sample_count: bo.u64(array(data, 28)),
            thread_count: bo.u32(array(data, 36)),
            string_table_offset: bo.u64(array(data, 40)),
            frame_table_offset: bo.u64(array(data, 48)),
            compression_code,
            compression: Compression::from_header(compression_code),
            config,
        })
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let bo = self.byte_order;
        let mut out = Vec::with_capacity(HEADER_SIZE);
        bo.put_u32(&mut out, MAGIC);
        bo.put_u32(&mut out, self.version);
        out.extend_from_slice(&[
            self.python_version.0,
            self.python_version.1,
            self.python_version.2,
            0,
        ]);
        bo.put_u64(&mut out, self.start_time_us);
        bo.put_u64(&mut out, self.sample_interval_us);
        bo.put_u64(&mut out, self.sample_count);
        bo.put_u32(&mut out, self.thread_count);
        bo.put_u64(&mut out, self.string_table_offset);
        bo.put_u64(&mut out, self.frame_table_offset);
        bo.put_u32(&mut out, self.compression_code);
        bo.put_u32(&mut out, self.config.raw);
        let mut arr = [0u8; HEADER_SIZE];
        arr.copy_from_slice(&out);
        arr
    }
}

/// Marks the footer's reserved bytes 24..28 as holding a wall-clock origin in 16..24.
/// CPython writes these bytes as zeros and never reads them, so a file that carries an
/// origin still verifies and replays in CPython; the marker tells an origin of 0 (the
/// Unix epoch) from CPython's zeros, and ASCII bytes from any integer a reader could
/// misread them as (a 64-byte file's "footer" is header bytes 32..64).
pub const WALL_ORIGIN_MARKER: &[u8; 4] = b"WALL";

/// The 32-byte footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Footer {
    pub string_count: u32,
    pub frame_count: u32,
    /// What the writer recorded; CPython checks neither this nor the reserved bytes.
    pub file_size: u64,
    /// The wall-clock time (UTC, Unix epoch microseconds) of the header's
    /// `start_time_us`: a sample's wall-clock time is this plus its timestamp's offset
    /// from the start. Kept in the reserved bytes 16..28 (an i64 in the file's byte
    /// order, then `WALL_ORIGIN_MARKER`); `None` in files without it (CPython's, and
    /// tach's before it was recorded).
    pub wall_origin_us: Option<i64>,
}

impl Footer {
    pub fn parse(data: &[u8], bo: ByteOrder) -> Footer {
        let wall_origin_us =
            (&data[24..28] == WALL_ORIGIN_MARKER).then(|| bo.u64(array(data, 16)) as i64);
        Footer {
            string_count: bo.u32(array(data, 0)),
            frame_count: bo.u32(array(data, 4)),
            file_size: bo.u64(array(data, 8)),
            wall_origin_us,
        }
    }
    pub fn encode(&self, bo: ByteOrder) -> [u8; FOOTER_SIZE] {
        let mut out = Vec::with_capacity(FOOTER_SIZE);
        bo.put_u32(&mut out, self.string_count);
        bo.put_u32(&mut out, self.frame_count);
        bo.put_u64(&mut out, self.file_size);
        if let Some(origin) = self.wall_origin_us {
            bo.put_u64(&mut out, origin as u64);
            out.extend_from_slice(WALL_ORIGIN_MARKER);
        }
        out.resize(FOOTER_SIZE, 0);
        let mut arr = [0u8; FOOTER_SIZE];
        arr.copy_from_slice(&out);
        arr
    }

    /// The wall-clock time (UTC, Unix epoch µs) of a sample taken at monotonic
    /// `timestamp_us` in a file that started at `start_time_us`, when the file has an
    /// origin. Timestamps before the start (which the format allows) come out earlier.
    pub fn wall_time_us(&self, start_time_us: u64, timestamp_us: u64) -> Option<i64> {
        let since_start = timestamp_us.wrapping_sub(start_time_us) as i64;
        self.wall_origin_us
            .map(|origin| origin.wrapping_add(since_start))
    }
}

/// The optional stats block that CPython's CLI writes before the footer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Stats {
    pub duration_sec: f64,
    pub sample_rate: f64,
    /// Percent, as stored; meaningful when [`Stats::error_rate`] is `Some`.
    pub error_rate_raw: f64,
    /// Percent, as stored; meaningful when [`Stats::missed_samples`] is `Some`.
    pub missed_samples_raw: f64,
    /// Present flags: bit 0 error rate, bit 1 missed samples.
    pub present: u32,
    /// Size of the block as written: 56, or 32 for the older form.
    pub size: u32,
}

pub const STATS_ERROR_RATE: u32 = 1;
pub const STATS_MISSED: u32 = 2;

impl Stats {
    /// A 56-byte stats block with the given values.
    pub fn new(
        duration_sec: f64,
        sample_rate: f64,
        error_rate: Option<f64>,
        missed_samples: Option<f64>,
    ) -> Stats {
        Stats {
            duration_sec,
            sample_rate,
            error_rate_raw: error_rate.unwrap_or(0.0),
            missed_samples_raw: missed_samples.unwrap_or(0.0),
            present: if error_rate.is_some() {
                STATS_ERROR_RATE
            } else {
                0
            } | if missed_samples.is_some() {
                STATS_MISSED
            } else {
                0
            },
            size: STATS_SIZE as u32,
        }
    }

    /// Error rate in percent, when recorded.
    pub fn error_rate(&self) -> Option<f64> {
        (self.present & STATS_ERROR_RATE != 0).then_some(self.error_rate_raw)
    }

    /// Missed samples in percent, when recorded.
    pub fn missed_samples(&self) -> Option<f64> {
        (self.present & STATS_MISSED != 0).then_some(self.missed_samples_raw)
    }

    /// Finds the stats block the way CPython 3.15.2 does: its trailer (signature,
    /// version, size) sits just before the footer; the size is checked before the
    /// version; any version but 1 is ignored; fields are read from the block's start.
    pub fn find(data: &[u8], bo: ByteOrder) -> Result<Option<Stats>, (u64, FormatError)> {
        let fs = data.len();
        if fs < FOOTER_SIZE + 16 || &data[fs - 48..fs - 40] != STATS_MAGIC {
            return Ok(None);
        }
        let version = bo.u32(array(data, fs - 40));
        let size = bo.u32(array(data, fs - 36));
        if (size as usize) < STATS_OLD_SIZE || size as usize > fs - FOOTER_SIZE {
            return Err((
                (fs - 36) as u64,
                FormatError::Stats(format!(
                    "size {size} is outside 32..={} for this file",
                    fs - FOOTER_SIZE
                )),
            ));
        }
        if version != 1 {
            return Ok(None);
        }
        let base = fs - FOOTER_SIZE - size as usize;
        let duration_sec = bo.f64(array(data, base));
        let sample_rate = bo.f64(array(data, base + 8));
        let (mut error_rate_raw, mut missed_samples_raw, mut present) = (0.0, 0.0, 0);
        if size as usize >= STATS_SIZE {
            error_rate_raw = bo.f64(array(data, base + 16));
            missed_samples_raw = bo.f64(array(data, base + 24));
            present = bo.u32(array(data, base + 32));
        }
        let stats = Stats {
            duration_sec,
            sample_rate,
            error_rate_raw,
            missed_samples_raw,
            present,
            size,
        };
        let bad = |name: &str, v: f64, off: usize| {
            Err((
                off as u64,
                FormatError::Stats(format!("{name} is {v}, not a finite non-negative number")),
            ))
        };
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !ok(duration_sec) {
            return bad("duration", duration_sec, base);
        }
        if !ok(sample_rate) {
            return bad("sample rate", sample_rate, base + 8);
        }
        if let Some(v) = stats.error_rate() {
            if !ok(v) {
                return bad("error rate", v, base + 16);
            }
        }
        // CPython only requires missed samples to be finite.
        if let Some(v) = stats.missed_samples() {
            if !v.is_finite() {
                return bad("missed samples", v, base + 24);
            }
        }
        Ok(Some(stats))
    }

    pub fn encode(&self, bo: ByteOrder) -> Vec<u8> {
        let mut out = Vec::with_capacity(STATS_SIZE);
        bo.put_f64(&mut out, self.duration_sec);
        bo.put_f64(&mut out, self.sample_rate);
        if self.size as usize == STATS_OLD_SIZE {
            out.extend_from_slice(STATS_MAGIC);
            bo.put_u32(&mut out, 1);
            bo.put_u32(&mut out, STATS_OLD_SIZE as u32);
            return out;
        }
        bo.put_f64(&mut out, self.error_rate_raw);
        bo.put_f64(&mut out, self.missed_samples_raw);
        bo.put_u32(&mut out, self.present);
        bo.put_u32(&mut out, 0);
        out.extend_from_slice(STATS_MAGIC);
        bo.put_u32(&mut out, 1);
        bo.put_u32(&mut out, STATS_SIZE as u32);
        out
    }
}
