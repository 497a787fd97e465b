//! Code objects to names, files and locations, off the hot path.
//!
//! The sampler records, per frame, only the code object's address and the instruction
//! pointer. Turning a code object into strings (qualified name, file name) and a copy of
//! its location table happens once per code object, through the same fault-tolerant
//! reads, and is cached by address.
//!
//! Addresses are reused: a code object freed by the GC can be replaced by another at the
//! same address. Every sample re-reads the code object's header (in one batched read for
//! the whole stack) and compares a fingerprint (its type and the pointers to its file
//! name, qualified name and location table, and its first line) with the cached one; a
//! different fingerprint means a different code object, which is resolved afresh.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for the sampler's small integer keys (addresses, code offsets): a
/// multiply-and-rotate mix (FxHash's), instead of SipHash, which showed up on profiles.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

use crate::record::interpreter::layout::{field_i32, field_u64, Offsets, OpcodeTables};
use crate::record::process::memory::{MemoryReader, ReadError};

/// Addresses of the interpreter's type objects, to check what a pointer points to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Types {
    pub code: u64,
    pub unicode: u64,
    pub bytes: u64,
    pub none: u64,
}

/// What identifies a code object beyond its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    pub filename: u64,
    pub qualname: u64,
    pub linetable: u64,
    pub firstlineno: i32,
}

impl Fingerprint {
    /// Reads the fingerprint from a copy of the code object's header, checking its type.
    pub fn from_header(o: &Offsets, types: &Types, header: &[u8]) -> Result<Self, ReadError> {
        let ty =
            field_u64(header, o.object.ob_type).ok_or(ReadError::Invalid("short code header"))?;
        if ty != types.code {
            return Err(ReadError::Invalid("frame executable is not a code object"));
        }
        let fp = Fingerprint {
            filename: field_u64(header, o.code.filename).unwrap_or(0),
            qualname: field_u64(header, o.code.qualname).unwrap_or(0),
            linetable: field_u64(header, o.code.linetable).unwrap_or(0),
            firstlineno: field_i32(header, o.code.firstlineno).unwrap_or(0),
        };
        if fp.filename == 0 || fp.qualname == 0 || fp.linetable == 0 {
            return Err(ReadError::Invalid("code object with null fields"));
        }
        Ok(fp)
    }
}

/// A resolved code object.
#[derive(Debug, Clone)]
pub struct CodeInfo {
    pub fingerprint: Fingerprint,
    pub filename: String,
    pub qualname: String,
    pub linetable: Vec<u8>,
    /// Number of 2-byte code units.
    pub code_units: u64,
    /// 3.11: index of the first traceable instruction (earlier ones mean "incomplete").
    pub first_traceable: Option<u64>,
    /// Base opcodes per code unit, with the start index of the owning instruction
    /// (filled when opcodes are recorded and the version needs a scan).
    pub instr_starts: Option<Vec<(u32, u8)>>,
    /// Frames of the recorder's own harness, left out of stacks.
    pub hidden: bool,
    /// Writer frame indices by (code unit index, opcode).
    pub frames: FastMap<(u32, u8), u32>,
}

/// Longest string accepted from a code object (a sanity bound, not a format limit:
/// PATH_MAX for file names, far more than any qualified name).
const MAX_STRING_BYTES: u64 = 4096;
/// Largest location table or bytecode accepted.
const MAX_TABLE_BYTES: u64 = 64 << 20;

/// Reads a `str` object.
pub fn read_unicode(
    mem: &dyn MemoryReader,
    o: &Offsets,
    types: &Types,
    addr: u64,
) -> Result<String, ReadError> {
    let mut head = vec![0u8; (o.unicode.compact_size + 8) as usize];
    mem.read(addr, &mut head)?;
    if field_u64(&head, o.object.ob_type) != Some(types.unicode) {
        return Err(ReadError::Invalid("not a str object"));
    }
    let len = field_u64(&head, o.unicode.length).unwrap_or(u64::MAX);
    let state = field_i32(&head, o.unicode.state).unwrap_or(0) as u32;
    // interned:2, kind:3, compact:1, ascii:1 (the same bits in 3.11 to 3.15).
    let kind = ((state >> 2) & 7) as u64;
    let compact = (state >> 5) & 1 != 0;
    let ascii = (state >> 6) & 1 != 0;
    if !matches!(kind, 1 | 2 | 4) || len.saturating_mul(kind) > MAX_STRING_BYTES {
        return Err(ReadError::Invalid("str with a bad kind or length"));
    }
    let data = if compact && ascii {
        addr.wrapping_add(o.unicode.ascii_size)
    } else if compact {
        addr.wrapping_add(o.unicode.compact_size)
    } else {
        field_u64(&head, o.unicode.compact_size).ok_or(ReadError::Null)?
    };
    let mut raw = vec![0u8; (len * kind) as usize];
    mem.read(data, &mut raw)?;
    let points: Vec<u32> = match kind {
        1 => raw.iter().map(|&b| u32::from(b)).collect(),
        2 => raw
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])))
            .collect(),
        _ => raw
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    checked_text(&points, kind, ascii)
}

/// A name read from the target, checked before it is trusted: a `str` being built (an
/// import compiling the code object) or freed reads as zeros or junk, and a name written
/// to the file is in every export. CPython's own invariants are checked: no NUL, valid
/// code points (a lone surrogate becomes U+FFFD), and the narrowest kind that holds them (ASCII strings
/// are flagged so, a 2-byte string has a point above 0xFF, a 4-byte one above 0xFFFF).
pub fn checked_text(points: &[u32], kind: u64, ascii: bool) -> Result<String, ReadError> {
    let max = points.iter().copied().max().unwrap_or(0);
    let narrowest = match max {
        0..=0xFF => 1,
        0x100..=0xFFFF => 2,
        _ => 4,
    };
    if !points.is_empty() && (narrowest != kind || ascii != (max < 0x80)) {
        return Err(ReadError::Invalid("str whose kind does not fit its text"));
    }
    let mut text = String::with_capacity(points.len());
    for &p in points {
        match p {
            0 => return Err(ReadError::Invalid("str with a NUL")),
            // A lone surrogate is a legal Python str (a file name decoded with
            // surrogateescape) but not UTF-8, which the format stores: U+FFFD.
            0xD800..=0xDFFF => text.push(char::REPLACEMENT_CHARACTER),
            _ => match char::from_u32(p) {
                Some(c) => text.push(c),
                None => return Err(ReadError::Invalid("str with an invalid code point")),
            },
        }
    }
    Ok(text)
}

/// Reads a `bytes` object's contents.
pub fn read_bytes(
    mem: &dyn MemoryReader,
    o: &Offsets,
    types: &Types,
    addr: u64,
) -> Result<Vec<u8>, ReadError> {
    let mut head = vec![0u8; o.bytes.ob_sval as usize];
    mem.read(addr, &mut head)?;
    if field_u64(&head, o.object.ob_type) != Some(types.bytes) {
        return Err(ReadError::Invalid("not a bytes object"));
    }
    let len = field_u64(&head, o.object.ob_size).unwrap_or(u64::MAX);
    if len > MAX_TABLE_BYTES {
        return Err(ReadError::Invalid("bytes object too large"));
    }
    let mut out = vec![0u8; len as usize];
    mem.read(addr.wrapping_add(o.bytes.ob_sval), &mut out)?;
    Ok(out)
}

/// The instruction starts and base opcodes of a bytecode copy.
pub fn scan_instructions(code: &[u8], t: &OpcodeTables, caches: &[u8; 256]) -> Vec<(u32, u8)> {
    let units = code.len() / 2;
    let mut out = vec![(0u32, 0u8); units];
    let mut i = 0usize;
    while i < units {
        let op = t.deopt[code[2 * i] as usize];
        let n = 1 + caches[op as usize] as usize;
        for slot in out.iter_mut().skip(i).take(n) {
            *slot = (i as u32, op);
        }
        i += n;
    }
    out
}

/// Code objects seen so far, by address.
#[derive(Debug, Default)]
pub struct CodeCache {
    entries: FastMap<u64, CodeInfo>,
    /// Code objects resolved (including re-resolutions after an address was reused).
    pub resolved: u64,
    /// Addresses found holding a different code object than the cached one.
    pub reused: u64,
}

/// Entries kept before the cache is emptied (bounded memory under heavy `exec` churn).
const MAX_ENTRIES: usize = 200_000;

impl CodeCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The code units of the code object cached at `addr`, unchecked: how much of its
    /// bytecode to read along with its header.
    pub fn units_of(&self, addr: u64) -> Option<u64> {
        self.entries.get(&addr).map(|e| e.code_units)
    }

    /// The entry for the code object at `addr` with this fingerprint, resolving it if the
    /// address is new or now holds another code object.
    #[allow(clippy::too_many_arguments)]
    pub fn get(
        &mut self,
        mem: &dyn MemoryReader,
        o: &Offsets,
        types: &Types,
        addr: u64,
        header: &[u8],
        fp: Fingerprint,
        hidden_prefixes: &[String],
        opcodes: Option<&OpcodeTables>,
    ) -> Result<&mut CodeInfo, ReadError> {
        let fresh = match self.entries.get(&addr) {
            Some(e) if e.fingerprint == fp => false,
            Some(_) => {
                self.reused += 1;
                true
            }
            None => true,
        };
        if fresh {
            let info = resolve(mem, o, types, addr, header, fp, hidden_prefixes, opcodes)?;
            if self.entries.len() >= MAX_ENTRIES {
                self.entries.clear();
            }
            self.resolved += 1;
            self.entries.insert(addr, info);
        }
        self.entries
            .get_mut(&addr)
            .ok_or(ReadError::Invalid("code cache entry vanished"))
    }
}

#[allow(clippy::too_many_arguments)]
fn resolve(
    mem: &dyn MemoryReader,
    o: &Offsets,
    types: &Types,
    addr: u64,
    header: &[u8],
    fp: Fingerprint,
    hidden_prefixes: &[String],
    opcodes: Option<&OpcodeTables>,
) -> Result<CodeInfo, ReadError> {
    let filename = read_unicode(mem, o, types, fp.filename)?;
    let qualname = read_unicode(mem, o, types, fp.qualname)?;
    // A code object's fields against each other, before its name is trusted: a function
    // has a name, and its first line is a line.
    if qualname.is_empty() || fp.firstlineno < 0 {
        return Err(ReadError::Invalid(
            "code object with no name or a bad first line",
        ));
    }
    let linetable = read_bytes(mem, o, types, fp.linetable)?;
    let code_units = match o.code.code {
        // 3.9, 3.10: the bytecode is a bytes object of its own.
        Some(off) => {
            let code = field_u64(header, off).unwrap_or(0);
            let mut head = vec![0u8; o.bytes.ob_sval as usize];
            mem.read(code, &mut head)?;
            if field_u64(&head, o.object.ob_type) != Some(types.bytes) {
                return Err(ReadError::Invalid("co_code is not a bytes object"));
            }
            field_u64(&head, o.object.ob_size).unwrap_or(0) / 2
        }
        None => field_u64(header, o.object.ob_size).unwrap_or(0),
    };
    if code_units == 0 || code_units > MAX_TABLE_BYTES / 2 {
        return Err(ReadError::Invalid("code object with a bad size"));
    }
    let first_traceable = o
        .code
        .firsttraceable
        .and_then(|off| field_i32(header, off))
        .map(|v| v.max(0) as u64);
    let instr_starts = match opcodes {
        Some(t) => match &t.caches {
            Some(caches) => {
                let mut code = vec![0u8; (code_units * 2) as usize];
                mem.read(addr.wrapping_add(o.code.adaptive), &mut code)?;
                Some(scan_instructions(&code, t, caches))
            }
            None => None,
        },
        None => None,
    };
    let hidden = hidden_prefixes
        .iter()
        .any(|p| filename.starts_with(p.as_str()));
    Ok(CodeInfo {
        fingerprint: fp,
        filename,
        qualname,
        linetable,
        code_units,
        first_traceable,
        instr_starts,
        hidden,
        frames: FastMap::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::interpreter::layout::test_offsets::offsets;
    use crate::record::process::memory::FakeMemory;

    const TYPES: Types = Types {
        code: 0xc0de,
        unicode: 0x5772,
        bytes: 0xb17e,
        none: 0x404e,
    };

    fn put_str(m: &mut FakeMemory, addr: u64, s: &str, kind: u32) {
        let o = offsets();
        let chars: Vec<char> = s.chars().collect();
        let ascii = kind == 1 && s.is_ascii();
        let data_at = if ascii {
            o.unicode.ascii_size
        } else {
            o.unicode.compact_size
        };
        let mut v = vec![0u8; data_at as usize];
        v[8..16].copy_from_slice(&TYPES.unicode.to_ne_bytes());
        v[16..24].copy_from_slice(&(chars.len() as u64).to_ne_bytes());
        let state = (kind << 2) | (1 << 5) | ((ascii as u32) << 6);
        v[32..36].copy_from_slice(&state.to_ne_bytes());
        for c in &chars {
            match kind {
                1 => v.push(*c as u8),
                2 => v.extend_from_slice(&(*c as u16).to_ne_bytes()),
                _ => v.extend_from_slice(&(*c as u32).to_ne_bytes()),
            }
        }
        v.resize(v.len() + 64, 0);
        m.map(addr, v);
    }

    #[test]
    fn reads_each_string_kind() {
        let o = offsets();
        let mut m = FakeMemory::new();
        put_str(&mut m, 0x1000, "Thread.run", 1);
        put_str(&mut m, 0x2000, "caf\u{e9}", 1);
        put_str(&mut m, 0x3000, "\u{3b1}\u{3b2}", 2);
        put_str(&mut m, 0x4000, "\u{1f600}x", 4);
        assert_eq!(read_unicode(&m, &o, &TYPES, 0x1000).unwrap(), "Thread.run");
        assert_eq!(read_unicode(&m, &o, &TYPES, 0x2000).unwrap(), "caf\u{e9}");
        assert_eq!(
            read_unicode(&m, &o, &TYPES, 0x3000).unwrap(),
            "\u{3b1}\u{3b2}"
        );
        assert_eq!(read_unicode(&m, &o, &TYPES, 0x4000).unwrap(), "\u{1f600}x");
        assert!(read_unicode(&m, &o, &TYPES, 0x9000).is_err());
    }

    #[test]
    fn cache_notices_a_reused_address() {
        let o = offsets();
        let mut m = FakeMemory::new();
        put_str(&mut m, 0x1000, "a.py", 1);
        put_str(&mut m, 0x2000, "f", 1);
        put_str(&mut m, 0x3000, "g", 1);
        let mut table = vec![0u8; 32];
        table[8..16].copy_from_slice(&TYPES.bytes.to_ne_bytes());
        table[16..24].copy_from_slice(&1u64.to_ne_bytes());
        table.push(0x80 | (13 << 3));
        table.push(0);
        m.map(0x5000, table);
        let header = |qualname: u64| {
            let mut h = vec![0u8; 64];
            h[8..16].copy_from_slice(&TYPES.code.to_ne_bytes());
            h[16..24].copy_from_slice(&4u64.to_ne_bytes());
            h[24..32].copy_from_slice(&0x1000u64.to_ne_bytes());
            h[32..40].copy_from_slice(&qualname.to_ne_bytes());
            h[40..48].copy_from_slice(&0x5000u64.to_ne_bytes());
            h[48..52].copy_from_slice(&7i32.to_ne_bytes());
            h
        };
        let mut cache = CodeCache::new();
        let h1 = header(0x2000);
        let fp1 = Fingerprint::from_header(&o, &TYPES, &h1).unwrap();
        let e = cache
            .get(&m, &o, &TYPES, 0x7000, &h1, fp1, &[], None)
            .unwrap();
        assert_eq!((e.filename.as_str(), e.qualname.as_str()), ("a.py", "f"));
        e.frames.insert((0, 255), 3);
        // Same address, same object: cached.
        let e = cache
            .get(&m, &o, &TYPES, 0x7000, &h1, fp1, &[], None)
            .unwrap();
        assert_eq!(e.frames.len(), 1);
        // Same address, another code object: resolved again.
        let h2 = header(0x3000);
        let fp2 = Fingerprint::from_header(&o, &TYPES, &h2).unwrap();
        let e = cache
            .get(&m, &o, &TYPES, 0x7000, &h2, fp2, &["a.".into()], None)
            .unwrap();
        assert_eq!(e.qualname, "g");
        assert!(e.frames.is_empty());
        assert!(e.hidden);
        assert_eq!((cache.resolved, cache.reused), (2, 1));
        // Not a code object.
        let mut bad = h1.clone();
        bad[8] ^= 1;
        assert!(Fingerprint::from_header(&o, &TYPES, &bad).is_err());
    }

    #[test]
    fn instruction_scan_skips_caches() {
        let mut deopt = [0u8; 256];
        for (i, d) in deopt.iter_mut().enumerate() {
            *d = i as u8;
        }
        deopt[200] = 100; // a specialised form of 100
        let mut caches = [0u8; 256];
        caches[100] = 2;
        let t = OpcodeTables {
            deopt,
            caches: Some(caches),
        };
        // units: [7][200 c c][9]
        let code = [7, 0, 200, 0, 0xff, 0xff, 0xff, 0xff, 9, 0];
        let s = scan_instructions(&code, &t, &caches);
        assert_eq!(s, vec![(0, 7), (1, 100), (1, 100), (1, 100), (4, 9)]);
    }

    #[test]
    fn names_read_from_the_target_are_checked() {
        let pts = |t: &str| t.chars().map(u32::from).collect::<Vec<_>>();
        assert_eq!(checked_text(&pts("main"), 1, true).unwrap(), "main");
        assert_eq!(checked_text(&pts("héllo"), 1, false).unwrap(), "héllo");
        assert_eq!(checked_text(&pts("π"), 2, false).unwrap(), "π");
        assert_eq!(checked_text(&pts("😀x"), 4, false).unwrap(), "😀x");
        // The name of a code object read while an import built it: eight NULs.
        assert!(checked_text(&[0; 8], 1, true).is_err());
        assert!(checked_text(&pts("a\0b"), 1, true).is_err());
        // A lone surrogate (surrogateescape) reads as U+FFFD; a point past Unicode fails.
        assert_eq!(
            checked_text(&[0xDC80, 0x101], 2, false).unwrap(),
            "\u{FFFD}ā"
        );
        assert!(checked_text(&[0x110000], 4, false).is_err());
        // A kind or ASCII flag that does not fit the text: not a live str.
        assert!(checked_text(&pts("main"), 2, false).is_err());
        assert!(checked_text(&pts("main"), 1, false).is_err());
        assert!(checked_text(&pts("héllo"), 1, true).is_err());
    }
}
