//! Helpers shared by the integration tests: the `tach` binary, locating and loading
//! golden files.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `tach` binary cargo built for these tests, as a command to add arguments to.
/// (`option_env!`: the library's unit tests compile this file too, without the binary,
/// and never call this.)
pub fn tach() -> Command {
    match option_env!("CARGO_BIN_EXE_tach") {
        Some(bin) => Command::new(bin),
        None => unreachable!("only the integration tests run the tach binary"),
    }
}

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

/// A frame given to CPython's writer, as a synthetic file's `NAME.expected.json` holds
/// it: the location as given (`-1` for an absent value), not as the reader returns it.
#[derive(Debug, Clone)]
pub struct FedFrame {
    pub filename: String,
    pub funcname: String,
    /// (lineno, end_lineno, column, end_column).
    pub location: Option<[i64; 4]>,
    pub opcode: Option<i64>,
}

/// One thread sample given to CPython's writer, in the order it was given.
#[derive(Debug, Clone)]
pub struct FedSample {
    pub timestamp_us: u64,
    pub interpreter_id: u32,
    pub thread_id: u64,
    pub status: u8,
    /// Innermost first; deeper than the writer keeps (256) where the file tests that.
    pub frames: Vec<FedFrame>,
}

/// What `tools/write_synthetic.py` gave CPython's writer for the golden file `bin`
/// (its `.expected.json`, also returned whole for the other fields), or `None` for a
/// recorded file.
pub fn fed_to_writer(bin: &Path) -> Option<(serde_json::Value, Vec<FedSample>)> {
    let json: serde_json::Value =
        serde_json::from_slice(&golden_sibling(bin, ".expected.json")?).unwrap();
    let strings: Vec<&str> = json["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let string = |v: &serde_json::Value| strings[v.as_u64().unwrap() as usize].to_owned();
    let mut samples = Vec::new();
    for sample in json["samples"].as_array().unwrap() {
        let timestamp_us = sample["timestamp_us"].as_u64().unwrap();
        for interp in sample["interpreters"].as_array().unwrap() {
            let interpreter_id = interp["interpreter_id"].as_u64().unwrap() as u32;
            for t in interp["threads"].as_array().unwrap() {
                let frames = t["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| FedFrame {
                        filename: string(&f[0]),
                        funcname: string(&f[1]),
                        location: f[2].as_array().map(|l| {
                            let v: Vec<i64> = l.iter().map(|x| x.as_i64().unwrap()).collect();
                            [v[0], v[1], v[2], v[3]]
                        }),
                        opcode: f[3].as_i64(),
                    })
                    .collect();
                samples.push(FedSample {
                    timestamp_us,
                    interpreter_id,
                    thread_id: t["thread_id"].as_u64().unwrap(),
                    status: t["status"].as_u64().unwrap() as u8,
                    frames,
                });
            }
        }
    }
    Some((json, samples))
}
