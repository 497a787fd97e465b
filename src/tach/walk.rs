//! The filtered walk over a file's runs, written once for every consumer that reads
//! samples through a [`SampleFilter`] (the profile index, `tach diff`, the pprof,
//! speedscope and per-sample exporters, the query's `samples` batches).
//!
//! Its rules are easy to get subtly wrong, which is why they live here only:
//! - the time window is bound to the file's first timestamp, found only when the
//!   filter has a window;
//! - a run of a thread the filter drops keeps none of its samples, but still changes
//!   that thread's stack, so a consumer's memo of the thread's current stack is
//!   dropped on every run whose stack changed, kept or not;
//! - without status or time terms a kept thread's run is kept whole, with no test per
//!   sample.

use super::error::Result;
use super::filter::{BoundFilter, SampleFilter};
use super::reader::{SampleStream, TachFile};
use super::records::Run;

/// The smallest timestamp in the file, the origin of `--start/--end` and `time_s`.
pub fn first_timestamp(file: &TachFile) -> Result<Option<u64>> {
    let mut min: Option<u64> = None;
    let mut stream = file.samples();
    while let Some(run) = stream.next_run()? {
        if let Some(&t) = run.timestamps_us.iter().min() {
            min = Some(min.map_or(t, |m| m.min(t)));
        }
    }
    Ok(min)
}

/// A walk over a file's runs through a filter, with a per-thread-slot memo of type `M`
/// that the consumer fills with what it derived from the slot's current stack (a stack
/// id, an entry in a list) and the walk clears when that stack changes.
///
/// Runs borrow the decoder's buffers, so this is a lending iterator: call
/// [`KeptRuns::next_run`] in a `while let` loop. Every run comes out, kept or not:
/// some consumers number every sample or time a kept sample by the next one.
pub struct KeptRuns<'a, M = ()> {
    stream: SampleStream<'a>,
    bound: BoundFilter<'a>,
    whole: bool,
    memo: Vec<Option<M>>,
}

/// One run as the filter sees it, with its thread slot's memo.
pub struct FilteredRun<'w, M> {
    pub run: Run<'w>,
    /// The filter keeps the run's thread (when false, none of its samples is kept).
    pub thread_kept: bool,
    whole: bool,
    bound: BoundFilter<'w>,
    /// What the consumer stored for this slot's current stack; `None` when the run's
    /// stack changed (or nothing was stored yet).
    pub memo: &'w mut Option<M>,
}

impl TachFile {
    /// The walk over this file's runs through `filter`, its time window bound to the
    /// file's first timestamp (found by a decode of its own only when the filter has a
    /// window). Consumers that already know the origin use `KeptRuns::new`.
    pub fn kept_runs<'a, M>(&'a self, filter: &'a SampleFilter) -> Result<KeptRuns<'a, M>> {
        filter.wall_offset(self)?;
        let origin = if filter.needs_origin() {
            first_timestamp(self)?.unwrap_or(0)
        } else {
            0
        };
        Ok(KeptRuns::new(self, filter, origin))
    }
}

impl<'a, M> KeptRuns<'a, M> {
    /// The walk with the filter's window bound to `origin_us` (the file's first
    /// timestamp; any value when the filter has no window) and its wall-clock window to
    /// the file's wall-clock origin (a file without one keeps nothing of such a window:
    /// callers check [`SampleFilter::wall_offset`] first, for its error).
    pub fn new(file: &'a TachFile, filter: &'a SampleFilter, origin_us: u64) -> Self {
        let wall_offset = file.footer().wall_time_us(file.header().start_time_us, 0);
        let bound = filter.bind_in(origin_us, wall_offset);
        KeptRuns {
            stream: file.samples(),
            whole: bound.keeps_every_status_and_time(),
            bound,
            memo: Vec::new(),
        }
    }

    /// The filter, bound to the origin.
    pub fn bound(&self) -> BoundFilter<'a> {
        self.bound
    }

    /// The next run, whether or not the filter keeps any of it; `Ok(None)` at the end.
    #[inline]
    pub fn next_run(&mut self) -> Result<Option<FilteredRun<'_, M>>> {
        let Some(run) = self.stream.next_run()? else {
            return Ok(None);
        };
        let slot = run.thread as usize;
        if slot >= self.memo.len() {
            self.memo.resize_with(slot + 1, || None);
        }
        let memo = &mut self.memo[slot];
        if run.stack_changed {
            *memo = None;
        }
        Ok(Some(FilteredRun {
            thread_kept: self.bound.keeps_thread(run.thread_id),
            run,
            whole: self.whole,
            bound: self.bound,
            memo,
        }))
    }
}

impl<'w, M> FilteredRun<'w, M> {
    /// Every sample of the run is kept.
    #[inline]
    pub fn keeps_whole(&self) -> bool {
        self.thread_kept && self.whole
    }

    /// Whether the run's `i`th sample is kept.
    #[inline]
    pub fn keeps(&self, i: usize) -> bool {
        self.thread_kept
            && (self.whole
                || self
                    .bound
                    .keeps(self.run.statuses[i], self.run.timestamps_us[i]))
    }

    /// Whether a sample of this run with this status and time is kept.
    #[inline]
    pub fn keeps_sample(&self, status: u8, timestamp_us: u64) -> bool {
        self.thread_kept && (self.whole || self.bound.keeps(status, timestamp_us))
    }

    /// How many of the run's samples are kept.
    #[inline]
    pub fn kept_count(&self) -> usize {
        if !self.thread_kept {
            0
        } else if self.whole {
            self.run.len()
        } else {
            self.run
                .timestamps_us
                .iter()
                .zip(self.run.statuses)
                .filter(|&(&ts, &status)| self.bound.keeps(status, ts))
                .count()
        }
    }

    /// `(index in the run, time, status)` of each kept sample, in order.
    #[inline]
    pub fn kept(&self) -> impl Iterator<Item = (usize, u64, u8)> + '_ {
        self.run
            .timestamps_us
            .iter()
            .zip(self.run.statuses)
            .enumerate()
            .filter(move |&(_, (&ts, &status))| self.keeps_sample(status, ts))
            .map(|(i, (&ts, &status))| (i, ts, status))
    }

    /// The memo of this slot, computed by `f` when the stack changed since it was set.
    #[inline]
    pub fn memo_or_insert_with(&mut self, f: impl FnOnce(&Run<'w>) -> M) -> &mut M {
        let run = &self.run;
        self.memo.get_or_insert_with(|| f(run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tach::filter::status::{HAS_GIL, ON_CPU};
    use crate::tach::{Compression, Writer};

    const A: u64 = 0xa;
    const B: u64 = 0xb;

    /// Threads A and B interleaved: A's stack changes while B's repeats, B samples
    /// first (so the origin is B's time), and A ends on an empty stack.
    fn interleaved() -> TachFile {
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut w = Writer::builder(1000)
            .start_time_us(1_000)
            .compression(Compression::None)
            .to_writer("memory", &mut buf)
            .unwrap();
        for f in ["a", "b", "c"] {
            w.frame("/app/m.py", f, None, None);
        }
        let samples: [(u64, u64, u8, &[u32]); 10] = [
            (B, 9_000, ON_CPU, &[2]),
            (A, 10_000, HAS_GIL, &[0, 1]),
            (A, 11_000, HAS_GIL | ON_CPU, &[0, 1]),
            (B, 11_500, 0, &[2]),
            (A, 12_000, 0, &[1]),
            (B, 12_500, HAS_GIL, &[2]),
            (A, 13_000, HAS_GIL, &[1]),
            (B, 13_500, HAS_GIL, &[0]),
            (A, 14_000, HAS_GIL, &[]),
            (A, 15_000, ON_CPU, &[]),
        ];
        for (thread, t, status, stack) in samples {
            w.write_sample(thread, 0, t, status, stack).unwrap();
        }
        w.finish().unwrap();
        TachFile::from_bytes("interleaved.bin", buf.into_inner()).unwrap()
    }

    /// (thread id, time, status) of every sample `filter` keeps, sample by sample.
    fn one_by_one(file: &TachFile, filter: &SampleFilter) -> Vec<(u64, u64, u8)> {
        let origin = first_timestamp(file).unwrap().unwrap_or(0);
        let bound = filter.bind(origin);
        let mut out = Vec::new();
        file.for_each_sample(|s| {
            if bound.keep(s) {
                out.push((s.thread_id, s.timestamp_us, s.status));
            }
        })
        .unwrap();
        out
    }

    /// The same through the walk, checking that each run's count, mask and list of kept
    /// samples agree, and that the memo always holds the run's own stack.
    fn walked(file: &TachFile, filter: &SampleFilter) -> (Vec<(u64, u64, u8)>, usize) {
        let mut out = Vec::new();
        let mut computed = 0;
        let mut runs = file.kept_runs::<Vec<u32>>(filter).unwrap();
        while let Some(mut r) = runs.next_run().unwrap() {
            let kept: Vec<(usize, u64, u8)> = r.kept().collect();
            assert_eq!(r.kept_count(), kept.len());
            let mask: Vec<usize> = (0..r.run.len()).filter(|&i| r.keeps(i)).collect();
            assert_eq!(mask, kept.iter().map(|k| k.0).collect::<Vec<_>>());
            if r.keeps_whole() {
                assert_eq!(kept.len(), r.run.len());
            }
            if !r.thread_kept {
                assert!(kept.is_empty());
            }
            out.extend(kept.iter().map(|&(_, t, s)| (r.run.thread_id, t, s)));
            let stack = r.run.stack.to_vec();
            let memo = r.memo_or_insert_with(|run| {
                computed += 1;
                run.stack.to_vec()
            });
            assert_eq!(*memo, stack, "a memo outlived its thread's stack");
        }
        (out, computed)
    }

    #[test]
    fn the_walk_keeps_what_the_filter_keeps_sample_by_sample() {
        let file = interleaved();
        let filters = [
            SampleFilter::default(),
            SampleFilter::from_options::<&str>(&[A], None, None, &[]).unwrap(),
            SampleFilter::from_options::<&str>(&[B], None, None, &["has-gil"]).unwrap(),
            SampleFilter::from_options::<&str>(&[], None, None, &["no-on-cpu"]).unwrap(),
            // 9 000 us is the origin: the window is [11 000, 13 500).
            SampleFilter::from_options::<&str>(&[], Some(0.002), Some(0.0045), &[]).unwrap(),
            SampleFilter::from_options(&[A], Some(0.0), Some(0.0035), &["has-gil"]).unwrap(),
            // Keeps nothing: every run is empty.
            SampleFilter::from_options::<&str>(&[7], None, None, &[]).unwrap(),
        ];
        for filter in &filters {
            let (got, computed) = walked(&file, filter);
            assert_eq!(got, one_by_one(&file, filter), "{filter:?}");
            // Five stacks in a row of their thread (B: [2], [0]; A: [0, 1], [1], []),
            // each computed once: the REPEATs in between reuse the memo.
            assert_eq!(computed, 5, "{filter:?}");
        }
        let window = &filters[4];
        // In record order, which is not time order across threads: sort to compare.
        let mut kept: Vec<u64> = walked(&file, window).0.iter().map(|k| k.1).collect();
        kept.sort_unstable();
        assert_eq!(kept, [11_000, 11_500, 12_000, 12_500, 13_000]);
        assert!(walked(&file, &filters[6]).0.is_empty());
    }

    #[test]
    fn the_origin_is_found_only_for_a_time_window() {
        let file = interleaved();
        let window = SampleFilter::from_options::<&str>(&[], Some(0.001), None, &[]).unwrap();
        assert_eq!(
            file.kept_runs::<()>(&window).unwrap().bound().origin_us,
            9_000
        );
        let status = SampleFilter::from_options::<&str>(&[], None, None, &["has-gil"]).unwrap();
        assert_eq!(file.kept_runs::<()>(&status).unwrap().bound().origin_us, 0);
    }

    #[test]
    fn runs_are_kept_whole_only_without_status_or_time_terms() {
        let file = interleaved();
        let whole = |filter: &SampleFilter| {
            let mut out = Vec::new();
            let mut runs = file.kept_runs::<()>(filter).unwrap();
            while let Some(r) = runs.next_run().unwrap() {
                out.push((r.run.thread_id, r.keeps_whole()));
            }
            out
        };
        let only_a = SampleFilter::from_options::<&str>(&[A], None, None, &[]).unwrap();
        assert!(whole(&only_a).iter().all(|&(t, w)| w == (t == A)));
        let gil = SampleFilter::from_options::<&str>(&[A], None, None, &["has-gil"]).unwrap();
        assert!(whole(&gil).iter().all(|&(_, w)| !w));
        assert!(whole(&SampleFilter::default()).iter().all(|&(_, w)| w));
    }

    /// Every golden file, with filters of each kind: the walk keeps the samples the
    /// per-sample test keeps.
    #[test]
    fn the_walk_agrees_with_the_per_sample_test_on_the_golden_files() {
        let filters = [
            SampleFilter::default(),
            SampleFilter::from_options::<&str>(&[], Some(0.1), Some(1.0), &["has-gil"]).unwrap(),
            SampleFilter::from_options::<&str>(&[], None, None, &["no-on-cpu"]).unwrap(),
        ];
        let mut files = 0;
        for path in crate::golden_corpus::golden_bins() {
            let file = TachFile::open(&path).unwrap();
            if file.verify().is_err() {
                continue;
            }
            for filter in &filters {
                assert_eq!(
                    walked(&file, filter).0,
                    one_by_one(&file, filter),
                    "{path:?}"
                );
            }
            files += 1;
        }
        assert!(files >= 10, "only {files} golden files decoded");
    }
}
