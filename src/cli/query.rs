//! `tach query` (feature `query`): SQL over profiles.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;

use super::outcome::{stdout_error, CliError, ExitCode, SUCCESS};

#[derive(Args)]
#[command(
    after_help = "Tables and columns: tach query --schema. Docs: docs/query.md.\n\
Example: tach query \"select funcname, count(*) as n from samples group by funcname order by n desc limit 10\" run.bin"
)]
pub(super) struct QueryArgs {
    /// The SQL query (one SELECT).
    #[arg(required_unless_present = "schema")]
    sql: Option<String>,
    /// TACH files, Parquet exports or datasets (directories) or glob patterns; several
    /// inputs are one table with a `file` column.
    #[arg(required_unless_present = "schema")]
    files: Vec<PathBuf>,
    /// Print the tables and their columns.
    #[arg(long)]
    schema: bool,
    /// Print polars' optimized plan instead of running the query.
    #[arg(long)]
    explain: bool,
    /// table (default), csv, json, ndjson or parquet.
    #[arg(long, value_name = "FORMAT", default_value = "table")]
    format: String,
    /// Write the result to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Rows the table shows on a terminal (0 = all).
    #[arg(long, default_value_t = 40)]
    max_rows: usize,
}

/// `tach query`: usage errors (bad SQL, refused statements, unknown names) exit 2,
/// like clap's; other failures exit 1.
pub(super) fn run(args: QueryArgs) -> Result<ExitCode, CliError> {
    use crate::query::{self, output};
    if args.schema {
        write!(std::io::stdout().lock(), "{}", query::schema_text()).map_err(stdout_error)?;
        return Ok(SUCCESS);
    }
    let format = output::Format::parse(&args.format).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown format '{}': use table, csv, json, ndjson or parquet",
            args.format
        ))
    })?;
    let sql = args.sql.unwrap_or_default();
    let files = query::expand_inputs(&args.files)?;
    let engine = query::QueryEngine::open(&files)?;
    if args.explain {
        let plan = engine.explain(&sql)?;
        writeln!(std::io::stdout().lock(), "{plan}").map_err(stdout_error)?;
        return Ok(SUCCESS);
    }
    let mut df = engine.run(&sql)?;
    let result = match &args.output {
        Some(path) => std::fs::File::create(path)
            .map_err(|source| query::QueryError::Io {
                path: path.clone(),
                source,
            })
            .and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                output::write(&mut df, format, 0, &mut w).and_then(|()| {
                    w.flush().map_err(|e| query::QueryError::Io {
                        path: path.clone(),
                        source: e,
                    })
                })
            }),
        None => {
            if format == output::Format::Parquet && std::io::stdout().is_terminal() {
                return Err(CliError::Usage(
                    "Parquet is binary: use -o FILE or redirect standard output".into(),
                ));
            }
            let limit = if std::io::stdout().is_terminal() {
                args.max_rows
            } else {
                0
            };
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            output::write(&mut df, format, limit, &mut w).and_then(|()| {
                w.flush().map_err(|e| query::QueryError::Io {
                    path: "stdout".into(),
                    source: e,
                })
            })
        }
    };
    result?;
    Ok(SUCCESS)
}
