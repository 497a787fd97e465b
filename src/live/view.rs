//! What the live view shows and how keys change it, apart from any terminal: the state
//! ([`View`]), its key handling ([`View::handle`]) and its drawing into a ratatui
//! [`Frame`] ([`View::render`]), so that both are tested without a terminal.
//!
//! The table's lines are those `tach top FILE` prints ([`top_table_header`],
//! [`top_table_row`] over [`LiveData::report`], the printed table's aggregation).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::report::live::{LiveData, LiveProfile, LiveThread, StatusMix, ThreadChoice};
use crate::report::{top_table_header, top_table_row, GroupBy, SortBy, TopOptions, TopReport};

/// What the header says about the recording: counters and how it ended.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub pid: i32,
    pub rate_hz: f64,
    pub samples: u64,
    pub ticks: u64,
    pub error_ticks: u64,
    pub elapsed_s: f64,
    /// Set once sampling has stopped: why (the process exited, the duration ran out).
    pub ended: Option<String>,
}

/// Threads the status panel lists, at most (the main thread first, then by id).
const PANEL_THREADS: usize = 10;

/// The keys, as the footer lists them.
const HELP: &str = "q quit  s/t/n sort by self/total/name  ←/→ thread  a all threads  \
                    p pause  m status per thread  l by line/function  ↑/↓ scroll";

/// The live view's state.
#[derive(Debug)]
pub struct View {
    pub sort: SortBy,
    pub by: GroupBy,
    /// The thread whose samples the table counts (None: every thread's).
    pub thread: ThreadChoice,
    /// The table is frozen (sampling goes on; the header's counters still move).
    pub paused: bool,
    /// Show each thread's status mix above the table.
    pub per_thread: bool,
    /// Rows scrolled past.
    pub scroll: usize,
    pub quit: bool,
    /// The samples shown (not updated while paused).
    data: LiveData,
    threads: Vec<LiveThread>,
    /// The status mix of every thread's samples in `data`.
    all: StatusMix,
    /// The table of `data` for the current sort, grouping and thread; None when stale.
    table: Option<TopReport>,
}

impl View {
    pub fn new(sort: SortBy, by: GroupBy) -> Self {
        View {
            sort,
            by,
            thread: None,
            paused: false,
            per_thread: false,
            scroll: 0,
            quit: false,
            data: LiveData::default(),
            threads: Vec::new(),
            all: StatusMix::default(),
            table: None,
        }
    }

    /// Takes the profile's latest samples, unless paused.
    pub fn refresh(&mut self, profile: &LiveProfile) {
        if self.paused {
            return;
        }
        profile.snapshot(&mut self.data);
        self.threads = self.data.threads();
        self.all = StatusMix::default();
        for t in &self.threads {
            self.all.merge(&t.mix);
        }
        self.table = None;
    }

    /// Applies one key press.
    pub fn handle(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let before = (self.sort, self.by, self.thread);
        match key.code {
            KeyCode::Char('c') if ctrl => self.quit = true,
            KeyCode::Char('q') | KeyCode::Char('Q') => self.quit = true,
            KeyCode::Char('s') | KeyCode::Char('1') => self.sort = SortBy::SelfTime,
            KeyCode::Char('t') | KeyCode::Char('2') => self.sort = SortBy::TotalTime,
            KeyCode::Char('n') | KeyCode::Char('3') => self.sort = SortBy::Name,
            KeyCode::Right | KeyCode::Tab | KeyCode::Char(']') => self.next_thread(1),
            KeyCode::Left | KeyCode::BackTab | KeyCode::Char('[') => self.next_thread(-1),
            KeyCode::Char('a') => self.thread = None,
            KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Char('m') => self.per_thread = !self.per_thread,
            KeyCode::Char('l') => {
                self.by = match self.by {
                    GroupBy::Line => GroupBy::Function,
                    _ => GroupBy::Line,
                }
            }
            KeyCode::Down | KeyCode::Char('j') => self.scroll = self.scroll.saturating_add(1),
            KeyCode::Up | KeyCode::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_add(20),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(20),
            KeyCode::Home => self.scroll = 0,
            _ => {}
        }
        if before != (self.sort, self.by, self.thread) {
            self.table = None;
            self.scroll = 0;
        }
    }

    /// Every thread, then each thread in turn (`step` 1), or backwards (-1).
    fn next_thread(&mut self, step: isize) {
        let n = self.threads.len() as isize;
        if n == 0 {
            self.thread = None;
            return;
        }
        // Positions: -1 is "all", 0..n the threads.
        let at = match self.thread {
            None => -1,
            Some(id) => self
                .threads
                .iter()
                .position(|t| t.id == id)
                .map_or(-1, |i| i as isize),
        };
        let next = (at + 1 + step).rem_euclid(n + 1) - 1;
        self.thread = (next >= 0).then(|| self.threads[next as usize].id);
    }

    /// The table shown (built when stale).
    pub fn table(&mut self) -> &TopReport {
        let (thread, sort, by) = (self.thread, self.sort, self.by);
        let data = &self.data;
        self.table.get_or_insert_with(|| {
            let options = TopOptions {
                by,
                sort,
                ..Default::default()
            };
            data.report(thread, &options, "live")
        })
    }

    fn thread_label(&self) -> String {
        match self.thread {
            None => format!("all ({})", self.threads.len()),
            Some(id) => {
                let main = self.threads.iter().any(|t| t.id == id && t.main);
                format!("{id}{}", if main { " (main)" } else { "" })
            }
        }
    }

    /// Draws the whole screen.
    pub fn render(&mut self, frame: &mut Frame, status: &Status) {
        // The panel's title, a line per thread (at most PANEL_THREADS) and a line for
        // the rest.
        let panel = if self.per_thread {
            let n = self.threads.len();
            (n.min(PANEL_THREADS) + 1 + usize::from(n > PANEL_THREADS)) as u16
        } else {
            0
        };
        let [head, info, threads, _, table, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Length(panel),
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        frame.render_widget(Paragraph::new(header_line(status, self.paused)), head);
        let mix = match self.thread {
            None => self.all,
            Some(id) => self
                .threads
                .iter()
                .find(|t| t.id == id)
                .map_or_else(StatusMix::default, |t| t.mix),
        };
        let info_line = format!(
            "thread {}  sort {}  by {}  {}",
            self.thread_label(),
            sort_name(self.sort),
            by_name(self.by),
            mix_text(&mix)
        );
        frame.render_widget(Paragraph::new(info_line), info);
        if self.per_thread {
            let mut lines = vec![Line::styled(
                format!(
                    "{:>20} {:>9} {:>7} {:>9} {:>7} {:>9}",
                    "thread", "samples", "GIL", "GIL wait", "on CPU", "exception"
                ),
                Style::default().add_modifier(Modifier::BOLD),
            )];
            for t in self.threads.iter().take(PANEL_THREADS) {
                let m = t.mix;
                let name = format!("{}{}", t.id, if t.main { " (main)" } else { "" });
                lines.push(Line::raw(format!(
                    "{name:>20} {:>9} {:>6.1}% {:>8.1}% {:>7} {:>8.1}%",
                    m.samples,
                    m.pct(m.has_gil),
                    m.pct(m.gil_requested),
                    cpu_text(&m),
                    m.pct(m.has_exception)
                )));
            }
            if self.threads.len() > PANEL_THREADS {
                lines.push(Line::raw(format!(
                    "{:>20} (←/→ shows each thread)",
                    format!("+{} more", self.threads.len() - PANEL_THREADS)
                )));
            }
            frame.render_widget(Paragraph::new(lines), threads);
        }
        let by = self.by;
        let rows_fit = table.height.saturating_sub(1) as usize;
        // Scrolled no further than the last row, so that Up moves at once.
        let n = self.table().rows.len();
        self.scroll = self.scroll.min(n.saturating_sub(1));
        let first = self.scroll;
        let report = self.table();
        let mut lines = vec![Line::styled(
            top_table_header(by, false),
            Style::default().add_modifier(Modifier::REVERSED),
        )];
        if report.rows.is_empty() {
            lines.push(Line::raw("  (no samples yet)"));
        }
        lines.extend(
            report
                .rows
                .iter()
                .skip(first)
                .take(rows_fit)
                .map(|r| Line::raw(top_table_row(r, by))),
        );
        frame.render_widget(Paragraph::new(lines), table);
        frame.render_widget(
            Paragraph::new(Line::styled(
                HELP,
                Style::default().add_modifier(Modifier::DIM),
            )),
            foot,
        );
    }
}

fn sort_name(s: SortBy) -> &'static str {
    match s {
        SortBy::SelfTime => "self",
        SortBy::TotalTime => "total",
        SortBy::Samples => "samples",
        SortBy::Name => "name",
    }
}

fn by_name(b: GroupBy) -> &'static str {
    match b {
        GroupBy::Function => "function",
        GroupBy::Line => "line",
        GroupBy::File => "file",
    }
}

/// The on-CPU share, or n/a when the mode did not look the CPU state up.
fn cpu_text(m: &StatusMix) -> String {
    if m.samples > 0 && m.cpu_unknown == m.samples {
        "n/a".into()
    } else {
        format!("{:.1}%", m.pct(m.on_cpu))
    }
}

fn mix_text(m: &StatusMix) -> String {
    let cpu = if m.samples > 0 && m.cpu_unknown == m.samples {
        "n/a (--mode cpu)".to_string()
    } else {
        format!("{:.1}%", m.pct(m.on_cpu))
    };
    format!(
        "GIL {:.1}%  GIL wait {:.1}%  on CPU {cpu}  exception {:.1}%",
        m.pct(m.has_gil),
        m.pct(m.gil_requested),
        m.pct(m.has_exception)
    )
}

fn header_line(s: &Status, paused: bool) -> Line<'static> {
    let errors = if s.ticks > 0 {
        100.0 * s.error_ticks as f64 / s.ticks as f64
    } else {
        0.0
    };
    let mut spans = vec![
        Span::styled("tach top", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  pid {}  rate {:.0} Hz  samples {}  elapsed {:.1} s  errors {} ({:.2}% of ticks)",
            s.pid, s.rate_hz, s.samples, s.elapsed_s, s.error_ticks, errors
        )),
    ];
    if paused {
        spans.push(Span::styled(
            "  PAUSED",
            Style::default().add_modifier(Modifier::REVERSED),
        ));
    }
    if let Some(why) = &s.ended {
        spans.push(Span::styled(
            format!("  {why}"),
            Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        ));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SampleSink;
    // Wall mode: the CPU state is not looked up.
    use crate::tach::filter::status::{HAS_GIL, MAIN_THREAD, UNKNOWN};
    use crate::tach::FrameEntry;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    /// Thread 1 (main) runs `hot` under `main` 30 times and `cold` 10 times; thread 2
    /// runs `worker` 20 times.
    fn profile() -> LiveProfile {
        let live = LiveProfile::new(1000);
        let strings: Vec<Box<[u8]>> = ["app.py", "main", "hot", "cold", "worker"]
            .iter()
            .map(|s| s.as_bytes().into())
            .collect();
        let frame = |funcname: u32, lineno: i32| FrameEntry {
            filename: 0,
            funcname,
            lineno,
            end_lineno: lineno,
            column: -1,
            end_column: -1,
            opcode: crate::tach::tables::OPCODE_NONE,
        };
        let frames = [frame(1, 1), frame(2, 5), frame(3, 9), frame(4, 12)];
        for _ in 0..30 {
            live.sample(
                1,
                MAIN_THREAD | HAS_GIL | UNKNOWN,
                &[1, 0],
                &frames,
                &strings,
            );
        }
        for _ in 0..10 {
            live.sample(1, MAIN_THREAD | UNKNOWN, &[2, 0], &frames, &strings);
        }
        for _ in 0..20 {
            live.sample(2, UNKNOWN, &[3], &frames, &strings);
        }
        live
    }

    fn screen(view: &mut View, status: &Status) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(150, 20)).unwrap();
        term.draw(|f| view.render(f, status)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    /// The function names of the table's rows, top to bottom.
    fn order(view: &mut View) -> Vec<String> {
        view.table()
            .rows
            .iter()
            .map(|r| r.key.funcname.clone())
            .collect()
    }

    #[test]
    fn sort_keys_reorder_the_table() {
        let live = profile();
        let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
        v.refresh(&live);
        assert_eq!(order(&mut v), ["hot", "worker", "cold", "main"]);
        v.handle(key(KeyCode::Char('t')));
        assert_eq!(v.sort, SortBy::TotalTime);
        assert_eq!(order(&mut v), ["main", "hot", "worker", "cold"]);
        v.handle(key(KeyCode::Char('n')));
        assert_eq!(order(&mut v), ["cold", "hot", "main", "worker"]);
        v.handle(key(KeyCode::Char('1')));
        assert_eq!(v.sort, SortBy::SelfTime);
    }

    #[test]
    fn thread_keys_cycle_through_threads_and_back_to_all() {
        let live = profile();
        let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
        v.refresh(&live);
        v.handle(key(KeyCode::Right));
        assert_eq!(v.thread, Some(1));
        assert_eq!(order(&mut v), ["hot", "cold", "main"]);
        v.handle(key(KeyCode::Tab));
        assert_eq!(v.thread, Some(2));
        assert_eq!(order(&mut v), ["worker"]);
        v.handle(key(KeyCode::Right));
        assert_eq!(v.thread, None);
        v.handle(key(KeyCode::Left));
        assert_eq!(v.thread, Some(2));
        v.handle(key(KeyCode::Char('a')));
        assert_eq!(v.thread, None);
        assert_eq!(v.table().samples, 60);
    }

    #[test]
    fn pause_freezes_the_table_while_samples_come_in() {
        let live = profile();
        let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
        v.refresh(&live);
        v.handle(key(KeyCode::Char('p')));
        assert!(v.paused);
        let strings: Vec<Box<[u8]>> = vec![b"b.py".as_slice().into(), b"new".as_slice().into()];
        let frames = live_frames_with_new();
        live.sample(3, 0, &[4], &frames, &strings);
        v.refresh(&live);
        assert_eq!(v.table().samples, 60);
        v.handle(key(KeyCode::Char(' ')));
        v.refresh(&live);
        assert_eq!(v.table().samples, 61);
    }

    fn live_frames_with_new() -> Vec<FrameEntry> {
        (0..5)
            .map(|i| FrameEntry {
                filename: 0,
                funcname: 1,
                lineno: i,
                end_lineno: i,
                column: -1,
                end_column: -1,
                opcode: crate::tach::tables::OPCODE_NONE,
            })
            .collect()
    }

    #[test]
    fn scrolling_stops_at_the_last_row_and_l_groups_by_line() {
        let live = profile();
        let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
        v.refresh(&live);
        let status = Status::default();
        for _ in 0..50 {
            v.handle(key(KeyCode::Down));
        }
        screen(&mut v, &status);
        assert_eq!(v.scroll, 3);
        v.handle(key(KeyCode::Up));
        let lines = screen(&mut v, &status);
        assert_eq!(v.scroll, 2);
        // Rows by self: hot, worker, cold, main; two scrolled past.
        assert!(lines[4].ends_with("app.py(cold)"), "{}", lines[4]);
        v.handle(key(KeyCode::Char('l')));
        assert_eq!((v.by, v.scroll), (GroupBy::Line, 0));
        let lines = screen(&mut v, &status);
        assert!(lines[4].ends_with("app.py:5(hot)"), "{}", lines[4]);
        v.handle(key(KeyCode::Char('l')));
        assert_eq!(v.by, GroupBy::Function);
    }

    #[test]
    fn quit_keys() {
        for k in [
            key(KeyCode::Char('q')),
            KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
        ] {
            let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
            v.handle(k);
            assert!(v.quit);
        }
        let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
        v.handle(key(KeyCode::Char('c')));
        assert!(!v.quit);
    }

    #[test]
    fn the_screen_shows_the_header_status_and_the_printed_tables_lines() {
        let live = profile();
        let mut v = View::new(SortBy::SelfTime, GroupBy::Function);
        v.refresh(&live);
        let status = Status {
            pid: 4242,
            rate_hz: 1000.0,
            samples: 60,
            ticks: 40,
            error_ticks: 1,
            elapsed_s: 2.5,
            ended: Some("process 4242 exited".into()),
        };
        let lines = screen(&mut v, &status);
        assert!(lines[0].starts_with("tach top  pid 4242  rate 1000 Hz  samples 60"));
        assert!(
            lines[0].contains("errors 1 (2.50% of ticks)"),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with("process 4242 exited"), "{}", lines[0]);
        assert!(lines[1].contains("thread all (2)"), "{}", lines[1]);
        assert!(lines[1].contains("GIL 50.0%"), "{}", lines[1]);
        assert!(lines[1].contains("on CPU n/a"), "{}", lines[1]);
        // The printed table's header and rows, line for line.
        let report = v.table().clone();
        assert_eq!(
            lines[3],
            top_table_header(GroupBy::Function, false).trim_end()
        );
        assert_eq!(lines[4], top_table_row(&report.rows[0], GroupBy::Function));
        assert!(lines[4].ends_with("app.py(hot)"), "{}", lines[4]);
        assert!(lines[19].starts_with("q quit"));
        // The status per thread, above the table.
        v.handle(key(KeyCode::Char('m')));
        let lines = screen(&mut v, &status);
        assert!(lines[2].contains("GIL wait"), "{}", lines[2]);
        assert!(
            lines[3].contains("1 (main)") && lines[3].contains("75.0%"),
            "{}",
            lines[3]
        );
        assert!(lines[6].starts_with("     self/total"), "{}", lines[6]);
        v.handle(key(KeyCode::Char('p')));
        assert!(screen(&mut v, &status)[0].contains("PAUSED"));
    }
}
