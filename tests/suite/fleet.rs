//! Queries over many profiles computed a group of profiles at a time
//! (`QueryEngine::with_group_profiles`, what bounds the memory of a query over a fleet)
//! give the same rows as one scan of every input, over TACH files, over their dataset
//! and over both at once: count queries from the grouped samples table, and other
//! grouped aggregates over `samples` from partial aggregates.

use std::path::PathBuf;

use tach::query::QueryEngine;

use crate::common::{golden_bins, golden_path, tach};

/// Count-only queries the pushdown answers from the grouped table: keyed by the leaf
/// function, by file (no two groups share a key), by thread and flags under a filter,
/// with `count(DISTINCT ...)`, `min` and `max`, one with no column but the count.
const QUERIES: [&str; 7] = [
    "select funcname, count(*) as n from samples group by funcname order by n desc, funcname limit 10",
    "select file, count(*) as n from samples group by file order by file",
    "select thread_id, has_gil, count(*) as n from samples where depth > 1 group by thread_id, has_gil order by n desc, thread_id, has_gil",
    "select filename, count(distinct funcname) as f, min(lineno) as lo, max(depth) as d, count(*) as n from samples group by filename order by filename",
    "select s.status, count(*) as n from samples as s where s.funcname is not null group by s.status order by s.status",
    "select depth, count(*) as n from samples group by depth having count(*) > 10 order by depth",
    "select 1 as one, count(*) as n from samples group by one",
];

/// Grouped aggregates the count pushdown cannot answer (per-sample columns, sums,
/// averages), split into partial aggregates: per second of one function, per thread
/// with every aggregate that splits, one row without GROUP BY, HAVING on an aggregate
/// not selected, ORDER BY an aggregate, wall-clock seconds, keys by position.
const SAMPLES_QUERIES: [&str; 8] = [
    "select cast(floor(time_s) as bigint) as sec, count(*) as n from samples where depth > 3 group by sec order by sec",
    "select thread_id, count(*) as n, sum(depth) as s, avg(depth) as a, min(time_s) as first, max(timestamp_us) as last from samples group by thread_id order by thread_id",
    "select count(*), sum(depth), avg(depth), max(time_s), min(funcname) from samples where has_gil",
    "select funcname, max(time_s) as last from samples group by funcname having sum(depth) > 100 order by last desc, funcname limit 20",
    "select thread_id, count(*) from samples where time_s < 1 group by thread_id order by count(*) desc, thread_id",
    "select date_trunc('second', wall_time) as t, count(*) as n from samples group by t order by t",
    "select file, on_cpu, count(sample) as n, max(sample) as m from samples group by 1, 2 order by 1, 2",
    "select filename, lineno, count(*) * 2 + 1 as odd from samples where lineno is not null group by filename, lineno order by odd desc, filename, lineno limit 15",
];

/// One scan of the bounded grouped table (`src/query/bounded.rs`), where one scan of
/// every input has a Parquet scan or a union of one scan per TACH file.
fn is_bounded(plan: &str) -> bool {
    plan.matches("SCAN").count() == 1 && plan.contains("Anonymous SCAN")
}

fn assert_bounded_is_the_same(inputs: &[PathBuf], what: &str) {
    let whole = QueryEngine::open(inputs)
        .unwrap()
        .with_group_profiles(usize::MAX);
    // Groups of 4 over the 18 or more golden files: several groups, the last one short.
    let bounded = QueryEngine::open(inputs).unwrap().with_group_profiles(4);
    for sql in QUERIES.into_iter().chain(SAMPLES_QUERIES) {
        let plan = bounded.explain(sql).unwrap();
        assert!(is_bounded(&plan), "{what}: {sql}\n{plan}");
        let plan = whole.explain(sql).unwrap();
        assert!(!is_bounded(&plan), "{what}: {sql}\n{plan}");
        let a = whole
            .run(sql)
            .unwrap_or_else(|e| panic!("{what}: {sql}\n{e}"));
        let b = bounded
            .run(sql)
            .unwrap_or_else(|e| panic!("{what}: {sql}\n{e}"));
        assert!(a.height() > 0, "{what}: {sql}: no rows, nothing compared");
        assert_eq!(a.schema(), b.schema(), "{what}: {sql}");
        assert!(
            a.equals_missing(&b),
            "{what}: {sql}\none scan:\n{a}\ngroups of 4:\n{b}"
        );
    }
}

#[test]
fn queries_over_groups_of_profiles_equal_one_scan() {
    let bins = golden_bins();
    assert_bounded_is_the_same(&bins, "TACH files");

    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let out = tach()
        .args(["export", "--parquet", "--out-dir"])
        .arg(&ds)
        .args(&bins)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_bounded_is_the_same(std::slice::from_ref(&ds), "their dataset");
    // A dataset and TACH files in one query: groups over both.
    let mixed = vec![ds.clone(), golden_path("threads_mixed.bin")];
    assert_bounded_is_the_same(&mixed, "dataset and a TACH file");
}
