//! Text, CSV and JSON renderings of the reports (deterministic).

use std::io::Write;

use super::diff::DiffReport;
use super::error::{ReportError, Result};
use super::keys::{GroupBy, Key};
use super::top::{TopReport, TopRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "record", derive(clap::ValueEnum))]
pub enum Format {
    #[default]
    Table,
    Csv,
    Json,
}

impl Format {
    pub fn parse(name: &str) -> Result<Self> {
        crate::names::parse(Self::WHAT, name).map_err(ReportError::Usage)
    }
    /// What a value is, in messages (`unknown format 'x': use table, csv or json`).
    pub const WHAT: &'static str = "format";
}

/// A CSV field, quoted when it must be (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn key_csv(k: &Key) -> String {
    format!(
        "{},{},{}",
        csv_field(&k.filename),
        k.lineno,
        csv_field(&k.funcname)
    )
}

fn what(by: GroupBy) -> &'static str {
    match by {
        GroupBy::Function => "function",
        GroupBy::Line => "filename:lineno(function)",
        GroupBy::File => "file",
    }
}

pub fn write_top(r: &TopReport, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, r)?;
            writeln!(out)
        }
        Format::Csv => {
            let file = if r.rows.iter().any(|x| x.file.is_some()) {
                "file,"
            } else {
                ""
            };
            writeln!(
                out,
                "{file}filename,lineno,funcname,self_samples,total_samples,self_pct,total_pct,self_s,total_s"
            )?;
            for x in &r.rows {
                if let Some(f) = &x.file {
                    write!(out, "{},", csv_field(f))?;
                }
                writeln!(
                    out,
                    "{},{},{},{},{},{},{}",
                    key_csv(&x.key),
                    x.self_samples,
                    x.total_samples,
                    x.self_pct,
                    x.total_pct,
                    x.self_s,
                    x.total_s
                )?;
            }
            Ok(())
        }
        Format::Table => {
            writeln!(
                out,
                "{} samples ({:.3} s) in {} file{}",
                r.samples,
                r.seconds,
                r.files.len(),
                if r.files.len() == 1 { "" } else { "s" }
            )?;
            let per_file = r.rows.iter().any(|x| x.file.is_some());
            writeln!(out, "{}", top_table_header(r.by, per_file))?;
            for x in &r.rows {
                writeln!(out, "{}", top_table_row(x, r.by))?;
            }
            Ok(())
        }
    }
}

/// The column titles of `tach top`'s table, printed or live.
pub fn top_table_header(by: GroupBy, per_file: bool) -> String {
    let mut s = format!(
        "{:>15} {:>7} {:>10} {:>7} {:>10}  ",
        "self/total", "self%", "self (s)", "total%", "total (s)"
    );
    if per_file {
        s.push_str(&format!("{:<24} ", "file"));
    }
    s.push_str(what(by));
    s
}

/// One row of `tach top`'s table, printed or live.
pub fn top_table_row(x: &TopRow, by: GroupBy) -> String {
    let mut s = format!(
        "{:>15} {:>7.1} {:>10.3} {:>7.1} {:>10.3}  ",
        format!("{}/{}", x.self_samples, x.total_samples),
        x.self_pct,
        x.self_s,
        x.total_pct,
        x.total_s
    );
    if let Some(f) = &x.file {
        s.push_str(&format!("{f:<24} "));
    }
    s.push_str(&x.key.label(by));
    s
}

pub fn write_diff(r: &DiffReport, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, r)?;
            writeln!(out)
        }
        Format::Csv => {
            writeln!(
                out,
                "filename,lineno,funcname,base_share_pct,new_share_pct,change_points,stderr_points,p_adjusted,tested,verdict"
            )?;
            for x in &r.rows {
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{}",
                    key_csv(&x.key),
                    x.base_pct,
                    x.new_pct,
                    x.change_points,
                    x.stderr_points.map_or(String::new(), |p| p.to_string()),
                    x.p_adjusted.map_or(String::new(), |p| p.to_string()),
                    x.p_adjusted.is_some(),
                    x.verdict.text()
                )?;
            }
            Ok(())
        }
        Format::Table => {
            writeln!(
                out,
                "base: {} samples in {} file{}; new: {} samples in {} file{}; {} share, {} compared",
                r.base.samples,
                r.base.files.len(),
                if r.base.files.len() == 1 { "" } else { "s" },
                r.new.samples,
                r.new.files.len(),
                if r.new.files.len() == 1 { "" } else { "s" },
                r.metric,
                r.tested
            )?;
            writeln!(
                out,
                "{:>7} {:>7} {:>8} {:>7} {:>9}  {:<24} {}",
                "base%",
                "new%",
                "change",
                "±se",
                "p (Holm)",
                "verdict",
                what(r.by)
            )?;
            for x in &r.rows {
                writeln!(
                    out,
                    "{:>7.2} {:>7.2} {:>+8.2} {:>7} {:>9}  {:<24} {}",
                    x.base_pct,
                    x.new_pct,
                    x.change_points,
                    x.stderr_points
                        .map_or("-".to_string(), |s| format!("{s:.2}")),
                    x.p_adjusted.map_or("-".to_string(), |p| format!("{p:.2e}")),
                    x.verdict.text(),
                    x.key.label(r.by)
                )?;
            }
            Ok(())
        }
    }
}
