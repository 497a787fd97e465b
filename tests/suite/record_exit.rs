//! `tach record`'s exit status when the recording cannot be made (docs/recording.md,
//! "Exit status"): the program tach starts runs to its end unrecorded, and tach exits
//! with its status, or 1 when it exited 0; `--pid` exits 1. On pyenv's CPython 3.10,
//! where `--async-aware` cannot read asyncio's tasks. Each test takes about a second.

use std::path::PathBuf;

use crate::common::{skip, tach};

/// The newest of pyenv's CPython 3.10 here, or None (with a loud skip).
fn python310() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let versions = PathBuf::from(home).join(".pyenv/versions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&versions)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.starts_with("3.10.")
                .then(|| versions.join(name).join("bin/python3.10"))
        })
        .filter(|p| p.exists())
        .collect();
    found.sort();
    if found.is_empty() {
        skip("record_exit: no pyenv CPython 3.10 here; the exit status checks did not run");
    }
    found.pop()
}

/// A program that sleeps a moment (long enough to be attached to), leaves a mark that it
/// ran to its end and exits with its second argument.
const PROGRAM: &str = "import sys, time\ntime.sleep(0.5)\nopen(sys.argv[1], 'w').write('ran')\nsys.exit(int(sys.argv[2]))\n";

#[test]
fn a_program_that_cannot_be_recorded_runs_and_tach_exits_non_zero() {
    let Some(python) = python310() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("app.py");
    std::fs::write(&script, PROGRAM).unwrap();
    for (program_status, tach_status) in [(0, 1), (3, 3)] {
        let out = dir.path().join(format!("app-{program_status}.tach"));
        let mark = dir.path().join(format!("ran-{program_status}"));
        let o = tach()
            .args(["record", "--async-aware", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&python)
            .arg(&script)
            .arg(&mark)
            .arg(program_status.to_string())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(tach_status), "{err}");
        assert!(err.contains("tach: cannot record"), "{err}");
        assert!(err.contains("3.10"), "the message names the version: {err}");
        assert!(err.contains("the program runs on unrecorded"), "{err}");
        assert!(mark.exists(), "the program ran to its end: {err}");
        // The empty file that says nothing was recorded is a valid one.
        let v = tach().arg("verify").arg(&out).output().unwrap();
        assert!(v.status.success(), "{v:?}");
    }
}

#[test]
fn a_recording_that_ends_in_error_exits_non_zero() {
    let Some(python) = python310() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("app.py");
    std::fs::write(&script, PROGRAM).unwrap();
    // Its file on a full disk: the samples cannot be written.
    for (program_status, tach_status) in [(0, 1), (3, 3)] {
        let mark = dir.path().join(format!("ran-{program_status}"));
        let o = tach()
            .args(["record", "-o", "/dev/full", "--"])
            .arg(&python)
            .arg(&script)
            .arg(&mark)
            .arg(program_status.to_string())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(tach_status), "{err}");
        assert!(err.contains("No space left on device"), "{err}");
        assert!(mark.exists(), "the program ran to its end: {err}");
    }
}

#[test]
fn an_attached_recording_that_cannot_be_made_exits_1() {
    let Some(python) = python310() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut target = std::process::Command::new(&python)
        .args(["-c", "import time; time.sleep(30)"])
        .spawn()
        .unwrap();
    // Its interpreter loaded (attaching before would be another error, also 1).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = dir.path().join("pid.tach");
    let o = tach()
        .args(["record", "--async-aware", "-d", "1", "--pid"])
        .arg(target.id().to_string())
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("3.10"), "the message names the version: {err}");
    // One that ends in error (its file on a full disk) too.
    let o = tach()
        .args(["record", "-d", "0.5", "-o", "/dev/full", "--pid"])
        .arg(target.id().to_string())
        .output()
        .unwrap();
    let _ = target.kill();
    let _ = target.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
}
