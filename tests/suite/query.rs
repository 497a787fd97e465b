//! `tach query` and the Parquet exporter (the part of the suite that needs the `query` feature).
//!
//! The nine queries of issue 4 each get a checked answer: CPython's own pstats numbers
//! (golden/cpython-3.15.2/NAME.pstats, loaded with Python's marshal) where CPython
//! defines them, otherwise an independent computation from the decoded samples.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use polars::prelude::*;
use tach::query::{QueryEngine, QueryError};
use tach::{OwnedSample, TachFile};

use crate::common::golden_path as golden;
use crate::common::tach;

fn engine(names: &[&str]) -> QueryEngine {
    let paths: Vec<PathBuf> = names.iter().map(|n| golden(n)).collect();
    QueryEngine::open(&paths).expect("open golden files")
}

fn run(e: &QueryEngine, sql: &str) -> DataFrame {
    e.run(sql).unwrap_or_else(|err| panic!("{sql}\n{err}"))
}

fn ints(df: &DataFrame, c: &str) -> Vec<Option<i64>> {
    let col = df.column(c).unwrap().cast(&DataType::Int64).unwrap();
    let ca = col.i64().unwrap();
    (0..ca.len()).map(|i| ca.get(i)).collect()
}

fn floats(df: &DataFrame, c: &str) -> Vec<Option<f64>> {
    let col = df.column(c).unwrap().cast(&DataType::Float64).unwrap();
    let ca = col.f64().unwrap();
    (0..ca.len()).map(|i| ca.get(i)).collect()
}

fn strs(df: &DataFrame, c: &str) -> Vec<Option<String>> {
    let col = df.column(c).unwrap().cast(&DataType::String).unwrap();
    let ca = col.str().unwrap();
    (0..ca.len())
        .map(|i| ca.get(i).map(str::to_string))
        .collect()
}

/// Files CPython wrote pstats for (every public golden file with samples).
const PSTATS_FILES: [&str; 12] = [
    "cpu_recursive.bin",
    "cpu_recursive_nogc_blocking.bin",
    "cpu_recursive_none.bin",
    "cpu_recursive_opcodes.bin",
    "deep_recursion.bin",
    "stdlib_tests_large.bin",
    "synthetic_deep_stacks.bin",
    "synthetic_many_threads_none.bin",
    "synthetic_rle.bin",
    "threads_mixed.bin",
    "threads_mixed_cpu.bin",
    "threads_mixed_gil.bin",
];

type Func = (String, i64, String);

/// CPython's pstats: per function (filename, line, funcname) its (direct, cumulative)
/// counts, and per (callee, caller) the caller count.
struct Pstats {
    stats: HashMap<Func, (i64, i64)>,
    callers: HashMap<(Func, Func), i64>,
}

fn load_pstats(bin: &str) -> Option<Pstats> {
    // CPython's marshalled pstats, plain or gzipped beside the golden file.
    let pstats = crate::common::golden_output(bin.trim_end_matches(".bin"), ".pstats");
    let script = r#"
import json, marshal, sys
d = marshal.loads(sys.stdin.buffer.read())
out = []
for k, v in d.items():
    if len(k) != 3:
        continue
    out.append([list(k), v[0], v[1], [[list(c), n] for c, n in v[4].items()]])
print(json.dumps(out))
"#;
    let run = || -> std::io::Result<std::process::Output> {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child.stdin.take().unwrap().write_all(&pstats)?;
        child.wait_with_output()
    };
    let out = match run() {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "python3 could not read CPython's pstats of {bin}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            crate::common::skip(&format!(
                "query: no python3 to read marshalled pstats ({e})"
            ));
            return None;
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let func = |k: &serde_json::Value| -> Func {
        (
            k[0].as_str().unwrap().to_string(),
            k[1].as_i64().unwrap(),
            k[2].as_str().unwrap().to_string(),
        )
    };
    let mut stats = HashMap::new();
    let mut callers = HashMap::new();
    for row in v.as_array().unwrap() {
        let f = func(&row[0]);
        stats.insert(
            f.clone(),
            (row[1].as_i64().unwrap(), row[2].as_i64().unwrap()),
        );
        for c in row[3].as_array().unwrap() {
            callers.insert((f.clone(), func(&c[0])), c[1].as_i64().unwrap());
        }
    }
    Some(Pstats { stats, callers })
}

fn funcs3(df: &DataFrame) -> Vec<Func> {
    let f = strs(df, "filename");
    let l = ints(df, "line");
    let n = strs(df, "funcname");
    (0..df.height())
        .map(|i| (f[i].clone().unwrap(), l[i].unwrap(), n[i].clone().unwrap()))
        .collect()
}

const INTERNAL: &str = "filename not like '%_sync_coordinator.py'";

// 1. Top self functions. CPython drops the profiler's own frames
// (`_sync_coordinator.py`, in the middle of every stack of a `run` recording) before
// taking the leaf, so its "direct" count of a sample whose leaf is such a frame goes
// to the first frame outside it: the CPython-equivalent query picks that frame from
// `stacks` and weights it by `stack_counts`.
#[test]
fn q1_q7_self_counts_equal_cpython_pstats_direct() {
    for bin in PSTATS_FILES {
        let Some(p) = load_pstats(bin) else { return };
        let e = engine(&[bin]);
        let cpython = run(
            &e,
            &format!(
                "with leaf as (select file, stack_id, min(position) as position from stacks \
                               where {INTERNAL} group by file, stack_id) \
                 select s.filename, coalesce(s.lineno, 0) as line, s.funcname, sum(c.samples) as n \
                 from leaf l \
                 join stacks s on s.file = l.file and s.stack_id = l.stack_id and s.position = l.position \
                 join stack_counts c on c.file = l.file and c.stack_id = l.stack_id \
                 group by s.filename, line, s.funcname"
            ),
        );
        let got: HashMap<Func, i64> = funcs3(&cpython)
            .into_iter()
            .zip(ints(&cpython, "n"))
            .map(|(f, n)| (f, n.unwrap()))
            .collect();
        let want: HashMap<Func, i64> = p
            .stats
            .iter()
            .filter(|(_, v)| v.0 > 0)
            .map(|(k, v)| (k.clone(), v.0))
            .collect();
        assert_eq!(got, want, "{bin}: self counts");

        // The plain query on the leaf columns of `samples`, against the decoded samples.
        let df = run(
            &e,
            "select filename, coalesce(lineno, 0) as line, funcname, count(*) as n \
             from samples where depth > 0 group by filename, line, funcname order by n desc",
        );
        let (f, samples) = decoded(bin);
        let mut leaf: HashMap<Func, i64> = HashMap::new();
        for s in samples.iter().filter(|s| !s.stack.is_empty()) {
            let fr = s.stack[0];
            let line = f.frames()[fr as usize]
                .location()
                .map_or(0, |l| l.lineno as i64);
            *leaf
                .entry((f.filename(fr).to_string(), line, f.funcname(fr).to_string()))
                .or_default() += 1;
        }
        let plain: HashMap<Func, i64> = funcs3(&df)
            .into_iter()
            .zip(ints(&df, "n"))
            .map(|(f, n)| (f, n.unwrap()))
            .collect();
        assert_eq!(plain, leaf, "{bin}: leaf counts");

        // 7. Hottest lines of the hottest function: the per-line split of one function.
        let top = strs(&df, "funcname")[0].clone().unwrap();
        let lines = run(
            &e,
            &format!(
                "select filename, coalesce(lineno, 0) as line, funcname, count(*) as n from samples \
                 where funcname = '{}' and {INTERNAL} group by filename, line, funcname \
                 order by n desc, line",
                top.replace('\'', "''")
            ),
        );
        let want_lines: HashMap<Func, i64> = want
            .iter()
            .filter(|(k, _)| k.2 == top)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let got_lines: HashMap<Func, i64> = funcs3(&lines)
            .into_iter()
            .zip(ints(&lines, "n"))
            .map(|(f, n)| (f, n.unwrap()))
            .collect();
        assert_eq!(got_lines, want_lines, "{bin}: lines of {top}");
        let n = ints(&lines, "n");
        assert!(n.windows(2).all(|w| w[0] >= w[1]), "{bin}: ordered");
    }
}

/// The recommended whole-profile inclusive query: unique stacks weighted by counts.
fn cumulative_sql(key: &str) -> String {
    format!(
        "select {key}, sum(c.samples) as n \
         from (select distinct file, stack_id, filename, coalesce(lineno, 0) as line, funcname \
               from stacks where {INTERNAL}) s \
         join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
         group by {key} order by n desc"
    )
}

// 2. Inclusive counts, once per sample (recursion once): pstats cumulative counts.
#[test]
fn q2_inclusive_counts_equal_cpython_pstats_cumulative() {
    for bin in PSTATS_FILES {
        let Some(p) = load_pstats(bin) else { return };
        let e = engine(&[bin]);
        let df = run(&e, &cumulative_sql("s.filename, s.line, s.funcname"));
        let got: HashMap<Func, i64> = funcs3(&df)
            .into_iter()
            .zip(ints(&df, "n"))
            .map(|(f, n)| (f, n.unwrap()))
            .collect();
        let want: HashMap<Func, i64> = p.stats.iter().map(|(k, v)| (k.clone(), v.1)).collect();
        assert_eq!(got, want, "{bin}: cumulative counts");
    }
}

/// Decoded samples, for the independent checks.
fn decoded(bin: &str) -> (TachFile, Vec<OwnedSample>) {
    let f = TachFile::open(golden(bin)).unwrap();
    let s = f.collect_samples().unwrap();
    (f, s)
}

// 2. The function-level inclusive query (filename, funcname), and the lazy
// sample_frames table giving the same answer with count(distinct sample).
#[test]
fn q2_top_inclusive_functions_match_decoded_samples() {
    let bin = "deep_recursion.bin";
    let (f, samples) = decoded(bin);
    let mut want: HashMap<(String, String), i64> = HashMap::new();
    for s in &samples {
        let set: HashSet<(String, String)> = s
            .stack
            .iter()
            .map(|&fr| (f.filename(fr).to_string(), f.funcname(fr).to_string()))
            .collect();
        for k in set {
            *want.entry(k).or_default() += 1;
        }
    }
    let e = engine(&[bin]);
    let weighted = run(
        &e,
        "select s.filename, s.funcname, sum(c.samples) as n \
         from (select distinct file, stack_id, filename, funcname from stacks) s \
         join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
         group by s.filename, s.funcname order by n desc limit 10",
    );
    let naive = run(
        &e,
        "select filename, funcname, count(distinct sample) as n from sample_frames \
         group by filename, funcname order by n desc limit 10",
    );
    for df in [&weighted, &naive] {
        let names = strs(df, "funcname");
        let files = strs(df, "filename");
        let n = ints(df, "n");
        assert_eq!(df.height(), 10.min(want.len()));
        for i in 0..df.height() {
            let k = (files[i].clone().unwrap(), names[i].clone().unwrap());
            assert_eq!(Some(want[&k]), n[i], "{k:?}");
        }
        let mut counts: Vec<i64> = want.values().copied().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(
            n.iter().map(|v| v.unwrap()).collect::<Vec<_>>(),
            counts[..df.height()]
        );
    }
}

// 3. Time per thread.
#[test]
fn q3_time_per_thread() {
    let bin = "threads_mixed.bin";
    let (f, samples) = decoded(bin);
    let interval = f.header().sample_interval_us as f64 / 1e6;
    let mut want: BTreeMap<u64, (i64, u64, u64)> = BTreeMap::new();
    for s in &samples {
        let e = want.entry(s.thread_id).or_insert((0, u64::MAX, 0));
        e.0 += 1;
        e.1 = e.1.min(s.timestamp_us);
        e.2 = e.2.max(s.timestamp_us);
    }
    let e = engine(&[bin]);
    let df = run(
        &e,
        &format!(
            "select thread_id, count(*) as samples, count(*) * {interval} as seconds, \
             max(timestamp_us) - min(timestamp_us) as span_us \
             from samples group by thread_id order by thread_id"
        ),
    );
    let tids = ints(&df, "thread_id");
    let n = ints(&df, "samples");
    let secs = floats(&df, "seconds");
    let span = ints(&df, "span_us");
    assert_eq!(df.height(), want.len());
    for (i, (tid, (count, lo, hi))) in want.iter().enumerate() {
        assert_eq!(tids[i], Some(*tid as i64));
        assert_eq!(n[i], Some(*count));
        assert!((secs[i].unwrap() - *count as f64 * interval).abs() < 1e-9);
        assert_eq!(span[i], Some((hi - lo) as i64));
    }
}

// 4. Samples per 100 ms bucket over time.
#[test]
fn q4_samples_per_100ms_bucket() {
    let bin = "stdlib_tests_large.bin";
    let (_, samples) = decoded(bin);
    let origin = samples.iter().map(|s| s.timestamp_us).min().unwrap();
    let mut want: BTreeMap<i64, i64> = BTreeMap::new();
    for s in &samples {
        let t = (s.timestamp_us - origin) as f64 / 1e6;
        *want.entry((t * 10.0).floor() as i64).or_default() += 1;
    }
    let e = engine(&[bin]);
    let df = run(
        &e,
        "select cast(floor(time_s * 10) as bigint) as bucket, count(*) as n \
         from samples group by bucket order by bucket",
    );
    let got: BTreeMap<i64, i64> = ints(&df, "bucket")
        .into_iter()
        .zip(ints(&df, "n"))
        .map(|(b, n)| (b.unwrap(), n.unwrap()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        *got.keys().next().unwrap(),
        0,
        "time_s starts at the first sample"
    );
}

// 5. Callers of a given function: pstats' callers dict.
#[test]
fn q5_callers_equal_cpython_pstats_callers() {
    for bin in [
        "cpu_recursive.bin",
        "stdlib_tests_large.bin",
        "threads_mixed.bin",
    ] {
        let Some(p) = load_pstats(bin) else { return };
        // The callee with the most distinct callers.
        let mut per_callee: HashMap<&Func, usize> = HashMap::new();
        for (callee, _) in p.callers.keys() {
            *per_callee.entry(callee).or_default() += 1;
        }
        let (callee, _) = per_callee
            .iter()
            .max_by_key(|(k, n)| (**n, (**k).clone()))
            .unwrap();
        let e = engine(&[bin]);
        let sql = format!(
            "select caller.filename, coalesce(caller.lineno, 0) as line, caller.funcname, \
                    sum(c.samples) as n \
             from (select file, stack_id, position + 1 as parent from stacks \
                   where funcname = '{}' and filename = '{}' and coalesce(lineno, 0) = {}) callee \
             join stacks caller on caller.file = callee.file and caller.stack_id = callee.stack_id \
                  and caller.position = callee.parent \
             join stack_counts c on c.file = callee.file and c.stack_id = callee.stack_id \
             where caller.{INTERNAL} \
             group by caller.filename, line, caller.funcname order by n desc",
            callee.2, callee.0, callee.1
        );
        let df = run(&e, &sql);
        let got: HashMap<Func, i64> = funcs3(&df)
            .into_iter()
            .zip(ints(&df, "n"))
            .map(|(f, n)| (f, n.unwrap()))
            .collect();
        let want: HashMap<Func, i64> = p
            .callers
            .iter()
            .filter(|((c, _), _)| c == *callee)
            .map(|((_, caller), n)| (caller.clone(), *n))
            .collect();
        assert!(!want.is_empty());
        assert_eq!(got, want, "{bin}: callers of {callee:?}");
    }
}

// 6. Share of GIL-wait samples per thread.
#[test]
fn q6_gil_wait_share_per_thread() {
    let bin = "threads_mixed.bin";
    let (_, samples) = decoded(bin);
    let mut want: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    for s in &samples {
        let e = want.entry(s.thread_id).or_default();
        e.0 += 1;
        e.1 += i64::from(s.status & 8 != 0);
    }
    assert!(want.values().any(|v| v.1 > 0), "the file has GIL waits");
    let e = engine(&[bin]);
    let df = run(
        &e,
        "select thread_id, count(*) as n, \
                sum(case when gil_requested then 1 else 0 end) as waits, \
                avg(case when gil_requested then 1.0 else 0.0 end) as share \
         from samples group by thread_id order by thread_id",
    );
    let tids = ints(&df, "thread_id");
    let waits = ints(&df, "waits");
    let share = floats(&df, "share");
    assert_eq!(df.height(), want.len());
    for (i, (tid, (n, w))) in want.iter().enumerate() {
        assert_eq!(tids[i], Some(*tid as i64));
        assert_eq!(waits[i], Some(*w));
        assert!((share[i].unwrap() - *w as f64 / *n as f64).abs() < 1e-12);
    }
}

// 8. Two files side by side through the `file` column.
#[test]
fn q8_two_files_side_by_side() {
    let (a, b) = ("cpu_recursive.bin", "cpu_recursive_none.bin");
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (i, bin) in [a, b].into_iter().enumerate() {
        let (f, samples) = decoded(bin);
        for s in samples.iter().filter(|s| !s.stack.is_empty()) {
            let e = want.entry(f.funcname(s.stack[0]).to_string()).or_default();
            if i == 0 {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
    }
    let e = engine(&[a, b]);
    let (fa, fb) = (
        golden(a).display().to_string(),
        golden(b).display().to_string(),
    );
    let df = run(
        &e,
        &format!(
            "select funcname, \
                    sum(case when file = '{fa}' then 1 else 0 end) as a, \
                    sum(case when file = '{fb}' then 1 else 0 end) as b \
             from samples where depth > 0 group by funcname order by funcname"
        ),
    );
    let got: BTreeMap<String, (i64, i64)> = strs(&df, "funcname")
        .into_iter()
        .zip(ints(&df, "a").into_iter().zip(ints(&df, "b")))
        .map(|(f, (x, y))| (f.unwrap(), (x.unwrap(), y.unwrap())))
        .collect();
    assert_eq!(got, want);
    let files = run(
        &e,
        "select file, count(*) as n from samples group by file order by file",
    );
    assert_eq!(strs(&files, "file"), vec![Some(fa), Some(fb)]);
}

// 9. A join between samples and frames.
#[test]
fn q9_join_samples_with_frames() {
    let bin = "cpu_recursive_opcodes.bin";
    let (f, samples) = decoded(bin);
    let mut want: BTreeMap<Option<i64>, i64> = BTreeMap::new();
    for s in samples.iter().filter(|s| !s.stack.is_empty()) {
        let op = f.frames()[s.stack[0] as usize].opcode().map(i64::from);
        *want.entry(op).or_default() += 1;
    }
    assert!(want.keys().any(|k| k.is_some()), "the file records opcodes");
    let e = engine(&[bin]);
    let df = run(
        &e,
        "select f.opcode, f.opname, count(*) as n from samples s \
         join frames f on s.file = f.file and s.frame_id = f.frame_id \
         group by f.opcode, f.opname order by f.opcode",
    );
    let got: BTreeMap<Option<i64>, i64> = ints(&df, "opcode")
        .into_iter()
        .zip(ints(&df, "n"))
        .map(|(o, n)| (o, n.unwrap()))
        .collect();
    assert_eq!(got, want);
    let names = strs(&df, "opname");
    for (op, name) in ints(&df, "opcode").iter().zip(names) {
        assert_eq!(op.is_some(), name.is_some());
        if let (Some(op), Some(name)) = (op, name) {
            assert_eq!(name, tach::query::opname(*op as u8));
            assert!(!name.starts_with('<'), "opcode {op} has a CPython name");
        }
    }
}

#[test]
fn samples_columns_match_decoded_samples() {
    let bin = "synthetic_many_threads_none.bin";
    let (f, samples) = decoded(bin);
    let e = engine(&[bin]);
    let df = run(
        &e,
        "select sample, timestamp_us, thread_id, interpreter_id, status, has_gil, on_cpu, \
         gil_requested, has_exception, main_thread, unknown, depth, frame_id, funcname, filename, lineno \
         from samples order by sample",
    );
    assert_eq!(df.height(), samples.len());
    let ts = ints(&df, "timestamp_us");
    let tid: Vec<Option<u64>> = {
        let c = df
            .column("thread_id")
            .unwrap()
            .as_materialized_series()
            .clone();
        let ca = c.u64().unwrap().clone();
        (0..ca.len()).map(|i| ca.get(i)).collect()
    };
    let iid = ints(&df, "interpreter_id");
    let st = ints(&df, "status");
    let depth = ints(&df, "depth");
    let fid = ints(&df, "frame_id");
    let func = strs(&df, "funcname");
    let line = ints(&df, "lineno");
    let flags: Vec<Vec<Option<i64>>> = [
        "has_gil",
        "on_cpu",
        "unknown",
        "gil_requested",
        "has_exception",
        "main_thread",
    ]
    .iter()
    .map(|c| ints(&df, c))
    .collect();
    for (i, s) in samples.iter().enumerate() {
        assert_eq!(ts[i], Some(s.timestamp_us as i64));
        assert_eq!(tid[i], Some(s.thread_id));
        assert_eq!(iid[i], Some(s.interpreter_id as i64));
        assert_eq!(st[i], Some(s.status as i64));
        for (b, fl) in flags.iter().enumerate() {
            assert_eq!(fl[i], Some(i64::from(s.status & (1 << b) != 0)));
        }
        assert_eq!(depth[i], Some(s.stack.len() as i64));
        let leaf = s.stack.first().copied();
        assert_eq!(fid[i], leaf.map(i64::from));
        assert_eq!(func[i].as_deref(), leaf.map(|fr| f.funcname(fr)));
        let want_line = leaf
            .and_then(|fr| f.frames()[fr as usize].location())
            .map(|l| l.lineno as i64);
        assert_eq!(line[i], want_line);
    }
    // stack ids resolve through `stacks` to the decoded stacks.
    let st = run(
        &e,
        "select stack_id, position, frame_id from stacks order by stack_id, position",
    );
    let mut stacks: HashMap<i64, Vec<i64>> = HashMap::new();
    for ((s, p), fr) in ints(&st, "stack_id")
        .into_iter()
        .zip(ints(&st, "position"))
        .zip(ints(&st, "frame_id"))
    {
        let v = stacks.entry(s.unwrap()).or_default();
        assert_eq!(v.len() as i64, p.unwrap());
        v.push(fr.unwrap());
    }
    let ids = ints(&run(&e, "select stack_id from samples"), "stack_id");
    for (s, id) in samples.iter().zip(ids) {
        let got = stacks.get(&id.unwrap()).cloned().unwrap_or_default();
        assert_eq!(got, s.stack.iter().map(|&v| v as i64).collect::<Vec<_>>());
    }
}

#[test]
fn limit_without_order_stops_early_and_keeps_time_origin() {
    let e = engine(&["stdlib_tests_large.bin"]);
    let all = run(&e, "select time_s from samples");
    let few = run(&e, "select time_s from samples limit 5");
    assert_eq!(floats(&few, "time_s"), floats(&all, "time_s")[..5].to_vec());
}

fn err(e: &QueryEngine, sql: &str) -> QueryError {
    match e.run(sql) {
        Ok(df) => panic!("{sql} should fail, gave {df:?}"),
        Err(err) => err,
    }
}

#[test]
fn file_reading_and_writing_sql_is_refused() {
    let e = engine(&["cpu_recursive.bin"]);
    let target = std::env::temp_dir().join("tach-query-should-not-exist.parquet");
    for sql in [
        "select * from read_parquet('/etc/passwd')".to_string(),
        "select * from read_csv('/etc/passwd')".to_string(),
        "select * from read_json('/etc/passwd')".to_string(),
        "select * from read_ipc('/etc/passwd')".to_string(),
        "select * from samples s join read_csv('/etc/passwd') p on true".to_string(),
        "with x as (select * from read_parquet('/etc/passwd')) select * from x".to_string(),
        "select * from samples where sample in (select 1 from read_csv('/etc/passwd'))".to_string(),
        format!("copy samples to '{}'", target.display()),
        "copy samples from '/etc/passwd'".to_string(),
        "create table t as select * from samples".to_string(),
        "drop table samples".to_string(),
        "select * into t2 from samples".to_string(),
        "show tables".to_string(),
        "select 1; select 2".to_string(),
    ] {
        let error = err(&e, &sql);
        assert!(
            matches!(error, QueryError::Forbidden(_) | QueryError::Syntax { .. }),
            "{sql}: {error}"
        );
        assert!(error.is_usage());
    }
    assert!(!target.exists());
    let msg = err(&e, "select * from read_parquet('/etc/passwd')").to_string();
    assert!(
        msg.contains("read_parquet") && msg.contains("not allowed"),
        "{msg}"
    );
}

#[test]
fn unknown_names_list_what_exists() {
    let e = engine(&["cpu_recursive.bin"]);
    let msg = err(&e, "select * from sample").to_string();
    for t in tach::query::TABLES {
        assert!(msg.contains(t), "{msg}");
    }
    let msg = err(&e, "select funcnam from samples").to_string();
    assert!(
        msg.contains("funcnam") && msg.contains("funcname") && msg.contains("timestamp_us"),
        "{msg}"
    );
    let bad = err(&e, "select count(* from samples");
    let msg = bad.to_string();
    assert!(matches!(bad, QueryError::Syntax { .. }), "{msg}");
    assert!(msg.contains("Column"), "position in {msg}");
    assert!(msg.contains('^'), "caret in {msg}");
}

#[test]
fn cli_formats_schema_explain_and_exit_status() {
    let f = golden("cpu_recursive.bin");
    let sql = "select funcname, count(*) as n from samples group by funcname order by n desc, funcname limit 3";
    let csv = tach()
        .args(["query", sql])
        .arg(&f)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert!(csv.status.success());
    let text = String::from_utf8(csv.stdout).unwrap();
    let e = engine(&["cpu_recursive.bin"]);
    let df = run(&e, sql);
    let mut want = String::from("funcname,n\n");
    for (f, n) in strs(&df, "funcname").into_iter().zip(ints(&df, "n")) {
        want.push_str(&format!("{},{}\n", f.unwrap(), n.unwrap()));
    }
    assert_eq!(text, want);

    let json = tach()
        .args(["query", sql])
        .arg(&f)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(v[0]["n"].as_i64(), ints(&df, "n")[0]);
    let nd = tach()
        .args(["query", sql])
        .arg(&f)
        .args(["--format", "ndjson"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(nd.stdout).unwrap().lines().count(), 3);

    let table = tach().args(["query", sql]).arg(&f).output().unwrap();
    let t = String::from_utf8(table.stdout).unwrap();
    assert!(t.lines().next().unwrap().starts_with("funcname"), "{t}");
    assert_eq!(t.lines().count(), 5);

    // Globs: one pattern, several files, one table.
    let pattern = golden("cpu_recursive_*.bin");
    let g = tach()
        .args(["query", "select count(distinct file) as files from samples"])
        .arg(&pattern)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    // cpu_recursive_{nogc_blocking,none,opcodes,zstd}.bin
    assert_eq!(String::from_utf8(g.stdout).unwrap(), "files\n4\n");

    let out = std::env::temp_dir().join(format!("tach-query-{}.parquet", std::process::id()));
    let pq = tach()
        .args(["query", sql])
        .arg(&f)
        .args(["--format", "parquet", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(pq.status.success());
    let back = ParquetReader::new(std::fs::File::open(&out).unwrap())
        .finish()
        .unwrap();
    assert!(back.equals(&df));
    let _ = std::fs::remove_file(&out);

    let schema = tach().args(["query", "--schema"]).output().unwrap();
    let s = String::from_utf8(schema.stdout).unwrap();
    assert!(s.contains("sample_frames") && s.contains("time_s"));
    let explain = tach()
        .args(["query", "--explain", sql])
        .arg(&f)
        .output()
        .unwrap();
    let plan = String::from_utf8(explain.stdout).unwrap();
    assert!(
        // The count runs on grouped samples (src/query/pushdown.rs): the scan builds
        // funcname and the weight only.
        plan.contains("SCAN")
            && plan.contains("PROJECT 2/17 COLUMNS")
            && plan.contains("__tach_samples"),
        "{plan}"
    );

    for bad in [
        "selec 1",
        "select * from read_parquet('/etc/passwd')",
        "select nope from samples",
    ] {
        let o = tach().args(["query", bad]).arg(&f).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(!o.stderr.is_empty());
    }
}

#[test]
fn parquet_export_round_trips_through_polars() {
    let dir = tempfile::tempdir().unwrap();
    let bins = ["threads_mixed.bin", "cpu_recursive.bin"];
    let out = dir.path().join("one.parquet");
    let st = tach()
        .args(["export", "--parquet", "-o"])
        .arg(&out)
        .arg(golden(bins[0]))
        .status()
        .unwrap();
    assert!(st.success());
    let e = engine(&[bins[0]]);
    // `frames` and `stacks` are stored as the query shows them; `samples` and
    // `stack_counts` in their own layout, which the query reads back as the same table.
    let back_engine = QueryEngine::open(std::slice::from_ref(&out)).unwrap();
    for (t, key) in [
        ("samples", "sample"),
        ("frames", "frame_id"),
        ("stacks", "stack_id, position"),
        ("stack_counts", "stack_id, thread_id, status"),
    ] {
        let sql = format!("select * from {t} order by {key}");
        let back = back_engine.run(&sql).unwrap();
        let want = e.run(&sql).unwrap();
        assert!(back.equals_missing(&want), "{t}");
    }
    for t in ["frames", "stacks"] {
        let back =
            ParquetReader::new(std::fs::File::open(out.join(format!("{t}.parquet"))).unwrap())
                .finish()
                .unwrap();
        let want = e.table(t).unwrap().collect().unwrap();
        assert!(back.equals_missing(&want), "{t}");
    }
    // Batch: a hive partition per input and table.
    let ds = dir.path().join("ds");
    let st = tach()
        .args(["export", "--parquet", "--out-dir"])
        .arg(&ds)
        .args(bins.iter().map(|b| golden(b)))
        .status()
        .unwrap();
    assert!(st.success());
    for b in bins {
        let stem = b.trim_end_matches(".bin");
        let p = ds
            .join("samples")
            .join(format!("source={stem}"))
            .join("part-0.parquet");
        let back = ParquetReader::new(std::fs::File::open(&p).unwrap())
            .finish()
            .unwrap();
        assert_eq!(
            back.height() as u64,
            TachFile::open(golden(b))
                .unwrap()
                .collect_samples()
                .unwrap()
                .len() as u64
        );
    }
    // Filters apply to samples as they do to every exporter.
    let filtered = dir.path().join("gil.parquet");
    let st = tach()
        .args([
            "export",
            "--parquet",
            "--status",
            "has-gil",
            "--end",
            "0.5",
            "-o",
        ])
        .arg(&filtered)
        .arg(golden(bins[0]))
        .status()
        .unwrap();
    assert!(st.success());
    let back = ParquetReader::new(std::fs::File::open(filtered.join("samples.parquet")).unwrap())
        .finish()
        .unwrap();
    let f = TachFile::open(golden(bins[0])).unwrap();
    let samples = f.collect_samples().unwrap();
    let origin = samples.iter().map(|s| s.timestamp_us).min().unwrap() as f64;
    let want = samples
        .iter()
        .filter(|s| s.status & 1 != 0 && (s.timestamp_us as f64) < origin + 0.5 * 1e6)
        .count();
    assert_eq!(back.height(), want);
    assert!(want > 0 && want < samples.len());
}

#[test]
fn table_output_aligns_and_notes_rows_left_out() {
    let e = engine(&["threads_mixed.bin"]);
    let mut df = run(
        &e,
        "select thread_id, count(*) as n from samples group by thread_id order by thread_id",
    );
    assert!(df.height() > 2);
    let mut out = Vec::new();
    tach::query::output::write(&mut df, tach::query::output::Format::Table, 2, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0].ends_with(" n") && lines[1].starts_with("---"),
        "{text}"
    );
    // Numbers are right-aligned to the header width.
    assert_eq!(lines[2].len(), lines[0].len(), "{text}");
    let left = df.height() - 2;
    assert!(
        lines[4].starts_with(&format!("... {left} more rows not shown")),
        "{text}"
    );
}

/// The Parquet exporter applies filters as a polars predicate; it must keep exactly the
/// samples the reader's own filter keeps.
#[test]
fn parquet_export_filters_keep_the_samples_the_reader_keeps() {
    use tach::SampleFilter;
    let dir = tempfile::tempdir().unwrap();
    // (no golden file has an on-CPU sample; these flags all occur in this one)
    let name = "stdlib_tests_large.bin";
    let file = TachFile::open(golden(name)).unwrap();
    let cases: [(&str, &[&str]); 4] = [
        ("exception", &["--status", "has-exception"]),
        (
            "gil wait",
            &["--status", "gil-requested", "--status", "no-has-gil"],
        ),
        (
            "gil, no exception",
            &["--status", "has-gil", "--status", "no-has-exception"],
        ),
        ("window", &["--start", "0.5", "--end", "1.5"]),
    ];
    for (i, (what, args)) in cases.iter().enumerate() {
        let mut filter = SampleFilter::default();
        let mut a = args.iter();
        while let Some(&flag) = a.next() {
            let v = a.next().unwrap();
            match flag {
                "--status" => filter.add_status(v).unwrap(),
                "--start" => filter.start_s = Some(v.parse().unwrap()),
                "--end" => filter.end_s = Some(v.parse().unwrap()),
                _ => unreachable!(),
            }
        }
        let origin = tach::first_timestamp(&file).unwrap().unwrap();
        let bound = filter.bind(origin);
        let mut want = 0usize;
        file.for_each_sample(|s| want += bound.keep(s) as usize)
            .unwrap();
        let out = dir.path().join(format!("{i}.parquet"));
        let st = tach()
            .args(["export", "--parquet", "-o"])
            .arg(&out)
            .args(*args)
            .arg(golden(name))
            .status()
            .unwrap();
        assert!(st.success(), "{what}");
        let samples = ParquetReader::new(std::fs::File::open(out.join("samples.parquet")).unwrap())
            .finish()
            .unwrap();
        assert_eq!(samples.height(), want, "{what}");
        assert!(
            want > 0,
            "{what}: the case keeps no sample, so it checks nothing"
        );
    }
}

/// Rows in a canonical order (group order is not defined in SQL) with every column
/// as text, for comparing two answers.
fn canonical_rows(df: &DataFrame) -> Vec<Vec<String>> {
    let cols: Vec<Vec<String>> = df
        .columns()
        .iter()
        .map(|c| {
            let s = c.as_materialized_series();
            (0..s.len())
                .map(|i| format!("{:?}", s.get(i).unwrap()))
                .collect()
        })
        .collect();
    let mut rows: Vec<Vec<String>> = (0..df.height())
        .map(|i| cols.iter().map(|c| c[i].clone()).collect())
        .collect();
    rows.sort();
    rows
}

// Count-only aggregates over `samples` run on grouped samples (src/query/pushdown.rs);
// each must give the answer of the same query run as written, column names and types
// included, and must really take the grouped path.
/// Runs `sql` as the engine plans it (rewrites included) and exactly as written, and
/// requires the same schema and rows (in order where it has a LIMIT: the queries that
/// have one order totally). Returns the answer as written.
fn assert_answer_as_written(e: &QueryEngine, sql: &str, names: &[&str]) -> DataFrame {
    let ours = run(e, sql);
    let written = e.lazy_as_written(sql).unwrap().collect().unwrap();
    assert_eq!(ours.schema(), written.schema(), "{names:?} {sql}");
    if sql.contains("limit") {
        assert!(ours.equals_missing(&written), "{names:?} {sql}");
    }
    assert_eq!(
        canonical_rows(&ours),
        canonical_rows(&written),
        "{names:?} {sql}"
    );
    written
}

#[test]
fn count_pushdown_answers_equal_the_query_as_written() {
    let queries = [
        "select funcname, count(*) as samples from samples group by funcname \
         order by samples desc, funcname limit 10",
        "select funcname, count(*) from samples group by funcname",
        "select file, thread_id, interpreter_id, count(*) as n from samples \
         group by file, thread_id, interpreter_id",
        "select thread_id, count(*) as n, min(depth) as lo, max(depth) as hi, \
         count(distinct stack_id) as stacks from samples group by thread_id",
        "select s.thread_id, count(1) as n from samples s where not s.has_gil \
         and s.gil_requested group by s.thread_id having count(*) > 1 order by n desc",
        "select filename, lineno, count(*) as n from samples \
         where funcname = 'cpu_work' or lower(funcname) like '%test%' \
         group by filename, lineno order by n desc, lineno",
        "select status, on_cpu, has_exception, main_thread, unknown, count(*) as n \
         from samples group by status, on_cpu, has_exception, main_thread, unknown",
        "select stack_id, depth, frame_id, count(*) as n from samples \
         group by stack_id, depth, frame_id",
        "select * from (select funcname, count(*) as n from samples group by funcname) t \
         where n > 3",
        "with top as (select funcname, count(*) as n from samples group by funcname) \
         select funcname, n from top order by n desc, funcname limit 5",
        "select coalesce(funcname, '<none>') as f, count(*) as n from samples \
         group by coalesce(funcname, '<none>')",
    ];
    let files: [&[&str]; 4] = [
        &["stdlib_tests_large.bin"],
        &["threads_mixed.bin"],
        &["synthetic_rle.bin"],
        &["cpu_recursive.bin", "threads_mixed.bin"],
    ];
    let mut nonempty = 0;
    for names in files {
        let e = engine(names);
        for sql in queries {
            assert!(
                tach::query::pushdown_rewrite(sql, names.len()).is_some(),
                "not rewritten: {sql}"
            );
            let plan = e.explain(sql).unwrap();
            assert!(plan.contains(tach::query::WEIGHT_COLUMN), "{sql}\n{plan}");
            let written = assert_answer_as_written(&e, sql, names);
            nonempty += usize::from(written.height() > 0);
        }
    }
    // Nearly every query has rows on every file (the filtered ones may not).
    assert!(nonempty >= files.len() * (queries.len() - 2), "{nonempty}");
}

/// Counting rows over several files (polars sums each file's count) works for every
/// table and adds up.
#[test]
fn count_over_several_files_adds_up() {
    let names = ["cpu_recursive.bin", "threads_mixed.bin"];
    let both = engine(&names);
    for table in [
        "samples",
        "frames",
        "stacks",
        "stack_counts",
        "sample_frames",
    ] {
        let sql = format!("select count(*) as n from {table}");
        let count = |e: &QueryEngine| -> u64 {
            let df = run(e, &sql);
            df.column("n")
                .unwrap()
                .cast(&DataType::UInt64)
                .unwrap()
                .u64()
                .unwrap()
                .get(0)
                .unwrap()
        };
        let each: u64 = names.iter().map(|n| count(&engine(&[n]))).sum();
        assert!(each > 0, "{table}");
        assert_eq!(count(&both), each, "{table}");
    }
}

/// polars takes a scan's columns in the order it asked for them, so the scans must
/// build them in that order, not in schema order.
#[test]
fn columns_come_in_the_order_selected() {
    let e = engine(&["stdlib_tests_large.bin"]);
    for sql in [
        "select lineno, funcname, stack_id from samples",
        "select lineno, funcname, thread_id from samples where thread_id > 0",
        "select opname, lineno, funcname, position, stack_id from stacks",
        "select distinct lineno, funcname from stacks",
        "select samples, thread_id, stack_id from stack_counts",
        "select lineno, funcname, frame_id from frames",
        "select lineno, funcname, sample from sample_frames limit 5",
        "select funcname, count(*) as n, thread_id from samples group by thread_id, funcname",
    ] {
        let df = run(&e, sql);
        let got: Vec<String> = df
            .get_column_names()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let select = sql
            .split(" from ")
            .next()
            .unwrap()
            .trim_start_matches("select ");
        let want: Vec<String> = select
            .trim_start_matches("distinct ")
            .split(", ")
            .map(|c| c.rsplit(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "{sql}");
        assert!(df.height() > 0, "{sql}");
    }
}

#[test]
fn distinct_stacks_answer_equals_the_query_as_written() {
    // (query, whether it may be rewritten with several files: only with `file`)
    let queries = [
        (
            "select s.funcname, sum(c.samples) as samples \
             from (select distinct file, stack_id, funcname from stacks) s \
             join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
             group by s.funcname order by samples desc, s.funcname limit 10",
            true,
        ),
        (
            "select s.funcname, s.filename, s.line, sum(c.samples) as samples \
             from (select distinct file, stack_id, filename, funcname, \
                   coalesce(lineno, 0) as line from stacks) s \
             join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
             group by s.funcname, s.filename, s.line",
            false,
        ),
        ("select distinct funcname from stacks", false),
        ("select distinct stack_id, position from stacks", false),
        ("select distinct file, frame_id, lineno from stacks", true),
        (
            "select distinct filename, lineno, end_lineno, column, end_column, opcode, \
             opname from stacks",
            false,
        ),
        (
            "select count(*) as n from (select distinct file, funcname from stacks)",
            true,
        ),
        (
            "select distinct x.funcname as f, x.file from stacks x",
            true,
        ),
        ("select distinct file, opname, funcname from stacks", true),
    ];
    let files: [&[&str]; 5] = [
        &["stdlib_tests_large.bin"],
        &["cpu_recursive_opcodes.bin"],
        &["synthetic_deep_stacks.bin"],
        &["synthetic_empty.bin"],
        &["cpu_recursive.bin", "threads_mixed.bin"],
    ];
    let mut rewritten = 0;
    for names in files {
        let e = engine(names);
        for (sql, with_several) in queries {
            // The second query's distinct has an expression: left to polars.
            let expected = !sql.contains("coalesce") && (names.len() == 1 || with_several);
            let r = tach::query::pushdown_rewrite(sql, names.len());
            assert_eq!(
                r.as_ref().is_some_and(|r| !r.distinct_stacks.is_empty()),
                expected,
                "{names:?} {sql}"
            );
            let plan = e.explain(sql).unwrap();
            if expected {
                rewritten += 1;
                assert!(!plan.contains("UNIQUE"), "{names:?} {sql}\n{plan}");
            }
            assert_answer_as_written(&e, sql, names);
        }
    }
    assert!(rewritten >= 30, "{rewritten}");
}

// Issue 30: SQL's arithmetic and the forms polars lacks, rewritten before polars runs.

/// The query polars runs for `sql` (checked and rewritten).
fn rewritten(e: &QueryEngine, sql: &str) -> String {
    e.rewritten(sql)
        .unwrap_or_else(|err| panic!("{sql}\n{err}"))
}

#[test]
fn unsigned_columns_subtract_below_zero_as_signed_integers() {
    let bin = "stdlib_tests_large.bin";
    let (_, samples) = decoded(bin);
    let depths: Vec<i64> = samples.iter().map(|s| s.stack.len() as i64).collect();
    let (lo, hi) = (*depths.iter().min().unwrap(), *depths.iter().max().unwrap());
    let e = engine(&[bin]);
    let df = run(
        &e,
        "select min(depth) - max(depth) as d, -max(depth) as m from samples",
    );
    assert_eq!(ints(&df, "d"), [Some(lo - hi)]);
    assert_eq!(ints(&df, "m"), [Some(-hi)]);
    assert!(lo - hi < 0);
    // A filter on a difference that goes below zero.
    let below = samples
        .iter()
        .filter(|s| s.stack.first().is_some_and(|&f| (f as i64) - 10 < 0))
        .count() as i64;
    let df = run(
        &e,
        "select count(*) as n from samples where frame_id - 10 < 0",
    );
    assert_eq!(ints(&df, "n"), [Some(below)]);
    assert!(below > 0);
    let df = run(&e, "select min(stack_id - 5) as m from samples");
    assert_eq!(ints(&df, "m"), [Some(-5)]);
    // Every id column but thread_id is a signed 64-bit integer in SQL, in every table.
    for table in [
        "samples",
        "stacks",
        "frames",
        "stack_counts",
        "sample_frames",
    ] {
        let df = run(&e, &format!("select * from {table} limit 1"));
        for c in df.columns() {
            assert!(
                !c.dtype().is_unsigned_integer() || c.name().as_str() == "thread_id",
                "{table}.{} is {}",
                c.name(),
                c.dtype()
            );
        }
    }
}

#[test]
fn thread_id_arithmetic_gives_the_value_or_an_error_never_a_wrapped_one() {
    // 53 threads: the difference of the smallest and the largest id is negative.
    let bin = "stdlib_tests_large.bin";
    let (_, samples) = decoded(bin);
    let ids: Vec<i64> = samples.iter().map(|s| s.thread_id as i64).collect();
    let (lo, hi) = (*ids.iter().min().unwrap(), *ids.iter().max().unwrap());
    let e = engine(&[bin]);
    let df = run(
        &e,
        "select min(thread_id) - max(thread_id) as d, -max(thread_id) as m, \
         max(thread_id) - 1000000000000000 as far, sum(thread_id) as s from samples",
    );
    assert!(lo < hi);
    assert_eq!(ints(&df, "d"), [Some(lo - hi)]);
    assert_eq!(ints(&df, "m"), [Some(-hi)]);
    assert_eq!(ints(&df, "far"), [Some(hi - 1_000_000_000_000_000)]);
    assert_eq!(ints(&df, "s"), [Some(ids.iter().sum::<i64>())]);
    // Ids above 2^63 (CPython's synthetic many-threads file) do not fit a signed result:
    // an error, where polars' own arithmetic wrapped.
    let e = engine(&["synthetic_many_threads_none.bin"]);
    let err = e
        .run("select max(thread_id) - 5 as x from samples")
        .expect_err("an id above 2^63 minus 5 does not fit BIGINT");
    assert!(err.to_string().contains("conversion"), "{err}");
}

#[test]
fn counting_still_reads_grouped_samples_and_only_the_columns_used() {
    let e = engine(&["stdlib_tests_large.bin"]);
    let plan = e
        .explain("select depth - 10 as rel, count(*) as n from samples group by rel")
        .unwrap();
    assert!(plan.contains("__tach_samples"), "{plan}");
    let plan = e.explain("select funcname from samples").unwrap();
    assert!(plan.contains("1/20"), "{plan}");
}

#[test]
fn round_is_half_away_from_zero_and_integer_division_truncates() {
    let e = engine(&["cpu_recursive.bin"]);
    let df = run(
        &e,
        "select round(2.5) as a, round(-2.5) as b, round(2.345, 2) as c, \
         round(-1250, -2) as d, round(x, 1) as e, round(-x) as f, \
         7 // 2 as g, -7 // 2 as h, -7 % 2 as i \
         from (select 0.25 as x)",
    );
    assert_eq!(floats(&df, "a"), [Some(3.0)]);
    assert_eq!(floats(&df, "b"), [Some(-3.0)]);
    assert_eq!(floats(&df, "c"), [Some(2.35)]);
    assert_eq!(floats(&df, "d"), [Some(-1300.0)]);
    assert_eq!(floats(&df, "e"), [Some(0.3)]);
    assert_eq!(floats(&df, "f"), [Some(-0.0)]);
    assert_eq!(ints(&df, "g"), [Some(3)]);
    assert_eq!(ints(&df, "h"), [Some(-3)]);
    assert_eq!(ints(&df, "i"), [Some(-1)]);
}

/// `a` and `b` give the same rows, in order.
fn same_rows(e: &QueryEngine, a: &str, b: &str) -> DataFrame {
    let (x, y) = (run(e, a), run(e, b));
    assert_eq!(canonical_rows(&x), canonical_rows(&y), "{a}\n{b}");
    assert!(x.height() > 0, "{a}");
    x
}

#[test]
fn a_window_over_an_aggregate_runs_after_the_grouping() {
    let e = engine(&["threads_mixed.bin"]);
    let sql = "select funcname, count(*) * 100.0 / sum(count(*)) over () as pct \
               from samples group by funcname order by pct desc, funcname";
    let df = same_rows(
        &e,
        sql,
        "with t as (select funcname, count(*) as n from samples group by funcname) \
         select funcname, n * 100.0 / sum(n) over () as pct from t order by pct desc, funcname",
    );
    let total: f64 = floats(&df, "pct").iter().map(|p| p.unwrap()).sum();
    assert!((total - 100.0).abs() < 1e-9, "{total}");
    assert!(rewritten(&e, sql).contains("__tach_grouped"));
    // A rank over counts, within each file, and QUALIFY over it.
    same_rows(
        &e,
        "select thread_id, funcname, count(*) as n, row_number() over (partition by thread_id \
         order by count(*) desc, funcname) as k from samples group by thread_id, funcname \
         order by thread_id, k",
        "with t as (select thread_id, funcname, count(*) as n from samples \
         group by thread_id, funcname) select thread_id, funcname, n, row_number() over \
         (partition by thread_id order by -n, funcname) as k from t order by thread_id, k",
    );
    same_rows(
        &e,
        "select thread_id, count(*) as n from samples group by thread_id \
         qualify rank() over (order by count(*) desc) = 1",
        "select thread_id, count(*) as n from samples group by thread_id \
         order by n desc limit 1",
    );
}

#[test]
fn order_by_an_unselected_aggregate_sorts_by_a_hidden_column() {
    let e = engine(&["threads_mixed.bin"]);
    let df = same_rows(
        &e,
        "select thread_id from samples group by thread_id order by count(*) desc, thread_id",
        "select thread_id from (select thread_id, count(*) as n from samples \
         group by thread_id) order by n desc, thread_id",
    );
    assert_eq!(df.get_column_names(), ["thread_id"]);
}

#[test]
fn rank_and_dense_rank_give_ties_one_rank() {
    let e = engine(&["stdlib_tests_large.bin"]);
    let df = run(
        &e,
        "with t as (select funcname, count(*) as n from samples group by funcname) \
         select n, rank() over (order by n desc) as r, dense_rank() over (order by n desc) \
         as d from t order by n desc",
    );
    // Independently: rank = 1 + rows with a larger n; dense = 1 + distinct larger n.
    let n: Vec<i64> = ints(&df, "n").into_iter().map(Option::unwrap).collect();
    let want_r: Vec<Option<i64>> = n
        .iter()
        .map(|x| Some(1 + n.iter().filter(|y| *y > x).count() as i64))
        .collect();
    let distinct: HashSet<i64> = n.iter().copied().collect();
    let want_d: Vec<Option<i64>> = n
        .iter()
        .map(|x| Some(1 + distinct.iter().filter(|y| *y > x).count() as i64))
        .collect();
    assert_eq!(ints(&df, "r"), want_r);
    assert_eq!(ints(&df, "d"), want_d);
    assert!(want_r != want_d, "the file has ties");
}

#[test]
fn exists_is_a_semi_join_and_not_exists_an_anti_join() {
    let e = engine(&["threads_mixed.bin"]);
    let sql = "select count(*) as n from samples x where exists \
               (select 1 from stacks s where s.stack_id = x.stack_id and s.funcname = 'main')";
    assert!(
        rewritten(&e, sql).contains("SEMI JOIN"),
        "{}",
        rewritten(&e, sql)
    );
    let with = ints(&run(&e, sql), "n")[0].unwrap();
    let without = ints(
        &run(&e, &sql.replace("where exists", "where not exists")),
        "n",
    )[0]
    .unwrap();
    let all = ints(&run(&e, "select count(*) as n from samples"), "n")[0].unwrap();
    let in_form = ints(
        &run(
            &e,
            "select count(*) as n from samples where stack_id in \
             (select stack_id from stacks where funcname = 'main')",
        ),
        "n",
    )[0]
    .unwrap();
    assert_eq!(with, in_form);
    assert_eq!(with + without, all);
    assert!(with > 0 && without > 0);
    // Uncorrelated: run first.
    let n = ints(
        &run(
            &e,
            "select count(*) as n from samples where exists (select 1 from frames where funcname = 'main')",
        ),
        "n",
    )[0];
    assert_eq!(n, Some(all));
}

#[test]
fn refusals_are_one_sentence_naming_the_construct() {
    let e = engine(&["threads_mixed.bin"]);
    for (sql, names) in [
        (
            "select count(*) from samples x where has_gil or exists \
             (select 1 from stacks s where s.stack_id = x.stack_id)",
            "EXISTS",
        ),
        (
            "select count(*) from samples x where exists \
             (select 1 from stacks s where s.stack_id > x.stack_id)",
            "EXISTS",
        ),
        (
            "select exists (select 1 from stacks s where s.stack_id = x.stack_id) from samples x",
            "EXISTS",
        ),
    ] {
        let msg = err(&e, sql).to_string();
        assert!(msg.contains(names), "{sql}: {msg}");
        assert!(
            !msg.contains("{ ") && !msg.contains("Query") && !msg.contains('\n'),
            "{sql}: {msg}"
        );
    }
}
