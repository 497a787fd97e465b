use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;
use crate::record::memory::{FakeMemory, ProcessVmReader};
use crate::record::pause::ThreadPause;
use crate::record::ptrace_pause::PtracePauser;

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
    let child = Killed(
        Command::new("sleep")
            .arg("30")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id() as i32;
    // Until it has loaded its libraries and sleeps.
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
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(5));
    }
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
