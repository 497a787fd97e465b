//! `tach top --pid PID` and `tach top -- python app.py`: a terminal view of a recording
//! in progress, refreshed about once a second (as py-spy top and CPython's `--live`).
//!
//! The target is recorded from outside exactly as `tach record --pid` / `tach record --
//! cmd` record it (same options, defaults and errors); the sampler also hands every
//! sample to a [`LiveProfile`], whose table is the one `tach top FILE` prints. The file
//! goes where `-o` says, or to a scratch file removed at the end.
//!
//! When the target exits (or `-d` runs out), the view says so and keeps the last table
//! until q. A program tach started and still running when q is pressed gets SIGINT (as
//! Ctrl-C in a shell would send it), then SIGKILL if it has not exited after
//! [`STOP_GRACE`]. tach then exits with the program's status, as `tach record -- cmd`.

mod feed;
mod view;

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::DefaultTerminal;

use crate::record::{catch_stop_signals, start_session, take_stop_signal, write_empty};
use crate::record::{
    exit_code, ExternalError, RecordCommand, RecordCommandError, Recorded, STARTUP,
};
use crate::record::{RecordStats, Session};
use crate::report::live::LiveProfile;
use crate::report::{GroupBy, SortBy};

pub use view::{Status, View};

/// How often the table takes the latest samples.
const REFRESH: Duration = Duration::from_secs(1);
/// The longest the screen goes without a redraw (the header's clock and counters).
const REDRAW: Duration = Duration::from_millis(200);
/// How long a started program has to exit after SIGINT before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Lines of the started program's output kept, printed when the view closes.
const OUTPUT_LINES: usize = 200;

/// Set when the terminal hangs up (SIGHUP): the view ends as on q, so that the file is
/// finished, the scratch file removed and a started program stopped.
static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn note_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::Relaxed);
}

/// Why the live view could not run.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Record(#[from] RecordCommandError),
    #[error(
        "tach top --pid and tach top -- PROGRAM draw a live view and need a terminal; \
         without one, record (tach record --pid PID -o out.tach) and then run tach top out.tach"
    )]
    NoTerminal,
    #[error("the terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

impl LiveError {
    /// A command line that asks for something impossible (exit status 2).
    pub fn is_usage(&self) -> bool {
        match self {
            LiveError::Record(e) => e.is_usage(),
            LiveError::NoTerminal => true,
            LiveError::Terminal(_) => false,
        }
    }
}

/// The live view's options: how to record (`tach record`'s) and how to show it.
pub struct LiveCommand {
    pub record: RecordCommand,
    pub sort: SortBy,
    pub by: GroupBy,
}

/// Runs the live view and returns tach's exit status: the program's own when tach
/// started it, 0 after watching a pid.
pub fn run(cmd: LiveCommand) -> Result<u8, LiveError> {
    let rc = &cmd.record;
    if rc.pid.is_some() && !rc.argv.is_empty() {
        return Err(RecordCommandError::PidAndCommand.into());
    }
    if rc.pid.is_none() && rc.argv.is_empty() {
        return Err(RecordCommandError::NoCommand.into());
    }
    // Validate the options before anything starts.
    rc.spec.validate().map_err(RecordCommandError::from)?;
    if !std::io::stdout().is_terminal() {
        return Err(LiveError::NoTerminal);
    }
    catch_stop_signals();
    HANGUP.store(false, Ordering::Relaxed);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGHUP,
            note_hangup as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    match rc.pid {
        Some(pid) => watch(&cmd, Recorded::Pid(pid), None).map(|_| 0),
        None => {
            let output = Arc::new(Mutex::new(VecDeque::new()));
            let mut child = spawn(&rc.argv, &output)?;
            let result = watch(&cmd, Recorded::Child(&mut child), Some(STOP_GRACE));
            // Whatever happened, the program is not left running behind us.
            stop_child(&mut child);
            let status = child.wait().map_err(|source| RecordCommandError::Spawn {
                program: rc.argv[0].clone(),
                source,
            });
            print_output(&output);
            result?;
            Ok(exit_code(status?))
        }
    }
}

/// Starts the program with its output captured (the screen is the view's) and no
/// input (the keys are the view's).
fn spawn(
    argv: &[std::ffi::OsString],
    output: &Arc<Mutex<VecDeque<String>>>,
) -> Result<Child, RecordCommandError> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RecordCommandError::Spawn {
            program: argv[0].clone(),
            source,
        })?;
    let pipes: [Option<Box<dyn std::io::Read + Send>>; 2] = [
        child.stdout.take().map(|p| Box::new(p) as _),
        child.stderr.take().map(|p| Box::new(p) as _),
    ];
    for pipe in pipes.into_iter().flatten() {
        let output = output.clone();
        // Read to the end, so the program never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut out = output.lock().unwrap_or_else(|e| e.into_inner());
                if out.len() == OUTPUT_LINES {
                    out.pop_front();
                }
                out.push_back(line);
            }
        });
    }
    Ok(child)
}

/// Interrupts a started program that still runs: SIGINT, then SIGKILL after the grace.
fn stop_child(child: &mut Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    let pid = child.id() as i32;
    // SAFETY: kill with the pid of our own unreaped child and a valid signal.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let began = Instant::now();
    while began.elapsed() < STOP_GRACE {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
}

/// A line on standard error, which may be a terminal that has hung up (eprintln! would
/// panic).
fn note(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The started program's last lines of output, once the terminal is restored.
fn print_output(output: &Arc<Mutex<VecDeque<String>>>) {
    // Give the readers a moment to take what the program wrote last.
    std::thread::sleep(Duration::from_millis(50));
    let out = output.lock().unwrap_or_else(|e| e.into_inner());
    if out.is_empty() {
        return;
    }
    note(&format!(
        "tach: the program's output (its last {} lines):",
        out.len()
    ));
    for line in out.iter() {
        note(line);
    }
}

/// Attaches, then shows the view until q. `child_grace`: a started program (the
/// attach waits for its interpreter to load).
fn watch(
    cmd: &LiveCommand,
    mut target: Recorded<'_>,
    child_grace: Option<Duration>,
) -> Result<(), LiveError> {
    let pid = target.pid();
    let rc = &cmd.record;
    let mut opts = rc
        .spec
        .record_options(pid)
        .map_err(RecordCommandError::from)?;
    // Without -o the file is scratch: the view is the output.
    let scratch =
        rc.spec.output.is_none().then(|| {
            std::env::temp_dir().join(format!("tach-top-{pid}-{}.tach", std::process::id()))
        });
    if let Some(path) = &scratch {
        opts.path = path.clone();
        // Nothing is kept of a scratch file: no segments either (`--rotate` needs -o).
        opts.segments = None;
    }
    let profile = Arc::new(LiveProfile::new(opts.interval_us));
    opts.sink = Some(profile.clone());
    let (path, interval, mode) = (opts.path.clone(), opts.interval_us, opts.mode);
    let startup = if child_grace.is_some() {
        STARTUP
    } else {
        Duration::ZERO
    };
    let session = match start_session(&mut target, opts, startup) {
        Ok(s) => s,
        Err(e) => {
            // As tach record: an empty file beside the error, when one was asked for.
            if scratch.is_none() && matches!(e, ExternalError::Attach(_)) {
                let _ = write_empty(&path, interval, mode);
            }
            return Err(RecordCommandError::from(e).into());
        }
    };
    let began = Instant::now();
    let mut terminal = ratatui::try_init()?;
    let mut screen = Screen {
        view: View::new(cmd.sort, cmd.by),
        status: Status {
            pid,
            rate_hz: 1e6 / interval.max(1) as f64,
            ..Status::default()
        },
        profile,
        session: Some(session),
        stats: None,
        began,
    };
    let shown = screen.run(&mut terminal, &mut target);
    let restored = ratatui::try_restore();
    // Quit while sampling: stop it and finish the file.
    screen.stop_sampling(None);
    if let Some(path) = &scratch {
        let _ = std::fs::remove_file(path);
    }
    if let Some(stats) = &screen.stats {
        if scratch.is_none() {
            note(&stats.summary_line());
        }
        if let Some(e) = &stats.error {
            note(&format!("tach: error: {e}"));
        }
    }
    shown?;
    restored?;
    Ok(())
}

/// The view with the recording behind it.
struct Screen {
    view: View,
    status: Status,
    profile: Arc<LiveProfile>,
    /// None once sampling has stopped.
    session: Option<Session>,
    stats: Option<RecordStats>,
    began: Instant,
}

impl Screen {
    /// Draws and handles keys until q, Ctrl-C, SIGTERM, SIGINT or SIGHUP.
    fn run(
        &mut self,
        terminal: &mut DefaultTerminal,
        target: &mut Recorded<'_>,
    ) -> std::io::Result<()> {
        let keys = KeyReader::start();
        let shown = self.show(terminal, target, &keys.events);
        keys.finish();
        shown
    }

    fn show(
        &mut self,
        terminal: &mut DefaultTerminal,
        target: &mut Recorded<'_>,
        keys: &Receiver<Event>,
    ) -> std::io::Result<()> {
        // The first table as soon as there is something to show.
        let mut next_refresh = Instant::now() + Duration::from_millis(250);
        let mut liveness = target.liveness();
        loop {
            let now = Instant::now();
            if let Some(session) = &self.session {
                if !target.running(&mut liveness) {
                    // Stopped first: the sampler's ptrace stops are gone before the
                    // program's exit status is collected.
                    self.stop_sampling(None);
                    let why = match target {
                        Recorded::Pid(p) => format!("process {p} exited"),
                        Recorded::Child(c) => match c.try_wait() {
                            Ok(Some(status)) => {
                                format!("the program exited with status {}", exit_code(status))
                            }
                            _ => "the program exited".to_string(),
                        },
                    };
                    self.status.ended.get_or_insert(why + "; q quits");
                } else if session.is_finished() {
                    self.stop_sampling(Some("sampling stopped (-d); q quits".into()));
                }
                if self.session.is_none() {
                    // Every sample, whether paused or not.
                    let paused = std::mem::replace(&mut self.view.paused, false);
                    self.view.refresh(&self.profile);
                    self.view.paused = paused;
                }
            }
            if now >= next_refresh {
                self.view.refresh(&self.profile);
                next_refresh = now + REFRESH;
            }
            if take_stop_signal() != 0 || HANGUP.load(Ordering::Relaxed) {
                return Ok(());
            }
            self.update_status();
            terminal.draw(|f| self.view.render(f, &self.status))?;
            let wait = next_refresh
                .saturating_duration_since(Instant::now())
                .min(REDRAW);
            match keys.recv_timeout(wait) {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => self.view.handle(k),
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                // The terminal failed: nothing more can be shown.
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if self.view.quit {
                return Ok(());
            }
        }
    }

    fn update_status(&mut self) {
        let (samples, ticks, error_ticks) = self.profile.counters();
        self.status.samples = samples;
        self.status.ticks = ticks;
        self.status.error_ticks = error_ticks;
        if self.session.is_some() {
            self.status.elapsed_s = self.began.elapsed().as_secs_f64();
        }
    }

    /// Stops sampling (once) and finishes the file; `why` is what the header says.
    fn stop_sampling(&mut self, why: Option<String>) {
        if let Some(session) = self.session.take() {
            let stats = session.stop();
            self.status.ended = match (&stats.error, why) {
                (Some(e), _) => Some(format!("sampling failed: {e}; q quits")),
                (None, why) => why,
            };
            self.stats = Some(stats);
        }
    }
}

/// The terminal's events, read on a thread of their own: crossterm's read loops without
/// end on a terminal that has hung up, and the view must still see SIGHUP and finish
/// the file. The thread polls, so that [`KeyReader::finish`] can stop it and no reader is
/// left taking the keys typed after the view (in the Python package's `tach` command,
/// the interpreter goes on).
struct KeyReader {
    events: Receiver<Event>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl KeyReader {
    fn start() -> KeyReader {
        let (tx, events) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match event::poll(Duration::from_millis(50)) {
                    Ok(false) => {}
                    Ok(true) => {
                        let Ok(e) = event::read() else { return };
                        if tx.send(e).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        KeyReader {
            events,
            stop,
            thread,
        }
    }

    /// Stops the reader; waits for it unless the terminal hung up (it may be spinning
    /// in crossterm then, and goes when the process does).
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        if !HANGUP.load(Ordering::Relaxed) {
            let _ = self.thread.join();
        }
    }
}
