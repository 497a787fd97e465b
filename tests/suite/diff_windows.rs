//! `tach diff` with a window per side (`--base-since`/`--base-until` for the base,
//! `--since`/`--until` for the new side) over one directory of segments, made by a real
//! recording (`tach record --rotate`) of a program that runs `alpha` for two seconds,
//! then `beta` for two seconds. About 6 s (the recording).

use std::path::Path;
use std::process::Command;

use chrono::{NaiveDateTime, TimeDelta};

use crate::common::{skip, tach};

const PROGRAM: &str = "\
import time
def alpha(end):
    while time.monotonic() < end:
        sum(i * i for i in range(200))
def beta(end):
    while time.monotonic() < end:
        sum(i * i for i in range(200))
t = time.monotonic()
alpha(t + 2.1)
beta(t + 4.2)
";

/// The start of the first segment in `dir`, from its name (`tach-YYYYMMDDTHHMMSS.mmmZ-...`).
fn first_start(dir: &Path) -> NaiveDateTime {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tach"))
        .collect();
    names.sort();
    assert!(names.len() >= 2, "segments: {names:?}");
    NaiveDateTime::parse_from_str(&names[0][5..24], "%Y%m%dT%H%M%S%.3f").unwrap()
}

fn at(t0: NaiveDateTime, ms: i64) -> String {
    (t0 + TimeDelta::milliseconds(ms))
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// `tach diff --format json ARGS DIR DIR`'s rows: function -> (base %, new %, verdict).
fn diff_rows(dir: &Path, args: &[&str]) -> Vec<(String, f64, f64, String)> {
    let o = tach()
        .args(["diff", "--format", "json", "--metric", "total"])
        .args(args)
        .arg(dir)
        .arg(dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?}: {err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["funcname"].as_str().unwrap().to_string(),
                r["base_pct"].as_f64().unwrap(),
                r["new_pct"].as_f64().unwrap(),
                r["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn row<'a>(rows: &'a [(String, f64, f64, String)], name: &str) -> &'a (String, f64, f64, String) {
    rows.iter()
        .find(|r| r.0 == name)
        .unwrap_or_else(|| panic!("no row for {name}: {rows:?}"))
}

#[test]
fn diff_compares_two_windows_of_one_segment_directory() {
    if Command::new("python3").arg("-V").output().is_err() {
        skip("diff_windows: no python3 here; the per-side windows of tach diff did not run");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("phases.py");
    std::fs::write(&script, PROGRAM).unwrap();
    let segs = dir.path().join("segs");
    let o = tach()
        .args(["record", "-r", "200", "--rotate", "1s", "-o"])
        .arg(&segs)
        .args(["--", "python3"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t0 = first_start(&segs);
    // alpha's time against beta's, a margin from each end of the phases.
    let (b0, b1, n0, n1) = (at(t0, 300), at(t0, 1700), at(t0, 2700), at(t0, 3900));
    let rows = diff_rows(
        &segs,
        &[
            "--base-since",
            &b0,
            "--base-until",
            &b1,
            "--since",
            &n0,
            "--until",
            &n1,
        ],
    );
    let alpha = row(&rows, "alpha");
    let beta = row(&rows, "beta");
    assert!(alpha.1 > 90.0 && alpha.2 < 5.0, "{rows:?}");
    assert!(beta.1 < 5.0 && beta.2 > 90.0, "{rows:?}");
    assert_eq!(alpha.3, "shrank", "{rows:?}");
    assert_eq!(beta.3, "grew", "{rows:?}");

    // Without a base window, --since/--until apply to both sides: the same samples.
    let same = diff_rows(&segs, &["--since", &n0, "--until", &n1]);
    assert!(!same.is_empty());
    for r in &same {
        assert_eq!(r.1, r.2, "{same:?}");
        assert_eq!(r.3, "no significant change", "{same:?}");
    }
    assert!(row(&same, "beta").2 > 90.0, "{same:?}");

    // A base window open at one end: from the start to b1 is alpha's too.
    let open = diff_rows(&segs, &["--base-until", &b1, "--since", &n0]);
    assert_eq!(row(&open, "alpha").3, "shrank", "{open:?}");

    // An empty base window is refused, naming the options' values.
    let o = tach()
        .args(["diff", "--base-since", &b1, "--base-until", &b0])
        .arg(&segs)
        .arg(&segs)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&b1) && err.contains(&b0), "{err}");
    assert!(
        err.contains("--base-since") && err.contains("--base-until"),
        "{err}"
    );
}
