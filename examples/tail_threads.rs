fn main() {
    for a in std::env::args().skip(1) {
        let x = tach::tach::TachFile::open(&a).unwrap();
        let mut s = x.samples(); let mut i = 0u64; let mut out = vec![];
        let mut last = (u32::MAX, None);
        while let Some(v) = s.next_sample().unwrap() {
            if i >= 75900 { let key = (v.thread, Some(v.kind)); if key != last || v.stack_changed { out.push(format!("{}:{:?}@{}", v.thread, v.kind, i)); last = key; } }
            i += 1;
        }
        println!("{a}\n{}", out.join(" "));
    }
}
