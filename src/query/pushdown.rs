//! Count-only aggregates over `samples`, answered from grouped samples.
//!
//! Most questions asked of a profile are `count(*) ... group by` over columns that are
//! the same for every sample of one stack, thread and status: the leaf function, file
//! and line, the thread, the status flags, the stack and its depth. Such a query does
//! not need one row per sample. This module rewrites it to read the internal table
//! [`GROUPED_TABLE`] instead: the samples grouped by the columns the query uses, one
//! row per distinct combination with a [`WEIGHT_COLUMN`] holding how many samples it
//! stands for, and `count(*)` becomes `sum` of that weight. Filters and grouping on
//! those columns give the same groups either way, so the answer is the same; polars
//! then groups thousands of rows instead of millions, and the scan keeps no column per
//! sample.
//!
//! The rewrite applies to a SELECT (at any level of the query) that reads `samples`
//! alone (no join), has a GROUP BY, and whose every column reference is a `samples`
//! column other than the per-sample ones (`sample`, `timestamp_us`, `time_s`), with `count(*)`, `count(constant)`, `min`, `max` and
//! `count(DISTINCT ...)` as its only aggregates, known scalar functions otherwise and
//! no subquery or window. Anything else runs unchanged. The caller also checks that
//! the rewritten query has the original's output columns and types (see
//! `QueryEngine::lazy`).
//!
//! A second rewrite serves the inclusive queries' `select distinct file, stack_id,
//! funcname from stacks`: a `SELECT DISTINCT` of plain `stacks` columns, with no
//! WHERE, GROUP BY, ORDER BY or LIMIT, reads [`DISTINCT_STACKS_TABLE`]`_k` instead,
//! a table of exactly those columns whose scan leaves out repeated rows itself (for
//! each stack, the frames that give the same values), so polars has no distinct to
//! compute over one row per frame of every stack. With several files, `file` must be
//! one of the columns (each file's rows are made distinct on their own).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Distinct, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident,
    ObjectName, OrderByKind, Query, Select, SelectItem, SetExpr, Statement, TableFactor, Value,
    Visit, VisitMut, Visitor, VisitorMut,
};

use super::schema::{is_grouped_column, stacks_schema};
pub use super::schema::{GROUPED_TABLE, WEIGHT_COLUMN};
/// The distinct stacks tables the second rewrite reads: this, then `_0`, `_1`, ... in
/// the order of [`Rewritten::distinct_stacks`].
pub const DISTINCT_STACKS_TABLE: &str = "__tach_distinct_stacks";

/// A rewritten query and the distinct stacks tables it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub sql: String,
    /// The columns of table `__tach_distinct_stacks_k`, for each k.
    pub distinct_stacks: Vec<Vec<String>>,
}

/// Functions that compute one value per row: safe over grouped rows.
const SCALAR_FUNCTIONS: [&str; 36] = [
    "abs",
    "btrim",
    "cast",
    "ceil",
    "ceiling",
    "char_length",
    "coalesce",
    "concat",
    "concat_ws",
    "ends_with",
    "floor",
    "greatest",
    "if",
    "ifnull",
    "initcap",
    "least",
    "left",
    "length",
    "lower",
    "ltrim",
    "nullif",
    "nvl",
    "octet_length",
    "regexp_like",
    "replace",
    "reverse",
    "right",
    "round",
    "rtrim",
    "sign",
    "split_part",
    "starts_with",
    "strpos",
    "substr",
    "substring",
    "upper",
];

/// Aggregates whose value does not depend on how many times a row repeats.
const REPEAT_FREE_AGGREGATES: [&str; 2] = ["min", "max"];

/// The rewritten SQL text, or None when the query has no SELECT either rewrite applies
/// to (or does not parse: polars then reports the error on the original text). `files`
/// is how many files the query reads.
pub fn rewrite(sql: &str, files: usize) -> Option<Rewritten> {
    let mut statements = super::ast::parse_statements(sql).ok()?;
    let [Statement::Query(query)] = statements.as_mut_slice() else {
        return None;
    };
    let mut rewriter = Rewriter {
        changed: false,
        counts: !defines_cte_named(query, "samples"),
        distinct: !defines_cte_named(query, "stacks"),
        files,
        distinct_stacks: Vec::new(),
    };
    let _ = VisitMut::visit(query.as_mut(), &mut rewriter);
    rewriter.changed.then(|| Rewritten {
        sql: query.to_string(),
        distinct_stacks: rewriter.distinct_stacks,
    })
}

fn defines_cte_named(query: &Query, name: &str) -> bool {
    struct Finder<'a>(bool, &'a str);
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
            if let Some(with) = &q.with {
                if with.cte_tables.iter().any(|c| c.alias.name.value == self.1) {
                    self.0 = true;
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut f = Finder(false, name);
    let _ = query.visit(&mut f);
    f.0
}

struct Rewriter {
    changed: bool,
    /// Whether each rewrite may apply (not when a CTE shadows its table).
    counts: bool,
    distinct: bool,
    files: usize,
    distinct_stacks: Vec<Vec<String>>,
}

impl VisitorMut for Rewriter {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if self.counts && rewrite_query(query) {
            self.changed = true;
        } else if self.distinct {
            if let Some(columns) =
                rewrite_distinct_stacks(query, self.files, self.distinct_stacks.len())
            {
                self.distinct_stacks.push(columns);
                self.changed = true;
            }
        }
        ControlFlow::Continue(())
    }
}

/// Rewrites a `SELECT DISTINCT` of plain `stacks` columns to read distinct stacks
/// table `k`; its columns, or None (query untouched).
fn rewrite_distinct_stacks(query: &mut Query, files: usize, k: usize) -> Option<Vec<String>> {
    if query.order_by.is_some()
        || query.limit_clause.is_some()
        || query.fetch.is_some()
        || !query.locks.is_empty()
        || !query.pipe_operators.is_empty()
    {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    if !matches!(select.distinct, Some(Distinct::Distinct)) {
        return None;
    }
    let (name, qualifier) = single_table(select)?;
    if name != "stacks" || select.selection.is_some() || select.having.is_some() {
        return None;
    }
    match &select.group_by {
        GroupByExpr::Expressions(keys, modifiers) if keys.is_empty() && modifiers.is_empty() => {}
        _ => return None,
    }
    let mut columns: Vec<String> = Vec::new();
    for item in &select.projection {
        let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item else {
            return None;
        };
        let column = match e {
            Expr::Identifier(id) => &id.value,
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [q, c] if q.value == qualifier => &c.value,
                _ => return None,
            },
            _ => return None,
        };
        if !stacks_schema().contains(column) {
            return None;
        }
        if !columns.contains(column) {
            columns.push(column.clone());
        }
    }
    // Rows of two files are told apart only by `file`.
    if files > 1 && !columns.iter().any(|c| c == "file") {
        return None;
    }
    if let Some(TableFactor::Table { name, .. }) = select.from.first_mut().map(|t| &mut t.relation)
    {
        *name = ObjectName::from(vec![Ident::new(format!("{DISTINCT_STACKS_TABLE}_{k}"))]);
    }
    select.distinct = None;
    Some(columns)
}

/// Rewrites `query` in place when its body is a SELECT the rewrite applies to.
fn rewrite_query(query: &mut Query) -> bool {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return false;
    };
    let Some(qualifier) = applies_to(select) else {
        return false;
    };
    let aliases = aliases(select);
    let names = Names {
        qualifier: &qualifier,
        aliases: &aliases,
    };
    // ORDER BY belongs to the query; it may name aliases, columns and count(*).
    let order_ok = match &query.order_by {
        None => true,
        Some(order) => match &order.kind {
            OrderByKind::Expressions(exprs) => exprs.iter().all(|o| names.allows(&o.expr, true)),
            OrderByKind::All(_) => false,
        },
    };
    if !order_ok {
        return false;
    }
    // polars resolves `ORDER BY count(*)` against the SELECT list; `ORDER BY
    // sum(weight)` it cannot (the weight is not an output column), so a count there
    // becomes the alias of the SELECT's count, and without one the query is left alone.
    let count_alias = select.projection.iter().find_map(|item| match item {
        SelectItem::ExprWithAlias {
            expr: Expr::Function(f),
            alias,
        } if is_count_of_rows(f) => Some(alias.clone()),
        _ => None,
    });
    if let Some(order) = query.order_by.as_mut() {
        if let OrderByKind::Expressions(exprs) = &mut order.kind {
            let is_count = |e: &Expr| matches!(e, Expr::Function(f) if is_count_of_rows(f));
            let nested_count = exprs
                .iter()
                .any(|o| !is_count(&o.expr) && contains_count_of_rows(&o.expr));
            let has_count = exprs.iter().any(|o| is_count(&o.expr));
            if nested_count || (has_count && count_alias.is_none()) {
                return false;
            }
            if let Some(alias) = &count_alias {
                for o in exprs.iter_mut().filter(|o| is_count(&o.expr)) {
                    o.expr = Expr::Identifier(alias.clone());
                }
            }
        }
    }
    // Checked above: one plain table in FROM.
    if let Some(TableFactor::Table { name, .. }) = select.from.first_mut().map(|t| &mut t.relation)
    {
        *name = ObjectName::from(vec![Ident::new(GROUPED_TABLE)]);
    }
    let mut counts = CountToWeight;
    let _ = VisitMut::visit(&mut select.projection, &mut counts);
    let _ = VisitMut::visit(&mut select.having, &mut counts);
    true
}

/// The qualifier that names `samples` in this SELECT (its alias, else `samples`) when
/// the rewrite applies to it.
fn applies_to(select: &Select) -> Option<String> {
    let (name, qualifier) = single_table(select)?;
    if name != "samples" {
        return None;
    }
    // Without GROUP BY, grouped rows would change a plain SELECT's row count (and an
    // aggregate over no rows: count gives 0, sum null).
    let GroupByExpr::Expressions(keys, modifiers) = &select.group_by else {
        return None;
    };
    if keys.is_empty() || !modifiers.is_empty() {
        return None;
    }
    let aliases = aliases(select);
    let names = Names {
        qualifier: &qualifier,
        aliases: &aliases,
    };
    let projection_ok = select.projection.iter().all(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
            names.allows(e, false)
        }
        _ => false,
    });
    let clauses_ok = keys.iter().all(|e| names.allows(e, true))
        && select
            .selection
            .as_ref()
            .is_none_or(|e| names.allows(e, false))
        && select.having.as_ref().is_none_or(|e| names.allows(e, true));
    (projection_ok && clauses_ok).then_some(qualifier)
}

/// The one table a plain SELECT reads (no join, table function, hints, ...) and the
/// qualifier that names it (its alias, else its name).
pub(super) fn single_table(select: &Select) -> Option<(String, String)> {
    let plain = select.top.is_none()
        && select.exclude.is_none()
        && select.into.is_none()
        && select.lateral_views.is_empty()
        && select.prewhere.is_none()
        && select.connect_by.is_empty()
        && select.cluster_by.is_empty()
        && select.distribute_by.is_empty()
        && select.sort_by.is_empty()
        && select.named_window.is_empty()
        && select.qualify.is_none()
        && select.value_table_mode.is_none();
    if !plain {
        return None;
    }
    let [from] = select.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Table {
        name,
        alias,
        args: None,
        with_hints,
        version: None,
        partitions,
        json_path: None,
        sample: None,
        index_hints,
        ..
    } = &from.relation
    else {
        return None;
    };
    if !(with_hints.is_empty() && partitions.is_empty() && index_hints.is_empty()) {
        return None;
    }
    let name = name.to_string().trim_matches('"').to_string();
    let qualifier = match alias {
        Some(a) if !a.columns.is_empty() => return None,
        Some(a) => a.name.value.clone(),
        None => name.clone(),
    };
    Some((name, qualifier))
}

fn aliases(select: &Select) -> Vec<String> {
    select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            _ => None,
        })
        .collect()
}

/// What an expression may name.
struct Names<'a> {
    qualifier: &'a str,
    aliases: &'a [String],
}

impl Names<'_> {
    /// True when every column `e` names is a grouped column (or, with `aliases_too`, a
    /// SELECT alias), every function is a known scalar, `count(*)`, `min`, `max` or a
    /// `count(DISTINCT ...)`, and there is no subquery or window.
    fn allows(&self, e: &Expr, aliases_too: bool) -> bool {
        struct Check<'a, 'b> {
            names: &'a Names<'b>,
            aliases_too: bool,
        }
        impl Visitor for Check<'_, '_> {
            type Break = ();
            fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
                ControlFlow::Break(())
            }
            fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
                let ok = match e {
                    Expr::Identifier(id) => {
                        is_grouped_column(&id.value)
                            || (self.aliases_too && self.names.aliases.contains(&id.value))
                    }
                    Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                        [q, c] => q.value == self.names.qualifier && is_grouped_column(&c.value),
                        _ => false,
                    },
                    Expr::Function(f) => function_allowed(f),
                    Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => false,
                    _ => true,
                };
                if ok {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            }
        }
        e.visit(&mut Check {
            names: self,
            aliases_too,
        })
        .is_continue()
    }
}

fn function_name(f: &Function) -> Option<String> {
    match f.name.0.as_slice() {
        [part] => Some(part.as_ident()?.value.to_lowercase()),
        _ => None,
    }
}

fn function_allowed(f: &Function) -> bool {
    if f.over.is_some()
        || f.filter.is_some()
        || f.null_treatment.is_some()
        || !f.within_group.is_empty()
        || !matches!(f.parameters, FunctionArguments::None)
    {
        return false;
    }
    let Some(name) = function_name(f) else {
        return false;
    };
    if is_count_of_rows(f) {
        return true;
    }
    let FunctionArguments::List(list) = &f.args else {
        return false;
    };
    if !list.clauses.is_empty() {
        return false;
    }
    let distinct = matches!(
        list.duplicate_treatment,
        Some(sqlparser::ast::DuplicateTreatment::Distinct)
    );
    if name == "count" {
        return distinct;
    }
    if distinct {
        return false;
    }
    REPEAT_FREE_AGGREGATES.contains(&name.as_str()) || SCALAR_FUNCTIONS.contains(&name.as_str())
}

/// `count(*)` or `count(<literal>)` (not DISTINCT): the number of rows.
fn is_count_of_rows(f: &Function) -> bool {
    if function_name(f).as_deref() != Some("count") || f.over.is_some() || f.filter.is_some() {
        return false;
    }
    let FunctionArguments::List(list) = &f.args else {
        return false;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return false;
    }
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] => true,
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))] => {
            matches!(v.value, Value::Number(..) | Value::SingleQuotedString(_))
        }
        _ => false,
    }
}

fn contains_count_of_rows(e: &Expr) -> bool {
    struct Find;
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Function(f) if is_count_of_rows(f) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    e.visit(&mut Find).is_break()
}

/// Replaces `count(*)` by `sum(WEIGHT_COLUMN)`.
struct CountToWeight;

impl VisitorMut for CountToWeight {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e {
            if is_count_of_rows(f) {
                if let Some(sum) = weight_sum() {
                    *e = sum;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

fn weight_sum() -> Option<Expr> {
    super::ast::parse_expr(&format!("sum({WEIGHT_COLUMN})")).ok()
}

#[cfg(test)]
mod unit {
    use super::*;

    fn rewritten(sql: &str) -> Option<String> {
        let r = rewrite(sql, 1)?;
        assert!(r.distinct_stacks.is_empty(), "{sql}");
        Some(r.sql)
    }

    #[test]
    fn count_by_grouped_columns_is_rewritten() {
        let out = rewritten(
            "select funcname, count(*) as n from samples where has_gil \
             group by funcname having count(*) > 2 order by count(*) desc limit 10",
        )
        .expect("rewritten");
        assert_eq!(
            out,
            "SELECT funcname, sum(__tach_samples) AS n FROM __tach_sample_groups \
             WHERE has_gil GROUP BY funcname HAVING sum(__tach_samples) > 2 \
             ORDER BY n DESC LIMIT 10"
        );
        // An alias and qualified columns; a subquery's SELECT.
        assert!(rewritten(
            "select s.thread_id, count(1) from samples s group by s.thread_id order by 2"
        )
        .is_some());
        let nested = rewritten(
            "select * from (select lineno, count(*) as n from samples \
             where funcname = 'f' group by lineno) t order by n desc",
        )
        .expect("rewritten");
        assert!(nested.contains("FROM __tach_sample_groups"), "{nested}");
    }

    #[test]
    fn distinct_stack_columns_are_read_from_a_distinct_table() {
        let r = rewrite(
            "select s.funcname, sum(c.samples) as samples \
             from (select distinct file, stack_id, funcname from stacks) s \
             join stack_counts c on s.file = c.file and s.stack_id = c.stack_id \
             group by s.funcname order by samples desc limit 10",
            2,
        )
        .expect("rewritten");
        assert_eq!(
            r.sql,
            "SELECT s.funcname, sum(c.samples) AS samples FROM (SELECT file, stack_id, \
             funcname FROM __tach_distinct_stacks_0) s JOIN stack_counts c \
             ON s.file = c.file AND s.stack_id = c.stack_id GROUP BY s.funcname \
             ORDER BY samples DESC LIMIT 10"
        );
        assert_eq!(r.distinct_stacks, [["file", "stack_id", "funcname"]]);
        // Two of them, an alias, a repeated column; a count rewrite beside them.
        let r = rewrite(
            "select * from (select distinct t.funcname as f, t.funcname from stacks t) a, \
             (select distinct lineno from stacks) b, \
             (select funcname, count(*) as n from samples group by funcname) c",
            1,
        )
        .expect("rewritten");
        assert_eq!(r.distinct_stacks, vec![vec!["funcname"], vec!["lineno"]]);
        assert!(r.sql.contains("FROM __tach_distinct_stacks_1"), "{}", r.sql);
        assert!(r.sql.contains("FROM __tach_sample_groups"), "{}", r.sql);
    }

    #[test]
    fn distinct_queries_it_cannot_answer_are_left_alone() {
        for (sql, files) in [
            ("select funcname from stacks", 1),
            ("select distinct on (stack_id) funcname from stacks", 1),
            ("select distinct funcname from stacks where lineno > 3", 1),
            ("select distinct funcname from stacks order by funcname", 1),
            ("select distinct funcname from stacks limit 3", 1),
            ("select distinct lower(funcname) from stacks", 1),
            ("select distinct * from stacks", 1),
            (
                "select distinct funcname, count(*) from stacks group by funcname",
                1,
            ),
            (
                "select distinct s.funcname from stacks s join frames f on s.frame_id = f.frame_id",
                1,
            ),
            ("select distinct funcname from frames", 1),
            ("select distinct samples from stack_counts", 1),
            // several files and no `file` column: rows of two files could be equal
            ("select distinct funcname from stacks", 2),
            (
                "with stacks as (select * from frames) select distinct funcname from stacks",
                1,
            ),
        ] {
            assert_eq!(rewrite(sql, files), None, "{sql}");
        }
    }

    #[test]
    fn anything_that_depends_on_single_samples_is_left_alone() {
        for sql in [
            // no GROUP BY: grouped rows would change the row count
            "select funcname from samples",
            "select count(*) from samples",
            // per-sample columns
            "select funcname, count(*) from samples where time_s < 1 group by funcname",
            "select funcname, max(timestamp_us) from samples group by funcname",
            "select cast(time_s * 10 as int) as b, count(*) from samples group by b",
            // aggregates that count repeats
            "select funcname, sum(lineno) from samples group by funcname",
            "select funcname, avg(depth) from samples group by funcname",
            // a join, a window, a subquery, a CTE named samples
            "select s.funcname, count(*) from samples s join frames f \
             on s.frame_id = f.frame_id group by s.funcname",
            "select funcname, count(*) over () from samples group by funcname",
            "select funcname, count(*) from samples where frame_id in \
             (select frame_id from frames) group by funcname",
            "with samples as (select * from frames) select funcname, count(*) \
             from samples group by funcname",
            // unknown functions are not assumed to be scalar
            "select funcname, median(depth) from samples group by funcname",
            "select funcname, count(*) filter (where has_gil) from samples group by funcname",
        ] {
            assert_eq!(rewritten(sql), None, "{sql}");
        }
    }
}
