//! Export throughput of the speedscope and flamegraph formats on a real recording
//! (stdlib_tests_large.bin: 53 threads, 15.5k samples) and on the 380-thread synthetic
//! file (synthetic_many_threads_none.bin: 76k samples, mostly unique stacks).
//! Run: `cargo bench --bench tach -- 'export/.*/(speedscope|flamegraph)'`.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, Criterion};
use tach::export::{self, ExportOptions};
use tach::tach::{SampleFilter, TachFile};

fn bench_exports(c: &mut Criterion) {
    for file_name in ["stdlib_tests_large", "synthetic_many_threads_none"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("golden/cpython-3.15.2")
            .join(format!("{file_name}.bin"));
        let file = TachFile::open(&path).expect("golden file");
        let filter = SampleFilter::default();
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
            };
            let label = if per_thread {
                format!("{name}-per-thread")
            } else {
                name.to_string()
            };
            group.bench_function(label, |b| {
                let mut out = Vec::with_capacity(1 << 20);
                b.iter(|| {
                    out.clear();
                    export::export_to(exporter, &file, &filter, &options, &mut out).unwrap();
                    black_box(out.len())
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_exports);
