//! `tach record [OPTIONS] -- python script.py ARGS`: runs a Python program with the
//! recorder on, through the `tach` Python package (`python -m tach run ...`), which must
//! be importable by that interpreter (the wheel built by maturin installs it).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

/// Why `tach record` could not run the program.
#[derive(Debug, thiserror::Error)]
pub enum RecordCommandError {
    #[error("tach record needs a command: tach record -- python script.py")]
    NoCommand,
    #[error("tach record needs a script or -m module after the interpreter")]
    NoScript,
    #[error("the rate must be a positive number of samples per second, not {0}")]
    BadRate(f64),
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
}

impl RecordCommandError {
    /// A command line that asks for something impossible, rather than a failure to run.
    pub fn is_usage(&self) -> bool {
        !matches!(self, RecordCommandError::Spawn { .. })
    }
}

/// Options of `tach record`, mirroring `python -m tach run`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordCommand {
    /// Output file (`-o`); the Python side defaults to `tach_<pid>.tach`.
    pub output: Option<PathBuf>,
    /// Sampling rate in Hz (`-r`), a float as `python -m tach run` takes it.
    pub rate: Option<f64>,
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
}

impl RecordCommand {
    pub fn new(argv: Vec<OsString>) -> Self {
        RecordCommand {
            output: None,
            rate: None,
            mode: None,
            all_threads: false,
            opcodes: false,
            no_gc: false,
            blocking: None,
            compression: None,
            duration: None,
            argv,
        }
    }

    /// The command to spawn: `PYTHON -m tach run OPTIONS -- REST`.
    pub fn command(&self) -> Result<Command, RecordCommandError> {
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

    /// Runs the program and waits for it.
    pub fn run(&self) -> Result<ExitStatus, RecordCommandError> {
        let mut cmd = self.command()?;
        cmd.status().map_err(|source| RecordCommandError::Spawn {
            program: self.argv[0].clone(),
            source,
        })
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
