//! `tach record`: start a program or attach to one (`--pid`) and record it.

use std::ffi::OsString;

use clap::Args;

use super::outcome::{CliError, ExitCode};
use crate::record::options::RecordSpec;
use crate::record::RecordCommand;

#[derive(Args)]
#[command(after_help = "Examples:
  tach record -o app.tach -- python app.py --port 8000
  tach record -o app.tach -r 10000 --mode cpu --all-threads -- python -m mypkg.main
  tach record --pid 4242 -d 30 -o server.tach      # attach to a running process
  tach record --subprocesses -o job.tach -- python job.py   # also job_<pid>.tach per child
  tach record --native -o app.tach -- python app.py        # C/C++/Rust frames too (x86-64)
  tach record --async-aware --pid 4242 -o srv.tach          # asyncio tasks (3.14, 3.15)
  tach record --pid 4242 --rotate 60s --keep 24h -o srv/    # a file per minute, a day kept
  tach record --pid 4242 --rotate 60s --on-segment 'gzip -k' -o srv/   # a hook per segment
  python -m tach run -o app.tach app.py            # in-process, without the tach binary")]
pub(super) struct RecordArgs {
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
    /// app_<pid>.tach, as CPython 3.15's --subprocesses names them (with --rotate, each
    /// child's segments are beside the root's, with _<pid> before .tach).
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
pub(super) fn run(args: RecordArgs, words: &[OsString]) -> Result<ExitCode, CliError> {
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

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

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
        let run = crate::python::run_args::parse_python_main(argv).unwrap();
        let Command::Record(record) = Cli::try_parse_from(&words).unwrap().command else {
            panic!("not record")
        };
        assert_eq!(run.spec, record.recording);
    }

    /// `python -m tach run --help` and `tach record --help` list the same recording
    /// options (the docs show them interchangeably); each has only its own few.
    #[test]
    fn python_run_and_tach_record_have_the_same_recording_options() {
        use clap::CommandFactory;
        use std::collections::BTreeSet;
        let longs = |cmd: &clap::Command| -> BTreeSet<String> {
            cmd.get_arguments()
                .filter_map(|a| a.get_long())
                .map(String::from)
                .collect()
        };
        let mut python = crate::python::run_args::PythonMain::command();
        python.build();
        let mut tach = Cli::command();
        tach.build();
        let run = longs(python.find_subcommand("run").unwrap());
        let record = longs(tach.find_subcommand("record").unwrap());
        assert!(run.contains("mode") && run.contains("output"), "{run:?}");
        let only_run: Vec<&String> = run.difference(&record).collect();
        assert_eq!(only_run, ["quiet"]);
        let only_record: Vec<&String> = record.difference(&run).collect();
        assert_eq!(only_record, ["in-process", "pid", "subprocesses"]);
    }
}
