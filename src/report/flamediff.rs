//! The differential flamegraph of `tach diff --flamegraph OUT.svg`, drawn by inferno.
//!
//! Each side's stacks (by function, line or file, internal frames dropped) are weighed
//! by their share of the side's kept samples (the mean over its files, as the diff
//! compares), in parts per million, so runs at different rates compare. inferno then
//! draws the new side's widths and colours each frame by the change of its own (self)
//! share, scaled to the largest change (red grew, blue shrank); its tooltip gives the
//! frame's new share (with its callees) and that change in points. inferno has no
//! place for the base side's share, so each frame's label ends with it
//! (`name [base 3.10%]`, with its callees, as the new share). The colour is the raw
//! change: whether it is beyond noise is what the table's verdict says.

use std::collections::BTreeMap;
use std::io::Write;

use inferno::flamegraph::{self, Options};

use super::error::{ReportError, Result};
use super::keys::{FrameKeys, GroupBy, Keys};
use crate::tach::{ProfileIndex, SampleFilter, TachFile};

/// Parts per million: the unit of both sides' weights.
const SCALE: f64 = 1_000_000.0;

/// Stack path (root first, `;`-joined labels) -> share of the side's samples.
fn side_paths(
    files: &[TachFile],
    filter: &SampleFilter,
    by: GroupBy,
    keys: &mut Keys,
    into: &mut BTreeMap<String, [f64; 2]>,
    side: usize,
) -> Result<()> {
    let mut used = 0usize;
    let mut per_file: Vec<BTreeMap<String, f64>> = Vec::new();
    for file in files {
        let index = ProfileIndex::build(file, filter)?;
        if index.total_samples == 0 {
            continue;
        }
        used += 1;
        let mut frames = FrameKeys::new(file, by);
        let mut stack_keys = Vec::new();
        let mut paths = BTreeMap::new();
        for (id, &count) in index.stack_totals().iter().enumerate() {
            if count == 0 {
                continue;
            }
            frames.stack_keys(keys, index.stacks.get(id as u32), &mut stack_keys);
            if stack_keys.is_empty() {
                continue;
            }
            let path: Vec<String> = stack_keys
                .iter()
                .rev()
                .map(|&k| {
                    keys.list[k as usize]
                        .label(by)
                        .replace(';', ":")
                        .replace(['\n', '\r'], " ")
                })
                .collect();
            *paths.entry(path.join(";")).or_insert(0.0) +=
                count as f64 / index.total_samples as f64;
        }
        per_file.push(paths);
    }
    for paths in per_file {
        for (path, share) in paths {
            into.entry(path).or_insert([0.0; 2])[side] += share / used as f64;
        }
    }
    Ok(())
}

/// Writes the differential flamegraph of `base` against `new`.
pub fn write_flamegraph(
    base: &[TachFile],
    new: &[TachFile],
    filters: (&SampleFilter, &SampleFilter),
    by: GroupBy,
    title: &str,
    out: &mut dyn Write,
) -> Result<()> {
    let mut keys = Keys::default();
    let mut paths: BTreeMap<String, [f64; 2]> = BTreeMap::new();
    side_paths(base, filters.0, by, &mut keys, &mut paths, 0)?;
    side_paths(new, filters.1, by, &mut keys, &mut paths, 1)?;
    // Each frame's base share with its callees: the sum over the paths through it.
    // inferno's tooltip gives only the new side's share, so the base share goes into
    // the frame's label. All paths through one frame get the same label for it, so
    // inferno still merges them into one frame.
    let mut base_through: BTreeMap<&str, f64> = BTreeMap::new();
    for (p, s) in &paths {
        let mut end = 0;
        for label in p.split(';') {
            end += label.len();
            *base_through.entry(&p[..end]).or_insert(0.0) += s[0];
            end += 1;
        }
    }
    let labelled = |p: &str| -> String {
        let mut out = String::with_capacity(p.len() + 24);
        let mut end = 0;
        for (i, label) in p.split(';').enumerate() {
            end += label.len();
            if i > 0 {
                out.push(';');
            }
            let base = base_through.get(&p[..end]).copied().unwrap_or(0.0);
            out.push_str(&format!("{label} [base {:.2}%]", 100.0 * base));
            end += 1;
        }
        out
    };
    let lines: Vec<String> = paths
        .iter()
        .map(|(p, s)| (p, (s[0] * SCALE).round(), (s[1] * SCALE).round()))
        .filter(|(_, b, n)| *b > 0.0 || *n > 0.0)
        .map(|(p, b, n)| format!("{} {b} {n}", labelled(p)))
        .collect();
    if lines.is_empty() {
        return Err(ReportError::Usage(
            "no samples with Python frames to draw (after filters)".into(),
        ));
    }
    let mut opt = Options::default();
    opt.title = title.to_string();
    opt.subtitle = Some(
        "width: new share; colour: change of own share (red grew, blue shrank); \
         tooltip: base share with callees, new share with callees; change of own share in points"
            .into(),
    );
    opt.count_name = "ppm of samples".into();
    opt.name_type = "Function:".into();
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out)
        .map_err(|e| ReportError::Usage(format!("flamegraph: {e}")))
}
