//! `tach query` over Parquet (exports and hive datasets) against the same query over the
//! TACH files they were written from, and incremental `tach export --parquet --out-dir`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::SystemTime;

use polars::prelude::*;
use tach::query::{QueryEngine, SCHEMA_VERSION};

use crate::common::{golden_bins, golden_path, tach};

fn tach_output(args: &[&std::ffi::OsStr]) -> Output {
    tach().args(args).output().expect("run tach")
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

/// `tach export --parquet --out-dir DS INPUTS... [EXTRA...]`, which must succeed.
fn export_dataset(ds: &Path, inputs: &[PathBuf], extra: &[&str]) -> Output {
    let mut args = vec![
        os("export"),
        os("--parquet"),
        os("--out-dir"),
        ds.as_os_str(),
    ];
    args.extend(extra.iter().map(os));
    args.extend(inputs.iter().map(|p| p.as_os_str()));
    let out = tach_output(&args);
    assert!(
        out.status.success(),
        "export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run(e: &QueryEngine, sql: &str) -> DataFrame {
    e.run(sql).unwrap_or_else(|err| panic!("{sql}\n{err}"))
}

/// Every query answer equal, row for row and type for type.
fn assert_same(sql: &str, tach_files: &QueryEngine, parquet: &QueryEngine) {
    let a = run(tach_files, sql);
    let b = run(parquet, sql);
    assert!(a.height() > 0, "{sql}: no rows, so nothing is compared");
    assert_eq!(a.schema(), b.schema(), "{sql}: schemas differ");
    assert!(
        a.equals_missing(&b),
        "{sql}: answers differ\nTACH:\n{a}\nParquet:\n{b}"
    );
}

/// The nine queries of docs/query.md ("Examples"), with the corpus' names for the
/// function (`fib`) and the two files of the side-by-side one.
fn documented_queries(before: &str, after: &str) -> Vec<String> {
    vec![
        "select funcname, filename, count(*) as samples \
         from samples group by funcname, filename order by samples desc limit 10"
            .into(),
        "select s.funcname, s.filename, sum(c.samples) as samples \
         from (select distinct file, stack_id, filename, funcname from stacks) s \
         join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
         group by s.funcname, s.filename order by samples desc limit 10"
            .into(),
        "select thread_id, count(*) as samples, max(time_s) - min(time_s) as span_s \
         from samples group by thread_id order by samples desc"
            .into(),
        "select cast(floor(time_s * 10) as bigint) as bucket, count(*) as samples \
         from samples group by bucket order by bucket"
            .into(),
        "select caller.funcname, sum(c.samples) as samples \
         from (select file, stack_id, position + 1 as parent from stacks where funcname = 'fib') callee \
         join stacks caller on caller.file = callee.file and caller.stack_id = callee.stack_id \
              and caller.position = callee.parent \
         join stack_counts c on c.file = callee.file and c.stack_id = callee.stack_id \
         group by caller.funcname order by samples desc"
            .into(),
        "select thread_id, avg(case when gil_requested then 1.0 else 0.0 end) as gil_wait_share \
         from samples group by thread_id order by gil_wait_share desc"
            .into(),
        "select lineno, count(*) as samples from samples \
         where funcname = 'fib' group by lineno order by samples desc"
            .into(),
        format!(
            "select funcname, \
                    sum(case when file = '{before}' then 1 else 0 end) as before, \
                    sum(case when file = '{after}' then 1 else 0 end) as after \
             from samples group by funcname order by after - before desc"
        ),
        "select f.opname, count(*) as samples \
         from samples s join frames f on s.file = f.file and s.frame_id = f.frame_id \
         group by f.opname order by samples desc"
            .into(),
    ]
}

/// Ties of the documented ORDER BYs are ordered by every column, so that the answers
/// are one list (the same SQL, with the order completed).
fn total_order(sql: &str) -> String {
    let cols = |sql: &str| -> Vec<String> {
        let select = sql.split(" from ").next().unwrap_or_default();
        select
            .trim_start_matches("select ")
            .split(',')
            .map(|item| item.rsplit_once(" as ").map_or(item, |(_, name)| name))
            .map(|c| c.split_whitespace().last().unwrap_or_default().to_string())
            .collect()
    };
    match sql.rsplit_once(" limit ") {
        Some((head, n)) => format!("{head}, {} limit {n}", cols(head).join(", ")),
        None => format!("{sql}, {}", cols(sql).join(", ")),
    }
}

#[test]
fn documented_queries_agree_over_tach_files_and_their_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let bins = golden_bins();
    export_dataset(&ds, &bins, &[]);
    // The dataset's partitions are read in name order: give the TACH files in that
    // order too, so that unordered intermediate results come in the same order.
    let files = QueryEngine::open(&bins).unwrap();
    let dataset = QueryEngine::open(std::slice::from_ref(&ds)).unwrap();
    let name = |f: &str| golden_path(f).display().to_string();
    let queries = documented_queries(&name("threads_mixed.bin"), &name("threads_mixed_cpu.bin"));
    assert_eq!(queries.len(), 9);
    for sql in &queries {
        assert_same(&total_order(sql), &files, &dataset);
    }
    // Every table, every column: the same rows.
    for (table, key) in [
        ("samples", "file, sample"),
        ("frames", "file, frame_id"),
        ("stacks", "file, stack_id, position"),
        (
            "stack_counts",
            "file, stack_id, thread_id, interpreter_id, status",
        ),
    ] {
        assert_same(
            &format!("select * from {table} order by {key}"),
            &files,
            &dataset,
        );
    }
}

#[test]
fn mixed_inputs_single_exports_and_lone_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        golden_path("threads_mixed.bin"),
        golden_path("cpu_recursive_opcodes.bin"),
        golden_path("threads_mixed_gil.bin"),
    );
    let single = dir.path().join("b.parquet");
    let out = tach_output(&[
        os("export"),
        os("--parquet"),
        os("-o"),
        single.as_os_str(),
        b.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lone = dir.path().join("c-samples.parquet");
    let out = tach()
        .args([
            os("export"),
            os("--parquet"),
            os("-o"),
            os("-"),
            c.as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&lone, &out.stdout).unwrap();

    let files = QueryEngine::open(&[a.clone(), b.clone(), c.clone()]).unwrap();
    let mixed = QueryEngine::open(&[a.clone(), single.clone(), lone.clone()]).unwrap();
    for sql in [
        "select file, thread_id, count(*) as n, sum(depth) as d, min(time_s) as t0 \
         from samples group by file, thread_id order by file, thread_id",
        "select * from samples order by file, sample",
    ] {
        assert_same(sql, &files, &mixed);
    }
    // The lone samples file has no frames or stacks: the others' are there.
    let without_c = QueryEngine::open(&[a.clone(), b.clone()]).unwrap();
    for sql in [
        "select * from stacks order by file, stack_id, position",
        "select file, opname, count(*) as n from frames group by file, opname order by file, opname",
        "select s.funcname, sum(c.samples) as n \
         from (select distinct file, stack_id, funcname from stacks) s \
         join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
         group by s.funcname order by n desc, s.funcname",
    ] {
        assert_same(sql, &without_c, &mixed);
    }
}

#[test]
fn a_filter_on_file_reads_only_that_partition() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    // An empty recording's partitions have no `file` value to skip them by: they are
    // left out of the scan.
    let bins: Vec<PathBuf> = [
        "threads_mixed.bin",
        "cpu_recursive.bin",
        "deep_recursion.bin",
        "synthetic_empty.bin",
    ]
    .iter()
    .map(|f| golden_path(f))
    .collect();
    export_dataset(&ds, &bins, &[]);
    let one = bins[1].display().to_string();
    let sql = format!(
        "select funcname, count(*) as n from samples where file = '{one}' group by funcname"
    );
    let out = tach_output(&[os("query"), os("--explain"), os(&sql), ds.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{plan}");
    assert!(plan.contains("Parquet SCAN"), "not a Parquet scan:\n{plan}");
    // polars skipped the other partitions while planning: the scan is of one file.
    assert!(
        plan.contains("source=cpu_recursive/part-0.parquet]"),
        "the scan is not of that file's partition alone:\n{plan}"
    );
    assert!(!plan.contains("other source"), "{plan}");
    for other in ["threads_mixed", "deep_recursion", "synthetic_empty"] {
        assert!(!plan.contains(&format!("source={other}/")), "{plan}");
    }
    // The predicate is inside the scan (no FILTER above it), and the scan reads only
    // the columns the query needs.
    assert!(
        !plan.contains("FILTER"),
        "the filter was not pushed down:\n{plan}"
    );
    assert!(
        plan.contains("SELECTION"),
        "no predicate in the scan:\n{plan}"
    );
    assert!(
        plan.contains(&one),
        "the scan's predicate does not name the file:\n{plan}"
    );
    // A count is answered from the partition's stack_counts (funcname, samples and
    // the filter's file), not from a row per sample.
    assert!(
        plan.contains("stack_counts/source=cpu_recursive/part-0.parquet]"),
        "the count does not read stack_counts:\n{plan}"
    );
    assert!(
        plan.contains("PROJECT 3/"),
        "projection not pushed down:\n{plan}"
    );
}

/// Every file under `dir` with its modification time.
fn listing(dir: &Path) -> BTreeMap<PathBuf, SystemTime> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            out.insert(e.path(), meta.modified().unwrap());
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

fn hidden_entries(listing: &BTreeMap<PathBuf, SystemTime>) -> Vec<&PathBuf> {
    listing
        .keys()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect()
}

fn count_by_file(ds: &Path) -> Vec<(String, i64)> {
    let e = QueryEngine::open(&[ds.to_path_buf()]).unwrap();
    let df = run(
        &e,
        "select file, count(*) as n from samples group by file order by file",
    );
    let files = df.column("file").unwrap().str().unwrap().clone();
    let n = df.column("n").unwrap().i64().unwrap().clone();
    files
        .iter()
        .zip(n.iter())
        .map(|(f, n)| (f.unwrap().to_string(), n.unwrap()))
        .collect()
}

#[test]
fn incremental_dataset_export() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let (a, b, c) = (
        golden_path("threads_mixed.bin"),
        golden_path("cpu_recursive.bin"),
        golden_path("deep_recursion.bin"),
    );
    export_dataset(&ds, &[a.clone(), b.clone()], &[]);
    let first = listing(&ds);
    assert_eq!(
        first
            .keys()
            .filter(|p| p.ends_with("part-0.parquet"))
            .count(),
        8
    );

    // The same conversion again: nothing written, nothing touched.
    let out = export_dataset(&ds, &[a.clone(), b.clone()], &[]);
    assert_eq!(listing(&ds), first, "a rerun changed the dataset");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("unchanged").count(), 2, "{err}");

    // One more input: only its partitions are new.
    export_dataset(&ds, &[a.clone(), b.clone(), c.clone()], &[]);
    let second = listing(&ds);
    for (path, mtime) in &first {
        // The table directories get the new entries; no file is touched.
        if path.is_file() {
            assert_eq!(second.get(path), Some(mtime), "{} changed", path.display());
        }
    }
    let new: Vec<_> = second.keys().filter(|p| !first.contains_key(*p)).collect();
    assert_eq!(new.len(), 8, "{new:?}"); // four partition directories, four files
    assert!(new
        .iter()
        .all(|p| p.to_string_lossy().contains("source=deep_recursion")));
    assert!(
        hidden_entries(&second).is_empty(),
        "{:?}",
        hidden_entries(&second)
    );

    // Every partition file records its source and the schema version.
    let bytes = std::fs::read(&b).unwrap();
    for t in ["samples", "frames", "stacks", "stack_counts"] {
        let f = ds
            .join(t)
            .join("source=cpu_recursive")
            .join("part-0.parquet");
        let meta =
            polars_parquet::read::read_metadata(&mut std::fs::File::open(&f).unwrap()).unwrap();
        let kv: BTreeMap<String, String> = meta
            .key_value_metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.key, e.value.unwrap_or_default()))
            .collect();
        assert_eq!(
            kv["tach.schema_version"],
            SCHEMA_VERSION.to_string(),
            "{f:?}"
        );
        assert_eq!(kv["tach.source.name"], "cpu_recursive.bin");
        assert_eq!(kv["tach.source.size"], bytes.len().to_string());
        assert_eq!(
            kv["tach.source.xxh3"],
            format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes))
        );
        assert!(
            kv.contains_key("ARROW:schema"),
            "polars' Arrow schema is kept"
        );
    }
}

#[test]
fn a_changed_source_is_refused_unless_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let run_bin = dir.path().join("run.bin");
    std::fs::copy(golden_path("cpu_recursive.bin"), &run_bin).unwrap();
    export_dataset(&ds, std::slice::from_ref(&run_bin), &[]);
    let before = listing(&ds);
    let counts = count_by_file(&ds);

    // Same name, other content: refused, and the dataset is as it was.
    std::fs::copy(golden_path("threads_mixed.bin"), &run_bin).unwrap();
    let mut args = vec![
        os("export"),
        os("--parquet"),
        os("--out-dir"),
        ds.as_os_str(),
    ];
    args.push(run_bin.as_os_str());
    let out = tach_output(&args);
    assert!(!out.status.success(), "a changed source was accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("source=run"), "{err}");
    assert!(err.contains("written from another source"), "{err}");
    assert!(err.contains("--replace"), "{err}");
    assert_eq!(listing(&ds), before);
    assert_eq!(count_by_file(&ds), counts);

    // --replace writes it again from the new file.
    let out = export_dataset(&ds, std::slice::from_ref(&run_bin), &["--replace"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("replaced"));
    let files = QueryEngine::open(std::slice::from_ref(&run_bin)).unwrap();
    let dataset = QueryEngine::open(std::slice::from_ref(&ds)).unwrap();
    assert_same("select * from samples order by sample", &files, &dataset);
    assert_same(
        "select * from stacks order by stack_id, position",
        &files,
        &dataset,
    );
    assert!(hidden_entries(&listing(&ds)).is_empty());

    // Two inputs of one name in one call: the second is refused.
    let other = dir.path().join("sub");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(golden_path("deep_recursion.bin"), other.join("run.bin")).unwrap();
    let ds2 = dir.path().join("ds2");
    let out = tach_output(&[
        os("export"),
        os("--parquet"),
        os("--out-dir"),
        ds2.as_os_str(),
        run_bin.as_os_str(),
        other.join("run.bin").as_os_str(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("partition name"));
}

#[test]
fn leftovers_of_an_interrupted_run_are_invisible_and_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let a = golden_path("cpu_recursive.bin");
    export_dataset(&ds, std::slice::from_ref(&a), &[]);
    let counts = count_by_file(&ds);
    // What a killed run leaves: its hidden temporary directory (of a process that no
    // longer runs), holding whole or partial tables.
    let stale = ds.join(".tach-cpu_recursive-999999999-0");
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    };
    let part = ds.join("samples/source=cpu_recursive/part-0.parquet");
    copy(&part, &stale.join("samples/part-0.parquet"));
    // A half-renamed partition of another source, as hidden as the export leaves it.
    copy(
        &part,
        &ds.join("samples/.source=ghost.old-999999999/part-0.parquet"),
    );
    assert_eq!(
        count_by_file(&ds),
        counts,
        "tach query read a hidden directory"
    );
    export_dataset(&ds, std::slice::from_ref(&a), &[]);
    assert!(
        !stale.exists(),
        "the stale temporary directory is still there"
    );
}

/// The batch converter on its own worker threads: a few hundred inputs (each a golden
/// file under its own name) come back converted, in the order given, with two workers
/// or one per core; once stopped, no file is started. (With a rayon task per file, a
/// conversion waiting for its own parallel work took up other whole conversions on its
/// stack: 1,000 recordings overflowed it.)
#[test]
fn many_inputs_convert_in_order_on_worker_threads() {
    use std::sync::atomic::AtomicBool;
    use tach::export::batch::{convert_all, Workers};
    use tach::export::{ExportOptions, Outcome};
    use tach::SampleFilter;

    let dir = tempfile::tempdir().unwrap();
    let sources = [
        "threads_mixed.bin",
        "cpu_recursive.bin",
        "deep_recursion.bin",
    ];
    let inputs: Vec<PathBuf> = (0..48)
        .map(|i| {
            let p = dir.path().join(format!("host{i:03}.bin"));
            std::fs::copy(golden_path(sources[i % sources.len()]), &p).unwrap();
            p
        })
        .collect();
    let parquet = tach::export::find("parquet").unwrap();
    let (filter, options) = (SampleFilter::default(), ExportOptions::default());
    // All 48 with two workers (each finishes out of turn many times over); one worker per
    // core (two on CI's machine, so the same threads again) on the first 12 only: each
    // conversion costs about a quarter of a second in a debug build.
    for (count, inputs) in [(2, &inputs[..]), (0, &inputs[..12])] {
        let ds = dir.path().join(format!("ds{count}"));
        let workers = Workers { count, stop: None };
        let done = convert_all(parquet, inputs, &ds, &filter, &options, workers, &|_| {});
        let order: Vec<&PathBuf> = done.iter().map(|c| &c.input).collect();
        assert_eq!(order, inputs.iter().collect::<Vec<_>>());
        for c in &done {
            assert!(matches!(c.result, Ok(Outcome::Written)), "{c:?}");
        }
        assert_eq!(count_by_file(&ds).len(), inputs.len());
    }
    // Stopped before it starts: every file is reported, none converted.
    let stop = AtomicBool::new(true);
    let ds = dir.path().join("stopped");
    let workers = Workers {
        count: 2,
        stop: Some(&stop),
    };
    let done = convert_all(parquet, &inputs, &ds, &filter, &options, workers, &|_| {});
    assert_eq!(done.len(), inputs.len());
    assert!(done.iter().all(|c| c.result.is_err()));
    assert!(!ds.join("samples").exists());
}
