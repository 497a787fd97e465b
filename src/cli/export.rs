//! `tach export`: one flag per format of the exporter registry, the formats' own
//! options, and the batch conversion of many files into a directory.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use super::outcome::{CliError, ExitCode, FAILURE, SUCCESS};
use crate::export::{self, batch, ExportOptions};
use crate::tach::{SampleFilter, TachFile};

#[derive(Args)]
#[command(after_help = "Examples:
  tach export --speedscope run.bin                 # run.speedscope.json beside the input
  tach export --collapsed -o - run.bin | head      # to standard output
  tach export --flamegraph --status on-cpu --start 2 --end 5 run.bin
  tach export --gecko --out-dir out/ runs/*.bin    # many files, in parallel
  tach export --parquet --out-dir dataset/ runs/*.bin   # a hive-partitioned dataset
Docs: docs/exporters.md")]
pub(super) struct ExportArgs {
    /// Output format (see the list below); or use one of the --FORMAT flags.
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    #[command(flatten)]
    formats: FormatFlags,
    /// Output file, or - for standard output (one input only). Default: beside the input.
    #[arg(short, long, conflicts_with = "out_dir")]
    output: Option<PathBuf>,
    /// Convert every input into this directory, in parallel.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// With --out-dir and a dataset format (Parquet): write a partition again when it
    /// was written from another file of the same name (otherwise an error).
    #[arg(long, requires = "out_dir")]
    replace: bool,
    #[command(flatten)]
    filter: crate::report::FilterSpec,
    /// Title for formats that show one (default: the input file name).
    #[arg(long)]
    title: Option<String>,
    #[command(flatten)]
    format_options: FormatOptionArgs,
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// One `--NAME` flag per format of [`export::REGISTRY`], with the exporter's own
/// description as its help: adding a format to the registry adds its flag.
struct FormatFlags {
    chosen: Vec<&'static str>,
}

impl clap::FromArgMatches for FormatFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let chosen = export::REGISTRY
            .iter()
            .map(|e| e.name())
            .filter(|name| m.get_flag(name))
            .collect();
        Ok(FormatFlags { chosen })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for FormatFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        export::REGISTRY.iter().fold(cmd, |cmd, e| {
            cmd.arg(
                clap::Arg::new(e.name())
                    .long(e.name())
                    .action(clap::ArgAction::SetTrue)
                    .help(e.description())
                    .help_heading("Formats")
                    .conflicts_with("format"),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The formats' own options ([`export::Exporter::options`]), as given: each one's name
/// and its values in order (none for a switch).
struct FormatOptionArgs {
    given: Vec<(&'static str, Vec<String>)>,
}

impl FormatOptionArgs {
    /// Applies the options given to `options`, refusing those of another format (as
    /// Python's `export()` does: [`export::apply_options`]).
    fn apply(
        &self,
        format: &dyn export::Exporter,
        options: &mut ExportOptions,
    ) -> Result<(), CliError> {
        let given = self.given.iter().map(|(name, v)| (*name, v.as_slice()));
        export::apply_options(format, given, options).map_err(|e| CliError::Usage(e.to_string()))
    }
}

impl clap::FromArgMatches for FormatOptionArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for &exporter in export::REGISTRY {
            for option in exporter.options() {
                let values: Vec<String> = match option.value_name {
                    None if m.get_flag(option.name) => Vec::new(),
                    None => continue,
                    Some(_) => match m.get_many::<String>(option.name) {
                        Some(v) => v.cloned().collect(),
                        None => continue,
                    },
                };
                given.push((option.name, values));
            }
        }
        Ok(FormatOptionArgs { given })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for FormatOptionArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let mut cmd = cmd;
        for exporter in export::REGISTRY {
            for option in exporter.options() {
                let arg = clap::Arg::new(option.name)
                    .long(option.name)
                    .help(format!("{}: {}", exporter.name(), option.help))
                    .help_heading("Format options");
                let arg = match option.value_name {
                    None => arg.action(clap::ArgAction::SetTrue),
                    Some(value) if option.repeatable => {
                        arg.value_name(value).action(clap::ArgAction::Append)
                    }
                    Some(value) => arg.value_name(value).action(clap::ArgAction::Set),
                };
                cmd = cmd.arg(arg);
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

pub(super) fn run(args: ExportArgs) -> Result<ExitCode, CliError> {
    let mut chosen: Vec<&str> = args.formats.chosen.clone();
    if let Some(f) = &args.format {
        chosen.push(f.as_str());
    }
    let name = match chosen.as_slice() {
        [one] => *one,
        [] => {
            return Err(CliError::Usage(format!(
                "choose an output format: --format NAME or --NAME, one of: {}",
                export::names().join(", ")
            )))
        }
        _ => return Err(CliError::Usage("choose one output format".into())),
    };
    let exporter = export::find(name).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown format '{name}': use one of {}",
            export::names().join(", ")
        ))
    })?;
    let filter = args.filter.build()?;
    let mut options = ExportOptions {
        title: args.title.clone(),
        replace: args.replace,
        ..ExportOptions::default()
    };
    args.format_options.apply(exporter, &mut options)?;
    // A directory stands for its .tach files (a rotating recording's segments).
    let files = crate::tach::reader::expand_dirs(&args.files)?;
    if let Some(dir) = &args.out_dir {
        return Ok(export_many(exporter, &files, dir, &filter, &options));
    }
    if files.len() > 1 {
        return Err(CliError::Usage(format!(
            "{} inputs: use --out-dir DIR to convert several files",
            files.len()
        )));
    }
    let input = &files[0];
    match args.output.as_deref() {
        Some(p) if p == Path::new("-") => {
            let file = TachFile::open(input)?;
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            export::export_to(exporter, &file, &filter, &options, &mut w)
                .and_then(|()| w.flush().map_err(export::write_error("stdout")))?;
        }
        other => {
            let out = other
                .map(Path::to_path_buf)
                .unwrap_or_else(|| export::default_output(input, exporter));
            export::export_file(exporter, input, &out, &filter, &options)?;
            eprintln!("wrote {}", out.display());
        }
    }
    Ok(SUCCESS)
}

fn export_many(
    exporter: &'static dyn export::Exporter,
    files: &[PathBuf],
    dir: &Path,
    filter: &SampleFilter,
    options: &ExportOptions,
) -> ExitCode {
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("tach: {}: {e}", dir.display());
        return FAILURE;
    }
    let bar = progress_bar(files.len() as u64);
    let workers = batch::Workers::default();
    let results = batch::convert_all(exporter, files, dir, filter, options, workers, &|c| {
        if let Some(b) = &bar {
            b.inc(1);
            if let Err(e) = &c.result {
                b.println(format!("tach: {e}"));
            }
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let failed: Vec<_> = results.iter().filter(|c| c.result.is_err()).collect();
    for c in &results {
        match &c.result {
            Ok(export::Outcome::Written) => eprintln!("wrote {}", c.output.display()),
            Ok(export::Outcome::Replaced) => eprintln!("replaced {}", c.output.display()),
            Ok(export::Outcome::Unchanged) => {
                eprintln!(
                    "unchanged {} (written from this file before)",
                    c.output.display()
                )
            }
            Err(e) if !std::io::stderr().is_terminal() => eprintln!("tach: {e}"),
            Err(_) => {}
        }
    }
    eprintln!(
        "converted {} of {} files into {}",
        results.len() - failed.len(),
        results.len(),
        dir.display()
    );
    if failed.is_empty() {
        SUCCESS
    } else {
        FAILURE
    }
}

/// A progress bar on a terminal; nothing otherwise.
fn progress_bar(len: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} files {msg}",
    ) {
        bar.set_style(style);
    }
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use crate::export;
    use clap::Parser;

    #[test]
    fn every_registered_format_has_its_flag() {
        for e in export::REGISTRY {
            let flag = format!("--{}", e.name());
            let cli = Cli::try_parse_from(["tach", "export", flag.as_str(), "x.bin"])
                .unwrap_or_else(|err| panic!("{flag}: {err}"));
            let Command::Export(args) = cli.command else {
                panic!("not an export")
            };
            assert_eq!(args.formats.chosen, vec![e.name()]);
        }
        // A flag and --format together are a usage error (exit 2), like two flags.
        let both = Cli::try_parse_from(["tach", "export", "--pstats", "--format", "jsonl", "x"]);
        assert_eq!(both.err().map(|e| e.exit_code()), Some(2));
    }
}
