//! Converting many files at once, in parallel, reporting each file's result.

use std::path::{Path, PathBuf};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::{export_file, ExportOptions, Exporter, Outcome, Result};
use crate::tach::SampleFilter;

/// One input's outcome.
#[derive(Debug)]
pub struct Converted {
    pub input: PathBuf,
    pub output: PathBuf,
    pub result: Result<Outcome>,
}

/// Where `input` goes inside `out_dir`.
pub fn output_in(out_dir: &Path, input: &Path, exporter: &dyn Exporter) -> PathBuf {
    let name = input.file_name().map(PathBuf::from).unwrap_or_default();
    out_dir.join(super::default_output(&name, exporter))
}

/// How many files are converted at once, and when to stop starting new ones.
#[derive(Clone, Copy, Default)]
pub struct Workers<'a> {
    /// Files converted at once; 0 means one per core.
    pub count: usize,
    /// Once set, files not yet started are reported as interrupted, not converted.
    pub stop: Option<&'a AtomicBool>,
}

/// Converts every input into `out_dir`, several at once. A file that fails does not
/// stop the others; `progress` is called once per finished file. Results come back in
/// the order of `inputs`.
///
/// Each worker is a thread of its own, not a rayon task: a conversion waits for its own
/// parallel work (polars' and the decoder's), and a rayon worker that waits steals
/// other queued tasks onto its stack. With a task per file, a waiting conversion took up
/// further whole conversions, nested: 1,000 files overflowed a worker's stack and held
/// 1.2 GB at once. Here each worker holds one conversion at a time.
pub fn convert_all(
    exporter: &dyn Exporter,
    inputs: &[PathBuf],
    out_dir: &Path,
    filter: &SampleFilter,
    options: &ExportOptions,
    workers: Workers<'_>,
    progress: &(dyn Fn(&Converted) + Sync),
) -> Vec<Converted> {
    // Two inputs of one name would write one dataset partition: the later ones fail.
    let stem = |p: &Path| p.file_stem().map(|s| s.to_os_string()).unwrap_or_default();
    let mut first_of_stem: HashMap<std::ffi::OsString, usize> = HashMap::new();
    let first: Vec<usize> = (0..inputs.len())
        .map(|i| *first_of_stem.entry(stem(&inputs[i])).or_insert(i))
        .collect();
    let convert = |i: usize| {
        let input = &inputs[i];
        let mut output = output_in(out_dir, input, exporter);
        if exporter.dataset().is_some() {
            // Reported as the partition pattern: one directory per table.
            let stem = input.file_stem().unwrap_or_default().to_string_lossy();
            output = out_dir.join("*").join(format!("source={stem}"));
        }
        // Several-file formats (Parquet) write a hive partition per input instead.
        let result = if workers.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            Err(super::ExportError::Unsupported(format!(
                "{}: interrupted before it was converted",
                input.display()
            )))
        } else if exporter.dataset().is_some() && first[i] != i {
            Err(super::ExportError::Unsupported(format!(
                "{}: its partition name is that of {}, given before it: rename one of them",
                input.display(),
                inputs[first[i]].display()
            )))
        } else {
            match partitioned(exporter, input, out_dir, filter, options) {
                Some(r) => r,
                None => export_file(exporter, input, &output, filter, options)
                    .map(|()| Outcome::Written),
            }
        };
        let c = Converted {
            input: input.clone(),
            output,
            result,
        };
        progress(&c);
        c
    };
    let count = match workers.count {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(inputs.len())
    .max(1);
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Converted)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .map(|w| {
                std::thread::Builder::new()
                    .name(format!("tach-convert-{w}"))
                    .spawn_scoped(scope, || {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= inputs.len() {
                                return mine;
                            }
                            mine.push((i, convert(i)));
                        }
                    })
            })
            .collect();
        let mut all = Vec::with_capacity(inputs.len());
        // A worker that could not start leaves its share to the others.
        for h in handles.into_iter().flatten() {
            all.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        all
    });
    // Files no worker reached (every worker failed to start): converted here.
    let mut seen = vec![false; inputs.len()];
    for (i, _) in &done {
        seen[*i] = true;
    }
    for (i, seen) in seen.into_iter().enumerate() {
        if !seen {
            done.push((i, convert(i)));
        }
    }
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, c)| c).collect()
}

/// For formats that write datasets: `DIR/<table>/source=<input stem>/...`, so the
/// tables of all inputs read as one hive-partitioned table each; a partition already
/// written from the same file is left as it is.
fn partitioned(
    exporter: &dyn Exporter,
    input: &Path,
    out_dir: &Path,
    filter: &SampleFilter,
    options: &ExportOptions,
) -> Option<Result<Outcome>> {
    let ds = exporter.dataset()?;
    let source = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(ds.export_partition(input, out_dir, &source, filter, options))
}
