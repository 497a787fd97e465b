//! Makes a large profile by repeating a small one: `repeat_profile IN OUT SAMPLES`.
//! Each repetition shifts timestamps by the input's span, so the result reads like
//! one long recording. Used for the 10 M-sample benchmarks in docs/performance.md.

use tach::{rewrite, TachFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, target] = args.as_slice() else {
        return Err("usage: repeat_profile IN OUT SAMPLES".into());
    };
    let target: u64 = target.parse()?;
    let src = TachFile::open(input)?;
    let samples = src.collect_samples()?;
    if samples.is_empty() {
        return Err("the input has no samples".into());
    }
    let first = samples.iter().map(|s| s.timestamp_us).min().unwrap_or(0);
    let last = samples.iter().map(|s| s.timestamp_us).max().unwrap_or(0);
    let span = last - first + src.header().sample_interval_us;
    let mut w = rewrite::builder_like(&src).stats(None).create(output)?;
    // Intern frames once, in the input's table order.
    let ids = rewrite::copy_frames(&src, &mut w);
    let mut stack = Vec::new();
    let mut written = 0u64;
    let mut round = 0u64;
    while written < target {
        for s in &samples {
            stack.clear();
            stack.extend(s.stack.iter().map(|&i| ids[i as usize]));
            let ts = s.timestamp_us + round * span;
            w.write_sample(s.thread_id, s.interpreter_id, ts, s.status, &stack)?;
            written += 1;
            if written >= target {
                break;
            }
        }
        round += 1;
    }
    let summary = w.finish()?;
    eprintln!(
        "wrote {output}: {} samples, {} bytes",
        summary.samples, summary.file_size
    );
    Ok(())
}
