//! Build script. With the `python` feature it compiles `src/record/layout.c` against the
//! target interpreter's own (internal) headers, so that the recorder knows the exact
//! structure layouts of CPython 3.11 and the opcode de-specialisation table of the
//! version it is built for. Without the feature it does nothing.
//!
//! The include directory comes from, in order: `TACH_PYTHON_INCLUDE`, then
//! `sysconfig.get_paths()["include"]` of `PYO3_PYTHON` (or `python3`). A directory to
//! search after the system ones (for Debian's multiarch `pyconfig.h` when cross-building
//! against a chroot's headers) can be given in `TACH_PYTHON_INCLUDE_AFTER`.

#[cfg(feature = "python")]
use std::env;
#[cfg(feature = "python")]
use std::path::PathBuf;
#[cfg(feature = "python")]
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/record/layout.c");
    println!("cargo:rerun-if-env-changed=TACH_PYTHON_INCLUDE");
    println!("cargo:rerun-if-env-changed=TACH_PYTHON_INCLUDE_AFTER");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo::rustc-check-cfg=cfg(tach_layout)");
    // The `tach` binary links polars. As a position-independent executable it carries
    // ~150,000 relative relocations that the loader applies at every start (measured:
    // 2-3 ms, more than a small export's own work). Linked at a fixed address, none are
    // left (the library code is still position independent, which such a link allows).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    #[cfg(feature = "python")]
    if env::var_os("CARGO_FEATURE_PYTHON").is_some() {
        build_layout();
    }
}

#[cfg(feature = "python")]
fn build_layout() {
    let include = match env::var_os("TACH_PYTHON_INCLUDE") {
        Some(dir) => PathBuf::from(dir),
        None => match python_include() {
            Some(dir) => dir,
            None => {
                println!(
                    "cargo:warning=tach: no Python include directory found; the recorder \
                     will support only interpreters that publish _Py_DebugOffsets (3.13+)"
                );
                return;
            }
        },
    };
    if !include.join("Python.h").exists() {
        println!(
            "cargo:warning=tach: {} has no Python.h; the recorder will support only 3.13+",
            include.display()
        );
        return;
    }
    let mut build = cc::Build::new();
    build
        .file("src/record/layout.c")
        .include(&include)
        .include(include.join("internal"))
        .define("Py_BUILD_CORE", None)
        .warnings(false)
        .opt_level(0);
    if let Some(after) = env::var_os("TACH_PYTHON_INCLUDE_AFTER") {
        build
            .flag("-idirafter")
            .flag(PathBuf::from(after).to_string_lossy().as_ref());
    }
    match build.try_compile("tach_layout") {
        Ok(()) => println!("cargo:rustc-cfg=tach_layout"),
        Err(e) => println!(
            "cargo:warning=tach: could not compile the layout table against {}: {e}",
            include.display()
        ),
    }
}

#[cfg(feature = "python")]
fn python_include() -> Option<PathBuf> {
    let python = env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include'])",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| PathBuf::from(s))
}
