//! `--subprocesses`: following the recorded process's child Python processes
//! (multiprocessing, subprocess, fork), one file per process named by its pid, as CPython
//! 3.15's `--subprocesses` does (`app.tach` -> `app_<pid>.tach`).
//!
//! Every [`POLL`] the recording's loop asks [`Children::poll`] to look for new descendants
//! of the root process in `/proc` (children, grandchildren, ...). A process is looked at
//! [`SETTLE`] after it is first seen, so that a `fork` about to `exec` (subprocess) is
//! seen as the program it becomes, not as a copy of its parent. A Python one (CPython 3.9-3.15,
//! what `tach record --pid` takes) gets a [`Session`] of its own in this process, with the
//! root's options; anything else is left alone. Each child's recording ends with its
//! process (or with the root's recording: Ctrl-C, SIGTERM) and prints its summary line.
//! With `--rotate`, a child's segments are written beside the root's, named as the
//! root's with `_<pid>` before `.tach` (see `segments`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::outside::{self, Recorded};
use super::process::running::alive;
use super::sampler::RecordOptions;
use super::session::Session;
use super::signals::take_stop_signal;
use crate::record::discovery::attach::{self, AttachError};

/// How often descendants are looked for (CPython's monitor polls every 100 ms too).
pub const POLL: Duration = Duration::from_millis(100);
/// How long a new process is left alone before it is looked at: a `fork` that is about
/// to `exec` has done so by then.
pub const SETTLE: Duration = Duration::from_millis(20);
/// At most this many children are recorded at once (as CPython): a fork bomb must not
/// make tach one.
pub const MAX_RECORDINGS: usize = 100;
/// How long the children's recordings may outlive the root's end by its own exit (an
/// orphan that runs on is then stopped, its file finished).
pub const OUTLIVE: Duration = Duration::from_secs(30);

/// `app.tach` -> `app_4242.tach`, `app` -> `app_4242` (CPython's `_build_output_pattern`).
pub fn child_path(root_output: &Path, pid: i32) -> PathBuf {
    let name = root_output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let child = match name.rfind('.') {
        Some(dot) if dot > 0 => format!("{}_{pid}{}", &name[..dot], &name[dot..]),
        _ => format!("{name}_{pid}"),
    };
    root_output.with_file_name(child)
}

/// Every descendant of `root` now, from each process's parent in `/proc/PID/stat`.
pub fn descendants(root: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children_of: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = parent(pid) {
            children_of.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &pid in children_of.get(&p).into_iter().flatten() {
            found.push(pid);
            frontier.push(pid);
        }
    }
    found.sort_unstable();
    found
}

/// The parent of `pid` (the 4th field of `/proc/PID/stat`, after the command name, which
/// may itself hold spaces and parentheses).
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// How long a process that names itself python but shows no interpreter yet is asked again.
const STARTING: Duration = Duration::from_secs(1);

/// Whether the file a process runs is called python-something.
fn names_python(exe: &Option<PathBuf>) -> bool {
    exe.as_ref()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("python"))
}

/// The file a process runs (its `exec` changes it).
fn exe(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

enum Child {
    /// Seen at that moment, running `exe`: looked at again once settled.
    Seen(Option<PathBuf>, Instant),
    /// Not a Python process (as long as it runs `exe`), as found at that moment.
    NotPython(Option<PathBuf>, Instant),
    Recording(Session),
    /// Its recording has ended (or could not be made): never looked at again.
    Done,
}

/// The children of one recording.
pub struct Children {
    root: i32,
    root_output: PathBuf,
    opts: RecordOptions,
    known: HashMap<i32, Child>,
    last_poll: Option<Instant>,
    warned_full: bool,
}

impl Children {
    /// Follows the descendants of `root`, recording each with `opts` into
    /// [`child_path`]`(opts.path, pid)`.
    pub fn new(root: i32, opts: RecordOptions) -> Children {
        Children {
            root,
            root_output: opts.path.clone(),
            opts,
            known: HashMap::new(),
            last_poll: None,
            warned_full: false,
        }
    }

    /// Looks for new descendants (at most once per [`POLL`]), looks again at those
    /// that have settled, and ends the recordings of children that have exited.
    pub fn poll(&mut self) {
        let settled: Vec<i32> = self
            .known
            .iter()
            .filter(|(_, c)| matches!(c, Child::Seen(_, at) if at.elapsed() >= SETTLE))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in settled {
            self.look_at(pid);
        }
        if self.last_poll.is_some_and(|t| t.elapsed() < POLL) {
            return;
        }
        self.last_poll = Some(Instant::now());
        self.reap(false);
        for pid in descendants(self.root) {
            self.look_at(pid);
        }
    }

    /// Whether any child is still being recorded.
    pub fn recording(&self) -> bool {
        self.known
            .values()
            .any(|c| matches!(c, Child::Recording(_)))
    }

    /// After the root's recording has ended: waits for the children's recordings to end
    /// with their processes, up to [`OUTLIVE`] (or until Ctrl-C or SIGTERM), then stops
    /// the rest. `stop_now` (the root's recording was stopped by a signal) stops them at
    /// once.
    pub fn finish(mut self, stop_now: bool) {
        let began = Instant::now();
        while !stop_now && self.recording() && began.elapsed() < OUTLIVE {
            std::thread::sleep(Duration::from_millis(10));
            if take_stop_signal() != 0 {
                break;
            }
            self.reap(false);
        }
        self.reap(true);
    }

    fn running(&self) -> usize {
        self.known
            .values()
            .filter(|c| matches!(c, Child::Recording(_)))
            .count()
    }

    /// Ends the recordings whose process has exited (`all`: every recording).
    fn reap(&mut self, all: bool) {
        for (pid, child) in self.known.iter_mut() {
            let ended = match child {
                Child::Recording(s) => all || s.is_finished() || !alive(*pid),
                _ => false,
            };
            if ended {
                if let Child::Recording(session) = std::mem::replace(child, Child::Done) {
                    report(session.stop());
                }
            }
        }
    }

    fn look_at(&mut self, pid: i32) {
        if matches!(
            self.known.get(&pid),
            Some(Child::Recording(_) | Child::Done)
        ) {
            return;
        }
        let now_exe = exe(pid);
        let seen = || Some(Child::Seen(now_exe.clone(), Instant::now()));
        let next = match self.known.get(&pid) {
            None => seen(),
            Some(Child::Seen(_, at)) if at.elapsed() < SETTLE => None,
            Some(Child::Seen(first, _)) if *first == now_exe => {
                self.try_record(pid, now_exe.clone())
            }
            // It ran exec meanwhile: look again once settled.
            Some(Child::Seen(..)) => seen(),
            Some(Child::NotPython(was, _)) if *was != now_exe => seen(),
            // An interpreter linked to libpython shows no _PyRuntime until the loader
            // has mapped the library: one that names itself python is asked again for
            // a moment.
            Some(Child::NotPython(_, at)) if at.elapsed() < STARTING && names_python(&now_exe) => {
                self.try_record(pid, now_exe.clone())
            }
            Some(_) => None,
        };
        if let Some(next) = next {
            self.known.insert(pid, next);
        }
    }

    /// A recording of `pid`, if it is a Python process tach can record.
    fn try_record(&mut self, pid: i32, now_exe: Option<PathBuf>) -> Option<Child> {
        if self.running() >= MAX_RECORDINGS {
            // Full: said once, and only of a Python process.
            return match attach::find(pid) {
                Ok(_) => {
                    if !self.warned_full {
                        eprintln!(
                            "tach: {MAX_RECORDINGS} child processes are being recorded \
                             already; process {pid} and further ones are not"
                        );
                        self.warned_full = true;
                    }
                    Some(Child::Done)
                }
                Err(e) => self.not_recorded(pid, now_exe, e),
            };
        }
        let mut opts = self.opts.clone();
        match opts.segments.as_mut() {
            // `--rotate`: its segments beside the root's, `_<pid>` before `.tach`.
            Some(policy) => policy.pid_suffix = Some(pid),
            None => opts.path = child_path(&self.root_output, pid),
        }
        match outside::start_session(&mut Recorded::Pid(pid), opts, Duration::ZERO) {
            Ok(session) => Some(Child::Recording(session)),
            Err(outside::ExternalError::Attach(e)) => self.not_recorded(pid, now_exe, e),
            Err(e) => {
                eprintln!("tach: not recording child process {pid}: {e}");
                Some(Child::Done)
            }
        }
    }

    /// What `pid` is when attaching to it failed with `e`.
    fn not_recorded(&self, pid: i32, now_exe: Option<PathBuf>, e: AttachError) -> Option<Child> {
        match e {
            AttachError::NotPython { .. } => {
                let since = match self.known.get(&pid) {
                    Some(Child::NotPython(_, at)) => *at,
                    _ => Instant::now(),
                };
                Some(Child::NotPython(now_exe, since))
            }
            // Its interpreter is still starting: look again a moment later.
            AttachError::Starting { .. } => Some(Child::Seen(now_exe, Instant::now())),
            e if e.is_gone() => Some(Child::Done),
            e => {
                eprintln!("tach: not recording child process {pid}: {e}");
                Some(Child::Done)
            }
        }
    }
}

fn report(stats: super::sampler::RecordStats) {
    eprintln!("{}", stats.summary_line());
    if let Some(e) = stats.error {
        eprintln!("tach: error: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_files_are_named_as_cpython_names_them() {
        let p = |s: &str, pid| child_path(Path::new(s), pid);
        assert_eq!(p("app.tach", 42), PathBuf::from("app_42.tach"));
        assert_eq!(p("out/run.1.bin", 7), PathBuf::from("out/run.1_7.bin"));
        assert_eq!(p("noext", 7), PathBuf::from("noext_7"));
        assert_eq!(p("/tmp/.hidden", 7), PathBuf::from("/tmp/.hidden_7"));
    }

    #[test]
    fn descendants_of_this_process_include_a_grandchild() {
        // sh starts sleep (a grandchild of this test), and waits for it.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let sh_pid = sh.id() as i32;
        let began = Instant::now();
        let mut found = Vec::new();
        while began.elapsed() < Duration::from_secs(5) {
            found = descendants(me);
            if found.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let grandchild = found
            .iter()
            .copied()
            .find(|&p| p != sh_pid && parent(p) == Some(sh_pid));
        if let Some(g) = grandchild {
            // SAFETY: kill with a pid of our own grandchild and a valid signal.
            unsafe { libc::kill(g, libc::SIGKILL) };
        }
        let _ = sh.kill();
        let _ = sh.wait();
        assert!(found.contains(&sh_pid), "{found:?}");
        assert!(grandchild.is_some(), "{found:?}");
        assert!(!found.contains(&me));
    }
}
