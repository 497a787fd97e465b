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

__all__ = ["start", "stop", "profile", "is_running", "describe"]
# Reading, querying, exporting and writing files (docs/python.md).
__all__ += ["open", "query", "convert", "formats", "Profile", "Info", "StatsBlock",
            "Flamegraph", "Heatmap", "ConvertResult", "Writer", "TachError", "diff"]
