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
//! - `CAST(x AS BIGINT)` truncates a fraction; DuckDB rounds a DOUBLE (ties to even).
//!   A fractional operand is rounded first.
//! - A scalar subquery in a comparison or arithmetic is refused; an uncorrelated one is
//!   run first and replaced by its value (the caller runs it).
//! - ORDER BY a qualified column after GROUP BY, and GROUP BY two qualified columns of
//!   one name, fail to resolve; they go through the SELECT list's names. ORDER BY an
//!   aggregate the SELECT list lacks fails ("lengths don't match") and is refused.

use std::ops::ControlFlow;

use sqlparser::ast::{
    CastKind, DataType, Expr, FunctionArguments, GroupByExpr, Ident, OrderBy, OrderByKind, Query,
    Select, SelectItem, SetExpr, Statement, Visit, VisitMut, Visitor, VisitorMut,
};

use super::ast::{function_name, has_aggregate, is_aggregate, FnVisitor};
use super::error::QueryError;
use super::schema::UNSIGNED_COLUMNS;
use super::wall_time::WallTime;

/// What the rewrites ask of the engine: a scalar subquery's value as a SQL literal,
/// and which output columns of a query are numbers (both None when it does not run).
pub struct Probes<'a> {
    pub scalar: &'a mut dyn FnMut(&str) -> Option<String>,
    pub numeric: &'a mut dyn FnMut(&str) -> Option<Vec<bool>>,
}

/// `sql` with SQL's count type, column names, rounding and division, and the forms
/// polars lacks rewritten (EXISTS, windows over aggregates, hidden ORDER BY aggregates,
/// mixed-direction windows), or why it is refused. The text is parsed as polars parses
/// it; a text that does not parse is returned unchanged (the guard reports the syntax
/// error).
pub fn apply(sql: &str, probes: Probes<'_>) -> Result<String, QueryError> {
    let Probes { scalar, numeric } = probes;
    let Ok(mut statements) = super::ast::parse_statements(sql) else {
        return Ok(sql.to_string());
    };
    let [Statement::Query(query)] = statements.as_mut_slice() else {
        return Ok(sql.to_string());
    };
    let mut changed = false;
    if let ControlFlow::Break(e) = VisitMut::visit(query.as_mut(), &mut WallTime(&mut changed)) {
        return Err(e);
    }
    let with = query.with.as_ref().map(|w| w.to_string());
    let _ = VisitMut::visit(
        query.as_mut(),
        &mut ScalarSubqueries {
            scalar: &mut *scalar,
            changed: &mut changed,
            with,
        },
    );
    changed |= super::correlated::rewrite(query)?;
    changed |= super::exists::rewrite(query, &mut *scalar)?;
    changed |= super::aggregates::rewrite(query, &mut *scalar)?;
    name_aggregates(query, &mut changed);
    changed |= super::grouped::rewrite(query);
    if let ControlFlow::Break(e) = Visit::visit(query.as_ref(), &mut WindowOverAggregate) {
        return Err(e);
    }
    if let ControlFlow::Break(e) = Visit::visit(query.as_ref(), &mut OrderByUnselectedAggregate) {
        return Err(e);
    }
    changed |= super::frames::rewrite(query, &mut *scalar)?;
    changed |= super::windows::rewrite(query, numeric);
    let _ = VisitMut::visit(query.as_mut(), &mut UnsignedArithmetic(&mut changed));
    let _ = VisitMut::visit(query.as_mut(), &mut Arithmetic(&mut changed));
    let _ = VisitMut::visit(query.as_mut(), &mut CountsAreBigint(&mut changed));
    // ORDER BY a count needs no cast (the order is the same), and polars cannot match a
    // cast count in ORDER BY against its aggregates: take those casts off again.
    let _ = VisitMut::visit(query.as_mut(), &mut UncastOrderBy);
    Ok(if changed {
        query.to_string()
    } else {
        sql.to_string()
    })
}

/// A scalar subquery (`x > (select avg(x) from t)`, `n * 1.0 / (select count(*) ...)`)
/// becomes its value, computed first: polars refuses subqueries in comparisons and
/// arithmetic. One that does not run on its own (correlated) or gives more than one row
/// or column is left as written, for polars to refuse.
struct ScalarSubqueries<'a, 'b> {
    scalar: &'a mut dyn FnMut(&str) -> Option<String>,
    changed: &'b mut bool,
    /// The top query's WITH, which a subquery may name (`(select n from totals)`).
    with: Option<String>,
}

impl VisitorMut for ScalarSubqueries<'_, '_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Subquery(q) = e {
            let alone = (self.scalar)(&q.to_string());
            let with_ctes = || match (&self.with, &q.with) {
                (Some(w), None) => Some(format!("{w} {q}")),
                _ => None,
            };
            let value = match alone {
                Some(v) => Some(v),
                None => with_ctes().and_then(|text| (self.scalar)(&text)),
            };
            if let Some(literal) = value {
                if let Ok(value) = super::ast::parse_expr(&literal) {
                    *e = Expr::Nested(Box::new(value));
                    *self.changed = true;
                }
            }
        }
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

/// Refuses ORDER BY an aggregate that the SELECT list does not hold: polars cannot
/// sort by it ("lengths don't match").
struct OrderByUnselectedAggregate;

impl Visitor for OrderByUnselectedAggregate {
    type Break = QueryError;

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<QueryError> {
        let (
            SetExpr::Select(select),
            Some(OrderBy {
                kind: OrderByKind::Expressions(exprs),
                ..
            }),
        ) = (q.body.as_ref(), q.order_by.as_ref())
        else {
            return ControlFlow::Continue(());
        };
        let selected: Vec<String> = select
            .projection
            .iter()
            .filter_map(|item| match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    Some(e.to_string())
                }
                _ => None,
            })
            .collect();
        for o in exprs {
            if has_aggregate(&o.expr) && !selected.contains(&o.expr.to_string()) {
                return ControlFlow::Break(QueryError::Forbidden(format!(
                    "ORDER BY {} sorts by an aggregate that the SELECT list does not hold: \
                     polars cannot sort by it. Select it with a name and order by that, \
                     e.g. `select thread_id, count(*) as n ... order by n desc`",
                    o.expr
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
                // The output name of each SELECT item that polars cannot match again
                // by its expression: an aggregate (it gets a cast below) and a qualified
                // column (`s.funcname`: polars looks for a column "funcname:s" once the
                // query is grouped).
                let named: Vec<(String, Ident)> = select
                    .projection
                    .iter()
                    .filter_map(|item| match item {
                        SelectItem::ExprWithAlias { expr, alias }
                            if has_aggregate(expr)
                                || matches!(expr, Expr::CompoundIdentifier(_)) =>
                        {
                            Some((expr.to_string(), alias.clone()))
                        }
                        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => Some((
                            Expr::CompoundIdentifier(parts.clone()).to_string(),
                            parts.last()?.clone(),
                        )),
                        _ => None,
                    })
                    .collect();
                // ORDER BY one of them: by its name instead.
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
                // GROUP BY two qualified columns of one name (`l.funcname, p.funcname`):
                // polars names both keys "funcname" and fails; group by their aliases.
                // The same for a qualified column selected under another name.
                if let GroupByExpr::Expressions(keys, _) = &mut select.group_by {
                    let last = |e: &Expr| match e {
                        Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()),
                        _ => None,
                    };
                    let names: Vec<Option<String>> = keys.iter().map(last).collect();
                    for (k, key) in keys.iter_mut().enumerate() {
                        let Some(n) = &names[k] else { continue };
                        let shared = names.iter().filter(|m| m.as_ref() == Some(n)).count() > 1;
                        let text = key.to_string();
                        let alias = select.projection.iter().find_map(|item| match item {
                            SelectItem::ExprWithAlias { expr, alias }
                                if expr.to_string() == text =>
                            {
                                Some(alias.clone())
                            }
                            _ => None,
                        });
                        // Also one renamed (`s.funcname as parent`): polars then looks
                        // for "funcname:s" among the grouped columns and fails.
                        if let Some(alias) = alias.filter(|a| shared || a.value != *n) {
                            *key = Expr::Identifier(alias);
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

fn is_integer_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::TinyInt(_)
            | DataType::SmallInt(_)
            | DataType::Int(_)
            | DataType::Integer(_)
            | DataType::BigInt(_)
            | DataType::Int8(_)
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::TinyIntUnsigned(_)
            | DataType::SmallIntUnsigned(_)
            | DataType::IntUnsigned(_)
            | DataType::IntegerUnsigned(_)
            | DataType::BigIntUnsigned(_)
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

/// Functions whose value is fractional.
const FRACTIONAL_FUNCTIONS: [&str; 21] = [
    "avg",
    "mean",
    "median",
    "stddev",
    "stddev_samp",
    "variance",
    "var_samp",
    "quantile_cont",
    "sqrt",
    "cbrt",
    "exp",
    "ln",
    "log",
    "log10",
    "log2",
    "power",
    "pow",
    "random",
    "pi",
    "sin",
    "cos",
];

/// An operand that can hold a fraction, told from the SQL text alone: it uses `time_s`
/// (the tables' only float column), a decimal literal, a division, or a function whose
/// value is fractional. Anything else (booleans, integer columns, text) is cast as
/// written: rounding them would change nothing, or fail.
fn is_fractional(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.visit(&mut FnVisitor(|x: &Expr| {
        found |= match x {
            Expr::Identifier(i) => i.value.eq_ignore_ascii_case("time_s"),
            Expr::CompoundIdentifier(p) => p
                .last()
                .is_some_and(|i| i.value.eq_ignore_ascii_case("time_s")),
            Expr::Value(v) => matches!(
                &v.value,
                sqlparser::ast::Value::Number(n, _) if n.contains(['.', 'e', 'E'])
            ),
            Expr::BinaryOp {
                op: sqlparser::ast::BinaryOperator::Divide,
                ..
            } => true,
            Expr::Function(f) => FRACTIONAL_FUNCTIONS.contains(&function_name(f).as_str()),
            _ => false,
        };
    }));
    found
}

/// `round(e)`: to the nearest integer, ties to even, as DuckDB casts a DOUBLE to an
/// integer (every fraction in these tables is a DOUBLE).
fn rounded(e: &Expr) -> Option<Expr> {
    super::ast::parse_expr(&format!("round({e})")).ok()
}

/// `thread_id` is the one unsigned column SQL sees (`super::signed` keeps it: real ids
/// use all 64 bits), and polars' unsigned arithmetic wraps (`thread_id - 10^15` gave
/// 18445744073709554736 for 3120). An integer operation on it (`+`, `-`, `*`, `%`, `//`,
/// unary minus, `sum`) is computed in 128 bits and cast to BIGINT: the right value, or
/// an error where it does not fit in a signed 64-bit integer, never a wrapped one.
/// Division and `avg` give a DOUBLE and are left alone.
struct UnsignedArithmetic<'a>(&'a mut bool);

fn is_unsigned_column(e: &Expr) -> bool {
    match e {
        Expr::Identifier(i) => UNSIGNED_COLUMNS
            .iter()
            .any(|c| i.value.eq_ignore_ascii_case(c)),
        Expr::CompoundIdentifier(parts) => parts.last().is_some_and(|i| {
            UNSIGNED_COLUMNS
                .iter()
                .any(|c| i.value.eq_ignore_ascii_case(c))
        }),
        Expr::Nested(inner) => is_unsigned_column(inner),
        // An aggregate or window that picks one of the column's values keeps its type.
        Expr::Function(f) if VALUE_PICKERS.contains(&function_name(f).as_str()) => match &f.args {
            FunctionArguments::List(list) => list.args.first().is_some_and(|a| {
                matches!(a, sqlparser::ast::FunctionArg::Unnamed(
                        sqlparser::ast::FunctionArgExpr::Expr(x),
                    ) if is_unsigned_column(x))
            }),
            _ => false,
        },
        _ => false,
    }
}

/// Functions whose value is one of their first argument's values.
const VALUE_PICKERS: [&str; 10] = [
    "min",
    "max",
    "first",
    "last",
    "any_value",
    "mode",
    "lag",
    "lead",
    "first_value",
    "last_value",
];

fn cast_to(e: Expr, data_type: DataType) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(e),
        data_type,
        array: false,
        format: None,
    }
}

fn widen(e: &mut Expr) -> bool {
    if !is_unsigned_column(e) {
        return false;
    }
    let column = std::mem::replace(e, Expr::value(sqlparser::ast::Value::Null));
    *e = cast_to(column, DataType::HugeInt);
    // (A picked value is cast as a whole: `CAST(max(thread_id) AS HUGEINT)`.)
    true
}

impl VisitorMut for UnsignedArithmetic<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        use sqlparser::ast::{BinaryOperator as B, UnaryOperator as U};
        let widened = match e {
            Expr::BinaryOp {
                left,
                op: B::Plus | B::Minus | B::Multiply | B::Modulo | B::DuckIntegerDivide,
                right,
            } => widen(left) | widen(right),
            Expr::UnaryOp { op: U::Minus, expr } => widen(expr),
            Expr::Function(f) if function_name(f) == "sum" => match &mut f.args {
                FunctionArguments::List(list) => list.args.iter_mut().fold(false, |w, a| {
                    w | match a {
                        sqlparser::ast::FunctionArg::Unnamed(
                            sqlparser::ast::FunctionArgExpr::Expr(x),
                        ) => widen(x),
                        _ => false,
                    }
                }),
                _ => false,
            },
            _ => false,
        };
        if widened {
            let wide = std::mem::replace(e, Expr::value(sqlparser::ast::Value::Null));
            *e = cast_to(Expr::Nested(Box::new(wide)), DataType::BigInt(None));
            *self.0 = true;
        }
        ControlFlow::Continue(())
    }
}

/// Rounding and integer division as SQL does them (DuckDB, PostgreSQL):
/// - `round(x)` and `round(x, n)` round half away from zero (2.5 -> 3, -2.5 -> -3);
///   polars' `round` rounds half to even. `round(x, n)` is `r(x * 10^n) / 10^n` (for a
///   negative n, `r(x / 10^-n) * 10^-n`), as DuckDB computes it on a DOUBLE, with
///   `r(y) = sign(y) * (floor(|y|) + (|y| - floor(|y|) >= 0.5))`, exact for every
///   double (`y - floor(y)` has no rounding error).
/// - `a // b` on integers truncates towards zero (-7 // 2 = -3); polars floors (-4).
///   DuckDB's `//` on a fraction is plain division (-7.5 // 2 = -3.75).
struct Arithmetic<'a>(&'a mut bool);

fn parsed(text: &str) -> Option<Expr> {
    super::ast::parse_expr(text).ok()
}

/// `round(x, n)` half away from zero, as SQL text.
fn round_half_away(x: &Expr, places: i64) -> Option<String> {
    if places.unsigned_abs() > 22 {
        // 10^n is no longer an exact double: leave it to polars (which refuses n < 0).
        return None;
    }
    let scale = format!("{}.0", 10u128.pow(places.unsigned_abs() as u32));
    let y = match places {
        0 => format!("({x})"),
        p if p > 0 => format!("(({x}) * {scale})"),
        _ => format!("(({x}) / {scale})"),
    };
    let r = format!(
        "(sign({y}) * (floor(abs({y})) + CASE WHEN abs({y}) - floor(abs({y})) >= 0.5 \
         THEN 1 ELSE 0 END))"
    );
    Some(match places {
        0 => r,
        p if p > 0 => format!("({r} / {scale})"),
        _ => format!("({r} * {scale})"),
    })
}

/// `round(literal, n)` computed exactly on the literal's decimal digits, half away from
/// zero: DuckDB reads `2.345` as a DECIMAL, so `round(2.345, 2)` is 2.35, while the
/// DOUBLE nearest 2.345 is below it and rounds to 2.34.
fn round_literal(x: &Expr, places: i64) -> Option<String> {
    let (negative, text) = match x {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::Number(n, _) => (false, n.clone()),
            _ => return None,
        },
        Expr::UnaryOp {
            op: sqlparser::ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                sqlparser::ast::Value::Number(n, _) => (true, n.clone()),
                _ => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    if text.contains(['e', 'E']) || !(-18..=18).contains(&places) {
        return None;
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let digits = format!("{whole}{fraction}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 36 {
        return None;
    }
    // The value is digits * 10^-scale; keep digits down to 10^-places.
    let scale = fraction.len() as i64;
    let drop = scale - places;
    let value: u128 = digits.parse().ok()?;
    let kept = if drop <= 0 {
        value
    } else {
        let unit = 10u128.checked_pow(u32::try_from(drop).ok()?)?;
        let (q, r) = (value / unit, value % unit);
        q + u128::from(r * 2 >= unit)
    };
    // kept * 10^-(scale - drop) = kept * 10^-min(scale, places)
    let exponent = scale.min(places);
    let magnitude = if exponent >= 0 {
        let s = format!("{kept:0>width$}", width = exponent as usize + 1);
        let (w, f) = s.split_at(s.len() - exponent as usize);
        if f.is_empty() {
            w.to_string()
        } else {
            format!("{w}.{f}")
        }
    } else {
        format!("{kept}{}", "0".repeat(exponent.unsigned_abs() as usize))
    };
    let zero = magnitude.bytes().all(|b| b == b'0' || b == b'.');
    Some(if negative && !zero {
        format!("-{magnitude}")
    } else {
        magnitude
    })
}

/// An integer literal argument (`2`, `-1`).
fn integer_literal(e: &Expr) -> Option<i64> {
    match e {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: sqlparser::ast::UnaryOperator::Minus,
            expr,
        } => integer_literal(expr).map(|n: i64| -n),
        Expr::Nested(inner) => integer_literal(inner),
        _ => None,
    }
}

impl VisitorMut for Arithmetic<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let replacement = match e {
            Expr::Function(f) if f.over.is_none() && function_name(f) == "round" => {
                let FunctionArguments::List(list) = &f.args else {
                    return ControlFlow::Continue(());
                };
                let args: Vec<&Expr> = list
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        sqlparser::ast::FunctionArg::Unnamed(
                            sqlparser::ast::FunctionArgExpr::Expr(e),
                        ) => Some(e),
                        _ => None,
                    })
                    .collect();
                match (args.as_slice(), list.args.len()) {
                    ([x], 1) => round_literal(x, 0).or_else(|| round_half_away(x, 0)),
                    ([x, n], 2) => integer_literal(n)
                        .and_then(|n| round_literal(x, n).or_else(|| round_half_away(x, n))),
                    _ => None,
                }
            }
            Expr::BinaryOp {
                left,
                op: sqlparser::ast::BinaryOperator::DuckIntegerDivide,
                right,
            } => Some(if is_fractional(left) || is_fractional(right) {
                format!("(({left}) / ({right}))")
            } else {
                // polars' `//` floors; truncation differs when the signs differ and
                // the division leaves a remainder.
                format!(
                    "(CASE WHEN ({left}) % ({right}) <> 0 AND (({left}) < 0) <> (({right}) < 0) \
                     THEN ({left}) // ({right}) + 1 ELSE ({left}) // ({right}) END)"
                )
            }),
            Expr::BinaryOp {
                left,
                op: sqlparser::ast::BinaryOperator::Modulo,
                right,
            } => Some(format!(
                // polars' `%` takes the sign of the divisor (-7 % 2 = 1); SQL's
                // remainder takes the dividend's (-1).
                "(CASE WHEN ({left}) % ({right}) <> 0 AND (({left}) < 0) <> (({right}) < 0) \
                 THEN ({left}) % ({right}) - ({right}) ELSE ({left}) % ({right}) END)"
            )),
            _ => None,
        };
        if let Some(new) = replacement.as_deref().and_then(parsed) {
            *e = new;
            *self.0 = true;
        }
        ControlFlow::Continue(())
    }
}

/// `count(...)` -> `CAST(count(...) AS BIGINT)` wherever it appears.
struct CountsAreBigint<'a>(&'a mut bool);

impl VisitorMut for CountsAreBigint<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        // CAST of a DOUBLE to an integer rounds in DuckDB (ties to even), Trino and
        // PostgreSQL; polars truncates (0.6 -> 0). A fractional operand is rounded first.
        if let Expr::Cast {
            kind: CastKind::Cast | CastKind::TryCast | CastKind::DoubleColon,
            expr,
            data_type,
            ..
        } = e
        {
            if is_integer_type(data_type) && is_fractional(expr) {
                if let Some(r) = rounded(expr) {
                    **expr = r;
                    *self.0 = true;
                }
            }
            return ControlFlow::Continue(());
        }
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

/// `CAST(count(...) AS BIGINT)` -> `count(...)` in ORDER BY.
struct UncastOrderBy;

impl VisitorMut for UncastOrderBy {
    type Break = ();
    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        if let Some(OrderBy {
            kind: OrderByKind::Expressions(exprs),
            ..
        }) = q.order_by.as_mut()
        {
            for o in exprs.iter_mut() {
                let _ = VisitMut::visit(&mut o.expr, &mut UncastCounts);
            }
        }
        ControlFlow::Continue(())
    }
}

struct UncastCounts;

impl VisitorMut for UncastCounts {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Cast {
            expr,
            data_type: DataType::BigInt(None),
            ..
        } = e
        {
            if matches!(expr.as_ref(), Expr::Function(f) if function_name(f) == "count") {
                *e = std::mem::replace(expr.as_mut(), Expr::value(sqlparser::ast::Value::Null));
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_plain(sql: &str) -> Result<String, QueryError> {
        apply(
            sql,
            Probes {
                scalar: &mut |_| None,
                numeric: &mut |_| None,
            },
        )
    }

    #[test]
    fn counts_become_bigint_and_aggregates_get_names() {
        assert_eq!(
            apply_plain("select count(*) from samples").unwrap(),
            "SELECT CAST(count(*) AS BIGINT) AS \"count_star()\" FROM samples"
        );
        assert_eq!(
            apply_plain("select min(time_s), max(time_s) from samples").unwrap(),
            "SELECT min(time_s) AS \"min(time_s)\", max(time_s) AS \"max(time_s)\" FROM samples"
        );
        assert_eq!(
            apply_plain("select funcname, count(*) as n from samples group by funcname order by count(*) desc")
                .unwrap(),
            "SELECT funcname, CAST(count(*) AS BIGINT) AS n FROM samples GROUP BY funcname \
             ORDER BY n DESC"
        );
        // Nothing to change: the text as written.
        assert_eq!(
            apply_plain("select funcname from samples").unwrap(),
            "select funcname from samples"
        );
    }

    #[test]
    fn a_window_over_an_aggregate_runs_over_the_grouped_rows() {
        let out = apply_plain(
            "select funcname, count(*) * 100.0 / sum(count(*)) over () as pct from samples group by funcname",
        )
        .unwrap();
        assert!(
            out.contains("FROM (SELECT funcname AS __tach_k0, CAST(count(*) AS BIGINT) AS __tach_a0 FROM samples GROUP BY __tach_k0) AS __tach_grouped")
                && out.contains("__tach_a0 * 100.0 / sum(__tach_a0) OVER ()"),
            "{out}"
        );
        // The working forms are left alone.
        for ok in [
            "with t as (select funcname, count(*) as n from samples group by funcname) \
             select funcname, n * 100.0 / sum(n) over () as pct from t",
            "select sample, row_number() over (order by time_s) from samples",
        ] {
            assert!(!apply_plain(ok).unwrap().contains("__tach"), "{ok}");
        }
    }

    #[test]
    fn rounding_and_remainders_follow_sql() {
        let out =
            apply_plain("select round(2.345, 2), round(-2.5), round(x, 1), -7 % 2 from t").unwrap();
        assert!(out.contains("2.35") && out.contains("-3"), "{out}");
        assert!(out.contains("FLOOR(abs(((x) * 10.0)))"), "{out}");
        assert!(!out.contains("round("), "{out}");
    }

    #[test]
    fn unsigned_thread_ids_are_widened_in_integer_arithmetic() {
        let out = apply_plain(
            "select thread_id - 5, -s.thread_id, sum(thread_id), thread_id / 2, \
             min(thread_id) - max(thread_id), thread_id from samples s",
        )
        .unwrap();
        assert!(
            out.contains("CAST((CAST(thread_id AS HUGEINT) - 5) AS BIGINT)"),
            "{out}"
        );
        assert!(
            out.contains("CAST((-CAST(s.thread_id AS HUGEINT)) AS BIGINT)"),
            "{out}"
        );
        assert!(
            out.contains("CAST((sum(CAST(thread_id AS HUGEINT))) AS BIGINT)"),
            "{out}"
        );
        assert!(
            out.contains("thread_id / 2") && out.ends_with("thread_id FROM samples s"),
            "{out}"
        );
    }
}
