"""tach: an in-process sampling profiler that writes CPython 3.15's TACH files.

    import tach
    tach.start("out.tach")          # sample the main thread at 1 kHz, wall-clock
    ...
    stats = tach.stop()             # finishes the file, returns its statistics

    with tach.profile("out.tach", all_threads=True):
        ...

    @tach.profile("out.tach", mode="cpu")
    def main(): ...

Or from the command line: ``python -m tach run -o out.tach script.py args...``.
In a notebook, ``%load_ext tach`` then ``%%tach`` records a cell and shows its
flamegraph.
The files replay with ``python3.15 -m profiling.sampling replay``.
"""

from ._record import describe, is_running, profile, start, stop
from . import _native

# The crate's version (Cargo.toml), which the package's metadata takes too.
__version__: str = _native.__version__

__all__ = ["start", "stop", "profile", "is_running", "describe"]

# What reads, queries and exports files (docs/python.md). The `tach-record` wheel is the
# recorder alone, without polars: there these names say which package has them.
_READING = ["open", "query", "convert", "formats", "Profile", "Info", "StatsBlock",
            "Flamegraph", "Heatmap", "ConvertResult", "Writer", "TachError", "diff",
            "load_ipython_extension"]

if _native.HAS_QUERY:
    from ._magic import load_ipython_extension
    from ._api import (
        ConvertResult,
        Flamegraph,
        Heatmap,
        Info,
        Profile,
        StatsBlock,
        TachError,
        Writer,
        convert,
        diff,
        formats,
        open,
        query,
    )

    __all__ += _READING
else:

    def __getattr__(name: str):
        if name in _READING:
            raise AttributeError(
                f"tach.{name} is not in this install: the tach-record package only records "
                "(tach.start, tach.stop, tach.profile, python -m tach run, and the tach "
                "command without `tach query`); `pip install tach` reads, queries and "
                "exports in Python"
            )
        raise AttributeError(f"module 'tach' has no attribute {name!r}")
