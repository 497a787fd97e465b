//! `tach dump`: every thread's current Python stack in a running process.

use std::io::Write;

use clap::Args;

use super::outcome::{stdout_error, CliError, ExitCode, SUCCESS};
use crate::names;
use crate::record::options::AsyncMode;

#[derive(Args)]
#[command(after_help = "Examples:
  tach dump 4242
  tach dump --json 4242 | jq '.[0].frames[0]'
  tach dump --native 4242           # native frames with the Python ones spliced in
  tach dump --async-aware 4242      # one stack per asyncio task (3.14, 3.15)")]
pub(super) struct DumpArgs {
    /// The Python process (CPython 3.9-3.15).
    pid: i32,
    /// One JSON document: a list of threads, each with its status and frames.
    #[arg(long)]
    json: bool,
    /// Read the threads while they run instead of pausing the one holding the GIL.
    #[arg(long)]
    no_blocking: bool,
    /// Async-aware stacks (CPython 3.14, 3.15), one per task.
    #[arg(long, conflicts_with = "native")]
    async_aware: bool,
    /// all (default for a dump, as CPython's): every task; running: the running ones.
    #[arg(long, value_parser = names::parser::<AsyncMode>("async mode"), requires = "async_aware")]
    async_mode: Option<AsyncMode>,
    /// Native stacks (C, C++, Rust frames with the Python ones spliced in); implies
    /// pausing: each thread is stopped while its stack is read.
    #[arg(long, conflicts_with = "no_blocking")]
    native: bool,
}

pub(super) fn run(args: DumpArgs) -> Result<ExitCode, CliError> {
    let async_mode = args
        .async_aware
        .then(|| args.async_mode.unwrap_or(AsyncMode::All));
    let stacks = crate::record::dump(args.pid, !args.no_blocking, async_mode, args.native)
        .map_err(crate::record::RecordCommandError::from)?;
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&stacks)
            .map_err(|e| CliError::Usage(format!("cannot write JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        crate::record::render_dump(args.pid, &stacks)
    };
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(stdout_error)?;
    Ok(SUCCESS)
}
