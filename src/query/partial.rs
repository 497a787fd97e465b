//! Grouped aggregates over `samples` split into partial aggregates, so that a query over
//! a fleet of profiles runs a group of profiles at a time (`bounded`).
//!
//! The count pushdown (`pushdown`) answers count queries from grouped samples. A query
//! that reads per-sample columns (`time_s`, `timestamp_us`, `wall_time`, `sample`) or
//! sums a column cannot use it: polars would scan every file at once and hold every
//! file's scan together. This rewrite splits such a query in three:
//!
//! - **inner**, run over each group of profiles: the same FROM and WHERE, grouped by the
//!   same keys, with each aggregate replaced by its partial: `count` and `sum` as they
//!   are, `min` and `max` as they are, `avg(x)` as `sum(x)` and `count(x)`;
//! - **combine**, run over partial rows: the same keys, the partials combined (`sum` of
//!   counts and sums, `min` of minima, `max` of maxima), which gives partial rows again,
//!   so memory stays one group's rows plus the combined ones;
//! - **outer**, run once over the combined partials: the SELECT, HAVING, ORDER BY and
//!   LIMIT as written, each aggregate replaced by its combined value.
//!
//! Counts, minima and maxima combine exactly; sums of integers too. The rewrite applies
//! to one SELECT over `samples` alone (no join, CTE, subquery, window, DISTINCT or
//! grouping sets) whose aggregates are `count`, `sum`, `min`, `max` and `avg`/`mean`
//! (not DISTINCT, no FILTER) and whose other expressions are its GROUP BY keys. Anything
//! else, and any rewrite polars cannot plan, runs as written.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, GroupByExpr, Ident, OrderByKind, Query, SelectItem, SetExpr, Statement, Value,
    Visit, VisitMut, Visitor, VisitorMut,
};

use super::ast::{call_args, function_name, has_window, is_aggregate, parse_expr};
use super::pushdown::single_table;
use super::schema::samples_schema;

/// The table the combine and outer queries read: partial rows.
pub const PARTIALS_TABLE: &str = "__tach_partials";

/// Names of the partial rows' columns: group keys, then partial aggregates.
const KEY: &str = "__tach_k";
const PART: &str = "__tach_a";

/// A query split into its partial aggregates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// Over `samples` (a group of profiles): one partial row per group key.
    pub inner: String,
    /// Over [`PARTIALS_TABLE`]: partial rows combined into partial rows.
    pub combine: String,
    /// Over [`PARTIALS_TABLE`]: the answer.
    pub outer: String,
}

/// How one partial column combines with another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Combine {
    Sum,
    Min,
    Max,
}

impl Combine {
    fn function(self) -> &'static str {
        match self {
            Combine::Sum => "sum",
            Combine::Min => "min",
            Combine::Max => "max",
        }
    }
}

/// The split query, or None when the rewrite does not apply (module docs).
pub fn rewrite(sql: &str) -> Option<Partial> {
    let statements = super::ast::parse_statements(sql).ok()?;
    let [Statement::Query(query)] = statements.as_slice() else {
        return None;
    };
    let query: &Query = query;
    if query.with.is_some()
        || query.fetch.is_some()
        || !query.locks.is_empty()
        || !query.pipe_operators.is_empty()
        || query.for_clause.is_some()
        || query.settings.is_some()
        || query.format_clause.is_some()
        || has_subquery(query)
    {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let (name, _) = single_table(select)?;
    if name != "samples" || select.distinct.is_some() || select.window_before_qualify {
        return None;
    }
    let GroupByExpr::Expressions(group_by, modifiers) = &select.group_by else {
        return None;
    };
    if !modifiers.is_empty() {
        return None;
    }
    let items: Vec<(&Expr, Option<&Ident>)> = select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some((e, None)),
            SelectItem::ExprWithAlias { expr, alias } => Some((expr, Some(alias))),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if items.iter().any(|(e, _)| has_window(e))
        || select.having.as_ref().is_some_and(has_window)
        || select.selection.as_ref().is_some_and(has_window)
    {
        return None;
    }
    let keys = group_keys(group_by, &items)?;
    // Without GROUP BY, every item must be an aggregate: one row.
    let mut split = Split {
        keys: keys.iter().map(ToString::to_string).collect(),
        partials: Vec::new(),
        failed: false,
    };
    let mut outer_items = Vec::new();
    for (k, (e, alias)) in items.iter().enumerate() {
        let outer = split.outer_expr(e)?;
        let name = alias.map_or_else(|| format!("__tach_out{k}"), |a| a.to_string());
        outer_items.push(format!("{outer} AS {name}"));
    }
    let having = match &select.having {
        Some(h) => Some(split.outer_expr(h)?),
        None => None,
    };
    let order_by = match &query.order_by {
        None => None,
        Some(order) => {
            let OrderByKind::Expressions(exprs) = &order.kind else {
                return None;
            };
            let mut out = Vec::new();
            for o in exprs {
                let mut o = o.clone();
                o.expr = split.order_expr(&o.expr, &items)?;
                out.push(o.to_string());
            }
            if order.interpolate.is_some() {
                return None;
            }
            Some(out.join(", "))
        }
    };
    if split.partials.is_empty() && keys.is_empty() {
        return None;
    }

    let key_names: Vec<String> = (0..keys.len()).map(|i| format!("{KEY}{i}")).collect();
    let group_clause = |names: &[String]| {
        if names.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {}", names.join(", "))
        }
    };
    let mut inner_cols: Vec<String> = keys
        .iter()
        .zip(&key_names)
        .map(|(k, n)| format!("{k} AS {n}"))
        .collect();
    inner_cols.extend(
        split
            .partials
            .iter()
            .enumerate()
            .map(|(j, (text, _))| format!("{text} AS {PART}{j}")),
    );
    let from = select
        .from
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut inner = format!("SELECT {} FROM {from}", inner_cols.join(", "));
    if let Some(w) = &select.selection {
        inner.push_str(&format!(" WHERE {w}"));
    }
    inner.push_str(&group_clause(
        &keys.iter().map(ToString::to_string).collect::<Vec<_>>(),
    ));

    let mut combine_cols = key_names.clone();
    combine_cols.extend(
        split
            .partials
            .iter()
            .enumerate()
            .map(|(j, (_, c))| format!("{}({PART}{j}) AS {PART}{j}", c.function())),
    );
    let combine = format!(
        "SELECT {} FROM {PARTIALS_TABLE}{}",
        combine_cols.join(", "),
        group_clause(&key_names)
    );

    let mut outer = format!(
        "SELECT {} FROM {PARTIALS_TABLE}{}",
        outer_items.join(", "),
        group_clause(&key_names)
    );
    if let Some(h) = having {
        outer.push_str(&format!(" HAVING {h}"));
    }
    if let Some(o) = order_by {
        outer.push_str(&format!(" ORDER BY {o}"));
    }
    if let Some(limit) = &query.limit_clause {
        outer.push_str(&format!(" {}", limit.to_string().trim()));
    }
    Some(Partial {
        inner,
        combine,
        outer,
    })
}

/// The GROUP BY keys as expressions: a position or an alias stands for its SELECT item.
/// None when a key is ambiguous (an alias that is also a `samples` column) or names an
/// aggregate.
fn group_keys(group_by: &[Expr], items: &[(&Expr, Option<&Ident>)]) -> Option<Vec<Expr>> {
    let columns = samples_schema();
    group_by
        .iter()
        .map(|k| {
            let key = match k {
                Expr::Value(v) => match &v.value {
                    Value::Number(n, _) => {
                        let i: usize = n.parse().ok()?;
                        (*items.get(i.checked_sub(1)?)?.0).clone()
                    }
                    _ => k.clone(),
                },
                Expr::Identifier(id) => {
                    let aliased = items
                        .iter()
                        .find(|(_, a)| a.is_some_and(|a| a.value == id.value));
                    match aliased {
                        Some(_) if columns.contains(id.value.as_str()) => return None,
                        Some((e, _)) => (*e).clone(),
                        None => k.clone(),
                    }
                }
                _ => k.clone(),
            };
            (!super::ast::has_aggregate(&key)).then_some(key)
        })
        .collect()
}

/// The partial aggregates found so far and the keys expressions may use.
struct Split {
    /// Each GROUP BY key's SQL text.
    keys: Vec<String>,
    /// Each partial aggregate's SQL text (over `samples`) and how it combines.
    partials: Vec<(String, Combine)>,
    failed: bool,
}

impl Split {
    /// The partial column of `text`, added when new.
    fn partial(&mut self, text: String, combine: Combine) -> String {
        let j = match self.partials.iter().position(|(t, _)| *t == text) {
            Some(j) => j,
            None => {
                self.partials.push((text, combine));
                self.partials.len() - 1
            }
        };
        format!("{PART}{j}")
    }

    /// `e` over the partial rows: each aggregate its combined value, each GROUP BY key
    /// its key column. None when `e` names a column outside both.
    fn outer_expr(&mut self, e: &Expr) -> Option<Expr> {
        let mut out = e.clone();
        self.failed = false;
        let _ = VisitMut::visit(&mut out, self);
        if self.failed || names_a_column(&out) {
            return None;
        }
        Some(out)
    }

    /// An ORDER BY expression over the outer SELECT: a position or an alias as it is,
    /// a SELECT item's expression as its position, anything else as `outer_expr`.
    fn order_expr(&mut self, e: &Expr, items: &[(&Expr, Option<&Ident>)]) -> Option<Expr> {
        match e {
            Expr::Value(v) if matches!(v.value, Value::Number(..)) => return Some(e.clone()),
            Expr::Identifier(id)
                if items
                    .iter()
                    .any(|(_, a)| a.is_some_and(|a| a.value == id.value)) =>
            {
                return Some(e.clone())
            }
            _ => {}
        }
        let text = e.to_string();
        if let Some(k) = items.iter().position(|(x, _)| x.to_string() == text) {
            return parse_expr(&(k + 1).to_string()).ok();
        }
        self.outer_expr(e)
    }

    /// The combined value of an aggregate call, recording its partials; None when it
    /// does not split.
    fn combined(&mut self, f: &Function) -> Option<String> {
        if f.filter.is_some()
            || f.null_treatment.is_some()
            || !f.within_group.is_empty()
            || f.over.is_some()
        {
            return None;
        }
        let [arg] = call_args(f)?.try_into().ok()?;
        let name = function_name(f);
        Some(match name.as_str() {
            "count" => format!(
                "sum({})",
                self.partial(format!("count({arg})"), Combine::Sum)
            ),
            "sum" => format!("sum({})", self.partial(format!("sum({arg})"), Combine::Sum)),
            "min" => format!("min({})", self.partial(format!("min({arg})"), Combine::Min)),
            "max" => format!("max({})", self.partial(format!("max({arg})"), Combine::Max)),
            "avg" | "mean" if arg != "*" => {
                let sum = self.partial(format!("sum({arg})"), Combine::Sum);
                let count = self.partial(format!("count({arg})"), Combine::Sum);
                format!(
                    "CASE WHEN sum({count}) = 0 THEN NULL \
                     ELSE CAST(sum({sum}) AS DOUBLE) / CAST(sum({count}) AS DOUBLE) END"
                )
            }
            _ => return None,
        })
    }
}

impl VisitorMut for Split {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let text = e.to_string();
        if let Some(i) = self.keys.iter().position(|k| *k == text) {
            *e = Expr::Identifier(Ident::new(format!("{KEY}{i}")));
            return ControlFlow::Continue(());
        }
        if let Expr::Function(f) = e {
            // A combined value put in place just now is visited next: leave it.
            if is_aggregate(f) && !over_partials(f) {
                match self.combined(f).and_then(|c| parse_expr(&c).ok()) {
                    Some(c) => *e = Expr::Nested(Box::new(c)),
                    None => {
                        self.failed = true;
                        return ControlFlow::Break(());
                    }
                }
                return ControlFlow::Continue(());
            }
        }
        ControlFlow::Continue(())
    }
}

/// True when every argument of `f` is a partial column (a combined value).
fn over_partials(f: &Function) -> bool {
    call_args(f).is_some_and(|args| {
        !args.is_empty() && args.iter().all(|a| a.starts_with(&format!("({PART}")))
    })
}

/// True when `e` names a column other than the partial rows' own.
fn names_a_column(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.visit(&mut super::ast::FnVisitor(|x: &Expr| match x {
        Expr::Identifier(id) => {
            found |= !(id.value.starts_with(KEY) || id.value.starts_with(PART));
        }
        Expr::CompoundIdentifier(_) => found = true,
        _ => {}
    }));
    found
}

/// True when the query holds a subquery anywhere below its own body.
fn has_subquery(query: &Query) -> bool {
    struct Find(usize);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.0 += 1;
            if self.0 > 1 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    query.visit(&mut Find(0)).is_break()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_second_count_splits_into_partial_counts() {
        let p = rewrite(
            "select cast(floor(time_s) as bigint) as sec, count(*) as n from samples \
             where funcname = 'io_worker' group by sec order by sec",
        )
        .unwrap();
        assert_eq!(
            p.inner,
            "SELECT CAST(FLOOR(time_s) AS BIGINT) AS __tach_k0, count(*) AS __tach_a0 \
             FROM samples WHERE funcname = 'io_worker' GROUP BY CAST(FLOOR(time_s) AS BIGINT)"
        );
        assert_eq!(
            p.combine,
            "SELECT __tach_k0, sum(__tach_a0) AS __tach_a0 FROM __tach_partials GROUP BY __tach_k0"
        );
        assert_eq!(
            p.outer,
            "SELECT __tach_k0 AS sec, (sum(__tach_a0)) AS n FROM __tach_partials \
             GROUP BY __tach_k0 ORDER BY sec"
        );
    }

    #[test]
    fn avg_is_a_sum_over_a_count_and_order_by_an_item_is_its_position() {
        let p = rewrite(
            "select funcname, avg(depth), max(time_s) from samples group by 1 \
             order by avg(depth) desc limit 3",
        )
        .unwrap();
        assert!(p.inner.contains("sum((depth)) AS __tach_a0, count((depth)) AS __tach_a1, max((time_s)) AS __tach_a2"), "{}", p.inner);
        assert!(p.outer.ends_with("ORDER BY 2 DESC LIMIT 3"), "{}", p.outer);
    }

    #[test]
    fn what_does_not_split_is_left_alone() {
        for sql in [
            // A column outside the keys and aggregates.
            "select funcname, depth, count(*) from samples group by funcname",
            "select count(distinct funcname) from samples",
            "select median(depth) from samples",
            "select funcname from samples",
            "select s.funcname, count(*) from samples s join stacks t on s.stack_id = t.stack_id group by 1",
            "select funcname, count(*) over () from samples",
            "with x as (select * from samples) select count(*) from x",
            "select funcname, count(*) from samples where depth > (select avg(depth) from samples) group by 1",
            "select distinct funcname, count(*) from samples group by 1",
            // An alias that is also a column is ambiguous.
            "select depth + 1 as depth, count(*) from samples group by depth",
        ] {
            assert_eq!(rewrite(sql), None, "{sql}");
        }
    }
}
