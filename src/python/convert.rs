//! The one converter between Python keyword arguments and the specs every front end
//! shares ([`crate::record::options::RecordSpec`], [`crate::report::FilterSpec`],
//! [`crate::report::TopOptions`], [`crate::report::DiffOptions`]): the Python values
//! become [`Data`], which serde deserializes the spec from, so a field added to a spec
//! is a keyword with no edit here. Results go the other way (`RecordStats` to a dict)
//! through `serde_json::Value` and [`to_python`].
//!
//! [`Data`] rather than `serde_json::Value` on the way in: a float that is not finite
//! (`rate=float("nan")`) must reach the spec's own check and its message, and JSON has
//! no NaN.
//!
//! Errors read as Python's own: an unknown keyword is a TypeError naming the function
//! and every keyword it knows; a value of the wrong kind, or one the spec refuses (an
//! unknown mode, say, with the message of `tach record --mode`), is a ValueError.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde::de::value::{Error as DataError, MapDeserializer, SeqDeserializer};
use serde::de::{DeserializeOwned, Deserializer, IntoDeserializer, Visitor};
use serde_json::Value;

/// A Python value as serde reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    None,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Str(String),
    List(Vec<Data>),
    Dict(Vec<(String, Data)>),
}

impl std::fmt::Display for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Data::None => f.write_str("None"),
            Data::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Data::Unsigned(n) => write!(f, "{n}"),
            Data::Signed(n) => write!(f, "{n}"),
            Data::Float(x) => write!(f, "{x}"),
            Data::Str(s) => write!(f, "{s:?}"),
            Data::List(_) => f.write_str("a list"),
            Data::Dict(_) => f.write_str("a dict"),
        }
    }
}

/// Keyword arguments by name, in the order given.
pub type Keywords = Vec<(String, Data)>;

/// The keyword arguments of `function`, each one of `known`.
pub fn keywords(
    function: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
    known: &[&str],
) -> PyResult<Keywords> {
    let mut out = Vec::new();
    let Some(kwargs) = kwargs else {
        return Ok(out);
    };
    for (key, value) in kwargs.iter() {
        let key: String = key.extract()?;
        if !known.contains(&key.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "{function} got an unexpected keyword '{key}'; known: {}",
                known.join(", ")
            )));
        }
        let value = to_data(&value)
            .map_err(|e| PyValueError::new_err(format!("{function}: {key}: {e}")))?;
        out.push((key, value));
    }
    Ok(out)
}

/// Takes the keyword `name` out of `given`.
pub fn take(given: &mut Keywords, name: &str) -> Option<Data> {
    let i = given.iter().position(|(k, _)| k == name)?;
    Some(given.remove(i).1)
}

/// The spec `T` from the keywords among `given` that are its fields (the others are
/// left for another spec); the fields not given keep the spec's defaults.
pub fn spec<T: DeserializeOwned>(function: &str, given: &Keywords) -> PyResult<T> {
    let fields = crate::report::field_names::<T>();
    let mine: Vec<(String, Data)> = given
        .iter()
        .filter(|(k, _)| fields.contains(&k.as_str()))
        .cloned()
        .collect();
    T::deserialize(Data::Dict(mine)).map_err(|e| PyValueError::new_err(format!("{function}: {e}")))
}

/// A value of `T` from one keyword's data.
pub fn value<T: DeserializeOwned>(function: &str, name: &str, data: Data) -> PyResult<T> {
    T::deserialize(data).map_err(|e| PyValueError::new_err(format!("{function}: {name}: {e}")))
}

/// A Python value as [`Data`]: None, bool, int, float, str, os.PathLike (its path),
/// and lists, tuples, sets and dicts of those.
fn to_data(value: &Bound<'_, PyAny>) -> Result<Data, String> {
    if value.is_none() {
        return Ok(Data::None);
    }
    // bool before int: Python's bool is an int.
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Data::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<u64>() {
            return Ok(Data::Unsigned(n));
        }
        return value
            .extract::<i64>()
            .map(Data::Signed)
            .map_err(|_| format!("{value} is out of range"));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Data::Float(f.value()));
    }
    // Integers of other types (numpy's, a polars scalar's) by their index.
    if value.hasattr("__index__").unwrap_or(false) {
        if let Ok(n) = value.extract::<u64>() {
            return Ok(Data::Unsigned(n));
        }
        if let Ok(n) = value.extract::<i64>() {
            return Ok(Data::Signed(n));
        }
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Data::Str(s.to_str().map_err(|e| e.to_string())?.to_owned()));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut items = Vec::new();
        for (k, v) in d.iter() {
            items.push((
                k.str().map_err(|e| e.to_string())?.to_string(),
                to_data(&v)?,
            ));
        }
        return Ok(Data::Dict(items));
    }
    if value.hasattr("__fspath__").unwrap_or(false) {
        let path: std::path::PathBuf = value.extract().map_err(|e: PyErr| e.to_string())?;
        return Ok(Data::Str(path.to_string_lossy().into_owned()));
    }
    if value.is_instance_of::<PyList>()
        || value.is_instance_of::<PyTuple>()
        || value.is_instance_of::<pyo3::types::PySet>()
        || value.is_instance_of::<pyo3::types::PyFrozenSet>()
    {
        let items = value.try_iter().map_err(|e| e.to_string())?;
        return items
            .map(|item| to_data(&item.map_err(|e| e.to_string())?))
            .collect::<Result<Vec<_>, _>>()
            .map(Data::List);
    }
    let kind = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Err(format!("a {kind} is not a value tach takes"))
}

impl<'de> Deserializer<'de> for Data {
    type Error = DataError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DataError> {
        match self {
            Data::None => visitor.visit_none(),
            Data::Bool(b) => visitor.visit_bool(b),
            Data::Unsigned(n) => visitor.visit_u64(n),
            Data::Signed(n) => visitor.visit_i64(n),
            Data::Float(x) => visitor.visit_f64(x),
            Data::Str(s) => visitor.visit_string(s),
            Data::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Data::Dict(items) => visitor.visit_map(MapDeserializer::new(items.into_iter())),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DataError> {
        match self {
            Data::None => visitor.visit_none(),
            some => visitor.visit_some(some),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl IntoDeserializer<'_, DataError> for Data {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// A JSON value as Python data: None, bool, int, float, str, list, dict.
pub fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let items = items
                .iter()
                .map(|v| to_python(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(map) => {
            let d = PyDict::new(py);
            for (k, v) in map {
                d.set_item(k, to_python(py, v)?)?;
            }
            d.into_any()
        }
    })
}

/// Every spec's keywords, for the Python side's messages and tests
/// (`tach._native.SPEC_FIELDS`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let d = PyDict::new(m.py());
    d.set_item(
        "record",
        crate::report::field_names::<crate::record::options::RecordSpec>(),
    )?;
    d.set_item(
        "filter",
        crate::report::field_names::<crate::report::FilterSpec>(),
    )?;
    d.set_item(
        "top",
        crate::report::field_names::<crate::report::TopOptions>(),
    )?;
    d.set_item(
        "diff",
        crate::report::field_names::<crate::report::DiffOptions>(),
    )?;
    m.add("SPEC_FIELDS", d)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))
}
