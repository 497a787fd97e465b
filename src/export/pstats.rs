//! pstats: the marshal'd dict that `pstats.Stats` loads, as CPython's
//! `replay --pstats -o FILE` writes it (`PstatsCollector` in
//! `profiling/sampling/pstats_collector.py`):
//!
//! `{(filename, lineno, funcname): (direct, cumulative, direct_s, cumulative_s,
//! {caller_key: count})}` plus the marker key `("__sampled__",): True`.
//!
//! - A location is (filename, lineno, funcname); a frame without a location has
//!   lineno 0. Frames that differ only in column or opcode are one location.
//! - direct: samples whose innermost frame is the location; cumulative: samples with
//!   the location anywhere on the stack, counted once per stack.
//! - callers of a location: for each adjacent (callee, caller) pair on a stack, the
//!   caller's key gets the sample count (not deduplicated, as CPython does).
//! - seconds = samples × (interval_us / 1e6): the interval is divided first, the same float arithmetic as CPython.
//! - `_sync_coordinator.py` frames are dropped first; empty stacks count nowhere.
//!
//! Keys are in CPython's insertion order (first sample that touches them), so the
//! dict compares equal after `marshal.load` and iterates in the same order.

use std::io::Write;

use crate::tach::totals::totals;

use super::exporter::{write_error, ExportInput, Exporter, Result};
use super::marshal::Marshal;
use super::render::{is_internal, lineno};

pub struct Pstats;

impl Exporter for Pstats {
    fn name(&self) -> &'static str {
        "pstats"
    }
    fn description(&self) -> &'static str {
        "marshal'd pstats dict for pstats.Stats (as CPython's replay --pstats -o)"
    }
    fn extension(&self) -> &'static str {
        ".pstats"
    }
    fn binary(&self) -> bool {
        true
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let bytes = pstats_bytes(input)?;
        out.write_all(&bytes).map_err(write_error("output"))
    }
}

/// Builds the whole marshal dump.
pub fn pstats_bytes(input: &ExportInput<'_>) -> Result<Vec<u8>> {
    let index = input.index()?;
    let file = input.file;

    // pstats' own semantics: self for the innermost kept frame, cumulative once per
    // sample, the caller edges; keys in the order CPython's collector meets them.
    let totals = totals(index, file.frames().len(), true, |f| {
        (!is_internal(file, f)).then(|| (file.filename(f), lineno(file, f), file.funcname(f)))
    });

    let interval_s = file.header().sample_interval_us as f64 / 1_000_000.0;
    let mut m = Marshal::new();
    m.dict_begin();
    let key = |m: &mut Marshal, k: &(&str, i32, &str)| {
        m.tuple(3);
        m.str(k.0);
        m.int(k.1 as i128);
        m.str(k.2);
    };
    for loc in &totals.keys {
        key(&mut m, &loc.key);
        m.tuple(5);
        m.int(loc.self_samples as i128);
        m.int(loc.cumulative as i128);
        m.float(loc.self_samples as f64 * interval_s);
        m.float(loc.cumulative as f64 * interval_s);
        m.dict_begin();
        for &(caller, c) in &loc.callers {
            key(&mut m, &totals.keys[caller as usize].key);
            m.int(c as i128);
        }
        m.dict_end();
    }
    m.tuple(1);
    m.str("__sampled__");
    m.true_();
    m.dict_end();
    Ok(m.buf)
}
