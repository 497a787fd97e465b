//! Counts the samples a filter keeps, by innermost function: the threads, time window
//! and status flags `tach export --thread/--start/--end/--status` take.
//!
//! `cargo run --example filter -- golden/cpython-3.15.2/cpu_recursive.bin 0.1 on-cpu`
//! (arguments after the file: the start in seconds from the first sample, then status
//! terms such as `has-gil` or `no-on-cpu`).

use std::collections::HashMap;

use tach::{SampleFilter, TachFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: filter FILE.bin [START_S [STATUS...]]")?;
    let start_s = args.next().map(|s| s.parse::<f64>()).transpose()?;
    let status: Vec<String> = args.collect();
    let filter = SampleFilter::from_options(&[], start_s, None, &status)?;

    let file = TachFile::open(&path)?;
    let mut samples = file.samples();
    // The window is in seconds from the file's first sample.
    let mut origin = None;
    let mut kept: HashMap<&str, u64> = HashMap::new();
    let mut total = 0u64;
    while let Some(sample) = samples.next_sample()? {
        total += 1;
        let origin_us = *origin.get_or_insert(sample.timestamp_us);
        if !filter.bind(origin_us).keep(&sample) {
            continue;
        }
        let innermost = sample
            .stack
            .first()
            .map_or("<empty>", |&f| file.funcname(f));
        *kept.entry(innermost).or_default() += 1;
    }

    let mut rows: Vec<_> = kept.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let kept_total: u64 = rows.iter().map(|(_, n)| n).sum();
    println!("{kept_total} of {total} samples kept");
    for (function, n) in rows.iter().take(10) {
        println!("{n:>8}  {function}");
    }
    Ok(())
}
