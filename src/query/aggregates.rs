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
//! - `round(agg, n)` in a grouped SELECT: `n` is the group's (`first(n)`);
//! - `arg_max(x, y)` (`arg_min`, `max_by`, `min_by`): the `x` of the first row whose `y`
//!   is the largest, rows with a NULL skipped;
//! - `mode(x)`: each value's count in its group, a window in a subquery over the one
//!   FROM item, and the first row with the largest count; a tie is refused.
//!
//! GROUP BY ROLLUP, CUBE and GROUPING SETS are expanded first (`grouping_sets`).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Query, Select,
    SelectItem, SetExpr, Value, Visit, VisitMut, Visitor, VisitorMut,
};

use sqlparser::ast::{visit_expressions_mut, TableFactor};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::ast::{call_args, function_name, has_aggregate, parse_expr, FnVisitor};
use super::error::QueryError;

/// Rewrites the aggregates of `query` polars lacks; refuses grouping sets.
pub fn rewrite(
    query: &mut Query,
    scalar: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<bool, QueryError> {
    let mut grouped = super::grouping_sets::rewrite(query)?;
    let mut modes = Modes {
        scalar,
        changed: false,
        error: None,
    };
    let _ = VisitMut::visit(query, &mut modes);
    if let Some(e) = modes.error {
        return Err(e);
    }
    grouped |= modes.changed;
    let _ = VisitMut::visit(query, &mut GroupedRoundPlaces(&mut grouped));
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
        None => Ok(grouped || calls.changed || names.changed),
    }
}

struct GroupingSets;

impl Visitor for GroupingSets {
    type Break = QueryError;
    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<QueryError> {
        let (GroupByExpr::All(modifiers) | GroupByExpr::Expressions(_, modifiers)) =
            &select.group_by;
        if !modifiers.is_empty() {
            return ControlFlow::Break(QueryError::Forbidden(
                "GROUP BY ... WITH ROLLUP/CUBE/TOTALS is not supported: write GROUP BY ROLLUP (...) or GROUPING SETS (...)".to_string(),
            ));
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

/// `mode(x)`: each row of the SELECT's one FROM item gets the number of rows of its
/// group with its `x` (a window in a subquery that also takes the WHERE), and `mode(x)`
/// becomes the `x` of the group's first row with the largest number, NULLs skipped:
/// DuckDB's answer, whose ties go to the value seen first.
struct Modes<'a> {
    /// Runs a query of one value (None: it does not run), to learn whether a group's
    /// commonest value is tied.
    scalar: &'a mut dyn FnMut(&str) -> Option<String>,
    changed: bool,
    error: Option<QueryError>,
}

impl VisitorMut for Modes<'_> {
    type Break = ();
    fn post_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        match modes(select, &mut *self.scalar) {
            Ok(changed) => {
                self.changed |= changed;
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

/// The `mode(...)` calls of one SELECT (not of its subqueries), rewritten.
fn modes(
    select: &mut Select,
    scalar: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<bool, QueryError> {
    let mut calls: Vec<Function> = Vec::new();
    let mut collect = |e: &Expr| {
        if let Expr::Function(f) = e {
            if f.over.is_none() && function_name(f) == "mode" && !calls.contains(f) {
                calls.push(f.clone());
            }
        }
    };
    for item in &select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let _ = e.visit(&mut FnVisitor(&mut collect));
        }
    }
    if let Some(h) = &select.having {
        let _ = h.visit(&mut FnVisitor(&mut collect));
    }
    if calls.is_empty() {
        return Ok(false);
    }
    let unsupported = |f: &Function| {
        refuse(format!(
            "`{f}` is supported over one table (or subquery) with one plain argument: compute it in a subquery over one table"
        ))
    };
    let [from] = select.from.as_slice() else {
        return Err(unsupported(&calls[0]));
    };
    if !from.joins.is_empty() {
        return Err(unsupported(&calls[0]));
    }
    let alias = match &from.relation {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            a.name.to_string()
        }
        TableFactor::Table { name, .. } => match name.0.last() {
            Some(part) => part.to_string(),
            None => return Err(unsupported(&calls[0])),
        },
        _ => return Err(unsupported(&calls[0])),
    };
    // The GROUP BY keys as the FROM item's rows have them (a SELECT alias stands for
    // its expression).
    let keys: Vec<String> = match &select.group_by {
        GroupByExpr::Expressions(exprs, _) => exprs
            .iter()
            .map(|k| {
                if let Expr::Identifier(id) = k {
                    for item in &select.projection {
                        if let SelectItem::ExprWithAlias { expr, alias } = item {
                            if alias.value == id.value {
                                return format!("({expr})");
                            }
                        }
                    }
                }
                format!("({k})")
            })
            .collect(),
        GroupByExpr::All(_) => return Err(unsupported(&calls[0])),
    };
    let mut columns = Vec::new();
    let mut replacements = Vec::new();
    for (i, f) in calls.iter().enumerate() {
        let Some([x]) = plain_args(f).and_then(|a| <[String; 1]>::try_from(a).ok()) else {
            return Err(unsupported(f));
        };
        let x_counted = match &f.filter {
            Some(cond) => format!("CASE WHEN {cond} THEN {x} END"),
            None => x.clone(),
        };
        let partition: Vec<String> = keys.iter().cloned().chain([x.clone()]).collect();
        let n = format!("__tach_mode_{i}");
        columns.push(format!(
            "count({x_counted}) OVER (PARTITION BY {}) AS {n}",
            partition.join(", ")
        ));
        let counted = format!("({x_counted}) IS NOT NULL");
        replacements.push((
            f.clone(),
            parse(&format!(
                "array_get(array_agg({x}) FILTER (WHERE {counted} AND {n} = max(CASE WHEN {counted} THEN {n} END)), 1)"
            ))?,
        ));
    }
    // DuckDB breaks a tie between values of the same count by an order that depends
    // on how it scanned (not the rows' order): a tied mode is refused.
    let filter_text = select
        .selection
        .as_ref()
        .map_or(String::new(), |c| format!("({c}) AND "));
    for f in &calls {
        let Some([x]) = plain_args(f).and_then(|a| <[String; 1]>::try_from(a).ok()) else {
            return Err(unsupported(f));
        };
        let counted = match &f.filter {
            Some(cond) => format!("({cond}) AND "),
            None => String::new(),
        };
        let group_items: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{k} AS __tach_g{i}"))
            .collect();
        let group_names: Vec<String> = (0..keys.len()).map(|i| format!("__tach_g{i}")).collect();
        let by_value: Vec<String> = keys.iter().cloned().chain([x.clone()]).collect();
        let partition = if group_names.is_empty() {
            String::new()
        } else {
            format!("PARTITION BY {}", group_names.join(", "))
        };
        let tied_groups = if group_names.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {}", group_names.join(", "))
        };
        let probe = format!(
            "SELECT max(__tach_k) FROM (SELECT count(*) AS __tach_k FROM (SELECT *, max(__tach_n) OVER ({partition}) AS __tach_top FROM (SELECT {items}count(*) AS __tach_n FROM {from} WHERE {filter_text}{counted}{x} IS NOT NULL GROUP BY {by}) AS __tach_c) AS __tach_t WHERE __tach_n = __tach_top{tied_groups}) AS __tach_ties",
            items = group_items.iter().map(|g| format!("{g}, ")).collect::<String>(),
            from = from.relation,
            by = by_value.join(", "),
        );
        let tied =
            scalar(&probe).is_none_or(|v| v != "NULL" && v.parse::<i64>().map_or(true, |n| n > 1));
        if tied {
            return Err(refuse(format!(
                "`{f}` has values tied for the commonest here, which DuckDB breaks by its scan order: break the tie yourself (count per value in a subquery and order by the count and the value)"
            )));
        }
    }
    let filter = select
        .selection
        .take()
        .map_or(String::new(), |c| format!(" WHERE {c}"));
    let derived = format!(
        "SELECT 1 FROM (SELECT *, {} FROM {}{filter}) AS {alias}",
        columns.join(", "),
        from.relation
    );
    let parsed = Parser::new(&GenericDialect)
        .try_with_sql(&derived)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| QueryError::Sql {
            message: format!("internal rewrite of mode() failed: {e}"),
        })?;
    let SetExpr::Select(inner) = *parsed.body else {
        return Err(unsupported(&calls[0]));
    };
    select.from = inner.from;
    let swap = |e: &mut Expr| {
        if let Expr::Function(f) = e {
            if let Some((_, new)) = replacements.iter().find(|(old, _)| old == f) {
                *e = new.clone();
            }
        }
    };
    for item in select.projection.iter_mut() {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let name = e.to_string();
                let _ = visit_expressions_mut(e, |x| {
                    swap(x);
                    ControlFlow::<()>::Continue(())
                });
                if e.to_string() == name {
                    continue;
                }
                *item = SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: sqlparser::ast::Ident::with_quote('"', name),
                };
            }
            SelectItem::ExprWithAlias { expr, .. } => {
                let _ = visit_expressions_mut(expr, |x| {
                    swap(x);
                    ControlFlow::<()>::Continue(())
                });
            }
            _ => {}
        }
    }
    if let Some(h) = select.having.as_mut() {
        let _ = visit_expressions_mut(h, |x| {
            swap(x);
            ControlFlow::<()>::Continue(())
        });
    }
    Ok(true)
}

/// In a grouped SELECT, `round(agg, n)` with `n` over the group's keys takes `n`'s
/// value for the group (`first(n)`): polars reads a bare column there as the group's
/// list of values. SQL allows only keys (or aggregates) there, so every row of the
/// group has the same `n`.
struct GroupedRoundPlaces<'a>(&'a mut bool);

impl VisitorMut for GroupedRoundPlaces<'_> {
    type Break = ();
    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        let grouped = matches!(&select.group_by, GroupByExpr::Expressions(e, _) if !e.is_empty());
        if !grouped {
            return ControlFlow::Continue(());
        }
        let mut wrap = WrapPlaces(&mut *self.0);
        for item in select.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                let _ = VisitMut::visit(e, &mut wrap);
            }
        }
        if let Some(h) = select.having.as_mut() {
            let _ = VisitMut::visit(h, &mut wrap);
        }
        ControlFlow::Continue(())
    }
}

struct WrapPlaces<'a>(&'a mut bool);

impl VisitorMut for WrapPlaces<'_> {
    type Break = ();
    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        // A subquery's SELECT is visited on its own.
        ControlFlow::Break(())
    }
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = e else {
            return ControlFlow::Continue(());
        };
        if function_name(f) != "round" || f.over.is_some() {
            return ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &mut f.args else {
            return ControlFlow::Continue(());
        };
        if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(x)), FunctionArg::Unnamed(FunctionArgExpr::Expr(n))] =
            &mut list.args[..]
        {
            if has_aggregate(x) && !is_literal_number(n) && !has_aggregate(n) {
                if let Ok(first) = parse_expr(&format!("first({n})")) {
                    *n = first;
                    *self.0 = true;
                }
            }
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
                        if !is_literal_number(n) && has_aggregate(x) && !has_aggregate(n) {
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
        "arg_max" | "arg_min" | "max_by" | "min_by" => {
            // DuckDB's answer: the x of the first row (in the rows' order) whose y is the
            // largest (smallest), among the rows where neither is NULL.
            let [x, y] = plain_args(f)?.try_into().ok()?;
            let both = format!("{x} IS NOT NULL AND {y} IS NOT NULL");
            let both = match &f.filter {
                Some(cond) => format!("({cond}) AND {both}"),
                None => both,
            };
            let pick = if name == "arg_max" || name == "max_by" {
                "max"
            } else {
                "min"
            };
            format!(
                "array_get(array_agg({x}) FILTER (WHERE {both} AND {y} = {pick}(CASE WHEN {both} THEN {y} END)), 1)"
            )
        }
        "mode" => {
            return Some(Err(refuse(format!(
                "`{call}` is supported over one table (or subquery) with plain arguments: compute it in a subquery over one table"
            ))))
        }
        _ => return None,
    };
    Some(parse(&text))
}
