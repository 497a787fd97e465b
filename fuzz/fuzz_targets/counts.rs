//! Fuzzes the chunked parallel counter against the sequential decoder: on any bytes,
//! both succeed with equal counts (same stacks under the same ids, same threads, same
//! groups in the same order) or both fail with the same error.
//!
//! The chunkings are tiny so that even a small input is cut into many chunks, decoded
//! on several threads from guessed record boundaries and joined: the route the reader
//! target never reaches (files under 64 KiB are counted sequentially).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tach::aggregate::StackCounts;
use tach::fuzzing::Chunking;
use tach::TachFile;

const CHUNKINGS: [Chunking; 3] = [
    Chunking {
        chunk: 64,
        overlap: 4096,
        search: 48,
        workers: 2,
    },
    Chunking {
        chunk: 300,
        overlap: 1500,
        search: 750,
        workers: 3,
    },
    Chunking {
        chunk: 1024,
        overlap: 2048,
        search: 1024,
        workers: 1,
    },
];

fuzz_target!(|data: &[u8]| {
    let Ok(file) = TachFile::from_bytes("fuzz.bin", data.to_vec()) else {
        return;
    };
    let sequential = StackCounts::count_sequential(&file).map_err(|e| e.to_string());
    for chunking in CHUNKINGS {
        let chunked = StackCounts::count_with(&file, chunking)
            .map(|(counts, _route)| counts)
            .map_err(|e| e.to_string());
        assert_eq!(chunked, sequential, "{chunking:?}");
    }
});
