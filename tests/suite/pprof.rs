//! `tach export --pprof` read back by an independent decoder, `go tool pprof` (Debian's
//! golang-go; installed with apt-get when missing, else the tests skip loudly), and
//! checked against CPython's own outputs in the golden corpus.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

/// `go`, installing golang-go first if it is missing; `None` after a loud skip.
pub(crate) fn go() -> Option<&'static str> {
    let works = || {
        Command::new("go")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !works() {
        let _ = Command::new("apt-get")
            .args(["install", "-y", "golang-go"])
            .output();
    }
    if !works() {
        let _ = Command::new("sh")
            .args(["-c", "apt-get update && apt-get install -y golang-go"])
            .output();
    }
    if works() {
        Some("go")
    } else {
        common::skip("pprof: `go` is missing and apt-get could not install golang-go; go tool pprof checks not run");
        None
    }
}

pub(crate) fn export(bin: &Path, out: &Path) {
    let o = common::tach()
        .args(["export", "--pprof", "-o"])
        .arg(out)
        .arg(bin)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}: {}",
        bin.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

pub(crate) fn pprof(go: &str, args: &[&str], file: &Path) -> String {
    let o = Command::new(go)
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "go tool pprof {args:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn tmp(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(format!("{name}.pb.gz"))
}

/// Per `basename:line(function)`, as CPython's pstats text keys its rows: (direct
/// samples, cumulative samples).
type Table = BTreeMap<String, (u64, u64)>;

/// The rows of CPython's `replay --pstats` text output.
fn pstats_table(text: &str) -> Table {
    let mut rows = Table::new();
    let mut on = false;
    for line in text.lines() {
        if line.trim_start().starts_with("nsamples") {
            on = true;
            continue;
        }
        if !on {
            continue;
        }
        if line.trim().is_empty() {
            break;
        }
        let first = line.split_whitespace().next().unwrap();
        let (direct, cum) = first.split_once('/').unwrap();
        // The location is everything after the five numeric columns.
        let key = after_fields(line, 5).to_string();
        let old = rows.insert(key.clone(), (direct.parse().unwrap(), cum.parse().unwrap()));
        assert!(old.is_none(), "pstats row {key} twice");
    }
    rows
}

/// `line` after its first `n` whitespace-separated fields.
fn after_fields(line: &str, n: usize) -> &str {
    let mut rest = line.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = rest[end..].trim_start();
    }
    rest
}

/// The same table computed from go tool pprof's decoding (`-raw`): its samples (counts
/// and location ids, leaf first) and its locations (`ID: 0x0 M=1 NAME PATH:LINE s=0()`;
/// pprof appends `(SYSTEM_NAME)` when it differs from the name, and ours is empty).
/// A sample counts once towards each distinct key on its stack, as pstats counts.
fn pprof_raw_table(raw: &str) -> Table {
    let mut samples: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut keys: BTreeMap<u64, String> = BTreeMap::new();
    let mut section = "";
    for line in raw.lines() {
        match line.trim_end() {
            "Samples:" | "Locations" | "Mappings" => {
                section = line.trim_end();
                continue;
            }
            _ => {}
        }
        if section == "Samples:" {
            let Some((values, ids)) = line.split_once(':') else {
                continue;
            };
            let values: Vec<&str> = values.split_whitespace().collect();
            let Ok(count) = values
                .first()
                .map_or(Err(()), |v| v.parse::<u64>().map_err(|_| ()))
            else {
                continue;
            };
            if values.len() != 2 {
                continue;
            }
            let ids = ids.split_whitespace().map(|i| i.parse().unwrap()).collect();
            samples.push((count, ids));
        } else if section == "Locations" {
            let (id, rest) = line.trim_start().split_once(": 0x0 M=1 ").unwrap();
            let (head, tail) = rest.rsplit_once(" s=").unwrap();
            // An empty name equals the empty system name: nothing is appended.
            assert!(
                tail.ends_with("()") || head.starts_with(' '),
                "a system name in {line:?}"
            );
            let (loc, lineno) = head.rsplit_once(':').unwrap();
            // `NAME PATH`: names may hold spaces (`<generic parameters of X>`, `<unknown
            // function>`); paths start with `/`, or are `<...>` (`<frozen runpy>`,
            // `<unknown file>`), or are one word (`~`).
            let (shown, path) = if let Some(i) = loc.find(" /") {
                (&loc[..i], &loc[i + 1..])
            } else if let Some(i) = loc.ends_with('>').then(|| loc.rfind(" <")).flatten() {
                (&loc[..i], &loc[i + 1..])
            } else {
                loc.rsplit_once(' ').unwrap_or(("", loc))
            };
            let base = path.rsplit('/').next().unwrap();
            keys.insert(id.parse().unwrap(), format!("{base}:{lineno}({shown})"));
        }
    }
    let mut table = Table::new();
    for (count, ids) in samples {
        let stack: Vec<&String> = ids.iter().map(|i| &keys[i]).collect();
        if let Some(leaf) = stack.first() {
            table.entry((*leaf).clone()).or_default().0 += count;
        }
        let distinct: std::collections::BTreeSet<&String> = stack.into_iter().collect();
        for k in distinct {
            table.entry(k.clone()).or_default().1 += count;
        }
    }
    table
}

#[test]
fn go_pprof_per_line_flat_and_cum_equal_cpython_pstats() {
    let Some(go) = go() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for bin in common::golden_bins() {
        let name = common::name(&bin);
        let Some(pstats) = common::golden_sibling(&bin, ".pstats.txt") else {
            continue;
        };
        let want = pstats_table(&String::from_utf8_lossy(&pstats));
        let out = tmp(&dir, &name);
        export(&bin, &out);
        let got = pprof_raw_table(&pprof(go, &["-raw"], &out));
        assert_eq!(
            got, want,
            "{name}: direct/cumulative samples per basename:line(function), go tool pprof -raw vs CPython pstats"
        );
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} golden files compared");
}

/// `-tags` with counts: label key -> value -> samples.
fn tags(text: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut key = String::new();
    for line in text.lines() {
        if let Some((k, _)) = line.trim().split_once(": Total") {
            key = k.to_string();
            out.entry(key.clone()).or_default();
        } else if let Some((count, value)) = line.trim().split_once(' ') {
            let value = value.rsplit_once("): ").map(|(_, v)| v).unwrap_or(value);
            let n: f64 = count
                .parse()
                .unwrap_or_else(|_| panic!("count in {line:?}"));
            *out.get_mut(&key)
                .unwrap()
                .entry(value.to_string())
                .or_default() += n as u64;
        }
    }
    out
}

#[test]
fn go_pprof_tags_carry_thread_ids_and_statuses() {
    let Some(go) = go() else { return };
    let dir = tempfile::tempdir().unwrap();
    for (name, mode, all_true) in [
        ("threads_mixed", "wall", None),
        ("threads_mixed_cpu", "cpu", Some("on_cpu")),
        ("threads_mixed_gil", "gil", Some("has_gil")),
    ] {
        let bin = common::golden_path(&format!("{name}.bin"));
        let out = tmp(&dir, name);
        export(&bin, &out);
        let t = tags(&pprof(go, &["-tags", "-sample_index=samples"], &out));
        // Per-thread samples as CPython's collapsed output counts them.
        let collapsed = String::from_utf8(common::golden_output(name, ".collapsed.txt")).unwrap();
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        for line in collapsed.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let tid = stack
                .split(';')
                .next()
                .unwrap()
                .strip_prefix("tid:")
                .unwrap();
            *want.entry(tid.to_string()).or_default() += n.parse::<u64>().unwrap();
        }
        assert_eq!(
            t["thread_id"], want,
            "{name}: thread_id tags vs CPython collapsed"
        );
        let total: u64 = want.values().sum();
        for flag in tach::status::FLAGS {
            let got = &t[flag.column];
            assert_eq!(got.values().sum::<u64>(), total, "{name}: {}", flag.column);
            assert!(
                got.keys().all(|k| k == "true" || k == "false"),
                "{name}: {got:?}"
            );
        }
        // CPython's cpu and gil modes record only on-CPU / GIL-holding samples.
        if let Some(flag) = all_true {
            assert_eq!(t[flag].get("true"), Some(&total), "{name}: {flag}");
        } else {
            assert!(
                t["has_gil"].len() == 2,
                "{name}: wall mode mixes GIL states"
            );
        }
        let top = pprof(go, &["-top", "-nodecount=1"], &out);
        assert!(top.contains(&format!("Type: {mode}")), "{name}: {top}");
    }
}

#[test]
fn pprof_output_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["threads_mixed", "stdlib_tests_large", "synthetic_empty"] {
        let bin = common::golden_path(&format!("{name}.bin"));
        let a = dir.path().join("a.pb.gz");
        let b = dir.path().join("b.pb.gz");
        export(&bin, &a);
        export(&bin, &b);
        let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
        assert!(!a.is_empty());
        assert_eq!(a, b, "{name}: two exports differ");
    }
}

/// `go tool pprof -top` rows (one parser for every test that reads them), name ->
/// (flat, cum) with their rounding, and the cut-off of its `Dropped N nodes (cum <= X)` line (0 when it dropped none).
pub(crate) type TopRow = ((f64, f64), (f64, f64));
pub(crate) fn top_rows(text: &str) -> (BTreeMap<String, TopRow>, (f64, f64)) {
    let mut rows = BTreeMap::new();
    let mut cutoff = (0.0, 0.0);
    let mut on = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Dropped ") {
            if let Some((_, x)) = rest.split_once("(cum <= ") {
                cutoff = value(x.trim_end_matches(')'));
            }
            continue;
        }
        if line.trim_start().starts_with("flat ") {
            on = true;
            continue;
        }
        if !on || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        // Everything after the five figures, exactly as printed: a name may hold spaces.
        let rest = after_fields(line, 5);
        let old = rows.insert(rest.to_string(), (value(f[0]), value(f[3])));
        assert!(old.is_none(), "-top row {rest:?} twice");
    }
    (rows, cutoff)
}

/// A value as pprof prints it (`ScaledLabel`: two decimals, `.00` cut, then the unit)
/// in nanoseconds, with the most its rounding can hide; a bare number for counts.
pub(crate) fn value(text: &str) -> (f64, f64) {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "" => 1.0,
        "ns" => 1.0,
        "us" | "μs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "mins" => 60e9,
        "hrs" => 3600e9,
        _ => panic!("unit of {text:?}"),
    };
    let n: f64 = number.parse().unwrap_or_else(|_| panic!("{text:?}"));
    (n * scale, 0.005 * scale + 1e-9)
}

/// `go tool pprof -top -filefunctions -sample_index=samples` rows: `NAME FILE` ->
/// (flat, cum) samples (counts, printed whole).
fn pprof_top(text: &str) -> BTreeMap<String, (u64, u64)> {
    let (rows, _) = top_rows(text);
    rows.into_iter()
        .map(|(key, ((flat, _), (cum, _)))| (key, (flat as u64, cum as u64)))
        .collect()
}

/// go tool pprof's own `-top` figures (flat and cum samples per function and file,
/// `-filefunctions`) equal `tach top`'s self and total samples by function, every row
/// (`<module>` and `<GC>` included), and its wall or cpu values are the samples times
/// the period (the file's interval).
#[test]
fn go_pprof_top_flat_and_cum_equal_tach_top() {
    let Some(go) = go() else { return };
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "cpu_recursive",
        "threads_mixed_cpu",
        "deep_recursion",
        "stdlib_tests_large",
    ] {
        let bin = common::golden_path(&format!("{name}.bin"));
        let out = tmp(&dir, name);
        export(&bin, &out);
        let top = pprof_top(&pprof(
            go,
            &[
                "-top",
                "-filefunctions",
                "-nodefraction=0",
                "-nodecount=1000000",
                "-sample_index=samples",
            ],
            &out,
        ));
        let o = common::tach()
            .args(["top", "--format", "json", "-l", "1000000"])
            .arg(&bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let total = v["samples"].as_u64().unwrap();
        let mut ours: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for r in v["rows"].as_array().unwrap() {
            let (file, func) = (
                r["filename"].as_str().unwrap(),
                r["funcname"].as_str().unwrap(),
            );
            let figures = (
                r["self_samples"].as_u64().unwrap(),
                r["total_samples"].as_u64().unwrap(),
            );
            assert!(ours.insert(format!("{func} {file}"), figures).is_none());
        }
        assert_eq!(
            top, ours,
            "{name}: go tool pprof -top -filefunctions flat/cum against tach top self/total"
        );

        // Every sample's time value is its count times the period.
        let raw = pprof(go, &["-raw"], &out);
        let period: u64 = raw
            .lines()
            .find_map(|l| l.strip_prefix("Period: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let interval_ns = tach::TachFile::open(&bin)
            .unwrap()
            .header()
            .sample_interval_us
            * 1000;
        assert_eq!(period, interval_ns, "{name}");
        let mut counted = 0;
        for line in raw.lines() {
            let Some((values, _)) = line.split_once(':') else {
                continue;
            };
            let v: Vec<u64> = match values.split_whitespace().map(str::parse).collect() {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v.len() == 2 {
                assert_eq!(v[1], v[0] * period, "{name}: {line}");
                counted += v[0];
            }
        }
        assert_eq!(counted, total, "{name}: samples in -raw");
    }
}

/// `go tool pprof -raw`'s `Time:` line (run with TZ=UTC) as nanoseconds since the epoch,
/// or `None` when the profile has no time; and its `Duration:` text.
fn pprof_time(go: &str, file: &Path) -> (Option<i64>, String) {
    let o = Command::new(go)
        .args(["tool", "pprof", "-raw"])
        .arg(file)
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::to_owned)
    };
    let time = field("Time: ").map(|t| {
        let t = t
            .strip_suffix(" +0000 UTC")
            .unwrap_or_else(|| panic!("not UTC: {t}"));
        chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f")
            .unwrap_or_else(|e| panic!("{t}: {e}"))
            .and_utc()
            .timestamp_nanos_opt()
            .unwrap()
    });
    (time, field("Duration: ").unwrap_or_default())
}

fn export_with(bin: &Path, out: &Path, args: &[&str]) {
    let o = common::tach()
        .args(["export", "--pprof", "-o"])
        .arg(out)
        .args(args)
        .arg(bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `--start-time` is the wall time of the recording's first sample: go tool pprof shows
/// it plus the first kept sample's offset, which CPython's own gecko export gives (its
/// sample times are milliseconds from the first sample). The three spellings agree.
#[test]
fn go_pprof_time_is_the_given_start_plus_the_first_kept_sample() {
    let Some(go) = go() else { return };
    let dir = tempfile::tempdir().unwrap();
    let name = "threads_mixed";
    let bin = common::golden_path(&format!("{name}.bin"));
    let gecko: serde_json::Value = serde_json::from_slice(
        &std::fs::read(common::golden_path(&format!("{name}.gecko.json"))).unwrap(),
    )
    .unwrap();
    let times: Vec<f64> = gecko["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["samples"]["time"].as_array().unwrap().iter())
        .map(|t| t.as_f64().unwrap())
        .collect();
    let base = 1_795_168_800_000_000_000_i64; // 2026-11-20T10:00:00Z
    for (from, spellings) in [
        (
            0.0,
            [
                "2026-11-20T10:00:00Z",
                "2026-11-20 11:00:00+01:00",
                "1795168800",
            ],
        ),
        (
            1.0,
            [
                "2026-11-20T10:00:00Z",
                "2026-11-20T05:00:00.000-05:00",
                "1795168800.000000000",
            ],
        ),
    ] {
        let kept: Vec<f64> = times
            .iter()
            .copied()
            .filter(|&t| t >= from * 1000.0)
            .collect();
        let first_ms = kept.iter().copied().fold(f64::INFINITY, f64::min);
        let last_ms = kept.iter().copied().fold(0.0, f64::max);
        let expected = base + (first_ms * 1000.0).round() as i64 * 1000;
        for when in spellings {
            let out = dir.path().join("t.pb.gz");
            let from_arg = from.to_string();
            export_with(&bin, &out, &["--start-time", when, "--start", &from_arg]);
            let (time, duration) = pprof_time(go, &out);
            assert_eq!(time, Some(expected), "{when} --start {from}");
            // pprof prints Go's duration text ("3.035859s") cut to 4 characters.
            let seconds = (last_ms - first_ms + 1.0) / 1000.0;
            assert_eq!(
                duration,
                format!("{seconds:.6}")[..4],
                "{when} --start {from}"
            );
        }
    }
    let out = dir.path().join("none.pb.gz");
    export_with(&bin, &out, &["--start-time", "none"]);
    assert_eq!(
        pprof_time(go, &out).0,
        None,
        "--start-time none sets no time"
    );
}

/// By default the time comes from the file: a real CPython 3.15 recording made in the
/// chroot gets a time between the wall clock before the recording and after it.
#[test]
fn go_pprof_time_of_a_fresh_cpython_recording_is_when_it_ran() {
    let Some(go) = go() else { return };
    let Some(tool) = common::cpython_chroot() else {
        return;
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("target/pprof-time");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("fresh.bin");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64
    };
    let before = now();
    let status = Command::new(&tool)
        .args([
            "run",
            "--",
            "python3.15",
            "-m",
            "profiling.sampling",
            "run",
            "--binary",
        ])
        .args(["-r", "1khz", "-o"])
        .arg(bin.strip_prefix(manifest).unwrap())
        .arg("tests/data/heatmap/stdlib_workload.py")
        .current_dir(manifest)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    let after = now();
    assert!(status.success(), "CPython's sampler failed");
    let out = dir.join("fresh.pb.gz");
    export_with(&bin, &out, &[]);
    let (time, duration) = pprof_time(go, &out);
    let time = time.expect("the default sets a time");
    let seconds: f64 = duration.parse().unwrap();
    assert!(
        before <= time && time + (seconds * 1e9) as i64 <= after + 50_000_000,
        "recorded between {before} and {after}, pprof says {time} for {seconds} s"
    );
}
