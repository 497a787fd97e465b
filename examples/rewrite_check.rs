fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for a in &args {
        let f = tach::tach::TachFile::open(a).unwrap();
        let out = std::path::Path::new("/tmp").join(std::path::Path::new(a).file_name().unwrap());
        tach::tach::rewrite::rewrite(&f, tach::tach::rewrite::builder_like(&f), &out).unwrap();
        let same = std::fs::read(a).unwrap() == std::fs::read(&out).unwrap();
        println!("{a}: identical={same}");
    }
}
