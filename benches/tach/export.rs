//! Export throughput of the CPython-defined formats on a real recording
//! (golden/cpython-3.15.2/stdlib_tests_large.bin: 53 threads, 3517 frames).
//! Run: `cargo bench --bench tach -- 'export/.*/(pstats|jsonl|gecko)'`.

use std::path::Path;

use criterion::{criterion_group, Criterion};
use tach::export::{self, ExportOptions};
use tach::TachFile;

fn bench_exports(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cpython-3.15.2/stdlib_tests_large.bin");
    let file = TachFile::open(&path).expect("golden file");
    let options = ExportOptions::default();
    let mut group = c.benchmark_group("export/stdlib_tests_large");
    for name in ["pstats", "jsonl", "gecko"] {
        let exporter = export::find(name).expect("registered exporter");
        crate::bench_export(&mut group, name, exporter, &file, &options);
    }
    group.finish();
}

criterion_group!(benches, bench_exports);
