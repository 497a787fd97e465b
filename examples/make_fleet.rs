//! Makes a simulated fleet of recordings for the dataset benchmark:
//! `make_fleet OUT_DIR COUNT SOURCE.bin...`.
//!
//! Each output is cut from one of the real SOURCE recordings (chosen in turn) and
//! differs from its neighbours the way recordings from many machines do:
//! - a rate of 100 Hz to 10 kHz (the timestamps are re-spaced to it);
//! - a length of 2,000 to 60,000 samples, starting at a random point of the source and
//!   wrapping around it;
//! - a random subset of the source's threads, with thread ids shifted per "host";
//! - a start time spread over a day.
//!
//! The choices come from a fixed-seed generator, so the same command makes the same
//! files. Written with tach's writer (zstd, as CPython writes by default).

use std::path::PathBuf;

use tach::{rewrite, OwnedSample, TachFile, Writer};

/// SplitMix64: a small, fixed, dependency-free generator (the fleet must be
/// reproducible, not random in any stronger sense).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Source {
    file: TachFile,
    samples: Vec<OwnedSample>,
    threads: Vec<u64>,
}

const RATES_HZ: [u64; 6] = [100, 200, 1_000, 2_000, 5_000, 10_000];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out_dir, count, sources @ ..] = args.as_slice() else {
        return Err("usage: make_fleet OUT_DIR COUNT SOURCE.bin...".into());
    };
    if sources.is_empty() {
        return Err("usage: make_fleet OUT_DIR COUNT SOURCE.bin...".into());
    }
    let count: usize = count.parse()?;
    let out_dir = PathBuf::from(out_dir);
    std::fs::create_dir_all(&out_dir)?;
    let mut loaded = Vec::new();
    for path in sources {
        let file = TachFile::open(path)?;
        let samples = file.collect_samples()?;
        if samples.is_empty() {
            return Err(format!("{path} has no samples").into());
        }
        let mut threads: Vec<u64> = samples.iter().map(|s| s.thread_id).collect();
        threads.sort_unstable();
        threads.dedup();
        loaded.push(Source {
            file,
            samples,
            threads,
        });
    }
    let mut rng = SplitMix(0x7ac4_f1ee_7000_0001);
    let (mut total_samples, mut total_bytes) = (0u64, 0u64);
    for i in 0..count {
        let src = &loaded[i % loaded.len()];
        let rate = RATES_HZ[rng.below(RATES_HZ.len() as u64) as usize];
        let interval_us = 1_000_000 / rate;
        let length = 2_000 + rng.below(58_001);
        // Keep each thread with probability 3/4, and at least one.
        let mut kept: Vec<u64> = src
            .threads
            .iter()
            .copied()
            .filter(|_| rng.below(4) != 0)
            .collect();
        if kept.is_empty() {
            kept.push(src.threads[rng.below(src.threads.len() as u64) as usize]);
        }
        let host_shift = (i as u64 + 1) << 20;
        let start_time_us = src.file.header().start_time_us + rng.below(86_400) * 1_000_000;
        let h = src.file.header();
        let path = out_dir.join(format!("host{:04}.bin", i));
        let mut w = Writer::builder(interval_us)
            .start_time_us(start_time_us)
            .compression(tach::Compression::Zstd)
            .config(h.config)
            .python_version(h.python_version)
            .create(&path)?;
        let ids = rewrite::copy_frames(&src.file, &mut w);
        let mut stack = Vec::new();
        let mut written = 0u64;
        let mut at = rng.below(src.samples.len() as u64) as usize;
        // One tick per source sample, re-spaced to the chosen rate; the source's
        // threads share ticks as they did in the source.
        let mut tick = 0u64;
        let mut last_ts = None;
        let mut guard = 0usize;
        while written < length {
            let s = &src.samples[at];
            at = (at + 1) % src.samples.len();
            if last_ts != Some(s.timestamp_us) {
                tick += 1;
                last_ts = Some(s.timestamp_us);
            }
            guard += 1;
            if guard > 4 * src.samples.len() + length as usize {
                break; // every kept thread is rare in this source: stop short
            }
            if kept.binary_search(&s.thread_id).is_err() {
                continue;
            }
            stack.clear();
            stack.extend(s.stack.iter().map(|&f| ids[f as usize]));
            let ts = start_time_us + tick * interval_us;
            w.write_sample(
                s.thread_id + host_shift,
                s.interpreter_id,
                ts,
                s.status,
                &stack,
            )?;
            written += 1;
        }
        let summary = w.finish()?;
        total_samples += summary.samples;
        total_bytes += summary.file_size;
    }
    eprintln!(
        "wrote {count} recordings to {}: {total_samples} samples, {total_bytes} bytes",
        out_dir.display()
    );
    Ok(())
}
