//! The `tach` binary: the command line lives in the library (`tach::cli`), shared with
//! the Python package's `tach` command.

use std::process::ExitCode;

/// Big blocks on transparent huge pages: fewer page faults in exports (see `tach::alloc`).
#[global_allocator]
static ALLOC: tach::alloc::HugePageAlloc = tach::alloc::HugePageAlloc;

fn main() -> ExitCode {
    ExitCode::from(tach::cli::main(std::env::args_os()))
}
