//! How to record, once for every front end: [`RecordSpec`] is the recorder's options as
//! one typed value. clap derives `tach record`'s and `tach top`'s flags from it, and
//! `python -m tach run` parses its arguments with the same clap definition
//! ([`RunArgs`], through the extension); `tach.start(...)`'s keywords fill the same
//! struct. [`RecordSpec::record_options`] validates it, for every front end.
//!
//! Adding a recorder option: one field of [`RecordSpec`] (its doc comment is its help),
//! and its use in [`RecordSpec::record_options`].
//!
//! [`RecordCommand`] is `tach record`: the spec, what to record and the choice of way.
//! - `--pid PID`: attach to a running process from outside (`outside`, `recording`).
//! - `-- python app.py ARGS` (or a command that is not an interpreter, such as a script
//!   with a shebang): start the program and record it from outside. The program needs
//!   no tach package. An interpreter tach cannot read (3.8, 3.16) gets attach's error.
//! - `-- python app.py ARGS` with `--in-process`: run it through the `tach` Python
//!   package (`python -m tach run OPTIONS app.py ARGS`, with the options as they were
//!   given to `tach record`), which must be importable by that interpreter.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::names;
use crate::tach::{Compression, ProfilingMode};

use super::outside::{write_empty, ExternalError, Recorded};
use super::recording::record;
use super::sampler::RecordOptions;
pub use crate::record::interpreter::asyncio::AsyncMode;

/// What a recording keeps (the modes of CPython's sampler a recording can be made in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Mode {
    /// Every sample.
    #[default]
    Wall,
    /// Samples of threads on a CPU.
    Cpu,
    /// Samples of the thread holding the GIL.
    Gil,
    /// Samples of threads handling an exception.
    Exception,
}

impl From<Mode> for ProfilingMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Wall => ProfilingMode::Wall,
            Mode::Cpu => ProfilingMode::Cpu,
            Mode::Gil => ProfilingMode::Gil,
            Mode::Exception => ProfilingMode::Exception,
        }
    }
}

/// A recording's compression. zstd is always built in, so `auto` is zstd, as in CPython
/// with zstd available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum CompressionChoice {
    #[default]
    Auto,
    Zstd,
    None,
}

impl From<CompressionChoice> for Compression {
    fn from(choice: CompressionChoice) -> Self {
        match choice {
            CompressionChoice::Auto | CompressionChoice::Zstd => Compression::Zstd,
            CompressionChoice::None => Compression::None,
        }
    }
}

/// Sampling slower than this (1 kHz and below) pauses the program by default: each
/// pause costs it the tick's reads, 2% at 1 kHz and 30% at 10 kHz (docs/recorder.md).
/// `python -m tach run` uses the same threshold (`BLOCKING_MIN_INTERVAL_US`).
pub const BLOCKING_MIN_INTERVAL_US: u64 = 1000;

/// How long a started program has to load its interpreter before tach gives up.
pub(crate) const STARTUP: Duration = Duration::from_secs(10);

/// Why `tach record` could not run the program, or the options were refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordCommandError {
    #[error("tach record needs a command: tach record -- python script.py")]
    NoCommand,
    #[error("tach record needs a script or -m module after the interpreter")]
    NoScript,
    #[error("the rate must be a positive number of samples per second, not {0}")]
    BadRate(f64),
    #[error("interval_us must be at least 1")]
    BadInterval,
    #[error("--pid and a command cannot be given together")]
    PidAndCommand,
    #[error("the duration must be a positive number of seconds, not {0}")]
    BadDuration(f64),
    #[error("--async-mode needs --async-aware")]
    AsyncModeAlone,
    #[error("--async-aware records in wall mode only, as CPython's sampler (not --mode {0})")]
    AsyncNotWall(String),
    #[error("--async-aware and --native cannot be given together yet")]
    AsyncAndNative,
    #[error("--native stops each thread while it reads it: it cannot be --no-blocking")]
    NativeNotBlocking,
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    External(#[from] ExternalError),
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

/// How to record: the options of `tach record`, `tach top`'s live view, `python -m tach
/// run` and `tach.start()`. The doc comments are the flags' `--help`.
#[derive(Debug, Clone, Default, PartialEq, Args, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordSpec {
    /// Output file (default: tach_<pid>.tach; tach top: none).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Samples per second (default 1000).
    #[arg(short, long)]
    pub rate: Option<f64>,
    /// The interval between samples in microseconds, instead of a rate (`tach.start`'s
    /// `interval_us=`); wins over `rate`.
    #[arg(skip)]
    pub interval_us: Option<u64>,
    /// What to keep (default wall).
    #[arg(long, value_parser = names::parser::<Mode>("mode"))]
    #[serde(deserialize_with = "names::optional::mode")]
    pub mode: Option<Mode>,
    /// Sample every thread, not only the main thread.
    #[arg(short = 'a', long)]
    pub all_threads: bool,
    /// Record each frame's base opcode.
    #[arg(long)]
    pub opcodes: bool,
    /// No <GC> frames.
    #[arg(long)]
    pub no_gc: bool,
    /// Pause the thread holding the GIL while each sample is read (the default up to
    /// 1 kHz): every sample is one moment's stacks.
    #[arg(long, conflicts_with = "no_blocking")]
    pub blocking: bool,
    /// Read running threads instead (the default above 1 kHz, where pausing costs the
    /// program more; samples can mix two moments).
    #[arg(long)]
    pub no_blocking: bool,
    /// Native stacks: C, C++ and Rust frames, with the Python frames where the
    /// interpreter runs them (x86-64; from outside and in-process). Implies --blocking: every sampled
    /// thread is stopped while its stack is read. With -a, threads that run no Python
    /// (OpenBLAS, OpenMP, Rust threads) are recorded too, by their native stacks.
    #[arg(long, conflicts_with = "no_blocking")]
    pub native: bool,
    /// Async-aware stacks: a thread running an asyncio task shows it as a <task> frame
    /// under the tasks awaiting it, as CPython 3.15's sampler does (3.14, 3.15; on
    /// 3.11-3.13 the running task alone, with no tasks above it, and no --async-mode
    /// all). Wall mode only; not with --native (yet).
    #[arg(long, conflicts_with = "native")]
    pub async_aware: bool,
    /// With --async-aware: running (default for a recording) is the task on each thread;
    /// all adds every waiting task (3.14, 3.15).
    #[arg(long, value_parser = names::parser::<AsyncMode>("async mode"), requires = "async_aware")]
    #[serde(deserialize_with = "names::optional::async_mode")]
    pub async_mode: Option<AsyncMode>,
    /// Compression of the sample data (default auto: zstd).
    #[arg(long, value_parser = names::parser::<CompressionChoice>("compression"))]
    #[serde(deserialize_with = "names::optional::compression")]
    pub compression: Option<CompressionChoice>,
    /// Stop sampling after this many seconds.
    #[arg(short, long, value_name = "SECONDS")]
    pub duration: Option<f64>,
}

impl RecordSpec {
    /// `--blocking` (Some(true)), `--no-blocking` (Some(false)) or neither (by the rate).
    pub fn blocking(&self) -> Option<bool> {
        match (self.blocking, self.no_blocking) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }

    /// Checks what clap's types cannot (positive numbers), as [`Self::record_options`]
    /// does: front ends that start nothing yet call it to refuse early.
    pub fn validate(&self) -> Result<(), RecordCommandError> {
        self.record_options(0).map(drop)
    }

    /// The recorder's options, validated, for a target whose pid is `pid` (the default
    /// file name is `tach_<pid>.tach`, as `python -m tach run` names it).
    pub fn record_options(&self, pid: i32) -> Result<RecordOptions, RecordCommandError> {
        let path = self
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("tach_{pid}.tach")));
        let mut opts = RecordOptions::new(path);
        if let Some(interval) = self.interval_us {
            if interval == 0 {
                return Err(RecordCommandError::BadInterval);
            }
            opts.interval_us = interval;
        } else if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(RecordCommandError::BadRate(r));
            }
            opts.interval_us = ((1e6 / r).round() as u64).max(1);
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(RecordCommandError::BadDuration(d));
            }
            opts.duration = Some(Duration::from_secs_f64(d));
        }
        opts.mode = self.mode.unwrap_or_default().into();
        opts.compression = self.compression.unwrap_or_default().into();
        opts.all_threads = self.all_threads;
        opts.opcodes = self.opcodes;
        opts.gc = !self.no_gc;
        opts.blocking = self
            .blocking()
            .unwrap_or(opts.interval_us >= BLOCKING_MIN_INTERVAL_US);
        // A thread's registers are read while it is stopped.
        if self.native {
            if self.no_blocking {
                return Err(RecordCommandError::NativeNotBlocking);
            }
            opts.blocking = true;
            opts.native = true;
        }
        if self.async_mode.is_some() && !self.async_aware {
            return Err(RecordCommandError::AsyncModeAlone);
        }
        if self.async_aware {
            if self.native {
                return Err(RecordCommandError::AsyncAndNative);
            }
            if opts.mode != ProfilingMode::Wall {
                let mode = names::name(&self.mode.unwrap_or_default());
                return Err(RecordCommandError::AsyncNotWall(mode));
            }
            opts.async_mode = Some(self.async_mode.unwrap_or(AsyncMode::Running));
        }
        Ok(opts)
    }
}

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

    /// Records as asked and returns tach's exit code: the program's own when tach ran
    /// it, 1 when an attached recording failed.
    pub fn run(&self) -> Result<u8, RecordCommandError> {
        if let Some(pid) = self.pid {
            if !self.argv.is_empty() {
                return Err(RecordCommandError::PidAndCommand);
            }
            let opts = self.spec.record_options(pid)?;
            let (path, interval, mode) = (opts.path.clone(), opts.interval_us, opts.mode);
            let stats = match record(Recorded::Pid(pid), opts, Duration::ZERO, self.subprocesses) {
                Ok(stats) => stats,
                Err(e) => {
                    // Whoever waits for the file finds one, empty, beside the error.
                    if matches!(e, ExternalError::Attach(_)) {
                        let _ = write_empty(&path, interval, mode);
                    }
                    return Err(e.into());
                }
            };
            eprintln!("{}", stats.summary_line());
            return Ok(match stats.error {
                Some(e) => {
                    eprintln!("tach: error: {e}");
                    1
                }
                None => 0,
            });
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
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .spawn()
            .map_err(|source| RecordCommandError::Spawn {
                program: self.argv[0].clone(),
                source,
            })?;
        let pid = child.id() as i32;
        let opts = self.spec.record_options(pid)?;
        let path = opts.path.clone();
        let (interval, mode) = (opts.interval_us, opts.mode);
        match record(
            Recorded::Child(&mut child),
            opts,
            STARTUP,
            self.subprocesses,
        ) {
            Ok(stats) => {
                eprintln!("{}", stats.summary_line());
                if let Some(e) = stats.error {
                    eprintln!("tach: error: {e}");
                }
            }
            Err(ExternalError::Attach(e)) if matches!(child.try_wait(), Ok(Some(_))) => {
                // Gone before its interpreter was found: an empty file says so.
                eprintln!("tach: the program exited before it could be recorded ({e})");
                if let Err(e) = write_empty(&path, interval, mode) {
                    eprintln!("tach: error: {e}");
                }
            }
            Err(e) => {
                eprintln!("tach: cannot record {pid}: {e}\ntach: the program runs on unrecorded");
                if let Err(e) = write_empty(&path, interval, mode) {
                    eprintln!("tach: error: {e}");
                }
            }
        }
        let status = child.wait().map_err(|source| RecordCommandError::Spawn {
            program: self.argv[0].clone(),
            source,
        })?;
        Ok(exit_code(status))
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

    #[test]
    fn spec_validates_numbers() {
        let spec = |f: fn(&mut RecordSpec)| {
            let mut s = RecordSpec::default();
            f(&mut s);
            s.validate().map_err(|e| e.to_string())
        };
        assert!(spec(|_| {}).is_ok());
        assert_eq!(
            spec(|s| s.rate = Some(0.0)).unwrap_err(),
            "the rate must be a positive number of samples per second, not 0"
        );
        assert!(spec(|s| s.duration = Some(f64::NAN)).is_err());
        assert!(spec(|s| s.interval_us = Some(0)).is_err());
        let opts = RecordSpec {
            rate: Some(10_000.0),
            mode: Some(Mode::Gil),
            compression: Some(CompressionChoice::None),
            ..RecordSpec::default()
        }
        .record_options(7)
        .unwrap();
        assert_eq!(opts.path, PathBuf::from("tach_7.tach"));
        assert_eq!((opts.interval_us, opts.blocking), (100, false));
        assert_eq!(opts.mode, ProfilingMode::Gil);
        assert_eq!(opts.compression, Compression::None);
    }
}
