//! Runs tests/browser/run.sh: the real speedscope app and the flamegraph SVG in headless
//! Chromium. It skips loudly (SKIPPED on stderr) when node, chromium or the npm packages
//! are missing, unless TACH_BROWSER_TESTS=1, which installs them (apt-get, npm ci) and
//! makes anything missing a failure.

use std::path::Path;
use std::process::Command;

#[test]
fn speedscope_and_flamegraph_in_headless_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/browser/run.sh");
    if Command::new("bash").arg("--version").output().is_err() {
        crate::common::skip("browser tests: bash not found");
        return;
    }
    let status = Command::new("bash")
        .arg(&script)
        .env("TACH_BIN", env!("CARGO_BIN_EXE_tach"))
        .status()
        .expect("run tests/browser/run.sh");
    assert!(status.success(), "tests/browser/run.sh failed: {status}");
}
