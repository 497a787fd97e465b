//! The sampler against fake interpreters in fake memory.

use super::stack::FRAME_OWNED_BY_GENERATOR;
use super::window::{Snapshot, PAGE};
use super::*;
use crate::record::interpreter::layout::test_offsets::offsets;
use crate::record::interpreter::layout::{field_u64, FrameOwner, LineTableFormat, Offsets};
use crate::record::interpreter::layout::{InterpreterLayout, OpcodeTables};
use crate::record::interpreter::resolve::Types;
use crate::record::process::memory::FakeMemory;
use crate::record::process::memory::{MemoryReader, ReadError};
use crate::tach::filter::status::UNKNOWN;
use std::sync::atomic::Ordering;

struct TestLayout(Offsets);

impl InterpreterLayout for TestLayout {
    fn version(&self) -> (u8, u8, u8) {
        (3, 99, 0)
    }
    fn describe(&self) -> String {
        "test".into()
    }
    fn offsets(&self) -> &Offsets {
        &self.0
    }
    fn current_frame(&self, _: &dyn MemoryReader, ts: &[u8]) -> Result<u64, ReadError> {
        field_u64(ts, self.0.thread.frame).ok_or(ReadError::Null)
    }
    fn current_frame_slot(&self, ts: u64, _: &[u8]) -> Result<Option<u64>, ReadError> {
        Ok(Some(ts + self.0.thread.frame))
    }
    fn frame_owner(&self, owner: u8) -> FrameOwner {
        match owner {
            0..=2 => FrameOwner::Python,
            3 => FrameOwner::Internal,
            _ => FrameOwner::Invalid,
        }
    }
}

/// Bytes in each region of `fake_interpreter`.
const SIZE: usize = 1 << 14;

/// Regions of a fake interpreter (runtime, frames, code objects, strings), with
/// the runtime's interpreter pointer, a filename, and four code objects `func0` to
/// `func3` of 8 code units (unit 5: a return instruction, 0x53) with a location
/// table. Returns the memory, the type pointers and the regions' addresses.
fn fake_interpreter() -> (FakeMemory, Types, [u64; 4]) {
    let (ra, rb, rc, rd) = (0x10_0000u64, 0x20_0000u64, 0x30_0000u64, 0x40_0000u64);
    let types = Types {
        code: 0x50_0008,
        unicode: 0x50_0010,
        bytes: 0x50_0018,
        none: 0x50_0020,
    };
    let mut m = FakeMemory::new();
    for r in [ra, rb, rc, rd] {
        m.map(r, vec![0; SIZE]);
    }
    m.put_u64(ra + 8, ra + 0x100);
    let put_str = |m: &mut FakeMemory, at: u64, text: &[u8]| {
        m.put_u64(at + 8, types.unicode);
        m.put_u64(at + 16, text.len() as u64);
        m.put(at + 32, &((1u32 << 2) | (1 << 5) | (1 << 6)).to_ne_bytes());
        m.put(at + 40, text);
    };
    put_str(&mut m, rd, b"file.py");
    m.put_u64(rd + 0x800 + 8, types.bytes);
    m.put_u64(rd + 0x800 + 16, 2);
    m.put(rd + 0x800 + 32, &[0x80 | (13 << 3) | 7, 2]);
    for c in 0..4u64 {
        put_str(&mut m, rd + 0x100 * (c + 1), format!("func{c}").as_bytes());
        let code = rc + 0x200 * c;
        m.put_u64(code + 8, types.code);
        m.put_u64(code + 16, 8);
        m.put_u64(code + 24, rd);
        m.put_u64(code + 32, rd + 0x100 * (c + 1));
        m.put_u64(code + 40, rd + 0x800);
        m.put(code + 48, &1i32.to_ne_bytes());
        for unit in 0..8u64 {
            let op: u8 = if unit == 5 { 0x53 } else { 0x01 };
            m.put(code + 64 + 2 * unit, &[op, 0]);
        }
    }
    (m, types, [ra, rb, rc, rd])
}

/// A well-formed interpreter image (runtime, interpreter, 4 threads, frame chains,
/// code objects, strings), then the same image with more and more words replaced
/// by random values: whatever the sampler reads, it must neither panic nor loop,
/// and the file must stay valid.
#[test]
fn corrupted_memory_never_panics() {
    let (image, types, regions) = chained_interpreter(false);
    garbage_rounds(image, types, regions, offsets(), "tach-garbage");
}

/// 3.9/3.10's frame objects (`f_lasti`, 3.10's line table, `co_code` of its own) in
/// the same image, corrupted the same way.
#[test]
fn corrupted_frame_objects_never_panic() {
    let (image, types, regions) = chained_interpreter(true);
    let mut o = offsets();
    o.frame.is_object = true;
    o.code.line_table = LineTableFormat::Linetable310;
    o.code.code = Some(56);
    o.frame.instr_is_prev = false;
    o.frame.executable_tag_mask = 0;
    garbage_rounds(image, types, regions, o, "tach-garbage-frames");
}

/// The fake interpreter with 4 threads and their frame chains: `_PyInterpreterFrame`s
/// in a data stack, or (`objects`) frame objects whose `f_lasti` is an index, with a
/// `co_code` bytes object of 8 units per code object.
fn chained_interpreter(objects: bool) -> (FakeMemory, Types, [u64; 4]) {
    let (mut image, types, [ra, rb, rc, rd]) = fake_interpreter();
    if objects {
        image.put_u64(rd + 0x900 + 8, types.bytes);
        image.put_u64(rd + 0x900 + 16, 16);
        for c in 0..4u64 {
            image.put_u64(rc + 0x200 * c + 56, rd + 0x900);
        }
    }
    let interp = ra + 0x100;
    image.put_u64(ra + 32, 1); // GIL locked, by thread 0
    image.put_u64(ra + 40, ra + 0x200);
    image.put_u64(interp + 16, ra + 0x200);
    for t in 0..4u64 {
        let ts = ra + 0x200 + 0x100 * t;
        let next = if t < 3 { ts + 0x100 } else { 0 };
        image.put_u64(ts + 8, next);
        image.put_u64(ts + 16, interp);
        image.put_u64(ts + 32, 100 + t);
        // frames: a chain of 20 + 10t frames, each caller just below its callee
        let depth = 20 + 10 * t;
        let base = rb + 0x1000 * t;
        for j in 0..depth {
            let f = base + 64 * j;
            image.put_u64(f, if j == 0 { 0 } else { f - 64 });
            let code = rc + 0x200 * (j % 4);
            image.put_u64(f + 8, code);
            if objects {
                // f_lasti: -1 (not started) for some, else a unit index.
                let lasti = if j % 5 == 4 { -1 } else { (j % 8) as i32 };
                image.put(f + 16, &lasti.to_ne_bytes());
            } else {
                image.put_u64(f + 16, code + 64 + 2 * (j % 8));
            }
        }
        image.put_u64(ts + 24, base + 64 * (depth - 1));
    }
    (image, types, [ra, rb, rc, rd])
}

/// Samples `image`, intact then with more and more random words, 50 ticks a round.
fn garbage_rounds(image: FakeMemory, types: Types, regions: [u64; 4], o: Offsets, name: &str) {
    let [ra, rb, rc, rd] = regions;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for round in 0..40u64 {
        let mut mem = image.clone();
        // round 0: intact; then up to 200 random words per region
        for _ in 0..round * 5 {
            let region = [ra, rb, rc, rd][(rand() % 4) as usize];
            let at = region + (rand() % (SIZE as u64 / 8)) * 8;
            let v = match rand() % 4 {
                0 => [ra, rb, rc, rd][(rand() % 4) as usize] + rand() % SIZE as u64,
                1 => rand() % 8,
                2 => types.code,
                _ => rand(),
            };
            mem.put_u64(at, v);
        }
        let target = Target {
            mem: Box::new(mem),
            layout: Box::new(TestLayout(o.clone())),
            runtime: ra,
            types,
            pid: 100,
            opcodes: None,
        };
        let path = dir.join(format!("g{round}.tach"));
        let mut opts = RecordOptions::new(&path);
        // every fourth round: the main thread only (its cached thread state)
        opts.all_threads = round % 4 != 3;
        opts.mode = [
            ProfilingMode::Wall,
            ProfilingMode::Gil,
            ProfilingMode::Exception,
        ][(round % 3) as usize];
        let mut s = Sampler::new(target, opts).unwrap();
        for t in 0..50 {
            s.tick(1000 + t);
        }
        let stats = s.finish(1_000_000);
        assert_eq!(stats.ticks, 50);
        assert!(stats.error.is_none());
        if round == 0 {
            // the intact image: every thread sampled at every tick, full stacks
            assert_eq!(
                (stats.samples, stats.dropped, stats.error_ticks),
                (200, 0, 0)
            );
        }
        let f = crate::tach::TachFile::open(&path).unwrap();
        let samples = f.collect_samples().unwrap();
        if round == 0 {
            let depths: Vec<usize> = samples.iter().take(4).map(|s| s.stack.len()).collect();
            assert_eq!(depths, [20, 30, 40, 50]);
            assert_eq!(samples[0].status, HAS_GIL | UNKNOWN | MAIN_THREAD);
            assert_eq!(f.funcname(samples[0].stack[0]), "func3");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Records `ticks` samples of one thread whose frame chain is `frames`, innermost
/// first: (code object 0-3, or `None` for a cleared code pointer; instruction index;
/// stacktop). Code object `c` is `func{c}`; its unit 5 is a return instruction.
fn record_chain(
    frames: &[(Option<u64>, u64, i32)],
    o: Offsets,
    ticks: u64,
) -> (RecordStats, Vec<Vec<String>>) {
    record_chain_owned(frames, 0, o, ticks)
}

/// As `record_chain`, with `owner` as the innermost frame's owner.
fn record_chain_owned(
    frames: &[(Option<u64>, u64, i32)],
    owner: u8,
    o: Offsets,
    ticks: u64,
) -> (RecordStats, Vec<Vec<String>>) {
    record_chain_with(frames, owner, o, ticks, None)
}

/// As `record_chain_owned`, with the target's opcode tables.
fn record_chain_with(
    frames: &[(Option<u64>, u64, i32)],
    owner: u8,
    o: Offsets,
    ticks: u64,
    opcodes: Option<OpcodeTables>,
) -> (RecordStats, Vec<Vec<String>>) {
    let (mut m, types, [ra, rb, rc, _]) = fake_interpreter();
    let interp = ra + 0x100;
    let ts = ra + 0x200;
    m.put_u64(interp + 16, ts);
    m.put_u64(ts + 16, interp);
    m.put_u64(ts + 32, 100);
    // Callers just below their callees, as in a data stack.
    let n = frames.len() as u64;
    let at = |j: u64| rb + 0x1000 + 64 * (n - 1 - j);
    for (j, &(code, instr, stacktop)) in frames.iter().enumerate() {
        let (j, f) = (j as u64, at(j as u64));
        m.put_u64(f, if j + 1 == n { 0 } else { at(j + 1) });
        let code = code.map_or(0, |c| rc + 0x200 * c);
        m.put_u64(f + 8, code);
        m.put_u64(f + 16, code + 64 + 2 * instr);
        m.put(f + 28, &stacktop.to_ne_bytes());
        if j == 0 {
            m.put(f + 24, &[owner]);
        }
    }
    m.put_u64(ts + 24, at(0));
    let target = Target {
        mem: Box::new(m),
        layout: Box::new(TestLayout(o)),
        runtime: ra,
        types,
        pid: 100,
        opcodes,
    };
    let dir = std::env::temp_dir().join(format!("tach-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.tach", unique_name()));
    let mut s = Sampler::new(target, RecordOptions::new(&path)).unwrap();
    for t in 0..ticks {
        s.tick(1000 + t);
    }
    let stats = s.finish(1_000_000);
    let f = crate::tach::TachFile::open(&path).unwrap();
    let stacks = f
        .collect_samples()
        .unwrap()
        .iter()
        .map(|s| s.stack.iter().map(|&i| f.funcname(i).to_string()).collect())
        .collect();
    let _ = std::fs::remove_file(&path);
    (stats, stacks)
}

/// A file name per recording, so that tests running at once do not share one.
fn unique_name() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_snapshot_reads_its_fields_even_when_a_lower_page_is_unmapped() {
    // The data stack's mapping starts at `stack`; the pages below are unmapped.
    let (stack, ts) = (0x20_0000u64, 0x10_0000u64);
    let mut m = FakeMemory::new();
    m.map(stack, vec![0; 2 * PAGE as usize]);
    m.map(ts, vec![0; 256]);
    let frame = stack + PAGE + 128;
    m.put_u64(ts + 24, frame);
    m.put_u64(ts + 40, 7);
    m.put_u64(ts + 48, 9);
    let mut w = Window {
        pages: 4,
        ..Window::default()
    };
    let got = w.snapshot(&m, &[ts + 24], frame, 64, &[ts + 40, ts + 48], None);
    assert_eq!(got, Snapshot::At(frame));
    assert_eq!(w.fields, [Some(7), Some(9)]);
    // The two mapped pages were read, in address order; the read stopped below.
    assert_eq!(
        (w.base, w.len, w.truncated),
        (stack, 2 * PAGE as usize, true)
    );
    assert!(w.get(frame, 64).is_some());
    // A guess in another page: the pointer is reported where it is.
    let got = w.snapshot(&m, &[ts + 24], stack + 8, 64, &[], None);
    assert_eq!(got, Snapshot::Moved(frame));
}

#[test]
fn an_intact_chain_is_recorded_whole() {
    let chain = [
        (Some(0), 2, -1),
        (Some(1), 3, 4),
        (Some(2), 3, 4),
        (Some(3), 3, 4),
    ];
    let mut o = offsets();
    o.frame.stacktop = Some(28);
    o.frame.return_opcodes = Some([0x53, 0xFFFF]);
    let (stats, stacks) = record_chain(&chain, o, 3);
    assert_eq!((stats.samples, stats.dropped), (3, 0));
    for s in stacks {
        assert_eq!(s, names(&["func0", "func1", "func2", "func3"]));
    }
}

#[test]
fn frames_above_a_running_frame_are_gone() {
    // func1 runs (stacktop -1) though func0 sits above it: the thread returned from
    // func0 while the snapshot was taken.
    let chain = [
        (Some(0), 2, 4),
        (Some(1), 3, -1),
        (Some(2), 3, 4),
        (Some(3), 3, 4),
    ];
    let mut with = offsets();
    with.frame.stacktop = Some(28);
    let (_, stacks) = record_chain(&chain, with, 2);
    assert_eq!(stacks[0], names(&["func1", "func2", "func3"]));
    // Without the field (3.14+), the chain is taken as it is.
    let (_, stacks) = record_chain(&chain, offsets(), 2);
    assert_eq!(stacks[0], names(&["func0", "func1", "func2", "func3"]));
}

/// func2 (and func1) on unit 5, whose byte is RETURN_VALUE's (0x53), with callees
/// above them.
const ON_UNIT_5: [(Option<u64>, u64, i32); 4] = [
    (Some(0), 2, -1),
    (Some(1), 5, 4),
    (Some(2), 5, 4),
    (Some(3), 3, 4),
];

fn with_return_opcodes() -> Offsets {
    let mut o = offsets();
    o.frame.return_opcodes = Some([0x53, 0xFFFF]);
    o
}

#[test]
fn frames_above_a_returning_frame_are_gone() {
    // func2 is on its return instruction (unit 5) with callees above it.
    let (stats, stacks) = record_chain(&ON_UNIT_5, with_return_opcodes(), 3);
    assert_eq!(stats.dropped, 0);
    // The first sample learns the code objects' sizes; from the second, their
    // bytecode is read with their headers and the check applies.
    assert_eq!(stacks[0], names(&["func0", "func1", "func2", "func3"]));
    assert_eq!(stacks[1], names(&["func2", "func3"]));
    assert_eq!(stacks[2], names(&["func2", "func3"]));
    // The innermost frame on its return instruction is simply returning.
    let chain = [(Some(0), 5, -1), (Some(1), 3, 4)];
    let (_, stacks) = record_chain(&chain, with_return_opcodes(), 2);
    assert_eq!(stacks[1], names(&["func0", "func1"]));
}

#[test]
fn a_return_opcode_byte_in_a_callers_caches_is_not_a_return() {
    // 3.11: a caller's instruction pointer rests on the last cache entry of its call,
    // whose low byte (data: a function version) may equal RETURN_VALUE's opcode. With
    // one cache entry after each instruction, unit 5 (0x53) is such an entry: the
    // callees stay.
    let mut deopt = [0u8; 256];
    for (i, d) in deopt.iter_mut().enumerate() {
        *d = i as u8;
    }
    let mut caches = [0u8; 256];
    caches[0x01] = 1;
    let tables = OpcodeTables {
        deopt,
        caches: Some(caches),
    };
    let (stats, stacks) = record_chain_with(&ON_UNIT_5, 0, with_return_opcodes(), 3, Some(tables));
    assert_eq!(stats.dropped, 0);
    for s in stacks {
        assert_eq!(s, names(&["func0", "func1", "func2", "func3"]));
    }
}

#[test]
fn a_suspended_generator_frame_drops_the_sample() {
    // A coroutine frame with no caller: it yielded while the snapshot was taken.
    let chain = [(Some(0), 2, -1)];
    let (stats, _) = record_chain_owned(&chain, FRAME_OWNED_BY_GENERATOR, offsets(), 2);
    assert_eq!((stats.samples, stats.dropped), (0, 2));
    // Running, it links to the frame that resumed it.
    let chain = [(Some(0), 2, -1), (Some(1), 3, 4)];
    let (stats, stacks) = record_chain_owned(&chain, FRAME_OWNED_BY_GENERATOR, offsets(), 2);
    assert_eq!((stats.samples, stats.dropped), (2, 0));
    assert_eq!(stacks[0], names(&["func0", "func1"]));
}

#[test]
fn a_cleared_innermost_frame_is_skipped_and_a_cleared_caller_drops_the_sample() {
    // 3.14+ clear the code of a frame they pop: innermost, its caller runs now.
    let chain = [(None, 2, 0), (Some(1), 3, 4), (Some(2), 3, 4)];
    let (stats, stacks) = record_chain(&chain, offsets(), 2);
    assert_eq!((stats.samples, stats.dropped), (2, 0));
    assert_eq!(stacks[0], names(&["func1", "func2"]));
    // Deeper in the chain, the read is torn: taken again, then dropped.
    let chain = [(Some(0), 2, 0), (None, 3, 4), (Some(2), 3, 4)];
    let (stats, stacks) = record_chain(&chain, offsets(), 2);
    assert_eq!((stats.samples, stats.dropped), (0, 2));
    assert!(stacks.is_empty());
}
