//! The sample records' grammar, written once: what a record holds, in which order,
//! and the rules its values must keep.
//!
//! A record is `u64 thread_id, u32 interpreter_id, u8 encoding` then a body:
//! - REPEAT: `count`, then `count` entries of (`timestamp delta`, `status byte`);
//! - FULL: `delta`, `status`, `depth`, then `depth` frame indices;
//! - SUFFIX: `delta`, `status`, `shared`, `new`, then `new` frame indices; the stack is
//!   those frames over the outermost `shared` frames of the thread's last stack;
//! - POP_PUSH: `delta`, `status`, `pop`, `push`, then `push` frame indices; the stack is
//!   those frames over the last stack less its `pop` innermost frames (a pop beyond the
//!   depth is clamped, as in CPython).
//!
//! No stack may exceed [`MAX_STACK_DEPTH`] frames, and a frame index must name a frame
//! whose strings exist.
//!
//! Every reader of records goes through here: the checked streaming decoder and its
//! unchecked window path (`records.rs`), and the chunked parallel counter with its
//! boundary search (`counts.rs`). Each supplies a [`FieldReader`] (how bytes are got,
//! and what a failure becomes); the fields' order, their names in errors and the rules
//! live only in this file.

use super::error::FormatError;
use super::header::{array, ByteOrder, MAX_STACK_DEPTH};
use super::varint;

/// Bytes of a record header: thread_id, interpreter_id, encoding.
pub const RECORD_HEADER_SIZE: usize = 13;

/// The four record encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Repeat = 0,
    Full = 1,
    Suffix = 2,
    PopPush = 3,
}

impl RecordKind {
    pub const ALL: [RecordKind; 4] = [
        RecordKind::Repeat,
        RecordKind::Full,
        RecordKind::Suffix,
        RecordKind::PopPush,
    ];
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => RecordKind::Repeat,
            1 => RecordKind::Full,
            2 => RecordKind::Suffix,
            3 => RecordKind::PopPush,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Repeat => "REPEAT",
            RecordKind::Full => "FULL",
            RecordKind::Suffix => "SUFFIX",
            RecordKind::PopPush => "POP_PUSH",
        }
    }
}

/// A record header's thread id, interpreter id and encoding byte (offset 12). `h`
/// holds at least [`RECORD_HEADER_SIZE`] bytes.
#[inline(always)]
pub(crate) fn record_header(bo: ByteOrder, h: &[u8]) -> (u64, u32, u8) {
    (bo.u64(array(h, 0)), bo.u32(array(h, 8)), h[12])
}

/// A field of a record body, named as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    RepeatCount,
    RepeatDelta,
    RepeatStatus,
    Delta,
    Status,
    /// FULL's depth, SUFFIX's shared count, POP_PUSH's pop count.
    First(RecordKind),
    /// SUFFIX's new frame count, POP_PUSH's push count.
    Second(RecordKind),
    FrameIndex,
}

impl Field {
    pub(crate) fn what(self) -> &'static str {
        match self {
            Field::RepeatCount => "a REPEAT count",
            Field::RepeatDelta => "a REPEAT timestamp delta",
            Field::RepeatStatus => "sample data in a REPEAT record",
            Field::Delta => "a timestamp delta",
            Field::Status => "sample data",
            Field::First(RecordKind::Full) => "a FULL stack depth",
            Field::First(RecordKind::Suffix) => "a SUFFIX shared count",
            Field::First(_) => "a POP_PUSH pop count",
            Field::Second(RecordKind::Suffix) => "a SUFFIX frame count",
            Field::Second(_) => "a POP_PUSH push count",
            Field::FrameIndex => "a frame index",
        }
    }
}

/// Where the grammar gets its values. Implementations decide how bytes are had (a
/// refilled stream, a window, a chunk) and what a failure becomes.
pub(crate) trait FieldReader {
    type Error;
    /// A position to report a broken rule at.
    type Mark: Copy;
    fn mark(&self) -> Self::Mark;
    fn read_u64(&mut self, field: Field) -> Result<u64, Self::Error>;
    fn read_u32(&mut self, field: Field) -> Result<u32, Self::Error>;
    fn read_byte(&mut self, field: Field) -> Result<u8, Self::Error>;
    /// The error for a value read at `at` that breaks a rule.
    fn broken(&self, at: Self::Mark, rule: FormatError) -> Self::Error;
}

/// How a FULL / SUFFIX / POP_PUSH record changes its thread's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StackEdit {
    pub kind: RecordKind,
    /// FULL: depth; SUFFIX: shared; POP_PUSH: pop.
    pub first: u32,
    /// SUFFIX: new frames; POP_PUSH: push; FULL: 0.
    pub second: u32,
}

impl StackEdit {
    /// The frame indices the record carries.
    #[inline(always)]
    pub fn fresh(self) -> u32 {
        match self.kind {
            RecordKind::Full => self.first,
            _ => self.second,
        }
    }

    /// Applied to a stack of `depth` frames: the first of its frames (innermost first)
    /// that stays under the fresh ones, or the rule broken, as CPython checks them.
    #[inline(always)]
    pub fn keep_from(self, depth: usize) -> Result<usize, FormatError> {
        match self.kind {
            RecordKind::Full => {
                if self.first as usize > MAX_STACK_DEPTH {
                    return Err(FormatError::StackDepth(self.first));
                }
                Ok(depth)
            }
            RecordKind::Suffix => {
                if self.first as usize > depth {
                    return Err(FormatError::SharedExceedsDepth {
                        shared: self.first,
                        depth,
                    });
                }
                let final_depth = self.first as u64 + self.second as u64;
                if final_depth > MAX_STACK_DEPTH as u64 {
                    return Err(FormatError::FinalStackDepth(final_depth));
                }
                Ok(depth - self.first as usize)
            }
            RecordKind::PopPush => {
                let keep_from = (self.first as usize).min(depth);
                let final_depth = (depth - keep_from) as u64 + self.second as u64;
                if final_depth > MAX_STACK_DEPTH as u64 {
                    return Err(FormatError::FinalStackDepth(final_depth));
                }
                Ok(keep_from)
            }
            RecordKind::Repeat => unreachable!("a REPEAT record edits no stack"),
        }
    }

    /// False when [`Self::keep_from`] fails at every depth: the check for readers that
    /// do not know the stack yet (they check the rest once they do).
    #[inline(always)]
    pub fn possible(self) -> bool {
        match self.kind {
            RecordKind::Full | RecordKind::PopPush => self.fresh() as usize <= MAX_STACK_DEPTH,
            RecordKind::Suffix => self.first as u64 + self.second as u64 <= MAX_STACK_DEPTH as u64,
            RecordKind::Repeat => false,
        }
    }
}

/// The fields of a FULL / SUFFIX / POP_PUSH record before its frames.
pub(crate) struct ChangeHead<M> {
    pub delta: u64,
    pub status: u8,
    pub edit: StackEdit,
    /// Where the counts start: a broken stack rule is reported here.
    pub edit_at: M,
}

/// Reads a FULL / SUFFIX / POP_PUSH body up to its frames.
#[inline(always)]
pub(crate) fn read_change_head<R: FieldReader>(
    r: &mut R,
    kind: RecordKind,
) -> Result<ChangeHead<R::Mark>, R::Error> {
    let delta = r.read_u64(Field::Delta)?;
    let status = r.read_byte(Field::Status)?;
    let edit_at = r.mark();
    let first = r.read_u32(Field::First(kind))?;
    let second = match kind {
        RecordKind::Full => 0,
        _ => r.read_u32(Field::Second(kind))?,
    };
    Ok(ChangeHead {
        delta,
        status,
        edit: StackEdit {
            kind,
            first,
            second,
        },
        edit_at,
    })
}

/// Reads a REPEAT record's count.
#[inline(always)]
pub(crate) fn read_repeat_count<R: FieldReader>(r: &mut R) -> Result<u32, R::Error> {
    r.read_u32(Field::RepeatCount)
}

/// Reads one REPEAT entry: the timestamp delta and the status byte.
#[inline(always)]
pub(crate) fn read_repeat_entry<R: FieldReader>(r: &mut R) -> Result<(u64, u8), R::Error> {
    let delta = r.read_u64(Field::RepeatDelta)?;
    let status = r.read_byte(Field::RepeatStatus)?;
    Ok((delta, status))
}

/// Reads REPEAT entries from `r` into `timestamps` and `statuses` (as many as both hold,
/// or until a read fails), accumulating the deltas onto `time`; returns how many were
/// read, with `r` after the last whole one. The same rule as [`read_repeat_entry`], in a
/// loop that takes the usual entry (a delta under 128, as at any rate above 8 kHz, then
/// the status) without the general varint decode.
#[inline(always)]
pub(crate) fn read_repeat_entries(
    r: &mut SliceReader<'_>,
    time: &mut u64,
    timestamps: &mut [u64],
    statuses: &mut [u8],
) -> usize {
    let want = timestamps.len().min(statuses.len());
    let bytes = r.bytes;
    let mut n = 0;
    while n < want {
        if let Some(&[delta, status]) = bytes.get(r.pos..r.pos + 2) {
            if delta < 0x80 {
                *time = time.wrapping_add(delta as u64);
                timestamps[n] = *time;
                statuses[n] = status;
                r.pos += 2;
                n += 1;
                continue;
            }
        }
        let at = r.pos;
        let Ok((delta, status)) = read_repeat_entry(r) else {
            r.pos = at;
            break;
        };
        *time = time.wrapping_add(delta);
        timestamps[n] = *time;
        statuses[n] = status;
        n += 1;
    }
    n
}

/// Reads the status bytes of REPEAT entries from `r` into `statuses` (as many as it
/// holds, or until a read fails), skipping their deltas; returns how many were read,
/// with `r` after the last whole one. The same rule as [`read_repeat_entry`], for readers
/// that count samples and never look at their times: four usual entries (a delta under
/// 128, then the status) are taken from one 8-byte word.
#[inline(always)]
pub(crate) fn read_repeat_statuses(r: &mut SliceReader<'_>, statuses: &mut [u8]) -> usize {
    /// The high bit of bytes 0, 2, 4 and 6 of a little-endian word: the four deltas.
    const DELTA_HIGH_BITS: u64 = 0x0080_0080_0080_0080;
    let bytes = r.bytes;
    let want = statuses.len();
    let mut n = 0;
    while n < want {
        if want - n >= 4 {
            if let Some(word) = bytes.get(r.pos..r.pos + 8) {
                let word: &[u8; 8] = word.try_into().expect("eight bytes");
                if u64::from_le_bytes(*word) & DELTA_HIGH_BITS == 0 {
                    statuses[n..n + 4].copy_from_slice(&[word[1], word[3], word[5], word[7]]);
                    r.pos += 8;
                    n += 4;
                    continue;
                }
            }
        }
        let at = r.pos;
        let Ok((_, status)) = read_repeat_entry(r) else {
            r.pos = at;
            break;
        };
        statuses[n] = status;
        n += 1;
    }
    n
}

/// A REPEAT count checked against the bytes left after it: each entry takes two
/// bytes or more. CPython checks it when the whole region is at hand.
#[inline(always)]
pub(crate) fn repeat_fits(count: u32, bytes_left: usize) -> Result<(), FormatError> {
    let max = bytes_left as u64 / 2;
    if count as u64 > max {
        return Err(FormatError::RleCount { count, max });
    }
    Ok(())
}

/// What frame indices are checked against.
#[derive(Debug, Clone, Copy)]
pub struct FrameCheck<'a> {
    frame_count: u32,
    /// For each frame, the string index that is out of range, if any.
    bad_string: &'a [Option<u32>],
    string_count: u32,
    /// No frame names an out-of-range string (the usual case): an index needs only
    /// its range check.
    strings_valid: bool,
}

impl<'a> FrameCheck<'a> {
    pub fn new(frame_count: u32, bad_string: &'a [Option<u32>], string_count: u32) -> Self {
        FrameCheck {
            frame_count,
            bad_string,
            string_count,
            strings_valid: bad_string.iter().all(Option::is_none),
        }
    }

    /// A frame index names a frame whose strings all exist.
    #[inline(always)]
    pub fn check(&self, index: u32) -> Result<(), FormatError> {
        if index >= self.frame_count {
            return Err(FormatError::FrameIndex {
                index,
                count: self.frame_count,
            });
        }
        if !self.strings_valid {
            if let Some(bad) = self.bad_string[index as usize] {
                return Err(FormatError::StringIndex {
                    frame: index,
                    index: bad,
                    count: self.string_count,
                });
            }
        }
        Ok(())
    }
}

/// Reads one checked frame index.
#[inline(always)]
pub(crate) fn read_frame<R: FieldReader>(
    r: &mut R,
    frames: &FrameCheck<'_>,
) -> Result<u32, R::Error> {
    let at = r.mark();
    let index = r.read_u32(Field::FrameIndex)?;
    match frames.check(index) {
        Ok(()) => Ok(index),
        Err(rule) => Err(r.broken(at, rule)),
    }
}

/// Reads `out.len()` checked frame indices.
#[inline(always)]
pub(crate) fn read_frames<R: FieldReader>(
    r: &mut R,
    frames: &FrameCheck<'_>,
    out: &mut [u32],
) -> Result<(), R::Error> {
    for slot in out {
        *slot = read_frame(r, frames)?;
    }
    Ok(())
}

/// Why a [`SliceReader`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A read failed: the bytes ran out, or a varint is malformed.
    Read,
    /// A value breaks a rule.
    Broken,
}

/// A reader over bytes at hand that reports nothing: the fast paths that hand
/// anything unusual to a checked reader.
pub(crate) struct SliceReader<'a> {
    pub bytes: &'a [u8],
    pub pos: usize,
}

impl FieldReader for SliceReader<'_> {
    type Error = Stop;
    type Mark = ();

    #[inline(always)]
    fn mark(&self) {}

    #[inline(always)]
    fn read_u64(&mut self, _: Field) -> Result<u64, Stop> {
        let bytes = self.bytes.get(self.pos..).ok_or(Stop::Read)?;
        let (v, n) = varint::decode_u64(bytes).map_err(|_| Stop::Read)?;
        self.pos += n;
        Ok(v)
    }

    #[inline(always)]
    fn read_u32(&mut self, _: Field) -> Result<u32, Stop> {
        let bytes = self.bytes.get(self.pos..).ok_or(Stop::Read)?;
        let (v, n) = varint::decode_u32(bytes).map_err(|_| Stop::Read)?;
        self.pos += n;
        Ok(v)
    }

    #[inline(always)]
    fn read_byte(&mut self, _: Field) -> Result<u8, Stop> {
        let b = *self.bytes.get(self.pos).ok_or(Stop::Read)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline(always)]
    fn broken(&self, _: (), _: FormatError) -> Stop {
        Stop::Broken
    }
}

impl SliceReader<'_> {
    /// A record's thread id, interpreter id and kind; `Stop::Broken` for an unknown
    /// encoding.
    #[inline(always)]
    pub fn record_header(&mut self, bo: ByteOrder) -> Result<(u64, u32, RecordKind), Stop> {
        let h = self
            .bytes
            .get(self.pos..self.pos + RECORD_HEADER_SIZE)
            .ok_or(Stop::Read)?;
        let (thread_id, interpreter_id, code) = record_header(bo, h);
        let kind = RecordKind::from_code(code).ok_or(Stop::Broken)?;
        self.pos += RECORD_HEADER_SIZE;
        Ok((thread_id, interpreter_id, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batch readers take the same entries as one `read_repeat_entry` after another,
    /// and stop at the same byte: one- to ten-byte deltas, statuses with the high bit
    /// set, and every truncation, including an over-long varint.
    #[test]
    fn repeat_batches_read_what_single_entries_read() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..200 {
            let mut bytes = Vec::new();
            for _ in 0..(next() % 40) {
                let r = next();
                // Mostly one-byte deltas, as at high rates; some long ones.
                let delta = if r % 5 == 0 { r >> (r % 60) } else { r % 128 };
                crate::tach::varint::encode_u64(&mut bytes, delta);
                bytes.push((next() >> 3) as u8);
            }
            if case % 7 == 0 {
                bytes.extend_from_slice(&[0xff; 11]);
            }
            for cut in 0..=bytes.len() {
                let bytes = &bytes[..cut];
                let mut one = SliceReader { bytes, pos: 0 };
                let (mut times, mut stats) = (Vec::new(), Vec::new());
                let mut t = 7u64;
                while let Ok((delta, status)) = read_repeat_entry(&mut one) {
                    t = t.wrapping_add(delta);
                    times.push(t);
                    stats.push(status);
                }
                let whole: usize = {
                    let mut r = SliceReader { bytes, pos: 0 };
                    for _ in 0..stats.len() {
                        read_repeat_entry(&mut r).unwrap();
                    }
                    r.pos
                };
                let mut r = SliceReader { bytes, pos: 0 };
                let mut time = 7u64;
                let (mut ts, mut ss) = (vec![0u64; 64], vec![0u8; 64]);
                let n = read_repeat_entries(&mut r, &mut time, &mut ts, &mut ss);
                assert_eq!((&ts[..n], &ss[..n], r.pos), (&times[..], &stats[..], whole));
                let mut r = SliceReader { bytes, pos: 0 };
                let n = read_repeat_statuses(&mut r, &mut ss);
                assert_eq!(
                    (&ss[..n], r.pos),
                    (&stats[..], whole),
                    "case {case} cut {cut}"
                );
            }
        }
    }

    /// `possible` is exactly "some depth accepts it", for every kind and small counts
    /// around the limit.
    #[test]
    fn possible_means_some_depth_accepts_the_edit() {
        let around = [0u32, 1, 2, 100, 254, 255, 256, 257, 300, u32::MAX];
        for kind in [RecordKind::Full, RecordKind::Suffix, RecordKind::PopPush] {
            for &first in &around {
                for &second in &around {
                    let edit = StackEdit {
                        kind,
                        first,
                        second: if kind == RecordKind::Full { 0 } else { second },
                    };
                    let some_depth_ok =
                        (0..=MAX_STACK_DEPTH).any(|depth| edit.keep_from(depth).is_ok());
                    assert_eq!(edit.possible(), some_depth_ok, "{edit:?}");
                }
            }
        }
    }

    /// The rules CPython's reader applies, one case each.
    #[test]
    fn stack_rules() {
        let edit = |kind, first, second| StackEdit {
            kind,
            first,
            second,
        };
        assert_eq!(edit(RecordKind::Full, 256, 0).keep_from(3), Ok(3));
        assert_eq!(
            edit(RecordKind::Full, 257, 0).keep_from(0),
            Err(FormatError::StackDepth(257))
        );
        assert_eq!(edit(RecordKind::Suffix, 2, 1).keep_from(5), Ok(3));
        assert_eq!(
            edit(RecordKind::Suffix, 6, 1).keep_from(5),
            Err(FormatError::SharedExceedsDepth {
                shared: 6,
                depth: 5
            })
        );
        assert_eq!(
            edit(RecordKind::Suffix, 200, 57).keep_from(200),
            Err(FormatError::FinalStackDepth(257))
        );
        // A pop beyond the depth is clamped.
        assert_eq!(edit(RecordKind::PopPush, 9, 2).keep_from(5), Ok(5));
        assert_eq!(
            edit(RecordKind::PopPush, 1, 2).keep_from(256),
            Err(FormatError::FinalStackDepth(257))
        );
        assert_eq!(
            repeat_fits(3, 5),
            Err(FormatError::RleCount { count: 3, max: 2 })
        );
        assert_eq!(repeat_fits(3, 6), Ok(()));
    }

    /// Errors name the field the way the checked decoder reports them.
    #[test]
    fn fields_are_named() {
        assert_eq!(
            Field::First(RecordKind::PopPush).what(),
            "a POP_PUSH pop count"
        );
        assert_eq!(
            Field::Second(RecordKind::Suffix).what(),
            "a SUFFIX frame count"
        );
    }
}
