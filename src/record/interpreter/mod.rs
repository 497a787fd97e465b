//! What the recorder knows of CPython's objects: their layouts per version (`layout`),
//! code objects to names and locations (`resolve`, `linetable`), and asyncio's tasks
//! (`asyncio`, and `stack_tasks` for the running task found from the stack).

pub(crate) mod asyncio;
pub(crate) mod layout;
pub(crate) mod linetable;
pub(crate) mod resolve;
pub(crate) mod stack_tasks;
