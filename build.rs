//! Build script: links the `tach` binary at a fixed address (see below). Nothing here
//! depends on a Python installation: the recorder's interpreter layouts are data in the
//! repository (`src/record/layout/generated.rs`, made by `scripts/gen-layouts`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The `tach` binary links polars. As a position-independent executable it carries
    // ~150,000 relative relocations that the loader applies at every start (measured:
    // 2-3 ms, more than a small export's own work). Linked at a fixed address, none are
    // left (the library code is still position independent, which such a link allows).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
