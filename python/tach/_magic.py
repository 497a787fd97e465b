"""The IPython cell magic ``%%tach``: records one cell with the in-process recorder
and shows its flamegraph inline.

    %load_ext tach
    %%tach [-r RATE] [-a] [--mode wall|cpu|gil|exception] [--no-gc] [--[no-]blocking]
           [-o OUT.tach]
    work()

The cell runs in the notebook's namespace, as ``%%time`` runs it. The recording is kept
(in a temporary file unless ``-o`` names one) and the magic's value is the opened
:class:`tach.Profile`, which a notebook shows as its summary and flamegraph; ``_`` in
the next cell is that profile (``_.query(...)``, ``_.samples()``).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile

from . import _api, _record


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%tach", add_help=False)
    p.add_argument("-r", "--rate", type=float, default=1000.0)
    p.add_argument("-a", "--all-threads", action="store_true")
    p.add_argument("--mode", default="wall", choices=["wall", "cpu", "gil", "exception"])
    p.add_argument("--no-gc", action="store_true")
    p.add_argument("--no-blocking", dest="blocking", action="store_false", default=None)
    p.add_argument("--blocking", dest="blocking", action="store_true", default=None)
    p.add_argument("-o", "--output")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def tach_cell(line: str, cell: str, ipython=None):
    """Records ``cell``; returns the opened Profile (shown with its flamegraph)."""
    from IPython import get_ipython

    ip = ipython or get_ipython()
    try:
        args = _parser().parse_args(shlex.split(line))
    except SystemExit:
        raise ValueError(f"%%tach: bad options {line!r}: {_parser().format_usage()}") from None
    path = args.output
    if path is None:
        fd, path = tempfile.mkstemp(prefix="tach-cell-", suffix=".tach")
        os.close(fd)
    code = ip.compile(ip.transform_cell(cell), "<tach cell>", "exec")
    _record.start(path, rate=args.rate, mode=args.mode, all_threads=args.all_threads,
                  gc=not args.no_gc, blocking=args.blocking, quiet=True)
    try:
        exec(code, ip.user_ns)
    finally:
        stats = _record.stop(quiet=True)
    if stats is not None and not args.quiet:
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
