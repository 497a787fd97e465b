//! Correlated scalar subqueries (`where depth > (select avg(depth) from samples y
//! where y.thread_id = x.thread_id)`), which polars' SQL does not know, as a grouped
//! LEFT JOIN: the subquery's aggregate grouped by its side of the correlating
//! equalities, joined on the outer side, its column in place of the subquery.
//!
//! A row whose keys match no group gets what SQL's aggregate of no rows is: NULL, or 0
//! for a `count(...)`. A NULL key matches nothing, as `=` in the subquery's WHERE.
//! Only a subquery of one aggregate over its own FROM, tied to the outer query by
//! `inner expression = outer column` joined by AND, in the WHERE or SELECT list of an
//! ungrouped SELECT with one FROM item is rewritten; polars refuses the others.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Query, Select, SelectItem, SetExpr, Statement, VisitMut,
    VisitorMut,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::ast::{function_name, has_aggregate};
use super::error::QueryError;
use super::exists::{and_all, conjuncts, names_outer, qualifiers};

/// Rewrites the correlated scalar subqueries of every SELECT of `query`.
pub fn rewrite(query: &mut Query) -> Result<bool, QueryError> {
    let mut each = Each {
        changed: false,
        joins: 0,
    };
    match VisitMut::visit(query, &mut each) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(each.changed),
    }
}

struct Each {
    changed: bool,
    /// Joins added so far (their aliases are numbered).
    joins: usize,
}

const FORM: &str = "write the subquery as one aggregate tied to the outer query by \
                    equalities (`(SELECT avg(x) FROM t y WHERE y.k = outer.k)`), or \
                    aggregate in a subquery grouped by the key and join it";

impl VisitorMut for Each {
    type Break = QueryError;

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<QueryError> {
        let grouped = match &select.group_by {
            GroupByExpr::All(_) => true,
            GroupByExpr::Expressions(k, _) => !k.is_empty(),
        };
        if grouped || select.from.len() != 1 {
            return ControlFlow::Continue(());
        }
        let outer = qualifiers(&select.from);
        let mut joins = Vec::new();
        let mut found = Found {
            outer: &outer,
            depth: 0,
            joins: &mut joins,
            next: &mut self.joins,
            error: None,
        };
        if let Some(w) = select.selection.as_mut() {
            let _ = VisitMut::visit(w, &mut found);
        }
        for item in select.projection.iter_mut() {
            if let SelectItem::ExprWithAlias { expr, .. } = item {
                let _ = VisitMut::visit(expr, &mut found);
            } else if let SelectItem::UnnamedExpr(e) = item {
                let name = e.to_string();
                let before = found.joins.len();
                let _ = VisitMut::visit(e, &mut found);
                if found.joins.len() != before {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: sqlparser::ast::Ident::with_quote('"', name),
                    };
                }
            }
        }
        if let Some(e) = found.error {
            return ControlFlow::Break(e);
        }
        if joins.is_empty() {
            return ControlFlow::Continue(());
        }
        let text = format!("SELECT 1 FROM __tach_outer {}", joins.join(" "));
        let parsed = Parser::new(&GenericDialect)
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_statement());
        let Ok(Statement::Query(q)) = parsed else {
            return ControlFlow::Break(QueryError::Forbidden(format!(
                "a correlated subquery could not be rewritten as a join: {FORM}"
            )));
        };
        if let SetExpr::Select(s) = *q.body {
            if let Some(first) = s.from.into_iter().next() {
                select.from[0].joins.extend(first.joins);
                self.changed = true;
            }
        }
        ControlFlow::Continue(())
    }
}

/// Replaces each correlated scalar subquery of one expression (not inside another
/// subquery) by the column of its join.
struct Found<'a> {
    outer: &'a HashSet<String>,
    depth: usize,
    joins: &'a mut Vec<String>,
    next: &'a mut usize,
    error: Option<QueryError>,
}

impl VisitorMut for Found<'_> {
    type Break = ();
    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        let Expr::Subquery(q) = e else {
            return ControlFlow::Continue(());
        };
        let inner = match q.body.as_ref() {
            SetExpr::Select(s) => qualifiers(&s.from),
            _ => HashSet::new(),
        };
        if !names_outer(q.as_ref(), self.outer, &inner) {
            return ControlFlow::Continue(());
        }
        match self.join(q, &inner) {
            Ok((join, column)) => {
                self.joins.push(join);
                *e = column;
                ControlFlow::Continue(())
            }
            Err(err) => {
                self.error = Some(err);
                ControlFlow::Break(())
            }
        }
    }
}

impl Found<'_> {
    /// The LEFT JOIN that answers `subquery`, and the expression that takes its place.
    fn join(
        &mut self,
        subquery: &Query,
        inner: &HashSet<String>,
    ) -> Result<(String, Expr), QueryError> {
        let refuse = |what: &str| {
            QueryError::Forbidden(format!(
                "a correlated subquery ({what}) is not supported: {FORM}"
            ))
        };
        let SetExpr::Select(sub) = subquery.body.as_ref() else {
            return Err(refuse("over a UNION or VALUES"));
        };
        let grouped = match &sub.group_by {
            GroupByExpr::All(_) => true,
            GroupByExpr::Expressions(k, _) => !k.is_empty(),
        };
        if grouped
            || sub.having.is_some()
            || sub.distinct.is_some()
            || subquery.with.is_some()
            || subquery.order_by.is_some()
            || subquery.limit_clause.is_some()
            || names_outer(&sub.from, self.outer, inner)
        {
            return Err(refuse(
                "one that groups, orders, limits, has its own WITH, or names the outer query in its FROM",
            ));
        }
        let value = match sub.projection.as_slice() {
            [SelectItem::UnnamedExpr(v) | SelectItem::ExprWithAlias { expr: v, .. }]
                if has_aggregate(v) && !names_outer(v, self.outer, inner) =>
            {
                v.clone()
            }
            _ => return Err(refuse("one that is not one aggregate")),
        };
        // No rows give count 0 and every other aggregate NULL; a join that finds no
        // group gives NULL, so a bare count becomes 0 there. Any other expression of a
        // count could be neither.
        let bare_count = matches!(&value, Expr::Function(f) if function_name(f) == "count");
        if !bare_count && value.to_string().to_ascii_lowercase().contains("count(") {
            return Err(refuse("one that computes with a count"));
        }
        let mut local = Vec::new();
        let mut keys: Vec<(Expr, Expr)> = Vec::new();
        let mut parts = Vec::new();
        if let Some(w) = sub.selection.clone() {
            conjuncts(w, &mut parts);
        }
        for c in parts {
            if !names_outer(&c, self.outer, inner) {
                local.push(c);
                continue;
            }
            let Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } = &c
            else {
                return Err(refuse(&format!(
                    "tied to the outer query by `{c}`, not an equality"
                )));
            };
            let outer_column = |e: &Expr| {
                matches!(e, Expr::CompoundIdentifier(p)
                    if p.len() == 2 && self.outer.contains(&p[0].value) && !inner.contains(&p[0].value))
            };
            let (o, i) = if outer_column(left) && !names_outer(right.as_ref(), self.outer, inner) {
                (left, right)
            } else if outer_column(right) && !names_outer(left.as_ref(), self.outer, inner) {
                (right, left)
            } else {
                return Err(refuse(&format!(
                    "tied to the outer query by `{c}`, which is not an outer column equal to an inner expression"
                )));
            };
            keys.push(((**o).clone(), (**i).clone()));
        }
        if keys.is_empty() {
            return Err(refuse("tied to the outer query by no equality"));
        }
        let n = *self.next;
        *self.next += 1;
        let alias = format!("__tach_s{n}");
        let mut grouped_select: Select = sub.as_ref().clone();
        grouped_select.selection = and_all(local);
        grouped_select.projection = Vec::new();
        let items: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(k, (_, i))| format!("{i} AS {alias}_{k}"))
            .chain([format!("{value} AS {alias}_v")])
            .collect();
        let group: Vec<String> = keys.iter().map(|(_, i)| i.to_string()).collect();
        let on: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(k, (o, _))| format!("{o} = {alias}.{alias}_{k}"))
            .collect();
        let text = format!(
            "{} GROUP BY {}",
            grouped_select.to_string().replacen(
                "SELECT",
                &format!("SELECT {}", items.join(", ")),
                1
            ),
            group.join(", ")
        );
        let column = if bare_count {
            format!("coalesce({alias}.{alias}_v, 0)")
        } else {
            format!("{alias}.{alias}_v")
        };
        let column = super::ast::parse_expr(&column).map_err(|_| refuse("unparsed"))?;
        Ok((
            format!("LEFT JOIN ({text}) AS {alias} ON {}", on.join(" AND ")),
            Expr::Nested(Box::new(column)),
        ))
    }
}
