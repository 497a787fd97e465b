//! `GROUP BY ROLLUP (...)`, `CUBE (...)` and `GROUPING SETS (...)`, which polars' SQL
//! lacks, as SQL defines them: one GROUP BY per grouping set, combined with UNION ALL,
//! where a key a grouping leaves out is NULL in the SELECT list and HAVING (outside
//! aggregates) and `grouping(k, ...)` is the bit mask of the keys left out (1 for a key
//! left out, the first argument the highest bit), as DuckDB computes it.
//!
//! A grouping set with no keys aggregates all rows into one; a SELECT without an
//! aggregate would give one row per input row there instead, so that is refused.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, GroupByExpr, Ident, Query, Select, SelectItem, SetExpr, SetOperator, SetQuantifier,
    Value, VisitMut, VisitorMut,
};

use super::ast::{call_args, function_name, has_aggregate, is_aggregate};
use super::error::QueryError;

/// More grouping sets than this (a CUBE of 7 keys has 128) are refused: each is a scan.
const MAX_SETS: usize = 64;

/// Rewrites every SELECT of `query` that groups by grouping sets.
pub fn rewrite(query: &mut Query) -> Result<bool, QueryError> {
    let mut each = Each {
        changed: false,
        error: None,
    };
    let _ = VisitMut::visit(query, &mut each);
    match each.error {
        Some(e) => Err(e),
        None => Ok(each.changed),
    }
}

struct Each {
    changed: bool,
    error: Option<QueryError>,
}

impl VisitorMut for Each {
    type Break = ();
    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        match expand_body(q.body.as_mut()) {
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

fn expand_body(body: &mut SetExpr) -> Result<bool, QueryError> {
    match body {
        SetExpr::SetOperation { left, right, .. } => {
            let l = expand_body(left)?;
            Ok(expand_body(right)? || l)
        }
        SetExpr::Select(select) => match expand(select)? {
            Some(union) => {
                *body = union;
                Ok(true)
            }
            None => Ok(false),
        },
        _ => Ok(false),
    }
}

/// The grouping sets of a GROUP BY list, or None when it holds none of the forms.
fn grouping_sets(exprs: &[Expr]) -> Result<Option<Vec<Vec<Expr>>>, QueryError> {
    if !exprs
        .iter()
        .any(|e| matches!(e, Expr::Rollup(_) | Expr::Cube(_) | Expr::GroupingSets(_)))
    {
        return Ok(None);
    }
    // Each GROUP BY item is a list of alternatives; the sets are their cross product.
    let mut sets: Vec<Vec<Expr>> = vec![Vec::new()];
    for e in exprs {
        let alternatives: Vec<Vec<Expr>> = match e {
            Expr::Rollup(parts) => (0..=parts.len())
                .rev()
                .map(|n| parts[..n].concat())
                .collect(),
            Expr::Cube(parts) => {
                if parts.len() > 6 {
                    return Err(too_many());
                }
                // DuckDB's order: most keys first.
                let mut subsets: Vec<Vec<Expr>> = (0..1usize << parts.len())
                    .rev()
                    .map(|mask| {
                        (0..parts.len())
                            .filter(|i| mask & (1 << (parts.len() - 1 - i)) != 0)
                            .flat_map(|i| parts[i].clone())
                            .collect()
                    })
                    .collect();
                subsets.dedup();
                subsets
            }
            Expr::GroupingSets(sets) => sets.clone(),
            other => vec![vec![other.clone()]],
        };
        sets = sets
            .iter()
            .flat_map(|s| {
                alternatives.iter().map(move |a| {
                    let mut s = s.clone();
                    s.extend(a.iter().cloned());
                    s
                })
            })
            .collect();
        if sets.len() > MAX_SETS {
            return Err(too_many());
        }
    }
    Ok(Some(sets))
}

fn too_many() -> QueryError {
    QueryError::Forbidden(format!(
        "GROUP BY with more than {MAX_SETS} grouping sets is not supported: list the groupings you need in GROUPING SETS (...)"
    ))
}

/// The UNION ALL of one grouped SELECT per grouping set of `select`, None when it
/// groups by plain expressions.
fn expand(select: &Select) -> Result<Option<SetExpr>, QueryError> {
    let GroupByExpr::Expressions(exprs, modifiers) = &select.group_by else {
        return Ok(None);
    };
    let Some(sets) = grouping_sets(exprs)? else {
        return Ok(None);
    };
    if !modifiers.is_empty() {
        return Err(QueryError::Forbidden(
            "GROUP BY ... WITH ROLLUP/CUBE/TOTALS is not supported: write GROUP BY ROLLUP (...) or GROUPING SETS (...)".to_string(),
        ));
    }
    let aggregated = select.projection.iter().any(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => has_aggregate(e),
        _ => false,
    });
    if !aggregated && sets.iter().any(|s| s.is_empty()) {
        return Err(QueryError::Forbidden(
            "a grouping set of no keys needs an aggregate in the SELECT list (count(*), sum(...)): add one, or leave out the empty grouping".to_string(),
        ));
    }
    if select.having.is_some() && sets.iter().any(|s| s.is_empty()) {
        return Err(QueryError::Forbidden(
            "HAVING with a grouping set of no keys (the grand total of ROLLUP, CUBE or `()`) is not supported: filter the grouped rows in an outer query (select * from (... group by rollup (...)) where n > 100)".to_string(),
        ));
    }
    if select.distinct.is_some() || select.qualify.is_some() {
        return Err(QueryError::Forbidden(
            "SELECT DISTINCT or QUALIFY with grouping sets is not supported: group in a subquery and select from it".to_string(),
        ));
    }
    // Every key of any set, with the SELECT alias it may stand for.
    let mut keys: Vec<Expr> = Vec::new();
    for e in sets.iter().flatten() {
        if !keys.contains(e) {
            keys.push(e.clone());
        }
    }
    let aliases: Vec<(String, Expr)> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { expr, alias } => Some((alias.value.clone(), expr.clone())),
            _ => None,
        })
        .collect();
    let resolve = |key: &Expr| -> Expr {
        if let Expr::Identifier(id) = key {
            if let Some((_, e)) = aliases.iter().find(|(a, _)| *a == id.value) {
                return e.clone();
            }
        }
        key.clone()
    };
    let mut branches = Vec::with_capacity(sets.len());
    for set in &sets {
        let left_out: Vec<Expr> = keys
            .iter()
            .filter(|k| !set.contains(k))
            .flat_map(|k| [k.clone(), resolve(k)])
            .collect();
        let mut branch = select.clone();
        branch.group_by = GroupByExpr::Expressions(set.clone(), Vec::new());
        let mut nulls = LeftOut {
            left_out: &left_out,
            keys: &keys,
            set,
            resolve: &resolve,
            inside_aggregate: 0,
            error: None,
        };
        for item in branch.projection.iter_mut() {
            match item {
                SelectItem::UnnamedExpr(e) => {
                    // Keep the written name of the column.
                    let name = e.to_string();
                    let _ = VisitMut::visit(e, &mut nulls);
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::with_quote('"', name),
                    };
                }
                SelectItem::ExprWithAlias { expr, .. } => {
                    let _ = VisitMut::visit(expr, &mut nulls);
                }
                _ => {
                    return Err(QueryError::Forbidden(
                        "SELECT * with grouping sets is not supported: name the columns"
                            .to_string(),
                    ))
                }
            }
        }
        if let Some(h) = branch.having.as_mut() {
            let _ = VisitMut::visit(h, &mut nulls);
        }
        if let Some(e) = nulls.error {
            return Err(e);
        }
        branches.push(SetExpr::Select(Box::new(branch)));
    }
    let mut union = branches.remove(0);
    for b in branches {
        union = SetExpr::SetOperation {
            left: Box::new(union),
            op: SetOperator::Union,
            set_quantifier: SetQuantifier::All,
            right: Box::new(b),
        };
    }
    Ok(Some(union))
}

/// Puts NULL for the keys a grouping set leaves out (outside aggregates) and the
/// grouping bit mask for `grouping(...)`.
struct LeftOut<'a> {
    left_out: &'a [Expr],
    keys: &'a [Expr],
    set: &'a [Expr],
    resolve: &'a dyn Fn(&Expr) -> Expr,
    inside_aggregate: usize,
    error: Option<QueryError>,
}

impl VisitorMut for LeftOut<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e {
            if is_aggregate(f) {
                self.inside_aggregate += 1;
                return ControlFlow::Continue(());
            }
            let name = function_name(f);
            if self.inside_aggregate == 0 && (name == "grouping" || name == "grouping_id") {
                let args = call_args(f).unwrap_or_default();
                let mut mask: u64 = 0;
                for a in &args {
                    let Some(key) = self.keys.iter().find(|k| {
                        format!("({k})") == *a || format!("({})", (self.resolve)(k)) == *a
                    }) else {
                        self.error = Some(QueryError::Forbidden(format!(
                            "`{f}` names a column that is not a grouping key: grouping() takes GROUP BY keys"
                        )));
                        return ControlFlow::Break(());
                    };
                    mask = (mask << 1) | u64::from(!self.set.contains(key));
                }
                *e = Expr::value(Value::Number(mask.to_string(), false));
                return ControlFlow::Continue(());
            }
        }
        if self.inside_aggregate == 0 && self.left_out.contains(e) {
            *e = Expr::value(Value::Null);
        }
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e {
            if is_aggregate(f) {
                self.inside_aggregate -= 1;
            }
        }
        ControlFlow::Continue(())
    }
}
