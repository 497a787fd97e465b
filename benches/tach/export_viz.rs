//! Export throughput of the speedscope and flamegraph formats on a real recording
//! (stdlib_tests_large.bin: 53 threads, 15.5k samples) and on the 380-thread synthetic
//! file (synthetic_many_threads_none.bin: 76k samples, mostly unique stacks).
//! Run: `cargo bench --bench tach -- 'export/.*/(speedscope|flamegraph)'`.

use std::path::Path;

use criterion::{criterion_group, Criterion};
use tach::export::{self, ExportOptions};
use tach::TachFile;

fn bench_exports(c: &mut Criterion) {
    for file_name in ["stdlib_tests_large", "synthetic_many_threads_none"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("golden/cpython-3.15.2")
            .join(format!("{file_name}.bin"));
        let file = TachFile::open(&path).expect("golden file");
        let mut group = c.benchmark_group(format!("export/{file_name}"));
        group.sample_size(10);
        for (name, per_thread) in [
            ("speedscope", false),
            ("flamegraph", false),
            ("flamegraph", true),
        ] {
            let exporter = export::find(name).expect("registered exporter");
            let options = ExportOptions {
                per_thread,
                title: None,
                ..Default::default()
            };
            let label = if per_thread {
                format!("{name}-per-thread")
            } else {
                name.to_string()
            };
            crate::bench_export(&mut group, &label, exporter, &file, &options);
        }
        group.finish();
    }
}

criterion_group!(benches, bench_exports);
