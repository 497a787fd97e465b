//! Files tach writes replay in CPython 3.15's own `profiling.sampling replay`, and
//! CPython's collapsed output equals ours. Needs the CPython chroot
//! (`scripts/cpython-chroot`); skipped loudly when it cannot run.

use std::path::{Path, PathBuf};

use crate::common::*;
use tach::export;
use tach::{rewrite, Compression, Location, TachFile, Writer};

/// A deterministic varied profile: 40 threads in 3 interpreters, stacks 0-300 deep,
/// every status byte, locations with and without columns, opcodes, repeats.
fn write_varied(path: &Path, compression: Compression) {
    let mut w = Writer::builder(250)
        .start_time_us(5_000_000)
        .compression(compression)
        .python_version((3, 15, 2))
        .create(path)
        .unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let files = [
        "/app/main.py",
        "/lib/util.py",
        "~",
        "/app/módulo.py",
        "<string>",
    ];
    let funcs = ["main", "work", "<GC>", "Klass.method", "<lambda>", "函数"];
    let mut frames = Vec::new();
    for i in 0..120u32 {
        let file = files[(i % 5) as usize];
        let func = funcs[(i % 6) as usize];
        let loc = match i % 4 {
            0 => None,
            1 => Some(Location {
                lineno: i as i32 + 1,
                end_lineno: i as i32 + 3,
                column: -1,
                end_column: -1,
            }),
            _ => Some(Location {
                lineno: i as i32 * 7,
                end_lineno: i as i32 * 7,
                column: 4,
                end_column: 30,
            }),
        };
        let opcode = (i % 3 == 0).then_some((i * 2 % 200) as u8);
        frames.push(w.frame(file, func, loc, opcode));
    }
    let mut stacks: Vec<Vec<u32>> = vec![Vec::new(); 40];
    let mut ts = 5_000_000u64;
    for _ in 0..6_000 {
        ts += next() % 500;
        let t = (next() % 40) as usize;
        let r = next() % 10;
        if r < 4 {
            // Same stack again (REPEAT).
        } else if r < 7 && !stacks[t].is_empty() {
            let pop = (next() as usize % stacks[t].len()).min(3);
            stacks[t].drain(..pop);
            for _ in 0..(next() % 4) {
                stacks[t].insert(0, frames[(next() % 120) as usize]);
            }
        } else {
            let depth = if next() % 20 == 0 {
                250 + next() % 50
            } else {
                next() % 30
            } as usize;
            stacks[t] = (0..depth)
                .map(|_| frames[(next() % 120) as usize])
                .collect();
        }
        let tid = 1000 + t as u64 * 7919;
        let interp = (t % 3) as u32;
        w.write_sample(tid, interp, ts, (next() % 256) as u8, &stacks[t])
            .unwrap();
    }
    w.finish().unwrap();
}

fn replay_collapsed(tool: &Path, dir: &Path, input: &Path) -> String {
    let out = dir.join(format!(
        "{}.cpython.collapsed.txt",
        input.file_name().unwrap().to_string_lossy()
    ));
    crate::common::cpython_replay(tool, "--collapsed", &out, input, dir);
    std::fs::read_to_string(out).unwrap()
}

fn ours(input: &Path) -> String {
    let f = TachFile::open(input).unwrap();
    let mut out = Vec::new();
    export::export_to(
        export::find("collapsed").unwrap(),
        &f,
        &Default::default(),
        &Default::default(),
        &mut out,
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn files_tach_writes_replay_in_cpython_with_the_same_result() {
    let Some(tool) = cpython_chroot() else {
        return;
    };
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/interop");
    std::fs::create_dir_all(&dir).unwrap();
    let mut inputs = Vec::new();
    for (name, c) in [
        ("varied_none.tach", Compression::None),
        ("varied_zstd.tach", Compression::Zstd),
    ] {
        let p = dir.join(name);
        write_varied(&p, c);
        inputs.push(p);
    }
    // Golden files re-encoded with the other compression.
    for name in [
        "stdlib_tests_large.bin",
        "synthetic_many_threads_none.bin",
        "deep_recursion.bin",
    ] {
        let src = TachFile::open(golden_dir().join(name)).unwrap();
        let other = match src.header().compression {
            Compression::None => Compression::Zstd,
            Compression::Zstd => Compression::None,
        };
        let p = dir.join(format!("rewritten_{name}"));
        rewrite::rewrite(&src, rewrite::builder_like(&src).compression(other), &p).unwrap();
        inputs.push(p);
    }
    for input in &inputs {
        TachFile::open(input).unwrap().verify().unwrap();
        let theirs = replay_collapsed(&tool, &dir, input);
        let mine = ours(input);
        assert!(!mine.is_empty());
        assert!(
            theirs == mine,
            "{}: CPython's collapsed output differs from ours",
            input.display()
        );
    }
}
