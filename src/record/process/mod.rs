//! Another process and its memory, as the kernel shows it: fault-tolerant reads
//! (`memory`), `/proc/PID/maps` (`maps`), the ELF files it mapped (`elf`), and pausing
//! its threads while a tick reads them (`pause` in-process, `ptrace_pause` from outside).
//! Nothing here knows CPython.

pub(crate) mod elf;
pub(crate) mod maps;
pub(crate) mod memory;
pub(crate) mod pause;
pub(crate) mod ptrace_pause;
pub(crate) mod running;
