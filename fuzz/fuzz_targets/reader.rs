//! Fuzzes the reader: any bytes must give a clean error or a valid decode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tach::TachFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = TachFile::from_bytes("fuzz.bin", data.to_vec()) {
        let mut chars = 0usize;
        let _ = file.for_each_sample(|s| {
            for &f in s.stack {
                chars += file.funcname(f).len() + file.filename(f).len();
            }
        });
        let _ = file.frames().iter().map(|f| f.location()).count();
        std::hint::black_box(chars);
    }
});
