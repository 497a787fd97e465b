//! Property tests: random sample sequences survive write then read unchanged, with and
//! without compression.

use std::io::Cursor;

use proptest::prelude::*;
use tach::{Compression, Location, TachFile, Writer, MAX_STACK_DEPTH};

#[derive(Debug, Clone)]
struct FrameSpec {
    file: usize,
    func: usize,
    location: Option<(i32, i32, i32, i32)>,
    opcode: Option<u8>,
}

#[derive(Debug, Clone)]
struct SampleSpec {
    thread: usize,
    timestamp_us: u64,
    status: u8,
    stack: Vec<usize>,
}

const NAMES: [&str; 6] = ["/app/main.py", "~", "<string>", "módulo_ñ.py", "", "🐍.py"];

fn frame_spec() -> impl Strategy<Value = FrameSpec> {
    let location = prop_oneof![
        Just(None),
        Just(Some((-1, -1, -1, -1))),
        (0..100_000i32, 0..50i32).prop_map(|(l, d)| Some((l, l + d, -1, -1))),
        (0..100_000i32, 0..50i32, 0..200i32, 0..80i32).prop_map(|(l, d, c, w)| Some((
            l,
            l + d,
            c,
            c + w
        ))),
    ];
    let opcode = prop_oneof![
        Just(None),
        Just(Some(0u8)),
        Just(Some(254u8)),
        any::<u8>().prop_map(|o| Some(o.min(254)))
    ];
    (0..NAMES.len(), 0..NAMES.len(), location, opcode).prop_map(|(file, func, location, opcode)| {
        FrameSpec {
            file,
            func,
            location,
            opcode,
        }
    })
}

/// Frames, (thread_id, interpreter_id) pairs, samples, and the start time.
type Profile = (Vec<FrameSpec>, Vec<(u64, u32)>, Vec<SampleSpec>, u64);

fn profile() -> impl Strategy<Value = Profile> {
    (
        prop::collection::vec(frame_spec(), 1..40),
        prop::collection::vec((any::<u64>(), 0..4u32), 1..12),
        any::<u64>(),
    )
        .prop_flat_map(|(frames, threads, start)| {
            let nf = frames.len();
            let nt = threads.len();
            let depth = prop_oneof![
                4 => 0..12usize,
                1 => 250..300usize,
            ];
            let sample = (
                0..nt,
                prop_oneof![Just(0u64), 0..2_000u64, any::<u64>()],
                any::<u8>(),
                depth.prop_flat_map(move |d| prop::collection::vec(0..nf, d)),
                any::<bool>(),
            );
            (
                Just(frames),
                Just(threads),
                prop::collection::vec(sample, 0..120),
                Just(start),
            )
        })
        .prop_map(|(frames, threads, raw, start)| {
            // Deltas accumulate into timestamps that may wrap; repeats reuse the
            // previous stack of the same thread to exercise REPEAT records.
            let mut ts = start;
            let mut last: Vec<Option<Vec<usize>>> = vec![None; threads.len()];
            let samples = raw
                .into_iter()
                .map(|(thread, delta, status, stack, repeat)| {
                    ts = ts.wrapping_add(delta);
                    let stack = match (&last[thread], repeat) {
                        (Some(prev), true) => prev.clone(),
                        _ => stack,
                    };
                    last[thread] = Some(stack.clone());
                    SampleSpec {
                        thread,
                        timestamp_us: ts,
                        status,
                        stack,
                    }
                })
                .collect();
            (frames, threads, samples, start)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn samples_survive_write_then_read(
        (frames, threads, samples, start) in profile(),
        zstd in any::<bool>(),
    ) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let mut buf = Cursor::new(Vec::new());
        let mut w = Writer::builder(1000)
            .start_time_us(start)
            .compression(compression)
            .to_writer("memory", &mut buf)
            .unwrap();
        let ids: Vec<u32> = frames
            .iter()
            .map(|f| {
                w.frame(
                    NAMES[f.file],
                    NAMES[f.func],
                    f.location.map(|(lineno, end_lineno, column, end_column)| Location {
                        lineno,
                        end_lineno,
                        column,
                        end_column,
                    }),
                    f.opcode,
                )
            })
            .collect();
        for s in &samples {
            let stack: Vec<u32> = s.stack.iter().map(|&i| ids[i]).collect();
            let (tid, iid) = threads[s.thread];
            w.write_sample(tid, iid, s.timestamp_us, s.status, &stack).unwrap();
        }
        w.finish().unwrap();
        let file = TachFile::from_bytes("memory", buf.into_inner()).unwrap();
        prop_assert_eq!(file.header().sample_count, samples.len() as u64);
        let decoded = file.collect_samples().unwrap();
        // Per thread, in order (REPEAT records batch a thread's samples together).
        for (slot, &(tid, iid)) in threads.iter().enumerate() {
            let want: Vec<_> = samples
                .iter()
                .filter(|s| s.thread == slot || threads[s.thread] == (tid, iid))
                .map(|s| {
                    let stack: Vec<u32> =
                        s.stack.iter().take(MAX_STACK_DEPTH).map(|&i| ids[i]).collect();
                    (s.timestamp_us, s.status, stack)
                })
                .collect();
            let got: Vec<_> = decoded
                .iter()
                .filter(|d| (d.thread_id, d.interpreter_id) == (tid, iid))
                .map(|d| (d.timestamp_us, d.status, d.stack.clone()))
                .collect();
            prop_assert_eq!(got, want);
        }
        // Frames read back with CPython's normalisation.
        for (spec, &id) in frames.iter().zip(&ids) {
            let e = file.frames()[id as usize];
            prop_assert_eq!(file.string(e.filename), NAMES[spec.file]);
            prop_assert_eq!(file.string(e.funcname), NAMES[spec.func]);
            prop_assert_eq!(e.opcode(), spec.opcode);
            match spec.location {
                None | Some((-1, _, _, _)) => prop_assert_eq!(e.location(), None),
                Some((l, el, c, ec)) => {
                    let loc = e.location().unwrap();
                    prop_assert_eq!((loc.lineno, loc.end_lineno, loc.column, loc.end_column), (l, el, c, ec));
                }
            }
        }
    }
}
