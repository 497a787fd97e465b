"""The IPython cell magic ``%%tach``: records one cell with the in-process recorder
and shows its flamegraph inline.

    %load_ext tach
    %%tach [OPTIONS]      (python -m tach run's options: %%tach --help)
    work()

The cell runs in the notebook's namespace, as ``%%time`` runs it. The recording is kept
(in a temporary file unless ``-o`` names one) and the magic's value is the opened
:class:`tach.Profile`, which a notebook shows as its summary and flamegraph; ``_`` in
the next cell is that profile (``_.query(...)``, ``_.samples()``).
"""
from __future__ import annotations

import os
import shlex
import sys
import tempfile

from . import _api, _native, _record


def tach_cell(line: str, cell: str, ipython=None):
    """Records ``cell``; returns the opened Profile (shown with its flamegraph)."""
    from IPython import get_ipython

    ip = ipython or get_ipython()
    # Parsed natively by the clap definition of `tach record`'s options.
    request, message, code = _native.parse_cell(shlex.split(line))
    if request is None:
        if code == 0:  # --help
            print(message, end="")
            return None
        raise ValueError(f"%%tach: bad options {line!r}: {message.strip()}")
    path = request.output
    if path is None:
        fd, path = tempfile.mkstemp(prefix="tach-cell-", suffix=".tach")
        os.close(fd)
    code = ip.compile(ip.transform_cell(cell), "<tach cell>", "exec")
    _record.start_request(request, path, quiet=True)
    try:
        exec(code, ip.user_ns)
    finally:
        stats = _record.stop(quiet=True)
    if stats is not None and not request.quiet:
        print(_record.summary_line(stats), file=sys.stderr)
    profile = _api.open(path)
    if not len(profile):
        print("%%tach: no samples (the cell ran for less than one interval)", file=sys.stderr)
    return profile


def load_ipython_extension(ipython) -> None:
    """``%load_ext tach`` registers ``%%tach``."""
    ipython.register_magic_function(
        lambda line, cell: tach_cell(line, cell, ipython), magic_kind="cell", magic_name="tach"
    )
