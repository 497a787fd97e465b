//! CPython's location table (`co_linetable`, 3.11 and later): which source span an
//! instruction came from. Decoded here from bytes copied out of the code object, so no
//! Python code runs and no GIL is taken.

use crate::record::interpreter::layout::LineTableFormat;
use crate::tach::Location;

fn read_varint(t: &[u8], at: &mut usize) -> Option<u32> {
    let mut b = *t.get(*at)?;
    *at += 1;
    let mut val = (b & 63) as u32;
    let mut shift = 0u32;
    while b & 64 != 0 {
        b = *t.get(*at)?;
        *at += 1;
        shift += 6;
        if shift > 30 {
            return None;
        }
        val |= ((b & 63) as u32) << shift;
    }
    Some(val)
}

fn read_signed_varint(t: &[u8], at: &mut usize) -> Option<i32> {
    let u = read_varint(t, at)?;
    Some(if u & 1 != 0 {
        -((u >> 1) as i32)
    } else {
        (u >> 1) as i32
    })
}

/// The location of code unit `index` (an offset in 2-byte code units from the start of
/// the bytecode). `None` when the table does not cover it or is malformed; a location
/// with `lineno == -1` when the table says the instruction has no location.
pub fn locate(table: &[u8], firstlineno: i32, index: u32) -> Option<Location> {
    let mut at = 0usize;
    let mut line = firstlineno;
    let mut start = 0u32;
    while at < table.len() {
        let first = table[at];
        if first & 0x80 == 0 {
            return None;
        }
        at += 1;
        let code = (first >> 3) & 15;
        let end = start + (first & 7) as u32 + 1;
        let loc = match code {
            15 => Location {
                lineno: -1,
                end_lineno: -1,
                column: -1,
                end_column: -1,
            },
            14 => {
                line = line.wrapping_add(read_signed_varint(table, &mut at)?);
                let end_line = line.wrapping_add(read_varint(table, &mut at)? as i32);
                let col = read_varint(table, &mut at)? as i32 - 1;
                let end_col = read_varint(table, &mut at)? as i32 - 1;
                Location {
                    lineno: line,
                    end_lineno: end_line,
                    column: col,
                    end_column: end_col,
                }
            }
            13 => {
                line = line.wrapping_add(read_signed_varint(table, &mut at)?);
                Location {
                    lineno: line,
                    end_lineno: line,
                    column: -1,
                    end_column: -1,
                }
            }
            10..=12 => {
                line = line.wrapping_add(code as i32 - 10);
                let col = *table.get(at)? as i32;
                let end_col = *table.get(at + 1)? as i32;
                at += 2;
                Location {
                    lineno: line,
                    end_lineno: line,
                    column: col,
                    end_column: end_col,
                }
            }
            _ => {
                let second = *table.get(at)?;
                at += 1;
                let col = ((code as i32) << 3) | ((second >> 4) & 7) as i32;
                Location {
                    lineno: line,
                    end_lineno: line,
                    column: col,
                    end_column: col + (second & 15) as i32,
                }
            }
        };
        if index >= start && index < end {
            return Some(loc);
        }
        start = end;
    }
    None
}

/// The line of code unit `index` in a pre-3.11 line table (`format`: 3.9's `co_lnotab`
/// or 3.10's `co_linetable`), as `PyCode_Addr2Line` computes it; -1 (a frame that has
/// not started) is the first line. Those tables have no columns. `None` when the table
/// does not cover the instruction; a location with `lineno == -1` when 3.10's table
/// says the instruction has no line.
pub fn locate_line(
    format: LineTableFormat,
    table: &[u8],
    firstlineno: i32,
    index: i64,
) -> Option<Location> {
    let line_only = |lineno: i32| Location {
        lineno,
        end_lineno: lineno,
        column: -1,
        end_column: -1,
    };
    if index < 0 {
        return Some(line_only(firstlineno));
    }
    // Both tables count bytes of bytecode.
    let addr = index.checked_mul(2)?;
    let mut line = firstlineno;
    let mut end = 0i64;
    match format {
        LineTableFormat::Lnotab => {
            // (address increment, signed line increment) pairs: the line after the
            // last pair whose address is not past the instruction.
            for pair in table.chunks_exact(2) {
                end += i64::from(pair[0]);
                if end > addr {
                    break;
                }
                line = line.wrapping_add(i32::from(pair[1] as i8));
            }
            Some(line_only(line))
        }
        LineTableFormat::Linetable310 => {
            // (range length, signed line delta or -128 for none) pairs; an empty range
            // only moves the line.
            for pair in table.chunks_exact(2) {
                let start = end;
                end += i64::from(pair[0]);
                let delta = pair[1] as i8;
                let this = if delta == -128 {
                    -1
                } else {
                    line = line.wrapping_add(i32::from(delta));
                    line
                };
                if start != end && addr < end {
                    return Some(line_only(this));
                }
            }
            None
        }
        LineTableFormat::Locations => locate(table, firstlineno, index as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_tables_before_311() {
        let line = |format, table: &[u8], index| {
            locate_line(format, table, 10, index).map(|l| (l.lineno, l.column))
        };
        // 3.9: bytes 0-5 on line 10, 6-9 on line 12, 10- on line 11 (a negative step).
        let lnotab = [6, 2, 4, 0xff];
        assert_eq!(line(LineTableFormat::Lnotab, &lnotab, 0), Some((10, -1)));
        assert_eq!(line(LineTableFormat::Lnotab, &lnotab, 2), Some((10, -1)));
        assert_eq!(line(LineTableFormat::Lnotab, &lnotab, 3), Some((12, -1)));
        assert_eq!(line(LineTableFormat::Lnotab, &lnotab, 7), Some((11, -1)));
        assert_eq!(line(LineTableFormat::Lnotab, &lnotab, -1), Some((10, -1)));
        // 3.10: an empty range moving the line by 1, bytes 0-3 on line 12 (+1), 4-7 on no
        // line, 8-9 on line 9 (-3).
        let linetable = [0, 1, 4, 1, 4, 0x80, 2, 0xfd];
        assert_eq!(
            line(LineTableFormat::Linetable310, &linetable, 0),
            Some((12, -1))
        );
        assert_eq!(
            line(LineTableFormat::Linetable310, &linetable, 1),
            Some((12, -1))
        );
        assert_eq!(
            line(LineTableFormat::Linetable310, &linetable, 2),
            Some((-1, -1))
        );
        assert_eq!(
            line(LineTableFormat::Linetable310, &linetable, 4),
            Some((9, -1))
        );
        assert_eq!(line(LineTableFormat::Linetable310, &linetable, 5), None);
        assert_eq!(
            line(LineTableFormat::Linetable310, &linetable, -1),
            Some((10, -1))
        );
    }

    #[test]
    fn decodes_each_entry_form() {
        // Entry 1: long form, 2 units, line +3, end line +1, col 4, end col 10.
        // Entry 2: one-line form (delta 1), 1 unit, col 2, end col 7.
        // Entry 3: short form code 0, 3 units, col (0<<3)|1 = 1, end col 1+5.
        // Entry 4: no-column form, 1 unit, line -2.
        // Entry 5: no location, 1 unit.
        let t = [
            0x80 | (14 << 3) | 1,
            6,
            1,
            5,
            11,
            0x80 | (11 << 3),
            2,
            7,
            0x80 | 2,
            0x15,
            0x80 | (13 << 3),
            5,
            0x80 | (15 << 3),
        ];
        let l = |lineno, end_lineno, column, end_column| {
            Some(Location {
                lineno,
                end_lineno,
                column,
                end_column,
            })
        };
        assert_eq!(locate(&t, 10, 0), l(13, 14, 4, 10));
        assert_eq!(locate(&t, 10, 1), l(13, 14, 4, 10));
        assert_eq!(locate(&t, 10, 2), l(14, 14, 2, 7));
        assert_eq!(locate(&t, 10, 3), l(14, 14, 1, 6));
        assert_eq!(locate(&t, 10, 5), l(14, 14, 1, 6));
        assert_eq!(locate(&t, 10, 6), l(12, 12, -1, -1));
        assert_eq!(locate(&t, 10, 7), l(-1, -1, -1, -1));
        assert_eq!(locate(&t, 10, 8), None);
        // Malformed: a continuation byte where an entry should start.
        assert_eq!(locate(&[0x01], 1, 0), None);
        // Truncated varint.
        assert_eq!(locate(&[0x80 | (14 << 3), 0x40], 1, 0), None);
    }
}
