//! JSON primitives written exactly as Python's `json` module writes them with its
//! defaults (`ensure_ascii=True`), so that exports CPython defines can be compared
//! byte for byte, not only after parsing.

use std::io::Write;

/// Appends `s` as a JSON string the way `json.dumps` does with `ensure_ascii=True`:
/// `"` and `\` escaped, `\n \r \t \b \f` short escapes, and every other character
/// outside printable ASCII (space to `~`) as `\uXXXX` in lowercase hex, with
/// surrogate pairs above the BMP.
pub fn push_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let plain = (' '..='~').contains(&c) && c != '"' && c != '\\';
        if plain {
            continue;
        }
        buf.extend_from_slice(&bytes[start..i]);
        start = i + c.len_utf8();
        match c {
            '"' => buf.extend_from_slice(b"\\\""),
            '\\' => buf.extend_from_slice(b"\\\\"),
            '\n' => buf.extend_from_slice(b"\\n"),
            '\r' => buf.extend_from_slice(b"\\r"),
            '\t' => buf.extend_from_slice(b"\\t"),
            '\u{8}' => buf.extend_from_slice(b"\\b"),
            '\u{c}' => buf.extend_from_slice(b"\\f"),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(buf, "\\u{:04x}", u);
                }
            }
        }
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

/// Writes a float as Python's `float.__repr__` does (which `json` uses): the
/// shortest digits that round-trip, fixed notation for exponents -4..16 (always with
/// a fractional part, "1.0"), otherwise `d.ddde+XX` / `de-XX` with at least two
/// exponent digits. Non-finite values are not valid JSON; CPython's exporters refuse
/// them (`allow_nan=False`), and callers here never produce them.
pub fn push_float(buf: &mut Vec<u8>, v: f64) {
    if v == 0.0 {
        buf.extend_from_slice(if v.is_sign_negative() {
            b"-0.0"
        } else {
            b"0.0"
        });
        return;
    }
    if push_millis(buf, v) {
        return;
    }
    // ryu gives the shortest round-trip digits (as `{:e}` does, several times faster;
    // exports write hundreds of thousands of durations that are not k/1000).
    let mut ryu_buf = ryu::Buffer::new();
    let (neg, digit_buf, nd, exp) = shortest_digits(ryu_buf.format_finite(v).as_bytes());
    let digits = &digit_buf[..nd];
    if neg {
        buf.push(b'-');
    }
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        if exp < 0 {
            buf.extend_from_slice(b"0.");
            for _ in 0..(-exp - 1) {
                buf.push(b'0');
            }
            buf.extend_from_slice(digits);
        } else if exp + 1 >= n {
            buf.extend_from_slice(digits);
            for _ in 0..(exp + 1 - n) {
                buf.push(b'0');
            }
            buf.extend_from_slice(b".0");
        } else {
            let point = (exp + 1) as usize;
            buf.extend_from_slice(&digits[..point]);
            buf.push(b'.');
            buf.extend_from_slice(&digits[point..]);
        }
    } else {
        buf.extend_from_slice(&digits[..1]);
        if digits.len() > 1 {
            buf.push(b'.');
            buf.extend_from_slice(&digits[1..]);
        }
        let _ = write!(buf, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

/// Splits ryu's output (`-0.0012`, `123.0`, `1.5e-7`, `1e16`) into its sign, its
/// significant digits (no leading or trailing zeros) and the decimal exponent of the
/// first digit.
fn shortest_digits(text: &[u8]) -> (bool, [u8; 40], usize, i32) {
    let (neg, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mantissa, e) = match text.iter().position(|&c| c == b'e') {
        Some(at) => (
            &text[..at],
            std::str::from_utf8(&text[at + 1..])
                .ok()
                .and_then(|e| e.parse::<i32>().ok())
                .unwrap_or(0),
        ),
        None => (text, 0),
    };
    let point = mantissa
        .iter()
        .position(|&c| c == b'.')
        .unwrap_or(mantissa.len()) as i32;
    let mut digits = [0u8; 40];
    let mut nd = 0;
    let mut leading_zeros = 0;
    for &c in mantissa.iter().filter(|c| c.is_ascii_digit()) {
        if nd == 0 && c == b'0' {
            leading_zeros += 1;
            continue;
        }
        if nd < digits.len() {
            digits[nd] = c;
            nd += 1;
        }
    }
    while nd > 1 && digits[nd - 1] == b'0' {
        nd -= 1;
    }
    (neg, digits, nd, point - leading_zeros - 1 + e)
}

/// The fast path of [`push_float`] for what exports write most: times in ms from µs
/// timestamps, i.e. values that are exactly k / 1000 for an integer k. For |v| < 1e9 a
/// double's spacing is below 1.2e-7, so the decimal k/1000 (at most three fractional
/// digits) is the only decimal that coarse within half a spacing of v: it is the
/// shortest round-trip repr, as Python prints it (positional: 1e-3 <= |v| < 1e16).
fn push_millis(buf: &mut Vec<u8>, v: f64) -> bool {
    if v.is_nan() || v.abs() >= 1e9 {
        return false;
    }
    let k = (v * 1000.0).round();
    if k / 1000.0 != v || k == 0.0 {
        return false;
    }
    let k = k as i64;
    if k < 0 {
        buf.push(b'-');
    }
    let k = k.unsigned_abs();
    push_u64(buf, k / 1000);
    buf.push(b'.');
    let frac = k % 1000;
    if frac == 0 {
        buf.push(b'0');
    } else {
        let digits = [
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ];
        let keep = if frac % 100 == 0 {
            1
        } else if frac % 10 == 0 {
            2
        } else {
            3
        };
        buf.extend_from_slice(&digits[..keep]);
    }
    true
}

/// Appends an unsigned integer in decimal (without `fmt`, which is slow in bulk).
#[inline]
pub fn push_u64(buf: &mut Vec<u8>, v: u64) {
    // Most numbers exports write are small indices.
    if v < 10 {
        buf.push(b'0' + v as u8);
    } else {
        buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
}

/// Appends a signed integer in decimal.
pub fn push_i64(buf: &mut Vec<u8>, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    push_u64(buf, v.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64) -> String {
        let mut b = Vec::new();
        push_float(&mut b, v);
        String::from_utf8(b).unwrap()
    }

    fn s(v: &str) -> String {
        let mut b = Vec::new();
        push_str(&mut b, v);
        String::from_utf8(b).unwrap()
    }

    // Expected strings are what CPython 3.11's `repr(float)` / `json.dumps` print.
    #[test]
    fn floats_like_python_repr() {
        assert_eq!(f(0.0), "0.0");
        assert_eq!(f(1.0), "1.0");
        assert_eq!(f(0.836), "0.836");
        assert_eq!(f(2.0700000000000003), "2.0700000000000003");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(0.00001), "1e-05");
        assert_eq!(f(1.5e-7), "1.5e-07");
        assert_eq!(f(1e16), "1e+16");
        assert_eq!(f(1234567890123456.0), "1234567890123456.0");
        assert_eq!(f(-3.25), "-3.25");
        assert_eq!(f(123.0), "123.0");
        assert_eq!(f(3827951.6304610004), "3827951.6304610004");
    }

    /// Every float of golden/python-float-repr/repr.txt (random doubles, differences
    /// of millisecond times, k/1000 times; made by scripts/gen-float-repr.py) printed as
    /// Python's repr printed it. Among them a tie Rust's `{:e}` rounds the other way:
    /// 1658206780088562.25 exactly, which Python (and ryu) print as ...562.2.
    #[test]
    fn floats_equal_python_repr_on_the_golden_list() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/golden/python-float-repr/repr.txt"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut checked = 0;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (bits, want) = line.split_once(' ').unwrap();
            let v = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
            assert_eq!(f(v), want, "bits {bits}");
            checked += 1;
        }
        assert!(checked > 5000, "{checked}");
    }

    /// The millisecond fast path against the general (shortest round-trip) path, on
    /// every k/1000 near the edges and on a spread of magnitudes.
    #[test]
    fn millis_fast_path_equals_the_general_path() {
        let mut ks: Vec<i64> = (-3000..3000).collect();
        let mut x = 1i64;
        while x < 1_000_000_000_000 {
            for d in [-1, 0, 1, 7, 999, 1000, 1001] {
                ks.push(x + d);
            }
            x = x * 7 + 3;
        }
        let mut accepted = 0;
        for k in ks {
            let v = k as f64 / 1000.0;
            let mut fast = Vec::new();
            if push_millis(&mut fast, v) {
                accepted += 1;
                // The reference: Rust's shortest round-trip digits, laid out as repr.
                let mut reference = Vec::new();
                let mut sci = String::new();
                std::fmt::Write::write_fmt(&mut sci, format_args!("{v:e}")).unwrap();
                let (m, e) = sci.split_once('e').unwrap();
                let e: i32 = e.parse().unwrap();
                let neg = m.starts_with('-');
                let digits: String = m.chars().filter(|c| c.is_ascii_digit()).collect();
                if neg {
                    reference.push(b'-');
                }
                let n = digits.len() as i32;
                let s = if e < 0 {
                    format!("0.{}{digits}", "0".repeat((-e - 1) as usize))
                } else if e + 1 >= n {
                    format!("{digits}{}.0", "0".repeat((e + 1 - n) as usize))
                } else {
                    format!(
                        "{}.{}",
                        &digits[..(e + 1) as usize],
                        &digits[(e + 1) as usize..]
                    )
                };
                reference.extend_from_slice(s.as_bytes());
                assert_eq!(
                    String::from_utf8(fast).unwrap(),
                    String::from_utf8(reference).unwrap(),
                    "k = {k}"
                );
            }
        }
        assert!(accepted > 6000, "the fast path took only {accepted} values");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(-0.25), "-0.25");
        assert_eq!(f(123456.789), "123456.789");
        assert_eq!(f(1000.0), "1000.0");
    }

    #[test]
    fn integers() {
        let mut b = Vec::new();
        push_u64(&mut b, 0);
        b.push(b',');
        push_u64(&mut b, u64::MAX);
        b.push(b',');
        push_i64(&mut b, -42);
        b.push(b',');
        push_i64(&mut b, i64::MIN);
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "0,18446744073709551615,-42,-9223372036854775808"
        );
    }

    #[test]
    fn strings_like_json_dumps() {
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(s("\n\t\u{1}\u{7f}"), r#""\n\t\u0001\u007f""#);
        assert_eq!(s("é😀"), r#""\u00e9\ud83d\ude00""#);
    }
}
