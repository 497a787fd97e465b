//! Grouped SELECTs that polars' SQL cannot answer in one step, answered in two.
//!
//! In a grouped SELECT polars computes a window function within each group (so
//! `count(*) * 100.0 / sum(count(*)) over ()` reads 100 for every row), and it cannot
//! sort by an aggregate that the SELECT list does not hold (`... group by thread_id
//! order by count(*) desc`: "lengths don't match"). SQL evaluates the grouping first,
//! then the windows, HAVING, QUALIFY and ORDER BY over the grouped rows; that order is
//! made explicit here:
//!
//! ```sql
//! SELECT items' FROM (SELECT key_0 AS __tach_k0, ..., agg_0 AS __tach_a0, ...
//!                     FROM ... WHERE ... GROUP BY __tach_k0, ...) AS __tach_grouped
//! WHERE having' QUALIFY qualify' ORDER BY order' LIMIT ...
//! ```
//!
//! where each primed clause is the original with every grouping key and every
//! aggregate replaced by its inner column. A SELECT that this cannot express (GROUP BY
//! ALL, a column that is neither grouped nor aggregated, a subquery among its items, a
//! named window) is left as it was.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, GroupByExpr, Ident, OrderByKind, Query, Select, SelectItem, SetExpr, Statement, Value,
    Visit, VisitMut, Visitor, VisitorMut,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::ast::{has_aggregate, has_window, is_aggregate};

/// The derived table the outer stage reads.
const GROUPED: &str = "__tach_grouped";

/// Rewrites every grouped SELECT of `query` (at any depth) that needs two stages.
/// True when anything changed.
pub fn rewrite(query: &mut Query) -> bool {
    struct Each(bool);
    impl VisitorMut for Each {
        type Break = ();
        fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            if needs_two_stages(q) {
                if let Some(rewritten) = two_stages(q) {
                    *q = rewritten;
                    self.0 = true;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut each = Each(false);
    let _ = VisitMut::visit(query, &mut each);
    each.0
}

fn items(select: &Select) -> impl Iterator<Item = &Expr> {
    select.projection.iter().filter_map(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
        _ => None,
    })
}

fn is_aggregated(select: &Select) -> bool {
    let grouped = match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(keys, _) => !keys.is_empty(),
    };
    grouped || items(select).any(has_aggregate)
}

/// A grouped SELECT whose items or QUALIFY hold a window function, or whose ORDER BY
/// holds an aggregate that is not one of its items.
fn needs_two_stages(q: &Query) -> bool {
    let SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    if !is_aggregated(select) {
        return false;
    }
    let windows = items(select).any(has_window)
        || select
            .qualify
            .as_ref()
            .is_some_and(|e| has_window(e) && has_aggregate(e));
    let selected: Vec<String> = items(select).map(|e| e.to_string()).collect();
    let hidden_order = order_exprs(q)
        .iter()
        .any(|e| has_aggregate(e) && !selected.contains(&e.to_string()));
    windows || hidden_order
}

fn order_exprs(q: &Query) -> Vec<Expr> {
    match q.order_by.as_ref().map(|o| &o.kind) {
        Some(OrderByKind::Expressions(exprs)) => exprs.iter().map(|o| o.expr.clone()).collect(),
        _ => Vec::new(),
    }
}

fn ident(name: &str) -> Expr {
    Expr::Identifier(Ident::new(name))
}

/// The name SQL gives an unaliased item (DuckDB's: a column's own name, else the
/// expression's text).
fn output_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.clone(),
        Expr::CompoundIdentifier(parts) => {
            parts.last().map(|i| i.value.clone()).unwrap_or_default()
        }
        _ => e.to_string(),
    }
}

/// Replaces grouping keys and aggregates by the inner stage's columns.
struct Stage {
    /// (key text, key's last name for a qualified column) -> `__tach_k{i}`.
    keys: Vec<(String, Option<String>)>,
    /// Aggregates, by their text, in first-seen order: `__tach_a{j}`.
    aggregates: Vec<(String, Expr)>,
    /// A column reference that is neither grouped nor aggregated was met.
    stray: bool,
    /// Output aliases, which ORDER BY may name.
    aliases: Vec<String>,
    in_order_by: bool,
}

impl Stage {
    fn key(&self, e: &Expr) -> Option<usize> {
        let text = e.to_string();
        if let Some(i) = self.keys.iter().position(|(k, _)| *k == text) {
            return Some(i);
        }
        // `s.funcname` against a key `funcname` (or the other way round), when exactly
        // one key has that name.
        let name = match e {
            Expr::CompoundIdentifier(parts) => parts.last()?.value.clone(),
            Expr::Identifier(i) => i.value.clone(),
            _ => return None,
        };
        let mut found = self
            .keys
            .iter()
            .enumerate()
            .filter(|(_, (k, last))| last.as_deref() == Some(name.as_str()) || *k == name);
        match (found.next(), found.next()) {
            (Some((i, _)), None) => Some(i),
            _ => None,
        }
    }

    fn substitute(&mut self, e: &mut Expr) {
        let _ = VisitMut::visit(e, self);
    }
}

impl VisitorMut for Stage {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        // An output name put in QUALIFY above stays one.
        if let Expr::Identifier(i) = e {
            if self.in_order_by && i.quote_style.is_some() && self.aliases.contains(&i.value) {
                return ControlFlow::Continue(());
            }
        }
        if let Some(i) = self.key(e) {
            *e = ident(&format!("__tach_k{i}"));
            return ControlFlow::Continue(());
        }
        match e {
            Expr::Function(f) if is_aggregate(f) => {
                let text = e.to_string();
                let j = match self.aggregates.iter().position(|(t, _)| *t == text) {
                    Some(j) => j,
                    None => {
                        self.aggregates.push((text, e.clone()));
                        self.aggregates.len() - 1
                    }
                };
                *e = ident(&format!("__tach_a{j}"));
            }
            Expr::Identifier(i) if i.value.starts_with("__tach_") => {}
            Expr::Identifier(i) if self.in_order_by && self.aliases.contains(&i.value) => {}
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => self.stray = true,
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// True when `e` holds a subquery (its columns belong to another SELECT).
fn has_subquery(e: &Expr) -> bool {
    struct Find;
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }
    e.visit(&mut Find).is_break()
}

/// The two-stage form of `q`, or None when it cannot be written.
fn two_stages(q: &Query) -> Option<Query> {
    let SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    let GroupByExpr::Expressions(keys, modifiers) = &select.group_by else {
        return None;
    };
    if !modifiers.is_empty() || !select.named_window.is_empty() || select.into.is_some() {
        return None;
    }
    let order = order_exprs(q);
    if items(select)
        .chain(select.having.iter())
        .chain(select.qualify.iter())
        .chain(order.iter())
        .any(has_subquery)
    {
        return None;
    }
    if select.projection.iter().any(|i| {
        !matches!(
            i,
            SelectItem::UnnamedExpr(_) | SelectItem::ExprWithAlias { .. }
        )
    }) {
        return None;
    }
    // Each key as an expression: an alias or an ordinal names a SELECT item.
    let aliased: Vec<(String, Expr)> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { expr, alias } => Some((alias.value.clone(), expr.clone())),
            _ => None,
        })
        .collect();
    let all_items: Vec<Expr> = items(select).cloned().collect();
    let mut key_exprs = Vec::new();
    for k in keys {
        let resolved = match k {
            Expr::Identifier(i) => aliased
                .iter()
                .find(|(a, e)| *a == i.value && !has_aggregate(e))
                .map(|(_, e)| e.clone())
                .unwrap_or_else(|| k.clone()),
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => {
                    let at: usize = n.parse().ok()?;
                    all_items.get(at.checked_sub(1)?)?.clone()
                }
                _ => k.clone(),
            },
            _ => k.clone(),
        };
        if has_aggregate(&resolved) || has_window(&resolved) {
            return None;
        }
        key_exprs.push(resolved);
    }
    let mut stage = Stage {
        keys: key_exprs
            .iter()
            .map(|k| {
                let last = match k {
                    Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()),
                    _ => None,
                };
                (k.to_string(), last)
            })
            .collect(),
        aggregates: Vec::new(),
        stray: false,
        aliases: Vec::new(),
        in_order_by: false,
    };
    // The outer items, each with its output name.
    let mut outer_items = Vec::new();
    for item in &select.projection {
        let (mut e, name) = match item {
            SelectItem::UnnamedExpr(e) => (e.clone(), output_name(e)),
            SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), alias.value.clone()),
            _ => return None,
        };
        stage.substitute(&mut e);
        stage.aliases.push(name.clone());
        outer_items.push(format!("{e} AS {}", Ident::with_quote('"', name)));
    }
    // HAVING becomes the outer WHERE; an alias there stands for its item.
    let having = select.having.clone().map(|mut h| {
        let _ = VisitMut::visit(&mut h, &mut AliasesToItems(&aliased));
        stage.substitute(&mut h);
        h
    });
    // polars evaluates QUALIFY over the outer items only: an item's expression there is
    // that item's name, and nothing else of the inner stage may remain.
    let item_names: Vec<(String, Expr)> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some((output_name(e), e.clone())),
            SelectItem::ExprWithAlias { expr, alias } => Some((alias.value.clone(), expr.clone())),
            _ => None,
        })
        .collect();
    let mut qualify = select.qualify.clone();
    if let Some(e) = qualify.as_mut() {
        let _ = VisitMut::visit(e, &mut ItemsToNames(&item_names));
        stage.in_order_by = true;
        let before = stage.stray;
        stage.substitute(e);
        stage.in_order_by = false;
        if stage.stray != before || e.to_string().contains("__tach_") {
            return None;
        }
    }
    let mut query = q.clone();
    if let Some(o) = query.order_by.as_mut() {
        if let OrderByKind::Expressions(exprs) = &mut o.kind {
            stage.in_order_by = true;
            for o in exprs.iter_mut() {
                // An ordinal or an output name is the outer item's already.
                if matches!(&o.expr, Expr::Value(_))
                    || matches!(&o.expr, Expr::Identifier(i) if stage.aliases.contains(&i.value)
                        && stage.key(&o.expr).is_none())
                {
                    continue;
                }
                stage.substitute(&mut o.expr);
            }
            stage.in_order_by = false;
        }
    }
    if stage.stray {
        return None;
    }
    let mut inner = select.as_ref().clone();
    inner.distinct = None;
    inner.having = None;
    inner.qualify = None;
    inner.projection = Vec::new();
    let mut inner_items: Vec<String> = key_exprs
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{k} AS __tach_k{i}"))
        .collect();
    inner_items.extend(
        stage
            .aggregates
            .iter()
            .enumerate()
            .map(|(j, (_, a))| format!("{a} AS __tach_a{j}")),
    );
    if inner_items.is_empty() {
        return None;
    }
    let group_by: Vec<String> = (0..key_exprs.len())
        .map(|i| format!("__tach_k{i}"))
        .collect();
    inner.group_by = GroupByExpr::Expressions(Vec::new(), Vec::new());
    let inner_text =
        inner
            .to_string()
            .replacen("SELECT", &format!("SELECT {}", inner_items.join(", ")), 1);
    let inner_text = if group_by.is_empty() {
        inner_text
    } else {
        format!("{inner_text} GROUP BY {}", group_by.join(", "))
    };
    let distinct = match &select.distinct {
        Some(d) => format!("{d} "),
        None => String::new(),
    };
    let mut outer = format!(
        "SELECT {distinct}{} FROM ({inner_text}) AS {GROUPED}",
        outer_items.join(", ")
    );
    if let Some(h) = having {
        outer.push_str(&format!(" WHERE {h}"));
    }
    if let Some(e) = qualify {
        outer.push_str(&format!(" QUALIFY {e}"));
    }
    let parsed = Parser::new(&GenericDialect)
        .try_with_sql(&outer)
        .and_then(|mut p| p.parse_statement())
        .ok()?;
    let Statement::Query(parsed) = parsed else {
        return None;
    };
    query.body = parsed.body;
    Some(query)
}

/// A SELECT item's expression -> that item's output name.
struct ItemsToNames<'a>(&'a [(String, Expr)]);

impl VisitorMut for ItemsToNames<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let text = e.to_string();
        if let Some((name, _)) = self.0.iter().find(|(_, item)| item.to_string() == text) {
            *e = Expr::Identifier(Ident::with_quote('"', name.clone()));
        }
        ControlFlow::Continue(())
    }
}

/// An identifier naming a SELECT alias -> that item's expression.
struct AliasesToItems<'a>(&'a [(String, Expr)]);

impl VisitorMut for AliasesToItems<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Identifier(i) = e {
            if let Some((_, item)) = self.0.iter().find(|(a, _)| *a == i.value) {
                *e = Expr::Nested(Box::new(item.clone()));
            }
        }
        ControlFlow::Continue(())
    }
}
