//! Source text for the heatmap: where a recorded path is on this machine
//! (`--source-root OLD=NEW`), reading it, checking it still fits the profile, and which
//! lines to embed (the rest is folded).

use std::path::PathBuf;

/// Largest source file read; bigger ones are reported as unreadable.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;
/// Lines embedded on each side of a sampled line (and of a function's `def`).
pub const CONTEXT: i32 = 8;

/// How a file's source was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceStatus {
    Ok,
    Missing,
    Unreadable(String),
    /// Read, but it does not fit the profile (the reason says why).
    Changed(String),
}

impl SourceStatus {
    pub fn name(&self) -> &'static str {
        match self {
            SourceStatus::Ok => "ok",
            SourceStatus::Missing => "missing",
            SourceStatus::Unreadable(_) => "unreadable",
            SourceStatus::Changed(_) => "changed",
        }
    }
    pub fn note(&self) -> Option<&str> {
        match self {
            SourceStatus::Unreadable(s) | SourceStatus::Changed(s) => Some(s),
            _ => None,
        }
    }
}

/// The local path of a recorded one: the longest `OLD` that is a whole-component
/// prefix of `recorded` is replaced by its `NEW`.
pub fn map_path(recorded: &str, roots: &[(String, String)]) -> PathBuf {
    let mut best: Option<&(String, String)> = None;
    for r in roots {
        let old = r.0.trim_end_matches('/');
        let matches = recorded == old
            || (recorded.starts_with(old) && recorded[old.len()..].starts_with('/'))
            || old.is_empty() && recorded.starts_with('/');
        if matches && best.is_none_or(|b| b.0.trim_end_matches('/').len() < old.len()) {
            best = Some(r);
        }
    }
    match best {
        Some((old, new)) => {
            let rest = &recorded[old.trim_end_matches('/').len()..];
            PathBuf::from(format!("{}{rest}", new.trim_end_matches('/')))
        }
        None => PathBuf::from(recorded),
    }
}

/// Reads a source file: its lines (lossy UTF-8, as CPython decodes with
/// `errors="replace"`), or why not.
pub fn read(path: &std::path::Path) -> Result<Vec<String>, SourceStatus> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SourceStatus::Missing),
        Err(e) => return Err(SourceStatus::Unreadable(e.to_string())),
    };
    if !meta.is_file() {
        return Err(SourceStatus::Unreadable("not a regular file".into()));
    }
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(SourceStatus::Unreadable(format!(
            "{} bytes, more than the {MAX_SOURCE_BYTES}-byte limit",
            meta.len()
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| SourceStatus::Unreadable(e.to_string()))?;
    Ok(split_lines(&String::from_utf8_lossy(&bytes)))
}

/// Lines as Python's tokenizer numbers them: ends are `\n`, `\r\n` and `\r` only (not
/// `str.splitlines()`, which also splits at form feeds and other separators and would
/// shift every later line).
pub fn split_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\n', '\r']) {
            Some(i) => {
                lines.push(rest[..i].to_string());
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
            }
            None => {
                lines.push(rest.to_string());
                break;
            }
        }
    }
    lines
}

/// The line (1-based) of `def NAME` / `async def NAME` / `class NAME` for a function
/// named `qualname` (its last dotted part), searching up from `from_line`, or down
/// from it past decorators when `from_line` is one (a decorated function's first line
/// is its first decorator's); `None` for names that have no such line (`<module>`,
/// `<lambda>`, ...) or when not found.
pub fn find_def(lines: &[String], qualname: &str, from_line: i32) -> Option<i32> {
    let name = qualname.rsplit('.').next().unwrap_or(qualname);
    if name.is_empty() || name.starts_with('<') {
        return None;
    }
    let is_def = |i: usize| {
        let t = lines[i].trim_start();
        let t = t.strip_prefix("async ").map(str::trim_start).unwrap_or(t);
        let Some(rest) = t.strip_prefix("def ").or_else(|| t.strip_prefix("class ")) else {
            return false;
        };
        rest.trim_start()
            .strip_prefix(name)
            .is_some_and(|after| after.starts_with(['(', ':', ' ', '[']))
    };
    let top = (from_line.max(1) as usize).min(lines.len());
    if top >= 1 && lines[top - 1].trim_start().starts_with('@') {
        if let Some(i) = (top - 1..lines.len().min(top + 30)).find(|&i| is_def(i)) {
            return Some(i as i32 + 1);
        }
    }
    (0..top).rev().find(|&i| is_def(i)).map(|i| i as i32 + 1)
}

/// Merged 1-based inclusive ranges of lines to embed: CONTEXT lines around each of
/// `anchors`, clipped to the file.
pub fn keep_ranges(anchors: impl IntoIterator<Item = i32>, n_lines: usize) -> Vec<(i32, i32)> {
    let n = n_lines as i32;
    let mut spans: Vec<(i32, i32)> = anchors
        .into_iter()
        .filter(|&l| l >= 1 && l <= n)
        .map(|l| ((l - CONTEXT).max(1), (l + CONTEXT).min(n)))
        .collect();
    spans.sort_unstable();
    let mut out: Vec<(i32, i32)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            // Also join ranges separated by a gap too small to be worth folding.
            Some(last) if a <= last.1 + 3 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_longest_whole_component_prefix() {
        let roots = vec![
            ("/usr/lib".to_string(), "/x".to_string()),
            ("/usr/lib/python3.15/".to_string(), "/y/lib".to_string()),
        ];
        assert_eq!(
            map_path("/usr/lib/python3.15/os.py", &roots),
            PathBuf::from("/y/lib/os.py")
        );
        assert_eq!(
            map_path("/usr/lib/foo.py", &roots),
            PathBuf::from("/x/foo.py")
        );
        assert_eq!(
            map_path("/usr/libfoo/a.py", &roots),
            PathBuf::from("/usr/libfoo/a.py")
        );
        assert_eq!(map_path("rel/a.py", &roots), PathBuf::from("rel/a.py"));
    }

    #[test]
    fn splits_lines_like_the_tokenizer() {
        assert_eq!(
            split_lines("a\nb\r\nc\rd\x0ce\n"),
            vec!["a", "b", "c", "d\x0ce"]
        );
        assert_eq!(split_lines("a\n\n"), vec!["a", ""]);
        assert!(split_lines("").is_empty());
    }

    #[test]
    fn finds_defs_upwards() {
        let src = split_lines(
            "class A:\n    async def run(self):\n        x = 1\n\ndef runner(): pass\n",
        );
        assert_eq!(find_def(&src, "A.run", 3), Some(2));
        assert_eq!(find_def(&src, "A", 3), Some(1));
        assert_eq!(find_def(&src, "run", 1), None);
        assert_eq!(find_def(&src, "<module>", 3), None);
        assert_eq!(find_def(&src, "runner", 5), Some(5));
        let src = split_lines("x = 1\n@property\n@cache(\n  3)\ndef value(self):\n    pass\n");
        assert_eq!(find_def(&src, "C.value", 2), Some(5));
        assert_eq!(find_def(&src, "C.value", 6), Some(5));
    }

    #[test]
    fn keeps_context_and_merges() {
        assert_eq!(keep_ranges([20, 30, 100], 105), vec![(12, 38), (92, 105)]);
        assert_eq!(keep_ranges([0, 200], 50), vec![]);
    }
}
