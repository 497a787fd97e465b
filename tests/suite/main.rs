//! The integration tests, in one test binary.
//!
//! Every test binary links the whole library, polars included (about 300 MB each in a
//! debug build): one binary instead of eight keeps a clean build's disk use and link
//! time down. Run one part with a filter, e.g. `cargo test --test suite golden::`.

mod browser;
mod cli;
mod common;
mod corruption;
#[cfg(feature = "query")]
mod dataset;
#[cfg(feature = "record")]
mod diff_windows;
mod docs;
mod entrances;
mod export_cpython;
mod export_viz;
#[cfg(feature = "query")]
mod fleet;
mod golden;
mod heap;
mod heatmap;
mod imports;
mod interop;
mod native_export;
mod pprof;
mod pprof_default;
#[cfg(feature = "query")]
mod query;
mod record_exit;
mod recover;
mod report;
mod roundtrip;
