pub mod alloc;
pub mod cli;
pub mod export;
pub mod record;
pub mod report;
pub mod tach;

#[cfg(feature = "python")]
mod python;
#[cfg(feature = "query")]
pub mod query;
