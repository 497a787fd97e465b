//! Bad input: every truncation and single-byte change of several golden files gives a
//! clean error or a valid decode, never a panic; and crafted defects give the error
//! CPython's reader gives, with the file and byte offset.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::common::*;
use rayon::prelude::*;
use tach::{Compression, FormatError, TachFile, Writer};

/// Decodes `bytes` fully. Any outcome but a panic is acceptable.
fn decode(bytes: Vec<u8>) -> Result<u64, String> {
    let f = TachFile::from_bytes("corrupt.bin", bytes).map_err(|e| e.to_string())?;
    // Use what was decoded the way exporters do: every frame's strings.
    let mut frames = 0u64;
    let mix = f
        .for_each_sample(|s| {
            for &i in s.stack {
                frames += f.funcname(i).len() as u64 + f.filename(i).len() as u64;
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(mix.samples.iter().sum::<u64>() + frames)
}

fn walk(label: &str, original: &[u8]) {
    let check = |what: String, bytes: Vec<u8>| {
        let outcome = catch_unwind(AssertUnwindSafe(|| decode(bytes)));
        if let Ok(Err(msg)) = &outcome {
            assert!(
                msg.starts_with("corrupt.bin: "),
                "{what}: error lacks the file: {msg}"
            );
        }
        assert!(outcome.is_ok(), "{label}: {what} panicked");
    };
    (0..original.len()).into_par_iter().for_each(|len| {
        check(format!("truncated to {len}"), original[..len].to_vec());
    });
    // Each position with values that flip the low bit, the continuation bit, all bits,
    // and clear the byte: these cover varint lengths, counts, indices and tags.
    (0..original.len()).into_par_iter().for_each(|pos| {
        for change in [0x01u8, 0x80, 0xff] {
            let mut b = original.to_vec();
            b[pos] ^= change;
            check(format!("byte {pos} ^ {change:#x}"), b);
        }
        let mut b = original.to_vec();
        b[pos] = 0;
        check(format!("byte {pos} = 0"), b);
    });
}

#[test]
fn truncations_and_byte_changes_never_panic() {
    let dir = golden_dir();
    for name in [
        "synthetic_deep_stacks.bin",
        "cpu_recursive_opcodes.bin",
        "synthetic_timestamps.bin",
        "synthetic_empty_stacks.bin",
        "synthetic_empty_zstd.bin",
    ] {
        walk(name, &std::fs::read(dir.join(name)).unwrap());
    }
    walk("small uncompressed file", &varied_uncompressed());
}

/// An uncompressed file with every record kind, several threads, a stack past the
/// 256-frame cap, locations and opcodes: small enough to walk every byte.
fn varied_uncompressed() -> Vec<u8> {
    let mut buf = Cursor::new(Vec::new());
    let mut w = Writer::builder(1000)
        .start_time_us(10)
        .compression(Compression::None)
        .to_writer("memory", &mut buf)
        .unwrap();
    let f: Vec<u32> = (0..12)
        .map(|i| {
            let loc = (i % 3 != 0).then_some(tach::Location {
                lineno: i * 10,
                end_lineno: i * 10 + 1,
                column: i,
                end_column: i + 4,
            });
            w.frame(
                ["/a.py", "~", "b.py"][i as usize % 3],
                ["f", "<GC>", "g", "h"][i as usize % 4],
                loc,
                (i % 2 == 0).then_some(i as u8),
            )
        })
        .collect();
    let deep: Vec<u32> = (0..260).map(|i| f[i % 12]).collect();
    let stacks: [&[u32]; 7] = [
        &[f[0], f[1]],
        &[f[0], f[1]],       // REPEAT
        &[f[2], f[0], f[1]], // SUFFIX
        &[f[3], f[0], f[1]], // POP_PUSH
        &[f[4], f[5]],       // FULL
        &[],                 // FULL, empty
        &deep,               // FULL, capped at 256
    ];
    let mut ts = 10;
    for round in 0..3u64 {
        for (i, s) in stacks.iter().enumerate() {
            ts += 900 + i as u64;
            w.write_sample(100 + round % 2, (round % 2) as u32, ts, (i * 37) as u8, s)
                .unwrap();
        }
    }
    w.finish().unwrap();
    let bytes = buf.into_inner();
    let mix = TachFile::from_bytes("varied", bytes.clone())
        .unwrap()
        .verify()
        .unwrap();
    assert!(
        mix.records.iter().all(|&n| n > 0),
        "every record kind is present: {mix:?}"
    );
    bytes
}

/// A small valid uncompressed file to damage on purpose.
struct Sample {
    bytes: Vec<u8>,
}

fn small_file() -> Sample {
    let mut buf = Cursor::new(Vec::new());
    let mut w = Writer::builder(1000)
        .start_time_us(1_000)
        .compression(Compression::None)
        .to_writer("memory", &mut buf)
        .unwrap();
    let a = w.frame("/app/a.py", "a", None, None);
    let b = w.frame("/app/b.py", "b", None, None);
    w.write_sample(7, 0, 2_000, 1, &[a, b]).unwrap(); // FULL
    w.write_sample(7, 0, 3_000, 1, &[a, b]).unwrap(); // REPEAT
    w.finish().unwrap();
    Sample {
        bytes: buf.into_inner(),
    }
}

fn format_error(bytes: Vec<u8>) -> (FormatError, String) {
    let err = TachFile::from_bytes("bad.bin", bytes)
        .and_then(|f| f.verify().map(|_| ()))
        .expect_err("must be rejected");
    let msg = err.to_string();
    (err.format_error().expect("a format error").clone(), msg)
}

fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn header_defects_are_named_with_their_offset() {
    let good = small_file().bytes;
    TachFile::from_bytes("ok.bin", good.clone())
        .unwrap()
        .verify()
        .unwrap();

    let (e, msg) = format_error(good[..50].to_vec());
    assert!(matches!(e, FormatError::FileTooSmall { size: 50 }));
    assert!(
        msg.starts_with("bad.bin: byte 0 of the file: file too small"),
        "{msg}"
    );

    let mut b = good.clone();
    b[0] = b'X';
    let (e, msg) = format_error(b);
    assert!(matches!(e, FormatError::BadMagic(_)), "{msg}");

    let mut b = good.clone();
    set_u32(&mut b, 4, 2);
    let (e, msg) = format_error(b);
    assert!(matches!(e, FormatError::NewerVersion { version: 2, .. }));
    assert!(msg.contains("byte 4 of the file"), "{msg}");

    let mut b = good.clone();
    set_u32(&mut b, 60, 6);
    assert_eq!(format_error(b).0, FormatError::InvalidProfilingMode(6));

    let mut b = good.clone();
    set_u64(&mut b, 40, 1 << 40);
    assert!(matches!(
        format_error(b).0,
        FormatError::TableOffset {
            table: "string",
            ..
        }
    ));

    let mut b = good.clone();
    set_u64(&mut b, 48, 10);
    assert!(matches!(
        format_error(b).0,
        FormatError::TableOffset { table: "frame", .. }
    ));

    let mut b = good.clone();
    let frame_table = u64::from_le_bytes(b[48..56].try_into().unwrap());
    set_u64(&mut b, 40, frame_table + 1);
    assert!(matches!(
        format_error(b).0,
        FormatError::TablesOutOfOrder { .. }
    ));

    // Counts in the footer larger than the bytes left could hold.
    let mut b = good.clone();
    let footer = b.len() - 32;
    set_u32(&mut b, footer, u32::MAX);
    assert!(matches!(
        format_error(b).0,
        FormatError::CountTooLarge {
            table: "string",
            ..
        }
    ));
    let mut b = good.clone();
    set_u32(&mut b, footer + 4, u32::MAX);
    assert!(matches!(
        format_error(b).0,
        FormatError::CountTooLarge { table: "frame", .. }
    ));
}

#[test]
fn sample_defects_are_named_with_their_offset() {
    let good = small_file().bytes;
    // The first record starts at byte 64: thread id 7, interpreter 0, FULL.
    assert_eq!(good[64 + 12], 1);

    let mut b = good.clone();
    set_u32(&mut b, 36, 0); // thread_count 0
    let (e, msg) = format_error(b);
    assert_eq!(
        e,
        FormatError::TooManyThreads {
            declared: 0,
            found: 1
        }
    );
    assert!(msg.contains("byte 64 of the file"), "{msg}");

    let mut b = good.clone();
    set_u64(&mut b, 28, 3); // sample_count
    assert_eq!(
        format_error(b).0,
        FormatError::SampleCountMismatch {
            declared: 3,
            decoded: 2
        }
    );

    let mut b = good.clone();
    b[64 + 12] = 9;
    let (e, msg) = format_error(b);
    assert_eq!(e, FormatError::UnknownEncoding(9));
    assert!(msg.contains("byte 76 of the file"), "{msg}");

    // FULL body: delta varint (1 byte: 1000 needs 2), status, depth, frames.
    let body = 64 + 13;
    let depth_at = body + 2 + 1;
    assert_eq!(good[depth_at], 2);
    let mut b = good.clone();
    b[depth_at + 1] = 5; // frame index 5 of 2
    assert_eq!(
        format_error(b).0,
        FormatError::FrameIndex { index: 5, count: 2 }
    );

    // Turn the FULL into a SUFFIX sharing 3 frames of an empty stack.
    let mut b = good.clone();
    b[64 + 12] = 2;
    b[depth_at] = 3;
    assert_eq!(
        format_error(b).0,
        FormatError::SharedExceedsDepth {
            shared: 3,
            depth: 0
        }
    );

    // Trailing bytes after the last record.
    let mut b = good.clone();
    let st = u64::from_le_bytes(b[40..48].try_into().unwrap()) as usize;
    b.insert(st, 0xAA);
    let ft = u64::from_le_bytes(b[48..56].try_into().unwrap());
    set_u64(&mut b, 40, st as u64 + 1);
    set_u64(&mut b, 48, ft + 1);
    assert_eq!(format_error(b).0, FormatError::TruncatedSamples(1));
}

#[test]
fn deep_stacks_are_rejected_like_cpython() {
    // A FULL record claiming 257 frames.
    let good = small_file().bytes;
    let depth_at = 64 + 13 + 2 + 1;
    let mut b = good.clone();
    // 257 as a varint is two bytes; splice it in place of the one-byte depth.
    b.splice(depth_at..depth_at + 1, [0x81, 0x02]);
    let st = u64::from_le_bytes(b[40..48].try_into().unwrap());
    let ft = u64::from_le_bytes(b[48..56].try_into().unwrap());
    set_u64(&mut b, 40, st + 1);
    set_u64(&mut b, 48, ft + 1);
    let (e, msg) = format_error(b);
    assert_eq!(e, FormatError::StackDepth(257));
    assert!(
        msg.contains("stack depth 257 exceeds capacity 256"),
        "{msg}"
    );
}

#[test]
fn truncated_zstd_is_reported_in_the_decompressed_stream() {
    let bytes = std::fs::read(golden_dir().join("cpu_recursive.bin")).unwrap();
    let f = TachFile::open(golden_dir().join("cpu_recursive.bin")).unwrap();
    let st = f.header().string_table_offset as usize;
    // Cut the compressed stream in half but keep tables and footer.
    let cut = 64 + (st - 64) / 2;
    let mut b = bytes[..cut].to_vec();
    b.extend_from_slice(&bytes[st..]);
    let delta = (st - cut) as u64;
    let ft = u64::from_le_bytes(b[48..56].try_into().unwrap());
    set_u64(&mut b, 40, cut as u64);
    set_u64(&mut b, 48, ft - delta);
    let (e, msg) = format_error(b);
    assert!(
        matches!(e, FormatError::TruncatedZstd | FormatError::Zstd(_)),
        "{msg}"
    );
    assert!(msg.contains("of the decompressed sample data"), "{msg}");
}
