//! The `tach` binary: the command line lives in the library ([`tach::run_cli`]), shared
//! with the Python package's `tach` command.

use std::process::ExitCode;

/// Big blocks on transparent huge pages: fewer page faults in exports (see
/// `src/alloc.rs`).
#[global_allocator]
static ALLOC: tach::HugePageAlloc = tach::HugePageAlloc;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `tach query` is polars on every core; the other commands allocate on one thread.
    let command = args
        .iter()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'));
    if command.is_some_and(|c| c == "query") {
        tach::HugePageAlloc::reserve_heap_threaded();
    } else {
        tach::HugePageAlloc::reserve_heap();
    }
    ExitCode::from(tach::run_cli(args))
}
