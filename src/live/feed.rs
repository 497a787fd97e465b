//! The recorder's side of the live view's feed: every sample the sampler writes is
//! counted into the [`LiveProfile`] the view draws its table from. Here rather than in
//! `report`, so that reports know nothing of the recorder.

use crate::record::SampleSink;
use crate::report::live::LiveProfile;
use crate::tach::FrameEntry;

impl SampleSink for LiveProfile {
    fn sample(
        &self,
        thread_id: u64,
        status: u8,
        stack: &[u32],
        frames: &[FrameEntry],
        strings: &[Box<[u8]>],
    ) {
        self.add_sample(thread_id, status, stack, frames, strings);
    }

    fn tick(&self, ok: bool) {
        self.add_tick(ok);
    }
}
