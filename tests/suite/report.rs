//! `tach top` against CPython's own pstats and collapsed stacks of the golden files,
//! and `tach diff` on real recordings made with CPython's sampler (tests/data/diff/,
//! made by scripts/make-diff-data).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use tach::aggregate::ProfileIndex;
use tach::report::{diff, top, DiffOptions, DiffReport, GroupBy, TopOptions, TopReport, Verdict};
use tach::{SampleFilter, TachFile};

use crate::common::{fed_to_writer, golden_bins, golden_output, golden_path, name, skip, tach};

/// (filename, lineno, funcname) -> (direct, cumulative, direct_s, cumulative_s), from
/// CPython's marshalled pstats read by python3's own marshal.
type Pstats = HashMap<(String, i64, String), (u64, u64, f64, f64)>;

fn load_pstats(stem: &str) -> Option<Pstats> {
    let bytes = golden_output(stem, ".pstats");
    let script = r#"
import json, marshal, sys
d = marshal.loads(sys.stdin.buffer.read())
# Floats as repr() strings: Rust's parse reads them back exactly.
print(json.dumps([[list(k), v[0], v[1], repr(v[2]), repr(v[3])] for k, v in d.items() if len(k) == 3]))
"#;
    let run = || -> std::io::Result<std::process::Output> {
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child.stdin.take().unwrap().write_all(&bytes)?;
        child.wait_with_output()
    };
    let out = match run() {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!("python3 could not read {stem}.pstats: {o:?}"),
        Err(e) => {
            skip(&format!(
                "report: no python3 to read marshalled pstats ({e})"
            ));
            return None;
        }
    };
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    Some(
        v.iter()
            .map(|e| {
                let k = &e[0];
                (
                    (
                        k[0].as_str().unwrap().to_string(),
                        k[1].as_i64().unwrap(),
                        k[2].as_str().unwrap().to_string(),
                    ),
                    (
                        e[1].as_u64().unwrap(),
                        e[2].as_u64().unwrap(),
                        e[3].as_str().unwrap().parse().unwrap(),
                        e[4].as_str().unwrap().parse().unwrap(),
                    ),
                )
            })
            .collect(),
    )
}

fn top_of(paths: &[PathBuf], options: &TopOptions) -> TopReport {
    let files: Vec<TachFile> = paths.iter().map(|p| TachFile::open(p).unwrap()).collect();
    top(&files, &SampleFilter::default(), options).unwrap()
}

/// Every golden file by line equals CPython's pstats: self and total samples and
/// seconds (bit for bit), and the sample count CPython's replay says it read.
#[test]
fn top_by_line_is_cpythons_pstats() {
    let mut compared = 0;
    for bin in golden_bins() {
        let stem = name(&bin);
        let Some(want) = load_pstats(&stem) else {
            return;
        };
        let r = top_of(
            std::slice::from_ref(&bin),
            &TopOptions {
                by: GroupBy::Line,
                ..Default::default()
            },
        );
        let got: Pstats = r
            .rows
            .iter()
            .map(|x| {
                (
                    (
                        x.key.filename.clone(),
                        x.key.lineno as i64,
                        x.key.funcname.clone(),
                    ),
                    (x.self_samples, x.total_samples, x.self_s, x.total_s),
                )
            })
            .collect();
        assert_eq!(got.len(), r.rows.len(), "{stem}: duplicate keys");
        assert_eq!(got, want, "{stem}");
        // CPython's table says "Replaying N samples": the percentages' denominator.
        let text = String::from_utf8(golden_output(&stem, ".pstats.txt")).unwrap();
        let replayed: u64 = text
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{stem}.pstats.txt: {}", &text[..40.min(text.len())]));
        assert_eq!(r.samples, replayed, "{stem}");
        compared += 1;
    }
    assert!(compared >= 18);
}

/// CPython's table rows for cpu_recursive, as its `replay --pstats` printed them
/// (percent to one decimal).
#[test]
fn top_percentages_are_cpythons() {
    let r = top_of(
        &[golden_path("cpu_recursive.bin")],
        &TopOptions {
            by: GroupBy::Line,
            ..Default::default()
        },
    );
    let text = String::from_utf8(golden_output("cpu_recursive", ".pstats.txt")).unwrap();
    let mut rows = 0;
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 6 || !cols[0].contains('/') || !line.ends_with(')') {
            continue;
        }
        let (counts, loc) = (cols[0], &cols[5..].join(" "));
        // `cpu_recursive.py:7(fib)`: CPython prints the base name.
        let row = r
            .rows
            .iter()
            .find(|x| {
                let label = x.key.label(GroupBy::Line);
                label.rsplit('/').next() == Some(loc.as_str())
            })
            .unwrap_or_else(|| panic!("no row {loc}"));
        assert_eq!(
            format!("{}/{}", row.self_samples, row.total_samples),
            counts
        );
        assert_eq!(format!("{:.1}", row.self_pct), cols[1], "{loc}");
        assert_eq!(format!("{:.3}", row.self_s), cols[2], "{loc}");
        assert_eq!(format!("{:.1}", row.total_pct), cols[3], "{loc}");
        assert_eq!(format!("{:.3}", row.total_s), cols[4], "{loc}");
        rows += 1;
    }
    assert_eq!(rows, r.rows.len());
}

/// By function against CPython's collapsed stacks (`file:func:line` frames, base
/// names): self is the leaf's function, total counts a function once per stack
/// however deep it recurses (deep_recursion: stacks 150-349 frames of one function).
#[test]
fn top_by_function_is_cpythons_collapsed_stacks() {
    for stem in ["cpu_recursive", "deep_recursion", "threads_mixed"] {
        let text = String::from_utf8(golden_output(stem, ".collapsed.txt")).unwrap();
        let mut want: HashMap<(String, String), (u64, u64)> = HashMap::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            let count: u64 = count.parse().unwrap();
            let mut frames: Vec<(String, String)> = stack
                .split(';')
                .filter(|f| !f.starts_with("tid:"))
                .map(|f| {
                    let mut parts = f.rsplitn(3, ':');
                    let (_line, func, file) = (parts.next(), parts.next(), parts.next());
                    (file.unwrap().to_string(), func.unwrap().to_string())
                })
                .collect();
            if let Some(leaf) = frames.last() {
                want.entry(leaf.clone()).or_default().0 += count;
            }
            frames.sort();
            frames.dedup();
            for f in frames {
                want.entry(f).or_default().1 += count;
            }
        }
        let r = top_of(
            &[golden_path(&format!("{stem}.bin"))],
            &TopOptions::default(),
        );
        let got: HashMap<(String, String), (u64, u64)> = r
            .rows
            .iter()
            .map(|x| {
                let base = x.key.filename.rsplit('/').next().unwrap().to_string();
                (
                    (base, x.key.funcname.clone()),
                    (x.self_samples, x.total_samples),
                )
            })
            .collect();
        assert_eq!(got, want, "{stem}");
    }
}

#[test]
fn top_command_formats_filters_and_errors() {
    let bin = golden_path("threads_mixed.bin");
    let bin = bin.to_str().unwrap();
    // JSON: the same numbers as the library, limited and sorted by total.
    let o = tach()
        .args(["top", "--format", "json", "--sort", "total", "-l", "3", bin])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let totals: Vec<f64> = rows
        .iter()
        .map(|r| r["total_s"].as_f64().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");
    // --thread keeps one thread's samples: the same as exporting that thread's pstats.
    let file = TachFile::open(bin).unwrap();
    let index = ProfileIndex::build(&file, &SampleFilter::default()).unwrap();
    let t = &index.threads[1];
    let o = tach()
        .args([
            "top",
            "--format",
            "csv",
            "--thread",
            &t.thread_id.to_string(),
            bin,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let csv = String::from_utf8(o.stdout).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "self_samples").unwrap();
    let self_sum: u64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        self_sum <= t.samples && self_sum > 0,
        "{self_sum} of {}",
        t.samples
    );
    // --per-file: a file column.
    let o = tach()
        .args(["top", "--per-file", "--format", "csv", bin, bin])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("file,filename,"));
    // Errors: a missing or cut file exits 1 naming it (and the byte); a bad option
    // exits 2.
    let o = tach().args(["top", "/nonexistent/x.bin"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/x.bin"));
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.bin");
    let whole = std::fs::read(golden_path("cpu_recursive.bin")).unwrap();
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let cut = cut.to_str().unwrap();
    for args in [vec!["top", cut], vec!["diff", bin, cut]] {
        let o = tach().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(said.contains("cut.bin") && said.contains("byte"), "{said}");
    }
    for args in [
        vec!["top", "--sort", "speed", bin],
        vec!["top", "--status", "hot", bin],
        vec!["top", "--start", "2", "--end", "1", bin],
        vec!["diff", bin],
        vec!["diff", "--base", bin, bin],
    ] {
        let o = tach().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
}

fn diff_data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/diff")
        .join(name)
}

fn diff_of(base: &[PathBuf], new: &[PathBuf]) -> DiffReport {
    let open = |ps: &[PathBuf]| -> Vec<TachFile> {
        ps.iter().map(|p| TachFile::open(p).unwrap()).collect()
    };
    diff(
        &open(base),
        &open(new),
        (&SampleFilter::default(), &SampleFilter::default()),
        &DiffOptions::default(),
    )
    .unwrap()
}

fn changed(r: &DiffReport) -> Vec<String> {
    r.rows
        .iter()
        .filter(|x| x.verdict != Verdict::NoSignificantChange)
        .map(|x| format!("{} {:?} {:+.2}", x.key.funcname, x.verdict, x.change_points))
        .collect()
}

/// The shares a diff compares are `tach top`'s self percentages of each side (checked
/// against CPython above).
fn assert_shares_are_tops(r: &DiffReport, base: &Path, new: &Path) {
    let tb = top_of(&[base.to_path_buf()], &TopOptions::default());
    let tn = top_of(&[new.to_path_buf()], &TopOptions::default());
    for x in &r.rows {
        let pct = |t: &TopReport| {
            t.rows
                .iter()
                .find(|y| y.key == x.key)
                .map_or(0.0, |y| y.self_pct)
        };
        assert!((x.base_pct - pct(&tb)).abs() < 1e-9, "{:?}", x.key);
        assert!((x.new_pct - pct(&tn)).abs() < 1e-9, "{:?}", x.key);
    }
}

/// (a) One program recorded at 1 kHz and at 10 kHz (ten times the samples): no
/// function changed.
#[test]
fn diff_of_two_rates_finds_no_change() {
    let (b, n) = (diff_data("base_1khz.bin"), diff_data("base_10khz.bin"));
    let r = diff_of(std::slice::from_ref(&b), std::slice::from_ref(&n));
    assert!(
        r.new.samples > 8 * r.base.samples,
        "{} {}",
        r.base.samples,
        r.new.samples
    );
    assert!(r.tested >= 9, "{}", r.tested);
    assert_eq!(changed(&r), Vec::<String>::new());
    assert_shares_are_tops(&r, &b, &n);
}

/// (b) The same program with `parse` doing twice the work: parse comes first and
/// grew; none of the eight unrelated functions is flagged (their shares shrink a
/// little, as shares must, within noise). With one run a side and two.
#[test]
fn diff_flags_the_function_made_slower_and_nothing_else() {
    let one = diff_of(&[diff_data("base_1khz.bin")], &[diff_data("slow_1khz.bin")]);
    let two = diff_of(
        &[diff_data("base_1khz.bin"), diff_data("base_1khz_b.bin")],
        &[diff_data("slow_1khz.bin"), diff_data("slow_1khz_b.bin")],
    );
    for r in [&one, &two] {
        assert_eq!(r.rows[0].key.funcname, "parse");
        assert_eq!(changed(r).len(), 1, "{:?}", changed(r));
        assert_eq!(r.rows[0].verdict, Verdict::Grew);
        // Twice the work: about 1.8 to 2.2 times the share before the others shrink.
        let ratio = r.rows[0].new_pct / r.rows[0].base_pct;
        assert!((1.5..2.5).contains(&ratio), "{ratio}");
    }
    assert_shares_are_tops(
        &one,
        &diff_data("base_1khz.bin"),
        &diff_data("slow_1khz.bin"),
    );
    // Two runs a side: the spread between runs is part of the noise, so the error of
    // a side's mean is at least what that spread says.
    assert_eq!(two.base.files.len(), 2);
}

/// (c) CPython issue #154032: the golden cpu_recursive.bin (1 kHz) against the same
/// script recorded at 10 kHz. Raw counts of fib differ ten-fold (-90% from 10 kHz to
/// 1 kHz); its share does not, and nothing is flagged, either way round.
#[test]
fn diff_across_rates_compares_shares_not_counts() {
    let (k1, k10) = (
        golden_path("cpu_recursive.bin"),
        diff_data("cpu_recursive_10khz.bin"),
    );
    let fib_samples = |p: &Path| {
        top_of(&[p.to_path_buf()], &TopOptions::default())
            .rows
            .iter()
            .find(|x| x.key.funcname == "fib")
            .unwrap()
            .self_samples as f64
    };
    let raw_change = fib_samples(&k1) / fib_samples(&k10) - 1.0;
    assert!((-0.92..-0.88).contains(&raw_change), "{raw_change}");
    for (b, n) in [(&k10, &k1), (&k1, &k10)] {
        let r = diff_of(std::slice::from_ref(b), std::slice::from_ref(n));
        assert_eq!(changed(&r), Vec::<String>::new());
        let fib = r.rows.iter().find(|x| x.key.funcname == "fib").unwrap();
        assert!(fib.change_points.abs() < 1.0, "{}", fib.change_points);
        assert!(fib.base_pct > 95.0 && fib.new_pct > 95.0);
        assert_shares_are_tops(&r, b, n);
    }
}

#[test]
fn diff_command_is_deterministic_in_every_format() {
    let (b, n) = (diff_data("base_1khz.bin"), diff_data("slow_1khz.bin"));
    let (b, n) = (b.to_str().unwrap(), n.to_str().unwrap());
    let run = |args: &[&str]| {
        let o = tach().args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let json = run(&["diff", "--format", "json", b, n]);
    assert_eq!(json, run(&["diff", "--format", "json", b, n]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["rows"][0]["funcname"], "parse");
    assert_eq!(v["rows"][0]["verdict"], "grew");
    let csv = run(&["diff", "--format", "csv", "--base", b, "--new", n]);
    let first = csv.lines().nth(1).unwrap();
    assert!(
        first.contains(",parse,") && first.ends_with(",grew"),
        "{first}"
    );
    let table = run(&["diff", "--by", "line", "-l", "3", b, n]);
    assert_eq!(table.lines().count(), 2 + 3, "{table}");
}

/// The differential flamegraph of (b): parse's frame shows the diff's base and new
/// shares and the change (parse calls nothing, so its frame's share is its self share)
/// and is red; encode, which shrank, is blue.
#[test]
fn diff_flamegraph_shows_the_shares_and_colours_by_change() {
    let open = |n: &str| vec![TachFile::open(diff_data(n)).unwrap()];
    let (base, new) = (open("base_1khz.bin"), open("slow_1khz.bin"));
    let r = diff(
        &base,
        &new,
        (&SampleFilter::default(), &SampleFilter::default()),
        &DiffOptions::default(),
    )
    .unwrap();
    let mut svg = Vec::new();
    tach::report::write_flamegraph(
        &base,
        &new,
        (&SampleFilter::default(), &SampleFilter::default()),
        GroupBy::Function,
        "t",
        &mut svg,
    )
    .unwrap();
    let svg = String::from_utf8(svg).unwrap();
    for x in &r.rows[..2] {
        let name = format!("({})", x.key.funcname);
        let at = svg
            .find(&format!("{name} [base "))
            .unwrap_or_else(|| panic!("no frame {name}"));
        let frame = &svg[at..at + 400];
        let shares = format!("[base {:.2}%] (", x.base_pct);
        assert!(frame.contains(&shares), "{name}: {shares} not in {frame}");
        let shares = format!("{:.2}%; {:+.2}%)", x.new_pct, x.change_points);
        assert!(frame.contains(&shares), "{name}: {shares} not in {frame}");
        let fill = if x.change_points > 0.0 {
            "fill=\"rgb(255,"
        } else {
            ",255)\""
        };
        assert!(frame.contains(fill), "{name}: {frame}");
    }
}

/// The table `tach top --by line` prints has CPython's `replay --pstats` rows: the same
/// counts, percentages and seconds as CPython printed them, largest self first.
#[test]
fn top_table_prints_cpythons_pstats_rows() {
    for stem in ["cpu_recursive", "threads_mixed", "stdlib_tests_large"] {
        let bin = golden_path(&format!("{stem}.bin"));
        let o = tach()
            .args(["top", "--by", "line", "-l", "1000000"])
            .arg(&bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let ours = String::from_utf8(o.stdout).unwrap();
        let theirs = String::from_utf8(golden_output(stem, ".pstats.txt")).unwrap();
        // A row: `self/total self% self_s total% total_s label`; CPython prints the
        // file's base name, so the label is compared from its last '/'.
        let rows = |text: &str, skip_header: &str| -> Vec<Vec<String>> {
            text.lines()
                .skip_while(|l| !l.contains(skip_header))
                .skip(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .filter(|c| c.len() >= 6 && c[0].contains('/'))
                .map(|c| {
                    let label = c[5..].join(" ");
                    let base = match label.split_once('(') {
                        Some((path, rest)) => {
                            format!("{}({rest}", path.rsplit('/').next().unwrap())
                        }
                        None => label.clone(),
                    };
                    let mut row: Vec<String> = c[..5].iter().map(|s| s.to_string()).collect();
                    row.push(base);
                    row
                })
                .collect()
        };
        let mine = rows(&ours, "self/total");
        let want = rows(&theirs, "nsamples");
        assert!(want.len() > 10, "{stem}: {} CPython rows", want.len());
        // Largest self first.
        let selfs: Vec<u64> = mine
            .iter()
            .map(|r| r[0].split('/').next().unwrap().parse().unwrap())
            .collect();
        assert!(selfs.windows(2).all(|w| w[0] >= w[1]), "{stem}: not sorted");
        // CPython's table merges rows whose base names agree (two packages'
        // `__init__.py:11(<module>)` are one row); tach keeps the full paths apart, as
        // CPython's marshalled pstats do (top_by_line_is_cpythons_pstats). Such labels
        // are left out here.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for r in &mine {
            *seen.entry(r[5].as_str()).or_default() += 1;
        }
        let unique = |r: &&Vec<String>| seen.get(r[5].as_str()).is_none_or(|&n| n == 1);
        let a: Vec<Vec<String>> = mine.iter().filter(unique).cloned().collect();
        let b: Vec<Vec<String>> = want.iter().filter(unique).cloned().collect();
        assert!(
            a.len() + 10 >= mine.len(),
            "{stem}: {} shared base names",
            mine.len() - a.len()
        );
        let (mut a, mut b) = (a, b);
        a.sort();
        b.sort();
        let only_ours: Vec<_> = a.iter().filter(|r| !b.contains(r)).take(5).collect();
        let only_theirs: Vec<_> = b.iter().filter(|r| !a.contains(r)).take(5).collect();
        assert!(
            a == b,
            "{stem}: {} rows against CPython's {}; only ours: {only_ours:?}; only CPython's: {only_theirs:?}",
            a.len(),
            b.len()
        );
        // The header says what CPython's "Replaying N samples" says.
        let n: &str = theirs.split_whitespace().nth(1).unwrap();
        assert!(
            ours.starts_with(&format!("{n} samples (")),
            "{stem}: {}",
            &ours[..60]
        );
    }
}

/// One thread's sample as fed to CPython's writer: time, thread id, status and frames
/// (file, function name), innermost first.
type FedThreadSample = (u64, u64, u8, Vec<(String, String)>);

/// What the samples of synthetic_many_threads_none were, as fed to CPython's writer
/// (its expected.json).
fn fed_samples(stem: &str) -> Vec<FedThreadSample> {
    let (_, fed) = fed_to_writer(&golden_path(&format!("{stem}.bin"))).unwrap();
    fed.into_iter()
        .map(|s| {
            let frames = s
                .frames
                .into_iter()
                .map(|f| (f.filename, f.funcname))
                .collect();
            (s.timestamp_us, s.thread_id, s.status, frames)
        })
        .collect()
}

/// `tach top` with each filter (thread, status terms, a time window, all together),
/// by function and by file, equals the counts of the samples that were fed to
/// CPython's writer: 76,263 thread samples of 380 threads in every status combination.
#[test]
fn top_filters_equal_the_samples_fed_to_cpythons_writer() {
    let stem = "synthetic_many_threads_none";
    let bin = golden_path(&format!("{stem}.bin"));
    let fed = fed_samples(stem);
    let origin = fed.iter().map(|s| s.0).min().unwrap();
    // The busiest thread, so the thread filter keeps many samples.
    let mut per_thread: HashMap<u64, usize> = HashMap::new();
    for s in &fed {
        *per_thread.entry(s.1).or_default() += 1;
    }
    let (&busy, _) = per_thread.iter().max_by_key(|(t, n)| (**n, **t)).unwrap();
    // TACH-FORMAT.md's status bits.
    const HAS_GIL: u8 = 1;
    const ON_CPU: u8 = 2;
    const MAIN: u8 = 32;
    type Keep = Box<dyn Fn(u64, u64, u8) -> bool>;
    let busy_s = busy.to_string();
    let cases: Vec<(Vec<&str>, Keep)> = vec![
        (
            vec!["--thread", &busy_s],
            Box::new(move |_, t, _| t == busy),
        ),
        (
            vec!["--status", "has-gil"],
            Box::new(|_, _, st| st & HAS_GIL != 0),
        ),
        (
            vec!["--status", "no-on-cpu", "--status", "main-thread"],
            Box::new(|_, _, st| st & ON_CPU == 0 && st & MAIN != 0),
        ),
        (
            vec!["--start", "2", "--end", "5.5"],
            Box::new(move |ts, _, _| ts >= origin + 2_000_000 && ts < origin + 5_500_000),
        ),
        (
            vec![
                "--start",
                "1",
                "--status",
                "no-has-gil",
                "--thread",
                &busy_s,
            ],
            Box::new(move |ts, t, st| ts >= origin + 1_000_000 && t == busy && st & HAS_GIL == 0),
        ),
    ];
    for (args, keep) in &cases {
        for by in ["function", "file"] {
            let mut want: HashMap<(String, String), (u64, u64)> = HashMap::new();
            let mut kept = 0u64;
            for (ts, t, st, frames) in &fed {
                if !keep(*ts, *t, *st) {
                    continue;
                }
                kept += 1;
                let keys: Vec<(String, String)> = frames
                    .iter()
                    .map(|(f, n)| {
                        (
                            f.clone(),
                            if by == "file" {
                                String::new()
                            } else {
                                n.clone()
                            },
                        )
                    })
                    .collect();
                if let Some(leaf) = keys.first() {
                    want.entry(leaf.clone()).or_default().0 += 1;
                }
                let mut once = keys.clone();
                once.sort();
                once.dedup();
                for k in once {
                    want.entry(k).or_default().1 += 1;
                }
            }
            assert!(kept > 100, "{args:?}: only {kept} samples kept");
            let o = tach()
                .args(["top", "--format", "json", "-l", "1000000", "--by", by])
                .args(args)
                .arg(&bin)
                .output()
                .unwrap();
            assert!(o.status.success(), "{args:?}: {o:?}");
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["samples"].as_u64(), Some(kept), "{args:?} by {by}");
            let got: HashMap<(String, String), (u64, u64)> = v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        (
                            r["filename"].as_str().unwrap().to_string(),
                            r["funcname"].as_str().unwrap().to_string(),
                        ),
                        (
                            r["self_samples"].as_u64().unwrap(),
                            r["total_samples"].as_u64().unwrap(),
                        ),
                    )
                })
                .collect();
            assert_eq!(got, want, "{args:?} by {by}");
        }
    }
}

/// `--sort samples` orders by self samples, `--sort name` by label; `-l` keeps the
/// first rows of that order.
#[test]
fn top_sorts_by_samples_and_by_name() {
    let bin = golden_path("stdlib_tests_large.bin");
    let rows = |sort: &str, limit: &str| -> Vec<serde_json::Value> {
        let o = tach()
            .args(["top", "--format", "json", "--sort", sort, "-l", limit])
            .arg(&bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["rows"].as_array().unwrap().clone()
    };
    let all = rows("samples", "1000000");
    assert!(all.len() > 100);
    let selfs: Vec<u64> = all
        .iter()
        .map(|r| r["self_samples"].as_u64().unwrap())
        .collect();
    assert!(selfs.windows(2).all(|w| w[0] >= w[1]));
    assert_eq!(rows("samples", "7"), all[..7].to_vec());
    let by_name = rows("name", "1000000");
    let labels: Vec<(String, String)> = by_name
        .iter()
        .map(|r| {
            (
                r["filename"].as_str().unwrap().to_string(),
                r["funcname"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut sorted = labels.clone();
    sorted.sort();
    assert_eq!(labels, sorted);
    assert_eq!(by_name.len(), all.len());
}
