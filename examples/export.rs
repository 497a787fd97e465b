//! Exports a TACH file with any exporter, by the name `tach export --NAME` takes:
//! into a file, or into memory.
//!
//! `cargo run --example export -- golden/cpython-3.15.2/cpu_recursive.bin collapsed out.txt`
//! (`-` as the output prints the export's size instead of writing a file).

use std::path::Path;

use tach::export::{self, ExportOptions};
use tach::{SampleFilter, TachFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, name, output] = args.as_slice() else {
        return Err(format!(
            "usage: export FILE.bin FORMAT OUT (FORMAT: {})",
            export::names().join(", ")
        )
        .into());
    };
    let exporter = export::find(name).ok_or_else(|| format!("no exporter called {name}"))?;
    let options = ExportOptions::default();
    let everything = SampleFilter::default();

    if output == "-" {
        // Into memory: any `std::io::Write` will do.
        let file = TachFile::open(input)?;
        let mut bytes = Vec::new();
        export::export_to(exporter, &file, &everything, &options, &mut bytes)?;
        println!("{name}: {} bytes", bytes.len());
    } else {
        // Into a file, written whole or not at all.
        export::export_file(
            exporter,
            Path::new(input),
            Path::new(output),
            &everything,
            &options,
        )?;
        println!("wrote {output}");
    }
    Ok(())
}
