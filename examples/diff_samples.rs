fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let x = tach::tach::TachFile::open(&a[0]).unwrap();
    let y = tach::tach::TachFile::open(&a[1]).unwrap();
    let mut sx = x.samples(); let mut sy = y.samples();
    let mut i = 0u64;
    loop {
        let p = sx.next_sample().unwrap().map(|s| (s.to_owned(), s.kind, s.thread));
        let q = sy.next_sample().unwrap().map(|s| (s.to_owned(), s.kind, s.thread));
        if p.is_none() && q.is_none() { break; }
        let (p, q) = (p.unwrap(), q.unwrap());
        let fx: Vec<_> = p.0.stack.iter().map(|&f| x.frames()[f as usize]).collect();
        let fy: Vec<_> = q.0.stack.iter().map(|&f| y.frames()[f as usize]).collect();
        if p.1 != q.1 || fx.len() != fy.len() || p.0.timestamp_us != q.0.timestamp_us {
            println!("sample {i}: {:?} {:?} depth {} vs {} ts {} {}", p.1, q.1, fx.len(), fy.len(), p.0.timestamp_us, q.0.timestamp_us);
            println!("  x stack {:?}\n  y stack {:?}", p.0.stack, q.0.stack);
            i += 1; if i > 3 {break;}
        }
        i += 1;
    }
}
