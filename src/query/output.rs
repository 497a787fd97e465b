//! Writing query results: an aligned text table, CSV, JSON, NDJSON or Parquet.
//!
//! The text formats are written here rather than through polars' writers: they need
//! a few lines each, and polars' CSV/JSON features would also turn on its
//! `read_csv`/`read_json` SQL table functions and add build time.

use std::io::Write;

use polars::prelude::*;

use super::error::{QueryError, Result};

/// Output formats of `tach query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
    Ndjson,
    Parquet,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "table" => Format::Table,
            "csv" => Format::Csv,
            "json" => Format::Json,
            "ndjson" => Format::Ndjson,
            "parquet" => Format::Parquet,
            _ => return None,
        })
    }
}

fn io_err(source: std::io::Error) -> QueryError {
    QueryError::Io {
        path: "output".into(),
        source,
    }
}

/// Writes `df` in `format`. `max_rows` limits the text table (0 = all rows); rows
/// left out are counted in a note.
pub fn write(
    df: &mut DataFrame,
    format: Format,
    max_rows: usize,
    out: &mut dyn Write,
) -> Result<()> {
    match format {
        Format::Table => write_table(df, max_rows, out),
        Format::Csv => write_csv(df, out),
        Format::Json => write_json(df, out, false),
        Format::Ndjson => write_json(df, out, true),
        Format::Parquet => write_parquet(df, out),
    }
}

pub fn write_parquet(df: &mut DataFrame, out: &mut dyn Write) -> Result<()> {
    ParquetWriter::new(out)
        .with_compression(ParquetCompression::Snappy)
        .finish(df)
        .map(|_| ())
        .map_err(|e| QueryError::Output(format!("writing Parquet: {e}")))
}

/// Row-major access to the cells of a frame.
struct Rows {
    cols: Vec<Series>,
}

impl Rows {
    fn new(df: &DataFrame) -> Rows {
        Rows {
            cols: df
                .columns()
                .iter()
                .map(|c| c.as_materialized_series().rechunk())
                .collect(),
        }
    }
    fn cell(&self, col: usize, row: usize) -> AnyValue<'_> {
        self.cols[col].get(row).unwrap_or(AnyValue::Null)
    }
}

/// A cell as text: `None` for null. Floats get full precision unless `short`.
fn text(v: &AnyValue<'_>, short: bool) -> Option<String> {
    Some(match v {
        AnyValue::Null => return None,
        AnyValue::Boolean(b) => b.to_string(),
        AnyValue::String(s) => s.to_string(),
        AnyValue::StringOwned(s) => s.to_string(),
        AnyValue::Int8(x) => x.to_string(),
        AnyValue::Int16(x) => x.to_string(),
        AnyValue::Int32(x) => x.to_string(),
        AnyValue::Int64(x) => x.to_string(),
        AnyValue::UInt8(x) => x.to_string(),
        AnyValue::UInt16(x) => x.to_string(),
        AnyValue::UInt32(x) => x.to_string(),
        AnyValue::UInt64(x) => x.to_string(),
        AnyValue::Float32(x) => float(*x as f64, short),
        AnyValue::Float64(x) => float(*x, short),
        AnyValue::Datetime(us, TimeUnit::Microseconds, _)
        | AnyValue::DatetimeOwned(us, TimeUnit::Microseconds, _) => utc_timestamp(*us),
        other => format!("{other:?}"),
    })
}

/// A `wall_time` (µs since the Unix epoch) as ISO 8601 in UTC, to the microsecond:
/// `2026-11-28T14:05:00.123456Z`, what DuckDB, Spark and Python parse back.
fn utc_timestamp(us: i64) -> String {
    match chrono::DateTime::from_timestamp_micros(us) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        None => us.to_string(),
    }
}

fn float(x: f64, short: bool) -> String {
    if !short || !x.is_finite() || x == 0.0 {
        return x.to_string();
    }
    if x.abs() >= 1e15 || x.abs() < 1e-6 {
        return format!("{x:e}");
    }
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn is_numeric(d: &DataType) -> bool {
    d.is_primitive_numeric()
}

fn write_table(df: &DataFrame, max_rows: usize, out: &mut dyn Write) -> Result<()> {
    let rows = Rows::new(df);
    let height = df.height();
    let shown = if max_rows == 0 {
        height
    } else {
        height.min(max_rows)
    };
    let names: Vec<String> = df
        .get_column_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    let numeric: Vec<bool> = df.dtypes().iter().map(is_numeric).collect();
    let cells: Vec<Vec<String>> = (0..shown)
        .map(|r| {
            (0..names.len())
                .map(|c| text(&rows.cell(c, r), true).unwrap_or_else(|| "null".into()))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..names.len())
        .map(|c| {
            cells
                .iter()
                .map(|row| row[c].chars().count())
                .chain([names[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &[String], out: &mut dyn Write| -> std::io::Result<()> {
        let mut s = String::new();
        for (c, v) in values.iter().enumerate() {
            if c > 0 {
                s.push_str("  ");
            }
            let pad = widths[c] - v.chars().count();
            if numeric[c] {
                s.push_str(&" ".repeat(pad));
                s.push_str(v);
            } else {
                s.push_str(v);
                if c + 1 < values.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(&names, out).map_err(io_err)?;
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    line(&rule, out).map_err(io_err)?;
    for row in &cells {
        line(row, out).map_err(io_err)?;
    }
    if shown < height {
        writeln!(
            out,
            "... {} more rows not shown ({} rows in all; --max-rows 0 shows all, or use --format csv)",
            height - shown,
            height
        )
        .map_err(io_err)?;
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_csv(df: &DataFrame, out: &mut dyn Write) -> Result<()> {
    let rows = Rows::new(df);
    let names: Vec<String> = df.get_column_names().iter().map(|n| csv_field(n)).collect();
    writeln!(out, "{}", names.join(",")).map_err(io_err)?;
    let mut line = String::new();
    for r in 0..df.height() {
        line.clear();
        for c in 0..names.len() {
            if c > 0 {
                line.push(',');
            }
            if let Some(t) = text(&rows.cell(c, r), false) {
                line.push_str(&csv_field(&t));
            }
        }
        if line.is_empty() {
            // A row of one NULL (or empty text) would be a blank line, which readers
            // skip (pandas' read_csv does by default): write an empty quoted field,
            // as Python's csv module does.
            line.push_str("\"\"");
        }
        writeln!(out, "{line}").map_err(io_err)?;
    }
    Ok(())
}

fn json_value(v: &AnyValue<'_>) -> serde_json::Value {
    use serde_json::Value;
    match v {
        AnyValue::Null => Value::Null,
        AnyValue::Boolean(b) => Value::Bool(*b),
        AnyValue::String(s) => Value::String(s.to_string()),
        AnyValue::StringOwned(s) => Value::String(s.to_string()),
        AnyValue::Int8(x) => (*x).into(),
        AnyValue::Int16(x) => (*x).into(),
        AnyValue::Int32(x) => (*x).into(),
        AnyValue::Int64(x) => (*x).into(),
        AnyValue::UInt8(x) => (*x).into(),
        AnyValue::UInt16(x) => (*x).into(),
        AnyValue::UInt32(x) => (*x).into(),
        AnyValue::UInt64(x) => (*x).into(),
        AnyValue::Float32(x) => {
            serde_json::Number::from_f64(*x as f64).map_or(Value::Null, Value::Number)
        }
        AnyValue::Float64(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
        AnyValue::Datetime(us, TimeUnit::Microseconds, _)
        | AnyValue::DatetimeOwned(us, TimeUnit::Microseconds, _) => {
            Value::String(utc_timestamp(*us))
        }
        other => Value::String(format!("{other:?}")),
    }
}

fn write_json(df: &DataFrame, out: &mut dyn Write, lines: bool) -> Result<()> {
    let rows = Rows::new(df);
    let names: Vec<String> = df
        .get_column_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    if !lines {
        write!(out, "[").map_err(io_err)?;
    }
    for r in 0..df.height() {
        // Written by hand to keep the column order (serde_json's map sorts keys).
        let mut text = String::from("{");
        for (c, name) in names.iter().enumerate() {
            if c > 0 {
                text.push(',');
            }
            text.push_str(&serde_json::Value::String(name.clone()).to_string());
            text.push(':');
            text.push_str(&json_value(&rows.cell(c, r)).to_string());
        }
        text.push('}');
        let sep = if lines || r == 0 { "" } else { "," };
        if lines {
            writeln!(out, "{text}")
        } else {
            write!(out, "{sep}\n{text}")
        }
        .map_err(io_err)?;
    }
    if !lines {
        writeln!(out, "{}]", if df.height() > 0 { "\n" } else { "" }).map_err(io_err)?;
    }
    Ok(())
}
