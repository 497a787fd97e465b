//! Exporters on a `--native` recording tell native frames apart: gecko's Native category,
//! one pprof mapping per module (read back by `go tool pprof`), blue in the flamegraph.
//!
//! The recording, `tests/data/native/mixed-3.12.tach`, is a real one: `tach record
//! --native -r 100 -- python3.12 mixed.py 3` (pyenv's CPython 3.12.1, 2026-11-26) of
//! the program beside it (zlib's deflate, the json encoder, libc's qsort calling a
//! Python comparator through ctypes).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use tach::export::{export_to, find, ExportOptions};
use tach::{SampleFilter, TachFile};

use crate::common;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/native/mixed-3.12.tach")
}

fn export(format: &str, path: &Path) -> Vec<u8> {
    let file = TachFile::open(path).unwrap();
    let mut out = Vec::new();
    export_to(
        find(format).unwrap(),
        &file,
        &SampleFilter::default(),
        &ExportOptions::default(),
        &mut out,
    )
    .unwrap();
    out
}

/// Native frames are those of the modules and C sources; the program's frames and
/// CPython's synthetic ones are not. In a file of CPython's own `--native`, only its
/// `<native>` placeholder is.
#[test]
fn the_frame_table_tells_native_frames() {
    let file = TachFile::open(fixture()).unwrap();
    let native = file.native_frames();
    let mut names: BTreeMap<bool, HashSet<String>> = BTreeMap::new();
    for (f, &n) in native.iter().enumerate() {
        let name = format!("{}:{}", file.filename(f as u32), file.funcname(f as u32));
        names.entry(n).or_default().insert(name);
    }
    let is_native = |needle: &str| names[&true].iter().any(|n| n.ends_with(needle));
    let is_python = |needle: &str| names[&false].iter().any(|n| n.ends_with(needle));
    assert!(is_native("libz.so.1.2.13:deflate"), "{names:?}");
    assert!(is_native("zlibmodule.c:zlib_compress_impl"), "{names:?}");
    assert!(is_native("libc.so.6:qsort_r"), "{names:?}");
    assert!(is_python("mixed.py:squeeze") && is_python("mixed.py:compare"));
    assert!(
        !names[&true].iter().any(|n| n.contains(".py:")),
        "{names:?}"
    );

    let cpython = TachFile::open(common::golden_path("synthetic_many_threads_none.bin")).unwrap();
    assert!(cpython.header().config.features.unwrap().native);
    for (f, &n) in cpython.native_frames().iter().enumerate() {
        if n {
            assert_eq!(cpython.funcname(f as u32), "<native>");
            assert_eq!(cpython.filename(f as u32), "~");
        }
    }
    let plain = TachFile::open(common::golden_path("cpu_recursive.bin")).unwrap();
    assert!(!plain.native_frames().contains(&true));
}

/// Gecko: native functions are not JS and their frames and stacks are in the Native
/// category (2 of CPython's nine); Python ones in Python (1).
#[test]
fn gecko_puts_native_frames_in_the_native_category() {
    let v: serde_json::Value = serde_json::from_slice(&export("gecko", &fixture())).unwrap();
    let strings = v["shared"]["stringArray"].as_array().unwrap();
    let thread = &v["threads"][0];
    let funcs = &thread["funcTable"];
    let frames = &thread["frameTable"];
    let stacks = &thread["stackTable"];
    let func_name = |i: usize| strings[funcs["name"][i].as_u64().unwrap() as usize].as_str();
    // The program's functions by name and file (the interpreter has a native `main`).
    let in_program = |i: usize| {
        funcs["fileName"][i]
            .as_u64()
            .is_some_and(|s| strings[s as usize] == "mixed.py")
    };
    let mut seen = HashSet::new();
    for (frame, func) in frames["func"].as_array().unwrap().iter().enumerate() {
        let func = func.as_u64().unwrap() as usize;
        let name = func_name(func).unwrap();
        let want = match name {
            "deflate" | "zlib_compress" | "qsort_r" | "encoder_listencode_obj" => 2,
            "squeeze" | "main" | "compare" | "encode" if in_program(func) => 1,
            _ => continue,
        };
        seen.insert(name);
        assert_eq!(frames["category"][frame], want, "{name}");
        assert_eq!(funcs["isJS"][func], want == 1, "{name}");
        for (s, f) in stacks["frame"].as_array().unwrap().iter().enumerate() {
            if f.as_u64() == Some(frame as u64) {
                assert_eq!(stacks["category"][s], want, "stack of {name}");
            }
        }
    }
    assert!(
        seen.contains("deflate") && seen.contains("squeeze"),
        "{seen:?}"
    );
}

/// pprof: go tool pprof reads one mapping per module (by path, marked as symbolized),
/// keeps the native names, and counts them as tach's collapsed stacks do.
#[test]
fn pprof_maps_native_frames_to_their_modules() {
    let Some(go) = crate::pprof::go() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("native.pb.gz");
    crate::pprof::export(&fixture(), &out);
    let raw = crate::pprof::pprof(go, &["-raw"], &out);
    let mappings: Vec<&str> = raw
        .lines()
        .skip_while(|l| *l != "Mappings")
        .skip(1)
        .collect();
    assert!(
        mappings
            .iter()
            .any(|m| m.contains("/libz.so.1.2.13") && m.ends_with("[FN]")),
        "{mappings:?}"
    );
    assert!(mappings.iter().any(|m| m.contains("/libc.so.6")));
    // None for the program's own Python files.
    assert!(
        !mappings
            .iter()
            .any(|m| m.trim_end_matches("[FN]").trim_end().ends_with(".py")),
        "{mappings:?}"
    );

    // Samples with deflate on the stack, and with it as the leaf, from the collapsed
    // export (CPython's format, checked against CPython's own elsewhere).
    let collapsed = String::from_utf8(export("collapsed", &fixture())).unwrap();
    let (mut cum, mut flat) = (0u64, 0u64);
    for line in collapsed.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        if stack.contains(";libz.so.1.2.13:deflate:") {
            cum += n;
        }
        if stack.ends_with(";libz.so.1.2.13:deflate:0") {
            flat += n;
        }
    }
    assert!(cum > 0);
    let top = crate::pprof::pprof(
        go,
        &[
            "-top",
            "-filefunctions",
            "-nodecount=1000",
            "-sample_index=samples",
        ],
        &out,
    );
    let row = top
        .lines()
        .find(|l| l.contains(" deflate /usr/lib/x86_64-linux-gnu/libz.so.1.2.13"))
        .unwrap_or_else(|| panic!("no deflate row in\n{top}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (
            cols[0].parse::<u64>().unwrap(),
            cols[3].parse::<u64>().unwrap()
        ),
        (flat, cum),
        "{row}"
    );
}

/// Flamegraph: native frames are blue (inferno's Python palette has none), Python
/// frames keep their colours.
#[test]
fn flamegraph_draws_native_frames_blue() {
    let svg = String::from_utf8(export("flamegraph", &fixture())).unwrap();
    let fill_of = |label: &str| -> (u8, u8, u8) {
        let at = svg
            .find(&format!("<title>{label}"))
            .unwrap_or_else(|| panic!("no frame {label}"));
        let rest = &svg[at..];
        let fill = &rest[rest.find("fill=\"rgb(").unwrap() + 10..];
        let rgb: Vec<u8> = fill[..fill.find(')').unwrap()]
            .split(',')
            .map(|c| c.parse().unwrap())
            .collect();
        (rgb[0], rgb[1], rgb[2])
    };
    let blue = |(r, g, b): (u8, u8, u8)| b == 235 && (80..130).contains(&r) && g == r + 50;
    assert!(blue(fill_of("deflate (")), "{:?}", fill_of("deflate ("));
    assert!(blue(fill_of("qsort_r (")));
    assert!(!blue(fill_of("squeeze (")), "{:?}", fill_of("squeeze ("));
}

/// `tach query`: `frames.native` and `stacks.native` mark the native frames; native
/// self time per module adds up to the collapsed stacks' leaves.
#[cfg(feature = "query")]
#[test]
fn query_has_a_native_column() {
    use polars::prelude::*;
    let e = tach::query::QueryEngine::open(&[fixture()]).unwrap();
    let df = e
        .run("select funcname, native from frames where funcname in ('deflate', 'squeeze', 'qsort_r', 'compare')")
        .unwrap();
    let names = df.column("funcname").unwrap().str().unwrap().clone();
    let native = df.column("native").unwrap().bool().unwrap().clone();
    let mut seen = BTreeMap::new();
    for i in 0..df.height() {
        seen.insert(names.get(i).unwrap().to_string(), native.get(i).unwrap());
    }
    assert_eq!(
        seen,
        BTreeMap::from([
            ("compare".to_string(), false),
            ("deflate".to_string(), true),
            ("qsort_r".to_string(), true),
            ("squeeze".to_string(), false),
        ])
    );
    // Leaf samples in libz, by the query and by the collapsed export.
    let df = e
        .run(
            "select sum(c.samples) as n from stacks s join stack_counts c using (file, stack_id) \
             where s.native and s.position = 0 and s.filename like '%libz.so%'",
        )
        .unwrap();
    let n = df.column("n").unwrap().cast(&DataType::UInt64).unwrap();
    let collapsed = String::from_utf8(export("collapsed", &fixture())).unwrap();
    let leaves: u64 = collapsed
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(s, _)| s.rsplit(';').next().unwrap().starts_with("libz.so"))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum();
    assert!(leaves > 0);
    assert_eq!(n.u64().unwrap().get(0), Some(leaves));
}
