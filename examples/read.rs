//! Reads a TACH file: its header, its threads, and its samples one by one.
//!
//! `cargo run --example read -- golden/cpython-3.15.2/cpu_recursive.bin`

use tach::TachFile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: read FILE.bin")?;
    let file = TachFile::open(&path)?;

    let header = file.header();
    let (major, minor, micro) = header.python_version;
    println!(
        "{path}: Python {major}.{minor}.{micro}, {} samples every {} us, {} frames",
        header.sample_count,
        header.sample_interval_us,
        file.frames().len()
    );

    // Samples come out in file order; `stack` holds frame indices, innermost first.
    let mut samples = file.samples();
    let mut shown = 0;
    while let Some(sample) = samples.next_sample()? {
        if shown < 5 {
            let innermost = sample
                .stack
                .first()
                .map_or("<empty stack>", |&frame| file.funcname(frame));
            println!(
                "thread {} at {} us: {} frames, in {innermost}",
                sample.thread_id,
                sample.timestamp_us,
                sample.stack.len()
            );
            shown += 1;
        }
    }
    for (thread_id, index) in samples.threads() {
        println!("thread {thread_id} (index {index})");
    }
    println!("{} samples decoded", samples.decoded());
    Ok(())
}
