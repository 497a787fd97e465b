//! Converting many files at once, in parallel, reporting each file's result.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{export_file, ExportOptions, Exporter, Result};
use crate::tach::SampleFilter;

/// One input's outcome.
#[derive(Debug)]
pub struct Converted {
    pub input: PathBuf,
    pub output: PathBuf,
    pub result: Result<()>,
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
    inputs
        .par_iter()
        .map(|input| {
            let output = output_in(out_dir, input, exporter);
            let result = export_file(exporter, input, &output, filter, options);
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
