//! `EXISTS (subquery)` and `NOT EXISTS (subquery)`, which polars' SQL does not know,
//! as semi and anti joins.
//!
//! - An uncorrelated EXISTS (its subquery names nothing of the outer query) is run
//!   first and becomes TRUE or FALSE.
//! - A correlated one that is a condition of WHERE (alone or joined by AND), whose
//!   subquery reads its own FROM and ties it to the outer query only by equalities
//!   `inner expression = outer column` joined by AND, becomes
//!   `SEMI JOIN (SELECT inner expressions FROM ... WHERE the other conditions) ON
//!   outer column = ...` (`ANTI JOIN` for NOT EXISTS): the same rows, each once, as
//!   SQL's EXISTS gives. A NULL on either side matches nothing, as in SQL.
//! - Any other correlated EXISTS is refused with a sentence that says which form works.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Query, Select, SetExpr, Statement, TableFactor,
    TableWithJoins, Visit, VisitMut, Visitor, VisitorMut,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::error::QueryError;

/// Rewrites every EXISTS of `query`; true when anything changed.
pub fn rewrite(
    query: &mut Query,
    scalar: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<bool, QueryError> {
    let mut each = Each {
        scalar,
        changed: false,
        joins: 0,
    };
    match VisitMut::visit(query, &mut each) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(each.changed),
    }
}

struct Each<'a> {
    scalar: &'a mut dyn FnMut(&str) -> Option<String>,
    changed: bool,
    /// Semi and anti joins added so far (their aliases are numbered).
    joins: usize,
}

fn refuse(what: String) -> QueryError {
    QueryError::Forbidden(what)
}

/// The names that qualify columns of a FROM list: each table's alias, else its name.
pub(super) fn qualifiers(from: &[TableWithJoins]) -> HashSet<String> {
    let mut out = HashSet::new();
    for t in from {
        for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            match factor {
                TableFactor::Table { name, alias, .. } => {
                    out.insert(match alias {
                        Some(a) => a.name.value.clone(),
                        None => name
                            .0
                            .last()
                            .and_then(|p| p.as_ident())
                            .map(|i| i.value.clone())
                            .unwrap_or_default(),
                    });
                }
                TableFactor::Derived { alias: Some(a), .. } => {
                    out.insert(a.name.value.clone());
                }
                _ => {}
            }
        }
    }
    out
}

/// True when `e` names a column qualified by one of `outer` (and not shadowed by
/// `inner`), at any depth.
pub(super) fn names_outer(
    e: &impl Visit,
    outer: &HashSet<String>,
    inner: &HashSet<String>,
) -> bool {
    struct Find<'a>(&'a HashSet<String>, &'a HashSet<String>);
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Expr::CompoundIdentifier(parts) = e {
                if let [q, _] = parts.as_slice() {
                    if self.0.contains(&q.value) && !self.1.contains(&q.value) {
                        return ControlFlow::Break(());
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    e.visit(&mut Find(outer, inner)).is_break()
}

pub(super) fn conjuncts(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts(*left, out);
            conjuncts(*right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner, out)
        }
        other => out.push(other),
    }
}

pub(super) fn and_all(parts: Vec<Expr>) -> Option<Expr> {
    parts.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

const FORM: &str = "write it as `EXISTS (SELECT ... FROM t WHERE t.column = outer.column \
                    AND ...)` in WHERE (joined by AND), or as a join";

impl Each<'_> {
    /// EXISTS whose subquery names nothing outside itself: its value, computed now.
    fn uncorrelated(&mut self, subquery: &Query, negated: bool) -> Option<Expr> {
        let count = (self.scalar)(&format!(
            "SELECT count(*) FROM ({subquery}) AS __tach_exists"
        ))?;
        let found = count.trim().parse::<i64>().ok()? > 0;
        Some(Expr::Value(
            sqlparser::ast::Value::Boolean(found != negated).into(),
        ))
    }

    /// The semi or anti join that answers a correlated EXISTS in `select`'s WHERE.
    fn join(
        &mut self,
        outer: &HashSet<String>,
        subquery: &Query,
        negated: bool,
    ) -> Result<String, QueryError> {
        let not = if negated { "NOT " } else { "" };
        let SetExpr::Select(sub) = subquery.body.as_ref() else {
            return Err(refuse(format!(
                "{not}EXISTS over a UNION or VALUES that names the outer query is not \
                 supported: {FORM}"
            )));
        };
        let grouped = match &sub.group_by {
            GroupByExpr::All(_) => true,
            GroupByExpr::Expressions(k, _) => !k.is_empty(),
        };
        let inner = qualifiers(&sub.from);
        if grouped
            || sub.having.is_some()
            || subquery.with.is_some()
            || names_outer(&sub.from, outer, &inner)
        {
            return Err(refuse(format!(
                "{not}EXISTS whose subquery groups, has its own WITH, or names the outer \
                 query outside its WHERE is not supported: {FORM}"
            )));
        }
        let mut local = Vec::new();
        let mut keys: Vec<(Expr, Expr)> = Vec::new();
        let mut parts = Vec::new();
        if let Some(w) = sub.selection.clone() {
            conjuncts(w, &mut parts);
        }
        for c in parts {
            if !names_outer(&c, outer, &inner) {
                local.push(c);
                continue;
            }
            let Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } = &c
            else {
                return Err(refuse(format!(
                    "{not}EXISTS ties its subquery to the outer query with `{c}`; only \
                     equalities are supported: {FORM}"
                )));
            };
            let outer_column = |e: &Expr| {
                matches!(e, Expr::CompoundIdentifier(p)
                    if p.len() == 2 && outer.contains(&p[0].value) && !inner.contains(&p[0].value))
            };
            let (o, i) = if outer_column(left) && !names_outer(right.as_ref(), outer, &inner) {
                (left, right)
            } else if outer_column(right) && !names_outer(left.as_ref(), outer, &inner) {
                (right, left)
            } else {
                return Err(refuse(format!(
                    "{not}EXISTS ties its subquery to the outer query with `{c}`; one side \
                     must be an outer column and the other name only the subquery's \
                     tables: {FORM}"
                )));
            };
            keys.push(((**o).clone(), (**i).clone()));
        }
        let n = self.joins;
        self.joins += 1;
        let alias = format!("__tach_e{n}");
        let mut inner_select: Select = sub.as_ref().clone();
        inner_select.distinct = None;
        inner_select.selection = and_all(local);
        inner_select.projection = Vec::new();
        let items: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(k, (_, i))| format!("{i} AS {alias}_{k}"))
            .collect();
        let on: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(k, (o, _))| format!("{o} = {alias}.{alias}_{k}"))
            .collect();
        let text =
            inner_select
                .to_string()
                .replacen("SELECT", &format!("SELECT {}", items.join(", ")), 1);
        let kind = if negated { "ANTI" } else { "SEMI" };
        Ok(format!(
            "{kind} JOIN ({text}) AS {alias} ON {}",
            on.join(" AND ")
        ))
    }
}

/// True when `e` holds an EXISTS of its own SELECT (not one inside a subquery's
/// clauses, which the walk meets with that subquery's SELECT).
fn holds_exists(e: &Expr) -> bool {
    struct Find(usize, bool);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.0 += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.0 -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if self.0 == 0 && matches!(e, Expr::Exists { .. }) {
                self.1 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut f = Find(0, false);
    let _ = e.visit(&mut f);
    f.1
}

/// Uncorrelated EXISTS anywhere become their value.
struct Values<'a, 'b>(&'a mut Each<'b>);

impl VisitorMut for Values<'_, '_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Exists { subquery, negated } = e {
            if let Some(v) = self.0.uncorrelated(subquery, *negated) {
                *e = v;
                self.0.changed = true;
            }
        }
        ControlFlow::Continue(())
    }
}

impl VisitorMut for Each<'_> {
    type Break = QueryError;

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<QueryError> {
        let outer = qualifiers(&select.from);
        let mut kept = Vec::new();
        let mut joins = Vec::new();
        let mut parts = Vec::new();
        if let Some(selection) = select.selection.take() {
            conjuncts(selection, &mut parts);
        }
        for c in parts {
            let (target, negated) = match &c {
                Expr::Exists { subquery, negated } => (Some(subquery.clone()), *negated),
                Expr::UnaryOp {
                    op: sqlparser::ast::UnaryOperator::Not,
                    expr,
                } => match expr.as_ref() {
                    Expr::Exists { subquery, negated } => (Some(subquery.clone()), !*negated),
                    _ => (None, false),
                },
                _ => (None, false),
            };
            let Some(subquery) = target else {
                kept.push(c);
                continue;
            };
            let inner = qualifiers(match subquery.body.as_ref() {
                SetExpr::Select(s) => &s.from,
                _ => &[],
            });
            if !names_outer(subquery.as_ref(), &outer, &inner) {
                if let Some(v) = self.uncorrelated(&subquery, negated) {
                    kept.push(v);
                    self.changed = true;
                    continue;
                }
                kept.push(c);
                continue;
            }
            match self.join(&outer, &subquery, negated) {
                Ok(j) => {
                    joins.push(j);
                    self.changed = true;
                }
                Err(e) => return ControlFlow::Break(e),
            }
        }
        select.selection = and_all(kept);
        let _ = VisitMut::visit(select, &mut Values(self));
        let clauses = select
            .projection
            .iter()
            .filter_map(|item| match item {
                sqlparser::ast::SelectItem::UnnamedExpr(e)
                | sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
                _ => None,
            })
            .chain(select.selection.iter())
            .chain(select.having.iter())
            .chain(select.qualify.iter());
        for e in clauses {
            if holds_exists(e) {
                return ControlFlow::Break(refuse(format!(
                    "EXISTS that names the outer query is supported only as a condition \
                     of WHERE, alone or joined by AND (not under OR or CASE, nor in the \
                     SELECT list or HAVING): {FORM}"
                )));
            }
        }
        if joins.is_empty() {
            return ControlFlow::Continue(());
        }
        if select.from.len() != 1 {
            return ControlFlow::Break(refuse(format!(
                "EXISTS that names the outer query needs one FROM item (tables joined \
                 with JOIN, not listed with commas): {FORM}"
            )));
        }
        let text = format!("SELECT 1 FROM __tach_outer {}", joins.join(" "));
        let parsed = Parser::new(&GenericDialect)
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_statement());
        let Ok(Statement::Query(q)) = parsed else {
            return ControlFlow::Break(refuse(format!(
                "EXISTS could not be rewritten as a join: {FORM}"
            )));
        };
        let SetExpr::Select(s) = *q.body else {
            return ControlFlow::Continue(());
        };
        let Some(first) = s.from.into_iter().next() else {
            return ControlFlow::Continue(());
        };
        select.from[0].joins.extend(first.joins);
        ControlFlow::Continue(())
    }
}
