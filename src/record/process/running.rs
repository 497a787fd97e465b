//! Whether a process still runs, as `/proc` and `waitid` show it.

use super::ptrace_pause::wait_child;

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Is `pid` still running (not gone, not a zombie)?
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => running_state(stat.as_bytes()),
        Err(_) => false,
    }
}

/// Whether the text of a `/proc/PID/stat` says the process runs: its state, after the
/// command's closing parenthesis (the command may hold one), is not `Z` or `X`.
fn running_state(stat: &[u8]) -> bool {
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    let state = stat[close + 1..].iter().find(|b| !b.is_ascii_whitespace());
    !matches!(state, Some(b'Z') | Some(b'X') | None)
}

/// [`alive`] for a process looked at again and again (the recording's loop, every 50
/// ms, for days): its `/proc/PID/stat` stays open and each look is one `pread`, where
/// opening it each time took seven system calls. An open file of a process that is
/// gone reads as an error (ESRCH), even once its pid is taken by another process.
pub struct Liveness {
    pid: i32,
    stat: Option<File>,
    buf: Vec<u8>,
}

impl Liveness {
    pub fn new(pid: i32) -> Liveness {
        Liveness {
            pid,
            stat: None,
            buf: vec![0; 1024],
        }
    }

    /// Is the process still running (not gone, not a zombie)?
    pub fn alive(&mut self) -> bool {
        if self.stat.is_none() {
            match File::open(format!("/proc/{}/stat", self.pid)) {
                Ok(f) => self.stat = Some(f),
                Err(_) => return false,
            }
        }
        let Some(stat) = &self.stat else {
            return false;
        };
        // The state comes after the command (at most 64 bytes in the kernel's
        // rendering, parentheses included): the first 1,024 bytes hold it.
        match stat.read_at(&mut self.buf, 0) {
            Ok(n) => running_state(&self.buf[..n]),
            Err(_) => false,
        }
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
pub(crate) fn child_exited(pid: i32, liveness: &mut Liveness) -> bool {
    let exited = matches!(
        wait_child(pid, libc::WEXITED | libc::WNOWAIT),
        Some((libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED, _))
    );
    exited || !liveness.alive()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_is_gone_is_not_alive() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
        assert!(Liveness::new(std::process::id() as i32).alive());
        assert!(!Liveness::new(i32::MAX).alive());
    }

    /// A process looked at through its kept file: running, then a zombie, then gone
    /// (its exit collected), each seen through the same open file.
    #[test]
    fn a_kept_look_sees_a_process_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let mut look = Liveness::new(child.id() as i32);
        assert!(look.alive());
        // A zombie until collected: wait for the exit without collecting it.
        let start = std::time::Instant::now();
        while look.alive() {
            assert!(start.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(!look.alive());
    }

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert!(running_state(b"12 (python) S 1 2"));
        assert!(running_state(b"12 (a) b) R 1 2"));
        assert!(!running_state(b"12 (a) Z) Z 1 2"));
        assert!(!running_state(b"12 (python) X 1"));
        assert!(!running_state(b"12 (python"));
        assert!(!running_state(b""));
    }
}
