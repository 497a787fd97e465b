//! Finding an interpreter to sample, and everything needed to read it: a [`Target`],
//! built by `attach` for another process and by `in_process` for this one.

pub(crate) mod attach;
pub(crate) mod in_process;
mod target;

pub use target::Target;
