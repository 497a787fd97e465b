//! Just enough ELF to find a running interpreter's symbols from outside it.
//!
//! Attaching to another process means finding `_PyRuntime` and the type objects the
//! sampler validates with, without `dlsym`. CPython exports them as dynamic symbols
//! (`.dynsym`), from `libpython` or, for a statically linked interpreter such as
//! Debian's, from the executable itself. Only 64-bit little-endian files are read:
//! the recorder reads x86-64 and aarch64 Linux processes.
//!
//! Every offset and count comes from an untrusted file: each is checked against the
//! file's length before it is used, and nothing is allocated from a count.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::maps::MappedFile;

/// Opens a file the process mapped. Its path in `/proc/PID/maps` is written from our
/// root where the file is visible from it (a chroot shows as the full path), and from
/// the process's mount namespace otherwise (a container): both are tried, then the
/// mapping itself (`map_files`, which needs CAP_SYS_ADMIN). `None`: not an ELF file, or
/// removed since it was mapped. `Err`: every path was refused (the permission to read
/// the process is missing).
pub(crate) fn open_mapped(pid: i32, file: &MappedFile) -> Result<Option<ElfFile>, std::io::Error> {
    let candidates = [
        PathBuf::from(&file.path),
        PathBuf::from(format!("/proc/{pid}/root{}", file.path)),
        PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            file.lowest, file.end
        )),
    ];
    let mut refused = None;
    for path in candidates {
        match ElfFile::open(&path) {
            Ok(elf) => return Ok(Some(elf)),
            Err(ElfError::Open { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::EACCES) | Some(libc::EPERM)
                ) =>
            {
                refused = Some(source)
            }
            Err(_) => {}
        }
    }
    match refused {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// Why a file could not be read as an interpreter's ELF image.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a 64-bit little-endian ELF file")]
    NotElf { path: PathBuf },
    #[error("{path}: byte {offset}: {what}")]
    Malformed {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
}

const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const SYM_SIZE: usize = 24;

/// A mapped ELF file and where its symbol tables are.
pub struct ElfFile {
    path: PathBuf,
    map: Mmap,
    /// Virtual address of the segment loaded from file offset 0 (rounded to its page),
    /// which a process maps at the lowest address of the file's mappings.
    first_load_vaddr: u64,
    /// (symbols offset, symbols size, strings offset, strings size) per table.
    tables: Vec<(usize, usize, usize, usize)>,
}

impl ElfFile {
    pub fn open(path: &Path) -> Result<ElfFile, ElfError> {
        let open_err = |source| ElfError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        // SAFETY: the map is read only; a file truncated under us could fault, which is
        // the same risk every ELF reader (and the dynamic loader) takes with a library.
        let map = unsafe { Mmap::map(&file) }.map_err(open_err)?;
        let mut elf = ElfFile {
            path: path.to_path_buf(),
            map,
            first_load_vaddr: 0,
            tables: Vec::new(),
        };
        elf.parse()?;
        Ok(elf)
    }

    fn bad(&self, offset: u64, what: &'static str) -> ElfError {
        ElfError::Malformed {
            path: self.path.clone(),
            offset,
            what,
        }
    }

    fn u16_at(&self, at: usize) -> Option<u16> {
        let b = self.map.get(at..at.checked_add(2)?)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        let b = self.map.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }

    fn u64_at(&self, at: usize) -> Option<u64> {
        let b = self.map.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn parse(&mut self) -> Result<(), ElfError> {
        let m = &self.map;
        if m.len() < 64 || &m[..4] != b"\x7fELF" || m[4] != 2 || m[5] != 1 {
            return Err(ElfError::NotElf {
                path: self.path.clone(),
            });
        }
        let phoff = self.u64_at(32).unwrap_or(0) as usize;
        let shoff = self.u64_at(40).unwrap_or(0) as usize;
        let phentsize = self.u16_at(54).unwrap_or(0) as usize;
        let phnum = self.u16_at(56).unwrap_or(0) as usize;
        let shentsize = self.u16_at(58).unwrap_or(0) as usize;
        let shnum = self.u16_at(60).unwrap_or(0) as usize;

        if phentsize < 56 {
            return Err(self.bad(54, "program header entries are too small"));
        }
        let mut first_load = None;
        for i in 0..phnum {
            let at = phoff.saturating_add(i.saturating_mul(phentsize));
            let (Some(kind), Some(offset), Some(vaddr)) =
                (self.u32_at(at), self.u64_at(at + 8), self.u64_at(at + 16))
            else {
                return Err(self.bad(at as u64, "program header past the end of the file"));
            };
            if kind == PT_LOAD && offset == 0 {
                first_load = Some(vaddr);
                break;
            }
        }
        self.first_load_vaddr = first_load
            .ok_or_else(|| self.bad(phoff as u64, "no segment is loaded from offset 0"))?
            & !0xfff;

        if shnum == 0 {
            return Ok(()); // No section headers: no symbols to find.
        }
        if shentsize < 64 {
            return Err(self.bad(58, "section header entries are too small"));
        }
        let section = |i: usize| -> Option<(u32, usize, usize, u32)> {
            let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
            Some((
                self.u32_at(at + 4)?,
                self.u64_at(at + 24)? as usize,
                self.u64_at(at + 32)? as usize,
                self.u32_at(at + 40)?,
            ))
        };
        let mut tables = Vec::new();
        for i in 0..shnum {
            let Some((kind, offset, size, link)) = section(i) else {
                return Err(self.bad(shoff as u64, "section header past the end of the file"));
            };
            if kind != SHT_DYNSYM && kind != SHT_SYMTAB {
                continue;
            }
            let Some((_, str_off, str_size, _)) = section(link as usize) else {
                return Err(self.bad(shoff as u64, "symbol table links to no string table"));
            };
            let fits = |o: usize, s: usize| o.checked_add(s).is_some_and(|e| e <= self.map.len());
            if !fits(offset, size) || !fits(str_off, str_size) {
                return Err(self.bad(offset as u64, "symbol table past the end of the file"));
            }
            // The dynamic table first: it is the one a stripped interpreter keeps.
            if kind == SHT_DYNSYM {
                tables.insert(0, (offset, size, str_off, str_size));
            } else {
                tables.push((offset, size, str_off, str_size));
            }
        }
        self.tables = tables;
        Ok(())
    }

    /// The value (link-time address) of a defined symbol.
    /// The micro version of CPython `major.minor` from the `PY_VERSION` string compiled
    /// into the interpreter, for versions that export no `Py_Version` (before 3.11). The
    /// linker merges a string into another one it ends (`"3.9.18"` into the install
    /// prefix `".../versions/3.9.18"`), so the first string that ends with
    /// `major.minor.micro` (and an alphanumeric suffix such as `rc1` or a `+`) is taken.
    pub fn version_micro(&self, major: u8, minor: u8) -> Option<u8> {
        let needle = format!("{major}.{minor}.");
        let bytes: &[u8] = &self.map;
        let mut from = 0;
        while let Some(at) = find(&bytes[from..], needle.as_bytes()) {
            let begin = from + at;
            let start = begin + needle.len();
            from = start;
            let before = begin.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_digit() || b == b'.') {
                continue;
            }
            let digits = bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            let rest = &bytes[start + digits..];
            let Some(end) = rest.iter().take(5).position(|&b| b == 0) else {
                continue;
            };
            let suffix_ok = rest[..end]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'+');
            if (1..=3).contains(&digits) && suffix_ok {
                if let Some(micro) = std::str::from_utf8(&bytes[start..start + digits])
                    .ok()
                    .and_then(|d| d.parse().ok())
                {
                    return Some(micro);
                }
            }
        }
        None
    }

    pub fn symbol(&self, name: &str) -> Option<u64> {
        let want = name.as_bytes();
        for &(off, size, str_off, str_size) in &self.tables {
            let strings = &self.map[str_off..str_off + str_size];
            let syms = &self.map[off..off + size];
            for sym in syms.chunks_exact(SYM_SIZE) {
                let name_at = u32::from_le_bytes(sym[0..4].try_into().ok()?) as usize;
                let shndx = u16::from_le_bytes([sym[6], sym[7]]);
                if shndx == 0 {
                    continue; // Undefined here: imported from another object.
                }
                let Some(rest) = strings.get(name_at..) else {
                    continue;
                };
                if rest.len() > want.len() && &rest[..want.len()] == want && rest[want.len()] == 0 {
                    return Some(u64::from_le_bytes(sym[8..16].try_into().ok()?));
                }
            }
        }
        None
    }

    /// The link-time address of the section named `name` (`.AsyncioDebug`: CPython
    /// publishes some debug offsets as a section of their own, with no symbol a
    /// stripped file keeps). Every header is checked against the file's length.
    pub fn section_address(&self, name: &str) -> Option<u64> {
        let shoff = self.u64_at(40)? as usize;
        let shentsize = self.u16_at(58)? as usize;
        let shnum = self.u16_at(60)? as usize;
        let shstrndx = self.u16_at(62)? as usize;
        if shentsize < 64 || shstrndx >= shnum {
            return None;
        }
        let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
        let names_at = self.u64_at(header(shstrndx)? + 24)? as usize;
        let names_size = self.u64_at(header(shstrndx)? + 32)? as usize;
        let names = self.map.get(names_at..names_at.checked_add(names_size)?)?;
        let want = name.as_bytes();
        for i in 0..shnum {
            let at = header(i)?;
            let name_at = self.u32_at(at)? as usize;
            let Some(rest) = names.get(name_at..) else {
                continue;
            };
            if rest.len() > want.len() && &rest[..want.len()] == want && rest[want.len()] == 0 {
                return self.u64_at(at + 16);
            }
        }
        None
    }

    /// Where the section `name` is in a process that mapped this file's first page at
    /// `mapped_at`.
    pub fn runtime_section_address(&self, name: &str, mapped_at: u64) -> Option<u64> {
        let addr = self.section_address(name)?;
        mapped_at.checked_add(addr.checked_sub(self.first_load_vaddr)?)
    }

    /// Where a symbol is in a process that mapped this file's first page at
    /// `mapped_at`.
    pub fn runtime_address(&self, name: &str, mapped_at: u64) -> Option<u64> {
        let value = self.symbol(name)?;
        mapped_at.checked_add(value.checked_sub(self.first_load_vaddr)?)
    }
}

/// The first position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = 0;
    while at + needle.len() <= hay.len() {
        let k = hay[at..].iter().position(|&b| b == first)?;
        at += k;
        if hay.get(at..at + needle.len())? == needle {
            return Some(at);
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary is an ELF file whose symbols are known to us.
    #[test]
    fn reads_a_real_executable() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        // `main`, defined in the executable's own symbol table.
        assert!(elf.symbol("main").is_some());
        // libc's symbol, imported (undefined) in every Rust test binary: never found.
        assert_eq!(elf.symbol("process_vm_readv"), None);
        assert_eq!(elf.symbol("no_such_symbol_anywhere"), None);
    }

    #[test]
    fn finds_the_micro_version_in_a_merged_string() {
        let dir = tempfile::tempdir().unwrap();
        let mut exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        // What 3.10's linker leaves: PY_VERSION merged into the install prefix, after a
        // string that only looks like a version (a longer number ends it).
        exe.extend_from_slice(b"\0see 13.10.99\0/root/.pyenv/versions/3.10.13\0");
        let path = dir.path().join("python3.10");
        std::fs::write(&path, &exe).unwrap();
        let elf = ElfFile::open(&path).unwrap();
        assert_eq!(elf.version_micro(3, 10), Some(13));
        assert_eq!(elf.version_micro(3, 11), None);
    }

    #[test]
    fn refuses_what_is_not_elf_or_is_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("text");
        std::fs::write(&text, b"#!/bin/sh\necho hello\n").unwrap();
        let e = ElfFile::open(&text).err().unwrap();
        assert!(e.to_string().contains("not a 64-bit"), "{e}");

        // A real header whose program headers were cut off.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let cut = dir.path().join("cut");
        std::fs::write(&cut, &exe[..80]).unwrap();
        let e = ElfFile::open(&cut).err().unwrap();
        assert!(e.to_string().contains("byte "), "{e}");
        assert!(matches!(e, ElfError::Malformed { .. }));

        let missing = dir.path().join("missing");
        assert!(matches!(
            ElfFile::open(&missing).err().unwrap(),
            ElfError::Open { .. }
        ));
    }
}
