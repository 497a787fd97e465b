"""The ``tach`` console command: the Rust command line (tach::cli), run in-process."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from . import _native


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``tach ARGS...`` and returns its exit status.

    Without ``argv`` (the console script) it runs ``sys.argv`` and Ctrl-C ends the
    process at once, as it does the Rust binary. With ``argv`` (``argv[0]`` is the
    program name) Python's signal handlers are left alone.
    """
    if argv is None:
        argv = sys.argv
        # The command runs without the GIL and never returns to the interpreter's
        # signal checks: give SIGINT its default action, like the Rust binary.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.cli_main([str(a) for a in argv])


if __name__ == "__main__":
    sys.exit(main())
