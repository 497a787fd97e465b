//! The reports' error type.

use crate::tach::TachError;

/// Errors of the reports.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Read(#[from] TachError),
    #[error("{0}")]
    Usage(String),
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;
