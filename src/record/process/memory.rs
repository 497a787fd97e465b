//! Fault-tolerant memory reads.
//!
//! Everything the sampler learns about the interpreter goes through [`MemoryReader`].
//! The in-process implementation, [`ProcessVmReader`], calls `process_vm_readv(2)` on our
//! own pid: the kernel copies the bytes, and an address that is unmapped (a thread state
//! or code object freed under us) yields `EFAULT` instead of a `SIGSEGV`. The same trait
//! serves a future `tach record --pid`, where the pid is another process.

use std::fmt;

/// Why a read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// A null pointer where a structure was expected.
    Null,
    /// The kernel refused the read (unmapped memory, permission, ...): the errno.
    Os(i32),
    /// Fewer bytes than asked for (the range crosses into unmapped memory).
    Short { wanted: usize, got: usize },
    /// A value read does not make sense (bad type pointer, length out of range, ...).
    Invalid(&'static str),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Null => write!(f, "null pointer"),
            ReadError::Os(e) => write!(f, "read failed: {}", std::io::Error::from_raw_os_error(*e)),
            ReadError::Short { wanted, got } => write!(f, "short read: {got} of {wanted} bytes"),
            ReadError::Invalid(what) => write!(f, "invalid data: {what}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads another address space (or our own) without ever faulting.
pub trait MemoryReader: Send + Sync {
    /// Fills `buf` from `addr`, entirely or not at all.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError>;

    /// Reads several ranges, each into its slice of `buf` (`ranges` are (address,
    /// length) pairs laid out back to back in `buf`). Returns how many ranges were read
    /// in full; ranges after the first failure are not attempted.
    fn read_many(&self, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
        let mut at = 0;
        for (i, &(addr, len)) in ranges.iter().enumerate() {
            let Some(dst) = buf.get_mut(at..at + len) else {
                return i;
            };
            if self.read(addr, dst).is_err() {
                return i;
            }
            at += len;
        }
        ranges.len()
    }

    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    fn read_u32(&self, addr: u64) -> Result<u32, ReadError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_ne_bytes(b))
    }

    /// A non-null pointer.
    fn read_ptr(&self, addr: u64) -> Result<u64, ReadError> {
        match self.read_u64(addr)? {
            0 => Err(ReadError::Null),
            p => Ok(p),
        }
    }
}

/// `process_vm_readv(2)` on a pid (our own, for the in-process recorder).
#[derive(Debug, Clone, Copy)]
pub struct ProcessVmReader {
    pid: libc::pid_t,
}

/// The kernel accepts at most this many iovecs per call (`UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

impl ProcessVmReader {
    pub fn new(pid: i32) -> Self {
        ProcessVmReader { pid }
    }

    /// A reader of this process (the in-process recorder's).
    #[cfg(any(test, feature = "python-record"))]
    pub fn this_process() -> Self {
        // SAFETY: getpid has no preconditions.
        ProcessVmReader::new(unsafe { libc::getpid() })
    }

    /// Checks that the kernel lets us read: some containers forbid `process_vm_readv`.
    #[cfg(any(test, feature = "python-record"))]
    pub fn probe(&self) -> Result<(), ReadError> {
        let probe: u64 = 0x5441_4348_5052_4f42;
        let got = self.read_u64(&probe as *const u64 as u64)?;
        if got == probe {
            Ok(())
        } else {
            Err(ReadError::Invalid("process_vm_readv returned other bytes"))
        }
    }

    fn readv(&self, local: &[libc::iovec], remote: &[libc::iovec]) -> Result<usize, ReadError> {
        // SAFETY: every local iovec points into a live, writable buffer owned by the caller
        // for the duration of the call; remote iovecs are only addresses for the kernel to
        // copy from, which it validates (EFAULT on unmapped memory).
        let n = unsafe {
            libc::process_vm_readv(
                self.pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            Err(ReadError::Os(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            ))
        } else {
            Ok(n as usize)
        }
    }
}

impl MemoryReader for ProcessVmReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        if addr == 0 {
            return Err(ReadError::Null);
        }
        let local = [libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }];
        let remote = [libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        }];
        let got = self.readv(&local, &remote)?;
        if got == buf.len() {
            Ok(())
        } else {
            Err(ReadError::Short {
                wanted: buf.len(),
                got,
            })
        }
    }

    fn read_many(&self, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
        let total: usize = ranges.iter().map(|r| r.1).sum();
        if total > buf.len() {
            return 0;
        }
        let mut done = 0;
        let mut at = 0;
        for chunk in ranges.chunks(MAX_IOV) {
            if chunk.iter().any(|r| r.0 == 0) {
                // A null address fails the call for all ranges; read one by one instead.
                for &(addr, len) in chunk {
                    if self.read(addr, &mut buf[at..at + len]).is_err() {
                        return done;
                    }
                    at += len;
                    done += 1;
                }
                continue;
            }
            let mut remote = Vec::with_capacity(chunk.len());
            for &(addr, len) in chunk {
                remote.push(libc::iovec {
                    iov_base: addr as usize as *mut libc::c_void,
                    iov_len: len,
                });
            }
            let len: usize = chunk.iter().map(|r| r.1).sum();
            let local = [libc::iovec {
                iov_base: buf[at..].as_mut_ptr().cast(),
                iov_len: len,
            }];
            let got = match self.readv(&local, &remote) {
                Ok(n) => n,
                Err(_) => return done,
            };
            // Count the ranges read in full: the kernel stops at the first faulting one.
            let mut acc = 0;
            for &(_, l) in chunk {
                if acc + l > got {
                    return done;
                }
                acc += l;
                done += 1;
            }
            at += len;
        }
        done
    }
}

/// At most this many ranges are read ahead in one batch ([`Prefetched`]).
pub const MAX_PREFETCH_RANGES: usize = 64;
/// At most this many bytes are read ahead in one batch.
pub const MAX_PREFETCH_BYTES: usize = 64 * 1024;
/// Ranges read ahead this close (in bytes) are read as one.
const MERGE_GAP: u64 = 256;

/// Reads answered from ranges read beforehand in one call, or else read when asked.
///
/// A walk that chases pointers reads one object after the other, each read waiting for
/// the previous one's answer: one `process_vm_readv` per object. A walk that repeats
/// (the same chain of asyncio tasks, tick after tick) asks for the same ranges each
/// time, so the ranges it asked for last time are read first, together
/// ([`MemoryReader::read_many`]: one call), and the walk, run unchanged over this
/// reader, is answered from them where it asks for a range they hold. Every answer
/// comes from this read: a range not read ahead is read when asked, so a walk whose
/// objects moved reads what it reads without the batch, only later. [`Prefetched::asked`]
/// gives the ranges it asked for this time: the next batch.
pub struct Prefetched<'a> {
    inner: &'a dyn MemoryReader,
    /// (address, length, offset in `data`) of each range read ahead.
    fetched: Vec<(u64, usize, usize)>,
    data: Vec<u8>,
    /// The ranges asked for, in order, those inside an earlier one left out (bounded by
    /// [`MAX_PREFETCH_RANGES`] and [`MAX_PREFETCH_BYTES`]).
    asked: std::sync::Mutex<(Vec<(u64, usize)>, usize)>,
}

impl<'a> Prefetched<'a> {
    /// Reads `ahead` (the ranges a previous walk asked for; beyond the bounds ignored)
    /// from `inner` in one batch. The ranges up to the first that cannot be read are
    /// kept.
    pub fn new(inner: &'a dyn MemoryReader, ahead: &[(u64, usize)]) -> Prefetched<'a> {
        // Ranges close together are read as one (the kernel pins and copies each range
        // of a call on its own: a task's fields and the object beside it cost one).
        let mut spans: Vec<(u64, u64)> = ahead
            .iter()
            .take(MAX_PREFETCH_RANGES)
            .filter(|&&(addr, len)| addr != 0 && len > 0)
            .map(|&(addr, len)| (addr, addr.saturating_add(len as u64)))
            .collect();
        spans.sort_unstable();
        let mut ranges: Vec<(u64, usize)> = Vec::with_capacity(spans.len());
        let mut total = 0;
        let mut last_end = 0u64;
        for (start, end) in spans {
            // Bytes within MERGE_GAP of a range lie on a page that range is on, or on
            // the next range's: merging never reads a page the ranges do not touch.
            if let Some(last) = ranges.last_mut() {
                if start <= last_end.saturating_add(MERGE_GAP) {
                    if end > last_end {
                        let grown = (end - last.0) as usize;
                        if total - last.1 + grown > MAX_PREFETCH_BYTES {
                            break;
                        }
                        total += grown - last.1;
                        last.1 = grown;
                        last_end = end;
                    }
                    continue;
                }
            }
            let len = (end - start) as usize;
            if total + len > MAX_PREFETCH_BYTES {
                break;
            }
            ranges.push((start, len));
            total += len;
            last_end = end;
        }
        let mut data = vec![0u8; total];
        let read = if ranges.is_empty() {
            0
        } else {
            inner.read_many(&ranges, &mut data)
        };
        let mut fetched = Vec::with_capacity(read);
        let mut at = 0;
        for &(addr, len) in &ranges[..read] {
            fetched.push((addr, len, at));
            at += len;
        }
        Prefetched {
            inner,
            fetched,
            data,
            asked: std::sync::Mutex::new((Vec::new(), 0)),
        }
    }

    /// The ranges the walk asked for, in order: what to read ahead next time.
    pub fn asked(self) -> Vec<(u64, usize)> {
        match self.asked.into_inner() {
            Ok((asked, _)) => asked,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }

    fn note(&self, addr: u64, len: usize) {
        let Ok(mut guard) = self.asked.lock() else {
            return;
        };
        let (asked, bytes) = &mut *guard;
        let inside = |&(a, l): &(u64, usize)| {
            addr >= a && addr.saturating_add(len as u64) <= a.saturating_add(l as u64)
        };
        if asked.len() >= MAX_PREFETCH_RANGES
            || *bytes + len > MAX_PREFETCH_BYTES
            || asked.iter().any(inside)
        {
            return;
        }
        asked.push((addr, len));
        *bytes += len;
    }
}

impl MemoryReader for Prefetched<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.note(addr, buf.len());
        let end = addr.saturating_add(buf.len() as u64);
        for &(a, len, at) in &self.fetched {
            if addr >= a && end <= a.saturating_add(len as u64) {
                let from = at + (addr - a) as usize;
                buf.copy_from_slice(&self.data[from..from + buf.len()]);
                return Ok(());
            }
        }
        self.inner.read(addr, buf)
    }
}

/// A sparse memory image, for tests: reads succeed only inside mapped regions.
#[cfg(test)]
#[derive(Debug, Default, Clone)]
pub struct FakeMemory {
    regions: std::collections::HashMap<u64, Vec<u8>>,
}

#[cfg(test)]
impl FakeMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `bytes` at `addr`.
    pub fn map(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.insert(addr, bytes);
    }

    /// Writes a native-endian u64 inside a mapped region.
    pub fn put_u64(&mut self, addr: u64, v: u64) {
        self.put(addr, &v.to_ne_bytes());
    }

    /// Writes bytes inside a mapped region; panics if unmapped (tests only).
    pub fn put(&mut self, addr: u64, bytes: &[u8]) {
        for (&base, data) in self.regions.iter_mut() {
            if addr >= base && addr + bytes.len() as u64 <= base + data.len() as u64 {
                let at = (addr - base) as usize;
                data[at..at + bytes.len()].copy_from_slice(bytes);
                return;
            }
        }
        panic!("FakeMemory::put at unmapped {addr:#x}");
    }
}

#[cfg(test)]
impl MemoryReader for FakeMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if addr == 0 {
            return Err(ReadError::Null);
        }
        for (&base, data) in &self.regions {
            if addr >= base && addr + buf.len() as u64 <= base + data.len() as u64 {
                let at = (addr - base) as usize;
                buf.copy_from_slice(&data[at..at + buf.len()]);
                return Ok(());
            }
        }
        Err(ReadError::Os(libc::EFAULT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_survives_bad_addresses() {
        let r = ProcessVmReader::this_process();
        r.probe().unwrap();
        let data: Vec<u8> = (0..=255).collect();
        let mut buf = [0u8; 16];
        r.read(data.as_ptr() as u64 + 10, &mut buf).unwrap();
        assert_eq!(buf[0], 10);
        // Unmapped: an error, never a crash.
        assert!(r.read(8, &mut buf).is_err());
        assert!(r.read(0xffff_ffff_ffff_0000, &mut buf).is_err());
        assert_eq!(r.read(0, &mut buf), Err(ReadError::Null));
    }

    #[test]
    fn batched_reads_stop_at_the_first_bad_range() {
        let r = ProcessVmReader::this_process();
        let a = [1u8; 8];
        let b = [2u8; 4];
        let mut buf = [0u8; 20];
        let ranges = [(a.as_ptr() as u64, 8), (b.as_ptr() as u64, 4), (16u64, 8)];
        assert_eq!(r.read_many(&ranges, &mut buf), 2);
        assert_eq!(&buf[..12], &[1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2]);
        let ranges = [(a.as_ptr() as u64, 8), (0, 4)];
        assert_eq!(r.read_many(&ranges, &mut buf), 1);
    }

    #[test]
    fn prefetched_reads_answer_as_the_memory_does_and_learn_what_was_asked() {
        let mut m = FakeMemory::new();
        m.map(0x1000, (0..64).collect());
        m.map(0x9000, vec![7; 16]);
        // A first walk: nothing read ahead, every read goes to the memory.
        let walk = |mem: &dyn MemoryReader| {
            let a = mem.read_u64(0x1008).unwrap();
            let mut b = [0u8; 4];
            mem.read(0x1010, &mut b).unwrap();
            let c = mem.read_u64(0x9000).unwrap();
            (a, b, c, mem.read_u64(0x5000).is_err())
        };
        let first = Prefetched::new(&m, &[]);
        let expected = walk(&first);
        assert_eq!(expected, walk(&m));
        let asked = first.asked();
        // The unreadable range is asked for too: read ahead, it ends the batch there.
        assert_eq!(
            asked,
            vec![(0x1008, 8), (0x1010, 4), (0x9000, 8), (0x5000, 8)]
        );
        // Read ahead: the same answers, now from the batch, and what changed since is
        // read as it is now.
        let mut changed = m.clone();
        changed.put_u64(0x9000, 99);
        let second = Prefetched::new(&changed, &asked);
        // 0x1008 and 0x1010 are one read; the batch, in address order, stops at the
        // unreadable 0x5000, so 0x9000 is read when asked: as it is now.
        assert_eq!(second.fetched, vec![(0x1008, 12, 0)]);
        let (a, b, c, unreadable) = walk(&second);
        assert_eq!((a, b, unreadable), (expected.0, expected.1, true));
        assert_eq!(c, 99);
        // A range inside one asked for before is not asked for again; ranges beyond
        // the bounds are not read ahead.
        let third = Prefetched::new(&m, &[(0x1000, 64)]);
        third.read(0x1008, &mut [0u8; 16]).unwrap();
        third.read_u64(0x1010).unwrap();
        third.read_u64(0x1000).unwrap();
        assert_eq!(third.asked(), vec![(0x1008, 16), (0x1000, 8)]);
        let many: Vec<(u64, usize)> = (0..100).map(|i| (0x1000 + 300 * i, 1)).collect();
        let mut wide = FakeMemory::new();
        wide.map(0x1000, vec![1; 300 * 100]);
        assert_eq!(
            Prefetched::new(&wide, &many).fetched.len(),
            MAX_PREFETCH_RANGES
        );
        // Close ranges are one read, which answers each of them.
        let close = Prefetched::new(&m, &[(0x1030, 8), (0x1000, 8), (0x1010, 4)]);
        assert_eq!(close.fetched, vec![(0x1000, 0x38, 0)]);
        assert_eq!(close.read_u64(0x1030), m.read_u64(0x1030));
        assert!(Prefetched::new(&m, &[(0x1000, MAX_PREFETCH_BYTES + 1)])
            .fetched
            .is_empty());
    }

    #[test]
    fn fake_memory_maps_regions() {
        let mut m = FakeMemory::new();
        m.map(0x1000, vec![0; 64]);
        m.put_u64(0x1008, 42);
        assert_eq!(m.read_u64(0x1008), Ok(42));
        assert!(m.read_u64(0x1040).is_err());
        assert_eq!(m.read_ptr(0x1000), Err(ReadError::Null));
    }
}
