//! The README, docs/ and benches/HISTORY.md say only what is so:
//!
//! - every `--flag` in a `tach SUBCOMMAND ...` command line (of a fenced code block or an
//!   inline code span) is one of that subcommand's, and every flag of a `python -m tach
//!   run ...` line is one of both `python -m tach run`'s and `tach record`'s (the same
//!   recording options);
//! - every relative link resolves: the file exists, and an `#anchor` is the GitHub slug
//!   of one of the target's headings;
//! - every CPython version named is one the recorder has a layout for, and the version
//!   the Python package is said to need is pyproject.toml's `requires-python`;
//! - no path of a build machine (`/work/`, `/root/`, `/home/`);
//! - docs/index.md links every page of docs/.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// What the other checks read besides `doc_files`: the measurement log.
fn checked_files() -> Vec<PathBuf> {
    let mut files = doc_files();
    files.push(repo().join("benches/HISTORY.md"));
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap().display().to_string()
}

/// The lines inside fenced code blocks, with their 1-based line numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut inside = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if inside {
            lines.push((n + 1, line));
        }
    }
    lines
}

/// Where a command's own words end: a pipe, a list operator, a redirection, a comment,
/// or `--` (what follows is the program's).
fn ends_command(word: &str) -> bool {
    matches!(word, "|" | "||" | "&&" | ";" | "--" | "&")
        || word.starts_with('#')
        || word.starts_with('>')
        || word.starts_with('<')
        || word.starts_with("2>")
}

/// The long flags (without a `=value`) among `words` up to the end of the command; a
/// placeholder in capitals (`--OPTION`) is none.
fn flags_of<'a>(words: &[&'a str]) -> Vec<&'a str> {
    words
        .iter()
        .take_while(|w| !ends_command(w))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .filter(|w| !w.bytes().any(|b| b.is_ascii_uppercase()))
        .map(|w| w.split('=').next().unwrap())
        .map(|w| w.trim_end_matches([',', ')', '`']))
        .collect()
}

/// Every `--flag` shown, by command (`record`, `top`, ..., or `python -m tach run`),
/// each with where it is shown.
fn shown_flags(subcommands: &BTreeSet<String>) -> BTreeMap<String, Vec<(String, String)>> {
    let mut shown: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for path in doc_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(repo()).unwrap().display().to_string();
        let spans = split_code(&text).spans;
        let fenced = code_lines(&text)
            .into_iter()
            .map(|(n, line)| (n, line.to_string()));
        for (line_no, line) in fenced.chain(spans) {
            let words: Vec<&str> = line.split_whitespace().collect();
            for i in 0..words.len() {
                let start = i == 0 || ends_command(words[i - 1]) || words[i - 1] == "$";
                if !start {
                    continue;
                }
                let (command, rest) = match &words[i..] {
                    ["tach", sub, rest @ ..] if subcommands.contains(*sub) => {
                        (sub.to_string(), rest)
                    }
                    [py, "-m", "tach", "run", rest @ ..] if py.starts_with("python") => {
                        // The program starts at its script or `-m MODULE`: what
                        // follows is its own.
                        let program = rest
                            .iter()
                            .position(|w| w.ends_with(".py") || *w == "-m")
                            .unwrap_or(rest.len());
                        ("python -m tach run".to_string(), &rest[..program])
                    }
                    _ => continue,
                };
                for flag in flags_of(rest) {
                    shown
                        .entry(command.clone())
                        .or_default()
                        .push((flag.to_string(), format!("{name}:{line_no}")));
                }
            }
        }
    }
    shown
}

/// The long flags a help text lists.
fn help_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.split(['=', '<'])
                .next()
                .unwrap()
                .trim_end_matches([',', '.', ')'])
                .to_string()
        })
        .collect()
}

fn tach_help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tach"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run tach");
    assert!(out.status.success(), "tach {args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands `tach --help` lists.
fn subcommands() -> BTreeSet<String> {
    let help = tach_help(&[]);
    let listed = help
        .split("Commands:")
        .nth(1)
        .expect("tach --help lists its commands");
    listed
        .lines()
        .skip(1) // the rest of the "Commands:" line
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help")
        .map(String::from)
        .collect()
}

#[test]
fn docs_show_only_flags_that_help_lists() {
    let subcommands = subcommands();
    assert!(
        subcommands.contains("record") && subcommands.contains("export"),
        "{subcommands:?}"
    );
    let shown = shown_flags(&subcommands);
    // The docs show command lines of most subcommands: a broken extraction finds none.
    assert!(
        shown.len() >= 5,
        "too few commands found in the docs: {shown:?}"
    );
    let python_run = PythonRun::help();
    let mut wrong = Vec::new();
    for (command, flags) in &shown {
        let known: Vec<(String, BTreeSet<String>)> = if command == "python -m tach run" {
            vec![
                ("python -m tach run --help".into(), help_flags(&python_run)),
                (
                    "tach record --help".into(),
                    help_flags(&tach_help(&["record"])),
                ),
            ]
        } else {
            vec![(
                format!("tach {command} --help"),
                help_flags(&tach_help(&[command])),
            )]
        };
        for (flag, at) in flags {
            for (source, set) in &known {
                // `python -m tach run --quiet` has no `tach record` counterpart (the
                // binary prints its summary line on standard error either way).
                if flag == "--quiet" && source.starts_with("tach record") {
                    continue;
                }
                if !set.contains(flag) {
                    wrong.push(format!("{at}: `{command} {flag}` is not in {source}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs show flags --help does not have:\n{}",
        wrong.join("\n")
    );
}

/// `python -m tach run --help`, from the same clap definition the Python package parses
/// with (`tach::python::run_args::PythonMain`).
struct PythonRun;

impl PythonRun {
    fn help() -> String {
        let mut cmd = tach::python::run_args::PythonMain::command();
        cmd.build();
        let run = cmd
            .find_subcommand_mut("run")
            .expect("python -m tach has run");
        run.render_long_help().to_string()
    }
}

#[test]
fn the_flag_extraction_reads_command_lines() {
    let words: Vec<&str> = "-o app.tach --mode=cpu -a -- python app.py --port 8000"
        .split_whitespace()
        .collect();
    assert_eq!(flags_of(&words), ["--mode"]);
    let words: Vec<&str> = "--json 4242 | jq '.[0]' --x".split_whitespace().collect();
    assert_eq!(flags_of(&words), ["--json"]);
    let words: Vec<&str> = "--OPTION --per-thread".split_whitespace().collect();
    assert_eq!(flags_of(&words), ["--per-thread"]);
    let help =
        "  -o, --output <OUTPUT>  where\n      --mode <MODE>  [default: wall]\n      --async-aware";
    assert_eq!(
        help_flags(help),
        ["--async-aware", "--mode", "--output"]
            .map(String::from)
            .into()
    );
}

/// A page's prose with its code taken out, and its inline code spans.
struct SplitCode {
    /// The text with fenced blocks and inline code spans blanked, line for line, so that
    /// links and versions are looked for in prose only and keep their line numbers.
    prose: String,
    /// Each inline code span, with the line it starts on; a span that runs over a line
    /// break is joined with a space.
    spans: Vec<(usize, String)>,
}

fn split_code(text: &str) -> SplitCode {
    let mut prose = String::new();
    let mut spans = Vec::new();
    let mut fenced = false;
    // An open span: its delimiter's length, the line it started on, its text.
    let mut open: Option<(usize, usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            open = None;
            prose.push('\n');
            continue;
        }
        if fenced {
            prose.push('\n');
            continue;
        }
        if line.trim().is_empty() {
            open = None; // a span does not run past its paragraph
        }
        if let Some((_, _, span)) = open.as_mut() {
            span.push(' ');
        }
        let mut rest = line;
        while let Some(at) = rest.find('`') {
            let run = rest[at..].bytes().take_while(|b| *b == b'`').count();
            match open.take() {
                None => {
                    prose.push_str(&rest[..at]);
                    open = Some((run, n + 1, String::new()));
                }
                Some((len, start, mut span)) if len == run => {
                    span.push_str(&rest[..at]);
                    spans.push((start, span.trim().to_string()));
                }
                Some((len, start, mut span)) => {
                    span.push_str(&rest[..at + run]);
                    open = Some((len, start, span));
                }
            }
            rest = &rest[at + run..];
        }
        match open.as_mut() {
            Some((_, _, span)) => span.push_str(rest),
            None => prose.push_str(rest),
        }
        prose.push('\n');
    }
    SplitCode { prose, spans }
}

/// GitHub's anchor of a heading: lower case, without punctuation but `-` and `_`,
/// spaces as `-`; a link in the heading counts by its text.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings, with GitHub's `-1`, `-2` for repeated ones.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        if fenced || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let count = seen.entry(base.clone()).or_default();
        anchors.insert(if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The targets of a page's links (`[text](target)`, `![alt](target)`, `[name]: target`),
/// in prose only, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let prose = split_code(text).prose;
    let mut targets = Vec::new();
    for (n, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push((n + 1, target.to_string()));
            rest = &after[end..];
        }
        let trimmed = line.trim_start();
        if let (true, Some(at)) = (trimmed.starts_with('['), trimmed.find("]: ")) {
            let target = trimmed[at + 3..].split_whitespace().next().unwrap_or("");
            targets.push((n + 1, target.to_string()));
        }
    }
    targets
}

/// What is wrong with each relative link of the page at `path` whose text is `text`.
fn broken_links(path: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    let dir = path.parent().unwrap();
    for (line, target) in link_targets(text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target.as_str(), None),
        };
        let at = format!("{}:{line}: ({target})", relative(path));
        let resolved = if file.is_empty() {
            path.to_path_buf()
        } else {
            dir.join(file)
        };
        if !resolved.exists() {
            broken.push(format!("{at}: no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let heading_text = if file.is_empty() {
            text.to_string()
        } else if resolved.extension().is_some_and(|e| e == "md") {
            std::fs::read_to_string(&resolved).unwrap()
        } else {
            continue; // an anchor into source code (a line) is not checked
        };
        if !anchors(&heading_text).contains(anchor) {
            broken.push(format!("{at}: no heading has the anchor #{anchor}"));
        }
    }
    broken
}

#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    let mut links = 0;
    for path in checked_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        links += link_targets(&text).len();
        broken.extend(broken_links(&path, &text));
    }
    assert!(links >= 50, "too few links found in the docs: {links}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_checker_finds_missing_files_and_anchors() {
    let page = repo().join("docs/index.md");
    let text = "# Title\n\n## A `tach top` heading, (with) punctuation\n\n\
        [ok](#a-tach-top-heading-with-punctuation) [ok](format.md#byte-order) \
        [ok](../README.md) ![ok](flamegraph.png) [web](https://example.com/x)\n\
        `[not a link](nowhere.md)`\n\n```\n[also code](nowhere.md)\n```\n\
        [gone](missing.md) [bad](format.md#no-such-heading) [bad](#nor-here)\n\
        [ref]: ../nowhere/else.md\n";
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(broken[0].contains("missing.md") && broken[0].ends_with("no such file"));
    assert!(broken[1].contains("#no-such-heading"));
    assert!(broken[2].contains("#nor-here"));
    assert!(broken[3].contains("../nowhere/else.md"));
    assert_eq!(
        slug("Native stacks: `--native`"),
        "native-stacks---native",
        "GitHub keeps each space and hyphen"
    );
    let repeated = anchors("# Tests\n## Tests\n```\n# Tests\n```\n### Tests\n");
    assert_eq!(
        repeated,
        ["tests", "tests-1", "tests-2"].map(String::from).into()
    );
}

#[test]
fn the_flag_extraction_reads_inline_code_in_prose() {
    let text = "Use `tach record --native --pid PID` or `tach dump\n--json PID`; `--x` alone \
        is no command.\n\n```\ntach top --sort self\n```\n";
    let spans = split_code(text).spans;
    assert_eq!(
        spans,
        [
            (1, "tach record --native --pid PID".to_string()),
            (1, "tach dump --json PID".to_string()),
            (2, "--x".to_string()),
        ]
    );
    let words: Vec<&str> = spans[1].1.split_whitespace().collect();
    assert_eq!(flags_of(&words[2..]), ["--json"]);
}

/// The CPython versions the recorder has an interpreter layout for: `(3, N)` in the
/// generated layouts, which cover every version it records.
fn supported_minors() -> (u32, u32) {
    let layouts =
        std::fs::read_to_string(repo().join("src/record/interpreter/layout/generated.rs")).unwrap();
    let minors: Vec<u32> = layouts
        .split("version: (3, ")
        .skip(1)
        .filter_map(|rest| rest.split(')').next()?.trim().parse().ok())
        .collect();
    assert!(!minors.is_empty(), "no layout versions found");
    (*minors.iter().min().unwrap(), *minors.iter().max().unwrap())
}

/// The oldest CPython the Python package installs on: pyproject.toml's
/// `requires-python = ">=3.N"`.
fn package_minor() -> u32 {
    let pyproject = std::fs::read_to_string(repo().join("pyproject.toml")).unwrap();
    pyproject
        .lines()
        .find_map(|l| l.trim().strip_prefix("requires-python = \">=3."))
        .and_then(|rest| rest.trim_end_matches('"').parse().ok())
        .expect("pyproject.toml has requires-python = \">=3.N\"")
}

/// The minor versions of a version list starting at `text`: `3.11`, `3.9-3.15`, `3.10-12`,
/// `3.11, 3.13 and 3.14`, `3.9 to 3.12`, `3.12.1`.
fn version_list(text: &str) -> Vec<u32> {
    let mut minors = Vec::new();
    let mut rest = text;
    while let Some(after) = rest.strip_prefix("3.") {
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        let Ok(minor) = digits.parse() else { break };
        minors.push(minor);
        rest = &after[digits.len()..];
        // a micro version
        if let Some(micro) = rest.strip_prefix('.') {
            let skipped = micro.chars().take_while(char::is_ascii_digit).count();
            if skipped > 0 {
                rest = &micro[skipped..];
            }
        }
        let joined = ["-", " to ", ", ", " and ", "/"]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep));
        match joined {
            Some(next) if next.starts_with("3.") => rest = next,
            Some(next) if next.starts_with(|c: char| c.is_ascii_digit()) => {
                // `3.10-12`: the same major version
                let digits: String = next.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(minor) = digits.parse() {
                    minors.push(minor);
                }
                break;
            }
            _ => break,
        }
    }
    minors
}

/// What is wrong with the CPython versions `text` names: a version outside
/// `supported` (after "Python ", "CPython " or "python"), or a version the Python
/// package is said to need ("Python 3.N or newer", "Python 3.N+", on a line about the
/// package or its wheel) other than `package`.
fn wrong_versions(name: &str, text: &str, supported: (u32, u32), package: u32) -> Vec<String> {
    let mut wrong = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        for prefix in ["CPython ", "Python ", "python"] {
            for (i, _) in line.match_indices(prefix) {
                if line[..i].ends_with(|c: char| c.is_ascii_alphabetic()) {
                    continue; // "Python " inside "CPython ": counted once
                }
                let after = &line[i + prefix.len()..];
                let minors = version_list(after);
                for minor in &minors {
                    // An older version named as refused is not a claim of support.
                    let refused = ["older", "refused", "not supported", "unsupported"]
                        .iter()
                        .any(|w| line.contains(w));
                    if *minor > supported.1 || (*minor < supported.0 && !refused) {
                        wrong.push(format!(
                            "{at}: CPython 3.{minor} is not one tach supports (3.{}-3.{})",
                            supported.0, supported.1
                        ));
                    }
                }
                let about_package = ["package", "wheel", "pip install"]
                    .iter()
                    .any(|w| line.contains(w));
                let Some(first) = minors.first() else {
                    continue;
                };
                let digits = format!("3.{first}");
                let tail = after.strip_prefix(digits.as_str()).unwrap_or("");
                let minimum = tail.starts_with(" or newer") || tail.starts_with('+');
                if about_package && minimum && *first != package {
                    wrong.push(format!(
                        "{at}: the package needs CPython 3.{package} or newer (pyproject.toml), not 3.{first}"
                    ));
                }
            }
        }
    }
    wrong
}

#[test]
fn docs_name_only_supported_cpython_versions() {
    let supported = supported_minors();
    assert_eq!(supported.0, 9, "the oldest layout");
    let package = package_minor();
    let mut wrong = Vec::new();
    for path in checked_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        wrong.extend(wrong_versions(&relative(&path), &text, supported, package));
    }
    assert!(
        wrong.is_empty(),
        "docs name versions the code does not support:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_version_check_finds_unsupported_and_stale_versions() {
    let text = "on CPython 3.9-3.15 from outside\n\
        python3.15 -m profiling.sampling\n\
        pyenv's Python 3.12.1 and 3.13\n\
        3.8 and older are refused: Python 3.8\n\
        `pip install .` (Python 3.10 or newer) installs the package\n\
        in-process on CPython 3.10-16\n\
        python3.16 -m tach run\n\
        `pip install .` (Python 3.11 or newer) installs the package\n\
        the wheel needs Python 3.11+\n\
        Rust and Python 3.11+ installed\n\
        took 3.16 s\n";
    let wrong = wrong_versions("t.md", text, (9, 15), 10);
    assert_eq!(wrong.len(), 4, "{wrong:#?}");
    assert!(wrong[0].starts_with("t.md:6: CPython 3.16"));
    assert!(wrong[1].starts_with("t.md:7: CPython 3.16"));
    assert!(wrong[2].starts_with("t.md:8: the package needs CPython 3.10"));
    assert!(wrong[3].starts_with("t.md:9: the package needs CPython 3.10"));
    assert_eq!(version_list("3.11, 3.13 and 3.14 in"), [11, 13, 14]);
    assert_eq!(version_list("3.9 to 3.12.1"), [9, 12]);
}

/// The paths of a build machine that a line shows.
fn machine_paths(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            ["/work/", "/root/", "/home/"]
                .iter()
                .any(|p| line.contains(p))
        })
        .map(|(n, line)| (n + 1, line))
        .collect()
}

#[test]
fn docs_show_no_paths_of_a_build_machine() {
    let mut found = Vec::new();
    for path in checked_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, shown) in machine_paths(&text) {
            found.push(format!("{}:{line}: {shown}", relative(&path)));
        }
    }
    assert!(found.is_empty(), "machine paths:\n{}", found.join("\n"));
    let bad = "ok: target/release/tach\nT=/work/targets/x/tach\n~/.pyenv is fine\n    spin (/home/me/app.py:8)\n";
    assert_eq!(
        machine_paths(bad)
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>(),
        [2, 4]
    );
}

/// The pages of docs/ that `index` does not link.
fn unlinked_pages(index: &str, pages: &[String]) -> Vec<String> {
    let linked: BTreeSet<String> = link_targets(index)
        .into_iter()
        .map(|(_, target)| target.split('#').next().unwrap().to_string())
        .collect();
    pages
        .iter()
        .filter(|page| *page != "index.md" && !linked.contains(*page))
        .cloned()
        .collect()
}

#[test]
fn the_index_links_every_page() {
    let index = std::fs::read_to_string(repo().join("docs/index.md")).unwrap();
    let pages: Vec<String> = doc_files()
        .iter()
        .filter_map(|p| p.strip_prefix(repo().join("docs")).ok())
        .map(|p| p.display().to_string())
        .collect();
    assert!(pages.len() >= 10, "{pages:?}");
    let unlinked = unlinked_pages(&index, &pages);
    assert!(
        unlinked.is_empty(),
        "docs/index.md does not link {unlinked:?}"
    );
    let pages = ["a.md", "b.md", "index.md"].map(String::from);
    assert_eq!(unlinked_pages("[a](a.md#x) `[b](b.md)`", &pages), ["b.md"]);
}

/// The help texts docs/cli.md shows, by command (`tach`, `tach record`, ...).
fn cli_reference(text: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut command: Option<String> = None;
    let mut block: Option<String> = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            command = Some(heading.trim().to_string());
        } else if line.starts_with("```") {
            match block.take() {
                Some(help) => {
                    if let Some(command) = command.take() {
                        sections.insert(command, help);
                    }
                }
                None => block = Some(String::new()),
            }
        } else if let Some(help) = block.as_mut() {
            help.push_str(line);
            help.push('\n');
        }
    }
    sections
}

#[test]
fn the_cli_reference_is_the_help_text() {
    let text = std::fs::read_to_string(repo().join("docs/cli.md")).unwrap();
    let shown = cli_reference(&text);
    let mut expected = BTreeMap::new();
    expected.insert("tach".to_string(), tach_help(&[]));
    for sub in subcommands() {
        expected.insert(format!("tach {sub}"), tach_help(&[&sub]));
    }
    let trim = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.iter()
            .map(|(k, v)| (k.clone(), v.trim_end().to_string()))
            .collect()
    };
    assert_eq!(
        trim(&shown).keys().collect::<Vec<_>>(),
        trim(&expected).keys().collect::<Vec<_>>(),
        "docs/cli.md has a section per subcommand"
    );
    for (command, help) in trim(&expected) {
        assert_eq!(
            trim(&shown)[&command],
            help,
            "docs/cli.md's `{command} --help` is stale: regenerate it from `{command} --help`"
        );
    }
    let mut stale = cli_reference("## tach a\n\n```text\nold\n```\n## tach b\n```\nnew\n```\n");
    assert_eq!(stale.remove("tach a").as_deref(), Some("old\n"));
    assert_eq!(stale.remove("tach b").as_deref(), Some("new\n"));
}
