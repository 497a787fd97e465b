//! The grouped samples table over many profiles, in memory bounded by a group of
//! profiles rather than by the whole input.
//!
//! polars runs one plan over every input at once: with a fleet of recordings (ten
//! thousand TACH files, or a dataset of forty thousand partition files) each file's
//! scan, and what it decodes, is alive together, so memory grows with the number of
//! files. The count pushdown (`pushdown`) reduces a query to `sum(weight)` over
//! [`GROUPED_TABLE`]; that table can be computed a group of profiles at a time instead:
//! each group's rows are grouped by the columns polars asks for (the ones the query
//! names) with their weights summed, and the partial tables are combined the same way.
//! A sum of weights is exact, so the rows are the same as the whole scan grouped by
//! those columns, which is what every query the pushdown rewrites needs (counts, `min`,
//! `max` and `count(DISTINCT ...)` over grouped columns, filters on them). Memory is
//! then one group's scan plus the combined table (one row per distinct combination of
//! the asked columns: a few thousand for a function, a few million for every stack of
//! every file).
//!
//! Other grouped aggregates over `samples` are split into partial aggregates
//! (`partial`); their partial rows are computed and combined here the same way.

use std::any::Any;
use std::sync::Arc;

use polars::prelude::*;

use polars::sql::SQLContext;

use super::parquet_input::ParquetInput;
use super::partial::{Partial, PARTIALS_TABLE};
use super::schema::{sample_groups_schema, signed, GROUPED_TABLE, WEIGHT_COLUMN};
use super::tables::{self, Source};

/// Profiles scanned together: a TACH file, or one partition of a dataset (with its
/// `stack_counts` file, about 100 KB of Parquet for a recording of 30,000 samples).
/// Inputs with at most this many profiles run as one scan, as before.
pub const GROUP_PROFILES: usize = 64;

/// One group of profiles.
enum Group {
    /// TACH files, reopened when the group is scanned: what a scan decodes is cached
    /// in its [`Source`], and the engine's own sources would keep every file's.
    Tach(Vec<Arc<Source>>),
    /// Some of a Parquet input's partitions.
    Parquet(Box<ParquetInput>),
}

/// The grouped table over `groups`, computed group by group when scanned.
struct BoundedGroups(Vec<Group>);

/// The groups of at most `per` profiles over the inputs, in order (TACH files that
/// follow each other share groups).
fn groups<'a>(inputs: impl IntoIterator<Item = Input<'a>>, per: usize) -> Vec<Group> {
    let per = per.max(1);
    let mut groups = Vec::new();
    let mut tach: Vec<Arc<Source>> = Vec::new();
    for input in inputs {
        match input {
            Input::Tach(s) => {
                tach.push(s.clone());
                if tach.len() == per {
                    groups.push(Group::Tach(std::mem::take(&mut tach)));
                }
            }
            Input::Parquet(p) => {
                groups.extend(
                    p.groups(per)
                        .into_iter()
                        .map(|g| Group::Parquet(Box::new(g))),
                );
            }
        }
    }
    if !tach.is_empty() {
        groups.push(Group::Tach(tach));
    }
    groups
}

/// The grouped samples table over the inputs, computed `per` profiles at a time when
/// scanned.
pub(super) fn grouped_table<'a>(
    inputs: impl IntoIterator<Item = Input<'a>>,
    per: usize,
) -> PolarsResult<LazyFrame> {
    LazyFrame::anonymous_scan(
        Arc::new(BoundedGroups(groups(inputs, per))),
        ScanArgsAnonymous {
            schema: Some(Arc::new(sample_groups_schema())),
            name: "tach samples grouped, a group of profiles at a time",
            ..Default::default()
        },
    )
}

/// The partial rows of a split query ([`Partial`]) over the inputs, computed `per`
/// profiles at a time when scanned and combined as they come; None when the inner
/// query cannot be planned.
pub(super) fn partial_rows<'a>(
    inputs: impl IntoIterator<Item = Input<'a>>,
    per: usize,
    split: &Partial,
) -> Option<LazyFrame> {
    let groups = groups(inputs, per);
    let schema = inner_rows(groups.first()?, &split.inner)
        .ok()?
        .collect_schema()
        .ok()?;
    LazyFrame::anonymous_scan(
        Arc::new(PartialGroups {
            groups,
            split: split.clone(),
            schema: schema.clone(),
        }),
        ScanArgsAnonymous {
            schema: Some(schema),
            name: "tach partial aggregates, a group of profiles at a time",
            ..Default::default()
        },
    )
    .ok()
}

/// An input as [`grouped_table`] sees it.
pub(super) enum Input<'a> {
    Tach(&'a Arc<Source>),
    Parquet(&'a ParquetInput),
}

impl Group {
    /// Table `name` over this group.
    fn table(&self, name: &str) -> PolarsResult<LazyFrame> {
        match self {
            Group::Parquet(p) => p.table(name),
            Group::Tach(sources) => {
                let fresh: Vec<Arc<Source>> = sources.iter().map(reopened).collect();
                tables::table(name, &fresh)
            }
        }
    }
}

/// A source with nothing decoded yet: the same file, opened when the group's scan
/// reads it.
fn reopened(s: &Arc<Source>) -> Arc<Source> {
    Arc::new(Source::later(s.name.clone(), s.path().to_path_buf()))
}

/// `lf`'s rows grouped by `keys` (in first-seen order), weights summed.
fn regrouped(lf: LazyFrame, keys: &[PlSmallStr]) -> LazyFrame {
    let total = col(WEIGHT_COLUMN)
        .sum()
        .cast(IDX_DTYPE)
        .alias(WEIGHT_COLUMN);
    if keys.is_empty() {
        return lf.select([total]);
    }
    lf.group_by_stable(keys.iter().map(|k| col(k.clone())).collect::<Vec<_>>())
        .agg([total])
}

impl AnonymousScan for BoundedGroups {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(Arc::new(sample_groups_schema()))
    }
    fn allows_projection_pushdown(&self) -> bool {
        true
    }
    fn scan(&self, args: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        let schema = sample_groups_schema();
        // The grouping keys: the columns asked for (all when polars names none), in
        // the order asked; the weight is always summed.
        let keys: Vec<PlSmallStr> = match &args.with_columns {
            Some(cols) => cols
                .iter()
                .filter(|c| c.as_str() != WEIGHT_COLUMN && schema.contains(c))
                .cloned()
                .collect(),
            None => schema
                .iter_names()
                .filter(|c| c.as_str() != WEIGHT_COLUMN)
                .cloned()
                .collect(),
        };
        let mut columns: Vec<Expr> = keys.iter().map(|k| col(k.clone())).collect();
        columns.push(col(WEIGHT_COLUMN));
        // Partial tables wait until they hold more rows than the combined one, so each
        // row is combined a few times, not once per group.
        let mut parts: Vec<DataFrame> = Vec::new();
        let (mut combined_rows, mut pending_rows) = (0, 0);
        let part = |group: &Group| {
            regrouped(group.table(GROUPED_TABLE)?.select(columns.clone()), &keys).collect()
        };
        in_order(&self.0, part, |part| {
            pending_rows += part.height();
            parts.push(part);
            if pending_rows > combined_rows.max(COMBINE_ROWS) {
                let df = combined(std::mem::take(&mut parts), &keys)?;
                combined_rows = df.height();
                pending_rows = 0;
                parts.push(df);
            }
            Ok(())
        })?;
        let mut df = if parts.is_empty() {
            regrouped(
                DataFrame::empty_with_schema(&schema).lazy().select(columns),
                &keys,
            )
            .collect()?
        } else {
            combined(parts, &keys)?
        };
        // polars wants the columns in the order it asked for them.
        if let Some(cols) = &args.with_columns {
            df = df.select(cols.iter().cloned())?;
        }
        Ok(df)
    }
}

/// Groups scanned at once: a group's scan is mostly one core's work (opening and
/// decoding its files one after another), so the cores take a group each.
fn groups_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// `part` of every group, computed `groups_at_once()` groups at a time, handed to `take`
/// in the groups' order (so that the combined rows, and a float's sum, are the same on
/// every run); memory holds one batch of parts.
fn in_order(
    groups: &[Group],
    part: impl Fn(&Group) -> PolarsResult<DataFrame> + Sync,
    mut take: impl FnMut(DataFrame) -> PolarsResult<()>,
) -> PolarsResult<()> {
    let at_once = groups_at_once();
    for batch in groups.chunks(at_once) {
        let parts: Vec<PolarsResult<DataFrame>> = if batch.len() == 1 {
            vec![part(&batch[0])]
        } else {
            std::thread::scope(|scope| {
                let running: Vec<_> = batch
                    .iter()
                    .map(|group| scope.spawn(|| part(group)))
                    .collect();
                running
                    .into_iter()
                    .map(|r| {
                        r.join().unwrap_or_else(|_| {
                            Err(PolarsError::ComputeError(
                                "a group of profiles failed to scan (a panic)".into(),
                            ))
                        })
                    })
                    .collect()
            })
        };
        for p in parts {
            take(p?)?;
        }
    }
    Ok(())
}

/// Rows of partial tables combined at once, at least.
const COMBINE_ROWS: usize = 1 << 16;

/// The partial tables as one, grouped again.
fn combined(parts: Vec<DataFrame>, keys: &[PlSmallStr]) -> PolarsResult<DataFrame> {
    if parts.len() == 1 {
        return Ok(parts.into_iter().next().unwrap_or_default());
    }
    let lazy = parts.into_iter().map(DataFrame::lazy).collect::<Vec<_>>();
    regrouped(concat(lazy, UnionArgs::default())?, keys).collect()
}

/// The inner query of a split over one group: its partial rows.
fn inner_rows(group: &Group, inner: &str) -> PolarsResult<LazyFrame> {
    let ctx = SQLContext::new();
    ctx.register("samples", signed(group.table("samples")?)?);
    ctx.clone().execute(inner)
}

/// Partial rows combined: the combine query over them, in `schema`'s types.
fn combined_partials(
    parts: Vec<DataFrame>,
    split: &Partial,
    schema: &Schema,
) -> PolarsResult<DataFrame> {
    let lazy = parts.into_iter().map(DataFrame::lazy).collect::<Vec<_>>();
    let ctx = SQLContext::new();
    ctx.register(PARTIALS_TABLE, concat(lazy, UnionArgs::default())?);
    let casts: Vec<Expr> = schema
        .iter()
        .map(|(name, dtype)| col(name.clone()).strict_cast(dtype.clone()))
        .collect();
    ctx.clone().execute(&split.combine)?.select(casts).collect()
}

/// A split query's partial rows over groups of profiles.
struct PartialGroups {
    groups: Vec<Group>,
    split: Partial,
    schema: SchemaRef,
}

impl AnonymousScan for PartialGroups {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(self.schema.clone())
    }
    fn scan(&self, _: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        // As for the grouped table: partial rows wait until they outnumber the combined
        // ones, then are combined with them.
        let mut parts: Vec<DataFrame> = Vec::new();
        let (mut combined_rows, mut pending_rows) = (0, 0);
        let part = |group: &Group| inner_rows(group, &self.split.inner)?.collect();
        in_order(&self.groups, part, |part| {
            pending_rows += part.height();
            parts.push(part);
            if pending_rows > combined_rows.max(COMBINE_ROWS) {
                let df = combined_partials(std::mem::take(&mut parts), &self.split, &self.schema)?;
                combined_rows = df.height();
                pending_rows = 0;
                parts.push(df);
            }
            Ok(())
        })?;
        match parts.len() {
            0 => Ok(DataFrame::empty_with_schema(&self.schema)),
            1 => Ok(parts.pop().unwrap_or_default()),
            _ => combined_partials(parts, &self.split, &self.schema),
        }
    }
}
