"""The Python face of the recorder (the sampling itself is native: tach._native)."""

import atexit
import functools
import os
import sys

from . import _native

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

_state = {"atexit": False, "quiet": False}


def _after_fork_in_child():
    _native._after_fork_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def summary_line(stats):
    """One line: samples, achieved rate, dropped samples, the sampler's CPU use, file
    size, path (the line `tach record` prints, formatted by the native side)."""
    return stats["summary"]


# Blocking by default at 1 kHz and below: each pause costs the program the tick's reads
# (about 20 us), 2% at 1 kHz and 30% at 10 kHz (docs/recorder.md, "Overhead"). The
# threshold is the native side's, shared with `tach record`.
BLOCKING_MIN_INTERVAL_US = _native.BLOCKING_MIN_INTERVAL_US


def start(path=None, *, quiet=False, **options):
    """Start recording into ``path`` (default ``tach_<pid>.tach``).

    The options are those of ``tach record`` and ``python -m tach run`` (``python -m
    tach run --help`` lists and explains them, with their defaults), as keywords: the
    flag's name with underscores for dashes (``all_threads=True`` is ``-a
    --all-threads``, ``mode="cpu"``, ``rate=10000``, ``async_aware=True``...), with
    three spellings of its own: ``interval_us`` (microseconds between samples, instead
    of a rate), ``gc=False`` (``--no-gc``) and ``blocking`` (True: ``--blocking``,
    False: ``--no-blocking``, None: blocking at rates up to 1 kHz, where it costs the
    program about 2%, and not above). ``rotate="60s"`` (or ``"100MB"``, or a list of
    both) writes ``path`` as a directory of segments, with ``keep=`` and ``on_segment=``
    as ``--keep`` and ``--on-segment`` (docs/recording.md, "Recording a service for
    days"). The same checks and messages as the flags: an unknown keyword raises
    TypeError, a bad value ValueError. quiet: do not print the summary line at stop.
    """
    # Validated natively, by the code that checks `tach record`'s flags: one set of
    # rules and messages (ValueError) for every front end.
    _native.start(None if path is None else os.fspath(path), hidden=[_PACKAGE_DIR], **options)
    _started(quiet)


def start_request(request, path=None, quiet=None):
    """Start recording as a parsed command line asks (``_native.parse_main`` for
    ``python -m tach run``, ``_native.parse_cell`` for ``%%tach``), into ``path`` if
    given instead of ``-o``; ``quiet`` (default: its ``-q``) as :func:`start`'s."""
    _native.start_request(request, path=None if path is None else os.fspath(path), hidden=[_PACKAGE_DIR])
    _started(request.quiet if quiet is None else quiet)


def _started(quiet):
    _state["quiet"] = quiet
    if not _state["atexit"]:
        atexit.register(_stop_at_exit)
        _state["atexit"] = True


def stop(*, quiet=None):
    """Stop recording and finish the file. Returns a dict of statistics, or None if
    nothing was recording."""
    stats = _native.stop()
    if stats is None:
        return None
    if quiet is None:
        quiet = _state["quiet"]
    if not quiet:
        print(summary_line(stats), file=sys.stderr)
        if stats.get("error"):
            print(f"tach: error: {stats['error']}", file=sys.stderr)
    return stats


def _stop_at_exit():
    try:
        stop()
    except Exception as e:  # never turn interpreter exit into a traceback
        print(f"tach: could not finish the recording: {e}", file=sys.stderr)


def is_running():
    return _native.is_running()


def describe():
    """How the recorder reads this interpreter (raises RuntimeError if it cannot)."""
    return _native.describe()


class profile:
    """Record a block or a function: ``with tach.profile(path, **options):`` or
    ``@tach.profile(path, **options)``. Options are those of :func:`start`."""

    def __init__(self, path=None, **options):
        self.path = path
        self.options = options
        self.stats = None

    def __enter__(self):
        start(self.path, **self.options)
        return self

    def __exit__(self, *exc):
        self.stats = stop()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with profile(self.path, **self.options) as p:
                result = func(*args, **kwargs)
            self.stats = p.stats
            return result

        return wrapper
