//! `tach top`: per function (or line, or file) the samples where it was running
//! (self) and where it was anywhere on the stack (total), with CPython's pstats
//! semantics: total counts a sample once however often the key recurs on its stack,
//! and time is samples × the file's sampling interval. Several files are summed.

use serde::Serialize;

use super::error::Result;
use super::keys::{seconds_at, FrameKeys, GroupBy, Key, Keys};
#[cfg(feature = "record")]
use crate::names;
use crate::tach::{ProfileIndex, SampleFilter, TachFile};

/// The order of the rows (largest first, except by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "record", derive(clap::ValueEnum))]
pub enum SortBy {
    /// Self time.
    #[default]
    #[cfg_attr(feature = "record", value(name = "self"))]
    SelfTime,
    /// Total time.
    #[cfg_attr(feature = "record", value(name = "total"))]
    TotalTime,
    /// Self samples (differs from self time when the files' intervals differ).
    Samples,
    /// The row's label, ascending.
    Name,
}

impl SortBy {
    pub fn parse(name: &str) -> Result<Self> {
        crate::names::parse(Self::WHAT, name).map_err(super::error::ReportError::Usage)
    }
    /// What a value is, in messages (`unknown sort 'x': use self, total, samples or name`).
    pub const WHAT: &'static str = "sort";
}

super::keys::named_value!(SortBy);

/// How `tach top` and `Profile.top()` build the table. The doc comments are the flags'
/// `--help`; the defaults are the types' own (clap's `default_value_t`, serde's
/// `default`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[cfg_attr(feature = "record", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct TopOptions {
    /// What one row stands for.
    #[cfg_attr(feature = "record", arg(long, default_value_t, value_parser = names::parser::<GroupBy>(GroupBy::WHAT)))]
    pub by: GroupBy,
    /// The order of the rows (largest first, except by name).
    #[cfg_attr(feature = "record", arg(long, default_value_t, value_parser = names::parser::<SortBy>(SortBy::WHAT)))]
    pub sort: SortBy,
    /// Show the first N rows.
    #[cfg_attr(feature = "record", arg(short, long, value_name = "N"))]
    pub limit: Option<usize>,
    /// One row per file and key (a file column) instead of summing the files.
    #[cfg_attr(feature = "record", arg(long))]
    pub per_file: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopRow {
    /// The input file, with `per_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(flatten)]
    pub key: Key,
    pub self_samples: u64,
    pub total_samples: u64,
    /// Percent of all kept samples (of every file).
    pub self_pct: f64,
    pub total_pct: f64,
    pub self_s: f64,
    pub total_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopReport {
    #[serde(skip)]
    pub by: GroupBy,
    pub files: Vec<String>,
    /// Kept samples of every file, empty stacks included (pstats' denominator).
    pub samples: u64,
    pub seconds: f64,
    pub rows: Vec<TopRow>,
}

/// Self and total samples per key, tallied from stacks of keys: the one aggregation
/// behind the printed table (`tach top FILE`) and the live view (`tach top --pid`).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Samples counted, empty stacks included (pstats' denominator).
    pub samples: u64,
    /// (key id, self, total) in first-seen order.
    pub rows: Vec<(u32, u64, u64)>,
    /// Per key id: its row in `rows` (u32::MAX: none yet).
    slot: Vec<u32>,
    /// Per key id: the last stack it was counted in, so that total counts a stack once.
    seen: Vec<u64>,
    stacks: u64,
}

impl Tally {
    /// Counts `count` samples of the stack whose keys (innermost first) are `stack`.
    pub fn add(&mut self, stack: &[u32], count: u64) {
        self.samples += count;
        self.stacks += 1;
        for (n, &k) in stack.iter().enumerate() {
            let k = k as usize;
            if k >= self.slot.len() {
                self.slot.resize(k + 1, u32::MAX);
                self.seen.resize(k + 1, 0);
            }
            if self.slot[k] == u32::MAX {
                self.slot[k] = self.rows.len() as u32;
                self.rows.push((k as u32, 0, 0));
            }
            let row = &mut self.rows[self.slot[k] as usize];
            if n == 0 {
                row.1 += count;
            }
            // Once per stack, however often the key recurs on it.
            if self.seen[k] != self.stacks {
                self.seen[k] = self.stacks;
                row.2 += count;
            }
        }
    }
}

/// One input of a report: its tally, its name and its sampling interval.
pub(crate) struct Counted {
    pub name: String,
    pub interval_us: u64,
    pub tally: Tally,
}

fn count_file(
    file: &TachFile,
    filter: &SampleFilter,
    by: GroupBy,
    keys: &mut Keys,
) -> Result<Counted> {
    let index = ProfileIndex::build(file, filter)?;
    let totals = index.stack_totals();
    let mut frames = FrameKeys::new(file, by);
    let mut tally = Tally::default();
    let mut stack_keys = Vec::new();
    for (id, &count) in totals.iter().enumerate() {
        if count == 0 {
            continue;
        }
        frames.stack_keys(keys, index.stacks.get(id as u32), &mut stack_keys);
        tally.add(&stack_keys, count);
    }
    tally.samples = index.total_samples;
    Ok(Counted {
        name: file.path().display().to_string(),
        interval_us: file.header().sample_interval_us,
        tally,
    })
}

/// The summary table of `files` (summed, or per file).
pub fn top(files: &[TachFile], filter: &SampleFilter, options: &TopOptions) -> Result<TopReport> {
    let mut keys = Keys::default();
    let mut counted = Vec::with_capacity(files.len());
    for file in files {
        counted.push(count_file(file, filter, options.by, &mut keys)?);
    }
    Ok(report(&keys, &counted, options))
}

/// The table of tallied inputs: shares of every input's samples together, rows summed
/// over inputs (or one per input and key), sorted and cut to the limit.
pub(crate) fn report(keys: &Keys, counted: &[Counted], options: &TopOptions) -> TopReport {
    let samples: u64 = counted.iter().map(|c| c.tally.samples).sum();
    let total_seconds: f64 = counted
        .iter()
        .map(|c| seconds_at(c.tally.samples, c.interval_us))
        .sum();
    let pct = |n: u64| {
        if samples == 0 {
            0.0
        } else {
            100.0 * n as f64 / samples as f64
        }
    };
    let mut rows: Vec<TopRow> = Vec::new();
    if options.per_file {
        for c in counted {
            for &(k, s, t) in &c.tally.rows {
                rows.push(TopRow {
                    file: Some(c.name.clone()),
                    key: keys.list[k as usize].clone(),
                    self_samples: s,
                    total_samples: t,
                    self_pct: pct(s),
                    total_pct: pct(t),
                    self_s: seconds_at(s, c.interval_us),
                    total_s: seconds_at(t, c.interval_us),
                });
            }
        }
    } else {
        // (self, total, self_s, total_s) per key, summed over inputs.
        let mut sum: Vec<Option<(u64, u64, f64, f64)>> = vec![None; keys.list.len()];
        let mut order: Vec<u32> = Vec::new();
        for c in counted {
            for &(k, s, t) in &c.tally.rows {
                let e = sum[k as usize].get_or_insert_with(|| {
                    order.push(k);
                    (0, 0, 0.0, 0.0)
                });
                e.0 += s;
                e.1 += t;
                e.2 += seconds_at(s, c.interval_us);
                e.3 += seconds_at(t, c.interval_us);
            }
        }
        for k in order {
            let (s, t, ss, ts) = sum[k as usize].unwrap_or_default();
            rows.push(TopRow {
                file: None,
                key: keys.list[k as usize].clone(),
                self_samples: s,
                total_samples: t,
                self_pct: pct(s),
                total_pct: pct(t),
                self_s: ss,
                total_s: ts,
            });
        }
    }
    sort_rows(&mut rows, options.sort);
    if let Some(n) = options.limit {
        rows.truncate(n);
    }
    TopReport {
        by: options.by,
        files: counted.iter().map(|c| c.name.clone()).collect(),
        samples,
        seconds: total_seconds,
        rows,
    }
}

/// Sorts largest first (by name: ascending); ties by label, then file, so the order
/// is deterministic.
pub(crate) fn sort_rows(rows: &mut [TopRow], sort: SortBy) {
    let tie = |a: &TopRow, b: &TopRow| a.key.cmp(&b.key).then_with(|| a.file.cmp(&b.file));
    rows.sort_by(|a, b| {
        let primary = match sort {
            SortBy::SelfTime => b.self_s.total_cmp(&a.self_s),
            SortBy::TotalTime => b.total_s.total_cmp(&a.total_s),
            SortBy::Samples => b.self_samples.cmp(&a.self_samples),
            SortBy::Name => std::cmp::Ordering::Equal,
        };
        primary.then_with(|| tie(a, b))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> TachFile {
        TachFile::open(crate::golden_corpus::golden_path(name)).unwrap()
    }

    #[test]
    fn recursion_counts_total_once_per_sample() {
        // CPython's own table (cpu_recursive.pstats.txt): fib line 7 is 1858/2955 of
        // 2997 samples; <module> is on every stack.
        let f = golden("cpu_recursive.bin");
        let by_line = TopOptions {
            by: GroupBy::Line,
            ..Default::default()
        };
        let r = top(std::slice::from_ref(&f), &SampleFilter::default(), &by_line).unwrap();
        assert_eq!(r.samples, 2997);
        let fib7 = r
            .rows
            .iter()
            .find(|row| row.key.lineno == 7 && row.key.funcname == "fib")
            .unwrap();
        assert_eq!((fib7.self_samples, fib7.total_samples), (1858, 2955));
        assert_eq!(r.rows[0].key, fib7.key);
        // By function, every line of fib together: never more than every sample.
        let r = top(&[f], &SampleFilter::default(), &TopOptions::default()).unwrap();
        let fib = r.rows.iter().find(|row| row.key.funcname == "fib").unwrap();
        assert_eq!(fib.self_samples, 1858 + 789 + 167 + 141);
        assert!(fib.total_samples >= 2955 && fib.total_samples <= 2997);
    }

    #[test]
    fn files_are_summed_and_per_file_keeps_them_apart() {
        let a = golden("cpu_recursive.bin");
        let b = golden("cpu_recursive_none.bin");
        let one = |f: &TachFile| {
            top(
                &[TachFile::open(f.path()).unwrap()],
                &SampleFilter::default(),
                &TopOptions::default(),
            )
            .unwrap()
        };
        let (ra, rb) = (one(&a), one(&b));
        let both = top(&[a, b], &SampleFilter::default(), &TopOptions::default()).unwrap();
        assert_eq!(both.samples, ra.samples + rb.samples);
        for row in &both.rows {
            let get = |r: &TopReport| {
                r.rows
                    .iter()
                    .find(|x| x.key == row.key)
                    .map_or(0, |x| x.total_samples)
            };
            assert_eq!(row.total_samples, get(&ra) + get(&rb), "{:?}", row.key);
        }
        let a = golden("cpu_recursive.bin");
        let b = golden("cpu_recursive_none.bin");
        let per = TopOptions {
            per_file: true,
            ..Default::default()
        };
        let r = top(&[a, b], &SampleFilter::default(), &per).unwrap();
        assert_eq!(r.rows.len(), ra.rows.len() + rb.rows.len());
    }
}
