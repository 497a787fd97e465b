//! Fuzzes the native unwinder (`tach record --native`): registers and a stack image
//! from the input, walked with the fuzz binary's own unwind tables. Any input must end
//! the walk within its frame and page limits, without a panic (`record::native`'s
//! `fuzzing` module says how the bytes become addresses).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tach::fuzzing::native_walk(data);
});
