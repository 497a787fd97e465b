//! The Python front ends' command lines: `python -m tach run` and `%%tach`, parsed by
//! the extension with clap, with the same recording flags as `tach record` (the
//! [`RecordSpec`] flattened in).

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};

use crate::record::options::RecordSpec;

/// `python -m tach`: the command line of the Python package's recorder, parsed by the
/// extension ([`parse_python_main`]) with the same flags as `tach record`.
#[derive(Debug, Parser)]
#[command(
    name = "python -m tach",
    about = "Record a Python program in-process (the tach package's recorder)",
    after_help = "The same recording options as tach record: docs/recorder.md"
)]
pub struct PythonMain {
    #[command(subcommand)]
    pub command: PythonCommand,
}

#[derive(Debug, Subcommand)]
pub enum PythonCommand {
    /// Run a script or module under the recorder.
    #[command(
        override_usage = "python -m tach run [OPTIONS] (SCRIPT | -m MODULE) [ARGS]...",
        after_help = "Everything from the script (or -m module) on is the program's, options included.\n\
Examples:\n  python -m tach run -o app.tach app.py --port 8000\n  python -m tach run -r 10000 --mode cpu -a -m mypkg.main"
    )]
    Run(RunArgs),
}

/// `python -m tach run`: the recording options, then the program.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub spec: RecordSpec,
    /// No summary line at the end.
    #[arg(short, long)]
    pub quiet: bool,
    /// Run a module as the program (as python -m), with the arguments that follow.
    #[arg(
        short = 'm',
        value_name = "MODULE",
        num_args = 1..,
        allow_hyphen_values = true
    )]
    pub module: Vec<OsString>,
    /// The script and its arguments.
    #[arg(
        value_name = "SCRIPT",
        trailing_var_arg = true,
        required_unless_present = "module"
    )]
    pub script: Vec<OsString>,
}

impl RunArgs {
    /// The module to run (None: a script) and the program's arguments (the script's
    /// own path first). `-mpkg a b` parses as the module `pkg` and the words `a b`.
    pub fn program(&self) -> (Option<OsString>, Vec<OsString>) {
        match self.module.split_first() {
            Some((module, args)) => {
                let args = args.iter().chain(&self.script).cloned().collect();
                (Some(module.clone()), args)
            }
            None => (None, self.script.clone()),
        }
    }
}

/// `%%tach`, the notebook magic: the recording options alone (the cell is the program).
#[derive(Debug, Parser)]
#[command(name = "%%tach", about = "Record one notebook cell in-process")]
pub struct CellArgs {
    #[command(flatten)]
    pub spec: RecordSpec,
    /// No summary line at the end.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Parses `python -m tach`'s arguments (`argv[0]` is the program name) with clap, as
/// the `tach` binary parses its own: the extension returns clap's messages as they are.
pub fn parse_python_main<I, T>(argv: I) -> Result<RunArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let PythonCommand::Run(run) = PythonMain::try_parse_from(argv)?.command;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::options::Mode;
    use std::path::PathBuf;

    #[test]
    fn python_main_parses_as_tach_record() {
        let run = |args: &[&str]| {
            let mut argv = vec!["python -m tach", "run"];
            argv.extend_from_slice(args);
            parse_python_main(argv)
        };
        let r = run(&[
            "-o", "o.tach", "-r", "500", "--mode", "cpu", "-a", "s.py", "-q", "-o", "x",
        ])
        .unwrap();
        assert_eq!(r.spec.output, Some(PathBuf::from("o.tach")));
        assert_eq!((r.spec.rate, r.spec.mode), (Some(500.0), Some(Mode::Cpu)));
        assert!(r.spec.all_threads && !r.quiet);
        // From the script on, every word is the program's.
        assert_eq!(r.script, ["s.py", "-q", "-o", "x"]);
        let r = run(&[
            "-q",
            "--no-blocking",
            "-m",
            "pkg.main",
            "a",
            "-q",
            "-o",
            "x",
        ])
        .unwrap();
        assert!(r.quiet);
        assert_eq!(r.spec.blocking(), Some(false));
        let words = |w: &[&str]| w.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            r.program(),
            (Some("pkg.main".into()), words(&["a", "-q", "-o", "x"]))
        );
        let r = run(&["-mpkg", "a", "-o", "x"]).unwrap();
        assert_eq!(r.program(), (Some("pkg".into()), words(&["a", "-o", "x"])));
        let r = run(&["-r500", "-d2", "s.py", "-r500"]).unwrap();
        assert_eq!((r.spec.rate, r.spec.duration), (Some(500.0), Some(2.0)));
        assert_eq!(r.script, ["s.py", "-r500"]);
        let r = run(&["-d", "2", "--", "-odd-name.py"]).unwrap();
        assert_eq!(r.script, ["-odd-name.py"]);
        // No program, or a bad name: clap's usage errors, with the names' own message.
        assert_eq!(run(&["-o", "x"]).unwrap_err().exit_code(), 2);
        let e = run(&["--mode", "bogus", "s.py"]).unwrap_err();
        assert!(e
            .to_string()
            .contains("unknown mode 'bogus': use wall, cpu, gil or exception"));
    }
}
