//! What the sequential pass hands each thread (an [`Event`]) and the numbers every part
//! of the Gecko exporter shares: the categories, the `NONE` and `SAME` markers, times
//! in ms.

/// Maps keyed by small integers: Fx hashing (rustc's), because SipHash's flood
/// resistance buys nothing here and cost most of the export time.
pub(super) type Map<K, V> = rustc_hash::FxHashMap<K, V>;

pub(super) const CATEGORY_PYTHON: u8 = 1;
pub(super) const CATEGORY_NATIVE: u8 = 2;
pub(super) const CATEGORY_GC: u8 = 3;
pub(super) const CATEGORY_GIL: u8 = 4;
pub(super) const CATEGORY_CPU: u8 = 5;
pub(super) const CATEGORY_CODE_TYPE: u8 = 6;
pub(super) const CATEGORY_EXCEPTION: u8 = 8;

pub(super) const NONE: u32 = u32::MAX;

/// A kept sample as the sequential pass hands it to its thread.
pub(super) struct Event {
    /// The sample's place among all kept samples: strings are ordered by first use.
    pub(super) seq: u64,
    /// Microseconds from the first kept sample (`now` in ms is this / 1000).
    pub(super) delta_us: i64,
    /// The decoder slot (one per thread and interpreter).
    pub(super) slot: u32,
    /// How many frames this sample appended to the thread's `pending_frames`, or
    /// [`SAME`] when the slot's stack did not change since its previous sample.
    pub(super) frames: u32,
    pub(super) status: u8,
}

pub(super) const SAME: u32 = u32::MAX;

/// A time in ms from microseconds, as CPython computes it (`(ts - base) / 1000`).
#[inline]
pub(super) fn ms(delta_us: i64) -> f64 {
    delta_us as f64 / 1000.0
}
