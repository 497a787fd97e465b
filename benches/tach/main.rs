//! tach's criterion benchmarks, in one bench binary (each binary links the whole library,
//! polars included, so one link instead of four). Pick a part with criterion's filter:
//!
//! - `cargo bench --bench tach -- 'decode|encode'`: reader and writer throughput
//! - `cargo bench --bench tach -- 'export/.*/(pstats|jsonl|gecko)'`: CPython's formats
//! - `cargo bench --bench tach -- 'export/.*/(speedscope|flamegraph)'`: the viewers' formats
//! - `cargo bench --bench tach -- query`: SQL on a large profile

mod codec;
mod export;
mod export_viz;
#[cfg(feature = "query")]
mod query;

/// Times one exporter on one open file, into a reused in-memory buffer.
fn bench_export(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    exporter: &dyn tach::export::Exporter,
    file: &tach::TachFile,
    options: &tach::export::ExportOptions,
) {
    let filter = tach::SampleFilter::default();
    group.bench_function(label, |b| {
        let mut out = Vec::with_capacity(1 << 20);
        b.iter(|| {
            out.clear();
            tach::export::export_to(exporter, file, &filter, options, &mut out).unwrap();
            std::hint::black_box(out.len())
        })
    });
}

fn main() {
    // What `criterion_main!` expands to, with the query group behind its feature.
    codec::benches();
    export::benches();
    export_viz::benches();
    #[cfg(feature = "query")]
    query::benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
