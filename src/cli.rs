//! The `tach` command line: a thin clap layer over the library. Both the `tach` binary
//! (src/main.rs) and the Python package's `tach` command (`tach._native.cli_main`) call
//! [`main`], so they are the same program.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::export::{self, batch, ExportError, ExportOptions};
use crate::names;
use crate::record::options::{AsyncMode, RecordCommand, RecordSpec};
use crate::report;
use crate::tach::info::FileInfo;
use crate::tach::{rewrite, Compression, SampleFilter, TachError, TachFile};

/// Why a command failed. The exit status follows from it, the same for every command:
/// 1 for a bad or unreadable input (or any other failure of the work itself), 2 for a
/// command line that asks for something impossible (as clap's own usage errors), and 0
/// when standard output was closed by its reader (`tach export -o - x.bin | head`).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Filter(#[from] crate::tach::filter::FilterError),
    #[error(transparent)]
    Read(#[from] TachError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[cfg(feature = "query")]
    #[error(transparent)]
    Query(#[from] crate::query::QueryError),
    #[error(transparent)]
    Record(#[from] crate::record::options::RecordCommandError),
    #[error(transparent)]
    Live(#[from] crate::live::LiveError),
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    #[error(transparent)]
    Recover(#[from] crate::tach::recover::RecoverError),
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// The exit status this failure ends the command with.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            _ if self.is_broken_pipe() => SUCCESS,
            CliError::Usage(_) | CliError::Filter(_) => USAGE,
            CliError::Record(e) if e.is_usage() => USAGE,
            CliError::Live(e) if e.is_usage() => USAGE,
            CliError::Report(crate::report::ReportError::Usage(_)) => USAGE,
            #[cfg(feature = "query")]
            CliError::Query(e) if e.is_usage() => USAGE,
            _ => FAILURE,
        }
    }

    /// Whether the failure is a write to a pipe whose reader has gone: not an error for
    /// a command line tool (`| head` stops reading on purpose).
    pub fn is_broken_pipe(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return true;
                }
            }
            cause = e.source();
        }
        false
    }
}

/// Maps a failed write to standard output to a [`CliError`].
fn stdout_error(source: std::io::Error) -> CliError {
    CliError::Write {
        path: PathBuf::from("stdout"),
        source,
    }
}

#[derive(Parser)]
#[command(
    name = "tach",
    version,
    about = "Fast, exact tools for CPython's TACH sampling profiles",
    long_about = "Record, summarise, compare, export, query, verify and repair the binary \
                  profiles of `python3.15 -m profiling.sampling run --binary` (TACH files).",
    after_help = "Start with: tach top run.bin   (then tach <COMMAND> --help for examples)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show everything a file's header, footer and stats block say, plus what a full decode finds.
    #[command(
        after_help = "Examples:\n  tach info run.bin\n  tach info --json runs/*.bin | jq '.[].sample_count'"
    )]
    Info {
        /// TACH files (.bin / .tach)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON (one object per file, in a list) for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Decode every sample with every check; exit 1 if any file is invalid.
    #[command(
        after_help = "Examples:\n  tach verify runs/*.bin\n  tach verify -q run.bin && echo valid"
    )]
    Verify {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print nothing for valid files.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Re-encode a file: change its compression, or normalise a byte-swapped file.
    #[command(
        after_help = "Examples:\n  tach rewrite run.bin -o run.zst.bin --compression zstd --level 19\n  tach rewrite swapped.bin -o native.bin"
    )]
    Rewrite {
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
    },
    /// Convert files to other profile formats.
    Export(ExportArgs),
    /// Run SQL over profiles (tables: samples, frames, stacks, stack_counts, sample_frames).
    #[cfg(feature = "query")]
    Query(QueryArgs),
    /// Record a Python program: start it, or attach to it with --pid.
    ///
    /// CPython 3.9-3.15 are recorded from outside: the program needs no tach package,
    /// and tach needs permission to read its memory (as for ptrace); --opcodes from 3.11.
    /// --in-process runs the program through `python -m tach run`, which needs the tach
    /// package in that interpreter. The output replays in CPython 3.15.
    #[command(after_help = "Examples:
  tach record -o app.tach -- python app.py --port 8000
  tach record -o app.tach -r 10000 --mode cpu --all-threads -- python -m mypkg.main
  tach record --pid 4242 -d 30 -o server.tach      # attach to a running process
  tach record --subprocesses -o job.tach -- python job.py   # also job_<pid>.tach per child
  tach record --native -o app.tach -- python app.py        # C/C++/Rust frames too (x86-64)
  tach record --async-aware --pid 4242 -o srv.tach          # asyncio tasks (3.14, 3.15)
  python -m tach run -o app.tach app.py            # in-process, without the tach binary")]
    Record(RecordArgs),
    /// Print every thread's current Python stack in a running process.
    ///
    /// Innermost frame first, with file:line and each thread's status (GIL, on CPU,
    /// exception). CPython 3.9-3.15.
    #[command(after_help = "Examples:
  tach dump 4242
  tach dump --json 4242 | jq '.[0].frames[0]'
  tach dump --native 4242           # native frames with the Python ones spliced in
  tach dump --async-aware 4242      # one stack per asyncio task (3.14, 3.15)")]
    Dump(DumpArgs),
    /// The summary table of CPython's `replay --pstats` (several files are summed), or
    /// the same table live, of a running program.
    ///
    /// Self and total samples, share and time per function, line or file.
    ///
    /// Live view (--pid PID, or -- PROGRAM): a terminal view of a recording in progress,
    /// refreshed every second. CPython 3.9-3.15 are recorded from outside exactly as
    /// tach record --pid / tach record -- PROGRAM record them (the same options, defaults
    /// and errors); -o also writes the file. When the program exits, the view says so and
    /// keeps the last table until q. A program tach started gets SIGINT if it still runs
    /// at q; tach then exits with its status and prints its last lines of output (kept
    /// while the view was up: the screen is the view's).
    #[command(after_help = "Examples:
  tach top run.bin                                  # hottest functions by self time
  tach top -l 20 --sort total --by line run.bin
  tach top --status on-cpu --thread 1234 run.bin    # CPU time of one thread
  tach top --per-file --format csv runs/*.bin > top.csv
  tach top --pid 4242 -a                            # live: a running process, every thread
  tach top --mode cpu -o app.tach -- python app.py  # live: start it, also write the file
  tach top --async-aware --sort total --pid 4242     # live: asyncio tasks as <task> rows (3.14, 3.15)

Live view keys:
  s t n        sort by self, total or name    l         by line / by function
  ← → Tab      cycle through the threads (-a) a         every thread again
  m            status mix per thread          p Space   pause the table (sampling goes on)
  ↑ ↓ PgUp PgDn  scroll                       q Ctrl-C  quit")]
    Top(TopArgs),
    /// Which functions' share of the samples changed between two sets of runs, beyond noise.
    ///
    /// Compares shares (not counts, so rates and durations may differ), with a
    /// block-bootstrap noise estimate and Holm's correction (docs/diff.md).
    #[command(after_help = "Examples:
  tach diff before.bin after.bin
  tach diff --base a1.bin a2.bin a3.bin --new b1.bin b2.bin b3.bin   # repeated runs
  tach diff --flamegraph diff.svg --format json before.bin after.bin")]
    Diff(DiffArgs),
    /// Turn the crash journal of a recording that died into a TACH file.
    ///
    /// A recording killed or crashed leaves OUT.tach.journal beside OUT.tach.
    #[command(after_help = "Examples:
  tach recover app.tach.journal                    # writes app.tach
  tach recover app.tach.journal -o salvaged.tach && tach top salvaged.tach")]
    Recover {
        journal: PathBuf,
        /// Where to write the TACH file (default: the journal's name without .journal).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum CompressionArg {
    None,
    Zstd,
}

#[derive(Args)]
#[command(after_help = "Examples:
  tach export --speedscope run.bin                 # run.speedscope.json beside the input
  tach export --collapsed -o - run.bin | head      # to standard output
  tach export --flamegraph --status on-cpu --start 2 --end 5 run.bin
  tach export --gecko --out-dir out/ runs/*.bin    # many files, in parallel
  tach export --parquet --out-dir dataset/ runs/*.bin   # a hive-partitioned dataset
Docs: docs/exporters.md")]
struct ExportArgs {
    /// Output format (see the list below); or use one of the --FORMAT flags.
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    #[command(flatten)]
    formats: FormatFlags,
    /// Output file, or - for standard output (one input only). Default: beside the input.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Convert every input into this directory, in parallel.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// With --out-dir and a dataset format (Parquet): write a partition again when it
    /// was written from another file of the same name (otherwise an error).
    #[arg(long, requires = "out_dir")]
    replace: bool,
    #[command(flatten)]
    filter: FilterArgs,
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

#[derive(Args)]
struct FilterArgs {
    /// Keep only this thread id (repeatable).
    #[arg(long = "thread", value_name = "TID")]
    threads: Vec<u64>,
    /// Keep samples from this many seconds after the first sample.
    #[arg(long, value_name = "SECONDS")]
    start: Option<f64>,
    /// Keep samples before this many seconds after the first sample.
    #[arg(long, value_name = "SECONDS")]
    end: Option<f64>,
    /// Keep samples whose status has this flag: on-cpu, has-gil, gil-requested,
    /// has-exception, main-thread, unknown, or no-FLAG (repeatable).
    #[arg(long, value_name = "FLAG")]
    status: Vec<String>,
}

impl FilterArgs {
    fn build(&self) -> Result<SampleFilter, CliError> {
        Ok(SampleFilter::from_options(
            &self.threads,
            self.start,
            self.end,
            &self.status,
        )?)
    }
}

/// An exit status: 0 success, 1 a bad or unreadable input, 2 a usage error (as clap's).
pub type ExitCode = u8;
const SUCCESS: ExitCode = 0;
const FAILURE: ExitCode = 1;
const USAGE: ExitCode = 2;

/// Runs the command line `args` (the first is the program name) and returns the exit
/// status. Never exits the process: the Python package calls this inside the interpreter.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let words: Vec<OsString> = args.into_iter().map(Into::into).collect();
    #[cfg(not(feature = "query"))]
    if words.get(1).is_some_and(|a| a == "query") {
        eprintln!(
            "tach: this tach is built without SQL (the recorder alone, as the tach-record \
             package installs it): `tach query` and `tach export --parquet` are in the full \
             build (`pip install tach`, or cargo's default features)"
        );
        return USAGE;
    }
    let code = match Cli::try_parse_from(&words) {
        Ok(cli) => match run(cli.command, &words) {
            Ok(code) => code,
            Err(e) if e.is_broken_pipe() => SUCCESS,
            Err(e) => {
                eprintln!("tach: {e}");
                e.exit_code()
            }
        },
        Err(e) => {
            // --help and --version are "errors" that print to stdout and exit 0.
            let _ = e.print();
            e.exit_code().clamp(0, 255) as u8
        }
    };
    // Rust's stdout is flushed at process exit only when Rust owns the process.
    let _ = std::io::stdout().flush();
    code
}

fn run(command: Command, words: &[OsString]) -> Result<ExitCode, CliError> {
    match command {
        Command::Info { files, json } => info(&files, json),
        Command::Verify { files, quiet } => verify(&files, quiet),
        Command::Rewrite {
            input,
            output,
            compression,
            level,
        } => {
            let file = TachFile::open(&input)?;
            let mut builder = rewrite::builder_like(&file).level(level);
            if let Some(c) = compression {
                builder = builder.compression(match c {
                    CompressionArg::None => Compression::None,
                    CompressionArg::Zstd => Compression::Zstd,
                });
            }
            let summary = rewrite::rewrite(&file, builder, &output)?;
            eprintln!(
                "wrote {} ({} samples, {} threads, {} bytes)",
                output.display(),
                summary.samples,
                summary.threads,
                summary.file_size
            );
            Ok(SUCCESS)
        }
        Command::Export(args) => export_cmd(args),
        #[cfg(feature = "query")]
        Command::Query(args) => query_cmd(args),
        Command::Record(args) => record_cmd(args, words),
        Command::Dump(args) => dump_cmd(args),
        Command::Top(args) => top_cmd(args),
        Command::Diff(args) => diff_cmd(args),
        Command::Recover { journal, output } => recover_cmd(&journal, output),
    }
}

fn info(files: &[PathBuf], json: bool) -> Result<ExitCode, CliError> {
    let mut infos = Vec::new();
    let mut failed = false;
    for path in files {
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
    if json {
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

fn verify(files: &[PathBuf], quiet: bool) -> Result<ExitCode, CliError> {
    let mut failed = 0;
    let mut out = std::io::stdout().lock();
    for path in files {
        match TachFile::open(path).and_then(|f| f.verify().map(|m| (f, m))) {
            Ok((f, mix)) => {
                if !quiet {
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
        eprintln!("tach: {failed} of {} files are invalid", files.len());
        Ok(FAILURE)
    } else {
        Ok(SUCCESS)
    }
}

fn recover_cmd(journal: &Path, output: Option<PathBuf>) -> Result<ExitCode, CliError> {
    use crate::tach::recover;
    let output = match output {
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

fn export_cmd(args: ExportArgs) -> Result<ExitCode, CliError> {
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
    if let Some(dir) = &args.out_dir {
        if args.output.is_some() {
            return Err(CliError::Usage(
                "use either -o or --out-dir, not both".into(),
            ));
        }
        return Ok(export_many(exporter, &args.files, dir, &filter, &options));
    }
    if args.files.len() > 1 {
        return Err(CliError::Usage(format!(
            "{} inputs: use --out-dir DIR to convert several files",
            args.files.len()
        )));
    }
    let input = &args.files[0];
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

#[cfg(feature = "query")]
#[derive(Args)]
#[command(
    after_help = "Tables and columns: tach query --schema. Docs: docs/query.md.\n\
Example: tach query \"select funcname, count(*) as n from samples group by funcname order by n desc limit 10\" run.bin"
)]
struct QueryArgs {
    /// The SQL query (one SELECT).
    #[arg(required_unless_present = "schema")]
    sql: Option<String>,
    /// TACH files, Parquet exports or datasets (directories) or glob patterns; several
    /// inputs are one table with a `file` column.
    #[arg(required_unless_present = "schema")]
    files: Vec<PathBuf>,
    /// Print the tables and their columns.
    #[arg(long)]
    schema: bool,
    /// Print polars' optimized plan instead of running the query.
    #[arg(long)]
    explain: bool,
    /// table (default), csv, json, ndjson or parquet.
    #[arg(long, value_name = "FORMAT", default_value = "table")]
    format: String,
    /// Write the result to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Rows the table shows on a terminal (0 = all).
    #[arg(long, default_value_t = 40)]
    max_rows: usize,
}

/// `tach query`: usage errors (bad SQL, refused statements, unknown names) exit 2,
/// like clap's; other failures exit 1.
#[cfg(feature = "query")]
fn query_cmd(args: QueryArgs) -> Result<ExitCode, CliError> {
    use crate::query::{self, output};
    if args.schema {
        write!(std::io::stdout().lock(), "{}", query::schema_text()).map_err(stdout_error)?;
        return Ok(SUCCESS);
    }
    let format = output::Format::parse(&args.format).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown format '{}': use table, csv, json, ndjson or parquet",
            args.format
        ))
    })?;
    let sql = args.sql.unwrap_or_default();
    let files = query::expand_inputs(&args.files)?;
    let engine = query::QueryEngine::open(&files)?;
    if args.explain {
        let plan = engine.explain(&sql)?;
        writeln!(std::io::stdout().lock(), "{plan}").map_err(stdout_error)?;
        return Ok(SUCCESS);
    }
    let mut df = engine.run(&sql)?;
    let result = match &args.output {
        Some(path) => std::fs::File::create(path)
            .map_err(|source| query::QueryError::Io {
                path: path.clone(),
                source,
            })
            .and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                output::write(&mut df, format, 0, &mut w).and_then(|()| {
                    w.flush().map_err(|e| query::QueryError::Io {
                        path: path.clone(),
                        source: e,
                    })
                })
            }),
        None => {
            if format == output::Format::Parquet && std::io::stdout().is_terminal() {
                return Err(CliError::Usage(
                    "Parquet is binary: use -o FILE or redirect standard output".into(),
                ));
            }
            let limit = if std::io::stdout().is_terminal() {
                args.max_rows
            } else {
                0
            };
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            output::write(&mut df, format, limit, &mut w).and_then(|()| {
                w.flush().map_err(|e| query::QueryError::Io {
                    path: "stdout".into(),
                    source: e,
                })
            })
        }
    };
    result?;
    Ok(SUCCESS)
}

#[derive(Args)]
struct TopArgs {
    /// TACH files (or, for the live view, --pid PID or -- PROGRAM).
    #[arg(required_unless_present_any = ["pid", "argv"])]
    files: Vec<PathBuf>,
    /// The order of the rows (largest first, except by name).
    #[arg(long, default_value = "self", value_parser = names::parser::<report::SortBy>(report::SortBy::WHAT))]
    sort: report::SortBy,
    /// Show the first N rows.
    #[arg(short, long, value_name = "N")]
    limit: Option<usize>,
    #[command(flatten)]
    filter: FilterArgs,
    /// What one row stands for.
    #[arg(long, default_value = "function", value_parser = names::parser::<report::GroupBy>(report::GroupBy::WHAT))]
    by: report::GroupBy,
    #[arg(long, default_value = "table", value_parser = names::parser::<report::Format>(report::Format::WHAT))]
    format: report::Format,
    /// One row per file and key (a file column) instead of summing the files.
    #[arg(long)]
    per_file: bool,
    /// Live view: attach to this running Python process (CPython 3.9-3.15).
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["argv", "files"], help_heading = "Live view")]
    pid: Option<i32>,
    #[command(flatten, next_help_heading = "Live view")]
    recording: RecordSpec,
    /// Live view: start this program (an interpreter, a script or -m module, its
    /// arguments) and record it from outside.
    #[arg(
        last = true,
        value_name = "PYTHON ARGS",
        conflicts_with = "files",
        help_heading = "Live view"
    )]
    argv: Vec<std::ffi::OsString>,
}

/// `tach top --pid` / `tach top -- PROGRAM`: the live view.
fn top_live(args: TopArgs) -> Result<ExitCode, CliError> {
    let filtered = !args.filter.threads.is_empty()
        || args.filter.start.is_some()
        || args.filter.end.is_some()
        || !args.filter.status.is_empty();
    if filtered || args.per_file || args.limit.is_some() || args.format != report::Format::Table {
        return Err(CliError::Usage(
            "--thread, --start, --end, --status, --limit, --per-file and --format are for \
             files; the live view filters by thread with its keys"
                .into(),
        ));
    }
    let command = crate::live::LiveCommand {
        sort: args.sort,
        by: args.by,
        record: RecordCommand {
            pid: args.pid,
            ..RecordCommand::new(args.recording, args.argv)
        },
    };
    Ok(crate::live::run(command)?)
}

fn top_cmd(args: TopArgs) -> Result<ExitCode, CliError> {
    if args.pid.is_some() || !args.argv.is_empty() {
        return top_live(args);
    }
    if args.recording.any() {
        return Err(CliError::Usage(
            "recording options (-o, -r, --mode, -a, -d, ...) are for the live view: \
             tach top --pid PID or tach top -- PROGRAM"
                .into(),
        ));
    }
    let options = report::TopOptions {
        by: args.by,
        sort: args.sort,
        limit: args.limit,
        per_file: args.per_file,
    };
    let format = args.format;
    let filter = args.filter.build()?;
    let files = open_all(&args.files)?;
    let top = report::top(&files, &filter, &options)?;
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    report::write_top(&top, format, &mut w)
        .and_then(|()| w.flush())
        .map_err(stdout_error)?;
    Ok(SUCCESS)
}

#[derive(Args)]
struct DiffArgs {
    /// BASE NEW: one file each (or use --base and --new).
    #[arg(num_args = 0..=2, value_names = ["BASE", "NEW"])]
    pair: Vec<PathBuf>,
    /// The base runs.
    #[arg(long, num_args = 1.., conflicts_with = "pair", requires = "new")]
    base: Vec<PathBuf>,
    /// The new runs.
    #[arg(long, num_args = 1.., conflicts_with = "pair", requires = "base")]
    new: Vec<PathBuf>,
    /// What one row stands for.
    #[arg(long, default_value = "function", value_parser = names::parser::<report::GroupBy>(report::GroupBy::WHAT))]
    by: report::GroupBy,
    /// Which share to compare.
    #[arg(long, default_value = "self", value_parser = names::parser::<report::Metric>(report::Metric::WHAT))]
    metric: report::Metric,
    #[command(flatten)]
    filter: FilterArgs,
    /// Family-wise error rate (Holm correction over the compared keys).
    #[arg(long, default_value_t = 0.01)]
    alpha: f64,
    /// Compare only keys with at least this share (percent) on a side.
    #[arg(long, default_value_t = 0.5, value_name = "PERCENT")]
    min_share: f64,
    /// Never call a change smaller than this many percentage points.
    #[arg(long, default_value_t = 0.5, value_name = "POINTS")]
    min_change: f64,
    /// Show the first N rows.
    #[arg(short, long, value_name = "N")]
    limit: Option<usize>,
    #[arg(long, default_value = "table", value_parser = names::parser::<report::Format>(report::Format::WHAT))]
    format: report::Format,
    /// Also write a differential flamegraph (widths: new shares; colours: change).
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
}

fn diff_cmd(args: DiffArgs) -> Result<ExitCode, CliError> {
    let (base, new) = match (args.pair.as_slice(), args.base.is_empty()) {
        ([b, n], true) => (vec![b.clone()], vec![n.clone()]),
        ([], false) => (args.base.clone(), args.new.clone()),
        _ => {
            return Err(CliError::Usage(
                "give BASE NEW, or --base FILES... --new FILES...".into(),
            ))
        }
    };
    let options = report::DiffOptions {
        by: args.by,
        metric: args.metric,
        alpha: args.alpha,
        min_share_pct: args.min_share,
        min_change_points: args.min_change,
        ..Default::default()
    };
    if !(options.alpha > 0.0 && options.alpha < 1.0) {
        return Err(CliError::Usage("--alpha must be between 0 and 1".into()));
    }
    let format = args.format;
    let filter = args.filter.build()?;
    let (base, new) = (open_all(&base)?, open_all(&new)?);
    let mut diff = report::diff(&base, &new, &filter, &options)?;
    if let Some(path) = &args.flamegraph {
        let title = format!(
            "tach diff: {} -> {}",
            diff.base.files.join(" "),
            diff.new.files.join(" ")
        );
        let mut svg = Vec::new();
        report::write_flamegraph(&base, &new, &filter, options.by, &title, &mut svg)?;
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

fn open_all(paths: &[PathBuf]) -> Result<Vec<TachFile>, CliError> {
    paths
        .iter()
        .map(|p| TachFile::open(p).map_err(CliError::from))
        .collect()
}

#[derive(Args)]
struct RecordArgs {
    #[command(flatten)]
    recording: RecordSpec,
    /// Attach to this running Python process (CPython 3.9-3.15) instead of starting
    /// one. Stops on Ctrl-C, SIGTERM, --duration or the process's exit.
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["argv", "in_process"])]
    pid: Option<i32>,
    /// Run the program through `python -m tach run` (the tach package inside the
    /// program) even where it could be recorded from outside.
    #[arg(long)]
    in_process: bool,
    /// Also record the program's child Python processes (multiprocessing, subprocess,
    /// fork), each into a file of its own named by its pid: -o app.tach gives
    /// app_<pid>.tach, as CPython 3.15's --subprocesses names them.
    #[arg(long, conflicts_with = "in_process")]
    subprocesses: bool,
    /// The program: an interpreter, then a script (or -m module) and its arguments.
    #[arg(
        last = true,
        required_unless_present = "pid",
        value_name = "PYTHON ARGS"
    )]
    argv: Vec<std::ffi::OsString>,
}

/// `words`: tach's whole command line, of which `--in-process` passes the recording
/// options on as they were written.
fn record_cmd(args: RecordArgs, words: &[OsString]) -> Result<ExitCode, CliError> {
    let mut rc = RecordCommand::new(args.recording, args.argv);
    rc.pid = args.pid;
    rc.subprocesses = args.subprocesses;
    if args.in_process {
        rc.in_process = Some(recording_words(words));
    }
    // The program's own exit status is ours.
    Ok(rc.run()?)
}

/// The recording options of `tach record ... -- PROGRAM` as written: the words between
/// the subcommand and `--`, without `--in-process` (`python -m tach run` takes the
/// others, the same flags).
fn recording_words(words: &[OsString]) -> Vec<OsString> {
    let after_record = words
        .iter()
        .skip(1)
        .position(|w| w == "record")
        .map_or(words.len(), |i| i + 2);
    words[after_record..]
        .iter()
        .take_while(|w| *w != "--")
        .filter(|w| *w != "--in-process")
        .cloned()
        .collect()
}

#[derive(Args)]
struct DumpArgs {
    /// The Python process (CPython 3.9-3.15).
    pid: i32,
    /// One JSON document: a list of threads, each with its status and frames.
    #[arg(long)]
    json: bool,
    /// Read the threads while they run instead of pausing the one holding the GIL.
    #[arg(long)]
    no_blocking: bool,
    /// Async-aware stacks (CPython 3.14, 3.15), one per task.
    #[arg(long, conflicts_with = "native")]
    async_aware: bool,
    /// all (default for a dump, as CPython's): every task; running: the running ones.
    #[arg(long, value_parser = names::parser::<AsyncMode>("async mode"), requires = "async_aware")]
    async_mode: Option<AsyncMode>,
    /// Native stacks (C, C++, Rust frames with the Python ones spliced in); implies
    /// pausing: each thread is stopped while its stack is read.
    #[arg(long, conflicts_with = "no_blocking")]
    native: bool,
}

fn dump_cmd(args: DumpArgs) -> Result<ExitCode, CliError> {
    let async_mode = args
        .async_aware
        .then(|| args.async_mode.unwrap_or(AsyncMode::All));
    let stacks =
        crate::record::external::dump(args.pid, !args.no_blocking, async_mode, args.native)
            .map_err(crate::record::options::RecordCommandError::from)?;
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&stacks)
            .map_err(|e| CliError::Usage(format!("cannot write JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        crate::record::external::render_dump(args.pid, &stacks)
    };
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(stdout_error)?;
    Ok(SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

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

    #[test]
    fn top_takes_files_or_a_live_target() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["tach", "top"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv).map(|cli| match cli.command {
                Command::Top(t) => t,
                _ => panic!("not top"),
            })
        };
        let t = parse(&["--pid", "42", "-a", "-r", "500", "--sort", "total"]).unwrap();
        assert_eq!(
            (t.pid, t.recording.all_threads, t.recording.rate),
            (Some(42), true, Some(500.0))
        );
        assert!(t.files.is_empty());
        let t = parse(&["-o", "o.tach", "--", "python3", "app.py", "--x"]).unwrap();
        assert_eq!(t.argv, ["python3", "app.py", "--x"]);
        assert_eq!(t.recording.output, Some(PathBuf::from("o.tach")));
        assert!(parse(&["run.bin"]).unwrap().pid.is_none());
        // Files and a live target together, or neither: clap's usage errors.
        assert!(parse(&["run.bin", "--pid", "42"]).is_err());
        assert!(parse(&["run.bin", "--", "python3", "app.py"]).is_err());
        assert!(parse(&[]).is_err());
        // Recording options on files, or file options live: our usage errors (exit 2).
        let usage = |args: &[&str]| top_cmd(parse(args).unwrap()).map_err(|e| e.exit_code());
        assert_eq!(usage(&["-r", "10", "run.bin"]).err(), Some(USAGE));
        assert_eq!(
            usage(&["--pid", "42", "--format", "csv"]).err(),
            Some(USAGE)
        );
        assert_eq!(usage(&["--pid", "42", "--thread", "7"]).err(), Some(USAGE));
        assert_eq!(usage(&["--pid", "42", "-r", "0"]).err(), Some(USAGE));
    }

    #[test]
    fn in_process_passes_the_recording_options_as_written() {
        let words: Vec<OsString> = [
            "tach",
            "record",
            "-o",
            "record",
            "--in-process",
            "-r",
            "1e3",
            "--mode",
            "cpu",
            "--",
            "python3",
            "-m",
            "mod",
            "--in-process",
        ]
        .map(OsString::from)
        .to_vec();
        assert_eq!(
            recording_words(&words),
            ["-o", "record", "-r", "1e3", "--mode", "cpu"]
        );
        // They are flags python -m tach run parses the same way (the same clap args).
        let mut argv = vec![OsString::from("python -m tach"), "run".into()];
        argv.extend(recording_words(&words));
        argv.extend(["app.py".into()]);
        let run = crate::record::options::parse_python_main(argv).unwrap();
        let Command::Record(record) = Cli::try_parse_from(&words).unwrap().command else {
            panic!("not record")
        };
        assert_eq!(run.spec, record.recording);
    }

    #[test]
    fn broken_pipe_is_recognised_through_error_sources() {
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let e = CliError::Export(export::write_error("stdout")(pipe));
        assert!(e.is_broken_pipe());
        assert_eq!(e.exit_code(), SUCCESS);
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = CliError::Export(export::write_error("stdout")(other));
        assert!(!e.is_broken_pipe());
        assert_eq!(e.exit_code(), FAILURE);
        assert_eq!(CliError::Usage("x".into()).exit_code(), USAGE);
    }
}
