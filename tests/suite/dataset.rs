//! `tach query` over Parquet (exports and hive datasets) against the same query over the
//! TACH files they were written from.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use polars::prelude::*;
use tach::query::QueryEngine;

use crate::common::{golden_bins, golden_path};

fn tach(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tach"))
        .args(args)
        .output()
        .expect("run tach")
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
    let out = tach(&args);
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
    let out = tach(&[
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
    let out = Command::new(env!("CARGO_BIN_EXE_tach"))
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
    let bins: Vec<PathBuf> = [
        "threads_mixed.bin",
        "cpu_recursive.bin",
        "deep_recursion.bin",
    ]
    .iter()
    .map(|f| golden_path(f))
    .collect();
    export_dataset(&ds, &bins, &[]);
    let one = bins[1].display().to_string();
    let sql = format!(
        "select funcname, count(*) as n from samples where file = '{one}' group by funcname"
    );
    let out = tach(&[os("query"), os("--explain"), os(&sql), ds.as_os_str()]);
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
    assert!(!plan.contains("source=threads_mixed") && !plan.contains("source=deep_recursion"));
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
    assert!(
        plan.contains("PROJECT 2/"),
        "projection not pushed down:\n{plan}"
    );
}
