use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;
use crate::record::process::memory::{FakeMemory, ProcessVmReader};
use crate::record::process::pause::ThreadPause;
use crate::record::process::ptrace_pause::PtracePauser;

/// Kills the child when the test ends.
struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sleep` in the C library's `clock_nanosleep`: the walk goes from the system call
/// through libc to the program's start, the C library's symbols named.
#[test]
fn walks_a_sleeping_process_to_its_root() {
    let child = sleeping_child();
    let pid = child.0.id() as i32;
    let mut unwinder = NativeUnwinder::new(pid).unwrap();
    let mut pauser = PtracePauser::new(pid);
    let mut paused = false;
    for _ in 0..100 {
        if pauser.pause(pid as u64) {
            paused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(paused, "could not stop the child");
    let regs = registers(pid).unwrap();
    let mem = ProcessVmReader::new(pid);
    let truncated = unwinder.walk(regs, &mem);
    pauser.resume();
    let mut names = Vec::new();
    let addrs = unwinder.addrs.clone();
    let mut intern = |file: &str, func: &str, _line: i32| {
        names.push(format!("{func} ({file})"));
        names.len() as u32 - 1
    };
    let mut kinds = Vec::new();
    for &a in &addrs {
        unwinder.kinds_of(a, &mut intern, &mut kinds);
    }
    assert!(!truncated, "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| n.contains("nanosleep") && n.contains("libc")),
        "{names:?}"
    );
    // __libc_start_main is left out, as py-spy leaves it out.
    assert!(kinds.contains(&NativeKind::Hidden), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("__libc_start_main ")),
        "{names:?}"
    );
    // A frame holds the stack from its stack pointer to its caller's: an address there
    // (an eval loop's entry frame) makes a frame of the executable (the interpreter,
    // when it is Python) an eval loop, and no frame of another module.
    let is_exe = |a: u64| {
        let m = unwinder
            .modules
            .iter()
            .find(|m| m.range.contains(&a))
            .unwrap();
        m.interpreter
    };
    let main = (0..addrs.len())
        .find(|&i| is_exe(addrs[i]) && i + 1 < unwinder.sps.len())
        .expect("a frame of sleep's own code");
    let (lo, hi) = (unwinder.sps[main], unwinder.sps[main + 1]);
    assert!(lo < hi);
    assert!(unwinder.holds_entry_frame(main, addrs[main], &[lo + (hi - lo) / 2]));
    assert!(!unwinder.holds_entry_frame(main, addrs[main], &[hi, lo - 8]));
    let libc = (0..addrs.len()).find(|&i| !is_exe(addrs[i])).unwrap();
    let sp = unwinder.sps[libc];
    assert!(!unwinder.holds_entry_frame(libc, addrs[libc], &[sp]));
}

/// A library mapped after the maps were read (here: every module forgotten, as when
/// the recording began before the program loaded them) is found by the walk itself: the
/// maps are read again and the stopped thread walked again, to its root, named; code
/// that stays outside every module reads the maps once per page, not at each walk.
#[test]
fn a_library_loaded_since_the_maps_were_read_is_walked_and_named() {
    let child = sleeping_child();
    let pid = child.0.id() as i32;
    let mut unwinder = NativeUnwinder::new(pid).unwrap();
    unwinder.modules.clear();
    unwinder.unwinder = UnwinderX86_64::new();
    let mut pauser = PtracePauser::new(pid);
    assert!(
        (0..100).any(|_| pauser.pause(pid as u64) || {
            std::thread::sleep(Duration::from_millis(10));
            false
        }),
        "could not stop the child"
    );
    let regs = registers(pid).unwrap();
    let mem = ProcessVmReader::new(pid);
    let truncated = unwinder.walk(regs, &mem);
    pauser.resume();
    assert!(!truncated, "{:x?}", unwinder.addrs);
    assert_eq!(unwinder.stats.map_reads, 2);
    assert!(unwinder
        .addrs
        .iter()
        .all(|&a| module_at(&unwinder.modules, a).is_some()));

    // Code in no module (JIT code): one more read of the maps for its page, then none.
    let jit = Registers {
        ip: 0x1000_0010,
        sp: 8,
        bp: 0,
    };
    let nothing = FakeMemory::new();
    for _ in 0..5 {
        unwinder.walk(jit, &nothing);
    }
    assert_eq!(unwinder.stats.map_reads, 3);
    unwinder.walk(
        Registers {
            ip: 0x1000_1010,
            ..jit
        },
        &nothing,
    );
    assert_eq!(unwinder.stats.map_reads, 4);
}

/// `sleep 30`, once it has loaded its libraries and sleeps.
fn sleeping_child() -> Killed {
    let child = Killed(
        Command::new("sleep")
            .arg("30")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id() as i32;
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('S')
        {
            return child;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Registers and stack memory that make no sense end the walk, bounded, never a panic.
#[test]
fn garbage_registers_and_memory_end_the_walk() {
    let pid = std::process::id() as i32;
    let mut unwinder = NativeUnwinder::new(pid).unwrap();
    let mut mem = FakeMemory::new();
    // A stack page of words pointing into it and back at each other (a cycle).
    let base = 0x7000_0000u64;
    let mut page = vec![0u8; 3 * PAGE as usize];
    for (i, w) in page.chunks_mut(8).enumerate() {
        let v = if i % 2 == 0 {
            base + (i as u64 * 8) % 64
        } else {
            0x1234_5678
        };
        w.copy_from_slice(&v.to_le_bytes());
    }
    mem.map(base, page);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let regs = Registers {
            ip: seed,
            sp: base + (seed >> 40) % (3 * PAGE),
            bp: if seed & 1 == 0 {
                base + 16
            } else {
                seed.rotate_left(7)
            },
        };
        unwinder.walk(regs, &mem);
        assert!(unwinder.addrs.len() <= MAX_NATIVE_FRAMES);
    }
    // Our own code, from a real instruction pointer but a stack that is not there.
    let here = garbage_registers_and_memory_end_the_walk as *const () as u64;
    assert!(unwinder.walk(
        Registers {
            ip: here,
            sp: 8,
            bp: 0
        },
        &mem
    ));
}

/// Counts the reads a walk makes (each is one `process_vm_readv` in a recording).
struct CountingMemory<'a> {
    inner: &'a FakeMemory,
    reads: std::sync::atomic::AtomicUsize,
}

impl MemoryReader for CountingMemory<'_> {
    fn read(
        &self,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), crate::record::process::memory::ReadError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.read(addr, buf)
    }
}

/// xorshift64: the fuzz test's inputs are the same on every run (a failure names its
/// iteration and can be replayed).
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// A fuzz test run by `cargo test`: the unwinder gets hostile unwind tables (this test
/// binary's own `.eh_frame` and `.eh_frame_hdr` with random bytes overwritten, or
/// random bytes altogether), random registers, and a random stack (words pointing into
/// the code, into the stack, or anywhere). Every walk ends without a panic, within the
/// frame limit, and reads at most its page budget.
#[test]
fn hostile_unwind_tables_registers_and_stacks_end_bounded() {
    use object::{Object, ObjectSection};
    // Real tables of a real library: libc's (this process maps it). The test binary's own
    // are 25 MB with polars linked, and copying them for every case cost a minute.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let libc = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .expect("libc in /proc/self/maps");
    let exe = std::fs::read(libc).unwrap();
    let obj = object::File::parse(&*exe).unwrap();
    let section = |name: &str| {
        let s = obj.section_by_name(name).unwrap();
        (s.address(), s.data().unwrap().to_vec())
    };
    let (text_svma, text) = section(".text");
    let (eh_svma, eh_frame) = section(".eh_frame");
    let (hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr");
    let code = text_svma..text_svma + text.len() as u64;

    let pid = std::process::id() as i32;
    let mut unwinder = NativeUnwinder::new(pid).unwrap();
    let stack_base = 0x7ff0_0000_0000u64;
    let stack_len = 64 * PAGE as usize;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for iteration in 0..1500 {
        // The tables: the real ones with up to 64 bytes overwritten, or noise.
        let corrupt = |real: &[u8], seed: &mut u64| -> Vec<u8> {
            if next(seed) % 4 == 0 {
                let len = (next(seed) % 4096) as usize;
                return (0..len).map(|_| next(seed) as u8).collect();
            }
            let mut bytes = real.to_vec();
            for _ in 0..next(seed) % 64 {
                let at = (next(seed) as usize) % bytes.len().max(1);
                if let Some(b) = bytes.get_mut(at) {
                    *b = next(seed) as u8;
                }
            }
            bytes
        };
        let eh = corrupt(&eh_frame, &mut seed);
        let hdr = corrupt(&eh_frame_hdr, &mut seed);
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(code.clone()),
            text: Some(SectionData::from_bytes(&text)),
            stubs_svma: None,
            stub_helper_svma: None,
            got_svma: None,
            unwind_info: None,
            eh_frame_svma: Some(eh_svma..eh_svma + eh.len() as u64),
            eh_frame: Some(SectionData::from_bytes(&eh)),
            eh_frame_hdr_svma: Some(hdr_svma..hdr_svma + hdr.len() as u64),
            eh_frame_hdr: Some(SectionData::from_bytes(&hdr)),
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        let mut fresh = UnwinderX86_64::new();
        fresh.add_module(Module::new("fuzz".into(), code.clone(), 0, info));
        unwinder.unwinder = fresh;
        // The module list names the same code, so that the walk does not read the maps
        // again for it (and replace the hostile tables by the real ones). A random
        // instruction pointer outside it still does, as in a recording.
        unwinder.modules = vec![ModuleInfo {
            range: code.clone(),
            bias: 0,
            path: "fuzz".into(),
            interpreter: false,
            file: None,
        }];

        // The stack: words into the code, into the stack (up or down), or anywhere.
        let mut stack = vec![0u8; stack_len];
        for w in stack.chunks_mut(8) {
            let r = next(&mut seed);
            let v = match r % 4 {
                0 => code.start + next(&mut seed) % (code.end - code.start),
                1 => stack_base + next(&mut seed) % stack_len as u64,
                2 => 0,
                _ => next(&mut seed),
            };
            w.copy_from_slice(&v.to_le_bytes());
        }
        let mut fake = FakeMemory::new();
        fake.map(stack_base, stack);
        let mem = CountingMemory {
            inner: &fake,
            reads: Default::default(),
        };
        let r = next(&mut seed);
        let regs = Registers {
            ip: if r % 8 == 0 {
                next(&mut seed)
            } else {
                code.start + next(&mut seed) % (code.end - code.start)
            },
            sp: if r % 16 == 1 {
                next(&mut seed)
            } else {
                stack_base + next(&mut seed) % stack_len as u64
            },
            bp: if r % 2 == 0 {
                stack_base + next(&mut seed) % stack_len as u64
            } else {
                next(&mut seed)
            },
        };
        unwinder.walk(regs, &mem);
        let reads = mem.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            unwinder.addrs.len() <= MAX_NATIVE_FRAMES,
            "iteration {iteration}"
        );
        assert!(
            reads <= MAX_STACK_PAGES,
            "iteration {iteration}: {reads} reads"
        );
        assert!(unwinder.sps.len() <= unwinder.addrs.len() + 1);
    }
}
