//! `tach export --heatmap`: the numbers the page shows are `tach query`'s, and on a real
//! recording with its sources present they are CPython 3.15's own heatmap's.
//!
//! The page's data is the JSON inside `<script id="heatmap-data">`; the browser check
//! (tests/browser/heatmap_check.mjs) shows that the page renders exactly that data.

// Every check compares against `tach query` or CPython's replay, both behind the `query`
// feature's build; without it only the helpers remain.
#![cfg_attr(not(feature = "query"), allow(dead_code, unused_imports))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::tach;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The recording with real sources (tests/data/heatmap/record.sh made it in the chroot).
pub fn workload() -> PathBuf {
    root().join("tests/data/heatmap/stdlib_workload.bin")
}

/// The repository path the workload was recorded in (its script's recorded prefix).
pub const RECORDED_REPO: &str = "/work/wt/heatmap";

/// Exports the heatmap of `bin` and returns the embedded data.
pub fn heatmap_data(bin: &Path, extra: &[&str]) -> Value {
    let out = tach()
        .args(["export", "--heatmap", "-o", "-"])
        .args(extra)
        .arg(bin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).unwrap();
    let start = page
        .find("<script id=\"heatmap-data\" type=\"application/json\">")
        .expect("data script")
        + "<script id=\"heatmap-data\" type=\"application/json\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

fn u(v: &Value) -> i64 {
    v.as_i64().unwrap()
}

#[cfg(feature = "query")]
mod against_query {
    use super::*;

    /// Source frames (the heatmap's rule), as SQL over a table with `filename` and `line`.
    const SOURCE: &str = "filename <> '' and filename not like '<%' and filename not like '[%' \
         and filename <> '~' and filename <> '...' and filename <> '.' \
         and not (filename = '__init__' and line = 0)";

    fn query(sql: &str, bin: &Path) -> Vec<BTreeMap<String, Value>> {
        let out = tach()
            .args(["query", "--format", "json", sql])
            .arg(bin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Rows as a map from the key columns to the `n` column.
    fn keyed(rows: &[BTreeMap<String, Value>], keys: &[&str]) -> BTreeMap<String, i64> {
        rows.iter()
            .map(|r| {
                let k: Vec<String> = keys.iter().map(|k| r[*k].to_string()).collect();
                (k.join("|"), u(&r["n"]))
            })
            .collect()
    }

    /// The stacks without the profiler's own frames, each frame with its line (0 when
    /// missing), and each stack's samples.
    fn with_stacks(select: &str) -> String {
        format!(
            "with k as (select file, stack_id, position, filename, funcname, opcode, \
                 coalesce(lineno, 0) as line from stacks \
                 where filename not like '%_sync_coordinator.py'), \
             c as (select file, stack_id, sum(samples) as samples from stack_counts \
                 group by file, stack_id) {select}"
        )
    }

    fn check(bin: &Path) {
        let name = bin.file_name().unwrap().to_string_lossy().into_owned();
        let d = heatmap_data(bin, &[]);
        let files = d["files"].as_array().unwrap();
        let funcs = d["funcs"].as_array().unwrap();

        // Per line: self (innermost kept frame) and total (once per sample).
        let leaf = query(
            &with_stacks(&format!(
                "select k.filename, k.line, sum(c.samples) as n from k \
                 join (select file, stack_id, min(position) as p from k group by file, stack_id) m \
                   on k.file = m.file and k.stack_id = m.stack_id and k.position = m.p \
                 join c on c.file = k.file and c.stack_id = k.stack_id \
                 where {SOURCE} group by k.filename, k.line"
            )),
            bin,
        );
        let total = query(
            &with_stacks(&format!(
                "select d.filename, d.line, sum(c.samples) as n from \
                 (select distinct file, stack_id, filename, line from k where {SOURCE}) d \
                 join c on c.file = d.file and c.stack_id = d.stack_id group by d.filename, d.line"
            )),
            bin,
        );
        let ops = query(
            &with_stacks(&format!(
                "select k.filename, k.line, k.opcode, sum(c.samples) as n from k \
                 join c on c.file = k.file and c.stack_id = k.stack_id \
                 where opcode is not null and {SOURCE} group by k.filename, k.line, k.opcode"
            )),
            bin,
        );
        let file_total = query(
            &with_stacks(&format!(
                "select d.filename, sum(c.samples) as n from \
                 (select distinct file, stack_id, filename from k where {SOURCE}) d \
                 join c on c.file = d.file and c.stack_id = d.stack_id group by d.filename"
            )),
            bin,
        );
        let func_total = query(
            &with_stacks(&format!(
                "select d.filename, d.funcname, sum(c.samples) as n from \
                 (select distinct file, stack_id, filename, funcname from k where {SOURCE}) d \
                 join c on c.file = d.file and c.stack_id = d.stack_id \
                 group by d.filename, d.funcname"
            )),
            bin,
        );
        let samples = query(
            &with_stacks("select sum(c.samples) as n from c join (select distinct file, stack_id from k) s on s.file = c.file and s.stack_id = c.stack_id"),
            bin,
        );

        let q_self = keyed(&leaf, &["filename", "line"]);
        let q_total = keyed(&total, &["filename", "line"]);
        let q_ops = keyed(&ops, &["filename", "line", "opcode"]);
        let q_file = keyed(&file_total, &["filename"]);
        let q_func = keyed(&func_total, &["filename", "funcname"]);

        let mut h_self: BTreeMap<String, i64> = BTreeMap::new();
        let (mut h_total, mut h_ops, mut h_file, mut h_func) = (
            h_self.clone(),
            h_self.clone(),
            h_self.clone(),
            h_self.clone(),
        );
        let mut file_self_sum = 0;
        for f in files {
            let p = Value::String(f["path"].as_str().unwrap().into()).to_string();
            h_file.insert(p.clone(), u(&f["total"]));
            let mut self_sum = 0;
            for l in f["lines"].as_array().unwrap() {
                let key = format!("{p}|{}", u(&l[0]));
                if u(&l[1]) > 0 {
                    h_self.insert(key.clone(), u(&l[1]));
                }
                self_sum += u(&l[1]);
                h_total.insert(key, u(&l[2]));
            }
            assert_eq!(self_sum, u(&f["self"]), "{name}: {p} self");
            file_self_sum += self_sum;
            for o in f["ops"].as_array().unwrap() {
                h_ops.insert(format!("{p}|{}|{}", u(&o[0]), u(&o[1])), u(&o[2]));
            }
        }
        for fd in funcs {
            let p = Value::String(
                files[u(&fd["file"]) as usize]["path"]
                    .as_str()
                    .unwrap()
                    .into(),
            );
            h_func.insert(format!("{p}|{}", fd["name"]), u(&fd["total"]));
        }
        assert_eq!(h_self, q_self, "{name}: self per line");
        assert_eq!(h_total, q_total, "{name}: total per line");
        assert_eq!(h_ops, q_ops, "{name}: opcodes per line");
        assert_eq!(h_file, q_file, "{name}: total per file");
        assert_eq!(h_func, q_func, "{name}: total per function");
        assert_eq!(u(&d["total"]), u(&samples[0]["n"]), "{name}: samples");
        assert!(file_self_sum <= u(&d["total"]));
        assert!(!q_total.is_empty(), "{name}: nothing compared");
    }

    #[test]
    fn heatmap_counts_equal_tach_query() {
        let golden = root().join("golden/cpython-3.15.2");
        for name in [
            "stdlib_tests_large.bin",
            "cpu_recursive_opcodes.bin",
            "deep_recursion.bin",
            "threads_mixed.bin",
            "synthetic_deep_stacks.bin",
            "synthetic_huge_strings.bin",
        ] {
            check(&golden.join(name));
        }
        check(&workload());
    }
}

/// The text between `start` and the next `end` after it.
fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let i = s.find(start)? + start.len();
    Some(&s[i..i + s[i..].find(end)?])
}

fn unescape_html(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn digits(s: &str) -> i64 {
    let d: String = s.chars().filter(char::is_ascii_digit).collect();
    if d.is_empty() {
        0
    } else {
        d.parse().unwrap()
    }
}

/// Per line of one CPython heatmap page: (self, cumulative) and opcode -> samples.
type CpythonLines = BTreeMap<i64, ((i64, i64), BTreeMap<i64, i64>)>;

fn parse_cpython_page(page: &str) -> CpythonLines {
    let mut out = BTreeMap::new();
    for chunk in page.split("<div class=\"code-line\"").skip(1) {
        let line = digits(between(chunk, "id=\"line-", "\"").unwrap());
        let s = digits(between(chunk, "<div class=\"line-samples-self\">", "<").unwrap());
        let t = digits(between(chunk, "<div class=\"line-samples-cumulative\">", "<").unwrap());
        let mut ops = BTreeMap::new();
        if let Some(b) = between(chunk, "data-bytecode='", "'") {
            let v: Value = serde_json::from_str(&unescape_html(b)).unwrap();
            for i in v.as_array().unwrap() {
                ops.insert(u(&i["opcode"]), u(&i["samples"]));
            }
        }
        if t > 0 {
            out.insert(line, ((s, t), ops));
        }
    }
    out
}

/// CPython 3.15's own `replay --heatmap` and ours, both run in the chroot where the
/// recording's standard-library sources exist: for every file CPython could read, the
/// same self and cumulative count on every line and the same opcode counts.
#[test]
fn heatmap_counts_equal_cpython_heatmap() {
    let Some(tool) = crate::common::cpython_chroot() else {
        return;
    };
    let manifest = root();
    let tach_bin = Path::new(env!("CARGO_BIN_EXE_tach"));
    if !tach_bin.starts_with(manifest) {
        crate::common::skip(&format!(
            "heatmap: {} is outside the source tree, so the chroot cannot run it",
            tach_bin.display()
        ));
        return;
    }
    let dir = manifest.join("target/heatmap-cpython");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = workload();
    crate::common::cpython_replay(&tool, "--heatmap", &dir.join("cpython"), &bin, manifest);
    let ours_path = dir.join("ours.html");
    let status = Command::new(&tool)
        .args(["run", "--"])
        .arg(tach_bin)
        .args(["export", "--heatmap", "-o"])
        .arg(&ours_path)
        .arg("--source-root")
        .arg(format!("{RECORDED_REPO}={}", manifest.display()))
        .arg(&bin)
        .current_dir(manifest)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "tach export --heatmap in the chroot failed"
    );
    let page = std::fs::read_to_string(&ours_path).unwrap();
    let start = page.find("type=\"application/json\">").unwrap() + 24;
    let ours: Value =
        serde_json::from_str(&page[start..start + page[start..].find("</script>").unwrap()])
            .unwrap();

    // CPython's index: file_NNNN.html per recorded path.
    let index = std::fs::read_to_string(dir.join("cpython/index.html")).unwrap();
    let mut compared = 0;
    for item in index.split("<a href=\"").skip(1) {
        let Some((page_name, rest)) = item.split_once('"') else {
            continue;
        };
        if !page_name.starts_with("file_") {
            continue;
        }
        let path = unescape_html(between(rest, "title=\"", "\"").unwrap());
        let theirs_page = std::fs::read_to_string(dir.join("cpython").join(page_name)).unwrap();
        if theirs_page.contains("# Source file not available") {
            continue;
        }
        let theirs = parse_cpython_page(&theirs_page);
        let f = ours["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path}: in CPython's heatmap, not in ours"));
        assert_eq!(f["status"], "ok", "{path}");
        let mut mine: CpythonLines = BTreeMap::new();
        for l in f["lines"].as_array().unwrap() {
            mine.insert(u(&l[0]), ((u(&l[1]), u(&l[2])), BTreeMap::new()));
        }
        for o in f["ops"].as_array().unwrap() {
            mine.get_mut(&u(&o[0]))
                .unwrap()
                .1
                .insert(u(&o[1]), u(&o[2]));
        }
        // CPython shows only lines that exist in the source.
        let nlines = u(&f["nlines"]);
        mine.retain(|&l, _| l >= 1 && l <= nlines);
        assert_eq!(
            mine, theirs,
            "{path}: per-line counts differ from CPython's heatmap"
        );
        compared += 1;
    }
    assert!(
        compared >= 10,
        "only {compared} files compared with CPython's heatmap"
    );
}

/// The workload script's entry in the page's data, exported with its recorded
/// repository mapped to `repo`.
fn workload_file_entry(repo: &Path) -> Value {
    let data = heatmap_data(
        &workload(),
        &[
            "--source-root",
            &format!("{RECORDED_REPO}={}", repo.display()),
        ],
    );
    data["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("/stdlib_workload.py"))
        .expect("the workload script in the heatmap")
        .clone()
}

/// A source that no longer fits the profile still gives its line counts, and the page
/// says why: a file shorter than its sampled lines is "changed"; a file whose sampled
/// functions lost their `def` lines is shown with a warning that it may have changed.
#[test]
fn heatmap_says_when_a_source_changed() {
    let script = root().join("tests/data/heatmap/stdlib_workload.py");
    let text = std::fs::read_to_string(&script).unwrap();
    let place = |dir: &tempfile::TempDir, body: &str| {
        let to = dir.path().join("tests/data/heatmap");
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(to.join("stdlib_workload.py"), body).unwrap();
    };
    // As recorded: the source is shown and nothing is said.
    let same = tempfile::tempdir().unwrap();
    place(&same, &text);
    let ok = workload_file_entry(same.path());
    assert_eq!(ok["status"], "ok", "{ok}");
    assert!(ok["note"].is_null(), "{ok}");
    let lines = ok["lines"].clone();
    assert!(lines.as_array().unwrap().len() >= 5, "{ok}");

    // Cut to 10 lines: changed, no source, the same counts.
    let cut = tempfile::tempdir().unwrap();
    let ten: String = text.lines().take(10).map(|l| format!("{l}\n")).collect();
    place(&cut, &ten);
    let changed = workload_file_entry(cut.path());
    assert_eq!(changed["status"], "changed", "{changed}");
    let note = changed["note"].as_str().unwrap();
    assert!(note.contains("the file has 10 lines"), "{note}");
    assert_eq!(changed["lines"], lines);
    assert!(changed["src"].as_array().unwrap().is_empty(), "{changed}");

    // The functions renamed: shown, with a warning naming one of them.
    let renamed = tempfile::tempdir().unwrap();
    place(
        &renamed,
        &text
            .replace("def encode(", "def encode_renamed(")
            .replace("def wrap(", "def wrap_renamed("),
    );
    let warned = workload_file_entry(renamed.path());
    assert_eq!(warned["status"], "ok", "{warned}");
    let note = warned["note"].as_str().unwrap();
    assert!(
        note.starts_with("the source may have changed: no def or class line found for")
            && (note.contains("encode (line") || note.contains("wrap (line")),
        "{note}"
    );
    assert_eq!(warned["lines"], lines);
    assert!(!warned["src"].as_array().unwrap().is_empty(), "{warned}");
}
