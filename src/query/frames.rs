//! Window functions as SQL computes them (DuckDB is the reference), where polars' SQL
//! would give another answer or none.
//!
//! polars reads a window's ORDER BY but not its frame: `sum`, `count`, `min` and `max`
//! with an ORDER BY run cumulatively, `avg` and the others run over the whole partition,
//! `first_value` takes the partition's first row and `last_value` the current row,
//! whatever frame is written. So every windowed call is classified by its frame and
//! either rewritten into calls whose polars answer is SQL's, or refused with one
//! sentence:
//!
//! - a frame over the whole partition drops the ORDER BY of an aggregate (its value is
//!   the partition's) and turns `last_value` into `first_value` of the reversed order;
//! - a running frame (the default with an ORDER BY) keeps polars' cumulative `sum`,
//!   `count`, `min`, `max` and `first_value`; `avg` becomes a running sum over a running
//!   count;
//! - a frame of N preceding to M following rows becomes the rows it holds, each a
//!   `lag`/`lead`, combined as the aggregate combines them (NULLs skipped, NULL when
//!   none is left), with `row_number()` and the partition's size for the rows that
//!   exist;
//! - `lag`/`lead` with a default, `ntile`, `percent_rank` and `cume_dist` are built from
//!   `row_number()`, `rank()` and the partition's size; `FILTER (WHERE c)` on a window
//!   aggregate becomes a CASE inside it;
//! - `nth_value(x, k)` is the partition's k-th row where the frame reaches it (refused
//!   when the ORDER BY repeats, which leaves the k-th row undefined).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Query, SelectItem, SetExpr,
    Value, VisitMut, VisitorMut, WindowFrame, WindowFrameBound, WindowFrameUnits, WindowSpec,
    WindowType,
};

use super::ast::{call_args, function_name, parse_expr};
use super::error::QueryError;

/// Functions whose value does not depend on a frame (SQL ignores theirs).
const FRAMELESS: [&str; 8] = [
    "row_number",
    "rank",
    "dense_rank",
    "ntile",
    "percent_rank",
    "cume_dist",
    "lag",
    "lead",
];

/// Aggregates polars computes cumulatively over an ordered window.
const CUMULATIVE: [&str; 4] = ["sum", "count", "min", "max"];

/// The widest frame of N preceding to M following rows written out row by row.
const MAX_FRAME_ROWS: i64 = 100;

/// Rewrites the windowed calls of every SELECT of `query`. `scalar` runs a query of
/// one value (None: it does not run), to learn whether a running window's ORDER BY
/// has ties.
pub fn rewrite(
    query: &mut Query,
    scalar: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<bool, QueryError> {
    let mut each = Each {
        changed: false,
        error: None,
        top_with: query.with.as_ref().map(|w| w.to_string()),
        scalar,
    };
    let _ = VisitMut::visit(query, &mut each);
    match each.error {
        Some(e) => Err(e),
        None => Ok(each.changed),
    }
}

struct Each<'a> {
    changed: bool,
    error: Option<QueryError>,
    /// The top query's WITH, which a SELECT's FROM may name.
    top_with: Option<String>,
    scalar: &'a mut dyn FnMut(&str) -> Option<String>,
}

impl VisitorMut for Each<'_> {
    type Break = ();
    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        let with = q
            .with
            .as_ref()
            .map(|w| w.to_string())
            .or_else(|| self.top_with.clone());
        let mut selects = vec![q.body.as_mut()];
        while let Some(body) = selects.pop() {
            match body {
                SetExpr::SetOperation { left, right, .. } => {
                    selects.push(left.as_mut());
                    selects.push(right.as_mut());
                }
                SetExpr::Select(select) => {
                    let from: Vec<String> = select.from.iter().map(|t| t.to_string()).collect();
                    let context = Rows {
                        with: with.clone(),
                        from: (!from.is_empty()).then(|| from.join(", ")),
                        selection: select.selection.as_ref().map(|e| e.to_string()),
                    };
                    for item in select.projection.iter_mut() {
                        let (SelectItem::UnnamedExpr(e)
                        | SelectItem::ExprWithAlias { expr: e, .. }) = item
                        else {
                            continue;
                        };
                        let before = e.clone();
                        if !self.fix(e, &context) {
                            return ControlFlow::Break(());
                        }
                        if *e != before {
                            // The rewritten expression keeps the written one's name.
                            if let SelectItem::UnnamedExpr(e) = item {
                                *item = SelectItem::ExprWithAlias {
                                    expr: e.clone(),
                                    alias: sqlparser::ast::Ident::with_quote(
                                        '"',
                                        before.to_string(),
                                    ),
                                };
                            }
                        }
                    }
                    if let Some(e) = select.qualify.as_mut() {
                        if !self.fix(e, &context) {
                            return ControlFlow::Break(());
                        }
                    }
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }
}

/// The rows a SELECT's windows see, as SQL text.
struct Rows {
    with: Option<String>,
    from: Option<String>,
    selection: Option<String>,
}

impl Rows {
    /// Whether two of these rows share `spec`'s PARTITION BY and ORDER BY values (SQL's
    /// default frame then holds both, polars' cumulative one only the first); a rows
    /// source that cannot be asked counts as having ties.
    fn ties(&self, spec: &WindowSpec, scalar: &mut dyn FnMut(&str) -> Option<String>) -> bool {
        let Some(from) = &self.from else {
            return false;
        };
        let keys: Vec<String> = spec
            .partition_by
            .iter()
            .map(|e| e.to_string())
            .chain(spec.order_by.iter().map(|o| o.expr.to_string()))
            .collect();
        let keys = keys.join(", ");
        let with = self
            .with
            .as_deref()
            .map_or(String::new(), |w| format!("{w} "));
        let filter = self
            .selection
            .as_deref()
            .map_or(String::new(), |c| format!(" WHERE {c}"));
        let probe = format!(
            "{with}SELECT max(__tach_peers) FROM (SELECT count(*) AS __tach_peers FROM {from}{filter} GROUP BY {keys}) AS __tach_ties"
        );
        match scalar(&probe) {
            Some(v) => v != "NULL" && v.parse::<i64>().map_or(true, |n| n > 1),
            None => true,
        }
    }
}

impl Each<'_> {
    /// Rewrites the windowed calls of one expression; false (and `error` set) when one
    /// is refused.
    fn fix(&mut self, e: &mut Expr, rows: &Rows) -> bool {
        let mut fix = Fix {
            depth: 0,
            changed: false,
            rows,
            scalar: &mut *self.scalar,
        };
        match VisitMut::visit(e, &mut fix) {
            ControlFlow::Break(err) => {
                self.error = Some(err);
                false
            }
            ControlFlow::Continue(()) => {
                self.changed |= fix.changed;
                true
            }
        }
    }
}

/// Rewrites the windowed calls of one SELECT's expression (not those of its subqueries,
/// which the outer walk meets with their own SELECT).
struct Fix<'a, 'b> {
    depth: usize,
    changed: bool,
    rows: &'a Rows,
    scalar: &'b mut dyn FnMut(&str) -> Option<String>,
}

impl VisitorMut for Fix<'_, '_> {
    type Break = QueryError;
    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<QueryError> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<QueryError> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<QueryError> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        let rows = self.rows;
        let scalar = &mut *self.scalar;
        let mut ties = |spec: &WindowSpec| rows.ties(spec, &mut *scalar);
        match window_call(e, &mut ties) {
            Ok(Some(new)) => {
                *e = new;
                self.changed = true;
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(err) => ControlFlow::Break(err),
        }
    }
}

fn refuse(what: String) -> QueryError {
    QueryError::Forbidden(what)
}

/// One edge of a ROWS frame: a row offset from the current row, or unbounded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Edge {
    Unbounded,
    Offset(i64),
}

/// What rows a windowed call reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// The whole partition.
    Whole,
    /// The partition's start to the current row (and, under RANGE, its peers).
    Running,
    /// Rows `start..=end` around the current one (negative: preceding).
    Rows(i64, i64),
    /// The partition's start to the row at this offset.
    FromStart(i64),
    /// The row at this offset to the partition's end.
    ToEnd(i64),
}

fn literal_rows(bound: &Option<Box<Expr>>, call: &str) -> Result<Edge, QueryError> {
    match bound.as_deref() {
        None => Ok(Edge::Unbounded),
        Some(Expr::Value(v)) => match &v.value {
            Value::Number(n, _) => n.parse::<i64>().ok().filter(|n| *n >= 0).map(Edge::Offset).ok_or_else(|| {
                refuse(format!("the window frame of `{call}` needs whole numbers of rows: write `ROWS BETWEEN 2 PRECEDING AND CURRENT ROW`"))
            }),
            _ => Err(refuse(format!("the window frame of `{call}` needs a literal number of rows: write `ROWS BETWEEN 2 PRECEDING AND CURRENT ROW`"))),
        },
        Some(_) => Err(refuse(format!("the window frame of `{call}` needs a literal number of rows: write `ROWS BETWEEN 2 PRECEDING AND CURRENT ROW`"))),
    }
}

fn edge(bound: &WindowFrameBound, call: &str) -> Result<(Edge, i64), QueryError> {
    // The sign says which side an unbounded edge is on.
    Ok(match bound {
        WindowFrameBound::CurrentRow => (Edge::Offset(0), 0),
        WindowFrameBound::Preceding(n) => match literal_rows(n, call)? {
            Edge::Offset(k) => (Edge::Offset(-k), -1),
            Edge::Unbounded => (Edge::Unbounded, -1),
        },
        WindowFrameBound::Following(n) => match literal_rows(n, call)? {
            Edge::Offset(k) => (Edge::Offset(k), 1),
            Edge::Unbounded => (Edge::Unbounded, 1),
        },
    })
}

fn frame_of(spec: &WindowSpec, call: &str) -> Result<Frame, QueryError> {
    let Some(WindowFrame {
        units,
        start_bound,
        end_bound,
    }) = &spec.window_frame
    else {
        return Ok(if spec.order_by.is_empty() {
            Frame::Whole
        } else {
            Frame::Running
        });
    };
    let start = edge(start_bound, call)?;
    let end = match end_bound {
        Some(b) => edge(b, call)?,
        None => (Edge::Offset(0), 0),
    };
    let frame = match (start, end) {
        ((Edge::Unbounded, -1), (Edge::Unbounded, 1)) => Frame::Whole,
        ((Edge::Unbounded, -1), (Edge::Offset(0), _)) => Frame::Running,
        ((Edge::Offset(a), _), (Edge::Offset(b), _))
            if *units == WindowFrameUnits::Rows && a <= b =>
        {
            Frame::Rows(a, b)
        }
        ((Edge::Unbounded, -1), (Edge::Offset(b), _)) if *units == WindowFrameUnits::Rows => {
            Frame::FromStart(b)
        }
        ((Edge::Offset(a), _), (Edge::Unbounded, 1)) if *units == WindowFrameUnits::Rows => {
            Frame::ToEnd(a)
        }
        _ => {
            return Err(refuse(format!(
                "the window frame of `{call}` is not supported: the frames that work are the whole partition, UNBOUNDED PRECEDING to CURRENT ROW, and ROWS BETWEEN N PRECEDING (or FOLLOWING) AND M PRECEDING (or FOLLOWING)"
            )))
        }
    };
    if *units == WindowFrameUnits::Groups {
        return Err(refuse(format!(
            "GROUPS window frames (in `{call}`) are not supported: use ROWS or RANGE"
        )));
    }
    if frame != Frame::Whole && spec.order_by.is_empty() {
        return Err(refuse(format!(
            "the window frame of `{call}` needs an ORDER BY in its window, or the frame of the whole partition"
        )));
    }
    Ok(frame)
}

fn parse(text: &str) -> Result<Expr, QueryError> {
    parse_expr(text).map_err(|e| QueryError::Sql {
        message: format!("internal rewrite of a window function failed: {e}"),
    })
}

/// A window with `spec`'s PARTITION BY and ORDER BY and no frame.
fn ordered_window(spec: &WindowSpec) -> String {
    let mut w = spec.clone();
    w.window_frame = None;
    w.window_name = None;
    w.to_string()
}

/// A window over `spec`'s partition alone.
fn partition_window(spec: &WindowSpec) -> String {
    let mut w = spec.clone();
    w.window_frame = None;
    w.window_name = None;
    w.order_by.clear();
    w.to_string()
}

/// `spec`'s window with its ORDER BY reversed (NULLs to the other end too).
fn reversed_window(spec: &WindowSpec) -> String {
    let mut w = spec.clone();
    w.window_frame = None;
    w.window_name = None;
    for o in w.order_by.iter_mut() {
        let asc = o.options.asc.unwrap_or(true);
        // DuckDB's default puts NULLs last either way.
        let nulls_first = o.options.nulls_first.unwrap_or(false);
        o.options.asc = Some(!asc);
        o.options.nulls_first = Some(!nulls_first);
    }
    w.to_string()
}

/// The SQL-computed replacement of a windowed call, None when polars' answer is
/// already SQL's.
fn window_call(
    e: &Expr,
    ties: &mut dyn FnMut(&WindowSpec) -> bool,
) -> Result<Option<Expr>, QueryError> {
    let Expr::Function(f) = e else {
        return Ok(None);
    };
    let Some(WindowType::WindowSpec(spec)) = &f.over else {
        if f.over.is_some() {
            return Err(refuse(format!(
                "a named window (in `{f}`) is not supported: write the window in OVER (...)"
            )));
        }
        return Ok(None);
    };
    let name = function_name(f);
    let call = f.to_string();
    let Some(args) = call_args(f) else {
        return Err(refuse(format!(
            "`{call}`: DISTINCT or ORDER BY inside a window function's arguments is not supported; aggregate in a subquery first"
        )));
    };
    let w = ordered_window(spec);
    let part = partition_window(spec);
    let count_part = format!("count(*) OVER ({part})");
    let row_number = format!("row_number() OVER ({w})");

    // FILTER on a window aggregate: the filtered-out rows count as NULLs.
    if let Some(cond) = &f.filter {
        let mut g = f.clone();
        g.filter = None;
        let arg = match args.as_slice() {
            [a] if a == "*" => "1".to_string(),
            [a] => a.clone(),
            _ => {
                return Err(refuse(format!(
                    "FILTER on `{call}` is supported for one-argument aggregates only: use CASE WHEN inside the call"
                )))
            }
        };
        g.args = FunctionArguments::List(sqlparser::ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(parse(
                &format!("CASE WHEN {cond} THEN {arg} END"),
            )?))],
            clauses: Vec::new(),
        });
        let new = Expr::Function(g.clone());
        return Ok(Some(window_call(&new, ties)?.unwrap_or(new)));
    }

    if FRAMELESS.contains(&name.as_str()) {
        return frameless(f, &name, &args, spec, &w, &part);
    }

    let frame = frame_of(spec, &call)?;
    // SQL's default frame (RANGE) holds the current row's peers, polars' cumulative
    // windows stop at the current row: the same only when no two rows are peers.
    let range = spec
        .window_frame
        .as_ref()
        .is_none_or(|f| f.units == WindowFrameUnits::Range);
    if frame == Frame::Running
        && range
        && name != "first_value"
        && (CUMULATIVE.contains(&name.as_str())
            || ["avg", "mean", "last_value"].contains(&name.as_str()))
        && ties(spec)
    {
        return Err(refuse(format!(
            "`{call}` runs over rows with equal ORDER BY values, which SQL's default frame counts together and tach would not: make the ORDER BY unique (add `sample` or another key), or write ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
        )));
    }
    let arg = |k: usize| -> Result<&String, QueryError> {
        args.get(k)
            .ok_or_else(|| refuse(format!("`{call}` needs an argument")))
    };
    let text = match (name.as_str(), frame) {
        (_, Frame::Whole) if name == "first_value" || name == "last_value" => {
            if spec.order_by.is_empty() {
                return Err(refuse(format!(
                    "`{call}` needs an ORDER BY in its window (which row is first or last is otherwise undefined)"
                )));
            }
            let x = arg(0)?;
            if name == "first_value" {
                if spec.window_frame.is_none() {
                    return Ok(None);
                }
                format!("first_value({x}) OVER ({w})")
            } else {
                format!("first_value({x}) OVER ({})", reversed_window(spec))
            }
        }
        ("nth_value", _) => {
            let k = args
                .get(1)
                .and_then(|n| n.trim_matches(|c| c == '(' || c == ')').parse::<i64>().ok())
                .filter(|k| *k >= 1)
                .ok_or_else(|| {
                    refuse(format!(
                        "`{call}` needs a literal row number of 1 or more: nth_value(x, 2)"
                    ))
                })?;
            if spec.order_by.is_empty() {
                return Err(refuse(format!(
                    "`{call}` needs an ORDER BY in its window (which row is the n-th is otherwise undefined)"
                )));
            }
            // Which row is the n-th among rows of equal ORDER BY values is undefined.
            if ties(spec) {
                return Err(refuse(format!(
                    "`{call}` orders by values that repeat, so its n-th row is undefined: make the ORDER BY unique (add `sample` or another key)"
                )));
            }
            // The partition's k-th row, on every row: the one row numbered k keeps its
            // value, the others give NULL, which max skips.
            let kth = format!(
                "max(CASE WHEN {row_number} = {k} THEN {} END) OVER ({part})",
                arg(0)?
            );
            match frame {
                Frame::Whole => kth,
                Frame::Running => format!("CASE WHEN {row_number} >= {k} THEN {kth} END"),
                Frame::FromStart(b) => format!("CASE WHEN {row_number} + {b} >= {k} THEN {kth} END"),
                _ => {
                    return Err(refuse(format!(
                        "the window frame of `{call}` is not supported: nth_value takes the whole partition or frames from UNBOUNDED PRECEDING"
                    )))
                }
            }
        }
        (_, Frame::Whole) => {
            if spec.order_by.is_empty() && spec.window_frame.is_none() {
                return Ok(None);
            }
            let mut g = f.clone();
            g.over = Some(WindowType::WindowSpec({
                let mut s = spec.clone();
                s.order_by.clear();
                s.window_frame = None;
                s
            }));
            return Ok(Some(Expr::Function(g)));
        }
        ("avg" | "mean", Frame::Running) => {
            let x = arg(0)?;
            format!("sum({x}) OVER ({w}) * 1.0 / nullif(count({x}) OVER ({w}), 0)")
        }
        (_, Frame::Running)
            if CUMULATIVE.contains(&name.as_str()) || name == "first_value" || name == "last_value" =>
        {
            if spec.window_frame.is_none() {
                return Ok(None);
            }
            let mut g = f.clone();
            g.over = Some(WindowType::WindowSpec({
                let mut s = spec.clone();
                s.window_frame = None;
                s
            }));
            return Ok(Some(Expr::Function(g)));
        }
        (_, Frame::Running) => {
            return Err(refuse(format!(
                "a running `{name}` over an ordered window (`{call}`) is not supported: sum, count, min, max, avg, first_value and last_value run; `{name}` works over the whole partition (no ORDER BY)"
            )))
        }
        ("first_value", Frame::FromStart(b)) => {
            format!("CASE WHEN {row_number} + {b} >= 1 THEN first_value({}) OVER ({w}) END", arg(0)?)
        }
        ("last_value", Frame::ToEnd(a)) => format!(
            "CASE WHEN {row_number} + {a} <= {count_part} THEN first_value({}) OVER ({}) END",
            arg(0)?,
            reversed_window(spec)
        ),
        (_, Frame::ToEnd(0)) if CUMULATIVE.contains(&name.as_str()) => {
            // The rows from here to the end are a running frame in reverse.
            let mut g = f.clone();
            g.over = None;
            format!("{g} OVER ({})", reversed_window(spec))
        }
        (_, Frame::FromStart(_) | Frame::ToEnd(_)) => {
            return Err(refuse(format!(
                "the window frame of `{call}` is not supported: `{name}` takes the whole partition, UNBOUNDED PRECEDING to CURRENT ROW, CURRENT ROW to UNBOUNDED FOLLOWING, or N PRECEDING (or FOLLOWING) to M PRECEDING (or FOLLOWING)"
            )))
        }
        (_, Frame::Rows(a, b)) => {
            if b - a + 1 > MAX_FRAME_ROWS {
                return Err(refuse(format!(
                    "the window frame of `{call}` is wider than {MAX_FRAME_ROWS} rows: aggregate in a subquery first"
                )));
            }
            let shifted = |x: &str, k: i64| match k {
                0 => x.to_string(),
                k if k < 0 => format!("lag({x}, {}) OVER ({w})", -k),
                k => format!("lead({x}, {k}) OVER ({w})"),
            };
            // The frame's rows that exist: from max(rn + a, 1) to min(rn + b, size).
            let rn = &row_number;
            let size = &count_part;
            let rows_in_frame =
                format!("greatest(least({rn} + {b}, {size}) - greatest({rn} + {a}, 1) + 1, 0)");
            match name.as_str() {
                "first_value" | "last_value" => {
                    let x = arg(0)?;
                    let empty = format!("({rn} + {a} > {size} OR {rn} + {b} < 1)");
                    if name == "first_value" {
                        format!(
                            "CASE WHEN {empty} THEN NULL WHEN {rn} + {a} >= 1 THEN {} ELSE first_value({x}) OVER ({w}) END",
                            shifted(x, a)
                        )
                    } else {
                        format!(
                            "CASE WHEN {empty} THEN NULL WHEN {rn} + {b} <= {size} THEN {} ELSE first_value({x}) OVER ({}) END",
                            shifted(x, b),
                            reversed_window(spec)
                        )
                    }
                }
                "count" if arg(0)? == "*" => rows_in_frame,
                "count" | "sum" | "avg" | "mean" | "min" | "max" => {
                    let x = arg(0)?;
                    let terms: Vec<String> = (a..=b).map(|k| shifted(x, k)).collect();
                    let present = terms
                        .iter()
                        .map(|t| format!("CASE WHEN {t} IS NULL THEN 0 ELSE 1 END"))
                        .collect::<Vec<_>>()
                        .join(" + ");
                    let total = terms
                        .iter()
                        .map(|t| format!("coalesce({t}, 0)"))
                        .collect::<Vec<_>>()
                        .join(" + ");
                    match name.as_str() {
                        "count" => format!("({present})"),
                        "sum" => format!("CASE WHEN ({present}) = 0 THEN NULL ELSE {total} END"),
                        "avg" | "mean" => format!(
                            "CASE WHEN ({present}) = 0 THEN NULL ELSE ({total}) * 1.0 / ({present}) END"
                        ),
                        _ if terms.len() == 1 => terms[0].clone(),
                        "min" => format!("least({})", terms.join(", ")),
                        _ => format!("greatest({})", terms.join(", ")),
                    }
                }
                _ => {
                    return Err(refuse(format!(
                        "`{name}` over a frame of rows (`{call}`) is not supported: sum, count, avg, min, max, first_value and last_value take such frames"
                    )))
                }
            }
        }
    };
    parse(&text).map(Some)
}

/// `row_number`, the ranks, `ntile`, `percent_rank`, `cume_dist`, `lag` and `lead`:
/// SQL ignores their frame.
fn frameless(
    f: &Function,
    name: &str,
    args: &[String],
    spec: &WindowSpec,
    w: &str,
    part: &str,
) -> Result<Option<Expr>, QueryError> {
    let call = f.to_string();
    if spec.order_by.is_empty() && name != "row_number" {
        return Err(refuse(format!("`{call}` needs an ORDER BY in its window")));
    }
    let size = format!("count(*) OVER ({part})");
    let rn = format!("row_number() OVER ({w})");
    let text = match name {
        "ntile" => {
            let n = match args {
                [n] => n
                    .trim_matches(|c| c == '(' || c == ')')
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 1),
                _ => None,
            }
            .ok_or_else(|| {
                refuse(format!(
                    "`{call}` needs a literal number of buckets of 1 or more: ntile(4)"
                ))
            })?;
            // DuckDB's buckets: the first `size % n` hold one row more.
            let r = format!("({rn} - 1)");
            let small = format!("({size} / {n})");
            let small = format!("CAST(floor({small}) AS BIGINT)");
            let large = format!("({size} - {n} * {small})");
            let split = format!("({large} * ({small} + 1))");
            format!(
                "CASE WHEN {r} < {split} THEN 1 + CAST(floor({r} / ({small} + 1)) AS BIGINT) \
                 ELSE 1 + {large} + CAST(floor(({r} - {split}) / nullif({small}, 0)) AS BIGINT) END"
            )
        }
        "percent_rank" => format!(
            "CASE WHEN {size} <= 1 THEN 0.0 ELSE (rank() OVER ({w}) - 1) * 1.0 / ({size} - 1) END"
        ),
        // Rows up to the current one and its peers: all but those after its peers.
        "cume_dist" => format!(
            "({size} - rank() OVER ({}) + 1) * 1.0 / {size}",
            reversed_window(spec)
        ),
        "lag" | "lead" => match args {
            [_] | [_, _] if spec.window_frame.is_none() => return Ok(None),
            [x] => format!("{name}({x}) OVER ({w})"),
            [x, n] | [x, n, _] => {
                let n = n
                    .trim_matches(|c| c == '(' || c == ')')
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| {
                        refuse(format!(
                            "`{call}` needs a literal offset of 0 or more: lag(x, 2, 0)"
                        ))
                    })?;
                let default = args.get(2).map_or("NULL", |d| d.as_str());
                let shifted = if n == 0 {
                    x.clone()
                } else {
                    format!("{name}({x}, {n}) OVER ({w})")
                };
                let exists = if name == "lag" {
                    format!("{rn} > {n}")
                } else {
                    format!("{rn} + {n} <= {size}")
                };
                format!("CASE WHEN {exists} THEN {shifted} ELSE {default} END")
            }
            _ => {
                return Err(refuse(format!(
                    "`{call}` takes a value, an offset and a default"
                )))
            }
        },
        _ => {
            if spec.window_frame.is_none() {
                return Ok(None);
            }
            let mut g = f.clone();
            g.over = Some(WindowType::WindowSpec({
                let mut s = spec.clone();
                s.window_frame = None;
                s
            }));
            return Ok(Some(Expr::Function(g)));
        }
    };
    parse(&text).map(Some)
}
