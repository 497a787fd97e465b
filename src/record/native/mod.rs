//! Native stacks of another process's threads (`tach record --native`).
//!
//! A thread stopped with ptrace gives its registers; its stack is walked with framehop
//! (the unwinder of samply) from the modules of `/proc/PID/maps`: DWARF CFI from each
//! module's `.eh_frame` (indexed by `.eh_frame_hdr`), frame pointers where there is none.
//! Stack memory is read through the sampler's [`MemoryReader`] (`process_vm_readv`), a
//! page at a time. Each return address is named by the ELF symbol that covers it,
//! demangled, or `module+0xOFFSET`; `splice` decides which frames show and where the
//! Python frames go.
//!
//! Everything is bounded: [`MAX_NATIVE_FRAMES`] frames and [`MAX_STACK_PAGES`] pages of
//! stack per walk; a walk whose stack pointer does not grow, or whose read fails, ends
//! there and is marked truncated. Modules are loaded once per file. A walk that reaches
//! code outside every module (a library loaded since the maps were read) reads the maps
//! again at once and walks the same stopped thread again; code that stays outside (JIT
//! code) is remembered by page, so it costs one read of the maps per page, and past
//! [`MAX_OUTSIDE_PAGES`] one per [`RELOAD_INTERVAL`].

mod dwarf;
mod error;
#[cfg(fuzzing)]
pub(crate) mod fuzzing;
mod module;
mod realigned;
mod regs;
pub(crate) mod splice;

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};

use crate::record::process::memory::MemoryReader;
pub use error::NativeError;
use module::{FileCache, LoadedFile, SectionData};
pub(crate) use regs::{registers, Registers};
use splice::NativeKind;

/// Native frames walked per thread and sample (the file keeps the innermost 256 of the
/// spliced stack; deeper native frames still tell where the Python frames go).
pub(crate) const MAX_NATIVE_FRAMES: usize = 1024;
/// Pages of stack memory read per walk (1 MiB).
const MAX_STACK_PAGES: usize = 256;
const PAGE: u64 = 4096;
/// The shortest time between two reads of the maps once [`MAX_OUTSIDE_PAGES`] pages
/// of code outside every module are known.
const RELOAD_INTERVAL: Duration = Duration::from_millis(100);
/// Pages of code outside every module remembered (so that JIT code does not read the
/// maps at each walk).
const MAX_OUTSIDE_PAGES: usize = 256;
/// How long a page stays known as outside every module (a library may be loaded there
/// later).
const OUTSIDE_MEMORY: Duration = Duration::from_secs(10);

/// What the native side of a recording did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NativeStats {
    /// Native stacks walked.
    pub walks: u64,
    /// Walks that ended before the root (a failed read, no unwind rule, a stack pointer
    /// that did not grow, the frame limit).
    pub truncated: u64,
    /// Samples whose counts of evaluation loops and Python runs disagreed (written with
    /// their Python frames only).
    pub mismatches: u64,
    /// Threads whose registers could not be read (not stopped in time, gone).
    pub no_registers: u64,
    /// Times the maps were read.
    pub map_reads: u64,
    /// Frames of functions that realign their stack, whose caller's stack pointer was
    /// read from the frame (`realigned`).
    pub realigned: u64,
    /// With `-a`: the most threads of the process sampled in one tick that have no
    /// Python thread state (OpenBLAS and OpenMP workers, Rust threads): their native
    /// stacks alone.
    pub threads_without_python: u64,
}

/// One mapped module.
struct ModuleInfo {
    range: Range<u64>,
    /// Address minus the file's own address for the same byte.
    bias: u64,
    path: Arc<str>,
    /// The executable or `libpython`.
    interpreter: bool,
    file: Option<Arc<LoadedFile>>,
}

/// The module whose span holds `addr`.
fn module_at(modules: &[ModuleInfo], addr: u64) -> Option<&ModuleInfo> {
    let k = modules.partition_point(|m| m.range.start <= addr);
    k.checked_sub(1)
        .and_then(|k| modules.get(k))
        .filter(|m| addr < m.range.end)
}

/// Walks and names the native stacks of one process's threads.
pub(crate) struct NativeUnwinder {
    pid: i32,
    files: FileCache,
    /// Sorted by address.
    modules: Vec<ModuleInfo>,
    unwinder: UnwinderX86_64<SectionData>,
    cache: Box<CacheX86_64>,
    /// Where frames realign their stack (the CFI expressions framehop does not read).
    realigned: realigned::RealignedFrames,
    /// What each lookup address became (a range of `pool`: the functions inlined there,
    /// then the one it is in), until the maps change.
    kinds: HashMap<u64, (u32, u32)>,
    pool: Vec<NativeKind>,
    /// Each module's DWARF, by path, once looked for.
    dwarf: HashMap<Arc<str>, Option<dwarf::Dwarf>>,
    source_frames: Vec<dwarf::SourceFrame>,
    last_reload: Option<Instant>,
    /// Pages of code found outside every module by the last reads of the maps, and
    /// when the set was last emptied.
    outside_pages: HashSet<u64>,
    outside_since: Instant,
    /// Stack pages read this walk: (page address, start in `page_buf`, or None:
    /// unreadable).
    pages: Vec<(u64, Option<usize>)>,
    page_buf: Vec<u8>,
    /// Lookup addresses of the last walk, innermost first.
    pub addrs: Vec<u64>,
    /// The stack pointer in each frame of the last walk (`addrs`'s order): frame `i`'s
    /// own stack is `sps[i]..sps[i + 1]`.
    sps: Vec<u64>,
    pub stats: NativeStats,
}

impl NativeUnwinder {
    pub fn new(pid: i32) -> Result<NativeUnwinder, NativeError> {
        if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            return Err(NativeError::Unsupported);
        }
        let mut n = NativeUnwinder {
            pid,
            files: FileCache::default(),
            modules: Vec::new(),
            unwinder: UnwinderX86_64::new(),
            cache: Box::new(CacheX86_64::new()),
            realigned: realigned::RealignedFrames::default(),
            kinds: HashMap::new(),
            pool: Vec::new(),
            dwarf: HashMap::new(),
            source_frames: Vec::with_capacity(dwarf::MAX_INLINED),
            last_reload: None,
            outside_pages: HashSet::new(),
            outside_since: Instant::now(),
            pages: Vec::with_capacity(MAX_STACK_PAGES),
            page_buf: Vec::new(),
            addrs: Vec::with_capacity(MAX_NATIVE_FRAMES),
            sps: Vec::with_capacity(MAX_NATIVE_FRAMES + 1),
            stats: NativeStats::default(),
        };
        n.reload()?;
        Ok(n)
    }

    /// Reads the maps and makes the module list (and the unwinder's) from them.
    fn reload(&mut self) -> Result<(), NativeError> {
        let pid = self.pid;
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_err(|source| NativeError::Maps { pid, source })?;
        self.stats.map_reads += 1;
        self.last_reload = Some(Instant::now());
        self.kinds.clear();
        self.realigned.clear();
        self.pool.clear();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .and_then(|p| p.to_str().map(str::to_string));
        let maps = module::parse_maps(&text);
        // One module per file: its mappings' span, biased by the first it can place.
        let mut by_file: Vec<(String, u64, Vec<&module::Mapping>)> = Vec::new();
        for m in &maps {
            let known = by_file
                .iter()
                .position(|(d, i, _)| *d == m.dev && *i == m.inode);
            match known {
                Some(k) => by_file[k].2.push(m),
                None if by_file.len() < module::MAX_FILES => {
                    by_file.push((m.dev.clone(), m.inode, vec![m]))
                }
                None => {}
            }
        }
        let mut modules = Vec::new();
        let mut unwinder = UnwinderX86_64::new();
        for (_, _, ms) in by_file {
            if !ms.iter().any(|m| m.executable) {
                continue;
            }
            let first = ms[0];
            let start = ms.iter().map(|m| m.range.start).min().unwrap_or(0);
            let end = ms.iter().map(|m| m.range.end).max().unwrap_or(0);
            let file = self.files.get(pid, first);
            let bias = file
                .as_ref()
                .and_then(|f| ms.iter().find_map(|m| f.bias(m.range.start, m.offset)))
                .unwrap_or(start);
            let path = first.path.strip_suffix(" (deleted)").unwrap_or(&first.path);
            let base = path.rsplit('/').next().unwrap_or(path);
            let interpreter = exe.as_deref() == Some(path) || base.starts_with("libpython");
            if let Some(f) = &file {
                let sect = |s: &Option<module::Section>| {
                    s.as_ref().map(|s| (s.svma.clone(), s.data.clone())).unzip()
                };
                let (text_svma, text) = sect(&f.text);
                let (eh_frame_svma, eh_frame) = sect(&f.eh_frame);
                let (eh_frame_hdr_svma, eh_frame_hdr) = sect(&f.eh_frame_hdr);
                let info = ExplicitModuleSectionInfo {
                    base_svma: 0,
                    text_svma,
                    text,
                    stubs_svma: None,
                    stub_helper_svma: None,
                    got_svma: f.got.clone(),
                    unwind_info: None,
                    eh_frame_svma,
                    eh_frame,
                    eh_frame_hdr_svma,
                    eh_frame_hdr,
                    debug_frame: None,
                    text_segment_svma: None,
                    text_segment: None,
                };
                unwinder.add_module(Module::new(path.to_string(), start..end, bias, info));
            }
            modules.push(ModuleInfo {
                range: start..end,
                bias,
                path: path.into(),
                interpreter,
                file,
            });
        }
        modules.sort_by_key(|m| m.range.start);
        self.modules = modules;
        self.unwinder = unwinder;
        Ok(())
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the last walk reached code outside every module that the maps, read
    /// again now, may name: code on a page not known to be outside (or, with too many
    /// such pages known, a reload not too recent).
    fn reached_unmapped_code(&mut self) -> bool {
        if self.outside_since.elapsed() >= OUTSIDE_MEMORY {
            self.outside_pages.clear();
            self.outside_since = Instant::now();
        }
        let full = self.outside_pages.len() >= MAX_OUTSIDE_PAGES;
        let mut outside = self
            .addrs
            .iter()
            .filter(|&&a| module_at(&self.modules, a).is_none());
        if full {
            outside.next().is_some()
                && self
                    .last_reload
                    .is_none_or(|t| t.elapsed() >= RELOAD_INTERVAL)
        } else {
            outside.any(|&a| !self.outside_pages.contains(&(a & !(PAGE - 1))))
        }
    }

    /// Walks the stack from `regs` into [`Self::addrs`] (lookup addresses, innermost
    /// first). Returns whether the walk was cut short.
    pub fn walk(&mut self, regs: Registers, mem: &dyn MemoryReader) -> bool {
        self.stats.walks += 1;
        let mut truncated = self.walk_once(regs, mem);
        // A library loaded since the maps were read (ctypes imported after the recording
        // began) has no unwind rules yet: its frames are walked by frame pointers, which
        // most libraries do not keep, and are left unnamed. The thread is still stopped:
        // read the maps and walk it again.
        if self.reached_unmapped_code() && self.reload().is_ok() {
            truncated = self.walk_once(regs, mem);
            for &a in &self.addrs {
                if self.outside_pages.len() < MAX_OUTSIDE_PAGES
                    && module_at(&self.modules, a).is_none()
                {
                    self.outside_pages.insert(a & !(PAGE - 1));
                }
            }
        }
        if truncated {
            self.stats.truncated += 1;
        }
        truncated
    }

    /// One walk of the stack from `regs` with the modules known now.
    fn walk_once(&mut self, regs: Registers, mem: &dyn MemoryReader) -> bool {
        self.addrs.clear();
        self.sps.clear();
        self.pages.clear();
        let (pages, page_buf) = (&mut self.pages, &mut self.page_buf);
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let page = addr & !(PAGE - 1);
            let at = (addr - page) as usize;
            if at + 8 > PAGE as usize {
                // Straddles two pages: two reads.
                let lo = read_word(pages, page_buf, mem, page, at, PAGE as usize - at)?;
                let n = PAGE as usize - at;
                let hi = read_word(pages, page_buf, mem, page + PAGE, 0, 8 - n)?;
                return Ok(lo | (hi << (8 * n)));
            }
            read_word(pages, page_buf, mem, page, at, 8)
        };
        let mut unwind_regs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut addr = FrameAddress::from_instruction_pointer(regs.ip);
        self.sps.push(regs.sp);
        let truncated = loop {
            let lookup = addr.address_for_lookup();
            self.addrs.push(lookup);
            if self.addrs.len() >= MAX_NATIVE_FRAMES {
                break true;
            }
            let (sp, bp) = (unwind_regs.sp(), unwind_regs.bp());
            // The unwind tables are the target's, so hostile: gimli has arithmetic that
            // overflows (a panic in a debug build) on a corrupt `.eh_frame_hdr`. Such a
            // walk ends there, cut short, and the cache it may have left half-updated is
            // dropped.
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.unwinder
                    .unwind_frame(addr, &mut unwind_regs, &mut self.cache, &mut read_stack)
            }));
            let Ok(step) = step else {
                *self.cache = CacheX86_64::new();
                break true;
            };
            match step {
                Ok(Some(mut ret)) => {
                    // A frame that realigned its stack: framehop walked it by its frame
                    // pointer, which gives the caller the wrong stack pointer.
                    let slot = module_at(&self.modules, lookup).and_then(|m| {
                        let file = m.file.as_deref()?;
                        self.realigned
                            .cfa_slot(lookup, file, lookup.wrapping_sub(m.bias))
                    });
                    if let Some(slot) = slot {
                        let Ok(cfa) = read_stack(bp.wrapping_add_signed(slot)) else {
                            break true;
                        };
                        let Ok(return_address) = read_stack(cfa.wrapping_sub(8)) else {
                            break true;
                        };
                        self.stats.realigned += 1;
                        unwind_regs.set_sp(cfa);
                        ret = return_address;
                    }
                    if unwind_regs.sp() <= sp {
                        break true;
                    }
                    // Code outside every module (JIT code) has no unwind rules: framehop
                    // stepped it by frame pointer, which most code does not keep. A
                    // return address found so that is no module's code either is not a
                    // caller (it was a stack address, in a real JIT frame): the walk ends
                    // here, cut short, as for any code without unwind rules.
                    if module_at(&self.modules, lookup).is_none()
                        && module_at(&self.modules, ret).is_none()
                    {
                        break true;
                    }
                    // The caller's stack pointer: where this frame's own stack ends,
                    // even when the caller's return address is not a frame.
                    self.sps.push(unwind_regs.sp());
                    match FrameAddress::from_return_address(ret) {
                        Some(a) => addr = a,
                        None => break false,
                    }
                }
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        truncated
    }

    /// Whether frame `i` of the last walk (at lookup address `addr`) is a frame of the interpreter whose own stack
    /// holds one of `entry_frames` (the eval loop's entry frames, a local of its C frame
    /// from 3.12): then it is an eval loop, whatever its name (a stripped interpreter
    /// names none, and GCC may run the loop in a split-off part of the function).
    pub fn holds_entry_frame(&self, i: usize, addr: u64, entry_frames: &[u64]) -> bool {
        let (Some(&lo), Some(&hi)) = (self.sps.get(i), self.sps.get(i + 1)) else {
            return false;
        };
        if !entry_frames.iter().any(|e| (lo..hi).contains(e)) {
            return false;
        }
        module_at(&self.modules, addr).is_some_and(|m| m.interpreter)
    }

    /// Forgets the writer frame indices of the addresses named so far (a new segment's
    /// writer has tables of its own).
    pub fn forget_frames(&mut self) {
        self.kinds.clear();
        self.pool.clear();
    }

    /// What the frame at lookup address `addr` becomes, appended to `out`: the
    /// functions inlined there (innermost first) and the one it is in, as DWARF names
    /// them, or the symbol there; `intern(file, function, line)` makes the writer's
    /// frame of a shown one (line -1: none).
    pub fn kinds_of(
        &mut self,
        addr: u64,
        intern: &mut dyn FnMut(&str, &str, i32) -> u32,
        out: &mut Vec<NativeKind>,
    ) {
        if let Some(&(start, len)) = self.kinds.get(&addr) {
            out.extend_from_slice(&self.pool[start as usize..(start + len) as usize]);
            return;
        }
        // Bounded: a process has only so much code; past this, names are made again.
        if self.pool.len() >= 1 << 22 {
            self.kinds.clear();
            self.pool.clear();
        }
        let start = self.pool.len();
        self.name(addr, intern);
        let len = self.pool.len() - start;
        self.kinds.insert(addr, (start as u32, len as u32));
        out.extend_from_slice(&self.pool[start..]);
    }

    /// Appends the frames at `addr` to `self.pool`.
    fn name(&mut self, addr: u64, intern: &mut dyn FnMut(&str, &str, i32) -> u32) {
        let Some(m) = module_at(&self.modules, addr) else {
            // Code outside every file (JIT code, or a library the walk's read of the
            // maps did not yet see): named by address.
            let id = intern("~", &format!("0x{addr:x}"), -1);
            self.pool.push(NativeKind::Frame(id));
            return;
        };
        let svma = addr.wrapping_sub(m.bias);
        let name = m.file.as_ref().and_then(|f| f.symbol(svma));
        if m.interpreter {
            let kind = match splice::interpreter_frame(name) {
                Some(true) => NativeKind::Eval,
                Some(false) => {
                    NativeKind::Frame(intern(&m.path, &splice::demangle(name.unwrap_or("")), -1))
                }
                None => NativeKind::Hidden,
            };
            self.pool.push(kind);
            return;
        }
        if name.is_some_and(|n| splice::library_start_frame(n, &m.path)) {
            self.pool.push(NativeKind::Hidden);
            return;
        }
        if let Some(file) = &m.file {
            let dwarf = self
                .dwarf
                .entry(m.path.clone())
                .or_insert_with(|| dwarf::Dwarf::load(&file.map));
            if let Some(d) = dwarf {
                d.frames(svma, &mut self.source_frames);
                for f in &self.source_frames {
                    let line = f.line.and_then(|l| i32::try_from(l).ok()).unwrap_or(-1);
                    let id = intern(
                        f.file.as_deref().unwrap_or(&m.path),
                        &splice::demangle(&f.function),
                        line,
                    );
                    self.pool.push(NativeKind::Frame(id));
                }
                if !self.source_frames.is_empty() {
                    return;
                }
            }
        }
        let id = match name {
            Some(n) => intern(&m.path, &splice::demangle(n), -1),
            None => {
                // A function without a symbol (a static one of a stripped library) is
                // named by its start, so that its instructions are one function; where
                // no unwind entry covers the address, by the address itself.
                let start = m.file.as_ref().and_then(|f| f.function_start(svma));
                let base = m.path.rsplit('/').next().unwrap_or(&m.path);
                intern(
                    &m.path,
                    &format!("{base}+0x{:x}", start.unwrap_or(svma)),
                    -1,
                )
            }
        };
        self.pool.push(NativeKind::Frame(id));
    }
}

/// `len` bytes at `at` in the stack page `page` (read on first use, at most
/// [`MAX_STACK_PAGES`] per walk), little-endian, as a u64.
fn read_word(
    pages: &mut Vec<(u64, Option<usize>)>,
    buf: &mut Vec<u8>,
    mem: &dyn MemoryReader,
    page: u64,
    at: usize,
    len: usize,
) -> Result<u64, ()> {
    // The walk goes up the stack: the last page read is the likely one.
    let slot = match pages.iter().rev().find(|(p, _)| *p == page) {
        Some(&(_, slot)) => slot,
        None => {
            if pages.len() >= MAX_STACK_PAGES {
                return Err(());
            }
            let start = pages.len() * PAGE as usize;
            if buf.len() < start + PAGE as usize {
                buf.resize(start + PAGE as usize, 0);
            }
            let slot = mem
                .read(page, &mut buf[start..start + PAGE as usize])
                .ok()
                .map(|()| start);
            pages.push((page, slot));
            slot
        }
    };
    let start = slot.ok_or(())? + at;
    let bytes = buf.get(start..start + len).ok_or(())?;
    let mut word = [0u8; 8];
    word[..len].copy_from_slice(bytes);
    Ok(u64::from_le_bytes(word))
}

#[cfg(test)]
mod tests;
