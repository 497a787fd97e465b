//! Line heatmap: one self-contained HTML file (no network, no external script) with
//! the sampled source files ranked by samples, each file's source with every line
//! coloured by its self or inclusive samples and both counts in the margin, a per-line
//! opcode breakdown where the recording has opcodes, each function's callers and
//! callees as links, and a search box.
//!
//! The counts come from [`aggregate`] (their rules are documented there); the source
//! is read from disk now, with `--source-root OLD=NEW` mapping recorded paths
//! ([`source`]). A missing, unreadable or changed source still gives the file's line
//! numbers and counts, and the page says which it is.
//!
//! Size budget: only files with samples are embedded, and of their source only the
//! lines within [`source::CONTEXT`] of a sampled line or of a function's `def`; the
//! rest is folded. The data is one JSON document inside the page, rendered by the
//! page's own script one file at a time.

pub mod aggregate;
pub mod source;

// CPython 3.15's opcode names live in the query module; a build without it (no
// polars) compiles the same file here.
#[cfg(feature = "query")]
use crate::query::opnames;
#[cfg(not(feature = "query"))]
#[path = "../../query/opnames.rs"]
mod opnames;

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use super::exporter::{write_error, ExportInput, Exporter, Result};
use aggregate::{Counts, Heat};
use source::SourceStatus;

pub struct Heatmap;

const TEMPLATE: &str = include_str!("template.html");

impl Exporter for Heatmap {
    fn name(&self) -> &'static str {
        "heatmap"
    }
    fn description(&self) -> &'static str {
        "line heatmap: one self-contained HTML page (source read now; see --source-root)"
    }
    fn options(&self) -> &'static [super::exporter::FormatOption] {
        &[super::exporter::FormatOption {
            name: "source-root",
            value_name: Some("OLD=NEW"),
            repeatable: true,
            help: "read sources recorded under OLD from NEW instead (repeatable)",
            apply: |options, value| match value.split_once('=') {
                Some((old, new)) if !old.is_empty() && !new.is_empty() => {
                    options.source_roots.push((old.into(), new.into()));
                    Ok(())
                }
                _ => Err(format!("'{value}': expected OLD=NEW (two non-empty paths)")),
            },
        }]
    }
    fn extension(&self) -> &'static str {
        ".heatmap.html"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let heat = aggregate::build(input)?;
        let doc = document(input, &heat);
        let json = serde_json::to_string(&doc).expect("heatmap JSON serializes");
        let page = page(&input.title(), &json);
        out.write_all(page.as_bytes())
            .map_err(write_error("output"))
    }
}

#[derive(Serialize)]
pub struct Document {
    pub title: String,
    pub total: u64,
    pub interval_us: u64,
    pub opcodes: bool,
    pub opnames: BTreeMap<u8, String>,
    pub files: Vec<FileDoc>,
    pub funcs: Vec<FuncDoc>,
}

#[derive(Serialize)]
pub struct FileDoc {
    pub path: String,
    pub local: String,
    pub status: &'static str,
    /// Why the source is not shown, or a warning about a shown one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(rename = "self")]
    pub self_samples: u64,
    pub total: u64,
    /// Lines in the source read, when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nlines: Option<usize>,
    /// `[line, self, total]` per sampled line, by line.
    pub lines: Vec<[i64; 3]>,
    /// `[line, opcode, samples]`, by line then samples (most first).
    pub ops: Vec<[i64; 3]>,
    /// `[first line, [text...]]` chunks of embedded source.
    pub src: Vec<(i32, Vec<String>)>,
    /// Ids of this file's functions, most samples first.
    pub funcs: Vec<u32>,
}

#[derive(Serialize)]
pub struct FuncDoc {
    pub name: String,
    pub file: u32,
    pub line: i32,
    #[serde(rename = "self")]
    pub self_samples: u64,
    pub total: u64,
    pub callers: Vec<[u64; 2]>,
    pub callees: Vec<[u64; 2]>,
}

fn rank(c: &Counts) -> (std::cmp::Reverse<u64>, std::cmp::Reverse<u64>) {
    (
        std::cmp::Reverse(c.total),
        std::cmp::Reverse(c.self_samples),
    )
}

/// The page's data: files ranked by inclusive samples, functions likewise.
pub fn document(input: &ExportInput<'_>, heat: &Heat) -> Document {
    let roots = &input.options.source_roots;
    let mut file_order: Vec<usize> = (0..heat.files.len()).collect();
    file_order.sort_by(|&a, &b| {
        let (fa, fb) = (&heat.files[a], &heat.files[b]);
        (rank(&fa.counts), &fa.path).cmp(&(rank(&fb.counts), &fb.path))
    });
    let mut file_new = vec![0u32; heat.files.len()];
    for (new, &old) in file_order.iter().enumerate() {
        file_new[old] = new as u32;
    }
    let mut func_order: Vec<usize> = (0..heat.funcs.len()).collect();
    func_order.sort_by(|&a, &b| {
        let (fa, fb) = (&heat.funcs[a], &heat.funcs[b]);
        (rank(&fa.counts), file_new[fa.file as usize], &fa.name).cmp(&(
            rank(&fb.counts),
            file_new[fb.file as usize],
            &fb.name,
        ))
    });
    let mut func_new = vec![0u32; heat.funcs.len()];
    for (new, &old) in func_order.iter().enumerate() {
        func_new[old] = new as u32;
    }
    let mut funcs_of_file: Vec<Vec<usize>> = vec![Vec::new(); heat.files.len()];
    for &old in &func_order {
        funcs_of_file[heat.funcs[old].file as usize].push(old);
    }

    let mut def_line: Vec<Option<i32>> = vec![None; heat.funcs.len()];
    let mut files = Vec::with_capacity(heat.files.len());
    let mut opnames = BTreeMap::new();
    for &old in &file_order {
        let fh = &heat.files[old];
        let local = source::map_path(&fh.path, roots);
        let mut status = SourceStatus::Ok;
        let mut text = Vec::new();
        match source::read(&local) {
            Ok(lines) => text = lines,
            Err(s) => status = s,
        }
        let mut src = Vec::new();
        let mut warning = None;
        if status == SourceStatus::Ok {
            let n = text.len();
            let mut missing_defs = Vec::new();
            for &func in &funcs_of_file[old] {
                let f = &heat.funcs[func];
                def_line[func] = source::find_def(&text, &f.name, f.first_line);
                let named = !f.name.starts_with('<') && !f.name.ends_with('>');
                if def_line[func].is_none() && named && f.first_line >= 1 {
                    missing_defs.push(format!("{} (line {})", f.name, f.first_line));
                }
            }
            if let Some((&last, _)) = fh.lines.range(1..).next_back() {
                if last as usize > n {
                    status = SourceStatus::Changed(format!(
                        "the profile has samples on line {last}, the file has {n} lines"
                    ));
                }
            }
            // A heuristic, so only a warning: the source is still shown.
            if status == SourceStatus::Ok && !missing_defs.is_empty() {
                missing_defs.truncate(3);
                warning = Some(format!(
                    "the source may have changed: no def or class line found for {}",
                    missing_defs.join(", ")
                ));
            }
            if status == SourceStatus::Ok {
                let anchors = fh
                    .lines
                    .keys()
                    .copied()
                    .chain(funcs_of_file[old].iter().filter_map(|&f| def_line[f]));
                for (a, b) in source::keep_ranges(anchors, n) {
                    src.push((a, text[a as usize - 1..b as usize].to_vec()));
                }
            }
        }
        let mut ops: Vec<[i64; 3]> = fh
            .opcodes
            .iter()
            .map(|(&(line, op), &c)| [line as i64, op as i64, c as i64])
            .collect();
        ops.sort_by_key(|o| (o[0], std::cmp::Reverse(o[2]), o[1]));
        for o in &ops {
            opnames
                .entry(o[1] as u8)
                .or_insert_with(|| opnames::opname(o[1] as u8));
        }
        files.push(FileDoc {
            path: fh.path.clone(),
            local: local.to_string_lossy().into_owned(),
            status: status.name(),
            note: status.note().map(str::to_string).or(warning),
            self_samples: fh.counts.self_samples,
            total: fh.counts.total,
            nlines: (!text.is_empty() || status == SourceStatus::Ok).then_some(text.len()),
            lines: fh
                .lines
                .iter()
                .map(|(&l, c)| [l as i64, c.self_samples as i64, c.total as i64])
                .collect(),
            ops,
            src,
            funcs: funcs_of_file[old].iter().map(|&f| func_new[f]).collect(),
        });
    }
    let edges = |m: &BTreeMap<u32, u64>| {
        let mut v: Vec<[u64; 2]> = m
            .iter()
            .map(|(&f, &c)| [func_new[f as usize] as u64, c])
            .collect();
        v.sort_by_key(|e| (std::cmp::Reverse(e[1]), e[0]));
        v
    };
    let funcs = func_order
        .iter()
        .map(|&old| {
            let f = &heat.funcs[old];
            FuncDoc {
                name: f.name.clone(),
                file: file_new[f.file as usize],
                line: def_line[old].unwrap_or(f.first_line),
                self_samples: f.counts.self_samples,
                total: f.counts.total,
                callers: edges(&f.callers),
                callees: edges(&f.callees),
            }
        })
        .collect();
    Document {
        title: input.title(),
        total: heat.total_samples,
        interval_us: input.file.header().sample_interval_us,
        opcodes: heat.has_opcodes,
        opnames,
        files,
        funcs,
    }
}

/// JSON made safe inside `<script>`: no `<`, `>` or `&` (all inside strings, so
/// escaping them as `\u00XX` keeps the value), and no U+2028/2029.
pub fn script_safe_json(json: &str) -> String {
    let mut s = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => s.push_str("\\u003c"),
            '>' => s.push_str("\\u003e"),
            '&' => s.push_str("\\u0026"),
            '\u{2028}' => s.push_str("\\u2028"),
            '\u{2029}' => s.push_str("\\u2029"),
            c => s.push(c),
        }
    }
    s
}

/// HTML text escaping for the title.
pub fn html_escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '&' => s.push_str("&amp;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            c => s.push(c),
        }
    }
    s
}

/// The template with the title and the data filled in.
pub fn page(title: &str, json: &str) -> String {
    let (head, rest) = TEMPLATE
        .split_once("{{TITLE}}")
        .expect("template has {{TITLE}}");
    let (mid, tail) = rest.split_once("{{DATA}}").expect("template has {{DATA}}");
    let mut s = String::with_capacity(TEMPLATE.len() + json.len() + json.len() / 16);
    s.push_str(head);
    s.push_str(&html_escape(title));
    s.push_str(mid);
    s.push_str(&script_safe_json(json));
    s.push_str(tail);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_cannot_close_the_script() {
        let v = serde_json::json!({"s": "</script><!-- & \u{2028}"});
        let safe = script_safe_json(&serde_json::to_string(&v).unwrap());
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn page_fills_title_and_data_once() {
        let p = page("a<b>", "{\"x\":\"</script>\"}");
        assert!(p.contains("a&lt;b&gt;"));
        assert!(p.contains("\\u003c/script\\u003e"));
        assert!(!p.contains("{{DATA}}") && !p.contains("{{TITLE}}"));
    }
}
