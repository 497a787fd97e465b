//! The `tach` binary's heap reserve (src/alloc.rs): glibc's heap grown once and advised
//! onto transparent huge pages before anything else runs, seen in the smaps of a real
//! `tach` process. The process is held at its input's open: the input is a FIFO that no
//! one has opened for writing yet.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::tach;

/// The size in KiB of each `[heap]` mapping of `pid` whose VmFlags hold `hg`
/// (MADV_HUGEPAGE).
fn advised_heap_kib(pid: u32) -> Vec<u64> {
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let (mut in_heap, mut size) = (false, 0);
    for line in smaps.lines() {
        if line.contains(" rw-p ") || line.contains(" r--p ") || line.contains(" r-xp ") {
            in_heap = line.ends_with("[heap]");
        } else if let Some(kib) = line.strip_prefix("Size:") {
            size = kib.trim().trim_end_matches(" kB").parse().unwrap_or(0);
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            if in_heap && flags.split_whitespace().any(|f| f == "hg") {
                found.push(size);
            }
        }
    }
    found
}

#[test]
fn the_binary_reserves_its_heap_on_huge_pages() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        eprintln!("SKIPPED: the heap reserve is for glibc on Linux");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("held.bin");
    let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let mut child = tach()
        .arg("verify")
        .arg(&fifo)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut advised = Vec::new();
    while advised.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        advised = advised_heap_kib(child.id());
    }
    // Let it go: each time it opens the FIFO (more than once), it is opened and closed
    // for writing: an empty, bad input.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        drop(writer);
        assert!(Instant::now() < deadline, "tach did not end");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status.code(), Some(1), "an empty input is a bad input");
    // 24 MiB less the stretch before the first 2 MiB boundary.
    assert!(
        advised.iter().any(|&kib| kib >= 22 << 10),
        "no [heap] mapping of 22 MiB or more advised onto huge pages: {advised:?}"
    );
}
