//! `tach rewrite`: re-encode a file (compression, byte order).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::outcome::{CliError, ExitCode, SUCCESS};
use crate::tach::{rewrite, Compression, TachFile};

#[derive(Args)]
#[command(
    after_help = "Examples:\n  tach rewrite run.bin -o run.zst.bin --compression zstd --level 19\n  tach rewrite swapped.bin -o native.bin"
)]
pub(super) struct RewriteArgs {
    input: PathBuf,
    /// Where to write the new file.
    #[arg(short, long)]
    output: PathBuf,
    /// Compression of the sample data (default: keep the input's).
    #[arg(long, value_enum)]
    compression: Option<CompressionArg>,
    /// zstd level, 1 (fast) to 22 (small).
    #[arg(long, default_value_t = crate::tach::DEFAULT_ZSTD_LEVEL, value_parser = clap::value_parser!(i32).range(1..=22))]
    level: i32,
}

#[derive(Clone, Copy, ValueEnum)]
enum CompressionArg {
    None,
    Zstd,
}

pub(super) fn run(args: RewriteArgs) -> Result<ExitCode, CliError> {
    let file = TachFile::open(&args.input)?;
    let mut builder = rewrite::builder_like(&file).level(args.level);
    if let Some(c) = args.compression {
        builder = builder.compression(match c {
            CompressionArg::None => Compression::None,
            CompressionArg::Zstd => Compression::Zstd,
        });
    }
    let summary = rewrite::rewrite(&file, builder, &args.output)?;
    eprintln!(
        "wrote {} ({} samples, {} threads, {} bytes)",
        args.output.display(),
        summary.samples,
        summary.threads,
        summary.file_size
    );
    Ok(SUCCESS)
}
