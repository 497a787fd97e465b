//! CPython's location table (`co_linetable`, 3.11 and later): which source span an
//! instruction came from. Decoded here from bytes copied out of the code object, so no
//! Python code runs and no GIL is taken.

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

#[cfg(test)]
mod tests {
    use super::*;

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
