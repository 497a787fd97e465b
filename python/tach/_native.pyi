"""Type stubs of the compiled extension ``tach._native``."""

from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import Any, Literal

_Path = str | PathLike[str]

DEBUG_BUILD: bool
__version__: str
# The field names of the specs every front end fills (record, filter, top, diff).
SPEC_FIELDS: dict[str, list[str]]

class TachError(ValueError): ...

# --- the recorder (src/python/record.rs) ---
# The keywords are RecordSpec's fields as tach.start() spells them (python/tests/
# test_entrances.py holds this list to the spec).
def start(
    path: _Path | None = None,
    *,
    rate: float | None = None,
    interval_us: int | None = None,
    mode: str | None = None,
    all_threads: bool = False,
    opcodes: bool = False,
    gc: bool = True,
    blocking: bool | None = None,
    native: bool = False,
    async_aware: bool = False,
    async_mode: str | None = None,
    compression: str | None = None,
    duration: float | None = None,
    rotate: str | Sequence[str] | None = None,
    keep: str | Sequence[str] | None = None,
    on_segment: str | None = None,
    hidden: Sequence[str] = ...,
) -> None: ...

class RunRequest:
    """A parsed ``python -m tach run`` (or ``%%tach``) command line."""

    @property
    def quiet(self) -> bool: ...
    @property
    def module(self) -> str | None: ...
    @property
    def program(self) -> list[str]: ...
    @property
    def output(self) -> str | None: ...

def parse_main(argv: Sequence[str]) -> tuple[RunRequest | None, str, int]: ...
def parse_cell(argv: Sequence[str]) -> tuple[RunRequest | None, str, int]: ...
def start_request(
    request: RunRequest, *, path: _Path | None = None, hidden: Sequence[str] = ...
) -> None: ...
def stop() -> dict[str, Any] | None: ...
def is_running() -> bool: ...
def exit_status(program: int, recorded: bool) -> int: ...
def samples_written() -> int | None: ...
def describe() -> str: ...
def load(path: _Path) -> dict[str, Any]: ...
def _after_fork_child() -> None: ...

# --- reading, querying, exporting (src/python/api.rs) ---
class ArrowStream:
    """A DataFrame for ``polars.DataFrame(obj)`` / ``pyarrow.table(obj)``."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def __len__(self) -> int: ...

class SampleBatches:
    """The ``samples`` table of one file, one Arrow stream per decoded batch."""

    def __iter__(self) -> SampleBatches: ...
    def __next__(self) -> ArrowStream: ...
    def close(self) -> None: ...

class NativeProfile:
    @property
    def path(self) -> str: ...
    @property
    def sample_count(self) -> int: ...
    def info(self) -> tuple[str, str, list[tuple[str, str]]]: ...
    def table(self, name: str) -> ArrowStream: ...
    def sample_batches(
        self, columns: Sequence[str] | None = None, limit: int | None = None
    ) -> SampleBatches: ...
    def query(self, sql: str) -> ArrowStream: ...
    def export(
        self,
        format: str,
        path: _Path | None = None,
        *,
        title: str | None = None,
        options: Sequence[tuple[str, Sequence[str]]] = ...,
        threads: int | Sequence[int] | None = None,
        start: float | None = None,
        end: float | None = None,
        since: str | None = None,
        until: str | None = None,
        status: str | Sequence[str] | None = None,
    ) -> bytes | str | None: ...

def open_profile(path: _Path) -> NativeProfile: ...
def query(sql: str, paths: Sequence[_Path]) -> ArrowStream: ...
def convert(
    paths: Sequence[_Path],
    format: str,
    out_dir: _Path,
    workers: int | None = None,
    *,
    title: str | None = None,
    options: Sequence[tuple[str, Sequence[str]]] = ...,
    threads: int | Sequence[int] | None = None,
    start: float | None = None,
    end: float | None = None,
    since: str | None = None,
    until: str | None = None,
    status: str | Sequence[str] | None = None,
) -> list[tuple[str, str, str | None]]: ...
def export_formats() -> list[tuple[str, str, str, bool]]: ...
def table_columns(name: str) -> list[tuple[str, str]]: ...
def cli_main(argv: Sequence[str]) -> int: ...

# --- reports (src/python/report.rs): TopOptions' or DiffOptions' fields and the
# filter's (defaults: the specs', as `tach top --help` / `tach diff --help` show) ---
def top_json(
    paths: Sequence[_Path],
    *,
    by: str = ...,
    sort: str = ...,
    limit: int | None = None,
    per_file: bool = False,
    threads: int | Sequence[int] | None = None,
    start: float | None = None,
    end: float | None = None,
    since: str | None = None,
    until: str | None = None,
    status: str | Sequence[str] | None = None,
) -> str: ...
def diff_json(
    base: Sequence[_Path],
    new: Sequence[_Path],
    *,
    by: str = ...,
    metric: str = ...,
    alpha: float = ...,
    min_share: float = ...,
    min_change: float = ...,
    base_since: str | None = None,
    base_until: str | None = None,
    threads: int | Sequence[int] | None = None,
    start: float | None = None,
    end: float | None = None,
    since: str | None = None,
    until: str | None = None,
    status: str | Sequence[str] | None = None,
) -> str: ...

# --- writing (src/python/writer.rs) ---
class Writer:
    """CPython's binary writer in shape: write_sample(stack_frames, timestamp_us)."""

    def __init__(
        self,
        path: _Path,
        sample_interval_us: int,
        *,
        compression: Literal["auto", "zstd", "none"] | int | None = "auto",
        mode: str | int | None = None,
        capture_config: Mapping[str, bool] | None = None,
        start_time_us: int | None = None,
        python_version: tuple[int, int, int] | None = None,
    ) -> None: ...
    def write_sample(
        self, stack_frames: Iterable[Sequence[Any]], timestamp_us: int | None = None
    ) -> None: ...
    def set_stats(
        self,
        duration_sec: float,
        sample_rate: float,
        error_rate: float | None = None,
        missed_samples: float | None = None,
    ) -> None: ...
    @property
    def total_samples(self) -> int: ...
    @property
    def path(self) -> str: ...
    def finalize(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Writer: ...
    def __exit__(self, *args: object) -> bool: ...
