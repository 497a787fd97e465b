//! `tach info`: a file's facts, as the library's [`FileInfo`] prints them (its `Display`,
//! the same text Python's `tach.Info` shows) or as JSON.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::outcome::{stdout_error, CliError, ExitCode, FAILURE, SUCCESS};
use crate::tach::info::FileInfo;
use crate::tach::TachFile;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  tach info run.bin\n  tach info --json runs/*.bin | jq '.[].sample_count'"
)]
pub(super) struct InfoArgs {
    /// TACH files (.bin / .tach)
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print JSON (one object per file, in a list) for scripts.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(args: InfoArgs) -> Result<ExitCode, CliError> {
    let mut infos = Vec::new();
    let mut failed = false;
    for path in &args.files {
        match TachFile::open(path).and_then(|f| FileInfo::gather(&f)) {
            Ok(i) => infos.push(i),
            Err(e) => {
                eprintln!("tach: {e}");
                if let Some(hint) = crate::tach::recover::diagnose(path) {
                    eprintln!("tach: {hint}");
                }
                failed = true;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let text = serde_json::to_string_pretty(&infos).map_err(std::io::Error::from);
        text.and_then(|t| writeln!(out, "{t}"))
            .map_err(stdout_error)?;
    } else {
        for (n, i) in infos.iter().enumerate() {
            if n > 0 {
                writeln!(out).map_err(stdout_error)?;
            }
            write!(out, "{i}").map_err(stdout_error)?;
        }
    }
    Ok(if failed { FAILURE } else { SUCCESS })
}
