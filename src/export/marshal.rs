//! A minimal encoder for Python's `marshal` format: just the types a pstats dump
//! holds (dict, tuple, str, int, float, True). Everything is written without
//! back-references (FLAG_REF), which every marshal version since Python 3.4 reads.
//! Type codes are those of CPython's `Python/marshal.c`.

const TYPE_NULL: u8 = b'0';
const TYPE_TRUE: u8 = b'T';
const TYPE_INT: u8 = b'i';
const TYPE_LONG: u8 = b'l';
const TYPE_BINARY_FLOAT: u8 = b'g';
const TYPE_UNICODE: u8 = b'u';
const TYPE_TUPLE: u8 = b'(';
const TYPE_SMALL_TUPLE: u8 = b')';
const TYPE_DICT: u8 = b'{';

/// A marshal byte buffer.
#[derive(Default)]
pub struct Marshal {
    pub buf: Vec<u8>,
}

impl Marshal {
    pub fn new() -> Self {
        Self::default()
    }

    fn w_i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn true_(&mut self) {
        self.buf.push(TYPE_TRUE);
    }

    /// An int of any size: TYPE_INT when it fits 32 bits, else TYPE_LONG with
    /// 15-bit digits, least significant first, the digit count carrying the sign.
    pub fn int(&mut self, v: i128) {
        if let Ok(small) = i32::try_from(v) {
            self.buf.push(TYPE_INT);
            self.w_i32(small);
            return;
        }
        let mut mag = v.unsigned_abs();
        let mut digits = Vec::new();
        while mag > 0 {
            digits.push((mag & 0x7fff) as u16);
            mag >>= 15;
        }
        self.buf.push(TYPE_LONG);
        let n = digits.len() as i32;
        self.w_i32(if v < 0 { -n } else { n });
        for d in digits {
            self.buf.extend_from_slice(&d.to_le_bytes());
        }
    }

    pub fn float(&mut self, v: f64) {
        self.buf.push(TYPE_BINARY_FLOAT);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn str(&mut self, s: &str) {
        self.buf.push(TYPE_UNICODE);
        self.w_i32(s.len() as i32);
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// Starts a tuple of `len` items; the caller writes the items next.
    pub fn tuple(&mut self, len: usize) {
        if len < 256 {
            self.buf.push(TYPE_SMALL_TUPLE);
            self.buf.push(len as u8);
        } else {
            self.buf.push(TYPE_TUPLE);
            self.w_i32(len as i32);
        }
    }

    /// Starts a dict; the caller writes key, value, key, value, ... then [`Self::dict_end`].
    pub fn dict_begin(&mut self) {
        self.buf.push(TYPE_DICT);
    }

    pub fn dict_end(&mut self) {
        self.buf.push(TYPE_NULL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected bytes are what CPython 3.11's `marshal.dumps` writes for these values
    // with the FLAG_REF bit (0x80) of the type byte cleared.
    #[test]
    fn ints_like_cpython() {
        let mut m = Marshal::new();
        m.int(5);
        assert_eq!(m.buf, b"i\x05\x00\x00\x00");
        let mut m = Marshal::new();
        m.int(1 << 40);
        assert_eq!(m.buf, b"l\x03\x00\x00\x00\x00\x00\x00\x00\x00\x04");
        let mut m = Marshal::new();
        m.int(-(1 << 31) - 1);
        assert_eq!(m.buf, b"l\xfd\xff\xff\xff\x01\x00\x00\x00\x02\x00");
    }

    #[test]
    fn float_and_tuple() {
        let mut m = Marshal::new();
        m.tuple(2);
        m.float(1.5);
        m.true_();
        assert_eq!(m.buf, b")\x02g\x00\x00\x00\x00\x00\x00\xf8?T");
    }
}
