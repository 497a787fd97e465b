//! `tach diff`: which functions' share of the samples changed between a base and a new
//! set of runs, beyond noise. The method is described in docs/diff.md; in short:
//!
//! - a side's share of a key is the mean over its files of (samples with the key as
//!   leaf, or anywhere on the stack with [`Metric::Total`]) / (kept samples), so runs
//!   at different sampling rates weigh the same and raw counts never compare;
//! - each file's kept samples are cut into blocks of consecutive samples, and the
//!   blocks are resampled with replacement (a block bootstrap, deterministic seed):
//!   neighbouring samples are correlated, so resampling single samples would
//!   understate the noise;
//! - with several files on a side, the variance of the side's mean is at least the
//!   spread between its runs (their variance / the number of runs);
//! - the change is tested with z = change / standard error, two-sided normal p-values,
//!   Holm-corrected over the keys above a minimum share; a key "grew" or "shrank" only
//!   when its adjusted p-value is below alpha and the change is at least a minimum
//!   number of points.

use std::collections::HashMap;

use serde::Serialize;

use super::error::{ReportError, Result};
use super::keys::{FrameKeys, GroupBy, Key, Keys};
use crate::tach::stack_table::StackTable;
use crate::tach::{SampleFilter, TachFile};

/// Which share is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "record", derive(clap::ValueEnum))]
pub enum Metric {
    /// Samples with the key running (innermost).
    #[default]
    #[cfg_attr(feature = "record", value(name = "self"))]
    SelfShare,
    /// Samples with the key anywhere on the stack (once per sample).
    Total,
}

impl Metric {
    pub fn parse(name: &str) -> Result<Self> {
        crate::names::parse(Self::WHAT, name).map_err(ReportError::Usage)
    }
    /// What a value is, in messages (`unknown metric 'x': use self or total`).
    pub const WHAT: &'static str = "metric";
}

super::keys::named_value!(Metric);

/// How `tach diff` and `tach.diff()` compare. The doc comments of the fields with flags
/// are their `--help`; every default is [`DiffOptions::default`]'s (clap's
/// `default_value_t` and serde's `default` read it). The bootstrap's own settings have
/// no flag and no keyword.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[cfg_attr(feature = "record", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct DiffOptions {
    /// What one row stands for.
    #[cfg_attr(feature = "record", arg(long, default_value_t, value_parser = crate::names::parser::<GroupBy>(GroupBy::WHAT)))]
    pub by: GroupBy,
    /// Which share to compare.
    #[cfg_attr(feature = "record", arg(long, default_value_t, value_parser = crate::names::parser::<Metric>(Metric::WHAT)))]
    pub metric: Metric,
    /// Family-wise error rate (Holm correction over the compared keys).
    #[cfg_attr(feature = "record", arg(long, default_value_t = DiffOptions::default().alpha))]
    pub alpha: f64,
    /// Compare only keys with at least this share (percent) on a side.
    #[cfg_attr(feature = "record", arg(long = "min-share", id = "min_share", value_name = "PERCENT",
          default_value_t = DiffOptions::default().min_share_pct))]
    #[serde(rename = "min_share")]
    pub min_share_pct: f64,
    /// Never call a change smaller than this many percentage points.
    #[cfg_attr(feature = "record", arg(long = "min-change", id = "min_change", value_name = "POINTS",
          default_value_t = DiffOptions::default().min_change_points))]
    #[serde(rename = "min_change")]
    pub min_change_points: f64,
    /// Bootstrap resamples.
    #[cfg_attr(feature = "record", arg(skip = DiffOptions::default().resamples))]
    #[serde(skip)]
    pub resamples: usize,
    /// Blocks per file (fewer when a file has fewer samples).
    #[cfg_attr(feature = "record", arg(skip = DiffOptions::default().blocks))]
    #[serde(skip)]
    pub blocks: usize,
    #[cfg_attr(feature = "record", arg(skip = DiffOptions::default().seed))]
    #[serde(skip)]
    pub seed: u64,
    /// The base side's own wall-clock window, from this time (as --since): with
    /// --base-since or --base-until, the base files keep only the samples of that
    /// window and --since/--until apply to the new files alone; without either, both
    /// sides keep --since/--until's window.
    #[cfg_attr(feature = "record", arg(long, value_name = "TIME"))]
    pub base_since: Option<String>,
    /// The base side's own wall-clock window, before this time (see --base-since).
    #[cfg_attr(feature = "record", arg(long, value_name = "TIME"))]
    pub base_until: Option<String>,
}

impl DiffOptions {
    /// The filters of the base and new sides, built from `spec`: the base side's
    /// window is `base_since`/`base_until` when either is given, `spec`'s otherwise.
    pub fn side_filters(
        &self,
        spec: &super::spec::FilterSpec,
    ) -> std::result::Result<(SampleFilter, SampleFilter), crate::tach::filter::FilterError> {
        let new = spec.build()?;
        if self.base_since.is_none() && self.base_until.is_none() {
            return Ok((new.clone(), new));
        }
        let base = super::spec::FilterSpec {
            since: self.base_since.clone(),
            until: self.base_until.clone(),
            ..spec.clone()
        }
        .build()
        .map_err(|e| {
            use crate::tach::filter::FilterError;
            // Built through --since/--until's parser: the errors name the base options.
            match e {
                FilterError::WallTime { what, value } => FilterError::WallTime {
                    what: if what == "since" {
                        "base-since"
                    } else {
                        "base-until"
                    },
                    value,
                },
                FilterError::EmptyWallWindow { since, until } => {
                    FilterError::EmptyBaseWindow { since, until }
                }
                other => other,
            }
        })?;
        Ok((base, new))
    }
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            by: GroupBy::Function,
            metric: Metric::SelfShare,
            alpha: 0.01,
            min_share_pct: 0.5,
            min_change_points: 0.5,
            resamples: 1000,
            blocks: 50,
            seed: 0x7ac4_d1ff,
            base_since: None,
            base_until: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Grew,
    Shrank,
    #[serde(rename = "no significant change")]
    NoSignificantChange,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Grew => "grew",
            Verdict::Shrank => "shrank",
            Verdict::NoSignificantChange => "no significant change",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffRow {
    #[serde(flatten)]
    pub key: Key,
    /// The share, in percent of the side's samples.
    pub base_pct: f64,
    pub new_pct: f64,
    /// new - base, in percentage points.
    pub change_points: f64,
    /// Standard error of the change, in points; None when not tested.
    pub stderr_points: Option<f64>,
    /// Holm-adjusted p-value; None for keys below the minimum share (not tested).
    pub p_adjusted: Option<f64>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub files: Vec<String>,
    pub samples: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    #[serde(skip)]
    pub by: GroupBy,
    pub metric: String,
    pub alpha: f64,
    pub base: Side,
    pub new: Side,
    /// Keys tested (above the minimum share on a side).
    pub tested: usize,
    /// Largest change first.
    pub rows: Vec<DiffRow>,
}

/// One file's kept samples, in file order, as ids of their stacks' key lists.
struct FileSamples {
    /// Stack id per kept sample.
    seq: Vec<u32>,
    /// Per stack id: the keys it counts for (the leaf, or every distinct key).
    counted: Vec<Vec<u32>>,
    /// Samples per key over the whole file.
    per_key: HashMap<u32, u64>,
}

fn read_file(
    file: &TachFile,
    filter: &SampleFilter,
    by: GroupBy,
    metric: Metric,
    keys: &mut Keys,
) -> Result<FileSamples> {
    let mut frames = FrameKeys::new(file, by);
    let mut stacks = StackTable::default();
    let mut counted: Vec<Vec<u32>> = Vec::new();
    let mut seq = Vec::new();
    let mut scratch = Vec::new();
    let mut runs = file.kept_runs::<u32>(filter)?;
    while let Some(mut r) = runs.next_run()? {
        // The run's samples share one stack: count the kept ones, then look it up once.
        let kept = r.kept_count();
        if kept == 0 {
            continue;
        }
        let id = *r.memo_or_insert_with(|run| {
            let id = stacks.intern(run.stack);
            if id as usize == counted.len() {
                frames.stack_keys(keys, run.stack, &mut scratch);
                counted.push(match metric {
                    Metric::SelfShare => scratch.first().copied().into_iter().collect(),
                    Metric::Total => {
                        let mut distinct = Vec::with_capacity(scratch.len());
                        for &k in &scratch {
                            if !distinct.contains(&k) {
                                distinct.push(k);
                            }
                        }
                        distinct
                    }
                });
            }
            id
        });
        seq.extend(std::iter::repeat_n(id, kept));
    }
    let mut per_key = HashMap::new();
    for &id in &seq {
        for &k in &counted[id as usize] {
            *per_key.entry(k).or_insert(0u64) += 1;
        }
    }
    Ok(FileSamples {
        seq,
        counted,
        per_key,
    })
}

/// SplitMix64: a small, fixed generator so the bootstrap is deterministic.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n.
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

/// The complementary error function (Numerical Recipes' Chebyshev fit, relative
/// error below 1.2e-7), for normal p-values.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Two-sided p-value of a standard normal z.
fn p_two_sided(z: f64) -> f64 {
    erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0)
}

/// Holm's step-down adjustment of `p` (same order out as in).
fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let mut out = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// One side: its share of each tested key and the variance of that share.
struct SideStats {
    /// Mean over files of each key's share (0..1), indexed by key id.
    share: Vec<f64>,
    /// Variance of the tested keys' shares (indexed like `tested`).
    var: Vec<f64>,
}

fn file_share(f: &FileSamples, key: u32) -> f64 {
    if f.seq.is_empty() {
        0.0
    } else {
        f.per_key.get(&key).copied().unwrap_or(0) as f64 / f.seq.len() as f64
    }
}

fn side_shares(files: &[FileSamples], nkeys: usize) -> Vec<f64> {
    let used: Vec<&FileSamples> = files.iter().filter(|f| !f.seq.is_empty()).collect();
    let mut share = vec![0.0; nkeys];
    for f in &used {
        for (&k, &n) in &f.per_key {
            share[k as usize] += n as f64 / f.seq.len() as f64 / used.len() as f64;
        }
    }
    share
}

fn side_variance(
    files: &[FileSamples],
    tested: &[u32],
    options: &DiffOptions,
    rng: &mut SplitMix,
) -> Vec<f64> {
    let used: Vec<&FileSamples> = files.iter().filter(|f| !f.seq.is_empty()).collect();
    let slot: HashMap<u32, usize> = tested.iter().enumerate().map(|(i, &k)| (k, i)).collect();
    // Per file, per block: (samples, counts of the tested keys).
    let blocked: Vec<Vec<(u64, Vec<u64>)>> = used
        .iter()
        .map(|f| {
            let n = f.seq.len();
            let nb = options.blocks.clamp(1, n);
            (0..nb)
                .map(|b| {
                    let mut counts = vec![0u64; tested.len()];
                    let range = &f.seq[b * n / nb..(b + 1) * n / nb];
                    for &id in range {
                        for k in &f.counted[id as usize] {
                            if let Some(&i) = slot.get(k) {
                                counts[i] += 1;
                            }
                        }
                    }
                    (range.len() as u64, counts)
                })
                .collect()
        })
        .collect();
    let mut sum = vec![0.0; tested.len()];
    let mut sumsq = vec![0.0; tested.len()];
    let mut drawn = vec![0u64; tested.len()];
    let mut mean = vec![0.0; tested.len()];
    for _ in 0..options.resamples {
        mean.iter_mut().for_each(|m| *m = 0.0);
        for blocks in &blocked {
            drawn.iter_mut().for_each(|d| *d = 0);
            let mut n = 0u64;
            for _ in 0..blocks.len() {
                let (bn, counts) = &blocks[rng.below(blocks.len())];
                n += bn;
                for (d, c) in drawn.iter_mut().zip(counts) {
                    *d += c;
                }
            }
            for (m, &d) in mean.iter_mut().zip(&drawn) {
                if n > 0 {
                    *m += d as f64 / n as f64 / blocked.len() as f64;
                }
            }
        }
        for i in 0..tested.len() {
            sum[i] += mean[i];
            sumsq[i] += mean[i] * mean[i];
        }
    }
    let r = options.resamples.max(1) as f64;
    tested
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let boot = (sumsq[i] / r - (sum[i] / r).powi(2)).max(0.0);
            // The spread between runs, as the variance of their mean.
            let between = if used.len() >= 2 {
                let shares: Vec<f64> = used.iter().map(|f| file_share(f, k)).collect();
                let m = shares.iter().sum::<f64>() / shares.len() as f64;
                let v =
                    shares.iter().map(|s| (s - m).powi(2)).sum::<f64>() / (shares.len() - 1) as f64;
                v / shares.len() as f64
            } else {
                0.0
            };
            boot.max(between)
        })
        .collect()
}

fn side_stats(
    files: &[FileSamples],
    nkeys: usize,
    tested: &[u32],
    options: &DiffOptions,
    rng: &mut SplitMix,
) -> SideStats {
    SideStats {
        share: side_shares(files, nkeys),
        var: side_variance(files, tested, options, rng),
    }
}

/// Compares `base` with `new` (each one or several runs of the same program).
/// `filters` are the base side's and the new side's (see
/// [`DiffOptions::side_filters`]).
pub fn diff(
    base: &[TachFile],
    new: &[TachFile],
    filters: (&SampleFilter, &SampleFilter),
    options: &DiffOptions,
) -> Result<DiffReport> {
    if base.is_empty() || new.is_empty() {
        return Err(ReportError::Usage(
            "diff needs at least one file on each side".into(),
        ));
    }
    if !(options.alpha > 0.0 && options.alpha < 1.0) {
        return Err(ReportError::Usage("alpha must be between 0 and 1".into()));
    }
    let mut keys = Keys::default();
    let mut read = |files: &[TachFile], filter: &SampleFilter| -> Result<Vec<FileSamples>> {
        files
            .iter()
            .map(|f| read_file(f, filter, options.by, options.metric, &mut keys))
            .collect()
    };
    let base_samples = read(base, filters.0)?;
    let new_samples = read(new, filters.1)?;
    for (files, samples, filter) in [
        (base, &base_samples, filters.0),
        (new, &new_samples, filters.1),
    ] {
        if samples.iter().all(|s| s.seq.is_empty()) {
            let names: Vec<String> = files
                .iter()
                .map(|f| f.path().display().to_string())
                .collect();
            return Err(ReportError::Usage(format!(
                "{}: no samples{}",
                names.join(", "),
                if filter.is_empty() {
                    ""
                } else {
                    " pass the filter"
                }
            )));
        }
    }
    let nkeys = keys.list.len();
    let base_share = side_shares(&base_samples, nkeys);
    let new_share = side_shares(&new_samples, nkeys);
    let min = options.min_share_pct / 100.0;
    let tested: Vec<u32> = (0..nkeys as u32)
        .filter(|&k| base_share[k as usize].max(new_share[k as usize]) >= min)
        .collect();
    let mut rng = SplitMix(options.seed);
    let b = side_stats(&base_samples, nkeys, &tested, options, &mut rng);
    let n = side_stats(&new_samples, nkeys, &tested, options, &mut rng);
    let mut se = vec![f64::NAN; nkeys];
    let p: Vec<f64> = tested
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let s = (b.var[i] + n.var[i]).sqrt();
            se[k as usize] = s;
            let d = n.share[k as usize] - b.share[k as usize];
            if d == 0.0 {
                1.0
            } else if s == 0.0 {
                0.0
            } else {
                p_two_sided(d / s)
            }
        })
        .collect();
    let adjusted = holm(&p);
    let mut p_of: Vec<Option<f64>> = vec![None; nkeys];
    for (&k, &p) in tested.iter().zip(&adjusted) {
        p_of[k as usize] = Some(p);
    }
    let mut rows: Vec<DiffRow> = (0..nkeys)
        .map(|k| {
            let change = 100.0 * (n.share[k] - b.share[k]);
            let verdict = match p_of[k] {
                Some(p) if p < options.alpha && change.abs() >= options.min_change_points => {
                    if change > 0.0 {
                        Verdict::Grew
                    } else {
                        Verdict::Shrank
                    }
                }
                _ => Verdict::NoSignificantChange,
            };
            DiffRow {
                key: keys.list[k].clone(),
                base_pct: 100.0 * b.share[k],
                new_pct: 100.0 * n.share[k],
                change_points: change,
                stderr_points: p_of[k].map(|_| 100.0 * se[k]),
                p_adjusted: p_of[k],
                verdict,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.change_points
            .abs()
            .total_cmp(&a.change_points.abs())
            .then_with(|| a.key.cmp(&b.key))
    });
    let side = |files: &[TachFile], s: &[FileSamples]| Side {
        files: files
            .iter()
            .map(|f| f.path().display().to_string())
            .collect(),
        samples: s.iter().map(|f| f.seq.len() as u64).sum(),
    };
    Ok(DiffReport {
        by: options.by,
        metric: crate::names::name(&options.metric),
        alpha: options.alpha,
        base: side(base, &base_samples),
        new: side(new, &new_samples),
        tested: tested.len(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_known_values() {
        // erfc(0.5), erfc(1), erfc(2), erfc(-1) to 7 digits (Abramowitz & Stegun).
        for (x, want) in [
            (0.5, 0.479_500_1),
            (1.0, 0.157_299_2),
            (2.0, 0.004_677_735),
            (-1.0, 1.842_700_8),
        ] {
            assert!((erfc(x) - want).abs() < 2e-7 * want.max(1e-3), "{x}");
        }
        assert!((p_two_sided(1.959_964) - 0.05).abs() < 1e-6);
    }

    #[test]
    fn holm_steps_down_and_keeps_order() {
        // m = 4: 0.01*4, 0.02*3, 0.03*2 -> 0.06 (monotone), 0.5*1.
        let adj = holm(&[0.03, 0.01, 0.5, 0.02]);
        let want = [0.06, 0.04, 0.5, 0.06];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
    }

    #[test]
    fn the_generator_is_uniform_enough_and_fixed() {
        let mut r = SplitMix(1);
        let mut hist = [0u32; 10];
        for _ in 0..100_000 {
            hist[r.below(10)] += 1;
        }
        assert!(
            hist.iter().all(|&h| (9_500..10_500).contains(&h)),
            "{hist:?}"
        );
        assert_eq!(SplitMix(1).next(), SplitMix(1).next());
    }
}
