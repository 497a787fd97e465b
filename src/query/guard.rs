//! Checks a SQL text before polars runs it: one SELECT query over the registered
//! tables only. polars' SQL also has table functions that read files
//! (`read_parquet('...')`, `read_csv`, ...) and statements that create or drop tables;
//! a query over a profile must not reach the file system, so those are refused here,
//! with the same parser (and dialect) polars uses.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{ObjectName, Query, Select, SetExpr, Statement, TableFactor, Visit, Visitor};

use super::error::QueryError;

/// Parses `sql` as polars does and checks it.
pub fn check(sql: &str, tables: &[&str]) -> Result<(), QueryError> {
    let statements =
        super::ast::parse_statements(sql).map_err(|e| QueryError::syntax(sql, e.to_string()))?;
    let statement = match statements.as_slice() {
        [one] => one,
        [] => {
            return Err(QueryError::Forbidden(
                "the SQL text has no statement".into(),
            ))
        }
        _ => {
            return Err(QueryError::Forbidden(
                "give one SELECT statement at a time".into(),
            ))
        }
    };
    let Statement::Query(query) = statement else {
        return Err(QueryError::Forbidden(format!(
            "only SELECT queries run here, not `{}`: tach query reads the profile and \
             never writes or reads other files",
            first_words(&statement.to_string())
        )));
    };
    let mut guard = Guard {
        tables,
        ctes: HashSet::new(),
    };
    // CTE names are visible anywhere in the query; collect them first.
    collect_ctes(query, &mut guard.ctes);
    match query.visit(&mut guard) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn first_words(s: &str) -> String {
    s.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

fn collect_ctes(query: &Query, out: &mut HashSet<String>) {
    struct Ctes<'a>(&'a mut HashSet<String>);
    impl Visitor for Ctes<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
            if let Some(with) = &q.with {
                for cte in &with.cte_tables {
                    self.0.insert(cte.alias.name.value.clone());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = query.visit(&mut Ctes(out));
}

struct Guard<'a> {
    tables: &'a [&'a str],
    ctes: HashSet<String>,
}

impl Guard<'_> {
    fn table_list(&self) -> String {
        self.tables.join(", ")
    }
}

impl Visitor for Guard<'_> {
    type Break = QueryError;

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<QueryError> {
        if let SetExpr::Select(select) = q.body.as_ref() {
            return check_select(select);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<QueryError> {
        check_select(select)
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<QueryError> {
        let refuse = |what: String| {
            ControlFlow::Break(QueryError::Forbidden(format!(
                "{what} is not allowed: SQL here sees only the profile's tables ({})",
                self.table_list()
            )))
        };
        match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            } => refuse(format!("the table function {name}(...)")),
            TableFactor::TableFunction { expr, .. } => refuse(format!("the table function {expr}")),
            TableFactor::Function { name, .. } => refuse(format!("the table function {name}(...)")),
            TableFactor::Table { name, .. } => self.check_name(name),
            _ => ControlFlow::Continue(()),
        }
    }
}

impl Guard<'_> {
    fn check_name(&self, name: &ObjectName) -> ControlFlow<QueryError> {
        let text = name.to_string();
        let bare = text.trim_matches('"');
        if self.tables.contains(&bare) || self.ctes.contains(bare) {
            return ControlFlow::Continue(());
        }
        ControlFlow::Break(QueryError::UnknownTable {
            name: text,
            tables: self.table_list(),
        })
    }
}

fn check_select(select: &Select) -> ControlFlow<QueryError> {
    if select.into.is_some() {
        return ControlFlow::Break(QueryError::Forbidden(
            "SELECT ... INTO creates a table: not allowed here".into(),
        ));
    }
    ControlFlow::Continue(())
}
