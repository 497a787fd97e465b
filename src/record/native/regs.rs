//! A stopped thread's registers (`PTRACE_GETREGS`): where its native walk starts.

use super::error::NativeError;

/// The registers a walk starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registers {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// The instruction, stack and frame pointers of thread `tid`, which must be in a ptrace
/// stop of ours (seized and interrupted by the sampler's thread).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) fn registers(tid: i32) -> Result<Registers, NativeError> {
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct into the zeroed one we own.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            tid,
            0usize,
            &mut r as *mut libc::user_regs_struct,
        )
    };
    if rc != 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(NativeError::Registers { tid, errno });
    }
    Ok(Registers {
        ip: r.rip,
        sp: r.rsp,
        bp: r.rbp,
    })
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn registers(_tid: i32) -> Result<Registers, NativeError> {
    Err(NativeError::Unsupported)
}
