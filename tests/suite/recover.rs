//! Crash journals against CPython's own files: every golden file is written again by
//! the writer with a crash journal, synced every 97 samples, the writer is abandoned
//! unfinished (as a killed process leaves it) and `tach recover` (the real binary)
//! rebuilds the file. An uncompressed recovery must equal CPython's file byte for byte
//! (less its stats block, which a recovery cannot know); a compressed one must hold the
//! same samples and tables.

use std::path::Path;

use tach::journal_path;
use tach::rewrite::{builder_like, final_flush_order};
use tach::{ByteOrder, Compression, FrameEntry, TachFile};

use crate::common::{golden_bins, name, tach};

/// Writes `src`'s samples with a journal beside `out`, syncing every 97 samples, and
/// abandons the writer.
fn write_and_abandon(src: &TachFile, out: &Path) {
    let mut w = builder_like(src)
        .stats(None)
        .journal(Some(journal_path(out)))
        .create(out)
        .unwrap();
    for (thread_id, interpreter_id) in final_flush_order(src).unwrap() {
        w.register_thread(thread_id, interpreter_id);
    }
    let mut stream = src.samples();
    let mut n = 0u64;
    while let Some(s) = stream.next_sample().unwrap() {
        let stack: Vec<u32> = s
            .stack
            .iter()
            .map(|&f| {
                let e = src.frames()[f as usize];
                let filename = w.intern_string(src.string_bytes(e.filename));
                let funcname = w.intern_string(src.string_bytes(e.funcname));
                w.intern_frame(FrameEntry {
                    filename,
                    funcname,
                    ..e
                })
            })
            .collect();
        w.write_sample(
            s.thread_id,
            s.interpreter_id,
            s.timestamp_us,
            s.status,
            &stack,
        )
        .unwrap();
        n += 1;
        if n % 97 == 0 {
            w.sync_journal(s.timestamp_us).unwrap();
        }
    }
    w.sync_journal(0).unwrap();
    // A killed process runs no destructor.
    std::mem::forget(w);
}

/// The file less its footer and stats block: header, samples, tables.
fn without_tail(bytes: &[u8], has_stats: bool) -> &[u8] {
    let end = bytes.len() - 32;
    if !has_stats {
        return &bytes[..end];
    }
    let size = u32::from_ne_bytes(bytes[end - 4..end].try_into().unwrap()) as usize;
    &bytes[..end - size]
}

#[test]
fn every_golden_file_is_recovered_from_an_abandoned_journal() {
    let dir = tempfile::tempdir().unwrap();
    let mut byte_identical = 0;
    for bin in golden_bins() {
        let src = TachFile::open(&bin).unwrap();
        if src.header().byte_order != ByteOrder::NATIVE {
            continue; // the writer writes this machine's order; roundtrip.rs covers swaps
        }
        let out = dir.path().join(format!("{}.tach", name(&bin)));
        write_and_abandon(&src, &out);
        let journal = journal_path(&out);

        // What is left says what it is and how to recover it.
        let v = tach().arg("verify").arg(&out).output().unwrap();
        let said = String::from_utf8_lossy(&v.stdout);
        assert_eq!(v.status.code(), Some(1), "{}", name(&bin));
        assert!(
            said.contains(&format!("tach recover {}", journal.display())),
            "{said}"
        );
        let i = tach().arg("info").arg(&journal).output().unwrap();
        let said = String::from_utf8_lossy(&i.stderr);
        assert_eq!(i.status.code(), Some(1));
        assert!(
            said.contains("crash journal") && said.contains("tach recover"),
            "{said}"
        );
        // Not misread as a (big-endian) TACH file: its magic is no TACH magic.
        assert!(said.contains("not a TACH file"), "{said}");

        // The default output replaces the unfinished file.
        let r = tach().arg("recover").arg(&journal).output().unwrap();
        assert!(r.status.success(), "{}: {r:?}", name(&bin));
        let got = TachFile::open(&out).unwrap();
        assert_eq!(
            got.collect_samples().unwrap(),
            src.collect_samples().unwrap(),
            "{}",
            name(&bin)
        );
        assert_eq!(got.frames(), src.frames());
        assert_eq!(got.header().sample_count, src.header().sample_count);
        assert_eq!(got.header().thread_count, src.header().thread_count);
        if src.header().compression == Compression::None {
            let ours = std::fs::read(&out).unwrap();
            let theirs = std::fs::read(&bin).unwrap();
            assert!(
                without_tail(&ours, false) == without_tail(&theirs, src.stats().is_some()),
                "{}: the recovered file differs from CPython's",
                name(&bin)
            );
            byte_identical += 1;
        }
    }
    assert!(
        byte_identical >= 3,
        "only {byte_identical} uncompressed files"
    );
}

#[test]
fn recover_reports_a_torn_tail_and_refuses_what_is_not_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let bin = golden_bins()
        .into_iter()
        .find(|b| name(b) == "threads_mixed")
        .unwrap();
    let src = TachFile::open(&bin).unwrap();
    let out = dir.path().join("t.tach");
    write_and_abandon(&src, &out);
    let journal = journal_path(&out);
    let bytes = std::fs::read(&journal).unwrap();
    // Cut inside the last record: the process died in the middle of its write.
    std::fs::write(&journal, &bytes[..bytes.len() - 3]).unwrap();
    let fixed = dir.path().join("fixed.tach");
    let r = tach()
        .args(["recover", "-o"])
        .arg(&fixed)
        .arg(&journal)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{said}");
    assert!(said.contains("dropped the last"), "{said}");
    let got = TachFile::open(&fixed).unwrap().collect_samples().unwrap();
    assert!(!got.is_empty() && (got.len() as u64) < src.header().sample_count);

    let r = tach()
        .args(["recover", "-o"])
        .arg(&fixed)
        .arg(&bin)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{said}");
    assert!(
        said.contains("byte 0") && said.contains("not a tach crash journal"),
        "{said}"
    );
}
