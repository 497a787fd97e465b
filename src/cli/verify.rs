//! `tach verify`: every sample decoded with every check.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::outcome::{stdout_error, CliError, ExitCode, FAILURE, SUCCESS};
use crate::tach::TachFile;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  tach verify runs/*.bin\n  tach verify -q run.bin && echo valid"
)]
pub(super) struct VerifyArgs {
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print nothing for valid files.
    #[arg(short, long)]
    quiet: bool,
}

pub(super) fn run(args: VerifyArgs) -> Result<ExitCode, CliError> {
    let mut failed = 0;
    let mut out = std::io::stdout().lock();
    for path in &args.files {
        match TachFile::open(path).and_then(|f| f.verify().map(|m| (f, m))) {
            Ok((f, mix)) => {
                if !args.quiet {
                    writeln!(
                        out,
                        "{}: ok ({} samples, {} threads, {} records)",
                        path.display(),
                        mix.samples.iter().sum::<u64>(),
                        f.header().thread_count,
                        mix.records.iter().sum::<u64>()
                    )
                    .map_err(stdout_error)?;
                }
            }
            Err(e) => {
                writeln!(out, "{e}").map_err(stdout_error)?;
                if let Some(hint) = crate::tach::recover::diagnose(path) {
                    writeln!(out, "{hint}").map_err(stdout_error)?;
                }
                failed += 1;
            }
        }
    }
    if failed > 0 {
        eprintln!("tach: {failed} of {} files are invalid", args.files.len());
        Ok(FAILURE)
    } else {
        Ok(SUCCESS)
    }
}
