//! Makes polars' SQL give SQL's answers, or refuse, before it runs.
//!
//! polars' SQL differs from SQL (and from DuckDB, which the differential tests use as
//! the reference) in ways that give wrong numbers silently:
//! - `count(...)` is an unsigned 32-bit integer, so `n - lag(n) over (...)` wraps to
//!   4294967229 instead of -67. Every `count(...)` becomes `CAST(count(...) AS BIGINT)`:
//!   counts are signed 64-bit, as in SQL.
//! - An unaliased aggregate is named after its input column (`count(*)` is `len`,
//!   `min(time_s)` and `max(time_s)` are both `time_s` and collide). Such a SELECT item
//!   gets the name DuckDB gives it: `count_star()` for `count(*)`, else its text
//!   (`min(time_s)`). An ORDER BY that repeats a SELECT item's aggregate orders by
//!   that item's name.
//! - A window over an aggregate in a grouped SELECT (`sum(count(*)) over ()`) is
//!   computed within each group, so every share is 100%. That is refused with the
//!   rewrite that works (the aggregate in a CTE, the window over its column).

use std::ops::ControlFlow;

use sqlparser::ast::{
    CastKind, DataType, Expr, Function, FunctionArguments, GroupByExpr, Ident, OrderBy,
    OrderByKind, Query, Select, SelectItem, SetExpr, Statement, Visit, VisitMut, Visitor,
    VisitorMut,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserOptions};

use super::QueryError;

/// Aggregate functions polars' SQL knows (a window over one of these inside a grouped
/// SELECT is refused).
const AGGREGATES: [&str; 20] = [
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "median",
    "stddev",
    "stddev_samp",
    "variance",
    "var_samp",
    "first",
    "last",
    "array_agg",
    "string_agg",
    "quantile_cont",
    "quantile_disc",
    "percentile_cont",
    "percentile_disc",
    "corr",
];

/// `sql` with SQL's count type and column names, or why it is refused. The text is
/// parsed as polars parses it; a text that does not parse is returned unchanged (the
/// guard reports the syntax error).
pub fn apply(sql: &str) -> Result<String, QueryError> {
    let Ok(mut statements) = Parser::new(&GenericDialect)
        .with_options(ParserOptions {
            trailing_commas: true,
            ..Default::default()
        })
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
    else {
        return Ok(sql.to_string());
    };
    let [Statement::Query(query)] = statements.as_mut_slice() else {
        return Ok(sql.to_string());
    };
    if let ControlFlow::Break(e) = Visit::visit(query.as_ref(), &mut WindowOverAggregate) {
        return Err(e);
    }
    let mut changed = false;
    name_aggregates(query, &mut changed);
    let _ = VisitMut::visit(query.as_mut(), &mut CountsAreBigint(&mut changed));
    Ok(if changed {
        query.to_string()
    } else {
        sql.to_string()
    })
}

fn function_name(f: &Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

fn is_aggregate(f: &Function) -> bool {
    f.over.is_none() && AGGREGATES.contains(&function_name(f).as_str())
}

/// True when `e` holds an aggregate call (not a window).
fn has_aggregate(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.visit(&mut FnVisitor(|x: &Expr| {
        if let Expr::Function(f) = x {
            found |= is_aggregate(f);
        }
    }));
    found
}

/// Calls `f` on every expression, up to the first subquery (whose expressions belong
/// to its own SELECT, which the outer walk visits on its own).
struct FnVisitor<F: FnMut(&Expr)>(F);

impl<F: FnMut(&Expr)> Visitor for FnVisitor<F> {
    type Break = ();
    fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        ControlFlow::Break(())
    }
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        (self.0)(e);
        ControlFlow::Continue(())
    }
}

fn is_grouped(select: &Select) -> bool {
    match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(exprs, _) => !exprs.is_empty(),
    }
}

/// Refuses a window function whose arguments hold an aggregate in a grouped SELECT.
struct WindowOverAggregate;

impl Visitor for WindowOverAggregate {
    type Break = QueryError;

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<QueryError> {
        let aggregated = is_grouped(select)
            || select.projection.iter().any(|item| match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    has_aggregate(e)
                }
                _ => false,
            });
        if !aggregated {
            return ControlFlow::Continue(());
        }
        for item in &select.projection {
            let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item
            else {
                continue;
            };
            let mut bad: Option<String> = None;
            let _ = e.visit(&mut FnVisitor(|x: &Expr| {
                if let Expr::Function(f) = x {
                    if f.over.is_some() && bad.is_none() {
                        let args_have_aggregate = match &f.args {
                            FunctionArguments::List(list) => list.args.iter().any(|a| {
                                let mut inner = false;
                                let _ = a.visit(&mut FnVisitor(|y: &Expr| {
                                    if let Expr::Function(g) = y {
                                        inner |= is_aggregate(g);
                                    }
                                }));
                                inner
                            }),
                            _ => false,
                        };
                        if args_have_aggregate {
                            bad = Some(x.to_string());
                        }
                    }
                }
            }));
            if let Some(window) = bad {
                return ControlFlow::Break(QueryError::Forbidden(format!(
                    "`{window}` is a window over an aggregate in a grouped SELECT: polars \
                     computes it within each group (a share of the total would read 100 \
                     for every row), so it is refused. Aggregate in a CTE first, then \
                     window over its column, e.g.\n  with t as (select funcname, count(*) \
                     as n from samples group by funcname)\n  select funcname, n * 100.0 / \
                     sum(n) over () as pct from t"
                )));
            }
        }
        ControlFlow::Continue(())
    }
}

/// Unaliased aggregate SELECT items get DuckDB's names, so that two of them cannot
/// collide on their input column's name (`min(time_s), max(time_s)`).
fn name_aggregates(query: &mut Query, changed: &mut bool) {
    struct Names<'a>(&'a mut bool);
    impl VisitorMut for Names<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = q.body.as_mut() {
                for item in select.projection.iter_mut() {
                    let SelectItem::UnnamedExpr(e) = item else {
                        continue;
                    };
                    let Expr::Function(f) = e else { continue };
                    if !is_aggregate(f) {
                        continue;
                    }
                    let name = if function_name(f) == "count"
                        && matches!(&f.args, FunctionArguments::List(l)
                            if l.args.len() == 1 && l.args[0].to_string() == "*")
                    {
                        "count_star()".to_string()
                    } else {
                        e.to_string()
                    };
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::with_quote('"', name),
                    };
                    *self.0 = true;
                }
                // ORDER BY an aggregate of the SELECT list: by its name instead, since
                // polars matches the ORDER BY expression against the SELECT list's, and
                // those get a cast below.
                let named: Vec<(String, Ident)> = select
                    .projection
                    .iter()
                    .filter_map(|item| match item {
                        SelectItem::ExprWithAlias { expr, alias } if has_aggregate(expr) => {
                            Some((expr.to_string(), alias.clone()))
                        }
                        _ => None,
                    })
                    .collect();
                if let Some(OrderBy {
                    kind: OrderByKind::Expressions(exprs),
                    ..
                }) = q.order_by.as_mut()
                {
                    for o in exprs.iter_mut() {
                        let text = o.expr.to_string();
                        if let Some((_, alias)) = named.iter().find(|(e, _)| *e == text) {
                            o.expr = Expr::Identifier(alias.clone());
                            *self.0 = true;
                        }
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = VisitMut::visit(query, &mut Names(changed));
}

/// `count(...)` -> `CAST(count(...) AS BIGINT)` wherever it appears.
struct CountsAreBigint<'a>(&'a mut bool);

impl VisitorMut for CountsAreBigint<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e {
            if function_name(f) == "count" {
                let inner = std::mem::replace(e, Expr::value(sqlparser::ast::Value::Null));
                *e = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(inner),
                    data_type: DataType::BigInt(None),
                    array: false,
                    format: None,
                };
                *self.0 = true;
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_become_bigint_and_aggregates_get_names() {
        assert_eq!(
            apply("select count(*) from samples").unwrap(),
            "SELECT CAST(count(*) AS BIGINT) AS \"count_star()\" FROM samples"
        );
        assert_eq!(
            apply("select min(time_s), max(time_s) from samples").unwrap(),
            "SELECT min(time_s) AS \"min(time_s)\", max(time_s) AS \"max(time_s)\" FROM samples"
        );
        assert_eq!(
            apply("select funcname, count(*) as n from samples group by funcname order by count(*) desc")
                .unwrap(),
            "SELECT funcname, CAST(count(*) AS BIGINT) AS n FROM samples GROUP BY funcname \
             ORDER BY n DESC"
        );
        // Nothing to change: the text as written.
        assert_eq!(
            apply("select funcname from samples").unwrap(),
            "select funcname from samples"
        );
    }

    #[test]
    fn a_window_over_an_aggregate_is_refused_with_the_rewrite() {
        let e = apply(
            "select funcname, count(*) * 100.0 / sum(count(*)) over () as pct from samples group by funcname",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("sum(count(*)) OVER ()") && e.contains("with t as"),
            "{e}"
        );
        // The working forms are left alone.
        for ok in [
            "with t as (select funcname, count(*) as n from samples group by funcname) \
             select funcname, n * 100.0 / sum(n) over () as pct from t",
            "select sample, row_number() over (order by time_s) from samples",
        ] {
            assert!(apply(ok).is_ok(), "{ok}");
        }
    }
}
