//! `tach query`: SQL over profiles, through polars' SQL context over lazy frames built
//! from the reader. The tables and their columns are documented in `docs/query.md`;
//! the Parquet exporter writes the same schema.
//!
//! - `tables` builds the tables (anonymous scans with projection pushdown).
//! - `guard` refuses anything but one SELECT over the registered tables.
//! - [`output`] prints or writes results.

mod aggregates;
mod ast;
pub(crate) mod batches;
mod bounded;
mod columns;
mod correlated;
mod error;
mod exists;
mod frames;
mod grouped;
mod grouping_sets;
mod guard;
pub(crate) mod opnames;
pub mod output;
mod parquet_input;
mod partial;
mod pushdown;
pub(crate) mod samples_parquet;
mod schema;
mod semantics;
pub(crate) mod tables;
mod wall_time;
mod windows;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use polars::prelude::*;
use polars::sql::SQLContext;

use crate::tach::TachFile;
pub use bounded::GROUP_PROFILES;
pub use error::{QueryError, Result};
pub use opnames::opname;
use parquet_input::ParquetInput;
pub use pushdown::{rewrite as pushdown_rewrite, WEIGHT_COLUMN};
use schema::signed;
pub use schema::{
    schema_markdown, tables as schema_tables, Column, ColumnType, Table, FILE_VALUE_KEY,
    SCHEMA_VERSION,
};
pub use tables::{Source, TABLES};

/// One input of a query: a TACH file, or what the Parquet exporter wrote
/// ([`parquet_input`]).
enum Input {
    Tach(Arc<Source>),
    Parquet(Box<ParquetInput>),
}

/// Opened profiles with the query tables registered.
pub struct QueryEngine {
    /// The TACH inputs, in order.
    sources: Vec<Arc<Source>>,
    /// Every input, in the order given.
    inputs: Vec<Input>,
    /// Over more profiles than this, the grouped samples table is computed this many
    /// profiles at a time ([`bounded`]).
    group_profiles: usize,
}

/// A directory of TACH files (a rotated recording's segments) stands for its files in
/// time order, as for `tach top`; a directory holding a Parquet export is the export.
fn expand_segment_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let is_export = p.join("samples.parquet").exists() || p.join("samples").is_dir();
        let has_tach_files = || {
            std::fs::read_dir(p).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "tach"))
            })
        };
        if p.is_dir() && !is_export && has_tach_files() {
            out.extend(crate::tach::reader::expand_dirs(std::slice::from_ref(p))?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

impl QueryEngine {
    /// Opens every input: TACH files, Parquet exports (a directory or a lone samples
    /// file) and Parquet datasets, in any mix. The `file` column holds each TACH path
    /// as given, and for Parquet the path the export was given.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        let mut sources = Vec::new();
        let mut inputs = Vec::new();
        // Over many files, each is checked now (a bad one is an error before anything
        // runs) and opened again when a scan reads it, a group at a time (`bounded`).
        let many = paths.len() > GROUP_PROFILES;
        for p in paths {
            if parquet_input::is_parquet_input(p)? {
                inputs.push(Input::Parquet(Box::new(ParquetInput::open(p)?)));
                continue;
            }
            let file = TachFile::open(p)?;
            let name = p.display().to_string();
            let s = Arc::new(if many {
                drop(file);
                Source::later(name, p.clone())
            } else {
                Source::new(name, file)
            });
            sources.push(s.clone());
            inputs.push(Input::Tach(s));
        }
        Ok(QueryEngine {
            sources,
            inputs,
            group_profiles: GROUP_PROFILES,
        })
    }

    /// One already-opened file, named `name` in the `file` column.
    pub fn from_file(name: &str, file: TachFile) -> Self {
        let s = Arc::new(Source::new(name.to_string(), file));
        QueryEngine {
            sources: vec![s.clone()],
            inputs: vec![Input::Tach(s)],
            group_profiles: GROUP_PROFILES,
        }
    }

    /// The same engine computing count queries' grouped table `n` profiles at a time
    /// when the inputs hold more than `n` (default [`GROUP_PROFILES`]; `usize::MAX`:
    /// one scan of everything). The answers are the same; memory is bounded by the
    /// group rather than the inputs.
    pub fn with_group_profiles(mut self, n: usize) -> Self {
        self.group_profiles = n.max(1);
        self
    }

    /// The TACH inputs (Parquet inputs are not among them).
    pub fn sources(&self) -> &[Arc<Source>] {
        &self.sources
    }

    /// How many profiles the inputs hold (a dataset holds one per partition).
    fn profiles(&self) -> usize {
        self.inputs
            .iter()
            .map(|i| match i {
                Input::Tach(_) => 1,
                Input::Parquet(p) => p.profiles(),
            })
            .sum()
    }

    /// One lazy frame per input, in order, as one.
    fn union(
        &self,
        tach: impl Fn(&Arc<Source>) -> PolarsResult<LazyFrame>,
        parquet: impl Fn(&ParquetInput) -> PolarsResult<LazyFrame>,
    ) -> PolarsResult<LazyFrame> {
        let per_input = self
            .inputs
            .iter()
            .map(|i| match i {
                Input::Tach(s) => tach(s),
                Input::Parquet(p) => parquet(p),
            })
            .collect::<PolarsResult<Vec<_>>>()?;
        match per_input.len() {
            1 => Ok(per_input.into_iter().next().unwrap_or_default()),
            _ => concat(per_input, UnionArgs::default()),
        }
    }

    /// A table over all inputs, as a lazy frame. Over more profiles than the group
    /// size ([`QueryEngine::with_group_profiles`]) the grouped samples table is
    /// computed a group at a time (`bounded`: memory bounded by the group, not the
    /// inputs).
    pub fn table(&self, name: &str) -> Result<LazyFrame> {
        let lf = if name == pushdown::GROUPED_TABLE && self.profiles() > self.group_profiles {
            bounded::grouped_table(self.bounded_inputs(), self.group_profiles)
        } else {
            self.union(
                |s| tables::table(name, std::slice::from_ref(s)),
                |p| p.table(name),
            )
        };
        lf.map_err(|e| QueryError::Sql {
            message: e.to_string(),
        })
    }

    fn distinct_stacks(&self, columns: &[String]) -> PolarsResult<LazyFrame> {
        self.union(
            |s| tables::distinct_stacks(std::slice::from_ref(s), columns),
            |p| p.distinct_stacks(columns),
        )
    }

    /// A SQL context holding the tables `sql` names.
    fn context(&self, sql: &str) -> Result<SQLContext> {
        let ctx = SQLContext::new();
        // Only the tables the query names: `frames` is built in memory for each file
        // when registered (about 300 KB a file for a fleet's recordings, 3 GB over
        // ten thousand files that a count query never reads).
        for name in named_tables(sql) {
            ctx.register(name, self.signed_table(name)?);
        }
        Ok(ctx)
    }

    /// [`QueryEngine::context`] with tables of the same columns and no rows: a query
    /// planned there has the real one's output columns and types and its SQL errors,
    /// and no file is read (a scan of a fleet's dataset reads every file's footer).
    fn schema_context(&self, sql: &str) -> Result<SQLContext> {
        let ctx = SQLContext::new();
        for name in named_tables(sql) {
            let lf = match tables::schema_of(name) {
                Some(schema) if name != pushdown::GROUPED_TABLE => {
                    signed(DataFrame::empty_with_schema(&schema).lazy()).map_err(|e| {
                        QueryError::Sql {
                            message: e.to_string(),
                        }
                    })?
                }
                _ => self.signed_table(name)?,
            };
            ctx.register(name, lf);
        }
        Ok(ctx)
    }

    fn signed_table(&self, name: &str) -> Result<LazyFrame> {
        signed(self.table(name)?).map_err(|e| QueryError::Sql {
            message: e.to_string(),
        })
    }

    /// The checked query as a lazy frame. Count-only aggregates over `samples` run on
    /// grouped samples, and `select distinct` over `stacks` columns on a scan that
    /// leaves out repeated rows itself (`pushdown`), when the rewritten query has the
    /// same output columns and types as the original; anything else runs as written.
    pub fn lazy(&self, sql: &str) -> Result<LazyFrame> {
        let sql = self.checked(sql)?;
        // The original's plan over the real tables is built only when it is what runs.
        let original = self.probe(&sql)?;
        let rewritten = pushdown::rewrite(&sql, self.profiles()).and_then(|r| {
            let mut ctx = self.context(&r.sql).ok()?;
            for (k, columns) in r.distinct_stacks.iter().enumerate() {
                let name = format!("{}_{k}", pushdown::DISTINCT_STACKS_TABLE);
                ctx.register(&name, signed(self.distinct_stacks(columns).ok()?).ok()?);
            }
            same_output(&original, ctx.execute(&r.sql).ok()?)
        });
        match rewritten.or_else(|| self.by_groups(&sql, &original)) {
            Some(rewritten) => Ok(rewritten),
            None => self.execute(&sql),
        }
    }

    /// Over more profiles than the group size, a grouped aggregate over `samples` split
    /// into partial aggregates computed a group of profiles at a time ([`partial`],
    /// [`bounded`]), with the original's output columns and types; None when it does
    /// not split.
    fn by_groups(&self, sql: &str, original: &LazyFrame) -> Option<LazyFrame> {
        if self.profiles() <= self.group_profiles {
            return None;
        }
        let split = partial::rewrite(sql)?;
        let rows = bounded::partial_rows(self.bounded_inputs(), self.group_profiles, &split)?;
        let ctx = SQLContext::new();
        ctx.register(partial::PARTIALS_TABLE, rows);
        let answer = ctx.clone().execute(&split.outer).ok()?;
        let want = original.clone().collect_schema().ok()?;
        let have = answer.clone().collect_schema().ok()?;
        if want.len() != have.len() {
            return None;
        }
        // Combined counts and sums may come out wider than the original's types: the
        // values are the same, so they take the original's names and types.
        let columns: Vec<Expr> = have
            .iter_names()
            .zip(want.iter())
            .map(|(h, (name, dtype))| {
                col(h.clone())
                    .strict_cast(dtype.clone())
                    .alias(name.clone())
            })
            .collect();
        same_output(original, answer.select(columns))
    }

    fn bounded_inputs(&self) -> impl Iterator<Item = bounded::Input<'_>> {
        self.inputs.iter().map(|i| match i {
            Input::Tach(s) => bounded::Input::Tach(s),
            Input::Parquet(p) => bounded::Input::Parquet(p),
        })
    }

    /// The SQL text polars runs for `sql`: checked, with SQL's semantics and the forms
    /// polars lacks rewritten (before the count pushdown, which `--explain` shows).
    pub fn rewritten(&self, sql: &str) -> Result<String> {
        self.checked(sql)
    }

    /// The checked query as a lazy frame, exactly as written (no count pushdown): the
    /// reference the pushdown is tested against.
    pub fn lazy_as_written(&self, sql: &str) -> Result<LazyFrame> {
        let sql = self.checked(sql)?;
        self.execute(&sql)
    }

    /// The query checked ([`guard`]) and made to give SQL's answers ([`semantics`]),
    /// its uncorrelated scalar subqueries evaluated.
    fn checked(&self, sql: &str) -> Result<String> {
        guard::check(sql, &TABLES)?;
        semantics::apply(
            sql,
            semantics::Probes {
                scalar: &mut |sub| self.scalar_literal(sub),
                numeric: &mut |probe| self.numeric_columns(probe),
            },
        )
    }

    /// For each output column of `sql`, whether it is a number, from polars' plan
    /// (nothing runs).
    fn numeric_columns(&self, sql: &str) -> Option<Vec<bool>> {
        let schema = self.probe(sql).ok()?.collect_schema().ok()?;
        Some(
            schema
                .iter_values()
                .map(|t| t.is_primitive_numeric())
                .collect(),
        )
    }

    /// `sql` planned over tables with no rows ([`QueryEngine::schema_context`]): its
    /// output's columns and types, or its SQL error.
    fn probe(&self, sql: &str) -> Result<LazyFrame> {
        let mut ctx = self.schema_context(sql)?;
        ctx.execute(sql).map_err(|e| sql_error(sql, e))
    }

    fn execute(&self, sql: &str) -> Result<LazyFrame> {
        let mut ctx = self.context(sql)?;
        ctx.execute(sql).map_err(|e| sql_error(sql, e))
    }

    /// The value of a scalar subquery as a SQL literal, when it runs on its own (it is
    /// not correlated) and gives one row of one column (no row: NULL).
    fn scalar_literal(&self, sql: &str) -> Option<String> {
        let df = self.run(sql).ok()?;
        if df.width() != 1 || df.height() > 1 {
            return None;
        }
        if df.height() == 0 {
            return Some("NULL".into());
        }
        let column = &df.columns()[0];
        Some(match column.get(0).ok()? {
            AnyValue::Null => "NULL".into(),
            AnyValue::Boolean(b) => if b { "TRUE" } else { "FALSE" }.into(),
            AnyValue::Float64(x) if x.is_finite() => format!("{x:?}"),
            AnyValue::Float32(x) if x.is_finite() => format!("{:?}", f64::from(x)),
            AnyValue::Float64(_) | AnyValue::Float32(_) => return None,
            AnyValue::String(s) => format!("'{}'", s.replace('\'', "''")),
            AnyValue::StringOwned(s) => format!("'{}'", s.replace('\'', "''")),
            v if v.dtype().is_integer() => v.to_string(),
            _ => return None,
        })
    }

    /// Runs the query.
    pub fn run(&self, sql: &str) -> Result<DataFrame> {
        self.lazy(sql)?.collect().map_err(|e| sql_error(sql, e))
    }

    /// polars' optimized plan for the query.
    pub fn explain(&self, sql: &str) -> Result<String> {
        self.lazy(sql)?
            .describe_optimized_plan()
            .map_err(|e| sql_error(sql, e))
    }
}

/// The tables (and the pushdown's grouped table) that `sql` names, as whole words.
fn named_tables(sql: &str) -> impl Iterator<Item = &'static str> {
    let lower = sql.to_ascii_lowercase();
    let words: std::collections::HashSet<String> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect();
    TABLES
        .into_iter()
        .chain([pushdown::GROUPED_TABLE])
        .filter(move |t| words.contains(*t))
}

/// `rewritten` with `original`'s column names, when it has the same number of
/// columns of the same types (the names of unaliased aggregates differ: polars names
/// `count(*)` `len` and `sum(w)` `w`).
fn same_output(original: &LazyFrame, rewritten: LazyFrame) -> Option<LazyFrame> {
    let want = original.clone().collect_schema().ok()?;
    let have = rewritten.clone().collect_schema().ok()?;
    if want.len() != have.len() || want.iter_values().ne(have.iter_values()) {
        return None;
    }
    Some(rewritten.rename(
        have.iter_names().cloned().collect::<Vec<_>>(),
        want.iter_names().cloned().collect::<Vec<_>>(),
        true,
    ))
}

/// polars' message; for a missing column, the columns of the tables the query names.
/// Some of polars' messages print the parser's syntax tree (`expression Exists {
/// subquery: Query { with: None, ...`): those are cut to the construct's name.
fn sql_error(sql: &str, e: PolarsError) -> QueryError {
    let mut message = without_syntax_tree(&e.to_string());
    if matches!(e, PolarsError::ColumnNotFound(_)) {
        let lower = sql.to_lowercase();
        let named: Vec<&str> = TABLES
            .iter()
            .copied()
            .filter(|t| {
                lower
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == *t)
            })
            .collect();
        for t in named {
            if let Some(schema) = tables::schema_of(t) {
                let cols: Vec<&str> = schema.iter_names().map(|n| n.as_str()).collect();
                message.push_str(&format!("\ncolumns of {t}: {}", cols.join(", ")));
            }
        }
    }
    QueryError::Sql { message }
}

/// `message` up to the first Rust debug dump of a syntax tree node (`Name { field: `),
/// which is cut to the node's name, the construct.
fn without_syntax_tree(message: &str) -> String {
    for (i, _) in message.match_indices(" { ") {
        let start = message[..i]
            .rfind(|c: char| !c.is_alphanumeric())
            .map_or(0, |p| p + 1);
        let word = &message[start..i];
        let field = message[i + 3..].split(':').next().unwrap_or("");
        if word.starts_with(|c: char| c.is_ascii_uppercase())
            && !field.is_empty()
            && field.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            return format!(
                "{}{word} is not supported by tach query's SQL engine",
                &message[..start]
            );
        }
    }
    message.to_string()
}

/// The tables and their columns, for `--schema` (see `schema`).
pub fn schema_text() -> String {
    schema::schema_text()
}

/// Expands shell-style globs in the inputs (for shells that pass them unexpanded, and
/// for quoted patterns), and directories of TACH files (see `expand_segment_dirs`). A
/// pattern that matches nothing is an error naming it.
pub fn expand_inputs(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    expand_segment_dirs(&expand_globs(args)?)
}

fn expand_globs(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        let text = a.to_string_lossy();
        if !text.contains(['*', '?', '[']) {
            out.push(a.clone());
            continue;
        }
        let mut matched = glob_paths(&text);
        if matched.is_empty() {
            return Err(QueryError::Io {
                path: a.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no file matches"),
            });
        }
        matched.sort();
        out.extend(matched);
    }
    Ok(out)
}

/// Minimal glob: `*`, `?` and `[...]` in any path component.
fn glob_paths(pattern: &str) -> Vec<PathBuf> {
    let absolute = pattern.starts_with('/');
    let mut current: Vec<PathBuf> = vec![if absolute {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    }];
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    for part in parts {
        let mut next = Vec::new();
        for base in &current {
            if !part.contains(['*', '?', '[']) {
                let p = base.join(part);
                if p.exists() || p.symlink_metadata().is_ok() {
                    next.push(p);
                }
                continue;
            }
            let dir = if base.as_os_str().is_empty() {
                Path::new(".")
            } else {
                base.as_path()
            };
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') && !part.starts_with('.') {
                    continue;
                }
                if wildcard(part.as_bytes(), name.as_bytes()) {
                    next.push(base.join(&name));
                }
            }
        }
        current = next;
    }
    current
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wildcard(&p[1..], s) || (!s.is_empty() && wildcard(p, &s[1..])),
        (Some(b'?'), Some(_)) => wildcard(&p[1..], &s[1..]),
        (Some(b'['), Some(&c)) => match p.iter().position(|&b| b == b']') {
            Some(end) if end > 1 => {
                let set = &p[1..end];
                let (neg, set) = match set.first() {
                    Some(b'!') | Some(b'^') => (true, &set[1..]),
                    _ => (false, set),
                };
                let mut hit = false;
                let mut i = 0;
                while i < set.len() {
                    if i + 2 < set.len() && set[i + 1] == b'-' {
                        hit |= set[i] <= c && c <= set[i + 2];
                        i += 3;
                    } else {
                        hit |= set[i] == c;
                        i += 1;
                    }
                }
                hit != neg && wildcard(&p[end + 1..], &s[1..])
            }
            _ => c == b'[' && wildcard(&p[1..], &s[1..]),
        },
        (Some(&a), Some(&b)) => a == b && wildcard(&p[1..], &s[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard(b"*.bin", b"a.bin"));
        assert!(!wildcard(b"*.bin", b"a.bi"));
        assert!(wildcard(b"cpu_[a-c]?.bin", b"cpu_b1.bin"));
        assert!(!wildcard(b"cpu_[!a-c]?.bin", b"cpu_b1.bin"));
    }
}
