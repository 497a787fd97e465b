//! No two files of `src/` import each other, directly or through others.
//!
//! A loop means neither file can be read, moved or tested without the other; each one
//! was broken by moving the shared item where it belongs. This check reads every file
//! under `src/`, maps it to its module (`lib.rs` = the crate, `a/mod.rs` = `a`,
//! `a/b.rs` = `a::b`), and draws an edge for every `crate::`, `super::` and `self::`
//! path in `use` declarations (re-exports included) and in code, and for a module's
//! code that uses its child (`use child::X`, `pub use child::X`, `child::f()`). A path
//! names the file of the deepest module it goes through (`crate::a::b::Item` is the
//! file of `a::b`); `super::` inside an inline `mod m { .. }` names the file's own
//! module. Comments, strings, `mod` declarations and `#[cfg(test)]` items are not read:
//! tests may use `super::*`.
//!
//! Every file is a node, a folder's `mod.rs` too: a `mod.rs` that re-exports or calls
//! a child and a child that uses the `mod.rs`'s items (`super::Item`) are a loop. What
//! the children share lives in a file of its own that both import; `mod.rs` keeps the
//! `mod` declarations, the re-exports and the code that uses the children. The
//! strongly connected components of that graph are the loops.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file of `src/`: its module path and its text with comments, strings and test
/// items removed.
struct Source {
    file: String,
    module: Vec<String>,
    code: String,
}

fn sources(root: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    collect_rs(root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(root).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            Source {
                file: rel.to_string_lossy().replace('\\', "/"),
                module,
                code: without_test_items(&blank_comments_and_strings(&text)),
            }
        })
        .collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text with every comment, string and char literal replaced by spaces (lines
/// and offsets stay where they were).
fn blank_comments_and_strings(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let at = |k: usize| s.get(k).copied().unwrap_or('\0');
        match s[i] {
            '/' if at(i + 1) == '/' => {
                let end = (i..s.len()).find(|&k| s[k] == '\n').unwrap_or(s.len());
                blank(&mut out, i, end);
                i = end;
            }
            '/' if at(i + 1) == '*' => {
                let (mut depth, mut k) = (1, i + 2);
                while k < s.len() && depth > 0 {
                    if s[k] == '/' && at(k + 1) == '*' {
                        depth += 1;
                        k += 1;
                    } else if s[k] == '*' && at(k + 1) == '/' {
                        depth -= 1;
                        k += 1;
                    }
                    k += 1;
                }
                blank(&mut out, i, k);
                i = k;
            }
            'r' | 'b' if i == 0 || !ident(s[i - 1]) => {
                // r"..", r#".."#, br"..", b"..": raw strings end at the quote and hashes.
                let mut k = i + if s[i] == 'b' && at(i + 1) == 'r' {
                    2
                } else {
                    1
                };
                let raw = s[k - 1] == 'r';
                let hashes = (k..s.len()).take_while(|&j| s[j] == '#').count();
                k += hashes;
                if at(k) != '"' || (!raw && hashes > 0) {
                    i += 1;
                    continue;
                }
                if !raw {
                    i = k; // a byte string: read as a string below
                    continue;
                }
                let close: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let mut end = k + 1;
                while end < s.len() && !s[end..].starts_with(&close) {
                    end += 1;
                }
                blank(&mut out, i, end + close.len());
                i = end + close.len();
            }
            '"' => {
                let mut k = i + 1;
                while k < s.len() && s[k] != '"' {
                    k += if s[k] == '\\' { 2 } else { 1 };
                }
                blank(&mut out, i, k + 1);
                i = k + 1;
            }
            '\'' => {
                // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), left alone.
                let end = if at(i + 1) == '\\' {
                    (i + 2..s.len()).find(|&k| s[k] == '\'')
                } else if at(i + 2) == '\'' {
                    Some(i + 2)
                } else {
                    None
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end + 1);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    out.into_iter().collect()
}

/// The code without `#[cfg(test)]` items (a `mod tests { .. }`, a `mod tests;`, a
/// test-only `use` or function): test code may use `super::*` freely.
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let mut item = &rest[at + "#[cfg(test)]".len()..];
        // Further attributes of the same item.
        loop {
            item = item.trim_start();
            if !item.starts_with("#[") {
                break;
            }
            item = &item[item.find(']').map_or(item.len(), |e| e + 1)..];
        }
        // The item ends at its first `;` or at the brace closing its first `{`.
        let semi = item.find(';').unwrap_or(item.len());
        let open = item.find('{').unwrap_or(item.len());
        let end = if semi < open {
            semi + 1
        } else {
            let mut depth = 0;
            item[open..]
                .char_indices()
                .find_map(|(k, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(open + k + 1)
                })
                .unwrap_or(item.len())
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The paths a `use` tree names, braces expanded: `a::{b, c::{d, self}}` gives
/// `a::b`, `a::c::d`, `a::c`.
fn expand_use(tree: &str) -> Vec<String> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut parts, mut depth, mut from) = (Vec::new(), 0, 0);
        for (k, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[from..k]);
                    from = k + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[from..]);
        parts
    }
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.replace(" ::", "::").replace(":: ", "::");
    let mut out = Vec::new();
    for part in split_top(&tree) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match part.find('{') {
            Some(open) => {
                let prefix = part[..open].trim_end_matches("::");
                let inner = &part[open + 1..part.rfind('}').unwrap_or(part.len())];
                for sub in expand_use(inner) {
                    out.push(if sub == "self" {
                        prefix.to_string()
                    } else {
                        format!("{prefix}::{sub}")
                    });
                }
            }
            None => {
                let path = part.split(" as ").next().unwrap().trim();
                out.push(path.to_string());
            }
        }
    }
    out
}

/// Every module path in the code: the `crate::`, `super::`, `self::` and `child::` paths
/// of `use` declarations (braces expanded, re-exports included) and of code.
fn paths_in(code: &str, children: &BTreeSet<&str>) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = String::with_capacity(code.len());
    let mut text = code;
    let word = |c: char| c.is_alphanumeric() || c == '_';
    while let Some(at) = text.find("use ") {
        let starts_word = text[..at].chars().next_back().is_none_or(|c| !word(c));
        let end = text[at..].find(';').map_or(text.len(), |e| at + e);
        if !starts_word {
            rest.push_str(&text[..at + 4]);
            text = &text[at + 4..];
            continue;
        }
        rest.push_str(&text[..at]);
        let tree = text[at + 4..end].trim().trim_start_matches("::");
        paths.extend(expand_use(tree));
        text = &text[(end + 1).min(text.len())..];
    }
    rest.push_str(text);
    // Paths in code: an identifier not itself after `::`, then `::` and more.
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !word(chars[i]) || (i > 0 && (word(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let mut k = i;
        let mut segs = vec![String::new()];
        loop {
            while k < chars.len() && word(chars[k]) {
                segs.last_mut().unwrap().push(chars[k]);
                k += 1;
            }
            if chars.get(k) == Some(&':') && chars.get(k + 1) == Some(&':') {
                k += 2;
                while chars.get(k).is_some_and(|c| c.is_whitespace()) {
                    k += 1;
                }
                if chars.get(k).is_some_and(|&c| word(c)) {
                    segs.push(String::new());
                    continue;
                }
            }
            break;
        }
        if segs.len() > 1 {
            paths.push(segs.join("::"));
        }
        i = k.max(i + 1);
    }
    let first = |p: &String| p.split("::").next().unwrap().to_string();
    paths.retain(|p| {
        let first = first(p);
        matches!(first.as_str(), "crate" | "super" | "self") || children.contains(first.as_str())
    });
    paths
}

/// The code with `super::` inside an inline `mod m { .. }` written `self::`: there it
/// names the file's own module, not its parent.
fn inline_super_as_self(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = find_inline_mod(rest) {
        let open = at + rest[at..].find('{').unwrap();
        let mut depth = 0usize;
        let mut close = rest.len();
        for (k, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push_str(&rest[..open]);
        out.push_str(&rest[open..close].replace("super::", "self::"));
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// Where the next `mod name {` begins (not a `mod name;` declaration).
fn find_inline_mod(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = code[from..].find("mod ") {
        let at = from + k;
        let before_ok = code[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let after = code[at + 4..].trim_start();
        let name_len = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if before_ok && name_len > 0 && after[name_len..].trim_start().starts_with('{') {
            return Some(at);
        }
        from = at + 4;
    }
    None
}

/// The module a path names from inside `module`: the deepest one that has a file.
fn resolve(
    module: &[String],
    path: &str,
    files: &BTreeMap<Vec<String>, usize>,
) -> Option<Vec<String>> {
    let mut segs = path.split("::").peekable();
    let mut at: Vec<String> = match *segs.peek()? {
        "crate" => {
            segs.next();
            Vec::new()
        }
        _ => module.to_vec(),
    };
    while let Some(&s) = segs.peek() {
        match s {
            "self" => {}
            "super" => {
                at.pop()?;
            }
            _ => break,
        }
        segs.next();
    }
    for s in segs {
        at.push(s.to_string());
        if !files.contains_key(&at) {
            at.pop();
            break;
        }
    }
    files.contains_key(&at).then_some(at)
}

/// The loops: each strongly connected component of more than one file, as its files
/// and the names each uses from another of them.
fn loops(root: &Path) -> Vec<String> {
    let sources = sources(root);
    let files: BTreeMap<Vec<String>, usize> = sources
        .iter()
        .enumerate()
        .map(|(i, s)| (s.module.clone(), i))
        .collect();
    // Edges with the paths that make them.
    let mut edges: Vec<BTreeMap<usize, BTreeSet<String>>> = vec![BTreeMap::new(); sources.len()];
    for (i, src) in sources.iter().enumerate() {
        let children: BTreeSet<&str> = files
            .keys()
            .filter(|m| m.len() == src.module.len() + 1 && m.starts_with(&src.module))
            .map(|m| m.last().unwrap().as_str())
            .collect();
        for path in paths_in(&inline_super_as_self(&src.code), &children) {
            let Some(target) = resolve(&src.module, &path, &files) else {
                continue;
            };
            let j = files[&target];
            if j != i {
                edges[i].entry(j).or_default().insert(path);
            }
        }
    }
    let mut out = Vec::new();
    let adjacency: Vec<Vec<usize>> = edges.iter().map(|e| e.keys().copied().collect()).collect();
    for component in strongly_connected(&adjacency) {
        if component.len() < 2 {
            continue;
        }
        let inside: BTreeSet<usize> = component.iter().copied().collect();
        let mut report = format!(
            "a loop of {} files: {}",
            component.len(),
            component
                .iter()
                .map(|&i| sources[i].file.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for &i in &component {
            for (j, names) in &edges[i] {
                if inside.contains(j) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    report.push_str(&format!(
                        "\n    {} -> {}: {}",
                        sources[i].file,
                        sources[*j].file,
                        names.join(", ")
                    ));
                }
            }
        }
        out.push(report);
    }
    out
}

/// Tarjan's algorithm, iteratively: the strongly connected components, each sorted.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adjacency.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let (mut next, mut components) = (0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut calls = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = calls.last_mut() {
            if *edge == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adjacency[v].get(*edge) {
                *edge += 1;
                if index[w] == usize::MAX {
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort();
                components.push(component);
            }
        }
    }
    components
}

#[test]
fn no_file_of_src_imports_itself_through_others() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = loops(&root);
    assert!(
        found.is_empty(),
        "files of src/ that import each other (move what they share where it belongs):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_import_reader_sees_what_makes_an_edge() {
    let code = blank_comments_and_strings(
        "use super::{a::B, c::{self, D as E}};\n\
         // use crate::commented::Out;\n\
         let s = \"crate::in_string::X\"; let c = '\"'; fn f<'a>(x: &'a u8) {}\n\
         pub use child::Out; use child::Private;\n\
         let y = crate::x::y::Z::new(); child::go(); other::no();\n\
         #[cfg(test)]\n#[allow(dead_code)]\nmod tests { use crate::tests_only::T; }\n",
    );
    let code = without_test_items(&code);
    let children: BTreeSet<&str> = ["child"].into_iter().collect();
    assert_eq!(
        paths_in(&code, &children),
        [
            "super::a::B",
            "super::c",
            "super::c::D",
            "child::Out",
            "child::Private",
            "crate::x::y::Z::new",
            "child::go"
        ]
    );
    assert_eq!(
        inline_super_as_self("use super::A; mod inner { use super::B; } mod decl;"),
        "use super::A; mod inner { use self::B; } mod decl;"
    );
    let files: BTreeMap<Vec<String>, usize> =
        [vec![], vec!["x".into()], vec!["x".into(), "y".into()]]
            .into_iter()
            .enumerate()
            .map(|(i, m)| (m, i))
            .collect();
    let here = ["x".to_string(), "y".to_string()];
    assert_eq!(
        resolve(&here, "crate::x::y::Z::new", &files),
        Some(here.to_vec())
    );
    assert_eq!(
        resolve(&here, "super::Q", &files),
        Some(vec!["x".to_string()])
    );
    assert_eq!(resolve(&here, "super::super::R", &files), Some(vec![]));
}

#[test]
fn a_loop_is_found_with_the_names_that_tie_it() {
    let components = strongly_connected(&[vec![1], vec![2], vec![0], vec![0]]);
    assert!(components.contains(&vec![0, 1, 2]));
    assert!(components.contains(&vec![3]));
}
