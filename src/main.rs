//! The `tach` binary: the command line lives in the library ([`tach::run_cli`]), shared
//! with the Python package's `tach` command.

use std::process::ExitCode;

/// Big blocks on transparent huge pages: fewer page faults in exports (see
/// `src/alloc.rs`).
#[global_allocator]
static ALLOC: tach::HugePageAlloc = tach::HugePageAlloc;

fn main() -> ExitCode {
    tach::HugePageAlloc::reserve_heap();
    ExitCode::from(tach::run_cli(std::env::args_os()))
}
