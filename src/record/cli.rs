//! `tach record`: one options type for every way of recording, and the choice of way.
//!
//! - `--pid PID`: attach to a running process from outside (`external`).
//! - `-- python app.py ARGS` (or a command that is not an interpreter, such as a script
//!   with a shebang): start the program and record it from outside. The program needs
//!   no tach package. An interpreter tach cannot read (3.8, 3.16) gets attach's error.
//! - `-- python app.py ARGS` with `--in-process`: run it through the `tach` Python
//!   package (`python -m tach run ...`), which must be importable by that interpreter.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::tach::{Compression, ProfilingMode};

use super::asyncio::AsyncMode;
use super::external::{self, ExternalError, Recorded};
use super::sampler::RecordOptions;

/// A mode a recording can be made in, by its name: wall, cpu, gil or exception (every
/// front end's names: `tach record`, `python -m tach run`, `tach.start`).
pub fn recording_mode(name: &str) -> Option<ProfilingMode> {
    match name {
        "wall" => Some(ProfilingMode::Wall),
        "cpu" => Some(ProfilingMode::Cpu),
        "gil" => Some(ProfilingMode::Gil),
        "exception" => Some(ProfilingMode::Exception),
        _ => None,
    }
}

/// An async mode by its name: running or all (CPython's `--async-mode`).
pub fn async_mode(name: &str) -> Result<AsyncMode, RecordCommandError> {
    AsyncMode::from_name(name).ok_or_else(|| RecordCommandError::BadAsyncMode(name.to_string()))
}

/// A recording's compression by its name: auto, zstd or none. zstd is always built in,
/// so "auto" is zstd, as in CPython with zstd available.
pub fn recording_compression(name: &str) -> Option<Compression> {
    match name {
        "auto" | "zstd" => Some(Compression::Zstd),
        "none" => Some(Compression::None),
        _ => None,
    }
}

/// Sampling slower than this (1 kHz and below) pauses the program by default: each
/// pause costs it the tick's reads, 2% at 1 kHz and 30% at 10 kHz (docs/recorder.md).
/// `python -m tach run` uses the same threshold (`BLOCKING_MIN_INTERVAL_US`).
pub const BLOCKING_MIN_INTERVAL_US: u64 = 1000;

/// How long a started program has to load its interpreter before tach gives up.
pub(crate) const STARTUP: Duration = Duration::from_secs(10);

/// Why `tach record` could not run the program.
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
    #[error("unknown mode {0:?} (expected wall, cpu, gil or exception)")]
    BadMode(String),
    #[error("unknown compression {0:?} (expected auto, zstd or none)")]
    BadCompression(String),
    #[error("the duration must be a positive number of seconds, not {0}")]
    BadDuration(f64),
    #[error("unknown async mode {0:?} (expected running or all)")]
    BadAsyncMode(String),
    #[error("--async-aware records in wall mode only, as CPython's sampler (not --mode {0})")]
    AsyncNotWall(String),
    #[error("--async-aware records from outside only; --in-process does not have it yet")]
    AsyncInProcess,
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    #[error("--native reads native stacks from outside only: drop --in-process")]
    NativeInProcess,
    #[error("--native stops each thread while it reads it: it cannot be --no-blocking")]
    NativeNotBlocking,
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

/// Options of `tach record`, mirroring `python -m tach run`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordCommand {
    /// Output file (`-o`); the Python side defaults to `tach_<pid>.tach`.
    pub output: Option<PathBuf>,
    /// Sampling rate in Hz (`-r`), a float as `python -m tach run` takes it.
    pub rate: Option<f64>,
    /// The interval between samples in microseconds, instead of a rate (`tach.start`'s
    /// `interval_us=`); wins over `rate`.
    pub interval_us: Option<u64>,
    /// `wall`, `cpu`, `gil` or `exception`.
    pub mode: Option<String>,
    pub all_threads: bool,
    pub opcodes: bool,
    /// No `<GC>` frames (`--no-gc`).
    pub no_gc: bool,
    /// `--blocking` (Some(true)) or `--no-blocking` (Some(false)); None: by the rate.
    pub blocking: Option<bool>,
    /// `auto`, `zstd` or `none`.
    pub compression: Option<String>,
    /// Seconds to sample for (`-d`).
    pub duration: Option<f64>,
    /// The command: an interpreter, then its arguments (a script, or `-m module`).
    pub argv: Vec<OsString>,
    /// Attach to this running process instead of starting one.
    pub pid: Option<i32>,
    /// Run the command through `python -m tach run` even where it could be recorded
    /// from outside.
    pub in_process: bool,
    /// Also record the target's child Python processes, one file each (`OUT_<pid>.tach`).
    pub subprocesses: bool,
    /// `--async-aware` with `--async-mode`: `running` or `all`.
    pub async_mode: Option<String>,
    /// Native stacks (`--native`, from outside only; implies blocking).
    pub native: bool,
}

impl RecordCommand {
    pub fn new(argv: Vec<OsString>) -> Self {
        RecordCommand {
            output: None,
            rate: None,
            interval_us: None,
            mode: None,
            all_threads: false,
            opcodes: false,
            no_gc: false,
            blocking: None,
            compression: None,
            duration: None,
            argv,
            pid: None,
            in_process: false,
            subprocesses: false,
            async_mode: None,
            native: false,
        }
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
        if let Some(m) = &self.mode {
            opts.mode = recording_mode(m).ok_or_else(|| RecordCommandError::BadMode(m.clone()))?;
        }
        if let Some(c) = &self.compression {
            opts.compression = recording_compression(c)
                .ok_or_else(|| RecordCommandError::BadCompression(c.clone()))?;
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(RecordCommandError::BadDuration(d));
            }
            opts.duration = Some(Duration::from_secs_f64(d));
        }
        if let Some(m) = &self.async_mode {
            opts.async_mode = Some(async_mode(m)?);
            if opts.mode != ProfilingMode::Wall {
                let mode = self.mode.clone().unwrap_or_default();
                return Err(RecordCommandError::AsyncNotWall(mode));
            }
        }
        opts.all_threads = self.all_threads;
        opts.opcodes = self.opcodes;
        opts.gc = !self.no_gc;
        opts.blocking = self
            .blocking
            .unwrap_or(opts.interval_us >= BLOCKING_MIN_INTERVAL_US);
        // A thread's registers are read while it is stopped.
        if self.native {
            if self.blocking == Some(false) {
                return Err(RecordCommandError::NativeNotBlocking);
            }
            opts.blocking = true;
            opts.native = true;
        }
        Ok(opts)
    }

    /// Whether the command must be run in-process: only when asked for. Everything else
    /// (CPython 3.9 to 3.15, `--opcodes` included from 3.11, a command that does not
    /// answer as a Python interpreter, a version tach cannot read, which then gets a clear
    /// error) is recorded from outside.
    fn needs_in_process(&self) -> bool {
        self.in_process
    }

    /// Records as asked and returns tach's exit code: the program's own when tach ran
    /// it, 1 when an attached recording failed.
    pub fn run(&self) -> Result<u8, RecordCommandError> {
        if let Some(pid) = self.pid {
            if !self.argv.is_empty() {
                return Err(RecordCommandError::PidAndCommand);
            }
            let opts = self.record_options(pid)?;
            let (path, interval, mode) = (opts.path.clone(), opts.interval_us, opts.mode);
            let stats =
                match external::record(Recorded::Pid(pid), opts, Duration::ZERO, self.subprocesses)
                {
                    Ok(stats) => stats,
                    Err(e) => {
                        // Whoever waits for the file finds one, empty, beside the error.
                        if matches!(e, ExternalError::Attach(_)) {
                            let _ = external::write_empty(&path, interval, mode);
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
        if self.argv.len() < 2 || self.needs_in_process() {
            if self.async_mode.is_some() {
                return Err(RecordCommandError::AsyncInProcess);
            }
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
        self.record_options(0)?;
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .spawn()
            .map_err(|source| RecordCommandError::Spawn {
                program: self.argv[0].clone(),
                source,
            })?;
        let pid = child.id() as i32;
        let opts = self.record_options(pid)?;
        let path = opts.path.clone();
        let (interval, mode) = (opts.interval_us, opts.mode);
        match external::record(
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
                if let Err(e) = external::write_empty(&path, interval, mode) {
                    eprintln!("tach: error: {e}");
                }
            }
            Err(e) => {
                eprintln!("tach: cannot record {pid}: {e}\ntach: the program runs on unrecorded");
                if let Err(e) = external::write_empty(&path, interval, mode) {
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

    /// The command to spawn: `PYTHON -m tach run OPTIONS -- REST`.
    pub fn command(&self) -> Result<Command, RecordCommandError> {
        if self.native {
            return Err(RecordCommandError::NativeInProcess);
        }
        let (python, rest) = self
            .argv
            .split_first()
            .ok_or(RecordCommandError::NoCommand)?;
        if rest.is_empty() {
            return Err(RecordCommandError::NoScript);
        }
        if let Some(r) = self.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
            return Err(RecordCommandError::BadRate(r));
        }
        let mut cmd = Command::new(python);
        cmd.args(["-m", "tach", "run"]);
        if let Some(o) = &self.output {
            cmd.arg("-o").arg(o);
        }
        if let Some(r) = self.rate {
            cmd.arg("-r").arg(r.to_string());
        }
        if let Some(m) = &self.mode {
            cmd.arg("--mode").arg(m);
        }
        if self.all_threads {
            cmd.arg("-a");
        }
        if self.opcodes {
            cmd.arg("--opcodes");
        }
        if self.no_gc {
            cmd.arg("--no-gc");
        }
        match self.blocking {
            Some(true) => {
                cmd.arg("--blocking");
            }
            Some(false) => {
                cmd.arg("--no-blocking");
            }
            None => {}
        }
        if let Some(c) = &self.compression {
            cmd.arg("--compression").arg(c);
        }
        if let Some(d) = self.duration {
            cmd.arg("-d").arg(d.to_string());
        }
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

    #[test]
    fn builds_the_python_command() {
        let mut rc = RecordCommand::new(vec!["python3".into(), "s.py".into(), "x".into()]);
        rc.output = Some("o.tach".into());
        rc.rate = Some(100.0);
        rc.all_threads = true;
        let cmd = rc.command().unwrap();
        assert_eq!(cmd.get_program(), "python3");
        let args: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            ["-m", "tach", "run", "-o", "o.tach", "-r", "100", "-a", "s.py", "x"]
        );
        rc.blocking = Some(false);
        let args: Vec<_> = rc
            .command()
            .unwrap()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"--no-blocking".to_string()), "{args:?}");
        rc.rate = Some(0.0);
        assert!(rc.command().unwrap_err().is_usage());
        assert!(RecordCommand::new(vec![]).command().is_err());
        assert!(RecordCommand::new(vec!["python3".into()])
            .command()
            .is_err());
    }
}
