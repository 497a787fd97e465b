//! Runs SQL over TACH files, as `tach query` does (feature `query`).
//!
//! `cargo run --example query -- golden/cpython-3.15.2/cpu_recursive.bin`
//! (an optional second argument replaces the default query; `tach query --schema`
//! lists the tables and their columns).

use std::path::PathBuf;

use tach::query::{output, QueryEngine};

/// Self samples per function: `samples` has one row per thread-sample, with its
/// innermost frame's names.
const TOP_FUNCTIONS: &str = "select funcname, count(*) as samples from samples \
    group by funcname order by samples desc, funcname limit 10";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: query FILE.bin [SQL]")?;
    let sql = args.next().unwrap_or_else(|| TOP_FUNCTIONS.to_string());

    let engine = QueryEngine::open(&[PathBuf::from(path)])?;
    // A polars DataFrame: use it directly, or print it as `tach query` would.
    let mut frame = engine.run(&sql)?;
    println!("{} rows", frame.height());
    output::write(&mut frame, output::Format::Table, 0, &mut std::io::stdout())?;
    Ok(())
}
