//! The `tach` binary: the command line lives in the library (`tach::cli`), shared with
//! the Python package's `tach` command.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(tach::cli::main(std::env::args_os()))
}
