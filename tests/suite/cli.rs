//! The command line's contract, on the real binary: one meaning per exit status for
//! every command (0 success, 1 a bad or unreadable input, 2 a usage error), and a closed
//! pipe ends quietly with 0.

use std::io::Read;
use std::process::Stdio;

use crate::common::{golden_dir, tach};

/// A golden file cut in the middle of its sample data: a bad input.
fn corrupt_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let bytes = std::fs::read(golden_dir().join("cpu_recursive.bin")).unwrap();
    let path = dir.join("cut.bin");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    path
}

#[test]
fn a_bad_input_exits_1_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let cut = corrupt_copy(dir.path());
    let cut = cut.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["info", cut],
        vec!["verify", cut],
        vec!["rewrite", cut, "-o", out],
        vec!["export", "--collapsed", "-o", out, cut],
        vec!["export", "--pstats", "-o", "-", cut],
        vec!["export", "--gecko", "--out-dir", out, cut],
    ];
    if cfg!(feature = "query") {
        commands.push(vec!["query", "select count(*) from samples", cut]);
    }
    for args in commands {
        let o = tach().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
        // verify reports each file's verdict on stdout; the others on stderr.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(said.contains("cut.bin"), "{args:?} names no file: {said}");
    }
}

#[test]
fn a_usage_error_exits_2_in_every_command() {
    let bin = golden_dir().join("cpu_recursive.bin");
    let bin = bin.to_str().unwrap();
    for args in [
        vec!["export", bin],                                   // no format
        vec!["export", "--format", "nope", bin],               // unknown format
        vec!["export", "--collapsed", "--status", "hot", bin], // unknown status flag
        vec!["export", "--collapsed", "-o", "x", "--out-dir", "y", bin],
        vec!["export", "--collapsed", "--start", "5", "--end", "2", bin], // empty window
        vec!["info"],                                                     // clap: missing file
        vec!["frobnicate"],                                               // clap: unknown command
    ] {
        let o = tach().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
}

#[test]
fn a_closed_pipe_ends_quietly_with_0() {
    let bin = golden_dir().join("stdlib_tests_large.bin");
    for format in ["--collapsed", "--jsonl"] {
        let mut child = tach()
            .args(["export", format, "-o", "-"])
            .arg(&bin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one line's worth, then close the pipe as `head` does.
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 100];
        stdout.read_exact(&mut first).unwrap();
        drop(stdout);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{format}: {o:?}");
        assert!(
            o.stderr.is_empty(),
            "{format}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Each format's own options come from the exporter registry: `--help` lists them under
/// their format, a format takes its own, and another format's option is a usage error
/// that names the format it belongs to.
#[test]
fn format_options_come_from_the_registry() {
    let help = tach().args(["export", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let mut declared = 0;
    for exporter in tach::export::REGISTRY {
        for option in exporter.options() {
            declared += 1;
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("--{} ", option.name)))
                .unwrap_or_else(|| panic!("--{} is not in --help:\n{help}", option.name));
            assert!(line.contains(&format!("{}: ", exporter.name())), "{line}");
        }
    }
    assert!(
        declared >= 3,
        "flamegraph, heatmap and pprof declare options"
    );

    let bin = golden_dir().join("threads_mixed.bin");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = |args: &[&str]| {
        tach()
            .arg("export")
            .args(args)
            .arg("-o")
            .arg(&out)
            .arg(&bin)
            .output()
            .unwrap()
    };
    for ok in [
        &["--flamegraph", "--per-thread"][..],
        &[
            "--heatmap",
            "--source-root",
            "/a=/b",
            "--source-root",
            "/c=/d",
        ],
        &["--format", "pprof", "--start-time", "none"],
    ] {
        let o = run(ok);
        assert!(
            o.status.success(),
            "{ok:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for (args, message) in [
        (
            &["--collapsed", "--start-time", "none"][..],
            "--start-time is an option of --pprof, not of --collapsed",
        ),
        (
            &["--speedscope", "--per-thread"],
            "--per-thread is an option of --flamegraph",
        ),
        (
            &["--heatmap", "--source-root", "nothing"],
            "--source-root: 'nothing': expected OLD=NEW",
        ),
        (
            &["--pprof", "--start-time", "soon"],
            "--start-time: 'soon': expected an RFC 3339 time",
        ),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

/// The recording options are one definition (`record::options::RecordSpec`) for `tach
/// record` and `tach top`'s live view (and `python -m tach run` and `tach.start()`, in
/// tests/python/recorder/test_record.py): a bad one gets the same message and status from each,
/// before anything is started.
#[test]
fn a_bad_recording_option_says_the_same_everywhere() {
    for (flags, message) in [
        (
            &["--mode", "bogus"][..],
            "unknown mode 'bogus': use wall, cpu, gil or exception",
        ),
        (
            &["--compression", "lz4"],
            "unknown compression 'lz4': use auto, zstd or none",
        ),
        (
            &["-r", "0"],
            "the rate must be a positive number of samples per second, not 0",
        ),
        (
            &["-d", "nan"],
            "the duration must be a positive number of seconds, not NaN",
        ),
    ] {
        for front in [
            &["record", "--pid", "1"][..],
            &["record", "--in-process"],
            &["top", "--pid", "1"],
        ] {
            let mut args: Vec<&str> = front.to_vec();
            args.extend_from_slice(flags);
            if front[1] == "--in-process" {
                args.extend(["--", "python3", "-c", "pass"]);
            }
            let o = tach().args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(message), "{args:?}: {err}");
        }
    }
}
