fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let e = tach::export::find(&a[0]).unwrap();
    let f = tach::tach::TachFile::open(&a[1]).unwrap();
    let mut out = std::io::stdout().lock();
    tach::export::export_to(e, &f, &Default::default(), &Default::default(), &mut out).unwrap();
}
