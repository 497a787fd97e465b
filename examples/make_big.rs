//! Writes a large profile for the query benchmark: stdlib_tests_large repeated, each
//! copy shifted in time after the previous one, through our writer.
//!
//! `cargo run --release --example make_big -- [SAMPLES] [OUT]`
//! (defaults: 10000000 and target/big_10m.bin). The output is never committed.

use std::path::PathBuf;

use tach::tach::{rewrite, TachFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let want: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let out = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/big_10m.bin"));
    let src_path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden/cpython-3.15.2/stdlib_tests_large.bin");
    let src = TachFile::open(&src_path)?;
    let samples = src.collect_samples()?;
    let first = samples.iter().map(|s| s.timestamp_us).min().unwrap_or(0);
    let last = samples.iter().map(|s| s.timestamp_us).max().unwrap_or(0);
    let period = last - first + src.header().sample_interval_us;
    let mut w = rewrite::builder_like(&src).create(&out)?;
    // Frames are interned once: every copy uses the same frame ids.
    let mut remap: Vec<Option<u32>> = vec![None; src.frames().len()];
    let mut mapped = Vec::with_capacity(256);
    let mut written = 0u64;
    let mut copy = 0u64;
    while written < want {
        for s in &samples {
            if written == want {
                break;
            }
            mapped.clear();
            for &f in &s.stack {
                let n = match remap[f as usize] {
                    Some(n) => n,
                    None => {
                        let e = src.frames()[f as usize];
                        let filename = w.intern_string(src.string_bytes(e.filename));
                        let funcname = w.intern_string(src.string_bytes(e.funcname));
                        let n = w.intern_frame(tach::tach::FrameEntry {
                            filename,
                            funcname,
                            ..e
                        });
                        remap[f as usize] = Some(n);
                        n
                    }
                };
                mapped.push(n);
            }
            w.write_sample(
                s.thread_id,
                s.interpreter_id,
                s.timestamp_us + copy * period,
                s.status,
                &mapped,
            )?;
            written += 1;
        }
        copy += 1;
    }
    let summary = w.finish()?;
    eprintln!(
        "wrote {} ({} samples, {} copies of {} samples, {} bytes)",
        out.display(),
        summary.samples,
        copy,
        samples.len(),
        summary.file_size
    );
    Ok(())
}
