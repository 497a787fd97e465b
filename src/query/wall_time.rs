//! SQL over `wall_time`: comparisons with a date-time string and `date_trunc`, rewritten
//! into forms polars' SQL answers (see [`WallTime`]).

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, FunctionArguments, Ident, Select, SelectItem, VisitorMut};

use super::ast::{function_name, parse_expr};
use super::error::QueryError;

/// `wall_time` (a UTC timestamp) against a date-time string, and `date_trunc`:
/// - `wall_time >= '2026-11-28T14:05:00Z'` (any comparison, or BETWEEN): polars compares
///   a timestamp with a string only in its own ISO form without an offset; the string is
///   read as `--since` reads it (UTC without an offset, as DuckDB with `TimeZone` UTC)
///   and written in that form, in UTC, right of the column (where polars looks).
/// - `date_trunc('second' | 'minute' | 'hour' | 'day', t)`: polars' SQL has no
///   `date_trunc`; it becomes `t` formatted to the unit and read back as a UTC
///   timestamp (an unaliased one keeps DuckDB's column name). Another unit is refused.
pub(super) struct WallTime<'a>(pub(super) &'a mut bool);

/// Whether `e` is the `wall_time` column (qualified or not).
fn is_wall_time(e: &Expr) -> bool {
    match e {
        Expr::Identifier(i) => i.value.eq_ignore_ascii_case("wall_time"),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("wall_time")),
        Expr::Nested(inner) => is_wall_time(inner),
        _ => false,
    }
}

/// A string literal holding a date and time, as polars' timestamp form in UTC.
fn utc_literal(e: &Expr) -> Option<Expr> {
    let Expr::Value(v) = e else {
        return None;
    };
    let sqlparser::ast::Value::SingleQuotedString(text) = &v.value else {
        return None;
    };
    // A date first (a time of day alone is not a timestamp in SQL).
    let t = text.trim();
    if !(t.len() >= 10 && t.as_bytes()[4] == b'-' && t.as_bytes()[7] == b'-') {
        return None;
    }
    // A date alone is its midnight, as in DuckDB.
    let midnight;
    let t = if t.len() == 10 {
        midnight = format!("{t} 00:00");
        midnight.as_str()
    } else {
        t
    };
    let us = crate::tach::filter::parse_wall_time(t, 0)?;
    let utc = chrono::DateTime::from_timestamp_micros(us)?;
    parse_expr(&format!("'{}'", utc.format("%Y-%m-%d %H:%M:%S%.6f"))).ok()
}

/// The format `date_trunc(unit, ...)` keeps of a timestamp, with a UTC offset.
fn trunc_format(unit: &str) -> Option<&'static str> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "second" => "%Y-%m-%d %H:%M:%S+0000",
        "minute" => "%Y-%m-%d %H:%M:00+0000",
        "hour" => "%Y-%m-%d %H:00:00+0000",
        "day" => "%Y-%m-%d 00:00:00+0000",
        _ => return None,
    })
}

/// `date_trunc`'s unit and timestamp, when `e` is a call of it.
fn date_trunc_args(e: &Expr) -> Option<(String, &Expr)> {
    let Expr::Function(f) = e else {
        return None;
    };
    if f.over.is_some() || function_name(f) != "date_trunc" {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args: Vec<&Expr> = list
        .args
        .iter()
        .filter_map(|a| match a {
            sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(e)) => {
                Some(e)
            }
            _ => None,
        })
        .collect();
    match args.as_slice() {
        [Expr::Value(v), t] if list.args.len() == 2 => match &v.value {
            sqlparser::ast::Value::SingleQuotedString(unit) => Some((unit.clone(), t)),
            _ => None,
        },
        _ => None,
    }
}

impl VisitorMut for WallTime<'_> {
    type Break = QueryError;

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<QueryError> {
        // DuckDB's name for an unaliased date_trunc(...): its text.
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(e) = item {
                if date_trunc_args(e).is_some() {
                    let alias = Ident::with_quote('"', e.to_string());
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias,
                    };
                    *self.0 = true;
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<QueryError> {
        use sqlparser::ast::BinaryOperator as Op;
        if let Some((unit, t)) = date_trunc_args(e) {
            let Some(format) = trunc_format(&unit) else {
                return ControlFlow::Break(QueryError::Forbidden(format!(
                    "date_trunc('{unit}', ...): the units are second, minute, hour and day"
                )));
            };
            let text = format!("strptime(strftime({t}, '{format}'), '%Y-%m-%d %H:%M:%S%z')");
            if let Ok(new) = parse_expr(&text) {
                *e = new;
                *self.0 = true;
            }
            return ControlFlow::Continue(());
        }
        match e {
            Expr::BinaryOp { left, op, right }
                if matches!(
                    op,
                    Op::Eq | Op::NotEq | Op::Lt | Op::LtEq | Op::Gt | Op::GtEq
                ) =>
            {
                if is_wall_time(left) {
                    if let Some(lit) = utc_literal(right) {
                        **right = lit;
                        *self.0 = true;
                    }
                } else if is_wall_time(right) {
                    // polars reads the string as a timestamp only right of the column.
                    if let Some(lit) = utc_literal(left) {
                        let flipped = match op {
                            Op::Lt => Op::Gt,
                            Op::LtEq => Op::GtEq,
                            Op::Gt => Op::Lt,
                            Op::GtEq => Op::LtEq,
                            other => other.clone(),
                        };
                        *e = Expr::BinaryOp {
                            left: right.clone(),
                            op: flipped,
                            right: Box::new(lit),
                        };
                        *self.0 = true;
                    }
                }
            }
            Expr::Between {
                expr, low, high, ..
            } if is_wall_time(expr) => {
                for bound in [low, high] {
                    if let Some(lit) = utc_literal(bound) {
                        **bound = lit;
                        *self.0 = true;
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}
