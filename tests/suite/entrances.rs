//! Each option is declared once: the command line shows the specs' own defaults, and a
//! spec filled by serde (as the Python package fills it) is the one clap fills from the
//! same words.

use std::process::Command;

use tach::record::options::RecordSpec;
use tach::report::{field_names, DiffOptions, FilterSpec, TopOptions};

fn help(command: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tach"))
        .args([command, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The `[default: ...]` of `--flag` in a `--help` text.
fn default_of(help: &str, flag: &str) -> Option<String> {
    let start = help.find(&format!("--{flag} "))?;
    let rest = &help[start..];
    let next = rest[2..].find("\n  -").map_or(rest.len(), |i| i + 2);
    let text = &rest[..next];
    let at = text.find("[default: ")? + "[default: ".len();
    Some(text[at..at + text[at..].find(']')?].to_string())
}

#[test]
fn the_command_line_shows_the_specs_defaults() {
    let diff = help("diff");
    let d = DiffOptions::default();
    for (flag, value) in [
        ("by", d.by.to_string()),
        ("metric", d.metric.to_string()),
        ("alpha", d.alpha.to_string()),
        ("min-share", d.min_share_pct.to_string()),
        ("min-change", d.min_change_points.to_string()),
    ] {
        assert_eq!(default_of(&diff, flag), Some(value), "tach diff --{flag}");
    }
    let top = help("top");
    let t = TopOptions::default();
    assert_eq!(default_of(&top, "by"), Some(t.by.to_string()));
    assert_eq!(default_of(&top, "sort"), Some(t.sort.to_string()));
    assert_eq!(default_of(&diff, "by"), Some("function".into()));
    assert_eq!(default_of(&top, "sort"), Some("self".into()));
}

#[test]
fn serde_fills_the_specs_with_the_same_defaults_and_names() {
    let empty = serde_json::json!({});
    let d: DiffOptions = serde_json::from_value(empty.clone()).unwrap();
    assert_eq!(d, DiffOptions::default());
    let t: TopOptions = serde_json::from_value(empty.clone()).unwrap();
    assert_eq!(t, TopOptions::default());
    let r: RecordSpec = serde_json::from_value(empty.clone()).unwrap();
    assert_eq!(r, RecordSpec::default());
    let f: FilterSpec = serde_json::from_value(empty).unwrap();
    assert!(f.build().unwrap().is_empty());
    // Names as the flags take them, with the flags' messages.
    let d: DiffOptions = serde_json::from_value(serde_json::json!({
        "by": "line", "metric": "total", "min_share": 1.5,
    }))
    .unwrap();
    assert_eq!(
        (d.by.to_string(), d.metric.to_string()),
        ("line".into(), "total".into())
    );
    assert_eq!(d.min_share_pct, 1.5);
    let bad = serde_json::from_value::<TopOptions>(serde_json::json!({"by": "module"}));
    assert_eq!(
        bad.unwrap_err().to_string(),
        "unknown grouping 'module': use function, line or file"
    );
    let bad = serde_json::from_value::<RecordSpec>(serde_json::json!({"mode": "bogus"}));
    assert_eq!(
        bad.unwrap_err().to_string(),
        "unknown mode 'bogus': use wall, cpu, gil or exception"
    );
    // Unknown names are refused, not ignored.
    assert!(serde_json::from_value::<RecordSpec>(serde_json::json!({"rat": 1})).is_err());
    // The bootstrap's settings are no keyword.
    assert!(!field_names::<DiffOptions>().contains(&"seed"));
    assert_eq!(
        field_names::<DiffOptions>(),
        [
            "by",
            "metric",
            "alpha",
            "min_share",
            "min_change",
            "base_since",
            "base_until"
        ]
    );
}
