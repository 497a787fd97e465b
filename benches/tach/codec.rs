//! Decode and encode throughput of the TACH reader and writer.
//!
//! `cargo bench --bench tach -- 'decode|encode'`. Throughput is reported in samples
//! (elements) per second. Set TACH_BENCH_BIG to a large file (see examples/repeat_profile.rs) to
//! include it.

use std::io::Cursor;
use std::path::PathBuf;

use criterion::{criterion_group, Criterion, Throughput};
use tach::aggregate::ProfileIndex;
use tach::{rewrite, Decompression, SampleFilter, TachFile};

fn inputs() -> Vec<PathBuf> {
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/cpython-3.15.2");
    let mut v = vec![
        golden.join("stdlib_tests_large.bin"),
        golden.join("synthetic_many_threads_none.bin"),
        golden.join("cpu_recursive.bin"),
    ];
    if let Ok(big) = std::env::var("TACH_BENCH_BIG") {
        v.push(PathBuf::from(big));
    }
    v
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    g.sample_size(20);
    for path in inputs() {
        let file = TachFile::open(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        g.throughput(Throughput::Elements(file.header().sample_count));
        g.bench_function(format!("stream/{name}"), |b| {
            b.iter(|| {
                let mut n = 0u64;
                let mut s = file.samples();
                while let Some(x) = s.next_sample().unwrap() {
                    n += x.stack.len() as u64;
                }
                n
            })
        });
        g.bench_function(format!("stream_same_thread/{name}"), |b| {
            b.iter(|| {
                let mut n = 0u64;
                let mut s = file.samples_with(Decompression::SameThread);
                while let Some(x) = s.next_sample().unwrap() {
                    n += x.stack.len() as u64;
                }
                n
            })
        });
        g.bench_function(format!("index/{name}"), |b| {
            b.iter(|| {
                ProfileIndex::build(&file, &SampleFilter::default())
                    .unwrap()
                    .total_samples
            })
        });
        g.bench_function(format!("open/{name}"), |b| {
            b.iter(|| TachFile::open(&path).unwrap().frames().len())
        });
    }
    g.finish();
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    g.sample_size(10);
    for path in inputs() {
        let file = TachFile::open(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        g.throughput(Throughput::Elements(file.header().sample_count));
        for compression in [tach::Compression::None, tach::Compression::Zstd] {
            g.bench_function(format!("rewrite_{}/{name}", compression.name()), |b| {
                b.iter(|| {
                    let mut buf = Cursor::new(Vec::with_capacity(1 << 20));
                    let mut w = rewrite::builder_like(&file)
                        .compression(compression)
                        .to_writer("memory", &mut buf)
                        .unwrap();
                    rewrite::copy_samples(&file, &mut w).unwrap();
                    w.finish().unwrap().file_size
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, decode, encode);
