//! Golden tests: our collapsed, pstats, jsonl and gecko exports against CPython 3.15.2's own
//! `replay` outputs in golden/cpython-3.15.2/, for every golden file.

use serde_json::Value;
use tach::export::{self, ExportOptions};
use tach::{SampleFilter, TachFile};

use crate::common::{golden_dir, golden_names, golden_output as golden};

fn ours(name: &str, format: &str) -> Vec<u8> {
    let file = TachFile::open(golden_dir().join(format!("{name}.bin"))).unwrap();
    let exporter = export::find(format).unwrap();
    let mut out = Vec::new();
    export::export_to(
        exporter,
        &file,
        &SampleFilter::default(),
        &ExportOptions::default(),
        &mut out,
    )
    .unwrap();
    out
}

// ---------------------------------------------------------------- marshal reader
// Enough of marshal's reader for CPython's pstats dumps: containers, strings (all
// encodings), ints, floats, singletons, and back-references (FLAG_REF / TYPE_REF).

#[derive(Debug, Clone, PartialEq)]
enum Py {
    None,
    Bool(bool),
    Int(i128),
    Float(u64),
    Str(String),
    Tuple(Vec<Py>),
    /// Items in insertion order.
    Dict(Vec<(Py, Py)>),
}

struct Unmarshal<'a> {
    data: &'a [u8],
    pos: usize,
    refs: Vec<Py>,
}

impl Unmarshal<'_> {
    fn byte(&mut self) -> u8 {
        self.pos += 1;
        self.data[self.pos - 1]
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        self.pos += n;
        &self.data[self.pos - n..self.pos]
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.bytes(4).try_into().unwrap())
    }
    fn load(&mut self) -> Py {
        let code = self.byte();
        let flag = code & 0x80 != 0;
        let slot = flag.then(|| {
            self.refs.push(Py::None);
            self.refs.len() - 1
        });
        let v = match code & 0x7f {
            b'N' => Py::None,
            b'T' => Py::Bool(true),
            b'F' => Py::Bool(false),
            b'i' => Py::Int(self.i32() as i128),
            b'l' => {
                let n = self.i32();
                let mut v: i128 = 0;
                for k in 0..n.unsigned_abs() {
                    let d = u16::from_le_bytes(self.bytes(2).try_into().unwrap()) as i128;
                    v |= d << (15 * k);
                }
                Py::Int(if n < 0 { -v } else { v })
            }
            b'g' => Py::Float(u64::from_le_bytes(self.bytes(8).try_into().unwrap())),
            b'u' | b't' | b'a' | b'A' => {
                let n = self.i32() as usize;
                Py::Str(String::from_utf8(self.bytes(n).to_vec()).unwrap())
            }
            b'z' | b'Z' => {
                let n = self.byte() as usize;
                Py::Str(String::from_utf8(self.bytes(n).to_vec()).unwrap())
            }
            b')' => {
                let n = self.byte() as usize;
                Py::Tuple((0..n).map(|_| self.load()).collect())
            }
            b'(' => {
                let n = self.i32() as usize;
                Py::Tuple((0..n).map(|_| self.load()).collect())
            }
            b'{' => {
                let mut items = Vec::new();
                while self.data[self.pos] != b'0' {
                    let k = self.load();
                    let v = self.load();
                    items.push((k, v));
                }
                self.pos += 1;
                Py::Dict(items)
            }
            b'r' => {
                let i = self.i32() as usize;
                self.refs[i].clone()
            }
            other => panic!("marshal type {:?} at {}", other as char, self.pos - 1),
        };
        if let Some(s) = slot {
            self.refs[s] = v.clone();
        }
        v
    }
}

fn unmarshal(data: &[u8]) -> Py {
    let mut u = Unmarshal {
        data,
        pos: 0,
        refs: Vec::new(),
    };
    let v = u.load();
    assert_eq!(
        u.pos,
        data.len(),
        "trailing bytes after the marshal'd object"
    );
    v
}

#[test]
fn collapsed_is_byte_identical_to_cpython() {
    for name in golden_names() {
        let expected = golden(&name, ".collapsed.txt");
        let got = ours(&name, "collapsed");
        if got != expected {
            let (g, e) = (
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&expected),
            );
            let first = g.lines().zip(e.lines()).position(|(a, b)| a != b);
            panic!(
                "{name}: collapsed differs from CPython's ({} vs {} lines; first differing line {first:?})",
                g.lines().count(),
                e.lines().count()
            );
        }
    }
}

#[test]
fn pstats_equals_cpython_after_marshal_load() {
    for name in golden_names() {
        let expected = unmarshal(&golden(&name, ".pstats"));
        let got = unmarshal(&ours(&name, "pstats"));
        let Py::Dict(items) = &expected else {
            panic!("{name}: golden pstats is not a dict")
        };
        assert!(
            items.contains(&(
                Py::Tuple(vec![Py::Str("__sampled__".into())]),
                Py::Bool(true)
            )),
            "{name}: no __sampled__ marker in the golden file"
        );
        // Same keys, values and insertion order (dict iteration order included).
        assert_eq!(got, expected, "{name}: pstats differs from CPython's");
    }
}

fn replace_run_id(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("\"run_id\":\"") {
        let start = i + "\"run_id\":\"".len();
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('"').unwrap();
        assert_eq!(end - start, 32, "run_id is not 32 hex digits");
        out.push_str("RUN_ID");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn jsonl_equals_cpython_except_run_id() {
    for name in golden_names() {
        let expected = String::from_utf8(golden(&name, ".jsonl")).unwrap();
        let got = String::from_utf8(ours(&name, "jsonl")).unwrap();
        // Byte for byte, once the random run_id is masked.
        assert_eq!(
            replace_run_id(&got),
            replace_run_id(&expected),
            "{name}: jsonl differs from CPython's"
        );
        // And every line parses as JSON with one run_id throughout.
        let ids: std::collections::HashSet<String> = got
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["run_id"].to_string())
            .collect();
        assert_eq!(ids.len(), 1, "{name}: run_id differs between lines");
    }
}

#[test]
fn jsonl_is_deterministic() {
    assert_eq!(
        ours("threads_mixed", "jsonl"),
        ours("threads_mixed", "jsonl")
    );
}

/// CPython's gecko profile with string indices resolved to strings, and the fields
/// that describe the replaying process rather than the profile removed:
/// meta.startTime (its monotonic clock), thread pid, and the host description
/// (abi, oscpu, platform, CPU counts) which depends on the machine that ran replay.
fn gecko_normalized(bytes: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(bytes).unwrap();
    let strings: Vec<Value> = v["shared"]["stringArray"].as_array().unwrap().clone();
    let resolve = |x: &mut Value| {
        for item in x.as_array_mut().unwrap() {
            if let Some(i) = item.as_u64() {
                *item = strings[i as usize].clone();
            }
        }
    };
    let meta = v["meta"].as_object_mut().unwrap();
    for key in [
        "startTime",
        "abi",
        "oscpu",
        "platform",
        "physicalCPUs",
        "logicalCPUs",
    ] {
        assert!(meta.remove(key).is_some(), "meta.{key} missing");
    }
    for t in v["threads"].as_array_mut().unwrap() {
        assert!(t.as_object_mut().unwrap().remove("pid").is_some());
        resolve(&mut t["funcTable"]["name"]);
        resolve(&mut t["funcTable"]["fileName"]);
        resolve(&mut t["resourceTable"]["name"]);
        resolve(&mut t["markers"]["name"]);
    }
    v["shared"].as_object_mut().unwrap().remove("stringArray");
    v
}

#[test]
fn gecko_equals_cpython_after_resolving_strings() {
    for name in golden_names() {
        let expected = gecko_normalized(&golden(&name, ".gecko.json"));
        let got = gecko_normalized(&ours(&name, "gecko"));
        if got != expected {
            // Name the first differing thread and table before failing.
            for (i, (a, b)) in got["threads"]
                .as_array()
                .unwrap()
                .iter()
                .zip(expected["threads"].as_array().unwrap())
                .enumerate()
            {
                for (k, va) in a.as_object().unwrap() {
                    assert_eq!(Some(va), b.get(k), "{name}: thread {i} member {k}");
                }
            }
            assert_eq!(got, expected, "{name}: gecko differs from CPython's");
        }
    }
}

/// The shared string array is CPython's, in CPython's order (strings are numbered by
/// first use over all threads' samples; the threads build their tables in parallel).
#[test]
fn gecko_string_array_is_cpythons_in_order() {
    for name in golden_names() {
        let expected: Value = serde_json::from_slice(&golden(&name, ".gecko.json")).unwrap();
        let got: Value = serde_json::from_slice(&ours(&name, "gecko")).unwrap();
        assert_eq!(
            got["shared"]["stringArray"], expected["shared"]["stringArray"],
            "{name}"
        );
    }
}

#[test]
fn gecko_meta_is_cpythons() {
    let got: Value = serde_json::from_slice(&ours("threads_mixed", "gecko")).unwrap();
    assert_eq!(got["meta"]["preprocessedProfileVersion"], 57);
    assert_eq!(got["meta"]["version"], 32);
    assert_eq!(got["meta"]["importedFrom"], "Tachyon Sampling Profiler");
    // Deterministic: our startTime is the first sample's timestamp, pid is "0".
    assert_eq!(
        ours("threads_mixed", "gecko"),
        ours("threads_mixed", "gecko")
    );
}
