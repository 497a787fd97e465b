//! The string table and the frame table that follow the sample data.

use super::error::{FormatError, Located, VarintReason};
use super::varint;

/// `opcode` value meaning "no opcode recorded".
pub const OPCODE_NONE: u8 = 255;

/// One row of the frame table, with end_lineno and end_column already rebuilt from
/// their deltas (both are -1 when lineno, respectively column, is -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameEntry {
    pub filename: u32,
    pub funcname: u32,
    pub lineno: i32,
    pub end_lineno: i32,
    pub column: i32,
    pub end_column: i32,
    pub opcode: u8,
}

/// A frame's source location, as CPython's reader reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Location {
    pub lineno: i32,
    pub end_lineno: i32,
    pub column: i32,
    pub end_column: i32,
}

impl FrameEntry {
    /// Whether this frame (named `filename` and `funcname`) of a file with capture
    /// features `capture` is a native frame (C, C++, Rust) of a `--native` recording:
    /// the file claims native capture, and the frame has no opcode, no column, and a
    /// file that is not Python source (`*.py`, `*.pyw`, `<frozen ...>`, `<string>`): a
    /// module's path, or the C source its debug information names. CPython's
    /// `<native>` placeholder (file `~`) is one too. A script without the `.py` suffix
    /// run by 3.9 or 3.10 (no columns) looks native in a recording without opcodes.
    pub fn is_native(
        &self,
        capture: Option<super::header::CaptureFeatures>,
        filename: &str,
        funcname: &str,
    ) -> bool {
        if !capture.is_some_and(|c| c.native) || self.opcode != OPCODE_NONE || self.column != -1 {
            return false;
        }
        if filename == "~" {
            return funcname == "<native>";
        }
        !(filename.starts_with('<')
            || filename.ends_with(".py")
            || filename.ends_with(".pyw")
            || filename.ends_with(".pyi"))
    }

    /// `None` when lineno is -1 ("no location"), as in CPython's reader.
    pub fn location(&self) -> Option<Location> {
        (self.lineno != -1).then_some(Location {
            lineno: self.lineno,
            end_lineno: self.end_lineno,
            column: self.column,
            end_column: self.end_column,
        })
    }

    /// `None` when no opcode was recorded (stored as 255).
    pub fn opcode(&self) -> Option<u8> {
        (self.opcode != OPCODE_NONE).then_some(self.opcode)
    }

    /// Appends the frame-table encoding of this frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        varint::encode_u32(out, self.filename);
        varint::encode_u32(out, self.funcname);
        varint::encode_i32(out, self.lineno);
        let end_line_delta = if self.lineno != -1 && self.end_lineno != -1 {
            self.end_lineno.wrapping_sub(self.lineno)
        } else {
            0
        };
        varint::encode_i32(out, end_line_delta);
        varint::encode_i32(out, self.column);
        let end_col_delta = if self.column != -1 && self.end_column != -1 {
            self.end_column.wrapping_sub(self.column)
        } else {
            0
        };
        varint::encode_i32(out, end_col_delta);
        out.push(self.opcode);
    }
}

/// The smallest encoding of a frame: six one-byte varints and the opcode byte.
const MIN_FRAME_BYTES: u64 = 7;

fn varint_err(what: &'static str, at: usize, e: varint::VarintError) -> Located {
    Located::file(
        at as u64,
        FormatError::MalformedVarint {
            what,
            reason: VarintReason(e),
        },
    )
}

/// Parses `count` strings starting at `offset`; returns each string's byte range.
/// Bounded by the end of `data` (CPython bounds the tables by the file size).
pub fn parse_strings(
    data: &[u8],
    offset: usize,
    count: u32,
) -> Result<Vec<std::ops::Range<usize>>, Located> {
    let left = data.len().saturating_sub(offset) as u64;
    // Every string takes at least its one-byte length.
    if count as u64 > left {
        return Err(Located::file(
            offset as u64,
            FormatError::CountTooLarge {
                table: "string",
                count,
                available: left,
            },
        ));
    }
    let mut ranges = Vec::with_capacity(count as usize);
    let mut pos = offset;
    for index in 0..count {
        let (len, n) =
            varint::decode_u32(&data[pos..]).map_err(|e| varint_err("the string table", pos, e))?;
        pos += n;
        let remaining = (data.len() - pos) as u64;
        if len as u64 > remaining {
            return Err(Located::file(
                pos as u64,
                FormatError::StringTableOverflow {
                    index,
                    len,
                    left: remaining,
                },
            ));
        }
        ranges.push(pos..pos + len as usize);
        pos += len as usize;
    }
    Ok(ranges)
}

/// Parses `count` frames starting at `offset`.
pub fn parse_frames(data: &[u8], offset: usize, count: u32) -> Result<Vec<FrameEntry>, Located> {
    let left = data.len().saturating_sub(offset) as u64;
    if count as u64 * MIN_FRAME_BYTES > left {
        return Err(Located::file(
            offset as u64,
            FormatError::CountTooLarge {
                table: "frame",
                count,
                available: left,
            },
        ));
    }
    let mut frames = Vec::with_capacity(count as usize);
    let mut pos = offset;
    macro_rules! field {
        ($decode:path, $what:literal) => {{
            let (v, n) = $decode(&data[pos..])
                .map_err(|e| varint_err(concat!("the frame table (", $what, ")"), pos, e))?;
            pos += n;
            v
        }};
    }
    for _ in 0..count {
        let filename = field!(varint::decode_u32, "filename");
        let funcname = field!(varint::decode_u32, "funcname");
        let lineno = field!(varint::decode_i32, "lineno");
        let end_lineno_delta = field!(varint::decode_i32, "end_lineno delta");
        let column = field!(varint::decode_i32, "column");
        let end_column_delta = field!(varint::decode_i32, "end_column delta");
        let Some(&opcode) = data.get(pos) else {
            return Err(Located::file(
                pos as u64,
                FormatError::UnexpectedEnd("the frame table (opcode)"),
            ));
        };
        pos += 1;
        frames.push(FrameEntry {
            filename,
            funcname,
            lineno,
            end_lineno: if lineno == -1 {
                -1
            } else {
                lineno.wrapping_add(end_lineno_delta)
            },
            column,
            end_column: if column == -1 {
                -1
            } else {
                column.wrapping_add(end_column_delta)
            },
            opcode,
        });
    }
    Ok(frames)
}
