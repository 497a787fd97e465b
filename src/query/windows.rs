//! Window ORDER BYs that mix directions, which polars' SQL refuses ("OVER does not
//! (yet) support mixed asc/desc directions"): `row_number() over (partition by thread_id
//! order by count(*) desc, funcname)` is how analysts rank.
//!
//! Negating a number reverses its order, so the descending keys become ascending ones
//! (`-(count(*))`) when they are all numbers, or else the ascending keys become
//! descending ones when those are. Which keys are numbers is asked of polars (the
//! caller plans `SELECT keys FROM <the SELECT's FROM> LIMIT 0`). When neither side is
//! all numbers (a text key each way) the window is left as written and polars refuses
//! it.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, OrderByExpr, Query, SelectItem, SetExpr, UnaryOperator, VisitMut, VisitorMut,
    WindowType, With,
};

/// Rewrites the mixed-direction windows of every SELECT of `query`. `numeric` tells,
/// for a query, which of its output columns are numbers (None: it does not plan).
pub fn rewrite(query: &mut Query, numeric: &mut dyn FnMut(&str) -> Option<Vec<bool>>) -> bool {
    let mut each = Each {
        top_with: query.with.clone(),
        numeric,
        changed: false,
    };
    let _ = VisitMut::visit(query, &mut each);
    each.changed
}

struct Each<'a> {
    top_with: Option<With>,
    numeric: &'a mut dyn FnMut(&str) -> Option<Vec<bool>>,
    changed: bool,
}

fn is_mixed(order: &[OrderByExpr]) -> bool {
    let asc = |o: &OrderByExpr| o.options.asc.unwrap_or(true);
    order.iter().any(asc) && !order.iter().all(asc)
}

/// Rewrites the mixed-direction windows of one SELECT's expressions (not those of its
/// subqueries, which the outer walk meets with their own SELECT).
struct Fix<'a, 'b> {
    /// The probe's text around the keys: `WITH ... SELECT ` (with ever fewer CTEs)
    /// and ` FROM ... LIMIT 0`.
    befores: &'a [String],
    after: &'a str,
    numeric: &'a mut dyn FnMut(&str) -> Option<Vec<bool>>,
    changed: &'b mut bool,
    depth: usize,
}

impl Fix<'_, '_> {
    fn fix(&mut self, order: &mut [OrderByExpr]) {
        let keys: Vec<String> = order.iter().map(|o| o.expr.to_string()).collect();
        // A CTE after the one this window is in may not plan yet (it may hold this
        // very window): the longest prefix of the WITH that plans is used.
        let Some(numbers) = self.befores.iter().find_map(|before| {
            (self.numeric)(&format!("{before}{}{}", keys.join(", "), self.after))
        }) else {
            return;
        };
        if numbers.len() != order.len() {
            return;
        }
        let asc: Vec<bool> = order
            .iter()
            .map(|o| o.options.asc.unwrap_or(true))
            .collect();
        // Negate the keys of one direction, all numbers, to the other: to all
        // ascending (flip = false) or all descending (flip = true).
        let flip = if (0..asc.len()).all(|k| asc[k] || numbers[k]) {
            false
        } else if (0..asc.len()).all(|k| !asc[k] || numbers[k]) {
            true
        } else {
            return;
        };
        for (k, o) in order.iter_mut().enumerate() {
            if asc[k] == flip {
                o.expr = Expr::UnaryOp {
                    op: UnaryOperator::Minus,
                    expr: Box::new(Expr::Nested(Box::new(o.expr.clone()))),
                };
            }
            o.options.asc = Some(!flip);
        }
        *self.changed = true;
    }
}

impl VisitorMut for Fix<'_, '_> {
    type Break = ();
    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        if let Expr::Function(Function {
            over: Some(WindowType::WindowSpec(spec)),
            ..
        }) = e
        {
            if is_mixed(&spec.order_by) {
                self.fix(&mut spec.order_by);
            }
        }
        ControlFlow::Continue(())
    }
}

impl VisitorMut for Each<'_> {
    type Break = ();
    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        let with = q.with.clone().or_else(|| self.top_with.clone());
        let SetExpr::Select(select) = q.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        let from: Vec<String> = select.from.iter().map(|t| t.to_string()).collect();
        let mut befores = Vec::new();
        if let Some(w) = with {
            for n in (1..=w.cte_tables.len()).rev() {
                let mut prefix = w.clone();
                prefix.cte_tables.truncate(n);
                befores.push(format!("{prefix} SELECT "));
            }
        }
        befores.push("SELECT ".to_string());
        let after = if from.is_empty() {
            " LIMIT 0".to_string()
        } else {
            format!(" FROM {} LIMIT 0", from.join(", "))
        };
        let mut fix = Fix {
            befores: &befores,
            after: &after,
            numeric: &mut *self.numeric,
            changed: &mut self.changed,
            depth: 0,
        };
        for item in select.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                let _ = VisitMut::visit(e, &mut fix);
            }
        }
        if let Some(e) = select.qualify.as_mut() {
            let _ = VisitMut::visit(e, &mut fix);
        }
        ControlFlow::Continue(())
    }
}
