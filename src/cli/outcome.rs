//! How a command ends: its exit status, the error it fails with, and the helpers every
//! command shares (opening the inputs, a failed write to standard output).

use std::path::PathBuf;

use crate::export::ExportError;
use crate::tach::{TachError, TachFile};

/// An exit status: 0 success, 1 a bad or unreadable input, 2 a usage error (as clap's).
pub type ExitCode = u8;
pub(super) const SUCCESS: ExitCode = 0;
pub(super) const FAILURE: ExitCode = 1;
pub(super) const USAGE: ExitCode = 2;

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
    Record(#[from] crate::record::RecordCommandError),
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
pub(super) fn stdout_error(source: std::io::Error) -> CliError {
    CliError::Write {
        path: PathBuf::from("stdout"),
        source,
    }
}

/// Opens the inputs, a directory's `*.tach` files in time order
/// ([`crate::tach::reader::expand_dirs`]).
pub(super) fn open_all(paths: &[PathBuf]) -> Result<Vec<TachFile>, CliError> {
    crate::tach::reader::expand_dirs(paths)?
        .iter()
        .map(|p| TachFile::open(p).map_err(CliError::from))
        .collect()
}
