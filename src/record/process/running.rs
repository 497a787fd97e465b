//! Whether a process still runs, as `/proc` and `waitid` show it.

use super::ptrace_pause::wait_child;

/// Is `pid` still running (not gone, not a zombie)?
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next()),
            Some("Z") | Some("X") | None
        ),
        Err(_) => false,
    }
}

/// Has our child `pid` exited? Its exit is only looked at (WNOWAIT), not collected. A
/// traced child's ptrace stops are reported by `waitid` even without WSTOPPED (and left
/// for the sampler by WNOWAIT): only an exit counts. A child that is gone, or whose main
/// thread is a zombie, counts as exited too: the kernel reports a process's exit only
/// once every one of its threads is released, and a thread that exited while the
/// sampler traced it is released only when the sampler collects it (`ptrace_pause`) or
/// its thread ends. Stopping the recording when the main thread is a zombie means that
/// no thread left traced can keep tach waiting for a program that has exited.
pub(crate) fn child_exited(pid: i32) -> bool {
    let exited = matches!(
        wait_child(pid, libc::WEXITED | libc::WNOWAIT),
        Some((libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED, _))
    );
    exited || !alive(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_is_gone_is_not_alive() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }
}
