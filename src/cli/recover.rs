//! `tach recover`: a TACH file from the crash journal of a recording that died.

use std::path::PathBuf;

use clap::Args;

use super::outcome::{CliError, ExitCode, SUCCESS};
use crate::tach::recover;

#[derive(Args)]
#[command(after_help = "Examples:
  tach recover app.tach.journal                    # writes app.tach
  tach recover app.tach.journal -o salvaged.tach && tach top salvaged.tach")]
pub(super) struct RecoverArgs {
    journal: PathBuf,
    /// Where to write the TACH file (default: the journal's name without .journal).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub(super) fn run(args: RecoverArgs) -> Result<ExitCode, CliError> {
    let journal = &args.journal;
    let output = match args.output {
        Some(o) => o,
        None => recover::default_output(journal)?,
    };
    let r = recover::recover(journal, &output)?;
    eprintln!(
        "recovered {} samples ({} threads, {} frames, the first {:.2} s) from {} into {}",
        r.samples,
        r.threads,
        r.frames,
        r.covered_us as f64 / 1e6,
        journal.display(),
        r.output.display()
    );
    if let Some(d) = &r.dropped {
        eprintln!(
            "dropped the last {} bytes of the journal (from byte {}): {}",
            d.bytes, d.offset, d.why
        );
    }
    Ok(SUCCESS)
}
