//! `tach record` as a library call: [`RecordCommand`] is the spec, what to record and
//! the choice of way, and [`RecordCommand::run`] records and prints the summary line
//! to stderr, as the command line does.
//! - `--pid PID`: attach to a running process from outside (`outside`, `recording`).
//! - `-- python app.py ARGS` (or a command that is not an interpreter, such as a script
//!   with a shebang): start the program and record it from outside. The program needs
//!   no tach package. An interpreter tach cannot read (3.8, 3.16) gets attach's error.
//! - `-- python app.py ARGS` with `--in-process`: run it through the `tach` Python
//!   package (`python -m tach run OPTIONS app.py ARGS`, with the options as they were
//!   given to `tach record`), which must be importable by that interpreter.

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

use super::options::{RecordSpec, SpecError};
use super::outside::{write_empty, ExternalError, Recorded};
use super::recording::record;
use super::sampler::RecordOptions;
use super::segments;

/// How long a started program has to load its interpreter before tach gives up.
pub(crate) const STARTUP: Duration = Duration::from_secs(10);

/// Why `tach record` could not run the program, or the options were refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordCommandError {
    #[error("tach record needs a command: tach record -- python script.py")]
    NoCommand,
    #[error("tach record needs a script or -m module after the interpreter")]
    NoScript,
    #[error("--pid and a command cannot be given together")]
    PidAndCommand,
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    External(#[from] ExternalError),
    /// `--rotate` into a directory that cannot be one (a file, not writable).
    #[error("{0}")]
    SegmentDir(String),
}

impl RecordCommandError {
    /// A command line that asks for something impossible, rather than a failure to run.
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            RecordCommandError::Spawn { .. } | RecordCommandError::External(_)
        )
    }
}

/// `tach record`: how (the spec) and what to record, and the way to do it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordCommand {
    pub spec: RecordSpec,
    /// The command: an interpreter, then its arguments (a script, or `-m module`).
    pub argv: Vec<OsString>,
    /// Attach to this running process instead of starting one.
    pub pid: Option<i32>,
    /// Run the command through `python -m tach run` even where it could be recorded
    /// from outside, with these options: the recording options exactly as they were
    /// written on `tach record`'s command line (the same flags, parsed by the same clap
    /// definition there).
    pub in_process: Option<Vec<OsString>>,
    /// Also record the target's child Python processes, one file each (`OUT_<pid>.tach`).
    pub subprocesses: bool,
}

impl RecordCommand {
    pub fn new(spec: RecordSpec, argv: Vec<OsString>) -> Self {
        RecordCommand {
            spec,
            argv,
            pid: None,
            in_process: None,
            subprocesses: false,
        }
    }

    /// Records as asked and returns tach's exit code ([`exit_status`]): the program's
    /// own when tach ran it, [`RECORDING_FAILED`] when the recording failed and the
    /// program did not.
    pub fn run(&self) -> Result<u8, RecordCommandError> {
        if let Some(pid) = self.pid {
            if !self.argv.is_empty() {
                return Err(RecordCommandError::PidAndCommand);
            }
            let opts = self.spec.record_options(pid)?;
            prepare_output(&opts)?;
            let (path, interval, mode) = (opts.path.clone(), opts.interval_us, opts.mode);
            let rotating = opts.segments.is_some();
            let stats = match record(Recorded::Pid(pid), opts, Duration::ZERO, self.subprocesses) {
                Ok(stats) => stats,
                Err(e) => {
                    // Whoever waits for the file finds one, empty, beside the error (a
                    // rotated recording's directory stays empty).
                    if matches!(e, ExternalError::Attach(_)) && !rotating {
                        let _ = write_empty(&path, interval, mode);
                    }
                    return Err(e.into());
                }
            };
            eprintln!("{}", stats.summary_line());
            if let Some(e) = &stats.error {
                eprintln!("tach: error: {e}");
            }
            return Ok(exit_status(0, stats.error.is_none()));
        }
        if self.argv.len() < 2 || self.in_process.is_some() {
            let mut cmd = self.command()?;
            let status = cmd.status().map_err(|source| RecordCommandError::Spawn {
                program: self.argv[0].clone(),
                source,
            })?;
            return Ok(exit_code(status));
        }
        self.record_child()
    }

    /// Starts the command and records it from outside until it exits (or the duration
    /// ends; the program then runs on, and tach waits for it).
    fn record_child(&self) -> Result<u8, RecordCommandError> {
        // Validate before starting anything.
        self.spec.validate()?;
        if self.spec.output.is_some() {
            prepare_output(&self.spec.record_options(0)?)?;
        }
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .spawn()
            .map_err(|source| RecordCommandError::Spawn {
                program: self.argv[0].clone(),
                source,
            })?;
        let pid = child.id() as i32;
        // A default directory that cannot be made fails in the recording (below): the
        // program then runs on unrecorded.
        let opts = self.spec.record_options(pid)?;
        let path = opts.path.clone();
        let (interval, mode) = (opts.interval_us, opts.mode);
        // A rotated recording that could not start leaves its directory empty.
        let rotating = opts.segments.is_some();
        let write_empty = |path: &std::path::Path, interval, mode| match rotating {
            true => Ok(()),
            false => write_empty(path, interval, mode),
        };
        let recorded = match record(
            Recorded::Child(&mut child),
            opts,
            STARTUP,
            self.subprocesses,
        ) {
            Ok(stats) => {
                eprintln!("{}", stats.summary_line());
                if let Some(e) = &stats.error {
                    eprintln!("tach: error: {e}");
                }
                stats.error.is_none()
            }
            Err(ExternalError::Attach(e)) if matches!(child.try_wait(), Ok(Some(_))) => {
                // Gone before its interpreter was found: an empty file says so.
                eprintln!("tach: the program exited before it could be recorded ({e})");
                if let Err(e) = write_empty(&path, interval, mode) {
                    eprintln!("tach: error: {e}");
                }
                false
            }
            Err(e) => {
                eprintln!("tach: cannot record {pid}: {e}\ntach: the program runs on unrecorded");
                if let Err(e) = write_empty(&path, interval, mode) {
                    eprintln!("tach: error: {e}");
                }
                false
            }
        };
        let status = child.wait().map_err(|source| RecordCommandError::Spawn {
            program: self.argv[0].clone(),
            source,
        })?;
        Ok(exit_status(exit_code(status), recorded))
    }

    /// The command to spawn: `PYTHON -m tach run OPTIONS REST`, the options as given.
    pub fn command(&self) -> Result<Command, RecordCommandError> {
        let (python, rest) = self
            .argv
            .split_first()
            .ok_or(RecordCommandError::NoCommand)?;
        if rest.is_empty() {
            return Err(RecordCommandError::NoScript);
        }
        // Refused here as there: no program started for options it would refuse.
        self.spec.validate()?;
        let mut cmd = Command::new(python);
        cmd.args(["-m", "tach", "run"]);
        cmd.args(self.in_process.iter().flatten());
        // The interpreter's own options (before the script) are not supported: the rest
        // is the script (or -m module) and its arguments.
        cmd.args(rest);
        Ok(cmd)
    }
}

/// tach's exit status when a recording could not be made (or ended in error) and the
/// program it recorded exited 0 (docs/recording.md, "Exit status").
pub const RECORDING_FAILED: u8 = 1;

/// tach's exit status after a recording (every way of recording, in-process through
/// `tach._native.exit_status`): the program's own `program` status (0 for `--pid`, where
/// tach runs no program), unless it is 0 and the recording could not be made or ended in
/// error (`recorded` false): a script then sees the failure. A program that failed keeps
/// its own status, which is not 0 either.
pub fn exit_status(program: u8, recorded: bool) -> u8 {
    match (program, recorded) {
        (0, false) => RECORDING_FAILED,
        (code, _) => code,
    }
}

/// `--rotate`: the output directory made ready (created, checked writable) before
/// anything is recorded, so that a bad `-o` is a usage error at start.
fn prepare_output(opts: &RecordOptions) -> Result<(), RecordCommandError> {
    match opts.segments {
        Some(_) => segments::prepare_dir(&opts.path)
            .map_err(|e| RecordCommandError::SegmentDir(e.to_string())),
        None => Ok(()),
    }
}

/// The program's exit status as tach's: its code, or 128 + the signal that killed it,
/// as a shell reports it.
pub(crate) fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn in_process_passes_the_options_as_given() {
        let spec = RecordSpec {
            rate: Some(100.0),
            ..RecordSpec::default()
        };
        let mut rc = RecordCommand::new(spec, vec!["python3".into(), "s.py".into(), "x".into()]);
        rc.in_process = Some(vec![
            "-o".into(),
            "o.tach".into(),
            "-r".into(),
            "1e2".into(),
        ]);
        let cmd = rc.command().unwrap();
        assert_eq!(cmd.get_program(), "python3");
        assert_eq!(
            words(&cmd),
            ["-m", "tach", "run", "-o", "o.tach", "-r", "1e2", "s.py", "x"]
        );
        rc.spec.rate = Some(0.0);
        assert!(rc.command().unwrap_err().is_usage());
        let none = RecordSpec::default();
        assert!(RecordCommand::new(none.clone(), vec![]).command().is_err());
        assert!(RecordCommand::new(none, vec!["python3".into()])
            .command()
            .is_err());
    }
}
