//! The speedscope and flamegraph exporters against CPython's golden answers, without a
//! browser (the browser checks are in tests/browser/, run by tests/suite/browser.rs).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use tach::export::{export_to, find, ExportOptions};
use tach::{SampleFilter, TachFile};

use crate::common::golden_path as golden;

/// A golden text file by its full name (`NAME.SUFFIX`), gunzipped when stored as `.gz`.
fn read_golden(file_name: &str) -> String {
    let (name, suffix) = file_name.split_at(file_name.find('.').unwrap());
    String::from_utf8(crate::common::golden_output(name, suffix)).unwrap()
}

fn export(format: &str, bin: &str, filter: &SampleFilter, options: &ExportOptions) -> Vec<u8> {
    let file = TachFile::open(golden(bin)).unwrap();
    let mut out = Vec::new();
    export_to(find(format).unwrap(), &file, filter, options, &mut out).unwrap();
    out
}

/// Per profile name: the sum of its weights.
fn speedscope_totals(json: &[u8]) -> BTreeMap<String, u64> {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap();
    assert_eq!(
        v["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = v["shared"]["frames"].as_array().unwrap().len() as u64;
    let mut totals = BTreeMap::new();
    for p in v["profiles"].as_array().unwrap() {
        assert_eq!(p["type"], "sampled");
        assert_eq!(p["unit"], "microseconds");
        let samples = p["samples"].as_array().unwrap();
        let weights = p["weights"].as_array().unwrap();
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            for f in s.as_array().unwrap() {
                assert!(f.as_u64().unwrap() < frames, "frame index out of range");
            }
        }
        let total: u64 = weights.iter().map(|w| w.as_u64().unwrap()).sum();
        let start = p["startValue"].as_u64().unwrap();
        assert_eq!(p["endValue"].as_u64().unwrap() - start, total);
        let name = p["name"].as_str().unwrap().to_string();
        assert!(totals.insert(name, total).is_none(), "duplicate profile");
    }
    totals
}

/// Per thread, from the samples CPython's writer was fed: the gaps between the thread's
/// samples plus the interval for its last.
fn expected_totals(name: &str) -> BTreeMap<String, u64> {
    let (v, fed) = crate::common::fed_to_writer(&golden(&format!("{name}.bin"))).unwrap();
    let interval = v["interval"].as_u64().unwrap();
    let mut times: HashMap<String, Vec<u64>> = HashMap::new();
    for s in fed {
        let (tid, iid) = (s.thread_id, s.interpreter_id);
        let key = if iid == 0 {
            format!("Thread {tid}")
        } else {
            format!("Thread {tid} (interpreter {iid})")
        };
        times.entry(key).or_default().push(s.timestamp_us);
    }
    times
        .into_iter()
        .map(|(k, ts)| {
            let gaps: u64 = ts.windows(2).map(|w| w[1].saturating_sub(w[0])).sum();
            (k, gaps + interval)
        })
        .collect()
}

#[test]
fn speedscope_thread_times_match_cpythons_input() {
    for name in [
        "synthetic_many_threads_none",
        "synthetic_deep_stacks",
        "synthetic_empty_stacks",
        "synthetic_rle",
        "synthetic_timestamps",
    ] {
        let out = export(
            "speedscope",
            &format!("{name}.bin"),
            &SampleFilter::default(),
            &ExportOptions::default(),
        );
        assert_eq!(speedscope_totals(&out), expected_totals(name), "{name}");
    }
}

#[test]
fn speedscope_of_an_empty_profile_has_no_profiles() {
    let out = export(
        "speedscope",
        "synthetic_empty.bin",
        &SampleFilter::default(),
        &ExportOptions::default(),
    );
    assert!(speedscope_totals(&out).is_empty());
}

/// Splitting by a status flag must split each thread's time, not stretch the kept
/// samples over the filtered-out ones: on-cpu + not-on-cpu = everything, per thread.
#[test]
fn speedscope_status_filters_partition_thread_time() {
    for name in ["threads_mixed.bin", "synthetic_many_threads_none.bin"] {
        let all = speedscope_totals(&export(
            "speedscope",
            name,
            &SampleFilter::default(),
            &ExportOptions::default(),
        ));
        let mut sum: BTreeMap<String, u64> = BTreeMap::new();
        for term in ["on-cpu", "no-on-cpu"] {
            let mut f = SampleFilter::default();
            f.add_status(term).unwrap();
            let part =
                speedscope_totals(&export("speedscope", name, &f, &ExportOptions::default()));
            for (k, v) in part {
                *sum.entry(k).or_default() += v;
            }
        }
        // A thread's last sample weighs one interval in each part it ends, so the parts
        // may exceed the whole by at most one interval per thread.
        let file = TachFile::open(golden(name)).unwrap();
        let interval = file.header().sample_interval_us;
        assert_eq!(
            sum.keys().collect::<Vec<_>>(),
            all.keys().collect::<Vec<_>>()
        );
        for (k, whole) in &all {
            let parts = sum[k];
            assert!(
                parts >= *whole && parts - whole <= interval,
                "{name} {k}: parts {parts}, whole {whole}"
            );
        }
    }
}

/// Sample counts per thread from CPython's `replay --collapsed` answer.
fn collapsed_counts(name: &str) -> (u64, BTreeMap<u64, u64>) {
    let mut total = 0;
    let mut per: BTreeMap<u64, u64> = BTreeMap::new();
    for line in read_golden(&format!("{name}.collapsed.txt")).lines() {
        let (body, count) = line.rsplit_once(' ').unwrap();
        let count: u64 = count.parse().unwrap();
        let tid: u64 = body[4..].split(';').next().unwrap().parse().unwrap();
        total += count;
        *per.entry(tid).or_default() += count;
    }
    (total, per)
}

/// Frame tooltips, unescaped enough for counts.
fn svg_titles(svg: &str) -> Vec<&str> {
    svg.split("<title>")
        .skip(1)
        .map(|s| s.split("</title>").next().unwrap())
        .collect()
}

fn count_of(title: &str) -> u64 {
    let inner = title.rsplit_once(" (").unwrap().1;
    inner
        .split(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap()
}

#[test]
fn flamegraph_counts_match_cpythons_collapsed() {
    for name in [
        "cpu_recursive",
        "threads_mixed",
        "stdlib_tests_large",
        "synthetic_many_threads_none",
    ] {
        let (total, per) = collapsed_counts(name);
        let merged = String::from_utf8(export(
            "flamegraph",
            &format!("{name}.bin"),
            &SampleFilter::default(),
            &ExportOptions::default(),
        ))
        .unwrap();
        assert!(merged.contains(&format!(">{name}.bin</text>")), "title");
        let titles = svg_titles(&merged);
        let root: Vec<_> = titles.iter().filter(|t| t.starts_with("all (")).collect();
        assert_eq!(root.len(), 1, "{name}");
        assert_eq!(count_of(root[0]), total, "{name} merged root");

        let per_thread = String::from_utf8(export(
            "flamegraph",
            &format!("{name}.bin"),
            &SampleFilter::default(),
            &ExportOptions {
                per_thread: true,
                title: None,
                ..Default::default()
            },
        ))
        .unwrap();
        let mut drawn: BTreeMap<u64, u64> = BTreeMap::new();
        for t in svg_titles(&per_thread) {
            if let Some(rest) = t.strip_prefix("[thread ") {
                let tid: u64 = rest.split([']', ',']).next().unwrap().parse().unwrap();
                *drawn.entry(tid).or_default() += count_of(t);
            } else if t.starts_with("all (") {
                assert_eq!(count_of(t), total, "{name} per-thread root");
            }
        }
        // inferno leaves out frames narrower than 0.01 % of the total; every drawn thread
        // root holds exactly CPython's count for that thread id.
        assert!(!drawn.is_empty());
        for (tid, n) in &drawn {
            assert_eq!(per.get(tid), Some(n), "{name} thread {tid}");
        }
    }
}

/// With filters, the flamegraph (its own pass over the samples) counts what the collapsed
/// export (the shared index, byte-identical to CPython without filters) counts.
#[test]
fn flamegraph_filters_agree_with_collapsed() {
    let mut on_cpu = SampleFilter::default();
    on_cpu.add_status("on-cpu").unwrap();
    let mut gil_wait = SampleFilter::default();
    gil_wait.add_status("gil-requested").unwrap();
    gil_wait.add_status("no-has-gil").unwrap();
    let window = SampleFilter {
        start_s: Some(1.0),
        end_s: Some(2.5),
        ..Default::default()
    };
    for name in ["threads_mixed.bin", "synthetic_many_threads_none.bin"] {
        let (first_tid, _) = collapsed_counts(name.trim_end_matches(".bin"))
            .1
            .into_iter()
            .next()
            .unwrap();
        let one_thread = SampleFilter {
            threads: Some([first_tid].into_iter().collect()),
            ..Default::default()
        };
        for (what, filter) in [
            ("on-cpu", &on_cpu),
            ("gil wait", &gil_wait),
            ("1.0-2.5 s", &window),
            ("one thread", &one_thread),
        ] {
            let collapsed =
                String::from_utf8(export("collapsed", name, filter, &ExportOptions::default()))
                    .unwrap();
            let want: u64 = collapsed
                .lines()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum();
            let file = TachFile::open(golden(name)).unwrap();
            let mut out = Vec::new();
            let result = export_to(
                find("flamegraph").unwrap(),
                &file,
                filter,
                &ExportOptions::default(),
                &mut out,
            );
            if want == 0 {
                assert!(result.is_err(), "{name} {what}: nothing to draw");
                continue;
            }
            result.unwrap();
            let svg = String::from_utf8(out).unwrap();
            let root = svg_titles(&svg)
                .into_iter()
                .find(|t| t.starts_with("all ("))
                .unwrap();
            assert_eq!(count_of(root), want, "{name} {what}");
        }
    }
}

#[test]
fn flamegraph_of_an_empty_profile_is_an_error_naming_the_file() {
    let file = TachFile::open(golden("synthetic_empty.bin")).unwrap();
    let mut out = Vec::new();
    let err = export_to(
        find("flamegraph").unwrap(),
        &file,
        &SampleFilter::default(),
        &ExportOptions::default(),
        &mut out,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("synthetic_empty.bin"), "{err}");
}

/// Same input, same bytes; and the bytes equal the reviewed snapshots in
/// tests/snapshots/ (regenerate with TACH_UPDATE_SNAPSHOTS=1 and review the diff).
#[test]
fn outputs_are_deterministic_and_match_snapshots() {
    let cases = [
        (
            "speedscope",
            "threads_mixed",
            false,
            "threads_mixed.speedscope.json",
        ),
        (
            "flamegraph",
            "cpu_recursive",
            false,
            "cpu_recursive.flamegraph.svg",
        ),
        (
            "flamegraph",
            "threads_mixed",
            true,
            "threads_mixed.per-thread.flamegraph.svg",
        ),
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let update = std::env::var_os("TACH_UPDATE_SNAPSHOTS").is_some();
    for (format, name, per_thread, snap) in cases {
        let options = ExportOptions {
            per_thread,
            title: None,
            ..Default::default()
        };
        let bin = format!("{name}.bin");
        let a = export(format, &bin, &SampleFilter::default(), &options);
        let b = export(format, &bin, &SampleFilter::default(), &options);
        assert!(a == b, "{snap}: two exports differ");
        let path = dir.join(snap);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &a).unwrap();
            continue;
        }
        let want = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (run with TACH_UPDATE_SNAPSHOTS=1)", path.display())
        });
        assert!(a == want, "{snap} differs from {}", path.display());
    }
}
