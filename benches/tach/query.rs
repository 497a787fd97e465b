//! `tach query` on a large profile (`cargo bench --bench tach -- query`): the top-self
//! and top-inclusive queries of docs/performance.md ("query"). The 10 M-sample input is made by
//! `cargo run --release --example repeat_profile -- golden/cpython-3.15.2/stdlib_tests_large.bin target/big_10m.bin 10000000` (never committed);
//! without it the bench runs on stdlib_tests_large and says so.

use std::path::PathBuf;

use criterion::{criterion_group, Criterion};
use tach::query::QueryEngine;

pub const TOP_SELF: &str = "select funcname, count(*) as samples from samples \
     group by funcname order by samples desc limit 10";
pub const TOP_INCLUSIVE: &str = "select s.funcname, sum(c.samples) as samples \
     from (select distinct file, stack_id, funcname from stacks) s \
     join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
     group by s.funcname order by samples desc limit 10";

fn input() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let big = std::env::var_os("TACH_BIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/big_10m.bin"));
    if big.exists() {
        return big;
    }
    eprintln!(
        "SKIPPED the 10M-sample input: {} is missing (cargo run --release --example repeat_profile -- golden/cpython-3.15.2/stdlib_tests_large.bin target/big_10m.bin 10000000); \
         using stdlib_tests_large",
        big.display()
    );
    root.join("golden/cpython-3.15.2/stdlib_tests_large.bin")
}

fn bench(c: &mut Criterion) {
    let path = input();
    let mut g = c.benchmark_group("query");
    g.sample_size(10);
    for (name, sql) in [("top_self", TOP_SELF), ("top_inclusive", TOP_INCLUSIVE)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                // Open inside the loop: a query run by the CLI pays for the open too.
                let e = QueryEngine::open(std::slice::from_ref(&path)).expect("open");
                e.run(sql).expect("query")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
