//! The target's modules: its executable mappings from `/proc/PID/maps`, each file's
//! unwind sections and function symbols loaded once (by device and inode) from the file
//! itself, memory-mapped and parsed with `object`.
//!
//! Every file is untrusted: `object` checks offsets against the file's length, section
//! ranges are checked again before they are sliced, and the number of modules and
//! symbols kept is bounded.

use std::collections::HashMap;
use std::fs::File;
use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use super::error::NativeError;
pub(super) use crate::record::process::maps::{parse_maps, Mapping};

/// Files loaded per process.
pub(super) const MAX_FILES: usize = 4096;
/// Function symbols kept per file (libxul-sized files have a few hundred thousand).
const MAX_SYMBOLS: usize = 4 << 20;

/// A section of a memory-mapped file: the unwinder's view of its bytes, without a copy.
#[derive(Clone)]
pub(super) struct SectionData {
    map: Arc<Mmap>,
    range: Range<usize>,
}

#[cfg(test)]
impl SectionData {
    /// `bytes` as section data (tests: unwind tables made up or corrupted).
    pub(super) fn from_bytes(bytes: &[u8]) -> SectionData {
        let mut map = memmap2::MmapMut::map_anon(bytes.len().max(1)).expect("anonymous map");
        map[..bytes.len()].copy_from_slice(bytes);
        SectionData {
            map: Arc::new(map.make_read_only().expect("read-only map")),
            range: 0..bytes.len(),
        }
    }
}

impl Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // The range was checked against the map's length when it was made.
        self.map.get(self.range.clone()).unwrap_or(&[])
    }
}

/// A function symbol: its address in the file (SVMA), size (0: unknown) and name.
#[derive(Debug)]
struct Symbol {
    addr: u64,
    size: u64,
    name: Box<str>,
}

/// A section's address range and its bytes.
pub(super) struct Section {
    pub svma: Range<u64>,
    pub data: SectionData,
}

/// What one file gives the unwinder and the symboliser.
pub(super) struct LoadedFile {
    /// The whole file (its DWARF is read from it on first use).
    pub map: Arc<Mmap>,
    /// (file offset, size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    pub text: Option<Section>,
    pub eh_frame: Option<Section>,
    pub eh_frame_hdr: Option<Section>,
    pub got: Option<Range<u64>>,
    /// Sorted by address.
    symbols: Vec<Symbol>,
}

impl LoadedFile {
    /// Loads `path` (tried as the target names it, then through the target's root, for
    /// a process in a chroot or another mount namespace).
    pub fn load(pid: i32, path: &str) -> Result<LoadedFile, NativeError> {
        let file = File::open(path)
            .or_else(|_| File::open(format!("/proc/{pid}/root{path}")))
            .map_err(|e| NativeError::Module {
                path: path.to_string(),
                what: e.to_string(),
            })?;
        // SAFETY: the map is read-only; a file truncated under us would fault, the same
        // risk every ELF reader (and the dynamic loader) takes with mapped libraries.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| NativeError::Module {
            path: path.to_string(),
            what: e.to_string(),
        })?;
        let map = Arc::new(map);
        let obj = object::File::parse(&**map).map_err(|e| NativeError::Module {
            path: path.to_string(),
            what: e.to_string(),
        })?;
        let section = |name: &str| -> Option<Section> {
            let s = obj.section_by_name(name)?;
            let (off, size) = s.file_range()?;
            let (off, size) = (usize::try_from(off).ok()?, usize::try_from(size).ok()?);
            let end = off.checked_add(size).filter(|&e| e <= map.len())?;
            let svma = s.address()..s.address().checked_add(s.size())?;
            Some(Section {
                svma,
                data: SectionData {
                    map: map.clone(),
                    range: off..end,
                },
            })
        };
        let segments = obj
            .segments()
            .filter_map(|s| {
                let (off, size) = s.file_range();
                (size > 0).then_some((off, size, s.address()))
            })
            .collect();
        let mut symbols: Vec<Symbol> = obj
            .symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok().filter(|n| !n.is_empty())?;
                Some(Symbol {
                    addr: s.address(),
                    size: s.size(),
                    name: name.into(),
                })
            })
            .take(MAX_SYMBOLS)
            .collect();
        // One symbol per address: the sized one, then the shortest name (a local name
        // over its versioned or aliased exports).
        symbols.sort_by(|a, b| {
            (a.addr, a.size == 0, a.name.len()).cmp(&(b.addr, b.size == 0, b.name.len()))
        });
        symbols.dedup_by_key(|s| s.addr);
        Ok(LoadedFile {
            map: map.clone(),
            segments,
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            got: obj
                .section_by_name(".got")
                .and_then(|s| Some(s.address()..s.address().checked_add(s.size())?)),
            symbols,
        })
    }

    /// The load bias of the file mapped at `start` from file offset `offset`: the
    /// address minus the file's own (SVMA) address for the same byte.
    pub fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        // The segment this mapping starts (segments can share a page: the one that
        // begins on it), else one that covers its offset.
        self.segments
            .iter()
            .find(|&&(off, _, _)| off & !0xfff == offset)
            .or_else(|| {
                self.segments
                    .iter()
                    .find(|&&(off, size, _)| off <= offset && offset < off.saturating_add(size))
            })
            .map(|&(off, _, vaddr)| {
                start
                    .wrapping_sub(vaddr)
                    .wrapping_sub(offset)
                    .wrapping_add(off)
            })
    }

    /// The start (SVMA) of the function holding `svma` by the unwind table: the
    /// initial location of the `.eh_frame` entry covering it, found through
    /// `.eh_frame_hdr`'s sorted table. None without both sections, or outside every
    /// entry.
    pub fn function_start(&self, svma: u64) -> Option<u64> {
        use gimli::UnwindSection;
        let (hdr, eh_frame) = (self.eh_frame_hdr.as_ref()?, self.eh_frame.as_ref()?);
        let endian = gimli::RunTimeEndian::Little;
        let mut bases = gimli::BaseAddresses::default()
            .set_eh_frame_hdr(hdr.svma.start)
            .set_eh_frame(eh_frame.svma.start);
        if let Some(text) = &self.text {
            bases = bases.set_text(text.svma.start);
        }
        let parsed = gimli::EhFrameHdr::new(&hdr.data[..], endian)
            .parse(&bases, 8)
            .ok()?;
        let table = parsed.table()?;
        let frames = gimli::EhFrame::new(&eh_frame.data[..], endian);
        let fde = table
            .fde_for_address(&frames, &bases, svma, |f, b, o| f.cie_from_offset(b, o))
            .ok()?;
        fde.contains(svma).then(|| fde.initial_address())
    }

    /// The function symbol covering `svma`, if any.
    pub fn symbol(&self, svma: u64) -> Option<&str> {
        let k = self.symbols.partition_point(|s| s.addr <= svma);
        let s = self.symbols.get(k.checked_sub(1)?)?;
        if s.size != 0 && svma - s.addr >= s.size {
            return None;
        }
        Some(&s.name)
    }
}

/// Files loaded so far, by (device, inode): a library mapped again after a reload, or
/// by another thread's module list, is parsed once.
#[derive(Default)]
pub(super) struct FileCache {
    files: HashMap<(String, u64), Option<Arc<LoadedFile>>>,
}

impl FileCache {
    /// The file of `m`, loaded on first use; None when it cannot be read (counted
    /// once, its frames are named by offset).
    pub fn get(&mut self, pid: i32, m: &Mapping) -> Option<Arc<LoadedFile>> {
        let key = (m.dev.clone(), m.inode);
        if let Some(f) = self.files.get(&key) {
            return f.clone();
        }
        if self.files.len() >= MAX_FILES {
            return None;
        }
        let path = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
        let loaded = LoadedFile::load(pid, path).ok().map(Arc::new);
        self.files.insert(key, loaded.clone());
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_executable_loads_with_symbols_and_bias() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let file = LoadedFile::load(std::process::id() as i32, exe).unwrap();
        assert!(file.eh_frame.is_some(), "a Rust test binary has .eh_frame");
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let m = maps
            .iter()
            .find(|m| m.path == exe && m.executable)
            .expect("the test binary's text is mapped");
        let bias = file.bias(m.range.start, m.offset).unwrap();
        // This very function's address, as a symbol of this file.
        let here = own_executable_loads_with_symbols_and_bias as *const () as u64;
        let name = file.symbol(here.wrapping_sub(bias)).expect("a symbol");
        assert!(
            rustc_demangle::demangle(name)
                .to_string()
                .contains("own_executable_loads_with_symbols_and_bias"),
            "{name}"
        );
    }

    #[test]
    fn a_function_start_is_its_unwind_entrys() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let file = LoadedFile::load(std::process::id() as i32, exe).unwrap();
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let m = maps
            .iter()
            .find(|m| m.path == exe && m.executable)
            .expect("the test binary's text is mapped");
        let bias = file.bias(m.range.start, m.offset).unwrap();
        // This function's symbol (the linker's) starts where its unwind entry (the
        // compiler's) does, for every address inside it.
        let here = a_function_start_is_its_unwind_entrys as *const () as u64;
        let start = here.wrapping_sub(bias);
        let k = file.symbols.partition_point(|s| s.addr < start);
        let sym = &file.symbols[k];
        assert_eq!(sym.addr, start);
        assert!(sym.size > 8, "{sym:?}");
        for offset in [0, 1, sym.size / 2, sym.size - 1] {
            assert_eq!(
                file.function_start(start + offset),
                Some(start),
                "+{offset}"
            );
        }
        // Past the text no entry covers the address.
        let end = file.text.as_ref().unwrap().svma.end;
        assert_eq!(file.function_start(end + 0x10_0000), None);
    }

    #[test]
    fn a_file_that_is_not_elf_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("junk.so");
        std::fs::write(&p, b"\x7fELF\x02\x01\x01junk that is not an ELF file").unwrap();
        assert!(LoadedFile::load(std::process::id() as i32, p.to_str().unwrap()).is_err());
        std::fs::write(&p, b"").unwrap();
        assert!(LoadedFile::load(std::process::id() as i32, p.to_str().unwrap()).is_err());
    }
}
