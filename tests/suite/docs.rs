//! The README and docs/ show the options `--help` has: every `--flag` in a
//! `tach SUBCOMMAND ...` command line of a fenced code block must be one of that
//! subcommand's, and every flag of a `python -m tach run ...` line must be one of both
//! `python -m tach run`'s and `tach record`'s (the same recording options).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
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

/// The long flags (without a `=value`) among `words` up to the end of the command.
fn flags_of<'a>(words: &[&'a str]) -> Vec<&'a str> {
    words
        .iter()
        .take_while(|w| !ends_command(w))
        .filter(|w| w.starts_with("--") && w.len() > 2)
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
        for (line_no, line) in code_lines(&text) {
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
    let help =
        "  -o, --output <OUTPUT>  where\n      --mode <MODE>  [default: wall]\n      --async-aware";
    assert_eq!(
        help_flags(help),
        ["--async-aware", "--mode", "--output"]
            .map(String::from)
            .into()
    );
}
