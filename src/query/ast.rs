//! Predicates over sqlparser's AST that the rewrites share (which calls are
//! aggregates, whether an expression holds a window or an aggregate). A leaf: it
//! imports no other query module, so every rewrite can use it.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Query, Statement, Visit,
    Visitor,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError, ParserOptions};

/// Aggregate functions polars' SQL knows (a window over one of these inside a grouped
/// SELECT is refused).
const AGGREGATES: [&str; 20] = [
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "median",
    "stddev",
    "stddev_samp",
    "variance",
    "var_samp",
    "first",
    "last",
    "array_agg",
    "string_agg",
    "quantile_cont",
    "quantile_disc",
    "percentile_cont",
    "percentile_disc",
    "corr",
];

/// A call's arguments as SQL text, each in parentheses (`*` for count(*)), or None for
/// other forms (DISTINCT, ORDER BY inside the call, named arguments): what the rewrites
/// splice into the SQL they build.
pub(super) fn call_args(f: &Function) -> Option<Vec<String>> {
    let FunctionArguments::List(list) = &f.args else {
        return match f.args {
            FunctionArguments::None => Some(Vec::new()),
            _ => None,
        };
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(format!("({e})")),
            FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => Some("*".to_string()),
            _ => None,
        })
        .collect()
}

/// Parses `sql` as polars' SQL does (a trailing comma in a list is allowed).
pub(super) fn parse_statements(sql: &str) -> Result<Vec<Statement>, ParserError> {
    Parser::new(&GenericDialect)
        .with_options(ParserOptions {
            trailing_commas: true,
            ..Default::default()
        })
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
}

/// Parses the SQL expression a rewrite built.
pub(super) fn parse_expr(text: &str) -> Result<Expr, ParserError> {
    Parser::new(&GenericDialect)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
}

pub(super) fn function_name(f: &Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

pub(super) fn is_aggregate(f: &Function) -> bool {
    f.over.is_none() && AGGREGATES.contains(&function_name(f).as_str())
}

/// True when `e` holds a window function (not in a subquery).
pub(super) fn has_window(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.visit(&mut FnVisitor(|x: &Expr| {
        if let Expr::Function(f) = x {
            found |= f.over.is_some();
        }
    }));
    found
}

/// True when `e` holds an aggregate call (not a window).
pub(super) fn has_aggregate(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.visit(&mut FnVisitor(|x: &Expr| {
        if let Expr::Function(f) = x {
            found |= is_aggregate(f);
        }
    }));
    found
}

/// Calls `f` on every expression, up to the first subquery (whose expressions belong
/// to its own SELECT, which the outer walk visits on its own).
pub(super) struct FnVisitor<F: FnMut(&Expr)>(pub(super) F);

impl<F: FnMut(&Expr)> Visitor for FnVisitor<F> {
    type Break = ();
    fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        ControlFlow::Break(())
    }
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        (self.0)(e);
        ControlFlow::Continue(())
    }
}
