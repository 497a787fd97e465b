fn main() {
    for arg in std::env::args().skip(1) {
        match tach::tach::TachFile::open(&arg) {
            Ok(f) => match f.verify() {
                Ok(mix) => println!("{arg}: ok {:?} hdr samples {}", mix.records, f.header().sample_count),
                Err(e) => println!("ERR {e}"),
            },
            Err(e) => println!("ERR {e}"),
        }
    }
}
