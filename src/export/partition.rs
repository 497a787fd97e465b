//! Incremental hive datasets (`tach export --parquet --out-dir DS`): one partition
//! `DS/<table>/source=<name>/part-0.parquet` per input and table, written only when it
//! is not there yet.
//!
//! Each partition's file records where it came from, as Parquet key-value metadata
//! (readers that do not know the keys ignore them): the schema version, and the source
//! file's name, size and XXH3-64 hash of its bytes. On a later run with the same input
//! the partitions are left as they are (not even rewritten); a different file of the
//! same name (another size or hash), or a partition written under another schema
//! version, is refused with an error naming the partition, unless `--replace` asks to
//! write it again.
//!
//! A partition is written under a hidden directory `DS/.tach-<name>-<pid>-<n>/`, beside
//! the tables' directories rather than inside them (DuckDB's `DS/samples/*/*.parquet`
//! glob matches hidden names; Spark, pyarrow and `tach query` skip names starting with
//! `.` or `_`, and none of them looks at `DS/` itself), then each table's directory is
//! renamed into place (a partition being replaced is first moved into that hidden
//! directory): a reader never sees a half-written partition, and an interrupted run
//! leaves only that hidden directory, which the next run of the same input removes.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::exporter::{ExportError, Outcome, Result};
use crate::query::SCHEMA_VERSION;

/// The tables of a partition, as the Parquet exporter writes them.
pub use super::exporter::PARQUET_TABLES as TABLES;

/// The key-value metadata keys of a partition's Parquet files.
pub const KEY_SCHEMA_VERSION: &str = "tach.schema_version";
pub const KEY_SOURCE_NAME: &str = "tach.source.name";
pub const KEY_SOURCE_SIZE: &str = "tach.source.size";
pub const KEY_SOURCE_XXH3: &str = "tach.source.xxh3";

/// The file a partition was written from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceId {
    /// The file's name (without directories).
    pub name: String,
    pub size: u64,
    /// XXH3-64 of the file's bytes.
    pub xxh3: u64,
    pub schema_version: u32,
}

impl SourceId {
    /// Reads `path` through once for its size and hash.
    pub fn of(path: &Path) -> Result<Self> {
        let io = |source| ExportError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        Ok(SourceId {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            size,
            xxh3: hasher.digest(),
            schema_version: SCHEMA_VERSION,
        })
    }

    /// As Parquet key-value metadata.
    pub fn metadata(&self) -> Vec<(String, String)> {
        vec![
            (KEY_SCHEMA_VERSION.into(), self.schema_version.to_string()),
            (KEY_SOURCE_NAME.into(), self.name.clone()),
            (KEY_SOURCE_SIZE.into(), self.size.to_string()),
            (KEY_SOURCE_XXH3.into(), format!("{:016x}", self.xxh3)),
        ]
    }

    /// From a file's key-value metadata; `None` when a key is missing or malformed.
    pub fn from_metadata<'a>(kv: impl Iterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let (mut version, mut name, mut size, mut xxh3) = (None, None, None, None);
        for (k, v) in kv {
            match k {
                KEY_SCHEMA_VERSION => version = v.parse().ok(),
                KEY_SOURCE_NAME => name = Some(v.to_string()),
                KEY_SOURCE_SIZE => size = v.parse().ok(),
                KEY_SOURCE_XXH3 => xxh3 = u64::from_str_radix(v, 16).ok(),
                _ => {}
            }
        }
        Some(SourceId {
            name: name?,
            size: size?,
            xxh3: xxh3?,
            schema_version: version?,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{}, {} bytes, xxh3 {:016x}, schema version {}",
            self.name, self.size, self.xxh3, self.schema_version
        )
    }
}

/// The partition directory of `table` for the source named `value` (already escaped).
pub fn partition_dir(root: &Path, table: &str, value: &str) -> PathBuf {
    root.join(table).join(format!("source={value}"))
}

/// The source a partition's Parquet file records (`Ok(None)`: none, or not readable as
/// tach's metadata).
fn recorded(file: &Path) -> Result<Option<SourceId>> {
    let mut f = std::fs::File::open(file).map_err(|source| ExportError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    let Ok(meta) = polars_parquet::read::read_metadata(&mut f) else {
        return Ok(None);
    };
    let Some(kv) = meta.key_value_metadata() else {
        return Ok(None);
    };
    Ok(SourceId::from_metadata(kv.iter().filter_map(|e| {
        Some((e.key.as_str(), e.value.as_deref()?))
    })))
}

/// Unique names for temporary directories within this process.
static TEMP_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Writes the partition `source=<value>` of every table under `root` from `input`,
/// unless it is there already (see the module's documentation). `write` writes the
/// tables into the directory it is given, as `DIR/<table>/part-0.parquet`, with the
/// key-value metadata it is given.
pub fn write_partition(
    input: &Path,
    root: &Path,
    value: &str,
    replace: bool,
    write: impl FnOnce(&Path, &[(String, String)]) -> Result<()>,
) -> Result<Outcome> {
    let id = SourceId::of(input)?;
    remove_stale_temps(root, value);
    let mut present = 0;
    let mut other: Option<(PathBuf, Option<SourceId>)> = None;
    for t in TABLES {
        let file = partition_dir(root, t, value).join("part-0.parquet");
        if !file.exists() {
            continue;
        }
        match recorded(&file)? {
            Some(r) if r == id => present += 1,
            r => {
                other.get_or_insert((file, r));
            }
        }
    }
    if other.is_none() && present == TABLES.len() {
        return Ok(Outcome::Unchanged);
    }
    if let Some((partition, was)) = &other {
        if !replace {
            return Err(ExportError::SourceChanged {
                partition: partition.clone(),
                recorded: was
                    .as_ref()
                    .map_or_else(|| "no tach source metadata".into(), SourceId::describe),
                now: format!("{} ({})", input.display(), id.describe()),
            });
        }
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Io { path, source }
    };
    let tmp = root.join(format!(
        ".tach-{value}-{}-{}",
        std::process::id(),
        TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    let result = (|| -> Result<()> {
        write(&tmp, &id.metadata())?;
        for t in TABLES {
            let target = partition_dir(root, t, value);
            let table_dir = root.join(t);
            std::fs::create_dir_all(&table_dir).map_err(io(&table_dir))?;
            // A partition being replaced moves into the temporary directory (removed
            // with it), out of the table's directory, where DuckDB's `*` would see it.
            if target.exists() {
                let old = tmp.join(format!("old-{t}"));
                std::fs::rename(&target, &old).map_err(io(&target))?;
            }
            std::fs::rename(tmp.join(t), &target).map_err(io(&target))?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    Ok(if other.is_some() {
        Outcome::Replaced
    } else {
        Outcome::Written
    })
}

/// Removes what an interrupted earlier run left for this source: `.tach-<value>-*`
/// under `root`, of processes that no longer run.
fn remove_stale_temps(root: &Path, value: &str) {
    let mine = format!("-{}-", std::process::id());
    let prefix = format!(".tach-{value}-");
    let clean = |dir: &Path, prefix: &str| {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(prefix) else {
                continue;
            };
            // `<pid>-<n>`: another source's name could extend this one's
            // (`run` and `run-2`), so only an all-digit tail is ours.
            let ours = rest
                .split('-')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            let pid = rest.split('-').next().unwrap_or_default();
            let running = Path::new("/proc").join(pid).exists();
            if ours && !format!("-{rest}").starts_with(&mine) && !running {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    };
    clean(root, &prefix);
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn metadata_round_trips() {
        let id = SourceId {
            name: "a b.bin".into(),
            size: 12345,
            xxh3: 0x0123_4567_89ab_cdef,
            schema_version: SCHEMA_VERSION,
        };
        let kv = id.metadata();
        let back = SourceId::from_metadata(kv.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(back, Some(id));
        let partial = kv[1..].iter().map(|(k, v)| (k.as_str(), v.as_str()));
        assert_eq!(SourceId::from_metadata(partial), None);
    }
}
