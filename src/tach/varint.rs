//! LEB128 varints and zigzag integers, as CPython's `binary_io.h` encodes them.
//!
//! Varints are byte-order free. A u64 varint may take at most 10 bytes; CPython's
//! decoder treats anything longer as malformed, and so do we. A u32 varint is decoded
//! as a u64 and rejected when it does not fit, as CPython does.

/// Longest valid varint in bytes.
pub const MAX_VARINT_LEN: usize = 10;

/// Why a varint could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended before the last byte (the one without the continuation bit).
    Truncated,
    /// More than [`MAX_VARINT_LEN`] bytes carry the continuation bit.
    TooLong,
    /// A 32-bit field holds a value above `u32::MAX` (CPython rejects it too).
    Overflow32,
}

/// Decodes a u64 varint from the start of `buf`; returns the value and its length.
#[inline(always)]
pub fn decode_u64(buf: &[u8]) -> Result<(u64, usize), VarintError> {
    // Fast path for the common one-byte case (indices under 128, small deltas).
    match buf.first() {
        None => return Err(VarintError::Truncated),
        Some(&b) if b < 0x80 => return Ok((b as u64, 1)),
        _ => {}
    }
    if let Some(bytes) = buf.first_chunk::<MAX_VARINT_LEN>() {
        // Two bytes is the next most common length (1 ms timestamp deltas, frame
        // indices up to 16383): no loop for it.
        if bytes[1] < 0x80 {
            return Ok(((bytes[0] & 0x7f) as u64 | (bytes[1] as u64) << 7, 2));
        }
        // Ten bytes at hand: no bounds check per byte (the usual case mid-stream).
        let mut value: u64 = 0;
        for (i, &byte) in bytes.iter().enumerate() {
            value |= ((byte & 0x7f) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok((value, i + 1));
            }
        }
        return Err(VarintError::TooLong);
    }
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().take(MAX_VARINT_LEN).enumerate() {
        // Bits past 64 are dropped, as CPython's shift-and-or loop does.
        value |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= MAX_VARINT_LEN {
        Err(VarintError::TooLong)
    } else {
        Err(VarintError::Truncated)
    }
}

/// Decodes a u32 varint; a value above `u32::MAX` is an error, as in CPython.
#[inline(always)]
pub fn decode_u32(buf: &[u8]) -> Result<(u32, usize), VarintError> {
    let (v, n) = decode_u64(buf)?;
    u32::try_from(v)
        .map(|v| (v, n))
        .map_err(|_| VarintError::Overflow32)
}

/// Decodes a zigzag-encoded i32.
#[inline]
pub fn decode_i32(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    decode_u32(buf).map(|(v, n)| (zigzag_decode(v), n))
}

#[inline]
pub fn zigzag_encode(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

#[inline]
pub fn zigzag_decode(v: u32) -> i32 {
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

/// Appends the varint encoding of `value` to `out`.
#[inline]
pub fn encode_u64(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[inline]
pub fn encode_u32(out: &mut Vec<u8>, value: u32) {
    encode_u64(out, value as u64)
}

#[inline]
pub fn encode_i32(out: &mut Vec<u8>, value: i32) {
    encode_u32(out, zigzag_encode(value))
}

/// Number of bytes `value` takes as a varint (a check on the encoder in tests).
#[cfg(test)]
fn encoded_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edges() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            encode_u64(&mut buf, v);
            assert_eq!(buf.len(), encoded_len(v));
            assert_eq!(decode_u64(&buf), Ok((v, buf.len())));
            // With more bytes after it (the mid-stream paths), and padded forms.
            let n = buf.len();
            buf.extend_from_slice(&[0xff; 12]);
            assert_eq!(decode_u64(&buf), Ok((v, n)), "{v} followed by more");
        }
        // Non-minimal encodings decode to the same value, at every length.
        for len in 1..=MAX_VARINT_LEN {
            let mut buf = vec![0x85; len - 1];
            buf.push(0);
            let want: u64 = (0..len - 1).map(|i| 5u64 << (7 * i)).sum();
            assert_eq!(decode_u64(&buf), Ok((want, len)));
            buf.extend_from_slice(&[0x80; 12]);
            assert_eq!(decode_u64(&buf), Ok((want, len)), "{len} bytes, padded");
        }
        for v in [0i32, -1, 1, i32::MIN, i32::MAX, -12345] {
            let mut buf = Vec::new();
            encode_i32(&mut buf, v);
            assert_eq!(decode_i32(&buf), Ok((v, buf.len())));
        }
    }

    #[test]
    fn rejects_truncated_and_overlong() {
        assert_eq!(decode_u64(&[]), Err(VarintError::Truncated));
        assert_eq!(decode_u64(&[0x80, 0x80]), Err(VarintError::Truncated));
        assert_eq!(decode_u64(&[0xff; 11]), Err(VarintError::TooLong));
        assert_eq!(decode_u64(&[0xff; 10]), Err(VarintError::TooLong));
        let mut big = Vec::new();
        encode_u64(&mut big, u32::MAX as u64 + 1);
        assert_eq!(decode_u32(&big), Err(VarintError::Overflow32));
    }
}
