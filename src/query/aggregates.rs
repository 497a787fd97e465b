//! Aggregates and functions that analysts write and polars' SQL lacks, written as ones
//! it has, with DuckDB's answers:
//!
//! - `var_pop`, `stddev_pop`: the sample variance times (n - 1) / n (0 for one value,
//!   NULL for none);
//! - `bool_or`, `bool_and`: `max`, `min` of the boolean as an integer (NULLs skipped);
//! - `percentile_cont(f) WITHIN GROUP (ORDER BY x)`: `quantile_cont(x, f)` (1 - f for
//!   a descending order); `percentile_disc` likewise with `quantile_disc`;
//! - `round(x, n)` with a non-literal `n`: `round(x * 10^n) / 10^n`, which the rounding
//!   rewrite then rounds half away from zero.
//!
//! GROUP BY ROLLUP, CUBE and GROUPING SETS are refused here with one sentence (polars'
//! own message would print the parser's syntax tree).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Query, Select,
    SelectItem, SetExpr, Value, Visit, VisitMut, Visitor, VisitorMut,
};

use super::ast::{call_args, function_name, has_aggregate, parse_expr};
use super::QueryError;

/// Rewrites the aggregates of `query` polars lacks; refuses grouping sets.
pub fn rewrite(query: &mut Query) -> Result<bool, QueryError> {
    if let ControlFlow::Break(e) = Visit::visit(&*query, &mut GroupingSets) {
        return Err(e);
    }
    let mut names = Names { changed: false };
    let _ = VisitMut::visit(query, &mut names);
    let mut calls = Calls {
        changed: false,
        error: None,
    };
    let _ = VisitMut::visit(query, &mut calls);
    match calls.error {
        Some(e) => Err(e),
        None => Ok(calls.changed || names.changed),
    }
}

struct GroupingSets;

impl Visitor for GroupingSets {
    type Break = QueryError;
    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<QueryError> {
        let (exprs, modifiers) = match &select.group_by {
            GroupByExpr::All(m) => (&[][..], m),
            GroupByExpr::Expressions(e, m) => (&e[..], m),
        };
        let form = if !modifiers.is_empty() {
            Some("GROUP BY ... WITH ROLLUP/CUBE/TOTALS")
        } else {
            exprs.iter().find_map(|e| match e {
                Expr::Rollup(_) => Some("GROUP BY ROLLUP (...)"),
                Expr::Cube(_) => Some("GROUP BY CUBE (...)"),
                Expr::GroupingSets(_) => Some("GROUP BY GROUPING SETS (...)"),
                _ => None,
            })
        };
        if let Some(form) = form {
            return ControlFlow::Break(QueryError::Forbidden(format!(
                "{form} is not supported: write one GROUP BY per grouping and combine them with UNION ALL, with NULL for the columns a grouping leaves out"
            )));
        }
        // Over an aggregate, polars reads the column n as the group's list of values,
        // so round(agg, n) would not be a number there.
        let mut found = false;
        let _ = Visit::visit(select, &mut FindColumnRound(&mut found));
        if found {
            return ControlFlow::Break(QueryError::Forbidden(
                "round(x, n) of an aggregate with a column for n is not supported: round in an outer query (select round(a, n) from (select avg(x) as a, ... group by ...))".to_string(),
            ));
        }
        ControlFlow::Continue(())
    }
}

/// Finds a `round(x, n)` of an aggregate `x` whose `n` is not a literal number.
struct FindColumnRound<'a>(&'a mut bool);

impl Visitor for FindColumnRound<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e {
            if function_name(f) == "round" {
                if let FunctionArguments::List(list) = &f.args {
                    if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(x)), FunctionArg::Unnamed(FunctionArgExpr::Expr(n))] =
                        &list.args[..]
                    {
                        if !is_literal_number(n) && has_aggregate(x) {
                            *self.0 = true;
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Names for the unaliased SELECT items whose calls get rewritten, as the written
/// call would be named.
struct Names {
    changed: bool,
}

impl VisitorMut for Names {
    type Break = ();
    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        let SetExpr::Select(select) = q.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        for item in select.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(e) = item {
                let mut found = false;
                let _ = Visit::visit(&*e, &mut FindRewritten(&mut found));
                if found {
                    *item = SelectItem::ExprWithAlias {
                        alias: sqlparser::ast::Ident::with_quote('"', e.to_string()),
                        expr: e.clone(),
                    };
                    self.changed = true;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

struct FindRewritten<'a>(&'a mut bool);

impl Visitor for FindRewritten<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e {
            if f.over.is_none() && replacement(f).is_some() {
                *self.0 = true;
            }
        }
        ControlFlow::Continue(())
    }
}

struct Calls {
    changed: bool,
    error: Option<QueryError>,
}

impl VisitorMut for Calls {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = e else {
            return ControlFlow::Continue(());
        };
        if f.over.is_some() {
            return ControlFlow::Continue(());
        }
        match replacement(f) {
            Some(Ok(new)) => {
                *e = new;
                self.changed = true;
                ControlFlow::Continue(())
            }
            Some(Err(err)) => {
                self.error = Some(err);
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    }
}

/// The argument expressions of a plain call (no DISTINCT, no clauses), as SQL text.
/// The call's expression arguments as SQL text; None for any other form (`*` too).
fn plain_args(f: &Function) -> Option<Vec<String>> {
    call_args(f).filter(|args| !args.is_empty() && args.iter().all(|a| a != "*"))
}

fn parse(text: &str) -> Result<Expr, QueryError> {
    parse_expr(text).map_err(|e| QueryError::Sql {
        message: format!("internal rewrite of an aggregate failed: {e}"),
    })
}

fn refuse(what: String) -> QueryError {
    QueryError::Forbidden(what)
}

fn is_literal_number(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(v.value, Value::Number(..)),
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => is_literal_number(expr),
        _ => false,
    }
}

/// The call polars runs in place of `f`, None when polars runs `f` as written.
fn replacement(f: &Function) -> Option<Result<Expr, QueryError>> {
    let name = function_name(f);
    let call = f.to_string();
    let var_pop = |x: &str| {
        format!(
            "CASE WHEN count({x}) = 1 THEN 0.0 ELSE var_samp({x}) * (count({x}) - 1) / count({x}) END"
        )
    };
    // FILTER (WHERE c) on a rewritten aggregate: its argument is NULL where c does not
    // hold, which every one of them skips, as SQL's FILTER does.
    let filtered = |x: String| match &f.filter {
        Some(cond) => format!("(CASE WHEN {cond} THEN {x} END)"),
        None => x,
    };
    let text = match name.as_str() {
        "var_pop" | "stddev_pop" => {
            let [x] = plain_args(f)?.try_into().ok()?;
            let x = filtered(x);
            if name == "var_pop" {
                var_pop(&x)
            } else {
                format!("sqrt({})", var_pop(&x))
            }
        }
        "bool_or" | "bool_and" => {
            let [x] = plain_args(f)?.try_into().ok()?;
            let x = filtered(x);
            let pick = if name == "bool_or" { "max" } else { "min" };
            format!("({pick}(CAST({x} AS INTEGER)) = 1)")
        }
        "percentile_cont" | "percentile_disc" => {
            let [fraction] = plain_args(f)?.try_into().ok()?;
            let [order] = f.within_group.as_slice() else {
                return Some(Err(refuse(format!(
                    "`{call}` needs WITHIN GROUP (ORDER BY x) with one key: or write quantile_cont(x, 0.5)"
                ))));
            };
            let quantile = if name == "percentile_cont" {
                "quantile_cont"
            } else {
                "quantile_disc"
            };
            // Descending order is the ascending quantile at 1 - fraction; polars takes
            // only a literal fraction, so it is computed here.
            let fraction = if order.options.asc.unwrap_or(true) {
                fraction
            } else {
                match fraction.trim_matches(|c| c == '(' || c == ')').trim().parse::<f64>() {
                    Ok(v) => format!("{}", 1.0 - v),
                    Err(_) => {
                        return Some(Err(refuse(format!(
                            "`{call}` with ORDER BY ... DESC needs a literal fraction: or order ascending at 1 - fraction"
                        ))))
                    }
                }
            };
            let x = filtered(order.expr.to_string());
            format!("{quantile}({x}, {fraction})")
        }
        "round" => {
            let [x, places] = plain_args(f)?.try_into().ok()?;
            let FunctionArguments::List(list) = &f.args else {
                return None;
            };
            match &list.args[1] {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) if !is_literal_number(e) => {
                    format!("round({x} * power(10.0, {places})) / power(10.0, {places})")
                }
                _ => return None,
            }
        }
        "corr" if f.filter.is_none() => {
            // DuckDB's corr is NaN where a variance is 0 (polars gives NULL there).
            let [x, y] = plain_args(f)?.try_into().ok()?;
            let both = |v: &str| format!("(CASE WHEN {x} IS NOT NULL AND {y} IS NOT NULL THEN {v} END)");
            let (bx, by) = (both(&x), both(&y));
            format!(
                "CASE WHEN count({bx}) > 0 AND ({vx} = 0 OR {vy} = 0) THEN (0.0 / 0.0) ELSE corr({x}, {y}) END",
                vx = var_pop(&bx),
                vy = var_pop(&by)
            )
        }
        "mode" | "arg_max" | "arg_min" | "max_by" | "min_by" => {
            return Some(Err(refuse(format!(
                "`{name}` is not supported: rank the rows with row_number() over (partition by ... order by ...) in a subquery and keep the first"
            ))))
        }
        _ => return None,
    };
    Some(parse(&text))
}
