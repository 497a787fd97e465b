//! Function names and source locations from a module's DWARF (`addr2line`), where it
//! has any: the functions inlined at an address too, as py-spy names them.
//!
//! Loaded on first use, per file, only for modules other than the interpreter (whose
//! frames are sorted by their symbols). The debug sections are copied out of the
//! file's map (the context must own them to move with the sampler); a file with more
//! than [`MAX_DEBUG_BYTES`] of them is named by its symbols only.

use std::sync::Arc;

use object::{Object, ObjectSection};

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// Debug sections copied per file, at most.
const MAX_DEBUG_BYTES: u64 = 256 << 20;
/// Frames (inlined ones and the function) kept per address.
pub(super) const MAX_INLINED: usize = 16;

/// One frame at an address: function name, source file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SourceFrame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

pub(super) struct Dwarf {
    context: addr2line::Context<Reader>,
}

impl Dwarf {
    /// The DWARF of the ELF file in `data`, None when it has none (or too much).
    pub fn load(data: &[u8]) -> Option<Dwarf> {
        let obj = object::File::parse(data).ok()?;
        let info = obj.section_by_name(".debug_info")?;
        let total: u64 = obj
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")))
            .map(|s| s.size())
            .sum();
        if total > MAX_DEBUG_BYTES || info.size() == 0 {
            return None;
        }
        let endian = if obj.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let dwarf = gimli::Dwarf::load(|id: gimli::SectionId| -> Result<Reader, gimli::Error> {
            let bytes: Arc<[u8]> = match obj.section_by_name(id.name()) {
                // Compressed sections are not read: no names from them.
                Some(s) => s
                    .uncompressed_data()
                    .map(|d| Arc::from(&*d))
                    .unwrap_or_else(|_| Arc::from(&[][..])),
                None => Arc::from(&[][..]),
            };
            Ok(gimli::EndianArcSlice::new(bytes, endian))
        })
        .ok()?;
        let context = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf { context })
    }

    /// The frames at file address `svma`, innermost (inlined) first, into `out`; none
    /// when DWARF does not cover it or names no function there.
    pub fn frames(&self, svma: u64, out: &mut Vec<SourceFrame>) {
        out.clear();
        let Ok(mut iter) = self.context.find_frames(svma).skip_all_loads() else {
            return;
        };
        while let Ok(Some(frame)) = iter.next() {
            if out.len() >= MAX_INLINED {
                break;
            }
            let Some(function) = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|n| n.into_owned())
            else {
                // A frame without a name: the symbol table names the address instead.
                out.clear();
                return;
            };
            let (file, line) = match &frame.location {
                Some(l) => (l.file.map(str::to_string), l.line),
                None => (None, None),
            };
            out.push(SourceFrame {
                function,
                file,
                line,
            });
        }
    }
}
