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
//! - seconds = samples × interval_us / 1e6, the same float arithmetic as CPython.
//! - `_sync_coordinator.py` frames are dropped first; empty stacks count nowhere.
//!
//! Keys are in CPython's insertion order (first sample that touches them), so the
//! dict compares equal after `marshal.load` and iterates in the same order.

use std::collections::HashMap;
use std::io::Write;

use super::marshal::Marshal;
use super::render::{is_internal, lineno};
use super::{write_error, ExportInput, Exporter, Result};

pub struct Pstats;

struct LocStat<'a> {
    key: (&'a str, i32, &'a str),
    direct: u64,
    cumulative: u64,
    /// Callers in first-seen order, with their counts.
    callers: Vec<(u32, u64)>,
    caller_slot: HashMap<u32, usize>,
}

const UNSET: u32 = u32::MAX;

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
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let bytes = pstats_bytes(input)?;
        out.write_all(&bytes).map_err(write_error("output"))
    }
}

/// Builds the whole marshal dump.
pub fn pstats_bytes(input: &ExportInput<'_>) -> Result<Vec<u8>> {
    let index = input.index()?;
    let file = input.file;

    // Sample count per unique stack, over all threads. Stack ids are in first-seen
    // order, so walking them in order touches locations in CPython's order.
    let counts = index.stack_totals();

    let mut frame_loc: Vec<u32> = vec![UNSET; file.frames().len()];
    let mut loc_ids: HashMap<(&str, i32, &str), u32> = HashMap::new();
    let mut locs: Vec<LocStat<'_>> = Vec::new();
    let mut seen: Vec<u32> = Vec::new();
    let mut kept: Vec<u32> = Vec::with_capacity(256);
    for (id, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        kept.clear();
        for &f in index.stacks.get(id as u32) {
            if is_internal(file, f) {
                continue;
            }
            let mut loc = frame_loc[f as usize];
            if loc == UNSET {
                let key = (file.filename(f), lineno(file, f), file.funcname(f));
                loc = *loc_ids.entry(key).or_insert_with(|| {
                    locs.push(LocStat {
                        key,
                        direct: 0,
                        cumulative: 0,
                        callers: Vec::new(),
                        caller_slot: HashMap::new(),
                    });
                    seen.push(u32::MAX);
                    (locs.len() - 1) as u32
                });
                frame_loc[f as usize] = loc;
            }
            kept.push(loc);
        }
        if kept.is_empty() {
            continue;
        }
        // `seen` holds the stack id that last counted each location.
        for &loc in &kept {
            if seen[loc as usize] != id as u32 {
                seen[loc as usize] = id as u32;
                locs[loc as usize].cumulative += count;
            }
        }
        locs[kept[0] as usize].direct += count;
        for pair in kept.windows(2) {
            let (callee, caller) = (&mut locs[pair[0] as usize], pair[1]);
            let slot = *callee.caller_slot.entry(caller).or_insert_with(|| {
                callee.callers.push((caller, 0));
                callee.callers.len() - 1
            });
            callee.callers[slot].1 += count;
        }
    }

    let interval_s = file.header().sample_interval_us as f64 / 1_000_000.0;
    let mut m = Marshal::new();
    m.dict_begin();
    let key = |m: &mut Marshal, k: &(&str, i32, &str)| {
        m.tuple(3);
        m.str(k.0);
        m.int(k.1 as i128);
        m.str(k.2);
    };
    for loc in &locs {
        key(&mut m, &loc.key);
        m.tuple(5);
        m.int(loc.direct as i128);
        m.int(loc.cumulative as i128);
        m.float(loc.direct as f64 * interval_s);
        m.float(loc.cumulative as f64 * interval_s);
        m.dict_begin();
        for &(caller, c) in &loc.callers {
            key(&mut m, &locs[caller as usize].key);
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
