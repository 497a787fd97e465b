//! Converting many files at once, in parallel, reporting each file's result.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

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

/// Converts every input into `out_dir`, on all cores. A file that fails does not stop
/// the others; `progress` is called once per finished file.
pub fn convert_all(
    exporter: &dyn Exporter,
    inputs: &[PathBuf],
    out_dir: &Path,
    filter: &SampleFilter,
    options: &ExportOptions,
    progress: &(dyn Fn(&Converted) + Sync),
) -> Vec<Converted> {
    // Two inputs of one name would write one dataset partition: the later ones fail.
    let stem = |p: &Path| p.file_stem().map(|s| s.to_os_string()).unwrap_or_default();
    let first_of_name = |i: usize| {
        inputs[..i]
            .iter()
            .find(|p| stem(p) == stem(&inputs[i]))
            .cloned()
    };
    inputs
        .par_iter()
        .enumerate()
        .map(|(i, input)| {
            let mut output = output_in(out_dir, input, exporter);
            if exporter.dataset().is_some() {
                // Reported as the partition pattern: one directory per table.
                let stem = input.file_stem().unwrap_or_default().to_string_lossy();
                output = out_dir.join("*").join(format!("source={stem}"));
            }
            // Several-file formats (Parquet) write a hive partition per input instead.
            let same_name = exporter.dataset().and_then(|_| first_of_name(i));
            let result = if let Some(first) = same_name {
                Err(super::ExportError::Unsupported(format!(
                    "{}: its partition name is that of {}, given before it: rename one of them",
                    input.display(),
                    first.display()
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
        })
        .collect()
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
