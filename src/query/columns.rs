//! What a samples scan builds: the columns a query asks for and the columns shared by
//! the in-memory scans (`tables.rs`) and the batch pipeline (`batches.rs`). A leaf
//! beside `schema.rs`, so the scans and the pipeline do not import each other.

use std::sync::Arc;

use polars::prelude::*;

use crate::tach::filter::status as flag;

/// Which columns a scan must build (`None`: all).
pub(crate) struct Wanted(pub(crate) Option<Arc<[PlSmallStr]>>);

impl Wanted {
    pub(crate) fn has(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|cols| cols.iter().any(|c| c.as_str() == name))
    }
}

/// A `file` column holding one value: a scalar column costs no memory per row.
pub(crate) fn file_column(name: &str, len: usize) -> Column {
    Column::new_scalar(
        "file".into(),
        Scalar::new(DataType::String, AnyValue::StringOwned(name.into())),
        len,
    )
}

/// The `status` column and its flag columns, those `w` asks for.
pub(crate) fn status_columns(w: &Wanted, status: &[u8]) -> Vec<Column> {
    let mut cols = Vec::new();
    if w.has("status") {
        cols.push(Column::new(
            "status".into(),
            status.iter().map(|&s| s as i32).collect::<Vec<_>>(),
        ));
    }
    for f in flag::FLAGS {
        if w.has(f.column) {
            cols.push(Column::new(
                f.column.into(),
                status.iter().map(|&s| s & f.bit != 0).collect::<Vec<_>>(),
            ));
        }
    }
    cols
}
