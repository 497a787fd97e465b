//! The reader and writer against files written by CPython 3.15.2 and CPython's own
//! answers for them.

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;

use crate::common::*;
use tach::{rewrite, Compression, TachFile, Writer, MAX_STACK_DEPTH};

#[test]
fn every_golden_file_verifies() {
    for bin in golden_bins() {
        let f = TachFile::open(&bin).unwrap_or_else(|e| panic!("{e}"));
        let mix = f.verify().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            mix.samples.iter().sum::<u64>(),
            f.header().sample_count,
            "{}",
            bin.display()
        );
    }
}

/// A frame as CPython's reader reports it: (filename, funcname, location, opcode).
type ReadFrame = (String, String, Option<[i64; 4]>, Option<i64>);
/// Per (thread_id, interpreter_id): the samples in order as (timestamp, status, stack).
type PerThread = BTreeMap<(u64, u32), Vec<(u64, u8, Vec<ReadFrame>)>>;

/// What CPython's writer stores for a frame given to it, as its reader gives it back:
/// end values are rebuilt from deltas (a -1 end next to a real start reads back as the
/// start), and lineno -1 means no location.
fn normalise(f: &FedFrame) -> ReadFrame {
    let location = f.location.and_then(|[line, end_line, col, end_col]| {
        if line == -1 {
            return None;
        }
        let end_line = if end_line == -1 { line } else { end_line };
        let end_col = if col == -1 {
            -1
        } else if end_col == -1 {
            col
        } else {
            end_col
        };
        Some([line, end_line, col, end_col])
    });
    (f.filename.clone(), f.funcname.clone(), location, f.opcode)
}

fn expected_per_thread(fed: &[FedSample]) -> PerThread {
    let mut out = PerThread::new();
    for s in fed {
        let frames = s
            .frames
            .iter()
            .take(MAX_STACK_DEPTH)
            .map(normalise)
            .collect();
        out.entry((s.thread_id, s.interpreter_id))
            .or_default()
            .push((s.timestamp_us, s.status, frames));
    }
    out
}

fn decoded_per_thread(f: &TachFile) -> PerThread {
    let mut out = PerThread::new();
    f.for_each_sample(|s| {
        let frames = s
            .stack
            .iter()
            .map(|&i| {
                let e = f.frames()[i as usize];
                (
                    f.string(e.filename).to_owned(),
                    f.string(e.funcname).to_owned(),
                    e.location().map(|l| {
                        [
                            l.lineno as i64,
                            l.end_lineno as i64,
                            l.column as i64,
                            l.end_column as i64,
                        ]
                    }),
                    e.opcode().map(|o| o as i64),
                )
            })
            .collect();
        out.entry((s.thread_id, s.interpreter_id))
            .or_default()
            .push((s.timestamp_us, s.status, frames));
    })
    .unwrap();
    out
}

#[test]
fn synthetic_files_decode_to_the_samples_cpython_was_given() {
    let mut checked = 0;
    for bin in golden_bins() {
        let Some((expected, fed)) = fed_to_writer(&bin) else {
            continue;
        };
        let f = TachFile::open(&bin).unwrap();
        let want = expected_per_thread(&fed);
        let got = decoded_per_thread(&f);
        assert_eq!(got.len(), want.len(), "{}: thread count", name(&bin));
        for (key, want_samples) in &want {
            let got_samples = &got[key];
            assert_eq!(
                got_samples.len(),
                want_samples.len(),
                "{} thread {key:?}: sample count",
                name(&bin)
            );
            for (i, (g, w)) in got_samples.iter().zip(want_samples).enumerate() {
                assert_eq!(g, w, "{} thread {key:?} sample {i}", name(&bin));
            }
        }
        assert_eq!(
            f.header().sample_count,
            expected["writer_total_samples"].as_u64().unwrap()
        );
        checked += 1;
    }
    assert_eq!(checked, 8, "every synthetic golden file was compared");
}

/// Per-thread stack counts from CPython's collapsed export: {(tid, frames text): count}.
fn collapsed_counts(text: &str) -> HashMap<String, u64> {
    text.lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').unwrap();
            (stack.to_owned(), count.parse().unwrap())
        })
        .collect()
}

#[test]
fn recorded_files_have_cpythons_per_thread_stack_counts() {
    let mut checked = 0;
    for bin in golden_bins() {
        if golden_sibling(&bin, ".expected.json").is_some() {
            continue;
        }
        let want = collapsed_counts(
            &String::from_utf8(golden_sibling(&bin, ".collapsed.txt").unwrap()).unwrap(),
        );
        // Counted straight from decoded samples, rendered as CPython renders frames.
        let f = TachFile::open(&bin).unwrap();
        let mut got: HashMap<String, u64> = HashMap::new();
        f.for_each_sample(|s| {
            let frames: Vec<String> = s
                .stack
                .iter()
                .rev()
                .filter(|&&i| !f.filename(i).ends_with("_sync_coordinator.py"))
                .map(|&i| {
                    let e = f.frames()[i as usize];
                    let line = if e.lineno == -1 { 0 } else { e.lineno };
                    let file = f.string(e.filename);
                    if file == "~" && line == 0 {
                        f.string(e.funcname).to_owned()
                    } else {
                        let base = file.rsplit('/').next().unwrap();
                        format!("{base}:{}:{line}", f.string(e.funcname))
                    }
                })
                .collect();
            if !frames.is_empty() {
                *got.entry(format!("tid:{};{}", s.thread_id, frames.join(";")))
                    .or_default() += 1;
            }
        })
        .unwrap();
        assert_eq!(got, want, "{}", name(&bin));
        checked += 1;
    }
    assert_eq!(checked, 10, "every recorded golden file was compared");
}

/// The sample region after decompression.
fn decoded_region(f: &TachFile) -> Vec<u8> {
    match f.header().compression {
        Compression::None => f.sample_region().to_vec(),
        Compression::Zstd => zstd::stream::decode_all(f.sample_region()).unwrap(),
    }
}

fn rewrite_in_memory(src: &TachFile, compression: Compression) -> Vec<u8> {
    let mut buf = Cursor::new(Vec::new());
    {
        let mut w = rewrite::builder_like(src)
            .compression(compression)
            .to_writer("memory", &mut buf)
            .unwrap();
        rewrite::copy_samples(src, &mut w).unwrap();
        w.finish().unwrap();
    }
    buf.into_inner()
}

#[test]
fn reencoding_reproduces_every_golden_file() {
    for bin in golden_bins() {
        let original_bytes = std::fs::read(&bin).unwrap();
        let src = TachFile::open(&bin).unwrap();
        let again = rewrite_in_memory(&src, src.header().compression);
        let copy = TachFile::from_bytes("rewritten", again.clone()).unwrap();
        // The criterion: identical sample stream, tables, stats and footer counts.
        assert_eq!(
            decoded_region(&copy),
            decoded_region(&src),
            "{}",
            name(&bin)
        );
        let tail = |f: &TachFile| f.raw_bytes()[f.header().string_table_offset as usize..].to_vec();
        let (mut a, mut b) = (tail(&copy), tail(&src));
        // The footer's file_size differs when the compressed size does.
        a.truncate(a.len() - 24);
        b.truncate(b.len() - 24);
        assert_eq!(a, b, "{}: tables and stats", name(&bin));
        let mut h1 = copy.header().clone();
        let h2 = src.header().clone();
        h1.string_table_offset = h2.string_table_offset;
        h1.frame_table_offset = h2.frame_table_offset;
        assert_eq!(h1, h2, "{}: header", name(&bin));
        // Stronger, and true today: with the same libzstd (1.5.7) as CPython's, the whole
        // file is byte-identical, compressed or not.
        assert!(
            again == original_bytes,
            "{}: not byte-identical",
            name(&bin)
        );
    }
}

#[test]
fn changing_compression_keeps_the_samples() {
    for bin in golden_bins() {
        let src = TachFile::open(&bin).unwrap();
        for c in [Compression::None, Compression::Zstd] {
            let copy = TachFile::from_bytes("rewritten", rewrite_in_memory(&src, c)).unwrap();
            assert_eq!(copy.header().compression, c);
            assert_eq!(
                decoded_region(&copy),
                decoded_region(&src),
                "{}",
                name(&bin)
            );
            assert_eq!(
                copy.collect_samples().unwrap(),
                src.collect_samples().unwrap()
            );
        }
    }
}

#[test]
fn writer_reproduces_synthetic_files_from_their_inputs() {
    // Feed the exact samples CPython's writer was given, in the same order.
    for bin in golden_bins() {
        let Some((_, fed)) = fed_to_writer(&bin) else {
            continue;
        };
        let src = TachFile::open(&bin).unwrap();
        if src.header().compression != Compression::None {
            continue;
        }
        let mut buf = Cursor::new(Vec::new());
        {
            let mut w = rewrite::builder_like(&src)
                .to_writer("memory", &mut buf)
                .unwrap();
            for s in &fed {
                let stack: Vec<u32> = s
                    .frames
                    .iter()
                    .take(MAX_STACK_DEPTH)
                    .map(|f| {
                        let loc = f.location.map(|[lineno, end_lineno, column, end_column]| {
                            tach::Location {
                                lineno: lineno as i32,
                                end_lineno: end_lineno as i32,
                                column: column as i32,
                                end_column: end_column as i32,
                            }
                        });
                        w.frame(&f.filename, &f.funcname, loc, f.opcode.map(|o| o as u8))
                    })
                    .collect();
                w.write_sample(
                    s.thread_id,
                    s.interpreter_id,
                    s.timestamp_us,
                    s.status,
                    &stack,
                )
                .unwrap();
            }
            w.finish().unwrap();
        }
        assert!(
            buf.into_inner() == std::fs::read(&bin).unwrap(),
            "{}: writer output differs from CPython's",
            name(&bin)
        );
    }
}

#[allow(unused)]
fn unused(_: Writer<std::fs::File>) {}
