//! The query layer's error type, which every part of `query` returns.

use std::path::PathBuf;

use crate::tach::TachError;

/// Errors of the query layer. [`QueryError::is_usage`] tells the CLI which are the
/// user's SQL (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Read(#[from] TachError),
    #[error("SQL error: {message}{pointer}")]
    Syntax { message: String, pointer: String },
    #[error("{0}")]
    Forbidden(String),
    #[error("unknown table {name}: the tables are {tables}")]
    UnknownTable { name: String, tables: String },
    #[error("{message}")]
    Sql { message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Output(String),
}

pub type Result<T, E = QueryError> = std::result::Result<T, E>;

impl QueryError {
    /// A parser error, with the SQL line and a caret under the position the parser
    /// reports ("at Line: L, Column: C").
    pub fn syntax(sql: &str, message: String) -> Self {
        let pointer = position(&message)
            .and_then(|(line, column)| {
                let text = sql.lines().nth(line.checked_sub(1)?)?;
                let pad = " ".repeat(column.saturating_sub(1));
                Some(format!("\n  {text}\n  {pad}^"))
            })
            .unwrap_or_default();
        QueryError::Syntax { message, pointer }
    }

    /// True for errors in the SQL text itself (bad syntax, refused statements,
    /// unknown tables or columns): the CLI exits with status 2 for those.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            QueryError::Syntax { .. }
                | QueryError::Forbidden(_)
                | QueryError::UnknownTable { .. }
                | QueryError::Sql { .. }
        )
    }
}

/// "... at Line: 3, Column: 14" -> (3, 14).
fn position(message: &str) -> Option<(usize, usize)> {
    let at = message.rfind("Line: ")?;
    let rest = &message[at + 6..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let column: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((line.trim().parse().ok()?, column.parse().ok()?))
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(
            position("Expected: x, found: y at Line: 2, Column: 7"),
            Some((2, 7))
        );
        assert_eq!(position("nothing"), None);
    }
}
