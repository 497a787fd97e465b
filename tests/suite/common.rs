//! Helpers shared by the integration tests: locating and loading golden files.

use std::io::Read;
use std::path::{Path, PathBuf};

pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cpython-3.15.2")
}

/// Every golden `.bin`, sorted.
pub fn golden_bins() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    v.sort();
    assert!(v.len() >= 18, "golden corpus is missing files");
    v
}

/// Reads `NAME.SUFFIX` beside a golden `.bin`, or its `.gz`.
pub fn golden_sibling(bin: &Path, suffix: &str) -> Option<Vec<u8>> {
    let stem = bin.with_extension("");
    let plain = PathBuf::from(format!("{}{suffix}", stem.display()));
    if plain.exists() {
        return Some(std::fs::read(plain).unwrap());
    }
    let gz = PathBuf::from(format!("{}{suffix}.gz", stem.display()));
    if gz.exists() {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        return Some(out);
    }
    None
}

/// Every golden file's name without `.bin`, sorted.
pub fn golden_names() -> Vec<String> {
    golden_bins().iter().map(|b| name(b)).collect()
}

/// A file of the golden corpus by its file name.
pub fn golden_path(file_name: &str) -> PathBuf {
    golden_dir().join(file_name)
}

/// CPython's output `NAME.SUFFIX` (or its `.gz`) for the golden file `NAME.bin`.
pub fn golden_output(name: &str, suffix: &str) -> Vec<u8> {
    let bin = golden_path(&format!("{name}.bin"));
    golden_sibling(&bin, suffix).unwrap_or_else(|| panic!("no golden {name}{suffix}"))
}

pub fn name(bin: &Path) -> String {
    bin.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Says loudly that a check did not run: `SKIPPED: <why>` on stderr (cargo shows it
/// only for failing tests) and, when `TACH_SKIP_LOG` names a file, one line appended
/// there, so that `scripts/test-all` ends with a summary of every skipped check.
pub fn skip(why: &str) {
    let line = format!("SKIPPED: {why}");
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("TACH_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The project's CPython chroot tool (`scripts/cpython-chroot`), or `None` (with a loud
/// skip) when the chroot cannot run here (its exit status 3).
pub fn cpython_chroot() -> Option<PathBuf> {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cpython-chroot");
    let out = std::process::Command::new(&tool)
        .args(["run", "--", "true"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("{} could not start: {e}", tool.display()));
    match out.status.code() {
        Some(0) => Some(tool),
        Some(3) => {
            skip(&format!(
                "interop: the CPython chroot is not available ({}); CPython checks not run",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            None
        }
        _ => panic!(
            "{} failed unexpectedly: {:?}\n{}",
            tool.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Runs CPython 3.15's `profiling.sampling replay FLAG -o OUT INPUT` in the chroot
/// (`tool`, from [`cpython_chroot`]) from `cwd` and asserts that it succeeded.
pub fn cpython_replay(tool: &Path, flag: &str, out: &Path, input: &Path, cwd: &Path) {
    let status = std::process::Command::new(tool)
        .args([
            "run",
            "--",
            "python3.15",
            "-m",
            "profiling.sampling",
            "replay",
            flag,
            "-o",
        ])
        .arg(out)
        .arg(input)
        .current_dir(cwd)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "CPython's replay {flag} rejected {}",
        input.display()
    );
}
