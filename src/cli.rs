//! The `tach` command line: a thin clap layer over the library. Both the `tach` binary
//! (src/main.rs) and the Python package's `tach` command (`tach._native.cli_main`) call
//! [`main`], so they are the same program.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::export::{self, batch, ExportOptions};
use crate::tach::info::FileInfo;
use crate::tach::{rewrite, Compression, SampleFilter, TachFile};

#[derive(Parser)]
#[command(
    name = "tach",
    version,
    about = "Fast, exact tools for CPython's TACH sampling profiles",
    long_about = "Read, verify, rewrite and export the binary profiles written by \
                  `python3.15 -m profiling.sampling run --binary` (TACH files)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show everything a file's header, footer and stats block say, plus what a full decode finds.
    Info {
        /// TACH files (.bin / .tach)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON (one object per file, in a list) for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Decode every sample with every check; exit 1 if any file is invalid.
    Verify {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print nothing for valid files.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Re-encode a file: change its compression, or normalise a byte-swapped file.
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
    /// Run a Python program with tach's in-process recorder on:
    /// `tach record -o out.tach -- python app.py ARGS`. The interpreter must have the
    /// `tach` package installed (`pip install .`); it runs `python -m tach run`.
    Record(RecordArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum CompressionArg {
    None,
    Zstd,
}

#[derive(Args)]
#[command(after_help = export_formats_help())]
struct ExportArgs {
    /// Output format (see the list below); or use one of the --FORMAT flags.
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    /// Collapsed stacks (CPython's replay --collapsed).
    #[arg(long)]
    collapsed: bool,
    /// pstats marshal file (loads with pstats.Stats).
    #[arg(long)]
    pstats: bool,
    /// CPython's JSON-lines export.
    #[arg(long)]
    jsonl: bool,
    /// Firefox Profiler (processed Gecko profile).
    #[arg(long)]
    gecko: bool,
    /// Speedscope JSON.
    #[arg(long)]
    speedscope: bool,
    /// Interactive flamegraph SVG.
    #[arg(long)]
    flamegraph: bool,
    /// Parquet (the `tach query` schema).
    #[arg(long)]
    parquet: bool,
    /// Output file, or - for standard output (one input only). Default: beside the input.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Convert every input into this directory, in parallel.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Flamegraph: one graph per thread.
    #[arg(long)]
    per_thread: bool,
    /// Title for formats that show one (default: the input file name).
    #[arg(long)]
    title: Option<String>,
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn export_formats_help() -> String {
    let mut s = String::from("Formats:\n");
    for e in export::REGISTRY {
        s.push_str(&format!("  {:<12} {}\n", e.name(), e.description()));
    }
    s
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
    fn build(&self) -> Result<SampleFilter, String> {
        let mut f = SampleFilter {
            threads: (!self.threads.is_empty()).then(|| self.threads.iter().copied().collect()),
            start_s: self.start,
            end_s: self.end,
            ..Default::default()
        };
        for s in &self.status {
            f.add_status(s)?;
        }
        Ok(f)
    }
}

/// An exit status: 0 success, 1 failure, 2 usage error (as clap's).
type ExitCode = u8;
const SUCCESS: ExitCode = 0;
const FAILURE: ExitCode = 1;

/// Runs the command line `args` (the first is the program name) and returns the exit
/// status. Never exits the process: the Python package calls this inside the interpreter.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let code = match Cli::try_parse_from(args) {
        Ok(cli) => match run(cli.command) {
            Ok(code) => code,
            Err(msg) => {
                eprintln!("tach: {msg}");
                2
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

fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Info { files, json } => info(&files, json),
        Command::Verify { files, quiet } => Ok(verify(&files, quiet)),
        Command::Rewrite {
            input,
            output,
            compression,
            level,
        } => {
            let file = TachFile::open(&input).map_err(|e| e.to_string())?;
            let mut builder = rewrite::builder_like(&file).level(level);
            if let Some(c) = compression {
                builder = builder.compression(match c {
                    CompressionArg::None => Compression::None,
                    CompressionArg::Zstd => Compression::Zstd,
                });
            }
            let summary = rewrite::rewrite(&file, builder, &output).map_err(|e| e.to_string())?;
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
        Command::Record(args) => record_cmd(args),
    }
}

fn info(files: &[PathBuf], json: bool) -> Result<ExitCode, String> {
    let mut infos = Vec::new();
    let mut failed = false;
    for path in files {
        match TachFile::open(path).and_then(|f| FileInfo::gather(&f)) {
            Ok(i) => infos.push(i),
            Err(e) => {
                eprintln!("tach: {e}");
                failed = true;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        let text = serde_json::to_string_pretty(&infos).map_err(|e| e.to_string())?;
        let _ = writeln!(out, "{text}");
    } else {
        for (n, i) in infos.iter().enumerate() {
            if n > 0 {
                let _ = writeln!(out);
            }
            let _ = write!(out, "{}", render_info(i));
        }
    }
    Ok(if failed { FAILURE } else { SUCCESS })
}

fn render_info(i: &FileInfo) -> String {
    let mut s = String::new();
    let mut row = |k: &str, v: String| s.push_str(&format!("  {k:<22} {v}\n"));
    row("file", format!("{} ({} bytes)", i.path, i.file_size));
    row(
        "format",
        format!("version {}, {:?}-endian", i.format_version, i.byte_order).to_lowercase(),
    );
    row("python", i.python_version.clone());
    row(
        "mode",
        format!(
            "{} (config word 0x{:x})",
            i.profiling_mode.name(),
            i.config_word
        ),
    );
    row(
        "capture features",
        match &i.capture_features {
            Some(f) if f.is_empty() => "none".into(),
            Some(f) => f.join(", "),
            None => "not recorded".into(),
        },
    );
    row(
        "interval",
        format!(
            "{} us ({:.0} Hz)",
            i.sample_interval_us,
            if i.sample_interval_us > 0 {
                1e6 / i.sample_interval_us as f64
            } else {
                0.0
            }
        ),
    );
    row("start time", format!("{} us (monotonic)", i.start_time_us));
    row("samples", format!("{} (thread-samples)", i.sample_count));
    row("threads", i.thread_count.to_string());
    row(
        "strings / frames",
        format!("{} / {}", i.string_count, i.frame_count),
    );
    row(
        "duration",
        format!("{:.3} s (first to last sample)", i.duration_s),
    );
    let ratio = i
        .compression_ratio
        .map(|r| format!(", ratio {r:.1}x"))
        .unwrap_or_default();
    row(
        "sample data",
        format!(
            "{} bytes stored, {} bytes decoded ({}{ratio})",
            i.sample_bytes_stored,
            i.sample_bytes,
            match i.compression {
                Compression::None => "uncompressed",
                Compression::Zstd => "zstd",
            }
        ),
    );
    match &i.stats {
        Some(st) => {
            let pct = |v: Option<f64>| v.map(|v| format!("{v:.2}%")).unwrap_or("-".into());
            row(
                "stats block",
                format!(
                    "duration {:.3} s, rate {:.1} Hz, errors {}, missed {} ({} bytes)",
                    st.duration_s,
                    st.sample_rate_hz,
                    pct(st.error_rate_pct),
                    pct(st.missed_samples_pct),
                    st.block_size
                ),
            );
        }
        None => row("stats block", "none".into()),
    }
    let total: u64 = i.records.values().map(|r| r.records).sum();
    for name in ["REPEAT", "FULL", "SUFFIX", "POP_PUSH"] {
        let r = &i.records[name];
        let share = if total > 0 {
            100.0 * r.records as f64 / total as f64
        } else {
            0.0
        };
        row(
            &format!("records {name}"),
            format!("{} ({share:.1}%), {} samples", r.records, r.samples),
        );
    }
    row(
        "frames per sample",
        format!(
            "{:.1} ({} frame indices stored)",
            i.frames_per_sample, i.frames_written
        ),
    );
    s
}

fn verify(files: &[PathBuf], quiet: bool) -> ExitCode {
    let mut failed = 0;
    for path in files {
        match TachFile::open(path).and_then(|f| f.verify().map(|m| (f, m))) {
            Ok((f, mix)) => {
                if !quiet {
                    println!(
                        "{}: ok ({} samples, {} threads, {} records)",
                        path.display(),
                        mix.samples.iter().sum::<u64>(),
                        f.header().thread_count,
                        mix.records.iter().sum::<u64>()
                    );
                }
            }
            Err(e) => {
                println!("{e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        eprintln!("tach: {failed} of {} files are invalid", files.len());
        FAILURE
    } else {
        SUCCESS
    }
}

fn export_cmd(args: ExportArgs) -> Result<ExitCode, String> {
    let flags = [
        (args.collapsed, "collapsed"),
        (args.pstats, "pstats"),
        (args.jsonl, "jsonl"),
        (args.gecko, "gecko"),
        (args.speedscope, "speedscope"),
        (args.flamegraph, "flamegraph"),
        (args.parquet, "parquet"),
    ];
    let mut chosen: Vec<&str> = flags.iter().filter(|f| f.0).map(|f| f.1).collect();
    if let Some(f) = &args.format {
        chosen.push(f.as_str());
    }
    let name = match chosen.as_slice() {
        [one] => *one,
        [] => {
            return Err(format!(
                "choose an output format: --format NAME or --NAME, one of: {}",
                export::names().join(", ")
            ))
        }
        _ => return Err("choose one output format".into()),
    };
    let exporter = export::find(name).ok_or_else(|| {
        format!(
            "unknown format '{name}': use one of {}",
            export::names().join(", ")
        )
    })?;
    let filter = args.filter.build()?;
    let options = ExportOptions {
        per_thread: args.per_thread,
        title: args.title.clone(),
    };
    if let Some(dir) = &args.out_dir {
        if args.output.is_some() {
            return Err("use either -o or --out-dir, not both".into());
        }
        return Ok(export_many(exporter, &args.files, dir, &filter, &options));
    }
    if args.files.len() > 1 {
        return Err(format!(
            "{} inputs: use --out-dir DIR to convert several files",
            args.files.len()
        ));
    }
    let input = &args.files[0];
    match args.output.as_deref() {
        Some(p) if p == Path::new("-") => {
            let file = TachFile::open(input).map_err(|e| e.to_string())?;
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            export::export_to(exporter, &file, &filter, &options, &mut w)
                .and_then(|()| w.flush().map_err(export::write_error("stdout")))
                .map_err(|e| e.to_string())?;
        }
        other => {
            let out = other
                .map(Path::to_path_buf)
                .unwrap_or_else(|| export::default_output(input, exporter));
            export::export_file(exporter, input, &out, &filter, &options)
                .map_err(|e| e.to_string())?;
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
    let results = batch::convert_all(exporter, files, dir, filter, options, &|c| {
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
            Ok(()) => eprintln!("wrote {}", c.output.display()),
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
    /// TACH files or glob patterns; several files are one table with a `file` column.
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
fn query_cmd(args: QueryArgs) -> Result<ExitCode, String> {
    use crate::query::{self, output};
    if args.schema {
        print!("{}", query::schema_text());
        return Ok(SUCCESS);
    }
    let fail = |e: query::QueryError| {
        eprintln!("tach: {e}");
        Ok(if e.is_usage() { 2 } else { 1 })
    };
    let format = output::Format::parse(&args.format).ok_or_else(|| {
        format!(
            "unknown format '{}': use table, csv, json, ndjson or parquet",
            args.format
        )
    })?;
    let sql = args.sql.unwrap_or_default();
    let files = match query::expand_inputs(&args.files) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let engine = match query::QueryEngine::open(&files) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    if args.explain {
        return match engine.explain(&sql) {
            Ok(plan) => {
                println!("{plan}");
                Ok(SUCCESS)
            }
            Err(e) => fail(e),
        };
    }
    let mut df = match engine.run(&sql) {
        Ok(df) => df,
        Err(e) => return fail(e),
    };
    let result = match &args.output {
        Some(path) => std::fs::File::create(path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                output::write(&mut df, format, 0, &mut w)
                    .and_then(|()| {
                        w.flush().map_err(|e| query::QueryError::Io {
                            path: path.clone(),
                            source: e,
                        })
                    })
                    .map_err(|e| e.to_string())
            }),
        None => {
            if format == output::Format::Parquet && std::io::stdout().is_terminal() {
                return Err("Parquet is binary: use -o FILE or redirect standard output".into());
            }
            let limit = if std::io::stdout().is_terminal() {
                args.max_rows
            } else {
                0
            };
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            output::write(&mut df, format, limit, &mut w)
                .and_then(|()| {
                    w.flush().map_err(|e| query::QueryError::Io {
                        path: "stdout".into(),
                        source: e,
                    })
                })
                .map_err(|e| e.to_string())
        }
    };
    result.map(|()| SUCCESS)
}

#[derive(Args)]
struct RecordArgs {
    /// Output file (default: tach_<pid>.tach).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Sampling rate in Hz (default 1000).
    #[arg(short, long)]
    rate: Option<u64>,
    /// What to keep: wall (default), cpu, gil or exception.
    #[arg(long, value_parser = ["wall", "cpu", "gil", "exception"])]
    mode: Option<String>,
    /// Sample every thread, not only the main thread.
    #[arg(short = 'a', long)]
    all_threads: bool,
    /// Record each frame's base opcode.
    #[arg(long)]
    opcodes: bool,
    /// No <GC> frames.
    #[arg(long)]
    no_gc: bool,
    /// Compression of the sample data.
    #[arg(long, value_parser = ["auto", "zstd", "none"])]
    compression: Option<String>,
    /// Stop sampling after this many seconds.
    #[arg(short, long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// The program: an interpreter, then a script (or -m module) and its arguments.
    #[arg(last = true, required = true, value_name = "PYTHON ARGS")]
    argv: Vec<std::ffi::OsString>,
}

fn record_cmd(args: RecordArgs) -> Result<ExitCode, String> {
    let mut rc = crate::record::cli::RecordCommand::new(args.argv);
    rc.output = args.output;
    rc.rate = args.rate;
    rc.mode = args.mode;
    rc.all_threads = args.all_threads;
    rc.opcodes = args.opcodes;
    rc.no_gc = args.no_gc;
    rc.compression = args.compression;
    rc.duration = args.duration;
    let status = rc.run()?;
    // The program's own exit status is ours.
    Ok(match status.code() {
        Some(c) => c.clamp(0, 255) as u8,
        None => FAILURE,
    })
}
