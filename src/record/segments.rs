//! Rotating segments (`--rotate`, `--keep`, `--on-segment`): a long recording as a
//! directory of complete TACH files, one per segment, each verifiable and replayable on
//! its own.
//!
//! The sampler switches writers between two ticks (`sampler::Sampler::switch_segment`),
//! so that every sample is in exactly one segment; the old writer is handed to a
//! [`Finisher`] thread, which finishes it (tables, footer, header: the part that grows
//! with the segment, kept off the sampling thread), runs the hook and applies the
//! retention. A segment that could not be finished (a full disk) stops the recording
//! at the sampler's next tick, through [`Finisher::failure`]; its incomplete file is
//! removed and its journal kept, for `tach recover`, and no segment is deleted after it.
//!
//! Names sort by time: `tach-20261128T140500.123Z-000042.tach` is the segment that
//! started at 14:05:00.123 UTC, the 43rd of its recording (the sequence number breaks
//! ties within a millisecond and shows a gap where one was deleted). A child process's
//! segments (`--subprocesses`) are beside the parent's, with `_<pid>` before the
//! extension as CPython names a child's file: `tach-20261128T140500.123Z-000000_4242.tach`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use crate::tach::{TachError, Writer};

/// A limit of a segment (`--rotate`) or of what is kept (`--keep`): an age or a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Age(Duration),
    Bytes(u64),
}

/// Why a `--rotate` or `--keep` value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error("{0:?} is not a duration or a size: write a number and a unit (60s, 5m, 24h, 7d; 100MB, 10GB)")]
    Syntax(String),
    #[error("{0:?} must be more than zero")]
    Zero(String),
}

impl std::str::FromStr for Limit {
    type Err = LimitError;

    /// `60s`, `1.5m`, `24h`, `7d`, `500ms`; `100MB`, `10GB`, `1GiB`, `4096B` (KB, MB, GB,
    /// TB are powers of 1000; KiB, MiB, GiB, TiB of 1024).
    fn from_str(text: &str) -> Result<Limit, LimitError> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let syntax = || LimitError::Syntax(text.to_string());
        let value: f64 = number.parse().map_err(|_| syntax())?;
        if value == 0.0 {
            return Err(LimitError::Zero(text.to_string()));
        }
        let seconds = match unit.trim() {
            "ms" => Some(1e-3),
            "s" => Some(1.0),
            "m" | "min" => Some(60.0),
            "h" => Some(3600.0),
            "d" => Some(86400.0),
            _ => None,
        };
        let bytes = match unit.trim().to_ascii_uppercase().as_str() {
            "B" => Some(1.0),
            "KB" | "K" => Some(1e3),
            "MB" | "M" => Some(1e6),
            "GB" | "G" => Some(1e9),
            "TB" | "T" => Some(1e12),
            "KIB" => Some(1024.0),
            "MIB" => Some(1024.0 * 1024.0),
            "GIB" => Some(1024.0 * 1024.0 * 1024.0),
            "TIB" => Some(1024.0f64.powi(4)),
            _ => None,
        };
        // `m` is minutes (a duration), as in 5m; megabytes are MB.
        let limit = match (seconds, bytes) {
            (Some(s), _) => {
                Limit::Age(Duration::try_from_secs_f64(value * s).map_err(|_| syntax())?)
            }
            (None, Some(b)) => Limit::Bytes((value * b).round() as u64),
            (None, None) => return Err(syntax()),
        };
        if matches!(limit, Limit::Age(d) if d.is_zero()) || limit == Limit::Bytes(0) {
            return Err(LimitError::Zero(text.to_string()));
        }
        Ok(limit)
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // In the largest unit that divides it (24h, 100MB, 1GiB), ages in hours, seconds
        // or milliseconds: the units a message's reader compares most easily (60s, not 1m).
        match *self {
            Limit::Age(d) => {
                let ms = d.as_millis();
                let unit = [(3_600_000, "h"), (1000, "s"), (1, "ms")]
                    .into_iter()
                    .find(|&(u, _)| ms % u == 0);
                match unit {
                    Some((u, name)) => write!(f, "{}{name}", ms / u),
                    None => write!(f, "{}s", d.as_secs_f64()),
                }
            }
            Limit::Bytes(b) => {
                let unit = [
                    (1u64 << 40, "TiB"),
                    (1_000_000_000_000, "TB"),
                    (1 << 30, "GiB"),
                    (1_000_000_000, "GB"),
                    (1 << 20, "MiB"),
                    (1_000_000, "MB"),
                    (1 << 10, "KiB"),
                    (1000, "KB"),
                ]
                .into_iter()
                .find(|&(u, _)| b % u == 0);
                match unit {
                    Some((u, name)) => write!(f, "{}{name}", b / u),
                    None => write!(f, "{b}B"),
                }
            }
        }
    }
}

/// `tach.start(rotate="60s")` or `rotate=["60s", "100MB"]` (and `keep=`): one limit or
/// a list, each as the flag's value.
pub fn deserialize_limits<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Limit>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        None(()),
        One(String),
        Many(Vec<String>),
    }
    let texts = match <OneOrMany as serde::Deserialize>::deserialize(d).map_err(|_| {
        serde::de::Error::custom(
            "a duration or a size as text (\"60s\", \"100MB\"), or a list of them",
        )
    })? {
        OneOrMany::None(()) => Vec::new(),
        OneOrMany::One(t) => vec![t],
        OneOrMany::Many(ts) => ts,
    };
    texts
        .iter()
        .map(|t| t.parse().map_err(serde::de::Error::custom))
        .collect()
}

/// The shortest age and the smallest size among `limits` (either may be absent).
pub fn smallest(limits: &[Limit]) -> (Option<Duration>, Option<u64>) {
    let mut age = None::<Duration>;
    let mut bytes = None::<u64>;
    for l in limits {
        match *l {
            Limit::Age(d) => age = Some(age.map_or(d, |a| a.min(d))),
            Limit::Bytes(b) => bytes = Some(bytes.map_or(b, |a| a.min(b))),
        }
    }
    (age, bytes)
}

/// How a recording is cut into segments and which ones are kept (validated by
/// `RecordSpec::record_options`).
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentPolicy {
    /// A segment ends when it is this old...
    pub max_age: Option<Duration>,
    /// ...or when its file reaches this size, whichever comes first.
    pub max_bytes: Option<u64>,
    /// Finished segments older than this (by their end) are deleted, oldest first...
    pub keep_age: Option<Duration>,
    /// ...and the oldest are deleted while the finished ones take more than this.
    pub keep_bytes: Option<u64>,
    /// Run with each finished segment's path (`sh -c 'CMD "$1"'`, and `TACH_SEGMENT`).
    pub on_segment: Option<String>,
    /// `_<pid>` before the extension: a child process's segments (`--subprocesses`).
    pub pid_suffix: Option<i32>,
}

/// The name of the segment that started at `start` (wall clock), `seq`-th of its
/// recording: `tach-YYYYMMDDTHHMMSS.mmmZ-NNNNNN.tach`, `_<pid>` before `.tach` for a
/// child process.
pub fn segment_name(start: SystemTime, seq: u64, pid_suffix: Option<i32>) -> String {
    let t: chrono::DateTime<chrono::Utc> = start.into();
    let suffix = pid_suffix.map(|p| format!("_{p}")).unwrap_or_default();
    format!(
        "tach-{}-{seq:06}{suffix}.tach",
        t.format("%Y%m%dT%H%M%S%.3fZ")
    )
}

/// Makes `dir` ready for segments: created if missing, refused if it is a file or not
/// writable (tried with a scratch file), so that a bad `-o` fails at start.
pub fn prepare_dir(dir: &Path) -> Result<(), TachError> {
    let usage = |what: String| TachError::Usage(format!("--rotate: {what}"));
    if dir.exists() && !dir.is_dir() {
        return Err(usage(format!(
            "{} is a file; rotation writes a directory of segments: give -o DIR",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        usage(format!(
            "cannot create the directory {}: {e}",
            dir.display()
        ))
    })?;
    let probe = dir.join(format!(".tach-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|e| usage(format!("cannot write in {}: {e}", dir.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// A segment done with on the sampling thread, to finish on the finisher's.
pub struct FinishedSegment {
    pub writer: Writer<std::io::BufWriter<std::fs::File>>,
    pub path: PathBuf,
}

/// What the finisher did over the recording (what `tach record`'s summary line adds up).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FinisherTotals {
    pub segments: u64,
    pub samples: u64,
    pub bytes: u64,
    pub deleted: u64,
    /// The first segment that could not be finished, and why.
    pub error: Option<String>,
}

/// The thread that finishes segments, runs the hook and applies the retention.
pub struct Finisher {
    jobs: Option<mpsc::Sender<FinishedSegment>>,
    thread: Option<std::thread::JoinHandle<FinisherTotals>>,
    /// Set once, by the thread, when a segment could not be finished (a full disk): the
    /// sampler looks at it every tick and stops (one atomic load while unset).
    failed: Arc<OnceLock<String>>,
}

/// How often, while no segment comes, hooks that ended are looked for (reaped) and the
/// retention by age is applied.
const REAP_EVERY: Duration = Duration::from_millis(500);

impl Finisher {
    pub fn start(policy: SegmentPolicy) -> Result<Finisher, TachError> {
        let (jobs, queue) = mpsc::channel::<FinishedSegment>();
        let failed = Arc::new(OnceLock::new());
        let flag = failed.clone();
        let thread = std::thread::Builder::new()
            .name("tach-segments".into())
            .spawn(move || finisher_loop(policy, queue, &flag))
            .map_err(|e| TachError::Usage(format!("cannot start the segment thread: {e}")))?;
        Ok(Finisher {
            jobs: Some(jobs),
            thread: Some(thread),
            failed,
        })
    }

    /// Why a segment could not be finished, once one could not (the recording stops).
    pub fn failure(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }

    /// Hands over a segment (never blocks).
    pub fn send(&self, segment: FinishedSegment) {
        if let Some(j) = &self.jobs {
            if let Err(mpsc::SendError(segment)) = j.send(segment) {
                // The thread is gone (it panicked): finish here rather than lose it.
                let _ = segment.writer.finish();
            }
        }
    }

    /// Finishes what is queued, waits for the hooks, and returns the totals.
    pub fn close(mut self) -> FinisherTotals {
        self.jobs = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(totals)) => totals,
            _ => FinisherTotals {
                error: Some("the segment thread failed".into()),
                ..FinisherTotals::default()
            },
        }
    }
}

/// A finished segment the retention knows of.
struct Kept {
    path: PathBuf,
    bytes: u64,
    ended: SystemTime,
}

fn finisher_loop(
    policy: SegmentPolicy,
    queue: mpsc::Receiver<FinishedSegment>,
    failed: &OnceLock<String>,
) -> FinisherTotals {
    let mut totals = FinisherTotals::default();
    let mut kept: VecDeque<Kept> = VecDeque::new();
    let mut hooks: Vec<(Child, PathBuf)> = Vec::new();
    loop {
        match queue.recv_timeout(REAP_EVERY) {
            Ok(segment) => {
                let path = segment.path.clone();
                match segment.writer.finish() {
                    Ok(summary) => {
                        totals.segments += 1;
                        totals.samples += summary.samples;
                        totals.bytes += summary.file_size;
                        kept.push_back(Kept {
                            path: path.clone(),
                            bytes: summary.file_size,
                            ended: SystemTime::now(),
                        });
                        if let Some(cmd) = &policy.on_segment {
                            match spawn_hook(cmd, &path) {
                                Ok(child) => hooks.push((child, path)),
                                Err(e) => eprintln!(
                                    "tach: --on-segment: cannot run `{cmd}` for {}: {e}",
                                    path.display()
                                ),
                            }
                        }
                    }
                    Err(e) => {
                        let journal = discard_unfinished(&path);
                        match &journal {
                            Some(j) => eprintln!(
                                "tach: error: segment {} could not be finished: {e}; its \
                                 journal is kept: `tach recover {} -o ELSEWHERE.tach` \
                                 rebuilds it",
                                path.display(),
                                j.display()
                            ),
                            None => eprintln!(
                                "tach: error: segment {} could not be finished: {e}; it \
                                 held nothing a journal kept, and is removed",
                                path.display()
                            ),
                        }
                        let why = format!(
                            "segment {} could not be finished: {e}; no segment was deleted \
                             after it",
                            path.display()
                        );
                        let _ = failed.set(why.clone());
                        totals.error.get_or_insert(why);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // Also between segments: `--keep` by age is kept to within REAP_EVERY. Not after
        // a failure: the finished segments may be all that is left of the recording.
        if totals.error.is_none() {
            totals.deleted += retain(&policy, &mut kept, SystemTime::now());
        }
        reap(&policy, &mut hooks, false);
    }
    reap(&policy, &mut hooks, true);
    totals
}

/// Journals shorter than this hold no sample (a prelude and the settings at most).
const EMPTY_JOURNAL: u64 = 64;

/// After a segment could not be finished: removes its incomplete file (a TACH file is
/// valid only once finished, so none is left that `tach verify` refuses; `tach
/// recover` writes it again from the journal) and a journal that holds nothing.
/// Returns the journal kept, if any.
fn discard_unfinished(path: &Path) -> Option<PathBuf> {
    let _ = std::fs::remove_file(path);
    let journal = crate::tach::journal::journal_path(path);
    match std::fs::metadata(&journal) {
        Ok(m) if m.len() >= EMPTY_JOURNAL => Some(journal),
        Ok(_) => {
            let _ = std::fs::remove_file(&journal);
            None
        }
        Err(_) => None,
    }
}

/// `sh -c 'CMD "$1"' tach PATH`, with `TACH_SEGMENT=PATH`: the path is the command's
/// last argument, whatever CMD's own words are.
fn spawn_hook(cmd: &str, path: &Path) -> std::io::Result<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} \"$1\""))
        .arg("tach-on-segment")
        .arg(path)
        .env("TACH_SEGMENT", path)
        .stdin(std::process::Stdio::null())
        .spawn()
}

/// Reports the hooks that ended (all of them, waiting, with `wait`) and forgets them.
fn reap(policy: &SegmentPolicy, hooks: &mut Vec<(Child, PathBuf)>, wait: bool) {
    let cmd = policy.on_segment.as_deref().unwrap_or_default();
    hooks.retain_mut(|(child, path)| {
        let status = if wait {
            child.wait().map(Some)
        } else {
            child.try_wait()
        };
        match status {
            Ok(None) => true,
            Ok(Some(s)) if s.success() => false,
            Ok(Some(s)) => {
                eprintln!(
                    "tach: --on-segment: `{cmd}` failed for {} ({s})",
                    path.display()
                );
                false
            }
            Err(e) => {
                eprintln!("tach: --on-segment: `{cmd}` for {}: {e}", path.display());
                false
            }
        }
    });
}

/// Deletes the oldest finished segments past the policy's age or size; how many.
fn retain(policy: &SegmentPolicy, kept: &mut VecDeque<Kept>, now: SystemTime) -> u64 {
    let mut deleted = 0;
    let mut total: u64 = kept.iter().map(|k| k.bytes).sum();
    while let Some(oldest) = kept.front() {
        let too_old = policy.keep_age.is_some_and(|age| {
            now.duration_since(oldest.ended)
                .is_ok_and(|since| since > age)
        });
        let too_big = policy.keep_bytes.is_some_and(|b| total > b);
        if !(too_old || too_big) {
            break;
        }
        let oldest = kept.pop_front().expect("front was Some");
        total -= oldest.bytes;
        match std::fs::remove_file(&oldest.path) {
            Ok(()) => deleted += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("tach: --keep: cannot delete {}: {e}", oldest.path.display()),
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_as_durations_and_sizes() {
        let p = |s: &str| s.parse::<Limit>();
        assert_eq!(p("60s"), Ok(Limit::Age(Duration::from_secs(60))));
        assert_eq!(p("24h"), Ok(Limit::Age(Duration::from_secs(86400))));
        assert_eq!(p("5m"), Ok(Limit::Age(Duration::from_secs(300))));
        assert_eq!(p("500ms"), Ok(Limit::Age(Duration::from_millis(500))));
        assert_eq!(p("100MB"), Ok(Limit::Bytes(100_000_000)));
        assert_eq!(p("10GB"), Ok(Limit::Bytes(10_000_000_000)));
        assert_eq!(p("1GiB"), Ok(Limit::Bytes(1 << 30)));
        assert_eq!(p("0"), Err(LimitError::Zero("0".into())));
        assert_eq!(p("60"), Err(LimitError::Syntax("60".into())));
        assert!(p("99999999999999999999999d").is_err());
        assert_eq!(p("0s"), Err(LimitError::Zero("0s".into())));
        assert_eq!(
            p("ten").unwrap_err().to_string(),
            "\"ten\" is not a duration or a size: write a number and a unit (60s, 5m, 24h, \
             7d; 100MB, 10GB)"
        );
        for text in ["24h", "90s", "1500ms", "100MB", "1GiB", "10GB", "1234B"] {
            assert_eq!(p(text).unwrap().to_string(), text);
        }
        assert_eq!(
            smallest(&[
                Limit::Age(Duration::from_secs(9)),
                Limit::Bytes(5),
                Limit::Age(Duration::from_secs(3))
            ]),
            (Some(Duration::from_secs(3)), Some(5))
        );
    }

    #[test]
    fn segment_names_sort_by_time() {
        let at = |s: u64, ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        // 2026-11-28T14:05:00.123Z
        let name = segment_name(at(1_795_874_700, 123), 42, None);
        assert_eq!(name, "tach-20261128T140500.123Z-000042.tach");
        assert_eq!(
            segment_name(at(1_795_874_700, 123), 0, Some(4242)),
            "tach-20261128T140500.123Z-000000_4242.tach"
        );
        let times = [
            (at(1_795_874_700, 999), 9),
            (at(1_795_874_701, 0), 10),
            (at(1_795_874_701, 0), 11),
            (at(1_795_874_760, 5), 12),
            (at(1_830_000_000, 0), 13),
        ];
        let names: Vec<String> = times
            .iter()
            .map(|&(t, seq)| segment_name(t, seq, None))
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    fn kept_in(dir: &Path, ages_s: &[u64], bytes: u64, now: SystemTime) -> VecDeque<Kept> {
        ages_s
            .iter()
            .enumerate()
            .map(|(i, &age)| {
                let path = dir.join(format!("s{i}.tach"));
                std::fs::write(&path, vec![0u8; bytes as usize]).unwrap();
                Kept {
                    path,
                    bytes,
                    ended: now - Duration::from_secs(age),
                }
            })
            .collect()
    }

    #[test]
    fn retention_deletes_the_oldest_by_age_and_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let mut policy = SegmentPolicy {
            max_age: Some(Duration::from_secs(10)),
            max_bytes: None,
            keep_age: Some(Duration::from_secs(25)),
            keep_bytes: None,
            on_segment: None,
            pid_suffix: None,
        };
        let mut kept = kept_in(dir.path(), &[40, 30, 20, 10, 0], 10, now);
        assert_eq!(retain(&policy, &mut kept, now), 2);
        assert!(!dir.path().join("s0.tach").exists());
        assert!(!dir.path().join("s1.tach").exists());
        assert!(dir.path().join("s2.tach").exists());
        assert_eq!(kept.len(), 3);

        policy.keep_age = None;
        policy.keep_bytes = Some(25);
        assert_eq!(retain(&policy, &mut kept, now), 1);
        assert!(!dir.path().join("s2.tach").exists());
        assert!(dir.path().join("s3.tach").exists() && dir.path().join("s4.tach").exists());
        assert_eq!(retain(&policy, &mut kept, now), 0);
    }

    #[test]
    fn a_file_or_unwritable_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("app.tach");
        std::fs::write(&file, b"x").unwrap();
        let e = prepare_dir(&file).unwrap_err().to_string();
        assert!(e.contains("is a file") && e.contains("-o DIR"), "{e}");
        let fresh = dir.path().join("a/b");
        prepare_dir(&fresh).unwrap();
        assert!(fresh.is_dir());
    }
}
