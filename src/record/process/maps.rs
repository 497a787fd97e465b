//! `/proc/PID/maps`, parsed in one place for every reader of it: finding another
//! process's interpreter (`attach`), its asyncio debug section (`asyncio`) and the files
//! native stacks are unwound with (`native`).
//!
//! The text comes from another process's kernel view and is bounded here: at most
//! [`MAX_MAPPINGS`] lines are kept, and a line that does not parse is skipped.

use std::collections::BTreeMap;
use std::ops::Range;

/// Mappings of files followed per process (a process maps a few hundred).
pub(crate) const MAX_MAPPINGS: usize = 1 << 16;

/// One line of `/proc/PID/maps` that maps a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub range: Range<u64>,
    pub executable: bool,
    /// Offset in the file of `range.start`.
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
    pub path: String,
}

/// Parses `/proc/PID/maps`: the private mappings of files (anonymous memory, the stack,
/// the vdso, shared mappings and lines that do not parse are left out).
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        if out.len() >= MAX_MAPPINGS {
            break;
        }
        // start-end perms offset dev inode path (the path may hold spaces).
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(offset), Some(dev), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.next().unwrap_or("").trim_start();
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi), Ok(offset), Ok(inode)) = (
            u64::from_str_radix(lo, 16),
            u64::from_str_radix(hi, 16),
            u64::from_str_radix(offset, 16),
            inode.parse::<u64>(),
        ) else {
            continue;
        };
        // A shared mapping is data, never code the loader placed (it maps privately).
        // In-process, the native unwinder's own reads of the module files are such
        // mappings: counted in, they would stretch each module's span over the others.
        let shared = perms.as_bytes().get(3) == Some(&b's');
        if inode == 0 || !path.starts_with('/') || lo >= hi || shared {
            continue;
        }
        out.push(Mapping {
            range: lo..hi,
            executable: perms.as_bytes().get(2) == Some(&b'x'),
            offset,
            dev: dev.to_string(),
            inode,
            path: path.to_string(),
        });
    }
    out
}

/// One file the process mapped, and the lowest address it is mapped at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MappedFile {
    pub path: String,
    /// Start and end of the mapping at file offset 0.
    pub lowest: u64,
    pub end: u64,
}

/// The files of `/proc/PID/maps` that are mapped from their first page, by path, each
/// with its lowest such mapping.
pub(crate) fn mapped_files(maps: &str) -> Vec<MappedFile> {
    let mut by_path: BTreeMap<String, Range<u64>> = BTreeMap::new();
    for m in parse_maps(maps) {
        if m.offset != 0 {
            continue;
        }
        let lowest = by_path.entry(m.path).or_insert(m.range.clone());
        if m.range.start < lowest.start {
            *lowest = m.range;
        }
    }
    by_path
        .into_iter()
        .map(|(path, range)| MappedFile {
            path,
            lowest: range.start,
            end: range.end,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anonymous memory, the stack, shared mappings (a reader's view of a file, such as
    /// the native unwinder's of python3.12 in-process) and bad lines are left out.
    #[test]
    fn maps_keep_file_mappings_only() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234 /usr/bin/python3.12
55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 1234 /usr/bin/python3.12
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7f1000000000-7f1000001000 r-xp 00002000 08:01 99 /tmp/lib name with spaces.so (deleted)
garbage line
7f2000001000-7f2000000000 r-xp 00000000 08:01 98 /tmp/backwards.so
7f3000000000-7f3000005000 r--s 00000000 08:01 1234 /usr/bin/python3.12
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert!(!maps[0].executable && maps[1].executable);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].range, 0x55d0c0a01000..0x55d0c0a02000);
        assert_eq!((maps[1].dev.as_str(), maps[1].inode), ("08:01", 1234));
        assert_eq!(maps[2].path, "/tmp/lib name with spaces.so (deleted)");
    }

    #[test]
    fn maps_give_each_files_lowest_mapping_from_offset_zero() {
        let maps = "\
00400000-00420000 r--p 00000000 08:01 123 /usr/bin/python3.15
00420000-00900000 r-xp 00020000 08:01 123 /usr/bin/python3.15
7f0000000000-7f0000001000 r--p 00000000 08:01 9 /lib/with space/libpython3.12.so.1.0
7f0000002000-7f0000003000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0                          [stack]
";
        let files = mapped_files(maps);
        assert_eq!(
            files,
            vec![
                MappedFile {
                    path: "/lib/with space/libpython3.12.so.1.0".into(),
                    lowest: 0x7f00_0000_0000,
                    end: 0x7f00_0000_1000,
                },
                MappedFile {
                    path: "/usr/bin/python3.15".into(),
                    lowest: 0x40_0000,
                    end: 0x42_0000,
                },
            ]
        );
    }

    #[test]
    fn a_file_mapped_twice_from_offset_zero_keeps_its_lowest_mapping() {
        let maps = "\
7f0000005000-7f0000006000 r--p 00000000 08:01 9 /lib/libx.so
7f0000001000-7f0000002000 r--p 00000000 08:01 9 /lib/libx.so
";
        assert_eq!(
            mapped_files(maps),
            vec![MappedFile {
                path: "/lib/libx.so".into(),
                lowest: 0x7f00_0000_1000,
                end: 0x7f00_0000_2000,
            }]
        );
    }

    #[test]
    fn no_more_than_the_bound_is_kept() {
        let line = "7f0000000000-7f0000001000 r--p 00000000 08:01 9 /lib/libx.so\n";
        let text = line.repeat(MAX_MAPPINGS + 3);
        assert_eq!(parse_maps(&text).len(), MAX_MAPPINGS);
    }
}
