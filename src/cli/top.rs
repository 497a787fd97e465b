//! `tach top`: the pstats summary table of files, or the live view of a running
//! program (`--pid`, `-- PROGRAM`).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::outcome::{open_all, stdout_error, CliError, ExitCode, SUCCESS};
use crate::names;
use crate::record::options::RecordSpec;
use crate::record::RecordCommand;
use crate::report;

#[derive(Args)]
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
pub(super) struct TopArgs {
    /// TACH files (or, for the live view, --pid PID or -- PROGRAM).
    #[arg(required_unless_present_any = ["pid", "argv"], conflicts_with = "RecordSpec")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    options: report::TopOptions,
    #[command(flatten)]
    filter: report::FilterSpec,
    #[arg(long, default_value = "table", value_parser = names::parser::<report::Format>(report::Format::WHAT))]
    format: report::Format,
    /// Live view: attach to this running Python process (CPython 3.9-3.15).
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["argv", "files"], conflicts_with_all = file_options(), help_heading = "Live view")]
    pid: Option<i32>,
    #[command(flatten, next_help_heading = "Live view")]
    recording: RecordSpec,
    /// Live view: start this program (an interpreter, a script or -m module, its
    /// arguments) and record it from outside.
    #[arg(
        last = true,
        value_name = "PYTHON ARGS",
        conflicts_with = "files",
        conflicts_with_all = file_options(),
        help_heading = "Live view"
    )]
    argv: Vec<std::ffi::OsString>,
}

/// The options for files, which the live view refuses (it filters by thread with its
/// keys): the sample filter's, and the table's; recording options (the `RecordSpec`
/// group) are the live view's alone.
fn file_options() -> Vec<&'static str> {
    let mut ids = report::field_names::<report::FilterSpec>().to_vec();
    ids.extend(["limit", "per_file", "format"]);
    ids
}

/// `tach top --pid` / `tach top -- PROGRAM`: the live view.
fn top_live(args: TopArgs) -> Result<ExitCode, CliError> {
    let command = crate::live::LiveCommand {
        sort: args.options.sort,
        by: args.options.by,
        record: RecordCommand {
            pid: args.pid,
            ..RecordCommand::new(args.recording, args.argv)
        },
    };
    Ok(crate::live::run(command)?)
}

pub(super) fn run(args: TopArgs) -> Result<ExitCode, CliError> {
    if args.pid.is_some() || !args.argv.is_empty() {
        return top_live(args);
    }
    let options = args.options;
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

#[cfg(test)]
mod tests {
    use super::super::outcome::USAGE;
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

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
        // Recording options on files, or file options live: clap's usage errors (exit 2).
        let usage = |args: &[&str]| parse(args).err().map(|e| e.exit_code());
        assert_eq!(usage(&["-r", "10", "run.bin"]), Some(2));
        assert_eq!(usage(&["-a", "run.bin"]), Some(2));
        assert_eq!(usage(&["--pid", "42", "--format", "csv"]), Some(2));
        assert_eq!(usage(&["--pid", "42", "--thread", "7"]), Some(2));
        assert_eq!(usage(&["--per-file", "--", "python3", "app.py"]), Some(2));
        // A value the recorder refuses: our usage error (exit 2).
        let refused = run(parse(&["--pid", "42", "-r", "0"]).unwrap()).map_err(|e| e.exit_code());
        assert_eq!(refused.err(), Some(USAGE));
    }
}
