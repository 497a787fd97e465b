//! The `tach` command line: a thin clap layer over the library, one module per
//! subcommand (its arguments and the calls into the library), this one for the
//! [`Cli`] and [`Command`] definitions, the exit statuses and the dispatch. Both the
//! `tach` binary (src/main.rs, through [`crate::run_cli`]) and the Python package's
//! `tach` command (`tach._native.cli_main`) call [`main`], so they are the same program.

mod diff;
mod dump;
mod export;
mod info;
mod outcome;
#[cfg(feature = "query")]
mod query;
mod record;
mod recover;
mod rewrite;
mod top;
mod verify;

use std::ffi::OsString;
use std::io::Write;

use clap::{Parser, Subcommand};

use outcome::SUCCESS;
#[cfg(not(feature = "query"))]
use outcome::USAGE;
pub use outcome::{CliError, ExitCode};

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
    Info(info::InfoArgs),
    /// Decode every sample with every check; exit 1 if any file is invalid.
    Verify(verify::VerifyArgs),
    /// Re-encode a file: change its compression, or normalise a byte-swapped file.
    Rewrite(rewrite::RewriteArgs),
    /// Convert files to other profile formats.
    Export(export::ExportArgs),
    /// Run SQL over profiles (tables: samples, frames, stacks, stack_counts, sample_frames).
    #[cfg(feature = "query")]
    Query(query::QueryArgs),
    /// Record a Python program: start it, or attach to it with --pid.
    ///
    /// CPython 3.9-3.15 are recorded from outside: the program needs no tach package,
    /// and tach needs permission to read its memory (as for ptrace); --opcodes from 3.11.
    /// --in-process runs the program through `python -m tach run`, which needs the tach
    /// package in that interpreter. The output replays in CPython 3.15.
    Record(record::RecordArgs),
    /// Print every thread's current Python stack in a running process.
    ///
    /// Innermost frame first, with file:line and each thread's status (GIL, on CPU,
    /// exception). CPython 3.9-3.15.
    Dump(dump::DumpArgs),
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
    Top(top::TopArgs),
    /// Which functions' share of the samples changed between two sets of runs, beyond noise.
    ///
    /// Compares shares (not counts, so rates and durations may differ), with a
    /// block-bootstrap noise estimate and Holm's correction (docs/diff.md).
    Diff(diff::DiffArgs),
    /// Turn the crash journal of a recording that died into a TACH file.
    ///
    /// A recording killed or crashed leaves OUT.tach.journal beside OUT.tach.
    Recover(recover::RecoverArgs),
}

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
        Command::Info(args) => info::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Rewrite(args) => rewrite::run(args),
        Command::Export(args) => export::run(args),
        #[cfg(feature = "query")]
        Command::Query(args) => query::run(args),
        Command::Record(args) => record::run(args, words),
        Command::Dump(args) => dump::run(args),
        Command::Top(args) => top::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Recover(args) => recover::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The ids of `command`'s arguments (a flag's id is its field's name).
    fn argument_ids(command: &str) -> Vec<String> {
        let cli = Cli::command();
        let sub = cli.find_subcommand(command).expect(command);
        sub.get_arguments()
            .map(|a| a.get_id().to_string())
            .filter(|id| id != "help")
            .collect()
    }

    #[test]
    fn every_command_takes_exactly_its_specs_fields() {
        use crate::record::options::RecordSpec;
        use crate::report::{field_names, DiffOptions, FilterSpec, TopOptions};
        // A spec field with no flag, on purpose: the command line takes a rate, and
        // `tach.start(interval_us=)` alone the interval.
        const NOT_FLAGS: [&str; 1] = ["interval_us"];
        let record = field_names::<RecordSpec>();
        let filter = field_names::<FilterSpec>();
        // The fields of a command's specs, and the command's own arguments.
        type Fields = &'static [&'static str];
        let commands: [(&str, Vec<Fields>, Fields); 3] = [
            (
                "top",
                vec![field_names::<TopOptions>(), filter, record],
                &["files", "format", "pid", "argv"],
            ),
            (
                "diff",
                vec![field_names::<DiffOptions>(), filter],
                &["pair", "base", "new", "limit", "format", "flamegraph"],
            ),
            (
                "record",
                vec![record],
                &["pid", "in_process", "subprocesses", "argv"],
            ),
        ];
        for (command, specs, own) in commands {
            let mut want: Vec<String> = specs
                .iter()
                .flat_map(|fields| fields.iter())
                .filter(|f| !NOT_FLAGS.contains(f))
                .chain(own)
                .map(|f| f.to_string())
                .collect();
            let mut got = argument_ids(command);
            want.sort();
            got.sort();
            assert_eq!(got, want, "tach {command}");
        }
        // `export` has the formats' own flags beside the filter: every field is one.
        let export = argument_ids("export");
        for field in filter {
            assert!(export.iter().any(|id| id == field), "tach export --{field}");
        }
    }

    #[test]
    fn broken_pipe_is_recognised_through_error_sources() {
        use super::outcome::{FAILURE, USAGE};
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let e = CliError::Export(crate::export::write_error("stdout")(pipe));
        assert!(e.is_broken_pipe());
        assert_eq!(e.exit_code(), SUCCESS);
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = CliError::Export(crate::export::write_error("stdout")(other));
        assert!(!e.is_broken_pipe());
        assert_eq!(e.exit_code(), FAILURE);
        assert_eq!(CliError::Usage("x".into()).exit_code(), USAGE);
    }
}
