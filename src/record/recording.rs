//! The loop of a recording from outside (`tach record --pid`, `tach record -- python
//! app.py`): sample until Ctrl-C, SIGTERM, the duration or the target's exit, while
//! `--subprocesses` follows the target's children.

use std::time::Duration;

use super::children::Children;
use super::outside::{start_session, ExternalError, Recorded};
use super::sampler::{RecordOptions, RecordStats};
use super::signals::{catch_stop_signals, take_stop_signal};

/// How often the recording's loop looks at the target, the duration and the stop
/// signals. Each look reads `/proc/PID/stat` (one `pread` of a file kept open): every
/// 10 ms, opening it each time, that was most of what a recording at 19 Hz cost.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Attaches to `target` and records it until Ctrl-C, SIGTERM, `opts.duration` or the
/// target's exit, then finishes the file. A just-started child is waited for (up to
/// `startup`) until its interpreter is loaded. With `subprocesses`, the target's child
/// Python processes are recorded too, each into a file of its own (see `children`).
///
/// For a child, Ctrl-C reaches the child as well (one process group): the recording
/// goes on until the child exits, and a SIGTERM sent to tach alone is passed on to it.
pub fn record(
    mut target: Recorded<'_>,
    opts: RecordOptions,
    startup: Duration,
    subprocesses: bool,
) -> Result<RecordStats, ExternalError> {
    catch_stop_signals();
    let mut children = subprocesses.then(|| Children::new(target.pid(), opts.clone()));
    let session = start_session(&mut target, opts, startup)?;
    let mut stopped_by_signal = false;
    let mut liveness = target.liveness();
    loop {
        std::thread::sleep(LOOK_EVERY);
        if session.is_finished() || !target.running(&mut liveness) {
            break;
        }
        if let Some(c) = children.as_mut() {
            c.poll();
        }
        match (take_stop_signal(), &target) {
            (0, _) => {}
            (libc::SIGTERM, Recorded::Child(c)) => {
                // SAFETY: kill with a pid we spawned and a valid signal.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            }
            (_, Recorded::Child(_)) => {}
            (_, Recorded::Pid(_)) => {
                stopped_by_signal = true;
                break;
            }
        }
    }
    let stats = session.stop();
    if let Some(c) = children {
        c.finish(stopped_by_signal);
    }
    Ok(stats)
}
