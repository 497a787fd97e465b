//! `tach export --pprof` as `go tool pprof` shows it with its defaults (no
//! `-demangle=none`, no `-filefunctions`), which is how people and Pyroscope read it:
//! `-top` and `-traces` name every Python function as CPython names it (`<module>`,
//! `<genexpr>`, `<lambda>`, `<GC>` included), with the samples and times CPython's own
//! collapsed export of the same recording counts.
//!
//! pprof's defaults aggregate by function name alone (files and lines dropped), so the
//! expected figures are CPython's collapsed lines with each `file:function:line` label
//! reduced to its function.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common;
use crate::pprof::{export, go, pprof, top_rows, value};

/// The function of a CPython collapsed label: `basename:function:line`, or a bare name
/// for a synthetic frame (`<GC>`).
fn function_of(label: &str) -> &str {
    match label.rsplit_once(':') {
        Some((rest, line)) if line.bytes().all(|b| b.is_ascii_digit()) => {
            rest.split_once(':').map_or(rest, |(_, f)| f)
        }
        _ => label,
    }
}

/// CPython's collapsed lines as (thread id, function names root first, samples).
fn collapsed_by_function(text: &str) -> Vec<(String, Vec<String>, u64)> {
    text.lines()
        .map(|line| {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let mut parts = stack.split(';');
            let tid = parts.next().unwrap().strip_prefix("tid:").unwrap();
            let names = parts.map(|l| function_of(l).to_string()).collect();
            (tid.to_string(), names, n.parse().unwrap())
        })
        .collect()
}

/// The golden recordings whose CPython collapsed export is small enough to trace.
fn golden_with_collapsed() -> Vec<(String, std::path::PathBuf, String)> {
    common::golden_bins()
        .into_iter()
        .filter(|bin| std::fs::metadata(bin).unwrap().len() < 1_000_000)
        .filter_map(|bin| {
            let text = common::golden_sibling(&bin, ".collapsed.txt")?;
            let text = String::from_utf8(text).unwrap();
            (!text.is_empty()).then(|| (common::name(&bin), bin, text))
        })
        .collect()
}

fn interval_ns(bin: &Path) -> f64 {
    (tach::TachFile::open(bin)
        .unwrap()
        .header()
        .sample_interval_us
        * 1000) as f64
}

/// `go tool pprof -top` with its defaults: one row per function name with flat and cum
/// time equal to CPython's collapsed samples (innermost, and anywhere on the stack once
/// per sample) times the interval; no `<unknown>` or empty name; every function above
/// pprof's own cut-off shown.
#[test]
fn go_pprof_default_top_names_functions_as_cpython_with_its_times() {
    let Some(go) = go() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut angle_named = BTreeSet::new();
    let mut files = 0;
    for (name, bin, collapsed) in golden_with_collapsed() {
        let interval = interval_ns(&bin);
        let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (_, names, n) in collapsed_by_function(&collapsed) {
            want.entry(names.last().unwrap().clone()).or_default().0 += n;
            for f in names.iter().collect::<BTreeSet<_>>() {
                want.entry(f.clone()).or_default().1 += n;
            }
        }
        let out = dir.path().join(format!("{name}.pb.gz"));
        export(&bin, &out);
        let text = pprof(go, &["-top"], &out);
        let (rows, (cutoff, cutoff_err)) = top_rows(&text);
        assert!(!rows.is_empty(), "{name}: {text}");
        for (function, ((flat, flat_err), (cum, cum_err))) in &rows {
            assert!(
                !function.is_empty() && function != "<unknown>",
                "{name}: pprof lost a name:\n{text}"
            );
            let Some(&(w_flat, w_cum)) = want.get(function) else {
                panic!("{name}: -top row {function:?} is no function of CPython's collapsed");
            };
            let (w_flat, w_cum) = (w_flat as f64 * interval, w_cum as f64 * interval);
            assert!(
                (flat - w_flat).abs() <= *flat_err && (cum - w_cum).abs() <= *cum_err,
                "{name}: {function}: -top flat {flat} cum {cum} ns, CPython's collapsed {w_flat} {w_cum}"
            );
            if function.starts_with('<') {
                angle_named.insert(function.clone());
            }
        }
        for (function, &(_, cum)) in &want {
            let cum = cum as f64 * interval;
            if cum > cutoff + cutoff_err {
                assert!(
                    rows.contains_key(function),
                    "{name}: {function} ({cum} ns, above pprof's cut-off {cutoff}) missing:\n{text}"
                );
            }
        }
        files += 1;
    }
    assert!(files >= 10, "only {files} golden files");
    // Names pprof used to empty (all inside `<>`) are there, under their own names.
    for f in ["<module>", "<GC>"] {
        assert!(
            angle_named.contains(f),
            "no {f} row in any -top: {angle_named:?}"
        );
    }
}

/// One `-traces` sample: its thread id label, function names innermost first, and value.
struct Trace {
    thread: String,
    names: Vec<String>,
    value: (f64, f64),
}

/// `go tool pprof -traces`: blocks between separator lines, each the sample's labels
/// (`%10s:  %s`) then its stack, the first line carrying the value (`%10s   NAME`).
fn traces(text: &str, label_keys: &BTreeSet<&str>) -> Vec<Trace> {
    const SEPARATOR: &str = "-----------+-------------------------------------------------------";
    let mut out = Vec::new();
    let mut blocks = text.split(SEPARATOR);
    blocks.next(); // the header
    for block in blocks {
        let mut thread = None;
        let mut names = Vec::new();
        let mut value_text = None;
        for line in block.lines().filter(|l| !l.trim().is_empty()) {
            if names.is_empty() {
                if let Some((key, v)) = line.trim_start().split_once(":  ") {
                    if label_keys.contains(key) {
                        if key == "thread_id" {
                            thread = Some(v.to_string());
                        }
                        continue;
                    }
                }
            }
            let (figure, name) = line.split_at(10);
            let name = name
                .strip_prefix("   ")
                .unwrap_or_else(|| panic!("{line:?}"));
            if names.is_empty() {
                value_text = Some(figure.trim().to_string());
            } else {
                assert!(figure.trim().is_empty(), "{line:?}");
            }
            names.push(name.to_string());
        }
        if names.is_empty() {
            continue; // after the last separator
        }
        out.push(Trace {
            thread: thread.expect("a thread_id label"),
            names,
            value: value(&value_text.unwrap()),
        });
    }
    out
}

/// `go tool pprof -traces` with its defaults, and with the sample count as its value:
/// per thread and stack of function names, the same samples (exactly) and times (to
/// pprof's rounding) as CPython's collapsed export.
#[test]
fn go_pprof_default_traces_are_cpythons_collapsed_stacks() {
    let Some(go) = go() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut keys: BTreeSet<&str> = tach::status::FLAGS.iter().map(|f| f.column).collect();
    keys.extend(["thread_id", "interpreter_id"]);
    let mut files = 0;
    let mut angle_named = BTreeSet::new();
    for (name, bin, collapsed) in golden_with_collapsed() {
        let interval = interval_ns(&bin);
        let mut want: BTreeMap<(String, Vec<String>), u64> = BTreeMap::new();
        for (tid, mut names, n) in collapsed_by_function(&collapsed) {
            names.reverse();
            *want.entry((tid, names)).or_default() += n;
        }
        let out = dir.path().join(format!("{name}.pb.gz"));
        export(&bin, &out);
        for sample_index in [None, Some("-sample_index=samples")] {
            let mut args = vec!["-traces"];
            args.extend(sample_index);
            let text = pprof(go, &args, &out);
            let mut got: BTreeMap<(String, Vec<String>), (f64, f64)> = BTreeMap::new();
            for t in traces(&text, &keys) {
                assert!(
                    t.names.iter().all(|n| !n.is_empty() && n != "<unknown>"),
                    "{name}: a nameless frame in {:?}",
                    t.names
                );
                angle_named.extend(
                    t.names
                        .iter()
                        .filter(|n| n.starts_with('<') && n.ends_with('>'))
                        .cloned(),
                );
                let e = got.entry((t.thread, t.names)).or_default();
                e.0 += t.value.0;
                e.1 += t.value.1;
            }
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "{name} {args:?}: (thread, stack) of -traces against CPython's collapsed"
            );
            for (key, &(v, err)) in &got {
                let n = want[key] as f64;
                let expected = if sample_index.is_some() {
                    n
                } else {
                    n * interval
                };
                assert!(
                    (v - expected).abs() <= err,
                    "{name} {args:?}: {key:?}: -traces {v}, CPython's collapsed {expected}"
                );
            }
        }
        files += 1;
    }
    assert!(files >= 10, "only {files} golden files");
    // Names pprof's C++ heuristics used to empty, by their own names.
    for f in [
        "<module>",
        "<GC>",
        "<unknown function>",
        "<generic parameters of SupportsAbs>",
    ] {
        assert!(
            angle_named.contains(f),
            "{f} in no -traces: {angle_named:?}"
        );
    }
}
