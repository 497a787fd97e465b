//! `tach diff`: which shares changed beyond noise between two sets of runs.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::outcome::{open_all, stdout_error, CliError, ExitCode, SUCCESS};
use crate::names;
use crate::report;

#[derive(Args)]
#[command(after_help = "Examples:
  tach diff before.bin after.bin
  tach diff --base a1.bin a2.bin a3.bin --new b1.bin b2.bin b3.bin   # repeated runs
  tach diff --flamegraph diff.svg --format json before.bin after.bin
  tach diff --base-since 13:00 --base-until 13:10 --since 14:00 --until 14:10 segs/*.tach segs/*.tach")]
pub(super) struct DiffArgs {
    /// BASE NEW: one file each (or use --base and --new).
    #[arg(num_args = 0..=2, value_names = ["BASE", "NEW"])]
    pair: Vec<PathBuf>,
    /// The base runs.
    #[arg(long, num_args = 1.., conflicts_with = "pair", requires = "new")]
    base: Vec<PathBuf>,
    /// The new runs.
    #[arg(long, num_args = 1.., conflicts_with = "pair", requires = "base")]
    new: Vec<PathBuf>,
    #[command(flatten)]
    options: report::DiffOptions,
    #[command(flatten)]
    filter: report::FilterSpec,
    /// Show the first N rows.
    #[arg(short, long, value_name = "N")]
    limit: Option<usize>,
    #[arg(long, default_value = "table", value_parser = names::parser::<report::Format>(report::Format::WHAT))]
    format: report::Format,
    /// Also write a differential flamegraph (widths: new shares; colours: change).
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
}

pub(super) fn run(args: DiffArgs) -> Result<ExitCode, CliError> {
    let (base, new) = match (args.pair.as_slice(), args.base.is_empty()) {
        ([b, n], true) => (vec![b.clone()], vec![n.clone()]),
        ([], false) => (args.base.clone(), args.new.clone()),
        _ => {
            return Err(CliError::Usage(
                "give BASE NEW, or --base FILES... --new FILES...".into(),
            ))
        }
    };
    let options = args.options;
    let format = args.format;
    let (base_filter, new_filter) = options.side_filters(&args.filter)?;
    let filters = (&base_filter, &new_filter);
    let (base, new) = (open_all(&base)?, open_all(&new)?);
    let mut diff = report::diff(&base, &new, filters, &options)?;
    if let Some(path) = &args.flamegraph {
        let title = format!(
            "tach diff: {} -> {}",
            diff.base.files.join(" "),
            diff.new.files.join(" ")
        );
        let mut svg = Vec::new();
        report::write_flamegraph(&base, &new, filters, options.by, &title, &mut svg)?;
        std::fs::write(path, svg).map_err(|source| CliError::Write {
            path: path.clone(),
            source,
        })?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(n) = args.limit {
        diff.rows.truncate(n);
    }
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    report::write_diff(&diff, format, &mut w)
        .and_then(|()| w.flush())
        .map_err(stdout_error)?;
    Ok(SUCCESS)
}
