//! The images a tick reads into.

use crate::record::interpreter::layout::Offsets;

/// The images a tick reads into, kept from one tick to the next so that a tick allocates
/// nothing.
pub(super) struct ReadBuffers {
    /// The thread state being sampled.
    pub tstate: Vec<u8>,
    /// A frame read alone (outside the page window: an entry frame on the C stack, a
    /// generator's frame in its object, a frame object).
    pub frame: Vec<u8>,
    /// The runtime's and the interpreters' fields.
    pub small: Vec<u8>,
    /// The GIL and the main thread's state, read together once the GIL's holder is
    /// paused.
    pub paused: Vec<u8>,
}

impl ReadBuffers {
    pub(super) fn new(o: &Offsets) -> Self {
        ReadBuffers {
            tstate: vec![0u8; o.thread.size as usize],
            frame: vec![0u8; o.frame.size as usize],
            small: Vec::with_capacity(256),
            paused: Vec::with_capacity(o.thread.size as usize + 64),
        }
    }
}
