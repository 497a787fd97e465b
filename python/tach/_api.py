"""Reading, querying, exporting and writing TACH files from Python.

Tables come back as polars DataFrames through the Arrow C stream interface
(``__arrow_c_stream__``): see docs/python.md for why.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import html
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Union

from . import _native
from ._native import TachError, Writer

if TYPE_CHECKING:
    import polars

PathLike = Union[str, "os.PathLike[str]"]

# The sample filters (the native FilterSpec's fields, `tach top --thread/--start/...`)
# and the title; every other keyword of export(), flamegraph(), heatmap() and convert()
# is a format's own option, checked by the exporter registry as `tach export --OPTION`
# is (the same refusals and messages).
_SAMPLE_FILTERS = tuple(_native.SPEC_FIELDS["filter"])


def _frame(stream: Any) -> polars.DataFrame:
    import polars

    return polars.DataFrame(stream)


def _samples_schema() -> dict[str, polars.DataType]:
    """The ``samples`` columns and their polars types (``tach query --schema``)."""
    import polars

    types = {
        "string": polars.String(), "boolean": polars.Boolean(), "int32": polars.Int32(),
        "int64": polars.Int64(), "uint32": polars.UInt32(), "uint64": polars.UInt64(),
        "float64": polars.Float64(), "timestamp": polars.Datetime("us", "UTC"),
    }
    return {name: types[t] for name, t in _native.table_columns("samples")}


def _filters(filters: dict[str, Any]) -> dict[str, Any]:
    """export()/flamegraph()/convert() keywords -> the native ones: the sample filters
    and the title as they are, the others as format options (name, the CLI's words)."""
    out: dict[str, Any] = {}
    options = []
    for key, value in filters.items():
        if key in _SAMPLE_FILTERS or key == "title":
            out[key] = value
        else:
            words = _words(key, value)
            if words is not None:
                options.append((key, words))
    out["options"] = options
    return out


def _words(key: str, value: Any) -> list[str] | None:
    """A format option's value as `tach export` takes it: a switch (True: given, False
    or None: not), one word, or several (pairs as OLD=NEW, a mapping's items too);
    datetimes as RFC 3339, Unix seconds with every nanosecond."""
    if value is None or value is False:
        return None
    if value is True:
        return []
    if isinstance(value, dict):
        return [f"{old}={new}" for old, new in value.items()]
    if isinstance(value, (str, int, float, datetime.datetime, os.PathLike)):
        return [_word(key, value)]
    return [
        f"{v[0]}={v[1]}" if isinstance(v, tuple) and len(v) == 2 else _word(key, v)
        for v in value
    ]


def _word(key: str, value: Any) -> str:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError(f"{key}: a naive datetime; give it a time zone")
        return value.isoformat()
    if isinstance(value, float):
        return f"{value:.9f}"
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)


@dataclasses.dataclass(frozen=True)
class StatsBlock:
    """The stats block CPython's profiler writes (absent in some files)."""

    duration_s: float
    sample_rate_hz: float
    error_rate_pct: float | None
    missed_samples_pct: float | None
    block_size: int


@dataclasses.dataclass(frozen=True, repr=False)
class Info:
    """Everything ``tach info`` reports about a file: header, footer, stats block, and
    what a full decode finds."""

    path: str
    file_size: int
    format_version: int
    byte_order: str
    python_version: str
    start_time_us: int
    sample_interval_us: int
    sample_count: int
    thread_count: int
    compression: str
    profiling_mode: str
    capture_features: tuple[str, ...] | None
    config_word: int
    string_count: int
    frame_count: int
    footer_file_size: int
    stats: StatsBlock | None
    sample_bytes_stored: int
    sample_bytes: int
    compression_ratio: float | None
    first_timestamp_us: int | None
    last_timestamp_us: int | None
    duration_s: float
    records: dict[str, dict[str, int]]
    frames_per_sample: float
    frames_written: int

    # `tach info`'s text and its (label, value) rows, from the Rust library (the CLI
    # prints the same text): shown by repr and the notebook table, not compared.
    _text: str = dataclasses.field(default="", compare=False)
    _rows: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)

    @classmethod
    def _from_native(cls, json_text: str, text: str, rows: list[tuple[str, str]]) -> Info:
        import json

        d = json.loads(json_text)
        if d.get("stats") is not None:
            d["stats"] = StatsBlock(**d["stats"])
        if d.get("capture_features") is not None:
            d["capture_features"] = tuple(d["capture_features"])
        names = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        fields = {k: v for k, v in d.items() if k in names}
        return cls(**fields, _text=text, _rows=tuple(rows))

    def __repr__(self) -> str:
        return "Info(\n" + self._text + ")"


class Flamegraph:
    """A flamegraph SVG; notebooks display it inline (``_repr_svg_``)."""

    def __init__(self, svg: str) -> None:
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: PathLike) -> None:
        with builtins.open(path, "w", encoding="utf-8") as f:
            f.write(self.svg)

    def __repr__(self) -> str:
        return f"<tach.Flamegraph {len(self.svg):,} bytes of SVG>"


class Heatmap:
    """The line heatmap page (``tach export --heatmap``); notebooks show it inline in
    a sandboxed iframe (``_repr_html_``), ``save()`` writes the self-contained page."""

    def __init__(self, page: str) -> None:
        self.html = page

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
            'sandbox="allow-scripts" style="width:100%;height:640px;border:1px solid #ddd">'
            "</iframe>"
        )

    def save(self, path: PathLike) -> None:
        with builtins.open(path, "w", encoding="utf-8") as f:
            f.write(self.html)

    def __repr__(self) -> str:
        return f"<tach.Heatmap {len(self.html):,} bytes of HTML>"


def _inline_svg(svg: str) -> str:
    """The <svg> element alone, for embedding in HTML."""
    at = svg.find("<svg")
    return svg[at:] if at >= 0 else svg


class Profile:
    """An opened TACH file. ``len(profile)`` is its number of thread-samples."""

    def __init__(self, native: _native.NativeProfile) -> None:
        self._native = native
        self._info: Info | None = None

    @property
    def path(self) -> str:
        return str(self._native.path)

    @property
    def info(self) -> Info:
        """Header, stats and counts (decodes every sample once, then cached)."""
        if self._info is None:
            self._info = Info._from_native(*self._native.info())
        return self._info

    def __len__(self) -> int:
        return self._native.sample_count

    def samples(self) -> polars.DataFrame:
        """One row per thread-sample (the ``samples`` query table)."""
        return _frame(self._native.table("samples"))

    def scan(self) -> polars.LazyFrame:
        """The ``samples`` table as a ``polars.LazyFrame`` that reads the file when
        collected: only the columns the query uses are built, its filter is applied to
        each batch as it is decoded (about 512 K rows), and ``head(n)`` stops the decode
        early, so memory holds the answer and a few batches, not every sample."""
        from polars.io.plugins import register_io_source

        native = self._native

        def batches(
            with_columns: list[str] | None,
            predicate: polars.Expr | None,
            n_rows: int | None,
            batch_size: int | None,
        ) -> Iterator[polars.DataFrame]:
            import polars

            columns = with_columns
            if columns is not None and not columns:
                # No column at all (a row count): build the cheapest one, drop it below.
                columns = ["depth"]
            # A LIMIT counts rows after the filter: the native side counts only unfiltered.
            stream = native.sample_batches(columns, n_rows if predicate is None else None)
            left = n_rows
            try:
                for batch in stream:
                    df = polars.DataFrame(batch)
                    if predicate is not None:
                        df = df.filter(predicate)
                    if left is not None:
                        df = df.head(left)
                        left -= df.height
                    yield df
                    if left is not None and left <= 0:
                        break
            finally:
                stream.close()

        return register_io_source(
            batches, schema=_samples_schema(), is_pure=True, explain_name="tach samples"
        )

    def frames(self) -> polars.DataFrame:
        """The frame table (the ``frames`` query table)."""
        return _frame(self._native.table("frames"))

    def stacks(self) -> polars.DataFrame:
        """One row per frame of each unique stack (the ``stacks`` query table)."""
        return _frame(self._native.table("stacks"))

    def table(self, name: str) -> polars.DataFrame:
        """Any query table: samples, frames, stacks, stack_counts, sample_frames."""
        return _frame(self._native.table(name))

    def query(self, sql: str) -> polars.DataFrame:
        """One SELECT over this file's tables (see docs/query.md)."""
        return _frame(self._native.query(sql))

    def export(
        self, format: str, path: PathLike | None = None, **filters: Any
    ) -> str | bytes | None:
        """Exports to ``path`` (Parquet: a directory), or returns the output: ``str``
        for text formats, ``bytes`` for pstats, pprof and parquet. Filters: threads, start,
        end (seconds from the first sample), since, until (wall-clock times as in the
        CLI), status (flags as in the CLI), per_thread,
        title, source_root (heatmap: ``{OLD: NEW}`` or pairs), start_time (pprof: the
        wall time of the first sample, an aware ``datetime``, Unix seconds, an RFC 3339
        string, ``"file"`` (default: the stored wall-clock origin, else the file's modification
        time) or ``"none"``)."""
        return self._native.export(
            format, None if path is None else os.fspath(path), **_filters(filters)
        )

    def flamegraph(self, **filters: Any) -> Flamegraph:
        """A flamegraph of the (filtered) samples."""
        return Flamegraph(self._native.export("flamegraph", None, **_filters(filters)))

    def heatmap(self, **filters: Any) -> Heatmap:
        """The line heatmap of the (filtered) samples. ``source_root={OLD: NEW}`` reads
        sources recorded under OLD from NEW (docs/exporters.md)."""
        return Heatmap(self._native.export("heatmap", None, **_filters(filters)))

    def top(self, **options: Any) -> polars.DataFrame:
        """`tach top`: per function (or ``by="line"``/``"file"``) self and total
        samples, percent of samples and seconds, as CPython's pstats (docs/diff.md).
        The keywords are `tach top`'s options with underscores for dashes (``tach top
        --help`` lists them with their defaults: by, sort, limit, per_file) and the
        sample filters (threads, start, end, since, until, status)."""
        return _rows_frame(_native.top_json([self.path], **options), _TOP_SCHEMA)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self.info._rows
        )
        svg = _inline_svg(self.flamegraph().svg) if len(self) else "<p>no samples</p>"
        return (
            "<div class='tach-profile'>"
            f"<table>{rows}</table>"
            f"<div style='max-width:100%;overflow-x:auto'>{svg}</div>"
            "</div>"
        )

    def __repr__(self) -> str:
        return f"<tach.Profile {self.path}: {len(self):,} samples>"


def open(path: PathLike) -> Profile:  # noqa: A001 - tach.open, by design
    """Opens and validates a TACH file. Missing file: FileNotFoundError; a file that
    is not valid TACH: TachError (a ValueError) naming the byte and the problem."""
    return Profile(_native.open_profile(os.fspath(path)))


_TOP_SCHEMA = {
    "filename": "Utf8", "lineno": "Int64", "funcname": "Utf8",
    "self_samples": "Int64", "total_samples": "Int64", "self_pct": "Float64",
    "total_pct": "Float64", "self_s": "Float64", "total_s": "Float64",
}
_DIFF_SCHEMA = {
    "filename": "Utf8", "lineno": "Int64", "funcname": "Utf8",
    "base_pct": "Float64", "new_pct": "Float64", "change_points": "Float64",
    "stderr_points": "Float64", "p_adjusted": "Float64", "verdict": "Utf8",
}


def _rows_frame(text: str, schema: dict[str, str]) -> polars.DataFrame:
    import json

    import polars

    rows = json.loads(text)
    if any("file" in r for r in rows):  # per_file: the input of each row first
        schema = {"file": "Utf8", **schema}
    types = {name: getattr(polars, t) for name, t in schema.items()}
    return polars.DataFrame(
        {name: [r.get(name) for r in rows] for name in schema}, schema=types
    )


def diff(
    base: PathLike | Iterable[PathLike], new: PathLike | Iterable[PathLike], **options: Any,
) -> polars.DataFrame:
    """`tach diff`: each function's share of the samples in ``base`` and ``new`` (one
    file or several runs each), the change in points, its standard error (block
    bootstrap), the Holm-adjusted p-value and the verdict ("grew", "shrank" or "no
    significant change"), largest change first. The method: docs/diff.md. The
    keywords are `tach diff`'s options with underscores for dashes (``tach diff --help``
    lists them with their defaults: by, metric, alpha, min_share, min_change, and
    base_since, base_until: the base side's own wall-clock window, when given, while
    since and until then apply to ``new`` alone) and the sample filters (threads,
    start, end, since, until, status)."""
    return _rows_frame(_native.diff_json(_paths(base), _paths(new), **options), _DIFF_SCHEMA)


def _paths(paths: PathLike | Iterable[PathLike]) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def query(sql: str, paths: PathLike | Iterable[PathLike]) -> polars.DataFrame:
    """SQL over several files: each table holds every file's rows, with a ``file``
    column. Glob patterns are expanded."""
    return _frame(_native.query(sql, _paths(paths)))


class ConvertResult(NamedTuple):
    """One input's outcome in :func:`convert`."""

    input: str
    output: str
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


def convert(
    paths: PathLike | Iterable[PathLike],
    format: str,
    out_dir: PathLike,
    workers: int | None = None,
    **filters: Any,
) -> list[ConvertResult]:
    """Converts every input into ``out_dir`` in parallel (``workers`` threads, default
    all cores), without the GIL. A directory stands for the .bin/.tach files in it.
    A bad file does not stop the others: its result carries the error message."""
    inputs: list[str] = []
    for p in _paths(paths):
        if os.path.isdir(p):
            inputs.extend(
                os.path.join(p, n)
                for n in sorted(os.listdir(p))
                if n.endswith((".bin", ".tach"))
            )
        else:
            inputs.append(p)
    done = _native.convert(
        inputs, format, os.fspath(out_dir), workers, **_filters(filters)
    )
    return [ConvertResult(str(i), str(o), e) for i, o, e in done]


def formats() -> list[tuple[str, str, str]]:
    """(name, description, file extension) of every export format."""
    return [(name, text, ext) for name, text, ext, _ in _native.export_formats()]


__all__: Sequence[str] = [
    "ConvertResult",
    "Flamegraph",
    "Info",
    "Profile",
    "StatsBlock",
    "TachError",
    "Writer",
    "convert",
    "formats",
    "open",
    "query",
]
